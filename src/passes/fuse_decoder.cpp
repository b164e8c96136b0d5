// Decoder-block fusions (level 2): the forms torch writes for Llama-style decoders.
//
//   fuse_rotary_embedding  Add(Mul(x, cos), Mul(rotate(x), sin)) (operands in either order)
//                          with rotate(x) one of
//                            half:        Concat(Neg(Slice(x, [D/2, D))), Slice(x, [0, D/2)),
//                                         axis = last)
//                            interleaved: Reshape(Concat(odd, even, axis = last), x's shape:
//                                         proven by the shapes, or a constant target copying
//                                         the leading dims with 0s),
//                                         the pairs [..., D/2, 2] of (-x[2i+1], x[2i]) taken
//                                         either as strided slices of x (x[..., 1::2] and
//                                         x[..., 0::2], each Unsqueezed on the new last axis)
//                                         or from Reshape(x, [..., D/2, 2]) by Slice [k, k+1)
//                                         or Gather(k) + Unsqueeze on its last axis; the Neg
//                                         before or after the Unsqueeze
//                          ==> com.dsinfer RotaryEmbedding(x, cos, sin; interleaved)
//   fuse_gated_mlp         Mul(act(MatMul(y, Wg)), MatMul(y, Wu)) (either order), Wg and Wu
//                          float32 constants [H, F], act SiLU (Mul(g, Sigmoid(g)) or Swish
//                          with alpha 1) or Gelu (erf or tanh; fuse_gelu writes the erf form)
//                          ==> MatMul(y, [Wg | Wu]) -> com.dsinfer GatedActivation(activation)
//
// Exactness: the rotary pass needs x's last dim D static and even, every slice exactly the
// half (or the strided/pair element) it stands for, the pairs' Reshape back to x's own shape
// (proven by the annotated shapes), and Cos/Sin float32 whose last dim is D or 1 where known.
// The fused node broadcasts X, Cos and Sin together as the unfused Mul, Mul and Add do (so the
// leading dims need no proof: torch's decoders lose the sequence symbol after the first
// attention block) and computes the same three roundings (x·cos, rotate(x)·sin, their sum), so
// it is bitwise the unfused graph. The gated
// pass concatenates the two weights into a new initializer; the product is the two products
// side by side (every output column sums the same terms in the same order in dsinfer's GEMM).
// Every intermediate must be read only inside its pattern and not be pinned.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <vector>

#include "ops/gated_activation.hpp"
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

/// The producer of `v` when it is the ai.onnx op `op`, not taken yet, and `v` is read only by
/// node `reader` (and not pinned); else nullptr. `idx` is the producer's index.
const Node* feeding(const GraphIndex& ix, const Rewriter& rw, ValueId v, int reader,
                    std::string_view op, int& idx) {
    idx = ix.producer(v);
    if (idx < 0 || rw.removed(idx) || ix.sole_consumer(v) != reader) return nullptr;
    const Node& n = ix.graph().nodes[static_cast<std::size_t>(idx)];
    return is_op(n, op) ? &n : nullptr;
}

/// `axis` normalized against `rank`, or -1 when outside it.
int64_t norm_axis(int64_t axis, int rank) {
    if (axis < 0) axis += rank;
    return axis >= 0 && axis < rank ? axis : -1;
}

/// The single axis of an Unsqueeze (attribute before opset 13, constant input after),
/// normalized against its output rank; -1 when not exactly one known axis.
int64_t unsqueeze_axis(const GraphIndex& ix, const Node& n, int out_rank) {
    std::optional<std::vector<int64_t>> axes;
    if (const Attribute* a = n.find_attr("axes"); a != nullptr && a->kind == AttrKind::ints)
        axes = a->ints;
    else if (n.inputs.size() == 2)
        axes = constant_ints(ix, n.inputs[1]);
    return axes && axes->size() == 1 ? norm_axis((*axes)[0], out_rank) : -1;
}

/// A Slice along one axis: [start, end) clamped as ONNX does (positive steps only).
struct AxisSlice {
    ValueId data = kNoValue;
    int64_t axis = -1, start = 0, end = 0, step = 1;
};

/// The Slice `n` when it cuts exactly one axis of its rank-`rank` input with constant
/// parameters and a positive step, that axis of static size `dim(axis)`.
template <class DimOf>
std::optional<AxisSlice> axis_slice(const GraphIndex& ix, const Node& n, int rank, DimOf dim) {
    if (!is_op(n, "Slice") || n.inputs.empty()) return std::nullopt;
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (ix.graph().opset("") < 10) {
        auto attr = [&](const char* name) -> std::optional<std::vector<int64_t>> {
            const Attribute* a = n.find_attr(name);
            if (a == nullptr) return std::nullopt;
            if (a->kind != AttrKind::ints) return std::vector<int64_t>{};
            return a->ints;
        };
        starts = attr("starts");
        ends = attr("ends");
        axes = attr("axes");
    } else {
        if (n.inputs.size() < 3) return std::nullopt;
        starts = constant_ints(ix, n.inputs[1]);
        ends = constant_ints(ix, n.inputs[2]);
        const auto opt_input = [&](std::size_t i) -> std::optional<std::vector<int64_t>> {
            if (n.inputs.size() <= i || n.inputs[i] == kNoValue) return std::nullopt;
            auto v = constant_ints(ix, n.inputs[i]);
            return v ? v : std::vector<int64_t>{};  // not constant: empty (refused below)
        };
        axes = opt_input(3);
        steps = opt_input(4);
    }
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (!axes) axes = std::vector<int64_t>{0};
    if (!steps) steps = std::vector<int64_t>{1};
    if (axes->size() != 1 || steps->size() != 1 || (*steps)[0] <= 0) return std::nullopt;
    AxisSlice s;
    s.data = n.inputs[0];
    s.axis = norm_axis((*axes)[0], rank);
    if (s.axis < 0) return std::nullopt;
    const int64_t d = dim(s.axis);
    if (d < 0) return std::nullopt;
    int64_t b = (*starts)[0], e = (*ends)[0];
    if (b < 0) b += d;
    if (e < 0) e += d;
    s.start = std::clamp<int64_t>(b, 0, d);
    s.end = std::clamp<int64_t>(e, 0, d);
    s.step = (*steps)[0];
    return s;
}

/// Two dims are provably equal: the same static value or the same symbol.
bool same_dim(const Dim& a, const Dim& b) {
    if (a.is_static() || b.is_static()) return a.is_static() && b.is_static() && a.value == b.value;
    return !a.symbol.empty() && a.symbol == b.symbol;
}

/// x's last dim when static, even and positive; else -1.
int64_t even_last_dim(const Value& x) {
    if (!x.shape.known || x.shape.rank() == 0) return -1;
    const Dim& d = x.shape.dims.back();
    return d.is_static() && d.value > 0 && d.value % 2 == 0 ? d.value : -1;
}

/// `v` is float32 and, where its last dim is known, it is `d` or 1: the fused node broadcasts
/// X, Cos and Sin as the unfused Mul, Mul and Add do, except along X's last axis (the
/// rotation's), which Cos/Sin must not enlarge. An unknown last dim of another size fails
/// both forms alike at run time.
bool rotary_operand(const Value& v, int64_t d) {
    if (!is_f32(v)) return false;
    if (!v.shape.known || v.shape.rank() == 0) return v.shape.known;
    const Dim& last = v.shape.dims.back();
    return !last.is_static() || last.value == d || last.value == 1;
}

/// A Reshape to a constant target (allowzero 0) that keeps its input's first `keep` dims (each
/// entry 0, a copy, or the static dim `x` has there, `x` being what the input's leading dims
/// are) and ends with `tail`.
bool keeps_leading(const GraphIndex& ix, const Node& reshape, const SymbolicShape& x, int keep,
                   std::initializer_list<int64_t> tail) {
    const auto allow = reshape.attr_or<int64_t>("allowzero", 0);
    const auto t = constant_ints(ix, reshape.inputs[1]);
    if (!allow.is_ok() || allow.value() != 0 || !t || !x.known || x.rank() < keep ||
        t->size() != static_cast<std::size_t>(keep) + tail.size())
        return false;
    for (int i = 0; i < keep; ++i) {
        const int64_t v = (*t)[static_cast<std::size_t>(i)];
        const Dim& xd = x.dims[static_cast<std::size_t>(i)];
        if (v != 0 && !(xd.is_static() && xd.value == v)) return false;
    }
    return std::equal(tail.begin(), tail.end(), t->begin() + keep);
}

/// A matched rotate(x): its input and the nodes computing it.
struct Rotation {
    ValueId x = kNoValue;
    bool interleaved = false;
    std::vector<int> nodes;
};

/// rotate(x) = Concat(Neg(Slice(x, [D/2, D))), Slice(x, [0, D/2)), axis = last): node ci.
std::optional<Rotation> match_half(const GraphIndex& ix, const Rewriter& rw, int ci) {
    const Graph& g = ix.graph();
    const Node& c = g.nodes[static_cast<std::size_t>(ci)];
    if (!is_op(c, "Concat") || c.inputs.size() != 2) return std::nullopt;
    int ni = -1, hi = -1, li = -1;
    const Node* neg = feeding(ix, rw, c.inputs[0], ci, "Neg", ni);
    if (neg == nullptr || neg->inputs.size() != 1) return std::nullopt;
    const Node* upper = feeding(ix, rw, neg->inputs[0], ni, "Slice", hi);
    const Node* lower = feeding(ix, rw, c.inputs[1], ci, "Slice", li);
    if (upper == nullptr || lower == nullptr || upper->inputs[0] != lower->inputs[0])
        return std::nullopt;
    const ValueId x = lower->inputs[0];
    const Value& xv = g.value(x);
    const int64_t d = even_last_dim(xv);
    if (d < 0 || ix.constant(x) != nullptr) return std::nullopt;
    const int rank = xv.shape.rank();
    auto axis = c.attr_or<int64_t>("axis", 0);
    if (!axis.is_ok() || norm_axis(axis.value(), rank) != rank - 1) return std::nullopt;
    auto dim = [&](int64_t a) {
        const Dim& e = xv.shape.dims[static_cast<std::size_t>(a)];
        return e.is_static() ? e.value : int64_t{-1};
    };
    const auto up = axis_slice(ix, *upper, rank, dim);
    const auto lo = axis_slice(ix, *lower, rank, dim);
    const int64_t h = d / 2;
    if (!up || !lo || up->axis != rank - 1 || lo->axis != rank - 1 || up->step != 1 ||
        lo->step != 1 || up->start != h || up->end != d || lo->start != 0 || lo->end != h)
        return std::nullopt;
    return Rotation{x, false, {ci, ni, hi, li}};
}

/// One operand of the interleaved rotation's Concat: [Neg] [Unsqueeze] [Neg] over a Slice or
/// a Gather (the leaf), each read only by the next.
struct PairPart {
    bool neg = false;
    int unsqueeze = -1;  // node index
    int leaf = -1;       // Slice or Gather node index
    std::vector<int> nodes;
};

std::optional<PairPart> peel_pair_part(const GraphIndex& ix, const Rewriter& rw, ValueId v,
                                       int reader) {
    const Graph& g = ix.graph();
    PairPart p;
    for (;;) {
        const int idx = ix.producer(v);
        if (idx < 0 || rw.removed(idx) || ix.sole_consumer(v) != reader) return std::nullopt;
        const Node& n = g.nodes[static_cast<std::size_t>(idx)];
        if (n.inputs.empty() || !n.domain.empty()) return std::nullopt;
        p.nodes.push_back(idx);
        if (n.op_type == "Neg" && !p.neg && n.inputs.size() == 1) {
            p.neg = true;
        } else if (n.op_type == "Unsqueeze" && p.unsqueeze < 0) {
            p.unsqueeze = idx;
        } else if (n.op_type == "Slice" || n.op_type == "Gather") {
            p.leaf = idx;
            return p;
        } else {
            return std::nullopt;
        }
        v = n.inputs[0];
        reader = idx;
    }
}

/// rotate(x) with interleaved pairs, ending in the Reshape node ri (see the file comment).
std::optional<Rotation> match_interleaved(const GraphIndex& ix, const Rewriter& rw, int ri) {
    const Graph& g = ix.graph();
    const Node& back = g.nodes[static_cast<std::size_t>(ri)];
    if (!is_op(back, "Reshape") || back.inputs.size() != 2) return std::nullopt;
    int ci = -1;
    const Node* cat = feeding(ix, rw, back.inputs[0], ri, "Concat", ci);
    if (cat == nullptr || cat->inputs.size() != 2) return std::nullopt;
    const auto odd = peel_pair_part(ix, rw, cat->inputs[0], ci);
    const auto even = peel_pair_part(ix, rw, cat->inputs[1], ci);
    if (!odd || !even || !odd->neg || even->neg) return std::nullopt;
    const Node& odd_leaf = g.nodes[static_cast<std::size_t>(odd->leaf)];
    const Node& even_leaf = g.nodes[static_cast<std::size_t>(even->leaf)];
    if (odd_leaf.op_type != even_leaf.op_type || odd_leaf.inputs[0] != even_leaf.inputs[0])
        return std::nullopt;
    // The source: x itself (strided slices) or its pairs view y = Reshape(x, [..., D/2, 2]).
    ValueId x = odd_leaf.inputs[0];
    const bool strided = odd_leaf.op_type == "Slice" && odd->unsqueeze >= 0;
    std::vector<int> nodes{ri, ci};
    int yi = -1;
    if (!strided) {
        const Node* split = nullptr;
        yi = ix.producer(x);
        if (yi >= 0 && !rw.removed(yi)) split = &g.nodes[static_cast<std::size_t>(yi)];
        if (split == nullptr || !is_op(*split, "Reshape") || split->inputs.size() != 2)
            return std::nullopt;
        x = split->inputs[0];
        nodes.push_back(yi);
    }
    const Value& xv = g.value(x);
    const int64_t d = even_last_dim(xv);
    if (d < 0 || ix.constant(x) != nullptr) return std::nullopt;
    const int rank = xv.shape.rank();
    // Concat along the new last axis, and the Reshape back to x's own shape: proven by the
    // annotated shapes, or by a target that keeps the pairs' leading dims (then those must be
    // x's: by construction for strided slices, checked below for the pairs view).
    auto axis = cat->attr_or<int64_t>("axis", 0);
    if (!axis.is_ok() || norm_axis(axis.value(), rank + 1) != rank) return std::nullopt;
    const bool back_proven = same_shape(g.value(back.outputs[0]).shape, xv.shape);
    if (!back_proven && !keeps_leading(ix, back, xv.shape, rank - 1, {d})) return std::nullopt;
    for (const PairPart* p : {&*odd, &*even}) {
        const int64_t k = p == &*odd ? 1 : 0;
        const Node& leaf = g.nodes[static_cast<std::size_t>(p->leaf)];
        // An Unsqueeze makes the new last axis of rank + 1 (strided slices and Gather need it).
        const bool unsq = p->unsqueeze >= 0;
        if (unsq && unsqueeze_axis(ix, g.nodes[static_cast<std::size_t>(p->unsqueeze)],
                                   rank + 1) != rank)
            return std::nullopt;
        if (strided) {  // Unsqueeze(x[..., k::2])
            if (!unsq) return std::nullopt;
            auto dim = [&](int64_t a) { return a == rank - 1 ? d : int64_t{-1}; };
            const auto s = axis_slice(ix, leaf, rank, dim);
            if (!s || s->axis != rank - 1 || s->step != 2 || s->start != k || s->end != d)
                return std::nullopt;
        } else if (leaf.op_type == "Slice") {  // y[..., k:k+1]
            auto dim = [&](int64_t a) { return a == rank ? int64_t{2} : int64_t{-1}; };
            const auto s = axis_slice(ix, leaf, rank + 1, dim);
            if (unsq || !s || s->axis != rank || s->step != 1 || s->start != k || s->end != k + 1)
                return std::nullopt;
        } else {  // Unsqueeze(Gather(y, k, axis = last))
            auto gaxis = leaf.attr_or<int64_t>("axis", 0);
            const Tensor* idx = leaf.inputs.size() == 2 ? ix.constant(leaf.inputs[1]) : nullptr;
            const auto kv = idx != nullptr && idx->num_dims() == 0
                                ? constant_ints(ix, leaf.inputs[1])
                                : std::nullopt;
            if (!unsq || !gaxis.is_ok() || norm_axis(gaxis.value(), rank + 1) != rank || !kv ||
                kv->size() != 1 || ((*kv)[0] != k && (*kv)[0] != k - 2))
                return std::nullopt;
        }
        nodes.insert(nodes.end(), p->nodes.begin(), p->nodes.end());
    }
    if (!strided) {
        // y: [..., D/2, 2] (each row of x its row of pairs, whatever the leading dims), read
        // only by the two leaves; its leading dims x's when the Reshape back copies them.
        const Node& split = g.nodes[static_cast<std::size_t>(yi)];
        const ValueId y = split.outputs[0];
        const SymbolicShape& ys = g.value(y).shape;
        if (!ys.known || ys.rank() != rank + 1 || !ix.internal(y, nodes)) return std::nullopt;
        bool lead = true;
        for (int a = 0; a + 1 < rank; ++a)
            lead = lead && same_dim(ys.dims[static_cast<std::size_t>(a)],
                                    xv.shape.dims[static_cast<std::size_t>(a)]);
        if (!back_proven && !lead && !keeps_leading(ix, split, xv.shape, rank - 1, {d / 2, 2}))
            return std::nullopt;
        const Dim& pairs = ys.dims[static_cast<std::size_t>(rank - 1)];
        const Dim& two = ys.dims[static_cast<std::size_t>(rank)];
        if (!pairs.is_static() || pairs.value != d / 2 || !two.is_static() || two.value != 2)
            return std::nullopt;
    }
    return Rotation{x, true, std::move(nodes)};
}

class FuseRotaryEmbedding final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_rotary_embedding"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t ai = 0; ai < g.nodes.size(); ++ai) {
            const Node& add = g.nodes[ai];
            if (!is_op(add, "Add") || add.inputs.size() != 2 || rw.removed(static_cast<int>(ai)))
                continue;
            const int a = static_cast<int>(ai);
            bool done = false;
            for (int k = 0; k < 2 && !done; ++k) {
                int xi = -1, ri = -1;
                const Node* mx = feeding(ix, rw, add.inputs[static_cast<std::size_t>(k)], a, "Mul", xi);
                const Node* mr = feeding(ix, rw, add.inputs[static_cast<std::size_t>(1 - k)], a, "Mul", ri);
                if (mx == nullptr || mr == nullptr || mx->inputs.size() != 2 ||
                    mr->inputs.size() != 2)
                    continue;
                for (int j = 0; j < 2 && !done; ++j) {
                    const ValueId rot = mr->inputs[static_cast<std::size_t>(j)];
                    const ValueId sin = mr->inputs[static_cast<std::size_t>(1 - j)];
                    const int pi = ix.producer(rot);
                    if (pi < 0 || rw.removed(pi) || ix.sole_consumer(rot) != ri) continue;
                    std::optional<Rotation> m = match_half(ix, rw, pi);
                    if (!m) m = match_interleaved(ix, rw, pi);
                    if (!m) continue;
                    const ValueId cos = other_operand(*mx, m->x);
                    const int64_t d = even_last_dim(g.value(m->x));
                    if (cos == kNoValue || !rotary_operand(g.value(cos), d) ||
                        !rotary_operand(g.value(sin), d) || !is_f32(g.value(m->x)))
                        continue;
                    Node& n = rw.add("RotaryEmbedding", kDsinferDomain, {m->x, cos, sin},
                                     {add.outputs[0]}, add.name);
                    set_attr(n, "interleaved", int64_t{m->interleaved ? 1 : 0});
                    for (int p : m->nodes) rw.remove(p);
                    rw.remove(xi);
                    rw.remove(ri);
                    rw.remove(a);
                    ++fired;
                    done = true;
                }
            }
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

// ---- gated MLP -------------------------------------------------------------------------------

/// act(g) read only by node `reader`: its input g, the activation and its nodes.
struct GateAct {
    ValueId g = kNoValue;
    detail::GatedAct act = detail::GatedAct::silu;
    std::vector<int> nodes;
};

std::optional<GateAct> match_gate_activation(const GraphIndex& ix, const Rewriter& rw, ValueId a,
                                             int reader) {
    const Graph& gr = ix.graph();
    const int ni = ix.producer(a);
    if (ni < 0 || rw.removed(ni) || ix.sole_consumer(a) != reader) return std::nullopt;
    const Node& n = gr.nodes[static_cast<std::size_t>(ni)];
    GateAct r;
    r.nodes.push_back(ni);
    if (is_op(n, "Mul") && n.inputs.size() == 2) {  // Mul(g, Sigmoid(g)), either order
        for (int k = 0; k < 2; ++k) {
            int si = -1;
            const Node* sig = feeding(ix, rw, n.inputs[static_cast<std::size_t>(k)], ni, "Sigmoid", si);
            if (sig == nullptr || sig->inputs.size() != 1 ||
                sig->inputs[0] != n.inputs[static_cast<std::size_t>(1 - k)])
                continue;
            r.g = sig->inputs[0];
            r.nodes.push_back(si);
            return r;
        }
        return std::nullopt;
    }
    if (n.inputs.size() != 1) return std::nullopt;
    if (is_op(n, "Swish")) {
        auto alpha = n.attr_or<float>("alpha", 1.f);
        if (!alpha.is_ok() || alpha.value() != 1.f) return std::nullopt;
        r.g = n.inputs[0];
        return r;
    }
    if (n.op_type == "Gelu" && (n.domain.empty() || n.domain == kDsinferDomain)) {
        auto approx = n.attr_or<std::string>("approximate", "none");
        if (!approx.is_ok() || (approx.value() != "none" && approx.value() != "tanh"))
            return std::nullopt;
        r.g = n.inputs[0];
        r.act = approx.value() == "tanh" ? detail::GatedAct::gelu_tanh : detail::GatedAct::gelu;
        return r;
    }
    return std::nullopt;
}

/// A float32 constant matrix.
const Tensor* weight_matrix(const GraphIndex& ix, ValueId v) {
    const Tensor* t = ix.constant(v);
    return t != nullptr && t->dtype() == DType::f32 && t->num_dims() == 2 ? t : nullptr;
}

class FuseGatedMlp final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_gated_mlp"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t mi = 0; mi < g.nodes.size(); ++mi) {
            if (!is_op(g.nodes[mi], "Mul") || g.nodes[mi].inputs.size() != 2 ||
                rw.removed(static_cast<int>(mi)))
                continue;
            const int m = static_cast<int>(mi);
            for (int k = 0; k < 2; ++k) {
                const Node& mul = g.nodes[mi];
                const auto act = match_gate_activation(ix, rw, mul.inputs[static_cast<std::size_t>(k)], m);
                if (!act) continue;
                // g = MatMul(y, Wg) read only by the activation; u = MatMul(y, Wu) only by mul.
                const int gi = ix.producer(act->g);
                int ui = -1;
                const Node* up = feeding(ix, rw, mul.inputs[static_cast<std::size_t>(1 - k)], m, "MatMul", ui);
                if (gi < 0 || rw.removed(gi) || up == nullptr || !ix.internal(act->g, act->nodes))
                    continue;
                const Node& gate = g.nodes[static_cast<std::size_t>(gi)];
                if (!is_op(gate, "MatMul") || gate.inputs.size() != 2 || up->inputs.size() != 2 ||
                    gate.inputs[0] != up->inputs[0] || ix.constant(gate.inputs[0]) != nullptr)
                    continue;
                const Tensor* wg = weight_matrix(ix, gate.inputs[1]);
                const Tensor* wu = weight_matrix(ix, up->inputs[1]);
                if (wg == nullptr || wu == nullptr || wg->shape() != wu->shape()) continue;
                const int64_t h = wg->shape()[0], f = wg->shape()[1];
                // [Wg | Wu], row by row.
                Tensor w = Tensor::zeros(DType::f32, Shape{h, 2 * f});
                float* pw = w.data_unchecked<float>();
                const float* pg = wg->data_unchecked<float>();
                const float* pu = wu->data_unchecked<float>();
                for (int64_t r = 0; r < h; ++r) {
                    std::memcpy(pw + r * 2 * f, pg + r * f, static_cast<std::size_t>(f) * 4);
                    std::memcpy(pw + r * 2 * f + f, pu + r * f, static_cast<std::size_t>(f) * 4);
                }
                // The values and nodes are read before new_constant/new_value move g.values.
                const ValueId y = gate.inputs[0];
                const ValueId out = mul.outputs[0];
                const std::string base = gate.name.empty() ? "gated_mlp" : gate.name;
                const std::string mul_name = mul.name;
                SymbolicShape both = g.value(up->outputs[0]).shape;
                if (both.known && both.rank() > 0) both.dims.back() = Dim::fixed(2 * f);
                std::vector<int> pattern = act->nodes;
                pattern.insert(pattern.end(), {gi, ui, m});
                const ValueId wv = rw.new_constant(base + "/gate_up_W", std::move(w));
                const ValueId xv = rw.new_value(base + "/gate_up", DType::f32, std::move(both));
                rw.add("MatMul", "", {y, wv}, {xv}, base);
                Node& n = rw.add("GatedActivation", kDsinferDomain, {xv}, {out}, mul_name);
                set_attr(n, "activation", std::string(detail::gated_activation_name(act->act)));
                for (int p : pattern) rw.remove(p);
                ++fired;
                break;
            }
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_rotary_embedding() {
    return std::make_unique<FuseRotaryEmbedding>();
}
std::unique_ptr<GraphPass> make_fuse_gated_mlp() { return std::make_unique<FuseGatedMlp>(); }

}  // namespace dsinfer::passes
