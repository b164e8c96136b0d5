// BAD_INPUTS section D: bad operator attributes and constant data give invalid_model at load
// (schema-level validation in kernel creation or load-time inference), and data-dependent
// errors give invalid_argument at run — never a crash or an out-of-bounds read.
#include <catch2/catch.hpp>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

using dsinfer::test::i64_tensor;


/// x float[2,3] -> op(x, extra initializers...) -> y
onnx::ModelProto unary_model(const std::string& op, const std::vector<onnx::TensorProto>& inits = {},
                             int opset = 13) {
    onnx::ModelProto m = relu_model();
    m.mutable_opset_import(0)->set_version(opset);
    auto* g = m.mutable_graph();
    g->clear_input();
    g->clear_output();
    g->clear_node();
    *g->add_input() = tensor_info("x", 1, {2, 3});
    g->add_output()->set_name("y");
    std::vector<std::string> ins{"x"};
    for (const auto& t : inits) {
        *g->add_initializer() = t;
        ins.push_back(t.name());
    }
    add_node(*g, op, ins, {"y"}, "op");
    return m;
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}
void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

}  // namespace

TEST_CASE("D: Transpose perm that is not a permutation is invalid_model", "[ops][bad]") {
    auto m = unary_model("Transpose");
    set_ints(m.mutable_graph()->mutable_node(0), "perm", {0, 0});
    CHECK(load_code(m) == ErrorCode::invalid_model);
    auto m2 = unary_model("Transpose");
    set_ints(m2.mutable_graph()->mutable_node(0), "perm", {0, 5});
    CHECK(load_code(m2) == ErrorCode::invalid_model);
}

TEST_CASE("D: axis outside the valid range is invalid_model", "[ops][bad]") {
    auto m = unary_model("Softmax");
    set_int(m.mutable_graph()->mutable_node(0), "axis", 7);
    CHECK(load_code(m) == ErrorCode::invalid_model);
    auto f = unary_model("Flatten");
    set_int(f.mutable_graph()->mutable_node(0), "axis", -9);
    CHECK(load_code(f) == ErrorCode::invalid_model);
}

TEST_CASE("D: zero stride / zero dilation / bad group in Conv are invalid_model", "[ops][bad]") {
    onnx::TensorProto w = float_tensor("W", {2, 1, 1, 1}, {1, 1});
    for (const char* attr : {"strides", "dilations"}) {
        onnx::ModelProto m = unary_model("Conv", {w});
        auto* g = m.mutable_graph();
        g->mutable_input(0)->CopyFrom(tensor_info("x", 1, {1, 1, 4, 4}));
        set_ints(g->mutable_node(0), attr, {0, 1});
        INFO(attr);
        CHECK(load_code(m) == ErrorCode::invalid_model);
    }
    onnx::ModelProto m = unary_model("Conv", {w});
    m.mutable_graph()->mutable_input(0)->CopyFrom(tensor_info("x", 1, {1, 1, 4, 4}));
    set_int(m.mutable_graph()->mutable_node(0), "group", 0);
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("D: constant Gather indices out of range are invalid_model at load", "[ops][bad]") {
    auto m = unary_model("Gather", {i64_tensor("idx", {1}, {5})});
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("D: data-dependent Gather indices out of range are invalid_argument at run", "[ops][bad]") {
    onnx::ModelProto m = unary_model("Gather");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("idx", 7, {1});
    g->mutable_node(0)->add_input("idx");
    const std::string b = bytes_of(m);
    auto e = InferenceEngine::compile(load_onnx_from_bytes(b.data(), b.size()));
    std::vector<NamedTensor> out;
    for (std::int64_t bad : {std::int64_t{2}, std::int64_t{-3}, INT64_MAX, INT64_MIN}) {
        INFO("index " << bad);
        Status st = e.try_run({{"x", Tensor::zeros(DType::f32, {2, 3})},
                               {"idx", Tensor::from_vector<std::int64_t>({1}, {bad})}},
                              out);
        CHECK(st.code() == ErrorCode::invalid_argument);
    }
    Status ok = e.try_run({{"x", Tensor::zeros(DType::f32, {2, 3})},
                           {"idx", Tensor::from_vector<std::int64_t>({1}, {-1})}},
                          out);
    CHECK(ok.is_ok());
}

TEST_CASE("D: Reshape to a different element count is invalid_model", "[ops][bad]") {
    auto m = unary_model("Reshape", {i64_tensor("shape", {2}, {4, 4})});
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("D: quantization scale 0 / negative or NaN is invalid_model", "[ops][bad]") {
    for (float s : {0.0f, -1.0f, std::nanf("")}) {
        INFO("scale " << s);
        auto m = unary_model("QuantizeLinear", {float_tensor("scale", {}, {s})});
        m.mutable_graph()->mutable_output(0)->set_name("y");
        CHECK(load_code(m) == ErrorCode::invalid_model);
    }
}

TEST_CASE("D: Split with zero outputs or mismatched split sizes is invalid_model", "[ops][bad]") {
    auto m = unary_model("Split", {i64_tensor("split", {2}, {1, 5})});
    set_int(m.mutable_graph()->mutable_node(0), "axis", 1);
    m.mutable_graph()->mutable_node(0)->add_output("y2");
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("D: integer division by zero is invalid_argument / never UB", "[ops][bad]") {
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_input();
    g->clear_output();
    g->clear_node();
    *g->add_input() = tensor_info("a", 6, {2});
    *g->add_input() = tensor_info("b", 6, {2});
    *g->add_output() = tensor_info("c", 6, {2});
    add_node(*g, "Div", {"a", "b"}, {"c"});
    const std::string bytes = bytes_of(m);
    auto e = InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()));
    std::vector<NamedTensor> out;
    Status st = e.try_run({{"a", Tensor::from_vector<std::int32_t>({2}, {INT32_MIN, 4})},
                           {"b", Tensor::from_vector<std::int32_t>({2}, {-1, 0})}},
                          out);
    CHECK(st.code() == ErrorCode::invalid_argument);
}
