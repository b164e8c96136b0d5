// src/server/server.cpp — Server: options, lifecycle (start, poll, drain, stop), the request
// path both front ends use, metadata and metrics.
#include <algorithm>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "dsinfer/version.hpp"
#include "server/server_impl.hpp"

namespace dsinfer::server {

using json = nlohmann::json;

namespace {

Status check_options(const ServerOptions& o) {
    auto port_ok = [](int p) { return p >= -1 && p <= 65535; };
    if (o.model_repository.empty())
        return Status::error(ErrorCode::invalid_argument, "model_repository is empty");
    if (!port_ok(o.http_port) || !port_ok(o.grpc_port) || !port_ok(o.metrics_port))
        return Status::error(ErrorCode::invalid_argument,
                             "ports must be -1 (off), 0 (ephemeral) or 1..65535");
    if (o.http_port < 0 && o.grpc_port < 0)
        return Status::error(ErrorCode::invalid_argument,
                             "http_port and grpc_port are both off: nothing to serve");
    if (o.host.empty()) return Status::error(ErrorCode::invalid_argument, "host is empty");
    if (o.http_threads < 0 || o.http_threads > 256)
        return Status::error(ErrorCode::invalid_argument, "http_threads must be in [0, 256]");
    if (o.http_nice < 0 || o.http_nice > 19)
        return Status::error(ErrorCode::invalid_argument, "http_nice must be in [0, 19]");
    if (o.max_body_bytes < 1024)
        return Status::error(ErrorCode::invalid_argument, "max_body_bytes must be >= 1024");
    if (o.max_tensor_elements < 1)
        return Status::error(ErrorCode::invalid_argument, "max_tensor_elements must be >= 1");
    if (o.request_timeout.count() < 0 || o.io_timeout.count() <= 0 ||
        o.drain_timeout.count() < 0 || o.repository_poll.count() <= 0)
        return Status::error(ErrorCode::invalid_argument,
                             "timeouts must be non-negative (io_timeout and repository_poll "
                             "positive)");
    if (o.tls_cert.empty() != o.tls_key.empty())
        return Status::error(ErrorCode::invalid_argument,
                             "TLS needs both tls_cert and tls_key");
    if (o.num_threads < 0)
        return Status::error(ErrorCode::invalid_argument, "num_threads must be >= 0");
    DSINFER_RETURN_IF_ERROR(serving::BatchingEngine::validate(o.batching));
    return Status::ok();
}

RequestLimits limits_of(const ServerOptions& o) {
    RequestLimits l;
    l.max_tensor_elements = o.max_tensor_elements;
    l.max_total_input_bytes = o.max_body_bytes;
    return l;
}


}  // namespace

Server::Impl::Impl(ServerOptions o) : options(std::move(o)), limits(limits_of(options)) {}

void Server::Impl::log(const std::string& message) const {
    if (options.log) options.log(message);
    else std::fprintf(stderr, "ds-serve: %s\n", message.c_str());
}

RequestTimeout Server::Impl::timeout_of(std::optional<std::int64_t> requested_us) const {
    return RequestTimeout{
        requested_us,
        std::chrono::duration_cast<std::chrono::microseconds>(options.request_timeout).count()};
}

bool Server::Impl::authorized(std::string_view authorization) const noexcept {
    if (options.auth_token.empty()) return true;
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() != kBearer.size() + options.auth_token.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < kBearer.size(); ++i)
        diff |= static_cast<unsigned char>(authorization[i] ^ kBearer[i]);
    for (std::size_t i = 0; i < options.auth_token.size(); ++i)
        diff |= static_cast<unsigned char>(authorization[kBearer.size() + i] ^
                                           options.auth_token[i]);
    return diff == 0;
}

void Server::Impl::infer(Protocol protocol, const std::string& name, const std::string& version,
                         std::vector<NamedTensor> inputs, const InferRequest& request,
                         CancellationToken cancel, InferDone done) {
    if (!ready()) {
        count(protocol, ApiCode::unavailable);
        done(ApiError{ApiCode::unavailable, "the server is not ready (starting or draining)"},
             {}, {});
        return;
    }
    serving::RequestOptions ro;
    // The protocol's "priority": 1 is the most urgent, larger less; 0 or absent the model's
    // default (kDefaultPriority: ModelRepository::submit maps both onto the model's levels).
    ro.priority = request.priority && *request.priority > 0 ? *request.priority - 1
                                                             : kDefaultPriority;
    ro.cancel = std::move(cancel);
    in_flight.fetch_add(1);
    repository->submit(
        name, version, std::move(inputs), std::move(ro), timeout_of(request.timeout_us),
        [this, protocol, done = std::move(done)](ApiError e, std::vector<NamedTensor> out,
                                                 std::string v) {
            // Still queued when the drain ran out: the server stopped, the client did not.
            if (e.code == ApiCode::cancelled && draining.load())
                e = ApiError{ApiCode::unavailable,
                             "the server stopped (drain timeout) before the request ran"};
            count(protocol, e.code);
            done(std::move(e), std::move(out), std::move(v));
            if (in_flight.fetch_sub(1) == 1) {
                std::lock_guard lock(state_mutex);
                state_cv.notify_all();
            }
        });
}

ApiError Server::Impl::generate(Protocol protocol, const std::string& name,
                                const std::string& version, const GenerateCall& call,
                                std::unique_ptr<Generation>& out) {
    auto refuse = [&](ApiError e) {
        count(protocol, e.code);
        return e;
    };
    if (!ready())
        return refuse(
            ApiError{ApiCode::unavailable, "the server is not ready (starting or draining)"});
    GenerateRequest r;
    r.prompt = call.input_ids;
    r.max_tokens = call.max_tokens;
    r.sampling = call.sampling;
    r.stop_tokens = call.stop_token_ids;
    r.stop_at_eos = !call.ignore_eos;
    auto feed = std::make_shared<TokenFeed>();
    // Runs on the Generator's scheduler thread: it holds the feed, never the model (whose
    // last owner must not be that thread).
    r.on_token = [feed](std::int64_t token) {
        {
            std::lock_guard lock(feed->mutex);
            feed->tokens.push_back(token);
        }
        feed->cv.notify_all();
        return true;
    };
    GenerateSubmission s;
    if (ApiError e =
            repository->generate(name, version, call, std::move(r), timeout_of(call.timeout_us), s);
        !e.ok())
        return refuse(std::move(e));
    in_flight.fetch_add(1);
    const bool refused_at_once = s.handle.ready();
    out = std::make_unique<Generation>(*this, protocol, std::move(s), std::move(feed));
    // The Generator checks a request when it is submitted (the KV budget, ...): a refusal
    // is answered as an error, not as a stream that ends at once.
    if (refused_at_once && out->result().finish == FinishReason::error) {
        ApiError e = out->outcome();
        out.reset();
        return e;
    }
    return {};
}

Generation::~Generation() {
    if (answered_) return;
    cancel();
    (void)result();
}

bool Generation::wait(std::chrono::milliseconds timeout, std::vector<std::int64_t>& tokens) {
    {
        std::unique_lock lock(feed_->mutex);
        feed_->cv.wait_for(lock, timeout, [&] { return feed_->tokens.size() > taken_; });
        tokens.insert(tokens.end(), feed_->tokens.begin() + static_cast<std::ptrdiff_t>(taken_),
                      feed_->tokens.end());
        taken_ = feed_->tokens.size();
    }
    return s_.handle.ready();
}

const GenerateResult& Generation::result() {
    if (answered_) return result_;
    result_ = s_.handle.get();
    outcome_ = generation_outcome(result_, impl_.draining.load() || s_.model->draining());
    answered_ = true;
    impl_.count(protocol_, outcome_.code);
    s_.model->done(s_.ticket);
    if (impl_.in_flight.fetch_sub(1) == 1) {
        std::lock_guard lock(impl_.state_mutex);
        impl_.state_cv.notify_all();
    }
    return result_;
}

std::string Server::Impl::server_metadata_json() const {
    json doc = {{"name", "dsinfer"}, {"version", std::string(dsinfer::version())}};
    doc["extensions"] = Server::extensions();
    return doc.dump();
}

ApiError Server::Impl::model_metadata_json(const std::string& name, const std::string& version,
                                           std::string& out) const {
    auto sv = repository->find(name, version);
    if (!sv)
        return ApiError{ApiCode::not_found,
                        version.empty() ? "unknown model '" + name + "'"
                                        : "model '" + name + "' has no version '" + version +
                                              "' loaded"};
    json versions = json::array();
    for (auto v : repository->versions(name)) versions.push_back(std::to_string(v));
    auto tensors = [](const std::vector<IOInfo>& list) {
        json out = json::array();
        for (const IOInfo& io : list) {
            json shape = json::array();
            for (const Dim& d : io.shape.dims) shape.push_back(d.is_static() ? d.value : -1);
            out.push_back({{"name", io.name},
                           {"datatype", std::string(io.dtype ? protocol_dtype(*io.dtype) : "BYTES")},
                           {"shape", std::move(shape)}});
        }
        return out;
    };
    json doc{{"name", name},
             {"versions", std::move(versions)},
             {"platform", sv->platform},
             {"inputs", tensors(sv->inputs)},
             {"outputs", tensors(sv->outputs)}};
    if (sv->generator) {
        // Beyond the protocol's fields: what a client of the generate routes needs to know.
        const DecoderConfig& c = sv->generator->config();
        json g{{"form", c.form},
               {"vocab_size", c.vocab_size},
               {"max_positions", c.max_positions},
               {"max_sequences", sv->generator->options().max_sequences},
               {"kv_cache_bytes", sv->generator->metrics().kv_bytes}};
        if (c.eos_token) g["eos_token_id"] = *c.eos_token;
        doc["generate"] = std::move(g);
    }
    out = doc.dump(-1, ' ', false, json::error_handler_t::replace);
    return {};
}

std::string Server::Impl::metrics_text() const {
    std::string out = repository ? repository->prometheus() : std::string();
    out += "# HELP dsinfer_server_responses_total Inference responses by protocol and outcome.\n"
           "# TYPE dsinfer_server_responses_total counter\n";
    for (std::size_t p = 0; p < 2; ++p)
        for (std::size_t c = 0; c < kCodes; ++c) {
            const auto n = responses[p][c].load(std::memory_order_relaxed);
            if (n == 0) continue;
            out += "dsinfer_server_responses_total{protocol=\"";
            out += p == 0 ? "http" : "grpc";
            out += "\",code=\"" + std::string(api_code_name(static_cast<ApiCode>(c))) + "\"} " +
                   std::to_string(n) + "\n";
        }
    out += "# HELP dsinfer_server_in_flight_requests Accepted inference requests not yet answered.\n"
           "# TYPE dsinfer_server_in_flight_requests gauge\n"
           "dsinfer_server_in_flight_requests " + std::to_string(in_flight.load()) + "\n";
    out += "# HELP dsinfer_server_ready 1 when the server takes requests.\n"
           "# TYPE dsinfer_server_ready gauge\n"
           "dsinfer_server_ready " + std::string(ready() ? "1" : "0") + "\n";
    return out;
}

// ---- Server ----

Server::Server(ServerOptions options) {
    throw_if_error(check_options(options));
    impl_ = std::make_unique<Impl>(std::move(options));
}

Server::~Server() {
    if (impl_) shutdown();
}

void Server::start() {
    Impl& s = *impl_;
    if (s.started.load() || s.stopped)
        throw Error(ErrorCode::invalid_argument, "Server::start: already started");
    std::error_code ec;
    if (!std::filesystem::is_directory(s.options.model_repository, ec))
        throw Error(ErrorCode::invalid_argument,
                    "the model repository '" + s.options.model_repository.string() +
                        "' is not a folder");
    RepositoryOptions ro;
    ro.defaults.batching = s.options.batching;
    ro.defaults.num_threads = s.options.num_threads;
    ro.drain = s.options.drain_timeout;
    ro.log = [&s](const std::string& m) { s.log(m); };
    s.repository = std::make_unique<ModelRepository>(s.options.model_repository, ro);
    if (s.options.model_control == ModelControlMode::explicit_) {
        for (const auto& name : s.options.load_models) throw_if_error(s.repository->load(name));
    } else {
        Status st = s.repository->load_all();
        if (!st && s.options.model_control == ModelControlMode::none) throw Error(st);
    }
    if (s.options.grpc_port >= 0) {
        s.grpc = make_grpc_frontend(s);
        s.grpc_port = grpc_start(*s.grpc, s.options.host, s.options.grpc_port);
    }
    if (s.options.http_port >= 0) {
        s.http = make_http_frontend(s, false);
        s.http_port = http_bind(*s.http, s.options.host, s.options.http_port);
    }
    if (s.options.metrics_port >= 0) {
        s.metrics_http = make_http_frontend(s, true);
        s.metrics_port = http_bind(*s.metrics_http, s.options.host, s.options.metrics_port);
    }
    if (s.options.model_control == ModelControlMode::poll) {
        s.poller = std::thread([&s] {
            std::unique_lock lock(s.state_mutex);
            while (!s.stopped && !s.draining.load()) {
                s.state_cv.wait_for(lock, s.options.repository_poll);
                if (s.stopped || s.draining.load()) break;
                lock.unlock();
                s.repository->poll(true);
                lock.lock();
            }
        });
    }
    s.started.store(true);
    std::string where;
    if (s.http_port >= 0) where += " HTTP " + s.options.host + ":" + std::to_string(s.http_port);
    if (s.grpc_port >= 0) where += " gRPC " + s.options.host + ":" + std::to_string(s.grpc_port);
    if (s.metrics_port >= 0)
        where += " metrics " + s.options.host + ":" + std::to_string(s.metrics_port);
    s.log("serving " + std::to_string(s.repository->models().size()) + " model(s) on" + where);
}

int Server::http_port() const noexcept { return impl_->http_port; }
int Server::grpc_port() const noexcept { return impl_->grpc_port; }
int Server::metrics_port() const noexcept { return impl_->metrics_port; }
bool Server::live() const noexcept { return !impl_->stopped; }
bool Server::ready() const noexcept { return impl_->ready(); }

bool Server::shutdown() {
    Impl& s = *impl_;
    {
        std::unique_lock lock(s.state_mutex);
        if (s.stopped) return true;
        if (s.draining.exchange(true)) {
            // Another thread is draining: wait for it.
            s.state_cv.wait(lock, [&] { return s.stopped; });
            return true;
        }
    }
    s.state_cv.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + s.options.drain_timeout;
    // New requests are refused from here on (not ready). The batchers stop waiting for their
    // batches to fill: what is queued runs now, and what is still queued at the deadline is
    // answered (unavailable), so no front end waits for it: gRPC's Shutdown waits for every
    // started call, a REST worker for its answer.
    if (s.poller.joinable()) s.poller.join();
    bool drained = s.repository ? s.repository->shutdown(s.options.drain_timeout) : true;
    {
        std::unique_lock lock(s.state_mutex);
        drained = s.state_cv.wait_until(lock, deadline, [&] { return s.in_flight.load() == 0; }) &&
                  drained;
    }
    if (s.grpc) grpc_stop(*s.grpc, std::chrono::milliseconds(100));
    if (s.http) http_stop(*s.http);
    if (s.metrics_http) http_stop(*s.metrics_http);
    s.log(drained ? "stopped: every accepted request was answered"
                  : "stopped: the drain timeout passed; requests still queued were answered "
                    "unavailable (" + std::to_string(s.in_flight.load()) + " in flight)");
    {
        std::lock_guard lock(s.state_mutex);
        s.stopped = true;
    }
    s.state_cv.notify_all();
    return drained;
}

void Server::wait() {
    Impl& s = *impl_;
    std::unique_lock lock(s.state_mutex);
    s.state_cv.wait(lock, [&] { return s.stopped; });
}

std::vector<ModelStatus> Server::repository_index() const {
    return impl_->repository ? impl_->repository->index() : std::vector<ModelStatus>{};
}

ApiError Server::Impl::control(const std::string& name, bool load) {
    if (!repository) return ApiError{ApiCode::unavailable, "the server has not started"};
    if (options.model_control == ModelControlMode::none)
        return ApiError{ApiCode::unsupported,
                        "model control mode 'none': the repository API cannot load or unload "
                        "models (start with --model-control-mode explicit or poll)"};
    if (!valid_model_name(name))
        return ApiError{ApiCode::bad_request,
                        "invalid model name ([A-Za-z0-9_.-], not starting with '.')"};
    if (load ? !repository->has_folder(name) : !repository->has_model(name))
        return ApiError{ApiCode::not_found,
                        "model '" + name +
                            (load ? "' is not in the repository" : "' is not loaded")};
    return api_error(load ? repository->load(name) : repository->unload(name));
}

Status Server::load_model(const std::string& name) {
    return status_of(impl_->control(name, true));
}

Status Server::unload_model(const std::string& name) {
    return status_of(impl_->control(name, false));
}

std::string Server::metrics_text() const { return impl_->metrics_text(); }

std::vector<std::string> Server::http_routes() {
    return {"GET /v2/health/live",
            "GET /v2/health/ready",
            "GET /v2",
            "GET /v2/models/{name}",
            "GET /v2/models/{name}/versions/{version}",
            "GET /v2/models/{name}/ready",
            "GET /v2/models/{name}/versions/{version}/ready",
            "POST /v2/models/{name}/infer",
            "POST /v2/models/{name}/versions/{version}/infer",
            "POST /v2/models/{name}/generate",
            "POST /v2/models/{name}/versions/{version}/generate",
            "POST /v2/models/{name}/generate_stream",
            "POST /v2/models/{name}/versions/{version}/generate_stream",
            "POST /v2/repository/index",
            "POST /v2/repository/models/{name}/load",
            "POST /v2/repository/models/{name}/unload",
            "GET /metrics"};
}

std::vector<std::string> Server::extensions() {
    return {"binary_tensor_data", "generate", "model_repository", "parameters",
            "statistics_prometheus"};
}

}  // namespace dsinfer::server
