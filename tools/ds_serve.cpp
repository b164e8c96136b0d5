// ds-serve — an Open Inference Protocol (KServe v2) server over REST and gRPC for a model
// repository (dsinfer/server.hpp; docs/SERVING.md), with the generate extension (REST) for
// decoder-only models.
//
//   ds-serve --model-repository DIR [--http-port 8000] [--grpc-port 8001] [--metrics-port P]
//            [--host 127.0.0.1] [--model-control-mode none|poll|explicit] [--load-model NAME]
//            [--repository-poll-secs S] [--auth-token-file FILE] [--tls-cert F --tls-key F]
//            [--http-threads N] [--http-nice N] [--max-body-bytes N] [--request-timeout-ms N]
//            [--drain-timeout-s S] [--max-batch-size N] [--max-queue-delay-us N]
//            [--threads N] [--port-file FILE]
//   ds-serve --list-routes
//
// SIGTERM or SIGINT: readiness turns false, new requests are answered unavailable, every
// accepted request is answered (up to --drain-timeout-s), then it exits 0 (1 when the drain
// timed out).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "dsinfer/server.hpp"
#include "tool_cli.hpp"

namespace {

constexpr const char* kProgram = "ds-serve";

const char* const kSynopsis =
    "usage: ds-serve --model-repository DIR [--http-port 8000] [--grpc-port 8001]\n"
    "                [--metrics-port P] [--host 127.0.0.1] [--model-control-mode "
    "none|poll|explicit]\n"
    "                [--load-model NAME]... [--repository-poll-secs S] [--auth-token-file FILE]\n"
    "                [--tls-cert FILE --tls-key FILE] [--http-threads N] [--http-nice N] "
    "[--max-body-bytes N]\n"
    "                [--max-tensor-elements N] [--request-timeout-ms N] [--drain-timeout-s S]\n"
    "                [--max-batch-size N] [--max-queue-delay-us N] [--threads N] [--port-file "
    "FILE]\n"
    "       ds-serve --list-routes\n"
    "       ds-serve --help | --version\n";

const char* const kDescription =
    "Serves the models of a repository folder (NAME/VERSION/model.onnx, optional\n"
    "NAME/config.json) over the KServe v2 / Open Inference Protocol: REST (HTTP/1.1, JSON\n"
    "tensors and the binary-tensor extension) and gRPC (inference.GRPCInferenceService),\n"
    "with dynamic batching, Prometheus metrics at /metrics, hot reload (poll mode or the\n"
    "repository API), a bearer token and TLS (docs/SERVING.md). A decoder-only model whose\n"
    "config.json has a \"generate\" section is served by dsinfer::Generator on the generate\n"
    "extension's routes: token ids in, token ids out, or one Server-Sent Event per token.\n"
    "\n"
    "It listens on 127.0.0.1 unless --host says otherwise. SIGTERM or SIGINT: readiness turns\n"
    "false, new requests are answered 503 / UNAVAILABLE, every accepted request is answered\n"
    "(up to --drain-timeout-s), then it exits.\n";

const char* const kExamples =
    "ds-serve --model-repository models\n"
    "    REST on 127.0.0.1:8000, gRPC on 127.0.0.1:8001, every model folder loaded\n"
    "ds-serve --model-repository /models --host 0.0.0.0 --model-control-mode poll \\\n"
    "        --auth-token-file /run/secrets/token --metrics-port 8002\n"
    "    in a container: all interfaces, reload on file change, a bearer token\n";

const char* const kExitStatus =
    "0  stopped by SIGTERM/SIGINT after every accepted request was answered\n"
    "1  the server could not start (repository, model, port, TLS files) or the drain timed out\n"
    "2  bad command line (nothing runs)\n";

const dsinfer::bench::ManPage kManPage{kProgram,
                                       "serve a model repository over the KServe v2 protocol",
                                       kSynopsis, kDescription, kExamples, kExitStatus};

std::string read_token(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw dsinfer::Error(dsinfer::ErrorCode::io_error, "cannot read the token file '" + path + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (t.empty())
        throw dsinfer::Error(dsinfer::ErrorCode::invalid_argument,
                             "the token file '" + path + "' is empty");
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app(kManPage.summary, kProgram);
    dsinfer::bench::use_man_page(app, kManPage, 30);
    app.allow_extras();  // reported below as "unknown option", in the tools' words
    dsinfer::server::ServerOptions o;
    std::string repository, control = "none", token_file, tls_cert, tls_key, port_file;
    double poll_secs = 2.0;
    int drain_s = 30;
    long long request_timeout_ms = 30000;
    std::size_t max_batch = o.batching.max_batch_size;
    long long queue_delay_us = o.batching.max_queue_delay.count();
    bool list_routes = false;
    app.add_flag("--list-routes", list_routes, "print the REST routes served and exit");
    app.add_option("--model-repository", repository, "the model repository folder");
    app.add_option("--host", o.host, "address to listen on (default: localhost only)")
        ->capture_default_str();
    app.add_option("--http-port", o.http_port, "REST port (0: ephemeral, -1: off)")
        ->capture_default_str();
    app.add_option("--grpc-port", o.grpc_port, "gRPC port (0: ephemeral, -1: off)")
        ->capture_default_str();
    app.add_option("--metrics-port", o.metrics_port,
                   "a separate port for GET /metrics (-1: only on the REST port)")
        ->capture_default_str();
    app.add_option("--model-control-mode", control,
                   "none: load every model at start; poll: and reload on file change; "
                   "explicit: load --load-model names, then the repository API")
        ->check(CLI::IsMember({"none", "poll", "explicit"}))
        ->capture_default_str();
    app.add_option("--load-model", o.load_models, "explicit mode: a model to load at start");
    app.add_option("--repository-poll-secs", poll_secs, "poll mode: seconds between scans")
        ->check(CLI::Range(0.05, 3600.0))
        ->capture_default_str();
    app.add_option("--auth-token-file", token_file,
                   "require 'Authorization: Bearer <token in this file>' (health routes exempt)");
    app.add_option("--tls-cert", tls_cert, "PEM certificate (with --tls-key): TLS for REST and gRPC");
    app.add_option("--tls-key", tls_key, "PEM private key");
    app.add_option("--http-threads", o.http_threads,
                   "REST I/O threads, each serving many connections (0: 2)")
        ->capture_default_str();
    app.add_option("--http-nice", o.http_nice,
                   "nice value of the REST I/O threads, below the engine's (0: unchanged)")
        ->check(CLI::Range(0, 19))
        ->capture_default_str();
    app.add_option("--max-body-bytes", o.max_body_bytes, "largest REST body / gRPC message")
        ->capture_default_str();
    app.add_option("--max-tensor-elements", o.max_tensor_elements,
                   "largest input tensor, in elements")
        ->capture_default_str();
    app.add_option("--request-timeout-ms", request_timeout_ms,
                   "deadline of requests that set no 'timeout' parameter (0: none)")
        ->check(CLI::Range(0LL, 86400000LL))
        ->capture_default_str();
    app.add_option("--drain-timeout-s", drain_s, "SIGTERM: how long in-flight requests may take")
        ->check(CLI::Range(0, 3600))
        ->capture_default_str();
    app.add_option("--max-batch-size", max_batch, "default dynamic batch cap (rows)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--max-queue-delay-us", queue_delay_us,
                   "default time a request may wait for its batch to fill")
        ->check(CLI::Range(0LL, 10000000LL))
        ->capture_default_str();
    app.add_option("--threads", o.num_threads, "intra-op threads per model (0: the processors)")
        ->capture_default_str();
    app.add_option("--port-file", port_file,
                   "write {\"http\":P,\"grpc\":P,\"metrics\":P} here once listening");
    dsinfer::bench::add_version_flag(app, kProgram);
    if (auto stop = dsinfer::bench::parse_command_line(app, kManPage, argc, argv)) return *stop;

    if (list_routes) {
        for (const auto& r : dsinfer::server::Server::http_routes()) std::cout << r << "\n";
        return 0;
    }
    if (repository.empty())
        return dsinfer::bench::command_line_error(kManPage, "--model-repository is required");

    // SIGTERM/SIGINT are taken by a thread of their own (sigwait), blocked everywhere else:
    // the drain runs on ordinary code, not in a signal handler.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    try {
        o.model_repository = repository;
        o.model_control = control == "poll"       ? dsinfer::server::ModelControlMode::poll
                          : control == "explicit" ? dsinfer::server::ModelControlMode::explicit_
                                                  : dsinfer::server::ModelControlMode::none;
        o.repository_poll = std::chrono::milliseconds(static_cast<long long>(poll_secs * 1000));
        if (!token_file.empty()) o.auth_token = read_token(token_file);
        o.tls_cert = tls_cert;
        o.tls_key = tls_key;
        o.request_timeout = std::chrono::milliseconds(request_timeout_ms);
        o.drain_timeout = std::chrono::seconds(drain_s);
        o.batching.max_batch_size = max_batch;
        o.batching.max_queue_delay = std::chrono::microseconds(queue_delay_us);

        dsinfer::server::Server server(o);
        server.start();
        if (!port_file.empty()) {
            std::ofstream f(port_file + ".tmp");
            f << "{\"http\":" << server.http_port() << ",\"grpc\":" << server.grpc_port()
              << ",\"metrics\":" << server.metrics_port() << "}\n";
            f.close();
            std::rename((port_file + ".tmp").c_str(), port_file.c_str());
        }
        int sig = 0;
        sigwait(&signals, &sig);
        std::fprintf(stderr, "ds-serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        const bool drained = server.shutdown();
        return drained ? 0 : 1;
    } catch (const dsinfer::Error& e) {
        std::cerr << "ds-serve: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "ds-serve: " << e.what() << "\n";
        return 1;
    }
}
