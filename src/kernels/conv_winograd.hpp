// 3x3 stride-1 convolution by Winograd's minimal filtering F(4x4, 3x3) on activations in the
// blocked channel layout (nChw{B}c) that the oneDNN backend negotiates. Each output tile of 4x4
// pixels comes from a 6x6 input tile:
//     Y = A^T [ sum_c (G g_c G^T) . (B^T d_c B) ] A
// so the products become 36 GEMMs over the tiles, one per point (xi, nu) of the transformed
// tile: M_xn [tiles, OC] = V_xn [tiles, C] . U_xn [C, OC], with U_xn = (G g G^T)_xn packed once
// as dsinfer's GEMM's B. Multiplies per output pixel and (c, oc): 36 / 16 = 2.25 against the
// direct form's 9.
//
// Matrices: Lavin & Gray's, at the points 0, +-1, +-2. The input and output transforms have
// small integer coefficients (exact in float); G's fractions (1/6, 1/24) are applied to the
// weights in double, once. Float error against the direct sum: about 2e-6 relative to
// sum |x| |w| (test_conv_winograd.cpp prints the largest it sees). F(2x2, 3x3) (4 multiplies
// per pixel, more transform traffic per pixel) was slower than oneDNN's direct kernel at every
// ResNet-50 layer here, so it is not built.
//
// Threads take chunks of tiles from a shared counter; each chunk is transformed, multiplied (36
// single-thread GEMMs) and transformed back by one thread in its own part of the workspace, so
// every value's arithmetic is fixed by the tile, not by the thread count or the split. Bias,
// the residual Z (same layout as Y, may be Y itself) and ReLU are applied as the output tiles
// are stored; other activations run over Y afterwards. A chunk whose input tiles hold a NaN or
// an infinity is computed by the direct sum instead (see WinogradWeights::oihw).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/activation.hpp"
#include "kernels/conv_gemm.hpp"
#include "kernels/sgemm.hpp"

namespace dsinfer::detail {

/// The transformed weights of one convolution: 36 packed [C, OC] GEMM operands, point
/// (xi, nu) at xi * 6 + nu.
struct WinogradWeights {
    std::vector<PackedB> u;
    /// The weights as given ([oc][c][3][3]), for chunks of tiles whose inputs hold a NaN or an
    /// infinity: those are computed by the direct sum, so that a non-finite input reaches only
    /// the outputs whose windows contain it, as in the direct form (the transforms would spread
    /// it over whole 4x4 tiles and their neighbours).
    std::shared_ptr<const float> oihw;
};

/// True when conv_winograd_blocked computes this geometry: a 3x3 window, stride 1, group 1
/// (the caller's check), dilation 1, non-negative pads, channels in whole blocks of 8 or 16.
bool conv_winograd_supported(const ConvGemmShape& s) noexcept;

/// Transforms and packs OIHW weights [oc][c][3][3], keeping `w` (WinogradWeights::oihw).
WinogradWeights pack_winograd_weights(std::shared_ptr<const float> w, const ConvGemmShape& s);

/// Workspace conv_winograd_blocked needs on `threads` threads.
std::size_t conv_winograd_workspace_bytes(const ConvGemmShape& s, std::int64_t threads) noexcept;

/// Y = act(conv(X, W) + bias + Z), X and Y (and Z, when given) in the blocked layout. `bias` (oc
/// floats) and `z` may be null. Returns false for weights of another geometry, or when the
/// workspace is smaller than conv_winograd_workspace_bytes for the calling thread's budget and
/// buffers cannot be allocated.
bool conv_winograd_blocked(const ConvGemmShape& s, const float* x, const WinogradWeights& w,
                           const float* bias, const float* z, float* y, const ActivationSpec& act,
                           void* workspace, std::size_t workspace_bytes) noexcept;

/// Workspace conv_winograd_nchw needs on `threads` threads: X and Y in the blocked layout, and
/// conv_winograd_blocked's own.
std::size_t conv_winograd_nchw_workspace_bytes(const ConvGemmShape& s, std::int64_t threads) noexcept;

/// The same on plain NCHW X, Y and Z (the "cpu" backend's Conv, fast_conv.cpp): X is copied
/// into the blocked layout `s.block` names (8 or 16; c and oc multiples of it), the blocked
/// kernel runs with the bias, and Y is stored back adding Z (may be Y itself) and applying the
/// activation. The copies cost up to ~40% over the blocked kernel on the largest maps
/// (bench_conv, batch 8, 1 thread, busy machine: 64 channels at 56x56 29.6 against 21.0 ms;
/// 128 at 28x28 17.0 against 16.6).
bool conv_winograd_nchw(const ConvGemmShape& s, const float* x, const WinogradWeights& w,
                        const float* bias, const float* z, float* y, const ActivationSpec& act,
                        void* workspace, std::size_t workspace_bytes) noexcept;

}  // namespace dsinfer::detail
