// BatchScheduler (include/dsinfer/batch_scheduler.hpp) and CancellationToken
// (include/dsinfer/cancellation.hpp): token callbacks; option and submit validation; results
// reach their own requests; batch formation (full, delay, preferred sizes, priorities, batch
// keys, item sizes); deadlines answered by the timer while the workers are busy; cancellation;
// the bounded queue; batch-function failures and double answers; throwing callbacks;
// shutdown and the destructor; concurrent workers; the observer and statistics; runtime tuning;
// no CPU use while idle; and the storm (DSINFER_STORM_THREADS x DSINFER_STORM_REQUESTS
// requests, default 64 x 10,000, with cancellations, deadlines, priorities, keys and overflow).
//
// Catch2 assertions are made on the test's own thread only; scheduler threads record into
// atomics that are checked afterwards. Sleeps only create waiting situations; every wait for
// an event is on a condition with a generous timeout.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dsinfer/batch_scheduler.hpp"
#include "dsinfer/cancellation.hpp"

#include "test_env.hpp"

namespace {

using namespace dsinfer;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Sched = BatchScheduler<int, int>;

constexpr auto kLong = 10s;  // "never" for waits that must end much sooner

/// A one-shot gate with timed waits (never hangs a test).
class Gate {
public:
    void open() {
        std::lock_guard<std::mutex> lock(m_);
        open_ = true;
        cv_.notify_all();
    }
    bool wait(std::chrono::milliseconds timeout = kLong) {
        std::unique_lock<std::mutex> lock(m_);
        return cv_.wait_for(lock, timeout, [&] { return open_; });
    }
    bool is_open() {
        std::lock_guard<std::mutex> lock(m_);
        return open_;
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool open_ = false;
};

/// Polls `pred` every millisecond until it holds or `timeout` passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = kLong) {
    const auto until = Clock::now() + timeout;
    while (!pred()) {
        if (Clock::now() > until) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

template <class T>
bool ready(std::future<T>& f, std::chrono::milliseconds timeout = 0ms) {
    return f.wait_for(timeout) == std::future_status::ready;
}

/// The code a future ends with (ok for a value).
template <class T>
ErrorCode code_of(std::future<T>& f) {
    try {
        f.get();
        return ErrorCode::ok;
    } catch (const Error& e) {
        return e.code();
    }
}

/// Records the batches a batch function saw (as lists of request values) and answers 2x+1.
/// Requests with value < 0 block their batch until `gate` opens.
struct Recorder {
    std::mutex m;
    std::vector<std::vector<int>> batches;
    std::vector<std::size_t> items;
    std::set<int> executed;
    Gate gate;
    Gate entered;  // a blocking batch has started

    Sched::BatchFunction fn() {
        return [this](Sched::Batch& b) {
            std::vector<int> ids;
            bool block = false;
            for (std::size_t i = 0; i < b.size(); ++i) {
                ids.push_back(b.request(i));
                block = block || b.request(i) < 0;
            }
            {
                std::lock_guard<std::mutex> lock(m);
                batches.push_back(ids);
                items.push_back(b.items());
                executed.insert(ids.begin(), ids.end());
            }
            if (block) {
                entered.open();
                gate.wait();
            }
            for (std::size_t i = 0; i < b.size(); ++i) b.set_result(i, 2 * b.request(i) + 1);
        };
    }
    /// Submits the blocking request -1 and waits until it runs: the worker is held until `gate`
    /// opens (with one worker, everything submitted meanwhile stays queued).
    std::future<int> hold(Sched& s, SubmitOptions o = {}) {
        auto blocker = s.submit(-1, std::move(o));
        REQUIRE(entered.wait());
        return blocker;
    }
    std::vector<std::vector<int>> seen() {
        std::lock_guard<std::mutex> lock(m);
        return batches;
    }
    std::vector<std::size_t> seen_items() {
        std::lock_guard<std::mutex> lock(m);
        return items;
    }
    bool ran(int id) {
        std::lock_guard<std::mutex> lock(m);
        return executed.count(id) > 0;
    }
};

BatchSchedulerOptions opts(std::size_t max_batch, std::chrono::microseconds delay, int workers = 1) {
    BatchSchedulerOptions o;
    o.max_batch_size = max_batch;
    o.max_queue_delay = delay;
    o.num_workers = workers;
    return o;
}

SubmitOptions with(int priority, std::uint64_t key, std::size_t size = 1) {
    SubmitOptions o;
    o.priority = priority;
    o.batch_key = key;
    o.size = size;
    return o;
}

// ---------------------------------------------------------------------------------------------
// CancellationToken

TEST_CASE("cancellation token: copies share one state; callbacks run once; late ones run at once",
          "[scheduler][cancellation]") {
    CancellationToken a;
    CancellationToken b = a;  // same token
    CancellationToken other;
    CHECK(a == b);
    CHECK_FALSE(a == other);
    int runs = 0, removed_runs = 0;
    a.on_cancel([&] { ++runs; });
    const auto gone = b.on_cancel([&] { ++removed_runs; });
    b.remove_callback(gone);
    a.on_cancel([] { throw std::runtime_error("swallowed"); });
    a.on_cancel([&] { ++runs; });  // still runs after a throwing callback
    CHECK_FALSE(b.cancelled());
    b.cancel();
    CHECK(a.cancelled());
    CHECK_FALSE(other.cancelled());
    CHECK(runs == 2);
    CHECK(removed_runs == 0);
    a.cancel();  // idempotent
    CHECK(runs == 2);
    int late = 0;
    CHECK(a.on_cancel([&] { ++late; }) == 0);  // already cancelled: ran here, nothing to remove
    CHECK(late == 1);
}

TEST_CASE("cancellation token: remove_callback waits for a running callback; inside it does not",
          "[scheduler][cancellation]") {
    CancellationToken token;
    Gate entered, release;
    std::atomic<bool> finished{false};
    const auto id = token.on_cancel([&] {
        entered.open();
        release.wait();
        finished = true;
    });
    std::atomic<std::uint64_t> self_id{0};
    std::atomic<bool> self_removed{false};
    self_id = token.on_cancel([&] {
        token.remove_callback(self_id.load());  // from inside itself: must not deadlock
        self_removed = true;
    });
    std::thread canceller([&] { token.cancel(); });
    REQUIRE(entered.wait());
    std::atomic<bool> remover_done{false}, saw_finished{false};
    std::thread remover([&] {
        token.remove_callback(id);
        saw_finished = finished.load();
        remover_done = true;
    });
    std::this_thread::sleep_for(30ms);
    CHECK_FALSE(remover_done.load());  // still blocked: the callback is running
    release.open();
    remover.join();
    canceller.join();
    CHECK(saw_finished.load());  // it returned only after the callback had finished
    CHECK(self_removed.load());
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST_CASE("scheduler options are validated", "[scheduler]") {
    Recorder rec;
    auto bad = [&](BatchSchedulerOptions o) {
        try {
            Sched s(rec.fn(), o);
        } catch (const Error& e) {
            return e.code() == ErrorCode::invalid_argument;
        }
        return false;
    };
    BatchSchedulerOptions o;
    CHECK_FALSE(bad(o));
    o.max_batch_size = 0;
    CHECK(bad(o));
    o = {};
    o.preferred_batch_sizes = {4, 9};  // 9 > max_batch_size 8
    CHECK(bad(o));
    o.preferred_batch_sizes = {0};
    CHECK(bad(o));
    o = {};
    o.priority_levels = 0;
    CHECK(bad(o));
    o = {};
    o.max_queue_size = 0;
    CHECK(bad(o));
    o = {};
    o.num_workers = 0;
    CHECK(bad(o));
    o = {};
    o.max_queue_delay = std::chrono::microseconds(-1);
    CHECK(bad(o));
    CHECK_THROWS_AS(Sched(Sched::BatchFunction{}, BatchSchedulerOptions{}), Error);
    o = {};
    o.preferred_batch_sizes = {4, 2, 4};
    Sched s(rec.fn(), o);
    CHECK(s.options().preferred_batch_sizes == std::vector<std::size_t>{2, 4});
}

TEST_CASE("invalid submissions are answered invalid_argument before submit returns", "[scheduler]") {
    Recorder rec;
    BatchSchedulerOptions o = opts(4, 0us);
    o.priority_levels = 2;
    Sched s(rec.fn(), o);
    auto f1 = s.submit(1, with(0, 0, 0));  // size 0
    auto f2 = s.submit(2, with(0, 0, 5));  // size > max_batch_size
    auto f3 = s.submit(3, with(2, 0));     // priority out of range
    auto f4 = s.submit(4, with(-1, 0));
    for (auto* f : {&f1, &f2, &f3, &f4}) {
        REQUIRE(ready(*f));
        CHECK(code_of(*f) == ErrorCode::invalid_argument);
    }
    bool called = false;
    s.submit(5, [&](StatusOr<int> r) { called = !r.is_ok() && r.status().code() == ErrorCode::invalid_argument; },
             with(0, 0, 9));
    CHECK(called);
    CHECK_THROWS_AS(s.submit(6, Sched::Callback{}), Error);
    CHECK(s.shutdown(5s));
    CHECK(rec.seen().empty());
    const auto st = s.stats();
    CHECK(st.submitted == 5);
    CHECK(st.rejected == 5);
}

// ---------------------------------------------------------------------------------------------
// Results and batch formation

TEST_CASE("each response reaches its own request, in the future and the callback forms", "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(4, 100us, 2));
    std::vector<std::future<int>> futures;
    std::vector<int> got(200, -1);
    std::atomic<int> callbacks{0};
    for (int i = 0; i < 200; ++i) {
        if (i % 2 == 0) {
            futures.push_back(s.submit(i));
        } else {
            s.submit(i, [&, i](StatusOr<int> r) {
                got[static_cast<std::size_t>(i)] = r.is_ok() ? *r : -2;
                ++callbacks;
            });
        }
    }
    for (std::size_t k = 0; k < futures.size(); ++k) CHECK(futures[k].get() == 2 * static_cast<int>(2 * k) + 1);
    REQUIRE(s.shutdown(5s));
    CHECK(callbacks == 100);
    for (int i = 1; i < 200; i += 2) CHECK(got[static_cast<std::size_t>(i)] == 2 * i + 1);
    for (const auto& b : rec.seen()) CHECK(b.size() <= 4);
    const auto st = s.stats();
    CHECK(st.ok == 200);
    CHECK(st.items == 200);
    CHECK(st.queued == 0);
    CHECK(st.running == 0);
}

TEST_CASE("a full batch is dispatched at once; a partial one waits max_queue_delay", "[scheduler]") {
    Recorder rec;
    SECTION("full: no wait for the 10 s delay") {
        Sched s(rec.fn(), opts(4, std::chrono::microseconds(kLong)));
        std::vector<std::future<int>> fs;
        for (int i = 0; i < 4; ++i) fs.push_back(s.submit(i));
        for (auto& f : fs) CHECK(ready(f, 5000ms));
        CHECK(rec.seen() == std::vector<std::vector<int>>{{0, 1, 2, 3}});
    }
    SECTION("partial: dispatched after the delay, not before") {
        std::atomic<Clock::rep> called_at{0};
        Sched s(
            [&](Sched::Batch& b) {
                called_at = Clock::now().time_since_epoch().count();
                b.set_result(0, 1);
            },
            opts(8, 200ms));
        const auto t0 = Clock::now();
        auto f = s.submit(7);
        REQUIRE(ready(f, 5000ms));
        CHECK(Clock::time_point(Clock::duration(called_at.load())) - t0 >= 200ms);
    }
}

TEST_CASE("batches are led by the most urgent request and filled in priority-then-FIFO order "
          "within a batch key", "[scheduler]") {
    Recorder rec;
    BatchSchedulerOptions o = opts(3, 0us);
    o.priority_levels = 3;
    Sched s(rec.fn(), o);
    auto blocker = rec.hold(s, with(0, 9));
    // id: priority, key
    const std::vector<std::pair<int, std::uint64_t>> spec = {
        {2, 0}, {1, 1}, {0, 0}, {1, 0}, {2, 1}, {0, 0}, {0, 1}, {1, 0}};
    std::vector<std::future<int>> fs;
    for (std::size_t i = 0; i < spec.size(); ++i)
        fs.push_back(s.submit(static_cast<int>(i) + 1, with(spec[i].first, spec[i].second)));
    CHECK(s.stats().queued == 8);
    rec.gate.open();
    for (auto& f : fs) CHECK(ready(f, 5000ms));
    CHECK(blocker.get() == -1);
    // key 0 holds 3,6 (p0) 4,8 (p1) 1 (p2); key 1 holds 7 (p0) 2 (p1) 5 (p2).
    const std::vector<std::vector<int>> want = {{-1}, {3, 6, 4}, {7, 2, 5}, {8, 1}};
    CHECK(rec.seen() == want);
}

TEST_CASE("a worker runs another key's ready batch while the most urgent one waits to fill",
          "[scheduler]") {
    Recorder rec;
    BatchSchedulerOptions o = opts(2, std::chrono::microseconds(kLong));
    o.priority_levels = 2;
    Sched s(rec.fn(), o);
    auto waiting = s.submit(1, with(0, 0));  // partial batch of key 0, would wait 10 s
    auto a = s.submit(2, with(1, 1));
    auto b = s.submit(3, with(1, 1));  // key 1 is full now
    CHECK(ready(a, 5000ms));
    CHECK(ready(b, 5000ms));
    CHECK_FALSE(ready(waiting));
    CHECK(s.shutdown(5s));  // draining does not wait for the delay
    CHECK(waiting.get() == 3);
}

TEST_CASE("preferred batch sizes dispatch at once, the largest reachable one first", "[scheduler]") {
    Recorder rec;
    BatchSchedulerOptions o = opts(8, std::chrono::microseconds(kLong));
    o.preferred_batch_sizes = {2, 4};
    Sched s(rec.fn(), o);
    SECTION("one request waits, a second makes a preferred batch of 2") {
        auto f1 = s.submit(1);
        std::this_thread::sleep_for(100ms);
        CHECK(rec.seen().empty());
        auto f2 = s.submit(2);
        CHECK(ready(f1, 5000ms));
        CHECK(ready(f2, 5000ms));
        CHECK(rec.seen() == std::vector<std::vector<int>>{{1, 2}});
    }
    SECTION("cancelling a request can leave a preferred batch behind: it goes at once") {
        SubmitOptions first;
        auto a = s.submit(1, first);           // 1 item
        auto b = s.submit(2, with(0, 0, 2));   // 1 + 2 = 3: no preferred size, both wait
        std::this_thread::sleep_for(50ms);
        CHECK_FALSE(ready(b));
        first.cancel.cancel();                 // now 2 items: preferred
        CHECK(code_of(a) == ErrorCode::cancelled);
        CHECK(ready(b, 5000ms));
        CHECK(rec.seen() == std::vector<std::vector<int>>{{2}});
    }
    SECTION("five queued requests: a batch of 4 goes, 1 stays") {
        auto blocker = rec.hold(s, with(0, 0, 8));  // full: dispatched at once
        std::vector<std::future<int>> fs;
        for (int i = 1; i <= 5; ++i) fs.push_back(s.submit(i));
        rec.gate.open();
        for (int i = 0; i < 4; ++i) CHECK(ready(fs[static_cast<std::size_t>(i)], 5000ms));
        CHECK(eventually([&] { return s.stats().running == 0; }));
        CHECK(s.stats().queued == 1);
        CHECK_FALSE(ready(fs[4]));
        CHECK(s.shutdown(5s));
        CHECK(fs[4].get() == 11);
        CHECK(rec.seen() == std::vector<std::vector<int>>{{-1}, {1, 2, 3, 4}, {5}});
    }
    SECTION("sizes count as items: 3+1 makes 4, then 2 alone is preferred, 1 waits") {
        auto blocker = rec.hold(s, with(0, 0, 8));
        auto a = s.submit(1, with(0, 0, 3));
        auto b = s.submit(2, with(0, 0, 1));
        auto c = s.submit(3, with(0, 0, 2));
        auto d = s.submit(4, with(0, 0, 1));
        rec.gate.open();
        CHECK(ready(a, 5000ms));
        CHECK(ready(c, 5000ms));
        CHECK(eventually([&] { return s.stats().running == 0; }));
        CHECK_FALSE(ready(d));
        CHECK(s.shutdown(5s));
        CHECK(rec.seen() == std::vector<std::vector<int>>{{-1}, {1, 2}, {3}, {4}});
        CHECK(rec.seen_items() == std::vector<std::size_t>{8, 4, 2, 1});
    }
}

TEST_CASE("batches never mix keys nor exceed max_batch_size items", "[scheduler]") {
    std::atomic<int> mixed{0}, oversized{0};
    std::atomic<std::size_t> largest{0};
    Sched s(
        [&](Sched::Batch& b) {
            std::size_t items = 0;
            for (std::size_t i = 0; i < b.size(); ++i) {
                items += b.options(i).size;
                if (b.options(i).batch_key != b.batch_key() ||
                    static_cast<std::uint64_t>(b.request(i) % 3) != b.batch_key())
                    ++mixed;
                b.set_result(i, b.request(i));
            }
            if (items != b.items() || items > 8) ++oversized;
            std::size_t prev = largest.load();
            while (items > prev && !largest.compare_exchange_weak(prev, items)) {
            }
        },
        opts(8, 300us, 2));
    std::mt19937 rng(5);
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 600; ++i) fs.push_back(s.submit(i, with(0, static_cast<std::uint64_t>(i % 3), 1 + rng() % 8)));
    for (std::size_t i = 0; i < fs.size(); ++i) CHECK(fs[i].get() == static_cast<int>(i));
    CHECK(mixed == 0);
    CHECK(oversized == 0);
    CHECK(largest > 1);  // requests did share batches
}

// ---------------------------------------------------------------------------------------------
// Deadlines and cancellation

TEST_CASE("a queued request's deadline is answered by the timer while the worker is busy",
          "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(1, 0us));
    auto blocker = rec.hold(s);
    SubmitOptions d;
    d.deadline = Clock::now() + 50ms;
    auto f = s.submit(1, d);
    REQUIRE(ready(f, 5000ms));
    CHECK_FALSE(rec.gate.is_open());  // answered while the only worker was still blocked
    CHECK(code_of(f) == ErrorCode::deadline_exceeded);
    SECTION("past at submission: answered before submit returns") {
        SubmitOptions past;
        past.deadline = Clock::now() - 1ms;
        auto g = s.submit(2, past);
        CHECK(ready(g));
        CHECK(code_of(g) == ErrorCode::deadline_exceeded);
        bool answered = false;
        s.submit(3, [&](StatusOr<int> r) { answered = r.status().code() == ErrorCode::deadline_exceeded; }, past);
        CHECK(answered);
    }
    rec.gate.open();
    CHECK(blocker.get() == -1);
    CHECK(s.shutdown(5s));
    CHECK_FALSE(rec.ran(1));
    CHECK_FALSE(rec.ran(2));
    CHECK(s.stats().deadline_exceeded == s.stats().submitted - 1);
}

TEST_CASE("cancelling a queued request answers it at once; a running one is unaffected",
          "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(1, 0us));
    SubmitOptions running_opts;
    auto blocker = rec.hold(s, running_opts);
    running_opts.cancel.cancel();  // the blocker is running: no effect
    SubmitOptions q;
    auto f = s.submit(1, q);
    std::atomic<int> cb_code{-1};
    SubmitOptions q2;
    s.submit(2, [&](StatusOr<int> r) { cb_code = static_cast<int>(r.status().code()); }, q2);
    CHECK_FALSE(ready(f));
    q.cancel.cancel();
    CHECK(ready(f));  // answered inside cancel()
    CHECK(code_of(f) == ErrorCode::cancelled);
    q2.cancel.cancel();
    CHECK(cb_code == static_cast<int>(ErrorCode::cancelled));
    SubmitOptions pre;
    pre.cancel.cancel();
    auto g = s.submit(3, pre);
    CHECK(ready(g));
    CHECK(code_of(g) == ErrorCode::cancelled);
    rec.gate.open();
    CHECK(blocker.get() == -1);
    auto h_opts = SubmitOptions{};
    auto h = s.submit(4, h_opts);
    CHECK(h.get() == 9);
    h_opts.cancel.cancel();  // finished: no effect, no callback left behind
    CHECK(s.shutdown(5s));
    CHECK_FALSE(rec.ran(1));
    CHECK_FALSE(rec.ran(2));
    CHECK_FALSE(rec.ran(3));
    const auto st = s.stats();
    CHECK(st.cancelled == 3);
    CHECK(st.ok == 2);
}

// ---------------------------------------------------------------------------------------------
// Back-pressure

TEST_CASE("the queue is bounded: Q + k submissions give exactly k immediate unavailable",
          "[scheduler]") {
    constexpr std::size_t Q = 5, k = 3;
    Recorder rec;
    BatchSchedulerOptions o = opts(1, 0us);
    o.max_queue_size = Q;
    Sched s(rec.fn(), o);
    auto blocker = rec.hold(s);
    std::vector<std::future<int>> fs;
    std::size_t immediate = 0;
    for (std::size_t i = 0; i < Q + k - 1; ++i) {
        fs.push_back(s.submit(static_cast<int>(i)));
        if (ready(fs.back())) {
            ++immediate;
            CHECK(i >= Q);
            CHECK(code_of(fs.back()) == ErrorCode::unavailable);
        }
    }
    bool cb_before_return = false;
    s.submit(100, [&](StatusOr<int> r) { cb_before_return = r.status().code() == ErrorCode::unavailable; });
    CHECK(cb_before_return);
    CHECK(immediate + 1 == k);
    CHECK(s.stats().queued == Q);
    rec.gate.open();
    for (std::size_t i = 0; i < Q; ++i) CHECK(fs[i].get() == 2 * static_cast<int>(i) + 1);
    CHECK(s.shutdown(5s));
    const auto st = s.stats();
    CHECK(st.rejected == k);
    CHECK(st.ok == Q + 1);
}

// ---------------------------------------------------------------------------------------------
// Failures: exactly one outcome

struct Job {
    int id;
    int mode;  // 0 answer, 1 do not answer, 2 answer twice, 3 throw dsinfer::Error, 4 throw other
};
using JobSched = BatchScheduler<Job, int>;

TEST_CASE("batch-function failures and double answers: exactly one outcome per request",
          "[scheduler]") {
    Gate gate, entered;
    JobSched s(
        [&](JobSched::Batch& b) {
            if (b.request(0).id < 0) {
                entered.open();
                gate.wait();
            }
            int mode = 0;
            for (std::size_t i = 0; i < b.size(); ++i) mode = std::max(mode, b.request(i).mode);
            for (std::size_t i = 0; i < b.size(); ++i) {
                const int id = b.request(i).id;
                if (id % 2 == 0 || mode == 0 || mode == 2) b.set_result(i, id);  // evens always
                if (mode == 2) {  // answered twice more: ignored
                    b.set_result(i, -100);
                    b.set_error(i, Status(ErrorCode::internal, "late"));
                }
            }
            if (mode == 3) throw Error(ErrorCode::resource_exhausted, "out of memory");
            if (mode == 4) throw std::runtime_error("boom");
        },
        opts(4, 0us));
    std::mutex m;
    std::vector<std::pair<int, ErrorCode>> outcomes;
    auto sub = [&](int id, int mode) {
        s.submit({id, mode}, [&, id](StatusOr<int> r) {
            std::lock_guard<std::mutex> lock(m);
            outcomes.emplace_back(id, r.is_ok() ? ErrorCode::ok : r.status().code());
            if (r.is_ok() && *r != id) outcomes.emplace_back(id, ErrorCode::io_error);  // misrouted
        });
    };
    sub(-2, 0);
    REQUIRE(entered.wait());
    for (int mode = 1; mode <= 4; ++mode)  // one batch of 4 per mode: ids 10*mode + 0..3
        for (int j = 0; j < 4; ++j) sub(10 * mode + j, j == 3 ? mode : 0);
    gate.open();
    REQUIRE(s.shutdown(5s));
    std::map<int, std::vector<ErrorCode>> by_id;
    for (auto& [id, code] : outcomes) by_id[id].push_back(code);
    CHECK(by_id.size() == 17);
    for (auto& [id, codes] : by_id) {
        INFO("request " << id);
        REQUIRE(codes.size() == 1);
        const int mode = id / 10;
        const bool answered = id % 2 == 0;
        ErrorCode want = ErrorCode::ok;
        if (!answered && mode == 1) want = ErrorCode::internal;  // not answered
        if (!answered && mode == 3) want = ErrorCode::resource_exhausted;
        if (!answered && mode == 4) want = ErrorCode::internal;
        CHECK(codes[0] == want);
    }
    const auto st = s.stats();
    CHECK(st.ok + st.failed == 17);
    CHECK(st.failed == 6);
}

TEST_CASE("a throwing callback is contained and counted", "[scheduler]") {
    Recorder rec;
    BatchSchedulerOptions o = opts(4, 0us);
    o.max_queue_size = 4;
    Sched s(rec.fn(), o);
    auto blocker = rec.hold(s);
    std::atomic<int> good{0}, calls{0};
    for (int i = 0; i < 4; ++i) {
        s.submit(i, [&, i](StatusOr<int> r) {
            ++calls;
            if (i % 2 == 0) throw std::runtime_error("callback failure");
            if (r.is_ok() && *r == 2 * i + 1) ++good;
        });
    }
    // Refused at submit (the queue is full): the throw happens on this thread, inside submit.
    CHECK_NOTHROW(s.submit(9, [](StatusOr<int>) { throw 1; }));
    rec.gate.open();
    CHECK(blocker.get() == -1);
    REQUIRE(eventually([&] { return calls == 4; }));
    auto after = s.submit(5);  // the worker survived
    CHECK(after.get() == 11);
    CHECK(s.shutdown(5s));
    CHECK(good == 2);
    CHECK(s.stats().callback_errors == 3);
}

// ---------------------------------------------------------------------------------------------
// Shutdown

TEST_CASE("shutdown drains queued and running requests without waiting for batches to fill",
          "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(8, std::chrono::microseconds(kLong)));
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 3; ++i) fs.push_back(s.submit(i));
    const auto t0 = Clock::now();
    CHECK(s.shutdown(5s));
    CHECK(Clock::now() - t0 < 5s);
    for (int i = 0; i < 3; ++i) CHECK(fs[static_cast<std::size_t>(i)].get() == 2 * i + 1);
    auto late = s.submit(5);
    REQUIRE(ready(late));
    CHECK(code_of(late) == ErrorCode::unavailable);
    CHECK(s.shutdown(0ms));  // again: nothing left
}

TEST_CASE("shutdown past its timeout cancels what is queued; the running batch finishes",
          "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(1, 0us));
    auto blocker = rec.hold(s);
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 3; ++i) fs.push_back(s.submit(i));
    CHECK_FALSE(s.shutdown(50ms));
    for (auto& f : fs) {
        REQUIRE(ready(f));
        CHECK(code_of(f) == ErrorCode::cancelled);
    }
    CHECK_FALSE(ready(blocker));
    rec.gate.open();
    CHECK(blocker.get() == -1);
    CHECK(s.shutdown(5s));
    const auto st = s.stats();
    CHECK(st.cancelled == 3);
    CHECK(st.ok == 1);
    CHECK(st.queued == 0);
    CHECK(st.running == 0);
}

TEST_CASE("the destructor cancels queued requests and waits only for the running batch",
          "[scheduler]") {
    Recorder rec;
    std::future<int> blocker;
    std::vector<std::future<int>> fs;
    std::thread opener;
    const auto t0 = Clock::now();
    {
        Sched s(rec.fn(), opts(2, std::chrono::microseconds(kLong)));
        blocker = rec.hold(s, with(0, 0, 2));
        for (int i = 0; i < 3; ++i) fs.push_back(s.submit(i));
        opener = std::thread([&] {
            std::this_thread::sleep_for(50ms);
            rec.gate.open();
        });
    }
    opener.join();
    CHECK(Clock::now() - t0 < 5s);
    CHECK(blocker.get() == -1);
    for (auto& f : fs) {
        REQUIRE(ready(f));
        CHECK(code_of(f) == ErrorCode::cancelled);
    }
}

// ---------------------------------------------------------------------------------------------
// Workers, observer, tuning, idling

TEST_CASE("num_workers batches run concurrently, never more", "[scheduler]") {
    std::mutex m;
    std::condition_variable cv;
    int inside = 0, most = 0;
    Sched s(
        [&](Sched::Batch& b) {
            std::unique_lock<std::mutex> lock(m);
            most = std::max(most, ++inside);
            cv.notify_all();
            cv.wait_for(lock, 5s, [&] { return most >= 3 || b.request(0) >= 3; });  // 3 met once
            --inside;
            lock.unlock();
            b.set_result(0, b.request(0));
        },
        opts(1, 0us, 3));
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 9; ++i) fs.push_back(s.submit(i));
    for (auto& f : fs) CHECK(ready(f, 20000ms));
    std::lock_guard<std::mutex> lock(m);
    CHECK(most == 3);
}

struct CountingObserver final : SchedulerObserver {
    std::atomic<std::uint64_t> done{0}, batches{0}, items{0}, by_code[16]{};
    std::atomic<std::uint64_t> bad_times{0};
    void on_request_done(ErrorCode code, std::chrono::nanoseconds queue, std::chrono::nanoseconds compute,
                         std::chrono::nanoseconds total) noexcept override {
        ++done;
        ++by_code[static_cast<std::size_t>(code)];
        if (queue.count() < 0 || compute.count() < 0 || total < queue + compute - 1ms) ++bad_times;
    }
    void on_batch(std::size_t, std::size_t n, std::chrono::nanoseconds) noexcept override {
        ++batches;
        items += n;
    }
    std::uint64_t count(ErrorCode c) const { return by_code[static_cast<std::size_t>(c)].load(); }
};

TEST_CASE("the observer sees every request once and every batch once; stats add up", "[scheduler]") {
    auto obs = std::make_shared<CountingObserver>();
    Recorder rec;
    BatchSchedulerOptions o = opts(4, 200us, 1);
    o.max_queue_size = 6;
    o.observer = obs;
    Sched s(
        [&](Sched::Batch& b) {
            for (std::size_t i = 0; i < b.size(); ++i)
                if (b.request(i) % 7 == 0) b.set_error(i, Status(ErrorCode::resource_exhausted, "x"));
            rec.fn()(b);  // answers the others
        },
        o);
    auto blocker = s.submit(-7);  // fills the queue behind it: some rejections
    REQUIRE(rec.entered.wait());
    std::vector<std::future<int>> fs;
    std::vector<SubmitOptions> so(40);
    for (int i = 0; i < 40; ++i) {
        if (i % 5 == 1) so[static_cast<std::size_t>(i)].deadline = Clock::now() + 1ms;
        fs.push_back(s.submit(i, so[static_cast<std::size_t>(i)]));
        if (i == 20) rec.gate.open();  // 20 submissions for 6 places: some are refused
        if (i % 5 == 3) so[static_cast<std::size_t>(i)].cancel.cancel();
    }
    for (auto& f : fs) CHECK(ready(f, 5000ms));
    CHECK(blocker.wait_for(5s) == std::future_status::ready);
    REQUIRE(s.shutdown(5s));
    const auto st = s.stats();
    CHECK(st.submitted == 41);
    CHECK(st.ok + st.failed + st.rejected + st.cancelled + st.deadline_exceeded == st.submitted);
    CHECK(st.rejected > 0);
    CHECK(obs->done == st.submitted);
    CHECK(obs->batches == st.batches);
    CHECK(obs->items == st.items);
    CHECK(obs->count(ErrorCode::ok) == st.ok);
    CHECK(obs->count(ErrorCode::unavailable) == st.rejected);
    CHECK(obs->count(ErrorCode::cancelled) == st.cancelled);
    CHECK(obs->count(ErrorCode::deadline_exceeded) == st.deadline_exceeded);
    CHECK(obs->count(ErrorCode::resource_exhausted) == st.failed);
    CHECK(obs->bad_times == 0);
}

TEST_CASE("max_batch_size and max_queue_delay can be changed at run time", "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(8, 0us));
    CHECK_THROWS_AS(s.set_max_batch_size(0), Error);
    CHECK_THROWS_AS(s.set_max_queue_delay(std::chrono::microseconds(-5)), Error);
    auto blocker = rec.hold(s);
    auto big = s.submit(1, with(0, 0, 4));  // valid when submitted
    std::vector<std::future<int>> fs;
    for (int i = 2; i < 7; ++i) fs.push_back(s.submit(i));
    s.set_max_batch_size(2);
    s.set_max_queue_delay(5ms);
    CHECK(s.options().max_batch_size == 2);
    CHECK(s.options().max_queue_delay == 5ms);
    auto too_big = s.submit(9, with(0, 0, 9));  // above the largest max_batch_size so far
    CHECK(code_of(too_big) == ErrorCode::invalid_argument);
    auto late_big = s.submit(10, with(0, 0, 3));  // above the cap now, within 8: runs alone
    rec.gate.open();
    CHECK(big.get() == 3);
    CHECK(late_big.get() == 21);
    for (auto& f : fs) CHECK(ready(f, 5000ms));
    CHECK(s.shutdown(5s));
    const auto items = rec.seen_items();
    const auto batches = rec.seen();
    REQUIRE(items.size() >= 2);
    CHECK(items[1] == 4);  // the big one ran alone
    for (std::size_t i = 2; i < items.size(); ++i) {
        if (batches[i] == std::vector<int>{10})
            CHECK(items[i] == 3);
        else
            CHECK(items[i] <= 2);
    }
}

TEST_CASE("durations far beyond any real wait do not overflow", "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(8, std::chrono::microseconds::max()));
    CHECK(s.options().max_queue_delay == std::chrono::microseconds::max());
    auto f = s.submit(1);
    CHECK_FALSE(ready(f, 20ms));  // waits "forever" for the batch to fill
    s.set_max_queue_delay(std::chrono::microseconds::max());
    CHECK(s.shutdown(std::chrono::milliseconds::max()));  // drains at once
    CHECK(f.get() == 3);
    CHECK(s.shutdown(std::chrono::milliseconds::min()));
}

double process_cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

TEST_CASE("an idle scheduler with waiting requests does not spin", "[scheduler]") {
    Recorder rec;
    Sched s(rec.fn(), opts(8, 400ms, 4));
    SubmitOptions d;
    d.deadline = Clock::now() + 2s;
    auto a = s.submit(1, d);  // a partial batch (delay timer) and a pending deadline
    const double c0 = process_cpu_seconds();
    std::this_thread::sleep_for(300ms);
    const double used = process_cpu_seconds() - c0;
    CHECK(used < 0.05);
    CHECK(a.get() == 3);
}

// ---------------------------------------------------------------------------------------------
// Storm

using dsinfer::test::env_int;

struct StormReq {
    std::uint32_t id;
    std::uint64_t payload;
};
struct StormResp {
    std::uint32_t id;
    std::uint64_t value;
};
std::uint64_t storm_f(std::uint64_t x) { return (x * 0x9E3779B97F4A7C15ull) ^ (x >> 29); }

TEST_CASE("storm: many submitters, cancellations, deadlines, priorities, keys and overflow",
          "[scheduler][storm]") {
    using StormSched = BatchScheduler<StormReq, StormResp>;
    const int threads = env_int("DSINFER_STORM_THREADS", 64);
    const int per_thread = env_int("DSINFER_STORM_REQUESTS", 10000);
    const std::size_t total = static_cast<std::size_t>(threads) * static_cast<std::size_t>(per_thread);
    constexpr std::size_t kMaxBatch = 16;
    constexpr int kChunk = 16;  // requests in flight per submitter

    struct Record {
        std::atomic<std::uint32_t> outcomes{0};
        std::atomic<std::uint32_t> executed{0};
        std::atomic<std::uint8_t> code{0};
        std::uint64_t payload = 0;
    };
    std::unique_ptr<Record[]> rec(new Record[total]);
    std::atomic<std::uint64_t> misrouted{0}, bad_batches{0}, other_codes{0}, lost{0};

    BatchSchedulerOptions o;
    o.max_batch_size = kMaxBatch;
    o.max_queue_delay = 200us;
    o.preferred_batch_sizes = {8};
    o.priority_levels = 3;
    o.max_queue_size = static_cast<std::size_t>(threads * kChunk * 3 / 8);  // < in flight: overflow
    o.num_workers = 3;
    auto obs = std::make_shared<CountingObserver>();
    o.observer = obs;
    std::atomic<std::uint64_t> batch_no{0};
    StormSched s(
        [&](StormSched::Batch& b) {
            if (b.items() > kMaxBatch) ++bad_batches;
            for (std::size_t i = 0; i < b.size(); ++i) {
                const StormReq& r = b.request(i);
                if (b.options(i).batch_key != b.batch_key() || r.id % 3 != b.batch_key()) ++bad_batches;
                rec[r.id].executed.fetch_add(1);
                b.set_result(i, StormResp{r.id, storm_f(r.payload)});
            }
            if (batch_no.fetch_add(1) % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(5));
        },
        o);

    auto record = [&](std::uint32_t id, const StatusOr<StormResp>& r) {
        Record& x = rec[id];
        if (x.outcomes.fetch_add(1) != 0) return;  // duplicates are counted by `outcomes`
        if (r.is_ok()) {
            if (r->id != id || r->value != storm_f(x.payload)) ++misrouted;
            x.code = static_cast<std::uint8_t>(ErrorCode::ok);
        } else {
            x.code = static_cast<std::uint8_t>(r.status().code());
        }
    };

    const auto t0 = Clock::now();
    std::vector<std::thread> submitters;
    for (int t = 0; t < threads; ++t) {
        submitters.emplace_back([&, t] {
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
            std::mutex m;
            std::condition_variable cv;
            int pending_callbacks = 0;
            for (int base = 0; base < per_thread; base += kChunk) {
                const int n = std::min(kChunk, per_thread - base);
                std::vector<std::pair<std::uint32_t, std::future<StormResp>>> futures;
                std::vector<CancellationToken> cancel_later;
                for (int j = 0; j < n; ++j) {
                    const auto id = static_cast<std::uint32_t>(static_cast<std::size_t>(t) * static_cast<std::size_t>(per_thread) +
                                                               static_cast<std::size_t>(base + j));
                    const std::uint64_t dice = rng();
                    rec[id].payload = rng();
                    SubmitOptions so;
                    so.priority = static_cast<int>(dice % 3);
                    so.batch_key = id % 3;
                    so.size = (dice >> 8) % 8 == 0 ? 2 : 1;
                    if ((dice >> 16) % 100 < 2) so.deadline = Clock::now() + std::chrono::microseconds(50 + (dice >> 24) % 400);
                    const std::uint64_t cancel_roll = (dice >> 40) % 100;
                    CancellationToken token = so.cancel;
                    const StormReq req{id, rec[id].payload};
                    if ((dice >> 50) % 2 == 0) {
                        futures.emplace_back(id, s.submit(req, so));
                    } else {
                        {
                            std::lock_guard<std::mutex> lock(m);
                            ++pending_callbacks;
                        }
                        s.submit(req, [&, id](StatusOr<StormResp> r) {
                            record(id, r);
                            std::lock_guard<std::mutex> lock(m);
                            if (--pending_callbacks == 0) cv.notify_all();
                        }, so);
                    }
                    if (cancel_roll < 3) token.cancel();                           // right after submit
                    else if (cancel_roll < 5) cancel_later.push_back(token);        // a bit later
                }
                for (auto& tok : cancel_later) tok.cancel();
                for (auto& [id, f] : futures) {
                    if (f.wait_for(60s) != std::future_status::ready) {
                        ++lost;
                        continue;
                    }
                    try {
                        record(id, f.get());
                    } catch (const Error& e) {
                        record(id, Status(e.code(), e.message()));
                    }
                }
                std::unique_lock<std::mutex> lock(m);
                if (!cv.wait_for(lock, 60s, [&] { return pending_callbacks == 0; })) {
                    // The callbacks reference m/cv on this stack: no way to go on safely.
                    std::fprintf(stderr, "storm: %d callbacks lost\n", pending_callbacks);
                    std::abort();
                }
            }
        });
    }
    for (auto& th : submitters) th.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    REQUIRE(lost == 0);
    REQUIRE(s.shutdown(10s));

    std::uint64_t ok = 0, cancelled = 0, deadline = 0, unavailable = 0, duplicated = 0, missing = 0,
                  executed_after_answer = 0, executed_twice = 0, ok_not_executed = 0;
    for (std::size_t i = 0; i < total; ++i) {
        const Record& x = rec[i];
        const auto outcomes = x.outcomes.load();
        if (outcomes == 0) ++missing;
        if (outcomes > 1) ++duplicated;
        const auto code = static_cast<ErrorCode>(x.code.load());
        const auto ran = x.executed.load();
        if (ran > 1) ++executed_twice;
        switch (code) {
            case ErrorCode::ok:
                ++ok;
                if (ran != 1) ++ok_not_executed;
                break;
            case ErrorCode::cancelled: ++cancelled; executed_after_answer += ran; break;
            case ErrorCode::deadline_exceeded: ++deadline; executed_after_answer += ran; break;
            case ErrorCode::unavailable: ++unavailable; executed_after_answer += ran; break;
            default: ++other_codes;
        }
    }
    const auto st = s.stats();
    WARN("storm: " << threads << " x " << per_thread << " = " << total << " requests in " << seconds
                   << " s: ok " << ok << ", cancelled " << cancelled << ", deadline_exceeded " << deadline
                   << ", unavailable " << unavailable << "; " << st.batches << " batches, "
                   << static_cast<double>(st.items) / static_cast<double>(std::max<std::uint64_t>(st.batches, 1))
                   << " items/batch");
    CHECK(missing == 0);
    CHECK(duplicated == 0);
    CHECK(misrouted == 0);
    CHECK(other_codes == 0);
    CHECK(bad_batches == 0);
    CHECK(executed_after_answer == 0);
    CHECK(executed_twice == 0);
    CHECK(ok_not_executed == 0);
    CHECK(ok + cancelled + deadline + unavailable == total);
    CHECK(ok > 0);
    CHECK(cancelled > 0);
    CHECK(st.submitted == total);
    CHECK(st.ok == ok);
    CHECK(st.cancelled == cancelled);
    CHECK(st.deadline_exceeded == deadline);
    CHECK(st.rejected == unavailable);
    CHECK(st.failed == 0);
    CHECK(obs->done == total);
    CHECK(obs->batches == st.batches);
}

}  // namespace
