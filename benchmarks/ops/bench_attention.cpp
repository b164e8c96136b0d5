// Multi-head self-attention at BERT-base shapes (12 heads of 64, additive mask [B, 1, 1, S]):
// the fused com.dsinfer MultiHeadAttention kernel against the unfused block the exporters write
// (head-split Reshape + Transpose of Q/K/V, MatMul QKᵀ, Div by sqrt(64), Add mask, Softmax,
// MatMul with V, Transpose + Reshape merge), from the Q/K/V projection outputs to the merged
// context. Arguments: {batch, sequence, path}; path 0 = fused on "cpu" (fast kernel),
// 1 = fused on "reference", 2 = unfused on the default backends (optimization level 0).
// BM_BertBase: BERT-base from tools/make_models.py ($DSINFER_MODELS_DIR/bert_base.onnx, skipped
// when missing), sequence 128, token ids uniform in [100, 30100), attention mask all ones,
// optimized at level 3 with fuse_attention (fused = 1) or without it (fused = 0).
// Threads: DSINFER_BENCH_THREADS (default 2). Compare rows of one shape on one machine.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <dsinfer/dsinfer.hpp>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

constexpr std::int64_t kHeads = 12, kHead = 64, kHidden = kHeads * kHead;

int bench_threads() {
    const char* t = std::getenv("DSINFER_BENCH_THREADS");
    return t != nullptr ? std::max(1, std::atoi(t)) : 2;
}

Tensor random_f32(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

Attribute ints(std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(v);
    return a;
}
Attribute integer(std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    return a;
}

/// Inputs Q, K, V [B, S, 768] and Mask [B, 1, 1, S] -> Y [B, S, 768], fused or not.
Graph attention_graph(bool fused, std::int64_t batch, std::int64_t seq) {
    Graph g;
    g.opset_imports = {{"", 13}, {"com.dsinfer", 1}};
    const SymbolicShape x = SymbolicShape::from(Shape{batch, seq, kHidden});
    const ValueId q = g.add_value("Q", DType::f32, x), k = g.add_value("K", DType::f32, x),
                  v = g.add_value("V", DType::f32, x);
    const ValueId mask =
        g.add_value("Mask", DType::f32, SymbolicShape::from(Shape{batch, 1, 1, seq}));
    g.inputs = {q, k, v, mask};
    const ValueId y = g.add_value("Y");
    g.outputs = {y};
    if (fused) {
        Node& n = g.add_node("MultiHeadAttention", {q, k, v, mask}, {y}, "mha");
        n.domain = "com.dsinfer";
        n.attributes = {{"num_heads", integer(kHeads)}};
        return g;
    }
    int counter = 0;
    auto op = [&](const std::string& type, std::vector<ValueId> in,
                  std::vector<std::pair<std::string, Attribute>> attrs = {},
                  ValueId out = kNoValue) {
        if (out == kNoValue) out = g.add_value(type + std::to_string(++counter));
        g.add_node(type, std::move(in), {out}, type + std::to_string(counter)).attributes =
            std::move(attrs);
        return out;
    };
    const ValueId split = g.add_initializer(
        "split", Tensor::from_vector(Shape{4}, std::vector<std::int64_t>{0, 0, kHeads, kHead}));
    const ValueId merge = g.add_initializer(
        "merge", Tensor::from_vector(Shape{3}, std::vector<std::int64_t>{0, 0, kHidden}));
    const ValueId scale = g.add_initializer("scale", Tensor::scalar(std::sqrt(float(kHead))));
    const ValueId qh = op("Transpose", {op("Reshape", {q, split})}, {{"perm", ints({0, 2, 1, 3})}});
    const ValueId kt = op("Transpose", {op("Reshape", {k, split})}, {{"perm", ints({0, 2, 3, 1})}});
    const ValueId vh = op("Transpose", {op("Reshape", {v, split})}, {{"perm", ints({0, 2, 1, 3})}});
    const ValueId s = op("Add", {op("Div", {op("MatMul", {qh, kt}), scale}), mask});
    const ValueId p = op("Softmax", {s}, {{"axis", integer(-1)}});
    const ValueId c = op("Transpose", {op("MatMul", {p, vh})}, {{"perm", ints({0, 2, 1, 3})}});
    op("Reshape", {c, merge}, {}, y);
    return g;
}

void BM_Attention(benchmark::State& state) {
    const std::int64_t batch = state.range(0), seq = state.range(1);
    const int path = static_cast<int>(state.range(2));
    state.SetLabel(path == 0 ? "fused cpu" : path == 1 ? "fused reference" : "unfused");
    EngineOptions opt;
    if (path == 0) opt.backends = {"cpu"};
    if (path == 1) opt.backends = {"reference"};
    opt.num_threads = bench_threads();
    opt.optimization_level = 0;
    auto engine = InferenceEngine::compile(attention_graph(path != 2, batch, seq), opt);
    Tensor mask = Tensor::zeros(DType::f32, {batch, 1, 1, seq});
    for (std::int64_t b = 0; b < batch; ++b)  // the last quarter of every sequence is padding
        for (std::int64_t j = seq - seq / 4; j < seq; ++j) mask.data<float>()[b * seq + j] = -10000.f;
    const std::vector<NamedTensor> feeds = {{"Q", random_f32({batch, seq, kHidden}, 1)},
                                            {"K", random_f32({batch, seq, kHidden}, 2)},
                                            {"V", random_f32({batch, seq, kHidden}, 3)},
                                            {"Mask", mask}};
    for (auto _ : state) benchmark::DoNotOptimize(engine.run(feeds));
    // QKᵀ and P·V: 4·B·H·S²·Dh flops.
    state.counters["GFLOP/s"] = benchmark::Counter(
        4.0 * double(batch) * kHeads * double(seq) * double(seq) * kHead * double(state.iterations()),
        benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_BertBase(benchmark::State& state) {
    const std::int64_t batch = state.range(0), seq = 128;
    const bool fused = state.range(1) != 0;
    state.SetLabel(fused ? "fuse_attention" : "without fuse_attention");
    const char* dir = std::getenv("DSINFER_MODELS_DIR");
    const std::filesystem::path model =
        std::filesystem::path(dir != nullptr ? dir : "") / "bert_base.onnx";
    if (dir == nullptr || !std::filesystem::exists(model)) {
        state.SkipWithError("set DSINFER_MODELS_DIR to a folder with bert_base.onnx");
        return;
    }
    Graph g = load_onnx(model);
    OptimizeOptions oo;
    if (!fused) oo.disabled_passes = {"fuse_attention"};
    const OptimizeReport report = optimize(g, oo);
    state.counters["fused_blocks"] = report.count("fuse_attention");
    EngineOptions opt;
    opt.num_threads = bench_threads();
    opt.optimization_level = 0;
    auto engine = InferenceEngine::compile(std::move(g), opt);
    Tensor ids = Tensor::empty(DType::i64, {batch, seq});
    std::mt19937 rng(12345);
    std::uniform_int_distribution<std::int64_t> tok(100, 30099);
    for (auto& v : ids.span<std::int64_t>()) v = tok(rng);
    Tensor mask = Tensor::empty(DType::i64, {batch, seq});
    for (auto& v : mask.span<std::int64_t>()) v = 1;
    const std::vector<NamedTensor> feeds = {{"input_ids", ids}, {"attention_mask", mask}};
    engine.run(feeds);  // first run: weights packed, caches warm
    for (auto _ : state) benchmark::DoNotOptimize(engine.run(feeds));
    state.counters["samples/s"] =
        benchmark::Counter(double(batch) * double(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_BertBase)
    ->ArgNames({"batch", "fused"})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({8, 0})
    ->Args({8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_Attention)
    ->ArgNames({"batch", "seq", "path"})
    ->Args({8, 128, 0})
    ->Args({8, 128, 2})
    ->Args({1, 128, 0})
    ->Args({1, 128, 2})
    ->Args({1, 512, 0})
    ->Args({1, 512, 2})
    ->Args({1, 2048, 0})
    ->Args({1, 2048, 2})
    ->Args({1, 128, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
