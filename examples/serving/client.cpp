// dsinfer-serve-client: a client of ds-serve (or any Open Inference Protocol server) over both
// protocols, and a bounded load generator for them.
//
//   dsinfer-serve-client --protocol rest|grpc [--host 127.0.0.1] [--port P] --model NAME
//                        [--input NAME] [--shape 1,1024] [--token T]
//       one request of random float32 data; prints the outputs' names, shapes and first values.
//   ... --load --concurrency N --duration S [--json]
//       N clients, each sending one request and waiting for its answer (so at most N are in
//       flight: a bounded, closed-loop load), for S seconds; prints requests/s, latency
//       percentiles and errors by status.
//
// REST requests use the binary-tensor extension (JSON header + raw floats); gRPC requests use
// raw_input_contents. The client needs nothing of dsinfer but the protocol: cpp-httplib, gRPC++
// and stubs generated from src/server/proto/open_inference.proto.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "open_inference.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Options {
    std::string protocol = "rest", host = "127.0.0.1", model, input = "x", shape = "1,4", token;
    int port = 0;
    bool load = false, as_json = false;
    int concurrency = 8;
    double duration = 10.0;
};

std::vector<std::int64_t> parse_shape(const std::string& s) {
    std::vector<std::int64_t> dims;
    std::stringstream ss(s);
    for (std::string d; std::getline(ss, d, ',');) dims.push_back(std::stoll(d));
    return dims;
}

// One client: sends the same request body again and again.
class Client {
public:
    Client(const Options& o, const std::vector<float>& x, const std::vector<std::int64_t>& shape)
        : o_(o) {
        if (o.protocol == "rest") {
            http_ = std::make_unique<httplib::Client>(o.host, o.port);
            http_->set_read_timeout(60, 0);
            http_->set_tcp_nodelay(true);
            json header = {{"inputs", {{{"name", o.input}, {"datatype", "FP32"}, {"shape", shape},
                                        {"parameters", {{"binary_data_size", x.size() * 4}}}}}},
                           {"parameters", {{"binary_data_output", true}}}};
            const std::string h = header.dump();
            body_ = h;
            body_.append(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
            headers_ = {{"Inference-Header-Content-Length", std::to_string(h.size())}};
            if (!o.token.empty()) headers_.emplace("Authorization", "Bearer " + o.token);
        } else {
            grpc::ChannelArguments args;
            args.SetMaxReceiveMessageSize(-1);
            // One connection per client, as separate callers would have (gRPC otherwise shares
            // one connection among channels to the same address).
            args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
            stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
                o.host + ":" + std::to_string(o.port), grpc::InsecureChannelCredentials(), args));
            request_.set_model_name(o.model);
            auto* in = request_.add_inputs();
            in->set_name(o.input);
            in->set_datatype("FP32");
            for (auto d : shape) in->add_shape(d);
            request_.add_raw_input_contents(reinterpret_cast<const char*>(x.data()),
                                            x.size() * sizeof(float));
        }
    }

    /// One request: "ok" or the error's status; fills `outputs` for a successful one when asked.
    std::string send(std::vector<std::pair<std::string, std::vector<float>>>* outputs = nullptr) {
        if (http_) {
            auto r = http_->Post("/v2/models/" + o_.model + "/infer", headers_, body_,
                                 "application/octet-stream");
            if (!r) return "connection:" + httplib::to_string(r.error());
            if (r->status != 200) return "http:" + std::to_string(r->status);
            if (outputs) {
                const std::size_t n = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
                auto h = json::parse(r->body.substr(0, n));
                std::size_t off = n;
                for (const auto& out : h["outputs"]) {
                    const std::size_t bytes = out["parameters"]["binary_data_size"];
                    std::vector<float> v(bytes / 4);
                    std::memcpy(v.data(), r->body.data() + off, bytes);
                    off += bytes;
                    outputs->emplace_back(out["name"].get<std::string>() + " " + out["shape"].dump(), std::move(v));
                }
            }
            return "ok";
        }
        grpc::ClientContext ctx;
        if (!o_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + o_.token);
        inference::ModelInferResponse resp;
        const grpc::Status st = stub_->ModelInfer(&ctx, request_, &resp);
        if (!st.ok()) return "grpc:" + std::to_string(static_cast<int>(st.error_code()));
        if (outputs)
            for (int i = 0; i < resp.outputs_size(); ++i) {
                std::string shape = "[";
                for (int d = 0; d < resp.outputs(i).shape_size(); ++d)
                    shape += (d ? "," : "") + std::to_string(resp.outputs(i).shape(d));
                std::vector<float> v(resp.raw_output_contents(i).size() / 4);
                std::memcpy(v.data(), resp.raw_output_contents(i).data(), v.size() * 4);
                outputs->emplace_back(resp.outputs(i).name() + " " + shape + "]", std::move(v));
            }
        return "ok";
    }

private:
    const Options& o_;
    std::unique_ptr<httplib::Client> http_;
    std::string body_;
    httplib::Headers headers_;
    std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
    inference::ModelInferRequest request_;
};

double percentile(std::vector<double>& v, double q) {
    if (v.empty()) return 0.0;
    const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"dsinfer-serve-client: one request or a bounded load over REST or gRPC"};
    Options o;
    app.add_option("--protocol", o.protocol)->check(CLI::IsMember({"rest", "grpc"}));
    app.add_option("--host", o.host);
    app.add_option("--port", o.port, "default: 8000 (rest) or 8001 (grpc)");
    app.add_option("--model", o.model)->required();
    app.add_option("--input", o.input, "the input's name");
    app.add_option("--shape", o.shape, "the input's shape, e.g. 1,1024");
    app.add_option("--token", o.token, "bearer token");
    app.add_flag("--load", o.load, "send a bounded closed-loop load");
    app.add_option("--concurrency", o.concurrency)->check(CLI::Range(1, 4096));
    app.add_option("--duration", o.duration, "seconds")->check(CLI::Range(0.1, 3600.0));
    app.add_flag("--json", o.as_json, "print one JSON object");
    CLI11_PARSE(app, argc, argv);
    if (o.port == 0) o.port = o.protocol == "rest" ? 8000 : 8001;

    const auto shape = parse_shape(o.shape);
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> x(static_cast<std::size_t>(n));
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& v : x) v = u(rng);

    if (!o.load) {
        Client c(o, x, shape);
        std::vector<std::pair<std::string, std::vector<float>>> outputs;
        const std::string st = c.send(&outputs);
        if (st != "ok") {
            std::fprintf(stderr, "request failed: %s\n", st.c_str());
            return 1;
        }
        for (const auto& [name, v] : outputs) {
            std::printf("%s:", name.c_str());
            for (std::size_t i = 0; i < std::min<std::size_t>(v.size(), 8); ++i) std::printf(" %g", v[i]);
            std::printf("%s\n", v.size() > 8 ? " ..." : "");
        }
        return 0;
    }

    std::vector<std::vector<double>> latencies(static_cast<std::size_t>(o.concurrency));
    std::mutex errors_mutex;
    std::map<std::string, std::uint64_t> errors;
    std::atomic<bool> stop{false};
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < o.concurrency; ++i)
        threads.emplace_back([&, i] {
            Client c(o, x, shape);
            auto& lat = latencies[static_cast<std::size_t>(i)];
            while (!stop.load(std::memory_order_relaxed)) {
                const auto s = Clock::now();
                const std::string st = c.send();
                const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
                if (st == "ok") lat.push_back(ms);
                else {
                    std::lock_guard lock(errors_mutex);
                    ++errors[st];
                }
            }
        });
    std::this_thread::sleep_for(std::chrono::duration<double>(o.duration));
    stop = true;
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    std::uint64_t error_count = 0;
    for (const auto& [k, v] : errors) error_count += v;
    const double rps = static_cast<double>(all.size()) / seconds;
    const double p50 = percentile(all, 0.50), p99 = percentile(all, 0.99),
                 p999 = percentile(all, 0.999);
    if (o.as_json) {
        json j = {{"protocol", o.protocol}, {"concurrency", o.concurrency}, {"seconds", seconds},
                  {"ok", all.size()}, {"errors", error_count}, {"requests_per_s", rps},
                  {"p50_ms", p50}, {"p99_ms", p99}, {"p999_ms", p999}, {"errors_by_status", errors}};
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("%s, %d clients, %.1f s: %zu ok, %llu errors, %.0f requests/s, p50 %.2f ms, "
                    "p99 %.2f ms, p99.9 %.2f ms\n",
                    o.protocol.c_str(), o.concurrency, seconds, all.size(),
                    static_cast<unsigned long long>(error_count), rps, p50, p99, p999);
        for (const auto& [k, v] : errors) std::printf("  %s: %llu\n", k.c_str(), static_cast<unsigned long long>(v));
    }
    return error_count == 0 ? 0 : 3;
}
