// dsinfer/adaptive_batching.hpp — AdaptiveBatchController: tunes a dynamic batcher's queue
// delay and batch cap online, to batch as much as throughput needs while the p99 latency stays
// under a target.
//
// Purpose: a feedback controller for any batcher with two knobs — the batch cap and the queue
// delay (BatchScheduler::set_max_batch_size / set_max_queue_delay) — given as two setters, so
// it knows nothing of the engine. It is a SchedulerObserver: it reads every request's latency
// and every batch's size and compute time, cuts them into windows, and at each window's end
// decides whether to move the cap and the delay, always within [1, max_batch_size] and
// [0, max_queue_delay]. serving::BatchingEngine (dsinfer/serving.hpp) uses it when
// BatchingOptions::adaptive is set.
// docs/BATCHING.md ("Adaptive batching") has the reasoning and measured runs.
//
// Windows: a window closes at the first observation at which it is at least
//   max(min_window = 100 ms, 5 x p99 target) old AND holds window_requests = 200 latency
//   samples — or, at low rates, is max_window = 1 s old with at least 10.
// 200 samples make the p99 the 2nd-3rd largest value rather than the maximum; 100 ms spans many
// batches; 5 x the target lets the requests of a window be mostly ones submitted in it; 1 s
// bounds the reaction time at low rates, where the p99 of few samples is near their maximum (an
// error on the safe side). Requests and batches dispatched before the last change are left out
// of the next window's p99 and batch sizes (they ran under the old settings; they still count
// for the rate and the busy time).
//
// The law, per window. Measured: p99 (submit to answer, of the requests that ran or expired),
// busy = batch compute time / (window x num_workers), full = at least half the batches reached
// the cap, rate = requests answered per second. Derived: violated = p99 > target; slack =
// p99 < 0.8 x target; compute-bound = busy >= 0.9, or the queue refused requests, or the
// batches are full and requests waited on average longer than the delay + 5 % of the target
// (a backlog: they wait for a worker, not for the delay).
//   cap   - follows demand: doubled when batches are full, unless the p99 is violated and the
//           batcher is not compute-bound (bigger batches would only be longer); after 3
//           windows whose largest batch is <= cap / 4, lowered to 2 x that batch.
//   delay - AIMD: halved when violated and not compute-bound — compute-bound, the requests wait
//           for a worker, not for the delay, and cutting it only shrinks the batches that keep
//           up, so the cap is the fix (doubled above when full) and the delay holds; raised by
//           max_queue_delay / 16 when slack, the workers are at least half busy and batches are
//           not full (there waiting longer is what grows batches and lowers the cost per item),
//           doubled instead while compute-bound (slow start); halved when the workers are less
//           than a quarter busy (batching buys nothing: low load settles at delay 0).
//   cap cut - violated at delay 0 without being compute-bound: the cap is set to half the
//           largest batch for one window (so that long batches split across workers); kept if
//           the p99 fell by 10 % and nothing became compute-bound, otherwise restored and not
//           tried again.
//   guards against oscillation - a 0.8-1.0 x target dead band; the busy thresholds 0.25 and 0.5
//           are a factor 2 apart like the halving, so one halving cannot cross the band; a delay
//           that violated leaves a ceiling at 3/4 of it (the delay climbs back to the ceiling and
//           stays: no AIMD sawtooth); a kept cap cut is a ceiling for demand-driven doubling; a
//           cap that was compute-bound is a floor. The ceilings, the floor and the blocked cut
//           are forgotten when the rate moves by 1.5x either way (a new load).
// Why feedback rather than a bandit over (delay, cap) arms: the load is non-stationary (a rate
// step changes which arm is best, and a bandit must keep exploring arms that violate the SLO to
// notice), each arm needs several windows to tell p99s apart, and the queueing structure is
// known, so measurements say which way to move (a backlog means bigger batches, idle workers
// mean less delay). The feedback law moves at once in that direction and explores only the
// one-window cap trial. The trade-off: it climbs to a good setting, not provably the best one
// (a bandit converges to the best arm of a stationary load), and its thresholds encode queueing
// reasoning rather than being learned.
//
// Ownership/threading: the observer methods are thread-safe, lock-free on the recording path
// (relaxed atomics and a LatencyHistogram per window) and noexcept. Decisions run inside those
// calls on whichever thread closes a window: a try-lock lets one thread evaluate (a few µs: a
// histogram snapshot) while the others return at once; the controller owns no thread, so with
// no traffic it decides nothing. The setters are called on the evaluating thread, never two at
// once, and must not call back into the controller (BatchScheduler's setters are safe there:
// no scheduler lock is held while its observer runs). stop() ends the decisions before the
// batcher goes away.
//
// Usage:
//   std::unique_ptr<Sched> sched;
//   auto ctl = std::make_shared<dsinfer::AdaptiveBatchController>(
//       dsinfer::AdaptiveBatchingOptions{.max_batch_size = 32,
//                                        .max_queue_delay = std::chrono::microseconds(4000),
//                                        .p99_target = std::chrono::milliseconds(20)},
//       [&](std::size_t n) { sched->set_max_batch_size(n); },
//       [&](std::chrono::microseconds d) { sched->set_max_queue_delay(d); });
//   dsinfer::BatchSchedulerOptions so;
//   so.max_batch_size = ctl->state().max_batch_size;   // start where the controller starts
//   so.max_queue_delay = ctl->state().max_queue_delay;
//   so.observer = ctl;                                  // or call it from your own observer
//   sched = std::make_unique<Sched>(batch_fn, so);
//   ... ctl->state(): max_batch_size, max_queue_delay, last_p99_ms, decisions, last_action ...
//   ctl->stop();                                        // before sched is destroyed
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "dsinfer/batch_scheduler.hpp"
#include "dsinfer/metrics.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

struct AdaptiveBatchingOptions {
    /// Upper bound of the cap (items per batch); >= 1.
    std::size_t max_batch_size = 8;
    /// Upper bound of the queue delay; >= 0.
    std::chrono::microseconds max_queue_delay{2000};
    /// The p99 latency (submit to answer) to stay under; > 0.
    std::chrono::nanoseconds p99_target{std::chrono::milliseconds(10)};
    /// Where the cap starts; 0 = max_batch_size (never limits throughput at the start).
    std::size_t initial_batch_size = 0;
    /// Where the delay starts (no waiting: the lowest latency; raised when batching pays).
    std::chrono::microseconds initial_queue_delay{0};
    /// Batches the batcher runs at once (for the busy fraction); >= 1.
    int num_workers = 1;
    /// Window length: at least max(min_window, 5 x p99_target) and window_requests samples,
    /// or max_window with at least 10 samples (header comment).
    std::chrono::milliseconds min_window{100};
    std::size_t window_requests = 200;
    std::chrono::milliseconds max_window{1000};
};

/// The controller's current settings and its view of the last window.
struct AdaptiveBatchState {
    std::size_t max_batch_size = 0;                ///< the cap now
    std::chrono::microseconds max_queue_delay{0};  ///< the delay now
    double p99_target_ms = 0.0;
    double last_p99_ms = 0.0;           ///< p99 latency of the last window
    double last_busy = 0.0;             ///< worker time spent in batches, last window (0..~1)
    double last_rate = 0.0;             ///< requests per second that ran, last window
    double last_mean_batch = 0.0;       ///< items per batch, last window
    std::uint64_t windows = 0;          ///< windows evaluated
    std::uint64_t decisions = 0;        ///< windows that changed the cap or the delay
    std::string last_action = "start";  ///< what the last window decided, and why
    /// The learned limits (0 = none): the delay stays at or below delay_ceiling; the cap stays
    /// above cap_floor and, unless compute-bound, at or below cap_ceiling.
    std::chrono::microseconds delay_ceiling{0};
    std::size_t cap_floor = 0;
    std::size_t cap_ceiling = 0;
};

class AdaptiveBatchController final : public SchedulerObserver {
public:
    using Clock = std::chrono::steady_clock;
    using SetCap = std::function<void(std::size_t)>;
    using SetDelay = std::function<void(std::chrono::microseconds)>;

    // The law's constants (header comment).
    static constexpr double kSlack = 0.8;       ///< p99 below kSlack * target: room to batch
    static constexpr double kBusyBatch = 0.5;   ///< busy at least this: batching pays
    static constexpr double kBusyIdle = 0.25;   ///< busy below this: batching buys nothing
    static constexpr double kSaturated = 0.9;   ///< busy at least this: the workers are the limit
    static constexpr double kRateChange = 1.5;  ///< a load change that resets the learned limits
    static constexpr int kShrinkWindows = 3;    ///< small-batch windows before the cap follows down
    static constexpr double kBacklog = 0.05;    ///< queueing beyond the delay, x target: a backlog
    static constexpr std::uint64_t kMinSamples = 10;

    static Status validate(const AdaptiveBatchingOptions& o) {
        DSINFER_CHECK(o.max_batch_size >= 1, ErrorCode::invalid_argument,
                      "AdaptiveBatchController: max_batch_size must be at least 1");
        DSINFER_CHECK(o.max_queue_delay.count() >= 0, ErrorCode::invalid_argument,
                      "AdaptiveBatchController: max_queue_delay must not be negative");
        DSINFER_CHECK(o.p99_target.count() > 0, ErrorCode::invalid_argument,
                      "AdaptiveBatchController: p99_target must be positive (got ",
                      o.p99_target.count(), " ns)");
        DSINFER_CHECK(o.initial_batch_size <= o.max_batch_size, ErrorCode::invalid_argument,
                      "AdaptiveBatchController: initial_batch_size ", o.initial_batch_size,
                      " is above max_batch_size ", o.max_batch_size);
        DSINFER_CHECK(
            o.initial_queue_delay.count() >= 0 && o.initial_queue_delay <= o.max_queue_delay,
            ErrorCode::invalid_argument, "AdaptiveBatchController: initial_queue_delay ",
            o.initial_queue_delay.count(),
            " us is outside [0, max_queue_delay = ", o.max_queue_delay.count(), " us]");
        DSINFER_CHECK(o.num_workers >= 1, ErrorCode::invalid_argument,
                      "AdaptiveBatchController: num_workers must be at least 1");
        DSINFER_CHECK(
            o.min_window.count() > 0 && o.max_window >= o.min_window && o.window_requests >= 1,
            ErrorCode::invalid_argument,
            "AdaptiveBatchController: windows need 0 < min_window <= max_window and "
            "window_requests >= 1");
        return Status::ok();
    }

    /// Throws dsinfer::Error(invalid_argument) for bad options or an empty setter. The
    /// setters are not called here: start the batcher at state()'s cap and delay.
    AdaptiveBatchController(AdaptiveBatchingOptions options, SetCap set_cap, SetDelay set_delay)
        : o_(options), set_cap_(std::move(set_cap)), set_delay_(std::move(set_delay)) {
        throw_if_error(validate(o_));
        if (!set_cap_ || !set_delay_)
            throw Error(ErrorCode::invalid_argument, "AdaptiveBatchController: a setter is empty");
        cap_ = o_.initial_batch_size == 0 ? o_.max_batch_size : o_.initial_batch_size;
        delay_ = o_.initial_queue_delay;
        cur_cap_.store(cap_, std::memory_order_relaxed);
        step_ = std::max(o_.max_queue_delay / 16, std::chrono::microseconds(1));
        window_ns_ = std::max<std::int64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(o_.min_window).count(),
            std::min<std::int64_t>(o_.p99_target.count(),
                                   std::numeric_limits<std::int64_t>::max() / 8) *
                5);
        max_window_ns_ = std::max<std::int64_t>(
            window_ns_,
            std::chrono::duration_cast<std::chrono::nanoseconds>(o_.max_window).count());
        state_.max_batch_size = cap_;
        state_.max_queue_delay = delay_;
        state_.p99_target_ms = static_cast<double>(o_.p99_target.count()) / 1e6;
    }

    AdaptiveBatchController(const AdaptiveBatchController&) = delete;
    AdaptiveBatchController& operator=(const AdaptiveBatchController&) = delete;

    // SchedulerObserver: the observations, timed now.
    void on_request_done(ErrorCode code, std::chrono::nanoseconds queue_time,
                         std::chrono::nanoseconds compute_time,
                         std::chrono::nanoseconds total_latency) noexcept override {
        record_request(code, queue_time, compute_time, total_latency, Clock::now());
    }
    void on_batch(std::size_t requests, std::size_t items,
                  std::chrono::nanoseconds compute_time) noexcept override {
        record_batch(requests, items, compute_time, Clock::now());
    }

    /// The same observations at an explicit time (simulations and tests drive the controller
    /// with their own clock; times must not go backwards by more than a window).
    void record_request(ErrorCode code, std::chrono::nanoseconds queue_time,
                        std::chrono::nanoseconds compute_time,
                        std::chrono::nanoseconds total_latency, Clock::time_point now) noexcept {
        const bool ran = code == ErrorCode::ok || compute_time.count() > 0;
        if (ran || code == ErrorCode::deadline_exceeded) {
            if (ran) ran_.fetch_add(1, std::memory_order_relaxed);
            // A request whose batch was formed before the last change says nothing about the
            // new settings; expired requests count (they missed any latency target).
            const std::int64_t dispatched = ticks(now) - (total_latency - queue_time).count();
            if (!ran || dispatched >= changed_at_.load(std::memory_order_relaxed)) {
                hist_[cur_.load(std::memory_order_acquire)].record(total_latency);
                samples_.fetch_add(1, std::memory_order_relaxed);
                if (ran) {
                    fresh_.fetch_add(1, std::memory_order_relaxed);
                    queue_ns_.fetch_add(detail::metrics::to_ns(queue_time),
                                        std::memory_order_relaxed);
                }
            }
        } else if (code == ErrorCode::unavailable) {
            rejected_.fetch_add(1, std::memory_order_relaxed);  // queue full (or shutting down)
        } else {
            return;  // cancelled or invalid: says nothing about the settings
        }
        maybe_evaluate(now);
    }
    void record_batch(std::size_t /*requests*/, std::size_t items,
                      std::chrono::nanoseconds compute_time, Clock::time_point now) noexcept {
        compute_ns_.fetch_add(detail::metrics::to_ns(compute_time), std::memory_order_relaxed);
        if (ticks(now) - compute_time.count() >= changed_at_.load(std::memory_order_relaxed)) {
            // Formed under the current cap: its size is evidence about demand.
            batches_.fetch_add(1, std::memory_order_relaxed);
            items_.fetch_add(items, std::memory_order_relaxed);
            if (items >= cur_cap_.load(std::memory_order_relaxed))
                full_.fetch_add(1, std::memory_order_relaxed);
            detail::metrics::update_max(max_items_, items);
        }
        maybe_evaluate(now);
    }

    AdaptiveBatchState state() const {
        std::lock_guard<std::mutex> lock(state_m_);
        return state_;
    }
    const AdaptiveBatchingOptions& options() const noexcept { return o_; }
    /// The shortest window (max(min_window, 5 x p99_target)).
    std::chrono::nanoseconds window() const noexcept {
        return std::chrono::nanoseconds(window_ns_);
    }

    /// No decisions (setter calls) after it returns; an evaluation in progress finishes first.
    /// Observations are still accepted and ignored.
    void stop() noexcept {
        stopped_.store(true, std::memory_order_release);
        std::lock_guard<std::mutex> wait_for_evaluation(eval_m_);
    }

private:
    static constexpr std::int64_t kUnset = std::numeric_limits<std::int64_t>::min();
    using us = std::chrono::microseconds;

    struct Window {
        double p99_ns = 0, seconds = 0, busy = 0, rate = 0, mean_items = 0, mean_queue_ns = 0;
        std::uint64_t samples = 0, rejected = 0, batches = 0, full = 0;
        std::size_t max_items = 0;
    };

    static std::int64_t ticks(Clock::time_point t) noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    }

    bool due(std::int64_t now, std::int64_t start) const noexcept {
        if (start == kUnset || now - start < window_ns_) return false;
        const std::uint64_t n =
            samples_.load(std::memory_order_relaxed) + rejected_.load(std::memory_order_relaxed);
        return n >= o_.window_requests || (now - start >= max_window_ns_ && n >= kMinSamples);
    }

    void maybe_evaluate(Clock::time_point when) noexcept {
        const std::int64_t now = ticks(when);
        std::int64_t start = window_start_.load(std::memory_order_acquire);
        if (start == kUnset) {
            window_start_.compare_exchange_strong(start, now, std::memory_order_acq_rel);
            return;
        }
        if (!due(now, start) || stopped_.load(std::memory_order_acquire)) return;
        std::unique_lock<std::mutex> lock(eval_m_, std::try_to_lock);
        if (!lock.owns_lock()) return;  // another thread is evaluating this window
        start = window_start_.load(std::memory_order_acquire);
        if (!due(now, start) || stopped_.load(std::memory_order_acquire)) return;  // just evaluated
        try {
            evaluate(now, start);
        } catch (...) {  // a snapshot's allocation or a throwing setter: no decision this time
        }
    }

    /// Closes the window [start, now) and decides (eval_m_ held).
    void evaluate(std::int64_t now, std::int64_t start) {
        const int old = cur_.load(std::memory_order_relaxed);
        cur_.store(1 - old, std::memory_order_release);  // new samples go to the other histogram
        window_start_.store(now, std::memory_order_release);
        Window w;
        w.samples = samples_.exchange(0, std::memory_order_relaxed);
        const std::uint64_t ran = ran_.exchange(0, std::memory_order_relaxed);
        w.rejected = rejected_.exchange(0, std::memory_order_relaxed);
        w.batches = batches_.exchange(0, std::memory_order_relaxed);
        const std::uint64_t items = items_.exchange(0, std::memory_order_relaxed);
        w.full = full_.exchange(0, std::memory_order_relaxed);
        w.max_items = max_items_.exchange(0, std::memory_order_relaxed);
        const std::uint64_t compute = compute_ns_.exchange(0, std::memory_order_relaxed);
        const std::uint64_t queued = queue_ns_.exchange(0, std::memory_order_relaxed);
        const std::uint64_t fresh = fresh_.exchange(0, std::memory_order_relaxed);
        const HistogramSnapshot h = hist_[old].snapshot();
        hist_[old].reset();  // a record racing with the flip may land in the window after next
        w.p99_ns = h.quantile_ns(0.99);
        const double ns = static_cast<double>(std::max<std::int64_t>(now - start, 1));
        w.seconds = ns / 1e9;
        w.busy = static_cast<double>(compute) / (ns * o_.num_workers);
        w.rate = static_cast<double>(ran) / w.seconds;
        w.mean_queue_ns =
            fresh == 0 ? 0.0 : static_cast<double>(queued) / static_cast<double>(fresh);
        w.mean_items =
            w.batches == 0 ? 0.0 : static_cast<double>(items) / static_cast<double>(w.batches);
        decide(w, now);
    }

    void remember_rate(double rate) noexcept {
        if (rate_ref_ <= 0.0) rate_ref_ = rate;
    }

    /// Multiplicative decrease; below half an additive step it reaches 0.
    us halve(us d) const noexcept { return d / 2 < step_ / 2 ? us(0) : d / 2; }

    /// The control law (header comment).
    void decide(const Window& w, std::int64_t now) {
        const double target = static_cast<double>(o_.p99_target.count());
        const bool violated = w.p99_ns > target;
        const bool slack = w.p99_ns < kSlack * target;
        const bool full = w.batches > 0 && 2 * w.full >= w.batches;
        // Compute-bound: the workers are the limit, or full batches leave requests waiting for
        // a worker well beyond the delay (a backlog). Bigger batches are the fix then.
        const double delay_ns = static_cast<double>(delay_.count()) * 1e3;
        const bool backlog = full && w.mean_queue_ns > delay_ns + kBacklog * target;
        const bool bound = w.busy >= kSaturated || w.rejected > 0 || backlog;

        // A load change voids what was learned at the old load.
        if (rate_ref_ > 0.0 && w.rate > 0.0 &&
            (w.rate > kRateChange * rate_ref_ || w.rate * kRateChange < rate_ref_)) {
            ceiling_ = us(0);
            cap_ceiling_ = 0;
            floor_ = 0;
            cut_blocked_ = false;
            rate_ref_ = 0.0;
        }

        std::size_t cap = cap_;
        us delay = delay_;
        std::string_view cap_why, delay_why;
        if (probe_cap_ != 0) {  // judge the trial cap cut of the last window
            const std::size_t before = probe_cap_;
            probe_cap_ = 0;
            if (bound || w.p99_ns > 0.9 * probe_p99_) {
                cut_blocked_ = true;
                remember_rate(w.rate);
                apply(w, now, before, delay, "cap restored: the trial cut did not lower the p99",
                      {});
                return;
            }
            cap_ceiling_ = cap_;  // it helped: demand alone does not raise the cap above it
            remember_rate(w.rate);
        }
        // The cap follows demand.
        const std::size_t cap_limit = bound || cap_ceiling_ == 0 ? o_.max_batch_size : cap_ceiling_;
        if (full && (bound || !violated) && cap_ < cap_limit) {
            cap = std::min(cap_limit, 2 * cap_);
            if (bound) {
                floor_ = std::max(floor_, cap_);
                remember_rate(w.rate);
            }
            cap_why = bound ? "cap x2: full batches, compute-bound" : "cap x2: full batches";
            small_windows_ = 0;
        } else if (!full && !violated && w.batches > 0 && 4 * w.max_items <= cap_) {
            if (++small_windows_ >= kShrinkWindows) {
                small_windows_ = 0;
                cap = std::min(std::max<std::size_t>(2 * w.max_items, floor_ + 1), cap_);
                cap_why = "cap = 2 x the largest batch: demand is low";
            }
        } else {
            small_windows_ = 0;
        }
        // The delay: AIMD with a ceiling.
        if (violated && !bound) {
            if (delay_.count() > 0) {
                const us c = std::max(delay_ * 3 / 4, us(1));
                ceiling_ = ceiling_.count() == 0 ? c : std::min(ceiling_, c);
                remember_rate(w.rate);
                delay = halve(delay_);
                delay_why = "delay /2: p99 over target";
            } else if (!cut_blocked_ && cap == cap_) {
                // Half the largest batch: the cut has to split the batches that are too long.
                const std::size_t cut = std::max((std::min(w.max_items, cap_) + 1) / 2, floor_ + 1);
                if (cut < w.max_items && cut < cap_) {
                    probe_cap_ = cap_;
                    probe_p99_ = w.p99_ns;
                    cap = cut;
                    cap_why = "cap = largest batch / 2 (trial): p99 over target at delay 0";
                }
            }
        } else if (violated) {
            if (cap == cap_) delay_why = "hold: p99 over target, compute-bound";
        } else if (slack && w.busy >= kBusyBatch && !full) {
            const us limit =
                ceiling_.count() > 0 ? std::min(ceiling_, o_.max_queue_delay) : o_.max_queue_delay;
            if (delay_ < limit) {
                delay = std::min(limit, bound ? std::max(2 * delay_, step_) : delay_ + step_);
                delay_why = bound ? "delay x2: compute-bound, p99 has room"
                                  : "delay +step: workers busy, p99 has room";
            }
        } else if (w.busy < kBusyIdle && delay_.count() > 0) {
            delay = halve(delay_);
            delay_why = "delay /2: workers mostly idle";
        }
        apply(w, now, cap, delay, cap == cap_ ? std::string_view() : cap_why, delay_why);
    }

    /// Sets what changed and publishes the state (eval_m_ held).
    void apply(const Window& w, std::int64_t now, std::size_t cap, us delay,
               std::string_view cap_why, std::string_view delay_why) {
        cap = std::clamp<std::size_t>(cap, 1, o_.max_batch_size);
        delay = std::clamp(delay, us(0), o_.max_queue_delay);
        const bool changed = cap != cap_ || delay != delay_;
        if (cap != cap_) {  // a setter that throws leaves the knobs as the batcher has them
            set_cap_(cap);
            cap_ = cap;
            cur_cap_.store(cap, std::memory_order_relaxed);
        }
        if (delay != delay_) {
            set_delay_(delay);
            delay_ = delay;
        }
        if (changed) changed_at_.store(now, std::memory_order_relaxed);
        std::string action(cap_why);
        if (!delay_why.empty()) action += (action.empty() ? "" : "; ") + std::string(delay_why);
        if (action.empty()) action = "hold";

        std::lock_guard<std::mutex> lock(state_m_);
        state_.max_batch_size = cap;
        state_.max_queue_delay = delay;
        state_.last_p99_ms = w.p99_ns / 1e6;
        state_.last_busy = w.busy;
        state_.last_rate = w.rate;
        state_.last_mean_batch = w.mean_items;
        ++state_.windows;
        if (changed) ++state_.decisions;
        state_.last_action = std::move(action);
        state_.delay_ceiling = ceiling_;
        state_.cap_floor = floor_;
        state_.cap_ceiling = cap_ceiling_;
    }

    const AdaptiveBatchingOptions o_;
    const SetCap set_cap_;
    const SetDelay set_delay_;
    us step_{1};
    std::int64_t window_ns_ = 0, max_window_ns_ = 0;

    // Recording (lock-free).
    LatencyHistogram hist_[2];
    std::atomic<int> cur_{0};
    std::atomic<std::int64_t> window_start_{kUnset};
    std::atomic<std::uint64_t> samples_{0}, ran_{0}, rejected_{0}, batches_{0}, items_{0}, full_{0},
        compute_ns_{0}, queue_ns_{0}, fresh_{0};
    std::atomic<std::int64_t> changed_at_{kUnset};  // the last change: older batches are left out
    std::atomic<std::uint64_t> max_items_{0};
    std::atomic<std::size_t> cur_cap_{1};
    std::atomic<bool> stopped_{false};

    // Decision state (eval_m_).
    std::mutex eval_m_;
    std::size_t cap_ = 1;
    us delay_{0};
    us ceiling_{0};
    std::size_t cap_ceiling_ = 0;
    std::size_t floor_ = 0;
    double rate_ref_ = 0.0;
    int small_windows_ = 0;
    std::size_t probe_cap_ = 0;  // != 0: the cap before a trial cut, judged next window
    double probe_p99_ = 0.0;
    bool cut_blocked_ = false;

    mutable std::mutex state_m_;
    AdaptiveBatchState state_;
};

}  // namespace dsinfer
