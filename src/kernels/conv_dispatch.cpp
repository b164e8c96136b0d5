// dsinfer's convolution cost rule (see conv_dispatch.hpp). The figures below are measurements,
// each said with the layout it was taken on; the thresholds are read off them.
#include "kernels/conv_dispatch.hpp"

#include "kernels/conv_winograd.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>

namespace dsinfer::detail {

namespace {

using std::int64_t;

bool can(ConvAlgoSet candidates, ConvAlgo a) noexcept {
    return (candidates & conv_algo_bit(a)) != 0;
}

/// Output tiles of 4x4 over the batch (Winograd F(4x4, 3x3)'s unit of work).
int64_t tiles_4x4(const ConvGemmShape& s) noexcept {
    return s.n * ((s.oh + 3) / 4) * ((s.ow + 3) / 4);
}

/// Nothing to compute: no output, no input channels, and on NCHW no window; on the blocked
/// layout an empty input map too (the oneDNN Conv kernel declines empty inputs and outputs).
bool nothing_to_compute(const ConvGemmShape& s, ConvLayout layout) noexcept {
    if (s.n <= 0 || s.oc <= 0 || s.oh <= 0 || s.ow <= 0 || s.c <= 0) return true;
    return layout == ConvLayout::nchw ? s.kh * s.kw <= 0 : s.h <= 0 || s.w <= 0;
}

/// Blocked layout: Winograd against oneDNN's direct kernel and the im2col GEMM.
bool blocked_winograd(const ConvGemmShape& s) noexcept {
    // The 36 transformed weight matrices (4x the direct form's) are read once per chunk of
    // tiles: with few tiles the convolution is bound by reading them. ResNet-50 batch 1, 512
    // channels at 7x7 (4 tiles): 4.3 ms against 1.7 for the im2col GEMM; 256 channels at 14x14
    // (16 tiles): 1.0 against 1.7 (bench_conv, 2 threads).
    return conv_winograd_supported(s) && tiles_4x4(s) >= 16;
}

/// Blocked layout: the im2col GEMM against oneDNN's direct kernel (conv_gemm_blocked takes
/// dilation 1 and channels in whole blocks on both sides).
bool blocked_gemm(const ConvGemmShape& s) noexcept {
    if (s.block <= 0 || s.c % s.block != 0 || s.oc % s.block != 0 || s.dh != 1 || s.dw != 1)
        return false;
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

/// NCHW: Winograd's NCHW entry against the im2col GEMM (no oneDNN in between).
bool nchw_winograd(const ConvGemmShape& s) noexcept {
    // Winograd F(4x4, 3x3) for every geometry it computes (3x3, stride 1, dilation 1, channels
    // in whole blocks) with at least 4 output tiles of 4x4; the im2col GEMM for every other
    // group-1 convolution; the reference kernel for empty shapes (and, at the "cpu" Conv's
    // factory, groups, run-time weights, other ranks and dtypes).
    // Measured (bench_conv BM_ConvNchw, ResNet-50's 3x3 stride-1 layers, AVX-512, 1 thread,
    // medians of 3 interleaved repetitions, ms, Winograd's NCHW entry against the im2col GEMM):
    // batch 8: 64 ch at 56x56 7.2 / 18.8, 128 at 28x28 4.7 / 16.4, 256 at 14x14 4.9 / 14.5,
    // 512 at 7x7 6.9 / 15.5; batch 1: 0.68 / 3.16, 0.50 / 2.04, 0.61 / 2.16, and 512 at 7x7
    // (4 tiles) 1.67 / 2.78. Unlike the blocked kernels (where oneDNN's direct kernel sits in
    // between and Winograd waits for 16 tiles), on NCHW the GEMM is the only other fast path,
    // and Winograd wins down to ResNet-50's smallest map. Below 4 tiles (maps of at most 8x8
    // at batch 1: not measured) the GEMM keeps them. The GEMM beats the single-threaded
    // reference kernel everywhere it was measured (docs/PLATFORM.md).
    return conv_winograd_supported(s) && tiles_4x4(s) >= 4;
}

}  // namespace

ConvAlgo choose_conv_algo(const ConvGemmShape& s, ConvLayout layout,
                          ConvAlgoSet candidates) noexcept {
    if (nothing_to_compute(s, layout)) return ConvAlgo::reference;
    if (layout == ConvLayout::blocked) {
        // Winograd first, then the GEMM on small or strided maps, then oneDNN's direct kernel.
        if (can(candidates, ConvAlgo::winograd_f4x3) && blocked_winograd(s))
            return ConvAlgo::winograd_f4x3;
        if (can(candidates, ConvAlgo::im2col_gemm) && blocked_gemm(s)) return ConvAlgo::im2col_gemm;
        if (can(candidates, ConvAlgo::onednn_direct)) return ConvAlgo::onednn_direct;
        return ConvAlgo::reference;
    }
    // NCHW: oneDNN's direct kernel on plain layouts was not measured against these; never picked.
    if (can(candidates, ConvAlgo::winograd_f4x3) && nchw_winograd(s))
        return ConvAlgo::winograd_f4x3;
    if (can(candidates, ConvAlgo::im2col_gemm)) return ConvAlgo::im2col_gemm;
    return ConvAlgo::reference;
}

ConvAlgoSet conv_algos_applicable(const ConvGemmShape& s, ConvLayout layout,
                                  ConvAlgoSet candidates) noexcept {
    if (nothing_to_compute(s, layout)) return 0;
    ConvAlgoSet out = 0;
    if (can(candidates, ConvAlgo::winograd_f4x3) && conv_winograd_supported(s))
        out |= conv_algo_bit(ConvAlgo::winograd_f4x3);
    // conv_gemm_nchw takes every group-1 2-D geometry; conv_gemm_blocked whole channel blocks
    // on both sides and dilation 1.
    const bool gemm = layout == ConvLayout::nchw ||
                      (s.block > 0 && s.c % s.block == 0 && s.oc % s.block == 0 && s.dh == 1 &&
                       s.dw == 1);
    if (can(candidates, ConvAlgo::im2col_gemm) && gemm) out |= conv_algo_bit(ConvAlgo::im2col_gemm);
    // oneDNN's direct primitive: only the blocked caller (the oneDNN Conv kernel) offers it.
    if (can(candidates, ConvAlgo::onednn_direct) && layout == ConvLayout::blocked)
        out |= conv_algo_bit(ConvAlgo::onednn_direct);
    return out;
}

namespace {

using MeasureKey = std::array<int64_t, 19>;

struct MeasureCache {
    std::mutex mu;           ///< the map
    std::mutex timing;       ///< one timing at a time in the process
    std::map<MeasureKey, ConvAlgo> picks;
    std::atomic<std::uint64_t> measured{0};
};

MeasureCache& measure_cache() {
    static MeasureCache* cache = new MeasureCache();  // never destroyed: used at exit too
    return *cache;
}

}  // namespace

ConvAlgo measure_conv_algo(const ConvGemmShape& s, ConvLayout layout, ConvAlgoSet candidates,
                           int threads, const std::function<bool(ConvAlgo)>& run) {
    const ConvAlgo rule = choose_conv_algo(s, layout, candidates);
    const ConvAlgoSet todo = conv_algos_applicable(s, layout, candidates);
    if (todo == 0 || (todo & (todo - 1)) == 0) return rule;  // nothing to choose between
    const MeasureKey key{s.n,  s.c,  s.h,  s.w,  s.oc, s.oh, s.ow,
                         s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.block,
                         s.dh, s.dw, static_cast<int64_t>(layout),
                         static_cast<int64_t>(candidates), threads};
    MeasureCache& cache = measure_cache();
    {
        std::lock_guard<std::mutex> lock(cache.mu);
        if (auto it = cache.picks.find(key); it != cache.picks.end()) return it->second;
    }
    std::lock_guard<std::mutex> timing(cache.timing);
    {
        std::lock_guard<std::mutex> lock(cache.mu);  // timed while we waited?
        if (auto it = cache.picks.find(key); it != cache.picks.end()) return it->second;
    }
    std::array<double, kNumConvAlgos> best;
    best.fill(std::numeric_limits<double>::infinity());
    std::array<bool, kNumConvAlgos> ok{};
    for (int a = 0; a < kNumConvAlgos; ++a)
        if ((todo & (1u << a)) != 0) ok[static_cast<std::size_t>(a)] = run(static_cast<ConvAlgo>(a));
    for (int round = 0; round < kConvMeasureRounds; ++round) {
        for (int a = 0; a < kNumConvAlgos; ++a) {
            const auto i = static_cast<std::size_t>(a);
            if (!ok[i]) continue;
            const auto t0 = std::chrono::steady_clock::now();
            ok[i] = run(static_cast<ConvAlgo>(a));
            const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
            if (ok[i]) best[i] = std::min(best[i], dt.count());
        }
    }
    ConvAlgo pick = rule;
    double t = std::numeric_limits<double>::infinity();
    for (int a = 0; a < kNumConvAlgos; ++a)
        if (ok[static_cast<std::size_t>(a)] && best[static_cast<std::size_t>(a)] < t) {
            t = best[static_cast<std::size_t>(a)];
            pick = static_cast<ConvAlgo>(a);
        }
    cache.measured.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.picks.emplace(key, pick);
    return pick;
}

std::uint64_t conv_algo_measurements() noexcept {
    return measure_cache().measured.load(std::memory_order_relaxed);
}

}  // namespace dsinfer::detail
