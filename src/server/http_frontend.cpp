// src/server/http_frontend.cpp — the REST half of the Open Inference Protocol on Boost.Beast
// over Asio (Debian's libboost-dev, header-only; TLS through OpenSSL): routes, bearer-token
// check, limits, the binary-tensor extension, the generate extension (plain and as
// Server-Sent Events), and cancellation when the client goes away.
//
// Event-driven: a few I/O threads (ServerOptions::http_threads) serve every connection, each
// connection on its own strand. A request is read, decoded and submitted on that strand and
// the thread moves on; the engine's completion posts the answer back to the strand, which
// encodes and writes it. No thread waits for an inference, so a batch's answers cost one
// wake-up of the I/O thread, not one per connection (the thread-per-connection server this
// replaced spent about 20 system calls and two thread switches a request: docs/SERVING.md).
// Generations, whose answers come token by token, each get a thread of their own that waits
// on the token feed and posts what it has to write.
//
// Per request a connection costs one read that finds the request, one that finds nothing yet
// and one write: while a request waits for the engine, the read of the next request is
// already posted and doubles as the hang-up watch (it ends with an end of stream when the
// client goes away); time limits are deadlines that one frontend-wide sweep timer checks,
// not a timer armed and cancelled per operation.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <variant>

#include "server/server_impl.hpp"

namespace dsinfer::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
using Strand = net::strand<net::io_context::executor_type>;

/// The largest request header (request line and fields) a client may send: 431 beyond it.
constexpr std::uint32_t kMaxHeaderBytes = 64 * 1024;
/// Each connection's read buffer to start with (it grows for larger requests).
constexpr std::size_t kReadBufferBytes = 16 * 1024;
/// I/O threads when ServerOptions::http_threads is 0.
constexpr int kDefaultIoThreads = 2;
/// After an error answered with a close (a body over the limit, a malformed request), how
/// long the rest of what the client sends is read and dropped before the socket closes: a
/// close with unread data resets the connection, and the client could lose the answer.
constexpr std::chrono::seconds kLingerTime{2};
/// How long a generation's thread waits for its next token before it looks at the client
/// again; right after a token, how soon it looks again for the end (which the Generator
/// reports without a callback, just after the last token).
constexpr std::chrono::milliseconds kGenerateIdlePoll{20};
constexpr std::chrono::milliseconds kGenerateTokenPoll{1};

/// How often the sweep looks for connections past their deadline: a quarter of the I/O
/// timeout, within [10 ms, 1 s] (a limit is enforced up to that much late).
std::chrono::milliseconds sweep_period(std::chrono::milliseconds io_timeout) {
    return std::clamp(io_timeout / 4, std::chrono::milliseconds(10),
                      std::chrono::milliseconds(1000));
}

/// Deadlines as steady-clock nanoseconds (0: none), so that they fit in an atomic.
std::int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Response make_response(unsigned status, std::string body, std::string_view content_type) {
    Response r;
    r.result(status);
    if (status == 499) r.reason("Client Closed Request");
    if (!content_type.empty())  // every answer with a body names its type
        r.set(http::field::content_type,
              beast::string_view(content_type.data(), content_type.size()));
    r.body() = std::move(body);
    return r;
}

Response error_response(const ApiError& e) {
    Response r = make_response(static_cast<unsigned>(http_status(e.code)),
                               json_error_body(e.message), "application/json");
    if (e.code == ApiCode::unavailable) r.set(http::field::retry_after, "1");
    return r;
}

Response error_response(unsigned status, std::string_view message) {
    return make_response(status, json_error_body(message), "application/json");
}

int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/// The request target's path, percent-decoded, without its query; nullopt for a bad escape.
std::optional<std::string> decoded_path(std::string_view target) {
    target = target.substr(0, target.find('?'));
    std::string out;
    out.reserve(target.size());
    for (std::size_t i = 0; i < target.size(); ++i) {
        if (target[i] != '%') {
            out.push_back(target[i]);
            continue;
        }
        if (i + 2 >= target.size()) return std::nullopt;
        const int hi = hex_digit(target[i + 1]), lo = hex_digit(target[i + 2]);
        if (hi < 0 || lo < 0) return std::nullopt;
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return out;
}

/// "/v2/models/a/ready" -> {"v2", "models", "a", "ready"} (empty segments kept).
std::vector<std::string_view> segments(std::string_view path) {
    std::vector<std::string_view> out;
    if (path.empty() || path[0] != '/') return out;
    path.remove_prefix(1);
    for (;;) {
        const auto slash = path.find('/');
        out.push_back(path.substr(0, slash));
        if (slash == std::string_view::npos) break;
        path.remove_prefix(slash + 1);
    }
    return out;
}

/// Detached threads (one per generation) counted, so that the front end can wait for them:
/// the state outlives the front end, as a thread touches it after its work.
struct Blocking {
    std::mutex mutex;
    std::condition_variable cv;
    int running = 0;
};

}  // namespace

class HttpFrontend;

/// One connection. Everything but the atomics runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
public:
    Session(HttpFrontend& frontend, Strand strand)
        : frontend_(frontend), strand_(std::move(strand)) {}
    virtual ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const Strand& strand() const noexcept { return strand_; }
    /// Starts the connection (TLS handshake, then the first read).
    virtual void start() = 0;
    /// Answers the request read last; then the next request, or the close.
    virtual void send(Response r) = 0;
    /// Until the answer is sent: calls `on_gone` (once, on the strand) if the client hangs up.
    virtual void watch(std::function<void()> on_gone) = 0;
    /// Streams the answer: `header` (chunked), then the pieces given to stream_write(); the
    /// one with `last` ends the answer. A failed write sets write_failed and closes.
    virtual void stream_begin(http::response<http::empty_body> header) = 0;
    virtual void stream_write(std::string data, bool last) = 0;
    /// Closes the connection without an answer.
    virtual void abort() = 0;
    /// Server stop: an idle connection closes now, a busy one after its answer.
    virtual void stop() = 0;

    /// Past its deadline (the sweep found it so): closes the socket, which ends what is
    /// pending on it.
    virtual void expire() = 0;

    std::atomic<bool> write_failed{false};

    /// The frontend's record of a live connection: the sweep reads `deadline` under the
    /// registry's lock; the session writes it from its strand (the node lives as long as it).
    struct Registration {
        std::weak_ptr<Session> session;
        std::atomic<std::int64_t> deadline{0};  ///< steady_ns(); 0: no limit running
    };
    std::list<Registration>::iterator registration;

protected:
    HttpFrontend& frontend_;
    Strand strand_;
};

class HttpFrontend {
public:
    HttpFrontend(Server::Impl& impl, bool metrics_only)
        : impl_(impl), metrics_only_(metrics_only), acceptor_(ioc_) {
        const auto& o = impl.options;
        if (!o.tls_cert.empty()) {
            try {
                tls_.emplace(net::ssl::context::tls_server);
                tls_->set_options(net::ssl::context::default_workarounds |
                                  net::ssl::context::no_sslv2 | net::ssl::context::no_sslv3 |
                                  net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1);
                tls_->use_certificate_chain_file(o.tls_cert.string());
                tls_->use_private_key_file(o.tls_key.string(), net::ssl::context::pem);
            } catch (const std::exception& e) {
                throw Error(ErrorCode::invalid_argument, "TLS: cannot use the certificate '" +
                                                             o.tls_cert.string() + "' and key '" +
                                                             o.tls_key.string() + "': " + e.what());
            }
        }
    }

    int bind(const std::string& host, int port) {
        try {
            const tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
            acceptor_.open(ep.protocol());
            acceptor_.set_option(net::socket_base::reuse_address(true));
            acceptor_.set_option(tcp::no_delay(true));
            acceptor_.bind(ep);
            acceptor_.listen(net::socket_base::max_listen_connections);
        } catch (const std::exception&) {
            throw Error(ErrorCode::io_error,
                        "cannot listen on " + host + ":" + std::to_string(port) +
                            " (address in use or not allowed)");
        }
        const int bound = acceptor_.local_endpoint().port();
        accept();
        sweep();
        const int n =
            impl_.options.http_threads > 0 ? impl_.options.http_threads : kDefaultIoThreads;
        for (int i = 0; i < n; ++i)
            threads_.emplace_back([this] {
                // Below the engine's threads (Linux: nice is per thread): a parallel kernel
                // waits for its slowest thread, so an I/O thread preempting one compute
                // thread idles both cores. The I/O runs in the gaps between batches instead.
                if (const int nice = impl_.options.http_nice; nice != 0)
                    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
                for (;;) {
                    try {
                        ioc_.run();
                        return;
                    } catch (const std::exception& e) {  // a handler's failure: log, go on
                        impl_.log(std::string("REST: ") + e.what());
                    }
                }
            });
        return bound;
    }

    /// Stops accepting, closes idle connections, lets busy ones send their answer (up to the
    /// I/O timeout), waits for the generations' threads, then stops the I/O threads.
    void stop() {
        if (stopped_) return;
        stopped_ = true;
        stopping_.store(true);
        net::post(ioc_, [this] {
            beast::error_code ec;
            acceptor_.close(ec);
        });
        std::vector<std::shared_ptr<Session>> live;
        {
            std::lock_guard lock(sessions_mutex_);
            for (auto& r : sessions_)
                if (auto s = r.session.lock()) live.push_back(std::move(s));
        }
        // Posted outside the lock: a session whose last reference is dropped here unregisters
        // (takes the lock) in its destructor.
        for (auto& s : live) net::post(s->strand(), [s] { s->stop(); });
        live.clear();
        {
            std::unique_lock lock(blocking_->mutex);
            blocking_->cv.wait(lock, [&] { return blocking_->running == 0; });
        }
        {
            std::unique_lock lock(sessions_mutex_);
            sessions_cv_.wait_for(lock, impl_.options.io_timeout + std::chrono::seconds(1),
                                  [&] { return sessions_.empty(); });
        }
        ioc_.stop();
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    ~HttpFrontend() { stop(); }

    Server::Impl& impl() noexcept { return impl_; }
    bool stopping() const noexcept { return stopping_.load(std::memory_order_relaxed); }
    /// Answers end their connection (Connection: close) once the server drains: clients then
    /// leave between requests instead of having an idle connection closed, at the stop,
    /// under a request they are sending. New connections are still read and answered (503).
    bool closing() const noexcept { return stopping() || impl_.draining.load(); }
    void forget(Session& s) {
        std::lock_guard lock(sessions_mutex_);
        sessions_.erase(s.registration);
        if (sessions_.empty()) sessions_cv_.notify_all();
    }
    /// Answers one request read on `s` (on its strand).
    void dispatch(const std::shared_ptr<Session>& s, Request& req);

private:
    void accept();
    /// Every sweep_period(): connections past their deadline are expired (on their strand).
    void sweep() {
        sweep_timer_.expires_after(sweep_period(impl_.options.io_timeout));
        sweep_timer_.async_wait([this](beast::error_code ec) {
            if (ec) return;
            const std::int64_t now = steady_ns();
            std::vector<std::shared_ptr<Session>> due;
            {
                std::lock_guard lock(sessions_mutex_);
                for (auto& r : sessions_) {
                    const std::int64_t d = r.deadline.load(std::memory_order_relaxed);
                    if (d != 0 && d <= now)
                        if (auto s = r.session.lock()) due.push_back(std::move(s));
                }
            }
            // Outside the lock, as in stop(): a session released here unregisters under it.
            for (auto& s : due) net::post(s->strand(), [s] { s->expire(); });
            due.clear();
            sweep();
        });
    }
    void route(const std::shared_ptr<Session>& s, Request& req);
    void handle_infer(const std::shared_ptr<Session>& s, Request& req, const std::string& name,
                      const std::string& version);
    void handle_generate(const std::shared_ptr<Session>& s, Request& req, const std::string& name,
                         const std::string& version, bool stream);
    /// Runs `work` on a thread of its own (a generation's waits).
    void spawn(std::function<void()> work) {
        {
            std::lock_guard lock(blocking_->mutex);
            ++blocking_->running;
        }
        std::thread([state = blocking_, work = std::move(work)] {
            try {
                work();
            } catch (...) {  // the work answers its own errors; never let one end the process
            }
            std::lock_guard lock(state->mutex);
            if (--state->running == 0) state->cv.notify_all();
        }).detach();
    }

    // Declared before the io_context: its destruction destroys the handlers still queued,
    // and with them sessions, which unregister (sessions_) and may hold TLS streams (tls_).
    Server::Impl& impl_;
    bool metrics_only_;
    std::atomic<bool> stopping_{false};
    bool stopped_ = false;
    std::mutex sessions_mutex_;
    std::condition_variable sessions_cv_;
    std::list<Session::Registration> sessions_;
    std::shared_ptr<Blocking> blocking_ = std::make_shared<Blocking>();
    std::optional<net::ssl::context> tls_;
    net::io_context ioc_;
    tcp::acceptor acceptor_;
    std::unique_ptr<net::steady_timer> accept_retry_;
    net::steady_timer sweep_timer_{ioc_};
    std::vector<std::thread> threads_;
};

Session::~Session() { frontend_.forget(*this); }

namespace {

template <class Stream>
constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

}  // namespace

template <class Stream>
class SessionT final : public Session {
public:
    template <class... Args>
    SessionT(HttpFrontend& f, Strand strand, tcp::socket socket, Args&&... args)
        : Session(f, strand), stream_(std::move(socket), std::forward<Args>(args)...) {
        // Beast reads up to the buffer's free capacity (at least 512 bytes): room for a
        // typical request up front takes it in one recvmsg instead of one per 512 bytes.
        buffer_.reserve(kReadBufferBytes);
    }

    void start() override {
        net::dispatch(strand_, [self = self()] {
            if constexpr (kTls<Stream>) {
                self->limit(self->io_timeout());
                self->stream_.async_handshake(net::ssl::stream_base::server,
                                              [self](beast::error_code ec) {
                                                  if (ec) return self->close();
                                                  self->read();
                                              });
            } else {
                self->read();
            }
        });
    }

    void send(Response r) override {
        unwatch();
        r.version(version_);
        r.keep_alive(keep_alive_ && !frontend_.closing());
        r.prepare_payload();
        auto msg = std::make_shared<Response>(std::move(r));
        const bool close = msg->need_eof();
        limit(io_timeout());
        http::async_write(stream_, *msg,
                          [self = self(), msg, close](beast::error_code ec, std::size_t) {
                              if (ec) return self->close();
                              self->answered(close);
                          });
    }

    void watch(std::function<void()> on_gone) override {
        // A pipelined request already read in: a hang-up cannot be told from it.
        if (buffer_.size() > 0) return;
        on_gone_ = std::move(on_gone);
        // The next request's read, posted now: it ends with an error when the client hangs
        // up (then on_gone), or with the start of the next request, kept for after the answer.
        ahead_ = true;
        stream_.async_read_some(
            buffer_.prepare(std::max<std::size_t>(512, buffer_.capacity() - buffer_.size())),
            [self = self()](beast::error_code ec, std::size_t n) { self->ahead_done(ec, n); });
    }

    void stream_begin(http::response<http::empty_body> header) override {
        header.version(version_);
        header.keep_alive(keep_alive_ && !frontend_.closing());
        header.chunked(true);
        stream_header_ = std::make_shared<http::response<http::empty_body>>(std::move(header));
        stream_serializer_ =
            std::make_shared<http::response_serializer<http::empty_body>>(*stream_header_);
        pieces_.push_back(Piece{Piece::header, {}});
        pump();
    }

    void stream_write(std::string data, bool last) override {
        if (write_failed.load()) return;
        if (!data.empty()) pieces_.push_back(Piece{Piece::chunk, std::move(data)});
        if (last) pieces_.push_back(Piece{Piece::last, {}});
        pump();
    }

    void abort() override {
        unwatch();
        close();
    }

    void stop() override {
        if (!busy_) shut();  // the pending read ends: close()
    }

    void expire() override {
        const std::int64_t d = registration->deadline.load(std::memory_order_relaxed);
        if (d == 0 || d > steady_ns()) return;  // the limit was lifted or renewed meanwhile
        shut();
    }

private:
    std::shared_ptr<SessionT> self() {
        return std::static_pointer_cast<SessionT>(shared_from_this());
    }
    tcp::socket& lowest() { return beast::get_lowest_layer(stream_); }
    std::chrono::milliseconds io_timeout() const { return frontend_.impl().options.io_timeout; }
    /// What is pending now must end within `t` (the sweep closes the socket otherwise).
    void limit(std::chrono::nanoseconds t) {
        registration->deadline.store(steady_ns() + t.count(), std::memory_order_relaxed);
    }
    void unlimit() { registration->deadline.store(0, std::memory_order_relaxed); }
    /// Closes the socket: every operation pending on it ends (operation_aborted).
    void shut() {
        unlimit();
        beast::error_code ec;
        lowest().close(ec);
    }

    void read() {
        busy_ = false;
        if (frontend_.stopping()) return close();
        parser_.emplace();
        parser_->header_limit(kMaxHeaderBytes);
        parser_->body_limit(frontend_.impl().options.max_body_bytes);
        // The whole request (header and body) must arrive within the I/O timeout, as must
        // the next request on an idle keep-alive connection.
        limit(io_timeout());
        http::async_read_header(
            stream_, buffer_, *parser_,
            [self = self()](beast::error_code ec, std::size_t) { self->header_read(ec); });
    }

    void header_read(beast::error_code ec) {
        if (ec) return read_failed(ec);
        busy_ = true;
        const auto& h = parser_->get();
        version_ = h.version();
        if (beast::iequals(h[http::field::expect], "100-continue")) {
            auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                           version_);
            http::async_write(stream_, *cont,
                              [self = self(), cont](beast::error_code ec, std::size_t) {
                                  if (ec) return self->close();
                                  self->read_body();
                              });
            return;
        }
        read_body();
    }

    void read_body() {
        http::async_read(stream_, buffer_, *parser_,
                         [self = self()](beast::error_code ec, std::size_t) {
                             if (ec) return self->read_failed(ec);
                             self->unlimit();  // waiting for the engine has no I/O limit
                             self->keep_alive_ = self->parser_->get().keep_alive();
                             Request req = self->parser_->release();
                             self->frontend_.dispatch(self, req);
                         });
    }

    void read_failed(beast::error_code ec) {
        if (ec == http::error::body_limit) {
            return fail(413, "the request body exceeds the server's limit (" +
                                 std::to_string(frontend_.impl().options.max_body_bytes) +
                                 " bytes)");
        }
        if (ec == http::error::header_limit)
            return fail(431, "the request's header exceeds the server's limit (" +
                                 std::to_string(kMaxHeaderBytes) + " bytes)");
        // A malformed request (not a hang-up, a timeout or a stop) is told why.
        if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message)
            return fail(400, "malformed HTTP request: " + ec.message());
        close();
    }

    /// Answers an error with a close, reading what the client still sends.
    void fail(unsigned status, const std::string& message) {
        busy_ = true;
        keep_alive_ = false;
        linger_ = true;
        send(error_response(status, message));
    }

    /// The answer is written: the connection ends (`close`), or reads the next request,
    /// once the read posted by watch() has ended if it is still pending.
    void answered(bool close) {
        unlimit();
        if (close) return linger_ ? linger() : this->close();
        if (peer_gone_) return this->close();
        if (!ahead_) return read();
        // Idle until the client sends more: the keep-alive limit runs, a stop closes it.
        busy_ = false;
        after_ahead_ = true;
        if (frontend_.stopping()) return this->close();
        limit(io_timeout());
    }

    void ahead_done(beast::error_code ec, std::size_t n) {
        ahead_ = false;
        if (!ec) buffer_.commit(n);
        if (closed_) return;
        if (after_ahead_) {  // the answer was sent: this was the wait for the next request
            after_ahead_ = false;
            if (ec) return close();
            return read();  // parses what arrived, reads the rest
        }
        // The answer is still to come. Data is a pipelined request (read after the answer);
        // an end of stream or an error is the client gone.
        if (!ec) return;
        peer_gone_ = true;
        if (auto gone = std::move(on_gone_)) gone();
    }

    void unwatch() { on_gone_ = nullptr; }

    struct Piece {
        enum Kind { header, chunk, last } kind;
        std::string data;
    };

    void pump() {
        if (writing_ || pieces_.empty()) return;
        writing_ = true;
        limit(io_timeout());
        auto done = [self = self()](beast::error_code ec, std::size_t) { self->piece_written(ec); };
        Piece& p = pieces_.front();
        switch (p.kind) {
            case Piece::header:
                http::async_write_header(stream_, *stream_serializer_, std::move(done));
                break;
            case Piece::chunk:
                net::async_write(stream_, http::make_chunk(net::buffer(p.data)), std::move(done));
                break;
            case Piece::last:
                net::async_write(stream_, http::make_chunk_last(), std::move(done));
                break;
        }
    }

    void piece_written(beast::error_code ec) {
        writing_ = false;
        unlimit();  // between pieces the generation runs: no I/O limit
        const bool last = pieces_.front().kind == Piece::last;
        pieces_.pop_front();
        if (ec) {
            write_failed.store(true);
            pieces_.clear();
            unwatch();
            return close();
        }
        if (!last) return pump();
        const bool close_after = stream_header_->need_eof();
        stream_serializer_.reset();
        stream_header_.reset();
        unwatch();
        answered(close_after);
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        busy_ = true;
        if constexpr (kTls<Stream>) {
            if (!lowest().is_open()) return;
            limit(std::chrono::seconds(1));
            stream_.async_shutdown([self = self()](beast::error_code) { self->shut(); });
        } else {
            beast::error_code ec;
            lowest().shutdown(tcp::socket::shutdown_send, ec);
            shut();
        }
    }

    // Half-close, then drop what the client still sends until it closes or kLingerTime.
    void linger() {
        closed_ = true;
        beast::error_code ec;
        lowest().shutdown(tcp::socket::shutdown_send, ec);
        limit(kLingerTime);
        drain();
    }
    void drain() {
        lowest().async_read_some(net::buffer(scratch_),
                                 [self = self()](beast::error_code ec, std::size_t) {
                                     if (!ec) return self->drain();
                                     self->shut();
                                 });
    }

    Stream stream_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    unsigned version_ = 11;
    bool keep_alive_ = false;
    bool busy_ = false;  ///< a request is being read or answered (a stop waits for it)
    bool closed_ = false;
    bool linger_ = false;       ///< the answer ends the connection: read and drop the rest first
    bool ahead_ = false;        ///< the read posted by watch() is pending
    bool after_ahead_ = false;  ///< answered: read() once that read ends
    bool peer_gone_ = false;    ///< that read ended with the client gone
    std::function<void()> on_gone_;
    std::deque<Piece> pieces_;
    bool writing_ = false;
    std::shared_ptr<http::response<http::empty_body>> stream_header_;
    std::shared_ptr<http::response_serializer<http::empty_body>> stream_serializer_;
    std::array<char, 4096> scratch_{};
};

void HttpFrontend::accept() {
    // The connection's strand: its socket's operations complete on it, and the answers
    // posted from the batcher run on it, so one connection's handlers never run at once.
    auto strand = net::make_strand(ioc_);
    acceptor_.async_accept(
        strand, [this, strand](beast::error_code ec, tcp::socket socket) {
            if (!acceptor_.is_open() || ec == net::error::operation_aborted) return;
            if (ec) {
                // Out of descriptors or memory: try again shortly rather than spin.
                accept_retry_ =
                    std::make_unique<net::steady_timer>(ioc_, std::chrono::milliseconds(50));
                accept_retry_->async_wait([this](beast::error_code e) {
                    if (!e && acceptor_.is_open()) accept();
                });
                return;
            }
            beast::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            try {
                std::shared_ptr<Session> s;
                if (tls_)
                    s = std::make_shared<SessionT<beast::ssl_stream<tcp::socket>>>(
                        *this, strand, std::move(socket), *tls_);
                else
                    s = std::make_shared<SessionT<tcp::socket>>(*this, strand, std::move(socket));
                {
                    std::lock_guard lock(sessions_mutex_);
                    s->registration = sessions_.emplace(sessions_.end());
                    s->registration->session = s;
                }
                s->start();
            } catch (const std::exception&) {  // out of memory: this connection is dropped
            }
            accept();
        });
}

void HttpFrontend::dispatch(const std::shared_ptr<Session>& s, Request& req) {
    try {
        route(s, req);
    } catch (const std::exception& e) {
        s->send(error_response(500, std::string("internal error: ") + e.what()));
    } catch (...) {
        s->send(error_response(500, "internal error"));
    }
}

void HttpFrontend::route(const std::shared_ptr<Session>& s, Request& req) {
    const auto target = req.target();
    const std::optional<std::string> path =
        decoded_path(std::string_view(target.data(), target.size()));
    if (!path) return s->send(error_response(400, "malformed percent-escape in the request path"));
    const bool get = req.method() == http::verb::get;
    const bool post = req.method() == http::verb::post;
    auto no_route = [&] {
        const auto m = req.method_string();
        s->send(error_response(404, "no route " + std::string(m.data(), m.size()) + " " + *path));
    };
    auto wrong_method = [&](const char* allowed) {
        Response r = error_response(405, "method not allowed (" + std::string(allowed) + ")");
        r.set(http::field::allow, allowed);
        s->send(std::move(r));
    };
    auto ok = [&](std::string body, std::string_view type) {
        s->send(make_response(200, std::move(body), type));
    };

    if (*path == "/metrics") {
        if (!get) return wrong_method("GET");
        return ok(impl_.metrics_text(), "text/plain; version=0.0.4");
    }
    if (metrics_only_) return no_route();
    const auto seg = segments(*path);
    if (seg.empty() || seg[0] != "v2") return no_route();
    const bool health = seg.size() == 3 && seg[1] == "health";
    if (!health) {
        const auto auth = req[http::field::authorization];
        if (!impl_.authorized(std::string_view(auth.data(), auth.size()))) {
            Response r = error_response(401, "missing or wrong bearer token");
            r.set(http::field::www_authenticate, "Bearer");
            return s->send(std::move(r));
        }
    }
    if (health) {
        if (!get) return wrong_method("GET");
        if (seg[2] == "live") return s->send(make_response(200, {}, {}));
        if (seg[2] != "ready") return no_route();
        // The protocol: 200 is true, a 4xx false.
        if (impl_.ready()) return s->send(make_response(200, {}, {}));
        return s->send(error_response(400, impl_.draining.load() ? "draining" : "starting"));
    }
    if (seg.size() == 1) {
        if (!get) return wrong_method("GET");
        return ok(impl_.server_metadata_json(), "application/json");
    }
    if (seg[1] == "models" && seg.size() >= 3) {
        // /v2/models/NAME[/versions/V][/ready|/infer|/generate|/generate_stream]
        const std::string name(seg[2]);
        std::string version;
        std::size_t next = 3;
        if (seg.size() >= 5 && seg[3] == "versions") {
            version = std::string(seg[4]);
            next = 5;
        }
        if (seg.size() == next) {
            if (!get) return wrong_method("GET");
            std::string body;
            if (ApiError e = impl_.model_metadata_json(name, version, body); !e.ok())
                return s->send(error_response(e));
            return ok(std::move(body), "application/json");
        }
        if (seg.size() != next + 1) return no_route();
        const auto action = seg[next];
        if (action == "ready") {
            if (!get) return wrong_method("GET");
            if (!impl_.repository->find(name, version))
                return s->send(error_response(ApiError{
                    ApiCode::not_found, "model '" + name + "'" +
                                            (version.empty() ? "" : " version " + version) +
                                            " is not loaded"}));
            return s->send(make_response(impl_.ready() ? 200 : 400, {}, {}));
        }
        const bool infer = action == "infer", generate = action == "generate",
                   stream = action == "generate_stream";
        if (!infer && !generate && !stream) return no_route();
        if (!post) return wrong_method("POST");
        if (!valid_model_name(name))
            return s->send(error_response(ApiError{ApiCode::not_found, "invalid model name"}));
        if (!version.empty() && !parse_version(version))
            return s->send(error_response(
                ApiError{ApiCode::not_found, "model versions are positive integers"}));
        if (infer) return handle_infer(s, req, name, version);
        return handle_generate(s, req, name, version, stream);
    }
    if (seg[1] == "repository") {
        if (seg.size() == 3 && seg[2] == "index") {
            if (!post) return wrong_method("POST");
            json list = json::array();
            for (const auto& m : impl_.repository->index()) {
                json e = {{"name", m.name}, {"state", m.state}};
                if (!m.version.empty()) e["version"] = m.version;
                if (!m.reason.empty()) e["reason"] = m.reason;
                list.push_back(std::move(e));
            }
            return ok(list.dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
        }
        if (seg.size() == 5 && seg[2] == "models" && (seg[4] == "load" || seg[4] == "unload")) {
            if (!post) return wrong_method("POST");
            if (ApiError e = impl_.control(std::string(seg[3]), seg[4] == "load"); !e.ok())
                return s->send(error_response(e));
            return ok("{}", "application/json");
        }
    }
    no_route();
}

void HttpFrontend::handle_infer(const std::shared_ptr<Session>& s, Request& req,
                                const std::string& name, const std::string& version) {
    std::string_view body = req.body();
    std::size_t header_bytes = body.size();
    if (auto it = req.find("Inference-Header-Content-Length"); it != req.end()) {
        const auto v = it->value();
        std::size_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || p != v.data() + v.size() || n > body.size())
            return s->send(error_response(
                ApiError{ApiCode::bad_request, "Inference-Header-Content-Length '" +
                                                   std::string(v.substr(0, 32)) +
                                                   "' is not a length within the body (" +
                                                   std::to_string(body.size()) + " bytes)"}));
        header_bytes = n;
    }
    struct Call {
        std::string name;
        InferRequest request;
    };
    auto call = std::make_shared<Call>();
    call->name = name;
    if (ApiError e = decode_json_request(body.substr(0, header_bytes), body.substr(header_bytes),
                                         impl_.limits, call->request);
        !e.ok()) {
        impl_.count(Protocol::http, e.code);
        return s->send(error_response(e));
    }
    CancellationToken cancel;
    s->watch([cancel]() mutable { cancel.cancel(); });
    std::vector<NamedTensor> inputs = std::move(call->request.inputs);
    impl_.infer(
        Protocol::http, name, version, std::move(inputs), call->request, cancel,
        [s, call](ApiError e, std::vector<NamedTensor> out, std::string v) {
            net::post(s->strand(), [s, call, e = std::move(e), out = std::move(out),
                                    v = std::move(v)]() {
                if (!e.ok()) return s->send(error_response(e));
                EncodedResponse encoded;
                ApiError err;
                try {
                    err = encode_json_response(call->name, v, call->request, out, encoded);
                } catch (const std::exception& x) {
                    err = ApiError{ApiCode::internal, std::string("internal error: ") + x.what()};
                }
                if (!err.ok()) return s->send(error_response(err));
                if (encoded.header_bytes > 0) {
                    Response r =
                        make_response(200, std::move(encoded.body), "application/octet-stream");
                    r.set("Inference-Header-Content-Length", std::to_string(encoded.header_bytes));
                    return s->send(std::move(r));
                }
                s->send(make_response(200, std::move(encoded.body), "application/json"));
            });
        });
}

void HttpFrontend::handle_generate(const std::shared_ptr<Session>& s, Request& req,
                                   const std::string& name, const std::string& version,
                                   bool stream) {
    auto call = std::make_shared<GenerateCall>();
    if (ApiError e = decode_generate_request(req.body(), impl_.limits, *call); !e.ok()) {
        impl_.count(Protocol::http, e.code);
        return s->send(error_response(e));
    }
    std::unique_ptr<Generation> gen;
    if (ApiError e = impl_.generate(Protocol::http, name, version, *call, gen); !e.ok())
        return s->send(error_response(e));
    // Errors found before the first token (bad input, unknown model, a refusal) were answered
    // above with their status; a stream's answer is 200 from here and its events say how the
    // generation ended. The client is watched: when it hangs up, the generation is cancelled.
    auto gone = std::make_shared<std::atomic<bool>>(false);
    s->watch([gone] { gone->store(true); });
    if (stream) {
        http::response<http::empty_body> header{http::status::ok, 11};
        header.set(http::field::content_type, "text/event-stream");
        header.set(http::field::cache_control, "no-cache");
        header.set("X-Accel-Buffering", "no");  // proxies: pass each event on at once
        s->stream_begin(std::move(header));
    }
    std::shared_ptr<Generation> shared = std::move(gen);
    spawn([s, gen = std::move(shared), call, name, stream, gone] {
        auto post = [&](auto f) { net::post(s->strand(), std::move(f)); };
        auto open = [&] { return !gone->load() && !s->write_failed.load(); };
        std::vector<std::int64_t> fresh;
        std::size_t sent = 0;
        bool cancelled = false;
        auto poll = kGenerateIdlePoll;
        for (;;) {
            fresh.clear();
            const bool finished = gen->wait(poll, fresh);
            if (stream && !fresh.empty() && open()) {
                std::string events;
                for (std::int64_t token : fresh)
                    events += generate_token_event(name, gen->version(), *call, sent++, token);
                post([s, events = std::move(events)]() mutable {
                    s->stream_write(std::move(events), false);
                });
            } else {
                sent += fresh.size();
            }
            if (finished) break;
            poll = fresh.empty() ? kGenerateIdlePoll : kGenerateTokenPoll;
            if (!cancelled && !open()) {
                cancelled = true;
                gen->cancel();
            }
        }
        const GenerateResult& r = gen->result();
        if (!stream) {
            if (const ApiError& e = gen->outcome(); !e.ok())
                return post([s, e]() { s->send(error_response(e)); });
            return post(
                [s, body = encode_generate_response(name, gen->version(), *call, r)]() mutable {
                    s->send(make_response(200, std::move(body), "application/json"));
                });
        }
        if (!open()) return post([s] { s->abort(); });
        // The result is complete: a token the feed had not handed over yet is sent from it.
        std::string events;
        for (; sent < r.tokens.size(); ++sent)
            events += generate_token_event(name, gen->version(), *call, sent, r.tokens[sent]);
        events += generate_final_event(name, gen->version(), *call, r, gen->outcome());
        post([s, events = std::move(events)]() mutable {
            s->stream_write(std::move(events), true);
        });
    });
}

std::unique_ptr<HttpFrontend, HttpDeleter> make_http_frontend(Server::Impl& impl,
                                                              bool metrics_only) {
    return std::unique_ptr<HttpFrontend, HttpDeleter>(new HttpFrontend(impl, metrics_only));
}
int http_bind(HttpFrontend& f, const std::string& host, int port) { return f.bind(host, port); }
void http_stop(HttpFrontend& f) { f.stop(); }
void http_destroy(HttpFrontend* f) { delete f; }

}  // namespace dsinfer::server
