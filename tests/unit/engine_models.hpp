// Small graphs built with the Graph API for engine-level tests (GPU placement, precision).
#pragma once

#include <dsinfer/dsinfer.hpp>

#include <random>
#include <string>
#include <vector>

namespace dsinfer::test {

inline Attribute attr_i(std::int64_t v) { Attribute a; a.kind = AttrKind::i; a.i = v; return a; }
inline Attribute attr_f(float v) { Attribute a; a.kind = AttrKind::f; a.f = v; return a; }
inline Attribute attr_s(std::string v) { Attribute a; a.kind = AttrKind::s; a.s = std::move(v); return a; }
inline Attribute attr_ints(std::vector<std::int64_t> v) {
    Attribute a; a.kind = AttrKind::ints; a.ints = std::move(v); return a;
}

inline Tensor random_f32(const std::vector<std::int64_t>& dims, std::uint32_t seed, float scale = 1.f) {
    auto t = Tensor::allocate(DType::f32, Shape::make(dims).value()).value();
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(r);
    return t;
}

/// ids int64 [batch, seq] -> embedding Gather [V=50, H=32] -> MatMul [32, 64] -> Add bias ->
/// Relu -> MatMul [64, 32] -> Add the embedding (residual) -> LayerNormalization -> y.
/// Opset 17. Every op has a CUDA kernel.
inline Graph mini_transformer(std::int64_t vocab = 50, std::int64_t hidden = 32) {
    Graph g;
    g.name = "mini_transformer";
    g.opset_imports = {{"", 17}};
    SymbolicShape ids_shape;
    ids_shape.known = true;
    ids_shape.dims = {Dim::named("batch"), Dim::named("seq")};
    const ValueId ids = g.add_value("ids", DType::i64, ids_shape);
    g.inputs.push_back(ids);
    const ValueId emb_w = g.add_initializer("E", random_f32({vocab, hidden}, 1));
    const ValueId w1 = g.add_initializer("W1", random_f32({hidden, 2 * hidden}, 2, 0.3f));
    const ValueId b1 = g.add_initializer("b1", random_f32({2 * hidden}, 3, 0.1f));
    const ValueId w2 = g.add_initializer("W2", random_f32({2 * hidden, hidden}, 4, 0.3f));
    const ValueId gamma = g.add_initializer("gamma", random_f32({hidden}, 5));
    const ValueId beta = g.add_initializer("beta", random_f32({hidden}, 6, 0.1f));
    auto v = [&](const char* name) { return g.add_value(name); };
    const ValueId emb = v("emb"), h0 = v("h0"), h1 = v("h1"), h2 = v("h2"), o0 = v("o0"), o1 = v("o1");
    const ValueId y = v("y");
    g.add_node("Gather", {emb_w, ids}, {emb}, "embed");
    g.add_node("MatMul", {emb, w1}, {h0}, "fc1");
    g.add_node("Add", {h0, b1}, {h1}, "bias1");
    g.add_node("Relu", {h1}, {h2}, "relu");
    g.add_node("MatMul", {h2, w2}, {o0}, "fc2");
    g.add_node("Add", {o0, emb}, {o1}, "residual");
    g.add_node("LayerNormalization", {o1, gamma, beta}, {y}, "ln").attributes = {{"axis", attr_i(-1)}};
    g.outputs.push_back(y);
    return g;
}

/// x float32 [batch, 8] -> MatMul [8, 16] -> Add bias -> Relu -> y (float32 in and out).
inline Graph mini_mlp() {
    Graph g;
    g.name = "mini_mlp";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(8)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer("W", random_f32({8, 16}, 11, 0.5f));
    const ValueId b = g.add_initializer("b", random_f32({16}, 12, 0.2f));
    const ValueId h0 = g.add_value("h0"), h1 = g.add_value("h1"), y = g.add_value("y");
    g.add_node("MatMul", {x, w}, {h0}, "fc");
    g.add_node("Add", {h0, b}, {h1}, "bias");
    g.add_node("Relu", {h1}, {y}, "relu");
    g.outputs.push_back(y);
    return g;
}

inline Tensor ids_tensor(std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::uint32_t seed) {
    auto t = Tensor::allocate(DType::i64, Shape{batch, seq}).value();
    std::mt19937 r(seed);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<std::int64_t>()[i] = static_cast<std::int64_t>(r() % static_cast<std::uint32_t>(vocab));
    return t;
}

/// max |a - b| / (1 + |b|) over float32 tensors of one shape.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
    double worst = 0;
    for (std::int64_t i = 0; i < b.num_elements(); ++i) {
        const double x = a.data<float>()[i], y = b.data<float>()[i];
        const double d = std::abs(x - y) / (1.0 + std::abs(y));
        if (!(d <= worst)) worst = d;  // NaN counts as worst
    }
    return worst;
}

}  // namespace dsinfer::test
