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
#include <vector>

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

class Generation;

/// Tokens handed from a Generator's scheduler thread (the request's on_token) to the front end
/// thread that answers the request.
struct TokenFeed {
    std::mutex mutex;
    std::condition_variable cv;  ///< a token was added
    std::vector<std::int64_t> tokens;
};

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
    /// A request's timeout parameter with the server's default (the model's limits decide:
    /// request_deadline).
    RequestTimeout timeout_of(std::optional<std::int64_t> requested_us) const;
    bool authorized(std::string_view authorization) const noexcept;
    /// One inference: `done` is called exactly once (on a scheduler thread, or before infer
    /// returns for an immediate rejection).
    void infer(Protocol protocol, const std::string& name, const std::string& version,
               std::vector<NamedTensor> inputs, const InferRequest& request,
               CancellationToken cancel, InferDone done);
    /// One generation (the generate extension): refused unless ready; resolves the
    /// generative model and submits (ModelRepository::generate) with the request's deadline
    /// ("timeout", or request_timeout) and a token feed. A refusal, by the repository or at
    /// once by the Generator, is returned (and counted); otherwise `out` holds the running
    /// generation.
    ApiError generate(Protocol protocol, const std::string& name, const std::string& version,
                      const GenerateCall& call, std::unique_ptr<Generation>& out);
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

/// One generation in flight (Server::Impl::generate): an accepted request until its result has
/// been read. Destroying it before that cancels the generation and waits for the Generator to
/// let it go, so no sequence outlives its request (a client that hung up, a stream whose
/// provider never ran).
///
/// Threading: used by one front end thread at a time.
class Generation {
public:
    Generation(Server::Impl& impl, Protocol protocol, GenerateSubmission submission,
               std::shared_ptr<TokenFeed> feed)
        : impl_(impl), protocol_(protocol), s_(std::move(submission)), feed_(std::move(feed)) {}
    ~Generation();
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;

    const std::string& version() const noexcept { return s_.version; }
    /// Waits up to `timeout` for tokens not taken yet and appends them to `tokens`; true once
    /// the generation has finished (result() does not wait then).
    bool wait(std::chrono::milliseconds timeout, std::vector<std::int64_t>& tokens);
    /// Stops the generation at the Generator's next step (the client went away).
    void cancel() { s_.handle.cancel(); }
    /// The result, waiting for it; the first call answers the request (counted by its
    /// outcome, no longer in flight, its ticket returned to the model).
    const GenerateResult& result();
    /// generation_outcome() of the result (waiting for it).
    const ApiError& outcome() {
        (void)result();
        return outcome_;
    }

private:
    Server::Impl& impl_;
    Protocol protocol_;
    GenerateSubmission s_;
    std::shared_ptr<TokenFeed> feed_;
    std::size_t taken_ = 0;
    bool answered_ = false;
    GenerateResult result_;
    ApiError outcome_;
};

}  // namespace dsinfer::server
