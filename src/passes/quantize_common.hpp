// What the quantizer's graph rewrites share (src/passes/quantize_dynamic.cpp,
// quantize_static.cpp): the test for a graph that is quantized already and the symmetric s8
// quantization of a constant weight.
//
// Internal (namespace dsinfer::passes).
#pragma once

#include <cstdint>

#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::passes {

/// Operators whose presence means the graph is quantized already (quantized once, by whoever
/// made it: the quantizers then leave the graph alone).
bool is_quantized_op(const Node& n);
/// Some node of `g` is_quantized_op.
bool has_quantized_op(const Graph& g);

/// A float32 weight quantized symmetrically to s8 in [-127, 127] (zero point 0; ONNX Runtime's
/// QInt8 default): scale = max|w| / 127 per slice of `axis` (or over the whole tensor when
/// axis < 0; 1 where a slice is all zeros), q = clamp(round_half_even(w / scale), -127, 127),
/// the quotient in float32 as numpy computes it. `q` keeps w's shape; `scale` is [C] or a scalar.
struct SymmetricWeight {
    Tensor q;      ///< s8, w's shape
    Tensor scale;  ///< f32 [C] or scalar
};
/// invalid_argument when w is not float32, is empty or holds NaN/infinity.
StatusOr<SymmetricWeight> quantize_symmetric_s8(const Tensor& w, int axis);

/// Float32 tensor without NaN or infinity.
bool all_finite_f32(const Tensor& t);

}  // namespace dsinfer::passes
