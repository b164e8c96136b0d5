// Shapes of com.dsinfer MultiHeadAttention (docs/OPTIMIZER.md), shared by its reference kernel
// (src/cpu/reference/fused_attention.cpp, which validates them in prepare), the fast kernel
// (src/cpu/fast/fast_attention.cpp, which reads them in run after that validation) and the
// CUDA kernel (cuda/kernels/attention.cu).
//
// Q [B, Sq, H·Dh], K [B, Sk, H·Dh], V [B, Sk, H·Dv] (inputs of rank > 3 are read as
// [d0, d1, product of the rest]), optional additive Mask broadcastable to [B, H, Sq, Sk].
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include <new>

#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

struct MhaDims {
    std::int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, head = 0, v_head = 0;
    /// Element strides of the mask over [B, H, Sq, Sk] (0 along broadcast dims).
    std::array<std::int64_t, 4> mask_strides{};
    bool has_mask = false;
    /// Row strides of Q/K (H·Dh) and of V/Y (H·Dv).
    std::int64_t qk_width() const noexcept { return heads * head; }
    std::int64_t v_width() const noexcept { return heads * v_head; }
};

/// The scale of a node: the `scale` attribute when present, else 1/sqrt(Dh) (1 when Dh = 0,
/// where every score is an empty sum).
inline float mha_scale(bool has_scale, float scale, std::int64_t head) noexcept {
    if (has_scale) return scale;
    return head > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head))) : 1.f;
}

/// Checks the shapes of Q, K, V and the mask (nullptr when absent) against `heads` and
/// returns the problem's dims; invalid_argument naming the input otherwise.
inline StatusOr<MhaDims> mha_dims(const Shape& q, const Shape& k, const Shape& v,
                                  const Shape* mask, std::int64_t heads) {
    const Shape* in[3] = {&q, &k, &v};
    const char* names[3] = {"Q", "K", "V"};
    std::int64_t rows[3] = {}, widths[3] = {};
    for (int i = 0; i < 3; ++i) {
        const Shape& s = *in[i];
        DSINFER_CHECK(s.rank() >= 3, ErrorCode::invalid_argument, "input ", names[i],
                      " must have rank >= 3 ([batch, sequence, heads * head_size]), got ",
                      s.to_string());
        std::int64_t w = 1;
        for (int d = 2; d < s.rank(); ++d) w *= s[d];
        rows[i] = s[1];
        widths[i] = w;
        DSINFER_CHECK(s[0] == q[0], ErrorCode::invalid_argument, "input ", names[i],
                      " has batch size ", s[0], ", Q has ", q[0]);
        DSINFER_CHECK(w % heads == 0, ErrorCode::invalid_argument, "input ", names[i],
                      " of shape ", s.to_string(), ": width ", w,
                      " is not a multiple of num_heads ", heads);
    }
    DSINFER_CHECK(widths[1] == widths[0], ErrorCode::invalid_argument, "input K has width ",
                  widths[1], ", Q has ", widths[0], " (the head sizes of Q and K must agree)");
    DSINFER_CHECK(rows[2] == rows[1], ErrorCode::invalid_argument, "input V has sequence length ",
                  rows[2], ", K has ", rows[1]);
    MhaDims d;
    d.batch = q[0];
    d.q_len = rows[0];
    d.kv_len = rows[1];
    d.heads = heads;
    d.head = widths[0] / heads;
    d.v_head = widths[2] / heads;
    if (mask != nullptr) {
        const Shape& m = *mask;
        const std::int64_t full[4] = {d.batch, d.heads, d.q_len, d.kv_len};
        DSINFER_CHECK(m.rank() <= 4, ErrorCode::invalid_argument, "input Mask of shape ",
                      m.to_string(), " has rank > 4 (it must broadcast to [batch, heads, ",
                      "q_len, kv_len] = [", full[0], ",", full[1], ",", full[2], ",", full[3], "])");
        std::int64_t stride = 1;
        for (int i = 3; i >= 0; --i) {
            const int mi = i - (4 - m.rank());
            const std::int64_t md = mi >= 0 ? m[mi] : 1;
            DSINFER_CHECK(md == 1 || md == full[i], ErrorCode::invalid_argument,
                          "input Mask of shape ", m.to_string(),
                          " does not broadcast to [batch, heads, q_len, kv_len] = [", full[0],
                          ",", full[1], ",", full[2], ",", full[3], "] (dim ", i, ")");
            d.mask_strides[static_cast<std::size_t>(i)] = (md == 1) ? 0 : stride;
            stride *= md;
        }
        d.has_mask = true;
    }
    return d;
}

/// mha_dims() of a run's inputs (for run(), which must not throw).
inline StatusOr<MhaDims> mha_dims(const RunContext& ctx, std::int64_t heads) noexcept {
    try {
        return mha_dims(ctx.input(0).shape, ctx.input(1).shape, ctx.input(2).shape,
                        ctx.has_input(3) ? &ctx.input(3).shape : nullptr, heads);
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory");
    }
}

}  // namespace dsinfer::detail
