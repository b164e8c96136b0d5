// The reference executor: compiles a Graph into kernels and runs it on the CPU.
//
// compile: per node, pick the best registered kernel (registry priority order), create it
// (attribute validation, constant packing), compile subgraphs (If/Loop/Scan bodies) recursively
// with a parent link for outer-scope names, infer static dtypes/shapes by running each
// kernel's prepare on meta tensors, and compute value lifetimes (last use, including uses by
// subgraphs that capture a value).
// run: one Frame per call (values indexed by ValueId), nodes in topological order:
// prepare -> allocate outputs and workspace -> run -> release dead values. A CompiledGraph is
// immutable after compile (apart from the mutex-protected plan cache), so concurrent runs
// share it safely.
// memory: every buffer comes from the MemoryPool. A top-level graph plans its activations per
// input-shape class: the first run of a class records each intermediate's size and lifetime
// (and each node's workspace), the plan (memory_planner.hpp) gives them offsets in one arena,
// and later runs of the class allocate that arena once and place the tensors in it. Graph
// outputs, values read by subgraphs, string tensors and kernel-allocated (dynamic) outputs
// stay individual pool allocations; so does a value larger at run time than planned
// (data-dependent shapes). Subgraph bodies (If/Loop/Scan) are not planned.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/memory_pool.hpp"
#include "core/device_runtime.hpp"

namespace dsinfer::detail {

class CompiledGraph;

/// Hands the C heap's free pages back to the system (glibc: malloc_trim, which also releases
/// whole free pages inside the heap; elsewhere a no-op). glibc keeps freed blocks below its
/// dynamic mmap threshold in the heap, so memory freed by load (the parsed model, weights
/// replaced by packed copies) and by the first run of a shape class (its per-tensor blocks,
/// replaced by the plan's arena) would otherwise stay resident: BERT-base b8, about 6 and
/// 13 MiB. Called at the end of compile and after each recording run, never per planned run.
void release_free_heap_pages() noexcept;

/// Per-run storage of one (sub)graph execution.
struct Frame {
    const CompiledGraph* graph = nullptr;
    const Frame* parent = nullptr;
    std::vector<Tensor> values;
    /// Per value: its copy on the other side (host <-> device) once a node needed it there.
    std::vector<Tensor> other;
};

struct CompileOptions {
    const KernelRegistry* registry = nullptr;
    DeviceKind device = DeviceKind::cpu;
    /// Where every tensor of a run comes from; null = default_memory_pool().
    std::shared_ptr<MemoryPool> memory_pool;
    /// Plan activations per input-shape class (top-level graph only).
    bool plan_memory = true;
    /// Shape buckets (EngineOptions::shape_buckets): symbolic input dims key plans by bucket
    /// edge (the smallest of `bucket_edges` >= the dim, else the next power of two).
    bool shape_buckets = true;
    std::vector<std::int64_t> bucket_edges;
    /// EngineOptions::transient_shapes: shapes inside a bucket are prepared with
    /// PrepareContext::transient_shape (kernels build nothing per shape).
    bool transient_shapes = false;
    /// Let backends exchange tensors in their blocked layouts (optimization level 3).
    bool blocked_layouts = true;
    /// Values marked Value::observed may be blocked too (EngineOptions::
    /// observed_values_any_layout); else they stay row-major.
    bool observed_any_layout = false;
    int max_subgraph_depth = 32;
    /// A GPU engine: nodes whose op the device backend supports run there (the rest on the
    /// CPU backends, tensors copied across as needed). Null = CPU only. Subgraph bodies
    /// (If/Loop/Scan) run on the CPU.
    std::shared_ptr<DeviceRuntime> device_runtime;
    /// EngineOptions::precision == tf32 (KernelCreateContext::allow_tf32).
    bool allow_tf32 = false;
    /// CPU engines: EngineOptions::precision fp16 / bf16 as f16 / bf16, else f32
    /// (KernelCreateContext::weight_precision).
    DType weight_precision = DType::f32;
    /// EngineOptions::algo_search == measure (KernelCreateContext::measure_algorithms).
    bool measure_algorithms = false;
    /// EngineOptions::num_threads == 0: nodes too small to gain from a second thread
    /// (small_node()) prepare and run on the calling thread alone.
    bool serial_small_nodes = false;
    /// The threads kernels prepare for (workspaces, primitives): the engine's num_threads, the
    /// most a run may get; a run's lease of the process budget may give it fewer (never more).
    /// 0 = the run's own budget.
    int prepare_threads = 0;
    /// EngineOptions::cuda_graphs: capture a whole run per shape class and replay it.
    bool cuda_graphs = true;
    /// The engine's weight store (KernelCreateContext::weight_store); null = a new one for this
    /// graph. Subgraphs share their parent's.
    std::shared_ptr<WeightStore> weights;
};

/// How a node's work is estimated for CompileOptions::serial_small_nodes (CompiledNode::
/// work_kind): by its input elements only, or also its multiply-adds as a convolution (W input 1,
/// or 3 for QLinear*), a product (B input 1, or 3 for QLinearMatMul) or attention; control flow
/// never runs serial on its own account.
inline constexpr std::uint8_t kWorkElements = 0, kWorkNever = 1, kWorkConv = 2,
                              kWorkQLinearConv = 3, kWorkProduct = 4, kWorkQLinearMatMul = 5,
                              kWorkAttention = 6;
/// Node n's work kind, from its op type (executor_run.cpp).
std::uint8_t work_kind_of(const Node& n) noexcept;

/// A number no other plan or prepared shape of this process carries (a run scratch's program,
/// NodeScratch::Program, remembers those it was built for).
inline std::uint64_t next_plan_serial() noexcept {
    static std::atomic<std::uint64_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// The arena placement of one shape bucket, or of one exact input shape (built from a
/// recorded run, or for a bucket from the sizes every node's prepare gives at its edges).
struct ExecutionPlan {
    std::uint64_t serial = next_plan_serial();
    std::vector<std::int64_t> value_offset;  ///< per ValueId: arena offset, -1 = not planned
    std::vector<std::size_t> value_bytes;    ///< per ValueId: bytes recorded (run-time must fit)
    std::vector<ValueId> inplace_input;      ///< per ValueId: the input it shares a block with
    std::vector<std::int64_t> workspace_offset;  ///< per node, -1 = none
    std::vector<std::size_t> workspace_bytes;    ///< per node
    std::vector<char> value_on_device;           ///< per ValueId: offset is in the device arena
    std::size_t arena_bytes = 0;                 ///< host arena
    std::size_t device_arena_bytes = 0;          ///< device arena (GPU engines)
    MemoryPlanStats stats;
    /// A bucket whose sizes could not be derived at its edges (a prepare needed run-time
    /// data, or failed there): its runs plan per exact input shape. No arena.
    bool exact_only = false;
};

/// What prepare said for one exact input shape, kept so that later runs of that shape call
/// prepare only for nodes whose result the shape does not fix (CompiledNode::stable_prepare).
struct PreparedShape {
    std::uint64_t serial = next_plan_serial();
    /// Per output of every node (CompiledNode::spec_begin).
    std::vector<PrepareContext::OutputSpec> output_specs;
    /// Per node: the kernel state its prepare set (stable nodes), and its workspace bytes.
    std::vector<std::shared_ptr<const void>> node_states;
    std::vector<std::size_t> workspace_bytes;
    /// What the run that recorded this shape saw of every node, stable or not, for
    /// InferenceEngine::node_descriptions(): its kernel's algorithm() (empty: the provider),
    /// its workspace, and per output of every node (spec_begin) the shape it produced.
    std::vector<std::string> algorithms;
    std::vector<std::size_t> node_workspace;
    std::vector<Shape> output_shapes;
    std::vector<char> output_recorded;
};

class CompiledGraph final : public SubgraphRunner,
                            public std::enable_shared_from_this<CompiledGraph> {
public:
    /// Compiles `graph` (nodes must be topologically sorted). `parent` is the enclosing
    /// graph for subgraphs. The graph's values get inferred dtypes/shapes where unknown.
    static StatusOr<std::shared_ptr<CompiledGraph>> compile(std::shared_ptr<Graph> graph,
                                                            const CompileOptions& options,
                                                            const CompiledGraph* parent = nullptr,
                                                            int depth = 0);

    ~CompiledGraph() override;

    /// Runs with `inputs` bound to graph inputs in order. `outer` is the enclosing frame
    /// (subgraphs) or nullptr.
    Status execute(const std::vector<Tensor>& inputs, const Frame* outer,
                   const RunControl& control, std::vector<Tensor>& outputs) const;

    // SubgraphRunner
    int num_inputs() const noexcept override { return static_cast<int>(graph_->inputs.size()); }
    int num_outputs() const noexcept override {
        return static_cast<int>(graph_->outputs.size());
    }
    Status run(const std::vector<Tensor>& inputs, const void* outer_frame,
               const RunControl& control, std::vector<Tensor>& outputs) const override {
        return execute(inputs, static_cast<const Frame*>(outer_frame), control, outputs);
    }

    const Graph& graph() const noexcept { return *graph_; }
    /// Nodes that run with at least one input or output in a backend's blocked layout.
    int blocked_nodes() const noexcept { return blocked_nodes_; }
    /// The provider ("onednn", "cpu", "reference") that runs node i of graph().nodes.
    const std::string& provider(std::size_t node_index) const noexcept {
        return nodes_[node_index].entry->provider;
    }
    /// GPU engines: where nodes run and what crossed between host and device.
    NodePlacement placement() const;
    /// Bytes of initializer data freed after compile because the kernels reading them keep
    /// their own (packed) copies (Kernel::released_constant_inputs).
    std::uint64_t released_constant_bytes() const noexcept { return released_constant_bytes_; }
    /// The store that owns the constants and their forms (shared with subgraphs).
    const std::shared_ptr<WeightStore>& weight_store() const noexcept { return weights_; }
    /// The constants as held now (InferenceEngine::weight_memory()), subgraphs included
    /// (they share the store).
    WeightMemoryStats weight_memory() const;
    /// Name -> id of every value defined in this graph (captures included).
    const std::unordered_map<std::string, ValueId>& names() const noexcept { return names_; }
    /// The plan most recently built, and the number of shape classes cached.
    MemoryPlanStats memory_plan_stats() const;
    /// Every node as the most recently used input-shape class ran it (InferenceEngine::
    /// node_descriptions): what its first run recorded, or before any, what compile knows.
    /// `inputs` receives that class's graph input shapes (empty before any run).
    std::vector<NodeDescription> node_descriptions(std::vector<Shape>* inputs = nullptr) const;
    /// Plans kept (buckets and exact shapes; least recently used evicted beyond).
    static constexpr std::size_t kMaxPlans = 16;
    /// Exact input shapes whose prepare results are kept (least recently used evicted beyond).
    static constexpr std::size_t kMaxPreparedShapes = 16;
    /// GPU engines: exact input shapes whose runs are kept as captured CUDA graphs.
    static constexpr std::size_t kMaxCapturedGraphs = 8;
    /// The bucket edge of a symbolic dim of run-time value v (CompileOptions::bucket_edges).
    std::int64_t bucket_edge(std::int64_t v) const noexcept;

private:
    struct CompiledNode {
        std::unique_ptr<Kernel> kernel;
        const KernelEntry* entry = nullptr;
        bool on_device = false;        // the kernel is the device backend's
        std::uint64_t host_inputs = 0;  // device kernels: inputs wanted on the host
        bool shape_derived = false;    // host node whose outputs depend on input shapes only
        // prepare's result is fixed for an input-shape class: every output static (not
        // dynamic), no subgraph, every input's shape fixed by the class, and prepare asked
        // has_data() only of constants and load-computed shape values. A planned run reuses
        // the result the class's first run recorded instead of calling prepare.
        bool stable_prepare = false;
        std::uint32_t spec_begin = 0;  // first of its outputs in ExecutionPlan::output_specs
        // How its work is estimated for CompileOptions::serial_small_nodes (executor_run.cpp
        // work_kind_of, set at compile; small_node reads it per run).
        std::uint8_t work_kind = 0;
        std::vector<std::shared_ptr<CompiledGraph>> subgraphs;
        std::vector<ValueId> release_after;  // values whose last use is this node
    };
    struct Capture {
        ValueId id;      // in this graph
        int levels_up;   // 1 = the parent frame
        ValueId outer;   // id in that ancestor
    };

    Status compile_nodes(const CompileOptions& options, int depth);
    /// Static dtypes/shapes of node ni's outputs from its kernel's prepare on meta tensors
    /// (constants carry data). Nodes are created in order, so later kernels see them.
    Status infer_node(std::size_t ni);
    /// Marks node ni's outputs' shapes fixed by the input-shape class, and its prepare stable.
    void mark_fixed(std::size_t ni, bool shapes, bool prepare);
    /// Index of a symbolic dim name for probe placeholders (assigned on first sight).
    std::size_t symbol_index(const std::string& symbol);
    /// Layout negotiation (kernel.hpp LayoutSupport): which values use a backend's blocked
    /// layout. Runs after shape inference, before lifetimes.
    Status negotiate_layouts(bool observed_any_layout);
    void plan_lifetimes();
    /// GPU engines: device copies of the constants device kernels read (not released to them),
    /// the weight store's forms for this device (shared with other graphs and with device
    /// kernels that keep the same copy).
    Status upload_constants();
    struct DeviceScope;
    /// Input k of node ni where the node's kernel wants it (host or device), copying it across
    /// (once per value and run: Frame::other) when it lives on the other side.
    StatusOr<Tensor> stage_input(Frame& frame, DeviceScope* dev, std::size_t ni, std::size_t k) const;
    /// Device memory for a run (stream-ordered: see device_runtime.hpp).
    StatusOr<Tensor> allocate_on(DeviceScope* dev, bool device, DType dtype, const Shape& shape) const;
    struct Recording;
    struct RunMemory;
    struct NodeScratch;
    struct RunScratch;
    /// A run's scratch (frame, per-node vectors), reused across runs: no allocation per run
    /// once as many runs as ever ran concurrently have finished.
    std::unique_ptr<RunScratch> acquire_scratch() const;
    void release_scratch(std::unique_ptr<RunScratch> s) const noexcept;
    /// Drops a run's tensors from the scratch (its capacity stays); after a completed run only
    /// those no node released.
    void clear_run_values(RunScratch& s, bool completed) const noexcept;
    /// Whether a whole run can be captured as a CUDA graph (after compile).
    bool decide_graphable() const;
    /// A planned host run's program (NodeScratch::Program) for mem's plan, prepared results and
    /// arena, in the scratch's storage (sized on its first host run: no allocation).
    void build_program(NodeScratch& s, const RunMemory& mem) const noexcept;
    /// Runs the nodes in order on a set-up frame (the body of execute()).
    Status run_nodes(Frame& frame, RunMemory& mem, DeviceScope* dev, NodeScratch& scratch,
                     const RunControl& control, std::int64_t* error_slots) const;
    /// Reads the device error slots (after the stream completed) and turns a report into an
    /// invalid_argument naming the node.
    Status check_device_errors(DeviceScope* dev, const std::int64_t* slots) const;
    struct CapturedRun;
    std::shared_ptr<CapturedRun> find_captured(const std::vector<std::int64_t>& key) const;
    /// Captures the run of one shape class (plan known) into a CUDA graph and replays it;
    /// `handled` false = the class cannot be captured (run normally).
    Status capture_and_run(const std::vector<Tensor>& inputs, const std::vector<std::int64_t>& key,
                           const ExecutionPlan& plan, const RunControl& control,
                           std::vector<Tensor>& outputs, bool& handled) const;
    Status replay(CapturedRun& run, const std::vector<Tensor>& inputs,
                  std::vector<Tensor>& outputs) const;

    /// The cached plan under `key` (a bucket's or an exact shape's), or null.
    std::shared_ptr<const ExecutionPlan> find_plan(const std::vector<std::int64_t>& key) const;
    /// Builds the plan of a recording (a recorded run, or a bucket measured at its edges) and
    /// caches it under `key`; returns it.
    std::shared_ptr<const ExecutionPlan> build_plan(const std::vector<std::int64_t>& key,
                                                    const Recording& rec) const;
    /// Caches an exact_only marker under a bucket's key.
    std::shared_ptr<const ExecutionPlan> mark_exact_only(const std::vector<std::int64_t>& key) const;
    /// The prepare results kept for an exact input shape, or null; and keeping them.
    std::shared_ptr<const PreparedShape> find_prepared(const std::vector<std::int64_t>& key) const;
    void keep_prepared(const std::vector<std::int64_t>& key,
                       std::shared_ptr<const PreparedShape> prepared) const;
    /// Whether runs of these inputs' bucket may share one plan: fills `rec` with the sizes of
    /// every plannable value and workspace at the bucket's edges, by calling each node's
    /// prepare on tensors of those shapes (values shape-like enough to carry data, Shape ->
    /// Gather -> Concat chains, are computed). False when that cannot be done: a node needs
    /// run-time data, has subgraphs, runs on a device, or its prepare fails at the edges.
    /// Out of memory is an error (resource_exhausted).
    /// `at_edges` false: the same at the inputs' own dims (a shape's own plan).
    StatusOr<bool> measure_bucket(const std::vector<Tensor>& inputs, Recording& rec,
                                  bool at_edges) const;
    /// Runs node ni's kernel on small inputs that carry data (shape-like values, at most 1024
    /// elements per output) and returns its outputs, or an empty vector when it cannot.
    /// Out of memory is an error; any other failure only means "not computed".
    StatusOr<std::vector<Tensor>> compute_small(std::size_t ni, const std::vector<Tensor>& ins,
                                                const PrepareContext& ctx) const;
    /// Records, in a recording, that value `id` (output 0 of node ni) may share the block of
    /// the input it overwrites in place.
    void note_inplace(Recording& rec, std::size_t ni, ValueId id, DType dtype, const Shape& shape,
                      std::span<const Tensor* const> inputs) const;
    /// The exact key (marker 1) and the bucket key (marker 0) of a run's inputs, each when
    /// asked for, in one pass; returns whether a symbolic input dim lies off its bucket edge
    /// (the shape is inside its bucket; false without buckets).
    bool shape_keys(const std::vector<Tensor>& inputs, std::vector<std::int64_t>* key,
                    std::vector<std::int64_t>* bucket) const;
    /// The buffer of value `id`, an output of node ni, into `out`: its arena slot when planned
    /// (and it fits), else a pool allocation. Records its size when the run records.
    Status output_tensor(RunMemory& mem, DeviceScope* dev, std::size_t ni, ValueId id, DType dtype,
                         const Shape& shape, std::span<const Tensor* const> inputs,
                         Tensor& out) const;

    std::shared_ptr<Graph> graph_;
    const CompiledGraph* parent_ = nullptr;
    std::shared_ptr<DeviceRuntime> device_;  // GPU engines
    std::vector<Tensor> device_constants_;   // per value: device copy of an initializer
    /// Per value: the weight store's form device_constants_ shares its buffer with (held here,
    /// so the store reports this graph among its holders; device_constant_form).
    std::vector<std::shared_ptr<const Tensor>> device_forms_;
    std::size_t device_nodes_ = 0;
    bool reports_device_errors_ = false;  // some device kernel reports through error slots
    bool graphable_ = false;              // runs may be captured as CUDA graphs
    struct TransferCounters {
        std::atomic<std::uint64_t> h2d{0}, d2h{0}, copies{0}, replays{0};
    };
    struct GraphCache {
        std::mutex mu;
        std::list<std::pair<std::vector<std::int64_t>, std::shared_ptr<CapturedRun>>> lru;
    };
    mutable GraphCache graphs_;
    mutable TransferCounters transfers_;
    std::shared_ptr<MemoryPool> pool_;
    std::shared_ptr<WeightStore> weights_;  ///< owns the constants and their forms
    Allocator* allocator_ = nullptr;  // pool_.get()
    bool bind_outputs_to_pool_ = false;  // a caller's pool: outputs keep it alive
    std::vector<CompiledNode> nodes_;
    std::vector<Capture> captures_;
    /// Ancestor values read by this graph or its subgraphs: (levels_up, id).
    std::vector<std::pair<int, ValueId>> outer_refs_;
    std::unordered_map<std::string, ValueId> names_;
    int blocked_nodes_ = 0;
    /// Per value: 1 when held in a backend's blocked layout (never shown to an observer).
    std::vector<char> value_blocked_;
    std::uint64_t released_constant_bytes_ = 0;
    std::unordered_map<std::string, std::size_t> probe_symbols_;
    /// Load-time only: small shape-like values computed per probe (freed after compile).
    std::vector<Tensor> probe_data_[2];
    /// Load-time only: per value, its shape is fixed by the input-shape class.
    std::vector<char> shape_fixed_;

    // Memory planning (top-level graphs with CompileOptions::plan_memory).
    bool plan_memory_ = false;
    std::vector<std::int32_t> def_step_;   // producing node per value, -1 = none
    std::vector<std::int32_t> last_step_;  // last reading node per value, -1 = none
    std::vector<char> plannable_;          // may live in the arena
    std::vector<char> inplace_op_;         // per node: output 0 may share a dying input's block
                                           // (0 no, 1 elementwise, k + 2 input k only)
    // Shape buckets: per graph input and dim, whether the dim is symbolic (declared).
    bool buckets_ = false;
    bool transient_shapes_ = false;  // CompileOptions::transient_shapes
    bool serial_small_nodes_ = false;  // CompileOptions::serial_small_nodes
    int prepare_threads_ = 0;          // CompileOptions::prepare_threads
    std::vector<std::int64_t> bucket_edges_;
    std::vector<std::vector<char>> input_symbolic_;
    /// Cleared when measure_bucket found a reason that holds for every bucket (subgraphs,
    /// device nodes): then runs key plans by exact shape only.
    mutable std::atomic<bool> bucketable_{true};
    struct PlanCache {
        std::mutex mu;
        std::list<std::pair<std::vector<std::int64_t>, std::shared_ptr<const ExecutionPlan>>> lru;
        std::list<std::pair<std::vector<std::int64_t>, std::shared_ptr<const PreparedShape>>> prepared;
        MemoryPlanStats last;  // of the plan most recently built
        std::uint64_t recorded = 0;
    };
    mutable PlanCache plans_;
    std::uint32_t num_output_specs_ = 0;  // outputs of all nodes
    struct ScratchPool {
        std::mutex mu;
        std::vector<std::unique_ptr<RunScratch>> free;
        std::size_t created = 0;  // free.capacity() >= created
    };
    mutable ScratchPool scratch_;
    // Declared last: destroyed first, while the graph the scratches' frames refer to lives.
};

}  // namespace dsinfer::detail
