// The one place that picks dsinfer's convolution algorithm, for both callers: the oneDNN Conv
// kernel on the blocked layout (src/onednn/onednn_conv.cpp: both sides nChw{block}c, where
// oneDNN's direct primitive is the third candidate) and the "cpu" backend's Conv on plain NCHW
// (src/cpu/fast/fast_conv.cpp, which runs where oneDNN is absent or not enabled).
//
// It is a cost rule fitted by hand to the measurements stated in conv_dispatch.cpp (bench_conv
// on ResNet-50's layers; docs/PLATFORM.md, docs/OPTIMIZER.md), a pure function of the geometry,
// the layout and the candidates: not a search at run time, nothing is timed or cached. The ISA
// enters through the geometry's channel block (16 on AVX-512, 8 below), as the callers set it.
#pragma once

#include <cstdint>

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

}  // namespace dsinfer::detail
