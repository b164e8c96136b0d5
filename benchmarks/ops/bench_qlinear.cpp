// Quantized embeddings and the com.microsoft QLinear ops, through small models on the engine.
//   BM_Embedding/<form>: a BERT-base word-embedding table of 30522 x 768 gathered with [8, 128]
//     int64 ids, on the default backends: form 0 = the float32 table (Gather), 1 = a uint8 table,
//     Gather -> DequantizeLinear per tensor, 2 = the same with one scale and zero point per
//     embedding column (axis -1), 3 = the uint8 Gather alone (what the dequantization adds to).
//   BM_QLinearAdd/<backend>, BM_QLinearGlobalAveragePool/<backend>, BM_QLinearSigmoid/<backend>:
//     ResNet-50's residual add [8, 256, 56, 56] u8, its final pool [8, 2048, 7, 7] u8, and a
//     sigmoid over [8, 256, 56, 56] u8; backend 0 = "cpu" (fast kernels), 1 = "reference".
//   BM_DynamicQuantizeLinear/<backend>/<width>: BERT-base's activations [8, 128, width] f32
//     (width 768: a layer's input; 3072: the FFN's inner activation) to u8 with their scale and
//     zero point, as DynamicQuantizeMatMul quantizes its A.
//   BM_MaxPoolU8/<backend>: ResNet-50's stem MaxPool (3x3, stride 2, pads 1) on [8, 64, 112, 112]
//     u8, as QDQ ResNets run it after the fusion pass.
// Times include the executor's per-run work (output allocation). Threads: DSINFER_BENCH_THREADS
// (default 2). Compare rows of one sitting on one machine; never absolute times across machines.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <dsinfer/dsinfer.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

constexpr std::int64_t kVocab = 30522, kHidden = 768, kBatch = 8, kSeq = 128;

int bench_threads() {
    const char* t = std::getenv("DSINFER_BENCH_THREADS");
    return t != nullptr ? std::max(1, std::atoi(t)) : 2;
}

Tensor random_u8(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::u8, s);
    std::mt19937 rng(seed);
    for (auto& v : t.span<std::uint8_t>()) v = static_cast<std::uint8_t>(rng());
    return t;
}

Tensor random_f32(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-0.1f, 0.1f);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

Tensor random_ids(std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::i64, Shape{kBatch, kSeq});
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> d(0, kVocab - 1);
    for (auto& v : t.span<std::int64_t>()) v = d(rng);
    return t;
}

void run_loop(benchmark::State& state, const InferenceEngine& e,
              const std::vector<NamedTensor>& feeds, std::int64_t bytes_out) {
    for (auto _ : state) {
        auto out = e.run(feeds);
        benchmark::DoNotOptimize(out);
    }
    state.SetBytesProcessed(state.iterations() * bytes_out);
}

void BM_Embedding(benchmark::State& state) {
    const int form = static_cast<int>(state.range(0));
    Graph g;
    g.opset_imports = {{"", 21}};
    const ValueId ids = g.add_value("ids", DType::i64, SymbolicShape::from(Shape{kBatch, kSeq}));
    g.inputs.push_back(ids);
    const Shape table{kVocab, kHidden};
    const ValueId w = g.add_initializer(
        "table", form == 0 ? random_f32(table, 1) : random_u8(table, 1));
    const ValueId gathered = g.add_value("gathered");
    g.add_node("Gather", {w, ids}, {gathered}, "gather");
    ValueId y = gathered;
    if (form == 1 || form == 2) {
        y = g.add_value("y");
        const Shape ps = form == 1 ? Shape{} : Shape{kHidden};
        Tensor s = Tensor::empty(DType::f32, ps);
        for (auto& v : s.span<float>()) v = 0.0123f;
        const ValueId scale = g.add_initializer("scale", s);
        const ValueId zp = g.add_initializer("zp", random_u8(ps, 2));
        Node& n = g.add_node("DequantizeLinear", {gathered, scale, zp}, {y}, "dequantize");
        if (form == 2) {
            Attribute a;
            a.kind = AttrKind::i;
            a.i = -1;
            n.attributes = {{"axis", a}};
        }
    }
    g.outputs = {y};
    EngineOptions o;
    o.num_threads = bench_threads();
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    const std::vector<NamedTensor> feeds{{"ids", random_ids(3)}};
    run_loop(state, e, feeds, kBatch * kSeq * kHidden * (form == 3 ? 1 : 4));
}
BENCHMARK(BM_Embedding)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Unit(benchmark::kMicrosecond)->UseRealTime();

/// One com.microsoft node over a fed u8 tensor `x` (input 0; also input 3 for a binary op) and
/// constant scalar scales / zero points.
void run_ms(benchmark::State& state, const std::string& op, const Shape& xs, bool binary) {
    const bool reference = state.range(0) != 0;
    Graph g;
    g.opset_imports = {{"", 17}, {"com.microsoft", 1}};
    const ValueId x = g.add_value("x", DType::u8, SymbolicShape::from(xs));
    g.inputs.push_back(x);
    std::uint8_t z = 120;
    float s = 0.02f;
    auto param = [&](const char* name, bool scale) {
        s += 0.005f;
        z = static_cast<std::uint8_t>(z + 3);
        return g.add_initializer(name, scale ? Tensor::scalar<float>(s) : Tensor::scalar<std::uint8_t>(z));
    };
    std::vector<ValueId> ins{x, param("xs", true), param("xz", false)};
    std::vector<NamedTensor> feeds{{"x", random_u8(xs, 4)}};
    if (binary) {
        const ValueId b = g.add_value("b", DType::u8, SymbolicShape::from(xs));
        g.inputs.push_back(b);
        feeds.push_back({"b", random_u8(xs, 5)});
        ins.push_back(b);
        ins.push_back(param("bs", true));
        ins.push_back(param("bz", false));
    }
    ins.push_back(param("ys", true));
    ins.push_back(param("yz", false));
    const ValueId y = g.add_value("y");
    g.add_node(op, ins, {y}, "node").domain = "com.microsoft";
    g.outputs = {y};
    EngineOptions o;
    o.backends = {reference ? "reference" : "cpu"};
    o.num_threads = bench_threads();
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    run_loop(state, e, feeds, xs.num_elements() * (binary ? 2 : 1));
}

void BM_QLinearAdd(benchmark::State& state) {
    run_ms(state, "QLinearAdd", Shape{8, 256, 56, 56}, true);
}
void BM_QLinearGlobalAveragePool(benchmark::State& state) {
    run_ms(state, "QLinearGlobalAveragePool", Shape{8, 2048, 7, 7}, false);
}
void BM_QLinearSigmoid(benchmark::State& state) {
    run_ms(state, "QLinearSigmoid", Shape{8, 256, 56, 56}, false);
}
BENCHMARK(BM_QLinearAdd)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_QLinearGlobalAveragePool)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_QLinearSigmoid)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_DynamicQuantizeLinear(benchmark::State& state) {
    const bool reference = state.range(0) != 0;
    const Shape xs{kBatch, kSeq, state.range(1)};
    Graph g;
    g.opset_imports = {{"", 17}};
    const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(xs));
    g.inputs.push_back(x);
    const ValueId y = g.add_value("y"), s = g.add_value("s"), z = g.add_value("z");
    g.add_node("DynamicQuantizeLinear", {x}, {y, s, z}, "dql");
    g.outputs = {y, s, z};
    EngineOptions o;
    o.backends = {reference ? "reference" : "cpu"};
    o.num_threads = bench_threads();
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    run_loop(state, e, {{"x", random_f32(xs, 7)}}, xs.num_elements());
}
BENCHMARK(BM_DynamicQuantizeLinear)
    ->ArgsProduct({{0, 1}, {768, 3072}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_MaxPoolU8(benchmark::State& state) {
    const bool reference = state.range(0) != 0;
    const Shape xs{8, 64, 112, 112};
    Graph g;
    g.opset_imports = {{"", 17}};
    const ValueId x = g.add_value("x", DType::u8, SymbolicShape::from(xs));
    g.inputs.push_back(x);
    const ValueId y = g.add_value("y");
    auto ints = [](std::vector<std::int64_t> v) {
        Attribute a;
        a.kind = AttrKind::ints;
        a.ints = std::move(v);
        return a;
    };
    g.add_node("MaxPool", {x}, {y}, "pool").attributes = {
        {"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}};
    g.outputs = {y};
    EngineOptions o;
    o.backends = {reference ? "reference" : "cpu"};
    o.num_threads = bench_threads();
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    run_loop(state, e, {{"x", random_u8(xs, 6)}}, xs.num_elements());
}
BENCHMARK(BM_MaxPoolU8)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
