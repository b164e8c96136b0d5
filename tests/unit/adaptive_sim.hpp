// A deterministic discrete-event simulation of a dynamic batcher driving an
// AdaptiveBatchController with simulated time (test_adaptive_batching.cpp, and the convergence
// demo). Requests arrive as a Poisson process (seeded, rate changing in phases) or in periodic
// bursts; batches form
// like BatchScheduler's for one key and unit sizes: a free worker takes the queued requests, up
// to the cap, when the cap is reached or the oldest has waited the delay; a batch of b items
// takes a + c * b microseconds (times 1 + jitter * u, u uniform in [-1, 1)). Observations reach
// the controller in time order, and its settings apply to the batches formed after them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "dsinfer/adaptive_batching.hpp"

namespace dsinfer::test {

struct SimService {
    double a_us = 1000.0;  ///< per-batch cost
    double c_us = 100.0;   ///< per-item cost
    double jitter = 0.0;   ///< relative spread of a batch's time
    int workers = 1;
};

struct SimPhase {
    double rate_per_s;  ///< requests per second
    double seconds;
    int burst = 1;  ///< > 1: groups of this many arrive at once, periodically
};

/// The controller's settings after one of its windows.
struct SimWindow {
    double t_s;
    std::size_t cap;
    std::int64_t delay_us;
    double p99_ms;
    double busy;
    double rate;
    bool changed;
    std::string action;
};

class BatchingSim {
public:
    BatchingSim(AdaptiveBatchingOptions o, SimService svc, std::uint64_t seed = 1)
        : svc_(svc), rng_(seed) {
        o.num_workers = svc.workers;
        ctl_ = std::make_unique<AdaptiveBatchController>(
            o,
            [this](std::size_t n) {
                if (n < 1 || n > ctl_->options().max_batch_size) ++bound_violations;
                cap_ = n;
            },
            [this](std::chrono::microseconds d) {
                if (d.count() < 0 || d > ctl_->options().max_queue_delay) ++bound_violations;
                delay_us_ = static_cast<double>(d.count());
            });
        cap_ = ctl_->state().max_batch_size;
        delay_us_ = static_cast<double>(ctl_->state().max_queue_delay.count());
    }

    /// Runs the phases one after the other (arrivals continue from the end of the last run).
    void run(const std::vector<SimPhase>& phases) {
        std::vector<double> arrivals;
        double t = end_us_;
        for (const SimPhase& p : phases) {
            const double end = t + p.seconds * 1e6;
            if (p.rate_per_s <= 0.0) {
                t = end;
                continue;
            }
            for (;;) {
                const double gap = 1e6 * p.burst / p.rate_per_s;
                t += p.burst > 1 ? gap : -std::log(1.0 - uniform()) * gap;
                if (t >= end) break;
                arrivals.insert(arrivals.end(), static_cast<std::size_t>(p.burst), t);
            }
            t = end;
        }
        end_us_ = t;
        simulate(arrivals);
    }

    const AdaptiveBatchController& controller() const { return *ctl_; }
    std::size_t cap() const { return cap_; }
    double delay_us() const { return delay_us_; }

    /// Nearest-rank p99 (ms) of the requests answered in [from_s, to_s).
    double p99_ms(double from_s, double to_s) const {
        std::vector<double> v;
        for (const auto& d : done_)
            if (d.first >= from_s * 1e6 && d.first < to_s * 1e6) v.push_back(d.second);
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(v.size())));
        return v[std::max<std::size_t>(rank, 1) - 1] / 1e3;
    }
    /// Requests answered in [from_s, to_s).
    std::size_t answered(double from_s, double to_s) const {
        std::size_t n = 0;
        for (const auto& d : done_) n += d.first >= from_s * 1e6 && d.first < to_s * 1e6;
        return n;
    }

    std::vector<SimWindow> windows;  ///< one entry per controller window
    std::size_t submitted = 0;
    int bound_violations = 0;  ///< setter calls outside the bounds

private:
    using Clock = std::chrono::steady_clock;
    struct Done {
        double t;  // completion
        double dispatch;
        double service;
        std::size_t first, count;  // arrivals [first, first + count)
        bool operator>(const Done& o) const { return t > o.t; }
    };

    double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
    static Clock::time_point at(double us) {
        return Clock::time_point(std::chrono::nanoseconds(std::llround(us * 1e3)));
    }
    static std::chrono::nanoseconds ns(double us) {
        return std::chrono::nanoseconds(std::llround(us * 1e3));
    }

    void deliver(const Done& d, const std::vector<double>& arr) {
        AdaptiveBatchController& c = *ctl_;  // records in time order
        const std::uint64_t before = c.state().windows;
        c.record_batch(d.count, d.count, ns(d.service), at(d.t));
        for (std::size_t i = d.first; i < d.first + d.count; ++i) {
            c.record_request(ErrorCode::ok, ns(d.dispatch - arr[i]), ns(d.service),
                             ns(d.t - arr[i]), at(d.t));
            done_.emplace_back(d.t, d.t - arr[i]);
        }
        const AdaptiveBatchState s = c.state();
        if (s.windows != before)
            windows.push_back({d.t / 1e6, s.max_batch_size,
                               static_cast<std::int64_t>(s.max_queue_delay.count()), s.last_p99_ms,
                               s.last_busy, s.last_rate, s.decisions != decisions_, s.last_action});
        decisions_ = s.decisions;
    }

    void simulate(const std::vector<double>& arr) {
        submitted += arr.size();
        std::priority_queue<Done, std::vector<Done>, std::greater<Done>> pending;
        std::vector<double> free_at(static_cast<std::size_t>(svc_.workers), start_us_);
        const double inf = std::numeric_limits<double>::infinity();
        std::size_t next = 0;
        for (;;) {
            const auto w = static_cast<std::size_t>(
                std::min_element(free_at.begin(), free_at.end()) - free_at.begin());
            double dispatch = inf;
            if (next < arr.size()) {
                const double full_at = next + cap_ - 1 < arr.size() ? arr[next + cap_ - 1] : inf;
                dispatch = std::max(free_at[w], std::min(arr[next] + delay_us_, full_at));
            }
            if (!pending.empty() && pending.top().t <= dispatch) {
                const Done d = pending.top();
                pending.pop();
                deliver(d, arr);
                continue;
            }
            if (dispatch == inf) break;
            std::size_t n = 0;
            while (next + n < arr.size() && n < cap_ && arr[next + n] <= dispatch) ++n;
            const double service = (svc_.a_us + svc_.c_us * static_cast<double>(n)) *
                                   (1.0 + svc_.jitter * (2.0 * uniform() - 1.0));
            pending.push({dispatch + service, dispatch, service, next, n});
            free_at[w] = dispatch + service;
            next += n;
        }
        start_us_ = *std::max_element(free_at.begin(), free_at.end());
        end_us_ = std::max(end_us_, start_us_);
    }

    SimService svc_;
    std::mt19937_64 rng_;
    std::unique_ptr<AdaptiveBatchController> ctl_;
    std::size_t cap_ = 1;
    double delay_us_ = 0.0;
    std::uint64_t decisions_ = 0;
    double start_us_ = 0.0, end_us_ = 0.0;
    std::vector<std::pair<double, double>> done_;  // (completion, latency) in us
};

}  // namespace dsinfer::test
