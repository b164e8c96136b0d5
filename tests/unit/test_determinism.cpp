// Determinism (Step 6): on the CPU at a fixed thread count, repeated runs give bitwise identical
// outputs. A small transformer block (attention + feed-forward, fused by the optimizer into
// dsinfer's fused operators) and a small conv net (with a residual FusedConv whose Z is its own
// input X) each run 1,000 times with 2 threads; every output is compared byte for byte with the
// first run's, and the first and last runs with the reference kernels (runs after the first use
// the planned activation arena). A second engine loaded from the same bytes must give the same
// bits too (nothing depends on addresses or load order).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

constexpr int kRepeats = 1000;
constexpr int kThreads = 2;

std::vector<float> pseudo_random(std::size_t n, std::uint32_t seed, float scale) {
    std::vector<float> v(n);
    std::uint32_t s = seed * 2654435761u + 1;
    for (auto& e : v) {
        s = s * 1664525u + 1013904223u;
        e = (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
    return v;
}

void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}

void set_float(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
}

/// x [1, 24, 64] -> one pre-LN transformer block: LayerNorm -> 4-head self-attention
/// (Q/K/V MatMul + bias, Reshape/Transpose to heads, scaled QK^T, Softmax, V, merge heads,
/// output projection) + residual -> LayerNorm -> MatMul -> Gelu (Erf form) -> MatMul +
/// residual -> y.
onnx::ModelProto transformer_block() {
    constexpr std::int64_t B = 1, S = 24, H = 64, NH = 4, D = H / NH, F = 128;
    onnx::ModelProto m = new_model(17, "transformer_block");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {B, S, H});
    *g->add_output() = tensor_info("y", 1, {B, S, H});
    std::uint32_t seed = 1;
    auto weight = [&](const std::string& name, std::vector<std::int64_t> dims, float scale) {
        std::size_t n = 1;
        for (auto d : dims) n *= static_cast<std::size_t>(d);
        *g->add_initializer() = float_tensor(name, dims, pseudo_random(n, seed++, scale));
    };
    weight("ln1_g", {H}, 1.0f);
    weight("ln1_b", {H}, 0.1f);
    weight("ln2_g", {H}, 1.0f);
    weight("ln2_b", {H}, 0.1f);
    for (const char* p : {"q", "k", "v", "o"}) {
        weight(std::string("W") + p, {H, H}, 0.2f);
        weight(std::string("b") + p, {H}, 0.05f);
    }
    weight("W1", {H, F}, 0.2f);
    weight("b1", {F}, 0.05f);
    weight("W2", {F, H}, 0.2f);
    weight("b2", {H}, 0.05f);
    *g->add_initializer() = i64_tensor("heads_shape", {4}, {B, S, NH, D});
    *g->add_initializer() = i64_tensor("merged_shape", {3}, {B, S, H});
    *g->add_initializer() = float_tensor("scale", {}, {0.25f});  // 1/sqrt(16)
    *g->add_initializer() = float_tensor("sqrt1_2", {}, {0.70710678f});
    *g->add_initializer() = float_tensor("one", {}, {1.0f});
    *g->add_initializer() = float_tensor("half", {}, {0.5f});

    set_int(add_node(*g, "LayerNormalization", {"x", "ln1_g", "ln1_b"}, {"ln1"}), "axis", -1);
    for (const char* p : {"q", "k", "v"}) {
        const std::string s(p);
        add_node(*g, "MatMul", {"ln1", "W" + s}, {s + "0"});
        add_node(*g, "Add", {s + "0", "b" + s}, {s + "1"});
        add_node(*g, "Reshape", {s + "1", "heads_shape"}, {s + "2"});
        set_ints(add_node(*g, "Transpose", {s + "2"}, {s + "h"}), "perm",
                 s == "k" ? std::vector<std::int64_t>{0, 2, 3, 1}
                          : std::vector<std::int64_t>{0, 2, 1, 3});
    }
    add_node(*g, "MatMul", {"qh", "kh"}, {"scores0"});
    add_node(*g, "Mul", {"scores0", "scale"}, {"scores"});
    set_int(add_node(*g, "Softmax", {"scores"}, {"probs"}), "axis", -1);
    add_node(*g, "MatMul", {"probs", "vh"}, {"ctx0"});
    set_ints(add_node(*g, "Transpose", {"ctx0"}, {"ctx1"}), "perm", {0, 2, 1, 3});
    add_node(*g, "Reshape", {"ctx1", "merged_shape"}, {"ctx"});
    add_node(*g, "MatMul", {"ctx", "Wo"}, {"o0"});
    add_node(*g, "Add", {"o0", "bo"}, {"o1"});
    add_node(*g, "Add", {"x", "o1"}, {"r1"});
    set_int(add_node(*g, "LayerNormalization", {"r1", "ln2_g", "ln2_b"}, {"ln2"}), "axis", -1);
    add_node(*g, "MatMul", {"ln2", "W1"}, {"f0"});
    add_node(*g, "Add", {"f0", "b1"}, {"f1"});
    add_node(*g, "Mul", {"f1", "sqrt1_2"}, {"g0"});
    add_node(*g, "Erf", {"g0"}, {"g1"});
    add_node(*g, "Add", {"g1", "one"}, {"g2"});
    add_node(*g, "Mul", {"f1", "g2"}, {"g3"});
    add_node(*g, "Mul", {"g3", "half"}, {"gelu"});
    add_node(*g, "MatMul", {"gelu", "W2"}, {"f2"});
    add_node(*g, "Add", {"f2", "b2"}, {"f3"});
    add_node(*g, "Add", {"r1", "f3"}, {"y"});
    return m;
}

/// x [1, 3, 24, 24] -> Conv 3x3 (16) + bias -> BatchNorm -> Relu -> MaxPool 2x2 ->
/// Conv 3x3 (32, stride 2) -> Relu -> Conv 3x3 (32) + residual -> GlobalAveragePool ->
/// Flatten -> Gemm (10) -> Softmax -> y [1, 10].
onnx::ModelProto conv_net() {
    onnx::ModelProto m = new_model(17, "conv_net");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 3, 24, 24});
    *g->add_output() = tensor_info("y", 1, {1, 10});
    std::uint32_t seed = 100;
    auto weight = [&](const std::string& name, std::vector<std::int64_t> dims, float scale,
                      float offset = 0.0f) {
        std::size_t n = 1;
        for (auto d : dims) n *= static_cast<std::size_t>(d);
        std::vector<float> v = pseudo_random(n, seed++, scale);
        for (auto& e : v) e += offset;
        *g->add_initializer() = float_tensor(name, dims, v);
    };
    weight("C1", {16, 3, 3, 3}, 0.3f);
    weight("c1b", {16}, 0.1f);
    weight("bn_s", {16}, 0.2f, 1.0f);
    weight("bn_b", {16}, 0.1f);
    weight("bn_m", {16}, 0.1f);
    weight("bn_v", {16}, 0.1f, 1.0f);
    weight("C2", {32, 16, 3, 3}, 0.1f);
    weight("c2b", {32}, 0.1f);
    weight("C3", {32, 32, 3, 3}, 0.05f);
    weight("c3b", {32}, 0.1f);
    weight("G", {10, 32}, 0.3f);
    weight("gb", {10}, 0.1f);
    auto* c1 = add_node(*g, "Conv", {"x", "C1", "c1b"}, {"c1"});
    set_ints(c1, "pads", {1, 1, 1, 1});
    add_node(*g, "BatchNormalization", {"c1", "bn_s", "bn_b", "bn_m", "bn_v"}, {"bn"});
    add_node(*g, "Relu", {"bn"}, {"r1"});
    auto* mp = add_node(*g, "MaxPool", {"r1"}, {"p1"});
    set_ints(mp, "kernel_shape", {2, 2});
    set_ints(mp, "strides", {2, 2});
    auto* c2 = add_node(*g, "Conv", {"p1", "C2", "c2b"}, {"c2"});
    set_ints(c2, "pads", {1, 1, 1, 1});
    set_ints(c2, "strides", {2, 2});
    add_node(*g, "Relu", {"c2"}, {"r2"});
    set_ints(add_node(*g, "Conv", {"r2", "C3", "c3b"}, {"c3"}), "pads", {1, 1, 1, 1});
    add_node(*g, "Add", {"c3", "r2"}, {"res"});
    add_node(*g, "GlobalAveragePool", {"res"}, {"gap"});
    add_node(*g, "Flatten", {"gap"}, {"flat"});
    auto* gemm = add_node(*g, "Gemm", {"flat", "G", "gb"}, {"logits"});
    set_int(gemm, "transB", 1);
    set_float(gemm, "alpha", 1.0f);
    set_int(add_node(*g, "Softmax", {"logits"}, {"y"}), "axis", -1);
    return m;
}

Tensor input_of(const Shape& s, std::uint32_t seed) {
    Tensor t = Tensor::empty(DType::f32, s);
    const std::vector<float> v =
        pseudo_random(static_cast<std::size_t>(t.num_elements()), seed, 1.5f);
    std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
    return t;
}

InferenceEngine load_engine(const std::string& bytes) {
    EngineOptions o;
    o.num_threads = kThreads;
    return InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), o);
}

/// The reference kernels without the optimizer: what every run must be close to.
std::vector<NamedTensor> reference_outputs(const std::string& bytes,
                                           const std::vector<NamedTensor>& inputs) {
    EngineOptions o;
    o.backends = {"reference"};
    o.optimization_level = 0;
    o.num_threads = 1;
    return InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), o)
        .run(inputs);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
    double worst = 0;
    for (std::int64_t i = 0; i < b.num_elements(); ++i) {
        const double d = std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
        if (!(d <= worst)) worst = d;  // NaN counts as worst
    }
    return worst;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

/// Runs kRepeats times on one engine; every run must equal the first bit for bit, and so must
/// a second engine's first run.
void check_repeats(const onnx::ModelProto& m, const std::vector<NamedTensor>& inputs) {
    const std::string bytes = bytes_of(m);
    const InferenceEngine engine = load_engine(bytes);
    const std::vector<NamedTensor> first = engine.run(inputs);
    REQUIRE(!first.empty());
    for (const auto& o : first) {
        REQUIRE(o.tensor.dtype() == DType::f32);
        for (float v : o.tensor.span<float>()) REQUIRE(std::isfinite(v));
    }
    // Runs after the first use the planned activation arena: they must be right, too.
    const std::vector<NamedTensor> ref = reference_outputs(bytes, inputs);
    REQUIRE(ref.size() == first.size());
    int differing = 0;
    std::vector<NamedTensor> last;
    for (int r = 1; r < kRepeats; ++r) {
        std::vector<NamedTensor> out = engine.run(inputs);
        REQUIRE(out.size() == first.size());
        bool same = true;
        for (std::size_t i = 0; i < out.size(); ++i)
            same = same && same_bits(out[i].tensor, first[i].tensor);
        if (!same) ++differing;
        if (r == kRepeats - 1) last = std::move(out);
    }
    CHECK(differing == 0);
    for (std::size_t i = 0; i < ref.size(); ++i) {
        INFO("output " << i << " vs the reference kernels: first run, last run");
        CHECK(max_abs_diff(first[i].tensor, ref[i].tensor) <= 1e-4);
        CHECK(max_abs_diff(last[i].tensor, ref[i].tensor) <= 1e-4);
    }
    // A second engine from the same bytes: the same bits.
    const InferenceEngine other = load_engine(bytes);
    const std::vector<NamedTensor> again = other.run(inputs);
    REQUIRE(again.size() == first.size());
    for (std::size_t i = 0; i < again.size(); ++i)
        CHECK(same_bits(again[i].tensor, first[i].tensor));
}

}  // namespace

TEST_CASE("a transformer block is bitwise deterministic over 1000 runs at 2 threads",
          "[determinism]") {
    check_repeats(transformer_block(), {{"x", input_of(Shape{1, 24, 64}, 7)}});
}

TEST_CASE("a conv net is bitwise deterministic over 1000 runs at 2 threads", "[determinism]") {
    check_repeats(conv_net(), {{"x", input_of(Shape{1, 3, 24, 24}, 8)}});
}
