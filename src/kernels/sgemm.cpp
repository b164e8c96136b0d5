// Packed-B f32 GEMM (see sgemm.hpp). The loops live in sgemm_kernels.inc, compiled here once
// per ISA. Blocking (BLIS-style): K in blocks of KC, so that a KC x NR slice of a B panel stays
// in L1 while the micro-kernel walks the row tiles of an A block; A in blocks of MC rows, packed
// (all of K) once per call, so that one K block of it (MC x KC) stays in L2 while the panels
// stream past. AVX2 (measured on a 2-core Zen 3): KC 256 (16 KiB of B and 6 KiB of A per tile
// in L1), MC 192 (192 KiB of packed A per K block in the 512 KiB L2; M <= 192 is one block).
//
// Threads: the row tiles of a row block (to pack) and then its column panels, in chunks (to
// compute), are taken from shared counters by whichever threads are running, so a thread that
// starts late or is preempted takes less work, and no thread waits for one that has not started
// (only for packing another thread has taken). Chunks shrink as the panels run out (guided), so
// the threads of a row block finish within about one small chunk of each other: with fixed
// chunks of 1/16 of the block they idled a quarter of a chunk on average at every block's end
// (bench_sgemm 1024 x 768 x 3072, 2 threads: 148 -> 152 GFLOP/s, medians of 6 alternating runs).
// Row blocks are of equal height. With too few panels, threads take whole row tiles instead
// and pack their own rows. Either way the tiles and K blocks, and so each element's arithmetic,
// do not depend on the split. A is packed in the caller's workspace when it is large enough.
//
// Few rows (Family::run_small, M <= 16): decoding's products read a large B once for a few
// rows of A, so they are bound by memory bandwidth, and packing A in tiles of 12 / 6 rows (a
// pass over the panels per K block, the partial sums through C) left them well below it. There
// each chunk of panels is streamed once, panel by panel, K block by K block, all M rows at a
// time (bench_sgemm BM_SgemmDecode, GB/s of B, B cold, 2 threads, AVX-512 on a 2-core Zen 4,
// medians of alternating runs on a shared machine: K x N 768 x 2048 at M = 1 19 -> 39, M = 4
// 13 -> 38, M = 16 10 -> 22; 768 x 32000 at M = 1 32 -> 33, M = 4 24 -> 30, M = 16 15 -> 22;
// a read-only sum of the same bytes 32-40. At M = 16 it runs the FMA units near their peak,
// so the tiles do no better above it).
#include "kernels/sgemm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>


#include "runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_SGEMM_X86 1
#include <immintrin.h>
#else
#define DSINFER_SGEMM_X86 0
#endif

// GCC 12's own _mm512_* headers trip -Wmaybe-uninitialized; vector-typed values crossing the
// per-ISA functions trip -Wpsabi. Neither says anything about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// What a tile store does (see finish() in sgemm_kernels.inc).
struct Epi {
    bool first, last;
    float alpha;
    const float* bias;  // at the tile's first column, or null
    GemmActivation act;
    const float* prev;  // the tile's partial sums when not in C (rows ldp apart), or null
    std::int64_t ldp;
};

/// One micro-kernel family: tile shape, blocking, A packing and the loop over a row block.
struct Family {
    int64_t mr, nr, kc, mc;
    /// Threads take whole row tiles (each packing its own A) whenever each gets at least a
    /// row block (B is then read as often as with a panel split), not only for few panels.
    bool split_rows;
    void (*pack_tiles)(const float* a, int64_t lda, int64_t rows, int64_t k, float* dst,
                       int64_t t0, int64_t t1) noexcept;
    void (*run_panels)(int64_t rows, int64_t p0, int64_t p1, const float* apacked,
                       const PackedB& b, float* c, int64_t ldc, const float* bias, float alpha,
                       GemmActivation act, float* acc) noexcept;
    /// Few rows (m <= small_m; 0 / null: none): panels [p0, p1) of C with A read in place.
    int64_t small_m;
    void (*run_small)(int64_t m, const float* a, int64_t lda, int64_t p0, int64_t p1,
                      const PackedB& b, float* c, int64_t ldc, const float* bias, float alpha,
                      GemmActivation act) noexcept;
};
using SmallFn = void (*)(int64_t m, const float* a, int64_t lda, int64_t p0, int64_t p1,
                         const PackedB& b, float* c, int64_t ldc, const float* bias,
                         float alpha, GemmActivation act) noexcept;

/// How many panels ahead the tiles prefetch B.
constexpr int64_t kPrefetchPanels = 2;

/// Few rows (Family::run_small): at least this much of B per thread, and per chunk of panels
/// a thread takes.
constexpr int64_t kSmallBytesPerThread = int64_t{128} << 10;
constexpr int64_t kSmallChunkBytes = int64_t{64} << 10;

// Each ISA level: the f32 family, then the half-width ones (B widened as loaded: bf16 by a
// 16-bit shift, f16 by vcvtph2ps) on the same tile shape and blocking (SG_W, SG_MR, SG_KC,
// SG_MC, SG_FMA and SG_SPLAT stay defined for them; sgemm_kernels.inc #undefs only the B
// macros).
#if DSINFER_SGEMM_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx2,fma"))), apply_to = function)
#endif
#define SG_W 16
#define SG_MR 12
#define SG_KC 192
#define SG_MC 144
#define SG_FMA(a, b, c) ((V)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define SG_SPLAT(p) ((V)_mm512_set1_ps(*(p)))
namespace avx512 {
#include "kernels/sgemm_kernels.inc"
}  // namespace avx512
namespace avx512_bf16w {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) ((V)_mm512_castsi512_ps(_mm512_slli_epi32( \
    _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16)))
#include "kernels/sgemm_kernels.inc"
}  // namespace avx512_bf16w
namespace avx512_f16 {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) \
    ((V)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))))
#include "kernels/sgemm_kernels.inc"
}  // namespace avx512_f16
#undef SG_FMA
#undef SG_SPLAT
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

// bf16 B in K pairs on vdpbf16ps (AVX512_BF16), A rounded to bf16 pairs as it is packed; the
// AVX-512 tile shape and blocking.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma"))), apply_to = function)
#endif
namespace avx512_bf16 {
// K blocks of 3072 (BERT-base's K in one block; the f32 family's 192): a tile's partial sums
// go through C (or the accumulation buffer) once per K block, and at 192 those passes held
// the 1024 x 768 x 768 product at 237-264 GFLOP/s on 2 threads; with 3072 and the row split
// (Family::split_rows) 420-430, the B slice (192 KiB) streamed from L2 (bench_hgemm form 1,
// docs/PLATFORM.md "Half-width weights").
#undef SG_KC
#define SG_KC 3072
#define SG_PAIRS 1
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) ((__m512bh)_mm512_loadu_si512(p))
#define SG_SPLAT(p) ((__m512bh)_mm512_set1_epi32(static_cast<int>(*(p))))
#define SG_FMA(a, b, c) ((V)_mm512_dpbf16_ps((__m512)(c), (a), (b)))
#include "kernels/sgemm_kernels.inc"
}  // namespace avx512_bf16
#undef SG_W
#undef SG_MR
#undef SG_KC
#undef SG_MC
#undef SG_FMA
#undef SG_SPLAT
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

// (F16C, for the f16 family, comes with every AVX2 CPU; simd.cpp's AVX2 level assumes it too.)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif
#define SG_W 8
#define SG_MR 6
#define SG_KC 256
#define SG_MC 192
#define SG_FMA(a, b, c) ((V)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define SG_SPLAT(p) ((V)_mm256_broadcast_ss(p))
#define SG_PACK_AVX2 1
namespace avx2 {
#include "kernels/sgemm_kernels.inc"
}  // namespace avx2
namespace avx2_bf16 {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) ((V)_mm256_castsi256_ps(_mm256_slli_epi32( \
    _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16)))
#include "kernels/sgemm_kernels.inc"
}  // namespace avx2_bf16
namespace avx2_f16 {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) ((V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))
#include "kernels/sgemm_kernels.inc"
}  // namespace avx2_f16
#undef SG_W
#undef SG_MR
#undef SG_KC
#undef SG_MC
#undef SG_FMA
#undef SG_SPLAT
#undef SG_PACK_AVX2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#endif

inline auto splat4(const float* p) noexcept {
    typedef float V4 __attribute__((vector_size(16)));
    const float s = *p;
    return V4{s, s, s, s};
}

// Portable widening of 4 half-width values (exact: every f16 and bf16 is a float).
namespace widen {
typedef float V4 __attribute__((vector_size(16)));
typedef std::uint32_t U4 __attribute__((vector_size(16)));
inline V4 bits(U4 u) noexcept {
    V4 v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}
typedef std::uint16_t H4 __attribute__((vector_size(8)));
/// Four halves zero-extended to 32 bits.
inline U4 load4(const std::uint16_t* p) noexcept {
    H4 h;
    std::memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, U4);
}
inline V4 bf16(const std::uint16_t* p) noexcept { return bits(load4(p) << 16); }
/// IEEE half to float: exponent and mantissa moved into place and scaled by 2^112 (rebiasing the
/// exponent; exact, subnormal halves become normal floats), inf / NaN (2^16 and above after
/// the scaling) given the all-ones exponent, the sign put back.
inline V4 f16(const std::uint16_t* p) noexcept {
    const U4 h = load4(p);
    const V4 f = bits((h & 0x7fffu) << 13) * 0x1p112f;
    U4 o;
    std::memcpy(&o, &f, sizeof o);
    o |= (U4)(f >= 65536.f) & (255u << 23);
    return bits(o | ((h & 0x8000u) << 16));
}
}  // namespace widen

#define SG_W 4
#define SG_MR 6
#define SG_KC 256
#define SG_MC 96
#define SG_FMA(a, b, c) ((c) + (a) * (b))
#define SG_SPLAT(p) splat4(p)
namespace baseline {
#include "kernels/sgemm_kernels.inc"
}  // namespace baseline
namespace baseline_bf16 {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) widen::bf16(p)
#include "kernels/sgemm_kernels.inc"
}  // namespace baseline_bf16
namespace baseline_f16 {
#define SG_BT std::uint16_t
#define SG_BDATA(b) ((b).half.get())
#define SG_LDB(p) widen::f16(p)
#include "kernels/sgemm_kernels.inc"
}  // namespace baseline_f16
#undef SG_W
#undef SG_MR
#undef SG_KC
#undef SG_MC
#undef SG_FMA
#undef SG_SPLAT

/// The f32 family of `isa`: its tile shape and blocking are every family's at that ISA.
const Family& family(fast::Isa isa) noexcept {
#if DSINFER_SGEMM_X86
    if (isa == fast::Isa::avx512) return avx512::kFamily;
    if (isa == fast::Isa::avx2) return avx2::kFamily;
#endif
    (void)isa;
    return baseline::kFamily;
}

/// The family that runs `b` (its ISA, element type and layout).
const Family& family(const PackedB& b) noexcept {
    if (b.dtype == DType::f32) return family(b.isa);
#if DSINFER_SGEMM_X86
    if (b.pairs) return avx512_bf16::kFamily;
    const bool bf = b.dtype == DType::bf16;
    if (b.isa == fast::Isa::avx512) return bf ? avx512_bf16w::kFamily : avx512_f16::kFamily;
    if (b.isa == fast::Isa::avx2) return bf ? avx2_bf16::kFamily : avx2_f16::kFamily;
#endif
    return b.dtype == DType::bf16 ? baseline_bf16::kFamily : baseline_f16::kFamily;
}

struct AlignedDelete {
    void operator()(float* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};

float* aligned_floats(std::size_t count) {
    return static_cast<float*>(
        ::operator new[](std::max<std::size_t>(count, 1) * sizeof(float), std::align_val_t{64}));
}

/// This thread's A-packing buffer of at least `count` floats (kept for later calls), or null
/// when it cannot be allocated.
float* apack_buffer(std::size_t count) noexcept {
    thread_local std::unique_ptr<float[], AlignedDelete> buf;
    thread_local std::size_t size = 0;
    if (size < count) {
        buf.reset();
        size = 0;
        try {
            buf.reset(aligned_floats(count));
        } catch (const std::bad_alloc&) {
            return nullptr;
        }
        size = count;
    }
    return buf.get();
}

/// A spin-wait hint.
inline void cpu_relax() noexcept {
#if DSINFER_SGEMM_X86
    _mm_pause();
#endif
}

}  // namespace

fast::Isa sgemm_isa() noexcept { return fast::active_isa(); }

bool sgemm_bf16_dot(fast::Isa isa) noexcept {
#if DSINFER_SGEMM_X86
    static const bool has = __builtin_cpu_supports("avx512bf16");
    return has && isa == fast::Isa::avx512 && sgemm_isa() == fast::Isa::avx512;
#else
    (void)isa;
    return false;
#endif
}

const char* packed_b_target(const PackedB& b) noexcept {
    return b.pairs ? "avx512_bf16" : fast::isa_name(b.isa);
}

PackedB narrow_packed_b(const PackedB& b, DType dtype, bool bf16_dot) {
    PackedB out = b;
    out.data.reset();
    out.dtype = dtype;
    out.pairs = dtype == DType::bf16 && bf16_dot && sgemm_bf16_dot(b.isa);
#if DSINFER_SGEMM_X86
    if (out.pairs) out.kc = avx512_bf16::kFamily.kc;
#endif
    const auto count = static_cast<std::size_t>(out.panels * out.nr * out.k_stored());
    auto* h = static_cast<std::uint16_t*>(::operator new[](
        std::max<std::size_t>(count, 1) * sizeof(std::uint16_t), std::align_val_t{64}));
    out.half = std::shared_ptr<std::uint16_t>(h, [](std::uint16_t* p) {
        ::operator delete[](p, std::align_val_t{64});
    });
    if (count == 0) return out;
    const fast::SimdOps& s = fast::simd();
    const auto convert = dtype == DType::bf16 ? s.f32_to_bf16 : s.f32_to_f16;
    const float* src = b.data.get();
    if (!out.pairs) {  // the same positions: one conversion of the whole buffer
        convert(src, h, static_cast<std::int64_t>(count));
        return out;
    }
    std::fill(h, h + count, std::uint16_t{0});  // an odd K's partner rows
    const int64_t k = b.k;
    parallel_for(b.panels, 1, [&](int64_t p0, int64_t p1) {
        std::uint16_t row[64];
        for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t pi = p0; pi < p1; ++pi) {
                const int64_t j0 = pi * b.nr;
                convert(src + packed_b_index(b, kk, j0), row, b.nr);
                for (int64_t j = 0; j < b.nr; ++j) h[packed_b_index(out, kk, j0 + j)] = row[j];
            }
    });
    return out;
}

PackedB packed_b_zeros(int64_t k, int64_t n, fast::Isa isa) {
    if (static_cast<int>(isa) > static_cast<int>(sgemm_isa())) isa = sgemm_isa();
    const Family& f = family(isa);
    PackedB out;
    out.k = k;
    out.n = n;
    out.nr = f.nr;
    out.kc = f.kc;
    out.isa = isa;
    out.panels = (n + f.nr - 1) / f.nr;
    const auto count = static_cast<std::size_t>(out.panels * f.nr * k);
    float* p = aligned_floats(count);
    out.data = std::shared_ptr<float>(p, AlignedDelete{});
    if (n % f.nr != 0) std::fill(p, p + count, 0.f);  // else every float gets written
    return out;
}

PackedB pack_b(const float* b, int64_t k, int64_t n, bool transposed, fast::Isa isa,
               DType dtype, bool bf16_dot) {
    if (dtype != DType::f32)
        return narrow_packed_b(pack_b(b, k, n, transposed, isa), dtype, bf16_dot);
    PackedB out = packed_b_zeros(k, n, isa);
    const Family& f = family(out.isa);
    float* p = out.data.get();
    // Block kb (rows [kb, kb + kc) of B) starts at kb * panels * nr; in it, panel pi starts at
    // pi * kc * nr and holds kc rows of nr floats.
    const int64_t nr = f.nr, panels = out.panels;
    parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t kb = 0; kb < k; kb += f.kc) {
            const int64_t kc = std::min(f.kc, k - kb);
            for (int64_t pi = p0; pi < p1; ++pi) {
                float* dst = p + kb * panels * nr + pi * kc * nr;
                const int64_t col = pi * nr, w = std::min(nr, n - col);  // real columns
                if (transposed) {  // B^T row col + j, columns [kb, kb + kc)
                    for (int64_t j = 0; j < w; ++j) {
                        const float* src = b + (col + j) * k + kb;
                        for (int64_t kk = 0; kk < kc; ++kk) dst[kk * nr + j] = src[kk];
                    }
                } else {
                    for (int64_t kk = 0; kk < kc; ++kk)
                        std::memcpy(dst + kk * nr, b + (kb + kk) * n + col,
                                    static_cast<std::size_t>(w) * sizeof(float));
                }
            }
        }
    });
    return out;
}

namespace {

/// How sgemm_packed splits one product (the same for its workspace query).
struct Split {
    bool by_tiles = false;   ///< threads take whole row tiles (few panels, or split_rows)
    int64_t block_rows = 0;  ///< rows per row block (a multiple of the tile height, <= mc)
    int64_t team = 1;        ///< threads
    int64_t min_panels = 1, max_chunk = 1;  ///< panel chunks (not by tiles)
    int64_t a_buffers = 0;   ///< A-packing buffers: one per thread by tiles, else one shared
    int64_t a_floats = 0;    ///< floats of one A buffer
    int64_t acc_floats = 0;  ///< floats of one thread's accumulation buffer (0: K in one block)
};

/// How many sets of a 64-set L1 the rows of a tile of C, ldc floats apart, fall in: 1-2 when
/// ldc is a multiple of 1 or 2 KiB (BERT's 3072 columns), 4 at 768 columns (3 KiB rows). Storing
/// and reloading those rows across K blocks evicts the B slice the tiles share.
int c_row_sets(int64_t ldc, int64_t mr) noexcept {
    bool seen[64] = {};
    int distinct = 0;
    for (int64_t i = 0; i < mr; ++i) {
        const auto set = static_cast<std::size_t>((i * ldc * 4 / 64) % 64);
        if (!seen[set]) ++distinct;
        seen[set] = true;
    }
    return distinct;
}

Split split_for(const Family& f, int64_t m, int64_t k, int64_t n, int64_t ldc,
                int64_t threads) noexcept {
    Split s;
    const int64_t panels = (n + f.nr - 1) / f.nr, tiles = (m + f.mr - 1) / f.mr;
    // Few panels (N <= 256 at 2 threads): whole row tiles per thread, each packing its own rows.
    // Split by panels, the chunks of 3 panels left threads idle at each row block's end
    // (2 threads: 1568 x 1152 x 128 105 -> 147 GFLOP/s, 784 x 2304 x 256 130 -> 145).
    s.by_tiles =
        (panels <= 8 * threads && tiles >= 2 * threads) || (f.split_rows && m >= threads * f.mc);
    int64_t acc_panels = panels;  // the most panels one run_panels call covers
    if (s.by_tiles) {
        s.block_rows = std::min(f.mc, tiles * f.mr);
        s.team = threads;
        s.a_buffers = threads;
    } else {
        // Row blocks of equal height (whole tiles): M = 1024 at mc 192 is 5 blocks of 174 rows
        // and one of 154, not 5 of 192 and a thin one of 64 over which B is read just the same.
        const int64_t blocks = (m + f.mc - 1) / f.mc;
        s.block_rows = ((m + blocks - 1) / blocks + f.mr - 1) / f.mr * f.mr;
        // Chunks: at most about 1/8 of a thread's share (a chunk's C, a row block by its
        // columns, then stays in L2 across the K blocks), at least ~1 MFLOP, and, as the panels
        // run out, half of what is left per thread (guided). Each chunk reads the row block's
        // packed A once per K block: when A is larger than half of a 512 KiB L2 it comes from
        // L3 for every chunk, so a chunk then does at least 24 flops per byte of A (3 panels of
        // 16 columns; 1-panel chunks cost 8% at 128 x 3072 x 768 on 2 threads).
        const int64_t flops_per_panel = 2 * s.block_rows * k * f.nr;
        s.min_panels = std::max<int64_t>(1, (int64_t{1} << 20) / flops_per_panel);
        if (s.block_rows * k * static_cast<int64_t>(sizeof(float)) > (int64_t{256} << 10))
            s.min_panels = std::max<int64_t>(s.min_panels, (48 + f.nr - 1) / f.nr);
        s.max_chunk = std::max(s.min_panels, (panels + 8 * threads - 1) / (8 * threads));
        s.team = std::min(threads, (panels + s.min_panels - 1) / s.min_panels);
        s.a_buffers = 1;
        acc_panels = std::min(panels, s.max_chunk);
    }
    s.a_floats = s.block_rows * k;
    // Partial sums go to a contiguous buffer only where C's own rows collide in L1: in two
    // sets at any K; in four (BERT's 768 columns) only beyond 4 K blocks (K = 3072: 123.7 ->
    // 127.2 GFLOP/s at 1024 rows, 116.0 -> 128.7 at 128 rows, medians of 8 alternating runs,
    // 2 threads); at K = 768 the buffer's extra traffic cost as much as it saved.
    const int sets = c_row_sets(ldc, f.mr);
    if (k > f.kc && (sets <= 2 || (sets <= 4 && k > 4 * f.kc)))
        s.acc_floats = acc_panels * s.block_rows * f.nr;
    return s;
}

std::size_t aligned_bytes(int64_t floats) noexcept {
    return (static_cast<std::size_t>(floats) * sizeof(float) + 63) / 64 * 64;
}

/// Workspace layout: the A buffers, then one accumulation buffer per thread.
std::size_t layout_bytes(const Split& s) noexcept {
    return static_cast<std::size_t>(s.a_buffers) * aligned_bytes(s.a_floats) +
           static_cast<std::size_t>(s.team) * aligned_bytes(s.acc_floats);
}

/// Bytes of workspace family f's split of one product needs.
std::size_t workspace_bytes_for(const Family& f, int64_t m, int64_t k, int64_t n, int64_t threads,
                                int64_t ldc) noexcept {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    return layout_bytes(split_for(f, m, k, n, ldc > 0 ? ldc : n, std::max<int64_t>(threads, 1))) +
           64;  // alignment slack
}

}  // namespace

std::size_t sgemm_workspace_bytes(int64_t m, int64_t k, int64_t n, fast::Isa isa,
                                  int64_t threads, int64_t ldc) noexcept {
    if (static_cast<int>(isa) > static_cast<int>(sgemm_isa())) isa = sgemm_isa();
    return workspace_bytes_for(family(isa), m, k, n, threads, ldc);
}

std::size_t sgemm_workspace_bytes(int64_t m, const PackedB& b, int64_t threads,
                                  int64_t ldc) noexcept {
    return workspace_bytes_for(family(b), m, b.k, b.n, threads, ldc);
}

bool sgemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, float* c,
                  int64_t ldc, const float* bias, float alpha, GemmActivation act,
                  void* workspace, std::size_t workspace_bytes) noexcept {
    if (m <= 0 || b.n <= 0) return true;
    if (b.k == 0) {  // empty sum: alpha * 0 + bias
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < b.n; ++j) {
                float v = bias != nullptr ? bias[j] : 0.f;
                if (act == GemmActivation::relu) v = std::max(v, 0.f);
                c[i * ldc + j] = v;
            }
        return true;
    }
    const Family& f = family(b);
    const int64_t threads = max_threads();
    if (m <= f.small_m) {
        // Few rows (decoding): B read once, in chunks of column panels from a shared counter
        // (guided, as below), each thread computing every row of its panels; no workspace.
        const int64_t panel_bytes =
            b.k * f.nr * static_cast<int64_t>(b.dtype == DType::f32 ? 4 : 2);
        const int64_t team =
            std::clamp<int64_t>(b.panels * panel_bytes / kSmallBytesPerThread, 1,
                                std::min(threads, b.panels));
        const int64_t min_panels = std::max<int64_t>(1, kSmallChunkBytes / panel_bytes);
        std::atomic<int64_t> next_panel{0};
        run_team(team, [&](int64_t) {
            for (int64_t cur = next_panel.load(std::memory_order_relaxed);;) {
                const int64_t left = b.panels - cur;
                if (left <= 0) return;
                const int64_t n = std::min(left, std::max(min_panels, left / (2 * team)));
                if (next_panel.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed)) {
                    f.run_small(m, a, lda, cur, cur + n, b, c, ldc, bias, alpha, act);
                    cur = next_panel.load(std::memory_order_relaxed);
                }
            }
        });
        return true;
    }
    const Split split = split_for(f, m, b.k, b.n, ldc, threads);
    // The caller's workspace, when it holds the whole layout (64-byte aligned inside it);
    // otherwise A goes to buffers kept per thread and partial sums to C.
    auto* ws = static_cast<unsigned char*>(workspace);
    if (ws != nullptr) {
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        if (workspace_bytes < skip || workspace_bytes - skip < layout_bytes(split)) ws = nullptr;
        else ws += skip;
    }
    auto a_buffer = [&](int64_t index) -> float* {
        if (ws != nullptr)
            return reinterpret_cast<float*>(ws + static_cast<std::size_t>(index) *
                                                     aligned_bytes(split.a_floats));
        return apack_buffer(static_cast<std::size_t>(split.a_floats));  // null: no memory
    };
    auto acc_buffer = [&](int64_t index) -> float* {
        if (ws == nullptr || split.acc_floats == 0) return nullptr;
        return reinterpret_cast<float*>(
            ws + static_cast<std::size_t>(split.a_buffers) * aligned_bytes(split.a_floats) +
            static_cast<std::size_t>(index) * aligned_bytes(split.acc_floats));
    };
    if (split.by_tiles) {
        // Contiguous ranges of row tiles per thread, each packing its own rows.
        const int64_t tiles = (m + f.mr - 1) / f.mr;
        std::atomic<bool> failed{false};
        auto work = [&](int64_t index, int64_t t0, int64_t t1) {
            const int64_t r1 = std::min(m, t1 * f.mr);
            float* ap = a_buffer(index);
            if (ap == nullptr) {
                failed.store(true, std::memory_order_relaxed);
                return;
            }
            for (int64_t r0 = t0 * f.mr; r0 < r1; r0 += f.mc) {
                const int64_t rows = std::min(f.mc, r1 - r0);
                f.pack_tiles(a + r0 * lda, lda, rows, b.k, ap, 0, f.mc / f.mr);
                f.run_panels(rows, 0, b.panels, ap, b, c + r0 * ldc, ldc, bias, alpha, act,
                             acc_buffer(index));
            }
        };
        const int64_t nt = split.team;
        run_team(nt, [&](int64_t t) {
            if (tiles * t / nt < tiles * (t + 1) / nt) work(t, tiles * t / nt, tiles * (t + 1) / nt);
        });
        return !failed.load();
    }
    float* ap = a_buffer(0);
    if (ap == nullptr) return false;
    const int64_t team = split.team;
    for (int64_t r0 = 0; r0 < m; r0 += split.block_rows) {
        const int64_t rows = std::min(split.block_rows, m - r0);
        const int64_t block_tiles = (rows + f.mr - 1) / f.mr;
        // Row tiles to pack and panel chunks to run, both taken from counters by whichever
        // threads are running; a thread waits only for packing that another thread has taken.
        std::atomic<int64_t> next_tile{0}, packed{0}, next_panel{0};
        auto take = [&](int64_t& p0, int64_t& p1) {
            int64_t cur = next_panel.load(std::memory_order_relaxed);
            for (;;) {
                const int64_t left = b.panels - cur;
                if (left <= 0) return false;
                const int64_t n =
                    std::min(left, std::clamp(left / (2 * team), split.min_panels, split.max_chunk));
                if (next_panel.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed)) {
                    p0 = cur;
                    p1 = cur + n;
                    return true;
                }
            }
        };
        auto work = [&](int64_t index) {
            for (int64_t t; (t = next_tile.fetch_add(1, std::memory_order_relaxed)) < block_tiles;) {
                f.pack_tiles(a + r0 * lda, lda, rows, b.k, ap, t, t + 1);
                packed.fetch_add(1, std::memory_order_release);
            }
            while (packed.load(std::memory_order_acquire) < block_tiles) cpu_relax();
            float* acc = acc_buffer(index);
            for (int64_t p0, p1; take(p0, p1);)
                f.run_panels(rows, p0, p1, ap, b, c + r0 * ldc, ldc, bias, alpha, act, acc);
        };
        run_team(team, work);
    }
    return true;
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
