// Convolution fusions (level 2):
//   fuse_conv_batchnorm       Conv -> BatchNormalization (inference) ==> Conv with folded W, B
//   fuse_conv_add_activation  Conv [-> Add(constant per-channel bias)] [-> Add(residual of the
//                             output's shape)] [-> activation] ==> com.dsinfer FusedConv
// Weights must be float32 constants; every intermediate value must be internal to the pattern.
#include <cmath>
#include <vector>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

bool is_conv(const Node& n) {
    return (n.op_type == "Conv" && n.domain.empty()) ||
           (n.op_type == "FusedConv" && n.domain == kDsinferDomain);
}

/// A Conv/FusedConv whose epilogue can still grow: no residual, no activation.
bool plain_conv(const Node& n) {
    if (!is_conv(n) || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
    if (n.inputs.size() > 3 && n.inputs[3] != kNoValue) return false;
    return !n.has_attr("activation");
}

/// Constant f32 weights W (rank >= 3) and optional f32 bias [M].
bool conv_constants(const GraphIndex& ix, const Node& conv, const Tensor*& w, const Tensor*& b) {
    w = ix.constant(conv.inputs[1]);
    if (w == nullptr || w->dtype() != DType::f32 || w->num_dims() < 3 || w->num_elements() == 0)
        return false;
    b = nullptr;
    if (conv.inputs.size() > 2 && conv.inputs[2] != kNoValue) {
        b = ix.constant(conv.inputs[2]);
        if (b == nullptr || b->dtype() != DType::f32 || b->num_dims() != 1 ||
            b->shape()[0] != w->shape()[0])
            return false;
    }
    return true;
}

class FuseConvBatchNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_conv_batchnorm"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t bi = 0; bi < g.nodes.size(); ++bi) {
            const Node& bn = g.nodes[bi];
            if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5)
                continue;
            auto training = bn.attr_or<int64_t>("training_mode", 0);
            if (!training.is_ok() || training.value() != 0) continue;
            if (!ix.only_output0_read(bn)) continue;
            const int ci = ix.producer(bn.inputs[0]);
            if (ci < 0 || rw.removed(ci) || ix.sole_consumer(bn.inputs[0]) != static_cast<int>(bi))
                continue;
            const Node& conv = g.nodes[static_cast<std::size_t>(ci)];
            const Tensor *w = nullptr, *b = nullptr;
            if (!plain_conv(conv) || !conv_constants(ix, conv, w, b)) continue;
            const int64_t m = w->shape()[0];
            const Tensor* p[4];
            bool ok = true;
            for (int k = 0; k < 4; ++k) {
                p[k] = ix.constant(bn.inputs[static_cast<std::size_t>(k + 1)]);
                ok = ok && p[k] != nullptr && p[k]->dtype() == DType::f32 &&
                     p[k]->num_elements() == m && p[k]->num_dims() == 1;
            }
            auto eps = bn.attr_or<float>("epsilon", 1e-5f);
            if (!ok || !eps.is_ok()) continue;
            const float *scale = p[0]->data_unchecked<float>(), *shift = p[1]->data_unchecked<float>(),
                        *mean = p[2]->data_unchecked<float>(), *var = p[3]->data_unchecked<float>();
            Tensor w2 = w->clone();
            Tensor b2 = Tensor::zeros(DType::f32, Shape{m});
            const int64_t per = w->num_elements() / m;
            float* pw = w2.data_unchecked<float>();
            float* pb = b2.data_unchecked<float>();
            for (int64_t c = 0; c < m; ++c) {
                const double s = static_cast<double>(scale[c]) /
                                 std::sqrt(static_cast<double>(var[c]) + eps.value());
                for (int64_t i = 0; i < per; ++i)
                    pw[c * per + i] = static_cast<float>(pw[c * per + i] * s);
                const double b0 = b != nullptr ? b->data_unchecked<float>()[c] : 0.0;
                pb[c] = static_cast<float>((b0 - mean[c]) * s + shift[c]);
            }
            const std::string base = conv.name.empty() ? bn.name : conv.name;
            const ValueId wv = rw.new_constant(base + "/folded_W", std::move(w2));
            const ValueId bv = rw.new_constant(base + "/folded_B", std::move(b2));
            Node& n = rw.add(conv.op_type, conv.domain, {conv.inputs[0], wv, bv},
                             {bn.outputs[0]}, base);
            copy_attributes(conv, n);
            rw.remove(ci);
            rw.remove(static_cast<int>(bi));
            ++fired;
        }
        DSINFER_RETURN_IF_ERROR(rw.commit().status());
        ctx.fired(name(), fired);
        return Status::ok();
    }
};

/// A constant that only adds a per-output-channel value: [M,1,..,1] (rank = W's - 1),
/// [1,M,1,..,1] (rank = W's), or a scalar.
bool channel_constant(const Tensor& t, int64_t m, int w_rank) {
    if (t.dtype() != DType::f32) return false;
    if (t.num_elements() == 1 && t.num_dims() <= w_rank) return true;
    const Shape& s = t.shape();
    if (t.num_elements() != m) return false;
    if (s.rank() == w_rank - 1) {
        for (int d = 1; d < s.rank(); ++d)
            if (s[d] != 1) return false;
        return s[0] == m;
    }
    if (s.rank() == w_rank) {
        for (int d = 0; d < s.rank(); ++d)
            if (d != 1 && s[d] != 1) return false;
        return s[1] == m;
    }
    return false;
}

class FuseConvAddActivation final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_conv_add_activation"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        GraphIndex ix(g);
        Rewriter rw(g);
        int fired = 0;
        for (std::size_t ci = 0; ci < g.nodes.size(); ++ci) {
            const Node& conv = g.nodes[ci];
            const Tensor *w = nullptr, *b = nullptr;
            if (rw.removed(static_cast<int>(ci)) || !plain_conv(conv) ||
                !conv_constants(ix, conv, w, b))
                continue;
            const int64_t m = w->shape()[0];
            ValueId out = conv.outputs[0];
            std::vector<int> pattern{static_cast<int>(ci)};
            std::optional<Tensor> bias;  // the conv bias plus absorbed constant adds
            ValueId z = kNoValue;
            detail::ActivationSpec act;
            while (true) {
                const int c = ix.sole_consumer(out);
                if (c < 0 || rw.removed(c)) break;
                const Node& n = g.nodes[static_cast<std::size_t>(c)];
                if (n.op_type == "Add" && n.domain.empty() && n.inputs.size() == 2 &&
                    act.empty()) {
                    const ValueId other = n.inputs[0] == out ? n.inputs[1] : n.inputs[0];
                    if (other == out) break;
                    const Tensor* k = ix.constant(other);
                    if (k != nullptr && z == kNoValue) {
                        if (!channel_constant(*k, m, w->num_dims())) break;
                        if (!bias) bias = b != nullptr ? b->clone() : Tensor::zeros(DType::f32, Shape{m});
                        float* pb = bias->data_unchecked<float>();
                        const float* pk = k->data_unchecked<float>();
                        for (int64_t i = 0; i < m; ++i) pb[i] += pk[k->num_elements() == 1 ? 0 : i];
                    } else if (k == nullptr && z == kNoValue &&
                               same_shape(g.value(other).shape, g.value(out).shape) &&
                               is_f32(g.value(other))) {
                        z = other;
                    } else {
                        break;
                    }
                    pattern.push_back(c);
                    out = n.outputs[0];
                    continue;
                }
                if (auto a = match_activation(ix, n); a && act.empty()) {
                    act = *a;
                    pattern.push_back(c);
                    out = n.outputs[0];
                    break;  // nothing is fused after the activation
                }
                break;
            }
            if (pattern.size() == 1) continue;
            ValueId bias_v = conv.inputs.size() > 2 ? conv.inputs[2] : kNoValue;
            if (bias) bias_v = rw.new_constant((conv.name.empty() ? "conv" : conv.name) + "/bias",
                                               std::move(*bias));
            std::vector<ValueId> inputs{conv.inputs[0], conv.inputs[1], bias_v};
            if (z != kNoValue) inputs.push_back(z);
            while (inputs.back() == kNoValue) inputs.pop_back();
            Node& f = rw.add("FusedConv", kDsinferDomain, std::move(inputs), {out}, conv.name);
            copy_attributes(conv, f);
            set_activation(f, act);
            for (int p : pattern) rw.remove(p);
            ++fired;
        }
        return rw.finish_fusion(ctx, name(), fired);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_conv_batchnorm() {
    return std::make_unique<FuseConvBatchNorm>();
}
std::unique_ptr<GraphPass> make_fuse_conv_add_activation() {
    return std::make_unique<FuseConvAddActivation>();
}

}  // namespace dsinfer::passes
