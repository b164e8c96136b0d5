// dsinfer's own thread pool (src/runtime/thread_pool.hpp) against libgomp's team, the two places
// a run's parallel regions of dsinfer's kernels can go (EngineOptions::wait_policy).
//
// Args: mode (0 = libgomp's team, 1 = dsinfer's pool, spin; 2 = pool, yield; 3 = pool, block),
// threads. BM_Region: one empty region (the fixed cost of a fork-join: wake, take a slot, join),
// back to back. BM_RegionGap: one region of ~20 µs of work per slot, then ~50 µs on the calling
// thread alone (a serial node between two parallel ones), so helpers idle between regions as
// in a run. BM_SgemmRegions: dsinfer's packed GEMM at BERT-base's 128 x 768 x 768 (one region
// per call).
// The machine is shared: compare rows of one run, with interleaved repetitions and medians:
//   bench_thread_pool --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//                     --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "bench_data.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using dsinfer::detail::ParallelMode;
using dsinfer::detail::PoolWait;

ParallelMode mode_of(std::int64_t m) {
    if (m == 0) return {false, PoolWait::spin};
    return {true, m == 1 ? PoolWait::spin : m == 2 ? PoolWait::yield : PoolWait::block};
}

const char* label_of(std::int64_t m) {
    return m == 0 ? "openmp team" : m == 1 ? "pool spin" : m == 2 ? "pool yield" : "pool block";
}

/// Busy work of about `us` microseconds on this thread.
void spin_for(double us) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
    while (std::chrono::steady_clock::now() < until) {
    }
}

void BM_Region(benchmark::State& state) {
    const dsinfer::detail::ThreadBudget budget(static_cast<int>(state.range(1)));
    const dsinfer::detail::ParallelModeScope mode(mode_of(state.range(0)));
    const std::int64_t team = dsinfer::detail::max_threads();
    std::atomic<std::int64_t> sink{0};
    for (auto _ : state) dsinfer::detail::run_team(team, [&](std::int64_t s) { sink += s; });
    benchmark::DoNotOptimize(sink.load());
    state.SetLabel(label_of(state.range(0)));
}

void BM_RegionGap(benchmark::State& state) {
    const dsinfer::detail::ThreadBudget budget(static_cast<int>(state.range(1)));
    const dsinfer::detail::ParallelModeScope mode(mode_of(state.range(0)));
    const std::int64_t team = dsinfer::detail::max_threads();
    for (auto _ : state) {
        dsinfer::detail::run_team(team, [](std::int64_t) { spin_for(20); });
        spin_for(50);
    }
    state.SetLabel(label_of(state.range(0)));
}

void BM_SgemmRegions(benchmark::State& state) {
    const dsinfer::detail::ThreadBudget budget(static_cast<int>(state.range(1)));
    const dsinfer::detail::ParallelModeScope mode(mode_of(state.range(0)));
    constexpr std::int64_t m = 128, k = 768, n = 768;
    const auto a = dsinfer::bench::uniform(m * k, 1, 1.f);
    const auto bt = dsinfer::bench::uniform(n * k, 2, 0.05f);
    const auto packed = dsinfer::detail::pack_b(bt.data(), k, n, true);
    std::vector<float> c(static_cast<std::size_t>(m * n));
    std::vector<unsigned char> ws(dsinfer::detail::sgemm_workspace_bytes(
        m, k, n, packed.isa, dsinfer::detail::max_threads()));
    for (auto _ : state) {
        const bool ok = dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, nullptr,
                                                      1.f, dsinfer::detail::GemmActivation::none,
                                                      ws.data(), ws.size());
        benchmark::DoNotOptimize(ok);
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * m * k * n * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.SetLabel(label_of(state.range(0)));
}

void modes(benchmark::internal::Benchmark* b) {
    for (std::int64_t m = 0; m < 4; ++m) b->Args({m, 2});
    b->UseRealTime();
}

}  // namespace

BENCHMARK(BM_Region)->Apply(modes);
BENCHMARK(BM_RegionGap)->Apply(modes);
BENCHMARK(BM_SgemmRegions)->Apply(modes);

BENCHMARK_MAIN();
