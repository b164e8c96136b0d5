// Vectorized float32 loops of dsinfer's CPU compute library (src/kernels/: the "cpu" backend's
// kernels and the oneDNN backend use them), with run-time ISA dispatch.
//
// simd_ops.inc holds the loops once, written with GCC vector extensions; simd.cpp compiles
// it three times under `#pragma GCC target` (AVX-512, AVX2+FMA+F16C, and the baseline the
// build targets) and simd() hands out the table for the best ISA this CPU has. The build never
// assumes the build machine's CPU (no -march=native). The environment variable
// DSINFER_MAX_CPU_ISA=baseline|avx2|avx512 caps the choice (to test the narrower paths).
//
// Numerics (see tests/unit/test_fast_kernels.cpp for the measured bounds):
//   - neg, abs, relu, sqrt, reciprocal, floor, ceil, square and the arithmetic loops are exact
//     (bitwise equal to the scalar C++ expression of the reference kernels);
//   - exp (<= 1 ulp), tanh and sigmoid (<= 2 ulp) are polynomial approximations, compared
//     with glibc's expf/tanhf;
//   - erf is within 2e-7 absolute of the exact erf (measured 8e-8);
//   - square (x*x), cube ((x*x)*x) and pow_half (sqrt with pow's rules for -0 and -inf) are
//     within 1 ulp of std::pow (square is correctly rounded; glibc's powf is not always);
//   - the float->double sums use fixed lanes: deterministic, not the reference's order.
// Every loop handles any n >= 0 (tails go through a zero-padded vector) and unaligned pointers.
//
// Internal (namespace dsinfer::detail::fast).
#pragma once

#include <cstdint>

namespace dsinfer::detail::fast {

enum class Isa : int { baseline = 0, avx2 = 1, avx512 = 2 };

const char* isa_name(Isa isa) noexcept;

/// Unary float32 maps y[i] = f(x[i]).
enum class Unary : int {
    neg, abs, relu, sqrt, reciprocal, floor, ceil, exp, tanh, sigmoid, erf,
    square,    // x * x              (Pow with exponent 2)
    cube,      // (x * x) * x        (Pow with exponent 3)
    pow_half,  // pow(x, 0.5)        (sqrt, but +0 for -0 and +inf for -inf)
    gelu,      // 0.5 x (1 + erf(x / sqrt 2))
    gelu_tanh, // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    count,
};
inline constexpr int kNumUnary = static_cast<int>(Unary::count);

/// Binary float32 arithmetic. max/min follow the reference Max/Min: NaN in either operand
/// gives the canonical quiet NaN; otherwise max = (a < b ? b : a), min = (b < a ? b : a).
enum class Arith : int { add, sub, mul, div, max, min, count };
inline constexpr int kNumArith = static_cast<int>(Arith::count);

struct SimdOps {
    using UnaryFn = void (*)(const float* x, float* y, std::int64_t n) noexcept;
    using VVFn = void (*)(const float* a, const float* b, float* y, std::int64_t n) noexcept;
    using VSFn = void (*)(const float* a, float b, float* y, std::int64_t n) noexcept;
    using SVFn = void (*)(float a, const float* b, float* y, std::int64_t n) noexcept;
    using SumFn = double (*)(const float* x, std::int64_t n) noexcept;
    using ExtFn = float (*)(const float* x, std::int64_t n) noexcept;
    using AccFn = void (*)(double* acc, const float* x, std::int64_t n) noexcept;
    using AccExtFn = void (*)(float* acc, const float* x, std::int64_t n) noexcept;

    Isa isa = Isa::baseline;
    UnaryFn unary[kNumUnary] = {};
    VVFn vv[kNumArith] = {};  // y = a op b
    VSFn vs[kNumArith] = {};  // y = a op b[0]
    SVFn sv[kNumArith] = {};  // y = a[0] op b
    SumFn sum = nullptr;      // sum of x in double
    SumFn sum_sq = nullptr;   // sum of x*x in double
    ExtFn max = nullptr;      // -inf for n == 0; canonical NaN if any NaN
    ExtFn min = nullptr;      // +inf for n == 0; canonical NaN if any NaN
    AccFn acc_sum = nullptr;     // acc[i] += x[i]          (in double)
    AccFn acc_sum_sq = nullptr;  // acc[i] += x[i] * x[i]   (in double)
    AccExtFn acc_max = nullptr;  // acc[i] = x[i] > acc[i] || isnan(x[i]) ? x[i] : acc[i]
    AccExtFn acc_min = nullptr;
    // Round-to-nearest-even conversions, bitwise equal to dsinfer::float16 / bfloat16.
    void (*f32_to_f16)(const float* x, std::uint16_t* y, std::int64_t n) noexcept = nullptr;
    void (*f16_to_f32)(const std::uint16_t* x, float* y, std::int64_t n) noexcept = nullptr;
    void (*f32_to_bf16)(const float* x, std::uint16_t* y, std::int64_t n) noexcept = nullptr;
    void (*bf16_to_f32)(const std::uint16_t* x, float* y, std::int64_t n) noexcept = nullptr;
    // dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols: a 32-bit block
    // transpose (8 x 8 register transposes where the ISA has them).
    void (*transpose32)(const std::uint32_t* src, std::int64_t src_ld, std::uint32_t* dst,
                        std::int64_t dst_ld, std::int64_t rows, std::int64_t cols) noexcept = nullptr;
};

/// Elements per thread chunk of memory-bound loops (a tensor below it stays on one thread).
inline constexpr std::int64_t kGrain = 32768;
/// Elements per chunk of loops that spend tens of cycles per element (exp, erf, pow, ...).
inline constexpr std::int64_t kGrainHeavy = 8192;
/// Bytes per chunk of copies.
inline constexpr std::int64_t kGrainBytes = 128 * 1024;

/// The best ISA level this CPU (and OS) supports, uncapped.
Isa host_isa() noexcept;
/// "baseline", "avx2", "avx512" -> out; false for anything else.
bool parse_isa(const char* name, Isa& out) noexcept;
/// The ISA of the table simd() returns (detected once; capped by DSINFER_MAX_CPU_ISA).
Isa active_isa() noexcept;
/// The loops for active_isa().
const SimdOps& simd() noexcept;

}  // namespace dsinfer::detail::fast
