// Packed-B INT8 GEMM (see qgemm.hpp). The loops live in qgemm_kernels.inc, compiled here once
// per family. Blocking follows sgemm.cpp: K in blocks of KC, so that a KC x NR slice of a B
// panel stays in L1 while the micro-kernel walks the row tiles of an A block; A in blocks of
// MC rows, packed (all of K) once per call, so that one K block of it stays in L2 while the
// panels stream past. AVX-512 VNNI: KC 768 rows (a 24 KiB slice of B and 9 KiB of A per tile
// in a 48 KiB L1: BERT's K = 768 is one block), MC 192; the 16-bit avx2 layout halves KC.
//
// Threads: as in sgemm_packed, the row tiles of a row block are packed and then its column
// panels computed in guided chunks, both taken from shared counters by whichever threads are
// running; with few panels, threads take whole row tiles and pack their own rows. The s32
// partial sums of K blocks before the last go to a per-thread buffer (the output may be 8-bit),
// and every epilogue runs once per element on its final s32, so results do not depend on the
// split.
#include "kernels/qgemm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/activation_f32.hpp"
#include "runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_QGEMM_X86 1
#include <immintrin.h>
#else
#define DSINFER_QGEMM_X86 0
#endif

// As in sgemm.cpp: GCC 12's own headers trip -Wmaybe-uninitialized, vector-typed values
// crossing the per-ISA functions trip -Wpsabi.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The f32 epilogue is y = float(c) * scale, then + bias: two roundings, on every family alike
// (and so QuantizeLinear of it is the same on all of them). GNU C++ contracts a * b + c into an
// FMA where the target has one (-ffp-contract=fast is its default even in ISO mode).
#pragma GCC optimize("fp-contract=off")

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// What every tile of one qgemm_packed call shares.
struct RunCtx {
    const PackedQB* b;
    const QGemmParams* p;
    void* c;
    int64_t ldc;
    std::size_t out_bytes;         ///< bytes per element of C
    int64_t k;                     ///< real K (the zero-point terms)
    std::int32_t za;               ///< A's zero point as packed (s8 A: + 128)
    std::int32_t zb;               ///< B's per-tensor zero point as packed (u8 B: - 128)
    std::int32_t b_shift;          ///< 128 for u8 B, else 0
    const std::int32_t* zb_col;    ///< per-column zero points (unshifted), or null
    const std::int32_t* colsum;    ///< b->colsum
    bool zero_terms;               ///< some zero-point term is not 0
    float q_lo, q_hi;              ///< u8/s8 range minus y_zero (with Relu, q_lo at least 0)
    bool add_finite;               ///< the fused QLinearAdd's |ra|, |rb| <= 1e30: no NaN sum
    /// And |ra| + |rb| <= 8192: |sum| < 255 * 8192 = 2^21 (both operands within +-255), which
    /// rounds (every family's round_lanes) and saturates to the output range exactly with
    /// no clamp to +-1024 first.
    bool add_small;
    ActivationLoop act_loop;       ///< the vector loop of a non-Relu activation, or null
    /// The epilogue a full tile (MR rows, a whole panel) may store inline, its accumulators
    /// still in registers (store_inline in qgemm_kernels.inc), none needing row terms: q8,
    /// u8/s8 without a residual (with finite multipliers: TileStore::inline_store); q8_add,
    /// u8/s8 with the fused QLinearAdd of a residual read in place (residual_col 1) and small
    /// multipliers (add_small); f32, no activation or Relu; s32; none: every tile goes through
    /// store_tile.
    enum class Inline : unsigned char { none, q8, q8_add, f32, s32 } inline_store;
};

/// Where one tile's result goes (see store_tile in qgemm_kernels.inc).
struct TileStore {
    const RunCtx* ctx;
    bool first, last;             ///< the K block is the first / the last
    std::uint32_t* slot;          ///< the tile's partial sums (MR x NR), or null (one K block)
    int64_t col;                  ///< first column of C
    int64_t row0;                 ///< first row of C
    int64_t arow0;                ///< first row in the packed A block (its row sums)
    const std::int32_t* rowsum;   ///< the packed A block's row sums, or null
    const void* epi;              ///< the panel's per-column epilogue values (last K block)
    bool inline_store;            ///< the last K block and RunCtx::inline_store applies (see there)
    const QFix* fix;              ///< an avx2 byte form's corrections (PackedQB::fixes)
    /// Those of this K block and panel, class c at [fix_bounds[c], fix_bounds[c + 1]) (a
    /// window of PackedQB::fix_index; null for every other family).
    const std::int64_t* fix_bounds;
    /// The paired byte form: this K block and panel's groups in step order (PackedQB::order).
    const std::uint16_t* order;
};

/// One micro-kernel family: tile shape, blocking, A packing and the loop over a row block.
struct Family {
    QIsa isa;
    int64_t mr, nr, kc, mc, group;
    /// Threads take whole row tiles (each packing its own A) whenever each gets at least a
    /// row block (B is then read as often as with a panel split), not only for few panels:
    /// sharing one packed A between the threads measured 10-17% slower at BERT-base's shapes
    /// on the AVX-512 VM (bench_qgemm m:1024, threads:2; e.g. 768 x 768 1687-1704 -> 1409-1481
    /// us). AVX2 measured mixed (-14% to +6%) and keeps the panel split.
    bool split_rows;
    void (*pack_tiles)(const std::uint8_t* a, int64_t lda, int64_t rows, int64_t k, bool a_signed,
                       std::uint32_t* dst, std::int32_t* rowsum, int64_t t0, int64_t t1) noexcept;
    void (*run_panels)(int64_t row0, int64_t rows, int64_t p0, int64_t p1,
                       const std::uint32_t* apacked, const std::int32_t* rowsum, const RunCtx& r,
                       std::uint32_t* acc) noexcept;
    /// qgemm_rows' loop (A read in place: u8, or u16 for the 16-bit families).
    void (*run_rows)(const QRowsA& a, const RunCtx& r) noexcept;
    /// qgemm_store_s32's loop (the epilogue of given sums).
    void (*store_rows)(const std::int32_t* s, int64_t lds, int64_t m, const RunCtx& r) noexcept;
};

/// How many panels ahead the tiles prefetch B.
constexpr int64_t kPrefetchPanels = 2;

#if DSINFER_QGEMM_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))), apply_to = function)
#endif
namespace avx512_vnni {
#define QG_W 16
#define QG_MR 12
#define QG_KC 768
#define QG_MC 192
#define QG_SPLIT_ROWS 1
#define QG_WIDE 0
#define QG_DOT(acc, a, b) ((VU)_mm512_dpbusd_epi32((__m512i)(acc), (__m512i)(a), (__m512i)(b)))
#define QG_ISA QIsa::avx512_vnni
#include "kernels/qgemm_kernels.inc"
}  // namespace avx512_vnni
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avxvnni")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx2,fma,avxvnni"))), apply_to = function)
#endif
namespace avx_vnni {
#define QG_W 8
#define QG_MR 6
#define QG_KC 1024
#define QG_MC 192
#define QG_SPLIT_ROWS 0
#define QG_WIDE 0
#define QG_DOT(acc, a, b) ((VU)_mm256_dpbusd_avx_epi32((__m256i)(acc), (__m256i)(a), (__m256i)(b)))
#define QG_ISA QIsa::avx_vnni
#include "kernels/qgemm_kernels.inc"
}  // namespace avx_vnni
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
namespace avx2 {
#define QG_W 8
#define QG_MR 6
#define QG_KC 512
#define QG_MC 192
#define QG_SPLIT_ROWS 0
#define QG_WIDE 1
// vpmaddwd: u16 x s16 pairs (each product at most 255 * 128 in magnitude) summed exactly in s32.
#define QG_DOT(acc, a, b) ((acc) + (VU)_mm256_madd_epi16((__m256i)(a), (__m256i)(b)))
#define QG_ISA QIsa::avx2
#include "kernels/qgemm_kernels.inc"
}  // namespace avx2

// The byte forms of the avx2 family (qgemm.hpp): u8 x s8 quads as the VNNI families pack them.
// avx2_bytes: a group a step, vpmaddubsw's s16 pair sums widened to s32 by vpmaddwd with ones
// (QG_DOT). avx2_paired: two groups a step, the pair sums of both added in s16 before widening
// (QG_DOT2), an odd last group of a K block alone. B is cut by pack_qb for the form so that the
// s16 sums cannot overflow; the cut-off rest is added exactly after the tile's loop (QG_FIX).
namespace avx2_dots {
inline __m256i dot_bytes(__m256i acc, __m256i a, __m256i b) noexcept {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}
/// Sixteen s16 ones, dot_bytes2's vpmaddwd operand from memory.
alignas(32) constexpr std::int16_t kOnes16[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
/// acc + the dot products of two groups (A's lanes a0, a1 broadcast, B's b0, b1): vpmaddubsw of
/// each, added in s16, widened by vpmaddwd with the ones read from memory (a folded load: the
/// paired tile's 8 sums, B's four vectors, A's two broadcasts and two products fill the 16 ymm
/// registers; written as intrinsics GCC keeps the ones in a register and a sum on the stack).
/// The asm fixes the order of the two vpmaddubsw and the s16 add: exact for the B pack_qb cut.
inline __m256i dot_bytes2(__m256i acc, __m256i a0, __m256i a1, __m256i b0, __m256i b1) noexcept {
    __m256i t, u;
    __asm__(
        "vpmaddubsw %3, %2, %0\n\t"
        "vpmaddubsw %5, %4, %1\n\t"
        "vpaddw %1, %0, %0\n\t"
        "vpmaddwd %6, %0, %0"
        : "=&x"(t), "=&x"(u)
        : "x"(a0), "x"(b0), "x"(a1), "x"(b1), "m"(*reinterpret_cast<const __m256i*>(kOnes16)));
    return _mm256_add_epi32(acc, t);
}
}  // namespace avx2_dots

namespace avx2_bytes {
using namespace avx2_dots;
#include "kernels/qgemm_avx2_bytes.inc"
}  // namespace avx2_bytes

namespace avx2_paired {
using namespace avx2_dots;
// Tiles of 4 x 16 (8 sums): with B's four vectors held for a step, the tile's registers fit
// only with the ones from memory (dot_bytes2). Against 6 x 16 tiles with two of the 12 sums on
// the stack, bench_qgemm impl 5 and 8, 1 thread, AVX2 Zen 3, min of 4 alternating rounds:
// BERT-base's 1024 x 768 x 3072 +9-11%, 1024 x 3072 x 768 +1.5-2%, 1024 x 768 x 768 +0.5-1%,
// M = 128 and the MLP's M = 64 +0.1-2.5%; 6 x 16 with the ones from memory 5% below 4 x 16.
// (Hand-written 6 x 16 steps with B and the ones as memory operands, A broadcast for each 8
// columns, measured 7-16% slower: the loads.)
#define QG_DOT2(acc, a0, a1, b0, b1) \
    ((VU)dot_bytes2((__m256i)(acc), (__m256i)(a0), (__m256i)(a1), (__m256i)(b0), (__m256i)(b1)))
#define QG_MR 4
#include "kernels/qgemm_avx2_bytes.inc"
}  // namespace avx2_paired
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#endif

namespace baseline {
typedef std::uint32_t VU4 __attribute__((vector_size(16)));
/// vpmaddwd's arithmetic in portable vector code: a and b hold (s16 lo, s16 hi) pairs (A's u8
/// values widened, or the signed values of qconv's Winograd transform); acc + a.lo * b.lo +
/// a.hi * b.hi per lane, in wrapping 32-bit arithmetic.
inline VU4 dot2(VU4 acc, VU4 a, VU4 b) noexcept {
    typedef std::int32_t VI4 __attribute__((vector_size(16)));
    const VU4 alo = (VU4)(((VI4)(a << 16)) >> 16), ahi = (VU4)(((VI4)a) >> 16);
    const VU4 blo = (VU4)(((VI4)(b << 16)) >> 16), bhi = (VU4)(((VI4)b) >> 16);
    return acc + alo * blo + ahi * bhi;
}
#define QG_W 4
#define QG_MR 4
#define QG_KC 512
#define QG_MC 96
#define QG_SPLIT_ROWS 0
#define QG_WIDE 1
#define QG_DOT(acc, a, b) dot2(acc, a, b)
#define QG_ISA QIsa::baseline
#include "kernels/qgemm_kernels.inc"
}  // namespace baseline

const Family& family(QIsa isa) noexcept {
#if DSINFER_QGEMM_X86
    if (isa == QIsa::avx512_vnni) return avx512_vnni::kFamily;
    if (isa == QIsa::avx_vnni) return avx_vnni::kFamily;
    if (isa == QIsa::avx2) return avx2::kFamily;
#endif
    (void)isa;
    return baseline::kFamily;
}

/// The family b was packed for (the avx2 family has two forms).
const Family& family_of(const PackedQB& b) noexcept {
#if DSINFER_QGEMM_X86
    if (b.fixed() || b.a7())
        return b.paired() || b.a7_pairs() ? avx2_paired::kFamily : avx2_bytes::kFamily;
#endif
    return family(b.isa);
}

/// Bit i set: this CPU (and OS) runs family QIsa(i).
unsigned detect_families() noexcept {
    unsigned mask = 1u << static_cast<int>(QIsa::baseline);
#if DSINFER_QGEMM_X86
    const fast::Isa host = fast::host_isa();
    if (static_cast<int>(host) >= static_cast<int>(fast::Isa::avx2)) {
        mask |= 1u << static_cast<int>(QIsa::avx2);
        if (__builtin_cpu_supports("avxvnni")) mask |= 1u << static_cast<int>(QIsa::avx_vnni);
    }
    if (host == fast::Isa::avx512 && __builtin_cpu_supports("avx512vnni"))
        mask |= 1u << static_cast<int>(QIsa::avx512_vnni);
#endif
    return mask;
}

unsigned host_families() noexcept {
    static const unsigned mask = detect_families();
    return mask;
}

/// The widest family this CPU runs at or below `isa`.
QIsa supported_at_most(QIsa isa) noexcept {
    for (int i = static_cast<int>(isa); i > 0; --i)
        if ((host_families() >> i & 1u) != 0) return static_cast<QIsa>(i);
    return QIsa::baseline;
}

template <class T>
struct AlignedDelete {
    void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};

template <class T>
T* aligned_new(std::size_t count) {
    return static_cast<T*>(
        ::operator new[](std::max<std::size_t>(count, 1) * sizeof(T), std::align_val_t{64}));
}

/// A buffer of at least `bytes` kept per thread and per use (0: packed A, 1: partial sums)
/// between calls, or null when it cannot be allocated.
unsigned char* thread_buffer(int use, std::size_t bytes) noexcept {
    thread_local std::unique_ptr<unsigned char[], AlignedDelete<unsigned char>> buf[2];
    thread_local std::size_t size[2] = {0, 0};
    if (size[use] < bytes) {
        buf[use].reset();
        size[use] = 0;
        try {
            buf[use].reset(aligned_new<unsigned char>(bytes));
        } catch (const std::bad_alloc&) {
            return nullptr;
        }
        size[use] = bytes;
    }
    return buf[use].get();
}

inline void cpu_relax() noexcept {
#if DSINFER_QGEMM_X86
    _mm_pause();
#endif
}

/// How qgemm_packed splits one product (the same for its workspace query).
struct Split {
    bool by_tiles = false;   ///< threads take whole row tiles (few panels, or split_rows)
    int64_t block_rows = 0;  ///< rows per row block (a multiple of the tile height, <= mc)
    int64_t team = 1;        ///< threads
    int64_t min_panels = 1, max_chunk = 1;  ///< panel chunks (not by tiles)
    int64_t a_buffers = 0;   ///< A-packing buffers: one per thread by tiles, else one shared
    std::size_t a_bytes = 0;    ///< bytes of one A buffer (packed lanes, then row sums)
    std::size_t acc_bytes = 0;  ///< bytes of one thread's partial-sum buffer (0: one K block)
};

std::size_t round64(std::size_t bytes) noexcept { return (bytes + 63) / 64 * 64; }

Split split_for(const Family& f, int64_t m, const PackedQB& b, int64_t threads) noexcept {
    Split s;
    const int64_t panels = b.panels, tiles = (m + f.mr - 1) / f.mr;
    s.by_tiles =
        (panels <= 8 * threads && tiles >= 2 * threads) || (f.split_rows && m >= threads * f.mc);
    int64_t acc_panels = panels;
    if (s.by_tiles) {
        s.block_rows = std::min(f.mc, tiles * f.mr);
        s.team = threads;
        s.a_buffers = threads;
    } else {
        const int64_t blocks = (m + f.mc - 1) / f.mc;
        s.block_rows = ((m + blocks - 1) / blocks + f.mr - 1) / f.mr * f.mr;
        // Chunks of at least ~4 M multiply-adds (an int8 multiply-add costs about a quarter of
        // an f32 one), at most 1/8 of a thread's share, guided as the panels run out.
        const int64_t macs_per_panel = s.block_rows * b.kp * f.nr;
        s.min_panels = std::max<int64_t>(1, (int64_t{1} << 22) / macs_per_panel);
        s.max_chunk = std::max(s.min_panels, (panels + 8 * threads - 1) / (8 * threads));
        s.team = std::min(threads, (panels + s.min_panels - 1) / s.min_panels);
        s.a_buffers = 1;
        acc_panels = std::min(panels, s.max_chunk);
    }
    const int64_t rows_pad = (s.block_rows + f.mr - 1) / f.mr * f.mr;
    s.a_bytes = round64(static_cast<std::size_t>(b.kp / f.group * rows_pad) * 4) +
                round64(static_cast<std::size_t>(rows_pad) * 4);
    if (b.kp > f.kc)
        s.acc_bytes = round64(static_cast<std::size_t>(acc_panels * rows_pad * f.nr) * 4);
    return s;
}

std::size_t layout_bytes(const Split& s) noexcept {
    return static_cast<std::size_t>(s.a_buffers) * s.a_bytes +
           static_cast<std::size_t>(s.team) * s.acc_bytes;
}

}  // namespace

const char* qisa_name(QIsa isa) noexcept {
    switch (isa) {
        case QIsa::baseline: return "baseline";
        case QIsa::avx2: return "avx2";
        case QIsa::avx_vnni: return "avx_vnni";
        case QIsa::avx512_vnni: return "avx512_vnni";
    }
    return "?";
}

QIsa qgemm_host_isa() noexcept { return supported_at_most(QIsa::avx512_vnni); }

bool qgemm_supported(QIsa isa) noexcept {
    return (host_families() >> static_cast<int>(isa) & 1u) != 0;
}

QIsa qgemm_isa() noexcept {
    switch (fast::active_isa()) {
        case fast::Isa::baseline: return QIsa::baseline;
        case fast::Isa::avx2: return supported_at_most(QIsa::avx_vnni);
        case fast::Isa::avx512: return qgemm_host_isa();
    }
    return QIsa::baseline;
}

namespace {

/// The sums of B's positive values and of its negative values' magnitudes in one lane of an
/// avx2 byte form: rows 2h, 2h + 1 of `groups` consecutive groups from group g of vals (a K
/// block of one panel, [row][column], nr columns), column j. vpmaddubsw's s16 sum of the lane is
/// exact while each, times A's largest value, stays within s16.
struct LaneSums {
    std::int32_t pos = 0, neg = 0;
};
inline LaneSums lane_sums(const std::int32_t* vals, int64_t nr, int64_t g, int64_t groups, int h,
                          int64_t j) noexcept {
    LaneSums l;
    for (int64_t q = 0; q < groups; ++q)
        for (int e = 0; e < 2; ++e) {
            const std::int32_t v = vals[((g + q) * 4 + 2 * h + e) * nr + j];
            (v > 0 ? l.pos : l.neg) += std::abs(v);
        }
    return l;
}

/// An avx2 byte form's cut (qgemm.hpp) of one K block of one panel: `vals` holds its kc rows
/// x nr columns of B as stored (signed), cut in place. Per step of `step_groups` groups (1 or
/// 2; a last odd group alone), half h and column j, the values of rows 2h, 2h + 1 of the
/// step's groups are cut, the last group's first and row 2h + 1 before 2h, until the positive
/// ones sum to at most 128 and the negative to at least -128; each group's exact rest (value
/// minus cut) of a half and 8 columns becomes one QFix, appended to out[2 v + h] (or, with
/// out null, only counted), naming its group group_of[s] for the s-th group of vals (or s).
/// Returns how many.
int64_t cut_block(std::int32_t* vals, int64_t kc, int64_t nr, int64_t step_groups,
                  const std::uint16_t* group_of, std::vector<QFix>* out) {
    const int64_t groups = kc / 4;
    int64_t count = 0;
    for (int64_t s = 0; s < groups; s += step_groups) {
        const int64_t step = std::min(step_groups, groups - s);
        for (int h = 0; h < 2; ++h) {
            QFix fix[2][2] = {};  // [group of the step][8 columns]
            bool any[2][2] = {};
            for (int64_t j = 0; j < nr; ++j) {
                const LaneSums sums = lane_sums(vals, nr, s, step, h, j);
                std::int32_t over_pos = sums.pos - 128, over_neg = sums.neg - 128;
                if (over_pos <= 0 && over_neg <= 0) continue;
                for (int64_t q = step - 1; q >= 0; --q)
                    for (int e = 1; e >= 0; --e) {
                        std::int32_t& v = vals[((s + q) * 4 + 2 * h + e) * nr + j];
                        std::int32_t& over = v > 0 ? over_pos : over_neg;
                        if (v == 0 || over <= 0) continue;
                        const std::int32_t d = std::min(std::abs(v), over);
                        const std::int32_t cut = v > 0 ? v - d : v + d;
                        over -= d;
                        fix[q][j / 8].r[j % 8][e] = static_cast<std::int16_t>(v - cut);
                        any[q][j / 8] = true;
                        v = cut;
                    }
            }
            for (int v = 0; v < 2; ++v)
                for (int64_t q = 0; q < step; ++q)
                    if (any[q][v]) {
                        fix[q][v].g = static_cast<std::int32_t>(
                            group_of != nullptr ? group_of[s + q] : s + q);
                        if (out != nullptr) out[2 * v + h].push_back(fix[q][v]);
                        ++count;
                    }
        }
    }
    return count;
}

/// The paired byte form's order of the groups of one K block of one panel (vals as in
/// cut_block): which groups share a step, so that few of the steps' lanes need a cut. In each
/// window of kPairWindow groups, groups are taken from the one with the largest sum of one sign
/// in a lane (two values) down; each is paired with the first group after it in that order that
/// leaves no lane of the step over the bounds (else the one that leaves the fewest (half, 8
/// columns) classes over); an odd one left (the block's last window) is last. ord[2 m],
/// ord[2 m + 1] are the groups of step m. (A model of it over BERT-base's dynamic INT8 weights,
/// first 3 matrices: steps needing a correction per 8 rows of K and panel 0.46-0.68 in K order,
/// 0.018-0.03 pairing across a whole block, 0.021-0.039 in windows of 32 groups, 0.03-0.07 of
/// 16. The window keeps a tile's reads of A within 32 groups, 768 bytes, at a time: pairing
/// across the block measured up to 10% slower at 64 x 4096 x 4096, whose packed A of a row
/// block outgrows L1, with B that needed no correction.)
constexpr int64_t kPairWindow = 32;

void pair_groups(const std::int32_t* vals, int64_t kc, int64_t nr, std::uint16_t* ord) {
    const int64_t groups = kc / 4, lanes = 2 * nr;  // lane (h, j) of a group: rows 2h, 2h + 1
    std::vector<std::int32_t> pos(static_cast<std::size_t>(groups * lanes)),
        neg(static_cast<std::size_t>(groups * lanes));
    std::vector<std::int32_t> worst(static_cast<std::size_t>(groups));
    for (int64_t gi = 0; gi < groups; ++gi) {
        std::int32_t w = 0;
        for (int h = 0; h < 2; ++h)
            for (int64_t j = 0; j < nr; ++j) {
                const LaneSums l = lane_sums(vals, nr, gi, 1, h, j);
                const auto at = static_cast<std::size_t>(gi * lanes + h * nr + j);
                pos[at] = l.pos;
                neg[at] = l.neg;
                w = std::max(w, std::max(l.pos, l.neg));
            }
        worst[static_cast<std::size_t>(gi)] = w;
    }
    std::vector<std::uint16_t> by(static_cast<std::size_t>(groups));
    for (int64_t gi = 0; gi < groups; ++gi)
        by[static_cast<std::size_t>(gi)] = static_cast<std::uint16_t>(gi);
    // (half, 8 columns) classes over the bounds when groups x and y share a step.
    auto over = [&](int64_t x, int64_t y) {
        int count = 0;
        for (int64_t c = 0; c < lanes; c += 8) {
            bool any = false;
            for (int64_t l = c; l < std::min(c + 8, lanes); ++l)
                any |= pos[static_cast<std::size_t>(x * lanes + l)] +
                               pos[static_cast<std::size_t>(y * lanes + l)] >
                           128 ||
                       neg[static_cast<std::size_t>(x * lanes + l)] +
                               neg[static_cast<std::size_t>(y * lanes + l)] >
                           128;
            count += any ? 1 : 0;
        }
        return count;
    };
    std::vector<char> used(static_cast<std::size_t>(groups), 0);
    int64_t slot = 0, lone = -1;
    for (int64_t w0 = 0; w0 < groups; w0 += kPairWindow) {
        const int64_t w1 = std::min(groups, w0 + kPairWindow);
        std::stable_sort(by.begin() + w0, by.begin() + w1,
                         [&](std::uint16_t x, std::uint16_t y) { return worst[x] > worst[y]; });
        for (int64_t i = w0; i < w1; ++i) {
            const std::uint16_t x = by[static_cast<std::size_t>(i)];
            if (used[x]) continue;
            used[x] = 1;
            int64_t best = -1;
            int best_over = 1 << 30;
            for (int64_t t = i + 1; t < w1 && best_over > 0; ++t) {
                const std::uint16_t y = by[static_cast<std::size_t>(t)];
                if (used[y]) continue;
                const int o = over(x, y);
                if (o < best_over) {
                    best = y;
                    best_over = o;
                }
            }
            if (best < 0) {  // only in the last window, when the block's count is odd
                lone = x;
                continue;
            }
            used[static_cast<std::size_t>(best)] = 1;
            ord[slot++] = x;
            ord[slot++] = static_cast<std::uint16_t>(best);
        }
    }
    if (lone >= 0) ord[slot] = static_cast<std::uint16_t>(lone);
}

}  // namespace

namespace {

/// A PackedQB of k x n for family f with its fields set and its lanes (uninitialized) and
/// column sums allocated.
PackedQB packed_shell(const Family& f, QIsa isa, int64_t k, int64_t n, bool b_unsigned) {
    PackedQB out;
    out.k = k;
    out.n = n;
    out.kp = std::max<int64_t>(4, (k + 3) / 4 * 4);  // K = 0: one zero group (sums of 0)
    out.nr = f.nr;
    out.kc = f.kc;
    out.group = f.group;
    out.isa = isa;
    out.b_unsigned = b_unsigned;
    out.panels = (n + f.nr - 1) / f.nr;
    auto* lane =
        aligned_new<std::uint32_t>(static_cast<std::size_t>(out.kp / f.group * out.panels * f.nr));
    out.data =
        std::shared_ptr<std::int8_t>(reinterpret_cast<std::int8_t*>(lane), [](std::int8_t* p) {
            AlignedDelete<std::uint32_t>{}(reinterpret_cast<std::uint32_t*>(p));
        });
    auto* sums = aligned_new<std::int32_t>(static_cast<std::size_t>(std::max<int64_t>(n, 1)));
    out.colsum = std::shared_ptr<std::int32_t>(sums, AlignedDelete<std::int32_t>{});
    return out;
}

}  // namespace

PackedQB pack_qb(const void* bsrc, bool b_unsigned, int64_t k, int64_t n, bool transposed, QIsa isa,
                 QBForm form) {
    if (static_cast<int>(isa) > static_cast<int>(qgemm_isa())) isa = qgemm_isa();
    isa = supported_at_most(isa);  // e.g. avx_vnni on an AVX-512 VNNI CPU without AVX-VNNI
    // The avx2 byte forms (qgemm.hpp): automatic packs the paired one, counting the corrections
    // a group a step would need as well, and packs again in the form that costs least.
#if DSINFER_QGEMM_X86
    // The forms for 7-bit A: the byte layout in K order, no cuts, B's rows for A's high bits; a
    // group a step, or two (a7_pairs) except where a lane could overflow.
    const bool a7_pairs = isa == QIsa::avx2 && form == QBForm::paired_a7;
    const bool a7 = a7_pairs || (isa == QIsa::avx2 && form == QBForm::bytes_a7);
    const bool bytes = isa == QIsa::avx2 && form != QBForm::wide && !a7;
    const bool paired = bytes && form != QBForm::bytes;  // automatic packs the paired form first
    const Family& f = (a7 && !a7_pairs) || (bytes && !paired) ? avx2_bytes::kFamily
                      : paired || a7_pairs                    ? avx2_paired::kFamily
                                                              : family(isa);
#else
    const bool a7 = false, a7_pairs = false, bytes = false, paired = false;
    const Family& f = family(isa);
#endif
    PackedQB out = packed_shell(f, isa, k, n, b_unsigned);
    const int64_t kp = out.kp, nr = f.nr, panels = out.panels, g = f.group;
    auto* lane = reinterpret_cast<std::uint32_t*>(out.data.get());
    std::int32_t* sums = out.colsum.get();
    const auto* src = static_cast<const std::uint8_t*>(bsrc);
    const std::uint8_t flip = b_unsigned ? 0x80 : 0x00;
    // B as stored, as a signed value (u8 shifted by -128); 0 past K.
    auto at = [&](int64_t kk, int64_t j) -> std::int32_t {
        if (kk >= k) return 0;
        const std::uint8_t v = transposed ? src[j * k + kk] : src[kk * n + j];
        return static_cast<std::int8_t>(v ^ flip);
    };
    // The byte forms' corrections, per K block, panel and class ([(kbi * panels + pi) * 4 + c]).
    const int64_t blocks = (kp + f.kc - 1) / f.kc;
    std::vector<std::vector<QFix>> fixes(bytes ? static_cast<std::size_t>(blocks * panels * 4) : 0);
    // automatic: the corrections a group a step would need, per panel.
    const bool count_single = bytes && form == QBForm::automatic;
    std::vector<int64_t> single_fixes(count_single ? static_cast<std::size_t>(panels) : 0);
    // The paired form: each K block's groups in the order of its steps, per panel.
    if (paired) {
        out.order = std::shared_ptr<std::uint16_t>(
            new std::uint16_t[static_cast<std::size_t>(kp / 4 * panels)],
            std::default_delete<std::uint16_t[]>());
    }
    out.seven_bit_a = a7;
    if (a7_pairs)  // QBForm::paired_a7's lone steps: two words per K block and panel
        out.a7_lone = std::shared_ptr<std::uint64_t>(
            new std::uint64_t[static_cast<std::size_t>(blocks * panels * 2)](),
            std::default_delete<std::uint64_t[]>());
    // Block kb (rows [kb, kb + kc) of the padded K) starts at lane (kb / g) * panels * nr; in
    // it, panel pi at pi * (kc / g) * nr, holding kc / g groups of nr lanes.
    parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
        std::vector<std::int32_t> vals;  // one K block of the panel, [row][column], zero-padded
        std::vector<std::int32_t> scratch, steps;
        for (int64_t pi = p0; pi < p1; ++pi) {
            const int64_t col = pi * nr, w = std::min(nr, n - col);
            for (int64_t j = 0; j < w; ++j) {
                std::uint32_t s = 0;
                for (int64_t kk = 0; kk < k; ++kk) s += static_cast<std::uint32_t>(at(kk, col + j));
                sums[col + j] = static_cast<std::int32_t>(s);
            }
            for (int64_t kb = 0; kb < kp; kb += f.kc) {
                const int64_t kc = std::min(f.kc, kp - kb);
                std::uint32_t* dst = lane + (kb / g) * panels * nr + pi * (kc / g) * nr;
                vals.assign(static_cast<std::size_t>(kc * nr), 0);
                for (int64_t r = 0; r < kc; ++r)
                    for (int64_t j = 0; j < w; ++j)
                        vals[static_cast<std::size_t>(r * nr + j)] = at(kb + r, col + j);
                if (count_single) {
                    scratch = vals;
                    single_fixes[static_cast<std::size_t>(pi)] +=
                        cut_block(scratch.data(), kc, nr, 1, nullptr, nullptr);
                }
                std::uint16_t* ord = nullptr;
                if (paired) {  // the groups in step order: B's panel slice is stored so
                    ord = out.order.get() + (kb / 4) * panels + pi * (kc / 4);
                    pair_groups(vals.data(), kc, nr, ord);
                    steps.resize(vals.size());
                    for (int64_t s = 0; s < kc / 4; ++s)
                        std::copy_n(vals.begin() + static_cast<std::ptrdiff_t>(ord[s] * 4 * nr),
                                    4 * nr,
                                    steps.begin() + static_cast<std::ptrdiff_t>(s * 4 * nr));
                    vals.swap(steps);
                }
                if (bytes)
                    cut_block(vals.data(), kc, nr, paired ? 2 : 1, ord,
                              &fixes[static_cast<std::size_t>((kb / f.kc * panels + pi) * 4)]);
                if (a7_pairs) {
                    // Step s is lone where a lane (rows 2h, 2h + 1 of groups 2s and 2s + 1, one
                    // column) has positive values summing past 258 or negative ones past -258:
                    // with A below 128 its s16 sum could pass 127 * 258 = 32,766.
                    std::uint64_t* const lone = out.a7_lone.get() + (kb / f.kc * panels + pi) * 2;
                    for (int64_t s = 0; 2 * s + 1 < kc / 4; ++s)
                        for (int64_t lane_at = 0; lane_at < 2 * nr; ++lane_at) {
                            const LaneSums l =
                                lane_sums(vals.data(), nr, 2 * s, 2, static_cast<int>(lane_at / nr),
                                          lane_at % nr);
                            if (l.pos > 258 || l.neg > 258) {
                                lone[s / 64] |= std::uint64_t{1} << (s % 64);
                                break;
                            }
                        }
                }
                for (int64_t gg = 0; gg < kc / g; ++gg)
                    for (int64_t j = 0; j < nr; ++j) {
                        std::uint32_t x = 0;
                        for (int64_t q = 0; q < g; ++q) {
                            const auto u = static_cast<std::uint32_t>(
                                vals[static_cast<std::size_t>((gg * g + q) * nr + j)]);
                            x |= (g == 4 ? u & 0xffu : u & 0xffffu) << (q * (32 / g));
                        }
                        dst[gg * nr + j] = x;
                    }
            }
        }
    });
    if (bytes) {
        const auto slots = static_cast<std::size_t>(blocks * panels * 4);
        out.fix_index = std::shared_ptr<std::int64_t>(new std::int64_t[slots + 1],
                                                      std::default_delete<std::int64_t[]>());
        std::int64_t* index = out.fix_index.get();
        index[0] = 0;
        for (std::size_t i = 0; i < slots; ++i)
            index[i + 1] = index[i] + static_cast<std::int64_t>(fixes[i].size());
        if (form == QBForm::automatic) {
            // Costs per 8 rows of K and panel, relative to a group-a-step byte form without
            // corrections (bench_qgemm impl 6-8 with DSINFER_BENCH_WEIGHT_DIV=20, no
            // corrections, on the AVX2 Zen 3 VM, 1 thread, 5 rounds: paired 0.86-1.0, the
            // 16-bit form 1.16-1.26), and of one correction (0.27-0.28: paired steps in K order
            // with B drawn for 0.09 to 4.4 of them per 8 rows).
            const double units = static_cast<double>(kp / 4) / 2.0 * static_cast<double>(panels);
            int64_t single = 0;
            for (const int64_t c : single_fixes) single += c;
            const double paired_cost = 0.9 * units + 0.28 * static_cast<double>(index[slots]);
            const double single_cost = 1.0 * units + 0.28 * static_cast<double>(single);
            const double wide_cost = 1.25 * units;
            if (wide_cost < std::min(paired_cost, single_cost))
                return pack_qb(bsrc, b_unsigned, k, n, transposed, isa, QBForm::wide);
            if (single_cost < paired_cost)
                return pack_qb(bsrc, b_unsigned, k, n, transposed, isa, QBForm::bytes);
        }
        out.fixes = std::shared_ptr<QFix>(
            new QFix[static_cast<std::size_t>(std::max<std::int64_t>(index[slots], 1))],
            std::default_delete<QFix[]>());
        for (std::size_t i = 0; i < slots; ++i)
            std::copy(fixes[i].begin(), fixes[i].end(), out.fixes.get() + index[i]);
    }
    return out;
}

PackedQB pack_qb_s16(const std::int16_t* b, int64_t k, int64_t n, QIsa isa) {
    if (static_cast<int>(isa) > static_cast<int>(qgemm_isa())) isa = qgemm_isa();
    isa = supported_at_most(isa);
#if DSINFER_QGEMM_X86
    if (isa != QIsa::baseline) isa = QIsa::avx2;  // the 16-bit layout: avx2's or baseline's
#endif
    const Family& f = family(isa);
    PackedQB out = packed_shell(f, isa, k, n, false);
    const int64_t kp = out.kp, nr = f.nr, panels = out.panels;
    auto* lane = reinterpret_cast<std::uint32_t*>(out.data.get());
    std::int32_t* sums = out.colsum.get();
    auto at = [&](int64_t kk, int64_t j) -> std::uint32_t {
        return kk < k && j < n ? static_cast<std::uint16_t>(b[j * k + kk]) : 0u;
    };
    for (int64_t j = 0; j < n; ++j) {
        std::uint32_t t = 0;
        for (int64_t kk = 0; kk < k; ++kk) t += static_cast<std::uint32_t>(b[j * k + kk]);
        sums[j] = static_cast<std::int32_t>(t);
    }
    // As pack_qb's 16-bit form: block kb, panel pi at lane (kb / 2) * panels * nr + pi * (kc /
    // 2) * nr, a lane per column and pair of rows.
    for (int64_t kb = 0; kb < kp; kb += f.kc) {
        const int64_t kc = std::min(f.kc, kp - kb);
        for (int64_t pi = 0; pi < panels; ++pi) {
            std::uint32_t* dst = lane + (kb / 2) * panels * nr + pi * (kc / 2) * nr;
            for (int64_t gg = 0; gg < kc / 2; ++gg)
                for (int64_t j = 0; j < nr; ++j)
                    dst[gg * nr + j] =
                        at(kb + 2 * gg, pi * nr + j) | at(kb + 2 * gg + 1, pi * nr + j) << 16;
        }
    }
    return out;
}

std::size_t qgemm_workspace_bytes(int64_t m, const PackedQB& b, int64_t threads) noexcept {
    if (m <= 0 || b.n <= 0) return 0;
    return layout_bytes(split_for(family_of(b), m, b, std::max<int64_t>(threads, 1))) +
           64;  // alignment slack
}

namespace {

/// Some column's zero point of B, as packed, is not 0 (the row-sum term is needed).
bool b_zero_nonzero(const PackedQB& b, const QGemmParams& p) noexcept {
    const std::int32_t shift = b.b_unsigned ? 128 : 0;
    if (p.b_zeros == nullptr) return p.b_zero != shift;
    for (int64_t j = 0; j < b.n; ++j)
        if (p.b_zeros[j] != shift) return true;
    return false;
}

/// What every tile of one product shares, from its operands and parameters.
RunCtx make_ctx(const PackedQB& b, const QGemmParams& p, void* c, int64_t ldc) noexcept {
    RunCtx r{};
    r.b = &b;
    r.p = &p;
    r.c = c;
    r.ldc = ldc;
    r.out_bytes = p.out == QGemmOutput::s32 || p.out == QGemmOutput::f32 ? 4 : 1;
    r.k = b.k;
    r.za = p.a_zero + (p.a_signed ? 128 : 0);
    r.b_shift = b.b_unsigned ? 128 : 0;
    r.zb = p.b_zero - r.b_shift;
    r.zb_col = p.b_zeros;
    r.colsum = b.colsum.get();
    const bool zb_nonzero = b_zero_nonzero(b, p);
    r.zero_terms = r.za != 0 || zb_nonzero;
    const float lo = p.out == QGemmOutput::u8 ? 0.f : -128.f;
    const float hi = p.out == QGemmOutput::u8 ? 255.f : 127.f;
    r.q_lo = lo - static_cast<float>(p.y_zero);
    r.q_hi = hi - static_cast<float>(p.y_zero);
    if (p.act.kind == Activation::relu && r.q_lo < 0.f) r.q_lo = 0.f;
    r.add_finite = std::fabs(p.add.ra) <= 1e30f && std::fabs(p.add.rb) <= 1e30f;
    r.add_small = r.add_finite && std::fabs(p.add.ra) + std::fabs(p.add.rb) <= 8192.f;
    r.act_loop = p.act.kind == Activation::relu ? nullptr : activation_loop_f32(p.act);
    r.inline_store = RunCtx::Inline::none;
    if (!zb_nonzero) {
        if ((p.out == QGemmOutput::u8 || p.out == QGemmOutput::s8) && p.residual == nullptr)
            r.inline_store = RunCtx::Inline::q8;
        else if ((p.out == QGemmOutput::u8 || p.out == QGemmOutput::s8) && p.residual_col == 1 &&
                 r.add_small)
            r.inline_store = RunCtx::Inline::q8_add;
        else if (p.out == QGemmOutput::f32 &&
                 (p.act.kind == Activation::none || p.act.kind == Activation::relu))
            r.inline_store = RunCtx::Inline::f32;
        else if (p.out == QGemmOutput::s32)
            r.inline_store = RunCtx::Inline::s32;
    }
    return r;
}

}  // namespace

bool qgemm_rows_supported(const PackedQB& b, const QGemmParams& p) noexcept {
    return !b.fixed() && !p.a_signed && !b_zero_nonzero(b, p);
}

void qgemm_rows(const QRowsA& a, const PackedQB& b, void* c, int64_t ldc,
                const QGemmParams& p) noexcept {
    if (a.m <= 0 || b.n <= 0) return;
    const RunCtx r = make_ctx(b, p, c, ldc);
    family_of(b).run_rows(a, r);
}

void qgemm_store_s32(const std::int32_t* s, int64_t lds, int64_t m, const PackedQB& b, void* c,
                     int64_t ldc, const QGemmParams& p) noexcept {
    if (m <= 0 || b.n <= 0) return;
    QGemmParams q = p;  // the sums are final: no zero-point terms
    q.a_signed = false;
    q.a_zero = 0;
    q.b_zeros = nullptr;
    q.b_zero = b.b_unsigned ? 128 : 0;
    const RunCtx r = make_ctx(b, q, c, ldc);
    family_of(b).store_rows(s, lds, m, r);
}

bool qgemm_packed(int64_t m, const void* a, int64_t lda, const PackedQB& b, void* c, int64_t ldc,
                  const QGemmParams& p, void* workspace, std::size_t workspace_bytes) noexcept {
    if (b.a7()) return false;  // A must come split (qgemm_rows)
    if (m <= 0 || b.n <= 0) return true;
    const Family& f = family_of(b);
    const RunCtx r = make_ctx(b, p, c, ldc);
    const bool zb_nonzero = b_zero_nonzero(b, p);
    const auto* a8 = static_cast<const std::uint8_t*>(a);
    const int64_t threads = max_threads();
    const Split split = split_for(f, m, b, threads);
    auto* ws = static_cast<unsigned char*>(workspace);
    if (ws != nullptr) {
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        if (workspace_bytes < skip || workspace_bytes - skip < layout_bytes(split)) ws = nullptr;
        else ws += skip;
    }
    const int64_t rows_pad = (split.block_rows + f.mr - 1) / f.mr * f.mr;
    const std::size_t lane_bytes = round64(static_cast<std::size_t>(b.kp / f.group * rows_pad) * 4);
    auto a_buffer = [&](int64_t index) -> unsigned char* {
        if (ws != nullptr) return ws + static_cast<std::size_t>(index) * split.a_bytes;
        return thread_buffer(0, split.a_bytes);
    };
    auto acc_buffer = [&](int64_t index, bool& ok) -> std::uint32_t* {
        if (split.acc_bytes == 0) return nullptr;
        unsigned char* p8 =
            ws != nullptr ? ws + static_cast<std::size_t>(split.a_buffers) * split.a_bytes +
                                static_cast<std::size_t>(index) * split.acc_bytes
                          : thread_buffer(1, split.acc_bytes);
        if (p8 == nullptr) ok = false;
        return reinterpret_cast<std::uint32_t*>(p8);
    };
    const bool need_rowsum = zb_nonzero;
    std::atomic<bool> failed{false};
    if (split.by_tiles) {
        const int64_t tiles = (m + f.mr - 1) / f.mr;
        auto work = [&](int64_t index, int64_t t0, int64_t t1) {
            const int64_t r1 = std::min(m, t1 * f.mr);
            unsigned char* buf = a_buffer(index);
            bool ok = buf != nullptr;
            std::uint32_t* acc = acc_buffer(index, ok);
            if (!ok) {
                failed.store(true, std::memory_order_relaxed);
                return;
            }
            auto* ap = reinterpret_cast<std::uint32_t*>(buf);
            auto* rowsum = need_rowsum ? reinterpret_cast<std::int32_t*>(buf + lane_bytes) : nullptr;
            for (int64_t r0 = t0 * f.mr; r0 < r1; r0 += f.mc) {
                const int64_t rows = std::min(f.mc, r1 - r0);
                f.pack_tiles(a8 + r0 * lda, lda, rows, b.k, p.a_signed, ap, rowsum, 0, f.mc / f.mr);
                f.run_panels(r0, rows, 0, b.panels, ap, rowsum, r, acc);
            }
        };
        const int64_t nt = split.team;
        run_team(nt, [&](int64_t t) {
            if (tiles * t / nt < tiles * (t + 1) / nt) work(t, tiles * t / nt, tiles * (t + 1) / nt);
        });
        return !failed.load();
    }
    unsigned char* buf = a_buffer(0);
    if (buf == nullptr) return false;
    auto* ap = reinterpret_cast<std::uint32_t*>(buf);
    auto* rowsum = need_rowsum ? reinterpret_cast<std::int32_t*>(buf + lane_bytes) : nullptr;
    const int64_t team = split.team;
    for (int64_t r0 = 0; r0 < m; r0 += split.block_rows) {
        const int64_t rows = std::min(split.block_rows, m - r0);
        const int64_t block_tiles = (rows + f.mr - 1) / f.mr;
        std::atomic<int64_t> next_tile{0}, packed{0}, next_panel{0};
        auto take = [&](int64_t& p0, int64_t& p1) {
            int64_t cur = next_panel.load(std::memory_order_relaxed);
            for (;;) {
                const int64_t left = b.panels - cur;
                if (left <= 0) return false;
                const int64_t cnt = std::min(
                    left, std::clamp(left / (2 * team), split.min_panels, split.max_chunk));
                if (next_panel.compare_exchange_weak(cur, cur + cnt, std::memory_order_relaxed)) {
                    p0 = cur;
                    p1 = cur + cnt;
                    return true;
                }
            }
        };
        auto work = [&](int64_t index) {
            for (int64_t t; (t = next_tile.fetch_add(1, std::memory_order_relaxed)) < block_tiles;) {
                f.pack_tiles(a8 + r0 * lda, lda, rows, b.k, p.a_signed, ap, rowsum, t, t + 1);
                packed.fetch_add(1, std::memory_order_release);
            }
            while (packed.load(std::memory_order_acquire) < block_tiles) cpu_relax();
            bool ok = true;
            std::uint32_t* acc = acc_buffer(index, ok);
            if (!ok) {
                failed.store(true, std::memory_order_relaxed);
                return;
            }
            for (int64_t p0, p1; take(p0, p1);) f.run_panels(r0, rows, p0, p1, ap, rowsum, r, acc);
        };
        run_team(team, work);
        if (failed.load()) return false;
    }
    return true;
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
