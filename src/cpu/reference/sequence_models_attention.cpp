// Reference CPU kernels for Attention (opset 23/24) and RotaryEmbedding (opset 23).
//
// Attention follows the ONNX definition: scores = (Q K^T) * scale, softcap (before the mask so
// that -inf stays -inf), plus the additive bias built from attn_mask (bool: false = -inf;
// shorter last dim padded with -inf), is_causal (bottom-right aligned) and nonpad_kv_seqlen,
// softmax, times V. K/V heads are shared by groups of query heads (GQA). Rows whose keys are
// all masked produce zero probabilities instead of NaN.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_onnx_attention_kernels(KernelRegistry& r);

namespace {

struct AttnDims {
    std::int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, past = 0, head = 0,
                 v_head = 0;
    bool three_d = false;
    std::int64_t total() const { return past + kv_len; }
};

class AttentionKernel final : public Kernel {
public:
    AttentionKernel(bool causal, std::int64_t q_heads, std::int64_t kv_heads, int qk_mode,
                    bool has_scale, float scale, float softcap)
        : causal_(causal),
          q_heads_attr_(q_heads),
          kv_heads_attr_(kv_heads),
          qk_mode_(qk_mode),
          has_scale_(has_scale),
          scale_(scale),
          softcap_(softcap) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& q = ctx.input(0);
        const Tensor& k = ctx.input(1);
        const Tensor& v = ctx.input(2);
        const DType dt = q.dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, "element type ", dtype_name(dt), " is not supported");
        DSINFER_CHECK(k.dtype() == dt && v.dtype() == dt, ErrorCode::invalid_argument,
                      "inputs K and V must have the element type of Q (", dtype_name(dt), ")");
        DSINFER_ASSIGN_OR_RETURN(AttnDims a, dims(q.shape(), k.shape(), v.shape()));
        for (int i = 4; i <= 5; ++i) {
            if (!ctx.has_input(i)) continue;
            const Tensor& p = ctx.input(i);
            const std::int64_t last = i == 4 ? a.head : a.v_head;
            DSINFER_CHECK(p.dtype() == dt && p.num_dims() == 4 && p.shape()[0] == a.batch &&
                              p.shape()[1] == a.kv_heads && p.shape()[3] == last,
                          ErrorCode::invalid_argument, "input ", i == 4 ? "past_key" : "past_value",
                          " must be ", dtype_name(dt), " of shape [", a.batch, ",", a.kv_heads,
                          ",past_len,", last, "], got ", dtype_name(p.dtype()), " ",
                          p.shape().to_string());
            if (i == 4)
                a.past = p.shape()[2];
            else
                DSINFER_CHECK(!ctx.has_input(4) || p.shape()[2] == a.past,
                              ErrorCode::invalid_argument,
                              "past_key and past_value must have the same sequence length, got ",
                              a.past, " and ", p.shape()[2]);
        }
        DSINFER_CHECK(ctx.has_input(4) == ctx.has_input(5), ErrorCode::invalid_argument,
                      "past_key and past_value must be given together");
        const std::int64_t total = a.total();
        if (ctx.has_input(3)) {
            const Tensor& m = ctx.input(3);
            DSINFER_CHECK(m.dtype() == DType::boolean || m.dtype() == dt,
                          ErrorCode::invalid_argument, "input attn_mask must be bool or ",
                          dtype_name(dt), ", got ", dtype_name(m.dtype()));
            DSINFER_CHECK(m.num_dims() >= 2 && m.num_dims() <= 4, ErrorCode::invalid_argument,
                          "input attn_mask must have rank 2 to 4, got shape ",
                          m.shape().to_string());
            const std::int64_t target[4] = {a.batch, a.q_heads, a.q_len, total};
            const int off = 4 - m.num_dims();
            for (int d = 0; d < m.num_dims(); ++d) {
                const std::int64_t md = m.shape()[d];
                const std::int64_t td = target[off + d];
                const bool ok = d == m.num_dims() - 1 ? md <= td : (md == td || md == 1);
                DSINFER_CHECK(ok, ErrorCode::invalid_argument, "input attn_mask of shape ",
                              m.shape().to_string(), " does not broadcast to [", a.batch, ",",
                              a.q_heads, ",", a.q_len, ",", total, "]");
            }
        }
        if (ctx.has_input(6)) {
            const Tensor& n = ctx.input(6);
            DSINFER_CHECK(n.dtype() == DType::i64 && n.shape() == (Shape{a.batch}),
                          ErrorCode::invalid_argument,
                          "input nonpad_kv_seqlen must be int64 of shape [", a.batch, "], got ",
                          dtype_name(n.dtype()), " ", n.shape().to_string());
        }
        if (ctx.has_output(0)) {
            ctx.set_output(0, dt,
                           a.three_d ? Shape{a.batch, a.q_len, a.q_heads * a.v_head}
                                     : Shape{a.batch, a.q_heads, a.q_len, a.v_head});
        }
        if (ctx.has_output(1)) ctx.set_output(1, dt, Shape{a.batch, a.kv_heads, total, a.head});
        if (ctx.has_output(2)) ctx.set_output(2, dt, Shape{a.batch, a.kv_heads, total, a.v_head});
        if (ctx.has_output(3)) ctx.set_output(3, dt, Shape{a.batch, a.q_heads, a.q_len, total});
        const std::size_t csize = dt == DType::f64 ? sizeof(double) : sizeof(float);
        ctx.set_workspace(static_cast<std::size_t>(2 * total + a.v_head) * csize);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return dispatch_types(ctx.input(0).dtype, FloatTypes{},
                              [&]<class T>() { return run_typed<T>(ctx); });
    }

private:
    StatusOr<AttnDims> dims(const Shape& q, const Shape& k, const Shape& v) const {
        AttnDims a;
        DSINFER_CHECK(
            q.rank() == k.rank() && q.rank() == v.rank() && (q.rank() == 3 || q.rank() == 4),
            ErrorCode::invalid_argument, "Q, K and V must all have rank 3 or all rank 4, got ",
            q.to_string(), ", ", k.to_string(), ", ", v.to_string());
        a.batch = q[0];
        DSINFER_CHECK(k[0] == a.batch && v[0] == a.batch, ErrorCode::invalid_argument,
                      "Q, K and V must have the same batch size, got ", q.to_string(), ", ",
                      k.to_string(), ", ", v.to_string());
        if (q.rank() == 3) {
            a.three_d = true;
            DSINFER_CHECK(q_heads_attr_ > 0 && kv_heads_attr_ > 0, ErrorCode::invalid_model,
                          "3-D inputs need attributes q_num_heads and kv_num_heads");
            a.q_heads = q_heads_attr_;
            a.kv_heads = kv_heads_attr_;
            DSINFER_CHECK(q[2] % a.q_heads == 0 && k[2] % a.kv_heads == 0 && v[2] % a.kv_heads == 0,
                          ErrorCode::invalid_argument,
                          "hidden sizes must be divisible by the head counts, got Q ",
                          q.to_string(), ", K ", k.to_string(), ", V ", v.to_string());
            a.q_len = q[1];
            a.kv_len = k[1];
            a.head = q[2] / a.q_heads;
            DSINFER_CHECK(k[2] / a.kv_heads == a.head, ErrorCode::invalid_argument,
                          "Q and K head sizes differ: ", a.head, " vs ", k[2] / a.kv_heads);
            DSINFER_CHECK(v[1] == a.kv_len, ErrorCode::invalid_argument,
                          "K and V must have the same sequence length, got ", k.to_string(),
                          " and ", v.to_string());
            a.v_head = v[2] / a.kv_heads;
        } else {
            a.q_heads = q[1];
            a.kv_heads = k[1];
            a.q_len = q[2];
            a.kv_len = k[2];
            a.head = q[3];
            a.v_head = v[3];
            DSINFER_CHECK(k[3] == a.head && v[1] == a.kv_heads && v[2] == a.kv_len,
                          ErrorCode::invalid_argument, "inconsistent shapes Q ", q.to_string(),
                          ", K ", k.to_string(), ", V ", v.to_string());
        }
        DSINFER_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0, ErrorCode::invalid_argument,
                      "the number of query heads (", a.q_heads,
                      ") must be a multiple of the number of key/value heads (", a.kv_heads, ")");
        return a;
    }

    template <class T>
    Status run_typed(RunContext& ctx) const noexcept {
        using C = compute_t<T>;
        const TensorView& qv = ctx.input(0);
        const TensorView& kv = ctx.input(1);
        const TensorView& vv = ctx.input(2);
        AttnDims a;
        try {
            auto d = dims(qv.shape, kv.shape, vv.shape);
            if (!d.is_ok()) return d.status();
            a = *d;
        } catch (...) {
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
        const bool has_past = ctx.has_input(4) && ctx.has_input(5);
        if (has_past) a.past = ctx.input(4).shape[2];
        const std::int64_t total = a.total();
        const T* q = qv.data_unchecked<T>();
        const T* k = kv.data_unchecked<T>();
        const T* v = vv.data_unchecked<T>();
        const T* pk = has_past ? ctx.input(4).data_unchecked<T>() : nullptr;
        const T* pv = has_past ? ctx.input(5).data_unchecked<T>() : nullptr;
        const std::int64_t* nonpad = ctx.has_input(6) ? ctx.input(6).data_unchecked<std::int64_t>() : nullptr;
        if (nonpad != nullptr)
            for (std::int64_t b = 0; b < a.batch; ++b)
                if (nonpad[b] < 0 || nonpad[b] > total)
                    return Status::error(ErrorCode::invalid_argument, "nonpad_kv_seqlen[", b,
                                         "] = ", nonpad[b], " is outside [0, ", total, "]");

        // Row pointers into K/V (past rows first), for batch b, kv head kh, position j.
        auto key_row = [&](std::int64_t b, std::int64_t kh, std::int64_t j) -> const T* {
            if (j < a.past) return pk + ((b * a.kv_heads + kh) * a.past + j) * a.head;
            j -= a.past;
            return a.three_d ? k + (b * a.kv_len + j) * a.kv_heads * a.head + kh * a.head
                             : k + ((b * a.kv_heads + kh) * a.kv_len + j) * a.head;
        };
        auto value_row = [&](std::int64_t b, std::int64_t kh, std::int64_t j) -> const T* {
            if (j < a.past) return pv + ((b * a.kv_heads + kh) * a.past + j) * a.v_head;
            j -= a.past;
            return a.three_d ? v + (b * a.kv_len + j) * a.kv_heads * a.v_head + kh * a.v_head
                             : v + ((b * a.kv_heads + kh) * a.kv_len + j) * a.v_head;
        };

        if (ctx.has_output(1) || ctx.has_output(2)) {
            T* ok = ctx.has_output(1) ? ctx.output(1).data_unchecked<T>() : nullptr;
            T* ov = ctx.has_output(2) ? ctx.output(2).data_unchecked<T>() : nullptr;
            for (std::int64_t b = 0; b < a.batch; ++b)
                for (std::int64_t kh = 0; kh < a.kv_heads; ++kh)
                    for (std::int64_t j = 0; j < total; ++j) {
                        const std::int64_t row = (b * a.kv_heads + kh) * total + j;
                        if (ok != nullptr)
                            std::copy_n(key_row(b, kh, j), a.head, ok + row * a.head);
                        if (ov != nullptr)
                            std::copy_n(value_row(b, kh, j), a.v_head, ov + row * a.v_head);
                    }
        }

        // Mask strides, right-aligned against [batch, q_heads, q_len, mask_len].
        const TensorView* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
        std::array<std::int64_t, 4> ms{};
        std::int64_t mask_len = 0;
        if (mask != nullptr) {
            const int mr = mask->shape.rank();
            const Strides cs = contiguous_strides(mask->shape);
            for (int d = 0; d < mr; ++d) {
                const auto td = static_cast<std::size_t>(4 - mr + d);
                ms[td] = mask->shape[d] == 1 ? 0 : cs[static_cast<std::size_t>(d)];
            }
            ms[3] = 1;
            mask_len = mask->shape[mr - 1];
        }
        const bool mask_bool = mask != nullptr && mask->dtype == DType::boolean;

        const C scale =
            has_scale_ ? static_cast<C>(scale_) : C(1) / std::sqrt(static_cast<C>(a.head));
        const C softcap = static_cast<C>(softcap_);
        const C neg_inf = -std::numeric_limits<C>::infinity();
        C* scores = static_cast<C*>(ctx.workspace());
        C* probs = scores + total;
        C* acc = probs + total;
        T* y = ctx.has_output(0) ? ctx.output(0).data_unchecked<T>() : nullptr;
        T* qk_out = ctx.has_output(3) ? ctx.output(3).data_unchecked<T>() : nullptr;
        const std::int64_t group = a.q_heads / a.kv_heads;

        for (std::int64_t b = 0; b < a.batch; ++b) {
            // Bottom-right causal alignment: query i sees keys j <= i + offset.
            std::int64_t offset = 0;
            if (has_past)
                offset = a.past;
            else if (nonpad != nullptr)
                offset = nonpad[b] - a.q_len;
            for (std::int64_t h = 0; h < a.q_heads; ++h) {
                const std::int64_t kh = h / group;
                for (std::int64_t i = 0; i < a.q_len; ++i) {
                    const T* qrow = a.three_d
                                        ? q + (b * a.q_len + i) * a.q_heads * a.head + h * a.head
                                        : q + ((b * a.q_heads + h) * a.q_len + i) * a.head;
                    T* qk_row = qk_out != nullptr
                                    ? qk_out + ((b * a.q_heads + h) * a.q_len + i) * total
                                    : nullptr;
                    C mx = neg_inf;
                    for (std::int64_t j = 0; j < total; ++j) {
                        const T* krow = key_row(b, kh, j);
                        C dot = 0;
                        for (std::int64_t d = 0; d < a.head; ++d)
                            dot += load(qrow[d]) * load(krow[d]);
                        C s = dot * scale;
                        if (softcap > C(0)) s = softcap * std::tanh(s / softcap);
                        if (qk_row != nullptr && qk_mode_ <= 1) qk_row[j] = store<T>(s);
                        C bias = 0;
                        if (mask != nullptr) {
                            if (j >= mask_len) {
                                bias = neg_inf;
                            } else {
                                const std::int64_t mo = b * ms[0] + h * ms[1] + i * ms[2] + j;
                                if (mask_bool)
                                    bias = mask->data_unchecked<bool>()[mo] ? C(0) : neg_inf;
                                else
                                    bias = load(mask->data_unchecked<T>()[mo]);
                            }
                        }
                        if (causal_ && j > i + offset) bias = neg_inf;
                        if (nonpad != nullptr && j >= nonpad[b]) bias = neg_inf;
                        s += bias;
                        if (qk_row != nullptr && qk_mode_ == 2) qk_row[j] = store<T>(s);
                        scores[j] = s;
                        if (s > mx) mx = s;
                    }
                    // Softmax; a row with every key masked gets zero weights.
                    C sum = 0;
                    if (mx == neg_inf) {
                        for (std::int64_t j = 0; j < total; ++j) probs[j] = 0;
                    } else {
                        for (std::int64_t j = 0; j < total; ++j) {
                            probs[j] = std::exp(scores[j] - mx);
                            sum += probs[j];
                        }
                        for (std::int64_t j = 0; j < total; ++j) probs[j] /= sum;
                    }
                    if (qk_row != nullptr && qk_mode_ == 3)
                        for (std::int64_t j = 0; j < total; ++j) qk_row[j] = store<T>(probs[j]);
                    if (y == nullptr) continue;
                    for (std::int64_t d = 0; d < a.v_head; ++d) acc[d] = 0;
                    for (std::int64_t j = 0; j < total; ++j) {
                        if (probs[j] == C(0)) continue;
                        const T* vrow = value_row(b, kh, j);
                        for (std::int64_t d = 0; d < a.v_head; ++d)
                            acc[d] += probs[j] * load(vrow[d]);
                    }
                    T* yrow = a.three_d
                                  ? y + (b * a.q_len + i) * a.q_heads * a.v_head + h * a.v_head
                                  : y + ((b * a.q_heads + h) * a.q_len + i) * a.v_head;
                    for (std::int64_t d = 0; d < a.v_head; ++d) yrow[d] = store<T>(acc[d]);
                }
            }
        }
        return Status::ok();
    }

    bool causal_;
    std::int64_t q_heads_attr_;
    std::int64_t kv_heads_attr_;
    int qk_mode_;
    bool has_scale_;
    float scale_;
    float softcap_;
};

StatusOr<std::unique_ptr<Kernel>> make_attention(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto causal, n.attr_or<std::int64_t>("is_causal", 0));
    DSINFER_ASSIGN_OR_RETURN(auto qh, n.attr_or<std::int64_t>("q_num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(auto kvh, n.attr_or<std::int64_t>("kv_num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(auto mode, n.attr_or<std::int64_t>("qk_matmul_output_mode", 0));
    DSINFER_CHECK(mode >= 0 && mode <= 3, ErrorCode::invalid_model,
                  "attribute 'qk_matmul_output_mode' must be 0..3, got ", mode);
    DSINFER_CHECK(qh >= 0 && kvh >= 0, ErrorCode::invalid_model,
                  "attributes q_num_heads and kv_num_heads must not be negative");
    const bool has_scale = n.has_attr("scale");
    DSINFER_ASSIGN_OR_RETURN(auto scale, n.attr_or<float>("scale", 1.0f));
    DSINFER_ASSIGN_OR_RETURN(auto softcap, n.attr_or<float>("softcap", 0.0f));
    DSINFER_CHECK(softcap >= 0.0f, ErrorCode::invalid_model,
                  "attribute 'softcap' must not be negative, got ", softcap);
    DSINFER_CHECK(ctx.num_inputs() >= 3, ErrorCode::invalid_model,
                  "Attention needs inputs Q, K and V");
    return make_kernel<AttentionKernel>(causal != 0, qh, kvh, static_cast<int>(mode), has_scale,
                                        scale, softcap);
}

// ---- RotaryEmbedding -------------------------------------------------------------------------

class RotaryKernel final : public Kernel {
public:
    RotaryKernel(bool interleaved, std::int64_t num_heads, std::int64_t rotary_dim)
        : interleaved_(interleaved), num_heads_(num_heads), rotary_dim_(rotary_dim) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& cs = ctx.input(1);
        const Tensor& sn = ctx.input(2);
        const DType dt = x.dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, "element type ", dtype_name(dt), " is not supported");
        DSINFER_CHECK(x.num_dims() == 3 || x.num_dims() == 4, ErrorCode::invalid_argument,
                      "input X must have rank 3 or 4, got shape ", x.shape().to_string());
        DSINFER_CHECK(cs.dtype() == dt && sn.dtype() == dt && cs.shape() == sn.shape(),
                      ErrorCode::invalid_argument,
                      "cos_cache and sin_cache must have X's element type and equal shapes, got ",
                      cs.shape().to_string(), " and ", sn.shape().to_string());
        std::int64_t batch = x.shape()[0], seq = 0, head = 0;
        if (x.num_dims() == 4) {
            seq = x.shape()[2];
            head = x.shape()[3];
        } else {
            DSINFER_CHECK(num_heads_ > 0 && x.shape()[2] % num_heads_ == 0,
                          ErrorCode::invalid_argument,
                          "3-D input X needs attribute num_heads dividing its hidden size, got ",
                          x.shape().to_string(), " with num_heads ", num_heads_);
            seq = x.shape()[1];
            head = x.shape()[2] / num_heads_;
        }
        const std::int64_t rd = rotary_dim_ > 0 ? rotary_dim_ : head;
        DSINFER_CHECK(rd <= head && rd % 2 == 0, ErrorCode::invalid_argument,
                      "rotary_embedding_dim ", rd, " must be even and at most the head size ",
                      head);
        if (ctx.has_input(3)) {
            const Tensor& p = ctx.input(3);
            DSINFER_CHECK(p.dtype() == DType::i64 && p.shape() == (Shape{batch, seq}),
                          ErrorCode::invalid_argument, "input position_ids must be int64 [", batch,
                          ",", seq, "], got ", dtype_name(p.dtype()), " ", p.shape().to_string());
            DSINFER_CHECK(cs.num_dims() == 2 && cs.shape()[1] == rd / 2,
                          ErrorCode::invalid_argument, "cos_cache must have shape [max_pos,",
                          rd / 2, "], got ", cs.shape().to_string());
        } else {
            DSINFER_CHECK(cs.shape() == (Shape{batch, seq, rd / 2}), ErrorCode::invalid_argument,
                          "without position_ids cos_cache must have shape [", batch, ",", seq, ",",
                          rd / 2, "], got ", cs.shape().to_string());
        }
        ctx.set_output(0, dt, x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return dispatch_types(ctx.input(0).dtype, FloatTypes{}, [&]<class T>() -> Status {
            using C = compute_t<T>;
            const TensorView& xv = ctx.input(0);
            const T* x = xv.data_unchecked<T>();
            const T* cs = ctx.input(1).data_unchecked<T>();
            const T* sn = ctx.input(2).data_unchecked<T>();
            const std::int64_t* pos =
                ctx.has_input(3) ? ctx.input(3).data_unchecked<std::int64_t>() : nullptr;
            T* y = ctx.output(0).data_unchecked<T>();
            const bool four = xv.shape.rank() == 4;
            const std::int64_t batch = xv.shape[0];
            const std::int64_t heads = four ? xv.shape[1] : num_heads_;
            const std::int64_t seq = four ? xv.shape[2] : xv.shape[1];
            const std::int64_t head = four ? xv.shape[3] : xv.shape[2] / num_heads_;
            const std::int64_t rd = rotary_dim_ > 0 ? rotary_dim_ : head;
            const std::int64_t half = rd / 2;
            const std::int64_t max_pos = pos != nullptr ? ctx.input(1).shape[0] : 0;
            for (std::int64_t b = 0; b < batch; ++b)
                for (std::int64_t s = 0; s < seq; ++s) {
                    std::int64_t cache_row = b * seq + s;
                    if (pos != nullptr) {
                        cache_row = pos[b * seq + s];
                        if (cache_row < 0 || cache_row >= max_pos)
                            return Status::error(ErrorCode::invalid_argument, "position_ids[", b,
                                                 ",", s, "] = ", cache_row, " is outside [0, ",
                                                 max_pos, ")");
                    }
                    const T* c = cs + cache_row * half;
                    const T* sv = sn + cache_row * half;
                    for (std::int64_t h = 0; h < heads; ++h) {
                        const std::int64_t off = four ? ((b * heads + h) * seq + s) * head
                                                      : (b * seq + s) * heads * head + h * head;
                        const T* xr = x + off;
                        T* yr = y + off;
                        for (std::int64_t i = 0; i < half; ++i) {
                            const std::int64_t i1 = interleaved_ ? 2 * i : i;
                            const std::int64_t i2 = interleaved_ ? 2 * i + 1 : i + half;
                            const C x1 = load(xr[i1]), x2 = load(xr[i2]);
                            const C cc = load(c[i]), ss = load(sv[i]);
                            yr[i1] = store<T>(cc * x1 - ss * x2);
                            yr[i2] = store<T>(ss * x1 + cc * x2);
                        }
                        for (std::int64_t i = rd; i < head; ++i) yr[i] = xr[i];
                    }
                }
            return Status::ok();
        });
    }

private:
    bool interleaved_;
    std::int64_t num_heads_;
    std::int64_t rotary_dim_;
};

StatusOr<std::unique_ptr<Kernel>> make_rotary(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto inter, n.attr_or<std::int64_t>("interleaved", 0));
    DSINFER_ASSIGN_OR_RETURN(auto heads, n.attr_or<std::int64_t>("num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(auto rd, n.attr_or<std::int64_t>("rotary_embedding_dim", 0));
    DSINFER_CHECK(heads >= 0 && rd >= 0, ErrorCode::invalid_model,
                  "attributes num_heads and rotary_embedding_dim must not be negative");
    return make_kernel<RotaryKernel>(inter != 0, heads, rd);
}

}  // namespace

void register_onnx_attention_kernels(KernelRegistry& r) {
    r.add({"Attention", "", 23, kMaxOpset, DeviceKind::cpu}, &make_attention);
    r.add({"RotaryEmbedding", "", 23, kMaxOpset, DeviceKind::cpu}, &make_rotary);
}

}  // namespace dsinfer::detail
