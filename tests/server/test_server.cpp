// The server (dsinfer/server.hpp, src/server/): both protocols end to end on localhost, the
// malformed-request battery, back-pressure, cancellation, auth, TLS, hot reload under load and
// the drain. Every server here listens on 127.0.0.1 at ephemeral ports.
#include <atomic>
#include <future>
#include <catch2/catch.hpp>
#include <cstring>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "server/model_repository.hpp"
#include "server/protocol.hpp"
#include "server/server_fixture.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using json = nlohmann::json;

namespace {

struct Running {
    TempRepository repo;
    std::unique_ptr<server::Server> server;
    void start(server::ServerOptions o) {
        server = std::make_unique<server::Server>(std::move(o));
        server->start();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", server->http_port());
        c.set_read_timeout(10, 0);
        return c;
    }
};

std::vector<float> floats_of(const std::string& bytes) {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

/// A POST of x (one row of 4) to `path` on its own thread; join() it, then read `result`.
struct AsyncPost {
    std::optional<httplib::Result> result;
    std::thread thread;
    AsyncPost(const Running& s, const std::string& path, std::vector<float> x)
        : thread([this, &s, path, x = std::move(x)] {
              auto c = s.client();
              result.emplace(c.Post(path, json_infer_body(x), "application/json"));
          }) {}
    void join() { thread.join(); }
};

std::string metric_line(const std::string& text, const std::string& prefix) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(prefix, 0) == 0) return line;
    return {};
}

}  // namespace

TEST_CASE("server: protocol decoding of JSON, nested data and the binary extension", "[server]") {
    server::RequestLimits limits;
    server::InferRequest r;
    auto e = server::decode_json_request(
        R"({"id":"a","parameters":{"priority":2,"timeout":5000},"inputs":[{"name":"x","datatype":"INT32","shape":[2,2],"data":[[1,2],[3,-4]]}],"outputs":[{"name":"y"}]})",
        "", limits, r);
    REQUIRE(e.ok());
    CHECK(r.id == "a");
    CHECK(r.priority == 2);
    CHECK(r.timeout_us == 5000);
    REQUIRE(r.inputs.size() == 1);
    CHECK(r.inputs[0].tensor.dtype() == DType::i32);
    CHECK(r.inputs[0].tensor.data<std::int32_t>()[3] == -4);
    REQUIRE(r.outputs.size() == 1);

    const float xs[3] = {1.5f, -2.f, 3.25f};
    std::string bin(reinterpret_cast<const char*>(xs), sizeof(xs));
    e = server::decode_json_request(
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3],"parameters":{"binary_data_size":12}}]})",
        bin, limits, r);
    REQUIRE(e.ok());
    CHECK(r.inputs[0].tensor.data<float>()[2] == 3.25f);

    // Encoding: JSON data, then the same output as binary.
    server::EncodedResponse enc;
    r.outputs = {{"x", false}};
    REQUIRE(server::encode_json_response("m", "1", r, r.inputs, enc).ok());
    CHECK(enc.header_bytes == 0);
    auto doc = json::parse(enc.body);
    CHECK(doc["outputs"][0]["data"][1] == -2.0);
    CHECK(doc["model_version"] == "1");
    r.outputs = {{"x", true}};
    REQUIRE(server::encode_json_response("m", "1", r, r.inputs, enc).ok());
    REQUIRE(enc.header_bytes > 0);
    CHECK(enc.body.substr(enc.header_bytes) == bin);
    CHECK(json::parse(enc.body.substr(0, enc.header_bytes))["outputs"][0]["parameters"]["binary_data_size"] == 12);
}

TEST_CASE("server: config.json is checked, naming the key", "[server]") {
    server::ModelConfig d;
    auto c = server::parse_model_config(
        R"({"max_batch_size":16,"max_queue_delay_us":100,"instance_count":2,"version_policy":{"latest":2},"precision":"bf16"})",
        d);
    REQUIRE(c);
    CHECK(c->batching.max_batch_size == 16);
    CHECK(c->batching.num_workers == 2);
    CHECK(c->version_policy.latest == 2);
    CHECK(c->precision == Precision::bf16);
    auto lim = server::parse_model_config(
        R"({"limits":{"max_request_bytes":4096,"max_tensor_elements":8,"timeout_ms":250,"max_timeout_ms":1000}})",
        d);
    REQUIRE(lim);
    CHECK(lim->limits.max_request_bytes == 4096);
    CHECK(lim->limits.max_tensor_elements == 8);
    CHECK(lim->limits.timeout_us == 250000);
    CHECK(lim->limits.max_timeout_us == 1000000);
    CHECK(lim->limits.max_tokens == 0);
    for (const char* bad :
         {R"({"max_batch_sise":4})", R"({"max_batch_size":0})",
          R"({"version_policy":{"newest":1}})", R"({"precision":"int4"})", R"([1,2])",
          R"({"max_batch_size":)", R"({"platform":"dsinfer_cascade"})",
          R"({"limits":{"max_body":1}})", R"({"limits":{"max_tensor_elements":0}})",
          R"({"limits":{"timeout_ms":-1}})", R"({"limits":[1]})", R"({"limits":{"max_tokens":5}})",
          R"({"limits":{"timeout_ms":2000,"max_timeout_ms":1000}})"}) {
        auto r = server::parse_model_config(bad, d);
        INFO(bad);
        REQUIRE_FALSE(r);
        CHECK(r.status().code() == ErrorCode::invalid_argument);
        CHECK(r.status().message().find("config.json") != std::string::npos);
    }
    // The deadline a model's limits give: the request's own (cut to max_timeout_ms), else the
    // model's timeout_ms, else the server's; none when that is 0 and nothing caps it.
    using server::ModelLimits;
    using server::RequestTimeout;
    const auto left_us = [](const RequestTimeout& t, const ModelLimits& l) -> std::int64_t {
        const auto d = server::request_deadline(t, l);
        if (!d) return -1;
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   *d - std::chrono::steady_clock::now())
            .count();
    };
    ModelLimits none, model;
    model.timeout_us = 200000;
    model.max_timeout_us = 1000000;
    CHECK(left_us({std::nullopt, 0}, none) == -1);
    CHECK(left_us({std::nullopt, 0}, model) > 150000);
    CHECK(left_us({std::nullopt, 0}, model) <= 200000);
    CHECK(left_us({50000, 0}, model) <= 50000);
    CHECK(left_us({50000, 0}, model) > 0);
    CHECK(left_us({5000000, 0}, model) <= 1000000);  // cut to max_timeout_ms
    CHECK(left_us({5000000, 0}, model) > 900000);
    CHECK(left_us({std::nullopt, 300000}, none) > 250000);  // the server's default
    ModelLimits capped;
    capped.max_timeout_us = 100000;
    CHECK(left_us({std::nullopt, 0}, capped) <= 100000);  // a cap bounds "no deadline" too
    CHECK(left_us({std::nullopt, 0}, capped) > 0);
    CHECK(left_us({0, 300000}, none) == -1);   // a request's 0: no deadline
    CHECK(left_us({0, 0}, capped) <= 100000);  // ... unless the model caps it
    CHECK(server::valid_model_name("resnet-50_v1.2"));
    for (const char* n : {"", ".", "..", "../x", "a/b", ".hidden", "a b", "a\\b"})
        CHECK_FALSE(server::valid_model_name(n));
}

TEST_CASE("server: REST routes answer as the protocol says", "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    s.repo.add("scale", 3, scale_model(3.f));
    s.repo.config("scale", R"({"version_policy":{"all":true},"max_queue_delay_us":0})");
    auto o = local_options(s.repo.root());
    auto lines = std::make_shared<std::vector<std::string>>();
    auto lines_mutex = std::make_shared<std::mutex>();
    o.log = [lines, lines_mutex](const std::string& l) {
        std::lock_guard lock(*lines_mutex);
        lines->push_back(l);
    };
    s.start(o);
    auto c = s.client();
    {
        // Each version ran every batch size the batcher can form before taking requests.
        std::lock_guard lock(*lines_mutex);
        CHECK(std::count_if(lines->begin(), lines->end(), [](const std::string& l) {
                  return l.find("warmed up batch sizes 1..8") != std::string::npos;
              }) == 2);
    }

    CHECK(c.Get("/v2/health/live")->status == 200);
    CHECK(c.Get("/v2/health/ready")->status == 200);
    auto meta = json::parse(c.Get("/v2")->body);
    CHECK(meta["name"] == "dsinfer");
    CHECK(std::find(meta["extensions"].begin(), meta["extensions"].end(), "binary_tensor_data") !=
          meta["extensions"].end());

    auto mm = c.Get("/v2/models/scale");
    REQUIRE(mm->status == 200);
    auto m = json::parse(mm->body);
    CHECK(m["versions"] == json::array({"1", "3"}));
    CHECK(m["inputs"][0]["name"] == "x");
    CHECK(m["inputs"][0]["datatype"] == "FP32");
    CHECK(m["inputs"][0]["shape"] == json::array({-1, 4}));
    CHECK(m["outputs"].size() == 2);
    CHECK(c.Get("/v2/models/scale/ready")->status == 200);
    CHECK(c.Get("/v2/models/scale/versions/1/ready")->status == 200);
    CHECK(c.Get("/v2/models/scale/versions/2/ready")->status == 404);
    CHECK(c.Get("/v2/models/nope")->status == 404);

    // JSON in, JSON out: the highest version (3) answers an unversioned request.
    auto r = c.Post("/v2/models/scale/infer", json_infer_body({1, 2, 3, 4, 5, 6, 7, 8}),
                    "application/json");
    REQUIRE(r->status == 200);
    auto out = json::parse(r->body);
    CHECK(out["model_version"] == "3");
    REQUIRE(out["outputs"].size() == 2);
    CHECK(out["outputs"][0]["name"] == "y");
    CHECK(out["outputs"][0]["shape"] == json::array({2, 4}));
    CHECK(out["outputs"][0]["data"][7] == 24.0);
    CHECK(out["outputs"][1]["data"][0] == 4.0);

    // Version 1 by route; binary in, binary out, only y.
    std::string body;
    const std::size_t hl = binary_infer_body({1, 2, 3, 4}, body);
    httplib::Headers h{{"Inference-Header-Content-Length", std::to_string(hl)}};
    r = c.Post("/v2/models/scale/versions/1/infer", h, body, "application/octet-stream");
    REQUIRE(r->status == 200);
    const std::size_t rhl = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
    auto rh = json::parse(r->body.substr(0, rhl));
    CHECK(rh["model_version"] == "1");
    REQUIRE(rh["outputs"].size() == 1);
    CHECK(rh["outputs"][0]["parameters"]["binary_data_size"] == 16);
    CHECK(floats_of(r->body.substr(rhl)) == std::vector<float>{1, 2, 3, 4});

    auto idx = json::parse(c.Post("/v2/repository/index", "", "application/json")->body);
    CHECK(idx.size() == 2);
    CHECK(idx[0]["state"] == "READY");
    // As the protocol's examples send it (curl -X POST): no body, no Content-Length.
    const std::string bare = exchange_raw(s.server->http_port(),
                                          "POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                                          "Connection: close\r\n\r\n");
    CHECK(bare.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(bare.find("\"state\":\"READY\"") != std::string::npos);

    auto metrics = c.Get("/metrics");
    REQUIRE(metrics->status == 200);
    CHECK(metrics->body.find("dsinfer_requests_total{model=\"scale\",version=\"3\",outcome=\"ok\"} 1") !=
          std::string::npos);
    CHECK(metrics->body.find("dsinfer_queue_requests{model=\"scale\",version=\"1\"} 0") !=
          std::string::npos);
    CHECK(metric_line(metrics->body, "dsinfer_server_responses_total{protocol=\"http\",code=\"ok\"}") ==
          "dsinfer_server_responses_total{protocol=\"http\",code=\"ok\"} 2");
}

TEST_CASE("server: gRPC GRPCInferenceService with raw and typed contents", "[server]") {
    Running s;
    s.repo.add("scale", 2, scale_model(2.f));
    s.start(local_options(s.repo.root()));
    auto stub = grpc_stub(s.server->grpc_port());
    {
        grpc::ClientContext ctx;
        inference::ServerLiveResponse live;
        REQUIRE(stub->ServerLive(&ctx, {}, &live).ok());
        CHECK(live.live());
    }
    {
        grpc::ClientContext ctx;
        inference::ServerReadyResponse ready;
        REQUIRE(stub->ServerReady(&ctx, {}, &ready).ok());
        CHECK(ready.ready());
    }
    {
        grpc::ClientContext ctx;
        inference::ModelMetadataRequest req;
        req.set_name("scale");
        inference::ModelMetadataResponse meta;
        REQUIRE(stub->ModelMetadata(&ctx, req, &meta).ok());
        CHECK(meta.versions_size() == 1);
        CHECK(meta.inputs(0).datatype() == "FP32");
        CHECK(meta.inputs(0).shape(0) == -1);
    }
    for (bool raw : {true, false}) {
        grpc::ClientContext ctx;
        inference::ModelInferRequest req;
        req.set_model_name("scale");
        req.set_id("r1");
        auto* in = req.add_inputs();
        in->set_name("x");
        in->set_datatype("FP32");
        in->add_shape(1);
        in->add_shape(4);
        const float x[4] = {1, 2, 3, 4};
        if (raw) req.add_raw_input_contents(reinterpret_cast<const char*>(x), sizeof(x));
        else for (float v : x) in->mutable_contents()->add_fp32_contents(v);
        req.add_outputs()->set_name("z");
        inference::ModelInferResponse resp;
        auto st = stub->ModelInfer(&ctx, req, &resp);
        INFO(st.error_message());
        REQUIRE(st.ok());
        CHECK(resp.model_version() == "2");
        CHECK(resp.id() == "r1");
        REQUIRE(resp.outputs_size() == 1);
        CHECK(resp.outputs(0).name() == "z");
        CHECK(floats_of(resp.raw_output_contents(0)) == std::vector<float>{3, 4, 5, 6});
    }
    {
        grpc::ClientContext ctx;
        inference::ModelInferRequest req;
        req.set_model_name("missing");
        inference::ModelInferResponse resp;
        CHECK(stub->ModelInfer(&ctx, req, &resp).error_code() == grpc::StatusCode::NOT_FOUND);
    }
}

namespace {

struct BadRest {
    const char* what;
    std::string path;
    std::string body;
    httplib::Headers headers;
    int status;
};

std::vector<BadRest> rest_battery() {
    const std::string m = "/v2/models/scale/infer";
    auto in = [](const std::string& fields) { return R"({"inputs":[{)" + fields + "}]}"; };
    const std::string ok_fields = R"("name":"x","datatype":"FP32","shape":[1,4])";
    std::vector<BadRest> b = {
        {"empty body", m, "", {}, 400},
        {"not JSON", m, "hello", {}, 400},
        {"truncated JSON", m, R"({"inputs":[{"name":"x")", {}, 400},
        {"JSON array", m, "[]", {}, 400},
        {"JSON string", m, R"("x")", {}, 400},
        {"no inputs", m, "{}", {}, 400},
        {"inputs not an array", m, R"({"inputs":{}})", {}, 400},
        {"input not an object", m, R"({"inputs":[1]})", {}, 400},
        {"input without name", m, in(R"("datatype":"FP32","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"name not a string", m, in(R"("name":5,"datatype":"FP32","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"empty name", m, in(R"("name":"","datatype":"FP32","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"no datatype", m, in(R"("name":"x","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"unknown datatype", m, in(R"("name":"x","datatype":"FP8","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"BYTES datatype", m, in(R"("name":"x","datatype":"BYTES","shape":[1],"data":["a"])"), {}, 400},
        {"no shape", m, in(R"("name":"x","datatype":"FP32","data":[1,2,3,4])"), {}, 400},
        {"shape not an array", m, in(R"("name":"x","datatype":"FP32","shape":4,"data":[1,2,3,4])"), {}, 400},
        {"negative dim", m, in(R"("name":"x","datatype":"FP32","shape":[-1,4],"data":[1,2,3,4])"), {}, 400},
        {"fractional dim", m, in(R"("name":"x","datatype":"FP32","shape":[1.5,4],"data":[1,2,3,4])"), {}, 400},
        {"string dim", m, in(R"("name":"x","datatype":"FP32","shape":["1",4],"data":[1,2,3,4])"), {}, 400},
        {"rank 9", m, in(R"("name":"x","datatype":"FP32","shape":[1,1,1,1,1,1,1,1,4],"data":[1,2,3,4])"), {}, 400},
        {"huge declared shape", m, in(R"("name":"x","datatype":"FP32","shape":[1000000000,1000000000],"data":[1])"), {}, 413},
        {"dims overflow int64", m, in(R"("name":"x","datatype":"FP32","shape":[9223372036854775807,9223372036854775807],"data":[1])"), {}, 413},
        {"dim beyond int64", m, in(R"("name":"x","datatype":"FP32","shape":[18446744073709551615],"data":[1])"), {}, 413},
        {"too few elements", m, in(ok_fields + R"(,"data":[1,2,3])"), {}, 400},
        {"too many elements", m, in(ok_fields + R"(,"data":[1,2,3,4,5])"), {}, 400},
        {"string element", m, in(ok_fields + R"(,"data":[1,"2",3,4])"), {}, 400},
        {"null element", m, in(ok_fields + R"(,"data":[1,null,3,4])"), {}, 400},
        {"object element", m, in(ok_fields + R"(,"data":[1,{},3,4])"), {}, 400},
        {"no data", m, in(ok_fields), {}, 400},
        {"data and binary size", m, in(ok_fields + R"(,"data":[1,2,3,4],"parameters":{"binary_data_size":16})"), {}, 400},
        {"wrong dtype for model", m, in(R"("name":"x","datatype":"INT32","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"wrong rank for model", m, in(R"("name":"x","datatype":"FP32","shape":[4],"data":[1,2,3,4])"), {}, 400},
        {"wrong dim for model", m, in(R"("name":"x","datatype":"FP32","shape":[1,5],"data":[1,2,3,4,5])"), {}, 400},
        {"unknown input", m, in(R"("name":"q","datatype":"FP32","shape":[1,4],"data":[1,2,3,4])"), {}, 400},
        {"duplicate input", m, R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]},{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"INT8 out of range", m, in(R"("name":"x","datatype":"INT8","shape":[1],"data":[300])"), {}, 400},
        {"UINT8 negative", m, in(R"("name":"x","datatype":"UINT8","shape":[1],"data":[-1])"), {}, 400},
        {"BOOL as integer", m, in(R"("name":"x","datatype":"BOOL","shape":[1],"data":[1])"), {}, 400},
        {"unknown requested output", m, R"({"outputs":[{"name":"nope"}],"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"duplicate requested output", m, R"({"outputs":[{"name":"y"},{"name":"y"}],"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"outputs not an array", m, R"({"outputs":5,"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"binary_data not a bool", m, R"({"outputs":[{"name":"y","parameters":{"binary_data":1}}],"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"priority negative", m, R"({"parameters":{"priority":-1},"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"timeout a string", m, R"({"parameters":{"timeout":"1s"},"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"parameters not an object", m, R"({"parameters":[],"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"id not a string", m, R"({"id":7,"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})", {}, 400},
        {"deep nesting", m, std::string(100000, '[') + std::string(100000, ']'), {}, 400},
        {"deep data nesting", m, in(ok_fields + ",\"data\":" + std::string(5000, '[') + "1" + std::string(5000, ']')), {}, 400},
        {"unknown model", "/v2/models/nope/infer", in(ok_fields + R"(,"data":[1,2,3,4])"), {}, 404},
        {"unknown version", "/v2/models/scale/versions/9/infer", in(ok_fields + R"(,"data":[1,2,3,4])"), {}, 404},
        {"version not a number", "/v2/models/scale/versions/abc/infer", in(ok_fields + R"(,"data":[1,2,3,4])"), {}, 404},
        {"path escape in model name", "/v2/models/..%2F..%2Fetc/infer", "{}", {}, 404},
        {"no such route", "/v2/modelz/scale/infer", "{}", {}, 404},
    };
    auto header = [](std::string v) { return httplib::Headers{{"Inference-Header-Content-Length", std::move(v)}}; };
    const std::string bin_header =
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}]})";
    const std::string floats(16, '\0');
    b.push_back({"header length not a number", m, bin_header + floats, header("abc"), 400});
    b.push_back({"header length negative", m, bin_header + floats, header("-5"), 400});
    b.push_back({"header length past the body", m, bin_header + floats, header("100000"), 400});
    b.push_back({"header length cuts the JSON", m, bin_header + floats, header("10"), 400});
    b.push_back({"truncated binary section", m, bin_header + floats.substr(0, 9),
                 header(std::to_string(bin_header.size())), 400});
    b.push_back({"binary section too long", m, bin_header + floats + "xx",
                 header(std::to_string(bin_header.size())), 400});
    const std::string short_header =
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":12}}]})";
    b.push_back({"binary size mismatching shape", m, short_header + floats.substr(0, 12),
                 header(std::to_string(short_header.size())), 400});
    b.push_back({"binary size negative", m,
                 R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":-16}}]})",
                 {}, 400});
    b.push_back({"binary without the header length", m, bin_header + floats, {}, 400});
    b.push_back({"body over the limit", m, std::string(300 * 1024, ' '), {}, 413});
    return b;
}

}  // namespace

TEST_CASE("server: the malformed-request battery gets protocol errors and the server stays up",
          "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    auto o = local_options(s.repo.root());
    o.max_body_bytes = 256 * 1024;
    s.start(o);
    auto c = s.client();
    const auto battery = rest_battery();
    REQUIRE(battery.size() >= 50);
    std::size_t rss_before = 0;
    for (int round = 0; round < 4; ++round) {
        if (round == 1) rss_before = resident_bytes();  // after the first round warmed up
        for (const auto& t : battery) {
            INFO(t.what);
            auto r = c.Post(t.path, t.headers, t.body, "application/json");
            REQUIRE(r);
            CHECK(r->status == t.status);
            if (t.status != 413 || r->body.size()) {
                auto doc = json::parse(r->body, nullptr, false);
                REQUIRE(doc.is_object());
                CHECK(doc.contains("error"));
                CHECK(!doc["error"].get<std::string>().empty());
            }
        }
    }
    const std::size_t rss_after = resident_bytes();
    CHECK(rss_after < rss_before + (std::size_t{16} << 20));
    // Still serving.
    auto r = c.Post("/v2/models/scale/infer", json_infer_body({1, 2, 3, 4}), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);

    // gRPC's share of the battery.
    auto stub = grpc_stub(s.server->grpc_port());
    auto call = [&](auto fill) {
        grpc::ClientContext ctx;
        inference::ModelInferRequest req;
        req.set_model_name("scale");
        auto* in = req.add_inputs();
        in->set_name("x");
        in->set_datatype("FP32");
        in->add_shape(1);
        in->add_shape(4);
        fill(req);
        inference::ModelInferResponse resp;
        return stub->ModelInfer(&ctx, req, &resp).error_code();
    };
    using R = inference::ModelInferRequest;
    const std::string f16(16, '\0');
    CHECK(call([](R&) {}) == grpc::StatusCode::INVALID_ARGUMENT);  // no contents
    CHECK(call([&](R& q) { q.add_raw_input_contents(f16.substr(0, 15)); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { q.add_raw_input_contents(f16); q.add_raw_input_contents(f16); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { q.mutable_inputs(0)->set_datatype("FP7"); q.add_raw_input_contents(f16); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { q.mutable_inputs(0)->set_shape(0, -3); q.add_raw_input_contents(f16); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { q.mutable_inputs(0)->set_shape(0, INT64_MAX); q.add_raw_input_contents(f16); }) == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(call([&](R& q) { q.set_model_name("../x"); q.add_raw_input_contents(f16); }) == grpc::StatusCode::NOT_FOUND);
    CHECK(call([&](R& q) { q.set_model_version("7"); q.add_raw_input_contents(f16); }) == grpc::StatusCode::NOT_FOUND);
    CHECK(call([&](R& q) { q.add_outputs()->set_name("nope"); q.add_raw_input_contents(f16); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { for (int i = 0; i < 3; ++i) q.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { (*q.mutable_parameters())["timeout"].set_string_param("x"); q.add_raw_input_contents(f16); }) == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call([&](R& q) { q.add_raw_input_contents(f16); }) == grpc::StatusCode::OK);
    CHECK(s.server->live());
}

TEST_CASE("server: a full queue answers 503 with Retry-After, a client that hangs up is cancelled",
          "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    // Requests wait up to 3 s for a batch of 64 to fill: the queue (2) fills deterministically.
    s.repo.config("scale", R"({"max_batch_size":64,"max_queue_delay_us":3000000,"max_queue_size":2})");
    s.start(local_options(s.repo.root()));

    // A raw connection that sends a request and hangs up.
    const std::string body = json_infer_body({1, 2, 3, 4});
    const std::string request = "POST /v2/models/scale/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                "application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    const int fd = send_raw(s.server->http_port(), request);
    REQUIRE(fd >= 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::close(fd);
    const auto t0 = std::chrono::steady_clock::now();
    bool cancelled = false;
    while (!cancelled && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)) {
        cancelled = s.server->metrics_text().find(
                        "dsinfer_server_responses_total{protocol=\"http\",code=\"cancelled\"} 1") !=
                    std::string::npos;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(cancelled);  // answered long before the 3 s batch delay

    // Two requests fill the queue; the third is refused at once.
    std::vector<std::thread> waiting;
    std::atomic<int> ok{0};
    for (int i = 0; i < 2; ++i)
        waiting.emplace_back([&] {
            auto c = s.client();
            auto r = c.Post("/v2/models/scale/infer", body, "application/json");
            if (r && r->status == 200) ++ok;
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto c = s.client();
    auto r = c.Post("/v2/models/scale/infer", body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(r->get_header_value("Retry-After") == "1");
    CHECK(json::parse(r->body)["error"].get<std::string>().find("queue") != std::string::npos);
    for (auto& t : waiting) t.join();
    CHECK(ok == 2);
    // A request whose timeout passes while queued: 504.
    r = c.Post("/v2/models/scale/infer",
               R"({"parameters":{"timeout":50000},"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]})",
               "application/json");
    REQUIRE(r);
    CHECK(r->status == 504);
}

TEST_CASE("server: bearer token on every route but health, over REST and gRPC", "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    auto o = local_options(s.repo.root());
    o.auth_token = "s3cret";
    s.start(o);
    auto c = s.client();
    CHECK(c.Get("/v2/health/ready")->status == 200);
    CHECK(c.Get("/v2")->status == 401);
    CHECK(c.Post("/v2/models/scale/infer", json_infer_body({1, 2, 3, 4}), "application/json")->status == 401);
    CHECK(c.Get("/v2", {{"Authorization", "Bearer wrong!"}})->status == 401);
    CHECK(c.Get("/v2", {{"Authorization", "Bearer s3cret"}})->status == 200);
    auto stub = grpc_stub(s.server->grpc_port());
    {
        grpc::ClientContext ctx;
        inference::ServerMetadataResponse r;
        CHECK(stub->ServerMetadata(&ctx, {}, &r).error_code() == grpc::StatusCode::UNAUTHENTICATED);
    }
    {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer s3cret");
        inference::ServerMetadataResponse r;
        CHECK(stub->ServerMetadata(&ctx, {}, &r).ok());
    }
}

TEST_CASE("server: TLS on both protocols", "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    const fs::path cert = s.repo.root() / "cert.pem", key = s.repo.root() / "key.pem";
    const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                            "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                            key.string() + " -out " + cert.string() + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
        WARN("SKIPPED: openssl could not make a test certificate");
        return;
    }
    auto o = local_options(s.repo.root());
    o.tls_cert = cert;
    o.tls_key = key;
    s.start(o);
    httplib::SSLClient c("127.0.0.1", s.server->http_port());
    c.enable_server_certificate_verification(false);
    auto r = c.Post("/v2/models/scale/infer", json_infer_body({1, 2, 3, 4}), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    httplib::Client plain("127.0.0.1", s.server->http_port());
    CHECK_FALSE(plain.Get("/v2/health/live"));  // plain HTTP is not answered on a TLS port

    std::ifstream f(cert);
    std::stringstream pem;
    pem << f.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        "localhost:" + std::to_string(s.server->grpc_port()), grpc::SslCredentials(ssl)));
    grpc::ClientContext ctx;
    inference::ServerLiveResponse live;
    CHECK(stub->ServerLive(&ctx, {}, &live).ok());
}

TEST_CASE("server: explicit model control through the repository API", "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    s.repo.add("other", 1, scale_model(5.f));
    auto o = local_options(s.repo.root());
    o.model_control = server::ModelControlMode::explicit_;
    o.load_models = {"scale"};
    s.start(o);
    auto c = s.client();
    CHECK(c.Get("/v2/models/other")->status == 404);
    CHECK(c.Post("/v2/repository/models/other/load", "", "application/json")->status == 200);
    CHECK(c.Get("/v2/models/other")->status == 200);
    CHECK(c.Post("/v2/repository/models/other/unload", "", "application/json")->status == 200);
    CHECK(c.Get("/v2/models/other")->status == 404);
    CHECK(c.Post("/v2/repository/models/ghost/load", "", "application/json")->status == 404);
    CHECK(c.Post("/v2/repository/models/..%2Fx/load", "", "application/json")->status >= 400);
    auto idx = json::parse(c.Post("/v2/repository/index", "", "application/json")->body);
    std::set<std::string> states;
    for (auto& e : idx) states.insert(e["name"].get<std::string>() + ":" + e["state"].get<std::string>());
    CHECK(states == std::set<std::string>{"other:UNAVAILABLE", "scale:READY"});
}

TEST_CASE("server: reloads under load lose no request, the drain answers every accepted one",
          "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    s.repo.config("scale", R"({"max_batch_size":8,"max_queue_delay_us":500})");
    auto o = local_options(s.repo.root());
    o.model_control = server::ModelControlMode::poll;
    o.repository_poll = std::chrono::milliseconds(50);
    s.start(o);

    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0};
    std::mutex seen_mutex;
    std::set<float> seen_scales;
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&] {
            auto c = s.client();
            while (!stop) {
                auto r = c.Post("/v2/models/scale/infer", json_infer_body({1, 1, 1, 1}),
                                "application/json");
                if (!r || r->status != 200) {
                    ++failed;
                    continue;
                }
                ++ok;
                const float y = json::parse(r->body)["outputs"][0]["data"][0].get<float>();
                std::lock_guard lock(seen_mutex);
                seen_scales.insert(y);
            }
        });
    // New versions (latest 1 served) and one rewrite of a served version's file.
    for (int v = 2; v <= 6; ++v) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        s.repo.add("scale", v, scale_model(static_cast<float>(v)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    s.repo.add("scale", 6, scale_model(60.f));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    stop = true;
    for (auto& t : clients) t.join();
    CHECK(failed == 0);
    CHECK(ok > 20);
    CHECK(seen_scales.count(1.f) == 1);
    CHECK(seen_scales.count(60.f) == 1);  // the rewritten file was reloaded
    CHECK(s.server->repository_index().size() == 1);

    // Drain under load: every request the server accepted gets its answer; the rest are
    // refused (503) or find the listener closed.
    std::atomic<int> accepted_ok{0}, refused{0}, other{0};
    stop = false;
    clients.clear();
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&] {
            auto c = s.client();
            while (!stop) {
                auto r = c.Post("/v2/models/scale/infer", json_infer_body({1, 1, 1, 1}),
                                "application/json");
                if (!r) continue;  // the listener closed: never accepted
                if (r->status == 200) ++accepted_ok;
                else if (r->status == 503) ++refused;
                else ++other;
            }
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(s.server->shutdown());
    stop = true;
    for (auto& t : clients) t.join();
    CHECK(accepted_ok > 0);
    CHECK(other == 0);
    CHECK(s.server->metrics_text().find("dsinfer_server_in_flight_requests 0") != std::string::npos);
}

TEST_CASE("server: cascade entries and the result cache from config.json", "[server]") {
    Running s;
    s.repo.add("small", 1, softmax_model(1.f, {0, 0, 0, 0}));
    s.repo.add("large", 1, softmax_model(1.f, {1, 0, 0, 0}));
    s.repo.config("cascade", R"({"platform":"dsinfer_cascade","cascade":{"small":"small","large":"large","output":"p","threshold":0.9,"output_is_probabilities":true}})");
    s.repo.config("small", R"({"result_cache":{"max_bytes":1048576,"ttl_ms":60000},"max_queue_delay_us":0})");
    s.start(local_options(s.repo.root()));
    auto c = s.client();
    auto meta = json::parse(c.Get("/v2/models/cascade")->body);
    CHECK(meta["platform"] == "dsinfer_cascade");
    CHECK(meta["outputs"][0]["name"] == "p");

    // Row 0 is confident (the small model answers), row 1 uniform (escalated: the large model's
    // bias shows in its answer).
    auto r = c.Post("/v2/models/cascade/infer", json_infer_body({20, 0, 0, 0, 0, 0, 0, 0}),
                    "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    auto p = json::parse(r->body)["outputs"][0]["data"];
    CHECK(p[0].get<float>() > 0.999f);
    CHECK(p[4].get<float>() == Approx(std::exp(1.f) / (std::exp(1.f) + 3.f)).epsilon(1e-5));
    CHECK(p[5].get<float>() == Approx(1.f / (std::exp(1.f) + 3.f)).epsilon(1e-5));
    auto m = c.Get("/metrics")->body;
    CHECK(m.find("dsinfer_cascade_rows_total{model=\"cascade\",version=\"1\",path=\"judged\"} 2") != std::string::npos);
    CHECK(m.find("dsinfer_cascade_rows_total{model=\"cascade\",version=\"1\",path=\"escalated\"} 1") != std::string::npos);

    // The result cache: the second identical request is answered from it (the batcher runs once).
    for (int i = 0; i < 2; ++i) {
        r = c.Post("/v2/models/small/infer", json_infer_body({1, 2, 3, 4}), "application/json");
        REQUIRE(r);
        CHECK(r->status == 200);
    }
    m = c.Get("/metrics")->body;
    CHECK(m.find("dsinfer_result_cache_lookups_total{model=\"small\",outcome=\"hit\"} 1") != std::string::npos);
    CHECK(m.find("dsinfer_result_cache_lookups_total{model=\"small\",outcome=\"miss\"} 1") != std::string::npos);
    // A different input misses.
    r = c.Post("/v2/models/small/infer", json_infer_body({1, 2, 3, 5}), "application/json");
    CHECK(r->status == 200);
    CHECK(c.Get("/metrics")->body.find("dsinfer_result_cache_lookups_total{model=\"small\",outcome=\"miss\"} 2") != std::string::npos);

    // A cascade over a missing member waits (listed unavailable) instead of failing the server.
    TempRepository lone;
    lone.add("small", 1, softmax_model(1.f, {0, 0, 0, 0}));
    lone.config("cascade", R"({"platform":"dsinfer_cascade","cascade":{"small":"small","large":"large","output":"p"}})");
    auto o = local_options(lone.root());
    o.model_control = server::ModelControlMode::poll;
    server::Server waiting(o);
    waiting.start();
    bool listed = false;
    for (const auto& e : waiting.repository_index())
        if (e.name == "cascade" && e.state == "UNAVAILABLE" &&
            e.reason.find("'large' is not served") != std::string::npos)
            listed = true;
    CHECK(listed);
}

TEST_CASE("server: a member's reload fails no request of a cascade over it", "[server]") {
    Running s;
    s.repo.add("small", 1, softmax_model(1.f, {0, 0, 0, 0}));
    s.repo.add("large", 1, softmax_model(1.f, {1, 0, 0, 0}));
    // The first stage waits 400 ms for its batch: the large model is reloaded meanwhile, so the
    // second stage goes to the replaced large engine, which must still answer it.
    s.repo.config("small", R"({"max_batch_size":64,"max_queue_delay_us":400000})");
    s.repo.config("cascade", R"({"platform":"dsinfer_cascade","cascade":{"small":"small","large":"large","output":"p","output_is_probabilities":true}})");
    auto o = local_options(s.repo.root());
    o.model_control = server::ModelControlMode::explicit_;
    o.load_models = {"small", "large", "cascade"};
    s.start(o);
    AsyncPost request(s, "/v2/models/cascade/infer", {0, 0, 0, 0});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s.repo.add("large", 1, softmax_model(1.f, {2, 0, 0, 0}));
    auto c = s.client();
    CHECK(c.Post("/v2/repository/models/large/load", "", "application/json")->status == 200);
    request.join();
    const auto& answer = *request.result;
    REQUIRE(answer.error() == httplib::Error::Success);
    INFO(answer->body);
    REQUIRE(answer->status == 200);
    // Answered by the large model it was escalated to: the one replaced.
    const float e = std::exp(1.f), e2 = std::exp(2.f);
    CHECK(json::parse(answer->body)["outputs"][0]["data"][0].get<float>() ==
          Approx(e / (e + 3.f)).epsilon(1e-5));
    // The next request reaches the new large model.
    auto r = c.Post("/v2/models/cascade/infer", json_infer_body({0, 0, 0, 0}), "application/json");
    REQUIRE(r->status == 200);
    CHECK(json::parse(r->body)["outputs"][0]["data"][0].get<float>() ==
          Approx(e2 / (e2 + 3.f)).epsilon(1e-5));
}

TEST_CASE("server: the drain runs what is queued at once instead of waiting for its batch",
          "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(1.f));
    // A request would wait 5 s for its batch to fill.
    s.repo.config("scale", R"({"max_batch_size":64,"max_queue_delay_us":5000000})");
    s.start(local_options(s.repo.root()));
    AsyncPost request(s, "/v2/models/scale/infer", {1, 2, 3, 4});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(s.server->shutdown());
    request.join();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
    const auto& answer = *request.result;
    REQUIRE(answer.error() == httplib::Error::Success);
    CHECK(answer->status == 200);
    CHECK(json::parse(answer->body)["outputs"][0]["data"][3] == 4.0);
}

TEST_CASE("server: a shutdown right after start never hangs", "[server]") {
    // cpp-httplib ignores stop() until its listening thread has started: the server waits for
    // it in start(). 30 start/stop pairs, each bounded by a watchdog.
    TempRepository repo;
    repo.add("scale", 1, scale_model(1.f));
    auto o = local_options(repo.root());
    o.grpc_port = -1;
    o.metrics_port = 0;
    auto f = std::async(std::launch::async, [&] {
        for (int i = 0; i < 30; ++i) {
            server::Server s(o);
            s.start();
            if (!s.shutdown()) return false;
        }
        return true;
    });
    REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    CHECK(f.get());
}

TEST_CASE("server: a model's config.json limits bound its requests, naming the limit", "[server]") {
    Running s;
    s.repo.add("small", 1, scale_model(2.f));
    s.repo.config(
        "small",
        R"({"max_queue_delay_us":0,"limits":{"max_tensor_elements":8,"max_request_bytes":24}})");
    s.repo.add("scale", 1, scale_model(3.f));  // the server's limits only
    s.repo.config("scale", R"({"max_queue_delay_us":0})");
    s.start(local_options(s.repo.root()));
    auto c = s.client();
    // Two rows (8 elements, 32 bytes): over small's 24 bytes, within its 8 elements.
    auto r = c.Post("/v2/models/small/infer", json_infer_body({1, 2, 3, 4, 5, 6, 7, 8}),
                    "application/json");
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK_THAT(r->body, Catch::Contains("limits.max_request_bytes"));
    CHECK_THAT(r->body, Catch::Contains("small"));
    // Three rows: 12 elements, over max_tensor_elements.
    r = c.Post("/v2/models/small/infer", json_infer_body(std::vector<float>(12, 1.f)),
               "application/json");
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK_THAT(r->body, Catch::Contains("limits.max_tensor_elements"));
    // One row is within both.
    r = c.Post("/v2/models/small/infer", json_infer_body({1, 2, 3, 4}), "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    // The other model takes the three rows (the server's limits are larger).
    r = c.Post("/v2/models/scale/infer", json_infer_body(std::vector<float>(12, 1.f)),
               "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    // gRPC is bounded alike.
    auto stub = grpc_stub(s.server->grpc_port());
    grpc::ClientContext ctx;
    inference::ModelInferRequest req;
    req.set_model_name("small");
    auto* in = req.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(3);
    in->add_shape(4);
    for (int i = 0; i < 12; ++i) in->mutable_contents()->add_fp32_contents(1.f);
    inference::ModelInferResponse resp;
    const grpc::Status st = stub->ModelInfer(&ctx, req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(st.error_message(), Catch::Contains("limits.max_tensor_elements"));
}

TEST_CASE("server: REST is event-driven: one I/O thread, many waiting requests, HTTP edges",
          "[server]") {
    Running s;
    s.repo.add("scale", 1, scale_model(2.f));
    // A batch forms after 400 ms or at 64 requests: every request below waits in the queue.
    s.repo.config("scale", R"({"max_batch_size":64,"max_queue_delay_us":400000})");
    auto o = local_options(s.repo.root());
    o.http_threads = 1;
    o.io_timeout = std::chrono::milliseconds(400);
    s.start(o);
    const int port = s.server->http_port();

    // 48 connections wait for their answers at once on the one I/O thread: they share a
    // batch (a thread-per-connection server with one worker would run them one by one, each
    // waiting out the queue delay).
    {
        std::vector<std::unique_ptr<AsyncPost>> posts;
        for (int i = 0; i < 48; ++i)
            posts.push_back(std::make_unique<AsyncPost>(s, "/v2/models/scale/infer",
                                                        std::vector<float>{float(i), 1, 2, 3}));
        for (int i = 0; i < 48; ++i) {
            posts[i]->join();
            REQUIRE(*posts[i]->result);
            REQUIRE((*posts[i]->result)->status == 200);
            CHECK(json::parse((*posts[i]->result)->body)["outputs"][0]["data"][0] == 2.0 * i);
        }
        const std::string m = s.server->metrics_text();
        const std::string count =
            metric_line(m, "dsinfer_batch_size_requests_count{model=\"scale\",version=\"1\"}");
        REQUIRE(!count.empty());
        CHECK(std::stoi(count.substr(count.rfind(' ') + 1)) <= 3);
    }

    const std::string body = json_infer_body({1, 2, 3, 4});
    auto post = [&](const std::string& extra) {
        std::string r =
            "POST /v2/models/scale/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
            "application/json\r\nContent-Length: ";
        r.append(std::to_string(body.size())).append("\r\n").append(extra).append("\r\n");
        return r;
    };
    // Two requests in one write (pipelining): two answers, in order.
    {
        const std::string both = post("") + body + post("Connection: close\r\n") + body;
        const std::string r = exchange_raw(port, both);
        const auto second = r.find("HTTP/1.1 200", 1);
        CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
        CHECK(second != std::string::npos);
    }
    // Expect: 100-continue is answered before the body is sent.
    {
        const int fd = send_raw(port, post("Expect: 100-continue\r\nConnection: close\r\n"));
        REQUIRE(fd >= 0);
        char buf[256];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        REQUIRE(n > 0);
        CHECK(std::string(buf, static_cast<std::size_t>(n)).rfind("HTTP/1.1 100", 0) == 0);
        REQUIRE(::send(fd, body.data(), body.size(), 0) == static_cast<ssize_t>(body.size()));
        std::string rest;
        for (ssize_t k; (k = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
            rest.append(buf, static_cast<std::size_t>(k));
        ::close(fd);
        CHECK(rest.find("HTTP/1.1 200") != std::string::npos);
    }
    // A header beyond the limit: 431 with the protocol's error body.
    {
        std::string big = "GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: ";
        big.append(70 * 1024, 'a').append("\r\nConnection: close\r\n\r\n");
        const std::string r = exchange_raw(port, big);
        CHECK(r.rfind("HTTP/1.1 431", 0) == 0);
        CHECK(r.find("\"error\"") != std::string::npos);
    }
    // Not HTTP: 400 naming the problem.
    {
        const std::string r = exchange_raw(port, "HELLO\x01 there\r\n\r\n");
        CHECK(r.rfind("HTTP/1.1 400", 0) == 0);
        CHECK(r.find("malformed HTTP request") != std::string::npos);
    }
    // A known route with the wrong method: 405 with Allow.
    {
        auto c = s.client();
        auto r = c.Get("/v2/models/scale/infer");
        REQUIRE(r);
        CHECK(r->status == 405);
        CHECK(r->get_header_value("Allow") == "POST");
        CHECK(c.Get("/v2/models/scale/frobnicate")->status == 404);
    }
    // While a request waits for the engine, the connection's next read is already posted (it
    // is also the hang-up watch). A request sent in that time is kept and answered after the
    // first, in order; once answered, the idle keep-alive connection is closed after the I/O
    // timeout like any other.
    {
        // Reads one answer (header and Content-Length body) from `fd` into `out`.
        auto read_answer = [](int fd, std::string& pending, std::string& out) {
            char buf[4096];
            for (;;) {
                const auto end = pending.find("\r\n\r\n");
                if (end != std::string::npos) {
                    const auto cl = pending.find("Content-Length: ");
                    REQUIRE(cl < end);
                    const std::size_t len = std::stoul(pending.substr(cl + 16));
                    if (pending.size() >= end + 4 + len) {
                        out = pending.substr(0, end + 4 + len);
                        pending.erase(0, end + 4 + len);
                        return true;
                    }
                }
                const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
                if (n <= 0) return false;
                pending.append(buf, static_cast<std::size_t>(n));
            }
        };
        const std::string second_body = json_infer_body({5, 6, 7, 8});
        std::string second =
            "POST /v2/models/scale/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
            "application/json\r\nContent-Length: ";
        second.append(std::to_string(second_body.size())).append("\r\n\r\n").append(second_body);
        const int fd = send_raw(port, post("") + body);
        REQUIRE(fd >= 0);
        // The first waits out the 400 ms queue delay; the second arrives meanwhile.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        REQUIRE(::send(fd, second.data(), second.size(), 0) == static_cast<ssize_t>(second.size()));
        std::string pending, a1, a2;
        REQUIRE(read_answer(fd, pending, a1));
        REQUIRE(read_answer(fd, pending, a2));
        CHECK(a1.rfind("HTTP/1.1 200", 0) == 0);
        CHECK(a2.rfind("HTTP/1.1 200", 0) == 0);
        CHECK(json::parse(a1.substr(a1.find("\r\n\r\n") + 4))["outputs"][0]["data"][0] == 2.0);
        CHECK(json::parse(a2.substr(a2.find("\r\n\r\n") + 4))["outputs"][0]["data"][0] == 10.0);
        // A third on the same connection after a wait: its next read was posted at once.
        REQUIRE(::send(fd, second.data(), second.size(), 0) == static_cast<ssize_t>(second.size()));
        std::string a3;
        REQUIRE(read_answer(fd, pending, a3));
        CHECK(a3.rfind("HTTP/1.1 200", 0) == 0);
        // Idle: closed by the server after the I/O timeout (400 ms), not at once.
        const auto t0 = std::chrono::steady_clock::now();
        char buf[64];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        const auto waited = std::chrono::steady_clock::now() - t0;
        ::close(fd);
        CHECK(n == 0);
        CHECK(waited >= std::chrono::milliseconds(300));
        CHECK(waited < std::chrono::seconds(5));
    }
    // A slow client (half a request header, then nothing) is closed after the I/O timeout,
    // and holds up nobody meanwhile.
    {
        const int fd = send_raw(port, "POST /v2/models/scale/infer HTTP/1.1\r\nHost: x\r\nConte");
        REQUIRE(fd >= 0);
        auto c = s.client();
        CHECK(c.Get("/v2/health/live")->status == 200);
        const auto t0 = std::chrono::steady_clock::now();
        char buf[64];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);  // the server's close
        const auto waited = std::chrono::steady_clock::now() - t0;
        ::close(fd);
        CHECK(n <= 0);
        CHECK(waited < std::chrono::seconds(5));
    }
}
