// Packed-B f32 GEMM (see sgemm.hpp). Blocking: K in blocks of kKC (a kKC x kNR slice of a B
// panel, 32 KiB, stays in L1 while the micro-kernel walks down the rows of A), rows of A in
// blocks of kMC (kMC x kKC of A stays in L2).
#include "cpu/fast/sgemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/parallel.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

constexpr int64_t kNR = kSgemmNR;
constexpr int64_t kMR = 6;
constexpr int64_t kKC = 512;
constexpr int64_t kMC = 96;

/// Writes an accumulated kMR x kNR tile (row-major in `acc`) into C: first K block stores,
/// later ones add; the last one applies alpha, bias and the activation.
struct Epi {
    bool first, last;
    float alpha;
    const float* bias;  // at the tile's first column, or null
    GemmActivation act;
};

inline void finish_tile(const float* acc, float* c, int64_t ldc, int64_t mr, int64_t nr,
                        const Epi& e) noexcept {
    for (int64_t i = 0; i < mr; ++i) {
        float* row = c + i * ldc;
        for (int64_t j = 0; j < nr; ++j) {
            float v = acc[i * kNR + j];
            if (!e.first) v += row[j];
            if (e.last) {
                v *= e.alpha;
                if (e.bias != nullptr) v += e.bias[j];
                if (e.act == GemmActivation::relu) v = std::max(v, 0.f);
            }
            row[j] = v;
        }
    }
}

/// Portable micro-kernel: acc = A[mr rows, kc] · Bpanel[kc, kNR].
void micro_portable(int64_t kc, const float* a, int64_t lda, const float* bp, int64_t mr,
                    float* acc) noexcept {
    std::fill(acc, acc + kMR * kNR, 0.f);
    for (int64_t i = 0; i < mr; ++i) {
        const float* ar = a + i * lda;
        float* cr = acc + i * kNR;
        for (int64_t p = 0; p < kc; ++p) {
            const float av = ar[p];
            const float* br = bp + p * kNR;
            for (int64_t j = 0; j < kNR; ++j) cr[j] += av * br[j];
        }
    }
}

/// AVX2+FMA micro-kernel: a 6 x 16 block of C in 12 ymm registers; B rows are two aligned
/// loads, A values are broadcasts. Rows beyond mr read row 0 again and are discarded.
__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const float* a, int64_t lda,
                                                     const float* bp, int64_t mr,
                                                     float* acc) noexcept {
    const float* r[kMR];
    for (int64_t i = 0; i < kMR; ++i) r[i] = a + (i < mr ? i : 0) * lda;
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_load_ps(bp + p * kNR);
        const __m256 b1 = _mm256_load_ps(bp + p * kNR + 8);
        __m256 av = _mm256_broadcast_ss(r[0] + p);
        c00 = _mm256_fmadd_ps(av, b0, c00);
        c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(r[1] + p);
        c10 = _mm256_fmadd_ps(av, b0, c10);
        c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(r[2] + p);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(r[3] + p);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(r[4] + p);
        c40 = _mm256_fmadd_ps(av, b0, c40);
        c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(r[5] + p);
        c50 = _mm256_fmadd_ps(av, b0, c50);
        c51 = _mm256_fmadd_ps(av, b1, c51);
    }
    _mm256_store_ps(acc + 0 * kNR, c00);
    _mm256_store_ps(acc + 0 * kNR + 8, c01);
    _mm256_store_ps(acc + 1 * kNR, c10);
    _mm256_store_ps(acc + 1 * kNR + 8, c11);
    _mm256_store_ps(acc + 2 * kNR, c20);
    _mm256_store_ps(acc + 2 * kNR + 8, c21);
    _mm256_store_ps(acc + 3 * kNR, c30);
    _mm256_store_ps(acc + 3 * kNR + 8, c31);
    _mm256_store_ps(acc + 4 * kNR, c40);
    _mm256_store_ps(acc + 4 * kNR + 8, c41);
    _mm256_store_ps(acc + 5 * kNR, c50);
    _mm256_store_ps(acc + 5 * kNR + 8, c51);
}

/// AVX2 epilogue of a full 6 x 16 tile held in `acc` (aligned): the same arithmetic as
/// finish_tile, in the same order, so full and edge tiles round identically.
__attribute__((target("avx2,fma"))) void finish_full_avx2(const float* acc, float* c, int64_t ldc,
                                                           const Epi& e) noexcept {
    const __m256 alpha = _mm256_set1_ps(e.alpha);
    const __m256 zero = _mm256_setzero_ps();
    __m256 b0 = zero, b1 = zero;
    if (e.last && e.bias != nullptr) {
        b0 = _mm256_loadu_ps(e.bias);
        b1 = _mm256_loadu_ps(e.bias + 8);
    }
    for (int64_t i = 0; i < kMR; ++i) {
        float* row = c + i * ldc;
        __m256 v0 = _mm256_load_ps(acc + i * kNR);
        __m256 v1 = _mm256_load_ps(acc + i * kNR + 8);
        if (!e.first) {
            v0 = _mm256_add_ps(v0, _mm256_loadu_ps(row));
            v1 = _mm256_add_ps(v1, _mm256_loadu_ps(row + 8));
        }
        if (e.last) {
            v0 = _mm256_mul_ps(v0, alpha);
            v1 = _mm256_mul_ps(v1, alpha);
            if (e.bias != nullptr) {
                v0 = _mm256_add_ps(v0, b0);
                v1 = _mm256_add_ps(v1, b1);
            }
            if (e.act == GemmActivation::relu) {
                // max(v, 0) with v first, like std::max(v, 0.f): NaN stays NaN.
                v0 = _mm256_max_ps(zero, v0);
                v1 = _mm256_max_ps(zero, v1);
            }
        }
        _mm256_storeu_ps(row, v0);
        _mm256_storeu_ps(row + 8, v1);
    }
}

using MicroKernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t,
                             float*) noexcept;

MicroKernel pick_kernel() noexcept {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &micro_avx2;
    return &micro_portable;
}

const MicroKernel kMicro = pick_kernel();

/// Rows [r0, r1) x panels [p0, p1) of C.
void gemm_block(int64_t r0, int64_t r1, int64_t p0, int64_t p1, const float* a, int64_t lda,
                const PackedB& b, float* c, int64_t ldc, const float* bias, float alpha,
                GemmActivation act) noexcept {
    alignas(64) float acc[kMR * kNR];
    const float* packed = b.data.get();
    for (int64_t kb = 0; kb < b.k; kb += kKC) {
        const int64_t kc = std::min(kKC, b.k - kb);
        Epi e{kb == 0, kb + kc >= b.k, alpha, nullptr, act};
        for (int64_t ib = r0; ib < r1; ib += kMC) {
            const int64_t ie = std::min(ib + kMC, r1);
            for (int64_t p = p0; p < p1; ++p) {
                const float* bp = packed + p * b.k * kNR + kb * kNR;
                const int64_t col = p * kNR;
                const int64_t nr = std::min(kNR, b.n - col);
                e.bias = bias != nullptr ? bias + col : nullptr;
                for (int64_t i = ib; i < ie; i += kMR) {
                    const int64_t mr = std::min(kMR, ie - i);
                    kMicro(kc, a + i * lda + kb, lda, bp, mr, acc);
                    if (mr == kMR && nr == kNR && kMicro == &micro_avx2)
                        finish_full_avx2(acc, c + i * ldc + col, ldc, e);
                    else
                        finish_tile(acc, c + i * ldc + col, ldc, mr, nr, e);
                }
            }
        }
    }
}

}  // namespace

bool sgemm_vectorized() noexcept { return kMicro == &micro_avx2; }

PackedB pack_b(const float* b, int64_t k, int64_t n, bool transposed) {
    PackedB out;
    out.k = k;
    out.n = n;
    out.panels = (n + kNR - 1) / kNR;
    const std::size_t count = static_cast<std::size_t>(out.panels * k * kNR);
    auto* p = static_cast<float*>(::operator new[](std::max<std::size_t>(count, 1) * sizeof(float),
                                                   std::align_val_t{64}));
    out.data = std::shared_ptr<float>(p, [](float* q) { ::operator delete[](q, std::align_val_t{64}); });
    parallel_for(out.panels, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t pi = p0; pi < p1; ++pi) {
            float* dst = p + pi * k * kNR;
            for (int64_t kk = 0; kk < k; ++kk)
                for (int64_t j = 0; j < kNR; ++j) {
                    const int64_t col = pi * kNR + j;
                    dst[kk * kNR + j] =
                        col < n ? (transposed ? b[col * k + kk] : b[kk * n + col]) : 0.f;
                }
        }
    });
    return out;
}

void sgemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, float* c,
                  int64_t ldc, const float* bias, float alpha, GemmActivation act) noexcept {
    if (m <= 0 || b.n <= 0) return;
    if (b.k == 0) {  // empty sum: alpha * 0 + bias
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < b.n; ++j) {
                float v = bias != nullptr ? bias[j] : 0.f;
                if (act == GemmActivation::relu) v = std::max(v, 0.f);
                c[i * ldc + j] = v;
            }
        return;
    }
    // Split the column panels among threads (each streams its share of B once per row block);
    // with fewer panels than threads, split rows (in whole micro-tiles) instead.
    const int64_t threads = max_threads();
    const int64_t flops_per_panel = 2 * m * b.k * kNR;
    const int64_t min_panels = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(flops_per_panel, 1));
    if (b.panels >= 2 * threads || m < 2 * kMR * threads) {
        parallel_for(b.panels, min_panels, [&](int64_t p0, int64_t p1) {
            gemm_block(0, m, p0, p1, a, lda, b, c, ldc, bias, alpha, act);
        });
    } else {
        const int64_t tiles = (m + kMR - 1) / kMR;
        parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
            gemm_block(t0 * kMR, std::min(m, t1 * kMR), 0, b.panels, a, lda, b, c, ldc, bias,
                       alpha, act);
        });
    }
}

}  // namespace dsinfer::detail
