// Winograd F(4x4, 3x3) convolution on blocked activations (see conv_winograd.hpp).
#include "kernels/conv_winograd.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>


#include "kernels/activation_f32.hpp"
#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"

// Vector-typed values crossing functions trip -Wpsabi; it says nothing about this code.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// Floats between consecutive point matrices of a chunk's buffers: a whole number of 4 KiB
/// pages plus one cache line, so that the 36 lines a tile's transform stores (or loads) fall in
/// 36 different L1 sets. Unpadded (96 tiles x 64 channels: 24 KiB apart) all 36 shared one
/// set and the stores were 54% of the F(4x4) convolution's time at 56x56 (perf, 1 thread).
constexpr int64_t matrix_stride(int64_t floats) noexcept {
    return (floats + 1023) / 1024 * 1024 + 16;
}

/// Output tile edge, input tile edge, points of a transformed tile.
constexpr int64_t kM = 4, kA = kM + 2, kPoints = kA * kA;

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_WINO_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx2,fma"))), apply_to = function)
#endif
namespace avx512 {
#include "kernels/conv_winograd_kernels.inc"
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
namespace avx2 {
#include "kernels/conv_winograd_kernels.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#else
#define DSINFER_WINO_X86 0
#endif

namespace baseline {
#include "kernels/conv_winograd_kernels.inc"
}  // namespace baseline

/// Bytes of transformed tiles (input and output) one thread's chunk may hold: the 36 GEMMs of
/// a chunk then read their A from, and write their C to, this thread's share of the L3.
constexpr int64_t kChunkBytes = int64_t{4} << 20;

int64_t tiles_of(const ConvGemmShape& s) noexcept {
    return s.n * ((s.oh + kM - 1) / kM) * ((s.ow + kM - 1) / kM);
}

/// Tiles per chunk on `threads` threads: within kChunkBytes of transformed tiles, at most 96
/// (a few of the GEMM's row blocks), and as many chunks as keeps the threads evenly busy.
int64_t chunk_tiles(const ConvGemmShape& s, int64_t threads) noexcept {
    const int64_t tiles = tiles_of(s);
    const int64_t per_tile = kPoints * (s.c + s.oc) * static_cast<int64_t>(sizeof(float));
    const int64_t cap = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(per_tile, 1), 6, 96);
    int64_t chunks = (tiles + cap - 1) / cap;
    chunks = (chunks + threads - 1) / threads * threads;  // a whole number of rounds
    return std::max<int64_t>(1, (tiles + chunks - 1) / chunks);
}

std::size_t aligned(std::size_t bytes) noexcept { return (bytes + 63) / 64 * 64; }

/// One thread's share of the workspace: vbuf, mbuf, the GEMM's own.
struct Share {
    std::size_t v = 0, m = 0, gemm = 0;
    std::size_t total() const noexcept { return v + m + gemm; }
};

Share share_of(const ConvGemmShape& s, int64_t cap) noexcept {
    constexpr auto points = static_cast<std::size_t>(kPoints);
    Share sh;
    sh.v = aligned(points * static_cast<std::size_t>(matrix_stride(cap * s.c)) * sizeof(float));
    sh.m = aligned(points * static_cast<std::size_t>(matrix_stride(cap * s.oc)) * sizeof(float));
    sh.gemm = aligned(sgemm_workspace_bytes(cap, s.c, s.oc, sgemm_isa(), 1, s.oc));
    return sh;
}

using ChunkFn = bool (*)(const ConvGemmShape&, const float*, const WinogradWeights&, const float*,
                         const float*, float*, bool, int64_t, int64_t, int64_t, float*, float*,
                         unsigned char*, std::size_t) noexcept;

ChunkFn chunk_fn(int64_t block) noexcept {
#if DSINFER_WINO_X86
    const fast::Isa isa = fast::active_isa();
    if (block == 16 && isa == fast::Isa::avx512) return &avx512::run_chunk<16>;
    if (block == 8 && isa != fast::Isa::baseline) return &avx2::run_chunk<8>;
#endif
    if (block == 16) return &baseline::run_chunk<16>;
    return &baseline::run_chunk<8>;
}

}  // namespace

bool conv_winograd_supported(const ConvGemmShape& s) noexcept {
    return s.kh == 3 && s.kw == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 &&
           s.ph >= 0 && s.pw >= 0 &&
           (s.block == 8 || s.block == 16) && s.c > 0 && s.oc > 0 && s.c % s.block == 0 &&
           s.oc % s.block == 0 && s.oh > 0 && s.ow > 0 && s.n > 0;
}

WinogradWeights pack_winograd_weights(std::shared_ptr<const float> weights, const ConvGemmShape& s) {
    // G (6 x 3) of F(4x4, 3x3) at the points 0, +-1, +-2; U = G g G^T in double.
    static const double g[6][3] = {{1. / 4, 0, 0},          {-1. / 6, -1. / 6, -1. / 6},
                                   {-1. / 6, 1. / 6, -1. / 6}, {1. / 24, 1. / 12, 1. / 6},
                                   {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
    WinogradWeights out;
    out.oihw = std::move(weights);
    const float* w = out.oihw.get();
    out.u.reserve(static_cast<std::size_t>(kPoints));
    for (int64_t p = 0; p < kPoints; ++p) out.u.push_back(packed_b_zeros(s.c, s.oc));
    float* dst[kPoints];
    for (int64_t p = 0; p < kPoints; ++p) dst[p] = out.u[static_cast<std::size_t>(p)].data.get();
    // Straight into the GEMM's packed layout (K = c, N = oc), in parallel over output channels:
    // the first run of a shape class transforms every layer's weights (ResNet-50: 13 layers,
    // 8.2 M weights into 33 M).
    parallel_for(s.oc, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t ci = 0; ci < s.c; ++ci) {
                const float* k = w + (o * s.c + ci) * 9;
                double t[kA][3];  // G k
                for (int i = 0; i < kA; ++i)
                    for (int j = 0; j < 3; ++j)
                        t[i][j] = g[i][0] * k[j] + g[i][1] * k[3 + j] + g[i][2] * k[6 + j];
                const int64_t at = packed_b_index(out.u[0], ci, o);
                for (int i = 0; i < kA; ++i)
                    for (int j = 0; j < kA; ++j)  // (G k) G^T
                        dst[i * kA + j][at] = static_cast<float>(
                            t[i][0] * g[j][0] + t[i][1] * g[j][1] + t[i][2] * g[j][2]);
            }
    });
    return out;
}

std::size_t conv_winograd_workspace_bytes(const ConvGemmShape& s, int64_t threads) noexcept {
    threads = std::max<int64_t>(threads, 1);
    return static_cast<std::size_t>(threads) * share_of(s, chunk_tiles(s, threads)).total() + 64;
}

bool conv_winograd_blocked(const ConvGemmShape& s, const float* x, const WinogradWeights& w,
                           const float* bias, const float* z, float* y, const ActivationSpec& act,
                           void* workspace, std::size_t workspace_bytes) noexcept {
    if (!conv_winograd_supported(s) || w.u.size() != static_cast<std::size_t>(kPoints) ||
        w.oihw == nullptr)
        return false;
    for (const PackedB& u : w.u)
        if (u.k != s.c || u.n != s.oc) return false;
    const int64_t threads = max_threads(), tiles = tiles_of(s);
    const int64_t cap = chunk_tiles(s, threads), chunks = (tiles + cap - 1) / cap;
    const int64_t team = std::min(threads, chunks);
    const Share sh = share_of(s, cap);
    auto* ws = static_cast<unsigned char*>(workspace);
    if (ws != nullptr) {  // 64-byte aligned inside the caller's buffer
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        if (workspace_bytes < skip ||
            workspace_bytes - skip < static_cast<std::size_t>(team) * sh.total())
            ws = nullptr;
        else
            ws += skip;
    }
    std::vector<unsigned char> heap;
    if (ws == nullptr) {
        try {
            heap.resize(static_cast<std::size_t>(team) * sh.total() + 64);
        } catch (...) {
            return false;
        }
        ws = heap.data() + (64 - reinterpret_cast<std::uintptr_t>(heap.data()) % 64) % 64;
    }
    const ChunkFn fn = chunk_fn(s.block);
    const bool relu = act.kind == Activation::relu;
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&](int64_t index) {
        unsigned char* mine = ws + static_cast<std::size_t>(index) * sh.total();
        auto* vbuf = reinterpret_cast<float*>(mine);
        auto* mbuf = reinterpret_cast<float*>(mine + sh.v);
        for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
            const int64_t t0 = c * cap, count = std::min(cap, tiles - t0);
            if (!fn(s, x, w, bias, z, y, relu, t0, count, cap, vbuf, mbuf, mine + sh.v + sh.m,
                    sh.gemm))
                failed.store(true, std::memory_order_relaxed);
        }
    };
    if (team > 1) {
        run_team(team, work);
    } else {
        ThreadBudget one(1);  // the chunk's GEMMs on this thread, within its share
        work(0);
    }
    if (failed.load()) return false;
    if (!relu && !act.empty()) apply_activation_f32(y, s.n * s.oc * s.oh * s.ow, act);
    return true;
}

std::size_t conv_winograd_nchw_workspace_bytes(const ConvGemmShape& s, int64_t threads) noexcept {
    return aligned(static_cast<std::size_t>(s.n * s.c * s.h * s.w) * sizeof(float)) +
           aligned(static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow) * sizeof(float)) +
           conv_winograd_workspace_bytes(s, threads) + 64;
}

bool conv_winograd_nchw(const ConvGemmShape& s, const float* x, const WinogradWeights& w,
                        const float* bias, const float* z, float* y, const ActivationSpec& act,
                        void* workspace, std::size_t workspace_bytes) noexcept {
    if (!conv_winograd_supported(s)) return false;
    const std::size_t xb = aligned(static_cast<std::size_t>(s.n * s.c * s.h * s.w) * sizeof(float));
    const std::size_t yb =
        aligned(static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow) * sizeof(float));
    auto* ws = static_cast<unsigned char*>(workspace);
    std::vector<unsigned char> heap;
    if (ws != nullptr) {
        const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(ws) % 64) % 64;
        if (workspace_bytes < skip || workspace_bytes - skip < xb + yb) ws = nullptr;
        else {
            ws += skip;
            workspace_bytes -= skip;
        }
    }
    if (ws == nullptr) {
        try {
            heap.resize(xb + yb + 64);
        } catch (...) {
            return false;
        }
        ws = heap.data() + (64 - reinterpret_cast<std::uintptr_t>(heap.data()) % 64) % 64;
        workspace_bytes = xb + yb;
    }
    auto* xblk = reinterpret_cast<float*>(ws);
    auto* yblk = reinterpret_cast<float*>(ws + xb);
    nchw_to_blocked(s, x, xblk);
    if (!conv_winograd_blocked(s, xblk, w, bias, nullptr, yblk, ActivationSpec{}, ws + xb + yb,
                               workspace_bytes - xb - yb))
        return false;
    store_blocked_as_nchw(s, yblk, z, y, act);
    return true;
}

}  // namespace dsinfer::detail

// No diagnostic pop: GCC reports -Wpsabi for these functions at the end of the file.
