// fuse_dynamic_quant_matmul (level 2): ONNX Runtime's dynamically quantized Linear layer
// (quantize_dynamic's form)
//   DynamicQuantizeLinear(x) -> (xq, xs, xzp)
//   MatMulInteger(xq, W, xzp, wzp?) -> Cast(to FLOAT) -> Mul(., Mul(xs, ws)) [-> Add(., bias)]
//   [-> Relu]
// ==> com.dsinfer DynamicQuantizeMatMul(x, W, ws, wzp?, bias?) when the DynamicQuantizeLinear
//     feeds only this pattern (its three outputs read nowhere else);
// ==> com.dsinfer MatMulIntegerToFloat(xq, W, xs, ws, xzp, wzp?, bias?) otherwise (several
//     MatMulIntegers share one quantized activation, as BERT's Q/K/V projections do): the
//     DynamicQuantizeLinear stays.
// Conditions: W a constant int8/uint8 matrix [K, N]; wzp absent or a constant of W's type
// with 1 or N elements (rank <= 1); ws a constant float32 of 1 or N elements (rank <= 1); the
// scales' Mul reads exactly this DynamicQuantizeLinear's scale and ws; the Cast is to float32;
// bias a constant float32 [N]; Relu absorbed as the fused activation (exact). Every
// intermediate is internal to the pattern. Numerics: bitwise those of the unfused graph
// (docs/OPTIMIZER.md, "Fused operators").
//
// The same pass fuses ONNX Runtime's dynamically quantized convolutions:
//   DynamicQuantizeLinear(x) -> ConvInteger(xq, W, xzp, wzp?) -> Cast(to FLOAT)
//   -> Mul(., Mul(xs, ws)) [-> Add(., bias)] [-> Relu]
// ==> com.dsinfer DynamicQuantizeConv(x, W, ws, wzp?, bias?) with the ConvInteger's attributes,
//     when the DynamicQuantizeLinear feeds only this pattern (a shared one is left unfused).
// Conditions: W a constant int8/uint8 [M, C/g, k...]; wzp absent or a constant of W's type with
// 1 or M elements (rank <= 1); ws a constant float32 of one element or of M along the channel
// axis ([M, 1, ...] of rank X - 1, or [1, M, 1, ...] of X's rank); bias the same with M
// elements (quantize_dynamic's Reshape(bias, [1, -1, 1, 1]), folded).
#include <optional>
#include <vector>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

/// A constant of 1 or n elements and rank <= 1, of dtype `dt`.
bool column_param(const Tensor* t, DType dt, int64_t n) {
    return t != nullptr && t->dtype() == dt && t->num_dims() <= 1 &&
           (t->num_elements() == 1 || t->num_elements() == n);
}

/// A float32 constant broadcasting over a conv output [N, M, spatial...] of rank `rank` along
/// the channel axis only: one element (rank <= `rank`; when `scalar_ok`), or M elements shaped
/// [M, 1, ...] (rank - 1 dims) or [1, M, 1, ...] (rank dims).
bool channel_param(const Tensor* t, int64_t m, int rank, bool scalar_ok) {
    if (t == nullptr || t->dtype() != DType::f32) return false;
    const Shape& s = t->shape();
    if (t->num_elements() == 1 && (scalar_ok || m == 1) && s.rank() <= rank) return true;
    if (t->num_elements() != m) return false;
    const int at = s.rank() == rank - 1 ? 0 : s.rank() == rank ? 1 : -1;
    if (at < 0) return false;
    for (int d = 0; d < s.rank(); ++d)
        if (s[d] != (d == at ? m : 1)) return false;
    return true;
}

/// The dequantizing tail of an integer product (MatMulInteger or ConvInteger `pi`, whose A is
/// `dql`'s y): Cast(to FLOAT) -> Mul(., Mul(xs, ws)) [-> Add(., bias)] [-> Relu].
struct Tail {
    std::vector<int> pattern;  ///< the product and the tail's nodes, not the scales' Mul
    int scales = -1;           ///< the scales' Mul
    ValueId ws = kNoValue, bias = kNoValue, out = kNoValue;
    detail::ActivationSpec act;
};

/// The tail, with ws and bias accepted by `ws_ok` / `bias_ok` (constant tensors), or nothing.
template <class WsOk, class BiasOk>
std::optional<Tail> match_tail(const Graph& g, const GraphIndex& ix, const Rewriter& rw, int pi,
                               const Node& dql, WsOk&& ws_ok, BiasOk&& bias_ok) {
    const auto node = [&](int i) -> const Node& { return g.nodes[static_cast<std::size_t>(i)]; };
    Tail t;
    t.pattern.push_back(pi);
    // Cast(to FLOAT).
    const int ci = ix.sole_consumer(node(pi).outputs[0]);
    if (ci < 0 || rw.removed(ci) || !is_op(node(ci), "Cast")) return std::nullopt;
    const Node& cast = node(ci);
    auto to = cast.attr_or<int64_t>("to", 0);
    if (!to.is_ok() || to.value() != 1 || cast.outputs.size() != 1) return std::nullopt;
    t.pattern.push_back(ci);
    // Mul(cast, Mul(xs, ws)), either operand order in both.
    const int ui = ix.sole_consumer(cast.outputs[0]);
    if (ui < 0 || rw.removed(ui) || !is_op(node(ui), "Mul")) return std::nullopt;
    const Node& mul = node(ui);
    const ValueId sm = other_operand(mul, cast.outputs[0]);
    const int si = ix.producer(sm);
    if (sm == kNoValue || sm == cast.outputs[0] || si < 0 || rw.removed(si) ||
        !is_op(node(si), "Mul"))
        return std::nullopt;
    const ValueId ws = other_operand(node(si), dql.outputs[1]);
    if (ws == kNoValue || ws == dql.outputs[1] || !ws_ok(ix.constant(ws))) return std::nullopt;
    t.pattern.push_back(ui);
    t.scales = si;
    t.ws = ws;
    t.out = mul.outputs[0];
    // [Add(., bias)]
    int next = ix.sole_consumer(t.out);
    if (next >= 0 && !rw.removed(next) && is_op(node(next), "Add")) {
        const Node& add = node(next);
        const ValueId b = other_operand(add, t.out);
        if (b != kNoValue && b != t.out && bias_ok(ix.constant(b))) {
            t.bias = b;
            t.pattern.push_back(next);
            t.out = add.outputs[0];
            next = ix.sole_consumer(t.out);
        }
    }
    // [Relu]
    if (next >= 0 && !rw.removed(next) && is_op(node(next), "Relu") &&
        node(next).outputs.size() == 1) {
        t.act.kind = detail::Activation::relu;
        t.pattern.push_back(next);
        t.out = node(next).outputs[0];
    }
    // Every intermediate read only inside the pattern.
    for (int p : t.pattern)
        for (ValueId v : node(p).outputs)
            if (v != t.out && !ix.internal(v, t.pattern)) return std::nullopt;
    return t;
}

/// Whether nothing outside `pattern` + the DynamicQuantizeLinear `qi` reads qi's outputs.
bool dql_sole(const Graph& g, const GraphIndex& ix, std::vector<int> pattern, int qi) {
    pattern.push_back(qi);
    for (ValueId v : g.nodes[static_cast<std::size_t>(qi)].outputs)
        if (v != kNoValue && !ix.internal(v, pattern)) return false;
    return true;
}

class FuseDynamicQuantMatMul final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_dynamic_quant_matmul"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        const auto node = [&](int i) -> const Node& { return g.nodes[static_cast<std::size_t>(i)]; };
        for (std::size_t mi = 0; mi < g.nodes.size(); ++mi) {
            const Node& mm = g.nodes[mi];
            if (!rw.removed(static_cast<int>(mi)) && is_op(mm, "ConvInteger")) {
                fired += fuse_conv(g, ix, rw, static_cast<int>(mi)) ? 1 : 0;
                continue;
            }
            if (rw.removed(static_cast<int>(mi)) || !is_op(mm, "MatMulInteger") ||
                mm.inputs.size() < 3 || mm.inputs.size() > 4 || mm.outputs.size() != 1 ||
                mm.inputs[2] == kNoValue)
                continue;
            // The quantized activation: this DynamicQuantizeLinear's y and y_zero_point.
            const int qi = ix.producer(mm.inputs[0]);
            if (qi < 0 || rw.removed(qi)) continue;
            const Node& dql = node(qi);
            if (!is_op(dql, "DynamicQuantizeLinear") || dql.outputs.size() != 3 ||
                dql.outputs[0] != mm.inputs[0] || dql.outputs[2] != mm.inputs[2])
                continue;
            // The weights and their zero point.
            const Tensor* w = ix.constant(mm.inputs[1]);
            if (w == nullptr || (w->dtype() != DType::i8 && w->dtype() != DType::u8) ||
                w->num_dims() != 2 || w->num_elements() == 0)
                continue;
            const int64_t n = w->shape()[1];
            const ValueId wzp = mm.inputs.size() > 3 ? mm.inputs[3] : kNoValue;
            if (wzp != kNoValue && !column_param(ix.constant(wzp), w->dtype(), n)) continue;
            auto tail = match_tail(
                g, ix, rw, static_cast<int>(mi), dql,
                [&](const Tensor* t) { return column_param(t, DType::f32, n); },
                [&](const Tensor* t) {
                    return t != nullptr && t->dtype() == DType::f32 && t->num_dims() == 1 &&
                           t->shape()[0] == n;
                });
            if (!tail) continue;
            std::vector<int> pattern = tail->pattern;
            const ValueId ws = tail->ws, bias = tail->bias, out = tail->out, sm = node(tail->scales).outputs[0];
            const detail::ActivationSpec act = tail->act;
            // The scales' Mul goes with the pattern when only it reads the product (CSE may have
            // merged equal ones of several layers: the last fusion's dead-code pass drops it).
            pattern.push_back(tail->scales);
            if (!ix.internal(sm, pattern)) pattern.pop_back();
            // The DynamicQuantizeLinear goes too when nothing else reads its outputs.
            const bool sole = dql_sole(g, ix, pattern, qi);
            Node* f = nullptr;
            if (sole) {
                f = &rw.add("DynamicQuantizeMatMul", kDsinferDomain,
                            {dql.inputs[0], mm.inputs[1], ws, wzp, bias}, {out}, mm.name);
                pattern.push_back(qi);
            } else {
                f = &rw.add("MatMulIntegerToFloat", kDsinferDomain,
                            {dql.outputs[0], mm.inputs[1], dql.outputs[1], ws, dql.outputs[2], wzp,
                             bias},
                            {out}, mm.name);
            }
            while (!f->inputs.empty() && f->inputs.back() == kNoValue) f->inputs.pop_back();
            set_activation(*f, act);
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }

private:
    /// DynamicQuantizeLinear -> ConvInteger `ci` -> ... ==> DynamicQuantizeConv (see the top).
    static bool fuse_conv(const Graph& g, const GraphIndex& ix, Rewriter& rw, int ci) {
        const Node& conv = g.nodes[static_cast<std::size_t>(ci)];
        if (conv.inputs.size() < 3 || conv.inputs.size() > 4 || conv.outputs.size() != 1 ||
            conv.inputs[2] == kNoValue)
            return false;
        const int qi = ix.producer(conv.inputs[0]);
        if (qi < 0 || rw.removed(qi)) return false;
        const Node& dql = g.nodes[static_cast<std::size_t>(qi)];
        if (!is_op(dql, "DynamicQuantizeLinear") || dql.outputs.size() != 3 ||
            dql.outputs[0] != conv.inputs[0] || dql.outputs[2] != conv.inputs[2])
            return false;
        const Tensor* w = ix.constant(conv.inputs[1]);
        if (w == nullptr || (w->dtype() != DType::i8 && w->dtype() != DType::u8) ||
            w->num_dims() < 3 || w->num_elements() == 0)
            return false;
        const int64_t m = w->shape()[0];
        const int rank = w->num_dims();
        const ValueId wzp = conv.inputs.size() > 3 ? conv.inputs[3] : kNoValue;
        if (wzp != kNoValue && !column_param(ix.constant(wzp), w->dtype(), m)) return false;
        auto tail = match_tail(
            g, ix, rw, ci, dql, [&](const Tensor* t) { return channel_param(t, m, rank, true); },
            [&](const Tensor* t) { return channel_param(t, m, rank, false); });
        if (!tail) return false;
        std::vector<int> pattern = tail->pattern;
        pattern.push_back(tail->scales);
        if (!ix.internal(g.nodes[static_cast<std::size_t>(tail->scales)].outputs[0], pattern))
            pattern.pop_back();
        if (!dql_sole(g, ix, pattern, qi)) return false;  // shared: left unfused
        pattern.push_back(qi);
        Node& f = rw.add("DynamicQuantizeConv", kDsinferDomain,
                         {dql.inputs[0], conv.inputs[1], tail->ws, wzp, tail->bias}, {tail->out},
                         conv.name);
        while (!f.inputs.empty() && f.inputs.back() == kNoValue) f.inputs.pop_back();
        f.attributes = conv.attributes;  // the convolution's (no activation among them)
        set_activation(f, tail->act);
        for (int p : pattern) rw.remove(p);
        return true;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_dynamic_quant_matmul() {
    return std::make_unique<FuseDynamicQuantMatMul>();
}

}  // namespace dsinfer::passes
