// quantize_dynamic (dsinfer/quantize.hpp, src/passes/quantize_dynamic.cpp): float32 MatMul /
// Gemm layers with constant weights rewritten into ONNX Runtime's dynamic-quantization form.
// Checked: the graph it writes (which nodes, shared activations, weights quantized once and
// the float32 weights freed), the weights' values (symmetric s8, round half to even, per
// tensor and per column), that the rewritten graph runs fused on the cpu backend's INT8
// kernels BITWISE equal to itself unfused on the reference kernels (the kernels are checked
// against the reference in test_quant_dynamic.cpp; here the pass's output must be the form
// they fuse), that it stays close to float32 (relative L2 below 2%: 8-bit activations and
// weights on unit-scale data), and what it leaves alone: attention-style MatMuls of two
// activations, Gemm with alpha/transA, weights holding NaN, excluded nodes, graphs already
// quantized, opsets before 11.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <dsinfer/quantize.hpp>
#include <string>
#include <vector>

#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using std::int64_t;

namespace {

/// x [B, 16] -> MatMul W1 [16, 24] -> Add b1 -> Relu -> Gemm(W2 [8, 24], b2, transB=1) -> y,
/// and a second MatMul reading x (shares x's quantization): z = x @ W3 [16, 5].
Graph linear_graph(int64_t opset = 13) {
    Graph g;
    g.name = "linear";
    g.opset_imports = {{"", opset}};
    const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{3, 16}));
    g.inputs.push_back(x);
    const ValueId w1 = g.add_initializer("W1", random_f32({16, 24}, 1, 0.4f));
    const ValueId b1 = g.add_initializer("b1", random_f32({24}, 2, 0.1f));
    const ValueId w2 = g.add_initializer("W2", random_f32({8, 24}, 3, 0.3f));
    const ValueId b2 = g.add_initializer("b2", random_f32({8}, 4, 0.1f));
    const ValueId w3 = g.add_initializer("W3", random_f32({16, 5}, 5, 0.4f));
    const ValueId h = g.add_value("h"), hb = g.add_value("hb"), hr = g.add_value("hr");
    const ValueId y = g.add_value("y", DType::f32), z = g.add_value("z", DType::f32);
    g.add_node("MatMul", {x, w1}, {h}, "fc1");
    g.add_node("Add", {h, b1}, {hb}, "fc1_bias");
    g.add_node("Relu", {hb}, {hr}, "relu");
    g.add_node("Gemm", {hr, w2, b2}, {y}, "fc2").attributes = {{"transB", attr_i(1)}};
    g.add_node("MatMul", {x, w3}, {z}, "side");
    g.outputs = {y, z};
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

int count(const Graph& g, const std::string& op) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.op_type == op;
    return n;
}

std::vector<NamedTensor> run(const Graph& g, const std::vector<std::string>& backends, int level,
                             int threads, std::vector<std::string>* ops = nullptr,
                             std::vector<std::string>* providers = nullptr) {
    EngineOptions o;
    o.backends = backends;
    o.optimization_level = level;
    o.num_threads = threads;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    if (ops != nullptr)
        for (const Node& n : e.graph().nodes) ops->push_back(n.op_type);
    if (providers != nullptr) *providers = e.node_providers();
    return e.run({{"x", random_f32({3, 16}, 77, 1.5f)}});
}

double rel_l2(const Tensor& a, const Tensor& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.num_elements(); ++i) {
        const double d = static_cast<double>(a.data<float>()[i]) - b.data<float>()[i];
        num += d * d;
        den += static_cast<double>(b.data<float>()[i]) * b.data<float>()[i];
    }
    return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("quantize_dynamic writes ONNX Runtime's dynamic form: shared activations, weights once",
          "[quantize_dynamic]") {
    Graph g = linear_graph();
    const DynamicQuantizeReport r = quantize_dynamic(g).value_or_throw();
    CHECK_FALSE(r.already_quantized);
    CHECK(r.matmuls == 2);
    CHECK(r.gemms == 1);
    CHECK(r.activations == 2);  // x (read by fc1 and side) once, hr once
    CHECK(r.skipped.empty());
    CHECK(r.float_weight_bytes == 4u * (16 * 24 + 8 * 24 + 16 * 5));
    CHECK(r.int8_weight_bytes == (16 * 24 + 8 * 24 + 16 * 5) + 3 * (4 + 1));
    CHECK(count(g, "MatMul") == 0);
    CHECK(count(g, "Gemm") == 0);
    CHECK(count(g, "DynamicQuantizeLinear") == 2);
    CHECK(count(g, "MatMulInteger") == 3);
    CHECK(count(g, "Cast") == 3);
    CHECK(count(g, "Mul") == 6);
    CHECK(count(g, "Add") == 2);  // fc1's own bias Add, the Gemm's C
    // The float32 weights are gone; their int8 forms are [K, N] (W2 transposed).
    for (const Value& v : g.values) {
        if (v.name == "W1" || v.name == "W2" || v.name == "W3") CHECK_FALSE(v.initializer.has_value());
        if (v.name == "W2_quantized") {
            REQUIRE(v.initializer.has_value());
            CHECK(v.initializer->dtype() == DType::i8);
            CHECK(v.initializer->shape() == Shape{24, 8});
        }
    }
    REQUIRE(g.link().is_ok());
}

TEST_CASE("quantize_dynamic: weights symmetric s8, round half to even, per tensor and per column",
          "[quantize_dynamic]") {
    for (bool per_channel : {false, true}) {
        INFO("per_channel " << per_channel);
        Graph g;
        g.opset_imports = {{"", 13}};
        const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{1, 2}));
        g.inputs.push_back(x);
        // Column 0: max 1.27 -> scale 0.01; 0.005 and -0.015 are halves (ties to even: 0, -2).
        // Column 1: all zeros -> scale 1 (per column), q 0.
        Tensor w = Tensor::allocate(DType::f32, Shape{2, 2}).value();
        w.data<float>()[0] = 1.27f;
        w.data<float>()[1] = 0.f;
        w.data<float>()[2] = -0.635f;
        w.data<float>()[3] = 0.f;
        const ValueId wv = g.add_initializer("W", w);
        const ValueId y = g.add_value("y", DType::f32);
        g.add_node("MatMul", {x, wv}, {y}, "mm");
        g.outputs = {y};
        REQUIRE(g.sort_topologically().is_ok());
        DynamicQuantizeOptions o;
        o.per_channel = per_channel;
        REQUIRE(quantize_dynamic(g, o).value_or_throw().matmuls == 1);
        const Tensor* q = nullptr;
        const Tensor* s = nullptr;
        const Tensor* z = nullptr;
        for (const Value& v : g.values) {
            if (v.name == "W_quantized") q = &*v.initializer;
            if (v.name == "W_scale") s = &*v.initializer;
            if (v.name == "W_zero_point") z = &*v.initializer;
        }
        REQUIRE((q != nullptr && s != nullptr && z != nullptr));
        CHECK(s->num_elements() == (per_channel ? 2 : 1));
        CHECK(z->dtype() == DType::i8);
        CHECK(s->data<float>()[0] == 1.27f / 127.f);
        if (per_channel) CHECK(s->data<float>()[1] == 1.f);
        const auto* qv = q->data<std::int8_t>();
        CHECK(qv[0] == 127);
        CHECK(qv[2] == static_cast<std::int8_t>(std::nearbyint(-0.635f / (1.27f / 127.f))));
        CHECK(qv[1] == 0);
        CHECK(qv[3] == 0);
    }
}

TEST_CASE("quantize_dynamic: the rewritten graph runs fused on the INT8 kernels, bitwise equal to "
          "itself unfused, and close to float32",
          "[quantize_dynamic][fast]") {
    const Graph fp32 = linear_graph();
    const std::vector<NamedTensor> want = run(fp32, {"reference"}, 0, 1);
    for (bool per_channel : {false, true}) {
        INFO("per_channel " << per_channel);
        Graph g = linear_graph();
        DynamicQuantizeOptions o;
        o.per_channel = per_channel;
        (void)quantize_dynamic(g, o).value_or_throw();
        const std::vector<NamedTensor> unfused = run(g, {"reference"}, 0, 1);
        for (int threads : {1, 2}) {
            std::vector<std::string> ops, providers;
            const std::vector<NamedTensor> fused = run(g, {"onednn", "cpu"}, 3, threads, &ops, &providers);
            int fused_ops = 0;
            for (std::size_t i = 0; i < ops.size(); ++i) {
                CHECK(ops[i] != "MatMulInteger");
                if (ops[i] == "DynamicQuantizeMatMul" || ops[i] == "MatMulIntegerToFloat") {
                    ++fused_ops;
                    CHECK(providers[i] == "cpu");
                }
            }
            CHECK(fused_ops == 3);
            REQUIRE(fused.size() == unfused.size());
            for (std::size_t k = 0; k < fused.size(); ++k) {
                REQUIRE(fused[k].tensor.shape() == unfused[k].tensor.shape());
                CHECK(std::memcmp(fused[k].tensor.raw_data(), unfused[k].tensor.raw_data(),
                                  fused[k].tensor.num_bytes()) == 0);
            }
        }
        for (std::size_t k = 0; k < want.size(); ++k) {
            INFO("output " << want[k].name);
            CHECK(rel_l2(unfused[k].tensor, want[k].tensor) < 0.02);
        }
    }
}

TEST_CASE("quantize_dynamic leaves alone what it must", "[quantize_dynamic]") {
    SECTION("MatMul of two activations, Gemm with alpha, a weight holding NaN, excluded nodes") {
        Graph g;
        g.opset_imports = {{"", 13}};
        const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{4, 4}));
        g.inputs.push_back(x);
        Tensor nan_w = random_f32({4, 4}, 9);
        nan_w.data<float>()[5] = std::nanf("");
        const ValueId wn = g.add_initializer("Wnan", nan_w);
        const ValueId wa = g.add_initializer("Walpha", random_f32({4, 4}, 10));
        const ValueId we = g.add_initializer("Wex", random_f32({4, 4}, 11));
        const ValueId a = g.add_value("a"), b = g.add_value("b"), c = g.add_value("c");
        const ValueId d = g.add_value("d", DType::f32);
        g.add_node("MatMul", {x, x}, {a}, "xx");
        g.add_node("MatMul", {a, wn}, {b}, "nan_weight");
        g.add_node("Gemm", {b, wa}, {c}, "alpha").attributes = {{"alpha", attr_f(0.5f)}};
        g.add_node("MatMul", {c, we}, {d}, "excluded");
        g.outputs = {d};
        REQUIRE(g.sort_topologically().is_ok());
        DynamicQuantizeOptions o;
        o.exclude = {"excluded"};
        const DynamicQuantizeReport r = quantize_dynamic(g, o).value_or_throw();
        CHECK(r.matmuls + r.gemms == 0);
        CHECK(r.skipped.size() == 3);  // the activation x activation MatMul is no candidate
        CHECK(count(g, "MatMul") == 3);
        CHECK(count(g, "Gemm") == 1);
        CHECK(count(g, "DynamicQuantizeLinear") == 0);
    }
    SECTION("a graph holding quantized operators is not quantized again") {
        Graph g = linear_graph();
        (void)quantize_dynamic(g).value_or_throw();
        const std::size_t nodes = g.nodes.size();
        const DynamicQuantizeReport again = quantize_dynamic(g).value_or_throw();
        CHECK(again.already_quantized);
        CHECK(again.matmuls == 0);
        CHECK(g.nodes.size() == nodes);
    }
    SECTION("opset 10 has no DynamicQuantizeLinear: unsupported, graph untouched") {
        Graph g = linear_graph(10);
        const auto r = quantize_dynamic(g);
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.status().code() == ErrorCode::unsupported);
        CHECK(count(g, "MatMul") == 2);
    }
}
