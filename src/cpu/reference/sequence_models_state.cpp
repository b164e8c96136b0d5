// Reference CPU kernels for the stateful sequence ops of linear-attention / state-space models
// (Gated DeltaNet, Mamba): CausalConvWithState and LinearAttention (opset 27).
//
// CausalConvWithState: depthwise causal 1-D convolution of input [B, C, L] with weight [C, 1, k]
// over past_state [B, C, k-1] (zeros when omitted) followed by the input; optional bias and fused
// SiLU; present_state holds the last k-1 positions of that padded sequence.
//
// LinearAttention: per batch and KV head a [d_k, d_v] state S evolves over the time steps:
// gated rules decay it (S *= exp(g), g per head or per key row), delta rules replace v by
// beta * (v - S^T k_e) (k_e = erase_gate * k when given), then S += k v^T and the output is
// scale * q S (query heads share KV heads in groups, GQA). Arithmetic is float32 as in the ONNX
// reference (float64 for double inputs); outputs are rounded to the input type.
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_state_kernels(KernelRegistry& r);

namespace {

/// float for 16/32-bit floats, double for double.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class C>
C silu(C v) noexcept {
    return v / (C(1) + std::exp(-v));
}

// ---- CausalConvWithState ------------------------------------------------------------------

class CausalConvKernel final : public Kernel {
public:
    explicit CausalConvKernel(bool silu) : silu_(silu) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(x.dtype(), FloatTypes{}, []<class T>() { return Status::ok(); }));
        DSINFER_CHECK(x.num_dims() == 3, ErrorCode::invalid_argument,
                      "input must be [batch, channels, length], got ", x.shape().to_string());
        const std::int64_t b = x.shape()[0], c = x.shape()[1];
        DSINFER_CHECK(w.dtype() == x.dtype() && w.num_dims() == 3 && w.shape()[0] == c &&
                          w.shape()[1] == 1 && w.shape()[2] >= 1,
                      ErrorCode::invalid_argument, "weight must be [", c, ", 1, k] of type ",
                      dtype_name(x.dtype()), ", got ", w.shape().to_string());
        const std::int64_t km1 = w.shape()[2] - 1;
        if (ctx.has_input(2)) {
            const Tensor& bias = ctx.input(2);
            DSINFER_CHECK(bias.dtype() == x.dtype() && bias.shape() == Shape{c},
                          ErrorCode::invalid_argument, "bias must be [", c, "], got ",
                          bias.shape().to_string());
        }
        if (ctx.has_input(3)) {
            const Tensor& ps = ctx.input(3);
            DSINFER_CHECK(ps.dtype() == x.dtype() && ps.shape() == (Shape{b, c, km1}),
                          ErrorCode::invalid_argument, "past_state must be [", b, ", ", c, ", ",
                          km1, "], got ", ps.shape().to_string());
        }
        ctx.set_output(0, x.dtype(), x.shape());
        ctx.set_output(1, x.dtype(), Shape{b, c, km1});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() {
            compute<T>(ctx);
            return Status::ok();
        });
    }

private:
    template <class T>
    void compute(RunContext& ctx) const noexcept {
        using C = acc_t<T>;
        const TensorView& x = ctx.input(0);
        const T* xp = x.data_unchecked<T>();
        const T* wp = ctx.input(1).data_unchecked<T>();
        const T* bp = ctx.has_input(2) ? ctx.input(2).data_unchecked<T>() : nullptr;
        const T* pp = ctx.has_input(3) ? ctx.input(3).data_unchecked<T>() : nullptr;
        T* yp = ctx.output(0).data_unchecked<T>();
        T* sp = ctx.has_output(1) ? ctx.output(1).data_unchecked<T>() : nullptr;
        const std::int64_t batch = x.shape[0], chans = x.shape[1], len = x.shape[2];
        const std::int64_t k = ctx.input(1).shape[2], km1 = k - 1;
        // Element j of the padded row [past (k-1) | input (len)].
        auto padded = [&](std::int64_t row, std::int64_t j) -> C {
            if (j >= km1) return static_cast<C>(load(xp[row * len + j - km1]));
            return pp != nullptr ? static_cast<C>(load(pp[row * km1 + j])) : C(0);
        };
        for (std::int64_t row = 0; row < batch * chans; ++row) {
            const std::int64_t ch = row % chans;
            const T* wr = wp + ch * k;
            for (std::int64_t t = 0; t < len; ++t) {
                C acc = bp != nullptr ? static_cast<C>(load(bp[ch])) : C(0);
                for (std::int64_t i = 0; i < k; ++i)
                    acc += static_cast<C>(load(wr[i])) * padded(row, t + i);
                T v = store<T>(acc);
                if (silu_) v = store<T>(silu(static_cast<C>(load(v))));
                yp[row * len + t] = v;
            }
            if (sp != nullptr)
                for (std::int64_t j = 0; j < km1; ++j)
                    sp[row * km1 + j] = store<T>(padded(row, len + j));
        }
    }

    bool silu_;
};

StatusOr<std::unique_ptr<Kernel>> make_causal_conv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::string act,
                             ctx.node().attr_or<std::string>("activation", std::string("none")));
    DSINFER_CHECK(act == "none" || act == "silu" || act == "swish", ErrorCode::invalid_model,
                  "attribute 'activation' must be none, silu or swish, got '", act, "'");
    return make_kernel<CausalConvKernel>(act != "none");
}

// ---- LinearAttention ----------------------------------------------------------------------

struct LinearAttentionConfig {
    std::int64_t q_heads = 0, kv_heads = 0;
    float scale = 0.f;  // 0 = 1 / sqrt(d_k)
    bool gating = true, delta = true;
};

enum LaInput { kQuery, kKey, kValue, kPastState, kDecay, kBeta, kEraseGate };

/// Sizes of one LinearAttention call, validated against the inputs.
struct LaDims {
    std::int64_t b = 0, t = 0, dk = 0, dv = 0;
    std::int64_t decay_last = 0, beta_last = 0;  // 0 = input absent
};

class LinearAttentionKernel final : public Kernel {
public:
    explicit LinearAttentionKernel(LinearAttentionConfig c) : c_(c) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_ASSIGN_OR_RETURN(LaDims d, dims(ctx));
        const DType dt = ctx.input(kQuery).dtype();
        const DType state_dt = ctx.has_input(kPastState) ? ctx.input(kPastState).dtype() : dt;
        ctx.set_output(0, dt, Shape{d.b, d.t, c_.q_heads * d.dv});
        ctx.set_output(1, state_dt, Shape{d.b, c_.kv_heads, d.dk, d.dv});
        const std::size_t acc = dt == DType::f64 ? sizeof(double) : sizeof(float);
        // state + retrieved/v_t row + erase-gated key row
        ctx.set_workspace(static_cast<std::size_t>(d.b * c_.kv_heads * d.dk * d.dv + d.dv + d.dk) *
                          acc);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        LaDims d;
        d.b = ctx.input(kQuery).shape[0];
        d.t = ctx.input(kQuery).shape[1];
        d.dk = ctx.input(kQuery).shape[2] / c_.q_heads;
        d.dv = ctx.input(kValue).shape[2] / c_.kv_heads;
        d.decay_last = ctx.has_input(kDecay) ? ctx.input(kDecay).shape[2] : 0;
        d.beta_last = ctx.has_input(kBeta) ? ctx.input(kBeta).shape[2] : 0;
        return dispatch_types(ctx.input(kQuery).dtype, FloatTypes{}, [&]<class T>() {
            using C = acc_t<T>;
            return dispatch_types(ctx.output(1).dtype, FloatTypes{}, [&]<class S>() {
                compute<T, S, C>(ctx, d);
                return Status::ok();
            });
        });
    }

private:
    StatusOr<LaDims> dims(const PrepareContext& ctx) const {
        const Tensor& q = ctx.input(kQuery);
        const Tensor& k = ctx.input(kKey);
        const Tensor& v = ctx.input(kValue);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(q.dtype(), FloatTypes{}, []<class T>() { return Status::ok(); }));
        for (const Tensor* t : {&q, &k, &v})
            DSINFER_CHECK(t->num_dims() == 3 && t->dtype() == q.dtype(),
                          ErrorCode::invalid_argument,
                          "query, key and value must be rank-3 [B, T, "
                          "H*D] of one type, got ",
                          t->shape().to_string());
        LaDims d;
        d.b = q.shape()[0];
        d.t = q.shape()[1];
        DSINFER_CHECK(q.shape()[2] % c_.q_heads == 0 && v.shape()[2] % c_.kv_heads == 0,
                      ErrorCode::invalid_argument, "query/value last dims ", q.shape()[2], "/",
                      v.shape()[2], " are not divisible by the head counts");
        d.dk = q.shape()[2] / c_.q_heads;
        d.dv = v.shape()[2] / c_.kv_heads;
        auto same_bt = [&](const Tensor& t) {
            return t.num_dims() == 3 && t.shape()[0] == d.b && t.shape()[1] == d.t;
        };
        DSINFER_CHECK(same_bt(k) && same_bt(v) && k.shape()[2] == c_.kv_heads * d.dk,
                      ErrorCode::invalid_argument, "key ", k.shape().to_string(), " / value ",
                      v.shape().to_string(), " do not match query ", q.shape().to_string());
        DSINFER_CHECK(ctx.has_input(kDecay) == c_.gating, ErrorCode::invalid_argument,
                      "input 'decay' is ", c_.gating ? "required" : "not allowed",
                      " by this update_rule");
        DSINFER_CHECK(ctx.has_input(kBeta) == c_.delta, ErrorCode::invalid_argument,
                      "input 'beta' is ", c_.delta ? "required" : "not allowed",
                      " by this update_rule");
        DSINFER_CHECK(!ctx.has_input(kEraseGate) || c_.delta, ErrorCode::invalid_argument,
                      "input 'erase_gate' needs a delta update_rule");
        // decay: [B, T, kv_num_heads] or [B, T, kv_num_heads * d_k]; beta: [B, T, kv_num_heads]
        // or [B, T, 1]. Returns the last dim (0 when the input is absent).
        auto per_step = [&](int i, std::int64_t last1, std::int64_t last2,
                            const char* what) -> StatusOr<std::int64_t> {
            if (!ctx.has_input(i)) return std::int64_t{0};
            const Tensor& t = ctx.input(i);
            const std::int64_t last = t.num_dims() == 3 ? t.shape()[2] : -1;
            DSINFER_CHECK(t.dtype() == q.dtype() && same_bt(t) && (last == last1 || last == last2),
                          ErrorCode::invalid_argument, what, " must be [", d.b, ", ", d.t, ", ",
                          last1, "] or [", d.b, ", ", d.t, ", ", last2, "], got ",
                          t.shape().to_string());
            return last;
        };
        DSINFER_ASSIGN_OR_RETURN(d.decay_last,
                                 per_step(kDecay, c_.kv_heads, c_.kv_heads * d.dk, "decay"));
        DSINFER_ASSIGN_OR_RETURN(d.beta_last, per_step(kBeta, c_.kv_heads, 1, "beta"));
        if (ctx.has_input(kEraseGate)) {
            const Tensor& e = ctx.input(kEraseGate);
            DSINFER_CHECK(e.dtype() == q.dtype() && e.shape() == k.shape(),
                          ErrorCode::invalid_argument, "erase_gate must have the key's shape ",
                          k.shape().to_string(), ", got ", e.shape().to_string());
        }
        if (ctx.has_input(kPastState)) {
            const Tensor& ps = ctx.input(kPastState);
            DSINFER_CHECK(ps.shape() == (Shape{d.b, c_.kv_heads, d.dk, d.dv}),
                          ErrorCode::invalid_argument, "past_state must be [", d.b, ", ",
                          c_.kv_heads, ", ", d.dk, ", ", d.dv, "], got ", ps.shape().to_string());
            DSINFER_RETURN_IF_ERROR(
                dispatch_types(ps.dtype(), FloatTypes{}, []<class T>() { return Status::ok(); }));
        }
        return d;
    }

    template <class T, class S, class C>
    void compute(RunContext& ctx, const LaDims& d) const noexcept {
        const std::int64_t hq = c_.q_heads, hkv = c_.kv_heads, group = hq / hkv;
        const std::int64_t dk = d.dk, dv = d.dv, T_ = d.t;
        const T* q = ctx.input(kQuery).data_unchecked<T>();
        const T* k = ctx.input(kKey).data_unchecked<T>();
        const T* v = ctx.input(kValue).data_unchecked<T>();
        const T* g = ctx.has_input(kDecay) ? ctx.input(kDecay).data_unchecked<T>() : nullptr;
        const T* be = ctx.has_input(kBeta) ? ctx.input(kBeta).data_unchecked<T>() : nullptr;
        const T* eg = ctx.has_input(kEraseGate) ? ctx.input(kEraseGate).data_unchecked<T>() : nullptr;
        T* out = ctx.output(0).data_unchecked<T>();
        C* state = static_cast<C*>(ctx.workspace());
        C* vrow = state + d.b * hkv * dk * dv;
        C* krow = vrow + dv;
        const std::int64_t state_n = d.b * hkv * dk * dv;
        if (ctx.has_input(kPastState)) {
            const S* ps = ctx.input(kPastState).data_unchecked<S>();
            for (std::int64_t i = 0; i < state_n; ++i) state[i] = static_cast<C>(load(ps[i]));
        } else {
            for (std::int64_t i = 0; i < state_n; ++i) state[i] = C(0);
        }
        const C scale =
            c_.scale != 0.f ? static_cast<C>(c_.scale) : C(1) / std::sqrt(static_cast<C>(dk));
        auto at = [](const T* p, std::int64_t i) { return static_cast<C>(load(p[i])); };
        for (std::int64_t b = 0; b < d.b; ++b) {
            for (std::int64_t t = 0; t < T_; ++t) {
                const std::int64_t bt = b * T_ + t;
                for (std::int64_t h = 0; h < hkv; ++h) {
                    C* st = state + (b * hkv + h) * dk * dv;
                    const std::int64_t koff = bt * hkv * dk + h * dk;
                    if (g != nullptr) {
                        for (std::int64_t i = 0; i < dk; ++i) {
                            const C f = std::exp(d.decay_last == hkv ? at(g, bt * hkv + h)
                                                                     : at(g, koff + i));
                            for (std::int64_t m = 0; m < dv; ++m) st[i * dv + m] *= f;
                        }
                    }
                    for (std::int64_t m = 0; m < dv; ++m)
                        vrow[m] = at(v, bt * hkv * dv + h * dv + m);
                    if (be != nullptr) {
                        for (std::int64_t i = 0; i < dk; ++i)
                            krow[i] = eg != nullptr ? at(eg, koff + i) * at(k, koff + i)
                                                    : at(k, koff + i);
                        const C beta = at(be, bt * d.beta_last + (d.beta_last == 1 ? 0 : h));
                        for (std::int64_t m = 0; m < dv; ++m) {
                            C r = 0;
                            for (std::int64_t i = 0; i < dk; ++i) r += st[i * dv + m] * krow[i];
                            vrow[m] = beta * (vrow[m] - r);
                        }
                    }
                    for (std::int64_t i = 0; i < dk; ++i) {
                        const C ki = at(k, koff + i);
                        for (std::int64_t m = 0; m < dv; ++m) st[i * dv + m] += ki * vrow[m];
                    }
                }
                for (std::int64_t h = 0; h < hq; ++h) {
                    const C* st = state + (b * hkv + h / group) * dk * dv;
                    const std::int64_t qoff = bt * hq * dk + h * dk;
                    T* o = out + bt * hq * dv + h * dv;
                    for (std::int64_t m = 0; m < dv; ++m) {
                        C acc = 0;
                        for (std::int64_t i = 0; i < dk; ++i)
                            acc += at(q, qoff + i) * st[i * dv + m];
                        o[m] = store<T>(scale * acc);
                    }
                }
            }
        }
        if (ctx.has_output(1)) {
            S* ps = ctx.output(1).data_unchecked<S>();
            for (std::int64_t i = 0; i < state_n; ++i) ps[i] = store<S>(state[i]);
        }
    }

    LinearAttentionConfig c_;
};

StatusOr<std::unique_ptr<Kernel>> make_linear_attention(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    const Node& n = ctx.node();
    LinearAttentionConfig c;
    DSINFER_ASSIGN_OR_RETURN(c.q_heads, n.attr<std::int64_t>("q_num_heads"));
    DSINFER_ASSIGN_OR_RETURN(c.kv_heads, n.attr<std::int64_t>("kv_num_heads"));
    DSINFER_CHECK(c.q_heads > 0 && c.kv_heads > 0 && c.q_heads % c.kv_heads == 0,
                  ErrorCode::invalid_model, "q_num_heads (", c.q_heads,
                  ") must be a positive multiple of kv_num_heads (", c.kv_heads, ")");
    DSINFER_ASSIGN_OR_RETURN(c.scale, n.attr_or<float>("scale", 0.f));
    DSINFER_ASSIGN_OR_RETURN(std::string rule,
                             n.attr_or<std::string>("update_rule", std::string("gated_delta")));
    DSINFER_CHECK(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta",
                  ErrorCode::invalid_model,
                  "attribute 'update_rule' must be linear, gated, delta "
                  "or gated_delta, got '",
                  rule, "'");
    c.gating = rule == "gated" || rule == "gated_delta";
    c.delta = rule == "delta" || rule == "gated_delta";
    return make_kernel<LinearAttentionKernel>(c);
}

}  // namespace

void register_state_kernels(KernelRegistry& r) {
    r.add({"CausalConvWithState", "", 27, kMaxOpset, DeviceKind::cpu}, &make_causal_conv);
    r.add({"LinearAttention", "", 27, kMaxOpset, DeviceKind::cpu}, &make_linear_attention);
}

}  // namespace dsinfer::detail
