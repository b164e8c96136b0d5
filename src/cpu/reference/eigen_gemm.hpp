// Eigen matrix products whose packing buffers live in a kernel's workspace (reference MatMul,
// Gemm, Conv, ConvTranspose). `dst.noalias() = lhs * rhs` on dynamic maps heap-allocates in
// Eigen's GEMM path: its OpenMP-parallel path always allocates the packed lhs (aligned_new in
// gemm_blocking_space::allocateA), and the sequential path allocates both packed panels once
// they exceed EIGEN_STACK_ALLOCATION_LIMIT. product_into() takes the same path as that
// expression (same dispatch, blocking sizes, kernels and thread split: bitwise the same
// results) with a blocking object that hands Eigen workspace memory instead.
//
// Usage:
//   prepare: ctx.set_workspace(other_bytes + gemm_scratch_bytes<float>(m, n, k));
//   run:     product_into<false>(MapM(y, m, n), MapC(a, m, k), MapC(b, k, n), 1.f,
//                                ws + other_bytes, gemm_scratch_bytes<float>(m, n, k));
//
// What still allocates (inside Eigen, third-party): in the OpenMP-parallel GEMM each thread's
// packed rhs panel (a stack variable in Eigen, on the heap beyond 128 KiB), and a GEMV
// (a 1-row or 1-column result) that copies a strided vector of more than 128 KiB.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace dsinfer::detail {

namespace eigen_gemm_detail {

using Index = Eigen::Index;

/// Eigen's gemm_blocking_space for dynamic sizes (GeneralMatrixMatrix.h, Eigen 3.4): the same
/// blocking sizes, but blockA/blockB point into caller-provided memory when it is large
/// enough (Eigen allocates them itself otherwise, and this object frees them like Eigen's).
template <int StorageOrder, class LhsScalar_, class RhsScalar_>
class WorkspaceBlocking
    : public Eigen::internal::level3_blocking<
          std::conditional_t<StorageOrder == Eigen::RowMajor, RhsScalar_, LhsScalar_>,
          std::conditional_t<StorageOrder == Eigen::RowMajor, LhsScalar_, RhsScalar_>> {
    static constexpr bool kTranspose = StorageOrder == Eigen::RowMajor;
    using LhsScalar = std::conditional_t<kTranspose, RhsScalar_, LhsScalar_>;
    using RhsScalar = std::conditional_t<kTranspose, LhsScalar_, RhsScalar_>;

public:
    struct Sizes {
        Index a = 0, b = 0;  // elements of the packed lhs / rhs panels
    };

    /// Panel sizes of a product dst[rows, cols] with inner dimension `depth`: `threads` 1 is
    /// the sequential path, > 1 the parallel one (whose lhs panel does not depend on the
    /// thread count).
    static Sizes sizes(Index rows, Index cols, Index depth, Index threads) noexcept {
        Index mc = kTranspose ? cols : rows;
        Index nc = kTranspose ? rows : cols;
        Index kc = depth;
        if (threads <= 1) {
            Eigen::internal::computeProductBlockingSizes<LhsScalar, RhsScalar, 1, Index>(kc, mc, nc, Index{1});
        } else {
            Index m = mc;
            Eigen::internal::computeProductBlockingSizes<LhsScalar, RhsScalar, 1, Index>(kc, m, nc,
                                                                                  threads);
        }
        return {mc * kc, kc * nc};
    }

    WorkspaceBlocking(Index rows, Index cols, Index depth, LhsScalar* buf_a, Index cap_a,
                      RhsScalar* buf_b, Index cap_b) noexcept
        : buf_a_(buf_a), buf_b_(buf_b), cap_a_(cap_a), cap_b_(cap_b) {
        this->m_mc = kTranspose ? cols : rows;
        this->m_nc = kTranspose ? rows : cols;
        this->m_kc = depth;
        Eigen::internal::computeProductBlockingSizes<LhsScalar, RhsScalar, 1, Index>(
            this->m_kc, this->m_mc, this->m_nc, Index{1});
        size_a_ = this->m_mc * this->m_kc;
        size_b_ = this->m_kc * this->m_nc;
        // Null: Eigen's sequential path then takes the stack (or the heap) itself.
        this->m_blockA = size_a_ <= cap_a_ ? buf_a_ : nullptr;
        this->m_blockB = size_b_ <= cap_b_ ? buf_b_ : nullptr;
    }
    WorkspaceBlocking(const WorkspaceBlocking&) = delete;
    WorkspaceBlocking& operator=(const WorkspaceBlocking&) = delete;
    ~WorkspaceBlocking() {
        if (owned_a_) Eigen::internal::aligned_delete(this->m_blockA, size_a_);
    }

    // The parallel session (gemm_functor::initParallelSession): Eigen's initParallel.
    void initParallel(Index rows, Index cols, Index depth, Index num_threads) {
        this->m_mc = kTranspose ? cols : rows;
        this->m_nc = kTranspose ? rows : cols;
        this->m_kc = depth;
        Index m = this->m_mc;
        Eigen::internal::computeProductBlockingSizes<LhsScalar, RhsScalar, 1, Index>(
            this->m_kc, m, this->m_nc, num_threads);
        size_a_ = this->m_mc * this->m_kc;
        size_b_ = this->m_kc * this->m_nc;
        this->m_blockA = size_a_ <= cap_a_ ? buf_a_ : nullptr;
        this->m_blockB = nullptr;  // the parallel path packs the rhs per thread
    }
    void allocateA() {
        if (this->m_blockA == nullptr) {
            this->m_blockA = Eigen::internal::aligned_new<LhsScalar>(size_a_);
            owned_a_ = true;
        }
    }
    void allocateB() {}
    void allocateAll() { allocateA(); }

private:
    LhsScalar* buf_a_;
    RhsScalar* buf_b_;
    Index cap_a_, cap_b_;
    Index size_a_ = 0, size_b_ = 0;
    bool owned_a_ = false;
};

inline constexpr std::size_t kAlign = 64;
inline std::size_t round_up(std::size_t n) noexcept { return (n + kAlign - 1) / kAlign * kAlign; }

/// True when Eigen evaluates dst[rows, cols] = lhs * rhs with its blocked GEMM (not the
/// coefficient-based lazy product, not GEMV): generic_product_impl<...GemmProduct>::evalTo.
inline bool takes_gemm_path(std::int64_t rows, std::int64_t cols, std::int64_t depth) noexcept {
    if (rows <= 1 || cols <= 1 || depth <= 0) return false;
    return depth + rows + cols >= EIGEN_GEMM_TO_COEFFBASED_THRESHOLD;
}

template <class F>
using RowBlocking = WorkspaceBlocking<Eigen::RowMajor, F, F>;

}  // namespace eigen_gemm_detail

/// Workspace bytes product_into() needs for a row-major dst[rows, cols] with inner dimension
/// `depth` (a multiple of 64; 0 when Eigen takes no blocked GEMM for these sizes).
template <class F>
std::size_t gemm_scratch_bytes(std::int64_t rows, std::int64_t cols, std::int64_t depth) noexcept {
    using namespace eigen_gemm_detail;
    if (!takes_gemm_path(rows, cols, depth)) return 0;
    const auto seq = RowBlocking<F>::sizes(rows, cols, depth, 1);
    const auto par = RowBlocking<F>::sizes(rows, cols, depth, 2);
    const auto a = static_cast<std::size_t>(std::max(seq.a, par.a));
    const auto b = static_cast<std::size_t>(seq.b);
    // 64 bytes of slack: the pieces are aligned inside whatever the caller passes.
    return round_up(a * sizeof(F)) + round_up(b * sizeof(F)) + kAlign;
}

/// dst.noalias() = lhs * rhs (Scaled false) or dst.noalias() = alpha * (lhs * rhs) (Scaled
/// true), evaluated exactly as Eigen evaluates those expressions, with the packed panels of
/// the blocked GEMM in `scratch` (gemm_scratch_bytes(dst.rows(), dst.cols(), lhs.cols())
/// bytes). Dst is a row-major dynamic map; Lhs and Rhs are maps or transposed maps.
template <bool Scaled, class Dst, class Lhs, class Rhs>
void product_into(Dst&& dst, const Lhs& lhs, const Rhs& rhs, typename Lhs::Scalar alpha,
                  void* scratch, std::size_t scratch_bytes) {
    using namespace eigen_gemm_detail;
    using DstT = std::remove_reference_t<Dst>;
    using Scalar = typename Lhs::Scalar;
    static_assert(DstT::Flags & Eigen::RowMajorBit, "product_into writes row-major results");
    if (!takes_gemm_path(dst.rows(), dst.cols(), lhs.cols())) {
        // The lazy product or GEMV: Eigen allocates nothing here (see the file comment).
        if constexpr (Scaled)
            dst.noalias() = alpha * (lhs * rhs);
        else
            dst.noalias() = lhs * rhs;
        return;
    }
    // generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, GemmProduct>::evalTo and
    // scaleAndAddTo, with the blocking replaced. The scalar factor of `alpha * (lhs * rhs)`
    // reaches scaleAndAddTo as combine_scalar_factors(1, alpha * lhs, rhs) == alpha.
    namespace ei = Eigen::internal;
    using LhsBlasTraits = ei::blas_traits<Lhs>;
    using RhsBlasTraits = ei::blas_traits<Rhs>;
    using ActualLhsType = typename LhsBlasTraits::DirectLinearAccessType;
    using ActualRhsType = typename RhsBlasTraits::DirectLinearAccessType;
    using ActualLhsClean = typename ei::remove_all<ActualLhsType>::type;
    using ActualRhsClean = typename ei::remove_all<ActualRhsType>::type;
    using Gemm = ei::general_matrix_matrix_product<
        Index, Scalar, (ActualLhsClean::Flags & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor,
        bool(LhsBlasTraits::NeedToConjugate), Scalar,
        (ActualRhsClean::Flags & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor,
        bool(RhsBlasTraits::NeedToConjugate), Eigen::RowMajor, DstT::InnerStrideAtCompileTime>;
    using Blocking = RowBlocking<Scalar>;
    using Functor = ei::gemm_functor<Scalar, Index, Gemm, ActualLhsClean, ActualRhsClean, DstT,
                                     Blocking>;

    dst.setZero();
    typename ei::add_const_on_value_type<ActualLhsType>::type actual_lhs = LhsBlasTraits::extract(lhs);
    typename ei::add_const_on_value_type<ActualRhsType>::type actual_rhs = RhsBlasTraits::extract(rhs);
    const Scalar actual_alpha =
        ei::combine_scalar_factors(Scaled ? alpha : Scalar(1), lhs, rhs);

    // Carve the two panels, 64-byte aligned, out of the scratch.
    const Index rows = dst.rows(), cols = dst.cols(), depth = lhs.cols();
    const auto seq = Blocking::sizes(rows, cols, depth, 1);
    const auto par = Blocking::sizes(rows, cols, depth, 2);
    const auto a_elems = static_cast<std::size_t>(std::max(seq.a, par.a));
    const auto b_elems = static_cast<std::size_t>(seq.b);
    auto base = reinterpret_cast<std::uintptr_t>(scratch);
    const std::uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
    const std::size_t need = round_up(a_elems * sizeof(Scalar)) + round_up(b_elems * sizeof(Scalar));
    Scalar* buf_a = nullptr;
    Scalar* buf_b = nullptr;
    Index cap_a = 0, cap_b = 0;
    if (scratch != nullptr && aligned - base + need <= scratch_bytes) {
        buf_a = reinterpret_cast<Scalar*>(aligned);
        buf_b = reinterpret_cast<Scalar*>(aligned + round_up(a_elems * sizeof(Scalar)));
        cap_a = static_cast<Index>(a_elems);
        cap_b = static_cast<Index>(b_elems);
    }
    Blocking blocking(rows, cols, depth, buf_a, cap_a, buf_b, cap_b);
    ei::parallelize_gemm<true>(Functor(actual_lhs, actual_rhs, dst, actual_alpha, blocking),
                               lhs.rows(), rhs.cols(), lhs.cols(), true);
}

}  // namespace dsinfer::detail
