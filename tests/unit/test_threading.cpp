// The shared intra-op thread budget and load-time inference with symbolic dims, on a small
// transformer block exported the way PyTorch does it (MatMul + bias Add, decomposed LayerNorm,
// Softmax attention, erf GELU), with a symbolic batch dim:
//   - every node gets a fast kernel (dtypes/shapes inferred through the symbolic dim);
//   - runs are bitwise identical at a fixed thread count, and concurrent runs agree;
//   - the default backends match the reference kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "model_builder.hpp"

namespace {

using namespace dsinfer;
using dsinfer::test::add_node;
using dsinfer::test::float_tensor;
using dsinfer::test::new_model;
using dsinfer::test::tensor_info;

constexpr std::int64_t kSeq = 24, kHidden = 32, kFfn = 64;

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 0.2f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

void add_scalar(onnx::GraphProto& g, const std::string& name, float v) {
    *g.add_initializer() = float_tensor(name, {}, {v});
}

void add_weight(onnx::GraphProto& g, const std::string& name, std::vector<std::int64_t> dims,
                unsigned seed) {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    *g.add_initializer() = float_tensor(name, dims, random_values(n, seed));
}

/// LayerNorm as exporters decompose it: mean, centre, variance, rsqrt, scale, shift.
std::string layer_norm(onnx::GraphProto& g, const std::string& x, const std::string& p) {
    add_node(g, "ReduceMean", {x}, {p + "mean"})->add_attribute()->CopyFrom([] {
        onnx::AttributeProto a;
        a.set_name("axes");
        a.set_type(onnx::AttributeProto::INTS);
        a.add_ints(-1);
        return a;
    }());
    add_node(g, "Sub", {x, p + "mean"}, {p + "c"});
    add_node(g, "Pow", {p + "c", "two"}, {p + "sq"});
    auto* var = add_node(g, "ReduceMean", {p + "sq"}, {p + "var"});
    auto* ax = var->add_attribute();
    ax->set_name("axes");
    ax->set_type(onnx::AttributeProto::INTS);
    ax->add_ints(-1);
    add_node(g, "Add", {p + "var", "eps"}, {p + "ve"});
    add_node(g, "Sqrt", {p + "ve"}, {p + "sd"});
    add_node(g, "Div", {p + "c", p + "sd"}, {p + "n"});
    add_node(g, "Mul", {p + "n", p + "gamma"}, {p + "s"});
    add_node(g, "Add", {p + "s", p + "beta"}, {p + "out"});
    add_weight(g, p + "gamma", {kHidden}, 11);
    add_weight(g, p + "beta", {kHidden}, 12);
    return p + "out";
}

std::string transformer_block() {
    // Opset 13: ReduceMean keeps axes as an attribute until opset 18.
    onnx::ModelProto m = new_model(13, "block");
    auto& g = *m.mutable_graph();
    *g.add_input() = tensor_info("x", 1, {-1, kSeq, kHidden});
    *g.add_output() = tensor_info("y", 1, {-1, kSeq, kHidden});
    add_scalar(g, "two", 2.f);
    add_scalar(g, "eps", 1e-5f);
    add_scalar(g, "sqrt2", std::sqrt(2.f));
    add_scalar(g, "one", 1.f);
    add_scalar(g, "half", 0.5f);
    add_scalar(g, "scale", 1.f / std::sqrt(static_cast<float>(kHidden)));
    // Self-attention with one head: softmax(Q K^T * scale) V, then an output projection.
    for (const char* w : {"wq", "wk", "wv", "wo"}) add_weight(g, w, {kHidden, kHidden}, w[1]);
    add_node(g, "MatMul", {"x", "wq"}, {"q"});
    add_node(g, "MatMul", {"x", "wk"}, {"k"});
    add_node(g, "MatMul", {"x", "wv"}, {"v"});
    auto* tr = add_node(g, "Transpose", {"k"}, {"kt"});
    auto* perm = tr->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    for (int p : {0, 2, 1}) perm->add_ints(p);
    add_node(g, "MatMul", {"q", "kt"}, {"scores"});
    add_node(g, "Mul", {"scores", "scale"}, {"scaled"});
    add_node(g, "Softmax", {"scaled"}, {"probs"});
    add_node(g, "MatMul", {"probs", "v"}, {"ctx"});
    add_node(g, "MatMul", {"ctx", "wo"}, {"proj"});
    add_node(g, "Add", {"proj", "x"}, {"res1"});
    const std::string h = layer_norm(g, "res1", "ln1_");
    // FFN with erf GELU: x * 0.5 * (1 + erf(x / sqrt(2))).
    add_weight(g, "w1", {kHidden, kFfn}, 21);
    add_weight(g, "b1", {kFfn}, 22);
    add_weight(g, "w2", {kFfn, kHidden}, 23);
    add_node(g, "MatMul", {h, "w1"}, {"f1"});
    add_node(g, "Add", {"f1", "b1"}, {"f1b"});
    add_node(g, "Div", {"f1b", "sqrt2"}, {"gd"});
    add_node(g, "Erf", {"gd"}, {"ge"});
    add_node(g, "Add", {"ge", "one"}, {"g1"});
    add_node(g, "Mul", {"f1b", "g1"}, {"gm"});
    add_node(g, "Mul", {"gm", "half"}, {"gelu"});
    add_node(g, "MatMul", {"gelu", "w2"}, {"f2"});
    add_node(g, "Add", {"f2", h}, {"res2"});
    const std::string out = layer_norm(g, "res2", "ln2_");
    add_node(g, "Identity", {out}, {"y"});
    return dsinfer::test::bytes_of(m);
}

InferenceEngine load(const std::string& bytes, std::vector<std::string> backends, int threads) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    return InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), o);
}

Tensor input(std::int64_t batch) {
    const auto v = random_values(static_cast<std::size_t>(batch * kSeq * kHidden), 99, 1.f);
    return Tensor::from_vector<float>({batch, kSeq, kHidden}, v);
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

}  // namespace

TEST_CASE("symbolic batch dims still get fast kernels for every node", "[threads]") {
    const auto engine = load(transformer_block(), {}, 2);
    const auto& nodes = engine.graph().nodes;
    const auto& providers = engine.node_providers();
    REQUIRE(providers.size() == nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        INFO(nodes[i].op_type << " runs on " << providers[i]);
        if (nodes[i].op_type != "Identity") CHECK(providers[i] != "reference");
    }
    // The inferred shape of an intermediate keeps the symbol of the batch dim.
    const auto& g = engine.graph();
    bool found = false;
    for (const auto& v : g.values) {
        if (v.name != "scores") continue;
        found = true;
        CHECK(v.shape.to_string() ==
              "[batch," + std::to_string(kSeq) + "," + std::to_string(kSeq) + "]");
    }
    CHECK(found);
}

TEST_CASE("runs are bitwise identical at a fixed thread count", "[threads]") {
    const std::string model = transformer_block();
    const Tensor x = input(3);
    for (int threads : {1, 2}) {
        const auto engine = load(model, {}, threads);
        const Tensor first = engine.run({{"x", x}})[0].tensor;
        for (int r = 0; r < 5; ++r) {
            INFO("threads " << threads << " repeat " << r);
            CHECK(same_bits(engine.run({{"x", x}})[0].tensor, first));
        }
    }
}

TEST_CASE("concurrent runs share one engine and agree bitwise", "[threads]") {
    const auto engine = load(transformer_block(), {}, 2);
    const Tensor x = input(2);
    const Tensor want = engine.run({{"x", x}})[0].tensor;
    std::vector<Tensor> got(4);
    std::vector<std::thread> ts;
    for (std::size_t t = 0; t < got.size(); ++t)
        ts.emplace_back([&, t] { got[t] = engine.run({{"x", x}})[0].tensor; });
    for (auto& t : ts) t.join();
    for (const auto& g : got) CHECK(same_bits(g, want));
}

TEST_CASE("default backends match the reference kernels on the block", "[threads]") {
    const std::string model = transformer_block();
    const Tensor x = input(2);
    const Tensor fast = load(model, {}, 2).run({{"x", x}})[0].tensor;
    const Tensor ref = load(model, {"reference"}, 1).run({{"x", x}})[0].tensor;
    REQUIRE(fast.shape() == ref.shape());
    // LayerNorm outputs are O(1); float32 GEMMs of K <= 64 and polynomial erf: 1e-4 absolute.
    float worst = 0.f;
    for (std::int64_t i = 0; i < ref.num_elements(); ++i)
        worst = std::max(worst, std::fabs(fast.data<float>()[i] - ref.data<float>()[i]));
    CHECK(worst <= 1e-4f);
}

TEST_CASE("num_threads below zero is rejected", "[threads]") {
    EngineOptions o;
    o.num_threads = -1;
    const std::string model = transformer_block();
    CHECK_THROWS_AS(InferenceEngine::compile(load_onnx_from_bytes(model.data(), model.size()), o),
                    Error);
}
