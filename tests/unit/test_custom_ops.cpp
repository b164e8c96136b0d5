// Custom operators: the registry's input dtype signature (KernelKey::input_dtypes) and an
// application's kernels through EngineOptions::custom_kernels (ops of its own domain, overrides
// of built-in ops, typed errors naming the node).
#include <catch2/catch.hpp>

#include <stdexcept>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/threads.hpp"
#include "runtime/parallel.hpp"

using namespace dsinfer;

namespace {

constexpr const char* kDomain = "com.example";

StatusOr<std::unique_ptr<Kernel>> unsupported_factory(const KernelCreateContext&) {
    return Status(ErrorCode::unsupported, "declined");
}
StatusOr<std::unique_ptr<Kernel>> other_factory(const KernelCreateContext&) {
    return Status(ErrorCode::unsupported, "other");
}

/// y = x * s[0] for float32 x and a scale s of any numeric type (input 1).
class ScaleKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        if (ctx.input(0).dtype() != DType::f32 || ctx.input(1).num_elements() < 1)
            return Status(ErrorCode::invalid_argument, "Scale wants float32 x and a scale");
        ctx.set_output(0, DType::f32, ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& s = ctx.input(1);
        float scale = 0.0f;
        switch (s.dtype) {
            case DType::i8: scale = static_cast<float>(s.data<std::int8_t>()[0]); break;
            case DType::f32: scale = s.data<float>()[0]; break;
            default: return Status(ErrorCode::unsupported, "scale type");
        }
        const float* x = ctx.input(0).data<float>();
        float* y = ctx.output(0).data<float>();
        for (std::int64_t i = 0; i < ctx.input(0).num_elements(); ++i) y[i] = x[i] * scale;
        return Status::ok();
    }
};

StatusOr<std::unique_ptr<Kernel>> make_scale(const KernelCreateContext&) {
    return std::unique_ptr<Kernel>(std::make_unique<ScaleKernel>());
}

/// Relu written by the application (float32), counting its runs.
std::atomic<int> app_relu_runs{0};
class AppRelu final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const float* x = ctx.input(0).data<float>();
        float* y = ctx.output(0).data<float>();
        for (std::int64_t i = 0; i < ctx.input(0).num_elements(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
        app_relu_runs.fetch_add(1, std::memory_order_relaxed);
        return Status::ok();
    }
};
/// Takes every Relu node but one named "builtin" (left to dsinfer's kernels).
StatusOr<std::unique_ptr<Kernel>> make_app_relu(const KernelCreateContext& ctx) {
    if (ctx.node().name == "builtin") return Status(ErrorCode::unsupported, "not this one");
    return std::unique_ptr<Kernel>(std::make_unique<AppRelu>());
}

/// A kernel whose prepare fails: always, or only at run time (not during load-time inference).
template <bool kAtLoadToo>
class FailingPrepare final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        if (kAtLoadToo || !ctx.inferring())
            return Status(ErrorCode::invalid_argument, "the app's prepare rejects this input");
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext&) const noexcept override { return Status::ok(); }
};
template <bool kAtLoadToo>
StatusOr<std::unique_ptr<Kernel>> make_failing(const KernelCreateContext&) {
    return std::unique_ptr<Kernel>(std::make_unique<FailingPrepare<kAtLoadToo>>());
}

/// Throws from prepare at run time, as an application's kernel might (run() is noexcept).
class ThrowingPrepare final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        if (!ctx.inferring()) throw std::runtime_error("the app's prepare threw");
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext&) const noexcept override { return Status::ok(); }
};
StatusOr<std::unique_ptr<Kernel>> make_throwing(const KernelCreateContext&) {
    return std::unique_ptr<Kernel>(std::make_unique<ThrowingPrepare>());
}

SymbolicShape dims(std::vector<Dim> d) {
    SymbolicShape s;
    s.known = true;
    s.dims = std::move(d);
    return s;
}

/// x float[batch, 4] -> domain::op -> y (the domain imported at version 1 unless `import_domain`
/// is false).
Graph one_op_graph(const std::string& op, const std::string& domain, bool import_domain = true,
                   Dim batch = Dim::named("batch")) {
    Graph g;
    g.opset_imports = {{"", 17}};
    if (import_domain && !domain.empty()) g.opset_imports.push_back({domain, 1});
    const auto x = g.add_value("x", DType::f32, dims({std::move(batch), Dim::fixed(4)}));
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node(op, {x}, {y}, "n0").domain = domain;
    return g;
}

Tensor ramp(const Shape& s) {
    Tensor t = Tensor::empty(DType::f32, s);
    auto v = t.span<float>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 3.0f;
    return t;
}

const std::string& provider_of(const InferenceEngine& e, const std::string& node) {
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i)
        if (e.graph().nodes[i].name == node) return e.node_providers()[i];
    FAIL("no node named " << node);
    static const std::string none;
    return none;
}

}  // namespace

TEST_CASE("registry picks kernels by the whole input dtype signature", "[custom_ops][registry]") {
    KernelRegistry r;
    KernelKey f32f32{"MatMul", "", 1, kMaxOpset};
    f32f32.input_dtypes = {DTypeSet{DType::f32}, DTypeSet{DType::f32}};
    KernelKey f32i8{"MatMul", "", 1, kMaxOpset};
    f32i8.input_dtypes = {DTypeSet{DType::f32}, DTypeSet{DType::i8}};
    r.add(f32f32, &unsupported_factory, 5, "f32xf32");
    r.add(f32i8, &other_factory, 5, "f32xi8");
    r.add({"MatMul", "", 1, kMaxOpset}, &unsupported_factory, 0, "generic");

    using Sig = std::array<std::optional<DType>, 2>;
    const Sig ff{DType::f32, DType::f32}, fi{DType::f32, DType::i8}, fh{DType::f32, DType::f16};
    REQUIRE(r.find("MatMul", "", 13, DeviceKind::cpu, ff) != nullptr);
    CHECK(r.find("MatMul", "", 13, DeviceKind::cpu, ff)->provider == "f32xf32");
    CHECK(r.find("MatMul", "", 13, DeviceKind::cpu, fi)->provider == "f32xi8");
    // A signature no specific entry takes falls through to the next matching entry.
    auto all = r.find_all("MatMul", "", 13, DeviceKind::cpu, fh);
    REQUIRE(all.size() == 1);
    CHECK(all[0]->provider == "generic");
    all = r.find_all("MatMul", "", 13, DeviceKind::cpu, fi);
    REQUIRE(all.size() == 2);
    CHECK(all[0]->provider == "f32xi8");
    CHECK(all[1]->provider == "generic");
    // Unknown or omitted inputs match every entry.
    const Sig f_unknown{DType::f32, std::nullopt};
    CHECK(r.find_all("MatMul", "", 13, DeviceKind::cpu, f_unknown).size() == 3);
    // Input 0 alone (the built-in backends' key) still works.
    CHECK(r.find_all("MatMul", "", 13, DeviceKind::cpu, DType::f32).size() == 3);
    CHECK(r.find_all("MatMul", "", 13, DeviceKind::cpu, DType::i8).size() == 1);

    SECTION("unlisted positions match anything") {
        KernelRegistry q;
        KernelKey k{"Scale", kDomain, 1, kMaxOpset};
        k.input_dtypes = {DTypeSet{DType::f32}};  // input 1 unconstrained
        q.add(k, &unsupported_factory, 0, "app");
        const Sig fi8{DType::f32, DType::i8}, if32{DType::i32, DType::f32};
        CHECK(q.find("Scale", kDomain, 1, DeviceKind::cpu, fi8) != nullptr);
        CHECK(q.find("Scale", kDomain, 1, DeviceKind::cpu, if32) == nullptr);
        // KernelKey::dtypes (input 0) and input_dtypes[0] must both hold.
        KernelKey both{"Scale", kDomain, 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32, DType::f16}};
        both.input_dtypes = {DTypeSet{DType::f16, DType::i8}};
        KernelRegistry b;
        b.add(both, &unsupported_factory);
        CHECK(b.find("Scale", kDomain, 1, DeviceKind::cpu, DType::f16) != nullptr);
        CHECK(b.find("Scale", kDomain, 1, DeviceKind::cpu, DType::f32) == nullptr);
        CHECK(b.find("Scale", kDomain, 1, DeviceKind::cpu, DType::i8) == nullptr);
    }
    SECTION("a node's signature comes from its graph") {
        Graph g;
        const auto x = g.add_value("x", DType::f32);
        const auto w = g.add_value("w", DType::i8);
        const auto y = g.add_value("y");
        Node& n = g.add_node("MatMul", {x, w}, {y});
        CHECK(r.find_all(g, n, 13, DeviceKind::cpu).front()->provider == "f32xi8");
        g.value(w).dtype = DType::f32;
        CHECK(r.find_all(g, n, 13, DeviceKind::cpu).front()->provider == "f32xf32");
        g.value(w).dtype.reset();
        CHECK(r.find_all(g, n, 13, DeviceKind::cpu).size() == 3);
        CHECK(r.find_all(g, n, 13, DeviceKind::cuda).empty());
    }
}

TEST_CASE("registry rejects a null factory and an empty signature set", "[custom_ops][registry][bad]") {
    KernelRegistry r;
    try {
        r.add({"Swish", kDomain, 1, kMaxOpset}, nullptr, 0, "app");
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("com.example::Swish") != std::string::npos);
        CHECK(std::string(e.what()).find("null factory") != std::string::npos);
    }
    KernelKey k{"Swish", kDomain, 1, kMaxOpset};
    k.input_dtypes = {DTypeSet{}};
    CHECK_THROWS_AS(r.add(k, &unsupported_factory), Error);
    CHECK_THROWS_AS(r.add({"Swish", kDomain, 3, 2}, &unsupported_factory), Error);
    CHECK_THROWS_AS(r.add({"", kDomain, 1, 2}, &unsupported_factory), Error);
    CHECK(r.entries().empty());
}

TEST_CASE("engine runs a custom-domain op with the application's kernel", "[custom_ops][engine]") {
    // x -> com.example::Scale(x, s_i8) -> a -> com.example::Scale(a, s_f32) -> y: the two
    // registrations differ only by input 1's dtype.
    Graph g;
    g.opset_imports = {{"", 17}, {kDomain, 1}};
    const auto x = g.add_value("x", DType::f32, dims({Dim::named("batch"), Dim::fixed(4)}));
    const auto s8 = g.add_initializer("s8", Tensor::from_vector(Shape{1}, std::vector<std::int8_t>{3}));
    const auto sf = g.add_initializer("sf", Tensor::from_vector(Shape{1}, std::vector<float>{0.5f}));
    const auto a = g.add_value("a");
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node("Scale", {x, s8}, {a}, "by_i8").domain = kDomain;
    g.add_node("Scale", {a, sf}, {y}, "by_f32").domain = kDomain;

    auto kernels = std::make_shared<KernelRegistry>();
    KernelKey ki8{"Scale", kDomain, 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}};
    ki8.input_dtypes = {DTypeSet::all(), DTypeSet{DType::i8}};
    KernelKey kf32 = ki8;
    kf32.input_dtypes[1] = DTypeSet{DType::f32};
    kernels->add(ki8, &make_scale, 0, "app_i8");
    kernels->add(kf32, &make_scale, 0, "app_f32");
    EngineOptions o;
    o.custom_kernels = kernels;

    auto check = [](const InferenceEngine& e) {
        CHECK(provider_of(e, "by_i8") == "app_i8");
        CHECK(provider_of(e, "by_f32") == "app_f32");
        // Shapes inferred through the kernel's prepare at load.
        CHECK(e.outputs().at(0).shape.to_string() == "[batch,4]");
        const Tensor in = ramp({2, 4});
        const auto out = e.run({{"x", in}});
        REQUIRE(out.size() == 1);
        REQUIRE(out[0].tensor.shape() == Shape{2, 4});
        for (std::size_t i = 0; i < 8; ++i)
            CHECK(out[0].tensor.span<float>()[i] == in.span<float>()[i] * 1.5f);
    };
    SECTION("compiled from a Graph") { check(InferenceEngine::compile(g, o)); }
    SECTION("loaded from an ONNX file (the loader keeps the custom domain)") {
        const auto path = std::filesystem::temp_directory_path() /
                          ("dsinfer_custom_ops_" + std::to_string(::getpid()) + ".onnx");
        save_onnx(g, path);
        auto e = InferenceEngine::load(path, o);
        std::filesystem::remove(path);
        check(e);
    }
}

TEST_CASE("an application kernel overrides a built-in op for its signature", "[custom_ops][engine]") {
    // x -> Relu "mine" -> a -> Relu "builtin" -> y
    Graph g;
    g.opset_imports = {{"", 17}};
    const auto x = g.add_value("x", DType::f32, dims({Dim::fixed(2), Dim::fixed(4)}));
    const auto a = g.add_value("a");
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node("Relu", {x}, {a}, "mine");
    g.add_node("Relu", {a}, {y}, "builtin");
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add({"Relu", "", 6, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}}, &make_app_relu,
                 0, "myapp");
    EngineOptions o;
    o.custom_kernels = kernels;
    o.optimization_level = 0;  // keep both Relu nodes
    auto e = InferenceEngine::compile(g, o);
    CHECK(provider_of(e, "mine") == "myapp");
    // The factory declined this node: dsinfer's own kernel runs it.
    CHECK(provider_of(e, "builtin") != "myapp");
    const int before = app_relu_runs.load();
    const auto out = e.run({{"x", ramp({2, 4})}});
    CHECK(app_relu_runs.load() == before + 1);
    for (std::size_t i = 0; i < 8; ++i)
        CHECK(out[0].tensor.span<float>()[i] == std::max(0.0f, static_cast<float>(i) - 3.0f));

    SECTION("another signature keeps the built-in kernel") {
        Graph d = g;
        d.values[static_cast<std::size_t>(x)].dtype = DType::f64;
        d.values[static_cast<std::size_t>(y)].dtype = DType::f64;
        auto e64 = InferenceEngine::compile(d, o);
        CHECK(provider_of(e64, "mine") != "myapp");
    }
}

TEST_CASE("the application's kernels keep their own priority order and fall through", "[custom_ops][engine]") {
    auto kernels = std::make_shared<KernelRegistry>();
    const KernelKey key{"Relu", "", 6, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}};
    kernels->add(key, &unsupported_factory, std::numeric_limits<int>::max(), "declines");
    kernels->add(key, &make_app_relu, 1, "second");
    kernels->add(key, &make_app_relu, std::numeric_limits<int>::min(), "last");
    EngineOptions o;
    o.custom_kernels = kernels;
    auto e = InferenceEngine::compile(one_op_graph("Relu", ""), o);
    CHECK(provider_of(e, "n0") == "second");
    const auto out = e.run({{"x", ramp({1, 4})}});
    CHECK(out[0].tensor.span<float>()[0] == 0.0f);
    CHECK(out[0].tensor.span<float>()[3] == 0.0f);
}

TEST_CASE("the optimizer infers shapes through the application's kernels", "[custom_ops][engine]") {
    // x float[2, 4] -> com.example::Positive -> a -> Shape -> s; Reshape(a, s) -> y. Constant
    // folding turns Shape(a) into a constant only when the optimizer's shape annotation knows
    // a's shape, which only the application's prepare gives.
    Graph g;
    g.opset_imports = {{"", 17}, {kDomain, 1}};
    const auto x = g.add_value("x", DType::f32, dims({Dim::fixed(2), Dim::fixed(4)}));
    const auto a = g.add_value("a");
    const auto s = g.add_value("s");
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node("Positive", {x}, {a}, "positive").domain = kDomain;
    g.add_node("Shape", {a}, {s}, "shape");
    g.add_node("Reshape", {a, s}, {y}, "reshape");
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add({"Positive", kDomain, 1, kMaxOpset}, &make_app_relu, 0, "app");
    EngineOptions o;
    o.custom_kernels = kernels;
    auto e = InferenceEngine::compile(g, o);
    for (const Node& n : e.graph().nodes) CHECK(n.op_type != "Shape");
    CHECK(provider_of(e, "positive") == "app");
    const auto out = e.run({{"x", ramp({2, 4})}});
    REQUIRE(out[0].tensor.shape() == Shape{2, 4});
    CHECK(out[0].tensor.span<float>()[7] == 4.0f);
}

TEST_CASE("a custom kernel's failing prepare is a typed error naming the node", "[custom_ops][engine][bad]") {
    SECTION("at load, when the input shapes are static") {
        // Load-time inference runs prepare on the declared shapes: an input it rejects makes
        // the model invalid. (With symbolic dims, load-time failures only leave shapes
        // unknown: the placeholders may be what it rejects; the run reports the error.)
        auto kernels = std::make_shared<KernelRegistry>();
        kernels->add({"Fails", kDomain, 1, kMaxOpset}, &make_failing<true>, 0, "app");
        EngineOptions o;
        o.custom_kernels = kernels;
        try {
            (void)InferenceEngine::compile(one_op_graph("Fails", kDomain, true, Dim::fixed(2)), o);
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_model);
            CHECK(std::string(e.what()).find("node 'n0'") != std::string::npos);
            CHECK(std::string(e.what()).find("rejects this input") != std::string::npos);
        }
    }
    SECTION("at run") {
        auto kernels = std::make_shared<KernelRegistry>();
        const bool at_load_too = GENERATE(false, true);  // symbolic batch: load succeeds either way
        kernels->add({"Fails", kDomain, 1, kMaxOpset},
                     at_load_too ? &make_failing<true> : &make_failing<false>, 0, "app");
        EngineOptions o;
        o.custom_kernels = kernels;
        auto e = InferenceEngine::compile(one_op_graph("Fails", kDomain), o);
        std::vector<NamedTensor> out;
        const Status st = e.try_run({{"x", ramp({1, 4})}}, out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK(st.message().find("node 'n0'") != std::string::npos);
    }
}

TEST_CASE("a custom kernel whose prepare throws is an internal error naming the node",
          "[custom_ops][engine][bad]") {
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add({"Throws", kDomain, 1, kMaxOpset}, &make_throwing, 0, "app");
    EngineOptions o;
    o.custom_kernels = kernels;
    auto e = InferenceEngine::compile(one_op_graph("Throws", kDomain), o);
    for (int r = 0; r < 2; ++r) {  // the engine stays usable
        std::vector<NamedTensor> out;
        const Status st = e.try_run({{"x", ramp({2, 4})}}, out);
        CHECK(st.code() == ErrorCode::internal);
        CHECK(st.message().find("node 'n0'") != std::string::npos);
        CHECK(st.message().find("the app's prepare threw") != std::string::npos);
    }
}

TEST_CASE("a custom op without a kernel is unsupported, naming the op and its domain", "[custom_ops][engine][bad]") {
    try {
        (void)InferenceEngine::compile(one_op_graph("Nope", kDomain), EngineOptions{});
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
        const std::string m = e.what();
        CHECK(m.find("Nope") != std::string::npos);
        CHECK(m.find("com.example") != std::string::npos);
    }
    // A kernel exists, but the model does not import its domain.
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add({"Nope", kDomain, 1, kMaxOpset}, &make_failing<false>, 0, "app");
    EngineOptions o;
    o.custom_kernels = kernels;
    try {
        (void)InferenceEngine::compile(one_op_graph("Nope", kDomain, false), o);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
        CHECK(std::string(e.what()).find("com.example") != std::string::npos);
    }
}

namespace {

/// The attributes of com.example::Shift: y = x + by.
struct ShiftAttrs {
    float by = 0.f;
};
std::atomic<int> shift_parses{0};
std::atomic<int> shift_chain_parses{-1};  ///< parses while the outer kernel's chain was made
std::atomic<bool> shift_same_struct{false};
const ShiftAttrs* shift_inner_attrs = nullptr;

Attribute float_attr(float v) {
    Attribute a;
    a.kind = AttrKind::f;
    a.f = v;
    return a;
}

StatusOr<ShiftAttrs> parse_shift(const KernelCreateContext& ctx) {
    shift_parses.fetch_add(1);
    ShiftAttrs a;
    DSINFER_ASSIGN_OR_RETURN(a.by, ctx.node().attr<float>("by"));
    if (!(a.by == a.by)) return Status(ErrorCode::invalid_model, "attribute 'by' is NaN");
    return a;
}

class ShiftKernel final : public Kernel {
public:
    explicit ShiftKernel(float by) : by_(by) {}
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, DType::f32, ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const float* x = ctx.input(0).data<float>();
        float* y = ctx.output(0).data<float>();
        for (std::int64_t i = 0; i < ctx.input(0).num_elements(); ++i) y[i] = x[i] + by_;
        return Status::ok();
    }

private:
    float by_;
};

/// The lower-priority kernel: parses the attributes (its factory runs first, as the outer
/// kernel's fallback).
StatusOr<std::unique_ptr<Kernel>> make_inner_shift(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto a, ctx.parsed_attributes<ShiftAttrs>(&parse_shift));
    shift_inner_attrs = a.get();
    return std::unique_ptr<Kernel>(std::make_unique<ShiftKernel>(a->by));
}
/// The higher-priority kernel: creates its fallback first, then asks for the same attributes.
StatusOr<std::unique_ptr<Kernel>> make_outer_shift(const KernelCreateContext& ctx) {
    const int before = shift_parses.load();
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(auto a, ctx.parsed_attributes<ShiftAttrs>(&parse_shift));
    shift_chain_parses.store(shift_parses.load() - before);
    shift_same_struct.store(a.get() == shift_inner_attrs);
    return std::unique_ptr<Kernel>(std::make_unique<ShiftKernel>(a->by));
}

}  // namespace

TEST_CASE("a node's attributes are parsed once for its whole fallback chain", "[custom_ops][engine]") {
    auto kernels = std::make_shared<KernelRegistry>();
    const KernelKey key{"Shift", kDomain, 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}};
    kernels->add(key, &make_outer_shift, 10, "outer");
    kernels->add(key, &make_inner_shift, 1, "inner");
    EngineOptions o;
    o.custom_kernels = kernels;
    Graph g = one_op_graph("Shift", kDomain);
    g.nodes[0].attributes.push_back({"by", float_attr(2.5f)});

    SECTION("the outer kernel gets the struct its fallback parsed") {
        shift_chain_parses.store(-1);
        auto e = InferenceEngine::compile(g, o);
        CHECK(provider_of(e, "n0") == "outer");
        CHECK(shift_chain_parses.load() == 1);
        CHECK(shift_same_struct.load());
        const auto out = e.run({{"x", ramp({1, 4})}});
        CHECK(out[0].tensor.span<float>()[0] == -3.0f + 2.5f);
    }
    SECTION("a bad attribute fails once, typed, naming the node; nothing is kept") {
        g.nodes[0].attributes.back().second = float_attr(std::numeric_limits<float>::quiet_NaN());
        try {
            (void)InferenceEngine::compile(g, o);
            FAIL("compiled a NaN shift");
        } catch (const Error& err) {
            CHECK(err.code() == ErrorCode::invalid_model);
            CHECK_THAT(err.what(), Catch::Contains("n0") && Catch::Contains("'by' is NaN"));
        }
    }
    SECTION("outside an engine, one context parses once") {
        const KernelCreateContext ctx(g.nodes[0], g, 1, {nullptr});
        const int before = shift_parses.load();
        auto a = ctx.parsed_attributes<ShiftAttrs>(&parse_shift);
        auto b = ctx.parsed_attributes<ShiftAttrs>(&parse_shift);
        REQUIRE(a.is_ok());
        REQUIRE(b.is_ok());
        CHECK(a.value().get() == b.value().get());
        CHECK(a.value()->by == 2.5f);
        CHECK(shift_parses.load() == before + 1);
    }
}

namespace {

/// y = x, recording the intra-op threads its prepare and run were given.
std::atomic<int> seen_prepare_threads{0}, seen_run_threads{0};
class ThreadsSeen final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        seen_prepare_threads = detail::max_threads();
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        seen_run_threads = detail::max_threads();
        std::memcpy(ctx.output(0).raw, ctx.input(0).raw,
                    static_cast<std::size_t>(ctx.input(0).num_bytes()));
        return Status::ok();
    }
};

StatusOr<std::unique_ptr<Kernel>> make_threads_seen(const KernelCreateContext&) {
    return std::unique_ptr<Kernel>(std::make_unique<ThreadsSeen>());
}

}  // namespace

TEST_CASE("num_threads 0 runs a node too small for a second thread on the calling thread alone",
          "[custom_ops][engine][threads]") {
    Graph g;
    g.opset_imports = {{"", 17}, {kDomain, 1}};
    const auto x = g.add_value("x", DType::f32, dims({Dim::named("rows"), Dim::fixed(1024)}));
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node("ThreadsSeen", {x}, {y}, "seen").domain = kDomain;
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add(KernelKey{"ThreadsSeen", kDomain, 1, kMaxOpset}, &make_threads_seen, 0, "app");
    EngineOptions o;
    o.custom_kernels = kernels;
    // What a run with a budget of N threads gives a kernel (OMP_THREAD_LIMIT may cap it).
    const auto budget_of = [](int n) {
        detail::ThreadBudget b(n);
        return detail::max_threads();
    };
    const auto threads_for = [&](const InferenceEngine& e, std::int64_t rows) {
        seen_prepare_threads = seen_run_threads = -1;
        const auto out = e.run({{"x", Tensor::zeros(DType::f32, Shape{rows, 1024})}});
        REQUIRE(out.get("y").shape() == Shape{rows, 1024});
        // Prepared for this shape now (a new shape class) or earlier: run and prepare agree.
        if (seen_prepare_threads >= 0) CHECK(seen_prepare_threads == seen_run_threads);
        return seen_run_threads.load();
    };
    SECTION("num_threads 0: 4 K elements on one thread, 64 K on the processors available") {
        const InferenceEngine e = InferenceEngine::compile(g, o);
        CHECK(threads_for(e, 4) == 1);
        CHECK(threads_for(e, 64) == budget_of(0));
        CHECK(threads_for(e, 4) == 1);  // a planned run of the small shape class again
    }
    SECTION("an explicit num_threads is kept for every node") {
        o.num_threads = 2;
        const InferenceEngine e = InferenceEngine::compile(g, o);
        CHECK(threads_for(e, 4) == budget_of(2));
        CHECK(threads_for(e, 64) == budget_of(2));
    }
}

namespace {

/// y = x; its run records its threads, then waits (at most 5 s) until `rendezvous` runs have
/// arrived, so concurrent runs overlap for certain.
std::mutex meet_mu;
std::condition_variable meet_cv;
int meet_arrived = 0, meet_wanted = 0;
std::vector<int> meet_threads;
class Meet final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        std::memcpy(ctx.output(0).raw, ctx.input(0).raw,
                    static_cast<std::size_t>(ctx.input(0).num_bytes()));
        std::unique_lock<std::mutex> lock(meet_mu);
        meet_threads.push_back(detail::max_threads());
        ++meet_arrived;
        meet_cv.notify_all();
        meet_cv.wait_for(lock, std::chrono::seconds(5), [] { return meet_arrived >= meet_wanted; });
        return Status::ok();
    }
};

StatusOr<std::unique_ptr<Kernel>> make_meet(const KernelCreateContext&) {
    return std::unique_ptr<Kernel>(std::make_unique<Meet>());
}

}  // namespace

TEST_CASE("set_thread_budget shares helper threads among concurrent runs of every engine",
          "[custom_ops][engine][threads]") {
    REQUIRE_THROWS_AS(set_thread_budget(-1), Error);
    Graph g;
    g.opset_imports = {{"", 17}, {kDomain, 1}};
    const auto x = g.add_value("x", DType::f32, dims({Dim::fixed(4)}));
    const auto y = g.add_value("y", DType::f32);
    g.inputs = {x};
    g.outputs = {y};
    g.add_node("Meet", {x}, {y}, "meet").domain = kDomain;
    auto kernels = std::make_shared<KernelRegistry>();
    kernels->add(KernelKey{"Meet", kDomain, 1, kMaxOpset}, &make_meet, 0, "app");
    EngineOptions o;
    o.custom_kernels = kernels;
    o.num_threads = 3;
    // Two engines, each run wanting 3 threads, run at once.
    const InferenceEngine a = InferenceEngine::compile(g, o), b = InferenceEngine::compile(g, o);
    const auto both = [&] {
        {
            std::lock_guard<std::mutex> lock(meet_mu);
            meet_arrived = 0;
            meet_wanted = 2;
            meet_threads.clear();
        }
        const Tensor in = Tensor::zeros(DType::f32, Shape{4});
        std::thread other([&] { (void)b.run({{"x", in}}); });
        (void)a.run({{"x", in}});
        other.join();
        std::lock_guard<std::mutex> lock(meet_mu);
        std::vector<int> t = meet_threads;
        std::sort(t.begin(), t.end());
        return t;
    };
    const auto budget_of = [](int n) {
        detail::ThreadBudget tb(n);
        return detail::max_threads();
    };
    SECTION("no budget (the default): each run takes its num_threads") {
        set_thread_budget(0);
        CHECK(both() == std::vector<int>{budget_of(3), budget_of(3)});
    }
    SECTION("a budget of 3: the helpers (2) go to the run that comes first") {
        set_thread_budget(3);
        const std::vector<int> t = both();
        CHECK(t.size() == 2);
        CHECK(t[0] + t[1] == 2 + std::min(2, budget_of(3) - 1));  // 2 callers + 2 helpers
        CHECK(thread_budget_in_use() == 0);                        // all given back
    }
    SECTION("a budget of 1: every run on its caller alone") {
        set_thread_budget(1);
        CHECK(both() == std::vector<int>{1, 1});
    }
    set_thread_budget(0);
    CHECK(thread_budget() == 0);
}
