// INT8 2-D convolution on qgemm (see qconv.hpp): NCHW -> NHWC bytes, im2col rows of
// (kh, kw, c) runs, qgemm_packed per group, C transposed back to NCHW. The transposes are
// blocked 16 x 16 (bytes) and 4 x 4 (32-bit) register transposes where SSE2 exists.
#include "kernels/qconv.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "runtime/parallel.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#define DSINFER_QCONV_SSE2 1
#else
#define DSINFER_QCONV_SSE2 0
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail {
namespace {

using std::int64_t;

constexpr std::size_t align64(std::size_t b) noexcept { return (b + 63) & ~std::size_t{63}; }

#if DSINFER_QCONV_SSE2
/// One round of the 16 x 16 transpose: rows 2q and 2q + 1 interleaved in units of `Unit`
/// bytes, the low halves to row q, the high halves to row q + 8.
template <int Unit>
inline void interleave_round(__m128i (&r)[16]) noexcept {
    __m128i n[16];
    for (int q = 0; q < 8; ++q) {
        const __m128i a = r[2 * q], b = r[2 * q + 1];
        if constexpr (Unit == 1) {
            n[q] = _mm_unpacklo_epi8(a, b);
            n[q + 8] = _mm_unpackhi_epi8(a, b);
        } else if constexpr (Unit == 2) {
            n[q] = _mm_unpacklo_epi16(a, b);
            n[q + 8] = _mm_unpackhi_epi16(a, b);
        } else if constexpr (Unit == 4) {
            n[q] = _mm_unpacklo_epi32(a, b);
            n[q + 8] = _mm_unpackhi_epi32(a, b);
        } else {
            n[q] = _mm_unpacklo_epi64(a, b);
            n[q + 8] = _mm_unpackhi_epi64(a, b);
        }
    }
    for (int q = 0; q < 16; ++q) r[q] = n[q];
}
#endif

/// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (bytes).
void transpose8(const std::uint8_t* src, int64_t lds, std::uint8_t* dst, int64_t ldd, int64_t rows,
                int64_t cols) noexcept {
    int64_t i = 0;
#if DSINFER_QCONV_SSE2
    // After the four rounds, row t holds column kCol[t] (t's 4 bits reversed).
    static constexpr int kCol[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    for (; i + 16 <= rows; i += 16) {
        int64_t j = 0;
        for (; j + 16 <= cols; j += 16) {
            __m128i r[16];
            for (int q = 0; q < 16; ++q)
                r[q] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i + q) * lds + j));
            interleave_round<1>(r);
            interleave_round<2>(r);
            interleave_round<4>(r);
            interleave_round<8>(r);
            for (int t = 0; t < 16; ++t)
                _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (j + kCol[t]) * ldd + i), r[t]);
        }
        for (; j < cols; ++j)
            for (int64_t q = 0; q < 16; ++q) dst[j * ldd + i + q] = src[(i + q) * lds + j];
    }
#endif
    for (; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

/// The same for 32-bit elements (4 x 4 register transposes).
void transpose32(const std::uint32_t* src, int64_t lds, std::uint32_t* dst, int64_t ldd,
                 int64_t rows, int64_t cols) noexcept {
    int64_t i = 0;
#if DSINFER_QCONV_SSE2
    for (; i + 4 <= rows; i += 4) {
        int64_t j = 0;
        for (; j + 4 <= cols; j += 4) {
            const auto ld = [&](int q) {
                return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i + q) * lds + j));
            };
            const __m128i r0 = ld(0), r1 = ld(1), r2 = ld(2), r3 = ld(3);
            const __m128i a = _mm_unpacklo_epi32(r0, r1), b = _mm_unpackhi_epi32(r0, r1);
            const __m128i c = _mm_unpacklo_epi32(r2, r3), d = _mm_unpackhi_epi32(r2, r3);
            const auto st = [&](int q, __m128i v) {
                _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (j + q) * ldd + i), v);
            };
            st(0, _mm_unpacklo_epi64(a, c));
            st(1, _mm_unpackhi_epi64(a, c));
            st(2, _mm_unpacklo_epi64(b, d));
            st(3, _mm_unpackhi_epi64(b, d));
        }
        for (; j < cols; ++j)
            for (int64_t q = 0; q < 4; ++q) dst[j * ldd + i + q] = src[(i + q) * lds + j];
    }
#endif
    for (; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

/// Block edge of the parallel transposes (a 64 x 64 block of 32-bit values is 16 KiB).
constexpr int64_t kBlock = 64;

/// dst [cols, rows] (leading dim ldd) = src [rows, cols]^T, elements of `esize` bytes (1 or 4),
/// over threads in blocks of kBlock x kBlock.
void parallel_transpose(const void* src, int64_t lds, void* dst, int64_t ldd, int64_t rows,
                        int64_t cols, std::size_t esize) noexcept {
    const int64_t rb = (rows + kBlock - 1) / kBlock, cb = (cols + kBlock - 1) / kBlock;
    const int64_t grain = esize == 1 ? 16 : 4;  // blocks per chunk (a parallel region's cost)
    parallel_for(rb * cb, grain, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r0 = b / cb * kBlock, c0 = b % cb * kBlock;
            const int64_t rn = std::min(kBlock, rows - r0), cn = std::min(kBlock, cols - c0);
            if (esize == 1)
                transpose8(static_cast<const std::uint8_t*>(src) + r0 * lds + c0, lds,
                           static_cast<std::uint8_t*>(dst) + c0 * ldd + r0, ldd, rn, cn);
            else
                transpose32(static_cast<const std::uint32_t*>(src) + r0 * lds + c0, lds,
                            static_cast<std::uint32_t*>(dst) + c0 * ldd + r0, ldd, rn, cn);
        }
    });
}

/// x [c, hw] (one image, float32) quantized as fx says into nhwc [hw, c].
void quantize_to_nhwc(const float* x, int64_t c, int64_t hw, const QConvFloatInput& fx,
                      std::uint8_t* nhwc) noexcept {
    const DynamicQuantParams& q = fx.q;
    constexpr int64_t kPix = 256, kCh = 64;
    const int64_t blocks = (hw + kPix - 1) / kPix;
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
        alignas(64) std::uint8_t tmp[kCh * kPix];
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t p0 = b * kPix, pn = std::min(kPix, hw - p0);
            for (int64_t c0 = 0; c0 < c; c0 += kCh) {
                const int64_t cn = std::min(kCh, c - c0);
                for (int64_t ci = 0; ci < cn; ++ci) {
                    if (q.usable) fx.quantize(x + (c0 + ci) * hw + p0, pn, q, tmp + ci * kPix);
                    else std::memset(tmp + ci * kPix, q.zero_point, static_cast<std::size_t>(pn));
                }
                transpose8(tmp, kPix, nhwc + p0 * c + c0, c, cn, pn);
            }
        }
    });
}

/// im2col rows [pixels, kh * kw * cg] of group g from the NHWC image (pads: `pad`).
void im2col_nhwc(const QConvShape& s, const std::uint8_t* nhwc, int64_t g, std::uint8_t pad,
                 std::uint8_t* cols) noexcept {
    const int64_t cg = s.cg(), k = s.k();
    parallel_for(s.oh, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t oy = o0; oy < o1; ++oy)
            for (int64_t ox = 0; ox < s.ow; ++ox) {
                std::uint8_t* d = cols + (oy * s.ow + ox) * k;
                for (int64_t i = 0; i < s.kh; ++i) {
                    const int64_t iy = oy * s.sh - s.pt + i * s.dh;
                    for (int64_t j = 0; j < s.kw; ++j, d += cg) {
                        const int64_t ix = ox * s.sw - s.pl + j * s.dw;
                        if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w)
                            std::memset(d, pad, static_cast<std::size_t>(cg));
                        else
                            std::memcpy(d, nhwc + (iy * s.w + ix) * s.c + g * cg,
                                        static_cast<std::size_t>(cg));
                    }
                }
            }
    });
}

struct Layout {
    std::size_t nhwc = 0, cols = 0, ctmp = 0, gemm = 0, total = 0;
};

Layout layout(const QConvShape& s, const PackedQConvW& w, std::size_t out_bytes,
              int64_t threads) noexcept {
    Layout l;
    l.nhwc = align64(static_cast<std::size_t>(s.h * s.w * s.c));
    l.cols = s.pointwise() ? 0 : align64(static_cast<std::size_t>(s.pixels() * s.k()));
    l.ctmp = align64(static_cast<std::size_t>(s.pixels() * s.mg()) * out_bytes);
    l.gemm = w.groups.empty() ? 0 : align64(qgemm_workspace_bytes(s.pixels(), w.groups[0], threads));
    l.total = 64 + l.nhwc + l.cols + l.ctmp + l.gemm;  // qgemm's share last (qconv_nchw)
    return l;
}

std::size_t out_size(QGemmOutput o) noexcept {
    return o == QGemmOutput::s32 || o == QGemmOutput::f32 ? 4 : 1;
}

}  // namespace

PackedQConvW pack_qconv_weights(const void* w, bool w_unsigned, const QConvShape& s, QIsa isa) {
    PackedQConvW out;
    out.group = s.group;
    out.k = s.k();
    out.mg = s.mg();
    const int64_t cg = s.cg(), khw = s.kh * s.kw, k = out.k, mg = out.mg;
    std::vector<std::uint8_t> t(static_cast<std::size_t>(std::max<int64_t>(1, mg * k)));
    const auto* src = static_cast<const std::uint8_t*>(w);
    for (int64_t g = 0; g < s.group; ++g) {
        // [mg, cg, kh, kw] -> [mg, kh, kw, cg]: B stored [N, K] with K in im2col's order.
        for (int64_t o = 0; o < mg; ++o)
            for (int64_t c = 0; c < cg; ++c)
                for (int64_t q = 0; q < khw; ++q)
                    t[static_cast<std::size_t>(o * k + q * cg + c)] =
                        src[((g * mg + o) * cg + c) * khw + q];
        out.groups.push_back(pack_qb(t.data(), w_unsigned, k, mg, /*transposed=*/true, isa));
    }
    return out;
}

std::size_t qconv_workspace_bytes(const QConvShape& s, const PackedQConvW& w,
                                  std::size_t out_bytes, int64_t threads) noexcept {
    return layout(s, w, out_bytes, threads).total;
}

bool qconv_nchw(const QConvShape& s, const void* x, const QConvFloatInput* fx,
                const PackedQConvW& w, void* y, const QGemmParams& p, void* workspace,
                std::size_t workspace_bytes) noexcept {
    const int64_t pixels = s.pixels(), hw = s.h * s.w, cg = s.cg(), mg = s.mg();
    if (s.batch == 0 || pixels == 0 || s.m == 0) return true;
    const std::size_t eb = out_size(p.out);
    auto* base = static_cast<unsigned char*>(workspace);
    const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
    // qgemm takes what is left: with less than it asks for (a larger thread budget than at
    // prepare) it uses its per-thread buffers.
    const Layout l = layout(s, w, eb, 1);
    if (base == nullptr || workspace_bytes < l.total - l.gemm) return false;
    base += skip;
    auto* nhwc = reinterpret_cast<std::uint8_t*>(base);
    auto* cols = reinterpret_cast<std::uint8_t*>(base + l.nhwc);
    unsigned char* ctmp = base + l.nhwc + l.cols;
    unsigned char* gws = ctmp + l.ctmp;
    const std::size_t gws_bytes = workspace_bytes - skip - l.nhwc - l.cols - l.ctmp;
    const auto pad = static_cast<std::uint8_t>(p.a_zero);
    for (int64_t n = 0; n < s.batch; ++n) {
        if (fx != nullptr)
            quantize_to_nhwc(fx->x + n * s.c * hw, s.c, hw, *fx, nhwc);
        else
            parallel_transpose(static_cast<const std::uint8_t*>(x) + n * s.c * hw, hw, nhwc, s.c,
                               s.c, hw, 1);
        for (int64_t g = 0; g < s.group; ++g) {
            const std::uint8_t* a = nhwc + g * cg;
            int64_t lda = s.c;
            if (!s.pointwise()) {
                im2col_nhwc(s, nhwc, g, pad, cols);
                a = cols;
                lda = s.k();
            }
            QGemmParams pg = p;
            const int64_t off = g * mg;
            if (p.b_zeros != nullptr) pg.b_zeros = p.b_zeros + off;
            if (p.b_scales != nullptr) pg.b_scales = p.b_scales + off;
            if (p.bias != nullptr) pg.bias = p.bias + off;
            if (p.bias_s32 != nullptr) pg.bias_s32 = p.bias_s32 + off;
            if (!qgemm_packed(pixels, a, lda, w.groups[static_cast<std::size_t>(g)], ctmp, mg, pg,
                              gws, gws_bytes))
                return false;
            parallel_transpose(ctmp, mg,
                               static_cast<unsigned char*>(y) +
                                   static_cast<std::size_t>((n * s.m + off) * pixels) * eb,
                               pixels, pixels, mg, eb);
        }
    }
    return true;
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
