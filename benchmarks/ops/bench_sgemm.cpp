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
#include <cstring>
#include <memory>
#include <random>
#include <string>
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

#if DSINFER_WITH_ONEDNN
/// oneDNN's f32 matmul C[m, n] = A[m, k] · B, B given [N, K]: with `any`, in the layout the
/// primitive picks (weights() reorders a copy into it), else in its plain layout.
struct OnednnMatmul {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    dnnl::memory::desc b_plain;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    dnnl::memory a, plain, c;
    OnednnMatmul(int64_t m, int64_t k, int64_t n, const float* a_data, const float* bt,
                 float* c_data, bool any) {
        using dnnl::memory;
        const memory::desc a_md({m, k}, memory::data_type::f32, memory::format_tag::ab);
        b_plain = memory::desc({k, n}, memory::data_type::f32, memory::format_tag::ba);
        const memory::desc b_any({k, n}, memory::data_type::f32, memory::format_tag::any);
        const memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
        pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, any ? b_any : b_plain, c_md),
                                          eng);
        prim = dnnl::matmul(pd);
        a = memory(a_md, eng, const_cast<float*>(a_data));
        plain = memory(b_plain, eng, const_cast<float*>(bt));
        c = memory(c_md, eng, c_data);
    }
    /// B in the primitive's layout: a reordered copy (a copy when `copy`), or plain itself.
    dnnl::memory weights(bool copy = false) {
        if (pd.weights_desc() == b_plain && !copy) return plain;
        dnnl::memory r(pd.weights_desc(), eng);
        dnnl::reorder(plain, r).execute(strm, plain, r);
        strm.wait();
        return r;
    }
    void run(const dnnl::memory& w) {
        prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}});
        strm.wait();
    }
};
#endif

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
        OnednnMatmul mm(m, k, n, a.data(), bt.data(), c.data(), impl == 2);
        const dnnl::memory bm = impl == 2 ? mm.weights() : mm.plain;
        state.SetLabel(std::string("onednn ") + mm.pd.impl_info_str());
        for (auto _ : state) mm.run(bm);
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

// ---- decoding: a few rows of A against a large constant B ----------------------------------
//
// BM_SgemmDecode {m, k, n, impl, threads}: token-by-token decoding's products (M = 1..16 rows,
// B far larger than A), which read B once and are bound by memory bandwidth. The counter is
// GB/s of B read (its stored bytes: K x N x 4, or x 2 at half width, over wall time). impl 0 =
// dsinfer, B hot (one packed B, from the L3 where it fits); 4 = dsinfer, B cold (copies beyond
// the L3 taken in turn, as a model's layers find their weights); 5 = the streaming bound: a
// read-only sum over the same bytes of cold copies on the same threads; 6 = oneDNN's matmul,
// B reordered once into its layout, cold copies; 7 / 8 = dsinfer with f16 / bf16 B, cold.
// The machine is shared: run with interleaved repetitions and compare medians, e.g.
//   bench_sgemm --benchmark_filter=Decode --benchmark_repetitions=7
//               --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true

/// A read-only sum of [p, p + count) (count a multiple of 64), 8 independent vector chains.
float stream_sum(const float* p, int64_t count) noexcept {
    typedef float V __attribute__((vector_size(64)));
    V acc[4] = {};
    for (int64_t i = 0; i + 64 <= count; i += 64)
        for (int u = 0; u < 4; ++u) {
            V v;
            std::memcpy(&v, p + i + 16 * u, sizeof v);
            acc[u] += v;
        }
    const V t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    float s = 0;
    for (int j = 0; j < 16; ++j) s += t[j];
    return s;
}

void BM_SgemmDecode(benchmark::State& state) {
    namespace d = dsinfer::detail;
    const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
    const int64_t impl = state.range(3);
    d::ThreadBudget budget(static_cast<int>(state.range(4)));
    const auto a = uniform(m * k, 1, 1.f);
    const auto bt = uniform(n * k, 2, 0.05f);  // [N, K]
    std::vector<float> c(static_cast<std::size_t>(m * n));
    const dsinfer::DType width = impl == 7   ? dsinfer::DType::f16
                                 : impl == 8 ? dsinfer::DType::bf16
                                             : dsinfer::DType::f32;
    const double b_bytes =
        static_cast<double>(k * n) * (width == dsinfer::DType::f32 ? 4.0 : 2.0);
    // Copies beyond the L3's size (one when hot).
    const int64_t copies =
        impl == 0 ? 1 : std::max<int64_t>(2, static_cast<int64_t>((96 << 20) / b_bytes) + 1);
    std::size_t next = 0;
    if (impl == 5) {
        const int64_t count = (k * n + 63) / 64 * 64;
        std::vector<std::vector<float>> cold(static_cast<std::size_t>(copies));
        for (auto& v : cold) v.assign(static_cast<std::size_t>(count), 0.5f);
        const int64_t threads = d::max_threads(), lines = count / 64;
        std::vector<float> sums(static_cast<std::size_t>(threads));
        state.SetLabel("stream bound");
        for (auto _ : state) {
            const float* p = cold[next].data();
            d::run_team(threads, [&](int64_t t) {
                const int64_t l0 = lines * t / threads, l1 = lines * (t + 1) / threads;
                sums[static_cast<std::size_t>(t)] = stream_sum(p + l0 * 64, (l1 - l0) * 64);
            });
            benchmark::DoNotOptimize(sums.data());
            next = (next + 1) % cold.size();
        }
    } else if (impl == 0 || impl == 4 || impl == 7 || impl == 8) {
        std::vector<d::PackedB> cold(static_cast<std::size_t>(copies));
        for (auto& b : cold) b = d::pack_b(bt.data(), k, n, true, d::sgemm_isa(), width);
        std::vector<unsigned char> ws(
            d::sgemm_workspace_bytes(m, k, n, cold[0].isa, d::max_threads()));
        state.SetLabel(std::string("dsinfer ") + d::packed_b_target(cold[0]) +
                       (width == dsinfer::DType::f16    ? " f16"
                        : width == dsinfer::DType::bf16 ? (cold[0].pairs ? " bf16" : " bf16w")
                                                        : "") +
                       (impl == 0 ? " B hot" : " B cold"));
        for (auto _ : state) {
            d::sgemm_packed(m, a.data(), k, cold[next], c.data(), n, nullptr, 1.f,
                            d::GemmActivation::none, ws.data(), ws.size());
            next = (next + 1) % cold.size();
            benchmark::ClobberMemory();
        }
    } else {
#if DSINFER_WITH_ONEDNN
        OnednnMatmul mm(m, k, n, a.data(), bt.data(), c.data(), true);
        std::vector<dnnl::memory> cold;
        for (int64_t i = 0; i < copies; ++i) cold.push_back(mm.weights(true));
        state.SetLabel(std::string("onednn ") + mm.pd.impl_info_str() + " B cold");
        for (auto _ : state) {
            mm.run(cold[next]);
            next = (next + 1) % cold.size();
        }
#else
        state.SkipWithError("built without oneDNN");
        return;
#endif
    }
    state.counters["GB/s"] = benchmark::Counter(
        b_bytes * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

void decode_shapes(benchmark::internal::Benchmark* b) {
    const int64_t kn[][2] = {{768, 2048}, {2048, 768}, {768, 32000}};
    for (const auto& s : kn)
        for (int64_t m : {1, 4, 16})
            for (int64_t impl : {0, 4, 5, 6, 7, 8}) {
                if (impl == 5 && m != 1) continue;  // the bound does not depend on M
                b->Args({m, s[0], s[1], impl, 2});
            }
}

BENCHMARK(BM_SgemmDecode)
    ->ArgNames({"m", "k", "n", "impl", "threads"})
    ->Apply(decode_shapes)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
