// Internal interface of the ONNX importer (src/onnx/onnx_loader.cpp). Untrusted input: every
// size, count and offset read from a model is checked before use; see docs/ARCHITECTURE.md.
#pragma once

#include <filesystem>

#include "dsinfer/graph.hpp"
#include "dsinfer/onnx.hpp"

namespace dsinfer::detail {

/// Highest ai.onnx opset version dsinfer knows; models importing more are unsupported.
inline constexpr std::int64_t kMaxKnownOnnxOpset = 28;
/// Highest ONNX IR version dsinfer reads.
inline constexpr std::int64_t kMaxKnownIrVersion = 13;

/// Parses a serialized ModelProto. `base_dir` resolves external data; empty forbids it.
StatusOr<Graph> parse_onnx_model(const void* data, std::size_t size,
                                 const std::filesystem::path& base_dir,
                                 const ModelLimits& limits);
/// Reads and parses a model file (size-checked before reading; memory-mapped).
StatusOr<Graph> read_onnx_model(const std::filesystem::path& path, const ModelLimits& limits);
/// Reads a serialized TensorProto file (backend-test inputs/outputs).
StatusOr<Tensor> read_tensor_proto(const std::filesystem::path& path, const ModelLimits& limits);

}  // namespace dsinfer::detail
