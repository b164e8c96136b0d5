// dsinfer/passes.hpp — the graph optimizer: passes over the Graph IR and optimization levels.
//
// Purpose: a pass is a small object that rewrites a Graph in place (fold constants, remove dead
// code, fuse patterns into dsinfer's fused ops in the "com.dsinfer" domain). optimize() runs the
// passes of an optimization level in a fixed order and reports how often each rewrite fired.
// Levels: 0 none; 1 constant folding, dead-code and common-subexpression elimination,
// Identity/Reshape/Transpose clean-up; 2 + fusions (Conv+BatchNorm, Conv/MatMul/Gemm + bias,
// residual Add and activation, LayerNorm, skip-LayerNorm, GELU, attention, ...);
// 3 + layout changes and backend-specific rewrites (the executor's blocked-layout negotiation
// between oneDNN kernels runs only at level 3).
//
// Every pass keeps the graph's interface (input and output names, dtypes, declared shapes) and
// its numerics within the tolerances stated in docs/OPTIMIZER.md. Passes never remove a value a
// subgraph reads from an enclosing graph (captures are resolved by name).
//
// Ownership/threading: passes hold no state between apply() calls; a Graph is mutated by one
// thread at a time.
//
// Usage:
//   dsinfer::Graph g = dsinfer::load_onnx("bert.onnx");
//   dsinfer::OptimizeReport r = dsinfer::optimize(g, {.level = 3});
//   // r.fired["fuse_attention"] == 12 for BERT-base
//   auto engine = dsinfer::InferenceEngine::compile(std::move(g), {.optimization_level = 0});
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/ops.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

struct OptimizeOptions {
    /// 0 (none) to 3 (everything); see the file comment.
    int level = 3;
    /// Constant folding never creates a constant larger than this (bytes), so folding cannot
    /// blow up the model's memory (e.g. an Expand or ConstantOfShape of a huge shape).
    std::uint64_t max_folded_bytes = std::uint64_t{64} << 20;
    /// Names of passes to skip (see default_passes()).
    std::vector<std::string> disabled_passes{};
};

/// Per-pass counts of rewrites (a fusion counts each match it replaced).
struct OptimizeReport {
    std::map<std::string, int> fired;
    std::size_t nodes_before = 0;
    std::size_t nodes_after = 0;
    double ms = 0.0;
    int count(std::string_view pass) const {
        auto it = fired.find(std::string(pass));
        return it == fired.end() ? 0 : it->second;
    }
};

/// What a pass sees besides the graph.
struct PassContext {
    OptimizeOptions options;
    OptimizeReport* report = nullptr;
    /// Records `n` rewrites by `pass`.
    void fired(std::string_view pass, int n = 1) {
        if (report != nullptr && n > 0) report->fired[std::string(pass)] += n;
    }
};

class DSINFER_API GraphPass {
public:
    virtual ~GraphPass() = default;
    /// Stable name (used in reports and OptimizeOptions::disabled_passes).
    virtual std::string_view name() const noexcept = 0;
    /// The lowest optimization level that runs this pass.
    virtual int level() const noexcept = 0;
    /// Rewrites `graph` (and, where the pass says so, its subgraphs). On error the graph may be
    /// partly rewritten; optimize() then reports the error and the engine does not load.
    virtual Status apply(Graph& graph, PassContext& ctx) const = 0;
};

/// The passes of every level, in the order optimize() runs them.
DSINFER_API std::vector<std::unique_ptr<GraphPass>> default_passes();

/// Runs the passes of options.level on `graph` (sorted, linked); the graph stays sorted.
DSINFER_API Status try_optimize(Graph& graph, const OptimizeOptions& options,
                                OptimizeReport& report) noexcept;
/// Like try_optimize(), but throws dsinfer::Error.
DSINFER_API OptimizeReport optimize(Graph& graph, const OptimizeOptions& options = {});

/// Mixed precision for GPU engines (EngineOptions::precision fp16/bf16): every float32
/// initializer, value and float32 attribute tensor (Constant, ConstantOfShape) becomes `to`
/// (DType::f16 or DType::bf16), Cast nodes to float32 cast to `to`; the graph's interface keeps
/// float32 (a Cast after each float32 input and before each float32 output). Kernels compute
/// normalizations, softmax and accumulations in float32. Graphs with subgraphs (If/Loop/Scan)
/// are unsupported. Returns the number of tensors converted.
DSINFER_API StatusOr<std::size_t> convert_float_precision(Graph& graph, DType to);

/// Writes `graph` as an ONNX model (initializers inline; viewable in Netron). Throws
/// dsinfer::Error (io_error, unsupported for attribute kinds it cannot write).
DSINFER_API void save_onnx(const Graph& graph, const std::filesystem::path& file);

}  // namespace dsinfer
