// Convolution as im2col + packed GEMM on blocked activations (see conv_gemm.hpp).
#include "kernels/conv_gemm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>


#include "kernels/activation_f32.hpp"
#include "runtime/parallel.hpp"

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

// ---- plain NCHW ---------------------------------------------------------------------------

namespace {

/// Bytes of im2col columns (packed B) or of C one chunk may hold: a thread's chunk stays in its
/// share of the L2/L3 while its GEMM streams it once per block of A's rows.
constexpr int64_t kNchwChunkBytes = int64_t{1} << 20;
/// Columns a chunk holds at least, so that packing A (the weights, once per chunk) stays a
/// small part of the chunk's product (1/cols of its work).
constexpr int64_t kNchwMinCols = 192;

/// The packed-B panel geometry of sgemm_isa() (the GEMM's family), read once from a 1 x 1
/// PackedB.
struct PanelGeometry {
    int64_t nr = 0, kc = 0;
    fast::Isa isa = fast::Isa::baseline;
};

PanelGeometry panel_geometry() noexcept {
    static const std::array<PanelGeometry, 3> table = [] {
        std::array<PanelGeometry, 3> t{};
        for (int i = 0; i < 3; ++i) {
            const PackedB b = packed_b_zeros(1, 1, static_cast<fast::Isa>(i));
            t[static_cast<std::size_t>(i)] = {b.nr, b.kc, b.isa};
        }
        return t;
    }();
    return table[static_cast<std::size_t>(sgemm_isa())];
}

int64_t k_nchw(const ConvGemmShape& s) noexcept { return s.c * s.kh * s.kw; }

/// How the batch's columns (n x oh x ow) are split. With enough columns for every thread to
/// take several chunks, each thread gathers, multiplies (one-thread GEMM) and stores its own
/// chunks, taken from a shared counter: one parallel region per convolution, each chunk's
/// im2col and C in that thread's cache. Otherwise (small maps at small batches) one chunk at a
/// time runs on the whole team (the GEMM splits its panels). Either way every column's sums are
/// the GEMM's fixed K order: the split does not change a bit.
struct NchwLayout {
    bool per_thread = false;
    int64_t team = 1;  ///< buffers (one per thread in per_thread mode)
    int64_t cols = 0, panels = 0;
    std::size_t b = 0, c = 0, gemm = 0;
    std::size_t share() const noexcept { return b + c + gemm; }
};

NchwLayout nchw_layout(const ConvGemmShape& s, const PanelGeometry& g, int64_t threads) noexcept {
    NchwLayout l;
    const int64_t total = pixels(s), k = k_nchw(s);
    const int64_t per_col = std::max<int64_t>(std::max(k, s.oc), 1) *
                            static_cast<int64_t>(sizeof(float));
    int64_t cap = std::max<int64_t>(kNchwMinCols, kNchwChunkBytes / per_col);
    l.per_thread = threads > 1 && total >= 2 * threads * cap;
    if (!l.per_thread) cap = std::max(cap, int64_t{8} * kNchwChunkBytes / per_col);
    const int64_t chunks = (total + cap - 1) / cap;
    l.cols = (total + chunks - 1) / chunks;
    l.team = l.per_thread ? std::min(threads, chunks) : 1;
    l.panels = (l.cols + g.nr - 1) / g.nr;
    l.b = aligned(static_cast<std::size_t>(l.panels * g.nr * k) * sizeof(float));
    l.c = aligned(static_cast<std::size_t>(s.oc * l.cols) * sizeof(float));
    l.gemm = aligned(sgemm_workspace_bytes(s.oc, k, l.cols, g.isa, l.per_thread ? 1 : threads,
                                           l.cols));
    return l;
}

/// Writes `len` values of one im2col row into its packed panels from column `col` on: src[i *
/// step] (zeros when src is null). `row` is the row's first panel, `jump` the floats between
/// its panels.
inline void put_run(float* row, int64_t jump, int64_t nr, int64_t col, int64_t len,
                    const float* src, int64_t step) noexcept {
    while (len > 0) {
        const int64_t in = col % nr, seg = std::min(len, nr - in);
        float* d = row + (col / nr) * jump + in;
        if (src == nullptr) {
            for (int64_t i = 0; i < seg; ++i) d[i] = 0.f;
        } else if (step == 1) {
            for (int64_t i = 0; i < seg; ++i) d[i] = src[i];
        } else {
            for (int64_t i = 0; i < seg; ++i) d[i] = src[i * step];
            src += seg * step;
        }
        if (src != nullptr && step == 1) src += seg;
        col += seg;
        len -= seg;
    }
}

/// im2col rows [k0, k1) of the chunk of columns [j0, j0 + b.n) into the packed B `b`.
void gather_nchw(const ConvGemmShape& s, const float* x, int64_t j0, const PackedB& b,
                 int64_t k0, int64_t k1) noexcept {
    const int64_t plane = s.oh * s.ow, win = s.kh * s.kw, cols = b.n;
    for (int64_t kk = k0; kk < k1; ++kk) {
        const int64_t ci = kk / win, ky = kk % win / s.kw, kx = kk % s.kw;
        const int64_t kb = kk / b.kc * b.kc, kc = std::min(b.kc, b.k - kb);
        float* row = b.data.get() + kb * b.panels * b.nr + (kk - kb) * b.nr;
        const int64_t jump = kc * b.nr;
        // The output columns whose input column ix = ox * sw - pw + kx * dw lies in [0, w).
        const int64_t off = kx * s.dw - s.pw;
        const int64_t ox_lo = off >= 0 ? 0 : std::min(s.ow, (-off + s.sw - 1) / s.sw);
        const int64_t ox_hi = off > s.w - 1 ? 0 : std::min(s.ow, (s.w - 1 - off) / s.sw + 1);
        for (int64_t col = 0; col < cols;) {
            const int64_t j = j0 + col, n = j / plane, q = j % plane;
            const int64_t oy = q / s.ow, ox = q % s.ow, len = std::min(s.ow - ox, cols - col);
            const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
            if (iy < 0 || iy >= s.h || ox_lo >= ox_hi) {
                put_run(row, jump, b.nr, col, len, nullptr, 0);
            } else {
                const float* src = x + ((n * s.c + ci) * s.h + iy) * s.w;
                const int64_t a = std::clamp(ox_lo, ox, ox + len), e = std::clamp(ox_hi, ox, ox + len);
                put_run(row, jump, b.nr, col, a - ox, nullptr, 0);
                put_run(row, jump, b.nr, col + a - ox, e - a, src + a * s.sw + off, s.sw);
                put_run(row, jump, b.nr, col + e - ox, ox + len - e, nullptr, 0);
            }
            col += len;
        }
        put_run(row, jump, b.nr, cols, b.panels * b.nr - cols, nullptr, 0);  // padding
    }
}

/// Y's rows [o0, o1) (output channels) for the chunk of columns [j0, j0 + cols) from C
/// (row-major, `cols` per row): y = act(c + bias + z).
void store_nchw(const ConvGemmShape& s, const float* c, int64_t j0, int64_t cols,
                const float* bias, const float* z, float* y, const ActivationSpec& act,
                int64_t o0, int64_t o1) noexcept {
    const int64_t plane = s.oh * s.ow;
    const bool relu = act.kind == Activation::relu;
    for (int64_t o = o0; o < o1; ++o) {
        const float b = bias != nullptr ? bias[o] : 0.f;
        const float* src = c + o * cols;
        for (int64_t col = 0; col < cols;) {
            const int64_t j = j0 + col, n = j / plane, q = j % plane;
            const int64_t len = std::min(plane - q, cols - col);
            const int64_t at = (n * s.oc + o) * plane + q;
            float* dst = y + at;
            const float* zz = z != nullptr ? z + at : nullptr;
            for (int64_t i = 0; i < len; ++i) {
                float v = src[col + i] + b;
                if (zz != nullptr) v += zz[i];
                if (relu) v = v < 0.f ? 0.f : v;
                dst[i] = v;
            }
            if (!relu && !act.empty()) apply_activation_f32(dst, len, act);
            col += len;
        }
    }
}

}  // namespace

std::size_t conv_gemm_nchw_workspace_bytes(const ConvGemmShape& s, int64_t threads) noexcept {
    const NchwLayout l = nchw_layout(s, panel_geometry(), std::max<int64_t>(threads, 1));
    return static_cast<std::size_t>(l.team) * l.share() + 64;
}

bool conv_gemm_nchw(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                    const float* z, float* y, const ActivationSpec& act, void* workspace,
                    std::size_t workspace_bytes) noexcept {
    const int64_t total = pixels(s), k = k_nchw(s);
    if (total == 0 || s.oc == 0) return true;
    if (k == 0) return false;  // an empty sum: the caller's fallback
    const PanelGeometry g = panel_geometry();
    const NchwLayout l = nchw_layout(s, g, max_threads());
    const std::size_t need = static_cast<std::size_t>(l.team) * l.share();
    auto* ws = static_cast<unsigned char*>(workspace);
    std::vector<unsigned char> heap;
    if (ws != nullptr) {
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        ws = workspace_bytes < skip || workspace_bytes - skip < need ? nullptr : ws + skip;
    }
    if (ws == nullptr) {
        try {
            heap.resize(need + 64);
        } catch (...) {
            return false;
        }
        ws = heap.data() + (64 - reinterpret_cast<std::uintptr_t>(heap.data()) % 64) % 64;
    }
    const int64_t chunks = (total + l.cols - 1) / l.cols;
    // Chunk `index` on the buffers of share `mine`; the GEMM on the calling thread's budget.
    auto chunk = [&](int64_t index, unsigned char* mine, bool team) {
        // B in the share: a PackedB that owns nothing (the aliasing constructor allocates
        // nothing).
        PackedB b;
        b.k = k;
        b.nr = g.nr;
        b.kc = g.kc;
        b.isa = g.isa;
        b.data = std::shared_ptr<float>(std::shared_ptr<float>(), reinterpret_cast<float*>(mine));
        float* c = reinterpret_cast<float*>(mine + l.b);
        const int64_t j0 = index * l.cols;
        b.n = std::min(l.cols, total - j0);
        b.panels = (b.n + g.nr - 1) / g.nr;
        const int64_t grain = team ? std::max<int64_t>(1, 8192 / b.n) : k;
        parallel_for(k, grain, [&](int64_t k0, int64_t k1) { gather_nchw(s, x, j0, b, k0, k1); });
        if (!sgemm_packed(s.oc, w, k, b, c, b.n, nullptr, 1.f, GemmActivation::none,
                          mine + l.b + l.c, l.gemm))
            return false;
        parallel_for(s.oc, team ? std::max<int64_t>(1, 8192 / b.n) : s.oc,
                     [&](int64_t o0, int64_t o1) {
                         store_nchw(s, c, j0, b.n, bias, z, y, act, o0, o1);
                     });
        return true;
    };
    if (!l.per_thread) {
        for (int64_t i = 0; i < chunks; ++i)
            if (!chunk(i, ws, true)) return false;
        return true;
    }
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&](int64_t thread) {
        unsigned char* mine = ws + static_cast<std::size_t>(thread) * l.share();
        for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
            if (!chunk(i, mine, false)) failed.store(true, std::memory_order_relaxed);
    };
    run_team(l.team, work);
    return !failed.load();
}

void nchw_to_blocked(const ConvGemmShape& s, const float* x, float* dst) noexcept {
    const int64_t blk = s.block, blocks = s.c / blk, plane = s.h * s.w;
    parallel_for(s.n * blocks, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const float* src = x + p * blk * plane;  // channels p * blk .. of image p / blocks
            float* d = dst + p * plane * blk;
            for (int64_t q = 0; q < plane; ++q)
                for (int64_t l = 0; l < blk; ++l) d[q * blk + l] = src[l * plane + q];
        }
    });
}

void store_blocked_as_nchw(const ConvGemmShape& s, const float* src, const float* z, float* y,
                           const ActivationSpec& act) noexcept {
    const int64_t blk = s.block, blocks = s.oc / blk, plane = s.oh * s.ow;
    const bool relu = act.kind == Activation::relu;
    parallel_for(s.n * blocks, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const float* from = src + p * plane * blk;
            float* d = y + p * blk * plane;
            const float* zz = z != nullptr ? z + p * blk * plane : nullptr;
            for (int64_t l = 0; l < blk; ++l)
                for (int64_t q = 0; q < plane; ++q) {
                    float v = from[q * blk + l];
                    if (zz != nullptr) v += zz[l * plane + q];
                    if (relu) v = v < 0.f ? 0.f : v;
                    d[l * plane + q] = v;
                }
            if (!relu && !act.empty()) apply_activation_f32(d, blk * plane, act);
        }
    });
}

}  // namespace dsinfer::detail
