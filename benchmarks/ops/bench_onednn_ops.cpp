// The two hot ops oneDNN takes in the benchmark models, through a one-node model with constant
// weights: Conv 3x3 64->64 on [1,64,56,56] (pads 1, bias; ResNet-50's stage-1 conv) and MatMul
// [1024,768] x [768,3072] (BERT-base's FFN up-projection at batch 8, sequence 128).
// Arg "reference" 0 = the default backends {"onednn","cpu"}, 1 = {"reference"}. The label names
// the provider that ran the node (below AVX-512, a constant-B MatMul runs on dsinfer's packed
// GEMM, "cpu"); the GFLOP/s counter counts 2 flops per multiply-add.
// Threads: DSINFER_BENCH_THREADS (default 2). Compare rows of one op on one machine only.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <dsinfer/dsinfer.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

struct Model {
    InferenceEngine engine;
    std::vector<NamedTensor> feeds;
    std::string provider;
};

Tensor uniform(const Shape& s, unsigned seed, float scale) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::minstd_rand gen(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& v : t.span<float>()) v = dist(gen);
    return t;
}

/// x (fed) and the initializers `weights` into one node `op` -> "y".
Model build(const std::string& op, const Tensor& x, const std::vector<Tensor>& weights,
            std::vector<std::pair<std::string, Attribute>> attrs, bool reference) {
    Graph g;
    g.opset_imports = {{"", 17}};
    std::vector<ValueId> ins{g.add_value("x", DType::f32, SymbolicShape::from(x.shape()))};
    g.inputs = {ins[0]};
    std::string name = "w0";
    for (const Tensor& w : weights) {
        ins.push_back(g.add_initializer(name, w));
        ++name[1];
    }
    const ValueId y = g.add_value("y");
    g.outputs = {y};
    g.add_node(op, ins, {y}, op).attributes = std::move(attrs);
    EngineOptions o;
    if (reference)
        o.backends = {"reference"};
    else
        o.backends = {"onednn", "cpu"};
    const char* threads = std::getenv("DSINFER_BENCH_THREADS");
    o.num_threads = threads != nullptr ? std::max(1, std::atoi(threads)) : 2;
    InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    std::string provider = e.node_providers().at(0);
    return {std::move(e), {{"x", x}}, std::move(provider)};
}

void time_model(benchmark::State& state, Model& m, double flops) {
    state.SetLabel(m.provider);
    for (auto _ : state) benchmark::DoNotOptimize(m.engine.run(m.feeds));
    state.counters["GFLOP/s"] = benchmark::Counter(
        flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Conv3x3_64x56x56(benchmark::State& state) {
    constexpr std::int64_t C = 64, HW = 56;
    Attribute pads;
    pads.kind = AttrKind::ints;
    pads.ints = {1, 1, 1, 1};
    Model m = build("Conv", uniform(Shape{1, C, HW, HW}, 1, 1.f),
                    {uniform(Shape{C, C, 3, 3}, 2, 0.05f), uniform(Shape{C}, 3, 0.1f)},
                    {{"pads", pads}}, state.range(0) != 0);
    time_model(state, m, 2.0 * C * C * 9 * HW * HW);
}

void BM_MatMul_1024x768x3072_constB(benchmark::State& state) {
    constexpr std::int64_t M = 1024, K = 768, N = 3072;
    Model m = build("MatMul", uniform(Shape{M, K}, 4, 1.f), {uniform(Shape{K, N}, 5, 0.05f)}, {},
                    state.range(0) != 0);
    time_model(state, m, 2.0 * M * K * N);
}

BENCHMARK(BM_Conv3x3_64x56x56)
    ->ArgName("reference")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatMul_1024x768x3072_constB)
    ->ArgName("reference")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
