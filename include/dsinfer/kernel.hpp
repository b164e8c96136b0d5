// dsinfer/kernel.hpp — the kernel interface: create, prepare, run.
//
// Purpose: every op implementation (reference CPU, oneDNN, CUDA) is a Kernel. Its life has
// three phases (the XNNPACK create/reshape/run split, ORT's PrePack):
//   1. create (the KernelFactory, once per node at load): read and validate attributes
//      (invalid_model on bad ones), look at constant inputs, pack weights. May allocate.
//   2. prepare (const, per run or per shape class): from input dtypes/shapes (and, for inputs
//      that define shapes, their values) compute output dtypes/shapes and workspace size.
//   3. run (const, noexcept): compute only. Outputs are preallocated by the executor, scratch
//      memory comes from ctx.workspace(). No allocation, no throwing.
// Both prepare and run are const: one Kernel serves concurrent runs of one engine; per-run
// state lives in the contexts.
//
// Load-time inference: the executor also calls prepare at load to infer static output
// shapes. Then an input whose value is not a constant has no data: a kernel must check
// ctx.has_data(i) before reading input i's values in prepare, and when it is false return
// Status::ok() leaving the dependent outputs unset (= unknown at load).
//
// Dynamic outputs: a kernel whose output shape is only known while computing (If, Loop,
// NonZero-like ops) calls ctx.set_output_dynamic(i) in prepare and allocates the output in
// run with RunContext::allocate_output — the one sanctioned allocation inside run.
//
// Errors: kernels return Status; the executor prefixes "node 'name' (Op): ", so messages
// should not repeat the node name.
//
// Usage (a complete kernel):
//   class ReluKernel final : public dsinfer::Kernel {
//    public:
//     dsinfer::Status prepare(dsinfer::PrepareContext& ctx) const override {
//       ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
//       return dsinfer::Status::ok();
//     }
//     dsinfer::Status run(dsinfer::RunContext& ctx) const noexcept override {
//       auto x = ctx.input(0); auto y = ctx.output(0);
//       for (int64_t i = 0; i < x.num_elements(); ++i)
//         y.data<float>()[i] = std::max(0.f, x.data<float>()[i]);
//       return dsinfer::Status::ok();
//     }
//   };
//
// What an application needs to add a kernel (docs/ARCHITECTURE.md "Custom operators"): Kernel
// (prepare and run; the other virtuals are optional backend hooks with safe defaults), the
// read-only accessors of KernelCreateContext, PrepareContext (input, has_data, set_output,
// set_output_dynamic, set_workspace, set_state) and RunContext (input, output, workspace,
// control, allocate_output, set_output_tensor, prepared_state), and a KernelRegistry
// (dsinfer/kernel_registry.hpp) passed as EngineOptions::custom_kernels. The executor's side
// of the contexts (handing inputs back, the frame, stream, prepared state and dynamic outputs
// it sets), the subgraph runner and the run-path test hook are in namespace dsinfer::detail
// (dsinfer/detail/kernel_internals.hpp: ContextAccess, SubgraphRunner), not part of this API.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsinfer/allocator.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/weight_store.hpp"

namespace dsinfer {

namespace detail {
class SubgraphRunner;  // dsinfer/detail/kernel_internals.hpp
struct ContextAccess;  // dsinfer/detail/kernel_internals.hpp: the executor's side of the contexts
/// One tag object per attribute struct type: KernelCreateContext::parsed_attributes' key.
template <class A>
inline constexpr char kAttributesTag = 0;
/// The attribute structs parsed for one node, shared by the contexts of its fallback chain.
struct ParsedAttributes {
    std::vector<std::pair<const void*, std::shared_ptr<const void>>> entries;
};
}  // namespace detail

/// Given to a KernelFactory once per node at load. Made by the executor (the constructor and
/// the virtuals below are its side); a factory reads it.
class KernelCreateContext {
public:
    KernelCreateContext(const Node& node, const Graph& graph, std::int64_t opset,
                        std::vector<const Tensor*> constant_inputs)
        : node_(node), graph_(graph), opset_(opset), constants_(std::move(constant_inputs)) {}
    virtual ~KernelCreateContext() = default;

    const Node& node() const noexcept { return node_; }
    const Graph& graph() const noexcept { return graph_; }
    /// The opset version the model imports for the node's domain.
    std::int64_t opset() const noexcept { return opset_; }
    int num_inputs() const noexcept { return static_cast<int>(node_.inputs.size()); }
    int num_outputs() const noexcept { return static_cast<int>(node_.outputs.size()); }
    bool has_input(int i) const noexcept {
        return i >= 0 && i < num_inputs() && node_.inputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    bool has_output(int i) const noexcept {
        return i >= 0 && i < num_outputs() && node_.outputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    /// The value of input i when it is a constant (initializer), else nullptr.
    const Tensor* constant_input(int i) const noexcept {
        return (i >= 0 && static_cast<std::size_t>(i) < constants_.size())
                   ? constants_[static_cast<std::size_t>(i)]
                   : nullptr;
    }
    /// Declared information about input i (dtype/shape may be unknown).
    const Value* input_value(int i) const noexcept {
        return has_input(i) ? &graph_.value(node_.inputs[static_cast<std::size_t>(i)]) : nullptr;
    }
    /// Compiles a subgraph attribute for execution (dsinfer's control-flow kernels). Only the
    /// executor's context implements it.
    virtual StatusOr<std::shared_ptr<detail::SubgraphRunner>> compile_subgraph(
        const std::shared_ptr<Graph>& /*subgraph*/) const {
        return Status::error(ErrorCode::unsupported, "subgraphs are not supported here");
    }
    /// Creates the kernel the next backend in priority order would use for this node (the one
    /// selected if this factory returned unsupported). A backend kernel that handles only some
    /// run-time shapes keeps it and delegates the rest to it (prepare and run). Only the
    /// executor's context implements it.
    virtual StatusOr<std::unique_ptr<class Kernel>> create_fallback() const {
        return Status::error(ErrorCode::unsupported, "no fallback kernel here");
    }
    /// True while create_fallback() is creating this kernel for a higher-priority kernel (which
    /// may never run it): such a kernel should defer expensive set-up, such as packing weights,
    /// to its first run.
    virtual bool creating_fallback() const noexcept { return false; }
    /// True when a lower-priority backend named `provider` ("cpu", "reference") has a kernel
    /// registered for this node's op (whether its factory would accept the node is its own
    /// call). A backend may leave a node to a named lower one that runs it better.
    virtual bool lower_provider(std::string_view /*provider*/) const noexcept { return false; }
    /// The device the engine runs on (cpu, or cuda:N for a GPU engine). A device backend's
    /// factory creates its kernel for this device.
    virtual Device device() const noexcept { return {}; }
    /// EngineOptions::precision is tf32: float32 GEMMs may use tf32 tensor cores.
    virtual bool allow_tf32() const noexcept { return false; }
    /// The width at which a CPU engine holds the float32 weights of its GEMMs and convolutions
    /// (EngineOptions::precision): f32, or f16 / bf16 (half-width packed weights, float32
    /// activations and accumulation). Kernels that cannot hold a weight so keep it in f32.
    virtual DType weight_precision() const noexcept { return DType::f32; }
    /// EngineOptions::algo_search is measure: a kernel with several algorithms for one shape
    /// (the CPU convolutions) times them on that shape at prepare and runs the fastest, instead
    /// of following its cost rule.
    virtual bool measure_algorithms() const noexcept { return false; }
    /// The engine's weight store (dsinfer/weight_store.hpp): where a kernel gets the forms of
    /// its constant inputs (packed, reordered, transformed) instead of making private copies,
    /// so that each form exists once and the engine can report, drop and rebuild it. Outside
    /// an engine: a new store of the kernel's own.
    virtual std::shared_ptr<WeightStore> weight_store() const {
        return std::make_shared<WeightStore>();
    }

    /// The node's attributes parsed into an `A` by `parse(*this)` (a StatusOr<A>), once per
    /// node: every level of a fallback chain (oneDNN -> cpu -> reference) that asks for the
    /// same `A` gets the struct the first one parsed, because the executor hands a kernel's
    /// fallback contexts this context's cache (share_parsed_attributes). A failed parse is not
    /// kept; it fails again the same way. The ops room's readers (src/ops/) wrap this, so
    /// each op's attributes are parsed by one function, once.
    template <class A, class Parse>
    StatusOr<std::shared_ptr<const A>> parsed_attributes(Parse&& parse) const {
        const void* tag = &detail::kAttributesTag<A>;
        if (!parsed_) parsed_ = std::make_shared<detail::ParsedAttributes>();
        for (const auto& [t, p] : parsed_->entries)
            if (t == tag) return std::static_pointer_cast<const A>(p);
        StatusOr<A> r = parse(*this);
        if (!r.is_ok()) return r.status();
        auto p = std::make_shared<const A>(std::move(r).value());
        parsed_->entries.emplace_back(tag, p);
        return p;
    }

protected:
    /// Makes this context (a fallback's) share `other`'s parsed attributes: the executor's
    /// side, for the contexts create_fallback makes.
    void share_parsed_attributes(const KernelCreateContext& other) const {
        if (!other.parsed_) other.parsed_ = std::make_shared<detail::ParsedAttributes>();
        parsed_ = other.parsed_;
    }

private:
    const Node& node_;
    const Graph& graph_;
    std::int64_t opset_;
    std::vector<const Tensor*> constants_;
    mutable std::shared_ptr<detail::ParsedAttributes> parsed_;
};

/// Given to Kernel::prepare.
class PrepareContext {
public:
    struct OutputSpec {
        DType dtype = DType::f32;
        Shape shape;
        bool set = false;
        bool dynamic = false;
        bool dtype_known = true;
    };

    PrepareContext(const Node& node, std::vector<Tensor> inputs, bool inferring,
                   bool probing = false)
        : node_(&node), inputs_(std::move(inputs)), num_outputs_(node.outputs.size()),
          inferring_(inferring || probing), probing_(probing) {
        // Up to kInlineOutputs output specs live in the context itself (no allocation).
        if (num_outputs_ > kInlineOutputs) heap_outputs_.resize(num_outputs_);
        outputs_ = num_outputs_ > kInlineOutputs ? heap_outputs_.data() : inline_outputs_.data();
    }
    PrepareContext(const PrepareContext&) = delete;
    PrepareContext& operator=(const PrepareContext&) = delete;

    const Node& node() const noexcept { return *node_; }
    int num_inputs() const noexcept { return static_cast<int>(inputs_.size()); }
    int num_outputs() const noexcept { return static_cast<int>(num_outputs_); }
    /// False for an omitted optional input (or i out of range).
    bool has_input(int i) const noexcept {
        return i >= 0 && i < num_inputs() && node_->inputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    /// False for an omitted optional output (or i out of range).
    bool has_output(int i) const noexcept {
        return i >= 0 && i < num_outputs() &&
               node_->outputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    /// Input i (dtype and shape always valid when has_input(i); a null Tensor otherwise).
    const Tensor& input(int i) const noexcept { return inputs_[static_cast<std::size_t>(i)]; }
    /// True when input i's values can be read (always at run time; at load only for
    /// constants). See "Load-time inference" above.
    bool has_data(int i) const noexcept {
        data_queried_ |= std::uint64_t{1} << (i >= 0 && i < 63 ? i : 63);
        return has_input(i) && (inputs_[static_cast<std::size_t>(i)].raw_data() != nullptr ||
                                inputs_[static_cast<std::size_t>(i)].num_elements() == 0);
    }
    /// True during load-time inference.
    bool inferring() const noexcept { return inferring_; }
    /// True when load-time inference substituted placeholder values for symbolic dims (to
    /// learn output dtypes and which output dims are static): do not build anything for
    /// these shapes.
    bool probing() const noexcept { return probing_; }
    /// True when these input shapes lie inside their shape bucket (a symbolic dim off its bucket
    /// edge) and the engine runs with EngineOptions::transient_shapes: a loop that sees each
    /// shape about once (a decoder's growing sequence). Build nothing whose cost is per shape
    /// and above the run's own (JIT-compiled code, repacked weights): take a path that serves
    /// any shape. Decide from the shapes alone (not from what was built before), so a shape
    /// always runs the same code.
    bool transient_shape() const noexcept { return transient_shape_; }

    void set_output(int i, DType dtype, const Shape& shape) noexcept {
        if (i < 0 || i >= num_outputs()) return;
        auto& o = outputs_[static_cast<std::size_t>(i)];
        o.dtype = dtype;
        o.shape = shape;
        o.set = true;
    }
    /// Output i's shape is known only in run (which must call RunContext::allocate_output
    /// or set_output_tensor). Pass the dtype when it is known (used by load-time inference).
    void set_output_dynamic(int i, std::optional<DType> dtype = std::nullopt) noexcept {
        if (i < 0 || i >= num_outputs()) return;
        auto& o = outputs_[static_cast<std::size_t>(i)];
        o.dtype = dtype.value_or(DType::f32);
        o.dtype_known = dtype.has_value();
        o.dynamic = true;
        o.set = false;
    }
    /// Bytes of scratch memory run() needs (64-byte aligned).
    void set_workspace(std::size_t bytes) noexcept { workspace_bytes_ = bytes; }

    /// Kernel state derived in prepare for these input shapes (a oneDNN primitive, a tiling),
    /// handed to run() as RunContext::prepared_state(). For a node whose prepare is stable
    /// (fixed by the input-shape class) the executor keeps it in the class's plan and calls
    /// prepare only once per plan. A kernel that sets a state must not pass its RunContext
    /// to another kernel that reads one (its fallback sees the same context).
    void set_state(std::shared_ptr<const void> state) noexcept { state_ = std::move(state); }

    /// What was set so far (a kernel that wraps another reads what the other's prepare set).
    const OutputSpec& output_spec(int i) const noexcept {
        return outputs_[static_cast<std::size_t>(i)];
    }
    std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
    /// What set_state set so far, or null (Kernel::algorithm reads the choice prepare made).
    const void* state() const noexcept { return state_.get(); }

private:
    // The executor's side (inputs handed back, which inputs' data prepare asked about, the
    // state, the transient flag): detail::ContextAccess.
    friend struct detail::ContextAccess;

    const Node* node_;
    std::vector<Tensor> inputs_;
    static constexpr std::size_t kInlineOutputs = 4;
    std::size_t num_outputs_ = 0;
    std::array<OutputSpec, kInlineOutputs> inline_outputs_{};
    std::vector<OutputSpec> heap_outputs_;
    OutputSpec* outputs_ = nullptr;
    std::shared_ptr<const void> state_;
    std::size_t workspace_bytes_ = 0;
    mutable std::uint64_t data_queried_ = 0;
    bool inferring_ = false;
    bool probing_ = false;
    bool transient_shape_ = false;
};

/// Cancellation and deadline for a run; checked by long-running kernels (Loop, Scan).
class ValueObserver;  // dsinfer/engine.hpp
struct KvCacheStep;   // a Generator step's paged KV cache (dsinfer/generate.hpp)

struct RunControl {
    const std::atomic<bool>* cancelled = nullptr;
    /// Upper bound on iterations of one Loop/Scan node (ModelLimits::max_loop_iterations).
    std::int64_t max_loop_iterations = std::int64_t{1} << 40;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    /// When set, the executor adds each top-level node's wall time (prepare + allocation + run,
    /// milliseconds) at its index; the vector is sized by the executor.
    std::vector<double>* node_ms = nullptr;
    /// RunOptions::observer: shown each top-level host node's row-major outputs.
    ValueObserver* observer = nullptr;
    /// RunOptions::kv_cache: the paged KV cache a PagedAttention node reads and writes.
    const KvCacheStep* kv_cache = nullptr;

    Status check() const noexcept {
        if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed))
            return Status(ErrorCode::cancelled, "run cancelled");
        if (deadline != std::chrono::steady_clock::time_point::max() &&
            std::chrono::steady_clock::now() > deadline)
            return Status(ErrorCode::deadline_exceeded, "run deadline exceeded");
        return Status::ok();
    }
};

/// Given to Kernel::run. Views are valid for the duration of run().
class RunContext {
public:
    /// Owns copies of the views (for kernels that call another kernel on modified views).
    RunContext(const Node& node, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
               void* workspace, std::size_t workspace_bytes, Allocator& allocator,
               const RunControl& control)
        : node_(&node), owned_inputs_(std::move(inputs)), owned_outputs_(std::move(outputs)),
          owned_dynamic_(owned_outputs_.size()), inputs_(owned_inputs_), outputs_(owned_outputs_),
          dynamic_(owned_dynamic_), workspace_(workspace), workspace_bytes_(workspace_bytes),
          allocator_(&allocator), control_(&control) {}
    /// Borrows the caller's storage (the executor's per-run scratch: no allocation per node).
    /// `dynamic` has one null Tensor per output; it receives the dynamic outputs.
    RunContext(const Node& node, std::span<const TensorView> inputs, std::span<TensorView> outputs,
               std::span<Tensor> dynamic, void* workspace, std::size_t workspace_bytes,
               Allocator& allocator, const RunControl& control) noexcept
        : node_(&node), inputs_(inputs), outputs_(outputs), dynamic_(dynamic),
          workspace_(workspace), workspace_bytes_(workspace_bytes), allocator_(&allocator),
          control_(&control) {}
    RunContext(const RunContext&) = delete;
    RunContext& operator=(const RunContext&) = delete;

    const Node& node() const noexcept { return *node_; }
    int num_inputs() const noexcept { return static_cast<int>(inputs_.size()); }
    int num_outputs() const noexcept { return static_cast<int>(outputs_.size()); }
    bool has_input(int i) const noexcept {
        return i >= 0 && i < num_inputs() && node_->inputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    bool has_output(int i) const noexcept {
        return i >= 0 && i < num_outputs() &&
               node_->outputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    const TensorView& input(int i) const noexcept { return inputs_[static_cast<std::size_t>(i)]; }
    const TensorView& output(int i) const noexcept {
        return outputs_[static_cast<std::size_t>(i)];
    }
    void* workspace() const noexcept { return workspace_; }
    std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
    const RunControl& control() const noexcept { return *control_; }
    /// For kernels of a device backend: the run's stream (a cudaStream_t for CUDA), on which
    /// the kernel enqueues its work; run() returns without waiting for it. Null on the CPU.
    void* stream() const noexcept { return stream_; }
    /// For device kernels that declare Kernel::reports_device_errors(): four int64 slots in
    /// device memory for this node (null otherwise). A kernel that finds an invalid index on
    /// the device writes, once (atomicCAS of slot 0 from 0 to 1), the value into slot 1 and
    /// the valid extent into slot 2; when the run's stream has completed, the executor fails
    /// the run with invalid_argument naming the node, the value and the range (its outputs
    /// are discarded), so a bad index is never a silent wrong answer.
    std::int64_t* device_error_slots() const noexcept { return device_error_; }
    /// What this kernel's prepare passed to PrepareContext::set_state for these shapes (null
    /// when it set none).
    const void* prepared_state() const noexcept { return prepared_state_; }

    /// For outputs declared dynamic in prepare: allocates output i. On success output(i) is
    /// the new tensor's view.
    Status allocate_output(int i, DType dtype, const Shape& shape) noexcept {
        if (i < 0 || i >= num_outputs())
            return Status(ErrorCode::internal, "allocate_output: index out of range");
        try {
            auto t = Tensor::allocate(dtype, shape, *allocator_);
            if (!t.is_ok()) return t.status();
            dynamic_[static_cast<std::size_t>(i)] = std::move(t).value();
            outputs_[static_cast<std::size_t>(i)] = dynamic_[static_cast<std::size_t>(i)].view();
            return Status::ok();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory allocating an output");
        }
    }
    /// Sets a dynamic output to an existing tensor (shares its buffer; e.g. a subgraph result).
    Status set_output_tensor(int i, Tensor t) noexcept {
        if (i < 0 || i >= num_outputs())
            return Status(ErrorCode::internal, "set_output_tensor: index out of range");
        outputs_[static_cast<std::size_t>(i)] = t.view();
        dynamic_[static_cast<std::size_t>(i)] = std::move(t);
        return Status::ok();
    }

    /// The executing frame, passed to detail::SubgraphRunner::run so bodies can read outer
    /// names (dsinfer's control-flow kernels; a kernel that runs another on a context of its
    /// own hands it on through detail::ContextAccess::set_frame).
    const void* frame() const noexcept { return frame_; }

private:
    // The executor's side (frame, stream, prepared state, device error slots, dynamic
    // outputs): detail::ContextAccess.
    friend struct detail::ContextAccess;

    const Node* node_;
    std::vector<TensorView> owned_inputs_;
    std::vector<TensorView> owned_outputs_;
    std::vector<Tensor> owned_dynamic_;
    std::span<const TensorView> inputs_;
    std::span<TensorView> outputs_;
    std::span<Tensor> dynamic_;
    const void* prepared_state_ = nullptr;
    void* workspace_;
    std::size_t workspace_bytes_;
    Allocator* allocator_;
    const RunControl* control_;
    const void* frame_ = nullptr;
    void* stream_ = nullptr;
    std::int64_t* device_error_ = nullptr;
};

/// Layout negotiation. Tensors between nodes are row-major (ONNX order) unless the two sides
/// agree on a backend's blocked layout (e.g. oneDNN's nChw8c): a blocked tensor keeps its
/// logical shape and byte size (the backend only offers it when that holds); only the kernels
/// at both ends know the element order. The executor (after shape inference) marks a value
/// blocked only when its producer offers a blocked output, every consumer accepts a blocked
/// input, it is no graph input/output/initializer, and no subgraph reads it; "uniform" kernels
/// (elementwise, normalization, pooling) need all their offered slots to agree.
struct LayoutSupport {
    int layout = 0;                       ///< backend layout id; 0 = none offered
    std::uint64_t inputs = 0;             ///< bit i: input i may be blocked
    std::uint64_t outputs = 0;            ///< bit j: output j may be blocked
    bool uniform = false;                 ///< offered slots must all be blocked or all plain
};

class Kernel {
public:
    virtual ~Kernel() = default;
    /// Output dtypes/shapes and workspace for the given inputs. See the file comment.
    [[nodiscard]] virtual Status prepare(PrepareContext& ctx) const = 0;
    /// Computes outputs. Never throws, never allocates (except dynamic outputs).
    [[nodiscard]] virtual Status run(RunContext& ctx) const noexcept = 0;

    /// Which inputs/outputs could use a backend layout, given the node's values after shape
    /// inference. Default: none (row-major only).
    virtual LayoutSupport layout_support(const Graph& /*graph*/, const Node& /*node*/) const {
        return {};
    }
    /// Called once at compile, before any run, with the slots that were made blocked (a
    /// subset of what layout_support offered). Default: nothing to do.
    [[nodiscard]] virtual Status use_layouts(std::uint64_t /*blocked_inputs*/,
                                             std::uint64_t /*blocked_outputs*/) {
        return Status::ok();
    }
    /// Bit i set: this kernel copied what it needs of constant input i at creation (e.g. packed
    /// weights) and, from then on, reads only that input's dtype and shape (at prepare and run).
    /// When every reader of an initializer says so, the executor frees its data after compile
    /// (the graph keeps its dtype and shape) and the weight store lets go of its stored form, so
    /// that packed weights are not held twice. A kernel that needs the stored form later holds
    /// WeightStore::constant() (then it stays resident, and reported).
    virtual std::uint64_t released_constant_inputs() const noexcept { return 0; }
    /// Device kernels only. Bit i set: input i must be a host tensor (its values are read in
    /// prepare or on the host in run, e.g. Reshape's shape); the executor copies it to the host
    /// when it was produced on the device. Every other input of a device kernel is handed over
    /// as a device tensor (in prepare as a meta tensor: dtype and shape, no data).
    virtual std::uint64_t host_inputs() const noexcept { return 0; }
    /// Device kernels only: run() may report invalid data found on the device through
    /// RunContext::device_error_slots().
    virtual bool reports_device_errors() const noexcept { return false; }
    /// The algorithm run() takes for the shapes `ctx` holds, as InferenceEngine::describe()
    /// names it: "<who>:<what>", e.g. "onednn:jit:avx512_core convolution" (a oneDNN
    /// primitive's implementation), "dsinfer:winograd-f4x4-avx512", "dsinfer:sgemm-avx2". `ctx`
    /// is the context this kernel's prepare() has just filled (inputs, output specs, workspace,
    /// state()): the executor asks once per input-shape class, on the run that records the
    /// class (and never from run(), which must not build strings). A kernel that hands the
    /// class to another kernel (its fallback) names that kernel's algorithm. Empty (the
    /// default): the name of the provider the kernel was registered with ("onednn", "cpu",
    /// "reference", an application's). std::bad_alloc fails the run (resource_exhausted); any
    /// other exception leaves the provider's name.
    virtual std::string algorithm(const PrepareContext& ctx) const {
        (void)ctx;
        return {};
    }
};

}  // namespace dsinfer

#include "dsinfer/detail/kernel_internals.hpp"  // IWYU pragma: export
