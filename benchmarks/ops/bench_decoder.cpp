// The decoder-block fusions (docs/OPTIMIZER.md fuse_gated_mlp, fuse_rms_norm,
// fuse_rotary_embedding) against the unfused forms torch exports, on the default backends at
// optimization level 3 (unfused: the pass disabled).
// BM_GatedMlp {rows M, path}: y [M, 768] -> SiLU(MatMul(y, Wg)) * MatMul(y, Wu), F = 2048;
//   path 0 = fused (one MatMul [768, 4096] + GatedActivation), 1 = unfused (two MatMuls,
//   Sigmoid, Mul, Mul), 2 = the merged MatMul alone, 3 = the two MatMuls alone, 4 = the
//   GatedActivation alone, 5 = Sigmoid, Mul, Mul alone (where the difference comes from).
// BM_RmsNorm {rows, fused}: x [rows, 768], Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Mul.
// BM_Rotary {sequence, fused}: x [1, 12, S, 64], cos/sin [1, 1, S, 64], the half rotation.
// BM_Llama100m {sequence, past, fused}: one step of tools/make_models.py's llama_100m
// ($DSINFER_MODELS_DIR/llama_100m.onnx), batch 1: a decode step (1 token after 127) and a
// prefill of 64, with the three passes or without them.
// Threads: DSINFER_BENCH_THREADS (default 2). Compare rows of one shape on one machine.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <dsinfer/dsinfer.hpp>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

constexpr std::int64_t kHidden = 768, kFfn = 2048;

int bench_threads() {
    const char* t = std::getenv("DSINFER_BENCH_THREADS");
    return t != nullptr ? std::max(1, std::atoi(t)) : 2;
}

Tensor uniform(const Shape& s, std::uint32_t seed, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-scale, scale);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

/// Graph building: one output value per node.
struct Ops {
    Graph g;
    int counter = 0;
    ValueId input(const char* name, const Shape& s) {
        const ValueId v = g.add_value(name, DType::f32, SymbolicShape::from(s));
        g.inputs.push_back(v);
        return v;
    }
    ValueId constant(Tensor t) {
        std::string name = std::to_string(++counter);
        name.append("_k");
        return g.add_initializer(std::move(name), std::move(t));
    }
    ValueId operator()(const std::string& type, std::vector<ValueId> in,
                       std::vector<std::pair<std::string, Attribute>> attrs = {}) {
        const ValueId out = g.add_value(type + std::to_string(++counter));
        g.add_node(type, std::move(in), {out}, type + std::to_string(counter)).attributes =
            std::move(attrs);
        return out;
    }
};

Tensor i64s(std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_vector(Shape{n}, v);
}

Attribute ints(std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(v);
    return a;
}

void run_engine(benchmark::State& state, const Graph& g, const std::vector<NamedTensor>& feeds,
                std::vector<std::string> disabled) {
    EngineOptions opt;
    opt.num_threads = bench_threads();
    opt.disabled_passes = std::move(disabled);
    auto engine = InferenceEngine::compile(g, opt);
    for (auto _ : state) benchmark::DoNotOptimize(engine.run(feeds));
}

void BM_GatedMlp(benchmark::State& state) {
    const std::int64_t m = state.range(0);
    const int path = static_cast<int>(state.range(1));
    static const char* labels[] = {"fused",           "unfused",
                                   "merged MatMul alone", "two MatMuls alone",
                                   "GatedActivation alone", "Sigmoid, Mul, Mul alone"};
    state.SetLabel(labels[path]);
    Ops op;
    op.g.opset_imports = {{"", 17}, {"com.dsinfer", 1}};
    if (path >= 4) {  // the activation part on the projections' outputs
        std::vector<NamedTensor> feeds;
        if (path == 4) {
            const ValueId x = op.input("x", Shape{m, 2 * kFfn});
            op.g.outputs = {op("GatedActivation", {x})};
            Attribute a;
            a.kind = AttrKind::s;
            a.s = "silu";
            op.g.nodes.back().domain = "com.dsinfer";
            op.g.nodes.back().attributes = {{"activation", a}};
            feeds = {{"x", uniform(Shape{m, 2 * kFfn}, 4)}};
        } else {
            const ValueId g = op.input("g", Shape{m, kFfn}), u = op.input("u", Shape{m, kFfn});
            op.g.outputs = {op("Mul", {op("Mul", {g, op("Sigmoid", {g})}), u})};
            feeds = {{"g", uniform(Shape{m, kFfn}, 4)}, {"u", uniform(Shape{m, kFfn}, 5)}};
        }
        run_engine(state, op.g, feeds, {});
        return;
    }
    const ValueId y = op.input("y", Shape{m, kHidden});
    const Tensor wg = uniform(Shape{kHidden, kFfn}, 1, 0.05f), wu = uniform(Shape{kHidden, kFfn}, 2, 0.05f);
    if (path == 2) {
        op.g.outputs = {op("MatMul", {y, op.constant(uniform(Shape{kHidden, 2 * kFfn}, 3, 0.05f))})};
    } else {
        const ValueId g = op("MatMul", {y, op.constant(wg)});
        const ValueId u = op("MatMul", {y, op.constant(wu)});
        op.g.outputs = path == 3 ? std::vector<ValueId>{g, u}
                                 : std::vector<ValueId>{op("Mul", {op("Mul", {g, op("Sigmoid", {g})}), u})};
    }
    run_engine(state, op.g, {{"y", uniform(Shape{m, kHidden}, 4)}},
               path == 1 ? std::vector<std::string>{"fuse_gated_mlp"} : std::vector<std::string>{});
}

void BM_RmsNorm(benchmark::State& state) {
    const std::int64_t rows = state.range(0);
    const bool fused = state.range(1) != 0;
    state.SetLabel(fused ? "fused" : "unfused");
    Ops op;
    op.g.opset_imports = {{"", 17}};
    const ValueId x = op.input("x", Shape{rows, kHidden});
    const ValueId mean = op("ReduceMean", {op("Pow", {x, op.constant(Tensor::scalar(2.f))})},
                            {{"axes", ints({-1})}});
    const ValueId inv = op("Reciprocal", {op("Sqrt", {op("Add", {mean, op.constant(Tensor::scalar(1e-6f))})})});
    op.g.outputs = {op("Mul", {op.constant(uniform(Shape{kHidden}, 5)), op("Mul", {x, inv})})};
    run_engine(state, op.g, {{"x", uniform(Shape{rows, kHidden}, 6)}},
               fused ? std::vector<std::string>{} : std::vector<std::string>{"fuse_rms_norm"});
}

void BM_Rotary(benchmark::State& state) {
    const std::int64_t seq = state.range(0);
    const bool fused = state.range(1) != 0;
    state.SetLabel(fused ? "fused" : "unfused");
    Ops op;
    op.g.opset_imports = {{"", 17}};
    const Shape xs{1, 12, seq, 64}, cs{1, 1, seq, 64};
    const ValueId x = op.input("x", xs), cos = op.input("cos", cs), sin = op.input("sin", cs);
    auto slice = [&](std::int64_t b, std::int64_t e) {
        return op("Slice", {x, op.constant(i64s({b})), op.constant(i64s({e})), op.constant(i64s({-1}))});
    };
    Attribute axis;
    axis.kind = AttrKind::i;
    axis.i = -1;
    const ValueId rot = op("Concat", {op("Neg", {slice(32, std::numeric_limits<std::int64_t>::max())}), slice(0, 32)},
                           {{"axis", axis}});
    op.g.outputs = {op("Add", {op("Mul", {x, cos}), op("Mul", {rot, sin})})};
    run_engine(state, op.g,
               {{"x", uniform(xs, 7)}, {"cos", uniform(cs, 8)}, {"sin", uniform(cs, 9)}},
               fused ? std::vector<std::string>{} : std::vector<std::string>{"fuse_rotary_embedding"});
}

/// A step of llama_100m from tools/make_models.py ($DSINFER_MODELS_DIR/llama_100m.onnx, skipped
/// when missing): `seq` new tokens after `past` cached ones, batch 1.
void BM_Llama100m(benchmark::State& state) {
    const std::int64_t seq = state.range(0), past = state.range(1);
    const bool fused = state.range(2) != 0;
    state.SetLabel(fused ? "fused" : "unfused");
    const char* dir = std::getenv("DSINFER_MODELS_DIR");
    const std::string path = std::string(dir != nullptr ? dir : "models") + "/llama_100m.onnx";
    if (!std::filesystem::exists(path)) {
        state.SkipWithError("llama_100m.onnx not found (DSINFER_MODELS_DIR)");
        return;
    }
    constexpr std::int64_t kLayers = 12, kKv = 4, kHead = 64;
    std::vector<NamedTensor> feeds;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(seq)), pos(ids.size());
    for (std::int64_t i = 0; i < seq; ++i) {
        ids[static_cast<std::size_t>(i)] = 100 + 7 * i;
        pos[static_cast<std::size_t>(i)] = past + i;
    }
    feeds.push_back({"input_ids", Tensor::from_vector(Shape{1, seq}, ids)});
    feeds.push_back({"position_ids", Tensor::from_vector(Shape{1, seq}, pos)});
    feeds.push_back({"attention_mask",
                     Tensor::from_vector(Shape{1, past + seq},
                                         std::vector<std::int64_t>(static_cast<std::size_t>(past + seq), 1))});
    for (std::int64_t l = 0; l < kLayers; ++l)
        for (const char* kind : {"key", "value"})
            feeds.push_back({"past_key_values." + std::to_string(l) + "." + kind,
                             uniform(Shape{1, kKv, past, kHead}, static_cast<std::uint32_t>(l))});
    run_engine(state, load_onnx(path), feeds,
               fused ? std::vector<std::string>{}
                     : std::vector<std::string>{"fuse_rms_norm", "fuse_rotary_embedding",
                                                "fuse_gated_mlp"});
}

}  // namespace

BENCHMARK(BM_Llama100m)
    ->ArgsProduct({{1}, {127}, {1, 0}})
    ->Args({64, 0, 1})
    ->Args({64, 0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GatedMlp)
    ->ArgsProduct({{1, 64}, {0, 1, 2, 3, 4, 5}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_RmsNorm)->ArgsProduct({{1, 64, 512}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Rotary)->ArgsProduct({{1, 128, 512}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
