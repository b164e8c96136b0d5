// dsinfer/onnx.hpp — ONNX in and out: read a model into the Graph IR, write a Graph back.
//
// Purpose: the importer's public face, usable without an engine (tools, converters, tests):
// ModelLimits (what a model file may make the loader do), load_onnx / load_onnx_from_bytes /
// load_tensor_proto, and save_onnx. InferenceEngine::load (dsinfer/engine.hpp, which includes
// this header) reads models through the same code with EngineOptions::limits.
//
// Untrusted input: every size, count and offset a model controls is checked against
// ModelLimits before memory is committed to it (docs/ARCHITECTURE.md "Untrusted input").
//
// Errors are thrown as dsinfer::Error: io_error (file), invalid_model (malformed),
// unsupported (op types the IR does not hold, IR/opset versions too new), resource_exhausted
// (a ModelLimits bound).
//
// Threading: the functions are thread-safe (no shared state).
//
// Usage:
//   #include <dsinfer/onnx.hpp>
//   dsinfer::ModelLimits limits;
//   limits.max_model_bytes = 64ull << 20;
//   dsinfer::Graph g = dsinfer::load_onnx("model.onnx", limits);
//   dsinfer::save_onnx(g, "copy.onnx");
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer {

/// Bounds on what a model file may make the loader do. Every size or count a model controls
/// is checked against these before memory is committed to it.
struct ModelLimits {
    std::uint64_t max_model_bytes = 4ull << 30;      ///< protobuf file size
    std::uint64_t max_external_bytes = 64ull << 30;  ///< all external data together
    std::uint64_t max_tensor_bytes = 16ull << 30;    ///< one initializer or attribute tensor
    /// All nodes, subgraphs included; also bounds each repeated list of the top-level graph
    /// (nodes, initializers, inputs, outputs, value_info), counted before protobuf parses it.
    std::int64_t max_nodes = 1'000'000;
    int max_rank = kMaxRank;                         ///< declared ranks above this: invalid_model
    int max_subgraph_depth = 32;                     ///< nesting of If/Loop/Scan bodies
    int max_protobuf_depth = 100;                    ///< protobuf message nesting
    std::int64_t max_loop_iterations = 100'000'000;  ///< iterations of one Loop/Scan node per run
    /// Use weights in place from the model file (load_onnx from a path): initializers of 64 KiB
    /// and more, and external data, aligned to their elements, point into a private
    /// copy-on-write mapping of the file instead of being read into memory. Their pages are
    /// read as they are used and count as reclaimable page cache: an embedding table becomes
    /// resident only by the rows runs gather, and a weight that a kernel packs is dropped
    /// once packed. The file must then not shrink while the model is loaded (replace model
    /// files by rename, never rewrite one in place): its pages would fault (SIGBUS) when
    /// next read. false: read every weight into memory at load.
    bool map_weights = true;
};

/// Reads an ONNX model into the graph IR without compiling it (validates structure and
/// limits, sorts nodes). Throws dsinfer::Error.
DSINFER_API Graph load_onnx(const std::filesystem::path& model, const ModelLimits& limits = {});
/// Parses a model from memory. `base_dir` resolves external data ("" forbids external data).
DSINFER_API Graph load_onnx_from_bytes(const void* data, std::size_t size,
                                       const std::filesystem::path& base_dir = {},
                                       const ModelLimits& limits = {});
/// Reads one serialized onnx.TensorProto file (the backend-test .pb format).
DSINFER_API Tensor load_tensor_proto(const std::filesystem::path& file,
                                     const ModelLimits& limits = {});

/// Writes `graph` as an ONNX model (initializers inline; viewable in Netron). Throws
/// dsinfer::Error (io_error, unsupported for attribute kinds it cannot write).
DSINFER_API void save_onnx(const Graph& graph, const std::filesystem::path& file);

}  // namespace dsinfer
