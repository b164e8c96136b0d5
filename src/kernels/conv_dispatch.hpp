// The one place that picks dsinfer's convolution algorithm, for both callers: the oneDNN Conv
// kernel on the blocked layout (src/onednn/onednn_conv.cpp: both sides nChw{block}c, where
// oneDNN's direct primitive is the third candidate) and the "cpu" backend's Conv on plain NCHW
// (src/cpu/fast/fast_conv.cpp, which runs where oneDNN is absent or not enabled).
//
// Two ways to pick (EngineOptions::algo_search):
// - choose_conv_algo: a cost rule fitted by hand to the measurements stated in conv_dispatch.cpp
//   (bench_conv on ResNet-50's layers; docs/PLATFORM.md, docs/OPTIMIZER.md), a pure function of
//   the geometry, the layout and the candidates: nothing is timed. The ISA enters through the
//   geometry's channel block (16 on AVX-512, 8 below), as the callers set it. The default.
// - measure_conv_algo: the caller runs each candidate that can compute the geometry on this
//   machine, with its threads, and the fastest wins; the answer is cached per process.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/conv_gemm.hpp"

namespace dsinfer::detail {

/// The convolution algorithms the rule chooses between.
enum class ConvAlgo : int {
    reference = 0,      ///< the caller's fallback kernel (the reference Conv)
    im2col_gemm = 1,    ///< im2col + packed GEMM: conv_gemm_blocked, conv_gemm_nchw
    winograd_f4x3 = 2,  ///< Winograd F(4x4, 3x3): conv_winograd_blocked, conv_winograd_nchw
    onednn_direct = 3,  ///< oneDNN's direct convolution primitive
};
inline constexpr int kNumConvAlgos = 4;

/// The layout of X and Y: plain NCHW, or blocked nChw{s.block}c on both sides.
enum class ConvLayout : int { nchw, blocked };

/// A set of algorithms, one bit per ConvAlgo: those the caller can run.
using ConvAlgoSet = unsigned;
constexpr ConvAlgoSet conv_algo_bit(ConvAlgo a) noexcept { return 1u << static_cast<int>(a); }
/// dsinfer's own: what the "cpu" backend's NCHW kernel runs.
inline constexpr ConvAlgoSet kConvAlgosDsinfer = conv_algo_bit(ConvAlgo::reference) |
                                                 conv_algo_bit(ConvAlgo::im2col_gemm) |
                                                 conv_algo_bit(ConvAlgo::winograd_f4x3);
/// Every algorithm: what the oneDNN Conv kernel runs.
inline constexpr ConvAlgoSet kConvAlgosAll =
    kConvAlgosDsinfer | conv_algo_bit(ConvAlgo::onednn_direct);

/// The algorithm for geometry `s` (group 1; `s.block` the channel block of this ISA) on `layout`
/// among `candidates`. The rule takes its first pick that is a candidate (conv_dispatch.cpp);
/// the reference kernel is the last resort, and the answer for shapes with nothing to compute.
ConvAlgo choose_conv_algo(const ConvGemmShape& s, ConvLayout layout,
                          ConvAlgoSet candidates) noexcept;

/// The candidates that can compute `s` on `layout` at all (the kernels' structural conditions,
/// no cost): what measure_conv_algo times. Never the reference kernel; none for a geometry
/// with nothing to compute.
ConvAlgoSet conv_algos_applicable(const ConvGemmShape& s, ConvLayout layout,
                                  ConvAlgoSet candidates) noexcept;

/// The fastest of conv_algos_applicable(s, layout, candidates) on this machine: `run(algo)`
/// runs the caller's convolution once with that algorithm (on data of the geometry's sizes)
/// and returns whether it ran. Each candidate runs once to warm up, then kConvMeasureRounds
/// rounds alternate between them; the least time of each decides (a shared machine's noise
/// only ever adds time). The answer is cached per process by (s, layout, candidates,
/// threads), so a geometry is timed once; timings are serialized (one at a time per
/// process, so that two engines preparing at once do not time each other). With fewer than
/// two applicable candidates, or when none runs, choose_conv_algo's answer, untimed.
/// `run` may throw std::bad_alloc (its buffers); the answer is then not cached.
ConvAlgo measure_conv_algo(const ConvGemmShape& s, ConvLayout layout, ConvAlgoSet candidates,
                           int threads, const std::function<bool(ConvAlgo)>& run);
inline constexpr int kConvMeasureRounds = 3;

/// Geometries timed by measure_conv_algo in this process (tests and reports).
std::uint64_t conv_algo_measurements() noexcept;

}  // namespace dsinfer::detail
