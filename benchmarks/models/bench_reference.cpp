// Reference-executor baselines (Step 1): the per-run overhead of the executor on a tiny graph
// and a small MLP through the reference kernels. Step 2's oneDNN backend is measured against
// these and against ONNX Runtime (ds-benchmark); never read absolute times across machines.
#include <benchmark/benchmark.h>

#include <dsinfer/dsinfer.hpp>
#include <random>

namespace {

using namespace dsinfer;

Tensor random_tensor(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

/// x[batch, width] -> (MatMul W_i, Add b_i, Relu) x layers -> y
InferenceEngine mlp(int width, int layers) {
    Graph g;
    g.opset_imports = {{"", 13}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(width)};
    ValueId cur = g.add_value("x", DType::f32, xs);
    g.inputs = {cur};
    for (int l = 0; l < layers; ++l) {
        const std::string p = "l" + std::to_string(l);
        ValueId w = g.add_initializer(p + "_w", random_tensor({width, width}, 1u + static_cast<unsigned>(l)));
        ValueId b = g.add_initializer(p + "_b", random_tensor({width}, 100u + static_cast<unsigned>(l)));
        ValueId mm = g.add_value(p + "_mm");
        ValueId add = g.add_value(p + "_add");
        ValueId out = g.add_value(l + 1 == layers ? "y" : p + "_relu");
        g.add_node("MatMul", {cur, w}, {mm});
        g.add_node("Add", {mm, b}, {add});
        g.add_node("Relu", {add}, {out});
        cur = out;
    }
    g.outputs = {cur};
    return InferenceEngine::compile(std::move(g));
}

void BM_ExecutorOverhead(benchmark::State& state) {
    // 24 tiny nodes, 8 after fusion (FusedMatMul + bias + Relu): measures per-node executor
    // cost. nodes_per_s counts the nodes the engine runs.
    auto engine = mlp(4, 8);
    const auto nodes = static_cast<double>(engine.graph().nodes.size());
    Tensor x = random_tensor({1, 4}, 7);
    const std::vector<NamedTensor> inputs{{"x", x}};
    for (auto _ : state) benchmark::DoNotOptimize(engine.run(inputs));
    state.counters["nodes"] = nodes;
    state.counters["nodes_per_s"] = benchmark::Counter(
        static_cast<double>(state.iterations()) * nodes, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ExecutorOverhead);

void BM_ReferenceMlp(benchmark::State& state) {
    const int width = static_cast<int>(state.range(0));
    const std::int64_t batch = state.range(1);
    auto engine = mlp(width, 3);
    Tensor x = random_tensor({batch, width}, 9);
    for (auto _ : state) benchmark::DoNotOptimize(engine.run({{"x", x}}));
    const double flops = 2.0 * static_cast<double>(batch) * width * width * 3;
    state.counters["GFLOP/s"] = benchmark::Counter(
        flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
    state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_ReferenceMlp)->Args({256, 1})->Args({256, 64})->Args({1024, 64});

}  // namespace

BENCHMARK_MAIN();
