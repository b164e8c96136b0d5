// dsinfer's packed-B f32 GEMM (src/kernels/sgemm.hpp) against oneDNN's f32 matmul primitive on
// the Linear/Gemm shapes of the benchmark models: MLP batch 64 (64 x 1024 -> 4096 -> 4096 ->
// 1024), BERT-base at batch 1, sequence 128 (M = 128; N, K of 768 / 3072) and batch 8 (M = 1024,
// all three of its Linear shapes).
// B is constant and stored [N, K] (transB = 1, Linear weights).
//
// Args: m, k, n, impl, threads. impl 0 = dsinfer's packed GEMM (B packed once, outside the
// timing) with its workspace, as the engine runs it (A packed there, partial sums of the K
// blocks in per-thread accumulation buffers), 3 = the same without a workspace (A in buffers
// kept per thread, partial sums in C), 1 = oneDNN matmul with B in its plain layout, 2 = oneDNN
// matmul with B reordered once into the layout the primitive picks ("any"), as dsinfer's oneDNN
// backend does, 4 = dsinfer's packed GEMM with B cold (copies of packed B beyond the L3's size
// taken in turn, as a model's layers find their weights).
// The GFLOP/s counter counts 2 flops per multiply-add, over CPU time at 1 thread and over
// wall time at 2. The machine is shared: compare rows of one run, with interleaved
// repetitions and medians, e.g.
//   bench_sgemm --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//               --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "bench_data.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/config.hpp"

#if DSINFER_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using std::int64_t;

using dsinfer::bench::uniform;

void BM_Sgemm(benchmark::State& state) {
    const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
    const int64_t impl = state.range(3);
    dsinfer::detail::ThreadBudget budget(static_cast<int>(state.range(4)));
    const auto a = uniform(m * k, 1, 1.f);
    const auto bt = uniform(n * k, 2, 0.05f);  // [N, K]
    std::vector<float> c(static_cast<std::size_t>(m * n));
    if (impl == 4) {
        // B cold, as in a model run (each layer's weights come from memory, not from the
        // cache): copies of packed B, more than the L3 holds, taken in turn.
        const auto packed = dsinfer::detail::pack_b(bt.data(), k, n, true);
        const int64_t bytes = packed.panels * packed.nr * k * 4;
        const int64_t copies = std::max<int64_t>(2, (int64_t{96} << 20) / bytes + 1);
        std::vector<dsinfer::detail::PackedB> cold(static_cast<std::size_t>(copies));
        for (auto& b : cold) b = dsinfer::detail::pack_b(bt.data(), k, n, true);
        std::vector<unsigned char> ws(dsinfer::detail::sgemm_workspace_bytes(
            m, k, n, packed.isa, dsinfer::detail::max_threads()));
        state.SetLabel(std::string("dsinfer ") + dsinfer::detail::fast::isa_name(packed.isa) +
                       " B cold");
        std::size_t next = 0;
        for (auto _ : state) {
            dsinfer::detail::sgemm_packed(m, a.data(), k, cold[next], c.data(), n, nullptr, 1.f,
                                          dsinfer::detail::GemmActivation::none, ws.data(),
                                          ws.size());
            next = (next + 1) % cold.size();
            benchmark::ClobberMemory();
        }
    } else if (impl == 0 || impl == 3) {
        const auto packed = dsinfer::detail::pack_b(bt.data(), k, n, true);
        std::vector<unsigned char> ws(
            impl == 0 ? dsinfer::detail::sgemm_workspace_bytes(m, k, n, packed.isa,
                                                               dsinfer::detail::max_threads())
                      : 0);
        state.SetLabel(std::string("dsinfer ") + dsinfer::detail::fast::isa_name(packed.isa) +
                       (impl == 0 ? "" : " no workspace"));
        for (auto _ : state) {
            dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, nullptr, 1.f,
                                          dsinfer::detail::GemmActivation::none,
                                          ws.empty() ? nullptr : ws.data(), ws.size());
            benchmark::ClobberMemory();
        }
    } else {
#if DSINFER_WITH_ONEDNN
        using dnnl::memory;
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const memory::desc a_md({m, k}, memory::data_type::f32, memory::format_tag::ab);
        const memory::desc b_plain({k, n}, memory::data_type::f32, memory::format_tag::ba);
        const memory::desc b_any({k, n}, memory::data_type::f32, memory::format_tag::any);
        const memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
        const dnnl::matmul::primitive_desc pd(
            dnnl::matmul::desc(a_md, impl == 2 ? b_any : b_plain, c_md), eng);
        const dnnl::matmul prim(pd);
        memory am(a_md, eng, const_cast<float*>(a.data()));
        memory bm(b_plain, eng, const_cast<float*>(bt.data()));
        memory cm(c_md, eng, c.data());
        if (impl == 2 && pd.weights_desc() != b_plain) {
            memory reordered(pd.weights_desc(), eng);
            dnnl::reorder(bm, reordered).execute(strm, bm, reordered);
            strm.wait();
            bm = reordered;
        }
        state.SetLabel(std::string("onednn ") + pd.impl_info_str());
        for (auto _ : state) {
            prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
            strm.wait();
        }
#else
        state.SkipWithError("built without oneDNN");
        return;
#endif
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * static_cast<double>(m * k * n) *
                               static_cast<double>(state.iterations()) * 1e-9,
                           benchmark::Counter::kIsRate);
}

template <int64_t Threads>
void shapes(benchmark::internal::Benchmark* b) {
    const int64_t mkn[][3] = {{64, 1024, 4096}, {64, 4096, 4096}, {64, 4096, 1024},
                              {128, 768, 768},  {128, 768, 3072}, {128, 3072, 768},
                              {1024, 768, 768}, {1024, 768, 3072}, {1024, 3072, 768},
                              // conv_gemm at ResNet-50 batch 8 (3x3, 512 -> 512 at 7x7), and
                              // narrow products that threads split by row tiles (N <= 256)
                              {392, 4608, 512}, {784, 2304, 256}, {1568, 1152, 128}};
    for (const auto& s : mkn)
        for (int64_t impl : {0, 3, 1, 2, 4}) b->Args({s[0], s[1], s[2], impl, Threads});
}

// One thread: CPU time, which a shared machine's other processes disturb less than wall time.
BENCHMARK(BM_Sgemm)
    ->ArgNames({"m", "k", "n", "impl", "threads"})
    ->Apply(shapes<1>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Sgemm)
    ->ArgNames({"m", "k", "n", "impl", "threads"})
    ->Apply(shapes<2>)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
