// dsinfer's INT8 convolution (src/kernels/qconv.hpp: NHWC bytes, im2col, qgemm, C transposed to
// NCHW) against dsinfer's f32 NCHW convolution (conv_gemm_nchw, the "cpu" backend's im2col +
// packed GEMM) on the same shapes, in the same run: ResNet-50's convolutions (1x1 256 -> 64 and
// 64 -> 256 at 56x56, 3x3 64 -> 64 at 56x56, 3x3 stride-2 128 -> 128 from 56x56 to 28x28, 1x1
// 2048 -> 512 at 7x7, the 7x7 stride-2 stem 3 -> 64 from 224x224) at batch 1 and 8, and a 3x3
// 32 -> 32 convolution of a 1024x1024 image.
// Weights are packed once outside the timing; each run gets its workspace, as the engine runs it.
//
// Args: n, c, hw, m, k (kernel edge), stride, impl, threads. impl 0 = qconv requantized to u8
// (QLinearConv: per-channel scales, int32 bias); 1 = qconv s32 (ConvInteger); 2 = conv_gemm_nchw
// f32 (the FP32 baseline, bias, no activation); 3 = impl 0 channels last (x and y NHWC, as a QDQ
// ResNet runs after layout negotiation); 4 = impl 3 plus an 8-bit residual added in the store,
// in place on the residual (com.dsinfer QLinearConvAdd: a ResNet block's 1x1 expansion and its
// join; 4 against 3 is what the fused add costs, against the separate QLinearAdd of
// bench_qlinear's BM_QLinearAdd); 5 and 6 = impl 3 and 4 in the form of ResNet-50 QDQ's
// convolutions after the first: x of zero point 0 holding ReLU-like bytes (half of them 0, the
// rest about exponential with mean 20: 2% of 64 or more, 0.08% of 128 or more), s8 weights of
// zero point 0 (normal, each output channel's largest magnitude 127), packed in avx2's byte form
// for 7-bit A where the family is avx2 (the label says "a7"), impl 6's residual and sum of zero
// point 0 (a ReLU output added, the sum's ReLU folded into its range); 7 = impl 5 with the weights
// in the Winograd form (3x3 stride 1 only; "wino": F(2x2, 3x3) in 16-bit integers, what qconv runs
// for those on avx2; 7 against 5 is what it gains). Pads are k / 2. The GOPS counter counts 2
// operations per multiply-add. Compare rows of one run, with interleaved repetitions and medians,
// e.g.
//   bench_qconv --benchmark_filter='threads:2' --benchmark_repetitions=3
//               --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_data.hpp"
#include "kernels/conv_gemm.hpp"
#include "kernels/qconv.hpp"
#include "runtime/parallel.hpp"

namespace {

using std::int64_t;

/// ReLU outputs quantized with zero point 0 (impl 5, 6): half 0, the rest about exponential
/// with mean 20, saturated at 255.
std::vector<std::uint8_t> relu_bytes(int64_t n, unsigned seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
    std::mt19937 gen(seed);
    std::exponential_distribution<float> e(1.f / 20.f);
    std::bernoulli_distribution zero(0.5);
    for (auto& x : v) x = zero(gen) ? 0 : static_cast<std::uint8_t>(std::min(255.f, e(gen)));
    return v;
}

/// s8 weights as per-channel symmetric quantization writes them (impl 5, 6): normal values,
/// each of the m output channels scaled so that its largest magnitude is 127.
std::vector<std::uint8_t> channel_weights(int64_t m, int64_t per_channel, unsigned seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(m * per_channel));
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal;
    std::vector<float> f(static_cast<std::size_t>(per_channel));
    for (int64_t o = 0; o < m; ++o) {
        float top = 1e-6f;
        for (auto& x : f) top = std::max(top, std::fabs(x = normal(gen)));
        for (int64_t i = 0; i < per_channel; ++i)
            v[static_cast<std::size_t>(o * per_channel + i)] = static_cast<std::uint8_t>(
                static_cast<std::int8_t>(std::lrint(f[static_cast<std::size_t>(i)] * 127.f / top)));
    }
    return v;
}

std::vector<std::uint8_t> bytes(int64_t n, unsigned seed) {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
    std::minstd_rand gen(seed);
    for (auto& x : v) x = static_cast<std::uint8_t>(gen() >> 7);
    return v;
}

void BM_Qconv(benchmark::State& state) {
    namespace d = dsinfer::detail;
    const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), m = state.range(3);
    const int64_t k = state.range(4), stride = state.range(5), impl = state.range(6);
    d::ThreadBudget budget(static_cast<int>(state.range(7)));
    const int64_t pad = k / 2, out = (hw + 2 * pad - k) / stride + 1;
    if (impl != 2) {
        d::QConvShape s;
        s.batch = n;
        s.c = c;
        s.h = s.w = hw;
        s.m = m;
        s.kh = s.kw = k;
        s.sh = s.sw = stride;
        s.pt = s.pl = pad;
        s.oh = s.ow = out;
        s.x_nhwc = s.y_nhwc = s.r_nhwc = impl >= 3;
        const bool requantized = impl != 1, relu_form = impl >= 5;
        const bool wino = impl == 7;
        const auto x = relu_form ? relu_bytes(n * c * hw * hw, 1) : bytes(n * c * hw * hw, 1);
        const auto w = relu_form ? channel_weights(m, c * k * k, 2) : bytes(m * c * k * k, 2);
        const d::PackedQConvW packed = d::pack_qconv_weights(w.data(), false, s, d::qgemm_isa(),
                                                             relu_form && c % 4 == 0, wino);
        const auto scales = dsinfer::bench::uniform(m, 3, 0.01f);
        std::vector<std::int32_t> bias(static_cast<std::size_t>(m), 1000);
        d::QGemmParams p;
        p.a_zero = relu_form ? 0 : 128;
        p.out = requantized ? d::QGemmOutput::u8 : d::QGemmOutput::s32;
        p.a_scale = 0.02f;
        p.b_scales = scales.data();
        p.bias_s32 = requantized ? bias.data() : nullptr;
        p.y_scale = 0.5f;
        p.y_zero = 128;
        std::vector<std::int32_t> y(static_cast<std::size_t>(n * m * out * out));
        if (impl == 4 || impl == 6) {
            // The residual, updated in place each run (its values drift; the work does not).
            const auto r = bytes(n * m * out * out, 4);
            std::memcpy(y.data(), r.data(), r.size());
            p.residual = y.data();
            // impl 6: the residual and the sum of zero point 0, as ResNet-50 QDQ's joins have
            // where the residual is a block's ReLU output (13 of its 16)
            p.add = impl == 6 ? d::qlinear_add_params(p.y_scale, 0.4f, 0.6f, p.y_zero, 0, 0)
                              : d::qlinear_add_params(p.y_scale, 0.4f, 0.6f, p.y_zero, 120, 125);
        }
        std::vector<unsigned char> ws(d::qconv_workspace_bytes(
            s, packed, requantized ? 1 : 4, d::max_threads()));
        const char* what[] = {" u8",
                              " s32",
                              "",
                              " u8 nhwc",
                              " u8 nhwc + residual",
                              " u8 nhwc relu-x",
                              " u8 nhwc relu-x + residual",
                              " u8 nhwc relu-x"};
        const d::PackedQB& b0 = packed.winograd() ? packed.wino.front() : packed.groups.front();
        state.SetLabel(std::string("qconv ") + d::qisa_name(b0.isa) +
                       (packed.winograd() ? "-wino"
                        : packed.a7()     ? b0.a7_pairs() ? "-a7p" : "-a7"
                                          : "") +
                       what[impl]);
        for (auto _ : state) {
            d::qconv(s, x.data(), nullptr, packed, y.data(), p, ws.data(), ws.size());
            benchmark::ClobberMemory();
        }
    } else {
        d::ConvGemmShape s;
        s.n = n;
        s.c = c;
        s.h = s.w = hw;
        s.oc = m;
        s.oh = s.ow = out;
        s.kh = s.kw = k;
        s.sh = s.sw = stride;
        s.ph = s.pw = pad;
        const auto x = dsinfer::bench::uniform(n * c * hw * hw, 1, 1.f);
        const auto w = dsinfer::bench::uniform(m * c * k * k, 2, 0.05f);
        const auto bias = dsinfer::bench::uniform(m, 3, 0.1f);
        std::vector<float> y(static_cast<std::size_t>(n * m * out * out));
        std::vector<unsigned char> ws(d::conv_gemm_nchw_workspace_bytes(s, d::max_threads()));
        state.SetLabel("conv_gemm_nchw f32");
        for (auto _ : state) {
            d::conv_gemm_nchw(s, x.data(), w.data(), bias.data(), nullptr, y.data(),
                              dsinfer::detail::ActivationSpec{}, ws.data(), ws.size());
            benchmark::ClobberMemory();
        }
    }
    state.counters["GOPS"] = benchmark::Counter(
        2.0 * static_cast<double>(n * m * out * out * c * k * k) *
            static_cast<double>(state.iterations()) * 1e-9,
        benchmark::Counter::kIsRate);
}

template <int64_t Threads>
void shapes(benchmark::internal::Benchmark* b) {
    // c, hw, m, k, stride
    const int64_t conv[][5] = {{256, 56, 64, 1, 1}, {64, 56, 64, 3, 1},  {64, 56, 256, 1, 1},
                               {128, 56, 128, 3, 2}, {2048, 7, 512, 1, 1}, {3, 224, 64, 7, 2}};
    for (int64_t n : {1, 8})
        for (const auto& s : conv)
            for (int64_t impl : {0, 1, 2}) b->Args({n, s[0], s[1], s[2], s[3], s[4], impl, Threads});
    for (int64_t impl : {0, 2}) b->Args({1, 32, 1024, 32, 3, 1, impl, Threads});
    // The block joins of ResNet-50 (1x1 expansions with the residual add): 64 -> 256 at 56x56,
    // 512 -> 2048 at 7x7.
    for (int64_t n : {1, 8})
        for (int64_t impl : {3, 4, 5, 6}) {
            b->Args({n, 64, 56, 256, 1, 1, impl, Threads});
            b->Args({n, 512, 7, 2048, 1, 1, impl, Threads});
        }
    // The 3x3 convolutions of ResNet-50's stages as a QDQ ResNet runs them (channels last), and
    // the 1x1 2048 -> 512 at 7x7 (49 rows an image: four 12-row tiles and a short one), the 1x1
    // reductions and the first stage transition.
    for (int64_t n : {1, 8})
        for (int64_t impl : {3, 5, 7}) {
            b->Args({n, 64, 56, 64, 3, 1, impl, Threads});
            b->Args({n, 128, 28, 128, 3, 1, impl, Threads});
            b->Args({n, 256, 14, 256, 3, 1, impl, Threads});
            b->Args({n, 512, 7, 512, 3, 1, impl, Threads});
            if (impl == 7) continue;
            b->Args({n, 2048, 7, 512, 1, 1, impl, Threads});
            b->Args({n, 256, 56, 64, 1, 1, impl, Threads});
            b->Args({n, 64, 56, 64, 1, 1, impl, Threads});
            b->Args({n, 128, 28, 512, 1, 1, impl, Threads});
            // A stage's first 1x1 reduction and its stride-2 projection (56x56 -> 28x28).
            b->Args({n, 256, 56, 128, 1, 1, impl, Threads});
            b->Args({n, 256, 56, 512, 1, 2, impl, Threads});
        }
}

BENCHMARK(BM_Qconv)
    ->ArgNames({"n", "c", "hw", "m", "k", "stride", "impl", "threads"})
    ->Apply(shapes<1>)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Qconv)
    ->ArgNames({"n", "c", "hw", "m", "k", "stride", "impl", "threads"})
    ->Apply(shapes<2>)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
