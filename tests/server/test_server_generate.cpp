// The generate extension of ds-serve (POST .../generate, .../generate_stream; docs/SERVING.md
// "Generation") on a generated LLaMA-style decoder: greedy and sampled tokens against
// dsinfer::Generator run directly, the stream's events against the plain answer, the SSE and
// chunked framing, cancellation when a client hangs up, the drain, the bad-input battery, and
// the wrong route for each kind of model.
//
// The cases that need the model are hidden ([.server-generate]): the ctest "server: generate
// ..." (tests/server/run_server_generate.cmake) writes llama_tiny.onnx with
// tools/make_models.py and runs them with DSINFER_LLAMA_TINY pointing at it.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "dsinfer/generate.hpp"
#include "server/model_repository.hpp"
#include "server/server_fixture.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using json = nlohmann::json;

namespace {

fs::path tiny_model() {
    const char* p = std::getenv("DSINFER_LLAMA_TINY");
    if (p == nullptr)
        FAIL("DSINFER_LLAMA_TINY is not set (the ctest 'server: generate ...' sets it)");
    return p;
}

// The Generator's options the repository's config.json below gives, for the direct runs.
constexpr const char* kGenerateConfig =
    R"({"num_threads":1,"generate":{"kv_cache_mb":16,"block_tokens":4,"max_sequences":4,"prefill_chunk":8}})";

GeneratorOptions direct_options() {
    GeneratorOptions o;
    o.engine.num_threads = 1;
    o.kv_cache_bytes = std::size_t{16} << 20;
    o.block_tokens = 4;
    o.max_sequences = 4;
    o.prefill_chunk = 8;
    return o;
}

/// A repository with "llama" (generative, llama_tiny) and "scale" (a plain ONNX model), and a
/// server on it.
struct GenerateServer {
    TempRepository repo;
    std::unique_ptr<server::Server> server;
    explicit GenerateServer(const std::function<void(server::ServerOptions&)>& tune = {},
                            const char* llama_config = kGenerateConfig) {
        fs::create_directories(repo.root() / "llama" / "1");
        fs::copy_file(tiny_model(), repo.root() / "llama" / "1" / "model.onnx");
        repo.config("llama", llama_config);
        repo.add("scale", 1, scale_model(2.f));
        auto o = local_options(repo.root());
        o.grpc_port = -1;
        if (tune) tune(o);
        server = std::make_unique<server::Server>(o);
        server->start();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", server->http_port());
        c.set_read_timeout(30, 0);
        return c;
    }
    int port() const { return server->http_port(); }
};

/// A response read off a raw connection: status, headers (names lower-cased), and the body
/// with the chunked transfer coding removed (`complete`: the last chunk, size 0, was seen).
struct RawResponse {
    int status = 0;
    std::map<std::string, std::string> headers;
    std::string body;
    bool chunked = false, complete = false;
};

RawResponse parse_raw(const std::string& raw) {
    RawResponse r;
    const std::size_t end = raw.find("\r\n\r\n");
    if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
    r.status = std::stoi(raw.substr(9, 3));
    std::istringstream head(raw.substr(0, end));
    std::string line;
    std::getline(head, line);
    while (std::getline(head, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    std::string rest = raw.substr(end + 4);
    r.chunked = r.headers["transfer-encoding"] == "chunked";
    if (!r.chunked) {
        r.body = rest;
        return r;
    }
    std::size_t pos = 0;
    for (;;) {
        const std::size_t eol = rest.find("\r\n", pos);
        if (eol == std::string::npos) break;
        const std::size_t size = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
        if (size == 0) {
            r.complete = rest.compare(eol, 4, "\r\n\r\n") == 0;
            break;
        }
        if (eol + 2 + size + 2 > rest.size() || rest.compare(eol + 2 + size, 2, "\r\n") != 0) break;
        r.body += rest.substr(eol + 2, size);
        pos = eol + 2 + size + 2;
    }
    return r;
}

std::string post_request(const std::string& path, const std::string& body, bool close = true) {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
           (close ? "Connection: close\r\n" : "") +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// The events of a text/event-stream body: each "data: <json>" line followed by a blank line.
/// Fails the test on any other framing.
std::vector<json> sse_events(const std::string& body) {
    std::vector<json> events;
    std::size_t pos = 0;
    while (pos < body.size()) {
        const std::size_t end = body.find("\n\n", pos);
        REQUIRE(end != std::string::npos);  // every event ends with a blank line
        const std::string event = body.substr(pos, end - pos);
        REQUIRE(event.rfind("data: ", 0) == 0);
        REQUIRE(event.find('\n') == std::string::npos);  // one data line per event
        events.push_back(json::parse(event.substr(6)));
        pos = end + 2;
    }
    return events;
}

/// The value of the Prometheus sample `series` (its name and labels, exactly) in `text`, -1 when
/// it is absent.
double sample(const std::string& text, const std::string& series) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    return -1;
}

std::string llama_series(const std::string& family, const std::string& labels) {
    return family + "{model=\"llama\",version=\"1\"," + labels + "}";
}

/// Waits up to 10 s for `pred` (the server's state changes on its own threads).
template <class Pred>
bool eventually(Pred pred) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!pred()) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

/// The Generator of "llama" holds no sequence: none queued, no KV block held by one, nothing
/// in flight in the server. (Its "running" gauge is not read here: the Generator refreshes it
/// at the start of a step, so a sequence that ended by itself is still counted until the next
/// step; after a cancellation it is exact, and the hang-up case checks it.)
/// Nothing queued or running, no KV block held, no request in flight. A client can read its
/// response a moment before the server's handler has counted the request out, so this waits
/// for that (up to 5 s) rather than sampling once.
bool generator_idle(const server::Server& s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (true) {
        const std::string m = s.metrics_text();
        const bool idle =
            sample(m, llama_series("dsinfer_generate_sequences", "state=\"queued\"")) == 0 &&
            sample(m, llama_series("dsinfer_generate_sequences", "state=\"running\"")) == 0 &&
            sample(m, llama_series("dsinfer_generate_kv_blocks", "state=\"used\"")) == 0 &&
            sample(m, "dsinfer_server_in_flight_requests") == 0;
        if (idle) return true;
        if (std::chrono::steady_clock::now() > until) {
            UNSCOPED_INFO("not idle after 5 s:\n" << m);
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

std::string ids_json(const std::vector<std::int64_t>& ids) { return json(ids).dump(); }

}  // namespace

TEST_CASE("server generate: config.json's generate section is checked, naming the key",
          "[server]") {
    server::ModelConfig d;
    auto c = server::parse_model_config(
        R"({"num_threads":2,"precision":"bf16","generate":{"kv_cache_mb":64,"kv_dtype":"f16","block_tokens":8,"max_sequences":8,"prefill_chunk":256,"max_step_tokens":512,"prefix_sharing":false,"weights":"int8","max_queued":10}})",
        d);
    REQUIRE(c);
    REQUIRE(c->generate);
    CHECK(c->generate->kv_cache_bytes == std::size_t{64} << 20);
    CHECK(c->generate->kv_dtype == DType::f16);
    CHECK(c->generate->block_tokens == 8);
    CHECK(c->generate->max_sequences == 8);
    CHECK(c->generate->prefill_chunk == 256);
    CHECK(c->generate->max_step_tokens == 512);
    CHECK_FALSE(c->generate->prefix_sharing);
    CHECK(c->generate->weights == "int8");
    CHECK(c->generate->max_queued == 10);
    CHECK(c->precision == Precision::bf16);
    auto plain = server::parse_model_config(R"({"max_batch_size":4})", d);
    REQUIRE(plain);
    CHECK_FALSE(plain->generate);
    const std::pair<const char*, const char*> bad[] = {
        {R"({"generate":[]})", "'generate'"},
        {R"({"generate":{"kv_cache_mb":0}})", "generate.kv_cache_mb"},
        {R"({"generate":{"kv_cache_mb":"64"}})", "generate.kv_cache_mb"},
        {R"({"generate":{"kv_dtype":"f8"}})", "generate.kv_dtype"},
        {R"({"generate":{"weights":"int4"}})", "generate.weights"},
        {R"({"generate":{"beams":4}})", "generate.beams"},
        {R"({"generate":{"max_sequences":32,"max_step_tokens":16}})", "generate.max_step_tokens"},
        {R"({"generate":{},"max_batch_size":4})", "max_batch_size"},
        {R"({"generate":{},"result_cache":{"max_entries":4}})", "result_cache"},
        {R"({"generate":{},"precision":"int8"})", "precision"},
        {R"({"generate":{},"platform":"dsinfer_cascade"})", "platform"},
    };
    for (const auto& [text, key] : bad) {
        INFO(text);
        auto r = server::parse_model_config(text, d);
        REQUIRE_FALSE(r);
        CHECK(r.status().code() == ErrorCode::invalid_argument);
        CHECK_THAT(r.status().message(), Catch::Contains(key));
    }
    // The routes are listed (ds-serve --list-routes; tests/deploy/check_manifests.py).
    const auto routes = server::Server::http_routes();
    for (const char* r :
         {"POST /v2/models/{name}/generate", "POST /v2/models/{name}/versions/{version}/generate",
          "POST /v2/models/{name}/generate_stream",
          "POST /v2/models/{name}/versions/{version}/generate_stream"})
        CHECK(std::find(routes.begin(), routes.end(), r) != routes.end());
}

TEST_CASE("server generate: /generate equals the Generator, /generate_stream's events equal it",
          "[.server-generate]") {
    GenerateServer s;
    Generator direct = Generator::load(tiny_model(), direct_options());
    auto c = s.client();

    // Metadata and readiness of a generative model.
    auto meta = c.Get("/v2/models/llama");
    REQUIRE(meta);
    REQUIRE(meta->status == 200);
    const json m = json::parse(meta->body);
    CHECK(m["platform"] == "dsinfer_generate");
    CHECK(m["versions"] == json::array({"1"}));
    CHECK(m["inputs"][0]["name"] == "input_ids");
    CHECK(m["inputs"][0]["datatype"] == "INT64");
    CHECK(m["outputs"][0]["name"] == "output_ids");
    CHECK(m["generate"]["vocab_size"] == 256);
    CHECK(m["generate"]["eos_token_id"] == 2);
    CHECK(c.Get("/v2/models/llama/ready")->status == 200);
    CHECK(c.Get("/v2/models/llama/versions/1/ready")->status == 200);

    const std::vector<std::vector<std::int64_t>> prompts = {
        {1, 2, 3, 4, 5}, {200, 17}, {9}, {44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55}};
    for (const auto& prompt : prompts) {
        CAPTURE(prompt);
        GenerateRequest want;
        want.prompt = prompt;
        want.max_tokens = 24;
        const GenerateResult expected = direct.generate(want);
        REQUIRE(expected.status.is_ok());
        const std::string body =
            R"({"id":"q1","input_ids":)" + ids_json(prompt) + R"(,"parameters":{"max_tokens":24}})";

        // Greedy, plain: the Generator's tokens and finish reason.
        auto r = c.Post("/v2/models/llama/generate", body, "application/json");
        REQUIRE(r);
        REQUIRE(r->status == 200);
        CHECK(r->get_header_value("Content-Type") == "application/json");
        const json out = json::parse(r->body);
        CHECK(out["model_name"] == "llama");
        CHECK(out["model_version"] == "1");
        CHECK(out["id"] == "q1");
        CHECK(out["output_ids"].get<std::vector<std::int64_t>>() == expected.tokens);
        CHECK(out["finish_reason"] == finish_reason_name(expected.finish));

        // Streamed: one event per token, in order, then the final one; chunked framing.
        const RawResponse sr = parse_raw(exchange_raw(
            s.port(), post_request("/v2/models/llama/versions/1/generate_stream", body)));
        REQUIRE(sr.status == 200);
        CHECK(sr.headers.at("content-type") == "text/event-stream");
        CHECK(sr.headers.at("cache-control") == "no-cache");
        CHECK(sr.chunked);
        CHECK(sr.complete);
        const std::vector<json> events = sse_events(sr.body);
        REQUIRE(events.size() == expected.tokens.size() + 1);
        std::vector<std::int64_t> streamed;
        for (std::size_t i = 0; i + 1 < events.size(); ++i) {
            CHECK(events[i]["index"] == i);
            CHECK(events[i]["model_name"] == "llama");
            CHECK(events[i]["id"] == "q1");
            CHECK_FALSE(events[i].contains("finish_reason"));
            streamed.push_back(events[i]["token_id"].get<std::int64_t>());
        }
        CHECK(streamed == out["output_ids"].get<std::vector<std::int64_t>>());
        const json& last = events.back();
        CHECK(last["finish_reason"] == out["finish_reason"]);
        CHECK(last["generated_tokens"] == expected.tokens.size());
        CHECK_FALSE(last.contains("error"));
        CHECK_FALSE(last.contains("token_id"));
    }

    // Sampling parameters reach the Generator: the same seed gives the direct run's tokens.
    GenerateRequest sampled;
    sampled.prompt = {3, 1, 4, 1, 5};
    sampled.max_tokens = 16;
    sampled.stop_at_eos = false;
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.top_k = 40;
    sampled.sampling.top_p = 0.9f;
    sampled.sampling.min_p = 0.01f;
    sampled.sampling.repetition_penalty = 1.1f;
    sampled.sampling.seed = 7;
    const GenerateResult expected_sampled = direct.generate(sampled);
    auto r = c.Post(
        "/v2/models/llama/generate",
        R"({"input_ids":[3,1,4,1,5],"parameters":{"max_tokens":16,"ignore_eos":true,"temperature":0.8,"top_k":40,"top_p":0.9,"min_p":0.01,"repetition_penalty":1.1,"seed":7}})",
        "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    CHECK(json::parse(r->body)["output_ids"].get<std::vector<std::int64_t>>() ==
          expected_sampled.tokens);
    CHECK(json::parse(r->body)["finish_reason"] == "length");

    // A stop token ends the sequence there (kept), finish reason stop_token.
    REQUIRE(expected_sampled.tokens.size() == 16);
    const std::int64_t stop = expected_sampled.tokens[5];
    const auto first_stop = static_cast<std::size_t>(
        std::find(expected_sampled.tokens.begin(), expected_sampled.tokens.end(), stop) -
        expected_sampled.tokens.begin());
    r = c.Post(
        "/v2/models/llama/generate",
        R"({"input_ids":[3,1,4,1,5],"parameters":{"max_tokens":16,"ignore_eos":true,"temperature":0.8,"top_k":40,"top_p":0.9,"min_p":0.01,"repetition_penalty":1.1,"seed":7,"stop_token_ids":[)" +
            std::to_string(stop) + "]}}",
        "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    const json stopped = json::parse(r->body);
    CHECK(stopped["finish_reason"] == "stop_token");
    CHECK(stopped["output_ids"].get<std::vector<std::int64_t>>() ==
          std::vector<std::int64_t>(
              expected_sampled.tokens.begin(),
              expected_sampled.tokens.begin() + static_cast<std::ptrdiff_t>(first_stop + 1)));

    // Several streams at once are batched by the one Generator and each gets its own tokens.
    std::vector<std::future<std::vector<std::int64_t>>> streams;
    for (const auto& prompt : prompts)
        streams.push_back(std::async(std::launch::async, [&s, prompt] {
            const RawResponse sr = parse_raw(
                exchange_raw(s.port(), post_request("/v2/models/llama/generate_stream",
                                                    R"({"input_ids":)" + ids_json(prompt) +
                                                        R"(,"parameters":{"max_tokens":24}})")));
            std::vector<std::int64_t> ids;
            if (sr.status != 200 || !sr.complete) return ids;
            for (const json& e : sse_events(sr.body))
                if (e.contains("token_id")) ids.push_back(e["token_id"].get<std::int64_t>());
            return ids;
        }));
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        GenerateRequest want;
        want.prompt = prompts[i];
        want.max_tokens = 24;
        CHECK(streams[i].get() == direct.generate(want).tokens);
    }

    // Each kind of model refuses the other's route with a 400 that says which to use.
    r = c.Post("/v2/models/llama/infer", json_infer_body({1, 2, 3, 4}), "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK_THAT(json::parse(r->body)["error"].get<std::string>(), Catch::Contains("generative"));
    CHECK_THAT(json::parse(r->body)["error"].get<std::string>(), Catch::Contains("/generate"));
    for (const char* route : {"/v2/models/scale/generate", "/v2/models/scale/generate_stream"}) {
        r = c.Post(route, R"({"input_ids":[1,2,3]})", "application/json");
        REQUIRE(r);
        CHECK(r->status == 400);
        CHECK_THAT(json::parse(r->body)["error"].get<std::string>(),
                   Catch::Contains("not a generative model"));
    }
    // The plain model still answers /infer.
    r = c.Post("/v2/models/scale/infer", json_infer_body({1, 2, 3, 4}), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);

    const std::string metrics = s.server->metrics_text();
    CHECK(
        sample(metrics, llama_series("dsinfer_generate_requests_total", "outcome=\"finished\"")) ==
        2 * static_cast<double>(prompts.size()) + 2 + static_cast<double>(prompts.size()));
    CHECK(sample(metrics, llama_series("dsinfer_generate_tokens_total", "kind=\"generated\"")) > 0);
    CHECK(metrics.find("dsinfer_generate_ttft_seconds_count{model=\"llama\",version=\"1\"}") !=
          std::string::npos);
    CHECK(generator_idle(*s.server));
}

TEST_CASE("server generate: a client that hangs up mid-stream cancels its generation",
          "[.server-generate]") {
    GenerateServer s;
    // Long enough never to end by itself within the test (the position limit is 32768).
    const std::string body =
        R"({"input_ids":[1,2,3],"parameters":{"max_tokens":30000,"ignore_eos":true}})";

    // A stream read for a few events, then the connection closed.
    const int fd =
        send_raw(s.port(), post_request("/v2/models/llama/generate_stream", body, false));
    REQUIRE(fd >= 0);
    std::string seen;
    char buf[4096];
    while (std::count(seen.begin(), seen.end(), '\n') < 20) {
        pollfd p{fd, POLLIN, 0};
        REQUIRE(::poll(&p, 1, 10000) == 1);
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        REQUIRE(n > 0);
        seen.append(buf, static_cast<std::size_t>(n));
    }
    CHECK(seen.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(seen.find("data: {") != std::string::npos);
    ::close(fd);
    const std::string running = llama_series("dsinfer_generate_sequences", "state=\"running\"");
    CHECK(eventually([&] {
        return generator_idle(*s.server) && sample(s.server->metrics_text(), running) == 0;
    }));
    std::string m = s.server->metrics_text();
    CHECK(sample(m, llama_series("dsinfer_generate_requests_total", "outcome=\"cancelled\"")) == 1);
    CHECK(sample(m, "dsinfer_server_responses_total{protocol=\"http\",code=\"cancelled\"}") == 1);
    CHECK(sample(m, llama_series("dsinfer_generate_tokens_total", "kind=\"generated\"")) < 30000);

    // The same for a plain /generate whose client hangs up while it runs.
    const int fd2 = send_raw(s.port(), post_request("/v2/models/llama/generate", body, false));
    REQUIRE(fd2 >= 0);
    REQUIRE(eventually([&] { return sample(s.server->metrics_text(), running) == 1; }));
    ::close(fd2);
    CHECK(eventually([&] {
        return sample(s.server->metrics_text(), llama_series("dsinfer_generate_requests_total",
                                                             "outcome=\"cancelled\"")) == 2;
    }));
    CHECK(eventually([&] {
        return generator_idle(*s.server) && sample(s.server->metrics_text(), running) == 0;
    }));

    // The server and its Generator go on serving.
    auto c = s.client();
    auto r = c.Post("/v2/models/llama/generate",
                    R"({"input_ids":[5,6],"parameters":{"max_tokens":4,"ignore_eos":true}})",
                    "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(json::parse(r->body)["output_ids"].size() == 4);
}

TEST_CASE("server generate: the model's config.json limits bound prompts and max_tokens",
          "[.server-generate]") {
    GenerateServer s(
        {},
        R"({"num_threads":1,"generate":{"kv_cache_mb":16,"block_tokens":4,"max_sequences":4,"prefill_chunk":8},"limits":{"max_tensor_elements":5,"max_tokens":8}})");
    auto c = s.client();
    for (const char* route : {"/v2/models/llama/generate", "/v2/models/llama/generate_stream"}) {
        INFO(route);
        auto r = c.Post(route, R"({"input_ids":[1,2,3,4,5,6],"parameters":{"max_tokens":2}})",
                        "application/json");
        REQUIRE(r);
        CHECK(r->status == 413);
        CHECK_THAT(r->body, Catch::Contains("limits.max_tensor_elements"));
        r = c.Post(route, R"({"input_ids":[1,2],"parameters":{"max_tokens":9}})",
                   "application/json");
        REQUIRE(r);
        CHECK(r->status == 413);
        CHECK_THAT(r->body, Catch::Contains("limits.max_tokens"));
    }
    auto r = c.Post("/v2/models/llama/generate",
                    R"({"input_ids":[1,2,3,4,5],"parameters":{"max_tokens":8,"ignore_eos":true}})",
                    "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(json::parse(r->body)["output_ids"].size() == 8);
    CHECK(generator_idle(*s.server));
}

TEST_CASE("server generate: bad input gets a 400 naming the field, and nothing runs",
          "[.server-generate]") {
    GenerateServer s;
    auto c = s.client();
    std::string deep(100, '[');
    deep += std::string(100, ']');
    const std::pair<std::string, const char*> bad[] = {
        {R"({"text_input":"Hello"})", "tokenization is not supported"},
        {R"({"text_input":"Hello","input_ids":[1]})", "text_input"},
        {R"({})", "input_ids"},
        {R"({"input_ids":"1,2"})", "input_ids"},
        {R"({"input_ids":[]})", "input_ids"},
        {R"({"input_ids":[[1,2]]})", "input_ids"},
        {R"({"input_ids":[1,2.5]})", "input_ids"},
        {R"({"input_ids":[1,-1]})", "input_ids"},
        {R"({"input_ids":[1,"2"]})", "input_ids"},
        {R"({"input_ids":[1,300]})", "vocabulary"},
        {R"({"input_ids":[1,18446744073709551615]})", "input_ids"},
        {R"({"input_ids":[1],"parameters":{"max_tokens":-1}})", "max_tokens"},
        {R"({"input_ids":[1],"parameters":{"max_tokens":0}})", "max_tokens"},
        {R"({"input_ids":[1],"parameters":{"max_tokens":"8"}})", "max_tokens"},
        {R"({"input_ids":[1],"parameters":{"max_tokens":2.5}})", "max_tokens"},
        {R"({"input_ids":[1],"parameters":{"temperature":-0.5}})", "temperature"},
        {R"({"input_ids":[1],"parameters":{"temperature":"hot"}})", "temperature"},
        {R"({"input_ids":[1],"parameters":{"temperature":1e300}})", "temperature"},
        {R"({"input_ids":[1],"parameters":{"top_k":-1}})", "top_k"},
        {R"({"input_ids":[1],"parameters":{"top_p":0}})", "top_p"},
        {R"({"input_ids":[1],"parameters":{"top_p":1.5}})", "top_p"},
        {R"({"input_ids":[1],"parameters":{"min_p":1}})", "min_p"},
        {R"({"input_ids":[1],"parameters":{"repetition_penalty":0}})", "repetition_penalty"},
        {R"({"input_ids":[1],"parameters":{"seed":-1}})", "seed"},
        {R"({"input_ids":[1],"parameters":{"seed":true}})", "seed"},
        {R"({"input_ids":[1],"parameters":{"ignore_eos":"yes"}})", "ignore_eos"},
        {R"({"input_ids":[1],"parameters":{"stop_token_ids":2}})", "stop_token_ids"},
        {R"({"input_ids":[1],"parameters":{"stop_token_ids":[999]}})", "stop_token_ids"},
        {R"({"input_ids":[1],"parameters":{"timeout":-5}})", "timeout"},
        {R"({"input_ids":[1],"parameters":{"priority":1}})", "priority"},
        {R"({"input_ids":[1],"parameters":{"beam_width":4}})", "beam_width"},
        {R"({"input_ids":[1],"parameters":[1]})", "parameters"},
        {R"({"input_ids":[1],"prompt":"x"})", "prompt"},
        {R"({"input_ids":[1],"id":5})", "id"},
        {R"({"input_ids":[1,)", "malformed JSON"},
        {R"([1,2])", "JSON object"},
        {deep, "nests deeper"},
        {R"({"input_ids":)" + ids_json(std::vector<std::int64_t>(40000, 7)) + "}",
         "position limit"},
    };
    const std::string submitted =
        llama_series("dsinfer_generate_requests_total", "outcome=\"submitted\"");
    const double before = sample(s.server->metrics_text(), submitted);
    for (int round = 0; round < 2; ++round)
        for (const char* route : {"/v2/models/llama/generate", "/v2/models/llama/generate_stream"})
            for (const auto& [body, field] : bad) {
                INFO(route << " " << body.substr(0, 120));
                auto r = c.Post(route, body, "application/json");
                REQUIRE(r);
                CHECK(r->status == 400);
                CHECK(r->get_header_value("Content-Type") == "application/json");
                const json e = json::parse(r->body);
                REQUIRE(e.contains("error"));
                CHECK_THAT(e["error"].get<std::string>(), Catch::Contains(field));
            }
    // Every one was refused before reaching the Generator.
    CHECK(sample(s.server->metrics_text(), submitted) == before);

    // Unknown model or version: 404.
    auto r = c.Post("/v2/models/nope/generate", R"({"input_ids":[1]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 404);
    r = c.Post("/v2/models/llama/versions/7/generate_stream", R"({"input_ids":[1]})",
               "application/json");
    REQUIRE(r);
    CHECK(r->status == 404);
    r = c.Post("/v2/models/llama/versions/x/generate", R"({"input_ids":[1]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 404);
    // A deadline that passes while generating: 504 for /generate, the final event's reason for
    // a stream.
    r = c.Post(
        "/v2/models/llama/generate",
        R"({"input_ids":[1,2],"parameters":{"max_tokens":30000,"ignore_eos":true,"timeout":200000}})",
        "application/json");
    REQUIRE(r);
    CHECK(r->status == 504);
    CHECK_THAT(json::parse(r->body)["error"].get<std::string>(), Catch::Contains("deadline"));
    const RawResponse sr = parse_raw(exchange_raw(
        s.port(),
        post_request(
            "/v2/models/llama/generate_stream",
            R"({"input_ids":[1,2],"parameters":{"max_tokens":30000,"ignore_eos":true,"timeout":200000}})")));
    REQUIRE(sr.status == 200);
    CHECK(sr.complete);
    const auto events = sse_events(sr.body);
    REQUIRE_FALSE(events.empty());
    CHECK(events.back()["finish_reason"] == "deadline");
    CHECK_THAT(events.back()["error"].get<std::string>(), Catch::Contains("deadline"));
    CHECK(eventually([&] { return generator_idle(*s.server); }));
}

TEST_CASE("server generate: an unload and the shutdown cancel streams past the drain timeout",
          "[.server-generate]") {
    GenerateServer s([](server::ServerOptions& o) {
        o.model_control = server::ModelControlMode::explicit_;
        o.load_models = {"llama"};
        o.drain_timeout = std::chrono::milliseconds(300);
    });
    const std::string long_body =
        R"({"input_ids":[1,2,3],"parameters":{"max_tokens":30000,"ignore_eos":true,"timeout":0}})";
    auto start_stream = [&] {
        return std::async(std::launch::async, [&s, long_body] {
            return parse_raw(exchange_raw(
                s.port(), post_request("/v2/models/llama/generate_stream", long_body)));
        });
    };
    auto running = [&] {
        return sample(s.server->metrics_text(),
                      llama_series("dsinfer_generate_sequences", "state=\"running\"")) == 1;
    };

    // Unloading the model lets its stream run for the drain timeout, then ends it with a final
    // event that says why; the stream is well formed to its end.
    auto unloaded = start_stream();
    REQUIRE(eventually(running));
    REQUIRE(s.server->unload_model("llama").is_ok());
    const RawResponse ur = unloaded.get();
    REQUIRE(ur.status == 200);
    CHECK(ur.complete);
    auto events = sse_events(ur.body);
    REQUIRE(events.size() >= 2);
    CHECK(events.back()["finish_reason"] == "cancelled");
    CHECK_THAT(events.back()["error"].get<std::string>(), Catch::Contains("drain"));
    auto c = s.client();
    auto r = c.Post("/v2/models/llama/generate", R"({"input_ids":[1]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 404);

    // The shutdown: readiness off, then the stream is cancelled at the drain timeout and told
    // so; shutdown() reports the drain timed out and returns.
    REQUIRE(s.server->load_model("llama").is_ok());
    auto stopped = start_stream();
    REQUIRE(eventually(running));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(s.server->shutdown());
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    const RawResponse sr = stopped.get();
    REQUIRE(sr.status == 200);
    CHECK(sr.complete);
    events = sse_events(sr.body);
    REQUIRE(events.size() >= 2);
    CHECK(events.back()["finish_reason"] == "cancelled");
    CHECK_THAT(events.back()["error"].get<std::string>(), Catch::Contains("drain"));
}

TEST_CASE("server generate: the bearer token, the body limit and gRPC apply to generative models",
          "[.server-generate]") {
    GenerateServer s([](server::ServerOptions& o) {
        o.auth_token = "s3cret";
        o.max_body_bytes = 4096;
        o.grpc_port = 0;
    });
    auto c = s.client();
    const httplib::Headers auth{{"Authorization", "Bearer s3cret"}};
    const std::string body = R"({"input_ids":[1,2,3],"parameters":{"max_tokens":4}})";
    for (const char* route : {"/v2/models/llama/generate", "/v2/models/llama/generate_stream"}) {
        INFO(route);
        auto r = c.Post(route, body, "application/json");
        REQUIRE(r);
        CHECK(r->status == 401);
        r = c.Post(route, {{"Authorization", "Bearer wrong!"}}, body, "application/json");
        REQUIRE(r);
        CHECK(r->status == 401);
        r = c.Post(route, auth, body, "application/json");
        REQUIRE(r);
        CHECK(r->status == 200);
        // Over the body limit: 413 before anything is decoded.
        r = c.Post(route, auth,
                   R"({"input_ids":)" + ids_json(std::vector<std::int64_t>(3000, 7)) + "}",
                   "application/json");
        REQUIRE(r);
        CHECK(r->status == 413);
    }
    // gRPC: the metadata of a generative model; ModelInfer on it is INVALID_ARGUMENT, naming the
    // REST route it takes.
    auto stub = grpc_stub(s.server->grpc_port());
    {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer s3cret");
        inference::ModelMetadataRequest req;
        req.set_name("llama");
        inference::ModelMetadataResponse meta;
        REQUIRE(stub->ModelMetadata(&ctx, req, &meta).ok());
        CHECK(meta.platform() == "dsinfer_generate");
        CHECK(meta.inputs(0).name() == "input_ids");
        CHECK(meta.inputs(0).datatype() == "INT64");
    }
    {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer s3cret");
        inference::ModelInferRequest req;
        req.set_model_name("llama");
        auto* in = req.add_inputs();
        in->set_name("input_ids");
        in->set_datatype("INT64");
        in->add_shape(1);
        in->add_shape(3);
        for (std::int64_t v : {1, 2, 3}) in->mutable_contents()->add_int64_contents(v);
        inference::ModelInferResponse resp;
        const grpc::Status st = stub->ModelInfer(&ctx, req, &resp);
        CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
        CHECK_THAT(st.error_message(), Catch::Contains("generate"));
    }
}
