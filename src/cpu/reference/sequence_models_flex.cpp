// Reference CPU kernel for FlexAttention (ai.onnx.preview, opset 1).
//
// Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev] -> Y [B, Hq, L, Ev]: query head h reads
// KV head h / (Hq / Hkv). scores = (Q K^T) * scale (default 1 / sqrt(E)), held in float32
// (float64 for double inputs) as in the operator's function body; the optional subgraphs
// score_mod and mask_mod each map the whole scores tensor [B, Hq, L, S] to a new one, softmax
// runs over S, prob_mod maps the probabilities, and Y = probs V. The subgraphs run through the
// executor like If/Loop bodies (their outputs are the one allocation of a run).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_flex_attention_kernels(KernelRegistry& r);

namespace {

enum Mod { kScoreMod, kMaskMod, kProbMod, kNumMods };
constexpr const char* kModNames[kNumMods] = {"score_mod", "mask_mod", "prob_mod"};

class FlexAttentionKernel final : public Kernel {
public:
    FlexAttentionKernel(float scale, std::array<std::shared_ptr<SubgraphRunner>, kNumMods> mods)
        : scale_(scale), mods_(std::move(mods)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& q = ctx.input(0);
        const Tensor& k = ctx.input(1);
        const Tensor& v = ctx.input(2);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(q.dtype(), FloatTypes{}, []<class T>() { return Status::ok(); }));
        DSINFER_CHECK(q.num_dims() == 4 && k.num_dims() == 4 && v.num_dims() == 4 &&
                          k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                      ErrorCode::invalid_argument, "Q, K and V must be rank-4 tensors of one type");
        const std::int64_t b = q.shape()[0], hq = q.shape()[1], hkv = k.shape()[1];
        DSINFER_CHECK(k.shape()[0] == b && v.shape()[0] == b && v.shape()[1] == hkv && hkv > 0 &&
                          hq % hkv == 0 && k.shape()[3] == q.shape()[3] &&
                          v.shape()[2] == k.shape()[2],
                      ErrorCode::invalid_argument, "shapes Q ", q.shape().to_string(), ", K ",
                      k.shape().to_string(), ", V ", v.shape().to_string(),
                      " do not fit [B, Hq, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev]");
        ctx.set_output(0, q.dtype(), Shape{b, hq, q.shape()[2], v.shape()[3]});
        const std::size_t acc = q.dtype() == DType::f64 ? sizeof(double) : sizeof(float);
        ctx.set_workspace(static_cast<std::size_t>(b * hq * q.shape()[2] * k.shape()[2]) * acc);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return dispatch_types(ctx.input(0).dtype, FloatTypes{}, [&]<class T>() {
            using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
            return compute<T, C>(ctx);
        });
    }

private:
    template <class T, class C>
    Status compute(RunContext& ctx) const noexcept {
        const TensorView& qv = ctx.input(0);
        const TensorView& kv = ctx.input(1);
        const TensorView& vv = ctx.input(2);
        const std::int64_t B = qv.shape[0], Hq = qv.shape[1], L = qv.shape[2], E = qv.shape[3];
        const std::int64_t Hkv = kv.shape[1], S = kv.shape[2], Ev = vv.shape[3];
        const std::int64_t group = Hq / Hkv;
        const T* q = qv.data_unchecked<T>();
        const T* k = kv.data_unchecked<T>();
        const T* v = vv.data_unchecked<T>();
        C* scores = static_cast<C*>(ctx.workspace());
        const C scale =
            scale_ != 0.f ? static_cast<C>(scale_) : C(1) / std::sqrt(static_cast<C>(E));
        // f(r, kv): query row r = (b * Hq + h) * L + l and its KV head's index b * Hkv + h / group.
        auto for_rows = [&](auto&& f) {
            for (std::int64_t b = 0; b < B; ++b)
                for (std::int64_t h = 0; h < Hq; ++h)
                    for (std::int64_t l = 0; l < L; ++l)
                        f((b * Hq + h) * L + l, b * Hkv + h / group);
        };
        for_rows([&](std::int64_t r, std::int64_t kvh) {
            const T* ql = q + r * E;
            const T* kh = k + kvh * S * E;
            for (std::int64_t s = 0; s < S; ++s) {
                C acc = 0;
                for (std::int64_t e = 0; e < E; ++e)
                    acc += static_cast<C>(load(ql[e])) * static_cast<C>(load(kh[s * E + e]));
                scores[r * S + s] = acc * scale;
            }
        });
        const Shape score_shape{B, Hq, L, S};
        for (Mod m : {kScoreMod, kMaskMod})
            DSINFER_RETURN_IF_ERROR(apply(ctx, m, scores, score_shape));
        for (std::int64_t r = 0; r < B * Hq * L; ++r) {
            C* row = scores + r * S;
            C mx = -std::numeric_limits<C>::infinity();
            for (std::int64_t s = 0; s < S; ++s) mx = std::max(mx, row[s]);
            C sum = 0;
            for (std::int64_t s = 0; s < S; ++s) sum += row[s] = std::exp(row[s] - mx);
            for (std::int64_t s = 0; s < S; ++s) row[s] /= sum;
        }
        DSINFER_RETURN_IF_ERROR(apply(ctx, kProbMod, scores, score_shape));
        T* y = ctx.output(0).data_unchecked<T>();
        for_rows([&](std::int64_t r, std::int64_t kvh) {
            const C* p = scores + r * S;
            const T* vh = v + kvh * S * Ev;
            for (std::int64_t e = 0; e < Ev; ++e) {
                C acc = 0;
                for (std::int64_t s = 0; s < S; ++s)
                    acc += p[s] * static_cast<C>(load(vh[s * Ev + e]));
                y[r * Ev + e] = store<T>(acc);
            }
        });
        return Status::ok();
    }

    /// Runs subgraph `m` (if given) on `buf` (shape `shape`) and copies its result back.
    template <class C>
    Status apply(const RunContext& ctx, Mod m, C* buf, const Shape& shape) const noexcept {
        const auto& body = mods_[static_cast<std::size_t>(m)];
        if (!body) return Status::ok();
        try {
            std::vector<Tensor> outs;
            DSINFER_RETURN_IF_ERROR(body->run({Tensor::wrap(buf, dtype_of<C>(), shape)},
                                              ctx.frame(), ctx.control(), outs));
            DSINFER_CHECK(
                outs.size() == 1 && outs[0].dtype() == dtype_of<C>() && outs[0].shape() == shape,
                ErrorCode::invalid_argument, kModNames[m], " must return one ",
                dtype_name(dtype_of<C>()), " tensor of shape ", shape.to_string());
            std::copy_n(outs[0].data_unchecked<C>(), shape.num_elements(), buf);
            return Status::ok();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted,
                          "out of memory running a FlexAttention subgraph");
        }
    }

    float scale_;
    std::array<std::shared_ptr<SubgraphRunner>, kNumMods> mods_;
};

StatusOr<std::unique_ptr<Kernel>> make_flex_attention(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(float scale, n.attr_or<float>("scale", 0.f));
    std::array<std::shared_ptr<SubgraphRunner>, kNumMods> mods;
    for (int m = 0; m < kNumMods; ++m) {
        if (!n.has_attr(kModNames[m])) continue;
        DSINFER_ASSIGN_OR_RETURN(auto g, n.attr<std::shared_ptr<Graph>>(kModNames[m]));
        DSINFER_CHECK(g->inputs.size() == 1 && g->outputs.size() == 1, ErrorCode::invalid_model,
                      "subgraph ", kModNames[m], " must have one input and one output");
        DSINFER_ASSIGN_OR_RETURN(mods[static_cast<std::size_t>(m)], ctx.compile_subgraph(g));
    }
    return make_kernel<FlexAttentionKernel>(scale, std::move(mods));
}

}  // namespace

void register_flex_attention_kernels(KernelRegistry& r) {
    r.add({"FlexAttention", "ai.onnx.preview", 1, kMaxOpset, DeviceKind::cpu},
          &make_flex_attention);
}

}  // namespace dsinfer::detail
