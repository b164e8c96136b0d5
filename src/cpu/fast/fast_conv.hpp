// The "cpu" backend's Conv and FusedConv (src/cpu/fast/fast_conv.cpp): float32, 2-D, plain
// NCHW, group 1, constant weights. Per shape class it picks one of dsinfer's own convolutions
// (choose_conv_algo on the NCHW layout, src/kernels/conv_dispatch.hpp: the cost rule and the
// measurements behind it are stated there):
// Winograd F(4x4, 3x3) (conv_winograd_nchw), im2col + packed GEMM (conv_gemm_nchw; a 1x1
// stride-1 window needs no im2col), or the fallback (the reference kernel). A build without
// oneDNN runs its convolutions here; with oneDNN the "onednn" Conv comes first and this kernel
// declines to be its fallback (it would hold a second transform of the weights).
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <cstdint>

#include "kernels/conv_dispatch.hpp"

namespace dsinfer::detail {

/// The channel block the NCHW Winograd entry uses at the active ISA: 16 on AVX-512, else 8.
std::int64_t fast_conv_block() noexcept;

/// Testing hook: how many times the "cpu" Conv kernel has run each algorithm in this process.
std::uint64_t fast_conv_path_runs(ConvAlgo algo) noexcept;

}  // namespace dsinfer::detail
