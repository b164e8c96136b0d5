// fuse_matmul_bias_activation (level 2):
//   MatMul(A, W) [-> Add(bias [N])] [-> activation]  ==> com.dsinfer FusedMatMul(A, W, bias)
//   Gemm(A, W, C) -> activation                       ==> com.dsinfer FusedGemm(A, W, C)
// W must be a float32 constant matrix (the weights of a Linear layer); the bias a float32
// constant vector of W's column count; every intermediate internal to the pattern.
#include <vector>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

class FuseMatMulBiasActivation final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_matmul_bias_activation"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t mi = 0; mi < g.nodes.size(); ++mi) {
            const Node& mm = g.nodes[mi];
            if (rw.removed(static_cast<int>(mi)) || !mm.domain.empty() || mm.outputs.size() != 1)
                continue;
            const bool gemm = mm.op_type == "Gemm" && g.opset("") >= 11;
            if (!(gemm || mm.op_type == "MatMul") || mm.inputs.size() < 2) continue;
            const Tensor* w = ix.constant(mm.inputs[1]);
            if (w == nullptr || w->dtype() != DType::f32 || w->num_dims() != 2) continue;
            int64_t n_cols = w->shape()[1];
            if (gemm) {
                auto tb = mm.attr_or<int64_t>("transB", 0);
                if (!tb.is_ok()) continue;
                if (tb.value() != 0) n_cols = w->shape()[0];
            }
            ValueId out = mm.outputs[0];
            std::vector<int> pattern{static_cast<int>(mi)};
            ValueId bias = kNoValue;
            detail::ActivationSpec act;
            int c = ix.sole_consumer(out);
            if (!gemm && c >= 0 && !rw.removed(c)) {
                const Node& add = g.nodes[static_cast<std::size_t>(c)];
                if (add.op_type == "Add" && add.domain.empty() && add.inputs.size() == 2) {
                    const ValueId other = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
                    const Tensor* k = ix.constant(other);
                    if (other != out && k != nullptr && k->dtype() == DType::f32 &&
                        k->num_dims() == 1 && k->shape()[0] == n_cols) {
                        bias = other;
                        pattern.push_back(c);
                        out = add.outputs[0];
                        c = ix.sole_consumer(out);
                    }
                }
            }
            if (c >= 0 && !rw.removed(c)) {
                if (auto a = match_activation(ix, g.nodes[static_cast<std::size_t>(c)])) {
                    act = *a;
                    pattern.push_back(c);
                    out = g.nodes[static_cast<std::size_t>(c)].outputs[0];
                }
            }
            if (pattern.size() == 1) continue;
            std::vector<ValueId> inputs = mm.inputs;
            if (!gemm && bias != kNoValue) inputs = {mm.inputs[0], mm.inputs[1], bias};
            Node& f = rw.add(gemm ? "FusedGemm" : "FusedMatMul", kDsinferDomain, std::move(inputs),
                             {out}, mm.name);
            copy_attributes(mm, f);
            set_activation(f, act);
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_matmul_bias_activation() {
    return std::make_unique<FuseMatMulBiasActivation>();
}

}  // namespace dsinfer::passes
