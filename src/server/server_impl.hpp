// src/server/server_impl.hpp — what the Server's front ends (http_frontend.cpp,
// grpc_frontend.cpp) share: the repository, the request path, counters and the lifecycle.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "dsinfer/cancellation.hpp"
#include "dsinfer/server.hpp"
#include "server/model_repository.hpp"
#include "server/protocol.hpp"

namespace dsinfer::server {

class HttpFrontend;  // http_frontend.cpp
class GrpcFrontend;  // grpc_frontend.cpp

void http_destroy(HttpFrontend* f);
void grpc_destroy(GrpcFrontend* f);
struct HttpDeleter {
    void operator()(HttpFrontend* f) const { http_destroy(f); }
};
struct GrpcDeleter {
    void operator()(GrpcFrontend* f) const { grpc_destroy(f); }
};
std::unique_ptr<HttpFrontend, HttpDeleter> make_http_frontend(Server::Impl& impl,
                                                              bool metrics_only);
int http_bind(HttpFrontend& f, const std::string& host, int port);  // the port, or throws
void http_stop(HttpFrontend& f);
std::unique_ptr<GrpcFrontend, GrpcDeleter> make_grpc_frontend(Server::Impl& impl);
int grpc_start(GrpcFrontend& f, const std::string& host, int port);  // the port, or throws
void grpc_stop(GrpcFrontend& f, std::chrono::milliseconds deadline);

enum class Protocol : std::uint8_t { http = 0, grpc = 1 };

struct Server::Impl {
    explicit Impl(ServerOptions o);

    ServerOptions options;
    RequestLimits limits;
    std::unique_ptr<ModelRepository> repository;
    std::unique_ptr<HttpFrontend, HttpDeleter> http, metrics_http;
    std::unique_ptr<GrpcFrontend, GrpcDeleter> grpc;
    int http_port = -1, grpc_port = -1, metrics_port = -1;

    std::atomic<bool> started{false};
    std::atomic<bool> draining{false};
    std::atomic<std::int64_t> in_flight{0};  ///< accepted inference requests not yet answered

    std::mutex state_mutex;
    std::condition_variable state_cv;  ///< in_flight reaching 0, stopped, poller wake-up
    bool stopped = false;
    std::thread poller;

    /// Responses by protocol and ApiCode (the server's own counters in /metrics).
    static constexpr std::size_t kCodes = static_cast<std::size_t>(ApiCode::internal) + 1;
    std::array<std::array<std::atomic<std::uint64_t>, kCodes>, 2> responses{};

    void log(const std::string& message) const;
    bool ready() const noexcept { return started.load() && !draining.load(); }
    /// Checks an Authorization value ("Bearer <token>") in constant time; true when no token
    /// is configured.
    bool authorized(std::string_view authorization) const noexcept;
    /// One inference: `done` is called exactly once (on a scheduler thread, or before infer
    /// returns for an immediate rejection).
    void infer(Protocol protocol, const std::string& name, const std::string& version,
               std::vector<NamedTensor> inputs, const InferRequest& request,
               CancellationToken cancel, InferDone done);
    void count(Protocol protocol, ApiCode code) noexcept {
        responses[static_cast<std::size_t>(protocol)][static_cast<std::size_t>(code)]
            .fetch_add(1, std::memory_order_relaxed);
    }
    std::string metrics_text() const;
    /// The repository API: load (or unload) `name` where the control mode allows it;
    /// not_found for a folder the repository lacks (a model not loaded).
    ApiError control(const std::string& name, bool load);
    std::string server_metadata_json() const;
    /// GET /v2/models/NAME[/versions/V] as JSON; not_found when unknown.
    ApiError model_metadata_json(const std::string& name, const std::string& version,
                                 std::string& out) const;
};

}  // namespace dsinfer::server
