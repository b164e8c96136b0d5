// dsinfer/server.hpp — an Open Inference Protocol (KServe v2) server over REST and gRPC in
// front of a model repository (target dsinfer::server; the ds-serve tool is a command line
// around it).
//
// Purpose: a team that wants to serve models over the network embeds a Server (or runs
// ds-serve): it loads NAME/VERSION/model.onnx folders (with an optional NAME/config.json of
// batching, precision, threads, instances, version policy), serves each through the dynamic
// batcher of dsinfer/serving.hpp, speaks the protocol Triton, KServe, Seldon MLServer and
// OpenVINO Model Server speak (REST with JSON tensors and the binary-tensor extension; gRPC
// GRPCInferenceService with raw_input_contents), exports Prometheus metrics, reloads models
// when their files change or the repository API asks, and drains gracefully. docs/SERVING.md
// says what is served and how; docs/DEPLOY.md how to run many replicas.
// A host process should ignore SIGPIPE (signal(SIGPIPE, SIG_IGN), as ds-serve does): a client
// that closes its connection while a response is being written otherwise ends the process.
//
// Ownership/threading: Server is move-less and owns its listeners, threads and engines;
// every member is thread-safe. start() binds every port (or throws), then serves on
// background threads until shutdown(); the destructor shuts down.
//
// Usage:
//   dsinfer::server::ServerOptions o;
//   o.model_repository = "models";         // models/mlp/1/model.onnx ...
//   o.http_port = 8000; o.grpc_port = 8001;
//   dsinfer::server::Server server(o);
//   server.start();                          // throws dsinfer::Error on a bad repository or port
//   ...                                      // curl localhost:8000/v2/health/ready
//   server.shutdown();                       // not ready, stop accepting, answer in-flight
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/serving.hpp"
#include "dsinfer/status.hpp"

#if defined(_WIN32) && defined(DSINFER_SHARED)
#if defined(DSINFER_SERVER_BUILDING)
#define DSINFER_SERVER_API __declspec(dllexport)
#else
#define DSINFER_SERVER_API __declspec(dllimport)
#endif
#elif defined(DSINFER_SHARED)
#define DSINFER_SERVER_API __attribute__((visibility("default")))
#else
#define DSINFER_SERVER_API
#endif

namespace dsinfer::server {

/// When the repository's models are loaded (Triton's --model-control-mode).
enum class ModelControlMode : std::uint8_t {
    none,      ///< every model folder at start; no changes afterwards (the API's load/unload
               ///< are refused)
    poll,      ///< every model folder at start, then the folder is polled: changed files are
               ///< reloaded, new folders loaded, removed ones unloaded
    explicit_, ///< only the models named in ServerOptions::load_models at start; then the
               ///< repository API (POST /v2/repository/models/NAME/load|unload)
};

struct ServerOptions {
    /// The model repository: NAME/VERSION/model.onnx, optional NAME/config.json.
    std::filesystem::path model_repository;
    /// The address every listener binds: localhost unless told otherwise.
    std::string host = "127.0.0.1";
    /// Ports: 0 = an ephemeral port (http_port() etc. tell which), -1 = that listener off.
    int http_port = 8000;
    int grpc_port = 8001;
    int metrics_port = -1;  ///< /metrics is always on the HTTP port too
    ModelControlMode model_control = ModelControlMode::none;
    std::chrono::milliseconds repository_poll{2000};  ///< poll mode's interval
    std::vector<std::string> load_models;              ///< explicit mode: loaded at start
    /// When non-empty, every route but the health routes (REST /v2/health/*, gRPC ServerLive,
    /// ServerReady) needs "Authorization: Bearer <token>" (gRPC metadata "authorization").
    std::string auth_token;
    /// TLS for REST and gRPC when both are given (PEM files).
    std::filesystem::path tls_cert, tls_key;
    /// REST I/O threads: event-driven, each serves any number of connections (a request
    /// waiting for its batch holds no thread). 0 = 2.
    int http_threads = 0;
    /// The REST I/O threads' nice value (0-19; 0 leaves it), below the engine's compute
    /// threads: a parallel kernel waits for its slowest thread, so an I/O thread that
    /// preempts one of them idles every core of the batch (docs/SERVING.md "Measured").
    int http_nice = 10;
    std::size_t max_body_bytes = std::size_t{64} << 20;  ///< REST body / gRPC message
    std::int64_t max_tensor_elements = std::int64_t{1} << 26;
    /// The deadline of a request that names no "timeout" parameter (0 = none): a request
    /// still queued at its deadline is answered deadline_exceeded.
    std::chrono::milliseconds request_timeout{30000};
    /// A REST client must send each request (headers and body) within this and read the
    /// response within it: slow clients do not hold workers.
    std::chrono::milliseconds io_timeout{10000};
    /// shutdown(): how long in-flight requests may take.
    std::chrono::milliseconds drain_timeout{30000};
    /// Defaults for models without a config.json setting.
    serving::BatchingOptions batching{};
    int num_threads = 0;  ///< each model's EngineOptions::num_threads (0: the processors)
    /// Log lines (start, loads, errors); empty = stderr.
    std::function<void(const std::string&)> log;
};

/// One line of the repository index.
struct ModelStatus {
    std::string name;
    std::string version;  ///< "" for a model not loaded
    std::string state;    ///< "READY" or "UNAVAILABLE"
    std::string reason;   ///< why not ready
};

class DSINFER_SERVER_API Server {
public:
    /// Checks the options (invalid_argument naming the field; throws dsinfer::Error).
    explicit Server(ServerOptions options);
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;
    ~Server();

    /// Loads the repository (per the control mode) and starts every listener. Throws
    /// dsinfer::Error: io_error when a port cannot be bound, invalid_argument for a missing
    /// repository or a model that fails to load in mode none.
    void start();
    /// Ports bound by start() (-1 for a listener that is off).
    int http_port() const noexcept;
    int grpc_port() const noexcept;
    int metrics_port() const noexcept;

    /// Graceful stop: readiness turns false, new requests are answered unavailable, requests
    /// already accepted are answered (up to ServerOptions::drain_timeout), then the listeners
    /// and engines stop. Idempotent; true when everything in flight was answered in time.
    bool shutdown();
    /// Blocks until shutdown() has finished.
    void wait();

    bool live() const noexcept;
    bool ready() const noexcept;
    std::vector<ModelStatus> repository_index() const;
    Status load_model(const std::string& name);
    Status unload_model(const std::string& name);
    /// The Prometheus document GET /metrics serves.
    std::string metrics_text() const;

    /// Every REST route served, "METHOD PATH" with {name}/{version} placeholders.
    static std::vector<std::string> http_routes();
    /// The protocol extensions ServerMetadata names.
    static std::vector<std::string> extensions();

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::server
