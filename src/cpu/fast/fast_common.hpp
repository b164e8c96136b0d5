// Shared pieces of dsinfer's fast CPU kernels (src/cpu/fast): the fallback-wrapping kernel
// base (FastKernel, the backends' one base: src/ops/fallback_kernel.hpp) and loop plans of the
// elementwise and data-movement ops (the vector loops and the chunk sizes of parallel loops are
// the kernels room's: src/kernels/simd.hpp).
//
// Every fast kernel wraps the kernel the next backend would have chosen for its node (the
// reference kernel; KernelCreateContext::create_fallback). prepare is the fallback's, so
// attribute/shape validation, error messages and output shapes are the reference's by
// construction; run takes the fast path for what it accelerates and hands everything else
// (other dtypes, legacy forms, strings) to the fallback's run. A factory returns unsupported
// only for node forms it never accelerates, so the executor picks the reference kernel
// directly.
//
// Internal (namespace dsinfer::detail::fast).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/simd.hpp"
#include "ops/fallback_kernel.hpp"
#include "ops/kernel_utils.hpp"
#include "runtime/parallel.hpp"

namespace dsinfer::detail::fast {

using Factory = StatusOr<std::unique_ptr<Kernel>>;

/// Base of the fast kernels: prepare and the slow cases (fallback_run) are the fallback
/// kernel's, as FallbackKernelBase has them; nothing is added. (A class rather than an alias:
/// subclasses outside namespace fast name it as FastKernel in their initializers.) Factories
/// create them with make_with_fallback<K>(ctx, args...), or, when they read attributes the
/// fallback validates, with ctx.create_fallback() first and make_kernel<K> after.
class FastKernel : public FallbackKernelBase {
public:
    using FallbackKernelBase::FallbackKernelBase;

    /// "cpu" unless a kernel names its path: said explicitly (not left empty), so that a kernel
    /// wrapping this one as its fallback (oneDNN's) tells it from the reference kernel.
    std::string algorithm(const PrepareContext&) const override { return "cpu"; }

protected:
    /// The fallback's algorithm for a shape class this kernel hands it (Kernel::algorithm; the
    /// fallback is the reference kernel).
    std::string fallback_algorithm(const PrepareContext& ctx) const {
        return FallbackKernelBase::fallback_algorithm(ctx, "reference");
    }
};

/// Kernel::algorithm's name of one of dsinfer's vector-loop families at the fast kernels' ISA:
/// "dsinfer:<family>-<isa>" (e.g. "dsinfer:eltwise-avx512").
inline std::string simd_algorithm(const char* family) {
    return std::string("dsinfer:") + family + "-" + isa_name(active_isa());
}

/// Layout id (kernel.hpp LayoutSupport) of channels-last 8-bit activations: a rank-4 tensor of
/// logical shape [N, C, H, W] stored as [N, H, W, C]. The cpu backend's INT8 kernels offer it
/// to each other (QLinearConv, QLinearAdd/Mul of equal shapes, MaxPool, QLinearGlobalAverage-
/// Pool's input), so a QDQ CNN transposes once at its first convolution instead of at every
/// one. (Id 1 is oneDNN's blocked layout, src/onednn/onednn_common.hpp.)
inline constexpr int kChannelsLastLayout = 2;

/// Whether graph value `v` is declared u8 or s8 with a known rank-4 shape.
inline bool int8_rank4(const Value& v) noexcept {
    return v.dtype && (*v.dtype == DType::u8 || *v.dtype == DType::i8) && v.shape.known &&
           v.shape.rank() == 4;
}

/// memcpy split across threads in kGrainBytes chunks.
inline void parallel_copy(void* dst, const void* src, std::size_t bytes) noexcept {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    parallel_for(static_cast<std::int64_t>(bytes), kGrainBytes,
                 [&](std::int64_t b, std::int64_t e) {
                     std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b));
                 });
}

// ---- loop plans ---------------------------------------------------------------------------

/// Iteration plan of a loop over the elements of a contiguous output (operand 0) that reads
/// N - 1 inputs at arbitrary element strides (0 for broadcast dims): size-1 dims dropped and
/// dims that are contiguous for every operand merged, so the innermost dim is as long as
/// possible.
template <std::size_t N>
struct LoopPlan {
    int rank = 1;
    std::array<std::int64_t, kMaxRank> dims{};
    std::array<Strides, N> strides{};
    std::int64_t total = 0;

    std::int64_t inner() const noexcept { return dims[static_cast<std::size_t>(rank - 1)]; }
    std::int64_t step(std::size_t k) const noexcept {
        return strides[k][static_cast<std::size_t>(rank - 1)];
    }
};

/// The plan of `out` with per-operand strides `st` (st[0] = the output's contiguous strides).
template <std::size_t N>
LoopPlan<N> make_plan(const Shape& out, const std::array<Strides, N>& st) noexcept {
    LoopPlan<N> p;
    p.total = out.num_elements();
    int r = 0;
    for (int d = 0; d < out.rank(); ++d) {
        const auto du = static_cast<std::size_t>(d);
        if (out[d] == 1) continue;
        if (r > 0) {
            const auto pu = static_cast<std::size_t>(r - 1);
            bool merge = true;
            for (std::size_t k = 0; k < N; ++k)
                merge = merge && p.strides[k][pu] == st[k][du] * out[d];
            if (merge) {
                p.dims[pu] *= out[d];
                for (std::size_t k = 0; k < N; ++k) p.strides[k][pu] = st[k][du];
                continue;
            }
        }
        const auto ru = static_cast<std::size_t>(r);
        p.dims[ru] = out[d];
        for (std::size_t k = 0; k < N; ++k) p.strides[k][ru] = st[k][du];
        ++r;
    }
    if (r == 0) {  // one element
        p.dims[0] = 1;
        p.strides[0][0] = 1;
        r = 1;
    }
    p.rank = r;
    return p;
}

/// The plan of a broadcasting elementwise op: inputs `ins` broadcast (numpy rules, already
/// checked by prepare) to `out`. Along the innermost dim every input's step is 0 or 1.
template <std::size_t N>
LoopPlan<N> plan_broadcast(const Shape& out, const std::array<Shape, N - 1>& ins) noexcept {
    std::array<Strides, N> st{};
    st[0] = contiguous_strides(out);
    for (std::size_t k = 0; k + 1 < N; ++k) st[k + 1] = broadcast_strides(ins[k], out);
    return make_plan(out, st);
}

/// Calls f(off, count) for the pieces of output elements [begin, end) that lie along the
/// innermost dim, in order. off[k] is operand k's element offset at the piece's start; along
/// the piece operand k advances by plan.step(k).
template <std::size_t N, class F>
void for_each_piece(const LoopPlan<N>& p, std::int64_t begin, std::int64_t end, F&& f) {
    if (begin >= end) return;
    const int outer_rank = p.rank - 1;
    const std::int64_t inner = p.inner();
    std::int64_t pos = begin % inner;
    std::array<std::int64_t, kMaxRank> idx{};
    std::array<std::int64_t, N> base{};
    std::int64_t rem = begin / inner;
    for (int d = outer_rank - 1; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        idx[du] = rem % p.dims[du];
        rem /= p.dims[du];
        for (std::size_t k = 0; k < N; ++k) base[k] += idx[du] * p.strides[k][du];
    }
    while (begin < end) {
        const std::int64_t cnt = std::min(inner - pos, end - begin);
        std::array<std::int64_t, N> off;
        for (std::size_t k = 0; k < N; ++k) off[k] = base[k] + pos * p.step(k);
        f(off, cnt);
        begin += cnt;
        pos = 0;
        for (int d = outer_rank - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            ++idx[du];
            for (std::size_t k = 0; k < N; ++k) base[k] += p.strides[k][du];
            if (idx[du] < p.dims[du]) break;
            for (std::size_t k = 0; k < N; ++k) base[k] -= p.strides[k][du] * p.dims[du];
            idx[du] = 0;
        }
    }
}

/// for_each_piece over all output elements, split across threads in chunks of >= grain.
template <std::size_t N, class F>
void parallel_pieces(const LoopPlan<N>& p, std::int64_t grain, F&& f) {
    parallel_for(p.total, grain,
                 [&](std::int64_t b, std::int64_t e) { for_each_piece(p, b, e, f); });
}

}  // namespace dsinfer::detail::fast
