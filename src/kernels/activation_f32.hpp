// The fused activation of dsinfer's GEMM and convolution epilogues, float32, shared by the "cpu"
// and oneDNN backends (src/kernels/activation_f32.cpp).
#pragma once

#include <cstdint>

#include "ops/activation.hpp"

namespace dsinfer::detail {

/// y[i] = act(y[i]) for float32, vectorized and split across the calling thread's OpenMP
/// budget. Relu, Sigmoid, Tanh, Gelu and GeluTanh use the vector loops of simd.hpp (their
/// accuracy is stated there); the others are scalar.
void apply_activation_f32(float* y, std::int64_t n, const ActivationSpec& act) noexcept;

}  // namespace dsinfer::detail
