// Registration functions of the reference CPU kernel groups (one per file family under
// src/cpu/reference/). register_cpu_kernels() calls each of them, in this order.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"

namespace dsinfer::detail {
void register_elementwise_kernels(KernelRegistry& r);  // elementwise.cpp, elementwise_*.cpp
void register_tensor_kernels(KernelRegistry& r);       // tensor_*.cpp: shape and data movement
void register_nn_kernels(KernelRegistry& r);           // nn_*.cpp: MatMul, Gemm, Conv, pool, norm
void register_reduce_kernels(KernelRegistry& r);       // reduce*.cpp: Reduce*, ArgMax, TopK, NMS
void register_quant_kernels(KernelRegistry& r);        // quant*.cpp: (De)QuantizeLinear, QLinear*
void register_quant_ms_kernels(KernelRegistry& r);     // quant_ms.cpp: com.microsoft QLinearAdd,
                                                          // QLinearMul, QLinearSigmoid, ...
void register_sequence_model_kernels(KernelRegistry& r);  // sequence_models*.cpp: RNNs, Resize,
                                                          // Attention
void register_misc_kernels(KernelRegistry& r);         // misc*.cpp: losses, signal, strings, ml
void register_control_flow_kernels(KernelRegistry& r);    // control_flow.cpp: If, Loop, Scan
// dsinfer's fused operators (domain com.dsinfer, docs/OPTIMIZER.md):
void register_fused_kernels(KernelRegistry& r);      // fused.cpp: FusedConv, FusedMatMul, norms, Gelu
void register_attention_kernels(KernelRegistry& r);  // fused_attention.cpp: MultiHeadAttention
void register_paged_attention_kernels(KernelRegistry& r);  // paged_attention.cpp: PagedAttention
void register_decoder_kernels(KernelRegistry& r);    // fused_decoder.cpp: RotaryEmbedding,
                                                     // GatedActivation

/// A reference kernel the fused kernels (fused.cpp) run on explicit operands: building a
/// RunContext for an inner kernel allocates (its vectors), and run() must not.
class DirectKernel : public Kernel {
public:
    /// Same as run() with input i = *inputs[i] (null: the input is absent), output 0 =
    /// `output` and the workspace prepare asked for.
    [[nodiscard]] virtual Status run_direct(std::span<const TensorView* const> inputs,
                                            const TensorView& output, void* workspace,
                                            std::size_t workspace_bytes) const noexcept = 0;
};

// Reference factories the fused kernels wrap (they read only the inputs and attributes of the
// plain op).
StatusOr<std::unique_ptr<DirectKernel>> make_reference_conv(const KernelCreateContext& ctx);    // nn_conv.cpp
StatusOr<std::unique_ptr<DirectKernel>> make_reference_matmul(const KernelCreateContext& ctx);  // nn_matmul.cpp
StatusOr<std::unique_ptr<DirectKernel>> make_reference_gemm(const KernelCreateContext& ctx);    // nn_matmul.cpp
/// Shape and type checks of SkipLayerNormalization, shared with its fast kernel (fused.cpp).
Status prepare_skip_layer_norm(PrepareContext& ctx);
}  // namespace dsinfer::detail
