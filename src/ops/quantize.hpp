// The arithmetic of ONNX quantization that more than one kernel computes, defined once: the
// rounding of QuantizeLinear (round half to even, add the zero point, saturate; NaN -> the zero
// point), DynamicQuantizeLinear's u8 scale and zero point from the data's range, and the f32
// dequantization epilogue of an integer matmul in the unfused graph's order of roundings, and
// its requantization (QLinearMatMul, QGemm).
//
// Users: the reference kernels (src/cpu/reference/quant.cpp: QuantizeLinear,
// DynamicQuantizeLinear, DynamicQuantizeMatMul, MatMulIntegerToFloat, QLinear*) and the cpu
// backend's fast kernels (src/cpu/fast/fast_qmatmul.cpp, fast_qconv.cpp), whose vector loops are
// checked bitwise against these scalar forms (tests/unit/test_quant_dynamic.cpp,
// test_qconv.cpp).
//
// Ownership/threading: pure functions. Internal (namespace dsinfer::detail).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dsinfer::detail {

/// round_half_even(q) + zp, saturated to Q. NaN maps to the zero point.
template <class Q>
inline Q saturate_round(double q, double zp) noexcept {
    constexpr double lo = static_cast<double>(std::numeric_limits<Q>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<Q>::max());
    double r = std::isnan(q) ? zp : std::nearbyint(q) + zp;
    r = std::clamp(r, lo, hi);
    return static_cast<Q>(r);
}

/// DynamicQuantizeLinear's outputs y_scale and y_zero_point (u8).
struct DynamicQuantParams {
    float scale = 1.f;
    std::uint8_t zero_point = 0;
    /// The scale is positive and finite: y = saturate(round(x / scale) + zp). Otherwise every y
    /// is the zero point (an infinite range, or a range so small that (hi - lo) / 255 is 0).
    bool usable = true;
};

/// The data's range as DynamicQuantizeLinear takes it: starting from [0, 0] (0 is always
/// representable), NaN skipped. Vector loops must give the same lo/hi (min/max are exact).
struct QuantRange {
    float lo = 0.f, hi = 0.f;
    void add(float x) noexcept {
        lo = x < lo ? x : lo;  // NaN compares false: skipped
        hi = x > hi ? x : hi;
    }
    void merge(const QuantRange& o) noexcept {
        lo = std::min(lo, o.lo);
        hi = std::max(hi, o.hi);
    }
};

/// Scale and zero point of DynamicQuantizeLinear for the range [lo, hi] (lo <= 0 <= hi): scale
/// (hi - lo) / 255 in f32 (1 for an all-zero range, as ONNX Runtime), zero point
/// saturate(round_half_even(0 - lo / scale)) in f32.
inline DynamicQuantParams dynamic_quant_params(QuantRange r) noexcept {
    DynamicQuantParams p;
    p.scale = r.hi == r.lo ? 1.f : (r.hi - r.lo) / 255.f;
    p.usable = p.scale > 0.f && std::isfinite(p.scale);
    float zpf = 0.f;
    if (p.usable) zpf = std::clamp(std::nearbyint(0.f - r.lo / p.scale), 0.f, 255.f);
    p.zero_point = static_cast<std::uint8_t>(zpf);
    return p;
}

/// Static quantization parameters for a calibrated range [lo, hi] (the quantizer's
/// QuantizeLinear / DequantizeLinear pairs): u8 asymmetric, rmin = min(lo, 0), rmax = max(hi, 0),
/// scale = (rmax - rmin) / 255 (as rmax / 255 - rmin / 255 when the difference overflows), zero
/// point = saturate(round_half_even(-rmin / scale)), so 0 is exactly representable; s8 symmetric,
/// scale = max(|lo|, |hi|) / 127, zero point 0. The scale is always finite and positive: a zero
/// or non-finite range gives 1, a range whose scale would be zero or subnormal the smallest
/// normal float.
struct StaticQuantParams {
    float scale = 1.f;
    std::int32_t zero_point = 0;  ///< in [0, 255] (u8) or 0 (s8)
};
inline StaticQuantParams static_quant_params(float lo, float hi, bool symmetric) noexcept {
    StaticQuantParams p;
    if (!std::isfinite(lo) || !std::isfinite(hi)) return p;
    const float rmin = std::min(lo, 0.f), rmax = std::max(hi, 0.f);
    float scale;
    if (symmetric) {
        scale = std::max(-rmin, rmax) / 127.f;
    } else {
        const float span = rmax - rmin;
        scale = std::isfinite(span) ? span / 255.f : rmax / 255.f - rmin / 255.f;
    }
    if (!(scale > 0.f) || !std::isfinite(scale)) {
        // An all-zero range: any scale represents it; 1 as ONNX Runtime.
        if (rmin == 0.f && rmax == 0.f) return p;
        scale = std::numeric_limits<float>::min();
    }
    scale = std::max(scale, std::numeric_limits<float>::min());
    p.scale = scale;
    if (!symmetric)
        p.zero_point = saturate_round<std::uint8_t>(static_cast<double>(-rmin / scale), 0.0);
    return p;
}

/// One element of DynamicQuantizeLinear's y: the f32 quotient x / scale, rounded half to even,
/// plus the zero point, saturated to [0, 255]; NaN -> the zero point.
inline std::uint8_t dynamic_quantize_value(float x, const DynamicQuantParams& p) noexcept {
    if (!p.usable) return p.zero_point;
    return saturate_round<std::uint8_t>(static_cast<double>(x / p.scale),
                                        static_cast<double>(p.zero_point));
}

/// The f32 output of a dequantized integer matmul, as the unfused ONNX graph computes it:
/// Cast(c to float) -> Mul by (a_scale * b_scale) (one f32 product, formed first) -> Add bias:
/// three f32 roundings in that order, no fused multiply-add. qgemm_packed's f32 epilogue
/// (src/kernels/qgemm.hpp) computes the same expression. Callers compile without FP
/// contraction (fp-contract=off) where the target has an FMA.
inline float dequantize_product(std::int32_t c, float a_scale, float b_scale,
                                const float* bias) noexcept {
    const float multiplier = a_scale * b_scale;
    const float y = static_cast<float>(c) * multiplier;
    return bias != nullptr ? y + *bias : y;
}

/// acc + c in the wrapping int32 arithmetic of the INT8 GEMM's accumulators (com.microsoft
/// QGemm's int32 C).
inline std::int32_t add_wrapping(std::int32_t acc, std::int32_t c) noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(acc) +
                                     static_cast<std::uint32_t>(c));
}

/// The requantization multiplier of an integer product with float32 scales: (a_scale *
/// b_scale) / y_scale, each operation rounded to f32 (as ONNX Runtime forms its output scale,
/// and as the reference forms it for 16-bit scales: quant.cpp requant_multiplier).
inline float requantize_multiplier(float a_scale, float b_scale, float y_scale) noexcept {
    const float p = a_scale * b_scale;
    return p / y_scale;
}

/// The u8/s8 output of an integer product c (QLinearConv, QLinearMatMul, com.microsoft QGemm
/// with an output scale): float(c) * multiplier (requantize_multiplier) in f32, rounded half to
/// even, plus y_zero, saturated to Q; NaN (a non-finite multiplier) -> y_zero. qgemm_packed's
/// u8/s8 epilogue (src/kernels/qgemm.hpp) computes the same, so the reference and fast kernels
/// agree bitwise.
template <class Q>
inline Q requantize_product(std::int32_t c, float multiplier, std::int32_t y_zero) noexcept {
    const float y = static_cast<float>(c) * multiplier;
    return saturate_round<Q>(static_cast<double>(y), static_cast<double>(y_zero));
}

}  // namespace dsinfer::detail
