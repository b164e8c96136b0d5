// dsinfer's f32 GEMM against a constant, pre-packed right-hand side: C[M,N] = A[M,K] · B[K,N]
// (+ bias[N]) (then ReLU), for the weights of Linear/Gemm layers.
//
// B is packed once (by the kernel, on its first run) for one micro-kernel family, picked from the CPU's ISA
// (fast::active_isa(), so DSINFER_MAX_CPU_ISA caps it): AVX-512 tiles of 12 x 32, AVX2+FMA tiles
// of 6 x 16, or portable 6 x 8 tiles. Packed B is cut into blocks of `kc` rows of K and, inside
// a block, into column panels of `nr` floats (zero-padded), k-major, so that the micro-kernel
// streams it contiguously and consecutive panels of one K block are one contiguous run. A is
// copied per call, in blocks of rows, into row-interleaved micro-panels in a buffer (the
// caller's workspace, or one kept per thread). The micro-kernel keeps a tile of C in registers
// and applies alpha, bias and ReLU as it stores.
//
// Work is dealt out in chunks of column panels (in row tiles when there are too few panels) on
// the shared OpenMP pool. Every element of C is computed by one thread, in a K order fixed by
// the packing (not by the thread count), so results are bitwise identical for any thread count.
//
// Few rows (M <= 16, token-by-token decoding, bound by reading B): A is read in place (no
// packing, no workspace) and each thread takes chunks of column panels, streaming each panel's
// K blocks once and computing all M rows from them (groups of up to a tile's height in
// registers, the partial sums of a K block kept on the stack), so B is read once at close to
// the memory's bandwidth. Not for bf16 K pairs (PackedB::pairs), which take the tiles. Each
// element is the same arithmetic as the tiles' (bitwise the same C for a row at any M).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dsinfer/dtype.hpp"
#include "kernels/simd.hpp"

namespace dsinfer::detail {

/// A packed constant B. Immutable after pack_b; shared by concurrent runs.
///
/// Half-width B (dtype f16 or bf16: weights held at half the bytes, rounded to nearest even)
/// has the same blocks and panels in `half`; its micro-kernels widen each panel row to float32
/// as they load it (bf16: a 16-bit shift; f16: vcvtph2ps / F16C, or integer arithmetic at the
/// baseline) and run the f32 FMAs. With `pairs` (bf16 on CPUs with AVX512_BF16, isa avx512),
/// each panel row holds a pair of K rows interleaved column by column ([kc/2][nr][2], a last
/// odd row paired with zero), the layout vdpbf16ps multiplies; A is then rounded to bf16 too
/// as it is packed, and each instruction does two steps of K (products exact, sums in f32).
struct PackedB {
    std::int64_t k = 0, n = 0;
    std::int64_t nr = 0;           ///< panel width (columns)
    std::int64_t kc = 0;           ///< K block (rows of B per block; the last may be shorter)
    std::int64_t panels = 0;       ///< ceil(n / nr)
    fast::Isa isa = fast::Isa::baseline;  ///< the micro-kernel family the layout is for
    DType dtype = DType::f32;      ///< f32 (in data), f16 or bf16 (in half)
    bool pairs = false;            ///< bf16 K pairs for vdpbf16ps (see above)
    std::shared_ptr<float> data;   ///< f32: panels * nr * k floats, 64-byte aligned
    std::shared_ptr<std::uint16_t> half;  ///< f16/bf16: panels * nr * k_stored() halves
    /// Rows of K stored: k, rounded up to even with pairs.
    std::int64_t k_stored() const noexcept { return pairs ? k + (k & 1) : k; }
    /// The bytes data or half holds.
    std::uint64_t bytes() const noexcept {
        return static_cast<std::uint64_t>(panels * nr * k_stored()) *
               (dtype == DType::f32 ? sizeof(float) : sizeof(std::uint16_t));
    }
};

/// The micro-kernel family pack_b uses by default: fast::active_isa().
fast::Isa sgemm_isa() noexcept;

/// True when bf16 weights packed for `isa` run on vdpbf16ps (PackedB::pairs): the CPU has
/// AVX512_BF16 and `isa` is avx512.
bool sgemm_bf16_dot(fast::Isa isa) noexcept;

/// Packs B for `isa` (capped at sgemm_isa(): tests pass narrower ones to cover those paths).
/// `transposed` = B is stored as [N, K] row-major (Gemm transB=1, Linear weights). `dtype` f16
/// or bf16 packs it at half width (narrow_packed_b); `bf16_dot` false keeps bf16 off
/// vdpbf16ps (tests, to cover the widening family on a CPU that has it).
PackedB pack_b(const float* b, std::int64_t k, std::int64_t n, bool transposed,
               fast::Isa isa = sgemm_isa(), DType dtype = DType::f32, bool bf16_dot = true);

/// `b` (f32) at half width: dtype f16 or bf16 (each value rounded to nearest even), the same
/// blocks and panels for the same ISA, bf16 in K pairs where sgemm_bf16_dot(b.isa) and
/// `bf16_dot`. Padding stays zero.
PackedB narrow_packed_b(const PackedB& b, DType dtype, bool bf16_dot = true);

/// "sgemm.packed_b" weight-store targets: the ISA name, "avx512_bf16" for bf16 pairs.
const char* packed_b_target(const PackedB& b) noexcept;

/// A packed B of k x n for `isa` (capped like pack_b) to be filled in place through
/// packed_b_index, for callers that compute B's values (a transform of the weights) and would
/// otherwise write them out only for pack_b to reorder them. Padding columns are zero.
PackedB packed_b_zeros(std::int64_t k, std::int64_t n, fast::Isa isa = sgemm_isa());

/// Where element (row kk of K, column j of N) of B lives in b.data (or b.half).
inline std::int64_t packed_b_index(const PackedB& b, std::int64_t kk, std::int64_t j) noexcept {
    const std::int64_t kb = kk / b.kc * b.kc;
    const std::int64_t kc = b.k - kb < b.kc ? b.k - kb : b.kc;
    if (b.pairs)  // blocks of even kc before the last; rows in pairs, interleaved per column
        return kb * b.panels * b.nr + (j / b.nr) * (kc + (kc & 1)) * b.nr +
               (kk - kb) / 2 * 2 * b.nr + j % b.nr * 2 + (kk - kb) % 2;
    return kb * b.panels * b.nr + (j / b.nr) * kc * b.nr + (kk - kb) * b.nr + j % b.nr;
}

enum class GemmActivation { none, relu };

/// Bytes of workspace sgemm_packed uses for an M x K by K x N product into C with leading
/// dimension `ldc` (0: N) on `threads` threads, for a B packed for `isa` (capped like pack_b):
/// a buffer for a row block of packed A (at most 192 x K floats at AVX2; one per thread when
/// threads split the rows) and, where C's rows collide in L1 and K spans several blocks, one
/// accumulation buffer per thread for the partial sums (at most a row block by N).
std::size_t sgemm_workspace_bytes(std::int64_t m, std::int64_t k, std::int64_t n, fast::Isa isa,
                                  std::int64_t threads, std::int64_t ldc = 0) noexcept;
/// The same for this packed B (its family: bf16 K pairs split the rows among threads, each
/// packing its own A, where the f32 family at that ISA shares one A buffer).
std::size_t sgemm_workspace_bytes(std::int64_t m, const PackedB& b, std::int64_t threads,
                                  std::int64_t ldc = 0) noexcept;

/// C[M, N] (leading dimension ldc) = A[M, K] (leading dimension lda) · B (+ bias) (activation).
/// B may be half width (PackedB::dtype): the same workspace, float32 accumulation.
/// `alpha` scales A·B before the bias. Uses the calling thread's OpenMP budget. With few rows
/// (M <= 16, B not in bf16 pairs) it uses no workspace and cannot fail. `workspace`, at
/// least sgemm_workspace_bytes for this product and thread count (kernels take it from the
/// activation plan), holds A and the partial sums; when it is absent or smaller, A goes to
/// buffers kept per thread between calls and the partial sums to C (same result, bitwise).
/// Returns false (C partly written) when such a buffer cannot be allocated; callers report
/// resource_exhausted.
bool sgemm_packed(std::int64_t m, const float* a, std::int64_t lda, const PackedB& b, float* c,
                  std::int64_t ldc, const float* bias, float alpha = 1.f,
                  GemmActivation act = GemmActivation::none, void* workspace = nullptr,
                  std::size_t workspace_bytes = 0) noexcept;

}  // namespace dsinfer::detail
