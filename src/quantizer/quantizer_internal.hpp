// What the quantizer room's files share (src/quantizer/quantizer.cpp, controller.cpp).
//
// Internal (namespace dsinfer::quantizer).
#pragma once

#include <string>
#include <unordered_set>

#include "dsinfer/graph.hpp"
#include "dsinfer/quantize.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::quantizer {

/// The graph the quantizer calibrates and rewrites: level-1 clean-up and constant folding,
/// BatchNormalization folded into the Conv before it (standard operators only).
Status preprocess(Graph& g);

/// A layer record with the name, op, precision and reason given (bytes and timings zero).
LayerRecord record(std::string node, std::string op, std::string precision, std::string reason);

/// A node's layer name: its name, or its first output's when unnamed.
std::string layer_name(const Graph& g, const Node& n);

/// MatMul / Gemm / Conv weights stored bfloat16 with a Cast to float32 before their reader
/// (only the layers named in `only` when given), recorded in `report`.
Status store_weights_bf16(Graph& g, QuantizeReport& report,
                          const std::unordered_set<std::string>* only);

/// QuantizeMode::automatic (dsinfer/quantize.hpp AutoQuantizeOptions).
StatusOr<QuantizeReport> auto_quantize(Graph& graph, CalibrationSource& data,
                                       const QuantizerOptions& options);

}  // namespace dsinfer::quantizer
