// dsinfer/engine.hpp — InferenceEngine: load a model, run it.
//
// Purpose: the main entry point. load() reads an ONNX model (validating it against
// ModelLimits; dsinfer/onnx.hpp, included here, holds the importer's own API), compiles it for
// the configured backends (dsinfer/backend.hpp: kernel selection, attribute validation, weight
// packing, static shape inference), and run() executes it.
//
// Ownership/threading: InferenceEngine is move-only and owns the compiled model. run() is
// const and thread-safe: any number of threads may call run() on one engine at once; each
// call has its own intermediate tensors. Output tensors are owned by the caller and stay
// valid after the engine is destroyed. Inputs are read during run() only (not retained).
// Errors are thrown as dsinfer::Error with an ErrorCode:
//   load: io_error (file), invalid_model (malformed), unsupported (op/opset/dtype/IR version),
//         resource_exhausted (a ModelLimits bound);
//   run:  invalid_argument (input names, dtype, rank, dims, byte size; data-dependent
//         indices), resource_exhausted, cancelled / deadline_exceeded (RunOptions).
//
// Serving (dynamic batching, adaptive control, metrics, several models by name) wraps the
// engine in the dsinfer::serving target: dsinfer/serving.hpp.
//
// What it does: describe() (and node_descriptions()) says, per node, which code really runs for
// the most recent input shape; messages (a start-up line at info level, warnings) go to the sink
// of dsinfer/log.hpp, or to EngineOptions::log.
//
// Usage:
//   auto engine = dsinfer::InferenceEngine::load("models/digits/digits.onnx");
//   std::vector<float> pixels(64);  // one 8x8 image
//   auto x = dsinfer::Tensor::from_vector<float>({1, 64}, pixels);
//   dsinfer::NamedTensors out = engine.run({{"pixels", x}});
//   const float* probs = out.get("probabilities").data<float>();  // checked: float32
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/cancellation.hpp"
#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/log.hpp"
#include "dsinfer/onnx.hpp"
#include "dsinfer/passes.hpp"
#include "dsinfer/quantize.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/threads.hpp"
#include "dsinfer/weight_store.hpp"

namespace dsinfer {

class MemoryPool;  // dsinfer/memory_pool.hpp
class KernelRegistry;  // dsinfer/kernel_registry.hpp

/// Arithmetic precision of an engine (EngineOptions::precision).
enum class Precision : std::uint8_t {
    fp32,  ///< float32 everywhere (the model as exported)
    tf32,  ///< GPU only: float32 tensors; GEMMs may use tf32 tensor cores (10-bit mantissa
           ///< products)
    fp16,  ///< GPU: float32 weights and activations stored and computed as float16 (GEMMs
           ///< accumulate in float32; normalizations and softmax compute in float32).
           ///< CPU: the MatMul/Gemm weights held at half width (rounded to nearest even, half
           ///< the bytes), activations and accumulation float32. Either way the model's inputs
           ///< and outputs keep their float32 type
    bf16,  ///< as fp16 with bfloat16 (on CPUs with AVX512_BF16 the CPU GEMMs also round
           ///< their activations to bfloat16 and multiply on vdpbf16ps, and so does the fused
           ///< MultiHeadAttention's Q·Kᵀ and P·V; its softmax stays float32)
    int8,  ///< CPU only: a float32 model's MatMul/Gemm layers quantized dynamically at load
           ///< (dsinfer/quantize.hpp quantize_dynamic: s8 weights, activations per run, ONNX
           ///< Runtime's dynamic form; InferenceEngine::int8_report()); a pre-quantized model
           ///< runs as it is. Everything else stays float32
};

/// How kernels with several algorithms for one shape pick one (EngineOptions::algo_search).
enum class AlgoSearch : std::uint8_t {
    /// A cost rule fitted to measurements on dsinfer's machines (docs/PLATFORM.md): nothing is
    /// timed, the same shape always gets the same algorithm on every machine of an ISA level.
    rule,
    /// Each candidate is timed on the shape at its first prepare (zeros as data, the
    /// engine's threads; the fastest of a few runs each) and the fastest runs from then on.
    /// The answer is cached per process by geometry, layout and thread count, so a shape is
    /// timed once; the first run of a new shape costs the timing (ResNet-50: see
    /// docs/PLATFORM.md). Results may then differ in the last bits between machines.
    measure,
};

/// Options for InferenceEngine::load / compile. Every field has a safe default.
struct EngineOptions {
    /// Where the model runs: "cpu" (default), "cuda" (device 0) or "cuda:N". On a CUDA device,
    /// every node the CUDA backend supports runs there and the rest run on the CPU backends
    /// (node_placement() reports how many and the bytes that crossed). Needs a build with
    /// DSINFER_WITH_CUDA (unsupported otherwise) and a GPU (unavailable otherwise).
    std::string device = "cpu";
    /// Precision (see Precision): fp32, fp16 or bf16 on the CPU (tf32 needs a CUDA device:
    /// invalid_argument on the CPU). The half-width weights are reported as weight-store forms
    /// (weight_store()->forms(): layouts "sgemm.packed_b*.f16" / ".bf16"). A float16 or
    /// bfloat16 model runs in float32 on a CPU engine at any precision (its interface kept).
    Precision precision = Precision::fp32;
    /// GPU engines: from the second run of an input-shape class, the whole run is captured
    /// once as a CUDA graph and replayed (one launch instead of one per kernel), when every
    /// node runs on the device or computes shape values only. Other shapes are captured on
    /// their second run too (up to 8 classes); runs with RunOptions::deadline or node_ms, and
    /// concurrent runs of a class being replayed, run node by node.
    bool cuda_graphs = true;
    /// The host backends (dsinfer/backend.hpp: find_backend, available_backends), with per-node
    /// fall-through to the next one that supports the node: "onednn" (oneDNN primitives, when
    /// built with it), "cpu" (dsinfer's own optimized CPU kernels), "reference" (reference
    /// kernels only: slow, for checking). Each backend's kernels carry its own priority
    /// (onednn > cpu > reference), so the order listed does not matter; the reference kernels
    /// are always the last resort. Empty = every CPU backend this build has, fastest first
    /// (default_backends()). An unknown name is invalid_argument, one not in this build
    /// unsupported (Backend::availability()).
    std::vector<std::string> backends{};
    /// Intra-op threads of one run, shared by oneDNN and dsinfer's kernels (wait_policy says on
    /// which pool); 0 = the processors available to the process, except that a node too small to gain from
    /// a second thread (under ~0.5 M multiply-adds and 32 K input elements) runs on the calling
    /// thread alone: a parallel region costs microseconds on an idle machine and a scheduler
    /// time slice on a busy one. A positive value uses that many threads for every node that
    /// can split its work. Results are bitwise identical run to run for the same value.
    int num_threads = 0;
    /// How the run's helper threads wait between parallel regions (dsinfer/threads.hpp: spin,
    /// yield, block). Results do not depend on it.
    WaitPolicy wait_policy = WaitPolicy::spin;
    /// Graph optimization level before compiling (dsinfer/passes.hpp): 0 none, 1 clean-up and
    /// constant folding, 2 + fusions, 3 + layout and backend-specific rewrites.
    int optimization_level = 3;
    /// Optimizer passes to skip by name (default_passes(); e.g. "fuse_attention"). A name no
    /// default pass has is invalid_argument naming the passes (a typo would otherwise leave the
    /// pass on without a word).
    std::vector<std::string> disabled_passes{};
    /// Values (by name) that must stay visible to a RunOptions::observer: the optimizer's
    /// fusions keep producing them (as for graph outputs) and they are held row-major. For
    /// calibration: the graph is not edited and fusions that do not hide them still apply. A
    /// name the graph lacks is invalid_argument.
    std::vector<std::string> observed_values{};
    /// The observed values may stay in a backend's blocked layout (for observers whose
    /// any_layout() is true): the engine then runs as fast as without observation but for the
    /// fusions that would hide an observed value.
    bool observed_values_any_layout = false;
    /// When non-empty, the optimized graph is written here as an ONNX model (for Netron).
    std::filesystem::path dump_optimized_graph{};
    /// Where activations, workspaces and outputs come from. Null = the process-wide pool
    /// (default_memory_pool()). Outputs keep their pool alive, so they may outlive the engine.
    std::shared_ptr<MemoryPool> memory_pool{};
    /// Plan activations per input-shape class into one arena (docs/MEMORY.md); false = one
    /// pool allocation per tensor (for debugging and comparisons).
    bool plan_memory = true;
    /// Shape buckets (docs/MEMORY.md "Shape buckets"): runs whose symbolic input dims fall in
    /// the same bucket share one memory plan, sized for the bucket's upper edge, so a loop
    /// whose sequence grows by one per step plans once per bucket instead of once per length.
    /// A symbolic dim of run-time value v belongs to the bucket of the smallest edge >= v in
    /// `shape_bucket_edges` (ascending, positive); without edges, or above the last one, to
    /// the next power of two >= v. The memory cost: a bucket's arena is its edge's (up to
    /// twice a linear tensor's bytes at v, four times a quadratic one's). Graphs whose sizes
    /// cannot be derived from the input shapes alone (data-dependent shapes, control flow,
    /// GPU engines) plan per exact input shape. false = one plan per exact input shape.
    bool shape_buckets = true;
    std::vector<std::int64_t> shape_bucket_edges{};
    /// For loops that see each shape about once (a decoder's growing sequence): shapes inside
    /// a bucket (a symbolic dim off its edge) run on kernel paths that serve any shape, so a
    /// new shape costs no per-shape compilation (oneDNN's primitives are JIT-compiled per
    /// shape: ~10 ms for a small transformer). The choice depends on the shape alone: a shape
    /// always runs the same kernels, but may differ in the last bits from an engine without
    /// this option. Shapes on bucket edges run the kernels they run without it. Default off:
    /// repeated shapes then get each backend's fastest kernels for their exact dims.
    bool transient_shapes = false;
    /// The CPU convolutions' choice among im2col GEMM, Winograd F(4x4, 3x3) and oneDNN's
    /// direct primitive: the fitted cost rule (default) or timing on this machine.
    AlgoSearch algo_search = AlgoSearch::rule;
    /// The application's own kernels (dsinfer/kernel_registry.hpp, examples/custom_op/): for a
    /// node they match (op, domain, opset range, input dtype signature), they are tried before
    /// every built-in backend, in their own priority order, and node_providers() names the
    /// provider they were registered with; a factory that returns unsupported falls through to
    /// the built-in kernels. Ops of a custom domain need the model to import the domain
    /// (opset_import). Null = none.
    std::shared_ptr<const KernelRegistry> custom_kernels{};
    ModelLimits limits;
    /// This engine's messages (dsinfer/log.hpp): the start-up summary at info level when it
    /// loads, warnings about options it tolerates. Unset fields follow the process-wide sink and
    /// level (set_log_callback, set_log_level: default warnings to stderr).
    LogOptions log{};
};

/// Where the nodes of a GPU engine run, and what crossed between host and device.
struct NodePlacement {
    std::string device = "cpu";           ///< "cpu" or "cuda:N (<name>)"
    std::size_t device_nodes = 0;         ///< nodes on the GPU
    std::size_t fallback_nodes = 0;       ///< nodes on a CPU backend (all of them on a CPU engine)
    std::uint64_t host_to_device_bytes = 0;  ///< since load, inputs and fallbacks included
    std::uint64_t device_to_host_bytes = 0;  ///< since load, outputs and fallbacks included
    std::uint64_t transfers = 0;             ///< copies between host and device since load
    std::uint64_t graph_replays = 0;         ///< runs executed by replaying a captured CUDA graph
};

/// The activation memory plan of one input-shape class (liveness-planned arena).
struct MemoryPlanStats {
    std::uint64_t planned_peak_bytes = 0;  ///< arena size: all planned intermediates + workspaces
    std::uint64_t lower_bound_bytes = 0;   ///< largest sum of simultaneously live bytes
    std::size_t planned_values = 0;        ///< tensors placed in the arena
    std::size_t shape_classes = 0;         ///< plans (shape buckets) cached now (bounded)
    std::uint64_t plans_recorded = 0;      ///< plans built since load (evicted ones included)
    std::uint64_t cached_arena_bytes = 0;  ///< arena bytes of every cached plan together
    std::size_t prepared_shapes = 0;       ///< exact input shapes whose prepare results are kept
    double ratio() const noexcept {
        return lower_bound_bytes == 0 ? 1.0
                                      : static_cast<double>(planned_peak_bytes) /
                                            static_cast<double>(lower_bound_bytes);
    }
};

/// Where the model's constants (weights) live, as the engine holds them now
/// (InferenceEngine::weight_memory(): a summary of its WeightStore's forms). Bytes are those of
/// the forms held, resident or mapped from the model file (a mapped weight's pages become
/// resident as kernels read them).
struct WeightMemoryStats {
    std::uint64_t graph_bytes = 0;     ///< constants the compiled graph still holds with data
    std::uint64_t released_bytes = 0;  ///< constants freed after compile (their kernels hold them)
    std::uint64_t packed_bytes = 0;    ///< kernels' copies in their own layouts (and stored copies
                                       ///< they keep or rebuilt)
    std::uint64_t derived_bytes = 0;   ///< kernels' transforms of weights (Winograd's)
    /// Constants resident more than once as the same numbers (the graph's data, a kernel's
    /// stored copy, packed copies: distinct buffers), by value name; empty when every
    /// constant is held once. Derived forms are not counted here (see derived_bytes).
    std::vector<std::string> held_twice;
};

/// The ISA level dsinfer's own CPU kernels dispatch to: "avx512", "avx2" or "baseline" (the
/// best this CPU has, capped by the environment variable DSINFER_MAX_CPU_ISA, which caps
/// oneDNN's kernels too; docs/PLATFORM.md).
DSINFER_API const char* cpu_kernel_isa() noexcept;

/// The backends an empty EngineOptions::backends means: {"onednn", "cpu"} when built with
/// oneDNN, else {"cpu"}.
DSINFER_API std::vector<std::string> default_backends();

/// Sees values as a run computes them (calibration, debugging): RunOptions::observer.
class ValueObserver {
public:
    virtual ~ValueObserver() = default;
    /// Called on the run's thread right after the node producing value `name` ran, in node
    /// order, for every output of a top-level node on the host whose value is held row-major
    /// (values exchanged in a backend's blocked layout are not shown: list the ones you need in
    /// EngineOptions::observed_values). `value` is valid only during the call; the observer
    /// must not keep it or write to it. Must not throw.
    virtual void observe(std::string_view name, const TensorView& value) noexcept = 0;
    /// True: values held in a backend's blocked layout are shown too, as they are (the same
    /// elements in the backend's order: enough for order-free statistics such as the ranges
    /// and histograms of calibration). Pair with EngineOptions::observed_values_any_layout.
    virtual bool any_layout() const noexcept { return false; }
};

/// Per-call options of run().
struct KvCacheStep;  // dsinfer/kv_cache.hpp

struct RunOptions {
    /// Absolute deadline; exceeding it ends the run with deadline_exceeded (checked between
    /// nodes and inside Loop/Scan iterations).
    std::optional<std::chrono::steady_clock::time_point> deadline;
    /// When set, receives the wall time of each node of graph().nodes in milliseconds
    /// (profiling; costs two clock reads per node).
    std::vector<double>* node_ms = nullptr;
    /// When set, sees the values the run computes (ValueObserver). Not owned. GPU engines
    /// show nothing.
    ValueObserver* observer = nullptr;
    /// For a Generator's engine (dsinfer/generate.hpp): this step's view of the paged KV
    /// cache, read and written in place by the graph's PagedAttention nodes. Not owned.
    const KvCacheStep* kv_cache = nullptr;
};

/// One node of a compiled engine as it runs (InferenceEngine::node_descriptions()).
struct NodeDescription {
    std::string name;      ///< the node's name (may be empty)
    std::string op;        ///< its op type; "domain:Op" outside the default ONNX domain
    std::string provider;  ///< node_providers()'s entry: the backend whose kernel holds the node
    /// What really runs (Kernel::algorithm) for the most recent input-shape class, e.g.
    /// "dsinfer:winograd-f4x4-avx512" inside a node whose provider is "onednn" (its kernel runs
    /// dsinfer's Winograd on that class), "onednn:brg:avx512_core matmul" (a oneDNN primitive's
    /// implementation), "reference". Before any run (nothing recorded yet): the provider.
    std::string algorithm;
    /// Per node input / output: its dims in that shape class (exact), or before any run what
    /// the compiled graph knows (symbolic dims; known = false where nothing is, and for an
    /// omitted optional input).
    std::vector<SymbolicShape> input_shapes;
    std::vector<SymbolicShape> output_shapes;
    /// Scratch memory the node's kernel takes in that shape class (0 before any run).
    std::size_t workspace_bytes = 0;
    /// True when algorithm, shapes and workspace are those of a run (the most recent shape
    /// class's first run recorded them); false before any run, for engines that do not plan
    /// memory (EngineOptions::plan_memory false), and for nodes that class did not reach.
    bool ran = false;
};

/// Declared name, element type and shape of a model input or output.
struct IOInfo {
    std::string name;
    std::optional<DType> dtype;
    SymbolicShape shape;
};

class DSINFER_API InferenceEngine {
public:
    /// Loads and compiles an ONNX model file. Throws dsinfer::Error.
    static InferenceEngine load(const std::filesystem::path& model, EngineOptions options = {});
    /// Compiles an in-memory graph (e.g. after passes). Throws dsinfer::Error.
    static InferenceEngine compile(Graph graph, EngineOptions options = {});

    InferenceEngine(InferenceEngine&&) noexcept;
    InferenceEngine& operator=(InferenceEngine&&) noexcept;
    InferenceEngine(const InferenceEngine&) = delete;
    InferenceEngine& operator=(const InferenceEngine&) = delete;
    ~InferenceEngine();

    /// Runs the model. `inputs` must name every graph input exactly once (no unknown names).
    /// Returns the graph outputs in declaration order, also addressable by name
    /// (NamedTensors::get("logits") / find). Thread-safe; throws dsinfer::Error.
    NamedTensors run(const std::vector<NamedTensor>& inputs, const RunOptions& options = {}) const;
    /// Like run(), but returns a Status instead of throwing.
    Status try_run(const std::vector<NamedTensor>& inputs, std::vector<NamedTensor>& outputs,
                   const RunOptions& options = {}) const noexcept;
    /// The outputs of try_run() and of the serving futures, a plain vector; run() returns
    /// NamedTensors, a std::vector<NamedTensor> that also finds an output by name.
    using Outputs = std::vector<NamedTensor>;
    /// run()'s input checks alone (names, element types, ranks, dims, symbols bound
    /// consistently): invalid_argument naming the input, else ok with the inputs, in the order
    /// of inputs(), in `ordered` when given. Nothing runs. Thread-safe.
    Status check_inputs(const std::vector<NamedTensor>& inputs,
                        std::vector<Tensor>* ordered = nullptr) const noexcept;


    const std::vector<IOInfo>& inputs() const noexcept;
    const std::vector<IOInfo>& outputs() const noexcept;
    /// The compiled graph (nodes in execution order). Initializers whose kernels keep their
    /// own packed copies have their data freed after compile (dtype and shape remain).
    const Graph& graph() const noexcept;
    /// EngineOptions::precision int8: what was quantized at load; null otherwise.
    const DynamicQuantizeReport* int8_report() const noexcept;
    /// Milliseconds spent in load()/compile() (parsing, optimization, kernel creation, weight
    /// packing).
    double load_ms() const noexcept;
    /// Milliseconds of the first run() (0 before it): first-touch costs show here, not hidden.
    double first_run_ms() const noexcept;
    /// What the optimizer did at load (per-pass rewrite counts).
    const OptimizeReport& optimization_report() const noexcept;
    /// The memory plan of the most recently planned input-shape class (zeros before a run).
    MemoryPlanStats memory_plan_stats() const;
    /// The provider running each node of graph().nodes ("onednn", "cpu", "reference"). A
    /// provider's kernel may run another's code for some shape classes (the oneDNN Conv runs
    /// dsinfer's Winograd and im2col GEMM, a kernel hands a shape it does not take to its
    /// fallback): node_descriptions() names what really runs.
    const std::vector<std::string>& node_providers() const noexcept;
    /// Each node of graph().nodes as it runs: name, op, provider, the algorithm that really runs,
    /// input and output shapes and workspace, for the most recent input-shape class (the one
    /// memory_plan_stats() reports; before any run, what load knows). Thread-safe.
    std::vector<NodeDescription> node_descriptions() const;
    /// A human-readable account of the engine, several lines: a header (dsinfer version, model,
    /// CPU ISA and the kernels' level, threads, backends, precision, weights, the memory plan's
    /// arena and lower bound, the shape class described) and one line per node ("#index name
    /// op [provider] algorithm inputs -> outputs workspace"). Thread-safe; for logs and bug
    /// reports (the format may change between versions: parse node_descriptions() instead).
    std::string describe() const;
    /// How many nodes exchange tensors in a backend's blocked layout (layout negotiation).
    int blocked_layout_nodes() const noexcept;
    /// GPU placement: nodes on the device and on CPU fallbacks, bytes copied each way.
    NodePlacement node_placement() const;
    /// The model's constants as held now: in the graph, released to kernels, packed, derived,
    /// and any held twice (e.g. packed beside the original). Lazily packed weights appear after
    /// the first run of a shape class.
    WeightMemoryStats weight_memory() const;
    /// The store that owns the model's constants and every form kernels made of them
    /// (dsinfer/weight_store.hpp): enumerate them (WeightStore::forms), or drop derived copies
    /// (rebuilt when next needed).
    std::shared_ptr<WeightStore> weight_store() const;
    /// The pool activations and outputs come from (EngineOptions::memory_pool, or the
    /// process-wide default_memory_pool()).
    std::shared_ptr<MemoryPool> memory_pool() const;

private:
    struct Impl;
    explicit InferenceEngine(std::unique_ptr<Impl> impl);
    /// compile() without the start-up log line (load() logs its own, naming the file).
    static InferenceEngine build(Graph graph, EngineOptions options);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
