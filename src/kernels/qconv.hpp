// dsinfer's INT8 2-D convolution on the packed INT8 GEMM (qgemm.hpp): the compute of
// ConvInteger, QLinearConv and com.dsinfer DynamicQuantizeConv on the cpu backend. x and y are
// NCHW (ONNX order) or NHWC (channels last: what QLinearConv hands to the next INT8 op when
// the executor's layout negotiation lets it, fast_common.hpp kChannelsLastLayout).
//
// Mapping. qgemm multiplies 8-bit rows A[M, K] by a packed constant B[K, N] with the epilogue
// fused into its store. Per chunk of output rows (below) and group:
//   1. the input rows the chunk reads are transposed to NHWC bytes (quantized on the way for
//      DynamicQuantizeConv); an NHWC x is read in place;
//   2. A = one row per output pixel, K ordered (kh, kw, c). Where qgemm_rows runs the product
//      (u8 x, Cg a multiple of 4 on the VNNI families and of 2 on the 16-bit ones, weights
//      without a row-sum term: s8 with zero point 0, the QDQ form ONNX Runtime's tooling
//      writes), A is read in place: per pixel and kernel tap a pointer to its Cg bytes in the
//      NHWC image (for the 16-bit families, avx2 and baseline, to its Cg u16 values in the
//      chunk's input rows widened once), or to a row of the x zero point for padding (which
//      contributes 0 after the zero-point subtraction, as the reference's padding does); no
//      im2col copy and no packing of A. Otherwise for a 1x1 stride-1
//      unpadded convolution the NHWC image itself (lda = C), else im2col rows, each kh * kw
//      runs of Cg contiguous bytes copied from the NHWC image (padding: the x zero point);
//   3. qgemm_rows or qgemm_packed against the group's weights, packed once as B = W^T with K
//      in the same (kh, kw, c) order (pack_qconv_weights; the weight-store form
//      "qconv.packed_w"), storing C [pixels, Mg] in the output type (s32, f32 dequantized,
//      u8/s8 requantized);
//   4. C transposed into the group's channels of the NCHW output; for an NHWC y, qgemm stores
//      C straight into the group's channels of y's pixel rows (ldc = m).
// Winograd form (PackedQConvW::winograd(): 3x3, stride 1, no dilation, one group, u8 x, on the
// avx2 family): steps 2-3 become, per chunk (whole rows of 2 x 2 output tiles, counted over the
// batch when x and y are channels last, so that small images share a chunk), the input
// transform V = B^T (x - zx) B of each 4 x 4 input tile to s16 ([16][tiles][channels]), 16
// qgemm_rows products V_xi U_xi to s32 (U = G' w G'^T packed once by pack_qb_s16, both operands
// 16-bit: vpmaddwd), the output transform A^T M A / 4 to the exact s32 sums of the direct form,
// and qgemm's epilogue over them (qgemm_store_s32): 16 products of K = c per 4 output pixels
// where the direct form has 4 of K = 9c, at a quarter of the byte forms' multiply-adds per
// instruction. Results are bitwise the direct form's (qconv.cpp states the bounds).
// com.dsinfer QLinearConvAdd: qgemm's u8/s8 epilogue also adds an 8-bit residual of y's shape
// (QGemmParams::residual, NCHW or NHWC: QConvShape::r_nhwc), read at each element's position
// just before the element is stored, so y may be the residual itself when both have one order.
// Zero points, scales and biases are qgemm's per-column parameters (output channels); the
// epilogue sees each element's exact s32 sum, so results are bitwise those of the reference
// kernels for any thread count. Threads: one parallel region per convolution; each image is cut
// into chunks of output rows (about 1 MiB of A each, and at least one chunk per thread), and a
// thread takes whole chunks from a shared counter, doing steps 1-4 for the input rows its chunk
// reads on its own buffers (qgemm single-threaded): no thread waits for another inside the
// region, which keeps a descheduled thread on a busy machine from stalling the rest.
//
// Thread safety: a PackedQConvW is immutable once built; qconv allocates nothing when
// given qconv_workspace_bytes.
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/qgemm.hpp"
#include "ops/quantize.hpp"

namespace dsinfer::detail {

/// A 2-D convolution's geometry (x [N, C, H, W], w OIHW) and its activations' memory order.
struct QConvShape {
    std::int64_t batch = 1, c = 0, h = 0, w = 0;  ///< x
    std::int64_t m = 0, group = 1, kh = 1, kw = 1;  ///< w: [m, c / group, kh, kw]
    std::int64_t sh = 1, sw = 1, dh = 1, dw = 1;
    std::int64_t pt = 0, pl = 0;                  ///< leading pads (the trailing ones follow from oh/ow)
    std::int64_t oh = 0, ow = 0;                  ///< y: [batch, m, oh, ow]
    bool x_nhwc = false, y_nhwc = false;          ///< channels-last memory order (else NCHW)
    bool r_nhwc = false;  ///< the residual (QGemmParams::residual, [batch, m, oh, ow]) channels last

    std::int64_t cg() const noexcept { return c / group; }
    std::int64_t mg() const noexcept { return m / group; }
    std::int64_t k() const noexcept { return cg() * kh * kw; }
    std::int64_t pixels() const noexcept { return oh * ow; }
    /// A is the NHWC image itself (no im2col).
    bool pointwise() const noexcept {
        return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h &&
               ow == w;
    }
};

/// The fewest input channels for which the INT8 convolution's callers ask for the Winograd
/// form (pack_qconv_weights): its K is the channels rounded up to 16 (3 channels run 16) and
/// its transforms cost per pixel what few channels' products do. unet_convint
/// (tools/make_models.py, 1024x1024, 2 threads, AVX2 Zen 3, ds-profiler, one sitting) against
/// the direct 16-bit form: 3 channels 2.31x the time, 16 channels 0.95-1.03x, 32 0.86-1.04x, 48
/// and more 0.48-0.92x (two nodes at 1.06x and 1.08x).
constexpr std::int64_t kWinogradMinChannels = 32;

/// The weights of every group packed for qgemm_packed (B = W_g^T, K ordered kh, kw, c).
struct PackedQConvW {
    std::int64_t group = 1, k = 0, mg = 0;
    /// The input channels and kernel taps a row the weights were packed for: the shape's, or
    /// more (qconv_packed_shape: qconv then gives the products x with its channels padded by
    /// the zero point, or with each kernel row's window widened on the right).
    std::int64_t c = 0, kw = 0;
    std::vector<PackedQB> groups;
    /// Or, for the Winograd form (3x3, stride 1, dilation 1, one group: see pack_qconv_weights),
    /// instead of `groups`: the 16 points' U = G' g G'^T, each [wino_k, m] s16 (pack_qb_s16), K
    /// the channels rounded up to 16 (zero rows past c).
    std::vector<PackedQB> wino;
    std::int64_t wino_k = 0;
    /// Per output channel, the weights' zero point subtracted before the transform (a run's
    /// zero points must be these).
    std::vector<std::int32_t> wino_zero;
    /// The weights are in the avx2 byte form for 7-bit A (PackedQB::a7()): qconv splits the
    /// input's bytes into their low 7 bits and their high bits (see pack_qconv_weights).
    bool a7() const noexcept { return !groups.empty() && groups.front().a7(); }
    /// The Winograd form (wino).
    bool winograd() const noexcept { return !wino.empty(); }
    std::uint64_t bytes() const noexcept {
        std::uint64_t b = 0;
        for (const PackedQB& g : groups) b += g.bytes();
        for (const PackedQB& g : wino) b += g.bytes();
        return b;
    }
};

/// The geometry pack_qconv_weights packs the weights of `s` for on `isa`: s, or for one group
/// of 1 to 3 channels (an RGB stem) on the avx512_vnni family the one of two padded forms
/// whose kernel row has fewer bytes (the first on a tie), each making a kernel row whole
/// groups of 4 bytes, so that qconv can copy x's rows with zero-point pixels left and right
/// and, where qgemm_rows reads A in place, give it each kernel row as one run of those rows
/// (run_pointers: no im2col copy or packing pass):
/// - the channels padded to 4 (c 4): each pixel one group (the channels, then x's zero point,
///   whose products are 0); 3x3 kernels of 3 channels, 1x1 kernels;
/// - the kernel rows widened on the right by taps of weights 0 (s8; u8: 128) until kw * c is a
///   multiple of 4 (kw 8 for 7 taps of 3 channels: K 168 for 147, where the padded channels
///   make 196). Where qgemm_rows reads A in place (no zero-point term of the weights) the
///   added taps read x's next pixels or the zero-point margin, whose products with those
///   weights are 0; elsewhere qconv gives them x's zero point.
/// ResNet-50's 7x7 stride 2 stem at 224x224, batch 8 (bench_qconv impl 0, 1 thread, AVX-512
/// VNNI Zen 4, medians of 3 in 3 alternating rounds), im2col -> channels padded: 8.01-8.04 ms
/// -> 7.01-7.04 ms (with a tap a segment instead of a kernel row, 11.3-11.8 ms); channels
/// padded -> kernel rows widened: 7.47-7.70 -> 6.79-7.28 ms. In ResNet-50 QDQ b8 on 2 threads
/// (ds-profiler): 3.84 -> 3.34 ms, then 3.36-3.64 -> 2.95-3.28 ms (3 alternating profiles).
/// Not measured on the avx_vnni family, which keeps the im2col path.
QConvShape qconv_packed_shape(const QConvShape& s, QIsa isa) noexcept;

/// Packs OIHW weights `w` (s8, or u8 when `w_unsigned`) of geometry `s` for `isa` (as
/// pack_qb), for the geometry qconv_packed_shape(s, isa) (the added channels' weights are the
/// zero point, `w_zero`'s or without it 128 for u8 w and 0 for s8; the added taps' 128 or 0).
/// Throws std::bad_alloc when memory runs out. On the avx2 family the weights go in the 16-bit
/// form, or with `a7` (one group, channels a multiple of 4, at most 65,535) in a byte form for
/// 7-bit A (QBForm::paired_a7 for K of at least 256, else bytes_a7: measured per K, qconv.cpp
/// kPairedA7MinK): qconv then gives qgemm_rows the input's low 7 bits and, apart, its high bits, as
/// per-pixel lists of the channels that have one when they are at most 1 in 16 of the bytes (ReLU
/// outputs of zero point 0 mostly are: 0.6% over ResNet-50 QDQ's convolutions), else as a second
/// pass of 0/1 bytes. The caller asks for it only where qgemm_rows will run: u8 x, no zero-point
/// term of the weights (qgemm_rows_supported); qconv fails otherwise.
///
/// With `winograd` (the caller's choice: a 3x3 kernel of stride 1 and dilation 1, one group, u8
/// x, the weights' zero points constant) the weights go in the Winograd form instead
/// (PackedQConvW::wino) where it is exact: F(2x2, 3x3) in 16-bit integers on w minus its zero
/// point, 4 multiplies per output pixel and channel pair where the direct form has 9, on the
/// 16-bit layout of the avx2 family (or baseline, for `isa` baseline); exact while each output
/// channel's sum of |w - zw| is at most 2^29 / 255 (else the other forms). `w_zero`: the zero
/// points, one per output channel (s.m); null: those the direct forms pack without a term (128
/// for u8 w, 0 for s8). qconv then computes every chunk by it, for runs with those zero points.
PackedQConvW pack_qconv_weights(const void* w, bool w_unsigned, const QConvShape& s,
                                QIsa isa = qgemm_isa(), bool a7 = false, bool winograd = false,
                                const std::int32_t* w_zero = nullptr);

/// x as DynamicQuantizeConv gives it: float32, quantized with `q` (usable or not) while it is
/// transposed; `quantize` is DynamicQuantizeLinear's loop for a usable q (bitwise
/// dynamic_quantize_value; the caller's vector loop).
struct QConvFloatInput {
    const float* x = nullptr;
    DynamicQuantParams q;
    void (*quantize)(const float* x, std::int64_t n, const DynamicQuantParams& q,
                     std::uint8_t* y) noexcept = nullptr;
};

/// Bytes of workspace qconv uses on `threads` threads with output elements of
/// `out_bytes`.
std::size_t qconv_workspace_bytes(const QConvShape& s, const PackedQConvW& w,
                                  std::size_t out_bytes, std::int64_t threads) noexcept;

/// y [batch, m, oh, ow] (elements of p.out's type; NHWC when s.y_nhwc) = the convolution of x
/// [batch, c, h, w] (8-bit, p.a_signed, NHWC when s.x_nhwc; or `fx`'s float32 NCHW input when
/// given: then x is ignored and p.a_zero is fx->q's zero point) with `w`, with p's zero
/// points and epilogue; p's per-column pointers
/// (b_zeros, b_scales, bias, bias_s32) hold one value per output channel (all m). Uses the
/// calling thread's OpenMP budget. Returns false (y partly written) when the workspace is
/// smaller than qconv_workspace_bytes and a buffer of qgemm's cannot be allocated, and (writing
/// nothing) for weights in the Winograd form with a geometry, s8 x or weight zero points other
/// than those they were packed for.
bool qconv(const QConvShape& s, const void* x, const QConvFloatInput* fx,
                const PackedQConvW& w, void* y, const QGemmParams& p, void* workspace,
                std::size_t workspace_bytes) noexcept;

}  // namespace dsinfer::detail
