// InferenceEngine: run-time input validation (BAD_INPUTS section E), zero-size dims,
// concurrent run() on one engine, graph I/O edge cases.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <thread>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

InferenceEngine engine_of(const onnx::ModelProto& m) {
    const std::string b = bytes_of(m);
    return InferenceEngine::compile(load_onnx_from_bytes(b.data(), b.size()));
}

/// x float[batch,4] + y float[batch,4] -> z
onnx::ModelProto add_model() {
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_input();
    g->clear_output();
    g->clear_node();
    *g->add_input() = tensor_info("x", 1, {-1, 4});
    *g->add_input() = tensor_info("y", 1, {-1, 4});
    *g->add_output() = tensor_info("z", 1, {-1, 4});
    add_node(*g, "Add", {"x", "y"}, {"z"}, "add");
    return m;
}

ErrorCode run_code(const InferenceEngine& e, const std::vector<NamedTensor>& in,
                   std::string* msg = nullptr) {
    std::vector<NamedTensor> out;
    Status st = e.try_run(in, out);
    if (msg) *msg = st.message();
    return st.code();
}

Tensor f32(const Shape& s, float v = 1.0f) {
    Tensor t = Tensor::empty(DType::f32, s);
    for (auto& x : t.span<float>()) x = v;
    return t;
}

}  // namespace

TEST_CASE("engine runs a model and reports its signature", "[engine]") {
    auto e = engine_of(add_model());
    REQUIRE(e.inputs().size() == 2);
    CHECK(e.inputs()[0].name == "x");
    CHECK(e.inputs()[0].dtype == DType::f32);
    CHECK(e.inputs()[0].shape.to_string() == "[batch,4]");
    auto out = e.run({{"x", f32({3, 4}, 1.5f)}, {"y", f32({3, 4}, 2.0f)}});
    REQUIRE(out.size() == 1);
    CHECK(out[0].name == "z");
    CHECK(out[0].tensor.shape() == Shape{3, 4});
    for (float v : out[0].tensor.span<float>()) CHECK(v == 3.5f);
}

TEST_CASE("E: missing / unknown and duplicate input names are invalid_argument", "[engine][bad]") {
    auto e = engine_of(add_model());
    std::string msg;
    CHECK(run_code(e, {{"x", f32({1, 4})}}, &msg) == ErrorCode::invalid_argument);
    CHECK(msg.find("missing 'y'") != std::string::npos);
    CHECK(run_code(e, {{"x", f32({1, 4})}, {"y", f32({1, 4})}, {"w", f32({1, 4})}}, &msg) ==
          ErrorCode::invalid_argument);
    CHECK(msg.find("unknown 'w'") != std::string::npos);
    CHECK(run_code(e, {{"x", f32({1, 4})}, {"x", f32({1, 4})}, {"y", f32({1, 4})}}, &msg) ==
          ErrorCode::invalid_argument);
    CHECK(msg.find("more than once 'x'") != std::string::npos);
}

TEST_CASE("E: dtype / rank and dim mismatches are invalid_argument naming the input", "[engine][bad]") {
    auto e = engine_of(add_model());
    std::string msg;
    CHECK(run_code(e, {{"x", Tensor::zeros(DType::i64, {1, 4})}, {"y", f32({1, 4})}}, &msg) ==
          ErrorCode::invalid_argument);
    CHECK(msg.find("input 'x'") != std::string::npos);
    CHECK(msg.find("float32") != std::string::npos);
    CHECK(run_code(e, {{"x", f32({4})}, {"y", f32({1, 4})}}, &msg) == ErrorCode::invalid_argument);
    CHECK(msg.find("rank") != std::string::npos);
    CHECK(run_code(e, {{"x", f32({1, 5})}, {"y", f32({1, 5})}}, &msg) == ErrorCode::invalid_argument);
    CHECK(msg.find("must be 4") != std::string::npos);
    // The symbolic 'batch' dim must bind to one value across inputs.
    CHECK(run_code(e, {{"x", f32({2, 4})}, {"y", f32({3, 4})}}, &msg) == ErrorCode::invalid_argument);
    CHECK(msg.find("batch") != std::string::npos);
    CHECK(run_code(e, {{"x", Tensor()}, {"y", f32({1, 4})}}, &msg) == ErrorCode::invalid_argument);
}

TEST_CASE("E: caller buffers are checked against their declared shape", "[engine][bad]") {
    std::vector<float> buf(8);
    auto bad = Tensor::wrap_checked(buf.data(), 7 * sizeof(float), DType::f32, Shape{2, 4});
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().code() == ErrorCode::invalid_argument);
    CHECK(bad.status().message().find("expected 32 bytes, got 28") != std::string::npos);
    auto null = Tensor::wrap_checked(nullptr, 32, DType::f32, Shape{2, 4});
    CHECK(null.status().code() == ErrorCode::invalid_argument);
    auto ok = Tensor::wrap_checked(buf.data(), 32, DType::f32, Shape{2, 4});
    REQUIRE(ok.is_ok());
    CHECK(ok.value().raw_data() == buf.data());
}

TEST_CASE("E: zero-size batch returns correctly shaped empty outputs", "[engine]") {
    auto e = engine_of(add_model());
    auto out = e.run({{"x", f32({0, 4})}, {"y", f32({0, 4})}});
    REQUIRE(out.size() == 1);
    CHECK(out[0].tensor.shape() == Shape{0, 4});
}

TEST_CASE("graph outputs that are inputs or initializers are returned as copies", "[engine]") {
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    *g->add_output() = tensor_info("x", 1, {1, 4});
    auto e = engine_of(m);
    Tensor x = f32({1, 4}, -1.0f);
    auto out = e.run({{"x", x}});
    REQUIRE(out.size() == 2);
    CHECK(out[1].name == "x");
    CHECK(out[1].tensor.raw_data() != x.raw_data());
    CHECK(out[1].tensor.data<float>()[0] == -1.0f);
    CHECK(out[0].tensor.data<float>()[0] == 0.0f);
}

TEST_CASE("unsorted graphs run in dependency order", "[engine]") {
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    add_node(*g, "Relu", {"t"}, {"y"});
    add_node(*g, "Neg", {"x"}, {"t"});
    auto e = engine_of(m);
    auto out = e.run({{"x", f32({1, 4}, -2.0f)}});
    CHECK(out[0].tensor.data<float>()[0] == 2.0f);
}

TEST_CASE("concurrent run() calls on one engine are independent", "[engine][threads]") {
    auto e = engine_of(add_model());
    constexpr int kThreads = 8, kIters = 200;
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kIters; ++i) {
                const float a = static_cast<float>(t), b = static_cast<float>(i);
                const std::int64_t batch = 1 + (t + i) % 5;
                auto out = e.run({{"x", f32({batch, 4}, a)}, {"y", f32({batch, 4}, b)}});
                if (out[0].tensor.shape()[0] != batch) ++wrong;
                for (float v : out[0].tensor.span<float>())
                    if (v != a + b) ++wrong;
            }
        });
    }
    for (auto& th : threads) th.join();
    CHECK(wrong.load() == 0);
}

TEST_CASE("If selects a branch and reads outer-scope values", "[engine][control_flow]") {
    // y = If(c) then Relu(x) else Neg(x), both reading x from the outer graph.
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    *g->add_input() = tensor_info("c", 9, {});
    onnx::GraphProto then_g, else_g;
    then_g.set_name("then");
    add_node(then_g, "Relu", {"x"}, {"a"});
    *then_g.add_output() = tensor_info("a", 1, {1, 4});
    else_g.set_name("else");
    add_node(else_g, "Neg", {"x"}, {"b"});
    *else_g.add_output() = tensor_info("b", 1, {1, 4});
    auto* n = add_node(*g, "If", {"c"}, {"y"});
    auto* ta = n->add_attribute();
    ta->set_name("then_branch");
    ta->set_type(onnx::AttributeProto::GRAPH);
    *ta->mutable_g() = then_g;
    auto* ea = n->add_attribute();
    ea->set_name("else_branch");
    ea->set_type(onnx::AttributeProto::GRAPH);
    *ea->mutable_g() = else_g;
    auto e = engine_of(m);
    Tensor x = Tensor::from_vector<float>({1, 4}, {-1, 2, -3, 4});
    auto t = e.run({{"x", x}, {"c", Tensor::scalar<bool>(true)}});
    CHECK(t[0].tensor.data<float>()[0] == 0.0f);
    CHECK(t[0].tensor.data<float>()[1] == 2.0f);
    auto f = e.run({{"x", x}, {"c", Tensor::scalar<bool>(false)}});
    CHECK(f[0].tensor.data<float>()[0] == 1.0f);
    CHECK(f[0].tensor.data<float>()[1] == -2.0f);
    // A bool input byte other than 0/1 is not a bool: refused at binding (no kernel reads it).
    Tensor c = Tensor::scalar<bool>(true);
    *static_cast<std::uint8_t*>(c.raw_data()) = 0x81;
    std::vector<NamedTensor> out;
    const Status st = e.try_run({{"x", x}, {"c", c}}, out);
    CHECK(st.code() == ErrorCode::invalid_argument);
    CHECK_THAT(st.message(), Catch::Contains("input 'c'") && Catch::Contains("must be 0 or 1"));
}

TEST_CASE("E: an unknown DSINFER_MAX_CPU_ISA is invalid_argument naming the variable", "[engine][bad]") {
    const char* before = std::getenv("DSINFER_MAX_CPU_ISA");
    const std::string saved = before != nullptr ? before : "";
    setenv("DSINFER_MAX_CPU_ISA", "avx1024", 1);
    ErrorCode code = ErrorCode::ok;
    std::string message;
    try {
        (void)engine_of(relu_model());
    } catch (const Error& e) {
        code = e.code();
        message = e.message();
    }
    if (before != nullptr) setenv("DSINFER_MAX_CPU_ISA", saved.c_str(), 1);
    else unsetenv("DSINFER_MAX_CPU_ISA");
    CHECK(code == ErrorCode::invalid_argument);
    CHECK(message.find("DSINFER_MAX_CPU_ISA='avx1024'") != std::string::npos);
    // Valid again: the same model loads.
    CHECK_NOTHROW(engine_of(relu_model()));
}
