// Structured channel pruning (dsinfer/prune.hpp, src/passes/prune.cpp).
//
// The numerical check: channels whose filters (and biases, and BatchNorm shifts) are exactly
// zero contribute nothing downstream, L1 scores them lowest, so pruning exactly them must leave
// the model's outputs unchanged (to float32 summation order, 1e-5): that exercises every edit
// (Conv weights on both channel axes, bias, BatchNormalization parameters, a depthwise Conv and
// its group, a residual Add coupling two producers, a Flatten's blocks into a Gemm, MatMul
// rows and columns, a bias Add). Then: what stays intact and why, the counts, global mode,
// protection, bad options, and a pruned model saved and loaded again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "dsinfer/dsinfer.hpp"
#include "unit/memory_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

void ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}
void one_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

/// Random values, with the out-channels in `zero` (along axis 0 of `dims`) set to 0.
std::vector<float> filters(const std::vector<std::int64_t>& dims, unsigned seed,
                           const std::vector<std::int64_t>& zero, float scale = 0.4f) {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    std::vector<float> v = random_floats(n, seed, scale);
    const std::size_t per = n / static_cast<std::size_t>(dims[0]);
    for (std::int64_t c : zero)
        for (std::size_t j = 0; j < per; ++j) v[static_cast<std::size_t>(c) * per + j] = 0.f;
    return v;
}

/// x [N, 3, 4, 4] -> Conv 3x3 (8) + bias -> BatchNorm -> Relu = r1
///   -> depthwise Conv 3x3 (group 8) -> Conv 1x1 (8) -> BatchNorm = b2
///   -> Add(b2, r1) -> Relu -> MaxPool 2x2 -> Flatten [N, 32] -> Gemm (5) -> y.
/// Channels in `dead` of the stem (conv1's filters, bias, BN beta) and of conv2's filters are
/// zero, so the residual group's dead channels are zero on both branches of the Add.
std::string cnn(const std::vector<std::int64_t>& dead) {
    onnx::ModelProto m = new_model(13, "prune_cnn");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 3, 4, 4});
    *g.add_output() = sym_info("y", 1, {-1, 5});
    *g.add_initializer() = float_tensor("w1", {8, 3, 3, 3}, filters({8, 3, 3, 3}, 1, dead));
    *g.add_initializer() = float_tensor("b1", {8}, filters({8}, 2, dead, 0.2f));
    std::vector<float> gamma = random_floats(8, 3, 0.5f), beta = filters({8}, 4, dead, 0.3f);
    for (float& v : gamma) v += 1.0f;
    std::vector<float> mean = filters({8}, 5, dead, 0.1f), var = random_floats(8, 6, 0.2f);
    for (float& v : var) v = std::fabs(v) + 0.5f;
    // BN of a zero channel: (0 - mean) * ... + beta with mean = beta = 0 -> 0.
    *g.add_initializer() = float_tensor("g1", {8}, gamma);
    *g.add_initializer() = float_tensor("be1", {8}, beta);
    *g.add_initializer() = float_tensor("m1", {8}, mean);
    *g.add_initializer() = float_tensor("v1", {8}, var);
    *g.add_initializer() = float_tensor("wd", {8, 1, 3, 3}, filters({8, 1, 3, 3}, 7, {}));
    *g.add_initializer() = float_tensor("w2", {8, 8, 1, 1}, filters({8, 8, 1, 1}, 8, dead));
    *g.add_initializer() = float_tensor("g2", {8}, gamma);
    *g.add_initializer() = float_tensor("be2", {8}, beta);
    *g.add_initializer() = float_tensor("m2", {8}, mean);
    *g.add_initializer() = float_tensor("v2", {8}, var);
    *g.add_initializer() = float_tensor("wf", {32, 5}, random_floats(160, 9, 0.3f));
    *g.add_initializer() = float_tensor("bf", {5}, random_floats(5, 10, 0.1f));
    ints(add_node(g, "Conv", {"x", "w1", "b1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
    add_node(g, "BatchNormalization", {"c1", "g1", "be1", "m1", "v1"}, {"n1"}, "bn1");
    add_node(g, "Relu", {"n1"}, {"r1"}, "relu1");
    auto* dw = add_node(g, "Conv", {"r1", "wd"}, {"d"}, "depthwise");
    ints(dw, "pads", {1, 1, 1, 1});
    one_int(dw, "group", 8);
    add_node(g, "Conv", {"d", "w2"}, {"c2"}, "conv2");
    add_node(g, "BatchNormalization", {"c2", "g2", "be2", "m2", "v2"}, {"n2"}, "bn2");
    add_node(g, "Add", {"n2", "r1"}, {"s"}, "residual");
    add_node(g, "Relu", {"s"}, {"r2"}, "relu2");
    auto* mp = add_node(g, "MaxPool", {"r2"}, {"p"}, "pool");
    ints(mp, "kernel_shape", {2, 2});
    ints(mp, "strides", {2, 2});
    add_node(g, "Flatten", {"p"}, {"f"}, "flatten");
    add_node(g, "Gemm", {"f", "wf", "bf"}, {"y"}, "fc");
    return bytes_of(m);
}

/// x [N, 16] -> MatMul (24) -> Add bias -> Relu -> MatMul (6) -> y; hidden neurons in `dead`
/// have zero weights and bias.
std::string mlp(const std::vector<std::int64_t>& dead) {
    onnx::ModelProto m = new_model(13, "prune_mlp");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 16});
    *g.add_output() = sym_info("y", 1, {-1, 6});
    // W1 [16, 24]: a dead neuron is a zero column.
    std::vector<float> w1 = random_floats(16 * 24, 11, 0.4f);
    for (std::int64_t c : dead)
        for (int r = 0; r < 16; ++r) w1[static_cast<std::size_t>(r * 24 + c)] = 0.f;
    *g.add_initializer() = float_tensor("w1", {16, 24}, w1);
    std::vector<float> b1 = random_floats(24, 12, 0.2f);
    for (std::int64_t c : dead) b1[static_cast<std::size_t>(c)] = 0.f;
    *g.add_initializer() = float_tensor("b1", {24}, b1);
    *g.add_initializer() = float_tensor("w2", {24, 6}, random_floats(24 * 6, 13, 0.4f));
    add_node(g, "MatMul", {"x", "w1"}, {"h"}, "fc1");
    add_node(g, "Add", {"h", "b1"}, {"hb"}, "bias1");
    add_node(g, "Relu", {"hb"}, {"a"}, "relu");
    add_node(g, "MatMul", {"a", "w2"}, {"y"}, "fc2");
    return bytes_of(m);
}

/// One transformer block as PyTorch exports BERT's: x [N, S, 16] and an additive mask
/// [N, 1, 1, S] -> Q, K, V (MatMul + bias Add) -> Reshape [0, 0, 4, 4] (one shape constant
/// shared by the three) -> Transpose -> Q K^T / 2 + mask -> Softmax -> P V -> Transpose ->
/// Reshape [0, 0, -1] -> MatMul + bias (output dense) -> Add x -> FFN: MatMul (32) + bias ->
/// GELU as Div / Erf / Add / Mul / Mul -> MatMul (16) -> y. Head `dead_head` has zero Q, K and
/// V columns and biases (its scores are 0, its values 0: it adds nothing); FFN neurons in
/// `dead_ffn` have zero W1 columns and biases (GELU(0) = 0); -1 for `dead_head`: no dead head.
std::string attention_block(std::int64_t dead_head, const std::vector<std::int64_t>& dead_ffn) {
    constexpr std::int64_t H = 16, heads = 4, D = 4, F = 32;
    onnx::ModelProto m = new_model(13, "prune_attention");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, -2, H});
    *g.add_input() = sym_info("mask", 1, {-1, 1, 1, -2});
    *g.add_output() = sym_info("y", 1, {-1, -2, H});
    auto columns_zero = [](std::vector<float> v, std::int64_t cols,
                           const std::vector<std::int64_t>& zero) {
        for (std::size_t i = 0; i < v.size(); ++i)
            for (std::int64_t c : zero)
                if (static_cast<std::int64_t>(i) % cols == c) v[i] = 0.f;
        return v;
    };
    std::vector<std::int64_t> head_cols;
    for (std::int64_t c = 0; c < D; ++c) head_cols.push_back(dead_head * D + c);
    const char* proj[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
        const std::string p = proj[i];
        *g.add_initializer() = float_tensor("w" + p, {H, H},
                                            columns_zero(random_floats(H * H, 31 + i, 0.5f), H, head_cols));
        *g.add_initializer() = float_tensor("b" + p, {H},
                                            columns_zero(random_floats(H, 41 + i, 0.2f), H, head_cols));
        add_node(g, "MatMul", {"x", "w" + p}, {p + "m"}, p + "_proj");
        add_node(g, "Add", {p + "m", "b" + p}, {p + "b"}, p + "_bias");
        add_node(g, "Reshape", {p + "b", "split"}, {p + "s"}, p + "_split");
    }
    *g.add_initializer() = i64_tensor("split", {4}, {0, 0, heads, D});
    *g.add_initializer() = i64_tensor("merge", {3}, {0, 0, -1});
    *g.add_initializer() = float_tensor("scale", {}, {2.f});
    ints(add_node(g, "Transpose", {"qs"}, {"qt"}, "q_t"), "perm", {0, 2, 1, 3});
    ints(add_node(g, "Transpose", {"ks"}, {"kt"}, "k_t"), "perm", {0, 2, 3, 1});
    ints(add_node(g, "Transpose", {"vs"}, {"vt"}, "v_t"), "perm", {0, 2, 1, 3});
    add_node(g, "MatMul", {"qt", "kt"}, {"sc"}, "scores");
    add_node(g, "Div", {"sc", "scale"}, {"scd"}, "scaled");
    add_node(g, "Add", {"scd", "mask"}, {"scm"}, "masked");
    one_int(add_node(g, "Softmax", {"scm"}, {"pr"}, "softmax"), "axis", -1);
    add_node(g, "MatMul", {"pr", "vt"}, {"ctx"}, "context");
    ints(add_node(g, "Transpose", {"ctx"}, {"ctxt"}, "ctx_t"), "perm", {0, 2, 1, 3});
    add_node(g, "Reshape", {"ctxt", "merge"}, {"ctxm"}, "merge_heads");
    *g.add_initializer() = float_tensor("wo", {H, H}, random_floats(H * H, 51, 0.5f));
    *g.add_initializer() = float_tensor("bo", {H}, random_floats(H, 52, 0.2f));
    add_node(g, "MatMul", {"ctxm", "wo"}, {"om"}, "out_proj");
    add_node(g, "Add", {"bo", "om"}, {"ob"}, "out_bias");
    add_node(g, "Add", {"ob", "x"}, {"res"}, "residual");
    *g.add_initializer() = float_tensor("w1", {H, F}, columns_zero(random_floats(H * F, 61, 0.5f), F, dead_ffn));
    *g.add_initializer() = float_tensor("b1", {F}, columns_zero(random_floats(F, 62, 0.2f), F, dead_ffn));
    *g.add_initializer() = float_tensor("w2", {F, H}, random_floats(F * H, 63, 0.5f));
    *g.add_initializer() = float_tensor("sqrt2", {}, {1.41421356f});
    *g.add_initializer() = float_tensor("one", {}, {1.f});
    *g.add_initializer() = float_tensor("half", {}, {0.5f});
    add_node(g, "MatMul", {"res", "w1"}, {"f1"}, "ffn_in");
    add_node(g, "Add", {"f1", "b1"}, {"f1b"}, "ffn_bias");
    add_node(g, "Div", {"f1b", "sqrt2"}, {"gd"}, "gelu_div");
    add_node(g, "Erf", {"gd"}, {"ge"}, "gelu_erf");
    add_node(g, "Add", {"ge", "one"}, {"ga"}, "gelu_add");
    add_node(g, "Mul", {"f1b", "ga"}, {"gm"}, "gelu_mul");
    add_node(g, "Mul", {"gm", "half"}, {"gh"}, "gelu_half");
    add_node(g, "MatMul", {"gh", "w2"}, {"y"}, "ffn_out");
    return bytes_of(m);
}

/// Inception-like: x [N, 3, 6, 6] -> convA 1x1 (8) + bias -> Relu = a; convB 3x3 pad 1 (8) ->
/// Relu = b; Concat(a, b, x) [N, 19, 6, 6] -> BatchNorm -> Relu -> Conv 1x1 (6) "mix" ->
/// GlobalAveragePool -> Flatten -> Gemm (3) -> y. Dead channels (zero filters and biases, and
/// zero BatchNorm mean and shift at their places in the concatenation) add nothing.
std::string concat_cnn(const std::vector<std::int64_t>& dead_a, const std::vector<std::int64_t>& dead_b) {
    onnx::ModelProto m = new_model(13, "prune_concat");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 3, 6, 6});
    *g.add_output() = sym_info("y", 1, {-1, 3});
    *g.add_initializer() = float_tensor("wa", {8, 3, 1, 1}, filters({8, 3, 1, 1}, 101, dead_a));
    *g.add_initializer() = float_tensor("ba", {8}, filters({8}, 102, dead_a, 0.2f));
    *g.add_initializer() = float_tensor("wb", {8, 3, 3, 3}, filters({8, 3, 3, 3}, 103, dead_b));
    std::vector<std::int64_t> dead_cat = dead_a;
    for (std::int64_t c : dead_b) dead_cat.push_back(8 + c);
    std::vector<float> gamma = random_floats(19, 104, 0.5f), var = random_floats(19, 105, 0.2f);
    for (float& v : gamma) v += 1.0f;
    for (float& v : var) v = std::fabs(v) + 0.5f;
    *g.add_initializer() = float_tensor("gc", {19}, gamma);
    *g.add_initializer() = float_tensor("bc", {19}, filters({19}, 106, dead_cat, 0.3f));
    *g.add_initializer() = float_tensor("mc", {19}, filters({19}, 107, dead_cat, 0.1f));
    *g.add_initializer() = float_tensor("vc", {19}, var);
    *g.add_initializer() = float_tensor("wm", {6, 19, 1, 1}, random_floats(6 * 19, 108, 0.4f));
    *g.add_initializer() = float_tensor("wf", {6, 3}, random_floats(18, 109, 0.4f));
    add_node(g, "Conv", {"x", "wa", "ba"}, {"ca"}, "convA");
    add_node(g, "Relu", {"ca"}, {"a"}, "reluA");
    ints(add_node(g, "Conv", {"x", "wb"}, {"cb"}, "convB"), "pads", {1, 1, 1, 1});
    add_node(g, "Relu", {"cb"}, {"b"}, "reluB");
    one_int(add_node(g, "Concat", {"a", "b", "x"}, {"cat"}, "concat"), "axis", 1);
    add_node(g, "BatchNormalization", {"cat", "gc", "bc", "mc", "vc"}, {"n"}, "bn");
    add_node(g, "Relu", {"n"}, {"r"}, "relu");
    add_node(g, "Conv", {"r", "wm"}, {"mixed"}, "mix");
    add_node(g, "GlobalAveragePool", {"mixed"}, {"p"}, "gap");
    add_node(g, "Flatten", {"p"}, {"f"}, "flatten");
    add_node(g, "Gemm", {"f", "wf"}, {"y"}, "fc");
    return bytes_of(m);
}

/// x [N, 3, 4, 4] -> Conv 1x1 (8) + bias -> Relu -> two windows of channels [0, 4) and [4, 8),
/// by one Split (mode "split"), two Slices ("slice") or a Split into a gated product ("glu":
/// w1 * Sigmoid(w2), which couples the windows). Each window -> Conv 1x1 (5); their sum is y.
/// Channels in `dead` have zero filters and biases.
std::string window_cnn(const std::string& mode, const std::vector<std::int64_t>& dead) {
    onnx::ModelProto m = new_model(13, "prune_windows");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 3, 4, 4});
    *g.add_output() = sym_info("y", 1, {-1, 5, 4, 4});
    *g.add_initializer() = float_tensor("w", {8, 3, 1, 1}, filters({8, 3, 1, 1}, 121, dead));
    *g.add_initializer() = float_tensor("b", {8}, filters({8}, 122, dead, 0.2f));
    *g.add_initializer() = float_tensor("wp", {5, 4, 1, 1}, random_floats(20, 123, 0.5f));
    *g.add_initializer() = float_tensor("wq", {5, 4, 1, 1}, random_floats(20, 124, 0.5f));
    add_node(g, "Conv", {"x", "w", "b"}, {"c"}, "conv");
    add_node(g, "Relu", {"c"}, {"r"}, "relu");
    if (mode == "slice") {
        *g.add_initializer() = i64_tensor("s0", {1}, {0});
        *g.add_initializer() = i64_tensor("e0", {1}, {4});
        *g.add_initializer() = i64_tensor("s1", {1}, {4});
        *g.add_initializer() = i64_tensor("e1", {1}, {8});
        *g.add_initializer() = i64_tensor("ax", {1}, {1});
        add_node(g, "Slice", {"r", "s0", "e0", "ax"}, {"r1"}, "slice_lo");
        add_node(g, "Slice", {"r", "s1", "e1", "ax"}, {"r2"}, "slice_hi");
    } else {
        one_int(add_node(g, "Split", {"r"}, {"r1", "r2"}, "split"), "axis", 1);
    }
    if (mode == "glu") {
        add_node(g, "Sigmoid", {"r2"}, {"gate"}, "gate");
        add_node(g, "Mul", {"r1", "gate"}, {"gl"}, "glu");
        add_node(g, "Conv", {"gl", "wp"}, {"y"}, "conv_p");
        return bytes_of(m);
    }
    add_node(g, "Conv", {"r1", "wp"}, {"p"}, "conv_p");
    add_node(g, "Conv", {"r2", "wq"}, {"q"}, "conv_q");
    add_node(g, "Add", {"p", "q"}, {"y"}, "sum");
    return bytes_of(m);
}

Graph graph_of(const std::string& bytes) { return load_onnx_from_bytes(bytes.data(), bytes.size()); }

std::vector<float> run_graph(Graph g, const Tensor& x, const Tensor* second = nullptr,
                             std::vector<std::string> backends = {}) {
    EngineOptions o;
    o.num_threads = 1;
    o.backends = std::move(backends);
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    std::vector<NamedTensor> in{{e.inputs()[0].name, x}};
    if (second != nullptr) in.push_back({e.inputs()[1].name, *second});
    const auto out = e.run(in);
    const auto s = out[0].tensor.span<float>();
    return {s.begin(), s.end()};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return HUGE_VAL;
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    return d;
}

const PruneGroup* group_made_by(const PruneReport& r, const std::string& node) {
    for (const PruneGroup& g : r.groups)
        for (const std::string& p : g.producers)
            if (p == node) return &g;
    return nullptr;
}

PruneOptions exact(double ratio) {
    PruneOptions o;
    o.ratio = ratio;
    o.channel_multiple = 1;
    o.protect_first = false;
    o.protect_last = false;
    return o;
}

}  // namespace

TEST_CASE("pruning dead channels leaves a CNN's outputs unchanged", "[prune]") {
    const std::vector<std::int64_t> dead{1, 4, 6, 7};
    Graph g = graph_of(cnn(dead));
    const Tensor x = Tensor::from_vector<float>({2, 3, 4, 4}, random_floats(96, 21, 1.f));
    const std::vector<float> before = run_graph(g, x);
    const PruneReport r = prune_channels(g, exact(0.5)).value_or_throw();
    // One prunable group: conv1's and conv2's channels, joined by the residual Add (the
    // depthwise Conv follows them); the Gemm's output is the graph's.
    const PruneGroup* stem = group_made_by(r, "conv1");
    REQUIRE(stem != nullptr);
    CHECK(stem->channels == 8);
    CHECK(stem->kept == 4);
    CHECK(stem->intact_reason.empty());
    CHECK(group_made_by(r, "conv2") == stem);
    const PruneGroup* fc = group_made_by(r, "fc");
    REQUIRE(fc != nullptr);
    CHECK(fc->kept == 5);
    CHECK_THAT(fc->intact_reason, Catch::Contains("graph output"));
    CHECK(r.removed_channels == 4);
    // Weights: conv1 [4,3,3,3], depthwise [4,1,3,3] group 4, conv2 [4,4,1,1], fc [16,5].
    for (const Value& v : g.values) {
        if (!v.initializer) continue;
        if (v.name == "w1") CHECK(v.initializer->shape() == Shape{4, 3, 3, 3});
        if (v.name == "wd") CHECK(v.initializer->shape() == Shape{4, 1, 3, 3});
        if (v.name == "w2") CHECK(v.initializer->shape() == Shape{4, 4, 1, 1});
        if (v.name == "wf") CHECK(v.initializer->shape() == Shape{16, 5});
        if (v.name == "g2") CHECK(v.initializer->shape() == Shape{4});
    }
    for (const Node& n : g.nodes)
        if (n.name == "depthwise") CHECK(n.attr<std::int64_t>("group").value() == 4);
    const std::vector<float> after = run_graph(g, x);
    CHECK(max_diff(before, after) <= 1e-5);
    for (const std::string& backend : default_backends()) {
        INFO("backend " << backend);
        CHECK(max_diff(before, run_graph(g, x, nullptr, {backend})) <= 1e-4);
    }
    CHECK(max_diff(before, run_graph(g, x, nullptr, {"reference"})) <= 1e-4);
    CHECK(r.flops_after < r.flops_before);
    CHECK(r.params_after < r.params_before);
    CHECK(r.layers.size() == 3);  // conv1, conv2, fc (the depthwise follows channels)
}

TEST_CASE("pruning dead neurons leaves an MLP's outputs unchanged", "[prune]") {
    const std::vector<std::int64_t> dead{0, 3, 5, 8, 9, 13, 17, 23};
    for (const PruneCriterion c : {PruneCriterion::l1, PruneCriterion::l2}) {
        INFO("criterion " << to_string(c));
        Graph g = graph_of(mlp(dead));
        const Tensor x = Tensor::from_vector<float>({3, 16}, random_floats(48, 22, 1.f));
        const std::vector<float> before = run_graph(g, x);
        PruneOptions o = exact(1.0 / 3.0);
        o.criterion = c;
        const PruneReport r = prune_channels(g, o).value_or_throw();
        const PruneGroup* h = group_made_by(r, "fc1");
        REQUIRE(h != nullptr);
        CHECK(h->kept == 16);
        CHECK(max_diff(before, run_graph(g, x)) <= 1e-5);
    }
}

TEST_CASE("pruning a dead attention head and dead FFN neurons leaves a block's outputs unchanged",
          "[prune]") {
    const std::vector<std::int64_t> dead_ffn{1, 2, 7, 11, 16, 20, 29, 31};
    Graph g = graph_of(attention_block(2, dead_ffn));
    const Tensor x = Tensor::from_vector<float>({2, 5, 16}, random_floats(160, 71, 1.f));
    std::vector<float> mask(10, 0.f);
    mask[4] = mask[8] = mask[9] = -10000.f;  // padding of both sequences
    const Tensor m = Tensor::from_vector<float>({2, 1, 1, 5}, mask);
    const std::vector<float> before = run_graph(g, x, &m);
    const PruneReport r = prune_channels(g, exact(0.25)).value_or_throw();
    // Q, K and V are one group of 4 heads of 4 channels (joined by Q K^T and P V); one head goes.
    const PruneGroup* att = group_made_by(r, "q_proj");
    REQUIRE(att != nullptr);
    CHECK(att->intact_reason.empty());
    CHECK(att->unit == 4);
    CHECK(att->channels == 16);
    CHECK(att->kept == 12);
    CHECK(group_made_by(r, "k_proj") == att);
    CHECK(group_made_by(r, "v_proj") == att);
    CHECK(att->kept_channels == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15});
    const PruneGroup* ffn = group_made_by(r, "ffn_in");
    REQUIRE(ffn != nullptr);
    CHECK(ffn->unit == 1);
    CHECK(ffn->kept == 24);
    // The hidden size meets the graph input x in the residual Add: intact.
    const PruneGroup* hidden = group_made_by(r, "out_proj");
    REQUIRE(hidden != nullptr);
    CHECK(hidden->kept == 16);
    CHECK_THAT(hidden->intact_reason, Catch::Contains("residual"));
    for (const Value& v : g.values) {
        if (!v.initializer) continue;
        if (v.name == "wq" || v.name == "wk" || v.name == "wv") CHECK(v.initializer->shape() == Shape{16, 12});
        if (v.name == "bq") CHECK(v.initializer->shape() == Shape{12});
        if (v.name == "wo") CHECK(v.initializer->shape() == Shape{12, 16});
        if (v.name == "w1") CHECK(v.initializer->shape() == Shape{16, 24});
        if (v.name == "w2") CHECK(v.initializer->shape() == Shape{24, 16});
        if (v.name == "split") CHECK(v.initializer->span<std::int64_t>()[2] == 4);  // shared: kept
    }
    // Each split Reshape reads its own copy of the shape, with 3 heads.
    int splits = 0;
    for (const Node& n : g.nodes)
        if (n.op_type == "Reshape" && n.name != "merge_heads") {
            const Value& s = g.value(n.inputs[1]);
            REQUIRE(s.initializer);
            CHECK(s.initializer->span<std::int64_t>()[2] == 3);
            ++splits;
        }
    CHECK(splits == 3);
    CHECK(max_diff(before, run_graph(g, x, &m)) <= 1e-5);
    // Every CPU backend runs the pruned block (each computes its own way: 1e-4).
    for (const std::string& backend : default_backends()) {
        INFO("backend " << backend);
        CHECK(max_diff(before, run_graph(g, x, &m, {backend})) <= 1e-4);
    }
    CHECK(max_diff(before, run_graph(g, x, &m, {"reference"})) <= 1e-4);

    SECTION("saved as ONNX, the pruned block loads and runs the same") {
        const std::string path = (std::filesystem::temp_directory_path() /
                                  ("dsinfer_prune_att_" + std::to_string(::getpid()) + ".onnx"))
                                     .string();
        save_onnx(g, path);
        const Graph back = load_onnx(path);
        std::filesystem::remove(path);
        CHECK(max_diff(before, run_graph(back, x, &m)) <= 1e-5);
    }
}

TEST_CASE("pruning dead channels through a Concat leaves the outputs unchanged", "[prune]") {
    Graph g = graph_of(concat_cnn({1, 5}, {0, 3, 6, 7}));
    const Tensor x = Tensor::from_vector<float>({2, 3, 6, 6}, random_floats(216, 111, 1.f));
    const std::vector<float> before = run_graph(g, x);
    PruneOptions o = exact(0.0);  // the branches only ("mix" makes live channels)
    o.group_ratios = {{"convA", 0.25}, {"convB", 0.25}};
    const PruneReport r = prune_channels(g, o).value_or_throw();
    const PruneGroup* a = group_made_by(r, "convA");
    const PruneGroup* b = group_made_by(r, "convB");
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    CHECK(a->kept_channels == std::vector<std::int64_t>{0, 2, 3, 4, 6, 7});
    CHECK(b->kept == 6);
    // The layer after the Concat reads both groups: each lists it as a consumer.
    CHECK(a->consumers == std::vector<std::string>{"mix"});
    CHECK(b->consumers == std::vector<std::string>{"mix"});
    for (const Value& v : g.values) {
        if (!v.initializer) continue;
        if (v.name == "gc" || v.name == "mc") CHECK(v.initializer->shape() == Shape{15});
        if (v.name == "wm") CHECK(v.initializer->shape() == Shape{6, 15, 1, 1});
    }
    CHECK(max_diff(before, run_graph(g, x)) <= 1e-5);

    SECTION("a Concat that reaches a graph output keeps its inputs' groups intact") {
        onnx::ModelProto m;
        const std::string bytes = concat_cnn({}, {});
        REQUIRE(m.ParseFromString(bytes));
        *m.mutable_graph()->add_output() = sym_info("cat", 1, {-1, 19, 6, 6});
        Graph g2 = graph_of(bytes_of(m));
        const PruneReport r2 = prune_channels(g2, o).value_or_throw();
        CHECK(group_made_by(r2, "convA")->kept == 8);
        CHECK_THAT(group_made_by(r2, "convA")->intact_reason, Catch::Contains("graph output"));
        CHECK(group_made_by(r2, "convB")->kept == 8);
    }
}

TEST_CASE("pruning dead channels through a Split or Slices leaves the outputs unchanged",
          "[prune]") {
    const Tensor x = Tensor::from_vector<float>({2, 3, 4, 4}, random_floats(96, 131, 1.f));
    for (const std::string mode : {"split", "slice"}) {
        INFO("mode " << mode);
        Graph g = graph_of(window_cnn(mode, {1, 2, 6}));
        const std::vector<float> before = run_graph(g, x);
        PruneOptions o = exact(0.0);
        o.group_ratios = {{"conv", 0.375}};  // the three dead channels
        const PruneReport r = prune_channels(g, o).value_or_throw();
        REQUIRE(group_made_by(r, "conv") != nullptr);
        CHECK(group_made_by(r, "conv")->kept_channels == std::vector<std::int64_t>{0, 3, 4, 5, 7});
        CHECK(group_made_by(r, "conv")->consumers ==
              std::vector<std::string>{"conv_p", "conv_q"});
        for (const Value& v : g.values) {
            if (v.name == "wp") CHECK(v.initializer->shape() == Shape{5, 2, 1, 1});
            if (v.name == "wq") CHECK(v.initializer->shape() == Shape{5, 3, 1, 1});
        }
        CHECK(max_diff(before, run_graph(g, x)) <= 1e-5);
    }
    SECTION("a window that would lose every channel keeps its best one") {
        Graph g = graph_of(window_cnn("split", {0, 1, 2, 3}));
        const std::vector<float> before = run_graph(g, x);
        PruneOptions o = exact(0.0);
        o.group_ratios = {{"conv", 0.5}};
        const PruneReport r = prune_channels(g, o).value_or_throw();
        CHECK(group_made_by(r, "conv")->kept == 5);
        CHECK(group_made_by(r, "conv")->kept_channels.front() < 4);
        CHECK(max_diff(before, run_graph(g, x)) <= 1e-5);
    }
    SECTION("a gated product of two windows keeps the group intact") {
        Graph g = graph_of(window_cnn("glu", {1, 2, 6}));
        const PruneReport r = prune_channels(g, exact(0.375)).value_or_throw();
        CHECK(group_made_by(r, "conv")->kept == 8);
        CHECK_THAT(group_made_by(r, "conv")->intact_reason, Catch::Contains("Split"));
    }
}

TEST_CASE("prune: heads are whole units; a head count of one or a computed shape stays intact",
          "[prune]") {
    SECTION("a ratio below one head keeps every head, and rounding counts heads") {
        Graph g = graph_of(attention_block(0, {}));
        PruneGroup att;
        const PruneReport r = prune_channels(g, exact(0.2)).value_or_throw();  // 0.8 head
        REQUIRE(group_made_by(r, "q_proj") != nullptr);
        CHECK(group_made_by(r, "q_proj")->kept == 16);
        Graph g2 = graph_of(attention_block(0, {}));
        PruneOptions o = exact(0.5);
        o.channel_multiple = 16;  // 2 heads of 4 make 8: rounds to 4 heads (16 channels)
        const PruneReport r2 = prune_channels(g2, o).value_or_throw();
        CHECK(group_made_by(r2, "q_proj")->kept % 4 == 0);
        o.channel_multiple = 8;  // whole heads: 2 heads = 8 channels
        Graph g3 = graph_of(attention_block(0, {}));
        CHECK(group_made_by(prune_channels(g3, o).value_or_throw(), "q_proj")->kept == 8);
    }
    SECTION("group_ratios prune one group by its own ratio") {
        Graph g = graph_of(attention_block(1, {3, 4, 5, 6, 7, 8, 9, 10}));
        PruneOptions o = exact(0.0);
        o.group_ratios = {{"ffn_in", 0.25}};
        const PruneReport r = prune_channels(g, o).value_or_throw();
        CHECK(group_made_by(r, "ffn_in")->kept == 24);
        CHECK(group_made_by(r, "q_proj")->kept == 16);
        o.group_ratios = {{"k_proj", 0.5}};  // any producer of the group names it
        Graph g2 = graph_of(attention_block(1, {}));
        CHECK(group_made_by(prune_channels(g2, o).value_or_throw(), "q_proj")->kept == 8);
        for (const double bad : {-0.1, 1.0, std::nan("")}) {
            o.group_ratios = {{"ffn_in", bad}};
            CHECK(prune_channels(g2, o).status().code() == ErrorCode::invalid_argument);
        }
        o.group_ratios = {{"no_such_node", 0.5}};
        const Status st = prune_channels(g2, o).status();
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK_THAT(st.message(), Catch::Contains("no_such_node"));
    }
}

TEST_CASE("prune: channel multiples, global thresholds and protection", "[prune]") {
    SECTION("kept channels round to the nearest multiple, at least one") {
        Graph g = graph_of(mlp({}));
        PruneOptions o = exact(0.3);  // 24 -> 16.8 -> 17 kept
        o.channel_multiple = 8;      // -> 16
        const PruneReport r = prune_channels(g, o).value_or_throw();
        CHECK(group_made_by(r, "fc1")->kept == 16);
        Graph g2 = graph_of(mlp({}));
        o.ratio = 0.9;  // 24 -> 3 -> one multiple: 8
        CHECK(group_made_by(prune_channels(g2, o).value_or_throw(), "fc1")->kept == 8);
    }
    SECTION("global: one threshold over the normalized scores") {
        Graph g = graph_of(cnn({}));
        PruneOptions o = exact(0.5);
        o.global = true;
        const PruneReport r = prune_channels(g, o).value_or_throw();
        CHECK(r.removed_channels == 4);  // the only prunable group holds all 8 channels
    }
    SECTION("the first layer's channels and named nodes are protected") {
        Graph g = graph_of(cnn({}));
        PruneOptions o = exact(0.5);
        o.protect_first = true;  // conv1 is in the residual group: the whole group stays
        const PruneReport r = prune_channels(g, o).value_or_throw();
        CHECK(group_made_by(r, "conv1")->kept == 8);
        CHECK(group_made_by(r, "conv1")->intact_reason == "protected");
        Graph g2 = graph_of(mlp({}));
        PruneOptions p = exact(0.5);
        p.protect = {"fc1"};
        CHECK(group_made_by(prune_channels(g2, p).value_or_throw(), "fc1")->kept == 24);
        Graph g3 = graph_of(mlp({}));
        p = exact(0.5);
        p.protect_first = true;  // fc1 is the first layer, but not a convolution (a stem)
        CHECK(group_made_by(prune_channels(g3, p).value_or_throw(), "fc1")->kept == 12);
        Graph g4 = graph_of(mlp({}));
        p = exact(0.5);
        p.protect_last = true;  // fc2's outputs; fc1's neurons, which it reads, stay prunable
        const PruneReport r4 = prune_channels(g4, p).value_or_throw();
        CHECK(group_made_by(r4, "fc1")->kept == 12);
        CHECK(group_made_by(r4, "fc2")->kept == 6);
    }
    SECTION("ratio 0 changes nothing") {
        Graph g = graph_of(cnn({}));
        const Tensor x = Tensor::from_vector<float>({1, 3, 4, 4}, random_floats(48, 23, 1.f));
        const std::vector<float> before = run_graph(g, x);
        const PruneReport r = prune_channels(g, exact(0)).value_or_throw();
        CHECK(r.removed_channels == 0);
        CHECK(r.params_after == r.params_before);
        CHECK(max_diff(before, run_graph(g, x)) == 0);
    }
}

TEST_CASE("prune: what cannot be pruned stays intact, with the reason", "[prune]") {
    // y = Conv_c(Concat(Conv_a(x), Conv_b(x))): Conv_a's group is pruned through the Concat,
    // Conv_b's has one channel, a graph output stops Conv_c's. z = Add(Split(Conv_d(x))): the
    // Split stops Conv_d's.
    onnx::ModelProto m = new_model(13, "prune_intact");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {1, 2, 4, 4});
    *g.add_output() = sym_info("y", 1, {1, 3, 4, 4});
    *g.add_output() = sym_info("z", 1, {1, 2, 4, 4});
    *g.add_initializer() = float_tensor("wa", {4, 2, 1, 1}, random_floats(8, 1, 0.5f));
    *g.add_initializer() = float_tensor("wb", {1, 2, 1, 1}, random_floats(2, 2, 0.5f));
    *g.add_initializer() = float_tensor("wc", {3, 5, 1, 1}, random_floats(15, 3, 0.5f));
    *g.add_initializer() = float_tensor("wd", {4, 2, 1, 1}, random_floats(8, 4, 0.5f));
    add_node(g, "Conv", {"x", "wa"}, {"a"}, "conv_a");
    add_node(g, "Conv", {"x", "wb"}, {"b"}, "conv_b");
    one_int(add_node(g, "Concat", {"a", "b"}, {"ab"}, "concat"), "axis", 1);
    add_node(g, "Conv", {"ab", "wc"}, {"y"}, "conv_c");
    add_node(g, "Conv", {"x", "wd"}, {"d"}, "conv_d");
    one_int(add_node(g, "Split", {"d"}, {"d1", "d2"}, "split"), "axis", 1);
    add_node(g, "Add", {"d1", "d2"}, {"z"}, "sum");
    Graph graph = graph_of(bytes_of(m));
    const PruneReport r = prune_channels(graph, exact(0.5)).value_or_throw();
    CHECK(group_made_by(r, "conv_a")->intact_reason.empty());
    CHECK(group_made_by(r, "conv_a")->kept == 2);
    CHECK(group_made_by(r, "conv_b")->intact_reason == "one channel");
    CHECK_THAT(group_made_by(r, "conv_c")->intact_reason, Catch::Contains("graph output"));
    CHECK_THAT(group_made_by(r, "conv_d")->intact_reason, Catch::Contains("Split"));
    CHECK(group_made_by(r, "conv_d")->kept == 4);
    CHECK(r.removed_channels == 2);
    CHECK(r.prunable_channels == 4);
    for (const Value& v : graph.values)
        if (v.name == "wc") CHECK(v.initializer->shape() == Shape{3, 3, 1, 1});
}

TEST_CASE("prune: bad options are invalid_argument and leave the graph as it was", "[prune]") {
    const std::string bytes = mlp({});
    for (const double bad : {1.0, 1.5, -0.1, std::nan("")}) {
        Graph g = graph_of(bytes);
        PruneOptions o;
        o.ratio = bad;
        const auto r = prune_channels(g, o);
        INFO("ratio " << bad);
        REQUIRE(r.status().code() == ErrorCode::invalid_argument);
        CHECK_THAT(r.status().message(), Catch::Contains("ratio"));
    }
    Graph g = graph_of(bytes);
    PruneOptions o = exact(0.5);
    o.channel_multiple = 0;
    CHECK(prune_channels(g, o).status().code() == ErrorCode::invalid_argument);
    o = exact(0.5);
    o.protect = {"no_such_node"};
    const auto r = prune_channels(g, o);
    CHECK(r.status().code() == ErrorCode::invalid_argument);
    CHECK_THAT(r.status().message(), Catch::Contains("no_such_node"));
    for (const Value& v : g.values)
        if (v.name == "w1") CHECK(v.initializer->shape() == Shape{16, 24});  // untouched
    CHECK(parse_prune_criterion("bn").value() == PruneCriterion::bn_scale);
    CHECK(parse_prune_criterion("l3").status().code() == ErrorCode::invalid_argument);
}

TEST_CASE("a pruned model saved as ONNX loads and runs the same", "[prune]") {
    Graph g = graph_of(cnn({0, 2}));
    const PruneReport r = prune_channels(g, exact(0.25)).value_or_throw();
    REQUIRE(r.removed_channels == 2);
    const Tensor x = Tensor::from_vector<float>({1, 3, 4, 4}, random_floats(48, 24, 1.f));
    const std::vector<float> pruned = run_graph(g, x);
    const auto path = std::filesystem::temp_directory_path() /
                      ("dsinfer_pruned_" + std::to_string(::getpid()) + ".onnx");
    save_onnx(g, path);
    const std::vector<float> again = run_graph(load_onnx(path), x);
    std::filesystem::remove(path);
    CHECK(max_diff(pruned, again) == 0);
}

TEST_CASE("prune: malformed nodes stop their groups instead of crashing", "[prune]") {
    // Built directly (the loader would keep such nodes for the compile to reject): a
    // BatchNormalization with one input, a Relu without outputs, a Conv without inputs.
    Graph g;
    g.opset_imports.push_back({"", 13});
    const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{1, 2, 4, 4}));
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer(
        "w", Tensor::from_vector<float>({4, 2, 1, 1}, random_floats(8, 1, 0.5f)));
    const ValueId c = g.add_value("c");
    const ValueId y = g.add_value("y");
    g.add_node("Conv", {x, w}, {c}, "conv");
    g.add_node("BatchNormalization", {c}, {y}, "bn");
    g.add_node("Relu", {c}, {}, "relu");
    g.add_node("Conv", {}, {g.add_value("z")}, "empty_conv");
    g.outputs.push_back(y);
    const auto r = prune_channels(g, exact(0.5));
    REQUIRE(r.is_ok());
    CHECK(r.value().removed_channels == 0);
    CHECK_FALSE(group_made_by(r.value(), "conv")->intact_reason.empty());
}

// ---- The Pruner: recovery, fidelity, target allocation ----

namespace {

/// x [N, 3, 8, 8] -> Conv 3x3 pad 1 (8) + bias -> Relu -> Conv 3x3 stride 2 pad 1 (6), no bias
/// -> Relu -> GlobalAveragePool -> Flatten -> Gemm (transB, alpha 0.5) (4) + C -> y.
/// conv1's channels 4..7 are 0.5 x channels 0..3 (weights and bias): after the Relu they are
/// exactly half of them, so with channels 4..7 pruned (lowest L1) conv2 can be refit exactly.
std::string redundant_cnn() {
    onnx::ModelProto m = new_model(13, "prune_recover_cnn");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 3, 8, 8});
    *g.add_output() = sym_info("y", 1, {-1, 4});
    std::vector<float> w1 = random_floats(8 * 27, 81, 0.5f), b1 = random_floats(8, 82, 0.2f);
    for (int c = 4; c < 8; ++c) {
        for (int j = 0; j < 27; ++j) w1[static_cast<std::size_t>(c * 27 + j)] = 0.5f * w1[static_cast<std::size_t>((c - 4) * 27 + j)];
        b1[static_cast<std::size_t>(c)] = 0.5f * b1[static_cast<std::size_t>(c - 4)];
    }
    *g.add_initializer() = float_tensor("w1", {8, 3, 3, 3}, w1);
    *g.add_initializer() = float_tensor("b1", {8}, b1);
    *g.add_initializer() = float_tensor("w2", {6, 8, 3, 3}, random_floats(6 * 72, 83, 0.4f));
    *g.add_initializer() = float_tensor("wf", {4, 6}, random_floats(24, 84, 0.5f));
    *g.add_initializer() = float_tensor("cf", {4}, random_floats(4, 85, 0.1f));
    ints(add_node(g, "Conv", {"x", "w1", "b1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
    add_node(g, "Relu", {"c1"}, {"r1"}, "relu1");
    auto* c2 = add_node(g, "Conv", {"r1", "w2"}, {"c2"}, "conv2");
    ints(c2, "pads", {1, 1, 1, 1});
    ints(c2, "strides", {2, 2});
    add_node(g, "Relu", {"c2"}, {"r2"}, "relu2");
    add_node(g, "GlobalAveragePool", {"r2"}, {"p"}, "gap");
    add_node(g, "Flatten", {"p"}, {"f"}, "flatten");
    auto* fc = add_node(g, "Gemm", {"f", "wf", "cf"}, {"y"}, "fc");
    one_int(fc, "transB", 1);
    auto* alpha = fc->add_attribute();
    alpha->set_name("alpha");
    alpha->set_type(onnx::AttributeProto::FLOAT);
    alpha->set_f(0.5f);
    return bytes_of(m);
}

std::unique_ptr<CalibrationSource> random_batches(const std::vector<std::int64_t>& dims,
                                                  std::size_t count, unsigned seed) {
    std::vector<std::vector<NamedTensor>> batches;
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    for (std::size_t b = 0; b < count; ++b)
        batches.push_back({{"x", Tensor::from_vector<float>(Shape::from(dims), random_floats(n, seed + static_cast<unsigned>(b), 1.f))}});
    return calibration_batches(std::move(batches));
}

const RecoveredLayer* recovered(const PrunerReport& r, const std::string& node) {
    for (const RecoveredLayer& l : r.recovered)
        if (l.node == node) return &l;
    return nullptr;
}

}  // namespace

TEST_CASE("Pruner: least squares refits a convolution exactly when the removed channels are "
          "redundant", "[prune][pruner]") {
    const Graph original = graph_of(redundant_cnn());
    const Tensor x = Tensor::from_vector<float>({3, 3, 8, 8}, random_floats(576, 91, 1.f));
    const std::vector<float> want = run_graph(original, x);
    PrunerOptions o;
    o.prune = exact(0.5);
    o.ridge = 0.0;
    o.num_threads = 1;
    std::vector<std::string> phases;
    o.progress = [&](std::string_view phase, std::size_t, std::size_t) { phases.emplace_back(phase); };
    Graph g = original;
    auto data = random_batches({4, 3, 8, 8}, 6, 100);
    const PrunerReport r = Pruner(o).run(g, data.get()).value_or_throw();
    const PruneGroup* c1 = group_made_by(r.prune, "conv1");
    REQUIRE(c1 != nullptr);
    CHECK(c1->kept_channels == std::vector<std::int64_t>{0, 1, 2, 3});
    CHECK(c1->consumers == std::vector<std::string>{"conv2"});
    // conv2's 6 outputs are prunable too (fc reads them): 3 go, and fc is refit.
    REQUIRE(r.recovery == PruneRecovery::least_squares);
    const RecoveredLayer* l2 = recovered(r, "conv2");
    REQUIRE(l2 != nullptr);
    CHECK(l2->skipped.empty());
    CHECK(l2->inputs == 4 * 9);
    CHECK(l2->rows == 6 * 4 * 16);  // 6 batches x 4 samples x 4 x 4 positions
    CHECK(l2->bias);                // conv2 had none: it gains one
    CHECK(l2->error_before > 0.05);
    CHECK(l2->error_after < 1e-4);
    REQUIRE(recovered(r, "fc") != nullptr);
    CHECK(recovered(r, "fc")->skipped.empty());
    CHECK(r.before_recovery.measured);
    CHECK(r.after_recovery.cosine > r.before_recovery.cosine);
    CHECK(r.after_recovery.relative_l2 < r.before_recovery.relative_l2);
    CHECK(std::find(phases.begin(), phases.end(), "recovery") != phases.end());
    for (const Node& n : g.nodes)
        if (n.name == "conv2") CHECK(n.inputs.size() == 3);

    SECTION("with only conv1 pruned, the refit model reproduces the original") {
        PrunerOptions only = o;
        only.prune.ratio = 0.0;
        only.prune.group_ratios = {{"conv1", 0.5}};
        Graph g1 = original;
        auto d1 = random_batches({4, 3, 8, 8}, 6, 100);
        const PrunerReport r1 = Pruner(only).run(g1, d1.get()).value_or_throw();
        CHECK(r1.recovered.size() == 1);
        CHECK(max_diff(want, run_graph(g1, x)) <= 1e-4);
        CHECK(r1.after_recovery.cosine > 0.999999);
        // Bias-only recovery cannot undo it, but does not make it worse.
        only.recovery = PruneRecovery::bias;
        Graph g2 = original;
        auto d2 = random_batches({4, 3, 8, 8}, 6, 100);
        const PrunerReport r2 = Pruner(only).run(g2, d2.get()).value_or_throw();
        CHECK(r2.recovery == PruneRecovery::bias);
        REQUIRE(recovered(r2, "conv2") != nullptr);
        CHECK(recovered(r2, "conv2")->error_after <= recovered(r2, "conv2")->error_before);
        CHECK(recovered(r2, "conv2")->error_after > 1e-3);
    }
    SECTION("without data only the pass runs") {
        Graph g3 = original;
        const PrunerReport r3 = Pruner(o).run(g3).value_or_throw();
        CHECK(r3.recovery == PruneRecovery::none);
        CHECK_FALSE(r3.before_recovery.measured);
        CHECK(r3.prune.removed_channels == r.prune.removed_channels);
    }
}

TEST_CASE("Pruner: recovery refits an MLP's bias Add and a block's output projection",
          "[prune][pruner]") {
    SECTION("MLP: fc2 writes the graph output, so it is refit without a bias") {
        Graph g = graph_of(mlp({}));
        PrunerOptions o;
        o.prune = exact(0.5);
        o.num_threads = 1;
        auto data = random_batches({16, 16}, 8, 200);
        const PrunerReport r = Pruner(o).run(g, data.get()).value_or_throw();
        const RecoveredLayer* l = recovered(r, "fc2");
        REQUIRE(l != nullptr);
        CHECK_FALSE(l->bias);
        CHECK(l->error_after < l->error_before);
        CHECK(r.after_recovery.relative_l2 < r.before_recovery.relative_l2);
    }
    SECTION("attention block: the output projection (bias Add) and the FFN's second layer") {
        Graph g = graph_of(attention_block(-1, {}));  // every head live: pruning one costs
        PrunerOptions o;
        o.prune = exact(0.25);
        o.num_threads = 1;
        std::vector<std::vector<NamedTensor>> batches;
        for (unsigned b = 0; b < 6; ++b)
            batches.push_back({{"x", Tensor::from_vector<float>({2, 8, 16}, random_floats(256, 300 + b, 1.f))},
                               {"mask", Tensor::from_vector<float>({2, 1, 1, 8}, std::vector<float>(16, 0.f))}});
        auto data = calibration_batches(std::move(batches));
        const PrunerReport r = Pruner(o).run(g, data.get()).value_or_throw();
        const RecoveredLayer* out = recovered(r, "out_proj");
        REQUIRE(out != nullptr);
        CHECK(out->bias);  // the Add after the MatMul
        CHECK(out->inputs == 12);
        CHECK(out->error_after < out->error_before);
        const RecoveredLayer* ffn = recovered(r, "ffn_out");
        REQUIRE(ffn != nullptr);
        CHECK(ffn->inputs == 24);
        CHECK(r.after_recovery.cosine > r.before_recovery.cosine);
    }
}

TEST_CASE("Pruner: a FLOPs or parameter target is met by sensitivity or a global threshold",
          "[prune][pruner]") {
    const Graph original = graph_of(attention_block(1, {2, 3}));
    std::vector<std::vector<NamedTensor>> batches;
    for (unsigned b = 0; b < 3; ++b)
        batches.push_back({{"x", Tensor::from_vector<float>({2, 8, 16}, random_floats(256, 400 + b, 1.f))},
                           {"mask", Tensor::from_vector<float>({2, 1, 1, 8}, std::vector<float>(16, 0.f))}});
    for (const PruneTargetKind kind : {PruneTargetKind::flops, PruneTargetKind::params}) {
        INFO("kind " << (kind == PruneTargetKind::flops ? "flops" : "params"));
        PrunerOptions o;
        o.prune = exact(0.0);
        o.target = kind;
        o.target_fraction = 0.3;
        o.recovery = PruneRecovery::none;
        o.num_threads = 1;
        Graph g = original;
        auto data = calibration_batches(batches);
        const PrunerReport r = Pruner(o).run(g, data.get()).value_or_throw();
        CHECK(r.allocation == "sensitivity");
        CHECK(r.achieved_fraction >= 0.3);
        CHECK(r.sensitivity.size() == 2);  // heads and FFN neurons
        for (const PruneSensitivity& s : r.sensitivity) {
            CHECK(s.loss.size() == 3);
            CHECK(s.saved.size() == 3);
            CHECK(s.saved[2] > s.saved[0]);
        }
        CHECK(r.evaluations >= 6);
        const double got = kind == PruneTargetKind::flops
                               ? 1.0 - r.prune.flops_after / r.prune.flops_before
                               : 1.0 - static_cast<double>(r.prune.params_after) /
                                           static_cast<double>(r.prune.params_before);
        CHECK(got == Approx(r.achieved_fraction));
        // Without data: one global threshold.
        Graph g2 = original;
        const PrunerReport r2 = Pruner(o).run(g2).value_or_throw();
        CHECK(r2.allocation.find("global") != std::string::npos);
        CHECK(r2.achieved_fraction >= 0.3);
    }
}

TEST_CASE("Pruner: bad options and empty data are invalid_argument, the graph unchanged",
          "[prune][pruner]") {
    const Graph original = graph_of(mlp({}));
    const auto unchanged = [&](const Graph& g) {
        for (std::size_t v = 0; v < g.values.size(); ++v)
            if (g.values[v].initializer)
                CHECK(g.values[v].initializer->shape() == original.values[v].initializer->shape());
    };
    PrunerOptions o;
    o.prune = exact(0.5);
    for (const double f : {0.0, 1.0, -0.5, std::nan("")}) {
        PrunerOptions t = o;
        t.target = PruneTargetKind::flops;
        t.target_fraction = f;
        Graph g = original;
        CHECK(Pruner(t).run(g).status().code() == ErrorCode::invalid_argument);
        unchanged(g);
    }
    {
        PrunerOptions t = o;
        t.target = PruneTargetKind::params;
        t.target_fraction = 0.2;
        t.sensitivity_levels = {0.5, 1.0};
        Graph g = original;
        CHECK(Pruner(t).run(g).status().code() == ErrorCode::invalid_argument);
        t.sensitivity_levels = {};
        CHECK(Pruner(t).run(g).status().code() == ErrorCode::invalid_argument);
    }
    {
        PrunerOptions t = o;
        t.ridge = -1;
        Graph g = original;
        CHECK(Pruner(t).run(g).status().code() == ErrorCode::invalid_argument);
        t.ridge = 1e-3;
        t.max_rows_per_batch = 0;
        CHECK(Pruner(t).run(g).status().code() == ErrorCode::invalid_argument);
    }
    {
        Graph g = original;
        auto empty = calibration_batches({});
        const Status s = Pruner(o).run(g, empty.get()).status();
        CHECK(s.code() == ErrorCode::invalid_argument);
        CHECK_THAT(s.message(), Catch::Contains("no batch"));
        unchanged(g);
        // A batch the model cannot run: the engine's error, the graph unchanged.
        auto wrong = calibration_batches({{{"x", Tensor::from_vector<float>({2, 5}, random_floats(10, 1, 1.f))}}});
        CHECK_FALSE(Pruner(o).run(g, wrong.get()).is_ok());
        unchanged(g);
    }
    {
        // NaN in the calibration data: the layer is left as pruned, said so, never NaN weights.
        Graph g = original;
        std::vector<float> v = random_floats(64, 5, 1.f);
        v[7] = std::nanf("");
        for (const PruneRecovery method : {PruneRecovery::least_squares, PruneRecovery::bias}) {
            PrunerOptions t = o;
            t.recovery = method;
            Graph gm = original;
            auto nan_data = calibration_batches({{{"x", Tensor::from_vector<float>({4, 16}, v)}}});
            const PrunerReport r = Pruner(t).run(gm, nan_data.get()).value_or_throw();
            REQUIRE(recovered(r, "fc2") != nullptr);
            CHECK_THAT(recovered(r, "fc2")->skipped, Catch::Contains("non-finite"));
            for (const Value& val : gm.values)
                if (val.initializer && val.initializer->dtype() == DType::f32)
                    for (float w : val.initializer->span<float>()) CHECK(std::isfinite(w));
        }
    }
    CHECK(parse_prune_recovery("lsq").value() == PruneRecovery::least_squares);
    CHECK(parse_prune_recovery("bias").value() == PruneRecovery::bias);
    CHECK(parse_prune_recovery("nope").status().code() == ErrorCode::invalid_argument);
    CHECK(to_string(PruneRecovery::least_squares) == "lsq");
}
