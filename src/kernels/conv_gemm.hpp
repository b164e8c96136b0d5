// 2-D convolution as im2col + dsinfer's packed GEMM (sgemm.hpp), on activations in the blocked
// channel layout (nChw{B}c: [N][C/B][H][W][B]) that the oneDNN backend negotiates between its
// kernels. oneDNN's direct convolution is slow where the output map is small (ResNet-50's 3x3
// 512-channel convolutions at 7x7: about 2/3 of the GEMM's rate) and on some strided windows;
// there its Conv kernel runs this instead (onednn_conv.cpp; choose_conv_algo, conv_dispatch.hpp,
// picks).
//
// GEMM form: one row per output pixel (n, oy, ox), K ordered (ky, kx, c), one column per output
// channel: Y = im2col(X) . W' + bias, W' the weights packed once as B (pack_b, transposed from
// [OC][KY][KX][C]). The pixels are taken in chunks (the im2col rows of a chunk stay within
// about 8 MiB); each chunk is gathered (channel blocks are contiguous runs of B floats), multiplied
// into a row-major buffer, then scattered to Y's blocked layout adding the residual Z (same
// layout as Y, may be Y itself) and applying ReLU. Other activations run over all of Y at the end.
// Every value's arithmetic is fixed by the packing, not by the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/activation.hpp"
#include "kernels/sgemm.hpp"

namespace dsinfer::detail {

/// The geometry of one convolution (group 1, dilation 1).
struct ConvGemmShape {
    std::int64_t n = 0, c = 0, h = 0, w = 0;  ///< input
    std::int64_t oc = 0, oh = 0, ow = 0;      ///< output
    std::int64_t kh = 0, kw = 0;              ///< window
    std::int64_t sh = 1, sw = 1;              ///< strides
    std::int64_t ph = 0, pw = 0;              ///< leading pads (trailing ones follow from oh, ow)
    std::int64_t block = 8;                   ///< channel block; divides c and oc
    std::int64_t dh = 1, dw = 1;              ///< dilations (the NCHW entry only; else 1)
};

/// Packs OIHW weights [oc][c][kh][kw] (float32) as the GEMM's B.
PackedB pack_conv_gemm_weights(const float* w, const ConvGemmShape& s);

/// Writes the packed weights back as OIHW (for a kernel that must hand them to a fallback).
void unpack_conv_gemm_weights(const PackedB& b, const ConvGemmShape& s, float* w) noexcept;

/// Workspace conv_gemm needs on `threads` threads.
std::size_t conv_gemm_workspace_bytes(const ConvGemmShape& s, std::int64_t threads) noexcept;

/// Y = act(conv(X, W) + bias + Z), X and Y (and Z, when given) in the blocked layout. `bias` (oc
/// floats) and `z` may be null. Returns false when the workspace is smaller than
/// conv_gemm_workspace_bytes for the calling thread's budget and a buffer cannot be allocated.
bool conv_gemm_blocked(const ConvGemmShape& s, const float* x, const PackedB& w,
                       const float* bias, const float* z, float* y, const ActivationSpec& act,
                       void* workspace, std::size_t workspace_bytes) noexcept;

// ---- plain NCHW (the "cpu" backend's Conv, src/cpu/fast/fast_conv.cpp) --------------------
//
// GEMM form with the channels as rows, so that C is NCHW already: Y[OC, cols] = W[OC, K] .
// im2col(X)[K, cols], K ordered (c, ky, kx) as OIHW stores it, one column per output pixel
// (n, oy, ox). W is the GEMM's A in its stored layout (packed per call by the GEMM, 1/cols of
// its work); im2col(X) is written straight into the packed-B layout (no second copy; for a 1x1
// stride-1 window it is X's rows as they are). The columns of the whole batch are taken in
// chunks (several images at once when the maps are small, so A is packed once per chunk, not
// per image): with enough of them, each thread gathers, multiplies and stores its own chunks of
// about 1 MiB of im2col (one parallel region per convolution); otherwise chunks of up to 8 MiB
// run one after the other on the whole team. Each chunk's product goes to a buffer and is
// stored into Y adding the bias, the residual Z (may be Y itself) and the activation. `block`
// is ignored; dilations are honoured. Every value's arithmetic is fixed by the shape, not by
// the thread count.

/// Workspace conv_gemm_nchw needs on `threads` threads.
std::size_t conv_gemm_nchw_workspace_bytes(const ConvGemmShape& s, std::int64_t threads) noexcept;

/// Y = act(conv(X, W) + bias + Z) on NCHW X, Y, Z; W is OIHW [oc][c][kh][kw]. `bias` (oc
/// floats) and `z` may be null. Returns false when the workspace is smaller than
/// conv_gemm_nchw_workspace_bytes for the calling thread's budget and buffers cannot be
/// allocated.
bool conv_gemm_nchw(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                    const float* z, float* y, const ActivationSpec& act, void* workspace,
                    std::size_t workspace_bytes) noexcept;

/// Y (NCHW) = act(src + Z) where src holds Y's values in the blocked layout nChw{block}c (the
/// bias already added); `z` may be null or Y itself. For NCHW entries of the blocked kernels.
void store_blocked_as_nchw(const ConvGemmShape& s, const float* src, const float* z, float* y,
                           const ActivationSpec& act) noexcept;

/// X (NCHW, s.n x s.c x s.h x s.w) into the blocked layout nChw{block}c (s.c a multiple).
void nchw_to_blocked(const ConvGemmShape& s, const float* x, float* dst) noexcept;

}  // namespace dsinfer::detail
