// ResNet-50's 3x3 stride-1 convolutions (pads 1, bias, ReLU) on the blocked layout the oneDNN
// backend negotiates (nChw8c on AVX2, nChw16c on AVX-512), kernel against kernel:
// impl 0 = dsinfer's Winograd F(4x4, 3x3) (src/kernels/conv_winograd.hpp), 1 = dsinfer's
// im2col + packed GEMM (conv_gemm.hpp), 2 = oneDNN's convolution primitive (direct, weights
// reordered once into the layout it picks), the in-run peer.
// Args: n, c (= oc), hw, impl, threads. The GFLOP/s counter counts the direct form's 2 * 9
// flops per (pixel, c, oc), whatever the algorithm does, so rows of one shape compare as
// throughput.
//
// BM_ConvNchw: ResNet-50's convolutions (every distinct layer: the 7x7 stem, 1x1, 3x3 stride 1
// and 2; pads k/2, bias, ReLU) on plain NCHW, as the "cpu" backend's Conv runs them without
// oneDNN (src/cpu/fast/fast_conv.cpp): impl 0 = choose_conv_algo's pick on NCHW
// (src/kernels/conv_dispatch.hpp), 1 = Winograd's NCHW entry (3x3 stride 1 only), 2 = im2col +
// packed GEMM on NCHW, 3 = the reference kernel (a one-node engine on backends {"reference"}:
// single-threaded Eigen). Args: n, c, oc, hw (input), k, stride, impl, threads; GFLOP/s counts
// the direct form's flops.
// The machine is shared: compare rows of one run, with interleaved repetitions and
// medians, e.g.
//   bench_conv --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
//              --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/activation.hpp"
#include "bench_data.hpp"
#include "kernels/conv_gemm.hpp"
#include "kernels/conv_winograd.hpp"
#include "cpu/fast/fast_conv.hpp"
#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/config.hpp"
#include "dsinfer/dsinfer.hpp"

#if DSINFER_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using std::int64_t;

using dsinfer::bench::uniform;

void BM_Conv3x3(benchmark::State& state) {
    using namespace dsinfer::detail;
    const int64_t n = state.range(0), c = state.range(1), hw = state.range(2);
    const int64_t impl = state.range(3);
    ThreadBudget budget(static_cast<int>(state.range(4)));
    ConvGemmShape s;
    s.n = n;
    s.c = s.oc = c;
    s.h = s.w = s.oh = s.ow = hw;
    s.kh = s.kw = 3;
    s.ph = s.pw = 1;
    s.block = fast::active_isa() == fast::Isa::avx512 ? 16 : 8;
    const auto x = uniform(n * c * hw * hw, 1, 1.f);
    const auto w = uniform(c * c * 9, 2, 0.05f);
    const auto bias = uniform(c, 3, 0.1f);
    std::vector<float> y(static_cast<std::size_t>(n * c * hw * hw));
    const ActivationSpec relu{Activation::relu};
    if (impl == 0) {
        const WinogradWeights u =
            pack_winograd_weights(std::shared_ptr<const float>(std::shared_ptr<void>(), w.data()), s);
        std::vector<unsigned char> ws(conv_winograd_workspace_bytes(s, max_threads()));
        state.SetLabel("dsinfer winograd F(4x4,3x3)");
        for (auto _ : state)
            conv_winograd_blocked(s, x.data(), u, bias.data(), nullptr, y.data(), relu,
                                  ws.data(), ws.size());
    } else if (impl == 1) {
        const PackedB b = pack_conv_gemm_weights(w.data(), s);
        std::vector<unsigned char> ws(conv_gemm_workspace_bytes(s, max_threads()));
        state.SetLabel("dsinfer im2col + GEMM");
        for (auto _ : state)
            conv_gemm_blocked(s, x.data(), b, bias.data(), nullptr, y.data(), relu, ws.data(),
                              ws.size());
    } else {
#if DSINFER_WITH_ONEDNN
        using tag = dnnl::memory::format_tag;
        using dt = dnnl::memory::data_type;
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const tag blocked = s.block == 16 ? tag::nChw16c : tag::nChw8c;
        const dnnl::memory::desc src_md({n, c, hw, hw}, dt::f32, blocked);
        const dnnl::memory::desc w_any({c, c, 3, 3}, dt::f32, tag::any);
        const dnnl::memory::desc w_user({c, c, 3, 3}, dt::f32, tag::oihw);
        const dnnl::memory::desc b_md({c}, dt::f32, tag::a);
        dnnl::post_ops ops;
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(ops);
        const dnnl::convolution_forward::desc d(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
            w_any, b_md, src_md, {1, 1}, {1, 1}, {1, 1});
        const dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
        dnnl::memory wmem(pd.weights_desc(), eng);
        dnnl::memory wuser(w_user, eng, const_cast<float*>(w.data()));
        dnnl::reorder(wuser, wmem).execute(strm, wuser, wmem);
        dnnl::memory src(src_md, eng, const_cast<float*>(x.data()));
        dnnl::memory dst(src_md, eng, y.data());
        dnnl::memory bm(b_md, eng, const_cast<float*>(bias.data()));
        const dnnl::convolution_forward conv(pd);
        state.SetLabel(std::string("onednn ") + pd.impl_info_str());
        for (auto _ : state) {
            conv.execute(strm, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, wmem},
                                {DNNL_ARG_BIAS, bm},
                                {DNNL_ARG_DST, dst}});
            strm.wait();
        }
#else
        state.SkipWithError("built without oneDNN");
#endif
    }
    benchmark::DoNotOptimize(y.data());
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * 9 * static_cast<double>(n * hw * hw * c * c) *
            static_cast<double>(state.iterations()) * 1e-9,
        benchmark::Counter::kIsRate);
}

template <int64_t Threads>
void shapes(benchmark::internal::Benchmark* b) {
    // ResNet-50's stride-1 3x3 layers: stages 1-4 at batch 8, and stage 3 and 4 at batch 1.
    const int64_t nch[][3] = {{8, 64, 56}, {8, 128, 28}, {8, 256, 14}, {8, 512, 7},
                              {1, 256, 14}, {1, 512, 7}};
    for (const auto& s : nch)
        for (int64_t impl : {0, 1, 2}) b->Args({s[0], s[1], s[2], impl, Threads});
}

BENCHMARK(BM_Conv3x3)
    ->ArgNames({"n", "c", "hw", "impl", "threads"})
    ->Apply(shapes<1>)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Conv3x3)
    ->ArgNames({"n", "c", "hw", "impl", "threads"})
    ->Apply(shapes<2>)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_ConvNchw(benchmark::State& state) {
    using namespace dsinfer::detail;
    const int64_t n = state.range(0), c = state.range(1), oc = state.range(2), hw = state.range(3);
    const int64_t k = state.range(4), stride = state.range(5), impl = state.range(6);
    ThreadBudget budget(static_cast<int>(state.range(7)));
    ConvGemmShape s;
    s.n = n;
    s.c = c;
    s.oc = oc;
    s.h = s.w = hw;
    s.kh = s.kw = k;
    s.sh = s.sw = stride;
    s.ph = s.pw = k / 2;
    s.oh = s.ow = (hw + 2 * (k / 2) - k) / stride + 1;
    s.block = fast_conv_block();
    const auto x = uniform(n * c * hw * hw, 1, 1.f);
    const auto w = uniform(oc * c * k * k, 2, 0.05f);
    const auto bias = uniform(oc, 3, 0.1f);
    std::vector<float> y(static_cast<std::size_t>(n * oc * s.oh * s.ow));
    const ActivationSpec relu{Activation::relu};
    const ConvAlgo pick = choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer);
    const bool winograd = impl == 1 || (impl == 0 && pick == ConvAlgo::winograd_f4x3);
    if (impl <= 2 && winograd) {
        if (!conv_winograd_supported(s)) {
            state.SkipWithError("not a Winograd geometry");
            return;
        }
        const WinogradWeights u =
            pack_winograd_weights(std::shared_ptr<const float>(std::shared_ptr<void>(), w.data()), s);
        std::vector<unsigned char> ws(conv_winograd_nchw_workspace_bytes(s, max_threads()));
        state.SetLabel("winograd nchw");
        for (auto _ : state)
            conv_winograd_nchw(s, x.data(), u, bias.data(), nullptr, y.data(), relu, ws.data(),
                               ws.size());
    } else if (impl <= 2) {
        std::vector<unsigned char> ws(conv_gemm_nchw_workspace_bytes(s, max_threads()));
        state.SetLabel("im2col gemm nchw");
        for (auto _ : state)
            conv_gemm_nchw(s, x.data(), w.data(), bias.data(), nullptr, y.data(), relu, ws.data(),
                           ws.size());
    } else {
        using namespace dsinfer;
        Graph g;
        g.opset_imports = {{"", 17}};
        const ValueId xv = g.add_value("x", DType::f32, SymbolicShape::from(Shape{n, c, hw, hw}));
        g.inputs.push_back(xv);
        auto tensor = [](Shape shape, const std::vector<float>& v) {
            return Tensor::from_vector<float>(shape, v);
        };
        const ValueId wv = g.add_initializer("W", tensor(Shape{oc, c, k, k}, w));
        const ValueId bv = g.add_initializer("B", tensor(Shape{oc}, bias));
        const ValueId yv = g.add_value("y");
        g.outputs.push_back(yv);
        Attribute pads, strides;
        pads.kind = strides.kind = AttrKind::ints;
        pads.ints = {k / 2, k / 2, k / 2, k / 2};
        strides.ints = {stride, stride};
        g.add_node("Conv", {xv, wv, bv}, {yv}, "conv").attributes = {{"pads", pads},
                                                                      {"strides", strides}};
        EngineOptions o;
        o.backends = {"reference"};
        o.num_threads = static_cast<int>(state.range(7));
        const InferenceEngine e = InferenceEngine::compile(g, o);
        const std::vector<NamedTensor> feeds{{"x", tensor(Shape{n, c, hw, hw}, x)}};
        state.SetLabel("reference");
        for (auto _ : state) benchmark::DoNotOptimize(e.run(feeds));
    }
    benchmark::DoNotOptimize(y.data());
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * static_cast<double>(k * k * c * oc * n * s.oh * s.ow) *
            static_cast<double>(state.iterations()) * 1e-9,
        benchmark::Counter::kIsRate);
}

void resnet50_layers(benchmark::internal::Benchmark* b) {
    // {c, oc, hw in, k, stride}: every distinct convolution of ResNet-50 (v1.5: the stride on
    // the 3x3), at batch 8 and 1, on 2 threads and 1 (on a busy machine the 1-thread rows show
    // the work without the waits at the team's barriers).
    const int64_t layers[][5] = {
        {3, 64, 224, 7, 2},    {64, 64, 56, 1, 1},    {64, 64, 56, 3, 1},   {64, 256, 56, 1, 1},
        {256, 64, 56, 1, 1},   {256, 128, 56, 1, 1},  {128, 128, 56, 3, 2}, {128, 512, 28, 1, 1},
        {256, 512, 56, 1, 2},  {512, 128, 28, 1, 1},  {128, 128, 28, 3, 1}, {512, 256, 28, 1, 1},
        {256, 256, 28, 3, 2},  {256, 1024, 14, 1, 1}, {512, 1024, 28, 1, 2}, {1024, 256, 14, 1, 1},
        {256, 256, 14, 3, 1},  {1024, 512, 14, 1, 1}, {512, 512, 14, 3, 2}, {512, 2048, 7, 1, 1},
        {1024, 2048, 14, 1, 2}, {2048, 512, 7, 1, 1}, {512, 512, 7, 3, 1}};
    for (int64_t n : {8, 1})
        for (const auto& l : layers) {
            const bool wino = l[3] == 3 && l[4] == 1;
            for (int64_t threads : {2, 1})
                for (int64_t impl : {1, 2, 3}) {
                    if (impl == 1 && !wino) continue;
                    b->Args({n, l[0], l[1], l[2], l[3], l[4], impl, threads});
                }
        }
}

BENCHMARK(BM_ConvNchw)
    ->ArgNames({"n", "c", "oc", "hw", "k", "s", "impl", "threads"})
    ->Apply(resnet50_layers)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
