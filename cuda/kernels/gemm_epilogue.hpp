// cuda/kernels/gemm_epilogue.hpp — the small elementwise passes the cuBLASLt GEMM kernels
// (kernels/gemm.cpp, plain C++) need around cublasLtMatmul: bias + activation where cuBLASLt has
// no matching epilogue (erf Gelu, LeakyRelu, Sigmoid, Tanh, Clip, HardSwish, or a bias that is
// not along the GEMM's N), and broadcasting Gemm's C into the output before a beta-GEMM.
// Implemented in gemm_epilogue.cu. All functions enqueue on `stream`, never synchronize, and
// return the launch status. Element types: f32, f16, bf16 (others: internal error).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsinfer/dtype.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::cuda {

/// The fused activations (same order and semantics as dsinfer::detail::Activation in
/// src/ops/activation.hpp; the reference kernels' scalar formulas).
enum class EpilogueAct : std::uint8_t {
    none,
    relu,
    leaky_relu,
    sigmoid,
    tanh,
    clip,
    hard_swish,
    gelu,
    gelu_tanh,
};

struct EpilogueActParams {
    EpilogueAct kind = EpilogueAct::none;
    float alpha = 0.f;  ///< LeakyRelu slope; Clip min
    float beta = 0.f;   ///< Clip max
};

/// In place over y[0, total): y[i] = act(y[i] + bias[i % bias_len]) (no bias term when bias is
/// null). bias has y's dtype. Computed in float, stored rounded to nearest. total == 0: no-op.
Status apply_activation(void* y, DType dtype, std::int64_t total, const void* bias,
                        std::int64_t bias_len, EpilogueActParams act, cudaStream_t stream) noexcept;

/// y[i, j] = scale * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] for a row-major [m, n] y;
/// c of y's dtype with cm in {1, m}, cn in {1, n} (Gemm's C broadcast). c null: zeros.
Status fill_broadcast(void* y, DType dtype, std::int64_t m, std::int64_t n, const void* c,
                      std::int64_t cm, std::int64_t cn, float scale, cudaStream_t stream) noexcept;

}  // namespace dsinfer::cuda
