// INT8 2-D convolution on qgemm (see qconv.hpp): NCHW -> NHWC bytes (an NHWC x in place),
// A's rows as pointers to each tap's channels (qgemm_rows) or im2col rows of (kh, kw, c) runs
// (qgemm_packed), per group, C transposed back to NCHW (or stored into an NHWC y). The transposes
// are blocked 16 x 16 (bytes) and 4 x 4 (32-bit) register transposes where SSE2 exists.
#include "kernels/qconv.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "runtime/parallel.hpp"


#if defined(__SSE2__)
#include <emmintrin.h>
#include <tmmintrin.h>
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

/// transpose8 of kRows (< 16) rows: column by column, each column's kRows bytes stored
/// together (an image's 3 or 4 planes to pixels; row by row, the byte stores strided by kRows
/// took 0.7% of ResNet-50 QDQ b8).
template <int kRows>
void transpose_few(const std::uint8_t* src, int64_t lds, std::uint8_t* dst, int64_t ldd,
                   int64_t cols) noexcept {
    for (int64_t j = 0; j < cols; ++j) {
        std::uint8_t* d = dst + j * ldd;
        for (int i = 0; i < kRows; ++i) d[i] = src[i * lds + j];
    }
}

/// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (bytes).
void transpose8(const std::uint8_t* src, int64_t lds, std::uint8_t* dst, int64_t ldd, int64_t rows,
                int64_t cols) noexcept {
    if (rows == 3) return transpose_few<3>(src, lds, dst, ldd, cols);
    if (rows == 4) return transpose_few<4>(src, lds, dst, ldd, cols);
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

/// Block edge of the transposes (a 64 x 64 block of 32-bit values is 16 KiB).
constexpr int64_t kBlock = 64;

/// dst [cols, rows] (leading dim ldd) = src [rows, cols]^T, elements of `esize` bytes (1 or 4),
/// in blocks of kBlock x kBlock.
void transpose_blocks(const void* src, int64_t lds, void* dst, int64_t ldd, int64_t rows,
                      int64_t cols, std::size_t esize) noexcept {
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
            const int64_t rn = std::min(kBlock, rows - r0), cn = std::min(kBlock, cols - c0);
            if (esize == 1)
                transpose8(static_cast<const std::uint8_t*>(src) + r0 * lds + c0, lds,
                           static_cast<std::uint8_t*>(dst) + c0 * ldd + r0, ldd, rn, cn);
            else
                transpose32(static_cast<const std::uint32_t*>(src) + r0 * lds + c0, lds,
                            static_cast<std::uint32_t*>(dst) + c0 * ldd + r0, ldd, rn, cn);
        }
}

/// `pix` consecutive pixels of the c planes of x (float32, plane stride lds) quantized as fx
/// says into nhwc [pix, c] (a pixel every ldd bytes, ldd >= c).
void quantize_to_nhwc(const float* x, int64_t c, int64_t lds, int64_t pix,
                      const QConvFloatInput& fx, std::uint8_t* nhwc, int64_t ldd) noexcept {
    constexpr int64_t kPix = 256, kCh = 64;
    alignas(64) std::uint8_t tmp[kCh * kPix];
    const DynamicQuantParams& q = fx.q;
    for (int64_t p0 = 0; p0 < pix; p0 += kPix) {
        const int64_t pn = std::min(kPix, pix - p0);
        for (int64_t c0 = 0; c0 < c; c0 += kCh) {
            const int64_t cn = std::min(kCh, c - c0);
            for (int64_t ci = 0; ci < cn; ++ci) {
                if (q.usable) fx.quantize(x + (c0 + ci) * lds + p0, pn, q, tmp + ci * kPix);
                else std::memset(tmp + ci * kPix, q.zero_point, static_cast<std::size_t>(pn));
            }
            transpose8(tmp, kPix, nhwc + p0 * ldd + c0, ldd, cn, pn);
        }
    }
}

#if DSINFER_QCONV_SSE2
/// 16 pixels of 3 planes (p[q] + i) to 48 bytes of 3-byte pixels at d: each output vector
/// gathers its bytes from the 3 planes by pshufb (SSSE3: the avx512_vnni family's
/// qconv_packed_shape is the only caller's reason for 3-channel pixels).
__attribute__((target("ssse3"))) void interleave3(const std::uint8_t* const (&p)[3], int64_t n,
                                                  std::uint8_t* d) noexcept {
    alignas(16) static const auto masks = [] {
        std::array<std::array<std::int8_t, 16>, 9> m{};
        for (int v = 0; v < 3; ++v)      // output vector
            for (int q = 0; q < 3; ++q)  // plane
                for (int b = 0; b < 16; ++b) {
                    const int o = 16 * v + b;
                    m[static_cast<std::size_t>(v * 3 + q)][static_cast<std::size_t>(b)] =
                        static_cast<std::int8_t>(o % 3 == q ? o / 3 : -128);
                }
        return m;
    }();
    for (int64_t i = 0; i + 16 <= n; i += 16, d += 48) {
        const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[0] + i));
        const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[1] + i));
        const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[2] + i));
        for (int v = 0; v < 3; ++v) {
            const auto mask = [&](int q) {
                return _mm_load_si128(reinterpret_cast<const __m128i*>(masks[v * 3 + q].data()));
            };
            const __m128i o = _mm_or_si128(
                _mm_or_si128(_mm_shuffle_epi8(x0, mask(0)), _mm_shuffle_epi8(x1, mask(1))),
                _mm_shuffle_epi8(x2, mask(2)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16 * v), o);
        }
    }
}
#endif

/// `pix` consecutive pixels of an image of x (geometry s: s.c channels, u8 NCHW or NHWC, or
/// float NCHW through fx), the first at `first` (n * s.c * hw + the pixel's index in its
/// image), to nhwc [pix, c] with the channels from s.c on set to `pad` (qconv_packed_shape:
/// c is s.c or 4).
void pad_channels(const QConvShape& s, const void* x, const QConvFloatInput* fx, int64_t first,
                  int64_t pix, int64_t c, std::uint8_t pad, std::uint8_t* nhwc) noexcept {
    const int64_t c_in = s.c, hw = s.h * s.w;
    if (fx != nullptr || s.x_nhwc) {
        const int64_t n = first / (c_in * hw), at = first % (c_in * hw);
        if (fx != nullptr) {
            quantize_to_nhwc(fx->x + first, c_in, hw, pix, *fx, nhwc, c);
        } else {
            const auto* src = static_cast<const std::uint8_t*>(x) + (n * hw + at) * c_in;
            if (c == c_in)
                std::memcpy(nhwc, src, static_cast<std::size_t>(pix * c));
            else
                for (int64_t i = 0; i < pix; ++i)
                    std::memcpy(nhwc + i * c, src + i * c_in, static_cast<std::size_t>(c_in));
        }
        if (c > c_in)
            for (int64_t i = 0; i < pix; ++i)
                std::memset(nhwc + i * c + c_in, pad, static_cast<std::size_t>(c - c_in));
        return;
    }
    const auto* src = static_cast<const std::uint8_t*>(x) + first;
    int64_t i = 0;
    if (c == 1) {  // one plane: its bytes
        std::memcpy(nhwc, src, static_cast<std::size_t>(pix));
        return;
    }
#if DSINFER_QCONV_SSE2
    static const bool ssse3 = __builtin_cpu_supports("ssse3");
    if (c == 3 && c_in == 3 && ssse3) {
        const std::uint8_t* const planes[3] = {src, src + hw, src + 2 * hw};
        interleave3(planes, pix, nhwc);
        i = pix / 16 * 16;
    } else if (c == 2 && c_in == 2) {
        for (; i + 16 <= pix; i += 16) {
            const __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
            const __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + hw + i));
            auto* d = reinterpret_cast<__m128i*>(nhwc + i * 2);
            _mm_storeu_si128(d, _mm_unpacklo_epi8(p0, p1));
            _mm_storeu_si128(d + 1, _mm_unpackhi_epi8(p0, p1));
        }
    } else if (c == 4) {
        // Per 16 pixels: (p0, p1) and (p2, pad) byte pairs, then pairs of pairs: 4 pixels a
        // vector (absent planes read as the pad).
        const __m128i z = _mm_set1_epi8(static_cast<char>(pad));
        const auto plane = [&](int64_t q, int64_t at) {
            return q < c_in ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + q * hw + at))
                            : z;
        };
        for (; i + 16 <= pix; i += 16) {
            const __m128i p0 = plane(0, i), p1 = plane(1, i), p2 = plane(2, i), p3 = plane(3, i);
            const __m128i a_lo = _mm_unpacklo_epi8(p0, p1), a_hi = _mm_unpackhi_epi8(p0, p1);
            const __m128i b_lo = _mm_unpacklo_epi8(p2, p3), b_hi = _mm_unpackhi_epi8(p2, p3);
            auto* d = reinterpret_cast<__m128i*>(nhwc + i * 4);
            _mm_storeu_si128(d, _mm_unpacklo_epi16(a_lo, b_lo));
            _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(a_lo, b_lo));
            _mm_storeu_si128(d + 2, _mm_unpacklo_epi16(a_hi, b_hi));
            _mm_storeu_si128(d + 3, _mm_unpackhi_epi16(a_hi, b_hi));
        }
    }
#endif
    for (; i < pix; ++i)
        for (int64_t q = 0; q < c; ++q) nhwc[i * c + q] = q < c_in ? src[q * hw + i] : pad;
}

/// n bytes from src to d for the short runs of im2col (a 7x7 window row of 3 channels is 21
/// bytes): two overlapping fixed-size moves instead of a call to memcpy for each.
inline void copy_run(std::uint8_t* d, const std::uint8_t* src, std::size_t n) noexcept {
    if (n >= 16 && n <= 32) {
        std::memcpy(d, src, 16);
        std::memcpy(d + n - 16, src + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        std::memcpy(d, src, 8);
        std::memcpy(d + n - 8, src + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        std::memcpy(d, src, 4);
        std::memcpy(d + n - 4, src + n - 4, 4);
    } else {
        std::memcpy(d, src, n);
    }
}

/// im2col rows [(r1 - r0) * ow, kh * kw * cg] of output rows [r0, r1), group g, from the NHWC
/// rows [iy0, ...) of the image (pads: `pad`). kCg > 0: cg known at compile time (the copies
/// of the common channel counts inline).
template <int64_t kCg>
void im2col_rows_as(const QConvShape& s, const std::uint8_t* nhwc, int64_t iy0, int64_t r0,
                    int64_t r1, int64_t g, std::uint8_t pad, std::uint8_t* cols) noexcept {
    const int64_t cg = kCg > 0 ? kCg : s.cg(), k = s.k();
    const auto bytes = static_cast<std::size_t>(cg);
    // One group of all channels, no dilation along x: a window row inside the image is one run
    // of kw * c contiguous bytes.
    const bool runs = s.group == 1 && s.dw == 1;
    const auto run_bytes = static_cast<std::size_t>(s.kw * cg);
    for (int64_t oy = r0; oy < r1; ++oy)
        for (int64_t ox = 0; ox < s.ow; ++ox) {
            std::uint8_t* d = cols + ((oy - r0) * s.ow + ox) * k;
            const int64_t ix0 = ox * s.sw - s.pl;
            const bool cols_in = runs && ix0 >= 0 && ix0 + s.kw <= s.w;
            for (int64_t i = 0; i < s.kh; ++i) {
                const int64_t iy = oy * s.sh - s.pt + i * s.dh;
                const bool row_in = iy >= 0 && iy < s.h;
                const std::uint8_t* src = row_in ? nhwc + (iy - iy0) * s.w * s.c + g * cg : nhwc;
                if (row_in && cols_in) {
                    copy_run(d, src + ix0 * s.c, run_bytes);
                    d += run_bytes;
                    continue;
                }
                for (int64_t j = 0; j < s.kw; ++j, d += cg) {
                    const int64_t ix = ox * s.sw - s.pl + j * s.dw;
                    if (!row_in || ix < 0 || ix >= s.w) std::memset(d, pad, bytes);
                    else std::memcpy(d, src + ix * s.c, bytes);
                }
            }
        }
}

void im2col_rows(const QConvShape& s, const std::uint8_t* nhwc, int64_t iy0, int64_t r0,
                 int64_t r1, int64_t g, std::uint8_t pad, std::uint8_t* cols) noexcept {
    switch (s.cg()) {
        case 3: return im2col_rows_as<3>(s, nhwc, iy0, r0, r1, g, pad, cols);
        case 4: return im2col_rows_as<4>(s, nhwc, iy0, r0, r1, g, pad, cols);
        case 8: return im2col_rows_as<8>(s, nhwc, iy0, r0, r1, g, pad, cols);
        case 16: return im2col_rows_as<16>(s, nhwc, iy0, r0, r1, g, pad, cols);
        case 32: return im2col_rows_as<32>(s, nhwc, iy0, r0, r1, g, pad, cols);
        case 64: return im2col_rows_as<64>(s, nhwc, iy0, r0, r1, g, pad, cols);
        default: return im2col_rows_as<0>(s, nhwc, iy0, r0, r1, g, pad, cols);
    }
}

/// u8 -> u16: dst[i] = src[i] for i < n (the 16-bit families' A, qgemm_rows_elem_bytes).
void widen_u16(const std::uint8_t* src, int64_t n, std::uint16_t* dst) noexcept {
    int64_t i = 0;
#if DSINFER_QCONV_SSE2
    const __m128i zero = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_unpacklo_epi8(v, zero));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), _mm_unpackhi_epi8(v, zero));
    }
#endif
    for (; i < n; ++i) dst[i] = src[i];
}

/// For each kernel tap (kh, kw) and output pixel of rows [r0, r1), into out [kh * kw][pixels]:
/// at(q), q the index of the input pixel the tap reads among the image rows [iy0, ...)
/// ((iy - iy0) * w + ix), or `outside` where the tap falls in the padding.
template <class T, class At>
void tap_pointers(const QConvShape& s, int64_t iy0, int64_t r0, int64_t r1, T outside, At at,
                  T* out) noexcept {
    for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t j = 0; j < s.kw; ++j) {
            // The output columns whose tap j falls inside the image, [lo, hi): ix = ox * sw
            // - pl + j * dw in [0, w). Left and right of them (and rows outside) the zero row.
            const int64_t x0 = j * s.dw - s.pl;  // ix at ox = 0
            const int64_t lo = std::clamp<int64_t>(x0 >= 0 ? 0 : (-x0 + s.sw - 1) / s.sw, 0, s.ow);
            const int64_t hi =
                std::clamp<int64_t>(s.w - x0 <= 0 ? 0 : (s.w - x0 + s.sw - 1) / s.sw, lo, s.ow);
            for (int64_t oy = r0; oy < r1; ++oy) {
                const int64_t iy = oy * s.sh - s.pt + i * s.dh;
                if (iy < 0 || iy >= s.h) {
                    std::fill(out, out + s.ow, outside);
                    out += s.ow;
                    continue;
                }
                std::fill(out, out + lo, outside);
                int64_t q = (iy - iy0) * s.w + x0 + lo * s.sw;
                for (int64_t ox = lo; ox < hi; ++ox, q += s.sw) out[ox] = at(q);
                std::fill(out + hi, out + s.ow, outside);
                out += s.ow;
            }
        }
}

/// qgemm_rows' A for output rows [r0, r1), group g, with elements of `eb` bytes (1: u8, 2: u16,
/// qgemm_rows_elem_bytes): in `buf`, a row of cg elements of the x zero point `pad`, then
/// [kh * kw][pixels] pointers to each pixel's tap in the NHWC rows [iy0, ...) of the image
/// (elements of eb bytes; the zero-point row where the tap falls in the padding).
QRowsA row_pointers(const QConvShape& s, const std::uint8_t* nhwc, int64_t eb, int64_t iy0,
                    int64_t r0, int64_t r1, int64_t g, std::uint8_t pad,
                    std::uint8_t* buf) noexcept {
    const int64_t cg = s.cg(), taps = s.kh * s.kw, pixels = (r1 - r0) * s.ow;
    if (eb == 1)
        std::memset(buf, pad, static_cast<std::size_t>(cg));
    else
        std::fill_n(reinterpret_cast<std::uint16_t*>(buf), cg, std::uint16_t{pad});
    const std::uint8_t* zero_row = buf;
    auto** rows =
        reinterpret_cast<const std::uint8_t**>(buf + align64(static_cast<std::size_t>(cg * eb)));
    const std::uint8_t* base = nhwc + g * cg * eb;
    const int64_t pixel_bytes = s.c * eb;
    tap_pointers(
        s, iy0, r0, r1, zero_row, [&](int64_t q) noexcept { return base + q * pixel_bytes; }, rows);
    QRowsA a;
    a.m = pixels;
    a.segments = taps;
    a.seg = cg;
    a.rows = rows;
    return a;
}

/// qgemm_rows' A for output rows [r0, r1) with each kernel row's taps one run of kw * c bytes
/// (one group, no dilation along x): x's rows [iy0, ...) in `padded`, rows of `run_w` pixels
/// with s.pl pixels of the zero point before each row's first and enough after its last
/// (run_width). In `buf`: a run of kw * c bytes of the zero point `pad`, then [kh][pixels]
/// pointers to each pixel's kernel rows (the zero-point run where a row falls in the padding).
QRowsA run_pointers(const QConvShape& s, const std::uint8_t* padded, int64_t run_w, int64_t iy0,
                    int64_t r0, int64_t r1, std::uint8_t pad, std::uint8_t* buf) noexcept {
    const int64_t run = s.kw * s.c;
    std::memset(buf, pad, static_cast<std::size_t>(run));
    const std::uint8_t* zero_run = buf;
    auto** rows =
        reinterpret_cast<const std::uint8_t**>(buf + align64(static_cast<std::size_t>(run)));
    const std::uint8_t** out = rows;
    for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t oy = r0; oy < r1; ++oy, out += s.ow) {
            const int64_t iy = oy * s.sh - s.pt + i * s.dh;
            if (iy < 0 || iy >= s.h) {
                std::fill(out, out + s.ow, zero_run);
                continue;
            }
            // Output column ox's window starts at ox * sw - pl, padded index ox * sw.
            const std::uint8_t* at = padded + (iy - iy0) * run_w * s.c;
            for (int64_t ox = 0; ox < s.ow; ++ox) out[ox] = at + ox * s.sw * s.c;
        }
    QRowsA a;
    a.m = (r1 - r0) * s.ow;
    a.segments = s.kh;
    a.seg = run;
    a.rows = rows;
    return a;
}

/// B in the form for 7-bit A (PackedQB::a7()): the image rows' n bytes x split into lo = x &
/// 127 and their high bits as lists, per pixel of c channels: off[q] indexes `lists` at pixel
/// q's count, then the channels whose x is at least 128 (QRowsA::hi). Returns false (lo and
/// the lists partly written) when they need more than `cap` entries.
bool split_sparse(const std::uint8_t* x, int64_t pixels, int64_t c, std::uint8_t* lo,
                  std::uint32_t* off, std::uint16_t* lists, int64_t cap) noexcept {
    int64_t used = 0;
    for (int64_t q = 0; q < pixels; ++q) {
        const std::uint8_t* xp = x + q * c;
        std::uint8_t* lp = lo + q * c;
        if (used + 1 + c > cap) {  // room for every channel, or count them first
            int64_t count = 0;
            for (int64_t ch = 0; ch < c; ++ch) count += xp[ch] >> 7;
            if (used + 1 + count > cap) return false;
        }
        std::uint16_t* list = lists + used;
        int64_t n = 0;
        int64_t ch = 0;
#if DSINFER_QCONV_SSE2
        const __m128i low7 = _mm_set1_epi8(0x7f);
        for (; ch + 16 <= c; ch += 16) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xp + ch));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(lp + ch), _mm_and_si128(v, low7));
            for (auto m = static_cast<unsigned>(_mm_movemask_epi8(v)); m != 0; m &= m - 1)
                list[1 + n++] = static_cast<std::uint16_t>(ch + __builtin_ctz(m));
        }
#endif
        for (; ch < c; ++ch) {
            lp[ch] = xp[ch] & 0x7f;
            if (xp[ch] >> 7) list[1 + n++] = static_cast<std::uint16_t>(ch);
        }
        list[0] = static_cast<std::uint16_t>(n);
        off[q] = static_cast<std::uint32_t>(used);
        used += 1 + n;
    }
    return true;
}

/// The same split with the high bits dense: hi = x >> 7 (0 or 1; QRowsA::hi_rows).
void split_dense(const std::uint8_t* x, int64_t n, std::uint8_t* lo, std::uint8_t* hi) noexcept {
    int64_t i = 0;
#if DSINFER_QCONV_SSE2
    const __m128i low7 = _mm_set1_epi8(0x7f), one = _mm_set1_epi8(1);
    for (; i + 16 <= n; i += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + i), _mm_and_si128(v, low7));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + i),
                         _mm_and_si128(_mm_srli_epi16(v, 7), one));
    }
#endif
    for (; i < n; ++i) {
        lo[i] = x[i] & 0x7f;
        hi[i] = x[i] >> 7;
    }
}

// ---- Winograd F(2x2, 3x3) in 16-bit integers (PackedQConvW::wino) ----------------------------
// Y = A^T [sum_c U_c . V_c] A / 4 with V = B^T z B (z = x - x's zero point: 4 x 4 input tile),
// U = G' g G'^T (G' = 2 G: integer) and
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G' = [2 0 0; 1 1 1; 1 -1 1; 0 0 2],
//   A^T = [1 1 1 0; 0 1 -1 -1].
// |z| <= 255 gives |V| <= 1020 and s8 weights |U| <= 1152: s16 both, vpmaddwd's pairs exact.
// The sums over channels and A^T's in wrapping s32 equal 4 times the true convolution sum mod
// 2^32; that sum is below 2^29 in magnitude (pack_qconv_weights checks each output channel's
// sum of |g|), so 4 times it is in s32 and the arithmetic shift by 2 gives it exactly: the
// epilogue then sees the direct form's exact sums.

/// V's rows of one chunk: [16][tiles][cs] s16 for the tile rows [g0, g1) counted over the batch
/// (th an image; one image's from `x` on, image_stride bytes apart), each tile from that image's
/// NHWC rows [iy0, iy1) at x (row iy0 first), z = x - zx; pixels outside them read `outside`
/// (c bytes of zx: z = 0), channels past c are 0.
__attribute__((always_inline)) inline void wino_input_body(
    const QConvShape& s, const std::uint8_t* x, int64_t image_stride, int64_t iy0, int64_t iy1,
    int64_t g0, int64_t g1, int64_t th, std::uint8_t zx, int64_t cs, const std::uint8_t* outside,
    std::int16_t* __restrict v) noexcept {
    typedef std::int16_t V16 __attribute__((vector_size(32)));
    typedef std::uint8_t B16 __attribute__((vector_size(16)));
    const int64_t tw = (s.ow + 1) / 2, tiles = (g1 - g0) * tw, c = s.c, step = tiles * cs;
    const V16 z = V16{} + static_cast<std::int16_t>(zx);
    const std::uint8_t* px[4][4];
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t tile = (g - g0) * tw + tx, ty = g % th;
            const std::uint8_t* const image = x + g / th * image_stride;
            for (int r = 0; r < 4; ++r) {
                const int64_t iy = 2 * ty - s.pt + r;
                for (int q = 0; q < 4; ++q) {
                    const int64_t ix = 2 * tx - s.pl + q;
                    px[r][q] = iy >= iy0 && iy < iy1 && ix >= 0 && ix < s.w
                                   ? image + ((iy - iy0) * s.w + ix) * c
                                   : outside;
                }
            }
            std::int16_t* const o = v + tile * cs;
            for (int64_t c0 = 0; c0 < cs; c0 += 16) {
                V16 d[4][4];
                if (c0 + 16 <= c) {
                    for (int r = 0; r < 4; ++r)
                        for (int q = 0; q < 4; ++q) {
                            B16 b;
                            std::memcpy(&b, px[r][q] + c0, 16);
                            d[r][q] = __builtin_convertvector(b, V16) - z;
                        }
                } else {  // the last channels: those past c are 0
                    alignas(32) std::int16_t t[16];
                    for (int r = 0; r < 4; ++r)
                        for (int q = 0; q < 4; ++q) {
                            for (int l = 0; l < 16; ++l)
                                t[l] = c0 + l < c ? static_cast<std::int16_t>(px[r][q][c0 + l] - zx)
                                                  : std::int16_t{0};
                            std::memcpy(&d[r][q], t, 32);
                        }
                }
                // B^T down the columns, then along the rows: point (r, j) at r * 4 + j.
                V16 t[4][4];
                for (int q = 0; q < 4; ++q) {
                    t[0][q] = d[0][q] - d[2][q];
                    t[1][q] = d[1][q] + d[2][q];
                    t[2][q] = d[2][q] - d[1][q];
                    t[3][q] = d[1][q] - d[3][q];
                }
                for (int r = 0; r < 4; ++r) {
                    const V16 out[4] = {t[r][0] - t[r][2], t[r][1] + t[r][2], t[r][2] - t[r][1],
                                        t[r][1] - t[r][3]};
                    for (int j = 0; j < 4; ++j)
                        std::memcpy(o + (r * 4 + j) * step + c0, &out[j], 32);
                }
            }
        }
}

/// The chunk's sums: S [pixels][n] s32 from M ([16][tiles][n] s32) of the tile rows [g0, g1)
/// counted over the batch (th an image), the pixels counted over the batch from the chunk's
/// first.
__attribute__((always_inline)) inline void wino_output_body(const QConvShape& s, int64_t g0,
                                                            int64_t g1, int64_t th, int64_t n,
                                                            const std::int32_t* __restrict m,
                                                            std::int32_t* __restrict out) noexcept {
    typedef std::uint32_t V8 __attribute__((vector_size(32)));
    typedef std::int32_t I8 __attribute__((vector_size(32)));
    const int64_t tw = (s.ow + 1) / 2, tiles = (g1 - g0) * tw, step = tiles * n;
    const int64_t pix0 = (g0 / th * s.oh + 2 * (g0 % th)) * s.ow;
    alignas(32) std::int32_t y[4][8];
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t tx = 0; tx < tw; ++tx) {
            const std::int32_t* mt = m + ((g - g0) * tw + tx) * n;
            const int64_t oy = 2 * (g % th), ox = 2 * tx;
            const bool down = oy + 1 < s.oh, right = ox + 1 < s.ow;
            std::int32_t* const o0 = out + ((g / th * s.oh + oy) * s.ow + ox - pix0) * n;
            std::int32_t* const o[4] = {o0, o0 + n, o0 + s.ow * n, o0 + (s.ow + 1) * n};
            const int outs = down ? 4 : 2;
            for (int64_t j = 0; j < n; j += 8) {
                const int64_t w = std::min<int64_t>(8, n - j);
                V8 e[16];
                if (w == 8) {
                    for (int i = 0; i < 16; ++i) std::memcpy(&e[i], mt + i * step + j, 32);
                } else {
                    for (int i = 0; i < 16; ++i) {
                        e[i] = V8{};
                        std::memcpy(&e[i], mt + i * step + j, static_cast<std::size_t>(w) * 4);
                    }
                }
                // A^T down the columns, then along the rows (wrapping), / 4 exactly.
                V8 a[4], b[4];
                for (int q = 0; q < 4; ++q) {
                    a[q] = e[q] + e[4 + q] + e[8 + q];
                    b[q] = e[4 + q] - e[8 + q] - e[12 + q];
                }
                const I8 y0 = (I8)(a[0] + a[1] + a[2]) >> 2, y1 = (I8)(a[1] - a[2] - a[3]) >> 2;
                const I8 y2 = (I8)(b[0] + b[1] + b[2]) >> 2, y3 = (I8)(b[1] - b[2] - b[3]) >> 2;
                if (w == 8) {
                    std::memcpy(o[0] + j, &y0, 32);
                    if (right) std::memcpy(o[1] + j, &y1, 32);
                    if (down) {
                        std::memcpy(o[2] + j, &y2, 32);
                        if (right) std::memcpy(o[3] + j, &y3, 32);
                    }
                } else {
                    std::memcpy(y[0], &y0, 32);
                    std::memcpy(y[1], &y1, 32);
                    std::memcpy(y[2], &y2, 32);
                    std::memcpy(y[3], &y3, 32);
                    for (int q = 0; q < outs; ++q)
                        if (right || q % 2 == 0)
                            std::memcpy(o[q] + j, y[q], static_cast<std::size_t>(w) * 4);
                }
            }
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void wino_input_avx2(const QConvShape& s, const std::uint8_t* x,
                                                     int64_t image_stride, int64_t iy0, int64_t iy1,
                                                     int64_t g0, int64_t g1, int64_t th,
                                                     std::uint8_t zx, int64_t cs,
                                                     const std::uint8_t* outside,
                                                     std::int16_t* v) noexcept {
    wino_input_body(s, x, image_stride, iy0, iy1, g0, g1, th, zx, cs, outside, v);
}
__attribute__((target("avx2"))) void wino_output_avx2(const QConvShape& s, int64_t g0, int64_t g1,
                                                      int64_t th, int64_t n, const std::int32_t* m,
                                                      std::int32_t* out) noexcept {
    wino_output_body(s, g0, g1, th, n, m, out);
}
#endif
void wino_input_base(const QConvShape& s, const std::uint8_t* x, int64_t image_stride, int64_t iy0,
                     int64_t iy1, int64_t g0, int64_t g1, int64_t th, std::uint8_t zx, int64_t cs,
                     const std::uint8_t* outside, std::int16_t* v) noexcept {
    wino_input_body(s, x, image_stride, iy0, iy1, g0, g1, th, zx, cs, outside, v);
}
void wino_output_base(const QConvShape& s, int64_t g0, int64_t g1, int64_t th, int64_t n,
                      const std::int32_t* m, std::int32_t* out) noexcept {
    wino_output_body(s, g0, g1, th, n, m, out);
}

/// The exact sums (the direct form's) of the tile rows [g0, g1) counted over the batch (th an
/// image) by the Winograd form into `sums` ([pixels][m], from the chunk's first pixel), the input
/// as wino_input_body reads it. `v`, `m`, `ptrs`, `outside`: the chunk's transformed input,
/// products, row pointers and a pixel of zx (Plan::wv, wm, wp, wz).
void wino_chunk(const QConvShape& s, const PackedQConvW& w, const std::uint8_t* x,
                int64_t image_stride, int64_t iy0, int64_t iy1, int64_t g0, int64_t g1, int64_t th,
                std::uint8_t zx, std::int16_t* v, std::int32_t* m, const std::uint8_t** ptrs,
                std::int32_t* sums, std::uint8_t* outside) noexcept {
    const int64_t tiles = (g1 - g0) * ((s.ow + 1) / 2), cs = w.wino_k, n = s.m;
    const bool avx2 = w.wino.front().isa == QIsa::avx2;
    std::memset(outside, zx, static_cast<std::size_t>(s.c));
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx2)
        wino_input_avx2(s, x, image_stride, iy0, iy1, g0, g1, th, zx, cs, outside, v);
    else
#endif
        wino_input_base(s, x, image_stride, iy0, iy1, g0, g1, th, zx, cs, outside, v);
    for (int64_t i = 0; i < 16 * tiles; ++i)
        ptrs[i] = reinterpret_cast<const std::uint8_t*>(v + i * cs);
    QGemmParams q;  // the plain s32 products
    q.out = QGemmOutput::s32;
    for (int xi = 0; xi < 16; ++xi) {
        QRowsA a;
        a.m = tiles;
        a.seg = cs;
        a.rows = ptrs + xi * tiles;
        qgemm_rows(a, w.wino[static_cast<std::size_t>(xi)], m + xi * tiles * n, n, q);
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx2)
        wino_output_avx2(s, g0, g1, th, n, m, sums);
    else
#endif
        wino_output_base(s, g0, g1, th, n, m, sums);
}

/// Bytes of im2col (or NHWC rows, 1x1) per chunk: a chunk's A stays in L2.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

/// How the work is cut: each image into `slices` chunks of `rows` output rows; a thread takes
/// whole chunks (one parallel region per convolution: no thread waits for another inside it,
/// which matters when the machine is oversubscribed). The cut changes no result.
struct Plan {
    int64_t rows = 1, slices = 1, in_rows = 1, team = 1;
    int64_t eb = 1;  ///< bytes per element of qgemm_rows' A (2: the chunk's input rows widened)
    bool a7 = false;  ///< B in the form for 7-bit A: the chunk's input rows split (split_sparse)
    int64_t cap = 0;  ///< a7: list entries the high bits may take before they go dense
    std::size_t nhwc = 0, wide = 0, cols = 0, ctmp = 0, gemm = 0, per_thread = 0, total = 0;
    /// a7: the low bits (in_bytes), the lists' offsets (a u32 per input pixel), and the lists or
    /// the dense high bits, each followed by the padding's; a byte per output pixel of the
    /// chunk: whether any of its taps' lists has an element (QRowsA::hi_any).
    std::size_t lo = 0, off = 0, high = 0, any = 0;
    /// The Winograd form (PackedQConvW::winograd(); rows even): V, M, the sums, the row
    /// pointers and a pixel of zx of a chunk (wino_chunk). With x and y channels last
    /// (`wglobal`) chunks are instead `wtr` tile rows counted over the batch (images may share
    /// one: a 7x7 image has 16 tiles), `wchunks` of them.
    bool wino = false, wglobal = false;
    int64_t wtr = 0, wchunks = 0;
    std::size_t wv = 0, wm = 0, wsum = 0, wp = 0, wz = 0;
};

Plan plan_for(const QConvShape& s, const PackedQConvW& w, std::size_t out_bytes, int64_t threads,
              int64_t run_w = 0) noexcept {
    Plan p;
    const int64_t a_row = std::max<int64_t>(1, s.pointwise() ? s.c : s.k());
    const int64_t oh = std::max<int64_t>(1, s.oh), ow = std::max<int64_t>(1, s.ow);
    p.rows = std::clamp<int64_t>(kChunkBytes / a_row / ow, 1, oh);
    p.wino = w.winograd();
    const int64_t tw = (ow + 1) / 2, th = (oh + 1) / 2;
    // The Winograd form: whole tile rows, M (16 x tiles x m s32) and V (16 x tiles x K s16) of
    // at most about 768 and 512 KiB; of those counts, the most tile rows whose tiles fill 6-row
    // tiles of qgemm (a short last one costs a whole tile's set-up) if that keeps half of them.
    const auto wino_rows = [&](int64_t rows_max) {
        const int64_t most = std::min((int64_t{768} << 10) / (64 * std::max<int64_t>(1, s.m)),
                                      (int64_t{512} << 10) / (32 * w.wino_k));
        const int64_t tr_max = std::clamp<int64_t>(most / tw, 1, rows_max);
        for (int64_t t = tr_max; 2 * t >= tr_max; --t)
            if (t * tw % 6 == 0) return t;
        return tr_max;
    };
    const int64_t batch = std::max<int64_t>(1, s.batch);
    p.wglobal = p.wino && s.x_nhwc && s.y_nhwc;
    if (p.wglobal) {  // at least a chunk a thread
        p.wtr = wino_rows(std::max<int64_t>(1, (batch * th + threads - 1) / threads));
        p.wchunks = (batch * th + p.wtr - 1) / p.wtr;
    } else if (p.wino) {
        p.rows = 2 * wino_rows(th);
    }
    p.slices = (oh + p.rows - 1) / p.rows;
    const int64_t want = (threads + batch - 1) / batch;  // chunks per image to feed the team
    if (p.slices < want) {
        const int64_t unit = p.wino ? 2 : 1;
        p.slices = std::min((oh + unit - 1) / unit, want);
        p.rows = ((oh + unit - 1) / unit + p.slices - 1) / p.slices * unit;
        p.slices = (oh + p.rows - 1) / p.rows;
    }
    p.in_rows = std::min(s.h, (p.rows - 1) * s.sh + (s.kh - 1) * s.dh + 1);
    p.team = std::max<int64_t>(1, std::min(threads, p.wglobal ? p.wchunks : batch * p.slices));
    const int64_t pix = p.rows * ow;
    const std::size_t in_bytes =
        static_cast<std::size_t>(std::max<int64_t>(0, p.in_rows) * s.w * s.c);
    p.nhwc = s.x_nhwc ? 0 : align64(in_bytes);
    // The 16-bit families' qgemm_rows reads the chunk's input rows widened to u16.
    p.eb = w.groups.empty() ? 1 : qgemm_rows_elem_bytes(w.groups[0]);
    p.wide = p.eb == 2 && s.cg() % 2 == 0 ? align64(2 * in_bytes) : 0;
    p.a7 = w.a7();
    if (p.a7) {
        // Lists while the high bits are at most 1 in 16 of the bytes (a list entry costs about
        // what a group of 4 bytes does in qgemm_rows' loop), else dense.
        const auto pix_in = static_cast<int64_t>(in_bytes) / std::max<int64_t>(1, s.c);
        p.cap = pix_in + static_cast<int64_t>(in_bytes) / 16;
        p.lo = align64(in_bytes);
        p.off = align64(static_cast<std::size_t>(pix_in) * 4);
        p.high = align64(std::max(2 * static_cast<std::size_t>(p.cap + s.c + 1),
                                  in_bytes + static_cast<std::size_t>(s.c)));
        p.any = align64(static_cast<std::size_t>(pix));
    }
    // im2col rows, or for qgemm_rows a row of the x zero point (cg elements) and the chunk's A
    // row pointers (one per pixel and kernel tap).
    const std::size_t im2col = s.pointwise() ? 0 : static_cast<std::size_t>(pix * s.k());
    const std::size_t pointers =
        align64(static_cast<std::size_t>(s.cg() * p.eb)) +
        static_cast<std::size_t>(pix * s.kh * s.kw) * sizeof(const std::uint8_t*);
    p.cols = align64(std::max(im2col, p.a7 ? 2 * pointers : pointers));  // a7: the high bits'
    p.ctmp = s.y_nhwc ? 0 : align64(static_cast<std::size_t>(pix * s.mg()) * out_bytes);
    p.gemm = w.groups.empty() ? 0 : align64(qgemm_workspace_bytes(pix, w.groups[0], 1));
    if (p.wino) {
        const auto tiles = static_cast<std::size_t>((p.wglobal ? p.wtr : p.rows / 2) * tw);
        p.cols = 0;
        p.wv = align64(16 * tiles * static_cast<std::size_t>(w.wino_k) * 2);
        p.wm = align64(16 * tiles * static_cast<std::size_t>(s.m) * 4);
        p.wsum = align64(4 * tiles * static_cast<std::size_t>(s.m) * 4);
        p.wp = align64(16 * tiles * sizeof(const std::uint8_t*));
        p.wz = align64(static_cast<std::size_t>(s.c));
    }
    if (run_w > 0) {  // run_pointers: rows of run_w pixels, a zero-point run, kh pointers a pixel
        p.nhwc = align64(static_cast<std::size_t>(std::max<int64_t>(0, p.in_rows) * run_w * s.c));
        p.cols = std::max(p.cols,
                          align64(static_cast<std::size_t>(s.kw * s.c)) +
                              static_cast<std::size_t>(pix * s.kh) * sizeof(const std::uint8_t*));
    }
    p.per_thread = p.nhwc + p.wide + p.cols + p.ctmp + p.gemm + p.lo + p.off + p.high + p.any +
                   p.wv + p.wm + p.wsum + p.wp + p.wz;
    p.total = 64 + static_cast<std::size_t>(p.team) * p.per_thread;
    return p;
}

/// Weights packed for a padded geometry (qconv_packed_shape): the products run on x's rows
/// copied with the channels padded by the zero point, or read with each kernel row widened.
bool pads_input(const QConvShape& s, const PackedQConvW& w) noexcept {
    return (w.c > s.c || w.kw > s.kw) && s.group == 1 && !w.winograd();
}

/// With pads_input and no dilation along x, the pixels a row of the chunks' padded copy has
/// (run_pointers: each kernel row's taps one run, never past a row's ends), else 0.
int64_t run_width(const QConvShape& s, const PackedQConvW& w) noexcept {
    if (!pads_input(s, w) || s.dw != 1) return 0;
    return std::max(s.pl + s.w, (std::max<int64_t>(1, s.ow) - 1) * s.sw + w.kw);
}

/// The geometry the products run: s, or with pads_input the padded one, x in the chunks' own
/// NHWC copy.
QConvShape run_shape(const QConvShape& s, const PackedQConvW& w) noexcept {
    QConvShape r = s;
    if (pads_input(s, w)) {
        r.c = w.c;
        r.kw = w.kw;
        r.x_nhwc = false;
    }
    return r;
}

std::size_t out_size(QGemmOutput o) noexcept {
    return o == QGemmOutput::s32 || o == QGemmOutput::f32 ? 4 : 1;
}

}  // namespace

/// The smallest K for which the INT8 convolution packs the paired byte form for 7-bit A
/// (QBForm::paired_a7: 4 x 16 tiles, two groups a step) rather than a group a step (bytes_a7,
/// 6 x 16 tiles). bench_qconv impl 5 and 6 (ResNet-50 QDQ's shapes, per-channel weights, ReLU
/// inputs), n 1, 1 thread, AVX2 Zen 3, min of 5 alternating rounds, paired against a group a
/// step: K 64 (1x1 from 64 channels, 28-45% of the steps lone) 0.86-0.96x, K 128 (1x1 128 ->
/// 512 at 28x28) 0.93x, K 256 1.02-1.04x, K 576 (3x3 64) 1.01-1.03x, K 512-4608 1.05-1.14x.
constexpr int64_t kPairedA7MinK = 256;

QConvShape qconv_packed_shape(const QConvShape& s, QIsa isa) noexcept {
    QConvShape r = s;
    if (isa != QIsa::avx512_vnni || s.group != 1 || s.c <= 0 || s.c >= 4 || s.kw <= 0) return r;
    int64_t kw = s.kw;  // the fewest taps from kw on that fill whole groups of 4 bytes
    while (kw * s.c % 4 != 0) ++kw;
    if (kw * s.c < s.kw * 4)
        r.kw = kw;
    else
        r.c = 4;
    return r;
}

PackedQConvW pack_qconv_weights(const void* w, bool w_unsigned, const QConvShape& s, QIsa isa,
                                bool a7, bool winograd, const std::int32_t* w_zero) {
    if (const QConvShape sp = qconv_packed_shape(s, isa);
        (sp.c > s.c || sp.kw > s.kw) && !winograd) {
        // The added channels' weights: each output channel's zero point (no term of their
        // own: x's added channels hold its zero point); the added taps': 0 as packed (qconv
        // gives them x's zero point where qgemm_rows does not run).
        const int64_t cp = sp.c, kwp = sp.kw;
        const auto* src = static_cast<const std::uint8_t*>(w);
        const auto none = static_cast<std::uint8_t>(w_unsigned ? 128 : 0);
        std::vector<std::uint8_t> wp(static_cast<std::size_t>(s.m * cp * s.kh * kwp));
        for (int64_t o = 0; o < s.m; ++o) {
            const auto z = w_zero != nullptr ? static_cast<std::uint8_t>(w_zero[o]) : none;
            for (int64_t c = 0; c < cp; ++c)
                for (int64_t i = 0; i < s.kh; ++i)
                    for (int64_t j = 0; j < kwp; ++j)
                        wp[static_cast<std::size_t>(((o * cp + c) * s.kh + i) * kwp + j)] =
                            c >= s.c    ? z
                            : j >= s.kw ? none
                                        : src[((o * s.c + c) * s.kh + i) * s.kw + j];
        }
        return pack_qconv_weights(wp.data(), w_unsigned, sp, isa, a7, false, w_zero);
    }
    PackedQConvW out;
    out.group = s.group;
    out.c = s.c;
    out.kw = s.kw;
    out.k = s.k();
    out.mg = s.mg();
    const int64_t cg = s.cg(), khw = s.kh * s.kw, k = out.k, mg = out.mg;
    const auto* src = static_cast<const std::uint8_t*>(w);
    if (winograd && s.kh == 3 && s.kw == 3 && s.group == 1 && s.m > 0 && s.c > 0) {
        // g = w minus its output channel's zero point (|g| <= 255); U = G' g G'^T per (o, c),
        // at most 9 * 255 in magnitude.
        std::vector<std::int32_t> zw(static_cast<std::size_t>(s.m), w_unsigned ? 128 : 0);
        if (w_zero != nullptr) std::copy_n(w_zero, s.m, zw.begin());
        const auto g_at = [&](int64_t o, int64_t c, int q) -> std::int32_t {
            const std::uint8_t b = src[(o * s.c + c) * 9 + q];
            return (w_unsigned ? static_cast<std::int32_t>(b)
                               : static_cast<std::int32_t>(static_cast<std::int8_t>(b))) -
                   zw[static_cast<std::size_t>(o)];
        };
        bool exact = true;
        for (int64_t o = 0; o < s.m && exact; ++o) {
            std::int64_t sum = 0;
            for (int64_t c = 0; c < s.c; ++c)
                for (int q = 0; q < 9; ++q) sum += std::abs(g_at(o, c, q));
            exact = sum * 255 < (std::int64_t{1} << 29);
        }
        if (exact) {
            const int64_t cs = (s.c + 15) / 16 * 16;
            std::vector<std::int16_t> u(static_cast<std::size_t>(16 * s.m * cs), 0);
            for (int64_t o = 0; o < s.m; ++o)
                for (int64_t c = 0; c < s.c; ++c) {
                    std::int32_t g[3][3], t[4][3];
                    for (int q = 0; q < 9; ++q) g[q / 3][q % 3] = g_at(o, c, q);
                    for (int j = 0; j < 3; ++j) {  // G' g
                        t[0][j] = 2 * g[0][j];
                        t[1][j] = g[0][j] + g[1][j] + g[2][j];
                        t[2][j] = g[0][j] - g[1][j] + g[2][j];
                        t[3][j] = 2 * g[2][j];
                    }
                    for (int i = 0; i < 4; ++i) {  // (G' g) G'^T
                        const std::int32_t row[4] = {2 * t[i][0], t[i][0] + t[i][1] + t[i][2],
                                                     t[i][0] - t[i][1] + t[i][2], 2 * t[i][2]};
                        for (int j = 0; j < 4; ++j)
                            u[static_cast<std::size_t>(((i * 4 + j) * s.m + o) * cs + c)] =
                                static_cast<std::int16_t>(row[j]);
                    }
                }
            out.wino_k = cs;
            out.wino_zero = std::move(zw);
            for (int xi = 0; xi < 16; ++xi)
                out.wino.push_back(
                    pack_qb_s16(u.data() + static_cast<std::size_t>(xi * s.m * cs), cs, s.m, isa));
            return out;
        }
    }
    std::vector<std::uint8_t> t(static_cast<std::size_t>(std::max<int64_t>(1, mg * k)));
    for (int64_t g = 0; g < s.group; ++g) {
        // [mg, cg, kh, kw] -> [mg, kh, kw, cg]: B stored [N, K] with K in im2col's order.
        for (int64_t o = 0; o < mg; ++o)
            for (int64_t c = 0; c < cg; ++c)
                for (int64_t q = 0; q < khw; ++q)
                    t[static_cast<std::size_t>(o * k + q * cg + c)] =
                        src[((g * mg + o) * cg + c) * khw + q];
        // avx2: the 16-bit form, or the byte form for 7-bit A; qgemm_rows reads both (not the
        // byte forms with corrections).
        const bool split = a7 && s.group == 1 && cg % 4 == 0 && cg <= 65535;
        out.groups.push_back(pack_qb(t.data(), w_unsigned, k, mg, /*transposed=*/true, isa,
                                     !split               ? QBForm::wide
                                     : k >= kPairedA7MinK ? QBForm::paired_a7
                                                          : QBForm::bytes_a7));
    }
    return out;
}

std::size_t qconv_workspace_bytes(const QConvShape& s, const PackedQConvW& w,
                                  std::size_t out_bytes, int64_t threads) noexcept {
    return plan_for(run_shape(s, w), w, out_bytes, std::max<int64_t>(1, threads), run_width(s, w))
        .total;
}

bool qconv(const QConvShape& s_in, const void* x, const QConvFloatInput* fx, const PackedQConvW& w,
           void* y, const QGemmParams& p, void* workspace, std::size_t workspace_bytes) noexcept {
    const bool cpad = pads_input(s_in, w);
    const QConvShape s = run_shape(s_in, w);
    const int64_t pixels = s.pixels(), hw = s.h * s.w, cg = s.cg(), mg = s.mg();
    if (s.batch == 0 || pixels == 0 || s.m == 0) return true;
    if (w.winograd() && (s.kh != 3 || s.kw != 3 || s.sh != 1 || s.sw != 1 || s.dh != 1 ||
                         s.dw != 1 || s.group != 1 || p.a_signed))
        return false;    // the Winograd form is for this geometry only (pack_qconv_weights)
    if (w.winograd()) {  // and for the weights' zero points it was packed with
        bool same = w.wino_zero.size() == static_cast<std::size_t>(s.m);
        for (int64_t o = 0; same && o < s.m; ++o)
            same = (p.b_zeros != nullptr ? p.b_zeros[o] : p.b_zero) ==
                   w.wino_zero[static_cast<std::size_t>(o)];
        if (!same) return false;
    }
    const std::size_t eb = out_size(p.out);
    auto* base = static_cast<unsigned char*>(workspace);
    if (base == nullptr) return false;
    base += (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
    // The calling thread's budget, or fewer threads when the workspace was sized for fewer.
    int64_t threads = max_threads();
    // pads_input: x's rows padded left and right too where qgemm_rows reads each kernel row
    // as one run (run_pointers).
    const int64_t run_w =
        cpad && qgemm_rows_supported(w.groups.front(), p) ? run_width(s_in, w) : 0;
    Plan plan = plan_for(s, w, eb, threads, run_w);
    while (plan.total > workspace_bytes && threads > 1) plan = plan_for(s, w, eb, --threads, run_w);
    if (plan.total > workspace_bytes) return false;
    const auto pad = static_cast<std::uint8_t>(p.a_zero);
    const int64_t chunks = s.batch * plan.slices;
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&](int64_t t) {
        unsigned char* buf = base + static_cast<std::size_t>(t) * plan.per_thread;
        auto* nhwc = reinterpret_cast<std::uint8_t*>(buf);
        auto* wide = reinterpret_cast<std::uint16_t*>(buf + plan.nhwc);
        auto* cols = reinterpret_cast<std::uint8_t*>(buf + plan.nhwc + plan.wide);
        unsigned char* ctmp = buf + plan.nhwc + plan.wide + plan.cols;
        unsigned char* gws = ctmp + plan.ctmp;
        auto* lo = reinterpret_cast<std::uint8_t*>(gws + plan.gemm);
        auto* hi_off = reinterpret_cast<std::uint32_t*>(gws + plan.gemm + plan.lo);
        unsigned char* high = gws + plan.gemm + plan.lo + plan.off;
        auto* any = reinterpret_cast<std::uint8_t*>(high + plan.high);
        unsigned char* wbuf = high + plan.high + plan.any;
        auto* wv = reinterpret_cast<std::int16_t*>(wbuf);
        auto* wm = reinterpret_cast<std::int32_t*>(wbuf + plan.wv);
        auto* wsum = reinterpret_cast<std::int32_t*>(wbuf + plan.wv + plan.wm);
        auto* wp = reinterpret_cast<const std::uint8_t**>(wbuf + plan.wv + plan.wm + plan.wsum);
        auto* wz = reinterpret_cast<std::uint8_t*>(wbuf + plan.wv + plan.wm + plan.wsum + plan.wp);
        if (plan.wglobal) {  // the Winograd form's chunks over the batch (x, y channels last)
            const int64_t th = (s.oh + 1) / 2, rows_all = s.batch * th;
            for (int64_t ci; (ci = next.fetch_add(1, std::memory_order_relaxed)) < plan.wchunks;) {
                const int64_t g0 = ci * plan.wtr, g1 = std::min(rows_all, g0 + plan.wtr);
                wino_chunk(s, w, static_cast<const std::uint8_t*>(x), hw * s.c, 0, s.h, g0, g1, th,
                           pad, wv, wm, wp, wsum, wz);
                // Stored image by image (a residual's offsets are per image).
                const int64_t pix0 = g0 / th * pixels + 2 * (g0 % th) * s.ow;
                for (int64_t n = g0 / th; n <= (g1 - 1) / th; ++n) {
                    const int64_t a = std::max(pix0, n * pixels);
                    const int64_t b =
                        std::min((n + 1) * pixels,
                                 (g1 - 1) / th == n
                                     ? n * pixels + std::min(s.oh, 2 * ((g1 - 1) % th + 1)) * s.ow
                                     : (n + 1) * pixels);
                    QGemmParams pg = p;
                    if (p.residual != nullptr) {
                        const auto* rbase = static_cast<const unsigned char*>(p.residual);
                        if (s.r_nhwc) {
                            pg.residual = rbase + a * s.m;
                            pg.residual_row = s.m;
                            pg.residual_col = 1;
                        } else {
                            pg.residual = rbase + n * s.m * pixels + (a - n * pixels);
                            pg.residual_row = 1;
                            pg.residual_col = pixels;
                        }
                    }
                    qgemm_store_s32(
                        wsum + (a - pix0) * s.m, s.m, b - a, w.wino.front(),
                        static_cast<unsigned char*>(y) + static_cast<std::size_t>(a * s.m) * eb,
                        s.m, pg);
                }
            }
            return;
        }
        for (int64_t ci; (ci = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
            const int64_t n = ci / plan.slices, r0 = ci % plan.slices * plan.rows;
            const int64_t r1 = std::min(s.oh, r0 + plan.rows);
            if (r0 >= r1) continue;
            // The input rows the chunk's windows read, to NHWC.
            const int64_t iy0 = std::clamp<int64_t>(r0 * s.sh - s.pt, 0, s.h);
            const int64_t iy1 =
                std::clamp<int64_t>((r1 - 1) * s.sh - s.pt + (s.kh - 1) * s.dh + 1, iy0, s.h);
            const int64_t pix_in = (iy1 - iy0) * s.w;
            const std::uint8_t* image = nhwc;  // the rows [iy0, iy1) in NHWC
            if (run_w > 0) {
                // Each row between s.pl and the rest of run_w pixels of the zero point.
                const std::size_t row = static_cast<std::size_t>(run_w * s.c);
                for (int64_t iy = iy0; iy < iy1; ++iy) {
                    std::uint8_t* d = nhwc + static_cast<std::size_t>(iy - iy0) * row;
                    std::memset(d, pad, static_cast<std::size_t>(s.pl * s.c));
                    pad_channels(s_in, x, fx, n * s_in.c * hw + iy * s.w, s.w, s.c, pad,
                                 d + s.pl * s.c);
                    std::memset(d + (s.pl + s.w) * s.c, pad,
                                static_cast<std::size_t>((run_w - s.pl - s.w) * s.c));
                }
            } else if (cpad) {
                pad_channels(s_in, x, fx, n * s_in.c * hw + iy0 * s.w, pix_in, s.c, pad, nhwc);
            } else if (s.x_nhwc)
                image = static_cast<const std::uint8_t*>(x) + (n * hw + iy0 * s.w) * s.c;
            else if (fx != nullptr)
                quantize_to_nhwc(fx->x + n * s.c * hw + iy0 * s.w, s.c, hw, pix_in, *fx, nhwc, s.c);
            else
                transpose_blocks(static_cast<const std::uint8_t*>(x) + n * s.c * hw + iy0 * s.w,
                                 hw, nhwc, s.c, s.c, pix_in, 1);
            const int64_t rows = (r1 - r0) * s.ow;
            bool widened = false;  // `wide` holds the rows [iy0, iy1) as u16
            int split = 0;         // a7: `lo` holds their low bits; 1: the lists, 2: dense
            for (int64_t g = 0; g < s.group; ++g) {
                const PackedQB& wg =
                    plan.wino ? w.wino.front() : w.groups[static_cast<std::size_t>(g)];
                QGemmParams pg = p;
                const int64_t off = g * mg;
                if (p.b_zeros != nullptr) pg.b_zeros = p.b_zeros + off;
                if (p.b_scales != nullptr) pg.b_scales = p.b_scales + off;
                if (p.bias != nullptr) pg.bias = p.bias + off;
                if (p.bias_s32 != nullptr) pg.bias_s32 = p.bias_s32 + off;
                if (p.residual != nullptr) {  // the chunk's rows, the group's channels
                    const auto* rbase = static_cast<const unsigned char*>(p.residual);
                    if (s.r_nhwc) {
                        pg.residual = rbase + (n * pixels + r0 * s.ow) * s.m + off;
                        pg.residual_row = s.m;
                        pg.residual_col = 1;
                    } else {
                        pg.residual = rbase + (n * s.m + off) * pixels + r0 * s.ow;
                        pg.residual_row = 1;
                        pg.residual_col = pixels;
                    }
                }
                // NHWC y: C goes straight to the group's channels of the chunk's pixel rows.
                unsigned char* c = s.y_nhwc ? static_cast<unsigned char*>(y) +
                                                  static_cast<std::size_t>((n * pixels + r0 * s.ow) *
                                                                           s.m + off) * eb
                                            : ctmp;
                const int64_t ldc = s.y_nhwc ? s.m : mg;
                if (plan.wino) {
                    wino_chunk(s, w, image, 0, iy0, iy1, r0 / 2, (r1 + 1) / 2, (s.oh + 1) / 2, pad,
                               wv, wm, wp, wsum, wz);
                    qgemm_store_s32(wsum, s.m, rows, wg, c, ldc, pg);
                } else if (plan.a7) {
                    // B in the form for 7-bit A (one group): qgemm_rows on the rows' low bits,
                    // their high bits as lists where few are set, else dense.
                    if (!qgemm_rows_supported(wg, pg)) {
                        failed.store(true, std::memory_order_relaxed);
                        return;
                    }
                    auto* lists = reinterpret_cast<std::uint16_t*>(high);
                    if (split == 0)
                        split =
                            split_sparse(image, pix_in, s.c, lo, hi_off, lists, plan.cap) ? 1 : 2;
                    if (split == 2 && !widened) split_dense(image, pix_in * s.c, lo, high);
                    widened = true;  // (the dense split is made once too)
                    const auto zp = static_cast<std::uint8_t>(pad >> 7);
                    QRowsA a = row_pointers(s, lo, 1, iy0, r0, r1, 0,
                                            static_cast<std::uint8_t>(pad & 0x7f), cols);
                    const int64_t np = a.segments * a.m;
                    if (split == 1) {
                        std::uint16_t* zero_list = lists + plan.cap;  // the padding's
                        zero_list[0] = static_cast<std::uint16_t>(zp != 0 ? s.c : 0);
                        for (int64_t ch = 0; zp != 0 && ch < s.c; ++ch)
                            zero_list[1 + ch] = static_cast<std::uint16_t>(ch);
                        auto** hp = reinterpret_cast<const std::uint16_t**>(
                            const_cast<const std::uint8_t**>(a.rows) + np);
                        tap_pointers(
                            s, iy0, r0, r1, static_cast<const std::uint16_t*>(zero_list),
                            [&](int64_t q) noexcept {
                                return static_cast<const std::uint16_t*>(lists + hi_off[q]);
                            },
                            hp);
                        a.hi = hp;
                        // Whether any tap of each output pixel has a high bit: computed once
                        // here, not by every tile of every column panel.
                        std::fill_n(any, a.m, std::uint8_t{0});
                        for (int64_t sg = 0; sg < a.segments; ++sg)
                            for (int64_t i = 0; i < a.m; ++i)
                                any[i] |= hp[sg * a.m + i][0] != 0 ? 1 : 0;
                        a.hi_any = any;
                    } else {
                        std::uint8_t* zero_row = high + pix_in * s.c;
                        std::memset(zero_row, zp, static_cast<std::size_t>(s.c));
                        auto** hr = const_cast<const std::uint8_t**>(a.rows) + np;
                        tap_pointers(
                            s, iy0, r0, r1, static_cast<const std::uint8_t*>(zero_row),
                            [&](int64_t q) noexcept {
                                return static_cast<const std::uint8_t*>(high + q * s.c);
                            },
                            hr);
                        a.hi_rows = hr;
                    }
                    qgemm_rows(a, wg, c, ldc, pg);
                } else if (run_w > 0) {
                    qgemm_rows(run_pointers(s, image, run_w, iy0, r0, r1, pad, cols), wg, c, ldc,
                               pg);
                } else if (cg % wg.group == 0 && qgemm_rows_supported(wg, pg)) {
                    // A in place: each pixel's kernel taps point into the image (or at a row
                    // of the zero point), no im2col or packing. The 16-bit families read the
                    // chunk's input rows widened to u16 once (a 3x3 window reads each 9 times).
                    const std::uint8_t* in = image;
                    if (plan.eb == 2) {
                        if (!widened) widen_u16(image, pix_in * s.c, wide);
                        widened = true;
                        in = reinterpret_cast<const std::uint8_t*>(wide);
                    }
                    qgemm_rows(row_pointers(s, in, plan.eb, iy0, r0, r1, g, pad, cols), wg, c, ldc,
                               pg);
                } else {
                    const std::uint8_t* a = image + g * cg;
                    int64_t lda = s.c;
                    if (!s.pointwise()) {
                        im2col_rows(s, image, iy0, r0, r1, g, pad, cols);
                        a = cols;
                        lda = s.k();
                        if (s.kw > s_in.kw) {
                            // Widened kernel rows (qconv_packed_shape): the added taps x's
                            // zero point, whose products are 0 whatever the weights' zero
                            // point (the added taps' weights are 0 as packed).
                            const auto tail = static_cast<std::size_t>((s.kw - s_in.kw) * s.c);
                            for (int64_t q = 0; q < rows * s.kh; ++q)
                                std::memset(cols + q * s.kw * s.c + s_in.kw * s.c, pad, tail);
                        }
                    }
                    if (!qgemm_packed(rows, a, lda, wg, c, ldc, pg, gws, plan.gemm)) {
                        failed.store(true, std::memory_order_relaxed);
                        return;
                    }
                }
                if (!s.y_nhwc)
                    transpose_blocks(ctmp, mg,
                                 static_cast<unsigned char*>(y) +
                                     static_cast<std::size_t>((n * s.m + off) * pixels +
                                                              r0 * s.ow) * eb,
                                 pixels, rows, mg, eb);
            }
        }
    };
    run_team(plan.team, work);
    return !failed.load();
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
