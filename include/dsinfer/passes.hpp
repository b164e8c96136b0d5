// dsinfer/passes.hpp — the graph optimizer: passes over the Graph IR, their pipeline, and what
// they may ask of the engine.
//
// Purpose: a pass is a small object that rewrites a Graph in place (fold constants, remove dead
// code, fuse patterns into dsinfer's fused ops in the "com.dsinfer" domain). optimize() runs a
// pipeline of passes (default_passes(), or the caller's PassPipeline with its own passes among
// them) filtered by optimization level, and reports how often each rewrite fired.
// Levels: 0 none; 1 constant folding, dead-code and common-subexpression elimination,
// Identity/Reshape/Transpose clean-up; 2 + fusions (Conv+BatchNorm, Conv/MatMul/Gemm + bias,
// residual Add and activation, LayerNorm, skip-LayerNorm, GELU, attention, ...);
// 3 + layout changes and backend-specific rewrites (the executor's blocked-layout negotiation
// between oneDNN kernels runs only at level 3).
//
// The passes link no kernel and no executor: what needs one (evaluating a node to fold it,
// inferring shapes for the fusions that compare them) goes through a GraphEvaluator carried in
// OptimizeOptions. The full library (dsinfer::dsinfer) supplies kernel_evaluator(), and its
// optimize()/try_optimize() use it when the options carry none. The passes alone (the
// dsinfer_passes target, for offline tools) offer run_passes()/try_run_passes(), which use only
// the evaluator the options carry: without one, constant folding and the shape-dependent fusions
// do less (docs/OPTIMIZER.md "Without an evaluator"), never anything different.
//
// Every pass keeps the graph's interface (input and output names, dtypes, declared shapes) and
// its numerics within the tolerances stated in docs/OPTIMIZER.md. Passes never remove a value a
// subgraph reads from an enclosing graph (captures are resolved by name).
//
// Ownership/threading: passes hold no state between apply() calls; a Graph is mutated by one
// thread at a time. A GraphEvaluator is used from the optimizing thread only, but
// kernel_evaluator() may serve several optimizations at once.
//
// Usage:
//   dsinfer::Graph g = dsinfer::load_onnx("bert.onnx");
//   dsinfer::OptimizeReport r = dsinfer::optimize(g, {.level = 3});
//   // r.fired["fuse_attention"] == 12 for BERT-base
//   auto engine = dsinfer::InferenceEngine::compile(std::move(g), {.optimization_level = 0});
//
//   // A pass of one's own after constant folding (MyPass : dsinfer::GraphPass):
//   dsinfer::OptimizeOptions o;
//   o.passes = dsinfer::PassPipeline::defaults().insert_after(
//       "constant_folding", std::make_shared<MyPass>());
//   dsinfer::optimize(g, o);
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
#include "dsinfer/onnx.hpp"  // save_onnx (dump the optimized graph)
#include "dsinfer/ops.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

class GraphPass;
class GraphEvaluator;

/// An ordered list of passes. Passes are shared and immutable (GraphPass::apply is const), so a
/// pipeline copies cheaply and may be reused across graphs and threads.
class DSINFER_API PassPipeline {
public:
    /// No passes (OptimizeOptions::passes empty: optimize() runs default_passes()).
    PassPipeline() = default;
    /// default_passes(), in their order.
    static PassPipeline defaults();

    /// Appends `pass`.
    PassPipeline& add(std::shared_ptr<const GraphPass> pass);
    /// Inserts `pass` before / after the first pass named `name`. Throws dsinfer::Error
    /// (invalid_argument, naming `name`) when there is none, or when `pass` is null.
    PassPipeline& insert_before(std::string_view name, std::shared_ptr<const GraphPass> pass);
    PassPipeline& insert_after(std::string_view name, std::shared_ptr<const GraphPass> pass);

    bool empty() const noexcept { return passes_.empty(); }
    std::size_t size() const noexcept { return passes_.size(); }
    const std::vector<std::shared_ptr<const GraphPass>>& passes() const noexcept { return passes_; }

private:
    std::vector<std::shared_ptr<const GraphPass>>::iterator find(std::string_view name);
    std::vector<std::shared_ptr<const GraphPass>> passes_;
};

struct OptimizeOptions {
    /// 0 (none) to 3 (everything); see the file comment. A pass runs when its level() is at
    /// most this (user passes included).
    int level = 3;
    /// Constant folding never creates a constant larger than this (bytes), so folding cannot
    /// blow up the model's memory (e.g. an Expand or ConstantOfShape of a huge shape).
    std::uint64_t max_folded_bytes = std::uint64_t{64} << 20;
    /// Names of passes to skip, default or user ones. A name no pass has is ignored.
    std::vector<std::string> disabled_passes{};
    /// The passes to run, in order (still filtered by `level` and `disabled_passes`). Empty:
    /// PassPipeline::defaults().
    PassPipeline passes{};
    /// Evaluates nodes and infers shapes for the passes (not owned; must outlive the call).
    /// Null: optimize()/try_optimize() use kernel_evaluator(); run_passes() runs without one.
    const GraphEvaluator* evaluator = nullptr;
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
    /// Stable name (used in reports, OptimizeOptions::disabled_passes and PassPipeline).
    virtual std::string_view name() const noexcept = 0;
    /// The lowest optimization level that runs this pass. Before the first pass of level 2 or
    /// more, the pipeline annotates the graph with inferred shapes (GraphEvaluator::infer_shapes).
    virtual int level() const noexcept = 0;
    /// Rewrites `graph` (and, where the pass says so, its subgraphs). On error the graph may be
    /// partly rewritten; optimize() then reports the error and the engine does not load.
    /// ctx.options.evaluator may be null: a pass that needs it then does less.
    virtual Status apply(Graph& graph, PassContext& ctx) const = 0;
};

/// What the passes may ask of an engine, without linking one: load-time shape inference, and
/// the value of one node on constant inputs. kernel_evaluator() is the full library's; an
/// offline tool may supply its own or none.
class DSINFER_API GraphEvaluator {
public:
    virtual ~GraphEvaluator() = default;
    /// Writes what inference proves into `graph`: Value::dtype where unknown, Value::shape where
    /// not static (symbolic dims named after the inputs' symbols). Changes nothing else. Best
    /// effort: a graph it cannot infer stays as it was (ok). resource_exhausted means out of
    /// memory, and fails the optimization.
    virtual Status infer_shapes(Graph& graph) const = 0;
    /// Computes `node` alone under `opsets`: inputs[i] is the value of node.inputs[i] (a null
    /// Tensor where omitted); returns one tensor per entry of node.outputs (null where that is
    /// kNoValue). Node ids are only compared with kNoValue. Outputs whose total size would
    /// exceed `max_output_bytes`, or cannot be known before computing, are refused before
    /// anything is computed (unsupported). resource_exhausted means out of memory, and fails the
    /// optimization; any other error leaves the node as it is.
    virtual StatusOr<std::vector<Tensor>> evaluate(const Node& node,
                                                   const std::vector<Tensor>& inputs,
                                                   const std::vector<OpsetImport>& opsets,
                                                   std::uint64_t max_output_bytes) const = 0;
};

/// The passes of every level, in the order optimize() runs them.
DSINFER_API std::vector<std::unique_ptr<GraphPass>> default_passes();

/// Runs options.passes (or the defaults), filtered by options.level and
/// options.disabled_passes, on `graph` (sorted, linked); the graph stays sorted. Uses
/// options.evaluator as it is: null runs without one. Part of the passes alone
/// (dsinfer_passes): links no kernel.
DSINFER_API Status try_run_passes(Graph& graph, const OptimizeOptions& options,
                                  OptimizeReport& report) noexcept;
/// Like try_run_passes(), but throws dsinfer::Error.
DSINFER_API OptimizeReport run_passes(Graph& graph, const OptimizeOptions& options = {});

/// The full library's evaluator: the executor with dsinfer's reference kernels (shape inference
/// with symbolic-dim probes; one-node graphs compiled and run). Thread-safe, lives for the
/// process. Defined by dsinfer::dsinfer, not by the passes alone.
DSINFER_API const GraphEvaluator& kernel_evaluator();

/// try_run_passes() with kernel_evaluator() when options.evaluator is null. Defined by
/// dsinfer::dsinfer.
DSINFER_API Status try_optimize(Graph& graph, const OptimizeOptions& options,
                                OptimizeReport& report) noexcept;
/// Like try_optimize(), but throws dsinfer::Error.
DSINFER_API OptimizeReport optimize(Graph& graph, const OptimizeOptions& options = {});

/// Mixed precision for GPU engines (EngineOptions::precision fp16/bf16): every float32
/// initializer, value and float32 attribute tensor (Constant, ConstantOfShape) becomes `to`
/// (DType::f16 or DType::bf16), Cast nodes to float32 cast to `to`; the graph's interface keeps
/// float32 (a Cast after each float32 input and before each float32 output). Kernels compute
/// normalizations, softmax and accumulations in float32. Graphs with subgraphs (If/Loop/Scan)
/// are unsupported. Returns the number of tensors converted. Value dtypes the graph does not
/// declare come from `evaluator` (null: values of unknown dtype stay unknown and unconverted).
DSINFER_API StatusOr<std::size_t> convert_float_precision(Graph& graph, DType to,
                                                          const GraphEvaluator* evaluator);
/// convert_float_precision() with kernel_evaluator(). Defined by dsinfer::dsinfer.
DSINFER_API StatusOr<std::size_t> convert_float_precision(Graph& graph, DType to);

}  // namespace dsinfer
