// dsinfer/batch_scheduler.hpp — BatchScheduler: an in-process dynamic batcher around any
// batched function.
//
// Purpose: callers submit single requests (future or callback form); worker threads owned by
// the scheduler group queued requests into batches and call the batch function once per batch.
// Batches are formed like Triton's dynamic batcher: led by the most urgent request (priority,
// then arrival), filled with requests of the same batch_key up to max_batch_size items, and
// dispatched when full, when a preferred size can be formed, or when the oldest member has
// waited max_queue_delay. Per-request priorities, deadlines (a timer thread answers expired
// requests while the workers are busy) and cancellation tokens; a bounded queue (overflow is
// answered `unavailable` before submit returns); graceful shutdown; statistics and an observer
// hook. Every submitted request gets exactly one outcome. Semantics in detail: docs/SCHEDULER.md.
//
// Ownership/threading: every member is thread-safe, except that the destructor must not race
// with other calls, and neither the batch function nor an outcome callback may call shutdown()
// or destroy the scheduler. The scheduler owns num_workers worker threads and one timer thread.
// The batch function runs on the workers, up to num_workers calls at once. Outcomes are
// delivered (future set / callback called) on whichever thread decided them: a worker, the
// timer, the thread that called cancel() or shutdown(), or the submitter itself for requests
// refused at submit — keep callbacks short; a callback that throws is counted and ignored.
//
// Usage:
//   using Sched = dsinfer::BatchScheduler<Input, Output>;
//   Sched sched([](Sched::Batch& b) {
//       for (std::size_t i = 0; i < b.size(); ++i) b.set_result(i, compute(b.request(i)));
//   }, {.max_batch_size = 16, .max_queue_delay = std::chrono::microseconds(500)});
//   std::future<Output> f = sched.submit(input);               // errors: dsinfer::Error
//   sched.submit(input, [](dsinfer::StatusOr<Output> r) { ... }, {.priority = 0});
//   sched.shutdown(std::chrono::seconds(5));                   // drain, then stop
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "dsinfer/cancellation.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

/// Optional metrics hook of a BatchScheduler. Called from scheduler threads (and submitters):
/// must be thread-safe, cheap and must not call back into the scheduler, except for
/// set_max_batch_size / set_max_queue_delay (no scheduler lock is held while it runs).
struct SchedulerObserver {
    virtual ~SchedulerObserver() = default;
    /// Exactly once per submitted request (refused ones included), just before its outcome is
    /// delivered. queue_time: submit to dispatch (to the answer if it never ran); compute_time:
    /// the batch function's wall time (0 if it never ran); total_latency: submit to the answer.
    virtual void on_request_done(ErrorCode code, std::chrono::nanoseconds queue_time,
                                 std::chrono::nanoseconds compute_time,
                                 std::chrono::nanoseconds total_latency) noexcept = 0;
    /// Once per executed batch, after the batch function returned (or threw).
    virtual void on_batch(std::size_t requests, std::size_t items,
                          std::chrono::nanoseconds compute_time) noexcept = 0;
};

struct BatchSchedulerOptions {
    /// Items per batch (the sum of SubmitOptions::size of its requests); >= 1.
    std::size_t max_batch_size = 8;
    /// How long the oldest request of a batch may wait for the batch to fill; 0 = never wait.
    std::chrono::microseconds max_queue_delay{1000};
    /// Item counts at which a batch is dispatched without waiting (each in [1, max_batch_size]).
    std::vector<std::size_t> preferred_batch_sizes{};
    /// Number of priorities; SubmitOptions::priority is in [0, priority_levels), 0 most urgent.
    int priority_levels = 1;
    /// Queued (not yet running) requests; a submission beyond it is answered unavailable.
    std::size_t max_queue_size = 1024;
    /// Worker threads = batches executing concurrently; >= 1.
    int num_workers = 1;
    std::shared_ptr<SchedulerObserver> observer{};
};

struct SubmitOptions {
    int priority = 0;
    /// Absolute deadline: a request still queued at this time is answered deadline_exceeded and
    /// never executed (a running one is not interrupted; the batch function may read it).
    std::optional<std::chrono::steady_clock::time_point> deadline{};
    /// Items this request contributes to a batch (e.g. its batch dimension); >= 1.
    std::size_t size = 1;
    /// Only requests with equal keys share a batch (shape classes, models, ...).
    std::uint64_t batch_key = 0;
    /// Cancelling it answers the request `cancelled` while it is queued; no effect afterwards.
    CancellationToken cancel{};
};

namespace detail {
inline Status validate_batch_scheduler_options(const BatchSchedulerOptions& o) {
    DSINFER_CHECK(o.max_batch_size >= 1, ErrorCode::invalid_argument,
                  "BatchScheduler: max_batch_size must be at least 1");
    DSINFER_CHECK(o.max_queue_delay.count() >= 0, ErrorCode::invalid_argument,
                  "BatchScheduler: max_queue_delay must not be negative (got ",
                  o.max_queue_delay.count(), " us)");
    for (const std::size_t p : o.preferred_batch_sizes)
        DSINFER_CHECK(p >= 1 && p <= o.max_batch_size, ErrorCode::invalid_argument,
                      "BatchScheduler: preferred batch size ", p, " is outside [1, max_batch_size = ",
                      o.max_batch_size, "]");
    DSINFER_CHECK(o.priority_levels >= 1, ErrorCode::invalid_argument,
                  "BatchScheduler: priority_levels must be at least 1 (got ", o.priority_levels, ")");
    DSINFER_CHECK(o.max_queue_size >= 1, ErrorCode::invalid_argument,
                  "BatchScheduler: max_queue_size must be at least 1");
    DSINFER_CHECK(o.num_workers >= 1, ErrorCode::invalid_argument,
                  "BatchScheduler: num_workers must be at least 1 (got ", o.num_workers, ")");
    return Status::ok();
}
}  // namespace detail

template <class Request, class Response>
class BatchScheduler {
    using Clock = std::chrono::steady_clock;
    struct Pending;
    using PendingPtr = std::shared_ptr<Pending>;

public:
    using Callback = std::function<void(StatusOr<Response>)>;

    /// The requests of one batch, as the batch function sees them. Valid during the call only.
    /// set_result/set_error for different indices may be called from different threads at once.
    class Batch {
    public:
        /// Number of requests.
        std::size_t size() const noexcept { return requests_.size(); }
        /// Sum of their SubmitOptions::size.
        std::size_t items() const noexcept { return items_; }
        /// The batch_key all requests of this batch share.
        std::uint64_t batch_key() const noexcept { return requests_.front()->options.batch_key; }
        /// The i-th request (priority-then-arrival order); the batch function may move from it.
        Request& request(std::size_t i) { return at(i).request; }
        const SubmitOptions& options(std::size_t i) const { return at(i).options; }
        /// Answers request i; the first answer wins, later ones are ignored.
        void set_result(std::size_t i, Response r) {
            check(i);
            if (!answers_[i]) answers_[i].emplace(std::move(r));
        }
        /// Answers request i with an error (an ok Status becomes `internal`); first answer wins.
        void set_error(std::size_t i, Status s) {
            check(i);
            if (answers_[i]) return;
            if (s.is_ok()) s = Status(ErrorCode::internal, "set_error was called with an ok Status");
            answers_[i].emplace(std::move(s));
        }
        bool answered(std::size_t i) const {
            check(i);
            return answers_[i].has_value();
        }

    private:
        friend class BatchScheduler;
        explicit Batch(const std::vector<PendingPtr>& requests)
            : requests_(requests), answers_(requests.size()) {
            for (const auto& p : requests_) items_ += p->options.size;
        }
        void check(std::size_t i) const {
            if (i >= requests_.size())
                throw Error(ErrorCode::invalid_argument,
                            detail::str_cat("Batch: request index ", i, " is out of range (the batch has ",
                                            requests_.size(), " requests)"));
        }
        Pending& at(std::size_t i) const {
            check(i);
            return *requests_[i];
        }

        const std::vector<PendingPtr>& requests_;
        std::vector<std::optional<StatusOr<Response>>> answers_;
        std::size_t items_ = 0;
    };

    using BatchFunction = std::function<void(Batch&)>;

    /// Outcome counters (path-based, each request counted once, before its outcome is
    /// delivered) and the current queue.
    struct Stats {
        std::uint64_t submitted = 0;
        std::uint64_t ok = 0;
        std::uint64_t failed = 0;             ///< errors from the batch (its function's answers)
        std::uint64_t rejected = 0;           ///< refused at submit: invalid, queue full, shut down
        std::uint64_t cancelled = 0;          ///< cancelled token or shutdown before it ran
        std::uint64_t deadline_exceeded = 0;  ///< deadline passed before it ran
        std::uint64_t batches = 0;
        std::uint64_t items = 0;              ///< items of the executed batches
        std::size_t queued = 0;               ///< requests waiting now
        std::size_t running = 0;              ///< requests in batches executing now
        std::uint64_t callback_errors = 0;    ///< outcome callbacks that threw
    };

    /// Validates `options` (throws dsinfer::Error(invalid_argument)) and starts the threads.
    BatchScheduler(BatchFunction fn, BatchSchedulerOptions options)
        : fn_(std::move(fn)), opts_(std::move(options)) {
        throw_if_error(detail::validate_batch_scheduler_options(opts_));
        if (!fn_) throw Error(ErrorCode::invalid_argument, "BatchScheduler: the batch function is empty");
        delay_ = clamp(opts_.max_queue_delay);
        size_limit_ = opts_.max_batch_size;
        std::sort(opts_.preferred_batch_sizes.begin(), opts_.preferred_batch_sizes.end());
        opts_.preferred_batch_sizes.erase(
            std::unique(opts_.preferred_batch_sizes.begin(), opts_.preferred_batch_sizes.end()),
            opts_.preferred_batch_sizes.end());
        try {
            timer_ = std::thread([this] { timer_loop(); });
            for (int i = 0; i < opts_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
        } catch (...) {
            stop_threads();
            throw;
        }
    }

    BatchScheduler(const BatchScheduler&) = delete;
    BatchScheduler& operator=(const BatchScheduler&) = delete;

    /// shutdown(0): queued requests are answered cancelled; waits for the running batches.
    ~BatchScheduler() {
        shutdown(std::chrono::milliseconds(0));
        stop_threads();
        // Outcomes decided on other threads (a cancel() racing with shutdown) are delivered
        // before the state they use goes away.
        std::unique_lock<std::mutex> lock(m_);
        drained_.wait(lock, [&] { return outstanding_ == 0; });
    }

    /// Submits a request; its outcome (value, or dsinfer::Error) arrives in the future.
    std::future<Response> submit(Request r, SubmitOptions o = {}) {
        auto p = std::make_shared<Pending>(std::move(r), std::move(o));
        std::future<Response> f = p->sink.template emplace<std::promise<Response>>().get_future();
        submit_pending(std::move(p));
        return f;
    }

    /// Submits a request; `cb` is called exactly once with its outcome. Throws
    /// dsinfer::Error(invalid_argument) only if `cb` is empty.
    void submit(Request r, Callback cb, SubmitOptions o = {}) {
        if (!cb) throw Error(ErrorCode::invalid_argument, "BatchScheduler::submit: the callback is empty");
        auto p = std::make_shared<Pending>(std::move(r), std::move(o));
        p->sink.template emplace<Callback>(std::move(cb));
        submit_pending(std::move(p));
    }

    /// Stops accepting (later submissions: unavailable), dispatches what is queued without
    /// waiting for batches to fill, and waits up to `timeout` for every outcome to be
    /// delivered. Requests still queued then are answered cancelled. Returns true if
    /// everything drained in time. The threads keep running until the destructor.
    bool shutdown(std::chrono::milliseconds timeout) {
        const auto until = Clock::now() + clamp(std::max(timeout, std::chrono::milliseconds(0)));
        std::vector<PendingPtr> leftover;
        bool drained = false;
        {
            std::unique_lock<std::mutex> lock(m_);
            accepting_ = false;
            draining_ = true;
            work_.notify_all();
            drained = drained_.wait_until(lock, until, [&] { return outstanding_ == 0; });
            if (!drained) {
                for (auto& [key, q] : queues_)
                    for (auto& [order, p] : q) leftover.push_back(p);
                for (auto& p : leftover) unqueue(*p);
            }
        }
        for (auto& p : leftover)
            finish(*p, Status(ErrorCode::cancelled, "the scheduler shut down before the request ran"),
                   Path::cancelled, {});
        release(leftover.size());
        return drained;
    }

    /// Runtime tuning (e.g. by an adaptive controller, also from inside the observer); takes
    /// effect for the next batches. A request larger than a reduced max_batch_size runs alone;
    /// submit accepts sizes up to the largest max_batch_size the scheduler has had, so a
    /// controller lowering the cap never makes a valid request invalid.
    void set_max_batch_size(std::size_t n) {
        if (n == 0) throw Error(ErrorCode::invalid_argument, "BatchScheduler: max_batch_size must be at least 1");
        {
            std::lock_guard<std::mutex> lock(m_);
            opts_.max_batch_size = n;
            size_limit_ = std::max(size_limit_, n);
        }
        work_.notify_all();
    }
    void set_max_queue_delay(std::chrono::microseconds d) {
        if (d.count() < 0)
            throw Error(ErrorCode::invalid_argument, "BatchScheduler: max_queue_delay must not be negative");
        {
            std::lock_guard<std::mutex> lock(m_);
            opts_.max_queue_delay = d;
            delay_ = clamp(d);
        }
        work_.notify_all();
    }

    /// The current options (preferred sizes sorted and deduplicated).
    BatchSchedulerOptions options() const {
        std::lock_guard<std::mutex> lock(m_);
        return opts_;
    }

    Stats stats() const {
        Stats s;
        s.submitted = submitted_.load(std::memory_order_relaxed);
        s.ok = count(Path::ok);
        s.failed = count(Path::failed);
        s.rejected = count(Path::rejected);
        s.cancelled = count(Path::cancelled);
        s.deadline_exceeded = count(Path::deadline);
        s.batches = batches_.load(std::memory_order_relaxed);
        s.items = items_.load(std::memory_order_relaxed);
        s.callback_errors = callback_errors_.load(std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(m_);
        s.queued = queued_;
        s.running = running_;
        return s;
    }

private:
    enum class Path : std::uint8_t { ok, failed, rejected, cancelled, deadline, count_ };
    enum class Where : std::uint8_t { outside, queued, running, removed };
    using Order = std::pair<int, std::uint64_t>;  // (priority, arrival sequence)
    using KeyQueue = std::map<Order, PendingPtr>;
    static constexpr std::uint64_t kCallbackDone = ~std::uint64_t{0};

    /// Durations far beyond any real wait (100 years) are clamped so time arithmetic on the
    /// steady clock cannot overflow.
    template <class Rep, class Period>
    static std::chrono::nanoseconds clamp(std::chrono::duration<Rep, Period> d) {
        constexpr std::chrono::hours kForever(24 * 365 * 100);
        if (d >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(kForever)) return kForever;
        return std::chrono::duration_cast<std::chrono::nanoseconds>(d);
    }

    struct Pending {
        Pending(Request r, SubmitOptions o) : request(std::move(r)), options(std::move(o)) {}
        Request request;
        SubmitOptions options;
        std::variant<std::monostate, std::promise<Response>, Callback> sink;
        Clock::time_point submitted{};
        Clock::time_point dispatched{};  // set when it joins a batch
        std::uint64_t seq = 0;
        Where where = Where::outside;    // guarded by m_
        // The cancel-callback id; kCallbackDone once the outcome is decided (whoever comes
        // second of the registering submitter and the finisher removes the callback).
        std::atomic<std::uint64_t> cancel_id{0};
        std::atomic<bool> answered{false};
    };

    std::uint64_t count(Path p) const {
        return outcomes_[static_cast<std::size_t>(p)].load(std::memory_order_relaxed);
    }

    void submit_pending(PendingPtr p) {
        Pending& r = *p;
        r.submitted = Clock::now();
        submitted_.fetch_add(1, std::memory_order_relaxed);
        Status refused;
        Path path = Path::rejected;
        bool wake_worker = false, wake_timer = false;
        {
            std::lock_guard<std::mutex> lock(m_);
            const SubmitOptions& o = r.options;
            if (o.size == 0 || o.size > size_limit_) {
                refused =
                    Status::error(ErrorCode::invalid_argument, "BatchScheduler::submit: size ",
                                  o.size, " is outside [1, max_batch_size = ", size_limit_, "]");
            } else if (o.priority < 0 || o.priority >= opts_.priority_levels) {
                refused = Status::error(ErrorCode::invalid_argument, "BatchScheduler::submit: priority ",
                                        o.priority, " is outside [0, ", opts_.priority_levels, ")");
            } else if (o.cancel.cancelled()) {
                refused = Status(ErrorCode::cancelled, "the request was cancelled before it was queued");
                path = Path::cancelled;
            } else if (o.deadline && *o.deadline <= r.submitted) {
                refused = Status(ErrorCode::deadline_exceeded, "the deadline had passed at submission");
                path = Path::deadline;
            } else if (!accepting_) {
                refused = Status(ErrorCode::unavailable, "the scheduler is shutting down");
            } else if (queued_ >= opts_.max_queue_size) {
                refused = Status::error(ErrorCode::unavailable, "the queue is full (", opts_.max_queue_size,
                                        " requests)");
            } else {
                r.seq = next_seq_++;
                queues_[o.batch_key].emplace(Order{o.priority, r.seq}, p);
                if (o.deadline) {
                    wake_timer = deadlines_.empty() || *o.deadline < deadlines_.begin()->first.first;
                    deadlines_.emplace(std::make_pair(*o.deadline, r.seq), p);
                }
                r.where = Where::queued;
                ++queued_;
                ++outstanding_;
                wake_worker = idle_workers_ > 0;
            }
        }
        if (!refused.is_ok()) {
            finish(r, std::move(refused), path, {});
            return;
        }
        if (wake_worker) work_.notify_one();
        if (wake_timer) timer_cv_.notify_one();
        // Registered after queueing: if the token was cancelled meanwhile, the callback runs
        // right here and takes the request out of the queue.
        const std::uint64_t id = r.options.cancel.on_cancel([this, p] { cancel_queued(p); });
        std::uint64_t expected = 0;
        if (id != 0 && !r.cancel_id.compare_exchange_strong(expected, id, std::memory_order_acq_rel))
            r.options.cancel.remove_callback(id);  // the outcome was decided in the meantime
    }

    void cancel_queued(const PendingPtr& p) {
        bool wake_worker = false;
        {
            std::lock_guard<std::mutex> lock(m_);
            if (p->where != Where::queued) return;  // running or done: no effect
            unqueue(*p);
            wake_worker = idle_workers_ > 0;  // the rest of its batch may be ready now
        }
        if (wake_worker) work_.notify_one();
        finish(*p, Status(ErrorCode::cancelled, "the request was cancelled while queued"), Path::cancelled, {});
        release(1);
    }

    /// Takes a queued request out of the queue and the deadline index (m_ held).
    void unqueue(Pending& r, bool erase_empty_key = true) {
        const auto q = queues_.find(r.options.batch_key);
        q->second.erase(Order{r.options.priority, r.seq});
        if (erase_empty_key && q->second.empty()) queues_.erase(q);
        if (r.options.deadline) deadlines_.erase(std::make_pair(*r.options.deadline, r.seq));
        r.where = Where::removed;
        --queued_;
    }

    /// Outcomes decided, delivered: lets shutdown()/the destructor see the scheduler drained.
    void release(std::size_t n) {
        if (n == 0) return;
        std::lock_guard<std::mutex> lock(m_);
        outstanding_ -= n;
        if (outstanding_ == 0) drained_.notify_all();
    }

    bool preferred(std::size_t items) const {
        return std::binary_search(opts_.preferred_batch_sizes.begin(), opts_.preferred_batch_sizes.end(),
                                  items);
    }

    /// Picks the next dispatchable batch (m_ held): for each batch key, the candidate is its
    /// queued requests in (priority, arrival) order while they fit in max_batch_size items;
    /// it is dispatchable when full (the next one does not fit or the items reach the
    /// maximum), when a prefix reaches a preferred size (the longest such prefix is taken),
    /// when its oldest member has waited max_queue_delay, or while draining. Among the
    /// dispatchable candidates the one with the most urgent leader wins. Requests found past
    /// their deadline go to `expired`; `wake` gets the earliest time a candidate becomes due.
    std::vector<PendingPtr> take_batch(Clock::time_point now, std::vector<PendingPtr>& expired,
                                       std::optional<Clock::time_point>& wake) {
        const std::size_t max_items = opts_.max_batch_size;
        KeyQueue* best = nullptr;
        std::size_t best_n = 0;
        for (auto qit = queues_.begin(); qit != queues_.end();) {
            KeyQueue& q = qit->second;
            std::size_t n = 0, items = 0, preferred_n = 0;
            bool full = false;
            Clock::time_point oldest = Clock::time_point::max();
            for (auto it = q.begin(); it != q.end();) {
                Pending& r = *it->second;
                if (r.options.deadline && *r.options.deadline <= now) {
                    expired.push_back(it->second);
                    ++it;
                    unqueue(r, false);  // erases the entry `it` has just left, keeps `q`
                    continue;
                }
                if (n > 0 && items + r.options.size > max_items) {
                    full = true;
                    break;
                }
                ++n;
                items += r.options.size;
                oldest = std::min(oldest, r.submitted);
                if (items >= max_items) {
                    full = true;
                    break;
                }
                if (preferred(items)) preferred_n = n;
                ++it;
            }
            if (q.empty()) {  // every request of this key had expired
                qit = queues_.erase(qit);
                continue;
            }
            std::size_t take = 0;
            if (full || draining_) {
                take = n;
            } else if (preferred_n > 0) {
                take = preferred_n;
            } else if (now - oldest >= delay_) {
                take = n;
            } else {
                const Clock::time_point due = oldest + delay_;
                if (!wake || due < *wake) wake = due;
            }
            if (take > 0 && (best == nullptr || q.begin()->first < best->begin()->first)) {
                best = &q;
                best_n = take;
            }
            ++qit;
        }
        std::vector<PendingPtr> batch;
        if (best == nullptr) return batch;
        batch.reserve(best_n);
        for (auto it = best->begin(); batch.size() < best_n; ++it) batch.push_back(it->second);
        for (auto& p : batch) {
            unqueue(*p);  // may erase *best, so `best` is not used after this loop
            p->where = Where::running;
            p->dispatched = now;
        }
        running_ += batch.size();
        return batch;
    }

    void worker_loop() {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            if (stop_ && queued_ == 0) return;
            std::vector<PendingPtr> expired;
            std::optional<Clock::time_point> wake;
            std::vector<PendingPtr> batch = take_batch(Clock::now(), expired, wake);
            if (batch.empty() && expired.empty()) {
                ++idle_workers_;
                if (wake) work_.wait_until(lock, *wake);
                else work_.wait(lock);
                --idle_workers_;
                continue;
            }
            if (!batch.empty() && queued_ > 0 && idle_workers_ > 0) work_.notify_one();
            lock.unlock();
            for (auto& p : expired)
                finish(*p, Status(ErrorCode::deadline_exceeded, "the deadline passed while the request was queued"),
                       Path::deadline, {});
            if (!batch.empty()) execute(batch);
            const std::size_t done = batch.size() + expired.size();
            batch.clear();  // requests are destroyed outside the lock
            expired.clear();
            lock.lock();
            outstanding_ -= done;
            if (outstanding_ == 0) drained_.notify_all();
        }
    }

    void execute(std::vector<PendingPtr>& requests) {
        Batch batch(requests);
        std::optional<Status> thrown;
        const auto t0 = Clock::now();
        try {
            fn_(batch);
        } catch (const Error& e) {
            thrown = Status(e.code() == ErrorCode::ok ? ErrorCode::internal : e.code(),
                            "the batch function failed: " + e.message());
        } catch (const std::exception& e) {
            thrown = Status::error(ErrorCode::internal, "the batch function threw: ", e.what());
        } catch (...) {
            thrown = Status(ErrorCode::internal, "the batch function threw a non-standard exception");
        }
        const auto compute = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
        batches_.fetch_add(1, std::memory_order_relaxed);
        items_.fetch_add(batch.items(), std::memory_order_relaxed);
        if (opts_.observer) opts_.observer->on_batch(requests.size(), batch.items(), compute);
        {
            std::lock_guard<std::mutex> lock(m_);
            running_ -= requests.size();
        }
        for (std::size_t i = 0; i < requests.size(); ++i) {
            auto& answer = batch.answers_[i];
            if (!answer) {
                answer.emplace(thrown ? *thrown
                                      : Status::error(ErrorCode::internal, "the batch function returned without "
                                                      "answering request ", i, " of ", requests.size()));
            }
            const Path path = answer->is_ok() ? Path::ok : Path::failed;
            finish(*requests[i], std::move(*answer), path, compute);
        }
    }

    void timer_loop() {
        std::unique_lock<std::mutex> lock(m_);
        while (!stop_) {
            if (deadlines_.empty()) {
                timer_cv_.wait(lock);
                continue;
            }
            const Clock::time_point now = Clock::now();
            const Clock::time_point first = deadlines_.begin()->first.first;
            if (first > now) {
                timer_cv_.wait_until(lock, first);
                continue;
            }
            std::vector<PendingPtr> expired;
            while (!deadlines_.empty() && deadlines_.begin()->first.first <= now) {
                expired.push_back(deadlines_.begin()->second);
                unqueue(*expired.back());
            }
            if (idle_workers_ > 0) work_.notify_one();  // the rest of a batch may be ready now
            lock.unlock();
            for (auto& p : expired)
                finish(*p, Status(ErrorCode::deadline_exceeded, "the deadline passed while the request was queued"),
                       Path::deadline, {});
            const std::size_t done = expired.size();
            expired.clear();
            lock.lock();
            outstanding_ -= done;
            if (outstanding_ == 0) drained_.notify_all();
        }
    }

    /// Delivers the outcome of `r` (no lock held): once; counts it, tells the observer, then
    /// sets the future or calls the callback.
    void finish(Pending& r, StatusOr<Response> outcome, Path path, std::chrono::nanoseconds compute) {
        if (r.answered.exchange(true, std::memory_order_acq_rel)) return;
        const std::uint64_t id = r.cancel_id.exchange(kCallbackDone, std::memory_order_acq_rel);
        if (id != 0 && id != kCallbackDone) r.options.cancel.remove_callback(id);
        const auto now = Clock::now();
        const bool ran = r.dispatched != Clock::time_point{};
        const auto queue_time =
            std::chrono::duration_cast<std::chrono::nanoseconds>((ran ? r.dispatched : now) - r.submitted);
        const auto total = std::chrono::duration_cast<std::chrono::nanoseconds>(now - r.submitted);
        outcomes_[static_cast<std::size_t>(path)].fetch_add(1, std::memory_order_relaxed);
        if (opts_.observer)
            opts_.observer->on_request_done(outcome.is_ok() ? ErrorCode::ok : outcome.status().code(), queue_time,
                                            compute, total);
        if (auto* promise = std::get_if<std::promise<Response>>(&r.sink)) {
            try {
                if (outcome.is_ok()) promise->set_value(std::move(outcome).value());
                else promise->set_exception(std::make_exception_ptr(Error(outcome.status())));
            } catch (...) {  // a throwing Response move: the future gets that exception
                try {
                    promise->set_exception(std::current_exception());
                } catch (...) {
                }
            }
        } else if (auto* cb = std::get_if<Callback>(&r.sink)) {
            try {
                (*cb)(std::move(outcome));
            } catch (...) {
                callback_errors_.fetch_add(1, std::memory_order_relaxed);
            }
            *cb = nullptr;  // release its captures now
        }
    }

    void stop_threads() {
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_ = true;
        }
        work_.notify_all();
        timer_cv_.notify_all();
        for (auto& t : workers_)
            if (t.joinable()) t.join();
        if (timer_.joinable()) timer_.join();
    }

    BatchFunction fn_;
    BatchSchedulerOptions opts_;  // max_batch_size/max_queue_delay change at run time (m_)
    std::chrono::nanoseconds delay_{};  // opts_.max_queue_delay, clamped (m_)
    std::size_t size_limit_ = 1;        // the largest max_batch_size so far: submit's limit (m_)

    mutable std::mutex m_;
    std::condition_variable work_;      // workers: new requests, options changed, stop
    std::condition_variable timer_cv_;  // timer: an earlier deadline, stop
    std::condition_variable drained_;   // outstanding_ reached 0
    std::map<std::uint64_t, KeyQueue> queues_;  // batch_key -> queued requests
    std::map<std::pair<Clock::time_point, std::uint64_t>, PendingPtr> deadlines_;
    std::uint64_t next_seq_ = 1;
    std::size_t queued_ = 0;
    std::size_t running_ = 0;
    std::size_t outstanding_ = 0;  // accepted requests whose outcome is not delivered yet
    int idle_workers_ = 0;
    bool accepting_ = true;
    bool draining_ = false;
    bool stop_ = false;

    std::atomic<std::uint64_t> submitted_{0}, batches_{0}, items_{0}, callback_errors_{0};
    std::atomic<std::uint64_t> outcomes_[static_cast<std::size_t>(Path::count_)]{};

    std::vector<std::thread> workers_;
    std::thread timer_;
};

}  // namespace dsinfer
