// Fast pieces of dsinfer's fused operators shared with other backends (src/cpu/fast/fast_fused.cpp).
#pragma once

#include <cstdint>

#include "ops/activation.hpp"

namespace dsinfer::detail {

/// y[i] = act(y[i]) for float32, vectorized and split across the calling thread's OpenMP
/// budget. Relu, Sigmoid, Tanh, Gelu and GeluTanh use the vector loops of simd.hpp (their
/// accuracy is stated there); the others are scalar.
void apply_activation_f32(float* y, std::int64_t n, const ActivationSpec& act) noexcept;

}  // namespace dsinfer::detail
