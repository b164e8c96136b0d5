// The arithmetic of ONNX Runtime's com.microsoft elementwise quantized ops, defined once:
// QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearSigmoid and QLinearLeakyRelu. Every
// scale is float32 and per tensor; every zero point is of the data's type (u8 or s8) and per
// tensor. Each op computes one f32 value v per output element, in the order written below (no
// fused multiply-add: callers compile with fp-contract=off), then requantizes it with
// saturate_round (ops/quantize.hpp: round half to even, add the output zero point, saturate;
// NaN -> the zero point):
//
//   QLinearAdd  ra = a_scale / c_scale, rb = b_scale / c_scale (f32, once per run)
//               v  = ra * float(a - za) + rb * float(b - zb)      (two products, then the sum)
//   QLinearMul  m  = (a_scale * b_scale) / c_scale               (f32, the product first)
//               v  = float((a - za) * (b - zb)) * m              (exact integer product)
//   QLinearGlobalAveragePool
//               m  = x_scale / (y_scale * float(count))          (count = spatial elements)
//               v  = float(sum over the window of (x - zx)) * m  (the sum exact in int64)
//   QLinearSigmoid / QLinearLeakyRelu: a 256-entry table, entry x =
//               quantize(f(dequantize(x))): d = float(x - zx) * x_scale; f = 1 / (1 + exp(-d))
//               or d >= 0 ? d : alpha * d; v = f / y_scale.
//
// Users: the reference kernels (src/cpu/reference/quant_ms.cpp) and the cpu backend's fast
// kernels (src/cpu/fast/fast_qlinear.cpp), whose vector loops compute the same expressions and
// are checked bitwise against these scalar forms (tests/unit/test_qlinear.cpp). Scales are used
// as IEEE values: a constant scale that is zero, negative, NaN or infinite is rejected at load
// by the factories; a run-time one goes through the arithmetic as it is (zero: quotients of
// +-inf saturate, NaN: the zero point), as in ONNX Runtime.
//
// Ownership/threading: pure functions. Internal (namespace dsinfer::detail).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "dsinfer/kernel.hpp"
#include "ops/quantize.hpp"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace dsinfer::detail {

/// The per-run constants of QLinearAdd / QLinearMul: the f32 multipliers and the zero points.
struct QLinearBinary {
    float ra = 1.f;  ///< Add: a_scale / c_scale. Mul: (a_scale * b_scale) / c_scale.
    float rb = 1.f;  ///< Add: b_scale / c_scale. Mul: unused.
    std::int32_t za = 0, zb = 0, zc = 0;
};

inline QLinearBinary qlinear_add_params(float as, float bs, float cs, std::int32_t za,
                                        std::int32_t zb, std::int32_t zc) noexcept {
    return {as / cs, bs / cs, za, zb, zc};
}

inline QLinearBinary qlinear_mul_params(float as, float bs, float cs, std::int32_t za,
                                        std::int32_t zb, std::int32_t zc) noexcept {
    const float p = as * bs;
    return {p / cs, 0.f, za, zb, zc};
}

/// QLinearAdd's v for a, b (already widened).
inline float qlinear_add_value(std::int32_t a, std::int32_t b, const QLinearBinary& p) noexcept {
    const float x = p.ra * static_cast<float>(a - p.za);
    const float y = p.rb * static_cast<float>(b - p.zb);
    return x + y;
}

/// QLinearMul's v for a, b (already widened).
inline float qlinear_mul_value(std::int32_t a, std::int32_t b, const QLinearBinary& p) noexcept {
    return static_cast<float>((a - p.za) * (b - p.zb)) * p.ra;
}

/// The output element of v with output zero point zc.
template <class Q>
inline Q qlinear_requantize(float v, std::int32_t zc) noexcept {
    return saturate_round<Q>(static_cast<double>(v), static_cast<double>(zc));
}

/// qlinear_requantize on the lanes of a GCC float vector V (the vector loops of the QLinear ops,
/// src/cpu/fast/fast_qlinear_loops.inc, and the INT8 GEMM's fused QLinearAdd epilogue,
/// src/kernels/qgemm_kernels.inc): each lane's output value as a float holding an integer of Q's
/// range, bitwise what qlinear_requantize<Q> gives. v is first clamped to [-1024, 1024] (beyond
/// which every value saturates either way), rounded half to even by adding and subtracting
/// 1.5 * 2^23 (exact for |v| < 2^22), offset by the zero point vz and saturated; NaN lanes give
/// the zero point. Always inlined, so it compiles for the calling loop's ISA.
/// (Operands by reference: no vector crosses a call, whatever the caller's ISA.)
template <class Q, class V>
[[gnu::always_inline]] inline void qlinear_requantize_lanes(const V& v, const V& vz,
                                                            V& out) noexcept {
    constexpr float lo = std::numeric_limits<Q>::lowest(), hi = std::numeric_limits<Q>::max();
    const V big = V{} + 1024.f, magic = V{} + 0x1.8p23f;
    V r = v > big ? big : v;  // NaN lanes compare false: kept NaN until the last select
    r = r < -big ? -big : r;
    r = (r + magic) - magic + vz;
    r = r > lo ? r : V{} + lo;
    r = r < hi ? r : V{} + hi;
    out = v == v ? r : vz;
}

/// qlinear_add_value on lanes: x = a - za and y = b - zb already as floats (exact: small
/// integers); the two products, then the sum.
template <class V>
[[gnu::always_inline]] inline void qlinear_add_lanes(const V& x, const V& y, const V& ra,
                                                     const V& rb, V& out) noexcept {
    out = ra * x + rb * y;
}

/// QLinearGlobalAveragePool's multiplier for `count` elements per channel.
inline float qlinear_pool_multiplier(float xs, float ys, std::int64_t count) noexcept {
    const float d = ys * static_cast<float>(count);
    return xs / d;
}

/// QLinearGlobalAveragePool's output element of a channel whose (x - zx) sum is `sum`.
template <class Q>
inline Q qlinear_pool_value(std::int64_t sum, float m, std::int32_t zy) noexcept {
    return qlinear_requantize<Q>(static_cast<float>(sum) * m, zy);
}

/// A run's float32 scale input i (prepare checked: one float32 element).
inline float qlinear_scale(const RunContext& ctx, int i) noexcept {
    return *ctx.input(i).data_unchecked<float>();
}

/// A run's zero point input i (u8 or s8, one element; prepare checked), 0 when omitted.
inline std::int32_t qlinear_zero(const RunContext& ctx, int i) noexcept {
    if (!ctx.has_input(i)) return 0;
    const TensorView& z = ctx.input(i);
    return z.dtype == DType::i8 ? *z.data_unchecked<std::int8_t>() : *z.data_unchecked<std::uint8_t>();
}

/// QLinearAdd's (mul = false) or QLinearMul's per-run constants from a run's inputs (A_scale 1,
/// A_zero_point 2, B_scale 4, B_zero_point 5, C_scale 6, C_zero_point 7).
inline QLinearBinary qlinear_binary_params(const RunContext& ctx, bool mul) noexcept {
    const auto make = mul ? &qlinear_mul_params : &qlinear_add_params;
    return make(qlinear_scale(ctx, 1), qlinear_scale(ctx, 4), qlinear_scale(ctx, 6),
                qlinear_zero(ctx, 2), qlinear_zero(ctx, 5), qlinear_zero(ctx, 7));
}

/// Which table a lookup op builds.
enum class QLinearLut : std::uint8_t { sigmoid, leaky_relu };

/// The table's parameters.
struct QLinearLutParams {
    QLinearLut kind = QLinearLut::sigmoid;
    float alpha = 0.01f;  ///< leaky_relu
    float xs = 1.f, ys = 1.f;
    std::int32_t zx = 0, zy = 0;
};

/// The output element of input element x (u8 or s8 value) of a lookup op.
template <class Q>
inline Q qlinear_lut_value(std::int32_t x, const QLinearLutParams& p) noexcept {
    const float d = static_cast<float>(x - p.zx) * p.xs;
    float f;
    if (p.kind == QLinearLut::sigmoid) {
        f = 1.f / (1.f + std::exp(-d));
    } else {
        f = d >= 0.f ? d : p.alpha * d;
    }
    return qlinear_requantize<Q>(f / p.ys, p.zy);
}

/// The 256-entry table of a lookup op: entry (x as an unsigned byte) = qlinear_lut_value(x).
template <class Q>
inline void qlinear_lut_table(const QLinearLutParams& p, std::array<Q, 256>& t) noexcept {
    for (int i = 0; i < 256; ++i) {
        const auto q = static_cast<Q>(static_cast<std::uint8_t>(i));
        t[static_cast<std::size_t>(i)] = qlinear_lut_value<Q>(q, p);
    }
}

}  // namespace dsinfer::detail

#pragma GCC pop_options
