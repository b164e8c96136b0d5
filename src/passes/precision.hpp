// The float width conversions of a graph (src/passes/precision.cpp): convert_float_precision
// (dsinfer/passes.hpp, float32 -> float16/bfloat16 for GPU engines) and its converse for CPU
// engines, widen_half_float_compute.
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <cstddef>

#include "dsinfer/graph.hpp"
#include "dsinfer/passes.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// True when the graph is a float16 or bfloat16 model: a float16/bfloat16 initializer or graph
/// input, and no subgraph (If/Loop/Scan bodies are left as they are).
bool has_half_float_model(const Graph& g) noexcept;

/// A float16 / bfloat16 model computed in float32 on the CPU's fast kernels: every float16 and
/// bfloat16 initializer, value and Constant/ConstantOfShape tensor becomes float32 (exactly),
/// Casts to them cast to float32, and the interface keeps its types (a Cast to float32 after
/// each half-width input, a Cast back before each half-width output). Values are then rounded
/// to half width only at the outputs (the reference kernels round every node's output). No-op
/// (0) unless has_half_float_model. Returns the number of tensors converted.
StatusOr<std::size_t> widen_half_float_compute(Graph& g, const GraphEvaluator* evaluator);

}  // namespace dsinfer::detail
