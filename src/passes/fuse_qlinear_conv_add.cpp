// fuse_qlinear_conv_add (level 2, right after fuse_qdq): a QDQ ResNet's block join, a
// QLinearConv whose 8-bit output only a com.microsoft QLinearAdd reads (either operand),
//   QLinearConv(x, xs, xz, w, ws, wz, ys, yz [, B]) -> y;  QLinearAdd(y, ys, yz, Z, zs, zz, cs, cz)
//   ==> com.dsinfer QLinearConvAdd(x, xs, xz, w, ws, wz, ys, yz, B, Z, zs, zz, cs, cz)
// (QLinearAdd(Z, .., y, ..) alike: its float32 sum of the two products is the same either way),
// so the INT8 GEMM adds the residual in its store instead of a pass over three tensors more.
// The fused op computes y exactly as QLinearConv does and then QLinearAdd's value from it
// (ops/quantize.hpp requantize_product, ops/qlinear.hpp): bitwise the unfused pair. The
// QLinearAdd carries no activation (fuse_qdq keeps an island's Relu/Clip only where it is not
// a no-op, and then leaves the Add in float), so neither does the fused op.
//
// Conditions: y's scale and zero point constant and per tensor (one element, float32 scale),
// QLinearAdd's parameters of y the same values (bitwise scale, zero point of y's type; absent:
// 0); y read by the QLinearAdd only (readers whose own outputs nothing reads, such as the
// DequantizeLinear fuse_qdq leaves unread, are dropped with it) and not pinned; Z not y itself;
// y, Z and the sum of one known dtype and provably equal shapes (no broadcasting).
#include <cstdint>
#include <cstring>
#include <vector>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

constexpr const char* kMsDomain = "com.microsoft";

/// A constant of one element: a float32 scale, or an 8-bit zero point of `type`.
const Tensor* one_element(const GraphIndex& ix, ValueId v) {
    const Tensor* t = ix.constant(v);
    return t != nullptr && t->num_elements() == 1 ? t : nullptr;
}

/// The zero point of input `v` (absent: 0) when it is a constant of `type`; -1000 otherwise.
int zero_value(const GraphIndex& ix, ValueId v, DType type) {
    if (v == kNoValue) return 0;
    const Tensor* t = one_element(ix, v);
    if (t == nullptr || t->dtype() != type) return -1000;
    return type == DType::u8 ? int{t->data_unchecked<std::uint8_t>()[0]} : int{t->data_unchecked<std::int8_t>()[0]};
}

ValueId input_or_none(const Node& n, std::size_t i) {
    return i < n.inputs.size() ? n.inputs[i] : kNoValue;
}

class FuseQLinearConvAdd final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_qlinear_conv_add"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t ai = 0; ai < g.nodes.size(); ++ai) {
            const Node& add = g.nodes[ai];
            if (add.op_type != "QLinearAdd" || add.domain != kMsDomain || add.outputs.size() != 1 ||
                add.inputs.size() < 7 || rw.removed(static_cast<int>(ai)))
                continue;
            for (std::size_t k : {std::size_t{0}, std::size_t{3}}) {
                std::vector<int> dead;
                const int ci = match(g, ix, rw, static_cast<int>(ai), k, dead);
                if (ci < 0) continue;
                const Node& conv = g.nodes[static_cast<std::size_t>(ci)];
                const std::size_t o = 3 - k;  // the residual's operand
                std::vector<ValueId> in;
                for (std::size_t i = 0; i < 9; ++i) in.push_back(input_or_none(conv, i));
                for (ValueId v : {add.inputs[o], add.inputs[o + 1], input_or_none(add, o + 2),
                                  add.inputs[6], input_or_none(add, 7)})
                    in.push_back(v);
                while (in.back() == kNoValue) in.pop_back();
                Node& f = rw.add("QLinearConvAdd", kDsinferDomain, std::move(in), {add.outputs[0]},
                                 conv.name);
                copy_attributes(conv, f);
                rw.remove(ci);
                rw.remove(static_cast<int>(ai));
                for (int d : dead) rw.remove(d);
                ++fired;
                break;
            }
        }
        return rw.finish_fusion(ctx, name(), fired);
    }

private:
    /// The QLinearConv producing operand k of QLinearAdd `ai` when the pair may fuse, else -1;
    /// `dead`: the conv output's other readers, none of whose outputs is read or pinned.
    static int match(const Graph& g, const GraphIndex& ix, const Rewriter& rw, int ai,
                     std::size_t k, std::vector<int>& dead) {
        const Node& add = g.nodes[static_cast<std::size_t>(ai)];
        const ValueId y = add.inputs[k];
        const ValueId z = add.inputs[3 - k];
        if (y == kNoValue || z == kNoValue || y == z || ix.pinned(y)) return -1;
        const int ci = ix.producer(y);
        if (ci < 0 || rw.removed(ci)) return -1;
        const Node& conv = g.nodes[static_cast<std::size_t>(ci)];
        if (!is_op(conv, "QLinearConv") || conv.outputs.size() != 1 || conv.outputs[0] != y ||
            conv.inputs.size() < 8 || conv.inputs.size() > 9)
            return -1;
        for (int c : ix.consumers(y)) {
            if (c == ai) continue;
            const Node& r = g.nodes[static_cast<std::size_t>(c)];
            for (ValueId out : r.outputs)
                if (out != kNoValue && (ix.pinned(out) || !ix.consumers(out).empty())) return -1;
            if (rw.removed(c)) continue;
            dead.push_back(c);
        }
        // One dtype and one shape for y, Z and the sum.
        const Value& yv = g.value(y);
        const Value& zv = g.value(z);
        const Value& cv = g.value(add.outputs[0]);
        if (!yv.dtype || (*yv.dtype != DType::u8 && *yv.dtype != DType::i8) || zv.dtype != yv.dtype ||
            cv.dtype != yv.dtype || !same_shape(yv.shape, zv.shape) ||
            !same_shape(yv.shape, cv.shape))
            return -1;
        // y's parameters: constants per tensor, QLinearAdd's for y the same values.
        const Tensor* ys = one_element(ix, conv.inputs[6]);
        const Tensor* as = one_element(ix, add.inputs[k + 1]);
        if (ys == nullptr || as == nullptr || ys->dtype() != DType::f32 ||
            as->dtype() != DType::f32 ||
            std::memcmp(ys->raw_data(), as->raw_data(), sizeof(float)) != 0)
            return -1;
        const int yz = zero_value(ix, input_or_none(conv, 7), *yv.dtype);
        if (yz < -128 || yz != zero_value(ix, input_or_none(add, k + 2), *yv.dtype)) return -1;
        return ci;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_qlinear_conv_add() {
    return std::make_unique<FuseQLinearConvAdd>();
}

}  // namespace dsinfer::passes
