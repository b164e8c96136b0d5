// Level-2 fusions (src/passes/fuse_*.cpp) and the kernels of dsinfer's fused operators:
// each fusion fires where it should (report counts), leaves near-misses alone, and the fused
// graph computes what the unfused one does on every backend. Tolerance: level 3 vs level 0
// within 1e-4 relative (absolute floor 1e-5), float32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/dsinfer.hpp>

using namespace dsinfer;

namespace {

Tensor random_tensor(const Shape& s, std::uint32_t seed, float scale = 1.f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    Tensor t = Tensor::zeros(DType::f32, s);
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = d(rng);
    return t;
}

Tensor positive_tensor(const Shape& s, std::uint32_t seed) {
    Tensor t = random_tensor(s, seed);
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = 0.5f + std::abs(p[i]);
    return t;
}

Tensor scalar(float v) {
    Tensor t = Tensor::zeros(DType::f32, Shape{});
    *t.data<float>() = v;
    return t;
}

Tensor ints(std::vector<std::int64_t> v) {
    Tensor t = Tensor::zeros(DType::i64, Shape{static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
    return t;
}

SymbolicShape sym(std::vector<std::int64_t> dims) {
    SymbolicShape s;
    s.known = true;
    for (auto d : dims) s.dims.push_back(d < 0 ? Dim::named("batch") : Dim::fixed(d));
    return s;
}

Graph new_graph(int opset = 13) {
    Graph g;
    g.opset_imports.push_back({"", opset});
    return g;
}

Node& node(Graph& g, const char* op, std::vector<ValueId> in, std::vector<ValueId> out) {
    return g.add_node(op, std::move(in), std::move(out), std::string(op) + std::to_string(g.nodes.size()));
}

ValueId v(Graph& g, const std::string& name) { return g.add_value(name); }

void set_i(Node& n, const char* name, std::int64_t x) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = x;
    n.attributes.emplace_back(name, a);
}
void set_ints(Node& n, const char* name, std::vector<std::int64_t> x) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(x);
    n.attributes.emplace_back(name, a);
}
void set_f(Node& n, const char* name, float x) {
    Attribute a;
    a.kind = AttrKind::f;
    a.f = x;
    n.attributes.emplace_back(name, a);
}

struct Outcome {
    std::vector<NamedTensor> out;
    OptimizeReport report;
    std::size_t nodes = 0;
};

Outcome run(const Graph& g, const std::vector<NamedTensor>& in, int level,
            std::vector<std::string> backends = {}) {
    EngineOptions o;
    o.optimization_level = level;
    o.backends = std::move(backends);
    auto e = InferenceEngine::compile(g, o);
    Outcome r;
    r.out = e.run(in);
    // The second run uses the planned arena (in-place reuse included): it must agree exactly.
    const auto again = e.run(in);
    REQUIRE(again.size() == r.out.size());
    for (std::size_t k = 0; k < again.size(); ++k) {
        REQUIRE(again[k].tensor.num_bytes() == r.out[k].tensor.num_bytes());
        CHECK(std::memcmp(again[k].tensor.raw_data(), r.out[k].tensor.raw_data(),
                          again[k].tensor.num_bytes()) == 0);
    }
    // The input shape's bucket plan (measured at the bucket's edges) and, when the shape lies
    // inside its bucket, the shape's own plan, made when it came back (docs/MEMORY.md).
    CHECK(e.memory_plan_stats().shape_classes >= 1);
    CHECK(e.memory_plan_stats().shape_classes <= 2);
    r.report = e.optimization_report();
    r.nodes = e.graph().nodes.size();
    return r;
}

void require_close(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
        REQUIRE(a[k].tensor.shape() == b[k].tensor.shape());
        const float* x = a[k].tensor.data<float>();
        const float* y = b[k].tensor.data<float>();
        double worst = 0.0;
        for (std::int64_t i = 0; i < a[k].tensor.num_elements(); ++i) {
            const double err = std::abs(static_cast<double>(x[i]) - y[i]) /
                               std::max(1e-1, std::abs(static_cast<double>(y[i])));
            worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]) <= 1e-5 ? 0.0 : err);
        }
        INFO("output " << a[k].name << " worst relative error " << worst);
        CHECK(worst <= 1e-4);
    }
}

/// Level 3 against level 0 on the default backends and on the reference kernels.
Outcome check_levels(const Graph& g, const std::vector<NamedTensor>& in) {
    Outcome base = run(g, in, 0, {"reference"});
    Outcome fused = run(g, in, 3);
    require_close(fused.out, base.out);
    Outcome fused_ref = run(g, in, 3, {"reference"});
    require_close(fused_ref.out, base.out);
    Outcome plain = run(g, in, 0);
    require_close(plain.out, base.out);
    return fused;
}

/// A stem conv(3 -> c) + Relu, then a ResNet basic block on its output s:
/// conv -> BN -> Relu -> conv -> BN -> Add(s) -> Relu.
Graph resnet_block(int c = 16) {
    Graph g = new_graph();
    const ValueId in = g.add_value("x", DType::f32, sym({-1, 3, 8, 8}));
    g.inputs = {in};
    const ValueId stem = v(g, "stem"), x = v(g, "s");
    set_ints(node(g, "Conv", {in, g.add_initializer("stem.w", random_tensor(Shape{c, 3, 1, 1}, 9))},
                  {stem}),
             "pads", {0, 0, 0, 0});
    node(g, "Relu", {stem}, {x});
    ValueId cur = x;
    for (int k = 0; k < 2; ++k) {
        const std::string p = "c" + std::to_string(k);
        const ValueId w = g.add_initializer(p + ".w", random_tensor(Shape{c, c, 3, 3}, 10 + k, 0.2f));
        const ValueId b = g.add_initializer(p + ".b", random_tensor(Shape{c}, 20 + k));
        const ValueId y = v(g, p + ".y");
        Node& conv = node(g, "Conv", {cur, w, b}, {y});
        set_ints(conv, "pads", {1, 1, 1, 1});
        const ValueId bn = v(g, p + ".bn");
        node(g, "BatchNormalization",
             {y, g.add_initializer(p + ".s", random_tensor(Shape{c}, 30 + k)),
              g.add_initializer(p + ".t", random_tensor(Shape{c}, 40 + k)),
              g.add_initializer(p + ".m", random_tensor(Shape{c}, 50 + k)),
              g.add_initializer(p + ".v", positive_tensor(Shape{c}, 60 + k))},
             {bn});
        ValueId pre = bn;
        if (k == 1) {
            pre = v(g, "sum");
            node(g, "Add", {bn, x}, {pre});
        }
        cur = v(g, p + ".r");
        node(g, "Relu", {pre}, {cur});
    }
    const ValueId out = g.add_value("out");
    node(g, "GlobalAveragePool", {cur}, {out});  // reads the blocked layout, writes row-major
    g.outputs = {out};
    return g;
}

}  // namespace

TEST_CASE("fusion: Conv+BatchNorm fold and Conv+residual+Relu on a ResNet block", "[fusion]") {
    Graph g = resnet_block();
    std::vector<NamedTensor> in{{"x", random_tensor(Shape{2, 3, 8, 8}, 1)}};
    Outcome r = check_levels(g, in);
    CHECK(r.report.count("fuse_conv_batchnorm") == 2);
    CHECK(r.report.count("fuse_conv_add_activation") == 3);
    CHECK(r.nodes == 4);
    if (onednn_available()) {  // the FusedConvs and the pool on oneDNN, in the blocked layout
        auto e = InferenceEngine::compile(g, EngineOptions{});
        for (const auto& p : e.node_providers()) CHECK(p == "onednn");
        CHECK(e.blocked_layout_nodes() == 4);
        EngineOptions l2;
        l2.optimization_level = 2;  // fused, but row-major
        CHECK(InferenceEngine::compile(g, l2).blocked_layout_nodes() == 0);
    }
}

TEST_CASE("fusion: a Conv whose output is also read elsewhere keeps its BatchNorm", "[fusion]") {
    Graph g = resnet_block();
    g.outputs.push_back(*g.find_value("c0.y"));  // the first conv's raw output escapes
    std::vector<NamedTensor> in{{"x", random_tensor(Shape{1, 3, 8, 8}, 2)}};
    Outcome r = check_levels(g, in);
    CHECK(r.report.count("fuse_conv_batchnorm") == 1);
}

TEST_CASE("fusion: Conv + per-channel constant Add + Sigmoid", "[fusion]") {
    Graph g = new_graph();
    const ValueId x = g.add_value("x", DType::f32, sym({1, 8, 6, 6}));
    g.inputs = {x};
    const ValueId w = g.add_initializer("w", random_tensor(Shape{4, 8, 1, 1}, 3));
    const ValueId y = v(g, "y"), z = v(g, "z"), o = g.add_value("o");
    node(g, "Conv", {x, w}, {y});
    node(g, "Add", {y, g.add_initializer("bias", random_tensor(Shape{1, 4, 1, 1}, 4))}, {z});
    node(g, "Sigmoid", {z}, {o});
    g.outputs = {o};
    Outcome r = check_levels(g, {{"x", random_tensor(Shape{1, 8, 6, 6}, 5)}});
    CHECK(r.report.count("fuse_conv_add_activation") == 1);
    CHECK(r.nodes == 1);
}

namespace {

/// x[batch, k] -> MatMul(W) -> Add(bias) -> decomposed GELU -> MatMul -> Add -> LayerNorm
/// (decomposed) with the residual: a transformer FFN sub-block.
Graph ffn_block(int k, int n, float gelu_const = 0.5f, bool skip = true) {
    Graph g = new_graph();
    const ValueId x = g.add_value("x", DType::f32, sym({-1, 3, k}));
    g.inputs = {x};
    const ValueId h = v(g, "h"), hb = v(g, "hb");
    node(g, "MatMul", {x, g.add_initializer("w1", random_tensor(Shape{k, n}, 6, 0.3f))}, {h});
    node(g, "Add", {g.add_initializer("b1", random_tensor(Shape{n}, 7)), h}, {hb});
    // GELU, erf form: (hb * (erf(hb / sqrt2) + 1)) * 0.5
    const ValueId d = v(g, "d"), e = v(g, "e"), u = v(g, "u"), m = v(g, "m"), act = v(g, "act");
    node(g, "Div", {hb, g.add_initializer("sqrt2", scalar(std::sqrt(2.f)))}, {d});
    node(g, "Erf", {d}, {e});
    node(g, "Add", {e, g.add_initializer("one", scalar(1.f))}, {u});
    node(g, "Mul", {hb, u}, {m});
    node(g, "Mul", {m, g.add_initializer("half", scalar(gelu_const))}, {act});
    const ValueId o = v(g, "o"), ob = v(g, "ob"), s = v(g, "s");
    node(g, "MatMul", {act, g.add_initializer("w2", random_tensor(Shape{n, k}, 8, 0.3f))}, {o});
    node(g, "Add", {o, g.add_initializer("b2", random_tensor(Shape{k}, 9))}, {ob});
    node(g, "Add", {ob, skip ? x : ob}, {s});
    // LayerNorm over the last axis, decomposed.
    const ValueId mean = v(g, "mean"), c = v(g, "c"), sq = v(g, "sq"), var = v(g, "var"),
                  ve = v(g, "ve"), sd = v(g, "sd"), nrm = v(g, "nrm"), sc = v(g, "sc"),
                  y = g.add_value("y");
    set_ints(node(g, "ReduceMean", {s}, {mean}), "axes", {-1});
    node(g, "Sub", {s, mean}, {c});
    node(g, "Pow", {c, g.add_initializer("two", scalar(2.f))}, {sq});
    set_ints(node(g, "ReduceMean", {sq}, {var}), "axes", {-1});
    node(g, "Add", {var, g.add_initializer("eps", scalar(1e-5f))}, {ve});
    node(g, "Sqrt", {ve}, {sd});
    node(g, "Div", {c, sd}, {nrm});
    node(g, "Mul", {nrm, g.add_initializer("gamma", random_tensor(Shape{k}, 10))}, {sc});
    node(g, "Add", {sc, g.add_initializer("beta", random_tensor(Shape{k}, 11))}, {y});
    g.outputs = {y};
    return g;
}

}  // namespace

TEST_CASE("fusion: MatMul+bias+GELU, LayerNorm and skip-LayerNorm on a transformer FFN", "[fusion]") {
    Graph g = ffn_block(32, 64);
    Outcome r = check_levels(g, {{"x", random_tensor(Shape{4, 3, 32}, 12)}});
    CHECK(r.report.count("fuse_gelu") == 1);
    CHECK(r.report.count("fuse_layer_norm") == 1);
    CHECK(r.report.count("fuse_skip_layer_norm") == 1);
    CHECK(r.report.count("fuse_matmul_bias_activation") == 1);
    // FusedMatMul(+Gelu), MatMul, SkipLayerNormalization (with the second bias).
    CHECK(r.nodes == 3);
}

TEST_CASE("fusion: near-misses are left alone", "[fusion]") {
    SECTION("a GELU with the wrong constant") {
        Graph g = ffn_block(16, 32, 0.6f);
        Outcome r = check_levels(g, {{"x", random_tensor(Shape{2, 3, 16}, 13)}});
        CHECK(r.report.count("fuse_gelu") == 0);
        CHECK(r.report.count("fuse_layer_norm") == 1);
    }
    SECTION("an operand read twice by the residual Add keeps its bias Add") {
        Graph g = ffn_block(16, 32, 0.5f, /*skip=*/false);  // Add(ob, ob)
        Outcome r = check_levels(g, {{"x", random_tensor(Shape{2, 3, 16}, 14)}});
        CHECK(r.report.count("fuse_skip_layer_norm") == 1);
        CHECK(r.report.count("fuse_matmul_bias_activation") == 2);  // both MatMul+bias
    }
    SECTION("a LayerNorm over another axis") {
        Graph g = ffn_block(16, 32);
        for (Node& n : g.nodes)
            if (n.op_type == "ReduceMean")
                for (auto& [name, a] : n.attributes)
                    if (name == "axes") a.ints = {1};
        Outcome r = check_levels(g, {{"x", random_tensor(Shape{2, 3, 16}, 15)}});
        CHECK(r.report.count("fuse_layer_norm") == 0);
        CHECK(r.report.count("fuse_skip_layer_norm") == 0);
    }
}

TEST_CASE("fusion: Gemm+Relu becomes FusedGemm (MLP)", "[fusion]") {
    Graph g = new_graph();
    const ValueId x = g.add_value("x", DType::f32, sym({-1, 24}));
    g.inputs = {x};
    const ValueId h = v(g, "h"), r = v(g, "r"), y = g.add_value("y");
    Node& gemm = node(g, "Gemm", {x, g.add_initializer("w", random_tensor(Shape{40, 24}, 16)),
                                  g.add_initializer("b", random_tensor(Shape{40}, 17))},
                      {h});
    set_i(gemm, "transB", 1);
    set_f(gemm, "alpha", 1.f);
    node(g, "Relu", {h}, {r});
    node(g, "Gemm", {r, g.add_initializer("w2", random_tensor(Shape{40, 8}, 18)),
                     g.add_initializer("b2", random_tensor(Shape{8}, 19))},
         {y});
    g.outputs = {y};
    for (std::int64_t batch : {1, 7, 600}) {  // 600 rows: oneDNN's own GEMM, not the packed one
        Outcome o = check_levels(g, {{"x", random_tensor(Shape{batch, 24}, 20)}});
        CHECK(o.report.count("fuse_matmul_bias_activation") == 1);
        CHECK(o.nodes == 2);
    }
}

TEST_CASE("fusion: fused operators reject bad inputs with typed errors", "[fusion]") {
    Graph g = new_graph();
    g.opset_imports.push_back({kDsinferDomain, 1});
    const ValueId x = g.add_value("x", DType::f32, sym({1, 2, 4, 4}));
    const ValueId z = g.add_value("z", DType::f32);
    g.inputs = {x, z};
    const ValueId y = g.add_value("y");
    Node& n = node(g, "FusedConv", {x, g.add_initializer("w", random_tensor(Shape{2, 2, 1, 1}, 21)),
                                    kNoValue, z},
                   {y});
    n.domain = kDsinferDomain;
    g.outputs = {y};
    for (auto backends : {std::vector<std::string>{}, std::vector<std::string>{"reference"}}) {
        EngineOptions o;
        o.optimization_level = 0;
        o.backends = backends;
        auto e = InferenceEngine::compile(g, o);
        std::vector<NamedTensor> out;
        Status st = e.try_run({{"x", random_tensor(Shape{1, 2, 4, 4}, 22)},
                               {"z", random_tensor(Shape{1, 2, 4, 3}, 23)}},
                              out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK_THAT(st.message(), Catch::Contains("input Z"));
        // And the right shape runs: y = conv(x) + z.
        REQUIRE(e.try_run({{"x", random_tensor(Shape{1, 2, 4, 4}, 22)},
                           {"z", random_tensor(Shape{1, 2, 4, 4}, 23)}},
                          out)
                    .is_ok());
    }
    // An unknown fused activation is invalid_model at load.
    Graph bad = g;
    Attribute a;
    a.kind = AttrKind::s;
    a.s = "Swoosh";
    bad.nodes[0].attributes.emplace_back("activation", a);
    try {
        InferenceEngine::compile(bad, EngineOptions{.optimization_level = 0});
        FAIL("expected invalid_model");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_model);
        CHECK_THAT(std::string(e.what()), Catch::Contains("Swoosh"));
    }
}

TEST_CASE("fusion: a LayerNorm feeding only Linear layers hands them its affine part", "[fusion]") {
    Graph g = new_graph(17);
    const ValueId x = g.add_value("x", DType::f32, sym({-1, 5, 16}));
    g.inputs = {x};
    const ValueId y = v(g, "ln");
    Node& ln = node(g, "LayerNormalization",
                    {x, g.add_initializer("gamma", random_tensor(Shape{16}, 30)),
                     g.add_initializer("beta", random_tensor(Shape{16}, 31))},
                    {y});
    set_f(ln, "epsilon", 1e-5f);
    const ValueId q = v(g, "q"), qb = g.add_value("qb"), k = g.add_value("k");
    node(g, "MatMul", {y, g.add_initializer("wq", random_tensor(Shape{16, 8}, 32))}, {q});
    node(g, "Add", {q, g.add_initializer("bq", random_tensor(Shape{8}, 33))}, {qb});
    node(g, "MatMul", {y, g.add_initializer("wk", random_tensor(Shape{16, 12}, 34))}, {k});
    g.outputs = {qb, k};
    Outcome r = check_levels(g, {{"x", random_tensor(Shape{3, 5, 16}, 35)}});
    CHECK(r.report.count("fuse_layer_norm_linear") == 1);
    CHECK(r.nodes == 3);

    // The LayerNorm's output escaping (a graph output) keeps the affine part in the LayerNorm.
    g.outputs.push_back(y);
    Outcome r2 = check_levels(g, {{"x", random_tensor(Shape{3, 5, 16}, 36)}});
    CHECK(r2.report.count("fuse_layer_norm_linear") == 0);
}
namespace {

/// Every node of kDsinferDomain in `g` matches its schema in dsinfer/ops.hpp: the op is listed,
/// required inputs are present, no input or output beyond the schema's, attributes by name.
void check_against_schemas(const Graph& g, int& seen) {
    for (const Node& n : g.nodes) {
        if (n.domain != kDsinferDomain) continue;
        ++seen;
        INFO("node " << n.name << " (" << n.op_type << ")");
        const OpSchema* s = find_dsinfer_op(n.op_type);
        REQUIRE(s != nullptr);
        REQUIRE(n.inputs.size() <= s->inputs.size());
        REQUIRE(n.outputs.size() <= s->outputs.size());
        for (std::size_t k = 0; k < s->inputs.size(); ++k)
            if (!s->inputs[k].optional) CHECK((k < n.inputs.size() && n.inputs[k] != kNoValue));
        for (const auto& [name, attr] : n.attributes) {
            INFO("attribute " << name);
            bool known = false;
            for (const OpAttribute& a : s->attributes) known = known || a.name == name;
            CHECK(known);
        }
        for (const OpAttribute& a : s->attributes)
            if (a.required) CHECK(n.find_attr(std::string(a.name)) != nullptr);
    }
    CHECK(g.opset(kDsinferDomain) == kDsinferOpsetVersion);
}

}  // namespace

TEST_CASE("fusion: the fused operators the optimizer writes match their public schemas",
          "[fusion]") {
    int seen = 0;
    for (Graph g : {resnet_block(), ffn_block(32, 64)}) {
        REQUIRE(g.sort_topologically().is_ok());
        optimize(g, OptimizeOptions{.level = 3});
        check_against_schemas(g, seen);
    }
    CHECK(seen >= 5);
    // Every schema has a reference kernel at the version passes write, and every kernel
    // registered in the domain has a schema.
    KernelRegistry reg;
    register_cpu_kernels(reg);
    for (const OpSchema& s : kDsinferOps) {
        INFO(s.name);
        CHECK(reg.find(s.name, kDsinferDomain, kDsinferOpsetVersion, DeviceKind::cpu) != nullptr);
    }
    for (const KernelEntry& e : reg.entries())
        if (e.key.domain == kDsinferDomain) CHECK(find_dsinfer_op(e.key.op_type) != nullptr);
}
