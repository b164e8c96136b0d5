// Convolution as im2col + packed GEMM on blocked activations (see conv_gemm.hpp).
#include "cpu/fast/conv_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/fast/fast_fused.hpp"
#include "cpu/parallel.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// Bytes of im2col rows one chunk may hold.
constexpr int64_t kChunkBytes = int64_t{8} << 20;

int64_t k_of(const ConvGemmShape& s) noexcept { return s.kh * s.kw * s.c; }
int64_t pixels(const ConvGemmShape& s) noexcept { return s.n * s.oh * s.ow; }

/// Rows (output pixels) per chunk: all of them when their im2col fits kChunkBytes, else equal
/// chunks of at most that (and at least 96 rows, so the GEMM keeps whole row blocks).
int64_t chunk_rows(const ConvGemmShape& s) noexcept {
    const int64_t m = pixels(s), row_bytes = k_of(s) * static_cast<int64_t>(sizeof(float));
    const int64_t cap = std::max<int64_t>(96, kChunkBytes / std::max<int64_t>(row_bytes, 1));
    const int64_t chunks = (m + cap - 1) / cap;
    return (m + chunks - 1) / chunks;
}

std::size_t aligned(std::size_t bytes) noexcept { return (bytes + 63) / 64 * 64; }

/// Copies B floats (a channel block of one pixel).
template <int B>
inline void copy_block(float* dst, const float* src) noexcept {
    for (int i = 0; i < B; ++i) dst[i] = src[i];
}

/// im2col rows [r0, r1) of the chunk starting at pixel p0, into a (rows of K floats).
template <int B>
void gather(const ConvGemmShape& s, const float* x, int64_t p0, int64_t r0, int64_t r1,
            float* a) noexcept {
    const int64_t blocks = s.c / B, k = k_of(s), plane = s.oh * s.ow;
    const int64_t img = blocks * s.h * s.w * B;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t p = p0 + r, n = p / plane, q = p % plane;
        const int64_t oy = q / s.ow, ox = q % s.ow;
        float* row = a + r * k;
        const float* xn = x + n * img;
        for (int64_t ky = 0; ky < s.kh; ++ky) {
            const int64_t iy = oy * s.sh - s.ph + ky;
            for (int64_t kx = 0; kx < s.kw; ++kx) {
                const int64_t ix = ox * s.sw - s.pw + kx;
                float* dst = row + (ky * s.kw + kx) * s.c;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) {
                    std::memset(dst, 0, static_cast<std::size_t>(s.c) * sizeof(float));
                    continue;
                }
                const float* src = xn + (iy * s.w + ix) * B;
                for (int64_t cb = 0; cb < blocks; ++cb)
                    copy_block<B>(dst + cb * B, src + cb * s.h * s.w * B);
            }
        }
    }
}

/// Y rows [r0, r1) of the chunk at pixel p0 from the GEMM's row-major result c (oc floats per
/// row): y = c + z, then ReLU when `relu`.
template <int B>
void scatter(const ConvGemmShape& s, const float* c, const float* z, float* y, bool relu,
             int64_t p0, int64_t r0, int64_t r1) noexcept {
    const int64_t blocks = s.oc / B, plane = s.oh * s.ow;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t p = p0 + r, n = p / plane, q = p % plane;
        const float* src = c + r * s.oc;
        for (int64_t ob = 0; ob < blocks; ++ob) {
            const int64_t at = ((n * blocks + ob) * plane + q) * B;
            float v[B];
            for (int i = 0; i < B; ++i) v[i] = src[ob * B + i];
            if (z != nullptr)
                for (int i = 0; i < B; ++i) v[i] += z[at + i];
            if (relu)
                for (int i = 0; i < B; ++i) v[i] = v[i] < 0.f ? 0.f : v[i];
            for (int i = 0; i < B; ++i) y[at + i] = v[i];
        }
    }
}

template <int B>
bool run_blocked(const ConvGemmShape& s, const float* x, const PackedB& w, const float* bias,
                 const float* z, float* y, const ActivationSpec& act, unsigned char* ws,
                 std::size_t ws_bytes) noexcept {
    const int64_t m = pixels(s), k = k_of(s), rows = chunk_rows(s);
    std::vector<float> a_heap, c_heap;
    float *a = nullptr, *c = nullptr;
    unsigned char* gemm_ws = nullptr;
    std::size_t gemm_bytes = 0;
    const std::size_t a_bytes = aligned(static_cast<std::size_t>(rows * k) * sizeof(float));
    const std::size_t c_bytes = aligned(static_cast<std::size_t>(rows * s.oc) * sizeof(float));
    if (ws != nullptr && ws_bytes >= a_bytes + c_bytes) {
        a = reinterpret_cast<float*>(ws);
        c = reinterpret_cast<float*>(ws + a_bytes);
        gemm_ws = ws + a_bytes + c_bytes;
        gemm_bytes = ws_bytes - a_bytes - c_bytes;
    } else {
        try {
            a_heap.resize(static_cast<std::size_t>(rows * k));
            c_heap.resize(static_cast<std::size_t>(rows * s.oc));
        } catch (...) {
            return false;
        }
        a = a_heap.data();
        c = c_heap.data();
    }
    const bool relu = act.kind == Activation::relu;
    // Rows per parallel_for grain: about 64 KiB of im2col.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1));
    for (int64_t p0 = 0; p0 < m; p0 += rows) {
        const int64_t cur = std::min(rows, m - p0);
        parallel_for(cur, grain, [&](int64_t r0, int64_t r1) { gather<B>(s, x, p0, r0, r1, a); });
        if (!sgemm_packed(cur, a, k, w, c, s.oc, bias, 1.f, GemmActivation::none, gemm_ws,
                          gemm_bytes))
            return false;
        parallel_for(cur, std::max<int64_t>(1, 16384 / s.oc), [&](int64_t r0, int64_t r1) {
            scatter<B>(s, c, z, y, relu, p0, r0, r1);
        });
    }
    if (!relu && !act.empty()) apply_activation_f32(y, m * s.oc, act);
    return true;
}

}  // namespace

bool conv_gemm_preferred(const ConvGemmShape& s) noexcept {
    // 1x1: oneDNN's direct kernel is a GEMM already. Output maps of at most 8x8 pixels: oneDNN's
    // kernel blocks along the output row (7 pixels at ResNet-50's last stage) and runs at ~2/3 of
    // the packed GEMM's rate. Strided windows into maps of at most 14x14 (ResNet-50's 28 -> 14,
    // 256 channels): 14.8 -> 13.4 ms at batch 8 (medians of 7). At 56 -> 28 (128 channels) the
    // im2col traffic ate the gain (15.9 against oneDNN's 15.0 ms), so oneDNN keeps those.
    if (s.kh * s.kw <= 1) return false;
    const int64_t out = s.oh * s.ow;
    const bool strided = s.sh > 1 || s.sw > 1;
    // On AVX-512 (channel blocks of 16) oneDNN's direct kernel beats the GEMM on stride-1
    // windows: ResNet-50's 512 channels at 7x7, batch 1, 2 threads: 0.66 ms against 0.80
    // (bench_conv, medians of 5 interleaved repetitions; docs/PLATFORM.md).
    if (s.block >= 16 && !strided) return false;
    return out <= 64 || (strided && out <= 196);
}

PackedB pack_conv_gemm_weights(const float* w, const ConvGemmShape& s) {
    // [oc][c][ky][kx] -> [oc][ky][kx][c], then packed as a transposed B ([N, K]).
    const int64_t k = k_of(s), win = s.kh * s.kw;
    std::vector<float> t(static_cast<std::size_t>(s.oc * k));
    for (int64_t o = 0; o < s.oc; ++o)
        for (int64_t ci = 0; ci < s.c; ++ci)
            for (int64_t q = 0; q < win; ++q)
                t[static_cast<std::size_t>(o * k + q * s.c + ci)] = w[(o * s.c + ci) * win + q];
    return pack_b(t.data(), k, s.oc, true);
}

void unpack_conv_gemm_weights(const PackedB& b, const ConvGemmShape& s, float* w) noexcept {
    const int64_t k = k_of(s), win = s.kh * s.kw;
    for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t kb = kk / b.kc * b.kc, kc = std::min(b.kc, b.k - kb);
        const float* block = b.data.get() + kb * b.panels * b.nr;
        const int64_t q = kk / s.c, ci = kk % s.c;
        for (int64_t o = 0; o < s.oc; ++o)
            w[(o * s.c + ci) * win + q] =
                block[(o / b.nr) * kc * b.nr + (kk - kb) * b.nr + o % b.nr];
    }
}

std::size_t conv_gemm_workspace_bytes(const ConvGemmShape& s, int64_t threads) noexcept {
    const int64_t rows = chunk_rows(s), k = k_of(s);
    return aligned(static_cast<std::size_t>(rows * k) * sizeof(float)) +
           aligned(static_cast<std::size_t>(rows * s.oc) * sizeof(float)) +
           sgemm_workspace_bytes(rows, k, s.oc, sgemm_isa(), threads, s.oc) + 64;
}

bool conv_gemm_blocked(const ConvGemmShape& s, const float* x, const PackedB& w,
                       const float* bias, const float* z, float* y, const ActivationSpec& act,
                       void* workspace, std::size_t workspace_bytes) noexcept {
    if (pixels(s) == 0 || s.oc == 0) return true;
    auto* ws = static_cast<unsigned char*>(workspace);
    if (ws != nullptr) {  // 64-byte aligned inside the caller's buffer
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        if (workspace_bytes < skip) ws = nullptr;
        else {
            ws += skip;
            workspace_bytes -= skip;
        }
    }
    switch (s.block) {
        case 8: return run_blocked<8>(s, x, w, bias, z, y, act, ws, workspace_bytes);
        case 16: return run_blocked<16>(s, x, w, bias, z, y, act, ws, workspace_bytes);
        default: return false;
    }
}

}  // namespace dsinfer::detail
