// dsinfer's INT8 GEMM against a constant, pre-packed right-hand side: C[M,N] = sum_k
// (A[m,k] - za) * (B[k,n] - zb[n]) with 8-bit A and B and 32-bit accumulation, for the
// weights of MatMulInteger / QLinearMatMul / dynamically quantized Linear layers. The result
// is stored as s32 (MatMulInteger), dequantized to f32 (scale_a * scale_b[n] * c + bias[n],
// then an activation) or requantized to u8/s8 (c times the multiplier scale_a * scale_b[n] /
// scale_y, rounded, plus the output zero point, optionally
// then com.microsoft QLinearAdd with an 8-bit residual: a QDQ ResNet's block join), all fused
// into the store of each register tile: C is written once.
//
// Operand types. The micro-kernels multiply unsigned 8-bit A by signed 8-bit B (vpdpbusd's
// operand order). Other combinations are mapped onto it exactly, with the zero points:
//   - s8 A: packing A stores a ^ 0x80 = a + 128 as u8, and the zero point becomes za + 128;
//   - u8 B: pack_qb stores b ^ 0x80 = b - 128 as s8 (PackedQB::b_unsigned), and the zero point
//     becomes zb - 128; the term -zb' * rowsum(A) then restores the 128 * rowsum(A) the shift
//     removed.
// With a' = A as packed and b' = B as packed (za', zb' the shifted zero points):
//   C = sum a'b' - za' colsum(b')[n] - zb'[n] rowsum(a')[m] + K za' zb'[n]
// colsum(b') is computed once by pack_qb; rowsum(a') while A is packed, only when some zb' is
// not 0. All of this is in wrapping 32-bit arithmetic: C is exact whenever the true sum fits
// in s32 (always for K <= 65,793), and otherwise equals it mod 2^32.
//
// ISA families (QIsa), picked like sgemm's: the best the CPU has, capped by fast::active_isa()
// (so DSINFER_MAX_CPU_ISA=avx2 leaves AVX-VNNI and AVX2, =baseline the portable loop); tests
// pass narrower ones to pack_qb to cover every path the host can run.
//   avx512_vnni  tiles of 12 x 32: 24 zmm accumulators, vpdpbusd (4 products per lane).
//   avx_vnni     tiles of 6 x 16: 12 ymm accumulators, VEX vpdpbusd (AVX-VNNI, e.g. Alder Lake).
//   avx2         tiles of 6 x 16 with vpmaddwd on 16-bit operands. vpmaddubsw's u8 x s8 pair
//                sum saturates at s16 (255 * 127 * 2 = 64,770 > 32,767), so it is not used:
//                B is packed widened to s16 (pairs of K per 32-bit lane) and A widened to u16
//                while it is packed; vpmaddwd's pair sums (at most 2 * 255 * 128 = 65,280) are
//                exact in s32. Cost: packed B and packed A take twice the bytes, and each
//                vpmaddwd does 16 multiply-adds where a ymm vpdpbusd does 32 (the byte forms
//                below do 32 and 64 per 2 and 3 multiply instructions, exactly for the B they
//                are packed with).
//                qgemm_rows reads A already widened (the convolution widens its input rows
//                once per chunk).
//                Byte forms of the avx2 family (PackedQB::fixed()): B packed as bytes like
//                the VNNI families and A as u8, on vpmaddubsw, whose s16 lanes sum products
//                a b of A's u8 and B's s8 values. With a in [0, 255] a lane cannot overflow
//                when the positive b it sums add up to at most 128 and the negative to at
//                least -128 (255 * 128 = 32,640).
//                  QBForm::bytes, a group a step: vpmaddubsw + vpmaddwd by ones + vpaddd, 32
//                multiply-adds for 2 multiply instructions (MLAS's and oneDNN's non-VNNI form,
//                which saturates instead); a lane sums the two values of rows 2h, 2h + 1 of
//                one group.
//                  QBForm::paired, two groups (8 rows of K) a step: two vpmaddubsw added in
//                s16 by vpaddw, then one vpmaddwd by ones and vpaddd: 64 multiply-adds for 3
//                (tiles of 4 x 16: B's four vectors and 8 sums in registers, the ones in memory);
//                a lane sums four values, rows 2h, 2h + 1 of both groups. Which groups share a
//                step is chosen per K block and panel (PackedQB::order, within windows of 32
//                groups) so that few lanes exceed the bounds; B's slice is stored in that order
//                and the tile reads A's lanes through it. A K block with an odd number of groups
//                takes its last one alone.
//                Register-only on Zen 3 (bench_qgemm Avx2DotForms): paired 120, a group a step
//                96, the 16-bit form 76-80 GMAC/s a core. pack_qb cuts the values of every
//                lane that could overflow to those bounds (the last group's first, row 2h + 1
//                before 2h) and keeps the exact rest, each value minus its cut, as
//                corrections (QFix: one group, one half h, 8 columns), which the tile adds
//                with vpmaddwd on A's two values widened to u16 after its loop: the same exact
//                sums. QBForm::automatic packs whichever of the three forms costs least for
//                the corrections B needs (pack_qb's measured costs). Corrections per 8 rows
//                of K and panel, paired / a group a step: the MLP's weights (dynamic INT8)
//                0.015-0.025 / 0.009-0.014 and BERT-base's 0.007-0.16 / 0.004-0.079 (all
//                paired; in K order the paired form needed 0.30-0.38 and 0.36-1.0); BERT-base
//                QDQ's per-channel weights 1.56-2.89 / 0.53-1.18 (12 of 72 a group a step,
//                the rest the 16-bit form). qgemm_rows reads neither of these two.
//                  QBForm::bytes_a7, for A of 7 bits: a group a step and no cuts at all
//                (with a <= 127 a lane is at most 2 * 127 * 128 = 32,512 in magnitude for any
//                s8 B). Only qgemm_rows reads it, A split by the caller into its low 7 bits
//                (through the row pointers) and its high bits (QRowsA::hi, hi_rows), which add
//                128 times B's rows where they are set (a row's 16 values of a panel taken out
//                of its group's lanes by vpshufb). The INT8 convolution takes it for u8 x of a zero
//                point below 128 (ReLU outputs: 0.02% of the bytes ResNet-50 QDQ's convolutions
//                read after its first have a high bit), at the byte form's rate instead of the
//                16-bit form's.
//                  QBForm::paired_a7, for A of 7 bits: two groups a step in K order (groups
//                2s, 2s + 1 of a K block, the paired form's dot_bytes2, 4 x 16 tiles) and no
//                cuts: a lane sums four products of at most 127 each, exact while B's positive
//                values of the lane add up to at most 258 and its negative ones to at least -258
//                (127 * 258 = 32,766); the steps where a lane of the panel passes that
//                (PackedQB::a7_lone, bits per K block and panel) take their groups one at a
//                time, as does a group that a run of qgemm_rows (a segment, a K block) starts
//                or ends inside a step. ResNet-50 QDQ's weights: 0.5-11% of the steps lone
//                where K >= 256, 20-45% at K 64-128.
//   baseline     tiles of 4 x 8, the avx2 layout, GCC vector extensions (any target).
// Layout of packed B: K padded with zeros to a multiple of 4 (kp), cut into blocks of `kc`
// rows; a block holds the column panels (nr columns, zero-padded), each [kc / g][nr][g] with
// g = 4 bytes (VNNI) or 2 s16 (avx2, baseline): one 32-bit lane per column per group of K. In
// the paired byte form a panel's groups of a block are stored in its step order
// (PackedQB::order), not in K order.
//
// Work is split like sgemm_packed's: row blocks, A packed per block by whichever threads run,
// column panels taken in guided chunks (or whole row tiles per thread when there are few
// panels). Integer results do not depend on the split; the f32 and requantized epilogues
// compute each element from its exact s32 in a fixed order, so every output is bitwise the
// same for any thread count.
//
// Thread safety: a PackedQB is immutable once built and may be shared by concurrent runs.
// qgemm_packed allocates nothing when given a workspace of qgemm_workspace_bytes.
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/simd.hpp"
#include "ops/activation.hpp"
#include "ops/qlinear.hpp"

namespace dsinfer::detail {

/// The INT8 micro-kernel families, narrowest first.
enum class QIsa : int { baseline = 0, avx2 = 1, avx_vnni = 2, avx512_vnni = 3 };

/// "baseline", "avx2", "avx_vnni", "avx512_vnni".
const char* qisa_name(QIsa isa) noexcept;
/// The best family this CPU (and OS) runs, uncapped.
QIsa qgemm_host_isa() noexcept;
/// Whether this CPU runs `isa` (AVX-VNNI is not implied by AVX-512 VNNI: Ice Lake has only the
/// latter).
bool qgemm_supported(QIsa isa) noexcept;
/// The family pack_qb uses by default: the widest the CPU runs under fast::active_isa()'s cap
/// (avx512 allows every family, avx2 allows avx_vnni and avx2, baseline the portable one).
QIsa qgemm_isa() noexcept;

/// One exact correction of an avx2 byte form (see the top of this file): in the K block,
/// panel and class c = 2 v + h it is listed under (PackedQB::fix_index), the 4-row group `g` of
/// the block adds r[j] (s16 pairs: the values of rows 2h, 2h + 1 of the group) times A's two
/// values of those rows to column 8 v + j of the panel, with vpmaddwd.
struct QFix {
    std::int16_t r[8][2];
    std::int32_t g = 0;
};

/// Which layout pack_qb writes where the family has several (avx2; the others have one).
enum class QBForm {
    automatic,  ///< whichever of the three costs least for B's corrections (see pack_qb)
    wide,       ///< the 16-bit form (A and B widened; what qgemm_rows reads)
    bytes,      ///< the byte form, a group a step, with corrections however many
    paired,     ///< the byte form, two groups a step, with corrections however many
    /// The byte form for A of 7 bits (values below 128), a group a step, without cuts or
    /// corrections: vpmaddubsw's pair sums are then at most 2 * 127 * 128 = 32,512 in magnitude
    /// for every s8 B. Read only by qgemm_rows, whose A (QRowsA) gives the values' low 7 bits
    /// and, apart, their high bits (QRowsA::hi, hi_rows). Only the avx2 family has it; the others
    /// pack their one layout.
    bytes_a7,
    /// The byte form for 7-bit A, two groups a step in K order (groups 2s, 2s + 1 of a K
    /// block), B not cut: a lane's four products sum to at most 127 * 258 = 32,766 in magnitude
    /// when B's positive values of the lane add up to at most 258 and its negative ones to at
    /// least -258, and the steps where some lane of the panel does not (PackedQB::a7_lone) take
    /// their two groups one at a time. The layout of bytes_a7, read the same way (qgemm_rows
    /// only), in tiles of 4 x 16.
    paired_a7,
};

/// A packed constant B. Immutable after pack_qb; shared by concurrent runs.
struct PackedQB {
    std::int64_t k = 0, n = 0;
    std::int64_t kp = 0;       ///< k rounded up to a multiple of 4, at least 4 (zero rows)
    std::int64_t nr = 0;       ///< panel width (columns)
    std::int64_t kc = 0;       ///< K block (rows of kp per block, a multiple of 4)
    std::int64_t panels = 0;   ///< ceil(n / nr)
    std::int64_t group = 4;    ///< rows of K per 32-bit lane: 4 (s8) or 2 (s16)
    bool b_unsigned = false;   ///< B was u8: stored as b - 128 (zero points shift by -128)
    QIsa isa = QIsa::baseline; ///< the micro-kernel family the layout is for
    std::shared_ptr<std::int8_t> data;     ///< panels * nr * kp lanes of 32 bits / group, 64-aligned
    std::shared_ptr<std::int32_t> colsum;  ///< n sums over K of the stored (shifted) B
    /// The avx2 byte forms only: B as packed is cut so that the s16 sums cannot
    /// overflow, and `fixes` holds the exact rest, the corrections of K block kb, panel p and
    /// class c (QFix) at [fix_index[s], fix_index[s + 1]) with s = (kb * panels + p) * 4 + c
    /// (kb counts K blocks).
    std::shared_ptr<std::int64_t> fix_index;
    std::shared_ptr<QFix> fixes;
    /// The paired byte form only: per K block and panel, the groups of K (of the block) in the
    /// order its slice of B is stored, steps of two consecutive ones (an odd one last); block
    /// kb (rows of kp), panel p at order[(kb / 4) * panels + p * (kc_b / 4)], kc_b the block's
    /// rows, as B's lanes.
    std::shared_ptr<std::uint16_t> order;
    /// In QBForm::bytes_a7 or paired_a7 (the high bits of A multiply B's rows as packed:
    /// qgemm_rows takes each row's values out of its group's lanes).
    bool seven_bit_a = false;
    /// QBForm::paired_a7 only: per K block and panel, two 64-bit words whose bit s is set
    /// where some lane of step s (groups 2s, 2s + 1 of the block) passes the bounds; block kb
    /// (rows of kp), panel p at a7_lone[(kb / kc * panels + p) * 2].
    std::shared_ptr<std::uint64_t> a7_lone;
    /// In an avx2 byte form with corrections (bytes, paired).
    bool fixed() const noexcept { return fix_index != nullptr; }
    /// In the paired byte form (two groups of K a step, in `order`; else, when fixed(), one).
    bool paired() const noexcept { return order != nullptr; }
    /// In QBForm::paired_a7: two groups a step in K order, except the steps of a7_lone.
    bool a7_pairs() const noexcept { return a7_lone != nullptr; }
    /// In a byte form for 7-bit A (QBForm::bytes_a7, paired_a7): qgemm_rows only, A split.
    bool a7() const noexcept { return seven_bit_a; }
    /// (K block, panel, class) slots of fix_index.
    std::int64_t fix_slots() const noexcept {
        return fixed() ? (kp + kc - 1) / kc * panels * 4 : 0;
    }
    /// How many corrections.
    std::int64_t fix_count() const noexcept { return fixed() ? fix_index.get()[fix_slots()] : 0; }
    /// The bytes data, colsum and the corrections hold.
    std::uint64_t bytes() const noexcept {
        return static_cast<std::uint64_t>(panels * nr * kp) * (group == 4 ? 1u : 2u) +
               static_cast<std::uint64_t>(n) * 4u +
               static_cast<std::uint64_t>(fix_count()) * sizeof(QFix) +
               (fixed() ? static_cast<std::uint64_t>(fix_slots() + 1) * 8u : 0u) +
               (order != nullptr ? static_cast<std::uint64_t>(kp / 4 * panels) * 2u : 0u) +
               (a7_lone != nullptr ? static_cast<std::uint64_t>((kp + kc - 1) / kc * panels) * 16u
                                   : 0u);
    }
};

/// Packs B (k x n, s8, or u8 when `b_unsigned`; stored [n, k] row-major when `transposed`)
/// for `isa` (capped at qgemm_isa(), then lowered to a family the CPU runs), in `form` where
/// the family has two (avx2). Throws std::bad_alloc when memory runs out.
PackedQB pack_qb(const void* b, bool b_unsigned, std::int64_t k, std::int64_t n, bool transposed,
                 QIsa isa = qgemm_isa(), QBForm form = QBForm::automatic);

/// Packs 16-bit B (n x k, row-major: B^T, as pack_qb's `transposed`) in the 16-bit layout of
/// the avx2 family (capped at qgemm_isa() and the CPU; a VNNI family gives avx2) or the
/// baseline one: what qgemm_rows reads with A of s16 values (qconv's Winograd transform: both
/// families multiply s16 by s16 in pairs, vpmaddwd, exact in s32 while no pair is -32768 *
/// -32768). No zero point (b_unsigned false); colsum holds the columns' wrapping sums. Throws
/// std::bad_alloc when memory runs out.
PackedQB pack_qb_s16(const std::int16_t* b, std::int64_t k, std::int64_t n, QIsa isa = qgemm_isa());

/// What qgemm_packed stores.
enum class QGemmOutput { s32, f32, u8, s8 };

/// Zero points, scales and the epilogue of one product. Zero points are in the operands' own
/// types (u8: 0..255, s8: -128..127); pointers are read during the call only.
struct QGemmParams {
    bool a_signed = false;              ///< A is s8 (else u8)
    std::int32_t a_zero = 0;            ///< za, per tensor
    std::int32_t b_zero = 0;            ///< zb, per tensor (when b_zeros is null)
    const std::int32_t* b_zeros = nullptr;  ///< zb[n], per column, or null
    QGemmOutput out = QGemmOutput::s32;
    /// bias_s32[n] added to the exact sum before any epilogue (QLinearConv's int32 bias), or
    /// null. Wrapping 32-bit arithmetic, like the sum.
    const std::int32_t* bias_s32 = nullptr;
    // f32: y = act(float(c) * (a_scale * b_scale[n]) + bias[n]), in that f32 order.
    float a_scale = 1.f;
    const float* b_scales = nullptr;    ///< scale_b[n] per column, or null: b_scale
    float b_scale = 1.f;
    const float* bias = nullptr;        ///< bias[n] (f32 output only), or null
    ActivationSpec act;                 ///< Relu inline; Sigmoid, Tanh, Gelu, GeluTanh the vector
                                        ///< loops of activation_loop_f32; others scalar. u8/s8
                                        ///< outputs take none or Relu only.
    // u8, s8 (ops/quantize.hpp requantize_product): saturate(round_half_even(float(c) *
    // ((a_scale * b_scale[n]) / y_scale)) + y_zero), Relu applied before the rounding; NaN (a
    // non-finite multiplier) -> y_zero.
    float y_scale = 1.f;
    std::int32_t y_zero = 0;
    // u8, s8 with a residual (com.dsinfer QLinearConvAdd): C[m, n] = QLinearAdd(a, r) of the
    // requantized value a above (QLinearAdd's A: scale y_scale, zero point y_zero) and the 8-bit
    // residual r (of C's type) at residual[m * residual_row + n * residual_col], with `add`'s
    // multipliers and zero points (ops/qlinear.hpp qlinear_add_value, then qlinear_requantize
    // with add.zc; add.za must be y_zero). The residual may be C itself (each element is read
    // before it is written).
    const void* residual = nullptr;
    std::int64_t residual_row = 0, residual_col = 1;  ///< element strides along C's rows, columns
    QLinearBinary add;
};

/// Bytes of workspace qgemm_packed uses for M rows against `b` on `threads` threads: the
/// buffer(s) of packed A (a row block, all of K, plus its row sums) and, when K spans several
/// blocks, one buffer per thread for the s32 partial sums of the tiles.
std::size_t qgemm_workspace_bytes(std::int64_t m, const PackedQB& b, std::int64_t threads) noexcept;

/// C[M, N] (leading dimension ldc, in elements of the output type) from A[M, K] (leading
/// dimension lda, bytes) and the packed B, with `p`'s zero points and epilogue. Uses the
/// calling thread's OpenMP budget. `workspace` of at least qgemm_workspace_bytes(m, b,
/// max_threads()) makes the call allocation-free; when it is absent or smaller, buffers kept
/// per thread between calls are used. Returns false (C partly written) when such a buffer
/// cannot be allocated, and (writing nothing) for B in the form for 7-bit A (PackedQB::a7(),
/// which only qgemm_rows reads).
bool qgemm_packed(std::int64_t m, const void* a, std::int64_t lda, const PackedQB& b, void* c,
                  std::int64_t ldc, const QGemmParams& p, void* workspace = nullptr,
                  std::size_t workspace_bytes = 0) noexcept;

/// A read in place through row pointers: row i (< m) of A is the concatenation of `segments`
/// runs of `seg` elements (a multiple of b.group: 4 for the VNNI families, 2 for the 16-bit
/// ones), run s at rows[s * m + i]; K = segments * seg. The elements are A's u8 values for the
/// VNNI families and the same values widened to u16 for the 16-bit families (avx2, baseline:
/// a 32-bit lane of their packed A is two u16 values of K), qgemm_rows_elem_bytes(b) bytes
/// each. The INT8 convolution's A without im2col: one segment per kernel tap (kh, kw), each
/// pointing at the pixel's channels in the NHWC image (widened for the 16-bit families), or at
/// a row of the input zero point for padding.
///
/// With B in the form for 7-bit A (PackedQB::a7()) the rows hold the low 7 bits of A's values
/// (a & 127) and A's high bits come in one of two ways, as dense as the caller finds them:
///   hi: per (segment, row), at hi[s * m + i] like `rows`, a list of the segment's elements
///       whose value is at least 128: a count n, then n offsets in the segment (u16); each adds
///       128 times its row of B to the row of C;
///   hi_rows: per (segment, row) the high bits as elements of 0 or 1 (a >> 7), read like
///       `rows` and multiplied like them, the sums then times 128.
/// Exactly one of them is given for such a B, neither for any other.
/// With `hi`, `hi_any` (optional) holds a byte per row, 0 when none of the row's lists has an
/// element: qgemm_rows then skips the row's lists (the caller makes it once per product, where
/// each tile would read every (segment, row) list of its rows once per column panel).
struct QRowsA {
    std::int64_t m = 0, segments = 1, seg = 0;
    const std::uint8_t* const* rows = nullptr;
    const std::uint16_t* const* hi = nullptr;
    const std::uint8_t* const* hi_rows = nullptr;
    const std::uint8_t* hi_any = nullptr;
};

/// C[m, N] (leading dimension ldc) from given s32 sums s (row i at s + i * lds, N = b.n values)
/// through the epilogue qgemm_rows would apply to them with `p` (bias_s32, dequantization or
/// requantization, activation, residual; the same code, so bitwise the same results): b gives
/// N and the family; p's zero points are not applied (the sums are final). On the calling
/// thread, allocating nothing.
void qgemm_store_s32(const std::int32_t* s, std::int64_t lds, std::int64_t m, const PackedQB& b,
                     void* c, std::int64_t ldc, const QGemmParams& p) noexcept;
/// Bytes per element of A that qgemm_rows reads with `b`: 1 (u8) or 2 (u16, the 16-bit families).
inline int qgemm_rows_elem_bytes(const PackedQB& b) noexcept { return b.group == 4 ? 1 : 2; }

/// Whether qgemm_rows runs this product: B is not in an avx2 byte form with corrections
/// (PackedQB::fixed()), A is
/// u8 and no column of B has a non-zero zero point as packed (s8 B with zero point 0, u8 B with
/// 128: no row-sum term).
bool qgemm_rows_supported(const PackedQB& b, const QGemmParams& p) noexcept;

/// C[m, N] (leading dimension ldc) = A B as qgemm_packed computes it (bitwise: the same sums
/// and epilogue), with A read in place through `a` (a.seg * a.segments == b.k), on the calling
/// thread, allocating nothing, in the family's tiles (12 x 32 on AVX-512 VNNI, 6 x 16 on
/// AVX-VNNI and AVX2, 4 x 8 baseline).
/// Precondition: qgemm_rows_supported(b, p).
void qgemm_rows(const QRowsA& a, const PackedQB& b, void* c, std::int64_t ldc,
                const QGemmParams& p) noexcept;

}  // namespace dsinfer::detail
