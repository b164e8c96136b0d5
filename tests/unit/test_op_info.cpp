// The ops' metadata and shape/dtype rules (src/ops/op_info.hpp): every rule against the
// executor's load-time inference (kernel_evaluator(), symbolic-dim probes over the reference
// kernels) on small graphs with a symbolic batch dim, the generated models annotated by the rules
// alone before and after optimize(), the metadata the pruner and quantizer read, and the errors
// a rule reports for inconsistent shapes.
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "dsinfer/onnx.hpp"
#include "dsinfer/ops.hpp"
#include "dsinfer/passes.hpp"
#include "ops/op_info.hpp"
#include "passes/pass_utils.hpp"

using namespace dsinfer;
using detail::ChannelFlow;
using detail::find_op_info;
using detail::kNoAxis;

namespace {

/// "N,3,?" -> [N, 3, unknown]; "" -> rank 0.
SymbolicShape S(const std::string& spec) {
    SymbolicShape s;
    s.known = true;
    std::stringstream in(spec);
    std::string tok;
    while (std::getline(in, tok, ',')) {
        if (tok == "?")
            s.dims.emplace_back();
        else if (!tok.empty() && (std::isdigit(static_cast<unsigned char>(tok[0])) != 0))
            s.dims.push_back(Dim::fixed(std::stoll(tok)));
        else
            s.dims.push_back(Dim::named(tok));
    }
    return s;
}

Tensor i64s(const std::vector<std::int64_t>& v, bool scalar = false) {
    Tensor t =
        Tensor::zeros(DType::i64, scalar ? Shape{} : Shape{static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
    return t;
}

Tensor f32s(const Shape& s) {
    Tensor t = Tensor::zeros(DType::f32, s);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<float>()[i] = 0.25f + 0.01f * static_cast<float>(i % 13);
    return t;
}

/// A graph under construction: inputs, initializers and nodes whose outputs are all graph
/// outputs (so the executor infers every one).
struct G {
    Graph g;
    explicit G(std::int64_t opset = 17) {
        g.opset_imports = {{"", opset}, {kDsinferDomain, kDsinferOpsetVersion}};
    }
    ValueId in(const std::string& name, DType dt, const std::string& shape) {
        const ValueId v = g.add_value(name, dt, S(shape));
        g.inputs.push_back(v);
        return v;
    }
    ValueId init(const std::string& name, Tensor t) {
        return g.add_initializer(name, std::move(t));
    }
    Node& node(const std::string& op, std::vector<ValueId> ins, int nout = 1,
               const std::string& domain = "") {
        std::vector<ValueId> outs;
        const std::string name = op + "_" + std::to_string(g.nodes.size());
        for (int i = 0; i < nout; ++i) {
            outs.push_back(g.add_value(name + "_out" + std::to_string(i)));
            g.outputs.push_back(outs.back());
        }
        Node& n = g.add_node(op, std::move(ins), std::move(outs), name);
        n.domain = domain;
        return n;
    }
    ValueId out(const Node& n, int i = 0) const { return n.outputs[static_cast<std::size_t>(i)]; }
};

void attr(Node& n, const std::string& name, std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    n.attributes.emplace_back(name, a);
}
void attr(Node& n, const std::string& name, std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(v);
    n.attributes.emplace_back(name, a);
}
void attr(Node& n, const std::string& name, const std::string& v) {
    Attribute a;
    a.kind = AttrKind::s;
    a.s = v;
    n.attributes.emplace_back(name, a);
}

bool same(const SymbolicShape& a, const SymbolicShape& b) {
    if (a.known != b.known || a.rank() != b.rank()) return false;
    for (int i = 0; i < a.rank(); ++i) {
        const Dim& x = a.dims[static_cast<std::size_t>(i)];
        const Dim& y = b.dims[static_cast<std::size_t>(i)];
        if (x.is_static() != y.is_static()) return false;
        if (x.is_static() ? x.value != y.value : x.symbol != y.symbol) return false;
    }
    return true;
}

std::string dt_name(const std::optional<DType>& d) {
    return d ? std::string(dtype_name(*d)) : std::string("?");
}

/// Forgets every inferred dtype and shape: only graph inputs and initializers keep theirs.
void clear_inferred(Graph& g) {
    std::vector<bool> keep(g.values.size(), false);
    for (ValueId i : g.inputs) keep[static_cast<std::size_t>(i)] = true;
    for (std::size_t i = 0; i < g.values.size(); ++i) {
        if (keep[i] || g.values[i].initializer || g.values[i].is_capture) continue;
        g.values[i].dtype.reset();
        g.values[i].shape = SymbolicShape{};
    }
}

bool has_unknown_dim(const SymbolicShape& s) {
    for (const Dim& d : s.dims)
        if (!d.is_static() && d.symbol.empty()) return true;
    return false;
}

/// The rules (no evaluator) and the evaluator agree on every node output of `g`, and the rules
/// leave unresolved exactly the nodes whose outputs the evaluator cannot name either (a dim
/// such as N + 2).
void expect_rules_match_evaluator(const Graph& g) {
    Graph ruled = g;
    const detail::ShapeAnnotation a = detail::annotate_graph_shapes(ruled);
    INFO("first rule error: " << a.first_error.to_string());
    CHECK(a.first_error.is_ok());
    CHECK(a.without_rule == 0);
    std::size_t unnamed = 0;
    Graph probed = g;
    REQUIRE(kernel_evaluator().infer_shapes(probed).is_ok());
    int compared = 0;
    for (const Node& n : g.nodes) {
        bool named = true;
        for (ValueId id : n.outputs)
            named = named && (id == kNoValue || !has_unknown_dim(probed.value(id).shape));
        unnamed += named ? 0 : 1;
        for (ValueId id : n.outputs) {
            if (id == kNoValue) continue;
            const Value& r = ruled.value(id);
            const Value& e = probed.value(id);
            INFO(n.describe() << " output '" << r.name << "': rules " << dt_name(r.dtype) << " "
                              << r.shape.to_string() << ", evaluator " << dt_name(e.dtype) << " "
                              << e.shape.to_string());
            REQUIRE(e.dtype.has_value());  // a case the evaluator cannot answer proves nothing
            REQUIRE(e.shape.known);
            CHECK(r.dtype == e.dtype);
            CHECK(same(r.shape, e.shape));
            ++compared;
        }
    }
    CHECK(compared > 0);
    CHECK(a.unresolved == unnamed);
}

}  // namespace

TEST_CASE("op rules: unary elementwise ops and activations keep dtype and shape", "[op_info]") {
    G t(20);
    const ValueId x = t.in("x", DType::f32, "N,3,4");
    for (const char* op : {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs",
                           "Reciprocal", "LeakyRelu", "HardSwish", "Softplus", "Gelu", "Elu",
                           "Floor", "Softsign", "HardSigmoid", "Sign"})
        t.node(op, {x});
    t.node("Clip", {x, t.init("lo", Tensor::scalar(0.f)), t.init("hi", Tensor::scalar(6.f))});
    t.node("Gelu", {x}, 1, kDsinferDomain);
    t.node("IsNaN", {x});
    t.node("Softmax", {x});
    t.node("LogSoftmax", {x});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: broadcast ops follow numpy broadcasting on symbolic dims", "[op_info]") {
    G t;
    const ValueId a = t.in("a", DType::f32, "N,3,4");
    const ValueId b = t.in("b", DType::f32, "4");
    const ValueId c = t.in("c", DType::f32, "N,1,1");
    const ValueId d = t.in("d", DType::f32, "3,1");
    const ValueId m = t.in("m", DType::boolean, "N,3,1");
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) t.node(op, {a, b});
    t.node("Add", {c, d});  // [N,3,1]
    t.node("Max", {a, c, d});
    t.node("Min", {b, c});
    t.node("Sum", {a, b, c});
    t.node("Mean", {a, d});
    t.node("Where", {m, a, b});
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual"}) t.node(op, {a, c});
    t.node("And", {m, m});
    t.node("Or", {m, t.in("m2", DType::boolean, "4")});
    t.node("PRelu", {a, t.init("slope", f32s(Shape{3, 1}))});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: Cast, CastLike, Identity, Dropout", "[op_info]") {
    G t;
    const ValueId x = t.in("x", DType::f32, "N,5");
    attr(t.node("Cast", {x}), "to", std::int64_t{7});   // int64
    attr(t.node("Cast", {x}), "to", std::int64_t{10});  // float16
    t.node("CastLike", {x, t.in("like", DType::i32, "1")});
    t.node("Identity", {x});
    t.node("Dropout", {x}, 2);
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: convolutions and pooling", "[op_info]") {
    G t;
    const ValueId x = t.in("x", DType::f32, "N,3,9,9");
    Node& c =
        t.node("Conv", {x, t.init("w", f32s(Shape{4, 3, 3, 3})), t.init("b", f32s(Shape{4}))});
    attr(c, "pads", std::vector<std::int64_t>{1, 1, 1, 1});
    attr(c, "strides", std::vector<std::int64_t>{2, 2});
    Node& same_pad = t.node("Conv", {x, t.init("w2", f32s(Shape{6, 3, 3, 3}))});
    attr(same_pad, "auto_pad", std::string("SAME_UPPER"));
    Node& dw = t.node("Conv", {x, t.init("wd", f32s(Shape{3, 1, 3, 3}))});
    attr(dw, "group", std::int64_t{3});
    attr(dw, "dilations", std::vector<std::int64_t>{2, 2});
    Node& fc = t.node("FusedConv", {x, t.init("wf", f32s(Shape{4, 3, 1, 1}))}, 1, kDsinferDomain);
    attr(fc, "activation", std::string("Relu"));
    Node& ct = t.node("ConvTranspose", {x, t.init("wt", f32s(Shape{3, 2, 3, 3}))});
    attr(ct, "strides", std::vector<std::int64_t>{2, 2});
    attr(ct, "output_padding", std::vector<std::int64_t>{1, 1});
    Node& mp = t.node("MaxPool", {x}, 2);
    attr(mp, "kernel_shape", std::vector<std::int64_t>{3, 3});
    attr(mp, "strides", std::vector<std::int64_t>{2, 2});
    attr(mp, "pads", std::vector<std::int64_t>{1, 1, 1, 1});
    Node& ap = t.node("AveragePool", {x});
    attr(ap, "kernel_shape", std::vector<std::int64_t>{2, 2});
    attr(ap, "strides", std::vector<std::int64_t>{2, 2});
    attr(ap, "ceil_mode", std::int64_t{1});
    t.node("GlobalAveragePool", {x});
    t.node("GlobalMaxPool", {x});
    t.node("BatchNormalization", {x, t.init("s", f32s(Shape{3})), t.init("bb", f32s(Shape{3})),
                                  t.init("mean", f32s(Shape{3})), t.init("var", f32s(Shape{3}))});
    // A symbolic spatial size: kept by a size-preserving window, unknown otherwise.
    const ValueId y = t.in("y", DType::f32, "N,3,H,W");
    Node& keep = t.node("Conv", {y, t.init("w3", f32s(Shape{2, 3, 3, 3}))});
    attr(keep, "pads", std::vector<std::int64_t>{1, 1, 1, 1});
    expect_rules_match_evaluator(t.g);

    Graph g = t.g;
    detail::annotate_graph_shapes(g);
    Node& strided = g.nodes.back();
    CHECK(same(g.value(strided.outputs[0]).shape, S("N,2,H,W")));
}

TEST_CASE("op rules: strided windows over symbolic sizes stay unknown", "[op_info]") {
    G t;
    const ValueId y = t.in("y", DType::f32, "N,3,H,W");
    Node& c = t.node("Conv", {y, t.init("w", f32s(Shape{2, 3, 3, 3}))});
    attr(c, "strides", std::vector<std::int64_t>{2, 2});
    Graph g = t.g;
    const auto a = detail::annotate_graph_shapes(g);
    CHECK(a.unresolved == 1);
    CHECK(same(g.value(c.outputs[0]).shape, S("N,2,?,?")));
}

TEST_CASE("op rules: Gemm, MatMul and the fused products", "[op_info]") {
    G t;
    const ValueId a = t.in("a", DType::f32, "N,8");
    Node& g1 = t.node("Gemm", {a, t.init("bt", f32s(Shape{16, 8})), t.init("c", f32s(Shape{16}))});
    attr(g1, "transB", std::int64_t{1});
    t.node("Gemm", {a, t.init("b", f32s(Shape{8, 5}))});
    Node& ta = t.node("Gemm", {t.in("at", DType::f32, "8,N"), t.init("b2", f32s(Shape{8, 3}))});
    attr(ta, "transA", std::int64_t{1});
    Node& fg =
        t.node("FusedGemm", {a, t.init("bf", f32s(Shape{8, 4})), t.init("cf", f32s(Shape{4}))}, 1,
               kDsinferDomain);
    attr(fg, "activation", std::string("Relu"));
    const ValueId x = t.in("x", DType::f32, "N,S,8");
    t.node("MatMul", {x, t.init("w", f32s(Shape{8, 5}))});
    t.node("MatMul", {t.in("p", DType::f32, "N,2,3,4"), t.in("q", DType::f32, "N,2,4,5")});
    t.node("MatMul", {t.in("v1", DType::f32, "4"), t.init("w45", f32s(Shape{4, 5}))});
    t.node("MatMul", {x, t.init("v8", f32s(Shape{8}))});
    t.node("MatMul", {t.in("bx", DType::f32, "3,1,2,4"), t.in("by", DType::f32, "5,4,6")});
    t.node("FusedMatMul", {x, t.init("wm", f32s(Shape{8, 6})), t.init("bias", f32s(Shape{6}))}, 1,
           kDsinferDomain);
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: the dequantizing fused products give float32 [..., N]", "[op_info]") {
    // com.dsinfer DynamicQuantizeMatMul (f32 A) and MatMulIntegerToFloat (u8 A): the MatMul
    // shape rule, float32 whatever A's type, against the executor's answer.
    G t;
    auto s8 = [](const Shape& s) { return Tensor::zeros(DType::i8, s); };
    Tensor scale = f32s(Shape{});
    t.node("DynamicQuantizeMatMul",
           {t.in("a", DType::f32, "N,S,8"), t.init("b", s8(Shape{8, 5})), t.init("bs", scale)}, 1,
           kDsinferDomain);
    t.node("DynamicQuantizeMatMul",
           {t.in("a2", DType::f32, "N,8"), t.init("b2", s8(Shape{8, 3})), t.init("bs2", f32s(Shape{3})),
            t.init("bz2", s8(Shape{3})), t.init("bias2", f32s(Shape{3}))},
           1, kDsinferDomain);
    Tensor zp = Tensor::zeros(DType::u8, Shape{});
    t.node("MatMulIntegerToFloat",
           {t.in("q", DType::u8, "N,S,8"), t.init("b3", s8(Shape{8, 6})), t.init("as", scale),
            t.init("bs3", scale), t.init("az", zp)},
           1, kDsinferDomain);
    expect_rules_match_evaluator(t.g);
    for (const Node& n : t.g.nodes) {
        const detail::OpInfo* info = find_op_info(n.domain, n.op_type);
        REQUIRE(info != nullptr);
        CHECK(info->channels == ChannelFlow::produces);
    }
}

TEST_CASE("op rules: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Expand, Tile", "[op_info]") {
    G t(13);
    const ValueId x = t.in("x", DType::f32, "N,3,4,5");
    t.node("Flatten", {x});
    attr(t.node("Flatten", {x}), "axis", std::int64_t{2});
    attr(t.node("Flatten", {x}), "axis", std::int64_t{-1});
    const ValueId y = t.in("y", DType::f32, "N,12");
    t.node("Reshape", {y, t.init("s1", i64s({0, 3, -1}))});  // [N,3,4]
    t.node("Reshape", {x, t.init("s2", i64s({-1, 60}))});    // [N,60]
    t.node("Reshape", {x, t.init("s3", i64s({0, 0, -1}))});  // [N,3,20]
    t.node("Reshape", {y, t.init("s4", i64s({2, 6, -1}))});  // [2,6,N]
    attr(t.node("Transpose", {x}), "perm", std::vector<std::int64_t>{0, 2, 3, 1});
    t.node("Transpose", {x});
    const ValueId z = t.in("z", DType::f32, "N,1,4,1");
    t.node("Squeeze", {z, t.init("ax1", i64s({1}))});
    t.node("Squeeze", {z, t.init("ax2", i64s({1, -1}))});
    t.node("Unsqueeze", {y, t.init("ax3", i64s({0, 3}))});
    t.node("Expand", {z, t.init("shape", i64s({3, 4, 1}))});
    t.node("Tile", {y, t.init("reps", i64s({1, 2}))});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: Squeeze and Unsqueeze take axes as an attribute before opset 13",
          "[op_info]") {
    G t(11);
    const ValueId z = t.in("z", DType::f32, "N,1,4,1");
    attr(t.node("Squeeze", {z}), "axes", std::vector<std::int64_t>{1, 3});
    attr(t.node("Unsqueeze", {z}), "axes", std::vector<std::int64_t>{0});
    const ValueId s = t.in("s", DType::f32, "2,1,4,1");
    t.node("Squeeze", {s});
    Node& sp = t.node("Split", {t.in("x", DType::f32, "N,6")}, 2);
    attr(sp, "axis", std::int64_t{1});
    attr(sp, "split", std::vector<std::int64_t>{2, 4});
    t.node("Slice", {t.in("v", DType::f32, "N,10"), t.init("st", i64s({2})),
                     t.init("en", i64s({-1})), t.init("ax", i64s({1}))});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: Concat, Split, Slice, Gather, Shape, Size", "[op_info]") {
    G t(18);
    const ValueId x = t.in("x", DType::f32, "N,6");
    attr(t.node("Concat", {x, t.in("x2", DType::f32, "N,5"), x}), "axis", std::int64_t{1});
    attr(t.node("Concat", {x, t.in("x3", DType::f32, "2,6")}), "axis", std::int64_t{0});
    Node& s1 = t.node("Split", {x, t.init("parts", i64s({2, 4}))}, 2);
    attr(s1, "axis", std::int64_t{1});
    Node& s2 = t.node("Split", {t.in("seven", DType::f32, "N,7")}, 3);
    attr(s2, "axis", std::int64_t{1});
    attr(s2, "num_outputs", std::int64_t{3});
    const ValueId v = t.in("v", DType::f32, "N,10,8");
    t.node("Slice", {v, t.init("b0", i64s({1, 0})), t.init("e0", i64s({8, 100})),
                     t.init("a0", i64s({1, 2})), t.init("p0", i64s({2, 3}))});
    t.node("Slice", {v, t.init("b1", i64s({-1})), t.init("e1", i64s({-100})),
                     t.init("a1", i64s({1})), t.init("p1", i64s({-3}))});
    t.node("Slice", {v, t.init("b2", i64s({0})), t.init("e2", i64s({INT64_MAX})),
                     t.init("a2", i64s({0}))});  // all of N: N
    const ValueId table = t.init("table", f32s(Shape{10, 4}));
    t.node("Gather", {table, t.in("ids", DType::i64, "N,S")});
    attr(t.node("Gather", {v, t.init("one", i64s({1}, true))}), "axis", std::int64_t{1});
    t.node("Shape", {v});
    Node& sh = t.node("Shape", {v});
    attr(sh, "start", std::int64_t{1});
    attr(sh, "end", std::int64_t{-1});
    t.node("Size", {t.in("small", DType::f32, "2,3")});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: reductions", "[op_info]") {
    G t(13);
    const ValueId x = t.in("x", DType::f32, "N,3,4");
    Node& m = t.node("ReduceMean", {x});
    attr(m, "axes", std::vector<std::int64_t>{-1});
    Node& m0 = t.node("ReduceMax", {x});
    attr(m0, "axes", std::vector<std::int64_t>{1});
    attr(m0, "keepdims", std::int64_t{0});
    t.node("ReduceMin", {x});  // every axis
    Node& s = t.node("ReduceSum", {x, t.init("axes", i64s({0, 2}))});
    attr(s, "keepdims", std::int64_t{0});
    Node& noop = t.node("ReduceSum", {x});
    attr(noop, "noop_with_empty_axes", std::int64_t{1});
    attr(t.node("ArgMax", {x}), "axis", std::int64_t{2});
    expect_rules_match_evaluator(t.g);

    G u(18);
    const ValueId y = u.in("y", DType::f32, "N,3,4");
    u.node("ReduceMean", {y, u.init("ax", i64s({1}))});
    u.node("ReduceMax", {y});
    expect_rules_match_evaluator(u.g);
}

TEST_CASE("op rules: normalizations and attention", "[op_info]") {
    G t(17);
    const ValueId x = t.in("x", DType::f32, "N,S,8");
    const ValueId g = t.init("gamma", f32s(Shape{8})), b = t.init("beta", f32s(Shape{8}));
    t.node("LayerNormalization", {x, g, b}, 3);
    Node& ln2 = t.node("LayerNormalization", {x, g, b}, 3);
    attr(ln2, "axis", std::int64_t{1});
    t.node("LayerNormalization", {x, g, b}, 1, kDsinferDomain);
    t.node("SkipLayerNormalization", {x, t.in("skip", DType::f32, "N,S,8"), g, b}, 2,
           kDsinferDomain);
    Node& mha = t.node("MultiHeadAttention",
                       {x, t.in("k", DType::f32, "N,T,8"), t.in("v", DType::f32, "N,T,12"),
                        t.in("mask", DType::f32, "N,1,1,T")},
                       1, kDsinferDomain);
    attr(mha, "num_heads", std::int64_t{4});
    t.node("InstanceNormalization", {t.in("img", DType::f32, "N,3,5,5"),
                                     t.init("is", f32s(Shape{3})), t.init("ib", f32s(Shape{3}))});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE("op rules: Pad, Constant, ConstantOfShape, Range, shape chains", "[op_info]") {
    G t(13);
    const ValueId x = t.in("x", DType::f32, "N,3,4");
    t.node("Pad", {x, t.init("pads", i64s({0, 1, 2, 0, 0, 1}))});
    Node& k = t.node("Constant", {});
    Attribute value;
    value.kind = AttrKind::t;
    value.t = i64s({2, 5});
    k.attributes.emplace_back("value", value);
    t.node("ConstantOfShape", {t.out(k)});
    // Shape -> Gather -> Unsqueeze -> Concat -> Reshape / ConstantOfShape / Range / Expand.
    const ValueId shape = t.out(t.node("Shape", {x}));
    const ValueId n = t.out(t.node("Gather", {shape, t.init("zero", i64s({0}, true))}));
    const ValueId n1 = t.out(t.node("Unsqueeze", {n, t.init("ax0", i64s({0}))}));
    const ValueId target = t.out(t.node("Concat", {n1, t.init("twelve", i64s({12}))}));
    attr(t.g.nodes.back(), "axis", std::int64_t{0});
    t.node("Reshape", {x, target});
    t.node("ConstantOfShape", {target});
    t.node("Range", {t.init("r0", i64s({0}, true)), n, t.init("r1", i64s({1}, true))});
    t.node("Range", {t.init("f0", Tensor::scalar(1.f)), t.init("f1", Tensor::scalar(4.5f)),
                     t.init("f2", Tensor::scalar(0.5f))});
    t.node("Expand", {t.in("col", DType::f32, "1,1"), target});
    // A slice to a length read from another input's shape (BERT's position ids): the rule takes
    // the symbol, assuming it fits in the table (the evaluator agrees while its placeholders,
    // primes up to ~100, fit in the 128 rows).
    const ValueId ids = t.in("ids", DType::i64, "B,L");
    const ValueId len =
        t.out(t.node("Gather", {t.out(t.node("Shape", {ids})), t.init("i1", i64s({1}, true))}));
    const ValueId len1 = t.out(t.node("Unsqueeze", {len, t.init("ax00", i64s({0}))}));
    t.node("Slice", {t.init("positions", i64s(std::vector<std::int64_t>(128, 1))),
                     t.init("s0", i64s({0})), len1, t.init("sa", i64s({0}))});
    expect_rules_match_evaluator(t.g);
}

TEST_CASE(
    "op rules: generated models are annotated without an evaluator, before and after "
    "optimize()",
    "[op_info]") {
    // ctest's "unit: op rules on generated models" makes them (tests/models/run_op_rules_models.cmake).
    const char* env = std::getenv("DSINFER_TEST_MODELS");
    if (env == nullptr || *env == '\0') {
        WARN("SKIPPED: DSINFER_TEST_MODELS is not set (a folder with mlp.onnx, bert_tiny.onnx "
             "and resnet50.onnx from tools/make_models.py)");
        return;
    }
    const std::filesystem::path dir = env;
    for (const char* model : {"mlp", "bert_tiny", "resnet50"}) {
        const auto path = dir / (std::string(model) + ".onnx");
        if (!std::filesystem::exists(path)) {
            WARN("SKIPPED: " << path.string()
                             << " is absent (make it with /usr/bin/python3 "
                                "tools/make_models.py --out "
                             << dir.string()
                             << " --only mlp bert_tiny resnet50, "
                                "or set DSINFER_TEST_MODELS)");
            continue;
        }
        INFO(model);
        Graph g = load_onnx(path.string());
        clear_inferred(g);
        expect_rules_match_evaluator(g);

        // The optimizer's annotation without an evaluator fills every value now.
        Graph offline = g;
        passes::annotate_shapes(offline, nullptr);
        for (const Node& n : offline.nodes)
            for (ValueId id : n.outputs) {
                if (id == kNoValue) continue;
                INFO(n.describe());
                CHECK(offline.value(id).dtype.has_value());
                CHECK(offline.value(id).shape.known);
            }

        Graph opt = g;
        optimize(opt, {.level = 3});
        clear_inferred(opt);
        bool fused = false;
        for (const Node& n : opt.nodes) fused = fused || n.domain == kDsinferDomain;
        CHECK(fused);
        expect_rules_match_evaluator(opt);
    }
}

TEST_CASE("op rules: inconsistent shapes are errors naming the node and the input", "[op_info]") {
    SECTION("broadcast mismatch") {
        G t;
        const ValueId a = t.in("a", DType::f32, "N,3");
        const ValueId b = t.in("b", DType::f32, "4");
        Node& add = t.node("Add", {a, b});
        std::vector<detail::InferredOutput> out;
        const Status st = detail::infer_node_shapes(t.g, add, 17, nullptr, out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK_THAT(st.message(), Catch::Contains(add.describe()));
        CHECK_THAT(st.message(), Catch::Contains("input 1 ('b')"));
        Graph g = t.g;
        const auto r = detail::annotate_graph_shapes(g);
        CHECK(r.first_error.code() == ErrorCode::invalid_argument);
        CHECK_FALSE(g.value(add.outputs[0]).shape.known);  // left as it was
    }
    SECTION("MatMul inner dims") {
        G t;
        Node& mm = t.node("MatMul", {t.in("a", DType::f32, "N,3,4"), t.in("w", DType::f32, "5,6")});
        std::vector<detail::InferredOutput> out;
        const Status st = detail::infer_node_shapes(t.g, mm, 17, nullptr, out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK_THAT(st.message(), Catch::Contains(mm.describe()));
        CHECK_THAT(st.message(), Catch::Contains("input 1 ('w')"));
    }
    SECTION("Conv channels") {
        G t;
        Node& c = t.node("Conv",
                         {t.in("x", DType::f32, "N,3,8,8"), t.init("w", f32s(Shape{4, 2, 3, 3}))});
        std::vector<detail::InferredOutput> out;
        const Status st = detail::infer_node_shapes(t.g, c, 17, nullptr, out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK_THAT(st.message(), Catch::Contains("input 1 ('w')"));
    }
    SECTION("too little information is not an error") {
        G t;
        Node& add = t.node("Add", {t.in("a", DType::f32, "N,3"), t.g.add_value("unknown")});
        std::vector<detail::InferredOutput> out;
        REQUIRE(detail::infer_node_shapes(t.g, add, 17, nullptr, out).is_ok());
        CHECK_FALSE(out[0].shape.known);
        CHECK(out[0].dtype == DType::f32);
        CHECK(detail::broadcast_dim(Dim::named("N"), Dim::named("M"))->symbol.empty());
        CHECK(detail::broadcast_dim(Dim::named("N"), Dim::fixed(5))->value == 5);
        CHECK(detail::broadcast_dim(Dim::named("N"), Dim::fixed(1))->symbol == "N");
        CHECK(detail::broadcast_dim(Dim::named("N"), Dim::named("N"))->symbol == "N");
        CHECK_FALSE(detail::broadcast_dim(Dim::fixed(3), Dim::fixed(4)).has_value());
    }
}

TEST_CASE("op metadata: weights, channel axes and channel flow", "[op_info]") {
    G t;
    const ValueId x = t.in("x", DType::f32, "N,8");
    const ValueId w = t.init("w", f32s(Shape{8, 4}));

    const auto* conv = find_op_info("", "Conv");
    REQUIRE(conv != nullptr);
    CHECK(conv == find_op_info("ai.onnx", "Conv"));
    CHECK(conv->channels == ChannelFlow::produces);
    CHECK(conv->channel_axis == 1);
    CHECK_FALSE(conv->is_weight(0));
    CHECK(conv->is_weight(1));
    CHECK(conv->is_weight(2));
    Node cn;
    cn.op_type = "Conv";
    CHECK(conv->axes_of(cn, 1).out_channel == 0);
    CHECK(conv->axes_of(cn, 1).in_channel == 1);
    CHECK(conv->axes_of(cn, 2).out_channel == 0);
    CHECK(conv->axes_of(cn, 2).in_channel == kNoAxis);
    CHECK(conv->axes_of(cn, 0).out_channel == kNoAxis);
    const auto* fconv = find_op_info(kDsinferDomain, "FusedConv");
    REQUIRE(fconv != nullptr);
    CHECK_FALSE(fconv->is_weight(3));  // Z, the residual
    CHECK(find_op_info("", "ConvTranspose")->axes_of(cn, 1).out_channel == 1);

    const auto* gemm = find_op_info("", "Gemm");
    Node g0;
    g0.op_type = "Gemm";
    CHECK(gemm->axes_of(g0, 1).out_channel == 1);
    CHECK(gemm->axes_of(g0, 1).in_channel == 0);
    attr(g0, "transB", std::int64_t{1});
    CHECK(gemm->axes_of(g0, 1).out_channel == 0);
    CHECK(gemm->axes_of(g0, 1).in_channel == 1);
    CHECK(gemm->axes_of(g0, 2).out_channel == -1);
    CHECK(gemm->channel_axis == -1);

    const auto* mm = find_op_info("", "MatMul");
    CHECK(mm->is_weight(1));
    CHECK_FALSE(mm->is_weight(0));
    CHECK(mm->axes_of(cn, 1).out_channel == -1);
    CHECK(mm->axes_of(cn, 1).in_channel == -2);
    // By index: a reference from node() lasts only until the next node is added.
    t.node("MatMul", {x, w});
    t.node("MatMul", {x, t.in("y", DType::f32, "8,4")});
    const Node& by_weight = t.g.nodes[t.g.nodes.size() - 2];
    const Node& by_activation = t.g.nodes.back();
    CHECK(detail::effective_channel_flow(mm, t.g, by_weight) == ChannelFlow::produces);
    CHECK(detail::effective_channel_flow(mm, t.g, by_activation) == ChannelFlow::opaque);

    const auto* bn = find_op_info("", "BatchNormalization");
    CHECK(bn->channels == ChannelFlow::per_channel);
    for (int i = 1; i <= 4; ++i) {
        CHECK(bn->is_weight(i));
        CHECK(bn->axes_of(cn, i).out_channel == 0);
    }
    CHECK_FALSE(bn->is_weight(0));
    CHECK(find_op_info("", "LayerNormalization")->channels == ChannelFlow::normalizes);
    CHECK(find_op_info("", "LayerNormalization")->is_weight(1));
    CHECK(find_op_info("", "PRelu")->is_weight(1));
    CHECK(find_op_info("", "QLinearConv")->axes_of(cn, 3).out_channel == 0);
    CHECK(find_op_info("", "QLinearConv")->is_weight(4));  // w_scale

    const auto* add = find_op_info("", "Add");
    CHECK(add->elementwise);
    CHECK(add->channels == ChannelFlow::couples);
    Node& residual = t.node("Add", {x, x});
    Node& bias = t.node("Add", {x, t.init("b", f32s(Shape{8}))});
    CHECK(detail::effective_channel_flow(add, t.g, residual) == ChannelFlow::couples);
    CHECK(detail::effective_channel_flow(add, t.g, bias) == ChannelFlow::per_channel);

    const auto* relu = find_op_info("", "Relu");
    CHECK(relu->elementwise);
    CHECK(relu->channels == ChannelFlow::passthrough);
    CHECK(relu->weight_inputs == 0);
    CHECK(find_op_info("", "Concat")->channels == ChannelFlow::concat);
    CHECK_FALSE(find_op_info("", "Concat")->elementwise);
    CHECK(find_op_info("", "Flatten")->channels == ChannelFlow::reshapes);
    CHECK(find_op_info("", "Split")->channels == ChannelFlow::split);
    CHECK(find_op_info("", "GlobalAveragePool")->channels == ChannelFlow::keeps);
    CHECK(find_op_info(kDsinferDomain, "MultiHeadAttention")->channels == ChannelFlow::heads);
    CHECK(find_op_info("", "If")->channels == ChannelFlow::opaque);
    CHECK(find_op_info("", "NoSuchOp") == nullptr);
    CHECK(find_op_info("com.example", "Relu") == nullptr);
    CHECK(detail::effective_channel_flow(nullptr, t.g, residual) == ChannelFlow::opaque);
    CHECK(detail::channel_flow_name(ChannelFlow::couples) == "couples");

    // Every com.dsinfer op has metadata and a shape rule.
    for (const OpSchema& s : kDsinferOps) {
        INFO(s.name);
        const auto* info = find_op_info(kDsinferDomain, s.name);
        REQUIRE(info != nullptr);
        CHECK(info->infer != nullptr);
    }
}

TEST_CASE("op metadata: every op the reference kernels implement is classified", "[op_info]") {
    // The ops of a model the registry runs: the table names each (unknown ops are opaque by the
    // caller, but the kernels' own ops must not be unknown).
    for (const char* op : {"Abs",
                           "Add",
                           "ArgMax",
                           "AveragePool",
                           "BatchNormalization",
                           "Cast",
                           "Clip",
                           "Concat",
                           "Conv",
                           "ConvTranspose",
                           "DequantizeLinear",
                           "Div",
                           "Einsum",
                           "Erf",
                           "Expand",
                           "Flatten",
                           "GRU",
                           "Gather",
                           "Gemm",
                           "GlobalAveragePool",
                           "HardSwish",
                           "Identity",
                           "If",
                           "LSTM",
                           "LayerNormalization",
                           "Loop",
                           "MatMul",
                           "MaxPool",
                           "Mul",
                           "NonZero",
                           "Pad",
                           "QLinearMatMul",
                           "Range",
                           "ReduceMean",
                           "Relu",
                           "Reshape",
                           "Resize",
                           "Scan",
                           "ScatterND",
                           "Shape",
                           "Sigmoid",
                           "Slice",
                           "Softmax",
                           "Split",
                           "Squeeze",
                           "Sub",
                           "Tanh",
                           "Tile",
                           "TopK",
                           "Transpose",
                           "Unsqueeze",
                           "Where"}) {
        INFO(op);
        CHECK(find_op_info("", op) != nullptr);
    }
    std::size_t rules = 0;
    for (const auto* info : detail::all_op_infos()) rules += info->infer != nullptr ? 1 : 0;
    CHECK(rules >= 100);
}

namespace {

/// kernel_evaluator(), counting the shape inferences asked of it.
struct CountingShapes final : GraphEvaluator {
    mutable int shapes = 0;
    Status status = Status::ok();
    Status infer_shapes(Graph& g) const override {
        ++shapes;
        if (!status.is_ok()) return status;
        return kernel_evaluator().infer_shapes(g);
    }
    StatusOr<std::vector<Tensor>> evaluate(const Node& n, const std::vector<Tensor>& inputs,
                                           const std::vector<OpsetImport>& opsets,
                                           std::uint64_t max_bytes) const override {
        return kernel_evaluator().evaluate(n, inputs, opsets, max_bytes);
    }
};

}  // namespace

TEST_CASE("annotate_shapes: the rules first, the evaluator only for what they leave", "[op_info]") {
    G t;
    const ValueId x = t.in("x", DType::f32, "N,4");
    const ValueId r = t.out(t.node("Relu", {x}));
    CountingShapes counting;
    SECTION("every node has a rule: the evaluator is not asked") {
        Graph g = t.g;
        passes::annotate_shapes(g, &counting);
        CHECK(counting.shapes == 0);
        CHECK(same(g.value(r).shape, S("N,4")));
    }
    SECTION("a node without a rule: the evaluator fills it") {
        Node& e = t.node("Einsum", {x, t.init("w", f32s(Shape{4, 3}))});
        attr(e, "equation", std::string("ij,jk->ik"));
        const ValueId y = t.out(e);
        Graph no_eval = t.g;
        passes::annotate_shapes(no_eval, nullptr);
        CHECK(same(no_eval.value(r).shape, S("N,4")));  // the rules did theirs
        CHECK_FALSE(no_eval.value(y).shape.known);
        Graph g = t.g;
        passes::annotate_shapes(g, &counting);
        CHECK(counting.shapes == 1);
        CHECK(same(g.value(y).shape, S("N,3")));
        CHECK(g.value(y).dtype == DType::f32);
    }
    SECTION("out of memory in the evaluator is bad_alloc; other errors are best effort") {
        t.node("Einsum", {x, x}).attributes.emplace_back("equation", [] {
            Attribute a;
            a.kind = AttrKind::s;
            a.s = "ij,ij->i";
            return a;
        }());
        Graph g = t.g;
        counting.status = Status(ErrorCode::resource_exhausted, "out of memory");
        CHECK_THROWS_AS(passes::annotate_shapes(g, &counting), std::bad_alloc);
        counting.status = Status(ErrorCode::internal, "broken");
        Graph h = t.g;
        CHECK_NOTHROW(passes::annotate_shapes(h, &counting));
        CHECK(same(h.value(r).shape, S("N,4")));
    }
}
