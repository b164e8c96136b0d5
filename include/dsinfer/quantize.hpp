// Quantization of a float32 graph (the quantizer's entry points; Step 10 adds calibration).
//
// quantize_dynamic rewrites the Linear layers of a float32 graph into ONNX Runtime's
// dynamic-quantization form (what onnxruntime.quantization.quantize_dynamic writes): for every
// MatMul whose B is a constant float32 matrix, and every Gemm (transA 0, alpha 1, beta 1) whose
// B is one,
//
//   x --DynamicQuantizeLinear--> (x_q u8, x_scale, x_zero_point)    one per activation tensor,
//                                                                      shared by its readers
//   MatMulInteger(x_q, W_q s8 [K, N], x_zero_point, W_zero_point) -> Cast(float)
//       -> Mul(., Mul(x_scale, W_scale)) [-> Add(., C)]              the layer's output
//
// with W quantized symmetrically to [-127, 127] (zero point 0; ONNX Runtime's QInt8 default),
// per tensor or per output column, rounding half to even. The graph stays standard ONNX (opset
// >= 11); the engine's optimizer then fuses each layer into com.dsinfer DynamicQuantizeMatMul /
// MatMulIntegerToFloat on dsinfer's INT8 GEMM (docs/OPTIMIZER.md). A graph that already holds
// quantized operators is left as it is (quantized once, by whoever made it).
//
//   dsinfer::Graph g = dsinfer::load_onnx("bert.onnx");
//   auto report = dsinfer::quantize_dynamic(g).value_or_throw();
//   auto engine = dsinfer::InferenceEngine::compile(std::move(g));
//
// Thread safety: mutates the one graph it is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

/// What quantize_dynamic quantizes and how.
struct DynamicQuantizeOptions {
    /// One scale per output column (N) instead of one per weight.
    bool per_channel = false;
    bool matmul = true;  ///< quantize MatMul with a constant B
    bool gemm = true;    ///< quantize Gemm with a constant B (transA 0, alpha 1, beta 1)
    /// Weights with fewer elements stay float32 (tiny layers gain nothing).
    std::int64_t min_weight_elements = 0;
    /// Node names (or output names) that stay float32.
    std::vector<std::string> exclude{};
};

/// What quantize_dynamic did.
struct DynamicQuantizeReport {
    bool already_quantized = false;   ///< the graph held quantized operators: nothing changed
    std::size_t matmuls = 0;          ///< MatMul nodes quantized
    std::size_t gemms = 0;            ///< Gemm nodes quantized
    std::size_t activations = 0;      ///< DynamicQuantizeLinear nodes added
    std::uint64_t float_weight_bytes = 0;  ///< float32 bytes of the weights replaced
    std::uint64_t int8_weight_bytes = 0;   ///< bytes of their int8 forms (scales included)
    /// Why candidate nodes stayed float32: "<node>: <reason>", one per node.
    std::vector<std::string> skipped{};
};

/// Rewrites `graph` into the dynamic-quantization form above. invalid_argument for an unsorted
/// or unlinked graph; resource_exhausted when memory runs out.
DSINFER_API StatusOr<DynamicQuantizeReport> quantize_dynamic(Graph& graph,
                                                              const DynamicQuantizeOptions& options = {});

}  // namespace dsinfer
