// fuse_gelu (level 2): the erf form of GELU as exporters write it,
//   x * 0.5 * (1 + erf(x / sqrt(2)))   (Div by sqrt(2) or Mul by 1/sqrt(2); the 0.5 applied to
//   x, to (1 + erf), or to the product; operands of Add/Mul in either order)
// ==> Gelu (ai.onnx from opset 20, else com.dsinfer Gelu with the same semantics).
#include <cmath>
#include <numbers>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

bool near(std::optional<double> v, double want) {
    return v && std::abs(*v - want) <= 1e-4 * std::abs(want);
}


const Node* sole_op(const GraphIndex& ix, const Graph& g, ValueId v, std::string_view op, int& idx) {
    idx = ix.sole_consumer(v);
    if (idx < 0) return nullptr;
    const Node& n = g.nodes[static_cast<std::size_t>(idx)];
    return (n.op_type == op && n.domain.empty()) ? &n : nullptr;
}

class FuseGelu final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_gelu"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        const double sqrt2 = std::numbers::sqrt2;
        for (std::size_t ei = 0; ei < g.nodes.size(); ++ei) {
            const Node& erf = g.nodes[ei];
            if (erf.op_type != "Erf" || !erf.domain.empty() || erf.inputs.size() != 1 ||
                rw.removed(static_cast<int>(ei)))
                continue;
            // t = x / sqrt(2) or x * (1 / sqrt(2))
            const ValueId t = erf.inputs[0];
            const int ti = ix.producer(t);
            if (ti < 0 || ix.sole_consumer(t) != static_cast<int>(ei)) continue;
            const Node& scale = g.nodes[static_cast<std::size_t>(ti)];
            if (!scale.domain.empty() || scale.inputs.size() != 2) continue;
            ValueId x = kNoValue;
            if (scale.op_type == "Div" && near(ix.scalar(scale.inputs[1]), sqrt2)) {
                x = scale.inputs[0];
            } else if (scale.op_type == "Mul") {
                for (int k = 0; k < 2; ++k)
                    if (near(ix.scalar(scale.inputs[static_cast<std::size_t>(k)]), 1.0 / sqrt2))
                        x = scale.inputs[static_cast<std::size_t>(1 - k)];
            }
            if (x == kNoValue || ix.constant(x) != nullptr) continue;
            // u = erf + 1
            int ai = -1;
            const Node* add = sole_op(ix, g, erf.outputs[0], "Add", ai);
            if (add == nullptr || !near(ix.scalar(other_operand(*add, erf.outputs[0])), 1.0))
                continue;
            const ValueId u = add->outputs[0];
            std::vector<int> pattern{ti, static_cast<int>(ei), ai};
            int m1 = -1;
            const Node* mul1 = sole_op(ix, g, u, "Mul", m1);
            if (mul1 == nullptr) continue;
            const ValueId o1 = other_operand(*mul1, u);
            ValueId out = kNoValue;
            if (o1 == x) {
                // (x * u) * 0.5
                int m2 = -1;
                const Node* mul2 = sole_op(ix, g, mul1->outputs[0], "Mul", m2);
                if (mul2 == nullptr || !near(ix.scalar(other_operand(*mul2, mul1->outputs[0])), 0.5))
                    continue;
                pattern.insert(pattern.end(), {m1, m2});
                out = mul2->outputs[0];
            } else if (near(ix.scalar(o1), 0.5)) {
                // x * (u * 0.5)
                int m2 = -1;
                const Node* mul2 = sole_op(ix, g, mul1->outputs[0], "Mul", m2);
                if (mul2 == nullptr || other_operand(*mul2, mul1->outputs[0]) != x) continue;
                pattern.insert(pattern.end(), {m1, m2});
                out = mul2->outputs[0];
            } else {
                // (x * 0.5) * u
                const int hi = ix.producer(o1);
                if (hi < 0 || ix.sole_consumer(o1) != m1) continue;
                const Node& half = g.nodes[static_cast<std::size_t>(hi)];
                if (half.op_type != "Mul" || !half.domain.empty() || half.inputs.size() != 2)
                    continue;
                if (!near(ix.scalar(other_operand(half, x)), 0.5)) continue;
                pattern.insert(pattern.end(), {hi, m1});
                out = mul1->outputs[0];
            }
            bool fresh = true;
            for (int p : pattern) fresh = fresh && !rw.removed(p);
            if (!fresh) continue;
            const bool onnx = g.opset("") >= 20;
            Node& n = rw.add("Gelu", onnx ? "" : kDsinferDomain, {x}, {out}, erf.name);
            set_attr(n, "approximate", std::string("none"));
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_gelu() { return std::make_unique<FuseGelu>(); }

}  // namespace dsinfer::passes
