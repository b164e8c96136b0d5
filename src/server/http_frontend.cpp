// src/server/http_frontend.cpp — the REST half of the Open Inference Protocol on cpp-httplib
// (Debian's libcpp-httplib-dev): routes, bearer-token check, limits, the binary-tensor
// extension, the generate extension (plain and as Server-Sent Events), and cancellation when
// the client goes away.
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>  // Debian's build: CPPHTTPLIB_OPENSSL_SUPPORT from its pkg-config file
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "server/server_impl.hpp"

namespace dsinfer::server {

using json = nlohmann::json;

namespace {
void raise_listen_backlog(int port);
}  // namespace

class HttpFrontend {
public:
    HttpFrontend(Server::Impl& impl, bool metrics_only) : impl_(impl), metrics_only_(metrics_only) {
        const auto& o = impl.options;
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
        if (!o.tls_cert.empty())
            server_ = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
        else
#endif
            server_ = std::make_unique<httplib::Server>();
        if (!o.tls_cert.empty() && !server_->is_valid())
            throw Error(ErrorCode::invalid_argument,
                        "TLS: cannot use the certificate '" + o.tls_cert.string() +
                            "' and key '" + o.tls_key.string() + "'");
        configure();
    }

    int bind(const std::string& host, int port) {
        int bound = -1;
        if (port == 0) bound = server_->bind_to_any_port(host);
        else bound = server_->bind_to_port(host, port) ? port : -1;
        if (bound < 0)
            throw Error(ErrorCode::io_error,
                        "cannot listen on " + host + ":" + std::to_string(port) +
                            " (address in use or not allowed)");
        raise_listen_backlog(bound);
        thread_ = std::thread([this] {
            server_->listen_after_bind();
            listen_returned_.store(true);
        });
        // cpp-httplib's stop() does nothing until the listening thread has marked the server
        // running: a stop() right after start would leave that thread in accept() for good.
        while (!server_->is_running() && !listen_returned_.load())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return bound;
    }

    void stop() {
        server_->stop();
        if (thread_.joinable()) thread_.join();
    }

    ~HttpFrontend() { stop(); }

private:
    void configure();
    void handle_infer(const httplib::Request& req, httplib::Response& res,
                      const std::string& name, const std::string& version);
    void handle_generate(const httplib::Request& req, httplib::Response& res,
                         const std::string& name, const std::string& version, bool stream);
    void reply_error(httplib::Response& res, const ApiError& e) const {
        res.status = http_status(e.code);
        if (e.code == ApiCode::unavailable) res.set_header("Retry-After", "1");
        res.set_content(json_error_body(e.message), "application/json");
    }

    Server::Impl& impl_;
    bool metrics_only_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
    std::atomic<bool> listen_returned_{false};
};

namespace {

// The first of the process's open descriptors (a few hundred: /proc/self/fd, not every number
// up to RLIMIT_NOFILE) for which `match` holds; -1 when none does.
template <class Match>
int find_fd(Match match) {
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return -1;
    int found = -1;
    const int own = ::dirfd(dir);
    while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        const int fd = std::atoi(e->d_name);
        if (fd > 2 && fd != own && match(fd)) {
            found = fd;
            break;
        }
    }
    ::closedir(dir);
    return found;
}

// A socket address's port (-1 for other families); with `text`, also its address as text.
int port_of(const sockaddr_storage& a, std::string* text = nullptr) {
    char buf[INET6_ADDRSTRLEN] = {};
    int port = -1;
    if (a.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
        if (text) ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
        port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
        if (text) ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
        port = ntohs(v6->sin6_port);
    }
    if (text) *text = buf;
    return port;
}

// The connection a request arrived on, found by its endpoints among the process's sockets
// (cpp-httplib does not hand the socket to handlers): looked up once per connection and
// thread, then only verified. Used only while a handler waits, to notice a client that hung
// up and cancel its request.
int connection_fd(const httplib::Request& req) {
    struct Cached {
        int fd = -1;
        std::string addr;
        int port = -1, local_port = -1;
    };
    thread_local Cached cached;
    auto matches = [&](int fd) {
        sockaddr_storage peer{}, local{};
        socklen_t pl = sizeof(peer), ll = sizeof(local);
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0)
            return false;
        std::string addr;
        return port_of(peer, &addr) == req.remote_port && port_of(local) == req.local_port &&
               addr == req.remote_addr;
    };
    if (cached.fd >= 0 && cached.addr == req.remote_addr && cached.port == req.remote_port &&
        cached.local_port == req.local_port && matches(cached.fd))
        return cached.fd;
    const int fd = find_fd(matches);
    if (fd >= 0) cached = Cached{fd, req.remote_addr, req.remote_port, req.local_port};
    return fd;
}

// Debian's cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when the
// shared library was built): a burst of connections overflows it and their SYNs are retried
// after 1 s, then 3 s. listen() again on the bound socket raises the backlog (Linux updates it
// in place); the socket is found by its state and port.
void raise_listen_backlog(int port) {
    const int fd = find_fd([port](int fd) {
        int listening = 0;
        socklen_t len = sizeof(listening);
        sockaddr_storage local{};
        socklen_t ll = sizeof(local);
        return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
               ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0 &&
               port_of(local) == port;
    });
    if (fd >= 0) ::listen(fd, SOMAXCONN);
}

bool client_gone(int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// This worker thread's eventfd, which an inference's completion signals: the worker sleeps in
// one poll() on it and on the client's connection, woken once, by the answer or by a hang-up
// (a timed wait on the future woke every worker every few tens of milliseconds, and on two
// cores under 256 connections those wake-ups took CPU from the batches). -1 if none could be
// made (the caller then waits on the future).
int completion_eventfd() {
    struct Fd {
        int fd = ::eventfd(0, EFD_CLOEXEC);
        ~Fd() {
            if (fd >= 0) ::close(fd);
        }
    };
    thread_local Fd f;
    return f.fd;
}

// Waits until `efd` is signalled (then clears it), cancelling `cancel` if the client on `conn`
// hangs up meanwhile (the answer still comes: the request ends cancelled). False if poll()
// fails for another reason than a signal (the caller then waits on the answer's future).
bool wait_signalled(int efd, int conn, CancellationToken& cancel) {
    bool watching = conn >= 0;
    for (;;) {
        pollfd p[2] = {{efd, POLLIN, 0}, {conn, POLLRDHUP, 0}};
        const int n = ::poll(p, watching ? 2 : 1, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if ((p[0].revents & POLLIN) != 0) {
            std::uint64_t count = 0;
            while (::read(efd, &count, sizeof count) < 0 && errno == EINTR) {
            }
            return true;
        }
        if (watching && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
            cancel.cancel();
            watching = false;  // the answer (cancelled) still signals efd
        }
    }
}

}  // namespace

void HttpFrontend::configure() {
    auto& s = *server_;
    const auto& o = impl_.options;
    const std::size_t threads = o.http_threads > 0 ? static_cast<std::size_t>(o.http_threads) : 256;
    s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.set_payload_max_length(o.max_body_bytes);
    const auto io = std::chrono::duration_cast<std::chrono::microseconds>(o.io_timeout).count();
    s.set_read_timeout(static_cast<time_t>(io / 1000000), static_cast<time_t>(io % 1000000));
    s.set_write_timeout(static_cast<time_t>(io / 1000000), static_cast<time_t>(io % 1000000));
    // Responses go out in more than one write (headers, then body): without TCP_NODELAY,
    // Nagle's algorithm holds the second write for the client's delayed ACK (~40 ms a request
    // on Linux). Accepted sockets inherit it from the listener.
    s.set_tcp_nodelay(true);
    // A keep-alive connection holds its worker: after 100 requests it is closed (the client
    // reconnects), so connections beyond the worker count are served in turn.
    s.set_keep_alive_max_count(100);
    s.set_keep_alive_timeout(5);

    s.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(json_error_body(what), "application/json");
    });
    s.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        if (res.status == 404) message = "no route " + req.method + " " + req.path;
        else if (res.status == 413) message = "the request body exceeds the server's limit";
        else if (res.status == 405) message = "method not allowed";
        else message = "HTTP " + std::to_string(res.status);
        res.set_content(json_error_body(message), "application/json");
        return httplib::Server::HandlerResponse::Handled;
        }));

    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(impl_.metrics_text(), "text/plain; version=0.0.4");
    });
    if (metrics_only_) return;

    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        // A POST without a body and without Content-Length (`curl -X POST .../repository/index`,
        // as the protocol's examples write it) is refused by cpp-httplib 0.11 before routing
        // with a bare 400. It has no body: say so. (The request object is the server's own,
        // handed to this hook as const.)
        if (req.method == "POST" && !req.has_header("Content-Length") &&
            !req.has_header("Transfer-Encoding"))
            const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
        if (req.path.rfind("/v2/health/", 0) == 0) return httplib::Server::HandlerResponse::Unhandled;
        if (impl_.authorized(req.get_header_value("Authorization")))
            return httplib::Server::HandlerResponse::Unhandled;
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(json_error_body("missing or wrong bearer token"), "application/json");
        return httplib::Server::HandlerResponse::Handled;
    });

    s.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
        res.status = 200;
    });
    s.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
        // The protocol: 200 is true, a 4xx false.
        res.status = impl_.ready() ? 200 : 400;
        if (res.status != 200)
            res.set_content(json_error_body(impl_.draining.load() ? "draining" : "starting"),
                            "application/json");
    });
    s.Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(impl_.server_metadata_json(), "application/json");
    });
    auto metadata = [this](httplib::Response& res, const std::string& name,
                           const std::string& version) {
        std::string body;
        if (ApiError e = impl_.model_metadata_json(name, version, body); !e.ok())
            return reply_error(res, e);
        res.set_content(body, "application/json");
    };
    s.Get(R"(/v2/models/([^/]+))", [metadata](const httplib::Request& req, httplib::Response& res) {
        metadata(res, req.matches[1], "");
    });
    s.Get(R"(/v2/models/([^/]+)/versions/([^/]+))",
          [metadata](const httplib::Request& req, httplib::Response& res) {
              metadata(res, req.matches[1], req.matches[2]);
          });
    auto model_ready = [this](httplib::Response& res, const std::string& name,
                              const std::string& version) {
        if (!impl_.repository->find(name, version))
            return reply_error(res, ApiError{ApiCode::not_found,
                                             "model '" + name + "'" +
                                                 (version.empty() ? "" : " version " + version) +
                                                 " is not loaded"});
        res.status = impl_.ready() ? 200 : 400;
    };
    s.Get(R"(/v2/models/([^/]+)/ready)",
          [model_ready](const httplib::Request& req, httplib::Response& res) {
              model_ready(res, req.matches[1], "");
          });
    s.Get(R"(/v2/models/([^/]+)/versions/([^/]+)/ready)",
          [model_ready](const httplib::Request& req, httplib::Response& res) {
              model_ready(res, req.matches[1], req.matches[2]);
          });
    s.Post(R"(/v2/models/([^/]+)/infer)", [this](const httplib::Request& req, httplib::Response& res) {
        handle_infer(req, res, req.matches[1], "");
    });
    s.Post(R"(/v2/models/([^/]+)/versions/([^/]+)/infer)",
           [this](const httplib::Request& req, httplib::Response& res) {
               handle_infer(req, res, req.matches[1], req.matches[2]);
           });
    for (const bool stream : {false, true}) {
        const std::string route = stream ? "generate_stream" : "generate";
        s.Post("/v2/models/([^/]+)/" + route,
               [this, stream](const httplib::Request& req, httplib::Response& res) {
                   handle_generate(req, res, req.matches[1], "", stream);
               });
        s.Post("/v2/models/([^/]+)/versions/([^/]+)/" + route,
               [this, stream](const httplib::Request& req, httplib::Response& res) {
                   handle_generate(req, res, req.matches[1], req.matches[2], stream);
               });
    }
    s.Post("/v2/repository/index", [this](const httplib::Request&, httplib::Response& res) {
        json list = json::array();
        for (const auto& m : impl_.repository->index()) {
            json e = {{"name", m.name}, {"state", m.state}};
            if (!m.version.empty()) e["version"] = m.version;
            if (!m.reason.empty()) e["reason"] = m.reason;
            list.push_back(std::move(e));
        }
        res.set_content(list.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    });
    auto control = [this](const httplib::Request& req, httplib::Response& res, bool load) {
        if (ApiError e = impl_.control(req.matches[1], load); !e.ok()) return reply_error(res, e);
        res.set_content("{}", "application/json");
    };
    s.Post(R"(/v2/repository/models/([^/]+)/load)",
           [control](const httplib::Request& req, httplib::Response& res) { control(req, res, true); });
    s.Post(R"(/v2/repository/models/([^/]+)/unload)",
           [control](const httplib::Request& req, httplib::Response& res) { control(req, res, false); });
}

void HttpFrontend::handle_infer(const httplib::Request& req, httplib::Response& res,
                                const std::string& name, const std::string& version) {
    if (!valid_model_name(name))
        return reply_error(res, ApiError{ApiCode::not_found, "invalid model name"});
    if (!version.empty() && !parse_version(version))
        return reply_error(res, ApiError{ApiCode::not_found,
                                         "model versions are positive integers"});
    std::string_view body = req.body;
    std::size_t header_bytes = body.size();
    if (req.has_header("Inference-Header-Content-Length")) {
        const std::string v = req.get_header_value("Inference-Header-Content-Length");
        std::size_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || p != v.data() + v.size() || n > body.size())
            return reply_error(res, ApiError{ApiCode::bad_request,
                                             "Inference-Header-Content-Length '" + v.substr(0, 32) +
                                                 "' is not a length within the body (" +
                                                 std::to_string(body.size()) + " bytes)"});
        header_bytes = n;
    }
    InferRequest request;
    if (ApiError e = decode_json_request(body.substr(0, header_bytes), body.substr(header_bytes),
                                         impl_.limits, request);
        !e.ok()) {
        impl_.count(Protocol::http, e.code);
        return reply_error(res, e);
    }
    struct Outcome {
        ApiError error;
        std::vector<NamedTensor> outputs;
        std::string version;
    };
    auto promise = std::make_shared<std::promise<Outcome>>();
    std::future<Outcome> future = promise->get_future();
    CancellationToken cancel;
    std::vector<NamedTensor> inputs = std::move(request.inputs);
    const int efd = completion_eventfd();
    impl_.infer(Protocol::http, name, version, std::move(inputs), request, cancel,
                [promise, efd](ApiError e, std::vector<NamedTensor> out, std::string v) {
                    promise->set_value(Outcome{std::move(e), std::move(out), std::move(v)});
                    if (efd >= 0) {
                        const std::uint64_t one = 1;
                        while (::write(efd, &one, sizeof one) < 0 && errno == EINTR) {
                        }
                    }
                });
    // Wait for the answer, cancelling the request if the client hangs up meanwhile.
    if (efd < 0 || !wait_signalled(efd, connection_fd(req), cancel)) {
        // No eventfd: wait on the future, after a moment watching the connection.
        if (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
            const int fd = connection_fd(req);
            while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
                if (client_gone(fd)) cancel.cancel();
        }
    }
    Outcome outcome = future.get();
    if (!outcome.error.ok()) return reply_error(res, outcome.error);
    EncodedResponse encoded;
    if (ApiError e = encode_json_response(name, outcome.version, request, outcome.outputs, encoded);
        !e.ok())
        return reply_error(res, e);
    res.status = 200;
    if (encoded.header_bytes > 0) {
        res.set_header("Inference-Header-Content-Length", std::to_string(encoded.header_bytes));
        res.set_content(std::move(encoded.body), "application/octet-stream");
    } else {
        res.set_content(std::move(encoded.body), "application/json");
    }
}

namespace {

// How long a front end waits for a generation's next token before it looks at the connection
// again; right after a token, how soon it looks again for the end (which the Generator
// reports without a callback, just after the last token).
constexpr std::chrono::milliseconds kGenerateIdlePoll{20};
constexpr std::chrono::milliseconds kGenerateTokenPoll{1};

// generate_stream's body: the events as the tokens come, then the final one. The client is
// watched (a write that fails, or a hang-up seen on the connection) and its generation
// cancelled when it goes. Runs in one call of cpp-httplib's chunked content provider, on the
// connection's worker thread.
bool stream_events(Generation& gen, int fd, const std::string& name, const GenerateCall& call,
                   httplib::DataSink& sink) {
    auto write = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
    std::size_t sent = 0;
    bool open = true;
    std::vector<std::int64_t> fresh;
    auto poll = kGenerateIdlePoll;
    for (;;) {
        fresh.clear();
        const bool finished = gen.wait(poll, fresh);
        for (std::int64_t token : fresh) {
            if (open && !write(generate_token_event(name, gen.version(), call, sent, token))) {
                open = false;
                gen.cancel();
            }
            ++sent;
        }
        if (finished) break;
        poll = fresh.empty() ? kGenerateIdlePoll : kGenerateTokenPoll;
        if (open && client_gone(fd)) {
            open = false;
            gen.cancel();
        }
    }
    const GenerateResult& r = gen.result();
    if (!open) return false;  // cpp-httplib closes the connection
    // The result is complete: a token the feed had not handed over yet is sent from it.
    for (; sent < r.tokens.size(); ++sent)
        if (!write(generate_token_event(name, gen.version(), call, sent, r.tokens[sent])))
            return false;
    if (!write(generate_final_event(name, gen.version(), call, r, gen.outcome()))) return false;
    sink.done();
    return true;
}

}  // namespace

void HttpFrontend::handle_generate(const httplib::Request& req, httplib::Response& res,
                                   const std::string& name, const std::string& version,
                                   bool stream) {
    if (!valid_model_name(name))
        return reply_error(res, ApiError{ApiCode::not_found, "invalid model name"});
    if (!version.empty() && !parse_version(version))
        return reply_error(res,
                           ApiError{ApiCode::not_found, "model versions are positive integers"});
    auto call = std::make_shared<GenerateCall>();
    if (ApiError e = decode_generate_request(req.body, impl_.limits, *call); !e.ok()) {
        impl_.count(Protocol::http, e.code);
        return reply_error(res, e);
    }
    std::unique_ptr<Generation> gen;
    if (ApiError e = impl_.generate(Protocol::http, name, version, *call, gen); !e.ok())
        return reply_error(res, e);
    if (stream) {
        // Errors found before the first token (bad input, unknown model, a refusal) were
        // answered above with their status; from here the answer is 200 and the events say
        // how the generation ended. The provider runs after this handler returns, on this
        // thread; the Generation ends with the response (destroyed unanswered, it cancels).
        const int fd = connection_fd(req);
        std::shared_ptr<Generation> shared = std::move(gen);
        res.status = 200;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");  // proxies: pass each event on at once
        res.set_chunked_content_provider(
            "text/event-stream",  // exactly this type: cpp-httplib never compresses it
            [shared, fd, name, call](std::size_t, httplib::DataSink& sink) {
                return stream_events(*shared, fd, name, *call, sink);
            });
        return;
    }
    int fd = -1;
    bool watching = false;
    std::vector<std::int64_t> fresh;
    auto poll = kGenerateIdlePoll;
    while (!gen->wait(poll, fresh)) {
        poll = fresh.empty() ? kGenerateIdlePoll : kGenerateTokenPoll;
        fresh.clear();
        // After a moment, watch the connection and cancel if the client hung up.
        if (!watching) {
            fd = connection_fd(req);
            watching = true;
        }
        if (client_gone(fd)) gen->cancel();
    }
    const GenerateResult& r = gen->result();
    if (const ApiError& e = gen->outcome(); !e.ok()) return reply_error(res, e);
    res.status = 200;
    res.set_content(encode_generate_response(name, gen->version(), *call, r), "application/json");
}

std::unique_ptr<HttpFrontend, HttpDeleter> make_http_frontend(Server::Impl& impl,
                                                              bool metrics_only) {
    return std::unique_ptr<HttpFrontend, HttpDeleter>(new HttpFrontend(impl, metrics_only));
}
int http_bind(HttpFrontend& f, const std::string& host, int port) { return f.bind(host, port); }
void http_stop(HttpFrontend& f) { f.stop(); }
void http_destroy(HttpFrontend* f) { delete f; }

}  // namespace dsinfer::server
