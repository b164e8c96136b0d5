// fuse_matmul_bias_activation (level 2):
//   MatMul(A, W) [-> Add(bias [N])] [-> activation]  ==> com.dsinfer FusedMatMul(A, W, bias)
//   Gemm(A, W, C) -> activation                       ==> com.dsinfer FusedGemm(A, W, C)
//   com.dsinfer DynamicQuantizeMatMul / MatMulIntegerToFloat (no activation yet) -> activation
//     ==> the same node with the activation attribute (fuse_quant.cpp makes them before
//     fuse_gelu forms BERT's Gelu; their f32 epilogue runs the activation's vector loop, so
//     the result is bitwise the unfused activation's fast kernel)
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
            if (rw.removed(static_cast<int>(mi)) || mm.outputs.size() != 1) continue;
            // dsinfer's dynamically quantized products (fuse_quant.cpp) without an activation:
            // the activation joins their f32 epilogue.
            if (mm.domain == kDsinferDomain &&
                (mm.op_type == "DynamicQuantizeMatMul" || mm.op_type == "MatMulIntegerToFloat") &&
                !mm.has_attr("activation")) {
                const int c = ix.sole_consumer(mm.outputs[0]);
                if (c < 0 || rw.removed(c)) continue;
                const Node& an = g.nodes[static_cast<std::size_t>(c)];
                const auto a = match_activation(ix, an);
                if (!a) continue;
                Node& f = rw.add(mm.op_type, mm.domain, mm.inputs, {an.outputs[0]}, mm.name);
                copy_attributes(mm, f);
                set_activation(f, *a);
                rw.remove(static_cast<int>(mi));
                rw.remove(c);
                ++fired;
                continue;
            }
            if (!mm.domain.empty()) continue;
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
