// dsinfer's packed GEMM with half-width B (src/kernels/sgemm.hpp, PackedB::dtype) against its
// f32 B, at BERT-base's Linear shapes (batch 8, sequence 128: M = 1024) and memory-bound rows
// (MLP batch 1: M = 1, B read once per product from memory, cold: copies of packed B beyond
// the L3's size taken in turn).
//
// Args: m, k, n, form, threads. form 0 = f32 B, 1 = bf16 B on vdpbf16ps (where the CPU has
// AVX512_BF16; else skipped), 2 = bf16 B widened as loaded, 3 = f16 B widened as loaded.
// B is stored [N, K] (Linear weights), packed once outside the timing; A is packed in the
// workspace, as the engine runs it. GFLOP/s counts 2 flops per multiply-add over wall time.
// The machine is shared: compare rows of one run, with interleaved repetitions and medians:
//   bench_hgemm --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
//               --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_data.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"

namespace {

using std::int64_t;
using dsinfer::DType;
namespace dd = dsinfer::detail;

void BM_Hgemm(benchmark::State& state) {
    const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
    const int64_t form = state.range(3);
    dd::ThreadBudget budget(static_cast<int>(state.range(4)));
    const dd::fast::Isa isa = dd::sgemm_isa();
    if (form == 1 && !dd::sgemm_bf16_dot(isa)) {
        state.SkipWithError("no AVX512_BF16 here");
        return;
    }
    const DType dtype = form == 0 ? DType::f32 : form == 3 ? DType::f16 : DType::bf16;
    const auto a = dsinfer::bench::uniform(m * k, 1, 1.f);
    const auto bt = dsinfer::bench::uniform(n * k, 2, 0.05f);  // [N, K]
    std::vector<float> c(static_cast<std::size_t>(m * n));
    const dd::PackedB first = dd::pack_b(bt.data(), k, n, true, isa, dtype, form == 1);
    // Small M: B cold, as a model's layers find their weights.
    const int64_t copies = m <= 16 ? std::max<int64_t>(2, (int64_t{96} << 20) /
                                                              static_cast<int64_t>(first.bytes()) + 1)
                                   : 1;
    std::vector<dd::PackedB> bs(static_cast<std::size_t>(copies), first);
    for (std::size_t i = 1; i < bs.size(); ++i)
        bs[i] = dd::pack_b(bt.data(), k, n, true, isa, dtype, form == 1);
    std::vector<unsigned char> ws(dd::sgemm_workspace_bytes(m, k, n, isa, dd::max_threads()));
    state.SetLabel(std::string(dd::packed_b_target(first)) + " " +
                   std::string(dsinfer::dtype_name(dtype)) + (form == 1 ? " vdpbf16ps" : ""));
    std::size_t next = 0;
    for (auto _ : state) {
        dd::sgemm_packed(m, a.data(), k, bs[next], c.data(), n, nullptr, 1.f,
                         dd::GemmActivation::none, ws.data(), ws.size());
        next = (next + 1) % bs.size();
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * static_cast<double>(m * k * n) * static_cast<double>(state.iterations()) * 1e-9,
        benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
    const int64_t mkn[][3] = {{1024, 768, 768}, {1024, 768, 3072}, {1024, 3072, 768},
                              {1, 4096, 4096},  {1, 1024, 4096}};
    for (const auto& s : mkn)
        for (int64_t form : {0, 1, 2, 3}) b->Args({s[0], s[1], s[2], form, 2});
}

BENCHMARK(BM_Hgemm)
    ->ArgNames({"m", "k", "n", "form", "threads"})
    ->Apply(shapes)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
