// The fused activation of dsinfer's GEMM and convolution epilogues, float32, shared by the "cpu"
// and oneDNN backends (src/kernels/activation_f32.cpp).
#pragma once

#include <cstdint>

#include "ops/activation.hpp"

namespace dsinfer::detail {

/// The vector loop (simd.hpp, active ISA) computing `act` on n float32 values, for Relu,
/// Sigmoid, Tanh, Gelu and GeluTanh; null for the others (the scalar apply_activation). What
/// apply_activation_f32 and the INT8 GEMM's f32 epilogue run, so a fused activation is
/// bitwise the unfused op's fast kernel.
using ActivationLoop = void (*)(const float* x, float* y, std::int64_t n) noexcept;
ActivationLoop activation_loop_f32(const ActivationSpec& act) noexcept;

/// y[i] = act(y[i]) for float32, vectorized and split across the calling thread's OpenMP
/// budget. Relu, Sigmoid, Tanh, Gelu and GeluTanh use the vector loops of simd.hpp (their
/// accuracy is stated there); the others are scalar.
void apply_activation_f32(float* y, std::int64_t n, const ActivationSpec& act) noexcept;

}  // namespace dsinfer::detail
