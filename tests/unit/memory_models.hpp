// Small models for the memory pool and planner tests: a residual MLP with a gated branch and
// symbolic batch/seq dims, an elementwise chain (in-place reuse), and a NonZero model
// (data-dependent shapes).
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model_builder.hpp"

namespace dsinfer::test {

/// Value info with dims: >= 0 static, -1 "batch", -2 "seq".
inline onnx::ValueInfoProto sym_info(const std::string& name, int elem_type,
                                     const std::vector<std::int64_t>& dims) {
    onnx::ValueInfoProto v = tensor_info(name, elem_type, {});
    auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto d : dims) {
        if (d == -1) shape->add_dim()->set_dim_param("batch");
        else if (d == -2) shape->add_dim()->set_dim_param("seq");
        else shape->add_dim()->set_dim_value(d);
    }
    return v;
}

inline std::vector<float> random_floats(std::size_t n, unsigned seed, float scale) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

constexpr std::int64_t kMlpHidden = 32, kMlpFfn = 96;

/// x[batch, seq, 32] -> r1 = x + W2 Relu(W1 x + b1); y = Relu(r1 + Sigmoid(W3 r1 + b3) * r1).
/// Outputs y and r1 (an intermediate that is also read later: it escapes).
inline std::string residual_mlp() {
    onnx::ModelProto m = new_model(13, "residual_mlp");
    auto& g = *m.mutable_graph();
    const std::int64_t H = kMlpHidden, F = kMlpFfn;
    *g.add_input() = sym_info("x", 1, {-1, -2, H});
    *g.add_output() = sym_info("y", 1, {-1, -2, H});
    *g.add_output() = sym_info("r1", 1, {-1, -2, H});
    auto weight = [&](const std::string& n, std::vector<std::int64_t> dims, unsigned seed) {
        std::size_t k = 1;
        for (auto d : dims) k *= static_cast<std::size_t>(d);
        *g.add_initializer() = float_tensor(n, dims, random_floats(k, seed, 0.3f));
    };
    weight("w1", {H, F}, 1);
    weight("b1", {F}, 2);
    weight("w2", {F, H}, 3);
    weight("w3", {H, H}, 4);
    weight("b3", {H}, 5);
    add_node(g, "MatMul", {"x", "w1"}, {"h1"});
    add_node(g, "Add", {"h1", "b1"}, {"h1b"});
    add_node(g, "Relu", {"h1b"}, {"a1"});
    add_node(g, "MatMul", {"a1", "w2"}, {"h2"});
    add_node(g, "Add", {"h2", "x"}, {"r1"});
    add_node(g, "MatMul", {"r1", "w3"}, {"h3"});
    add_node(g, "Add", {"h3", "b3"}, {"h3b"});
    add_node(g, "Sigmoid", {"h3b"}, {"gate"});
    add_node(g, "Mul", {"gate", "r1"}, {"gated"});
    add_node(g, "Add", {"r1", "gated"}, {"r2"});
    add_node(g, "Relu", {"r2"}, {"y"});
    return bytes_of(m);
}

/// x[batch, 1000] -> Relu -> Sigmoid -> Tanh -> Neg -> Abs -> y: every intermediate dies at
/// the next op, so in place they all share one block.
inline std::string elementwise_chain() {
    onnx::ModelProto m = new_model(13, "chain");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 1000});
    *g.add_output() = sym_info("y", 1, {-1, 1000});
    add_node(g, "Relu", {"x"}, {"a"});
    add_node(g, "Sigmoid", {"a"}, {"b"});
    add_node(g, "Tanh", {"b"}, {"c"});
    add_node(g, "Neg", {"c"}, {"d"});
    add_node(g, "Abs", {"d"}, {"y"});
    return bytes_of(m);
}

/// x[n] -> NonZero -> Cast(float) -> Relu -> *2 -> +1 -> y[1, k]: every size after NonZero
/// depends on the data (y = 2 * index + 1 for each non-zero element).
inline std::string nonzero_model() {
    onnx::ModelProto m = new_model(13, "nonzero");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1});
    onnx::ValueInfoProto y = tensor_info("y", 1, {});
    auto* ys = y.mutable_type()->mutable_tensor_type()->mutable_shape();
    ys->add_dim()->set_dim_value(1);
    ys->add_dim()->set_dim_param("k");
    *g.add_output() = y;
    *g.add_initializer() = float_tensor("two", {}, {2.f});
    *g.add_initializer() = float_tensor("one", {}, {1.f});
    add_node(g, "NonZero", {"x"}, {"nz"});
    auto* cast = add_node(g, "Cast", {"nz"}, {"nzf"});
    auto* to = cast->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(1);
    add_node(g, "Relu", {"nzf"}, {"r"});
    add_node(g, "Mul", {"r", "two"}, {"m"});
    add_node(g, "Add", {"m", "one"}, {"y"});
    return bytes_of(m);
}

inline InferenceEngine engine_from(const std::string& bytes, EngineOptions o = {}) {
    return InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), std::move(o));
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

}  // namespace dsinfer::test
