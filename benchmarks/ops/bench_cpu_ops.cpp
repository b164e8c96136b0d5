// The hot non-GEMM ops of BERT-base (and exporter-produced graphs) at BERT-base shapes, batch 8,
// sequence 128, through a one-node model on the "cpu" backend (dsinfer's fast kernels,
// src/cpu/fast) and on "reference" (the plain reference kernels): arg 0 = cpu, 1 = reference.
// Times include the executor's per-run work (output allocation), the same for both.
// Threads: DSINFER_BENCH_THREADS (default 2). Compare the two rows of one op on one machine;
// never read absolute times across machines.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <dsinfer/dsinfer.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

int bench_threads() {
    const char* t = std::getenv("DSINFER_BENCH_THREADS");
    return t != nullptr ? std::max(1, std::atoi(t)) : 2;
}

Tensor random_f32(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-3.0f, 3.0f);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

Tensor random_ids(const Shape& s, std::int64_t vocab, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::i64, s);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
    for (auto& v : t.span<std::int64_t>()) v = d(rng);
    return t;
}

struct Operand {
    std::string name;
    Tensor value;
    bool constant = false;  // an initializer (weights, epsilons, exponents, embedding tables)
};

/// One node `op` over `ins` -> "y", compiled for backends {"cpu"} (arg 0) or {"reference"}.
struct OneNode {
    InferenceEngine engine;
    std::vector<NamedTensor> feeds;
};

OneNode one_node(const std::string& op, const std::vector<Operand>& ins,
                 const std::vector<std::pair<std::string, Attribute>>& attrs, bool reference,
                 std::int64_t opset = 13) {
    Graph g;
    g.opset_imports = {{"", opset}};
    std::vector<ValueId> in_ids;
    std::vector<NamedTensor> feeds;
    for (const auto& o : ins) {
        if (o.constant) {
            in_ids.push_back(g.add_initializer(o.name, o.value));
        } else {
            in_ids.push_back(g.add_value(o.name, o.value.dtype(), SymbolicShape::from(o.value.shape())));
            g.inputs.push_back(in_ids.back());
            feeds.push_back({o.name, o.value});
        }
    }
    const ValueId y = g.add_value("y");
    g.outputs = {y};
    g.add_node(op, in_ids, {y}, "node").attributes = attrs;
    EngineOptions opt;
    opt.backends = {reference ? "reference" : "cpu"};
    opt.num_threads = bench_threads();
    return {InferenceEngine::compile(std::move(g), opt), std::move(feeds)};
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

void run(benchmark::State& state, const std::string& op, const std::vector<Operand>& ins,
         const std::vector<std::pair<std::string, Attribute>>& attrs = {},
         std::int64_t opset = 13) {
    const bool reference = state.range(0) != 0;
    state.SetLabel(reference ? "reference" : "cpu");
    OneNode n = one_node(op, ins, attrs, reference, opset);
    std::int64_t bytes = 0;
    for (const auto& o : ins) bytes += static_cast<std::int64_t>(o.value.num_bytes());
    for (auto _ : state) benchmark::DoNotOptimize(n.engine.run(n.feeds));
    state.SetBytesProcessed(state.iterations() * bytes);
}

constexpr std::int64_t B = 8, S = 128, H = 768, F = 3072, NH = 12, D = 64;

void BM_AddBias(benchmark::State& s) {  // [B,S,H] + [H]
    run(s, "Add", {{"a", random_f32({B, S, H}, 1)}, {"b", random_f32({H}, 2), true}});
}
void BM_AddResidual(benchmark::State& s) {  // [B,S,H] + [B,S,H]
    run(s, "Add", {{"a", random_f32({B, S, H}, 1)}, {"b", random_f32({B, S, H}, 2)}});
}
void BM_SubMean(benchmark::State& s) {  // LayerNorm: [B,S,H] - [B,S,1]
    run(s, "Sub", {{"a", random_f32({B, S, H}, 1)}, {"b", random_f32({B, S, 1}, 2)}});
}
void BM_DivStd(benchmark::State& s) {  // LayerNorm: [B,S,H] / [B,S,1]
    run(s, "Div", {{"a", random_f32({B, S, H}, 1)}, {"b", random_f32({B, S, 1}, 2)}});
}
void BM_PowSquare(benchmark::State& s) {  // LayerNorm: [B,S,H] ^ 2
    run(s, "Pow", {{"a", random_f32({B, S, H}, 1)}, {"e", Tensor::scalar(2.0f), true}});
}
void BM_ReduceMeanLastAxis(benchmark::State& s) {  // LayerNorm: mean over H, keepdims
    run(s, "ReduceMean", {{"x", random_f32({B, S, H}, 1)}}, {{"axes", ints({-1})}});
}
void BM_Sqrt(benchmark::State& s) {
    run(s, "Sqrt", {{"x", random_f32({B, S, 1}, 1)}});
}
void BM_ErfGelu(benchmark::State& s) {  // GELU: erf over [B,S,4H]
    run(s, "Erf", {{"x", random_f32({B, S, F}, 1)}});
}
void BM_Gelu(benchmark::State& s) {  // GELU as one op (opset 20) over [B,S,4H]
    run(s, "Gelu", {{"x", random_f32({B, S, F}, 1)}}, {}, 20);
}
void BM_MulGelu(benchmark::State& s) {  // GELU: [B,S,4H] * [B,S,4H]
    run(s, "Mul", {{"a", random_f32({B, S, F}, 1)}, {"b", random_f32({B, S, F}, 2)}});
}
void BM_TransposeHeads(benchmark::State& s) {  // [B,S,NH,D] -> [B,NH,S,D]
    run(s, "Transpose", {{"x", random_f32({B, S, NH, D}, 1)}}, {{"perm", ints({0, 2, 1, 3})}});
}
void BM_TransposeKeys(benchmark::State& s) {  // [B,S,NH,D] -> [B,NH,D,S]
    run(s, "Transpose", {{"x", random_f32({B, S, NH, D}, 1)}}, {{"perm", ints({0, 2, 3, 1})}});
}
void BM_GatherEmbedding(benchmark::State& s) {  // word embeddings [30522,H][ids B,S]
    run(s, "Gather", {{"table", random_f32({30522, H}, 1), true}, {"ids", random_ids({B, S}, 30522, 2)}});
}
void BM_WhereMask(benchmark::State& s) {  // attention scores [B,NH,S,S] masked by [B,1,1,S]
    Tensor mask = Tensor::empty(DType::boolean, Shape{B, 1, 1, S});
    for (std::int64_t i = 0; i < mask.num_elements(); ++i) mask.data<bool>()[i] = (i % 7) != 0;
    run(s, "Where", {{"c", mask}, {"x", random_f32({B, NH, S, S}, 1)}, {"y", Tensor::scalar(-1e4f), true}});
}
void BM_AddMask(benchmark::State& s) {  // attention scores [B,NH,S,S] + [B,1,1,S]
    run(s, "Add", {{"a", random_f32({B, NH, S, S}, 1)}, {"b", random_f32({B, 1, 1, S}, 2)}});
}
void BM_ReshapeCopy(benchmark::State& s) {  // [B,S,H] -> [B,S,NH,D]
    Tensor shape = Tensor::from_vector(Shape{4}, std::vector<std::int64_t>{B, S, NH, D});
    run(s, "Reshape", {{"x", random_f32({B, S, H}, 1)}, {"s", shape, true}});
}
void BM_CastToHalf(benchmark::State& s) {
    run(s, "Cast", {{"x", random_f32({B, S, H}, 1)}}, {{"to", integer(10)}});
}
void BM_ConcatLastAxis(benchmark::State& s) {
    run(s, "Concat", {{"a", random_f32({B, S, H}, 1)}, {"b", random_f32({B, S, H}, 2)}},
        {{"axis", integer(-1)}});
}

#define DSINFER_OP_BENCH(fn) \
    BENCHMARK(fn)->ArgName("reference")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond)
DSINFER_OP_BENCH(BM_AddBias);
DSINFER_OP_BENCH(BM_AddResidual);
DSINFER_OP_BENCH(BM_SubMean);
DSINFER_OP_BENCH(BM_DivStd);
DSINFER_OP_BENCH(BM_PowSquare);
DSINFER_OP_BENCH(BM_ReduceMeanLastAxis);
DSINFER_OP_BENCH(BM_Sqrt);
DSINFER_OP_BENCH(BM_ErfGelu);
DSINFER_OP_BENCH(BM_Gelu);
DSINFER_OP_BENCH(BM_MulGelu);
DSINFER_OP_BENCH(BM_TransposeHeads);
DSINFER_OP_BENCH(BM_TransposeKeys);
DSINFER_OP_BENCH(BM_GatherEmbedding);
DSINFER_OP_BENCH(BM_WhereMask);
DSINFER_OP_BENCH(BM_AddMask);
DSINFER_OP_BENCH(BM_ReshapeCopy);
DSINFER_OP_BENCH(BM_CastToHalf);
DSINFER_OP_BENCH(BM_ConcatLastAxis);
#undef DSINFER_OP_BENCH

}  // namespace

BENCHMARK_MAIN();
