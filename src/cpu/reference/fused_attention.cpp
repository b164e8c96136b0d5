// Reference kernel of com.dsinfer MultiHeadAttention (semantics in docs/OPTIMIZER.md): for each
// (batch, head, query) the scores against every key, scaled, plus the mask, a softmax and the
// weighted sum of V, written straight into the merged-heads output. Plain loops, one score row
// of workspace; the source of truth for the fast kernel (src/cpu/fast/fast_attention.cpp).
// Fully masked rows (every score -inf, or no keys) give zeros; NaN scores give NaN.
#include <cmath>
#include <limits>

#include "ops/kernel_utils.hpp"
#include "ops/attention.hpp"
#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

class MultiHeadAttentionKernel final : public Kernel {
public:
    MultiHeadAttentionKernel(int64_t heads, bool has_scale, float scale)
        : heads_(heads), has_scale_(has_scale), scale_(scale) {}

    Status prepare(PrepareContext& ctx) const override {
        static const char* const names[4] = {"Q", "K", "V", "Mask"};
        for (int i = 0; i < 3; ++i)
            DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_argument, "input ", names[i],
                          " is required");
        const DType dt = ctx.input(0).dtype();
        DSINFER_CHECK(kFloatTypes.contains(dt), ErrorCode::unsupported, "input Q has type ",
                      dtype_name(dt), "; MultiHeadAttention supports float32, float64, float16 ",
                      "and bfloat16");
        for (int i = 1; i < 4; ++i)
            if (ctx.has_input(i))
                DSINFER_CHECK(ctx.input(i).dtype() == dt, ErrorCode::invalid_argument, "input ",
                              names[i], " has type ", dtype_name(ctx.input(i).dtype()),
                              ", expected ", dtype_name(dt), " (Q's)");
        const Shape* mask = ctx.has_input(3) ? &ctx.input(3).shape() : nullptr;
        DSINFER_ASSIGN_OR_RETURN(MhaDims d, mha_dims(ctx.input(0).shape(), ctx.input(1).shape(),
                                                     ctx.input(2).shape(), mask, heads_));
        ctx.set_output(0, dt, Shape{d.batch, d.q_len, d.v_width()});
        const std::size_t csize = dt == DType::f64 ? sizeof(double) : sizeof(float);
        ctx.set_workspace(static_cast<std::size_t>(d.kv_len) * csize);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return dispatch_types(ctx.input(0).dtype, FloatTypes{},
                              [&]<class T>() { return run_typed<T>(ctx); });
    }

private:
    template <class T>
    Status run_typed(RunContext& ctx) const noexcept {
        using C = compute_t<T>;
        const StatusOr<MhaDims> dims = mha_dims(ctx, heads_);
        if (!dims.is_ok()) return dims.status();
        const MhaDims& d = *dims;
        const T* q = ctx.input(0).data_unchecked<T>();
        const T* k = ctx.input(1).data_unchecked<T>();
        const T* v = ctx.input(2).data_unchecked<T>();
        const T* mask = d.has_mask ? ctx.input(3).data_unchecked<T>() : nullptr;
        T* y = ctx.output(0).data_unchecked<T>();
        C* scores = static_cast<C*>(ctx.workspace());
        const C scale = static_cast<C>(mha_scale(has_scale_, scale_, d.head));
        const C neg_inf = -std::numeric_limits<C>::infinity();
        const int64_t wq = d.qk_width(), wv = d.v_width();
        const auto& ms = d.mask_strides;
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < d.heads; ++h)
                for (int64_t i = 0; i < d.q_len; ++i) {
                    const T* qr = q + (b * d.q_len + i) * wq + h * d.head;
                    // Scores and their maximum (NaN, once seen, stays the maximum).
                    C mx = neg_inf;
                    for (int64_t j = 0; j < d.kv_len; ++j) {
                        const T* kr = k + (b * d.kv_len + j) * wq + h * d.head;
                        C dot = 0;
                        for (int64_t e = 0; e < d.head; ++e) dot += load(qr[e]) * load(kr[e]);
                        C s = dot * scale;
                        if (mask != nullptr)
                            s += load(mask[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]]);
                        scores[j] = s;
                        if (s > mx || std::isnan(s)) mx = std::isnan(mx) ? mx : s;
                    }
                    T* yr = y + (b * d.q_len + i) * wv + h * d.v_head;
                    if (mx == neg_inf) {  // every key masked (or none): zeros
                        for (int64_t e = 0; e < d.v_head; ++e) yr[e] = store<T>(C(0));
                        continue;
                    }
                    C sum = 0;
                    for (int64_t j = 0; j < d.kv_len; ++j) {
                        scores[j] = std::exp(scores[j] - mx);
                        sum += scores[j];
                    }
                    for (int64_t e = 0; e < d.v_head; ++e) {
                        C acc = 0;
                        for (int64_t j = 0; j < d.kv_len; ++j)
                            acc += scores[j] * load(v[(b * d.kv_len + j) * wv + h * d.v_head + e]);
                        yr[e] = store<T>(acc / sum);
                    }
                }
        return Status::ok();
    }

    int64_t heads_;
    bool has_scale_;
    float scale_;
};

StatusOr<std::unique_ptr<Kernel>> make_multi_head_attention(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() >= 3 && ctx.num_inputs() <= 4 && ctx.num_outputs() == 1,
                  ErrorCode::invalid_model,
                  "MultiHeadAttention takes 3 or 4 inputs (Q, K, V, Mask) and one output, got ",
                  ctx.num_inputs(), " and ", ctx.num_outputs());
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(const int64_t heads, n.attr<int64_t>("num_heads"));
    DSINFER_CHECK(heads > 0, ErrorCode::invalid_model, "attribute num_heads must be positive, got ",
                  heads);
    DSINFER_ASSIGN_OR_RETURN(const float scale, n.attr_or<float>("scale", 0.f));
    return make_kernel<MultiHeadAttentionKernel>(heads, n.has_attr("scale"), scale);
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
    r.add({"MultiHeadAttention", kDsinferDomain, 1, kMaxOpset, DeviceKind::cpu},
          &make_multi_head_attention);
}

}  // namespace dsinfer::detail
