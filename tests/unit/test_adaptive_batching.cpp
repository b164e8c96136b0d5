// AdaptiveBatchController (dsinfer/adaptive_batching.hpp): options; the window rule; and the
// control law on a deterministic simulation with simulated time (adaptive_sim.hpp): bounds are
// never exceeded, a p99 over target cuts the delay (or, at delay 0, trial-cuts the cap and keeps
// the cut only if it helped), low load settles at delay 0, a rate step x4 raises the cap and the
// delay and the p99 returns under target, a compute-bound batcher gets bigger batches rather
// than smaller delays, steady load stays in a band. Then thread safety with real threads and
// stop(), and the engine with BatchingOptions::adaptive.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "adaptive_sim.hpp"
#include "dsinfer/adaptive_batching.hpp"
#ifndef DSINFER_TEST_NO_ENGINE  // dsinfer_concurrency_tests (sanitizers) build without the engine
#include "dsinfer/serving.hpp"
#include "memory_models.hpp"
#endif

namespace {

using namespace dsinfer;
using dsinfer::test::BatchingSim;
using dsinfer::test::SimPhase;
using dsinfer::test::SimService;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

AdaptiveBatchingOptions options(std::size_t max_cap, std::chrono::microseconds max_delay,
                                std::chrono::milliseconds target) {
    AdaptiveBatchingOptions o;
    o.max_batch_size = max_cap;
    o.max_queue_delay = max_delay;
    o.p99_target = target;
    return o;
}

SimService service(double a_us, double c_us, double jitter = 0.1, int workers = 1) {
    SimService s;
    s.a_us = a_us;
    s.c_us = c_us;
    s.jitter = jitter;
    s.workers = workers;
    return s;
}

/// A simulation started at (initial cap, initial delay) that ran `phases`.
std::unique_ptr<BatchingSim> simulate(AdaptiveBatchingOptions o, std::size_t cap0,
                                      std::chrono::microseconds delay0, SimService svc,
                                      std::uint64_t seed, const std::vector<SimPhase>& phases) {
    o.initial_batch_size = cap0;
    o.initial_queue_delay = delay0;
    auto sim = std::make_unique<BatchingSim>(o, svc, seed);
    sim->run(phases);
    return sim;
}

/// The first window at or after t_s.
const test::SimWindow* window_at(const BatchingSim& sim, double t_s) {
    for (const auto& w : sim.windows)
        if (w.t_s >= t_s) return &w;
    return nullptr;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

/// At least `windows` windows, the first with its p99 over `target_ms`, deciding `action`.
void check_first_window(const BatchingSim& sim, std::size_t windows, double target_ms,
                        const char* action) {
    REQUIRE(sim.windows.size() >= windows);
    CHECK(sim.windows[0].p99_ms > target_ms);
    CHECK(contains(sim.windows[0].action, action));
}

}  // namespace

TEST_CASE("adaptive: options are validated, the controller starts where it says", "[adaptive]") {
    auto nop_cap = [](std::size_t) {};
    auto nop_delay = [](std::chrono::microseconds) {};
    auto bad = [&](auto edit) {
        AdaptiveBatchingOptions o = options(8, 2000us, 10ms);
        edit(o);
        return !AdaptiveBatchController::validate(o).is_ok();
    };
    CHECK(bad([](auto& o) { o.max_batch_size = 0; }));
    CHECK(bad([](auto& o) { o.max_queue_delay = -1us; }));
    CHECK(bad([](auto& o) { o.p99_target = 0ns; }));
    CHECK(bad([](auto& o) { o.initial_batch_size = 9; }));
    CHECK(bad([](auto& o) { o.initial_queue_delay = 2001us; }));
    CHECK(bad([](auto& o) { o.num_workers = 0; }));
    CHECK(bad([](auto& o) { o.max_window = 50ms; }));
    CHECK_THROWS_AS(AdaptiveBatchController(options(8, 1us, 0ms), nop_cap, nop_delay), Error);
    CHECK_THROWS_AS(AdaptiveBatchController(options(8, 1us, 1ms), nullptr, nop_delay), Error);

    AdaptiveBatchController c(options(8, 2000us, 10ms), nop_cap, nop_delay);
    const AdaptiveBatchState s = c.state();
    CHECK(s.max_batch_size == 8);  // full cap, no delay
    CHECK(s.max_queue_delay == 0us);
    CHECK(s.p99_target_ms == 10.0);
    CHECK(s.windows == 0);
    CHECK(c.window() == 100ms);  // max(100 ms, 5 x 10 ms)
    AdaptiveBatchController slow(options(8, 2000us, 60ms), nop_cap, nop_delay);
    CHECK(slow.window() == 300ms);
}

TEST_CASE("adaptive: a window closes after its minimum time and request count", "[adaptive]") {
    int cap_calls = 0;
    AdaptiveBatchController c(
        options(8, 2000us, 10ms), [&](std::size_t) { ++cap_calls; },
        [](std::chrono::microseconds) {});
    const Clock::time_point t0{};
    auto request = [&](Clock::time_point now) {
        c.record_request(ErrorCode::ok, 100us, 500us, 1ms, now);
    };
    request(t0);  // opens the first window
    for (int i = 0; i < 198; ++i) request(t0 + 150ms);
    CHECK(c.state().windows == 0);  // 199 samples: not enough yet
    request(t0 + 150ms);
    CHECK(c.state().windows == 1);  // the 200th, 150 ms in
    CHECK(c.state().last_p99_ms == Approx(1.0).epsilon(0.02));
    for (int i = 0; i < 300; ++i) request(t0 + 200ms);
    CHECK(c.state().windows == 1);  // enough samples but only 50 ms old
    request(t0 + 250ms);
    CHECK(c.state().windows == 2);
    // A low rate: 10 samples close a window once it is max_window (1 s) old.
    for (int i = 1; i <= 9; ++i) request(t0 + 250ms + i * 100ms);
    CHECK(c.state().windows == 2);
    request(t0 + 1250ms);
    CHECK(c.state().windows == 3);
    // Cancelled and invalid requests are not samples; queue-full refusals are.
    for (int i = 0; i < 300; ++i) c.record_request(ErrorCode::cancelled, 0ns, 0ns, 1ms, t0 + 2s);
    CHECK(c.state().windows == 3);
}

TEST_CASE("adaptive: the cap and the delay never leave their bounds", "[adaptive]") {
    // Overload beyond capacity (12 items per 3.3 ms: 3,600/s with one worker), idle gaps,
    // bursts, and back, from several starting points.
    const std::vector<SimPhase> phases = {{100, 3},     {6000, 1}, {0, 2},    {3000, 3},
                                          {400, 3, 32}, {50, 2},   {8000, 1}, {200, 3}};
    for (const int workers : {1, 3}) {
        for (const std::size_t initial_cap : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
            const auto run =
                simulate(options(12, 3000us, 8ms), initial_cap, initial_cap == 5 ? 3000us : 0us,
                         service(1500, 150, 0.3, workers), 11 + initial_cap, phases);
            const BatchingSim& sim = *run;
            INFO("workers " << workers << ", initial cap " << initial_cap);
            CHECK(sim.bound_violations == 0);
            REQUIRE(sim.windows.size() > 20);
            std::size_t changes = 0;
            for (const auto& w : sim.windows) {
                CHECK(w.cap >= 1);
                CHECK(w.cap <= 12);
                CHECK(w.delay_us >= 0);
                CHECK(w.delay_us <= 3000);
                changes += w.changed;
            }
            CHECK(changes >= 5);  // it did move
            CHECK(sim.answered(0, 1e9) == sim.submitted);
        }
    }
}

TEST_CASE("adaptive: a p99 over target cuts the delay within a few windows", "[adaptive]") {
    // Starts at the 8 ms maximum delay with a 5 ms target: every request waits ~8 ms.
    const auto run =
        simulate(options(32, 8000us, 5ms), 0, 8000us, service(500, 50), 3, {{800, 10}});
    const BatchingSim& sim = *run;
    check_first_window(sim, 3, 5.0, "delay /2: p99 over target");
    CHECK(sim.windows[0].delay_us == 4000);
    const test::SimWindow* later = window_at(sim, 2.0);
    REQUIRE(later != nullptr);
    CHECK(later->delay_us <= 2000);
    CHECK(sim.p99_ms(5, 10) < 5.0);
    CHECK(sim.controller().state().delay_ceiling == 6000us);  // 3/4 of the delay that violated
    CHECK(sim.bound_violations == 0);
}

TEST_CASE("adaptive: at delay 0 a p99 over target trial-cuts the cap, kept only if it helps",
          "[adaptive]") {
    // Bursts of 16 every 50 ms; a batch of b items takes 1 + b ms. One 16-item batch takes
    // 17 ms > 12 ms; two workers running 8 items each take 9 ms.
    SECTION("two workers: the cut splits the bursts and is kept") {
        BatchingSim sim(options(32, 4000us, 12ms), service(1000, 1000, 0.1, 2), 5);
        sim.run({{320, 10, 16}});
        check_first_window(sim, 4, 12.0, "trial");
        CHECK(sim.windows[0].cap == 8);
        for (const auto& w : sim.windows) CHECK(w.cap <= 8);  // demand does not raise it again
        CHECK(sim.controller().state().cap_ceiling == 8);
        CHECK(sim.p99_ms(2, 10) < 12.0);
    }
    SECTION("one worker: splitting cannot help, the cap is restored and not tried again") {
        BatchingSim sim(options(32, 4000us, 12ms), service(1000, 1000, 0.1, 1), 5);
        sim.run({{320, 10, 16}});
        check_first_window(sim, 4, 12.0, "trial");
        CHECK(contains(sim.windows[1].action, "cap restored"));
        CHECK(sim.windows[1].cap == 32);
        CHECK(sim.controller().state().decisions == 2);
    }
}

TEST_CASE("adaptive: low load settles at delay 0", "[adaptive]") {
    const auto run =
        simulate(options(32, 4000us, 20ms), 0, 4000us, service(500, 50), 9, {{100, 15}});
    const BatchingSim& sim = *run;
    const test::SimWindow* w = window_at(sim, 8.0);
    REQUIRE(w != nullptr);
    CHECK(w->delay_us == 0);
    for (const auto& x : sim.windows)
        if (x.t_s >= 8.0) CHECK(x.delay_us == 0);
    CHECK(sim.controller().state().max_batch_size <= 4);  // the cap followed demand down
    CHECK(sim.p99_ms(8, 15) < 2.0);
}

TEST_CASE("adaptive: a rate step x4 raises the delay and the cap; the p99 returns under target",
          "[adaptive]") {
    SECTION("the delay grows the batches") {
        // 2 ms + 0.1 ms per item: one request at a time serves 476/s; 1200/s needs batches.
        BatchingSim sim(options(32, 4000us, 20ms), service(2000, 100, 0.2), 21);
        sim.run({{300, 10}, {1200, 10}});
        const test::SimWindow* low = window_at(sim, 9.5);
        REQUIRE(low != nullptr);
        const test::SimWindow* high = window_at(sim, 12.0);
        REQUIRE(high != nullptr);
        CHECK(high->delay_us > low->delay_us);
        CHECK(sim.controller().state().last_mean_batch > 2.0);
        CHECK(sim.p99_ms(15, 20) < 20.0);
        CHECK(sim.answered(15, 20) > 0.95 * 1200 * 5);  // it keeps up
        CHECK(sim.bound_violations == 0);
    }
    SECTION("the cap grows when it is the limit") {
        // 5 ms + 0.1 ms per item from cap 2: 600/s needs batches of more than 3.
        const auto run = simulate(options(32, 8000us, 50ms), 2, 0us, service(5000, 100, 0.2), 23,
                                  {{150, 10}, {600, 10}});
        const BatchingSim& sim = *run;
        CHECK(window_at(sim, 9.5)->cap <= 4);
        const test::SimWindow* soon = window_at(sim, 11.0);  // a few windows after the step
        REQUIRE(soon != nullptr);
        CHECK(soon->cap >= 8);
        CHECK(sim.p99_ms(13, 20) < 50.0);
        CHECK(sim.answered(13, 20) > 0.95 * 600 * 7);
    }
}

TEST_CASE("adaptive: compute-bound, the fix is bigger batches, not smaller delays", "[adaptive]") {
    // From cap 2 and a 2 ms delay, 1500/s at 2 ms + 0.1 ms per item: the queue grows, the
    // p99 is far over target, and the workers are saturated.
    const auto run =
        simulate(options(32, 4000us, 20ms), 2, 2000us, service(2000, 100), 31, {{1500, 10}});
    const BatchingSim& sim = *run;
    check_first_window(sim, 5, 20.0, "cap x2: full batches, compute-bound");
    for (const auto& w : sim.windows) {
        CHECK_FALSE(contains(w.action, "delay /2"));
        CHECK(w.delay_us >= 2000);
    }
    CHECK(window_at(sim, 1.0)->cap >= 16);
    CHECK(sim.p99_ms(3, 10) < 20.0);
    CHECK(sim.answered(3, 10) > 0.95 * 1500 * 7);
}

TEST_CASE("adaptive: under steady load the settings stay in a band", "[adaptive]") {
    for (const int workers : {1, 2}) {
        for (const std::uint64_t seed : {41u, 42u, 43u}) {
            // A 5 ms target that the delay can reach: the ceiling stops the AIMD sawtooth.
            BatchingSim sim(options(32, 8000us, 5ms), service(1000, 100, 0.3, workers), seed);
            sim.run({{1600.0 * workers, 40}});
            INFO("workers " << workers << ", seed " << seed);
            std::size_t changes = 0, windows = 0;
            std::int64_t dmin = 1 << 30, dmax = 0;
            std::size_t cmin = 1000, cmax = 0;
            for (const auto& w : sim.windows) {
                if (w.t_s < 10.0) continue;
                ++windows;
                changes += w.changed;
                dmin = std::min(dmin, w.delay_us);
                dmax = std::max(dmax, w.delay_us);
                cmin = std::min(cmin, w.cap);
                cmax = std::max(cmax, w.cap);
            }
            REQUIRE(windows > 50);
            CHECK(changes * 10 <= windows);  // at most 1 window in 10 changes anything
            CHECK(dmax <= 2 * std::max<std::int64_t>(dmin, 500));  // delay within 2x (or 1 ms)
            CHECK(cmax <= 2 * cmin);
            CHECK(sim.p99_ms(10, 40) < 5.0);
        }
    }
}

TEST_CASE("adaptive: observers on many threads; one evaluation at a time; stop()", "[adaptive]") {
    std::atomic<int> in_setter{0}, overlaps{0}, out_of_bounds{0};
    std::atomic<std::uint64_t> calls{0};
    AdaptiveBatchingOptions o = options(16, 1000us, 1ms);
    o.min_window = 1ms;
    o.window_requests = 20;
    o.num_workers = 4;
    auto enter = [&] {
        if (in_setter.fetch_add(1) != 0) overlaps.fetch_add(1);
        calls.fetch_add(1);
        std::this_thread::yield();  // widen the window for an overlap
        in_setter.fetch_sub(1);
    };
    AdaptiveBatchController c(
        o,
        [&](std::size_t n) {
            if (n < 1 || n > 16) out_of_bounds.fetch_add(1);
            enter();
        },
        [&](std::chrono::microseconds d) {
            if (d < 0us || d > 1000us) out_of_bounds.fetch_add(1);
            enter();
        });
    std::atomic<bool> stop_flag{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            while (!stop_flag.load()) {
                // Alternating phases of small and full, fast and slow batches.
                const auto phase = (Clock::now().time_since_epoch() / 20ms) % 3;
                const std::size_t items = phase == 0 ? 16 : 1 + rng() % 3;
                const auto compute =
                    std::chrono::microseconds(phase == 1 ? 2000 : 100 + rng() % 200);
                c.on_batch(items, items, compute);
                for (std::size_t i = 0; i < items; ++i)
                    c.on_request_done(i % 7 == 0 ? ErrorCode::unavailable : ErrorCode::ok, 50us,
                                      compute, compute + std::chrono::microseconds(rng() % 3000));
            }
        });
    std::thread reader([&] {
        while (!stop_flag.load()) (void)c.state();
    });
    const auto until = Clock::now() + 10s;
    while (c.state().windows < 30 && Clock::now() < until) std::this_thread::sleep_for(5ms);
    c.stop();
    const std::uint64_t at_stop = calls.load();
    const std::uint64_t windows_at_stop = c.state().windows;
    std::this_thread::sleep_for(50ms);  // the threads keep observing
    stop_flag.store(true);
    for (auto& t : threads) t.join();
    reader.join();
    CHECK(windows_at_stop >= 30);
    CHECK(calls.load() == at_stop);  // no setter call after stop()
    CHECK(c.state().windows == windows_at_stop);
    CHECK(overlaps.load() == 0);
    CHECK(out_of_bounds.load() == 0);
    CHECK(c.state().decisions <= c.state().windows);
}

#ifndef DSINFER_TEST_NO_ENGINE
TEST_CASE("adaptive: a BatchingEngine with BatchingOptions::adaptive runs requests and moves its state",
          "[adaptive]") {
    EngineOptions eo;
    eo.num_threads = 1;
    serving::BatchingOptions bo;
    bo.max_batch_size = 8;
    bo.max_queue_delay = 2000us;
    bo.adaptive = true;
    bo.p99_target_ms = 20;  // 100 ms windows
    const std::string model = test::residual_mlp();
    const serving::BatchingEngine e(
        std::make_shared<const InferenceEngine>(test::engine_from(model, eo)), bo);
    CHECK_THAT(e.batching_info(), Catch::Contains("adaptive: p99 target 20 ms"));
    CHECK(e.batching_state().max_batch_size == 8);  // starts at the full cap and no delay
    CHECK(e.batching_state().max_queue_delay == 0us);

    auto request = [](std::int64_t rows, unsigned seed) {
        Tensor t = Tensor::empty(DType::f32, Shape::make({rows, 3, test::kMlpHidden}).value());
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> d(-1.f, 1.f);
        for (auto& v : t.span<float>()) v = d(rng);
        return std::vector<NamedTensor>{{"x", std::move(t)}};
    };
    auto same = [](const InferenceEngine::Outputs& a, const InferenceEngine::Outputs& b) {
        if (a.size() != b.size()) return false;
        for (std::size_t o = 0; o < a.size(); ++o) {
            const float* x = a[o].tensor.data<float>();
            const float* y = b[o].tensor.data<float>();
            if (!(a[o].tensor.shape() == b[o].tensor.shape())) return false;
            for (std::int64_t i = 0; i < a[o].tensor.num_elements(); ++i)
                if (!(std::abs(x[i] - y[i]) <= 1e-5f * std::max(1.f, std::abs(y[i])))) return false;
        }
        return true;
    };
    // One request at a time: every batch holds one request, so after three windows the cap
    // follows demand down (2 x the largest batch).
    int wrong = 0, sent = 0;
    const auto until = Clock::now() + 30s;
    while (e.batching_state().max_batch_size == 8 && Clock::now() < until) {
        auto r = request(1, static_cast<unsigned>(sent));
        const auto got = e.submit(r).get();
        wrong += !same(got, e.run(r));
        ++sent;
    }
    CHECK(wrong == 0);
    CHECK(e.batching_state().max_batch_size == 2);
    // A request of more rows than the cap now runs alone rather than being refused.
    auto big = request(3, 777);
    CHECK(same(e.submit(big).get(), e.run(big)));
    // Concurrent submitters still get their own outputs.
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i) {
                auto r = request(1 + i % 2, static_cast<unsigned>(1000 * t + i));
                if (!same(e.submit(r).get(), e.run(r))) mismatches.fetch_add(1);
            }
        });
    for (auto& t : threads) t.join();
    CHECK(mismatches.load() == 0);
    const MetricsSnapshot m = e.metrics();
    CHECK(m.requests.ok == static_cast<std::uint64_t>(sent + 1 + 200));  // submit() only
    CHECK(e.run_metrics().requests.ok == static_cast<std::uint64_t>(sent + 1 + 200));
}
#endif  // DSINFER_TEST_NO_ENGINE
