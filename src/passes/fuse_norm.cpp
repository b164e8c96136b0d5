// Normalization fusions (level 2):
//   fuse_layer_norm       the decomposed LayerNorm exporters write over the last axis,
//                         ReduceMean -> Sub -> Pow(2) | Mul(d, d) -> ReduceMean -> Add(eps) ->
//                         Sqrt -> Div -> Mul(gamma) [-> Add(beta)]
//                         ==> LayerNormalization (ai.onnx from opset 17, else com.dsinfer)
//   fuse_rms_norm         the decomposed RMSNorm torch writes over the last axis,
//                         Pow(x, 2) | Mul(x, x) -> ReduceMean -> Add(eps) -> Sqrt ->
//                         Reciprocal -> Mul(x, .) | Div(1, .) -> Mul(x, .) | Div(x, .)
//                         [-> Mul(weight)]
//                         ==> RMSNormalization (ai.onnx from opset 23, else com.dsinfer)
//   fuse_skip_layer_norm  Add(a, b) [with a = Add(MatMul, bias)] -> LayerNormalization(last
//                         axis) ==> com.dsinfer SkipLayerNormalization (second output = the sum
//                         when anything else reads it: the next residual)
#include <cmath>
#include <optional>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;


/// ReduceMean over exactly the last axis with keepdims.
bool mean_over_last_axis(const GraphIndex& ix, const Node& n, int rank) {
    if (!is_op(n, "ReduceMean") || n.inputs.empty()) return false;
    auto keep = n.attr_or<int64_t>("keepdims", 1);
    if (!keep.is_ok() || keep.value() != 1) return false;
    std::vector<int64_t> axes;
    if (n.has_attr("axes")) {
        auto a = n.attr<std::vector<int64_t>>("axes");
        if (!a.is_ok()) return false;
        axes = a.value();
    } else if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
        const Tensor* t = ix.constant(n.inputs[1]);
        if (t == nullptr || t->dtype() != DType::i64) return false;
        axes.assign(t->data_unchecked<int64_t>(), t->data_unchecked<int64_t>() + t->num_elements());
    }
    return axes.size() == 1 && (axes[0] == -1 || (rank > 0 && axes[0] == rank - 1));
}

/// A float32 constant vector of `h` elements (h < 0: any length).
const Tensor* vector_constant(const GraphIndex& ix, ValueId v, int64_t h) {
    const Tensor* t = ix.constant(v);
    if (t == nullptr || t->dtype() != DType::f32 || t->num_dims() != 1) return nullptr;
    if (h >= 0 && t->shape()[0] != h) return nullptr;
    return t;
}

int64_t last_dim(const Value& v) {
    if (!v.shape.known || v.shape.rank() == 0) return -1;
    const Dim& d = v.shape.dims.back();
    return d.is_static() ? d.value : -1;
}

class FuseLayerNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_layer_norm"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        auto sole = [&](ValueId v, std::string_view op, int& idx) {
            return sole_consumer_op(ix, rw, v, op, idx);
        };
        for (std::size_t ri = 0; ri < g.nodes.size(); ++ri) {
            const Node& r1 = g.nodes[ri];
            if (rw.removed(static_cast<int>(ri)) || r1.inputs.empty() || r1.inputs[0] == kNoValue)
                continue;  // (an omitted first input, e.g. Scan-8's sequence_lens)
            const ValueId x = r1.inputs[0];
            const Value& xv = g.value(x);
            const int rank = xv.shape.known ? xv.shape.rank() : -1;
            if (!mean_over_last_axis(ix, r1, rank) || ix.constant(x) != nullptr) continue;
            int si = -1;
            const Node* sub = sole(r1.outputs[0], "Sub", si);
            if (sub == nullptr || sub->inputs.size() != 2 || sub->inputs[0] != x ||
                sub->inputs[1] != r1.outputs[0])
                continue;
            const ValueId d = sub->outputs[0];
            if (ix.pinned(d) || ix.consumers(d).size() != 2) continue;
            int pi = -1, di = -1;
            for (int c : ix.consumers(d)) {
                const Node& n = g.nodes[static_cast<std::size_t>(c)];
                if (is_op(n, "Pow") && n.inputs.size() == 2 && n.inputs[0] == d &&
                    ix.scalar(n.inputs[1]) == 2.0)
                    pi = c;
                else if (is_op(n, "Mul") && n.inputs.size() == 2 && n.inputs[0] == d &&
                         n.inputs[1] == d)
                    pi = c;
                else if (is_op(n, "Div") && n.inputs.size() == 2 && n.inputs[0] == d)
                    di = c;
            }
            if (pi < 0 || di < 0 || rw.removed(pi) || rw.removed(di)) continue;
            const Node& pw = g.nodes[static_cast<std::size_t>(pi)];
            int r2i = -1, ai = -1, qi = -1;
            const Node* r2 = sole(pw.outputs[0], "ReduceMean", r2i);
            if (r2 == nullptr || r2->inputs[0] != pw.outputs[0] || !mean_over_last_axis(ix, *r2, rank))
                continue;
            const Node* add = sole(r2->outputs[0], "Add", ai);
            if (add == nullptr) continue;
            const auto eps = ix.scalar(other_operand(*add, r2->outputs[0]));
            if (!eps || !(*eps >= 0.0) || !std::isfinite(*eps)) continue;
            const Node* sq = sole(add->outputs[0], "Sqrt", qi);
            if (sq == nullptr || ix.sole_consumer(sq->outputs[0]) != di) continue;
            const Node& div = g.nodes[static_cast<std::size_t>(di)];
            if (div.inputs[1] != sq->outputs[0]) continue;
            int mi = -1;
            const Node* mul = sole(div.outputs[0], "Mul", mi);
            if (mul == nullptr) continue;
            const int64_t h = last_dim(xv);
            const ValueId gamma = other_operand(*mul, div.outputs[0]);
            if (vector_constant(ix, gamma, h) == nullptr) continue;
            const int64_t hg = ix.constant(gamma)->shape()[0];
            std::vector<int> pattern{static_cast<int>(ri), si, pi, r2i, ai, qi, di, mi};
            ValueId out = mul->outputs[0];
            ValueId beta = kNoValue;
            int bi = -1;
            if (const Node* ab = sole(out, "Add", bi); ab != nullptr) {
                const ValueId b = other_operand(*ab, out);
                if (vector_constant(ix, b, hg) != nullptr) {
                    beta = b;
                    pattern.push_back(bi);
                    out = ab->outputs[0];
                }
            }
            // Without a known last dim, gamma's length must still match it at run time: the
            // fused kernel checks that (the decomposed form would broadcast a length-1 gamma).
            if (h < 0 && hg == 1) continue;
            const bool onnx = g.opset("") >= 17;
            std::vector<ValueId> inputs{x, gamma};
            if (beta != kNoValue) inputs.push_back(beta);
            Node& n = rw.add("LayerNormalization", onnx ? "" : kDsinferDomain, std::move(inputs),
                             {out}, r1.name);
            set_attr(n, "axis", int64_t{-1});
            set_attr(n, "epsilon", static_cast<float>(*eps));
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

/// fuse_rms_norm: Pow(x, 2) | Mul(x, x) -> ReduceMean(last axis, keepdims) -> Add(eps) ->
/// Sqrt -> (Reciprocal | Div(1, .)) -> Mul(x, .), or Sqrt -> Div(x, .), then an optional
/// Mul by a float32 constant weight that broadcasts along the last axis without enlarging
/// (any leading dims 1). Without that Mul the fused node's Scale is a constant [1] of 1.
class FuseRmsNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_rms_norm"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        // The sole consumer of v when it is the ai.onnx op `op` (unary or binary as `op` is)
        // and not taken yet.
        auto sole = [&](ValueId v, std::string_view op, int& idx) -> const Node* {
            const Node* n = sole_consumer_op(ix, rw, v, op, idx);
            const std::size_t arity = op == "Sqrt" || op == "Reciprocal" ? 1 : 2;
            return n != nullptr && n->inputs.size() == arity ? n : nullptr;
        };
        for (std::size_t ri = 0; ri < g.nodes.size(); ++ri) {
            const Node& r = g.nodes[ri];
            if (!is_op(r, "ReduceMean") || r.inputs.empty() || r.inputs[0] == kNoValue ||
                rw.removed(static_cast<int>(ri)))
                continue;
            const ValueId sq_in = r.inputs[0];
            const int pi = ix.producer(sq_in);
            if (pi < 0 || rw.removed(pi) || ix.sole_consumer(sq_in) != static_cast<int>(ri))
                continue;
            const Node& pw = g.nodes[static_cast<std::size_t>(pi)];
            if (pw.inputs.size() != 2) continue;
            ValueId x = kNoValue;
            if (is_op(pw, "Pow") && ix.scalar(pw.inputs[1]) == 2.0) x = pw.inputs[0];
            if (is_op(pw, "Mul") && pw.inputs[0] == pw.inputs[1]) x = pw.inputs[0];
            if (x == kNoValue || ix.constant(x) != nullptr) continue;
            const Value& xv = g.value(x);
            if (!is_f32(xv) || !xv.shape.known || xv.shape.rank() == 0) continue;
            const int rank = xv.shape.rank();
            if (!mean_over_last_axis(ix, r, rank)) continue;
            // A one-element constant of rank <= x's (a higher rank would enlarge the result).
            auto scalar_of = [&](ValueId v) -> std::optional<double> {
                const Tensor* t = ix.constant(v);
                return t != nullptr && t->num_dims() <= rank ? ix.scalar(v) : std::nullopt;
            };
            if (is_op(pw, "Pow") && scalar_of(pw.inputs[1]) != 2.0) continue;
            int ai = -1, qi = -1;
            const Node* add = sole(r.outputs[0], "Add", ai);
            if (add == nullptr) continue;
            const auto eps = scalar_of(other_operand(*add, r.outputs[0]));
            if (!eps || !(*eps >= 0.0) || !std::isfinite(*eps)) continue;
            const Node* sq = sole(add->outputs[0], "Sqrt", qi);
            if (sq == nullptr) continue;
            std::vector<int> pattern{pi, static_cast<int>(ri), ai, qi};
            // 1 / sqrt, then x times it; or x / sqrt.
            const ValueId root = sq->outputs[0];
            ValueId normed = kNoValue, inverse = kNoValue;
            int ci = -1;
            if (const Node* rc = sole(root, "Reciprocal", ci); rc != nullptr) {
                inverse = rc->outputs[0];
            } else if (const Node* dv = sole(root, "Div", ci); dv != nullptr && dv->inputs[1] == root) {
                if (dv->inputs[0] == x) normed = dv->outputs[0];
                else if (scalar_of(dv->inputs[0]) == 1.0) inverse = dv->outputs[0];
            }
            if (ci < 0 || (normed == kNoValue && inverse == kNoValue)) continue;
            pattern.push_back(ci);
            if (inverse != kNoValue) {
                int mi = -1;
                const Node* mul = sole(inverse, "Mul", mi);
                if (mul == nullptr || other_operand(*mul, inverse) != x) continue;
                pattern.push_back(mi);
                normed = mul->outputs[0];
            }
            // The weight: a float32 constant [1, ..., 1, L] of rank <= x's, L = 1 or the last
            // dim (when that is unknown, a mismatch fails the fused and the unfused graph alike).
            ValueId out = normed, scale = kNoValue;
            const Dim& last = xv.shape.dims.back();
            int wi = -1;
            if (const Node* wm = sole(normed, "Mul", wi); wm != nullptr) {
                const ValueId w = other_operand(*wm, normed);
                const Tensor* t = ix.constant(w);
                bool ok = t != nullptr && t->dtype() == DType::f32 && t->num_dims() <= rank;
                for (int d = 0; ok && d + 1 < t->num_dims(); ++d) ok = t->shape()[d] == 1;
                const int64_t wl = t != nullptr && t->num_dims() > 0 ? t->shape()[t->num_dims() - 1] : 1;
                ok = ok && (!last.is_static() || wl == 1 || wl == last.value);
                if (ok) {
                    scale = w;
                    out = wm->outputs[0];
                    pattern.push_back(wi);
                }
            }
            if (scale == kNoValue) {
                Tensor one = Tensor::zeros(DType::f32, Shape{1});
                *one.data_unchecked<float>() = 1.f;
                scale = rw.new_constant((r.name.empty() ? "rms" : r.name) + "/unit_scale",
                                        std::move(one));
            }
            const bool onnx = g.opset("") >= 23;
            Node& n = rw.add("RMSNormalization", onnx ? "" : kDsinferDomain, {x, scale}, {out},
                             r.name);
            set_attr(n, "axis", int64_t{-1});
            set_attr(n, "epsilon", static_cast<float>(*eps));
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

class FuseSkipLayerNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_skip_layer_norm"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t li = 0; li < g.nodes.size(); ++li) {
            const Node& ln = g.nodes[li];
            const bool ours = ln.domain == kDsinferDomain;
            if (ln.op_type != "LayerNormalization" || !(ln.domain.empty() || ours) ||
                ln.inputs.size() < 2 || rw.removed(static_cast<int>(li)))
                continue;
            const bool extra = !ix.only_output0_read(ln);
            auto axis = ln.attr_or<int64_t>("axis", -1);
            auto eps = ln.attr_or<float>("epsilon", 1e-5f);
            auto stash = ln.attr_or<int64_t>("stash_type", 1);
            if (extra || !axis.is_ok() || !eps.is_ok() || !stash.is_ok() || stash.value() != 1)
                continue;
            const ValueId s = ln.inputs[0];
            const Value& sv = g.value(s);
            const int64_t h = last_dim(sv);
            if (h <= 0 || !(axis.value() == -1 || axis.value() == sv.shape.rank() - 1)) continue;
            if (vector_constant(ix, ln.inputs[1], h) == nullptr) continue;
            const ValueId beta = ln.inputs.size() > 2 ? ln.inputs[2] : kNoValue;
            if (beta != kNoValue && vector_constant(ix, beta, h) == nullptr) continue;
            const int ai = ix.producer(s);
            if (ai < 0 || rw.removed(ai)) continue;
            const Node& add = g.nodes[static_cast<std::size_t>(ai)];
            if (!is_op(add, "Add") || add.inputs.size() != 2) continue;
            ValueId a = add.inputs[0], b = add.inputs[1];
            if (ix.constant(a) != nullptr || ix.constant(b) != nullptr || !is_f32(sv) ||
                !same_shape(g.value(a).shape, sv.shape) || !same_shape(g.value(b).shape, sv.shape))
                continue;
            std::vector<int> pattern{ai, static_cast<int>(li)};
            // Absorb a bias Add feeding one operand: Add(bias [h], y) used only here.
            ValueId bias = kNoValue;
            for (ValueId* op : {&a, &b}) {
                const int bi = ix.producer(*op);
                if (bi < 0 || rw.removed(bi) || ix.sole_consumer(*op) != ai) continue;
                const Node& ba = g.nodes[static_cast<std::size_t>(bi)];
                if (!is_op(ba, "Add") || ba.inputs.size() != 2) continue;
                for (int k = 0; k < 2; ++k) {
                    const ValueId c = ba.inputs[static_cast<std::size_t>(k)];
                    const ValueId y = ba.inputs[static_cast<std::size_t>(1 - k)];
                    if (vector_constant(ix, c, h) != nullptr && ix.constant(y) == nullptr &&
                        same_shape(g.value(y).shape, sv.shape)) {
                        bias = c;
                        *op = y;
                        pattern.push_back(bi);
                        break;
                    }
                }
                if (bias != kNoValue) break;
            }
            // The sum stays available for the next residual when anything else reads it.
            const bool keep_sum = ix.pinned(s) || ix.consumers(s).size() > 1;
            std::vector<ValueId> inputs{a, b, ln.inputs[1], beta, bias};
            while (inputs.back() == kNoValue) inputs.pop_back();
            std::vector<ValueId> outputs{ln.outputs[0]};
            if (keep_sum) outputs.push_back(s);
            Node& n = rw.add("SkipLayerNormalization", kDsinferDomain, std::move(inputs),
                             std::move(outputs), ln.name);
            set_attr(n, "epsilon", eps.value());
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_layer_norm() { return std::make_unique<FuseLayerNorm>(); }
std::unique_ptr<GraphPass> make_fuse_rms_norm() { return std::make_unique<FuseRmsNorm>(); }
std::unique_ptr<GraphPass> make_fuse_skip_layer_norm() {
    return std::make_unique<FuseSkipLayerNorm>();
}

}  // namespace dsinfer::passes

namespace dsinfer::passes {
namespace {

/// fuse_layer_norm_linear: a LayerNormalization (last axis) whose output only feeds Linear
/// layers (MatMul / FusedMatMul with float32 constant weights, as input A) hands its affine
/// part to them: W' = diag(γ)·W, bias' = bias + β·W, and the LayerNorm keeps γ = 1, no β.
/// Pre-LN transformers (GPT, ViT) have this shape; post-LN ones (BERT) also read the
/// LayerNorm's output in the residual, so it does not fire there.
class FuseLayerNormLinear final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_layer_norm_linear"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t li = 0; li < g.nodes.size(); ++li) {
            const Node& ln = g.nodes[li];
            if (ln.op_type != "LayerNormalization" ||
                !(ln.domain.empty() || ln.domain == kDsinferDomain) || ln.inputs.size() < 2 ||
                ln.outputs.empty())
                continue;
            const bool extra = !ix.only_output0_read(ln);
            auto axis = ln.attr_or<int64_t>("axis", -1);
            const ValueId y = ln.outputs[0];
            if (extra || !axis.is_ok() || axis.value() != -1 || ix.pinned(y) ||
                ix.consumers(y).empty())
                continue;
            const Tensor* gamma = vector_constant(ix, ln.inputs[1], -1);
            if (gamma == nullptr) continue;
            const int64_t h = gamma->shape()[0];
            const Tensor* beta = ln.inputs.size() > 2 && ln.inputs[2] != kNoValue
                                     ? vector_constant(ix, ln.inputs[2], h)
                                     : nullptr;
            if (ln.inputs.size() > 2 && ln.inputs[2] != kNoValue && beta == nullptr) continue;
            bool all_linear = true;
            for (int c : ix.consumers(y)) {
                const Node& n = g.nodes[static_cast<std::size_t>(c)];
                const bool mm = is_op(n, "MatMul") ||
                                (n.op_type == "FusedMatMul" && n.domain == kDsinferDomain);
                const Tensor* w = mm && n.inputs.size() >= 2 ? ix.constant(n.inputs[1]) : nullptr;
                all_linear = all_linear && !rw.removed(c) && mm && n.inputs[0] == y &&
                             n.inputs[1] != y && w != nullptr && w->dtype() == DType::f32 &&
                             w->num_dims() == 2 && w->shape()[0] == h &&
                             (n.inputs.size() < 3 || n.inputs[2] == kNoValue ||
                              vector_constant(ix, n.inputs[2], w->shape()[1]) != nullptr);
            }
            if (!all_linear) continue;
            // gamma and beta point into g.values, which new_constant() below may reallocate:
            // keep handles to their buffers (a Tensor copy shares the buffer).
            const Tensor gamma_t = *gamma;
            const Tensor beta_t = beta != nullptr ? *beta : Tensor();
            gamma = nullptr;
            const float* gp = gamma_t.data_unchecked<float>();
            for (int c : ix.consumers(y)) {
                const Node& n = g.nodes[static_cast<std::size_t>(c)];
                const Tensor* w = ix.constant(n.inputs[1]);
                const int64_t nn = w->shape()[1];
                Tensor w2 = w->clone();
                float* pw = w2.data_unchecked<float>();
                for (int64_t k = 0; k < h; ++k)
                    for (int64_t j = 0; j < nn; ++j) pw[k * nn + j] *= gp[k];
                std::vector<double> b(static_cast<std::size_t>(nn), 0.0);
                if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
                    const float* pb = ix.constant(n.inputs[2])->data_unchecked<float>();
                    for (int64_t j = 0; j < nn; ++j) b[static_cast<std::size_t>(j)] = pb[j];
                }
                if (!beta_t.is_null()) {
                    const float* pbeta = beta_t.data_unchecked<float>();
                    const float* pw0 = w->data_unchecked<float>();
                    for (int64_t k = 0; k < h; ++k)
                        for (int64_t j = 0; j < nn; ++j)
                            b[static_cast<std::size_t>(j)] +=
                                static_cast<double>(pbeta[k]) * pw0[k * nn + j];
                }
                Tensor bt = Tensor::zeros(DType::f32, Shape{nn});
                for (int64_t j = 0; j < nn; ++j)
                    bt.data_unchecked<float>()[j] = static_cast<float>(b[static_cast<std::size_t>(j)]);
                const std::string base = n.name.empty() ? "linear" : n.name;
                const ValueId wv = rw.new_constant(base + "/ln_W", std::move(w2));
                const ValueId bv = !beta_t.is_null() || n.inputs.size() > 2
                                       ? rw.new_constant(base + "/ln_bias", std::move(bt))
                                       : kNoValue;
                std::vector<ValueId> inputs{y, wv};
                if (bv != kNoValue) inputs.push_back(bv);
                Node& f = rw.add("FusedMatMul", kDsinferDomain, std::move(inputs), n.outputs, n.name);
                if (n.domain == kDsinferDomain) copy_attributes(n, f);
                rw.remove(c);
            }
            Tensor ones = Tensor::zeros(DType::f32, Shape{h});
            for (int64_t k = 0; k < h; ++k) ones.data_unchecked<float>()[k] = 1.f;
            const ValueId ov = rw.new_constant((ln.name.empty() ? "ln" : ln.name) + "/unit_scale",
                                               std::move(ones));
            Node& n2 = rw.add(ln.op_type, ln.domain, {ln.inputs[0], ov}, {y}, ln.name);
            copy_attributes(ln, n2);
            rw.remove(static_cast<int>(li));
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_layer_norm_linear() {
    return std::make_unique<FuseLayerNormLinear>();
}

}  // namespace dsinfer::passes
