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

Graph graph_of(const std::string& bytes) { return load_onnx_from_bytes(bytes.data(), bytes.size()); }

std::vector<float> run_graph(Graph g, const Tensor& x) {
    EngineOptions o;
    o.num_threads = 1;
    const InferenceEngine e = InferenceEngine::compile(std::move(g), o);
    const auto out = e.run({{e.inputs()[0].name, x}});
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
        p.protect_first = true;  // fc1 is the first layer
        CHECK(group_made_by(prune_channels(g3, p).value_or_throw(), "fc1")->kept == 24);
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
    // y = Concat(Conv_a(x), Conv_b(x)) -> Conv_c: the Concat stops both groups; a graph output
    // stops Conv_c's.
    onnx::ModelProto m = new_model(13, "prune_concat");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {1, 2, 4, 4});
    *g.add_output() = sym_info("y", 1, {1, 3, 4, 4});
    *g.add_initializer() = float_tensor("wa", {4, 2, 1, 1}, random_floats(8, 1, 0.5f));
    *g.add_initializer() = float_tensor("wb", {1, 2, 1, 1}, random_floats(2, 2, 0.5f));
    *g.add_initializer() = float_tensor("wc", {3, 5, 1, 1}, random_floats(15, 3, 0.5f));
    add_node(g, "Conv", {"x", "wa"}, {"a"}, "conv_a");
    add_node(g, "Conv", {"x", "wb"}, {"b"}, "conv_b");
    one_int(add_node(g, "Concat", {"a", "b"}, {"ab"}, "concat"), "axis", 1);
    add_node(g, "Conv", {"ab", "wc"}, {"y"}, "conv_c");
    Graph graph = graph_of(bytes_of(m));
    const PruneReport r = prune_channels(graph, exact(0.5)).value_or_throw();
    CHECK_THAT(group_made_by(r, "conv_a")->intact_reason, Catch::Contains("Concat"));
    CHECK_THAT(group_made_by(r, "conv_b")->intact_reason, Catch::Contains("Concat"));
    CHECK_THAT(group_made_by(r, "conv_c")->intact_reason, Catch::Contains("graph output"));
    CHECK(r.removed_channels == 0);
    CHECK(r.prunable_channels == 0);
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
