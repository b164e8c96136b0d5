// dsinfer's f32 GEMM against a constant, pre-packed right-hand side: C[M,N] = A[M,K] · B[K,N]
// (+ bias[N]) (then ReLU), for the weights of Linear/Gemm layers.
//
// B is packed once (at kernel creation) into column panels of kNR floats, zero-padded, laid out
// k-major inside each panel, so that the micro-kernel streams it contiguously. A is read in place
// (row-major with leading dimension lda). The micro-kernel keeps an kMR x kNR block of C in
// registers (AVX2+FMA: 6 x 16 in 12 ymm accumulators), chosen at run time from the CPU's ISA with
// a portable fallback. Work is split over column panels (and row blocks when there are more
// threads than panels) on the shared OpenMP pool; every element of C is produced by one thread
// in a fixed order, so results are identical run to run for a given thread count.
#pragma once

#include <cstdint>
#include <memory>

namespace dsinfer::detail {

/// A packed constant B. Immutable after pack_b; shared by concurrent runs.
struct PackedB {
    std::int64_t k = 0, n = 0;
    std::int64_t panels = 0;       ///< ceil(n / kNR)
    std::shared_ptr<float> data;   ///< panels * k * kNR floats, 64-byte aligned
};

inline constexpr std::int64_t kSgemmNR = 16;

/// Packs B. `transposed` = B is stored as [N, K] row-major (Gemm transB=1, Linear weights).
PackedB pack_b(const float* b, std::int64_t k, std::int64_t n, bool transposed);

enum class GemmActivation { none, relu };

/// C[M, N] (leading dimension ldc) = A[M, K] (leading dimension lda) · B (+ bias) (activation).
/// `alpha` scales A·B before the bias. Uses the calling thread's OpenMP budget.
void sgemm_packed(std::int64_t m, const float* a, std::int64_t lda, const PackedB& b, float* c,
                  std::int64_t ldc, const float* bias, float alpha = 1.f,
                  GemmActivation act = GemmActivation::none) noexcept;

/// True when the CPU runs the vectorized micro-kernel (AVX2+FMA), else the portable one.
bool sgemm_vectorized() noexcept;

}  // namespace dsinfer::detail
