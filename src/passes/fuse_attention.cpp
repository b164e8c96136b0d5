// fuse_attention (level 2): the multi-head attention block of BERT-class encoders as exporters
// write it, from the head split of the Q/K/V projections to the head merge,
//
//   Qh = Transpose(Reshape(Xq, [B, S, H, Dh]), [0,2,1,3])          (Xq: the Q projection)
//   Kt = Transpose(Reshape(Xk, [B, S, H, Dh]), [0,2,3,1])          (or [0,2,1,3] then [0,1,3,2])
//   Vh = Transpose(Reshape(Xv, [B, S, H, Dv]), [0,2,1,3])
//   P  = Softmax(MatMul(Qh, Kt) · scale (+ Mask), axis = last)
//   Y  = Reshape(Transpose(MatMul(P, Vh), [0,2,1,3]), [B, S, H·Dv])
//
// ==> Y = com.dsinfer MultiHeadAttention(Xq, Xk, Xv, Mask?; num_heads = H, scale).
// The scale is the product of every scalar-constant Mul/Div found on the scores, on Qh or on Kt
// (before or after the transposes: HuggingFace divides the scores by sqrt(Dh), torch's SDPA
// export multiplies Q and Kᵀ by Dh^-1/4), 1 when there is none. The Mask is the other operand of
// an Add on the scaled scores (either order). A Dropout (inference: identity) may sit between
// the Softmax and the second MatMul.
// Reshape shapes may be constants ([0, 0, 12, 64], [0, 0, 768], -1 where it is exact) or the
// exporters' Shape -> Gather/Slice -> Unsqueeze -> Concat chains; every copied dim must provably
// be the dim it stands for (the tensor's own dim, or a known shape with the same static value or
// symbol). Every intermediate must be used only inside the block (GraphIndex::internal), so a
// graph that reads a score, the probabilities or a head-split tensor elsewhere is left alone.
// The projections (MatMul + Add bias) stay: fuse_matmul_bias_activation fuses them afterwards.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

/// One entry of a Reshape's target shape.
struct DimRef {
    enum Kind { constant, copy, infer } kind = constant;
    int64_t value = 0;       // constant
    ValueId of = kNoValue;   // copy: dim `index` of value `of`
    int64_t index = 0;
};

/// Matching state of one attention block.
struct Block {
    std::vector<int> nodes;        // nodes the fused node replaces
    std::vector<int> shape_chain;  // Shape/Gather/Concat nodes feeding the merge Reshape
    double scale = 1.0;
};

const Node* op_node(const Graph& g, const GraphIndex& ix, ValueId v, std::string_view op,
                    int* index = nullptr) {
    const int p = ix.producer(v);
    if (p < 0) return nullptr;
    const Node& n = g.nodes[static_cast<std::size_t>(p)];
    if (n.op_type != op || !n.domain.empty()) return nullptr;
    if (index != nullptr) *index = p;
    return &n;
}

std::optional<std::vector<int64_t>> const_ints(const GraphIndex& ix, ValueId v) {
    const Tensor* t = ix.constant(v);
    if (t == nullptr || t->num_dims() > 1) return std::nullopt;
    std::vector<int64_t> out;
    for (int64_t i = 0; i < t->num_elements(); ++i) {
        if (t->dtype() == DType::i64) out.push_back(t->data_unchecked<int64_t>()[i]);
        else if (t->dtype() == DType::i32) out.push_back(t->data_unchecked<std::int32_t>()[i]);
        else return std::nullopt;
    }
    return out;
}

std::optional<std::vector<int64_t>> ints_attr(const Node& n, std::string_view name) {
    const Attribute* a = n.find_attr(name);
    if (a == nullptr || a->kind != AttrKind::ints) return std::nullopt;
    return a->ints;
}

int64_t int_attr(const Node& n, std::string_view name, int64_t fallback) {
    const Attribute* a = n.find_attr(name);
    return (a != nullptr && a->kind == AttrKind::i) ? a->i : fallback;
}

bool is_transpose(const Node* n, std::initializer_list<int64_t> perm) {
    if (n == nullptr || n->inputs.size() != 1) return false;
    const auto p = ints_attr(*n, "perm");
    return p && std::equal(p->begin(), p->end(), perm.begin(), perm.end());
}

/// Dims `v` provably has: known shape, dim i static or a named symbol.
const Dim* known_dim(const Graph& g, ValueId v, int64_t i) {
    const SymbolicShape& s = g.value(v).shape;
    if (!s.known || i < 0 || i >= s.rank()) return nullptr;
    const Dim& d = s.dims[static_cast<std::size_t>(i)];
    return (d.is_static() || !d.symbol.empty()) ? &d : nullptr;
}

/// True when `r` provably equals dim `i` of `x`.
bool is_dim_of(const Graph& g, const DimRef& r, ValueId x, int64_t i) {
    if (r.kind == DimRef::copy && r.of == x && r.index == i) return true;
    const Dim* want = known_dim(g, x, i);
    if (want == nullptr) return false;
    if (r.kind == DimRef::constant) return want->is_static() && want->value == r.value;
    if (r.kind != DimRef::copy) return false;
    const Dim* have = known_dim(g, r.of, r.index);
    if (have == nullptr || have->is_static() != want->is_static()) return false;
    return want->is_static() ? have->value == want->value : have->symbol == want->symbol;
}

/// Appends the dims one part of a shape Concat stands for; false if it is not a form we know.
bool eval_shape_part(const Graph& g, const GraphIndex& ix, ValueId v, std::vector<DimRef>& out,
                     std::vector<int>& chain) {
    if (auto c = const_ints(ix, v)) {
        for (int64_t x : *c) out.push_back({DimRef::constant, x});
        return true;
    }
    int pi = -1;
    // Cast to int64 of a shape expression is the expression.
    if (const Node* cast = op_node(g, ix, v, "Cast", &pi)) {
        if (int_attr(*cast, "to", 0) != 7 || cast->inputs.size() != 1) return false;
        chain.push_back(pi);
        return eval_shape_part(g, ix, cast->inputs[0], out, chain);
    }
    // Shape(T): all of T's dims (its rank must be known) or, with opset 15's start/end, a
    // prefix.
    if (const Node* shape = op_node(g, ix, v, "Shape", &pi)) {
        const SymbolicShape& ts = g.value(shape->inputs[0]).shape;
        const int64_t start = int_attr(*shape, "start", 0);
        const int64_t end = shape->find_attr("end") != nullptr ? int_attr(*shape, "end", 0)
                            : ts.known                         ? ts.rank()
                                                               : -1;
        if (start != 0 || end <= 0 || end > 8 || (ts.known && end > ts.rank())) return false;
        chain.push_back(pi);
        for (int64_t i = 0; i < end; ++i) out.push_back({DimRef::copy, 0, shape->inputs[0], i});
        return true;
    }
    // Unsqueeze(Gather(Shape(T), scalar i), axes = [0]) -> dim i of T.
    if (const Node* unsq = op_node(g, ix, v, "Unsqueeze", &pi)) {
        std::optional<std::vector<int64_t>> axes = ints_attr(*unsq, "axes");
        if (!axes && unsq->inputs.size() == 2) axes = const_ints(ix, unsq->inputs[1]);
        if (!axes || axes->size() != 1 || (*axes)[0] != 0) return false;
        chain.push_back(pi);
        ValueId s = unsq->inputs[0];
        int ci = -1;
        while (const Node* cast = op_node(g, ix, s, "Cast", &ci)) {
            if (int_attr(*cast, "to", 0) != 7) return false;
            chain.push_back(ci);
            s = cast->inputs[0];
        }
        int gi = -1, si = -1;
        const Node* gather = op_node(g, ix, s, "Gather", &gi);
        if (gather == nullptr || int_attr(*gather, "axis", 0) != 0) return false;
        const Tensor* idx = ix.constant(gather->inputs[1]);
        const auto ival = ix.scalar(gather->inputs[1]);
        if (idx == nullptr || idx->num_dims() != 0 || !ival || *ival < 0) return false;
        const Node* shape = op_node(g, ix, gather->inputs[0], "Shape", &si);
        if (shape == nullptr || int_attr(*shape, "start", 0) != 0 || shape->find_attr("end"))
            return false;
        chain.insert(chain.end(), {gi, si});
        out.push_back({DimRef::copy, 0, shape->inputs[0], static_cast<int64_t>(*ival)});
        return true;
    }
    // Gather(Shape(T), 1-D indices) or Slice(Shape(T), [0], [k]) -> dims of T.
    if (const Node* gather = op_node(g, ix, v, "Gather", &pi)) {
        int si = -1;
        const Node* shape = op_node(g, ix, gather->inputs[0], "Shape", &si);
        const auto idx = const_ints(ix, gather->inputs[1]);
        const Tensor* it = ix.constant(gather->inputs[1]);
        if (shape == nullptr || !idx || it->num_dims() != 1 || int_attr(*gather, "axis", 0) != 0 ||
            int_attr(*shape, "start", 0) != 0 || shape->find_attr("end"))
            return false;
        chain.insert(chain.end(), {pi, si});
        for (int64_t i : *idx) {
            if (i < 0) return false;
            out.push_back({DimRef::copy, 0, shape->inputs[0], i});
        }
        return true;
    }
    if (const Node* slice = op_node(g, ix, v, "Slice", &pi)) {
        int si = -1;
        if (slice->inputs.size() < 3) return false;
        const Node* shape = op_node(g, ix, slice->inputs[0], "Shape", &si);
        const auto starts = const_ints(ix, slice->inputs[1]);
        const auto ends = const_ints(ix, slice->inputs[2]);
        const auto axes = slice->inputs.size() > 3 && slice->inputs[3] != kNoValue
                              ? const_ints(ix, slice->inputs[3])
                              : std::optional<std::vector<int64_t>>(std::vector<int64_t>{0});
        const auto steps = slice->inputs.size() > 4 && slice->inputs[4] != kNoValue
                               ? const_ints(ix, slice->inputs[4])
                               : std::optional<std::vector<int64_t>>(std::vector<int64_t>{1});
        if (shape == nullptr || !starts || !ends || !axes || !steps || starts->size() != 1 ||
            ends->size() != 1 || axes->size() != 1 || steps->size() != 1 || (*starts)[0] != 0 ||
            (*axes)[0] != 0 || (*steps)[0] != 1 || (*ends)[0] <= 0 || (*ends)[0] > 8 ||
            int_attr(*shape, "start", 0) != 0 || shape->find_attr("end"))
            return false;
        // A prefix longer than T's rank would be shorter: only when T's rank is known.
        const SymbolicShape& ts = g.value(shape->inputs[0]).shape;
        if (!ts.known || ts.rank() < (*ends)[0]) return false;
        chain.insert(chain.end(), {pi, si});
        for (int64_t i = 0; i < (*ends)[0]; ++i)
            out.push_back({DimRef::copy, 0, shape->inputs[0], i});
        return true;
    }
    return false;
}

/// The target shape of Reshape node `r` as DimRefs (0 and -1 resolved as Reshape does with
/// allowzero = 0), or nullopt when it is not a form we can follow. Shape-computing nodes are
/// appended to `chain`.
std::optional<std::vector<DimRef>> reshape_target(const Graph& g, const GraphIndex& ix,
                                                  const Node& r, std::vector<int>& chain) {
    if (r.inputs.size() != 2 || int_attr(r, "allowzero", 0) != 0) return std::nullopt;
    std::vector<DimRef> dims;
    int ci = -1;
    if (const Node* concat = op_node(g, ix, r.inputs[1], "Concat", &ci)) {
        if (int_attr(*concat, "axis", 1) != 0 && int_attr(*concat, "axis", 1) != -1)
            return std::nullopt;
        chain.push_back(ci);
        for (ValueId part : concat->inputs)
            if (!eval_shape_part(g, ix, part, dims, chain)) return std::nullopt;
    } else if (!eval_shape_part(g, ix, r.inputs[1], dims, chain)) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < dims.size(); ++i) {
        DimRef& d = dims[i];
        if (d.kind != DimRef::constant) continue;
        if (d.value == 0) d = {DimRef::copy, 0, r.inputs[0], static_cast<int64_t>(i)};
        else if (d.value == -1) d.kind = DimRef::infer;
        else if (d.value < 0) return std::nullopt;
    }
    return dims;
}

/// The head split feeding `v`: v = Reshape(X, [B, S, H, D]) with B, S X's first two dims.
struct Split {
    ValueId x = kNoValue;
    int64_t heads = 0;
    int64_t head = -1;  // -1: inferred by the Reshape
};

std::optional<Split> match_split(const Graph& g, const GraphIndex& ix, ValueId v, Block& blk) {
    int ri = -1;
    const Node* r = op_node(g, ix, v, "Reshape", &ri);
    if (r == nullptr) return std::nullopt;
    std::vector<int> chain;  // reads X only: left to dead-code elimination
    const auto dims = reshape_target(g, ix, *r, chain);
    if (!dims || dims->size() != 4) return std::nullopt;
    const ValueId x = r->inputs[0];
    const DimRef& h = (*dims)[2];
    const DimRef& d = (*dims)[3];
    if (!is_dim_of(g, (*dims)[0], x, 0) || !is_dim_of(g, (*dims)[1], x, 1) ||
        h.kind != DimRef::constant || h.value <= 0 ||
        !(d.kind == DimRef::infer || (d.kind == DimRef::constant && d.value > 0)))
        return std::nullopt;
    // X must be read as [B, S, H·D]: a known rank below 3 is a different reshape.
    const SymbolicShape& xs = g.value(x).shape;
    if (xs.known && xs.rank() < 3) return std::nullopt;
    blk.nodes.push_back(ri);
    return Split{x, h.value, d.kind == DimRef::infer ? -1 : d.value};
}

/// Follows `v` up through Mul/Div by one-element constants (rank <= 4, so they never change a
/// rank-4 operand's shape), multiplying blk.scale; returns the unscaled value.
ValueId peel_scale(const Graph& g, const GraphIndex& ix, ValueId v, Block& blk) {
    for (;;) {
        const int p = ix.producer(v);
        if (p < 0) return v;
        const Node& n = g.nodes[static_cast<std::size_t>(p)];
        if (!n.domain.empty() || n.inputs.size() != 2) return v;
        auto factor = [&](ValueId c) -> std::optional<double> {
            const Tensor* t = ix.constant(c);
            const auto s = ix.scalar(c);
            if (t == nullptr || t->num_dims() > 4 || !s || !std::isfinite(*s)) return std::nullopt;
            return s;
        };
        if (n.op_type == "Mul") {
            if (auto f = factor(n.inputs[1])) {
                blk.scale *= *f;
                v = n.inputs[0];
            } else if (auto f0 = factor(n.inputs[0])) {
                blk.scale *= *f0;
                v = n.inputs[1];
            } else {
                return v;
            }
        } else if (n.op_type == "Div") {
            const auto f = factor(n.inputs[1]);
            if (!f || *f == 0.0) return v;
            blk.scale /= *f;
            v = n.inputs[0];
        } else {
            return v;
        }
        blk.nodes.push_back(p);
    }
}

/// Qh (or Vh): Transpose(perm [0,2,1,3]) of a head split, scalar scales allowed on both sides
/// when `scaled`.
std::optional<Split> match_heads(const Graph& g, const GraphIndex& ix, ValueId v, bool scaled,
                                 Block& blk) {
    if (scaled) v = peel_scale(g, ix, v, blk);
    int ti = -1;
    const Node* t = op_node(g, ix, v, "Transpose", &ti);
    if (!is_transpose(t, {0, 2, 1, 3})) return std::nullopt;
    blk.nodes.push_back(ti);
    ValueId in = t->inputs[0];
    if (scaled) in = peel_scale(g, ix, in, blk);
    return match_split(g, ix, in, blk);
}

/// Kt: Transpose(perm [0,2,3,1]) of a head split, or Transpose([0,1,3,2]) of Kh.
std::optional<Split> match_keys(const Graph& g, const GraphIndex& ix, ValueId v, Block& blk) {
    v = peel_scale(g, ix, v, blk);
    int ti = -1;
    const Node* t = op_node(g, ix, v, "Transpose", &ti);
    if (is_transpose(t, {0, 2, 3, 1})) {
        blk.nodes.push_back(ti);
        return match_split(g, ix, peel_scale(g, ix, t->inputs[0], blk), blk);
    }
    if (is_transpose(t, {0, 1, 3, 2})) {
        blk.nodes.push_back(ti);
        return match_heads(g, ix, t->inputs[0], true, blk);
    }
    return std::nullopt;
}

/// The fused node's inputs and attributes, when the Softmax at `si` ends an attention block.
struct Match {
    Block blk;
    ValueId q = kNoValue, k = kNoValue, v = kNoValue, mask = kNoValue, out = kNoValue;
    int64_t heads = 0;
};

std::optional<Match> match_block(const Graph& g, const GraphIndex& ix, int si) {
    const Node& sm = g.nodes[static_cast<std::size_t>(si)];
    if (sm.inputs.size() != 1 || sm.outputs.size() != 1) return std::nullopt;
    // Softmax over the last axis of the rank-4 scores (before opset 13 the default is 1, and
    // axis 3 flattens [B·H·Sq, Sk]: the same).
    const int64_t axis = int_attr(sm, "axis", g.opset("") >= 13 ? -1 : 1);
    if (axis != -1 && axis != 3) return std::nullopt;
    Match m;
    Block& blk = m.blk;
    blk.nodes.push_back(si);

    // Softmax -> (Dropout) -> MatMul(P, Vh) -> Transpose -> Reshape.
    ValueId probs = sm.outputs[0];
    int ci = ix.sole_consumer(probs);
    if (ci < 0) return std::nullopt;
    if (const Node& dn = g.nodes[static_cast<std::size_t>(ci)];
        dn.op_type == "Dropout" && dn.domain.empty()) {
        const bool training = dn.inputs.size() > 2 && dn.inputs[2] != kNoValue &&
                              ix.scalar(dn.inputs[2]).value_or(1.0) != 0.0;
        if (training || dn.outputs.empty()) return std::nullopt;
        blk.nodes.push_back(ci);
        probs = dn.outputs[0];
        ci = ix.sole_consumer(probs);
        if (ci < 0) return std::nullopt;
    }
    const Node& pv = g.nodes[static_cast<std::size_t>(ci)];
    if (pv.op_type != "MatMul" || !pv.domain.empty() || pv.inputs[0] != probs)
        return std::nullopt;
    blk.nodes.push_back(ci);
    const int ti = ix.sole_consumer(pv.outputs[0]);
    if (ti < 0) return std::nullopt;
    const Node& tr = g.nodes[static_cast<std::size_t>(ti)];
    if (tr.domain != "" || tr.op_type != "Transpose" || !is_transpose(&tr, {0, 2, 1, 3}))
        return std::nullopt;
    blk.nodes.push_back(ti);
    // The merge Reshape is the one Reshape reading the transposed context; other readers may
    // only be the Shape nodes of its target-shape chain (checked below).
    const ValueId merged = tr.outputs[0];
    int mi = -1;
    for (int c : ix.consumers(merged)) {
        const Node& n = g.nodes[static_cast<std::size_t>(c)];
        if (n.op_type == "Reshape" && n.domain.empty() && n.inputs[0] == merged) {
            if (mi >= 0) return std::nullopt;
            mi = c;
        }
    }
    if (mi < 0) return std::nullopt;
    const Node& merge = g.nodes[static_cast<std::size_t>(mi)];
    blk.nodes.push_back(mi);
    m.out = merge.outputs[0];

    // Scores: Softmax input = scaled QKᵀ (+ mask).
    ValueId scores = sm.inputs[0];
    int ai = -1;
    const Node* add = op_node(g, ix, scores, "Add", &ai);
    const Node* qk = nullptr;
    int qi = -1;
    if (add != nullptr) {
        for (int side = 0; side < 2 && qk == nullptr; ++side) {
            Block trial = blk;
            trial.nodes.push_back(ai);
            const ValueId s = peel_scale(g, ix, add->inputs[static_cast<std::size_t>(side)], trial);
            if (const Node* mm = op_node(g, ix, s, "MatMul", &qi)) {
                qk = mm;
                blk = trial;
                m.mask = add->inputs[static_cast<std::size_t>(1 - side)];
            }
        }
    } else {
        qk = op_node(g, ix, peel_scale(g, ix, scores, blk), "MatMul", &qi);
    }
    if (qk == nullptr) return std::nullopt;
    blk.nodes.push_back(qi);
    // The mask must not enlarge the scores (the fused op's mask only broadcasts into them).
    if (add != nullptr) {
        const SymbolicShape& a = g.value(add->outputs[0]).shape;
        const SymbolicShape& b = g.value(qk->outputs[0]).shape;
        if (a.known && b.known) {
            if (a.rank() != b.rank()) return std::nullopt;
            for (int i = 0; i < a.rank(); ++i) {
                const Dim& x = a.dims[static_cast<std::size_t>(i)];
                const Dim& y = b.dims[static_cast<std::size_t>(i)];
                if (x.is_static() && y.is_static() && x.value != y.value) return std::nullopt;
            }
        }
    }

    const auto q = match_heads(g, ix, qk->inputs[0], true, blk);
    const auto k = q ? match_keys(g, ix, qk->inputs[1], blk) : std::nullopt;
    const auto v = k ? match_heads(g, ix, pv.inputs[1], false, blk) : std::nullopt;
    if (!v) return std::nullopt;
    if (q->heads != k->heads || q->heads != v->heads) return std::nullopt;
    if (q->head > 0 && k->head > 0 && q->head != k->head) return std::nullopt;
    m.q = q->x;
    m.k = k->x;
    m.v = v->x;
    m.heads = q->heads;

    // Merge target: [B, Sq, H·Dv] (B, Sq as dims of the transposed context or of Xq).
    const auto dims = reshape_target(g, ix, merge, blk.shape_chain);
    if (!dims || dims->size() != 3) return std::nullopt;
    const bool batch = is_dim_of(g, (*dims)[0], merged, 0) || is_dim_of(g, (*dims)[0], m.q, 0);
    const bool seq = is_dim_of(g, (*dims)[1], merged, 1) || is_dim_of(g, (*dims)[1], m.q, 1);
    const DimRef& width = (*dims)[2];
    const bool width_ok = width.kind == DimRef::infer ||
                          (width.kind == DimRef::constant && v->head > 0 &&
                           width.value == m.heads * v->head);
    if (!batch || !seq || !width_ok) return std::nullopt;

    // Shape-chain nodes that read the block's intermediates go with it.
    std::vector<ValueId> produced;
    for (int n : blk.nodes)
        for (ValueId o : g.nodes[static_cast<std::size_t>(n)].outputs) produced.push_back(o);
    for (bool grew = true; grew;) {
        grew = false;
        for (int c : blk.shape_chain) {
            if (std::find(blk.nodes.begin(), blk.nodes.end(), c) != blk.nodes.end()) continue;
            const Node& n = g.nodes[static_cast<std::size_t>(c)];
            const bool reads = std::any_of(n.inputs.begin(), n.inputs.end(), [&](ValueId i) {
                return std::find(produced.begin(), produced.end(), i) != produced.end();
            });
            if (!reads) continue;
            blk.nodes.push_back(c);
            for (ValueId o : n.outputs) produced.push_back(o);
            grew = true;
        }
    }
    std::sort(blk.nodes.begin(), blk.nodes.end());
    blk.nodes.erase(std::unique(blk.nodes.begin(), blk.nodes.end()), blk.nodes.end());
    for (int n : blk.nodes)
        for (ValueId o : g.nodes[static_cast<std::size_t>(n)].outputs)
            if (o != kNoValue && o != m.out && !ix.internal(o, blk.nodes)) return std::nullopt;
    // The fused node's inputs come from outside the block.
    for (ValueId in : {m.q, m.k, m.v, m.mask})
        if (in != kNoValue && std::find(produced.begin(), produced.end(), in) != produced.end())
            return std::nullopt;
    if (m.mask != kNoValue) {
        const SymbolicShape& ms = g.value(m.mask).shape;
        if (ms.known && ms.rank() > 4) return std::nullopt;
    }
    return m;
}

class FuseAttention final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_attention"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t si = 0; si < g.nodes.size(); ++si) {
            const Node& sm = g.nodes[si];
            if (sm.op_type != "Softmax" || !sm.domain.empty() || rw.removed(static_cast<int>(si)))
                continue;
            const auto m = match_block(g, ix, static_cast<int>(si));
            if (!m) continue;
            const bool fresh = std::none_of(m->blk.nodes.begin(), m->blk.nodes.end(),
                                            [&](int n) { return rw.removed(n); });
            if (!fresh) continue;
            std::vector<ValueId> inputs{m->q, m->k, m->v};
            if (m->mask != kNoValue) inputs.push_back(m->mask);
            Node& n = rw.add("MultiHeadAttention", kDsinferDomain, std::move(inputs), {m->out},
                             sm.name.empty() ? std::string("MultiHeadAttention") : sm.name);
            set_attr(n, "num_heads", m->heads);
            set_attr(n, "scale", static_cast<float>(m->blk.scale));
            for (int p : m->blk.nodes) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_attention() { return std::make_unique<FuseAttention>(); }

}  // namespace dsinfer::passes
