// dsinfer's packed-B INT8 GEMM (src/kernels/qgemm.hpp) against dsinfer's packed f32 GEMM
// (sgemm_packed) and oneDNN's u8 x s8 -> s32 matmul on the same shapes, in the same run: the
// Linear shapes of BERT-base (M = 128: batch 1, sequence 128; M = 1024: batch 8; N, K of 768 /
// 3072), the MLP of tools/make_models.py at batch 64 (1024 -> 4096 -> 4096 -> 1024), and
// ResNet-like im2col products (3x3 64 -> 64 at 56x56: 3136 x 576 x 64; 3x3 256 -> 256 at 14x14,
// batch 8: 1568 x 2304 x 256). B is constant, stored [N, K] (Linear weights), packed once
// outside the timing; each dsinfer run gets its workspace, as the engine runs it.
//
// Args: m, k, n, impl, threads. impl 0 = qgemm, s32 out (MatMulInteger); 1 = qgemm dequantized
// to f32 with per-column scales and bias (MatMulIntegerToFloat / DynamicQuantizeMatMul);
// 2 = qgemm requantized to u8 (QLinearMatMul); 3 = sgemm_packed (f32, the FP32 baseline);
// 4 = oneDNN matmul u8 x s8 -> s32 with B reordered once to the layout it picks; 5 = impl 1
// with B drawn like per-tensor symmetric weights (a normal of sigma 127 / 4.5, clipped to
// +-127: most values far from +-127), packed in the form pack_qb picks (on AVX2 one of three,
// qgemm.hpp); on AVX2 its forms forced, peers in the same run: 6 = the 16-bit form, 7 = the
// byte form a group a step, 8 = the paired byte form. The label gives a byte form's corrections
// per 8 rows of K and panel; DSINFER_BENCH_WEIGHT_DIV=d draws B with sigma 127 / d instead
// (more corrections below 4.5, fewer above: the costs pack_qb's automatic choice weighs).
// The GOPS counter counts 2 operations per multiply-add over CPU time at 1 thread, over wall
// time at 2. Compare rows of one run, with interleaved repetitions and medians, e.g.
//   bench_qgemm --benchmark_filter='threads:2' --benchmark_repetitions=3
//               --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_data.hpp"
#include "dsinfer/config.hpp"
#include "kernels/qgemm.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"

#if DSINFER_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using std::int64_t;

std::vector<std::uint8_t> bytes(int64_t n, unsigned seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
    std::minstd_rand gen(seed);
    for (auto& x : v) x = static_cast<std::uint8_t>(gen() >> 7);
    return v;
}

/// s8 values like per-tensor symmetric quantized weights: normal, sigma 127 / 4.5 (or / the
/// DSINFER_BENCH_WEIGHT_DIV environment variable), clipped.
std::vector<std::uint8_t> weight_like(int64_t n, unsigned seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
    std::mt19937 gen(seed);
    const char* div = std::getenv("DSINFER_BENCH_WEIGHT_DIV");
    const float d =
        div != nullptr && std::atof(div) > 0 ? static_cast<float>(std::atof(div)) : 4.5f;
    std::normal_distribution<float> normal(0.f, 127.f / d);
    for (auto& x : v) {
        const float w = std::clamp(std::nearbyint(normal(gen)), -127.f, 127.f);
        x = static_cast<std::uint8_t>(static_cast<std::int8_t>(w));
    }
    return v;
}

void BM_Qgemm(benchmark::State& state) {
    const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
    const int64_t impl = state.range(3);
    dsinfer::detail::ThreadBudget budget(static_cast<int>(state.range(4)));
    namespace d = dsinfer::detail;
    if (impl <= 2 || impl >= 5) {
        const auto a = bytes(m * k, 1);
        const auto bt = impl >= 5 ? weight_like(n * k, 2) : bytes(n * k, 2);  // [N, K], s8
        const d::PackedQB packed = d::pack_qb(bt.data(), false, k, n, true, d::qgemm_isa(),
                                              impl == 6   ? d::QBForm::wide
                                              : impl == 7 ? d::QBForm::bytes
                                              : impl == 8 ? d::QBForm::paired
                                                          : d::QBForm::automatic);
        const auto scales = dsinfer::bench::uniform(n, 3, 0.01f);
        const auto bias = dsinfer::bench::uniform(n, 4, 1.f);
        d::QGemmParams p;
        p.a_zero = 128;
        p.out = impl == 0   ? d::QGemmOutput::s32
                : impl == 2 ? d::QGemmOutput::u8
                            : d::QGemmOutput::f32;
        p.a_scale = 0.02f;
        p.b_scales = scales.data();
        p.bias = bias.data();
        p.y_scale = 0.5f;
        p.y_zero = 128;
        std::vector<std::int32_t> c(static_cast<std::size_t>(m * n));  // big enough for any out
        std::vector<unsigned char> ws(d::qgemm_workspace_bytes(m, packed, d::max_threads()));
        // A byte form: its corrections per 8 rows of K and panel.
        const double fix_rate = static_cast<double>(packed.fix_count()) /
                                static_cast<double>((packed.kp / 4 + 1) / 2 * packed.panels);
        state.SetLabel(std::string("qgemm ") + d::qisa_name(packed.isa) +
                       (packed.fixed()
                            ? std::string(packed.paired() ? " paired" : " bytes") + " (" +
                                  std::to_string(fix_rate).substr(0, 4) + " fixes / 8 rows)"
                            : "") +
                       (impl == 0   ? " s32"
                        : impl == 2 ? " u8"
                                    : " f32"));
        for (auto _ : state) {
            d::qgemm_packed(m, a.data(), k, packed, c.data(), n, p, ws.data(), ws.size());
            benchmark::ClobberMemory();
        }
    } else if (impl == 3) {
        const auto a = dsinfer::bench::uniform(m * k, 1, 1.f);
        const auto bt = dsinfer::bench::uniform(n * k, 2, 0.05f);
        const auto packed = d::pack_b(bt.data(), k, n, true);
        std::vector<float> c(static_cast<std::size_t>(m * n));
        std::vector<unsigned char> ws(
            d::sgemm_workspace_bytes(m, k, n, packed.isa, d::max_threads()));
        state.SetLabel(std::string("sgemm ") + d::fast::isa_name(packed.isa));
        for (auto _ : state) {
            d::sgemm_packed(m, a.data(), k, packed, c.data(), n, nullptr, 1.f,
                            d::GemmActivation::none, ws.data(), ws.size());
            benchmark::ClobberMemory();
        }
    } else {
#if DSINFER_WITH_ONEDNN
        using dnnl::memory;
        auto a = bytes(m * k, 1);
        auto bt = bytes(n * k, 2);
        std::vector<std::int32_t> c(static_cast<std::size_t>(m * n));
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const memory::desc a_md({m, k}, memory::data_type::u8, memory::format_tag::ab);
        const memory::desc b_plain({k, n}, memory::data_type::s8, memory::format_tag::ba);
        const memory::desc b_any({k, n}, memory::data_type::s8, memory::format_tag::any);
        const memory::desc c_md({m, n}, memory::data_type::s32, memory::format_tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
        const dnnl::matmul prim(pd);
        memory am(a_md, eng, a.data());
        memory bm(b_plain, eng, bt.data());
        memory cm(c_md, eng, c.data());
        if (pd.weights_desc() != b_plain) {
            memory reordered(pd.weights_desc(), eng);
            dnnl::reorder(bm, reordered).execute(strm, bm, reordered);
            strm.wait();
            bm = reordered;
        }
        state.SetLabel(std::string("onednn u8s8 ") + pd.impl_info_str());
        for (auto _ : state) {
            prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
            strm.wait();
        }
#else
        state.SkipWithError("built without oneDNN");
        return;
#endif
    }
    state.counters["GOPS"] = benchmark::Counter(
        2.0 * static_cast<double>(m * k * n) * static_cast<double>(state.iterations()) * 1e-9,
        benchmark::Counter::kIsRate);
}

template <int64_t Threads>
void shapes(benchmark::internal::Benchmark* b) {
    const int64_t mkn[][3] = {{128, 768, 768},   {128, 768, 3072},  {128, 3072, 768},
                              {1024, 768, 768},  {1024, 768, 3072}, {1024, 3072, 768},
                              {64, 1024, 4096},  {64, 4096, 4096},  {64, 4096, 1024},
                              {3136, 576, 64},   {1568, 2304, 256}};
    for (const auto& s : mkn)
        for (int64_t impl : {0, 1, 2, 3, 4, 5, 6, 7, 8}) b->Args({s[0], s[1], s[2], impl, Threads});
}

BENCHMARK(BM_Qgemm)
    ->ArgNames({"m", "k", "n", "impl", "threads"})
    ->Apply(shapes<1>)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Qgemm)
    ->ArgNames({"m", "k", "n", "impl", "threads"})
    ->Apply(shapes<2>)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

#if defined(__x86_64__) && defined(__GNUC__)
// What one core's vector units sustain for the AVX2 INT8 inner step, registers only (no loads):
// why qgemm's exact avx2 family trails a saturating u8 x s8 kernel. form 0: vpmaddwd + vpaddd
// (qgemm's avx2 family: 16 exact multiply-adds a pair, A and B widened to 16 bits); 1:
// vpmaddubsw + vpmaddwd by ones + vpaddd (32 multiply-adds, the form of ONNX Runtime's MLAS and
// oneDNN without VNNI; vpmaddubsw's s16 pair sums saturate, so it is inexact for
// |b0| + |b1| > 128 of one sign); 2: vpmaddubsw + vpaddw (32, s16 sums, overflowing: the bound no
// 8-bit form passes). 12 independent accumulators, as in a 6 x 16 tile. GMAC/s counts
// multiply-adds per second of CPU time.
#define DSI_STEP0(i, j) \
    "vpmaddwd %%ymm12, %%ymm13, %%ymm" #i "\n\tvpaddd %%ymm" #i ", %%ymm" #j ", %%ymm" #j "\n\t"
#define DSI_STEP1(i, j)                                                                   \
    "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n\tvpmaddwd %%ymm" #i ", %%ymm14, %%ymm" #i \
    "\n\tvpaddd %%ymm" #i ", %%ymm" #j ", %%ymm" #j "\n\t"
#define DSI_STEP2(i, j) \
    "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n\tvpaddw %%ymm" #i ", %%ymm" #j ", %%ymm" #j "\n\t"
// form 3: two vpmaddubsw summed by vpaddw in s16, then vpmaddwd by ones + vpaddd (64 a step).
#define DSI_STEP3(i, t, j)                                                                        \
    "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n\tvpmaddubsw %%ymm12, %%ymm15, %%ymm" #t           \
    "\n\tvpaddw %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n\tvpmaddwd %%ymm" #i ", %%ymm14, %%ymm" #i \
    "\n\tvpaddd %%ymm" #i ", %%ymm" #j ", %%ymm" #j "\n\t"
#define DSI_SIX3       \
    DSI_STEP3(0, 1, 6) \
    DSI_STEP3(2, 3, 7) DSI_STEP3(4, 5, 8) DSI_STEP3(0, 1, 9) DSI_STEP3(2, 3, 10) DSI_STEP3(4, 5, 11)
#define DSI_SIX(S) S(0, 6) S(1, 7) S(2, 8) S(3, 9) S(4, 10) S(5, 11)
#define DSI_TWELVE(S) DSI_SIX(S) DSI_SIX(S)
#define DSI_CLOBBER \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"

__attribute__((target("avx2"))) void dot_forms(int form, int64_t loops) {
    for (int64_t n = 0; n < loops; ++n) {
        if (form == 0)
            __asm__ volatile(DSI_TWELVE(DSI_STEP0)::: DSI_CLOBBER);
        else if (form == 1)
            __asm__ volatile(DSI_TWELVE(DSI_STEP1)::: DSI_CLOBBER);
        else if (form == 2)
            __asm__ volatile(DSI_TWELVE(DSI_STEP2)::: DSI_CLOBBER);
        else
            __asm__ volatile(DSI_SIX3 DSI_SIX3::: DSI_CLOBBER);
    }
}

void BM_Avx2DotForms(benchmark::State& state) {
    if (!__builtin_cpu_supports("avx2")) {
        state.SkipWithError("no AVX2 on this CPU");
        return;
    }
    const int form = static_cast<int>(state.range(0));
    constexpr int64_t kLoops = 1 << 16;
    for (auto _ : state) dot_forms(form, kLoops);
    const double macs_per_step = form == 0   ? 16
                                 : form == 3 ? 64
                                             : 32;  // per ymm multiply instruction pair/triple
    state.counters["GMAC/s"] =
        benchmark::Counter(12.0 * macs_per_step * static_cast<double>(kLoops) *
                               static_cast<double>(state.iterations()) * 1e-9,
                           benchmark::Counter::kIsRate);
    state.SetLabel(form == 0   ? "vpmaddwd+vpaddd (exact)"
                   : form == 1 ? "vpmaddubsw+vpmaddwd+vpaddd (saturating)"
                   : form == 2 ? "vpmaddubsw+vpaddw (s16 sums)"
                               : "2 vpmaddubsw+vpaddw+vpmaddwd+vpaddd (s16 pairs of groups)");
}
BENCHMARK(BM_Avx2DotForms)->ArgName("form")->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
#undef DSI_STEP0
#undef DSI_STEP1
#undef DSI_STEP2
#undef DSI_SIX
#undef DSI_STEP3
#undef DSI_SIX3
#undef DSI_TWELVE
#undef DSI_CLOBBER
#endif

}  // namespace

BENCHMARK_MAIN();
