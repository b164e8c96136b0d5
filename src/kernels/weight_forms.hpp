// The weight-store forms of dsinfer's own compute kernels (include/dsinfer/weight_store.hpp):
// one layout name and one builder per form, so that the cpu and oneDNN backends that run these
// kernels on the same weights share one copy. Layout names say what the buffer holds; the
// target is the ISA level whose micro-kernels the packing is for (fast::isa_name).
//
//   "sgemm.packed_b" / "sgemm.packed_b.trans"  packed  B [K, N] (or B stored [N, K]) for sgemm_packed
//   "sgemm.packed_b[.trans].f16" / ".bf16"     packed  the same at half width (CPU precision fp16/bf16;
//                                              target "avx512_bf16" for vdpbf16ps' K pairs)
//   "conv_gemm.packed_w"                       packed  OIHW conv weights for conv_gemm_* (K = c*kh*kw)
//   "winograd_f4x3.u"                          derived Winograd F(4x4, 3x3) transform G g G^T
//   "qgemm.packed_b" / "qgemm.packed_b.trans"  packed  s8/u8 B [K, N] (or stored [N, K]) for qgemm_packed,
//                                              with its column sums (target: qisa_name, e.g. "avx512_vnni")
//   "qconv.packed_w[.gG]"                      packed  s8/u8 OIHW conv weights for qconv: per group
//                                              B = W_g^T with K ordered (kh, kw, c) (G: groups, when > 1)
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <cstdint>
#include <memory>

#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/weight_store.hpp"
#include "kernels/conv_gemm.hpp"
#include "kernels/conv_winograd.hpp"
#include "kernels/sgemm.hpp"

namespace dsinfer::detail {

/// B (the constant `b`, k x n; stored [n, k] when `transposed`) packed for sgemm_packed at
/// the active ISA, as `dtype` (f32, or f16 / bf16 at half width: KernelCreateContext::
/// weight_precision).
StatusOr<std::shared_ptr<const PackedB>> packed_b_form(WeightStore& store, WeightStore::Source source,
                                                       const float* b, std::int64_t k,
                                                       std::int64_t n, bool transposed,
                                                       DType dtype = DType::f32);

/// OIHW convolution weights packed for conv_gemm_blocked / conv_gemm_nchw's GEMM at geometry
/// `s` (only its weight dims c, oc, kh, kw matter). `oihw` is read only when it is built.
StatusOr<std::shared_ptr<const PackedB>> conv_gemm_form(WeightStore& store, WeightStore::Source source,
                                                        const float* oihw, const ConvGemmShape& s);

/// The Winograd transform of 3x3 weights `oihw` (the stored form, which the transform keeps
/// for its non-finite chunks) at geometry `s` (c and oc matter).
StatusOr<std::shared_ptr<const WinogradWeights>> winograd_form(
    WeightStore& store, WeightStore::Source source, const std::shared_ptr<const Tensor>& oihw,
    const ConvGemmShape& s);

struct PackedQB;  // kernels/qgemm.hpp

/// The 8-bit constant `b` (k x n, s8, or u8 when `b_unsigned`; stored [n, k] when
/// `transposed`) packed for qgemm_packed at qgemm_isa().
StatusOr<std::shared_ptr<const PackedQB>> packed_qb_form(WeightStore& store,
                                                         WeightStore::Source source,
                                                         const void* b, bool b_unsigned,
                                                         std::int64_t k, std::int64_t n,
                                                         bool transposed);

struct PackedQConvW;  // kernels/qconv.hpp
struct QConvShape;

/// The 8-bit OIHW convolution weights `w` (s8, or u8 when `w_unsigned`) of geometry `s` (its
/// m, c, group, kh, kw matter) packed for qconv at qgemm_isa(), with `a7` in the avx2 byte form
/// for 7-bit A where it applies, with `winograd` in the Winograd form where it is exact, for
/// the weights' zero points `w_zero` (s.m of them, or null: pack_qconv_weights).
StatusOr<std::shared_ptr<const PackedQConvW>> packed_qconv_form(
    WeightStore& store, WeightStore::Source source, const void* w, bool w_unsigned,
    const QConvShape& s, bool a7 = false, bool winograd = false,
    const std::int32_t* w_zero = nullptr);

}  // namespace dsinfer::detail
