// Registration of dsinfer's optimized CPU kernels (src/cpu/fast/): vectorized with runtime ISA
// dispatch and multithreaded on the shared OpenMP pool (runtime/parallel.hpp). Each registers at
// kPriorityCpu with provider "cpu", above the reference kernel of the same op, and returns
// unsupported from its factory for the cases it leaves to the reference kernel.
#pragma once

#include "dsinfer/kernel_registry.hpp"

namespace dsinfer::detail {
void register_fast_kernels(KernelRegistry& r);  // fast_kernels.cpp
void register_fast_matmul(KernelRegistry& r);   // fast_matmul.cpp: packed-B GEMM (sgemm.cpp)
void register_fast_fused_kernels(KernelRegistry& r);  // fast_fused.cpp: SkipLayerNorm, Gelu, ...
void register_fast_attention(KernelRegistry& r);      // fast_attention.cpp: MultiHeadAttention
void register_fast_paged_attention(KernelRegistry& r);  // fast_paged_attention.cpp
void register_fast_decoder_kernels(KernelRegistry& r);  // fast_decoder.cpp: RMSNorm, rotary,
                                                       // gated activation
void register_fast_conv(KernelRegistry& r);  // fast_conv.cpp: NCHW Conv/FusedConv (Winograd, GEMM)
void register_fast_qmatmul(KernelRegistry& r);  // fast_qmatmul.cpp: INT8 matmuls on qgemm, DQL
void register_fast_qlinear(KernelRegistry& r);  // fast_qlinear.cpp: com.microsoft QLinear* ops
void register_fast_qconv(KernelRegistry& r);    // fast_qconv.cpp: INT8 convolutions on qgemm
}  // namespace dsinfer::detail

namespace dsinfer::detail::fast {
void register_fast_elementwise_kernels(KernelRegistry& r);  // fast_elementwise.cpp
void register_fast_movement_kernels(KernelRegistry& r);     // fast_movement.cpp
void register_fast_reduce_kernels(KernelRegistry& r);       // fast_reduce.cpp
void register_fast_cast_kernels(KernelRegistry& r);         // fast_cast.cpp
}  // namespace dsinfer::detail::fast
