// The decoder-block fusions (src/passes/fuse_norm.cpp fuse_rms_norm, src/passes/fuse_decoder.cpp
// fuse_rotary_embedding and fuse_gated_mlp) and the kernels of their com.dsinfer operators
// (reference src/cpu/reference/fused_decoder.cpp and nn_norm.cpp, fast
// src/cpu/fast/fast_decoder.cpp). Each pass fires on the forms torch writes (report counts,
// node counts), leaves near-misses alone, and the fused graph computes what the unfused one
// does: RotaryEmbedding bitwise (the same three roundings), RMSNorm and the gated MLP within
// 1e-5 of |a - b| / (1 + |b|), float32. The fast kernels match the reference at the ISA level
// the run forces ([fusion] and [fast] run once per level: DSINFER_TEST_ISA, tests/CMakeLists.txt)
// and give the same bits at 1 and 3 threads.
// With DSINFER_LLAMA_TINY naming tools/make_models.py's llama_tiny.onnx, every layer of it must
// fuse and match the unfused engine.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <dsinfer/dsinfer.hpp>

#include "engine_models.hpp"

using namespace dsinfer;
using dsinfer::test::attr_f;
using dsinfer::test::attr_i;
using dsinfer::test::attr_ints;
using dsinfer::test::attr_s;
using dsinfer::test::max_rel_diff;
using dsinfer::test::random_f32;

namespace {

using Attrs = std::vector<std::pair<std::string, Attribute>>;

Tensor i64s(std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_vector(Shape{n}, v);
}

/// A graph under construction: inputs with a symbolic "batch" for -1, one output per op.
struct Builder {
    Graph g;
    int count = 0;

    explicit Builder(int opset) { g.opset_imports = {{"", opset}}; }
    ValueId input(const std::string& name, const std::vector<std::int64_t>& dims) {
        SymbolicShape s;
        s.known = true;
        for (auto d : dims) s.dims.push_back(d < 0 ? Dim::named("batch") : Dim::fixed(d));
        const ValueId v = g.add_value(name, DType::f32, std::move(s));
        g.inputs.push_back(v);
        return v;
    }
    ValueId init(Tensor t) { return g.add_initializer("c" + std::to_string(++count), std::move(t)); }
    ValueId op(const std::string& type, std::vector<ValueId> in, Attrs attrs = {},
               const std::string& domain = "") {
        ++count;
        const ValueId out = g.add_value(type + "_out" + std::to_string(count));
        Node& n = g.add_node(type, std::move(in), {out}, type + std::to_string(count));
        n.attributes = std::move(attrs);
        n.domain = domain;
        return out;
    }
    ValueId slice(ValueId x, std::int64_t start, std::int64_t end, std::int64_t axis,
                  std::int64_t step = 1) {
        return op("Slice", {x, init(i64s({start})), init(i64s({end})), init(i64s({axis})),
                            init(i64s({step}))});
    }
};

struct Result {
    std::vector<NamedTensor> out;
    int fired = 0;
    std::map<std::string, int> ops;  // the optimized graph's op types
    std::vector<std::string> algorithms;
};

Result run(const Graph& g, const std::vector<NamedTensor>& feeds, int level,
           std::vector<std::string> backends, const std::string& pass = "", int threads = 0) {
    EngineOptions o;
    o.optimization_level = level;
    o.backends = std::move(backends);
    o.num_threads = threads;
    auto e = InferenceEngine::compile(g, o);
    Result r;
    r.out = e.run(feeds);
    if (!pass.empty()) r.fired = e.optimization_report().count(pass);
    for (const Node& n : e.graph().nodes) ++r.ops[n.op_type];
    for (const auto& d : e.node_descriptions()) r.algorithms.push_back(d.algorithm);
    return r;
}

double worst(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
    REQUIRE(a.size() == b.size());
    double w = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
        REQUIRE(a[k].tensor.shape() == b[k].tensor.shape());
        w = std::max(w, max_rel_diff(a[k].tensor, b[k].tensor));
    }
    return w;
}

/// Level 3 (default backends and reference) against level 0 (reference): `fired` rewrites of
/// `pass`, outputs within `tol`. Returns the default backends' level-3 result.
Result check_fused(const Graph& g, const std::vector<NamedTensor>& feeds, const std::string& pass,
                   int fired, double tol) {
    const Result base = run(g, feeds, 0, {"reference"});
    const Result fused = run(g, feeds, 3, {}, pass);
    const Result fused_ref = run(g, feeds, 3, {"reference"}, pass);
    CHECK(fused.fired == fired);
    CHECK(fused_ref.fired == fired);
    CHECK(worst(fused.out, base.out) <= tol);
    CHECK(worst(fused_ref.out, base.out) <= tol);
    // The unfused graph on the default backends agrees too (the fused form is not a new answer).
    CHECK(worst(run(g, feeds, 0, {}).out, fused.out) <= tol);
    return fused;
}

// ---- RMSNorm ----------------------------------------------------------------------------------

enum class RmsForm { pow_reciprocal, square_div, one_over_no_weight };

/// x [batch, 5, 32] -> the decomposed RMSNorm in one of torch's forms -> y.
Graph rms_graph(RmsForm form, int opset, bool eps_input = false, bool mean_out = false,
                std::int64_t mean_axis = -1) {
    Builder b(opset);
    const ValueId x = b.input("x", {-1, 5, 32});
    const ValueId sq = form == RmsForm::square_div ? b.op("Mul", {x, x})
                                                   : b.op("Pow", {x, b.init(Tensor::scalar(2.f))});
    const ValueId mean = opset >= 18 ? b.op("ReduceMean", {sq, b.init(i64s({mean_axis}))})
                                     : b.op("ReduceMean", {sq}, {{"axes", attr_ints({mean_axis})}});
    const ValueId eps = eps_input ? b.input("eps", {1}) : b.init(Tensor::scalar(1e-6f));
    const ValueId var = form == RmsForm::square_div ? b.op("Add", {eps, mean}) : b.op("Add", {mean, eps});
    const ValueId root = b.op("Sqrt", {var});
    ValueId normed;
    if (form == RmsForm::pow_reciprocal)
        normed = b.op("Mul", {x, b.op("Reciprocal", {root})});
    else if (form == RmsForm::square_div)
        normed = b.op("Div", {x, root});
    else
        normed = b.op("Mul", {b.op("Div", {b.init(Tensor::scalar(1.f)), root}), x});
    ValueId y = normed;
    if (form != RmsForm::one_over_no_weight) {
        const ValueId w = b.init(random_f32({32}, 7));
        y = form == RmsForm::square_div ? b.op("Mul", {y, w}) : b.op("Mul", {w, y});
    }
    b.g.outputs = {y};
    if (mean_out) b.g.outputs.push_back(mean);
    return b.g;
}

std::vector<NamedTensor> rms_feeds(bool eps_input = false) {
    std::vector<NamedTensor> f{{"x", random_f32({2, 5, 32}, 3, 2.f)}};
    if (eps_input) f.push_back({"eps", Tensor::from_vector(Shape{1}, std::vector<float>{1e-6f})});
    return f;
}

// ---- rotary embedding -------------------------------------------------------------------------

enum class RotForm { half, strided, pairs_slice, pairs_gather, wrong_split, swapped };

/// rotate(x) of x [batch, 3, 4, d] in one of torch's forms (or a near-miss).
ValueId rotate(Builder& b, ValueId x, RotForm form, std::int64_t d) {
    const std::int64_t h = d / 2;
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    switch (form) {
        case RotForm::half:
        case RotForm::wrong_split:
        case RotForm::swapped: {
            const std::int64_t cut = form == RotForm::wrong_split ? h - 1 : h;
            const ValueId lo = b.slice(x, 0, cut, -1), up = b.slice(x, cut, big, 3);
            const ValueId neg = b.op("Neg", {up});
            return form == RotForm::swapped ? b.op("Concat", {lo, neg}, {{"axis", attr_i(-1)}})
                                            : b.op("Concat", {neg, lo}, {{"axis", attr_i(-1)}});
        }
        case RotForm::strided: {  // GPT-J: stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
            const ValueId even = b.slice(x, 0, big, -1, 2), odd = b.slice(x, 1, big, -1, 2);
            const ValueId last = b.init(i64s({-1}));
            const ValueId a = b.op("Unsqueeze", {b.op("Neg", {odd}), last});
            const ValueId c = b.op("Unsqueeze", {even, last});
            const ValueId cat = b.op("Concat", {a, c}, {{"axis", attr_i(-1)}});
            return b.op("Reshape", {cat, b.init(i64s({0, 0, 0, d}))});
        }
        case RotForm::pairs_slice:
        case RotForm::pairs_gather: {
            const ValueId y = b.op("Reshape", {x, b.init(i64s({0, 0, 0, h, 2}))});
            ValueId even, odd;
            if (form == RotForm::pairs_slice) {
                even = b.slice(y, 0, 1, -1);
                odd = b.op("Neg", {b.slice(y, 1, 2, 4)});
            } else {
                const ValueId last = b.init(i64s({4}));
                even = b.op("Unsqueeze", {b.op("Gather", {y, b.init(Tensor::scalar(std::int64_t{0}))},
                                               {{"axis", attr_i(-1)}}),
                                         last});
                odd = b.op("Neg", {b.op("Unsqueeze", {b.op("Gather", {y, b.init(Tensor::scalar(std::int64_t{-1}))},
                                                            {{"axis", attr_i(4)}}),
                                                      last})});
            }
            const ValueId cat = b.op("Concat", {odd, even}, {{"axis", attr_i(4)}});
            return b.op("Reshape", {cat, b.init(i64s({0, 0, 0, d}))});
        }
    }
    return kNoValue;
}

/// q and k [batch, 3, 4, d] rotated with the shared cos/sin [1, 1, 4, d]: two rotaries.
Graph rotary_graph(RotForm form, std::int64_t d = 16, bool slice_read_elsewhere = false,
                   std::vector<std::int64_t> cos_dims = {1, 1, 4, 16}) {
    Builder b(13);
    const ValueId q = b.input("q", {-1, 3, 4, d}), k = b.input("k", {-1, 3, 4, d});
    const ValueId cos = b.input("cos", cos_dims), sin = b.input("sin", cos_dims);
    for (ValueId x : {q, k}) {
        const ValueId rot = rotate(b, x, form, d);
        // Mul(x, cos) + Mul(rot, sin) for q; the operands the other way round for k.
        const ValueId y = x == q ? b.op("Add", {b.op("Mul", {x, cos}), b.op("Mul", {rot, sin})})
                                 : b.op("Add", {b.op("Mul", {sin, rot}), b.op("Mul", {cos, x})});
        b.g.outputs.push_back(y);
    }
    if (slice_read_elsewhere) {
        // The first Slice's output is also a graph output: its rotation must stay.
        for (const Node& n : b.g.nodes)
            if (n.op_type == "Slice") {
                b.g.outputs.push_back(n.outputs[0]);
                break;
            }
    }
    return b.g;
}

std::vector<NamedTensor> rotary_feeds(std::int64_t d = 16, std::vector<std::int64_t> cos_dims = {1, 1, 4, 16}) {
    return {{"q", random_f32({2, 3, 4, d}, 11)},
            {"k", random_f32({2, 3, 4, d}, 12)},
            {"cos", random_f32(cos_dims, 13)},
            {"sin", random_f32(cos_dims, 14)}};
}

// ---- gated MLP --------------------------------------------------------------------------------

enum class GateForm { silu, silu_swapped, gelu_erf, gelu_tanh };

/// y [batch, 3, 16] -> Mul(act(MatMul(y, Wg)), MatMul(y, Wu)) -> MatMul(., Wd) -> out.
Graph gated_graph(GateForm form, bool gate_out = false, bool runtime_wg = false,
                  bool other_input = false) {
    Builder b(form == GateForm::gelu_tanh ? 20 : 13);
    const ValueId y = b.input("y", {-1, 3, 16});
    const ValueId y2 = other_input ? b.input("y2", {-1, 3, 16}) : y;
    const ValueId wg = runtime_wg ? b.input("wg", {16, 24}) : b.init(random_f32({16, 24}, 21, 0.3f));
    const ValueId g = b.op("MatMul", {y, wg});
    const ValueId u = b.op("MatMul", {y2, b.init(random_f32({16, 24}, 22, 0.3f))});
    ValueId a = kNoValue;
    switch (form) {
        case GateForm::silu: a = b.op("Mul", {g, b.op("Sigmoid", {g})}); break;
        case GateForm::silu_swapped: a = b.op("Mul", {b.op("Sigmoid", {g}), g}); break;
        case GateForm::gelu_erf: {  // x * 0.5 * (1 + erf(x / sqrt 2)), as fuse_gelu takes it
            const ValueId e = b.op("Erf", {b.op("Div", {g, b.init(Tensor::scalar(1.4142135f))})});
            const ValueId one = b.op("Add", {e, b.init(Tensor::scalar(1.f))});
            a = b.op("Mul", {b.op("Mul", {g, one}), b.init(Tensor::scalar(0.5f))});
            break;
        }
        case GateForm::gelu_tanh: a = b.op("Gelu", {g}, {{"approximate", attr_s("tanh")}}); break;
    }
    const ValueId m = form == GateForm::silu_swapped ? b.op("Mul", {u, a}) : b.op("Mul", {a, u});
    b.g.outputs = {b.op("MatMul", {m, b.init(random_f32({24, 16}, 23, 0.3f))})};
    if (gate_out) b.g.outputs.push_back(g);
    return b.g;
}

std::vector<NamedTensor> gated_feeds(bool runtime_wg = false, bool other_input = false) {
    std::vector<NamedTensor> f{{"y", random_f32({2, 3, 16}, 31)}};
    if (runtime_wg) f.push_back({"wg", random_f32({16, 24}, 21, 0.3f)});
    if (other_input) f.push_back({"y2", random_f32({2, 3, 16}, 32)});
    return f;
}

}  // namespace

TEST_CASE("decoder fusions: the decomposed RMSNorm becomes one RMSNormalization",
          "[fusion][decoder]") {
    struct Case {
        RmsForm form;
        int opset;
        const char* domain;
    };
    for (const Case c : {Case{RmsForm::pow_reciprocal, 13, kDsinferDomain},
                         Case{RmsForm::square_div, 18, kDsinferDomain},
                         Case{RmsForm::one_over_no_weight, 17, kDsinferDomain},
                         Case{RmsForm::pow_reciprocal, 23, ""}}) {
        INFO("form " << static_cast<int>(c.form) << " opset " << c.opset);
        const Result r = check_fused(rms_graph(c.form, c.opset), rms_feeds(), "fuse_rms_norm", 1, 1e-5);
        CHECK(r.ops.size() == 1);
        CHECK(r.ops.count("RMSNormalization") == 1);
    }
    // The ai.onnx node at opset 23 and the com.dsinfer one below it.
    Graph g = rms_graph(RmsForm::pow_reciprocal, 23);
    REQUIRE(g.sort_topologically().is_ok());
    optimize(g, OptimizeOptions{.level = 3});
    REQUIRE(g.nodes.size() == 1);
    CHECK(g.nodes[0].domain.empty());
    Graph h = rms_graph(RmsForm::square_div, 18);
    REQUIRE(h.sort_topologically().is_ok());
    optimize(h, OptimizeOptions{.level = 3});
    REQUIRE(h.nodes.size() == 1);
    CHECK(h.nodes[0].domain == kDsinferDomain);
}

TEST_CASE("decoder fusions: RMSNorm near-misses are left alone", "[fusion][decoder]") {
    // eps fed at run time, the mean over another axis, the mean read elsewhere.
    check_fused(rms_graph(RmsForm::pow_reciprocal, 13, true), rms_feeds(true), "fuse_rms_norm", 0, 1e-5);
    check_fused(rms_graph(RmsForm::square_div, 18, false, false, 1), rms_feeds(), "fuse_rms_norm", 0, 1e-5);
    check_fused(rms_graph(RmsForm::pow_reciprocal, 13, false, true), rms_feeds(), "fuse_rms_norm", 0, 1e-5);
    // Pow 3 is no mean square.
    Graph g = rms_graph(RmsForm::pow_reciprocal, 13);
    for (Node& n : g.nodes)
        if (n.op_type == "Pow") g.values[static_cast<std::size_t>(n.inputs[1])].initializer = Tensor::scalar(3.f);
    check_fused(g, rms_feeds(), "fuse_rms_norm", 0, 1e-5);
    // A weight that would enlarge the output ([5, 32] on [batch, 5, 32] is fine, [2, 1, 32] is
    // not): the norm fuses, the Mul stays.
    Graph w = rms_graph(RmsForm::pow_reciprocal, 13);
    for (Node& n : w.nodes)
        if (n.op_type == "Mul" && w.value(n.inputs[0]).initializer)
            w.values[static_cast<std::size_t>(n.inputs[0])].initializer = random_f32({2, 1, 32}, 8);
    const Result r = check_fused(w, rms_feeds(), "fuse_rms_norm", 1, 1e-5);
    CHECK(r.ops.size() == 2);
}

TEST_CASE("decoder fusions: rotary embeddings in the half and interleaved forms",
          "[fusion][decoder]") {
    struct Case {
        RotForm form;
        std::int64_t interleaved;
    };
    for (const Case c : {Case{RotForm::half, 0}, Case{RotForm::strided, 1},
                         Case{RotForm::pairs_slice, 1}, Case{RotForm::pairs_gather, 1}}) {
        INFO("form " << static_cast<int>(c.form));
        // Bitwise: the fused kernels round as Mul, Mul, Add do.
        const Result r = check_fused(rotary_graph(c.form), rotary_feeds(), "fuse_rotary_embedding", 2, 0.0);
        CHECK(r.ops.size() == 1);
        CHECK(r.ops.count("RotaryEmbedding") == 1);
        Graph g = rotary_graph(c.form);
        REQUIRE(g.sort_topologically().is_ok());
        optimize(g, OptimizeOptions{.level = 3});
        REQUIRE(g.nodes.size() == 2);
        for (const Node& n : g.nodes) CHECK(n.attr_or<std::int64_t>("interleaved", -1).value() == c.interleaved);
    }
    // cos/sin per batch row [batch, 1, 4, 16] and a plain [4, 16] broadcast the same way.
    check_fused(rotary_graph(RotForm::half, 16, false, {-1, 1, 4, 16}), rotary_feeds(16, {2, 1, 4, 16}),
                "fuse_rotary_embedding", 2, 0.0);
    check_fused(rotary_graph(RotForm::half, 16, false, {4, 16}), rotary_feeds(16, {4, 16}),
                "fuse_rotary_embedding", 2, 0.0);
}

TEST_CASE("decoder fusions: rotary near-misses are left alone", "[fusion][decoder]") {
    // Slices not at the half, the halves concatenated the other way round.
    check_fused(rotary_graph(RotForm::wrong_split), rotary_feeds(), "fuse_rotary_embedding", 0, 0.0);
    check_fused(rotary_graph(RotForm::swapped), rotary_feeds(), "fuse_rotary_embedding", 0, 0.0);
    // An odd head size: no halves.
    check_fused(rotary_graph(RotForm::half, 15, false, {1, 1, 4, 15}), rotary_feeds(15, {1, 1, 4, 15}),
                "fuse_rotary_embedding", 0, 0.0);
    // A slice of q also read outside the rotation: q's rotary stays, k's fuses.
    check_fused(rotary_graph(RotForm::half, 16, true), rotary_feeds(), "fuse_rotary_embedding", 1, 0.0);
}

TEST_CASE("decoder fusions: a rotary whose cos/sin enlarge x broadcasts as the Muls do",
          "[fusion][decoder]") {
    // x [batch, 3, 1, 16] against cos/sin [1, 1, 4, 16]: Y is [batch, 3, 4, 16], as unfused.
    Builder b(13);
    const ValueId x = b.input("q", {-1, 3, 1, 16});
    const ValueId cos = b.input("cos", {1, 1, 4, 16}), sin = b.input("sin", {1, 1, 4, 16});
    b.g.outputs = {b.op("Add", {b.op("Mul", {x, cos}), b.op("Mul", {rotate(b, x, RotForm::half, 16), sin})})};
    check_fused(b.g,
                {{"q", random_f32({2, 3, 1, 16}, 1)}, {"cos", random_f32({1, 1, 4, 16}, 2)},
                 {"sin", random_f32({1, 1, 4, 16}, 3)}},
                "fuse_rotary_embedding", 1, 0.0);
}

TEST_CASE("decoder fusions: gated MLPs become one MatMul and a GatedActivation",
          "[fusion][decoder]") {
    for (GateForm f : {GateForm::silu, GateForm::silu_swapped, GateForm::gelu_erf, GateForm::gelu_tanh}) {
        INFO("form " << static_cast<int>(f));
        const Result r = check_fused(gated_graph(f), gated_feeds(), "fuse_gated_mlp", 1, 1e-5);
        CHECK(r.ops.count("GatedActivation") == 1);
        CHECK(r.ops.size() == 2);  // the two MatMul nodes (merged projections, down projection)
        Graph g = gated_graph(f);
        REQUIRE(g.sort_topologically().is_ok());
        optimize(g, OptimizeOptions{.level = 3});
        for (const Node& n : g.nodes)
            if (n.op_type == "GatedActivation") {
                const std::string want = f == GateForm::gelu_erf    ? "gelu"
                                         : f == GateForm::gelu_tanh ? "gelu_tanh"
                                                                    : "silu";
                CHECK(n.attr<std::string>("activation").value() == want);
                const Value& in = g.value(n.inputs[0]);
                REQUIRE(in.producer >= 0);
                const Node& mm = g.nodes[static_cast<std::size_t>(in.producer)];
                CHECK(mm.op_type == "MatMul");  // a plain MatMul, for the GEMM kernels and INT8
                REQUIRE(g.value(mm.inputs[1]).initializer);
                CHECK(g.value(mm.inputs[1]).initializer->shape() == Shape{16, 48});
            }
    }
}

TEST_CASE("decoder fusions: gated MLP near-misses are left alone", "[fusion][decoder]") {
    // The gate projection read elsewhere, a weight fed at run time, two different inputs.
    check_fused(gated_graph(GateForm::silu, true), gated_feeds(), "fuse_gated_mlp", 0, 1e-5);
    check_fused(gated_graph(GateForm::silu, false, true), gated_feeds(true), "fuse_gated_mlp", 0, 1e-5);
    check_fused(gated_graph(GateForm::silu, false, false, true), gated_feeds(false, true),
                "fuse_gated_mlp", 0, 1e-5);
}

// ---- the kernels ------------------------------------------------------------------------------

namespace {

/// One com.dsinfer node on graph inputs named in0, in1, ...
Graph single_node(const std::string& op, const std::vector<std::vector<std::int64_t>>& dims,
                  Attrs attrs) {
    Graph g;
    g.opset_imports = {{"", 17}, {kDsinferDomain, kDsinferOpsetVersion}};
    std::vector<ValueId> in;
    for (std::size_t i = 0; i < dims.size(); ++i) {
        in.push_back(g.add_value("in" + std::to_string(i), DType::f32,
                                 SymbolicShape::from(Shape::make(dims[i]).value())));
        g.inputs.push_back(in.back());
    }
    const ValueId y = g.add_value("y");
    g.add_node(op, in, {y}, op).domain = kDsinferDomain;
    g.nodes.back().attributes = std::move(attrs);
    g.outputs = {y};
    return g;
}

/// The fast kernel ("cpu") against the reference at this run's ISA level, and the fast kernel
/// at 1 and 3 threads bitwise. Returns the worst difference to the reference.
double fast_vs_reference(const Graph& g, const std::vector<NamedTensor>& feeds, const char* family) {
    const Result ref = run(g, feeds, 0, {"reference"});
    const Result one = run(g, feeds, 0, {"cpu"}, "", 1);
    const Result three = run(g, feeds, 0, {"cpu"}, "", 3);
    REQUIRE(one.algorithms.size() == 1);
    CHECK(one.algorithms[0].find(family) != std::string::npos);
    const Tensor& a = one.out[0].tensor;
    const Tensor& b = three.out[0].tensor;
    REQUIRE(a.num_bytes() == b.num_bytes());
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0);
    return worst(one.out, ref.out);
}

}  // namespace

TEST_CASE("decoder kernels: the fast kernels match the reference at this ISA level",
          "[fast][decoder]") {
    SECTION("RMSNormalization, Scale [D] and [1], rows of 1 to 77 columns") {
        for (std::int64_t d : {1, 7, 64, 77}) {
            for (std::int64_t sl : {d, std::int64_t{1}}) {
                INFO("d " << d << " scale " << sl);
                const Graph g = single_node("RMSNormalization", {{5, 9, d}, {sl}},
                                            {{"epsilon", attr_f(1e-5f)}});
                const double w = fast_vs_reference(
                    g, {{"in0", random_f32({5, 9, d}, 40, 3.f)}, {"in1", random_f32({sl}, 41)}},
                    "rmsnorm");
                CHECK(w <= 2e-6);
            }
        }
    }
    SECTION("RotaryEmbedding, both forms, cos/sin broadcast over heads, blocks past 256") {
        for (std::int64_t inter : {0, 1})
            for (std::int64_t d : {2, 16, 78, 640})
                for (std::int64_t xs : {5, 1}) {  // x [2, 3, 1, d]: broadcast by cos/sin
                    INFO("interleaved " << inter << " d " << d << " x seq " << xs);
                    const Graph g = single_node("RotaryEmbedding",
                                                {{2, 3, xs, d}, {2, 1, 5, d}, {1, 1, 5, d}},
                                                {{"interleaved", attr_i(inter)}});
                    const double w = fast_vs_reference(g,
                                                       {{"in0", random_f32({2, 3, xs, d}, 50)},
                                                        {"in1", random_f32({2, 1, 5, d}, 51)},
                                                        {"in2", random_f32({1, 1, 5, d}, 52)}},
                                                       "rotary");
                    CHECK(w == 0.0);
                }
    }
    SECTION("GatedActivation: silu, gelu, gelu_tanh over rows of odd widths") {
        for (const char* act : {"silu", "gelu", "gelu_tanh"})
            for (std::int64_t f : {1, 37, 2048}) {
                INFO(act << " f " << f);
                const Graph g = single_node("GatedActivation", {{3, 5, 2 * f}}, {{"activation", attr_s(act)}});
                const double w = fast_vs_reference(g, {{"in0", random_f32({3, 5, 2 * f}, 60, 6.f)}},
                                                   "gated-activation");
                CHECK(w <= 2e-6);
            }
    }
}

TEST_CASE("decoder kernels: bad inputs are typed errors", "[decoder]") {
    auto code = [](const Graph& g, const std::vector<NamedTensor>& feeds, std::vector<std::string> be) {
        try {
            run(g, feeds, 0, std::move(be));
            return ErrorCode::ok;
        } catch (const Error& e) {
            return e.code();
        }
    };
    for (std::vector<std::string> be : {std::vector<std::string>{"reference"}, std::vector<std::string>{}}) {
        // An odd last dim, cos that does not broadcast with x, an unknown activation: found at load
        // (the declared shapes are static), so invalid_model.
        CHECK(code(single_node("RotaryEmbedding", {{2, 5}, {2, 5}, {2, 5}}, {}),
                   {{"in0", random_f32({2, 5}, 1)}, {"in1", random_f32({2, 5}, 2)}, {"in2", random_f32({2, 5}, 3)}},
                   be) == ErrorCode::invalid_model);
        CHECK(code(single_node("RotaryEmbedding", {{2, 4}, {3, 4}, {3, 4}}, {}),
                   {{"in0", random_f32({2, 4}, 1)}, {"in1", random_f32({3, 4}, 2)}, {"in2", random_f32({3, 4}, 3)}},
                   be) == ErrorCode::invalid_model);
        CHECK(code(single_node("GatedActivation", {{2, 6}}, {{"activation", attr_s("relu")}}),
                   {{"in0", random_f32({2, 6}, 1)}}, be) == ErrorCode::invalid_model);
        CHECK(code(single_node("GatedActivation", {{2, 5}}, {{"activation", attr_s("silu")}}),
                   {{"in0", random_f32({2, 5}, 1)}}, be) == ErrorCode::invalid_model);
    }
}

TEST_CASE("decoder fusions: every layer of llama_tiny fuses and matches the unfused engine",
          "[fusion][decoder]") {
    const char* path = std::getenv("DSINFER_LLAMA_TINY");
    if (path == nullptr || !std::filesystem::exists(path)) {
        WARN("DSINFER_LLAMA_TINY is not set to tools/make_models.py's llama_tiny.onnx: skipped");
        return;
    }
    const Graph g = load_onnx(path);
    // 2 layers, 2 KV heads of 16, vocab 256: a prefill of 5 tokens after 3 cached ones.
    constexpr std::int64_t layers = 2, kv = 2, d = 16, past = 3, seq = 5;
    std::vector<NamedTensor> feeds;
    std::vector<std::int64_t> ids(seq), pos(seq), mask(past + seq, 1);
    for (std::int64_t i = 0; i < seq; ++i) {
        ids[static_cast<std::size_t>(i)] = (37 * i + 11) % 256;
        pos[static_cast<std::size_t>(i)] = past + i;
    }
    feeds.push_back({"input_ids", Tensor::from_vector(Shape{1, seq}, ids)});
    feeds.push_back({"position_ids", Tensor::from_vector(Shape{1, seq}, pos)});
    feeds.push_back({"attention_mask", Tensor::from_vector(Shape{1, past + seq}, mask)});
    for (std::int64_t l = 0; l < layers; ++l)
        for (const char* kind : {"key", "value"})
            feeds.push_back({"past_key_values." + std::to_string(l) + "." + kind,
                             random_f32({1, kv, past, d}, static_cast<std::uint32_t>(70 + l), 0.5f)});
    const Result base = run(g, feeds, 0, {"reference"});
    EngineOptions o;
    auto e = InferenceEngine::compile(g, o);
    const OptimizeReport& rep = e.optimization_report();
    CHECK(rep.count("fuse_rms_norm") == 2 * layers + 1);
    CHECK(rep.count("fuse_rotary_embedding") == 2 * layers);
    CHECK(rep.count("fuse_gated_mlp") == layers);
    std::map<std::string, int> ops;
    for (const Node& n : e.graph().nodes) ++ops[n.op_type];
    CHECK(ops["RMSNormalization"] == 2 * layers + 1);
    CHECK(ops["RotaryEmbedding"] == 2 * layers);
    CHECK(ops["GatedActivation"] == layers);
    // Nothing of the decomposed forms is left.
    for (const char* op : {"Pow", "Reciprocal", "Sqrt", "Neg", "Sigmoid", "ReduceMean"}) {
        INFO(op);
        CHECK(ops.count(op) == 0);
    }
    const auto fused = e.run(feeds);
    CHECK(worst(fused, base.out) <= 1e-4);
    CHECK(worst(run(g, feeds, 3, {"reference"}).out, base.out) <= 1e-5);
    CHECK(worst(run(g, feeds, 0, {}).out, base.out) <= 1e-4);
}
