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
            // Cast(to FLOAT).
            std::vector<int> pattern{static_cast<int>(mi)};
            const int ci = ix.sole_consumer(mm.outputs[0]);
            if (ci < 0 || rw.removed(ci) || !is_op(node(ci), "Cast")) continue;
            const Node& cast = node(ci);
            auto to = cast.attr_or<int64_t>("to", 0);
            if (!to.is_ok() || to.value() != 1 || cast.outputs.size() != 1) continue;
            pattern.push_back(ci);
            // Mul(cast, Mul(xs, ws)), either operand order in both.
            const int ui = ix.sole_consumer(cast.outputs[0]);
            if (ui < 0 || rw.removed(ui) || !is_op(node(ui), "Mul")) continue;
            const Node& mul = node(ui);
            const ValueId sm = other_operand(mul, cast.outputs[0]);
            const int si = ix.producer(sm);
            if (sm == kNoValue || sm == cast.outputs[0] || si < 0 || rw.removed(si) ||
                !is_op(node(si), "Mul"))
                continue;
            const Node& smul = node(si);
            const ValueId ws = other_operand(smul, dql.outputs[1]);
            if (ws == kNoValue || ws == dql.outputs[1] ||
                !column_param(ix.constant(ws), DType::f32, n))
                continue;
            pattern.push_back(ui);
            ValueId out = mul.outputs[0];
            // [Add(., bias [N])]
            ValueId bias = kNoValue;
            int next = ix.sole_consumer(out);
            if (next >= 0 && !rw.removed(next) && is_op(node(next), "Add")) {
                const Node& add = node(next);
                const ValueId b = other_operand(add, out);
                const Tensor* bt = ix.constant(b);
                if (b != kNoValue && b != out && bt != nullptr && bt->dtype() == DType::f32 &&
                    bt->num_dims() == 1 && bt->shape()[0] == n) {
                    bias = b;
                    pattern.push_back(next);
                    out = add.outputs[0];
                    next = ix.sole_consumer(out);
                }
            }
            // [Relu]
            detail::ActivationSpec act;
            if (next >= 0 && !rw.removed(next) && is_op(node(next), "Relu") &&
                node(next).outputs.size() == 1) {
                act.kind = detail::Activation::relu;
                pattern.push_back(next);
                out = node(next).outputs[0];
            }
            // Every intermediate read only inside the pattern.
            bool ok = true;
            for (int p : pattern)
                for (ValueId v : node(p).outputs) ok = ok && (v == out || ix.internal(v, pattern));
            if (!ok) continue;
            // The scales' Mul goes with the pattern when only it reads the product (CSE may have
            // merged equal ones of several layers: the last fusion's dead-code pass drops it).
            pattern.push_back(si);
            if (!ix.internal(sm, pattern)) pattern.pop_back();
            // The DynamicQuantizeLinear goes too when nothing else reads its outputs.
            std::vector<int> with_dql = pattern;
            with_dql.push_back(qi);
            bool sole = true;
            for (ValueId v : dql.outputs) sole = sole && (v == kNoValue || ix.internal(v, with_dql));
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
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_dynamic_quant_matmul() {
    return std::make_unique<FuseDynamicQuantMatMul>();
}

}  // namespace dsinfer::passes
