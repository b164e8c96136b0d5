// Reference CPU kernels for recurrent layers (RNN, GRU, LSTM) and the registration of the whole
// sequence-model group (Resize/Upsample, Attention, FlexAttention, RotaryEmbedding, GridSample
// and AffineGrid, CausalConvWithState and LinearAttention live in sequence_models_*.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

// Defined in sequence_models_*.cpp.
void register_resize_kernels(KernelRegistry& r);
void register_onnx_attention_kernels(KernelRegistry& r);
void register_grid_kernels(KernelRegistry& r);
void register_state_kernels(KernelRegistry& r);
void register_flex_attention_kernels(KernelRegistry& r);

namespace {

enum class ActKind {
    sigmoid,
    tanh,
    relu,
    hard_sigmoid,
    affine,
    leaky_relu,
    thresholded_relu,
    scaled_tanh,
    elu,
    softsign,
    softplus,
};

struct Activation {
    ActKind kind = ActKind::sigmoid;
    float alpha = 0.0f;
    float beta = 0.0f;
};

template <class C>
inline C activate(const Activation& a, C x) noexcept {
    const C alpha = static_cast<C>(a.alpha);
    const C beta = static_cast<C>(a.beta);
    switch (a.kind) {
        case ActKind::sigmoid:
            // Split by sign so exp never overflows.
            if (x >= C(0))
                return C(1) / (C(1) + std::exp(-x));
            else {
                const C e = std::exp(x);
                return e / (C(1) + e);
            }
        case ActKind::tanh: return std::tanh(x);
        case ActKind::relu: return x > C(0) ? x : (x == x ? C(0) : x);
        case ActKind::hard_sigmoid: {
            const C v = alpha * x + beta;
            return v != v ? v : std::max(C(0), std::min(C(1), v));  // NaN stays NaN
        }
        case ActKind::affine: return alpha * x + beta;
        case ActKind::leaky_relu: return x < C(0) ? alpha * x : x;
        case ActKind::thresholded_relu: return x > alpha ? x : (x == x ? C(0) : x);
        case ActKind::scaled_tanh: return alpha * std::tanh(beta * x);
        case ActKind::elu: return x < C(0) ? alpha * (std::exp(x) - C(1)) : x;
        case ActKind::softsign: return x / (C(1) + std::abs(x));
        case ActKind::softplus:
            // log(1 + exp(x)) without overflow for large x.
            return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }
    return x;
}

std::string lower(std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

// Parses activations/activation_alpha/activation_beta. `defaults` is the per-direction list.
// The alpha/beta lists are consumed in order by the functions that take them.
StatusOr<std::vector<Activation>> parse_activations(const Node& node, int num_directions,
                                                    const std::vector<std::string>& defaults) {
    DSINFER_ASSIGN_OR_RETURN(auto names, node.attr_or<std::vector<std::string>>(
                                             "activations", std::vector<std::string>{}));
    DSINFER_ASSIGN_OR_RETURN(
        auto alphas, node.attr_or<std::vector<float>>("activation_alpha", std::vector<float>{}));
    DSINFER_ASSIGN_OR_RETURN(
        auto betas, node.attr_or<std::vector<float>>("activation_beta", std::vector<float>{}));
    const std::size_t per_dir = defaults.size();
    const std::size_t total = per_dir * static_cast<std::size_t>(num_directions);
    if (names.empty()) {
        for (int d = 0; d < num_directions; ++d)
            names.insert(names.end(), defaults.begin(), defaults.end());
    } else if (names.size() == per_dir && num_directions == 2) {
        // One list given for a bidirectional layer: both directions use it.
        auto copy = names;
        names.insert(names.end(), copy.begin(), copy.end());
    }
    if (names.size() != total)
        return Status::error(ErrorCode::invalid_model, "attribute 'activations' must list ", total,
                             " functions (", per_dir, " per direction), got ", names.size());
    std::vector<Activation> out;
    std::size_t ai = 0, bi = 0;
    auto next_alpha = [&](float dflt) { return ai < alphas.size() ? alphas[ai++] : dflt; };
    auto next_beta = [&](float dflt) { return bi < betas.size() ? betas[bi++] : dflt; };
    for (const auto& raw : names) {
        const std::string n = lower(raw);
        Activation a;
        if (n == "sigmoid")
            a.kind = ActKind::sigmoid;
        else if (n == "tanh")
            a.kind = ActKind::tanh;
        else if (n == "relu")
            a.kind = ActKind::relu;
        else if (n == "hardsigmoid") {
            a.kind = ActKind::hard_sigmoid;
            a.alpha = next_alpha(0.2f);
            a.beta = next_beta(0.5f);
        } else if (n == "affine") {
            a.kind = ActKind::affine;
            a.alpha = next_alpha(1.0f);
            a.beta = next_beta(0.0f);
        } else if (n == "leakyrelu") {
            a.kind = ActKind::leaky_relu;
            a.alpha = next_alpha(0.01f);
        } else if (n == "thresholdedrelu") {
            a.kind = ActKind::thresholded_relu;
            a.alpha = next_alpha(1.0f);
        } else if (n == "scaledtanh") {
            a.kind = ActKind::scaled_tanh;
            a.alpha = next_alpha(1.0f);
            a.beta = next_beta(1.0f);
        } else if (n == "elu") {
            a.kind = ActKind::elu;
            a.alpha = next_alpha(1.0f);
        } else if (n == "softsign")
            a.kind = ActKind::softsign;
        else if (n == "softplus")
            a.kind = ActKind::softplus;
        else
            return Status::error(ErrorCode::invalid_model, "unknown activation function '", raw,
                                 "'");
        out.push_back(a);
    }
    return out;
}

enum class RnnKind { rnn, gru, lstm };

const char* rnn_name(RnnKind k) {
    return k == RnnKind::rnn ? "RNN" : (k == RnnKind::gru ? "GRU" : "LSTM");
}

class RnnKernel final : public Kernel {
public:
    RnnKernel(RnnKind kind, int num_directions, bool reverse, std::int64_t hidden, float clip,
              bool input_forget, bool linear_before_reset, int layout, std::vector<Activation> acts)
        : kind_(kind),
          gates_(kind == RnnKind::rnn ? 1 : (kind == RnnKind::gru ? 3 : 4)),
          num_directions_(num_directions),
          reverse_(reverse),
          hidden_(hidden),
          clip_(clip),
          input_forget_(input_forget),
          linear_before_reset_(linear_before_reset),
          layout_(layout),
          acts_(std::move(acts)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        const Tensor& r = ctx.input(2);
        DSINFER_CHECK(x.num_dims() == 3, ErrorCode::invalid_argument,
                      "input X must have rank 3, got shape ", x.shape().to_string());
        DSINFER_CHECK(w.num_dims() == 3 && r.num_dims() == 3, ErrorCode::invalid_argument,
                      "inputs W and R must have rank 3, got ", w.shape().to_string(), " and ",
                      r.shape().to_string());
        const DType dt = x.dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, "element type ", dtype_name(dt), " is not supported");
        const std::int64_t seq = layout_ == 0 ? x.shape()[0] : x.shape()[1];
        const std::int64_t batch = layout_ == 0 ? x.shape()[1] : x.shape()[0];
        const std::int64_t in_size = x.shape()[2];
        const std::int64_t hid = hidden_ > 0 ? hidden_ : r.shape()[2];
        const std::int64_t g = gates_;
        const std::int64_t nd = num_directions_;
        DSINFER_CHECK(w.shape() == (Shape{nd, g * hid, in_size}), ErrorCode::invalid_argument,
                      "input W must have shape [", nd, ",", g * hid, ",", in_size, "], got ",
                      w.shape().to_string());
        DSINFER_CHECK(r.shape() == (Shape{nd, g * hid, hid}), ErrorCode::invalid_argument,
                      "input R must have shape [", nd, ",", g * hid, ",", hid, "], got ",
                      r.shape().to_string());
        DSINFER_CHECK(w.dtype() == dt && r.dtype() == dt, ErrorCode::invalid_argument,
                      "inputs W and R must have the element type of X (", dtype_name(dt), ")");
        if (ctx.has_input(3)) {
            const Tensor& b = ctx.input(3);
            DSINFER_CHECK(b.dtype() == dt && b.shape() == (Shape{nd, 2 * g * hid}),
                          ErrorCode::invalid_argument, "input B must be ", dtype_name(dt),
                          " of shape [", nd, ",", 2 * g * hid, "], got ", dtype_name(b.dtype()),
                          " ", b.shape().to_string());
        }
        if (ctx.has_input(4)) {
            const Tensor& sl = ctx.input(4);
            DSINFER_CHECK((sl.dtype() == DType::i32 || sl.dtype() == DType::i64) &&
                              sl.shape() == (Shape{batch}),
                          ErrorCode::invalid_argument,
                          "input sequence_lens must be int32 of shape [", batch, "], got ",
                          dtype_name(sl.dtype()), " ", sl.shape().to_string());
        }
        const Shape state_shape = layout_ == 0 ? Shape{nd, batch, hid} : Shape{batch, nd, hid};
        const int n_state_inputs = kind_ == RnnKind::lstm ? 2 : 1;
        for (int i = 5; i < 5 + n_state_inputs; ++i) {
            if (!ctx.has_input(i)) continue;
            const Tensor& s = ctx.input(i);
            DSINFER_CHECK(s.dtype() == dt && s.shape() == state_shape, ErrorCode::invalid_argument,
                          "input ", i == 5 ? "initial_h" : "initial_c", " must be ", dtype_name(dt),
                          " of shape ", state_shape.to_string(), ", got ", dtype_name(s.dtype()),
                          " ", s.shape().to_string());
        }
        if (kind_ == RnnKind::lstm && ctx.has_input(7)) {
            const Tensor& p = ctx.input(7);
            DSINFER_CHECK(p.dtype() == dt && p.shape() == (Shape{nd, 3 * hid}),
                          ErrorCode::invalid_argument, "input P must be ", dtype_name(dt),
                          " of shape [", nd, ",", 3 * hid, "], got ", dtype_name(p.dtype()), " ",
                          p.shape().to_string());
        }
        if (ctx.has_output(0)) {
            ctx.set_output(0, dt,
                           layout_ == 0 ? Shape{seq, nd, batch, hid} : Shape{batch, seq, nd, hid});
        }
        if (ctx.has_output(1)) ctx.set_output(1, dt, state_shape);
        if (kind_ == RnnKind::lstm && ctx.has_output(2)) ctx.set_output(2, dt, state_shape);
        const std::size_t csize = dt == DType::f64 ? sizeof(double) : sizeof(float);
        // h, c, tmp, gates (g rows) and one more row for GRU's r (.) h.
        ctx.set_workspace(static_cast<std::size_t>((g + 4) * hid) * csize);
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
        const TensorView& xv = ctx.input(0);
        const std::int64_t seq = layout_ == 0 ? xv.shape[0] : xv.shape[1];
        const std::int64_t batch = layout_ == 0 ? xv.shape[1] : xv.shape[0];
        const std::int64_t in_size = xv.shape[2];
        const std::int64_t hid = ctx.input(2).shape[2];
        const std::int64_t g = gates_;
        const std::int64_t nd = num_directions_;
        const T* x = xv.data_unchecked<T>();
        const T* w = ctx.input(1).data_unchecked<T>();
        const T* r = ctx.input(2).data_unchecked<T>();
        const T* bias = ctx.has_input(3) ? ctx.input(3).data_unchecked<T>() : nullptr;
        const TensorView* seq_lens = ctx.has_input(4) ? &ctx.input(4) : nullptr;
        const T* init_h = ctx.has_input(5) ? ctx.input(5).data_unchecked<T>() : nullptr;
        const bool lstm = kind_ == RnnKind::lstm;
        const T* init_c = lstm && ctx.has_input(6) ? ctx.input(6).data_unchecked<T>() : nullptr;
        const T* peep = lstm && ctx.has_input(7) ? ctx.input(7).data_unchecked<T>() : nullptr;
        T* y = ctx.has_output(0) ? ctx.output(0).data_unchecked<T>() : nullptr;
        T* y_h = ctx.has_output(1) ? ctx.output(1).data_unchecked<T>() : nullptr;
        T* y_c = lstm && ctx.has_output(2) ? ctx.output(2).data_unchecked<T>() : nullptr;

        C* h = static_cast<C*>(ctx.workspace());
        C* c = h + hid;
        C* tmp = c + hid;
        C* gates = tmp + hid;

        // Zero Y first: steps past a batch entry's sequence length stay zero.
        if (y != nullptr)
            for (std::int64_t i = 0; i < ctx.output(0).num_elements(); ++i) y[i] = store<T>(C(0));

        const std::size_t n_acts = kind_ == RnnKind::lstm ? 3 : (kind_ == RnnKind::gru ? 2 : 1);
        auto clip = [&](C v) {
            if (clip_ > 0.0f) {
                const C cl = static_cast<C>(clip_);
                return v < -cl ? -cl : (v > cl ? cl : v);
            }
            return v;
        };

        for (std::int64_t d = 0; d < nd; ++d) {
            const bool backward = reverse_ || d == 1;
            const T* wd = w + d * g * hid * in_size;
            const T* rd = r + d * g * hid * hid;
            const T* wb = bias != nullptr ? bias + d * 2 * g * hid : nullptr;
            const T* rb = bias != nullptr ? wb + g * hid : nullptr;
            const T* pd = peep != nullptr ? peep + d * 3 * hid : nullptr;
            const Activation* act = acts_.data() + static_cast<std::size_t>(d) * n_acts;
            for (std::int64_t b = 0; b < batch; ++b) {
                std::int64_t len = seq;
                if (seq_lens != nullptr) {
                    len = seq_lens->dtype == DType::i32 ? seq_lens->data_unchecked<std::int32_t>()[b]
                                                        : seq_lens->data_unchecked<std::int64_t>()[b];
                    if (len < 0 || len > seq)
                        return Status::error(ErrorCode::invalid_argument, "sequence_lens[", b,
                                             "] = ", len, " is outside [0, ", seq, "]");
                }
                const std::int64_t state_off =
                    layout_ == 0 ? (d * batch + b) * hid : (b * nd + d) * hid;
                for (std::int64_t j = 0; j < hid; ++j) {
                    h[j] = init_h != nullptr ? load(init_h[state_off + j]) : C(0);
                    c[j] = init_c != nullptr ? load(init_c[state_off + j]) : C(0);
                }
                for (std::int64_t s = 0; s < len; ++s) {
                    const std::int64_t t = backward ? len - 1 - s : s;
                    const T* xt = x + (layout_ == 0 ? (t * batch + b) : (b * seq + t)) * in_size;
                    // Input projection (+ both biases) for every gate row.
                    for (std::int64_t q = 0; q < g * hid; ++q) {
                        C acc = wb != nullptr ? load(wb[q]) : C(0);
                        const T* wrow = wd + q * in_size;
                        for (std::int64_t k = 0; k < in_size; ++k)
                            acc += load(xt[k]) * load(wrow[k]);
                        gates[q] = acc;
                    }
                    if (kind_ == RnnKind::gru) {
                        step_gru<T>(rd, rb, act, h, tmp, gates, hid, clip);
                    } else {
                        // Recurrent projection for every gate row.
                        for (std::int64_t q = 0; q < g * hid; ++q) {
                            C acc = rb != nullptr ? load(rb[q]) : C(0);
                            const T* rrow = rd + q * hid;
                            for (std::int64_t k = 0; k < hid; ++k) acc += h[k] * load(rrow[k]);
                            gates[q] += acc;
                        }
                        if (kind_ == RnnKind::rnn) {
                            for (std::int64_t j = 0; j < hid; ++j)
                                h[j] = activate(act[0], clip(gates[j]));
                        } else {
                            step_lstm<T>(pd, act, h, c, gates, hid, clip);
                        }
                    }
                    if (y != nullptr) {
                        T* yt = y + (layout_ == 0 ? ((t * nd + d) * batch + b)
                                                  : ((b * seq + t) * nd + d)) *
                                        hid;
                        for (std::int64_t j = 0; j < hid; ++j) yt[j] = store<T>(h[j]);
                    }
                }
                if (y_h != nullptr)
                    for (std::int64_t j = 0; j < hid; ++j) y_h[state_off + j] = store<T>(h[j]);
                if (y_c != nullptr)
                    for (std::int64_t j = 0; j < hid; ++j) y_c[state_off + j] = store<T>(c[j]);
            }
        }
        return Status::ok();
    }

    // Gate order i, o, f, c; peepholes P = [Pi, Po, Pf].
    template <class T, class C, class Clip>
    void step_lstm(const T* pd, const Activation* act, C* h, C* c, C* gates, std::int64_t hid,
                   const Clip& clip) const noexcept {
        C* gi = gates;
        C* go = gates + hid;
        C* gf = gates + 2 * hid;
        C* gc = gates + 3 * hid;
        for (std::int64_t j = 0; j < hid; ++j) {
            const C pi = pd != nullptr ? load(pd[j]) : C(0);
            const C po = pd != nullptr ? load(pd[hid + j]) : C(0);
            const C pf = pd != nullptr ? load(pd[2 * hid + j]) : C(0);
            // input_forget couples the gates as ONNX Runtime does: f = 1 - i.
            const C i = activate(act[0], clip(gi[j] + pi * c[j]));
            const C f = input_forget_ ? C(1) - i : activate(act[0], clip(gf[j] + pf * c[j]));
            const C cand = activate(act[1], clip(gc[j]));
            const C cn = f * c[j] + i * cand;
            const C o = activate(act[0], clip(go[j] + po * cn));
            c[j] = cn;
            h[j] = o * activate(act[2], cn);
        }
    }

    // Gate order z, r, h. `gates` holds the input projections plus W biases.
    template <class T, class C, class Clip>
    void step_gru(const T* rd, const T* rb, const Activation* act, C* h, C* tmp, C* gates,
                  std::int64_t hid, const Clip& clip) const noexcept {
        C* gz = gates;
        C* gr = gates + hid;
        C* gh = gates + 2 * hid;
        for (std::int64_t q = 0; q < 2 * hid; ++q) {
            C acc = rb != nullptr ? load(rb[q]) : C(0);
            const T* rrow = rd + q * hid;
            for (std::int64_t k = 0; k < hid; ++k) acc += h[k] * load(rrow[k]);
            gates[q] = activate(act[0], clip(gates[q] + acc));
        }
        const T* rh = rd + 2 * hid * hid;
        const T* rbh = rb != nullptr ? rb + 2 * hid : nullptr;
        if (linear_before_reset_) {
            for (std::int64_t j = 0; j < hid; ++j) {
                C acc = rbh != nullptr ? load(rbh[j]) : C(0);
                for (std::int64_t k = 0; k < hid; ++k) acc += h[k] * load(rh[j * hid + k]);
                tmp[j] = gr[j] * acc;
            }
        } else {
            // tmp = r (.) h, then the projection of it.
            C* rh_vec = gz + 3 * hid;  // past the gates: the extra workspace slot
            for (std::int64_t k = 0; k < hid; ++k) rh_vec[k] = gr[k] * h[k];
            for (std::int64_t j = 0; j < hid; ++j) {
                C acc = rbh != nullptr ? load(rbh[j]) : C(0);
                for (std::int64_t k = 0; k < hid; ++k) acc += rh_vec[k] * load(rh[j * hid + k]);
                tmp[j] = acc;
            }
        }
        for (std::int64_t j = 0; j < hid; ++j) {
            const C hh = activate(act[1], clip(gh[j] + tmp[j]));
            h[j] = (C(1) - gz[j]) * hh + gz[j] * h[j];
        }
    }

    RnnKind kind_;
    int gates_;
    int num_directions_;
    bool reverse_;
    std::int64_t hidden_;
    float clip_;
    bool input_forget_;
    bool linear_before_reset_;
    int layout_;
    std::vector<Activation> acts_;
};

StatusOr<std::unique_ptr<Kernel>> make_rnn_common(const KernelCreateContext& ctx, RnnKind kind) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto direction,
                             n.attr_or<std::string>("direction", std::string("forward")));
    int nd = 1;
    bool reverse = false;
    if (direction == "bidirectional")
        nd = 2;
    else if (direction == "reverse")
        reverse = true;
    else if (direction != "forward")
        return Status::error(ErrorCode::invalid_model, "attribute 'direction' must be forward, ",
                             "reverse or bidirectional, got '", direction, "'");
    DSINFER_ASSIGN_OR_RETURN(auto hidden, n.attr_or<std::int64_t>("hidden_size", 0));
    DSINFER_CHECK(hidden >= 0, ErrorCode::invalid_model,
                  "attribute 'hidden_size' must be positive, got ", hidden);
    float clip = 0.0f;
    if (n.has_attr("clip")) {
        DSINFER_ASSIGN_OR_RETURN(clip, n.attr<float>("clip"));
        DSINFER_CHECK(clip > 0.0f, ErrorCode::invalid_model,
                      "attribute 'clip' must be positive, got ", clip);
    }
    DSINFER_ASSIGN_OR_RETURN(auto input_forget, n.attr_or<std::int64_t>("input_forget", 0));
    DSINFER_ASSIGN_OR_RETURN(auto lbr, n.attr_or<std::int64_t>("linear_before_reset", 0));
    DSINFER_ASSIGN_OR_RETURN(auto layout, n.attr_or<std::int64_t>("layout", 0));
    DSINFER_CHECK(layout == 0 || layout == 1, ErrorCode::invalid_model,
                  "attribute 'layout' must be 0 or 1, got ", layout);
    std::vector<std::string> defaults;
    switch (kind) {
        case RnnKind::rnn: defaults = {"Tanh"}; break;
        case RnnKind::gru: defaults = {"Sigmoid", "Tanh"}; break;
        case RnnKind::lstm: defaults = {"Sigmoid", "Tanh", "Tanh"}; break;
    }
    DSINFER_ASSIGN_OR_RETURN(auto acts, parse_activations(n, nd, defaults));
    DSINFER_CHECK(ctx.num_inputs() >= 3, ErrorCode::invalid_model, rnn_name(kind),
                  " needs inputs X, W and R");
    return make_kernel<RnnKernel>(kind, nd, reverse, hidden, clip, input_forget != 0, lbr != 0,
                                  static_cast<int>(layout), std::move(acts));
}

StatusOr<std::unique_ptr<Kernel>> make_rnn(const KernelCreateContext& ctx) {
    return make_rnn_common(ctx, RnnKind::rnn);
}
StatusOr<std::unique_ptr<Kernel>> make_gru(const KernelCreateContext& ctx) {
    return make_rnn_common(ctx, RnnKind::gru);
}
StatusOr<std::unique_ptr<Kernel>> make_lstm(const KernelCreateContext& ctx) {
    return make_rnn_common(ctx, RnnKind::lstm);
}

}  // namespace

void register_sequence_model_kernels(KernelRegistry& r) {
    r.add({"RNN", "", 1, kMaxOpset, DeviceKind::cpu}, &make_rnn);
    r.add({"GRU", "", 1, kMaxOpset, DeviceKind::cpu}, &make_gru);
    r.add({"LSTM", "", 1, kMaxOpset, DeviceKind::cpu}, &make_lstm);
    register_resize_kernels(r);
    register_onnx_attention_kernels(r);
    register_grid_kernels(r);
    register_state_kernels(r);
    register_flex_attention_kernels(r);
}

}  // namespace dsinfer::detail
