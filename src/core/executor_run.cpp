// The executor's run loop (CompiledGraph::execute): run scratch, plan lookup, arenas, staging
// between host and device, prepare (or its kept result) and run per node, outputs.
#include "core/executor.hpp"
#include "core/executor_internal.hpp"
#include "core/memory_planner.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/engine.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <map>
#include <new>
#include <optional>
#include <span>

namespace dsinfer::detail {

namespace {

/// Allocates the arena handle's control block in RunScratch::arena_ctrl when free (else from
/// the heap: a handle outliving its run, which the executor never lets happen, stays safe).
template <class T>
struct ArenaCtrlAllocator {
    using value_type = T;
    unsigned char* storage;
    bool* used;
    ArenaCtrlAllocator(unsigned char* s, bool* u) noexcept : storage(s), used(u) {}
    template <class U>
    ArenaCtrlAllocator(const ArenaCtrlAllocator<U>& o) noexcept
        : storage(o.storage), used(o.used) {}
    T* allocate(std::size_t n) {
        if (!*used && n * sizeof(T) <= 192 && alignof(T) <= alignof(std::max_align_t)) {
            *used = true;
            return reinterpret_cast<T*>(storage);
        }
        return static_cast<T*>(::operator new(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t) noexcept {
        if (reinterpret_cast<unsigned char*>(p) == storage) {
            *used = false;
            return;
        }
        ::operator delete(p);
    }
    template <class U>
    bool operator==(const ArenaCtrlAllocator<U>& o) const noexcept { return storage == o.storage; }
};

/// A tensor at `at` in a run's host arena. It does not own the arena: the run holds the arena
/// (RunMemory::arena) past the last use of its tensors, and none leaves the run (graph outputs
/// and values subgraphs read are never planned; a dynamic output or graph output found in the
/// arena is copied out), so placing a value costs no reference count.
Tensor arena_tensor(unsigned char* at, DType dtype, const Shape& shape, Device device) {
    return Tensor::wrap(at, dtype, shape, device,
                        std::shared_ptr<void>(std::shared_ptr<void>(), at));
}

/// Where each node's items (inputs, outputs: `count`) start when all nodes' are stored one
/// after the other; the last entry is their total.
template <class Count>
void node_offsets(const Graph& g, std::vector<std::uint32_t>& begin, Count count) {
    begin.assign(g.nodes.size() + 1, 0);
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
        begin[ni + 1] = begin[ni] + static_cast<std::uint32_t>(count(g.nodes[ni]));
}

/// Below these a node runs faster on one thread than on two (CompileOptions::
/// serial_small_nodes): a parallel region costs ~5 us on an idle machine, the ~1 MFLOP that two
/// AVX-512 cores do in that time (the oneDNN matmul's rule of thumb, onednn_matmul.cpp), and a
/// whole scheduler time slice when another process holds the second core (the digits model at
/// batch 64 on 2 threads, one core busy: p99 36 ms against p50 0.02 ms).
constexpr std::int64_t kSerialMacs = std::int64_t{1} << 19;
constexpr std::int64_t kSerialElements = std::int64_t{1} << 15;

std::int64_t elements_of(const TensorView& v) noexcept {
    return v.raw == nullptr && v.shape.num_dims() == 0 ? 0 : v.shape.num_elements();
}

}  // namespace

/// How node n's work is estimated (CompiledNode::work_kind): kept at compile, so a run compares
/// numbers only.
std::uint8_t work_kind_of(const Node& n) noexcept {
    const std::string& op = n.op_type;
    if (op == "If" || op == "Loop" || op == "Scan") return kWorkNever;
    if (op.find("Conv") != std::string::npos)
        return op.rfind("QLinear", 0) == 0 ? kWorkQLinearConv : kWorkConv;
    if (op == "QLinearMatMul") return kWorkQLinearMatMul;
    if (op.find("MatMul") != std::string::npos || op.find("Gemm") != std::string::npos)
        return kWorkProduct;
    if (op == "MultiHeadAttention" || op == "Attention") return kWorkAttention;
    return kWorkElements;
}

namespace {

/// Whether a node of this work kind, on inputs of these shapes, is too small to gain from
/// threads: its multiply-adds (the product and convolution families, attention) below
/// kSerialMacs, and for every node all its inputs (weights included) below kSerialElements
/// elements. Control flow (whose bodies decide per node) never is. A function of the node and
/// its input shapes, so prepare and run agree.
bool small_node(std::uint8_t kind, const TensorView* in, std::size_t num_in) noexcept {
    if (kind == kWorkNever || num_in == 0) return false;
    std::int64_t total = 0;
    for (std::size_t k = 0; k < num_in; ++k) total += elements_of(in[k]);
    if (total >= kSerialElements) return false;
    const auto dim = [](const TensorView& v, int i) -> std::int64_t {
        const int r = v.shape.num_dims();
        return r == 0 ? 1 : v.shape[i < 0 ? r + i : i];
    };
    std::int64_t macs = 0;
    if (kind == kWorkConv || kind == kWorkQLinearConv) {
        // MACs ~ W's elements x X's pixels (output pixels at stride 1).
        const std::size_t w = kind == kWorkQLinearConv ? 3 : 1;
        if (w < num_in && in[0].shape.num_dims() >= 2 && dim(in[0], 1) > 0)
            macs = elements_of(in[w]) * (elements_of(in[0]) / dim(in[0], 1));
    } else if (kind == kWorkProduct || kind == kWorkQLinearMatMul) {
        // MACs = A's elements x B's other dimension (QLinearMatMul's B is input 3).
        const std::size_t b = kind == kWorkQLinearMatMul ? 3 : 1;
        if (b < num_in && in[b].shape.num_dims() >= 1) {
            const std::int64_t kb = dim(in[b], 0), nb = dim(in[b], -1);
            macs = elements_of(in[0]) * std::max(kb, nb);
        }
    } else if (kind == kWorkAttention) {
        // Q·Kᵀ and P·V: 2 x B x S x S x H (Q [B, S, H]).
        if (in[0].shape.num_dims() >= 2) macs = 2 * elements_of(in[0]) * dim(in[0], 1);
    }
    return macs < kSerialMacs;
}

/// Calls node n's prepare on `inputs` (device tensors as meta tensors: dtype and shape; the
/// vector `ins` lends its capacity); its output specs go to `specs`, the state it set to
/// `state`, its workspace bytes to `wb`, and, when `algorithm` is given (a run that records its
/// shape class), the kernel's Kernel::algorithm for the prepared context. An exception from an
/// application's kernel is a Status (the caller names the node).
[[gnu::noinline]] Status prepare_node(const Node& n, const Kernel& kernel, bool transient,
                                      std::span<const Tensor* const> inputs,
                                      std::vector<Tensor>& ins,
                                      std::vector<PrepareContext::OutputSpec>& specs,
                                      std::shared_ptr<const void>& state, std::size_t& wb,
                                      std::string* algorithm = nullptr) {
    ins.clear();
    for (const Tensor* t : inputs) {
        if (!t->is_null() && t->device().kind != DeviceKind::cpu)
            ins.push_back(Tensor::wrap(nullptr, t->dtype(), t->shape(), t->device(),
                                       std::make_shared<char>(0)));
        else
            ins.push_back(*t);
    }
    PrepareContext ctx(n, std::move(ins), /*inferring=*/false);
    ContextAccess::set_transient_shape(ctx, transient);
    Status st = guarded_kernel_call("prepare", [&] { return kernel.prepare(ctx); });
    if (st.is_ok() && algorithm != nullptr) {
        // For describe(): out of memory fails the run like any allocation of it; a kernel that
        // cannot say otherwise leaves the provider's name.
        try {
            *algorithm = kernel.algorithm(ctx);
        } catch (const std::bad_alloc&) {
            st = Status(ErrorCode::resource_exhausted, "out of memory naming the kernel's algorithm");
        } catch (...) {
            algorithm->clear();
        }
    }
    ins = std::move(ContextAccess::inputs(ctx));  // its capacity serves the next node
    ins.clear();
    if (!st.is_ok()) return st;
    specs.resize(n.outputs.size());
    for (std::size_t i = 0; i < n.outputs.size(); ++i)
        specs[i] = ctx.output_spec(static_cast<int>(i));
    state = ContextAccess::state(ctx);
    wb = ctx.workspace_bytes();
    return Status::ok();
}

}  // namespace

CompiledGraph::~CompiledGraph() = default;

std::unique_ptr<CompiledGraph::RunScratch> CompiledGraph::acquire_scratch() const {
    {
        std::lock_guard<std::mutex> lock(scratch_.mu);
        if (!scratch_.free.empty()) {
            std::unique_ptr<RunScratch> s = std::move(scratch_.free.back());
            scratch_.free.pop_back();
            return s;
        }
    }
    auto s = std::make_unique<RunScratch>();
    {
        // Room in the free list for every scratch made, so that giving one back never
        // allocates (release_scratch is noexcept and must not lose it).
        std::lock_guard<std::mutex> lock(scratch_.mu);
        scratch_.free.reserve(++scratch_.created);
    }
    const Graph& g = *graph_;
    s->frame.graph = this;
    s->frame.values.resize(g.values.size());
    // What a run sets: the graph's inputs, the captured outer values and the nodes' outputs
    // (initializers aside); what a completed run leaves set: those no node releases.
    std::vector<char> set(g.values.size(), 0);
    for (ValueId id : g.inputs) set[static_cast<std::size_t>(id)] = 1;
    for (const Capture& c : captures_) set[static_cast<std::size_t>(c.id)] = 1;
    for (const Node& n : g.nodes)
        for (ValueId id : n.outputs)
            if (id != kNoValue) set[static_cast<std::size_t>(id)] = 1;
    for (const CompiledNode& cn : nodes_)
        for (ValueId id : cn.release_after)
            if (set[static_cast<std::size_t>(id)] != 0) set[static_cast<std::size_t>(id)] = 2;
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        if (g.values[v].initializer) {
            s->frame.values[v] = *g.values[v].initializer;
            continue;
        }
        if (set[v] != 0) s->run_values.push_back(static_cast<ValueId>(v));
        if (set[v] == 1) s->kept_values.push_back(static_cast<ValueId>(v));
    }
    return s;
}

void CompiledGraph::clear_run_values(RunScratch& s, bool completed) const noexcept {
    // Drop the run's tensors (initializer handles stay: they are the same every run; a graph
    // input with an initializer gets its initializer back). A completed run released every
    // value some node reads last.
    const Graph& g = *graph_;
    Frame& f = s.frame;
    for (const ValueId id : completed ? s.kept_values : s.run_values)
        if (Tensor& t = f.values[static_cast<std::size_t>(id)]; !t.is_null()) t = Tensor();
    for (ValueId id : g.inputs)
        if (const auto& init = g.values[static_cast<std::size_t>(id)].initializer)
            f.values[static_cast<std::size_t>(id)] = *init;
    f.other.clear();
    f.parent = nullptr;
    NodeScratch& n = s.nodes;
    n.node_inputs.clear();
    n.prepare_inputs.clear();
    for (Tensor& t : n.dynamic)  // null but after a failed node (their slots are kept)
        if (!t.is_null()) t = Tensor();
    n.state.reset();
    n.workspace = Tensor();
}

void CompiledGraph::release_scratch(std::unique_ptr<RunScratch> s) const noexcept {
    // The run cleared its frame (execute's RunValuesGuard) before giving the scratch back.
    std::lock_guard<std::mutex> lock(scratch_.mu);
    scratch_.free.push_back(std::move(s));  // capacity reserved in acquire_scratch
}

StatusOr<Tensor> CompiledGraph::allocate_on(DeviceScope* dev, bool device, DType dtype,
                                            const Shape& shape) const {
    if (!device || dev == nullptr) {
        auto t = Tensor::allocate(dtype, shape, *allocator_);
        if (!t.is_ok() && pool_ != nullptr)
            return Status(t.status().code(), t.status().message() + pool_->limit_note());
        return t;
    }
    DSINFER_CHECK(dtype != DType::string, ErrorCode::unsupported,
                  "string tensors cannot live on the device");
    return Tensor::allocate(dtype, shape, *dev);
}

StatusOr<Tensor> CompiledGraph::stage_input(Frame& frame, DeviceScope* dev, std::size_t ni,
                                            std::size_t k) const {
    const Node& n = graph_->nodes[ni];
    const CompiledNode& cn = nodes_[ni];
    const auto v = static_cast<std::size_t>(n.inputs[k]);
    const Tensor& t = frame.values[v];
    if (dev == nullptr) return t;
    const bool want_device = cn.on_device && !(k < 64 && ((cn.host_inputs >> k) & 1u) != 0);
    const bool is_device = t.device().kind != DeviceKind::cpu;
    if (want_device == is_device) return t;
    if (want_device && !device_constants_[v].is_null()) return device_constants_[v];
    if (!frame.other[v].is_null()) return frame.other[v];
    // Shape and Size read only the dims: no copy.
    if (!want_device && (n.op_type == "Shape" || n.op_type == "Size"))
        return Tensor::wrap(nullptr, t.dtype(), t.shape(), Device{}, std::make_shared<char>(0));
    DSINFER_CHECK(t.dtype() != DType::string, ErrorCode::unsupported, "input '",
                  graph_->value(n.inputs[k]).name, "' is a string tensor; it cannot be copied to the device");
    DSINFER_ASSIGN_OR_RETURN(Tensor c, allocate_on(dev, want_device, t.dtype(), t.shape()));
    const std::size_t bytes = t.num_bytes();
    if (dev->retain) {
        // Capturing a CUDA graph: only shape-derived host values reach here (decide_graphable);
        // they are fixed for the shape class, so they are copied once, outside the graph.
        if (!want_device)
            return Status::error(ErrorCode::internal, "a CUDA graph cannot capture a copy to the host");
        DSINFER_ASSIGN_OR_RETURN(void* side, dev->rt->acquire_stream());
        Status st = dev->rt->copy_to_device(c.raw_data(), t.raw_data(), bytes, side);
        if (st.is_ok()) st = dev->rt->synchronize(side);
        dev->rt->release_stream(side);
        DSINFER_RETURN_IF_ERROR(st);
        transfers_.h2d.fetch_add(bytes, std::memory_order_relaxed);
        transfers_.copies.fetch_add(1, std::memory_order_relaxed);
        frame.other[v] = c;
        return c;
    }
    if (want_device) {
        // Through a pinned block: the copy is asynchronous and the host moves on.
        const void* src = t.raw_data();
        if (void* pin = dev->staging(bytes)) {
            std::memcpy(pin, src, bytes);
            src = pin;
        }
        DSINFER_RETURN_IF_ERROR(dev->rt->copy_to_device(c.raw_data(), src, bytes, dev->stream));
        transfers_.h2d.fetch_add(bytes, std::memory_order_relaxed);
    } else {
        DSINFER_RETURN_IF_ERROR(dev->rt->copy_to_host(c.raw_data(), t.raw_data(), bytes, dev->stream));
        DSINFER_RETURN_IF_ERROR(dev->rt->synchronize(dev->stream));
        transfers_.d2h.fetch_add(bytes, std::memory_order_relaxed);
    }
    transfers_.copies.fetch_add(1, std::memory_order_relaxed);
    frame.other[v] = c;
    return c;
}

Status CompiledGraph::check_device_errors(DeviceScope* dev, const std::int64_t* slots) const {
    if (dev == nullptr || slots == nullptr) return Status::ok();
    const std::size_t n = graph_->nodes.size();
    std::vector<std::int64_t> host(4 * n, 0);
    DSINFER_RETURN_IF_ERROR(dev->rt->copy_to_host(host.data(), slots, host.size() * sizeof(std::int64_t), dev->stream));
    DSINFER_RETURN_IF_ERROR(dev->rt->synchronize(dev->stream));
    for (std::size_t ni = 0; ni < n; ++ni) {
        if (host[4 * ni] == 0) continue;
        const std::int64_t value = host[4 * ni + 1], extent = host[4 * ni + 2];
        return Status::error(ErrorCode::invalid_argument, node_context(graph_->nodes[ni]),
                             "index ", value, " is outside [", -extent, ", ", extent - 1,
                             "] (found on the device; the run's outputs were discarded)");
    }
    return Status::ok();
}

Status CompiledGraph::output_tensor(RunMemory& mem, DeviceScope* dev, std::size_t ni, ValueId id,
                                    DType dtype, const Shape& shape,
                                    std::span<const Tensor* const> inputs, Tensor& out) const {
    const auto v = static_cast<std::size_t>(id);
    const bool on_dev = nodes_[ni].on_device && dev != nullptr;
    auto allocate = [&]() -> Status {
        DSINFER_ASSIGN_OR_RETURN(out, allocate_on(dev, on_dev, dtype, shape));
        return Status::ok();
    };
    if (!plannable_[v] || dtype == DType::string) return allocate();
    const std::size_t bytes = tensor_bytes(dtype, shape);
    const Node& n = graph_->nodes[ni];
    if (mem.rec != nullptr && bytes > 0) {
        mem.rec->value_bytes[v] = bytes;
        mem.rec->value_device[v] = on_dev ? 1 : 0;
        note_inplace(*mem.rec, ni, id, dtype, shape, inputs);
    }
    unsigned char* base = on_dev ? mem.device_base : mem.base;
    if (mem.plan != nullptr && bytes > 0 && base != nullptr) {
        const ExecutionPlan& p = *mem.plan;
        if (p.value_offset[v] >= 0 && bytes <= p.value_bytes[v] &&
            p.value_on_device[v] == (on_dev ? 1 : 0)) {
            unsigned char* at = base + p.value_offset[v];
            // Sharing the block of an input (planned in place) is legal only for the input the
            // kernel may overwrite: the one with this dtype and shape (shapes can change with
            // data). Anything else would alias live memory: take a block of its own.
            bool ok = true;
            if (const ValueId in = p.inplace_input[v]; in != kNoValue) {
                bool aliased = false;
                for (std::size_t k = 0; k < inputs.size(); ++k)
                    aliased = aliased || (n.inputs[k] == in && inputs[k]->raw_data() == at);
                const int k0 = inplace_slot(inplace_op_[ni], inputs, dtype, shape);
                ok = !aliased || (k0 >= 0 && n.inputs[static_cast<std::size_t>(k0)] == in);
            }
            if (ok) {
                out = on_dev ? Tensor::wrap(at, dtype, shape, dev->device(), mem.device_arena)
                             : arena_tensor(at, dtype, shape, allocator_->device());
                return Status::ok();
            }
        }
    }
    return allocate();
}

void CompiledGraph::build_program(NodeScratch& s, const RunMemory& mem) const noexcept {
    const Graph& g = *graph_;
    NodeScratch::Program& p = s.program;
    const ExecutionPlan& plan = *mem.plan;
    const PreparedShape& ps = *mem.prepared;
    const Device host = allocator_->device();
    // The storage was sized when the scratch first ran (run_nodes): nothing here allocates.
    std::copy(s.node_views.begin(), s.node_views.end(), p.in_views.begin());
    std::fill(p.out_tensor.begin(), p.out_tensor.end(), 0);
    std::fill(p.value_out.begin(), p.value_out.end(), UINT32_MAX);
    std::fill(p.has_tensor.begin(), p.has_tensor.end(), 1);
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        NodeScratch::Program::Step& st = p.steps[ni];
        st = NodeScratch::Program::Step{};
        st.num_in = static_cast<std::uint32_t>(n.inputs.size());
        st.num_out = static_cast<std::uint32_t>(n.outputs.size());
        st.views = s.views_begin[ni];
        st.outs = p.outs_begin[ni];
        if (!cn.stable_prepare || cn.on_device) continue;
        // Fixed: every output has a slot of its own in the arena and fits it, and so does the
        // workspace.
        const PrepareContext::OutputSpec* specs = ps.output_specs.data() + cn.spec_begin;
        bool fixed = true;
        for (std::size_t i = 0; i < n.outputs.size() && fixed; ++i) {
            const ValueId id = n.outputs[i];
            p.out_views[st.outs + i] = TensorView{};
            if (id == kNoValue) continue;
            const auto v = static_cast<std::size_t>(id);
            const PrepareContext::OutputSpec& spec = specs[i];
            fixed = spec.set && !spec.dynamic && spec.dtype != DType::string &&
                    plan.value_offset[v] >= 0 && plan.inplace_input[v] == kNoValue &&
                    plan.value_on_device[v] == 0;
            if (!fixed) break;
            const std::size_t bytes = tensor_bytes(spec.dtype, spec.shape);
            fixed = bytes > 0 && bytes <= plan.value_bytes[v];
            if (fixed)
                p.out_views[st.outs + i] =
                    TensorView{mem.base + plan.value_offset[v], spec.dtype, spec.shape, host};
        }
        const std::size_t wb = ps.workspace_bytes[ni];
        if (fixed && wb > 0) {
            fixed = plan.workspace_offset[ni] >= 0 && wb <= plan.workspace_bytes[ni];
            if (fixed) st.workspace = mem.base + plan.workspace_offset[ni];
        }
        if (!fixed) continue;
        st.fixed = true;
        st.workspace_bytes = wb;
        st.state = ps.node_states[ni].get();
        for (std::size_t i = 0; i < n.outputs.size(); ++i) {
            if (n.outputs[i] == kNoValue) continue;
            const auto v = static_cast<std::size_t>(n.outputs[i]);
            p.value_out[v] = st.outs + static_cast<std::uint32_t>(i);
            p.has_tensor[v] = 0;
        }
    }
    // Inputs: a fixed node reads another fixed node's output from its view here, anything
    // else from the frame; any other node reading a fixed node's output needs its tensor.
    p.reads.clear();
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        NodeScratch::Program::Step& st = p.steps[ni];
        st.reads = static_cast<std::uint32_t>(p.reads.size());
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            const ValueId id = n.inputs[k];
            if (id == kNoValue) continue;
            const auto v = static_cast<std::size_t>(id);
            const std::uint32_t slot = p.value_out[v];
            if (!st.fixed) {
                if (slot != UINT32_MAX && p.out_tensor[slot] == 0) {
                    p.out_tensor[slot] = 1;
                    p.has_tensor[v] = 1;
                }
                continue;
            }
            if (slot != UINT32_MAX) {
                p.in_views[st.views + k] = p.out_views[slot];
            } else if (s.view_fixed[st.views + k] == 0) {
                p.reads.emplace_back(st.views + static_cast<std::uint32_t>(k), id);
            }
        }
        st.reads_end = static_cast<std::uint32_t>(p.reads.size());
    }
    // What a fixed node releases: the values it reads last that hold a frame tensor.
    p.drops.clear();
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        NodeScratch::Program::Step& st = p.steps[ni];
        st.drops = static_cast<std::uint32_t>(p.drops.size());
        if (st.fixed) {
            for (std::uint32_t i = 0; i < st.num_out; ++i)
                st.out_tensor = st.out_tensor || p.out_tensor[st.outs + i] != 0;
            for (ValueId id : nodes_[ni].release_after)
                if (p.has_tensor[static_cast<std::size_t>(id)] != 0) p.drops.push_back(id);
        }
        st.drops_end = static_cast<std::uint32_t>(p.drops.size());
    }
    p.plan = plan.serial;
    p.prepared = ps.serial;
    p.base = mem.base;
    p.valid = true;
}

Status CompiledGraph::run_nodes(Frame& frame, RunMemory& mem, DeviceScope* dev,
                                NodeScratch& scratch, const RunControl& control,
                                std::int64_t* error_slots) const {
    const Graph& g = *graph_;
    std::vector<Tensor>& node_inputs = scratch.node_inputs;
    std::vector<const Tensor*>& inputs = scratch.inputs;
    std::vector<TensorView>& in_views = scratch.in_views;
    std::vector<TensorView>& out_views = scratch.out_views;
    std::vector<Tensor>& dynamic = scratch.dynamic;
    // Profiling covers the top-level graph only (subgraphs run inside their node's time).
    std::vector<double>* node_ms =
        frame.parent == nullptr && (dev == nullptr || !dev->retain) ? control.node_ms : nullptr;
    if (node_ms != nullptr) node_ms->resize(g.nodes.size(), 0.0);
    const testing::KernelRunHook hook = testing::kernel_run_hook.load(std::memory_order_relaxed);
    const Device host = allocator_->device();
    if (dev == nullptr && !scratch.views_ready) {
        // The views of the constants the nodes read are the same every run of this frame (its
        // initializer handles stay); graph inputs with an initializer are not constants.
        std::vector<char> is_input(g.values.size(), 0);
        for (ValueId id : g.inputs) is_input[static_cast<std::size_t>(id)] = 1;
        node_offsets(g, scratch.views_begin, [](const Node& n) { return n.inputs.size(); });
        scratch.node_views.assign(scratch.views_begin.back(), TensorView{});
        scratch.view_fixed.assign(scratch.views_begin.back(), 0);
        for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
            const Node& n = g.nodes[ni];
            for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                const ValueId id = n.inputs[k];
                const std::size_t at = scratch.views_begin[ni] + k;
                if (id == kNoValue) {
                    scratch.view_fixed[at] = 1;
                    continue;
                }
                const auto v = static_cast<std::size_t>(id);
                if (!g.values[v].initializer || is_input[v] != 0 || frame.values[v].is_null())
                    continue;
                scratch.node_views[at] = frame.values[v].view();
                scratch.view_fixed[at] = 1;
            }
        }
        if (plan_memory_) {
            // The planned-run program's storage, once (build_program allocates nothing).
            NodeScratch::Program& p = scratch.program;
            p.steps.assign(g.nodes.size(), NodeScratch::Program::Step{});
            p.in_views.assign(scratch.node_views.size(), TensorView{});
            p.reads.reserve(scratch.node_views.size());
            std::size_t releases = 0;
            for (const CompiledNode& cn : nodes_) releases += cn.release_after.size();
            p.drops.reserve(releases);
            node_offsets(g, p.outs_begin, [](const Node& n) { return n.outputs.size(); });
            p.out_views.assign(p.outs_begin.back(), TensorView{});
            p.out_tensor.assign(p.outs_begin.back(), 0);
            p.value_out.assign(g.values.size(), UINT32_MAX);
            p.has_tensor.assign(g.values.size(), 1);
            std::size_t widest = 0;
            for (const Node& n : g.nodes) widest = std::max(widest, n.outputs.size());
            if (out_views.size() < widest) out_views.resize(widest);
            if (dynamic.size() < widest) dynamic.resize(widest);
        }
        scratch.views_ready = true;
    }
    // A planned host run: its program when the previous run of this scratch had the same plan,
    // prepared results and arena (built now on the second run in a row of a shape class).
    NodeScratch::Program* prog = nullptr;
    if (dev == nullptr && plan_memory_ && mem.plan != nullptr && mem.prepared != nullptr &&
        mem.base != nullptr && mem.rec == nullptr) {
        NodeScratch::Program& p = scratch.program;
        const std::uint64_t plan_serial = mem.plan->serial, prepared_serial = mem.prepared->serial;
        if (p.valid && p.plan == plan_serial && p.prepared == prepared_serial &&
            p.base == mem.base) {
            prog = &p;
        } else if (p.seen_plan == plan_serial && p.seen_prepared == prepared_serial) {
            build_program(scratch, mem);
            prog = &p;
        }
        p.seen_plan = plan_serial;
        p.seen_prepared = prepared_serial;
    }
    // RunOptions::observer: the top-level host run's row-major outputs, right after their node.
    ValueObserver* const observer =
        frame.parent == nullptr && dev == nullptr ? control.observer : nullptr;
    auto observe = [&](const Node& n, const TensorView* views, bool from_frame) {
        for (std::size_t i = 0; i < n.outputs.size(); ++i) {
            const ValueId id = n.outputs[i];
            if (id == kNoValue) continue;
            const auto v = static_cast<std::size_t>(id);
            if (v < value_blocked_.size() && value_blocked_[v] != 0 && !observer->any_layout())
                continue;
            const TensorView view = from_frame ? frame.values[v].view() : views[i];
            if (view.raw == nullptr && view.shape.num_elements() != 0) continue;
            observer->observe(g.values[v].name, view);
        }
    };
    auto add_node_time = [&](std::size_t ni, std::chrono::steady_clock::time_point t0) {
        const auto elapsed = std::chrono::steady_clock::now() - t0;
        (*node_ms)[ni] += std::chrono::duration<double, std::milli>(elapsed).count();
    };
    const std::size_t num_nodes = g.nodes.size();
    for (std::size_t ni = 0; ni < num_nodes; ++ni) {
        DSINFER_RETURN_IF_ERROR(control.check());
        const auto t_node = node_ms != nullptr ? std::chrono::steady_clock::now()
                                               : std::chrono::steady_clock::time_point{};
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        if (prog != nullptr && prog->steps[ni].fixed) {
            // A fixed node of the program: only inputs no fixed node produced are read from the
            // frame; its outputs' views are the program's (a frame tensor only for a value
            // another node reads from there).
            const NodeScratch::Program::Step& step = prog->steps[ni];
            for (std::uint32_t r = step.reads; r < step.reads_end; ++r) {
                const auto [slot, id] = prog->reads[r];
                const Tensor& t = frame.values[static_cast<std::size_t>(id)];
                if (t.is_null())
                    return Status::error(ErrorCode::internal, node_context(n), "input '",
                                         g.value(id).name, "' has no value at run time");
                prog->in_views[slot] = t.view();
            }
            for (std::uint32_t i = 0; i < step.num_out; ++i) {
                const TensorView& ov = prog->out_views[step.outs + i];
                out_views[i] = ov;
                if (step.out_tensor && prog->out_tensor[step.outs + i] != 0)
                    frame.values[static_cast<std::size_t>(n.outputs[i])] = arena_tensor(
                        static_cast<unsigned char*>(ov.raw), ov.dtype, ov.shape, host);
            }
            Status st;
            {
                RunContext rctx(n,
                                std::span<const TensorView>(prog->in_views.data() + step.views,
                                                            step.num_in),
                                std::span<TensorView>(out_views.data(), step.num_out),
                                std::span<Tensor>(dynamic.data(), step.num_out), step.workspace,
                                step.workspace_bytes, *allocator_, control);
                ContextAccess::set_frame(rctx, &frame);
                ContextAccess::set_prepared_state(rctx, step.state);
                std::optional<ThreadBudget> one;
                if (serial_small_nodes_ &&
                    small_node(cn.work_kind, prog->in_views.data() + step.views, step.num_in))
                    one.emplace(1);
                if (hook != nullptr) hook(n, true);
                st = cn.kernel->run(rctx);
                if (hook != nullptr) hook(n, false);
            }
            for (std::uint32_t i = 0; i < step.num_out; ++i)  // none declared dynamic
                if (!dynamic[i].is_null()) dynamic[i] = Tensor();
            if (!st.is_ok()) return st.with_context(node_context(n));
            if (observer != nullptr) observe(n, out_views.data(), false);
            for (std::uint32_t r = step.drops; r < step.drops_end; ++r) {
                Tensor& t = frame.values[static_cast<std::size_t>(prog->drops[r])];
                if (!t.is_null()) t = Tensor();
            }
            if (node_ms != nullptr) add_node_time(ni, t_node);
            continue;
        }
        const bool on_dev = cn.on_device && dev != nullptr;
        const std::size_t num_in = n.inputs.size();
        const std::size_t num_out = n.outputs.size();
        if (out_views.size() < num_out) out_views.resize(num_out);
        if (dynamic.size() < num_out) dynamic.resize(num_out);
        const TensorView* views;                  // the node's input views
        const PrepareContext::OutputSpec* specs;  // its output specs
        std::size_t wb;                           // its workspace
        void* workspace_data = nullptr;
        const void* state;  // its prepared state
        bool any_dynamic = false;
        // The node's inputs: on the host, the frame's tensors themselves (no copy); on a
        // GPU engine, each where the node's kernel wants it (staged copies in node_inputs).
        // Their views: on the host, per node (constants' written once); on a GPU engine,
        // in_views, rewritten per node.
        if (inputs.size() < num_in) inputs.resize(num_in);
        if (dev == nullptr) {
            const std::uint32_t vb = scratch.views_begin[ni];
            TensorView* in = scratch.node_views.data() + vb;
            const char* fixed = scratch.view_fixed.data() + vb;
            for (std::size_t k = 0; k < num_in; ++k) {
                const ValueId id = n.inputs[k];
                if (id == kNoValue) {
                    inputs[k] = &scratch.none;
                    continue;
                }
                const Tensor& t = frame.values[static_cast<std::size_t>(id)];
                inputs[k] = &t;
                if (fixed[k] != 0) continue;
                if (t.is_null())
                    return Status::error(ErrorCode::internal, node_context(n), "input '",
                                         g.value(id).name, "' has no value at run time");
                in[k] = t.view();
            }
            views = in;
        } else {
            node_inputs.clear();
            for (std::size_t k = 0; k < num_in; ++k) {
                const ValueId id = n.inputs[k];
                if (id == kNoValue) {
                    node_inputs.emplace_back();
                    continue;
                }
                if (frame.values[static_cast<std::size_t>(id)].is_null())
                    return Status::error(ErrorCode::internal, node_context(n), "input '",
                                         g.value(id).name, "' has no value at run time");
                auto t = stage_input(frame, dev, ni, k);
                if (!t.is_ok()) return t.status().with_context(node_context(n));
                node_inputs.push_back(std::move(t).value());
            }
            if (in_views.size() < num_in) in_views.resize(num_in);
            for (std::size_t k = 0; k < num_in; ++k) {
                inputs[k] = &node_inputs[k];
                in_views[k] = node_inputs[k].is_null() ? TensorView{} : node_inputs[k].view();
            }
            views = in_views.data();
        }
        const std::span<const Tensor* const> node_in(inputs.data(), num_in);
        // A small node prepares and runs on this thread alone (a primitive sizes its team when
        // prepare creates it).
        std::optional<ThreadBudget> one;
        if (serial_small_nodes_ && !on_dev && small_node(cn.work_kind, views, num_in)) one.emplace(1);
        // Output specs, workspace and kernel state: on a planned run of a stable node, what
        // the recording run's prepare said; else from prepare now.
        if (mem.prepared != nullptr && cn.stable_prepare && !on_dev) {
            specs = mem.prepared->output_specs.data() + cn.spec_begin;
            wb = mem.prepared->workspace_bytes[ni];
            state = mem.prepared->node_states[ni].get();
        } else {
            // Prepared for the engine's whole thread count, which a run's lease never exceeds.
            std::optional<ThreadBudget> full;
            if (!one && prepare_threads_ > 0) full.emplace(prepare_threads_);
            // A run that records its shape class also asks the kernel what it runs (describe).
            std::string* algorithm = mem.record_prepared != nullptr
                                         ? &mem.record_prepared->algorithms[ni]
                                         : nullptr;
            Status st = prepare_node(n, *cn.kernel, mem.transient, node_in,
                                     scratch.prepare_inputs, scratch.specs, scratch.state, wb,
                                     algorithm);
            full.reset();
            if (!st.is_ok()) return st.with_context(node_context(n));
            specs = scratch.specs.data();
            state = scratch.state.get();
            if (mem.record_prepared != nullptr && cn.stable_prepare && !on_dev) {
                PreparedShape& ps = *mem.record_prepared;
                for (std::size_t i = 0; i < num_out; ++i)
                    ps.output_specs[cn.spec_begin + static_cast<std::uint32_t>(i)] = specs[i];
                ps.node_states[ni] = scratch.state;
                ps.workspace_bytes[ni] = wb;
            }
            if (mem.record_prepared != nullptr) mem.record_prepared->node_workspace[ni] = wb;
        }
        // Outputs go straight into their frame slots (a failed run drops them with the
        // rest); dynamic ones are allocated by the kernel.
        for (std::size_t i = 0; i < num_out; ++i) {
            const ValueId id = n.outputs[i];
            const PrepareContext::OutputSpec& spec = specs[i];
            if (id == kNoValue || spec.dynamic) {
                any_dynamic = any_dynamic || id != kNoValue;
                out_views[i] = TensorView{};
                continue;
            }
            if (!spec.set)  // the node lists more outputs than the operator produces
                return Status::error(ErrorCode::invalid_model, node_context(n), "output ", i,
                                     " ('", g.value(id).name, "') is not an output of ",
                                     n.op_type);
            Tensor& dst = frame.values[static_cast<std::size_t>(id)];
            // A planned host run: the value's slot in the arena when it has one of its own
            // (not shared in place) and the output fits; anything else goes through
            // output_tensor.
            const auto v = static_cast<std::size_t>(id);
            if (!on_dev && mem.base != nullptr && mem.plan->value_offset[v] >= 0 &&
                mem.plan->inplace_input[v] == kNoValue && mem.plan->value_on_device[v] == 0 &&
                spec.dtype != DType::string) {
                const std::size_t bytes = tensor_bytes(spec.dtype, spec.shape);
                if (bytes > 0 && bytes <= mem.plan->value_bytes[v]) {
                    unsigned char* at = mem.base + mem.plan->value_offset[v];
                    dst = arena_tensor(at, spec.dtype, spec.shape, host);
                    out_views[i] = TensorView{at, spec.dtype, spec.shape, host};
                    continue;
                }
            }
            Status st = output_tensor(mem, dev, ni, id, spec.dtype, spec.shape, node_in, dst);
            if (!st.is_ok()) return st.with_context(node_context(n));
            out_views[i] = dst.view();
        }
        if (wb > 0) {
            if (mem.rec != nullptr) mem.rec->workspace_bytes[ni] = wb;
            unsigned char* base = on_dev ? mem.device_base : mem.base;
            if (mem.plan != nullptr && base != nullptr && mem.plan->workspace_offset[ni] >= 0 &&
                wb <= mem.plan->workspace_bytes[ni]) {
                workspace_data = base + mem.plan->workspace_offset[ni];
            } else {
                auto w = allocate_on(dev, on_dev, DType::u8, Shape{static_cast<std::int64_t>(wb)});
                if (!w.is_ok()) {
                    if (w.status().code() != ErrorCode::resource_exhausted)
                        return w.status().with_context(node_context(n));
                    return Status::error(ErrorCode::resource_exhausted, "failed to allocate the ",
                                         wb, "-byte workspace of the kernel",
                                         on_dev || pool_ == nullptr ? std::string()
                                                                    : pool_->limit_note())
                        .with_context(node_context(n));
                }
                scratch.workspace = std::move(w).value();
                workspace_data = scratch.workspace.raw_data();
            }
        }
        Allocator& node_alloc = on_dev ? static_cast<Allocator&>(*dev) : *allocator_;
        Status st;
        {
            RunContext rctx(n, std::span<const TensorView>(views, num_in),
                            std::span<TensorView>(out_views.data(), num_out),
                            std::span<Tensor>(dynamic.data(), num_out), workspace_data, wb,
                            node_alloc, control);
            ContextAccess::set_frame(rctx, &frame);
            ContextAccess::set_prepared_state(rctx, state);
            if (on_dev) {
                ContextAccess::set_stream(rctx, dev->stream);
                if (error_slots != nullptr) ContextAccess::set_device_error_slots(rctx, error_slots + 4 * ni);
            }
            if (hook != nullptr) hook(n, true);
            st = cn.kernel->run(rctx);
            if (hook != nullptr) hook(n, false);
        }
        if (!scratch.workspace.is_null()) scratch.workspace = Tensor();
        if (scratch.state) scratch.state.reset();
        if (!st.is_ok()) {
            for (std::size_t i = 0; i < num_out; ++i) dynamic[i] = Tensor();
            return st.with_context(node_context(n));
        }
        if (any_dynamic || dev != nullptr) {
            for (std::size_t i = 0; i < num_out; ++i) {
                const ValueId id = n.outputs[i];
                if (id == kNoValue) continue;
                const auto vo = static_cast<std::size_t>(id);
                if (dev != nullptr) frame.other[vo] = Tensor();
                if (!specs[i].dynamic) continue;
                Tensor& dst = frame.values[vo];
                dst = std::move(dynamic[i]);
                if (dst.is_null())
                    return Status::error(ErrorCode::internal, node_context(n),
                                         "kernel did not produce dynamic output ", i);
                // A kernel that passed an input through must not leave it in the arena, whose
                // block is reused once the input dies.
                if (mem.in_arena(dst.raw_data())) {
                    if (dst.device().kind != DeviceKind::cpu)
                        return Status::error(ErrorCode::internal, node_context(n),
                                             "a device kernel passed an arena tensor through as a "
                                             "dynamic output");
                    auto c = copy_to(dst, *allocator_);
                    if (!c.is_ok()) return c.status().with_context(node_context(n));
                    dst = std::move(c).value();
                }
            }
        }
        for (std::size_t i = 0; i < num_out; ++i)
            if (!dynamic[i].is_null()) dynamic[i] = Tensor();
        if (mem.record_prepared != nullptr) {
            // The shapes this class produced (dynamic outputs included), for describe().
            PreparedShape& ps = *mem.record_prepared;
            for (std::size_t i = 0; i < num_out; ++i) {
                if (n.outputs[i] == kNoValue) continue;
                const std::size_t at = cn.spec_begin + i;
                ps.output_shapes[at] = out_views[i].shape;
                ps.output_recorded[at] = 1;
            }
        }
        if (observer != nullptr) observe(n, out_views.data(), true);
        if (dev != nullptr) node_inputs.clear();
        for (ValueId id : cn.release_after) {
            Tensor& t = frame.values[static_cast<std::size_t>(id)];
            if (!t.is_null()) t = Tensor();
            if (dev != nullptr) frame.other[static_cast<std::size_t>(id)] = Tensor();
        }
        if (node_ms != nullptr) {
            if (on_dev) DSINFER_RETURN_IF_ERROR(dev->rt->synchronize(dev->stream));
            add_node_time(ni, t_node);
        }
    }
    return Status::ok();
}

Status CompiledGraph::execute(const std::vector<Tensor>& inputs, const Frame* outer,
                              const RunControl& control, std::vector<Tensor>& outputs) const {
    const Graph& g = *graph_;
    DSINFER_CHECK(inputs.size() == g.inputs.size(), ErrorCode::invalid_argument, "graph '", g.name,
                  "' takes ", g.inputs.size(), " inputs, got ", inputs.size());
    // The run's scratch (frame, node vectors, shape key), returned to the graph's free list
    // when the run ends.
    struct ScratchGuard {
        const CompiledGraph* cg;
        std::unique_ptr<RunScratch> s;
        ~ScratchGuard() {
            if (s) cg->release_scratch(std::move(s));
        }
    };
    ScratchGuard guard{this, nullptr};
    try {
        guard.s = acquire_scratch();
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory setting up a run");
    }
    RunScratch& scratch = *guard.s;
    std::vector<std::int64_t>& key = scratch.key;  // the exact input shape
    std::shared_ptr<const ExecutionPlan> plan;
    std::shared_ptr<const PreparedShape> prepared;
    auto start_recording = [&](Recording& r) {
        r.value_bytes.assign(g.values.size(), 0);
        r.inplace_input.assign(g.values.size(), kNoValue);
        r.workspace_bytes.assign(g.nodes.size(), 0);
        r.value_device.assign(g.values.size(), 0);
    };
    // The shape keys, and whether the shape lies inside its bucket (a symbolic dim off its
    // bucket edge).
    std::vector<std::int64_t>& bkey = scratch.bucket;
    const bool try_bucket =
        plan_memory_ && buckets_ && bucketable_.load(std::memory_order_relaxed);
    const bool off_edges =
        (plan_memory_ || buckets_) &&
        shape_keys(inputs, plan_memory_ ? &key : nullptr, try_bucket ? &bkey : nullptr);
    if (plan_memory_) {
        // The shape's own plan (it came back, or the graph plans per exact shape), else the
        // bucket's (measured at its edges on the bucket's first run). A shape inside the bucket
        // that comes back gets a plan of its own, measured at its dims (tight memory for shapes
        // that repeat; the bucket's for those seen once, as in a decode loop). One lock for the
        // lookups: the shape's plan, else its bucket's, and the shape's prepare results.
        std::shared_ptr<const ExecutionPlan> bucket;
        {
            std::lock_guard<std::mutex> lock(plans_.mu);
            plan = lru_find(plans_.lru, key);
            if (!plan && try_bucket) bucket = lru_find(plans_.lru, bkey);
            if (plan || (bucket && !bucket->exact_only)) prepared = lru_find(plans_.prepared, key);
        }
        if (!plan && try_bucket) {
            auto measure = [&](bool at_edges, const std::vector<std::int64_t>& k)
                -> StatusOr<std::shared_ptr<const ExecutionPlan>> {
                Recording m;
                start_recording(m);
                DSINFER_ASSIGN_OR_RETURN(const bool measured, measure_bucket(inputs, m, at_edges));
                if (measured) return build_plan(k, m);
                return at_edges ? mark_exact_only(k) : nullptr;
            };
            if (!bucket) {
                DSINFER_ASSIGN_OR_RETURN(bucket, measure(true, bkey));
                if (!bucket->exact_only) prepared = find_prepared(key);
            }
            if (!bucket->exact_only) {
                plan = bucket;
                if (off_edges && prepared != nullptr) {
                    DSINFER_ASSIGN_OR_RETURN(auto own, measure(false, key));
                    if (own) plan = std::move(own);
                }
            }
        }
        if (plan && !prepared) prepared = find_prepared(key);
    }
    // GPU engines: from the second run of a shape class (the first one plans its memory), the
    // whole run is one CUDA graph when every node allows it.
    if (graphable_ && plan && control.node_ms == nullptr &&
        control.deadline == std::chrono::steady_clock::time_point::max()) {
        std::shared_ptr<CapturedRun> run = find_captured(key);
        if (!run) {
            bool handled = false;
            DSINFER_RETURN_IF_ERROR(capture_and_run(inputs, key, *plan, control, outputs, handled));
            if (handled) return Status::ok();
        } else if (!run->failed) {
            std::unique_lock<std::mutex> busy(run->busy, std::try_to_lock);
            if (busy.owns_lock()) return replay(*run, inputs, outputs);
        }
    }
    // GPU engines: the run's stream and stream-ordered device memory. Declared before the frame
    // and the arenas: it ends last, after synchronizing the stream.
    std::optional<DeviceScope> dev_scope;
    DeviceScope* dev = nullptr;
    if (device_ && device_nodes_ > 0) {
        DSINFER_RETURN_IF_ERROR(device_->health());
        DSINFER_RETURN_IF_ERROR(device_->activate());
        dev_scope.emplace(device_.get());
        DSINFER_ASSIGN_OR_RETURN(dev_scope->stream, device_->acquire_stream());
        dev = &*dev_scope;
    }
    Frame& frame = scratch.frame;
    frame.parent = outer;
    // The run's tensors go before the device scope ends (it synchronizes, then frees).
    struct RunValuesGuard {
        const CompiledGraph* cg;
        RunScratch* s;
        bool completed = false;
        ~RunValuesGuard() { cg->clear_run_values(*s, completed); }
    } values_guard{this, &scratch};
    if (dev != nullptr) frame.other.resize(g.values.size());
    for (std::size_t i = 0; i < inputs.size(); ++i)
        frame.values[static_cast<std::size_t>(g.inputs[i])] = inputs[i];
    for (const Capture& c : captures_) {
        const Frame* f = outer;
        for (int l = 1; l < c.levels_up && f != nullptr; ++l) f = f->parent;
        DSINFER_ASSERT(f != nullptr, "capture frame missing for '", g.value(c.id).name, "'");
        frame.values[static_cast<std::size_t>(c.id)] = f->values[static_cast<std::size_t>(c.outer)];
    }
    // Memory: this shape class's plan and one arena per side for it, or a recording that makes
    // the plan.
    RunMemory mem;
    std::unique_ptr<Recording> rec;  // a recording run's only
    // A planned run of a shape whose prepare results are not kept yet records them.
    std::shared_ptr<PreparedShape> fresh;
    auto start_prepared = [&](PreparedShape& ps) {
        ps.output_specs.assign(num_output_specs_, PrepareContext::OutputSpec{});
        ps.node_states.assign(g.nodes.size(), nullptr);
        ps.workspace_bytes.assign(g.nodes.size(), 0);
        ps.algorithms.assign(g.nodes.size(), std::string());
        ps.node_workspace.assign(g.nodes.size(), 0);
        ps.output_shapes.assign(num_output_specs_, Shape{});
        ps.output_recorded.assign(num_output_specs_, 0);
        mem.record_prepared = &ps;
    };
    // With EngineOptions::transient_shapes, a shape inside its bucket is prepared as transient
    // (kernels take paths that build nothing per shape): a function of the shape alone, so the
    // same shape always runs the same kernels.
    mem.transient = transient_shapes_ && off_edges;
    std::size_t cached_before_recording = 0;
    if (plan_memory_) {
        if (!plan) {
            cached_before_recording = pool_->stats().bytes_cached;
            rec = std::make_unique<Recording>();
            start_recording(*rec);
            start_prepared(rec->prepared);
            mem.rec = rec.get();
        } else {
            if (prepared) {
                mem.prepared = prepared.get();
            } else {
                fresh = std::make_shared<PreparedShape>();
                start_prepared(*fresh);
            }
            mem.plan = plan.get();
            // Without an arena (the pool's limit), the run allocates tensor by tensor. A new
            // arena replaces idle cached blocks (the recording run's) instead of adding to them.
            if (const std::size_t bytes = plan->arena_bytes; bytes > 0) {
                if (void* p = pool_->allocate_replacing_cache(bytes, kTensorAlignment)) {
                    mem.arena = std::shared_ptr<void>(
                        p, [pool = pool_, bytes](void* q) { pool->deallocate(q, bytes); },
                        ArenaCtrlAllocator<char>(scratch.arena_ctrl, &scratch.arena_ctrl_used));
                    mem.base = static_cast<unsigned char*>(p);
                }
            }
            if (const std::size_t bytes = plan->device_arena_bytes; bytes > 0 && dev != nullptr) {
                if (void* p = dev->allocate(bytes, kTensorAlignment)) {
                    mem.device_arena = std::shared_ptr<void>(
                        p, [dev, bytes](void* q) { dev->deallocate(q, bytes); });
                    mem.device_base = static_cast<unsigned char*>(p);
                }
            }
        }
    }
    Tensor error_slots;
    if (dev != nullptr && reports_device_errors_) {
        DSINFER_ASSIGN_OR_RETURN(error_slots, allocate_on(dev, true, DType::i64,
                                                          Shape{static_cast<std::int64_t>(4 * g.nodes.size())}));
        DSINFER_RETURN_IF_ERROR(dev->rt->memset_async(error_slots.raw_data(), 0, error_slots.num_bytes(), dev->stream));
    }
    std::int64_t* slots = error_slots.is_null() ? nullptr : error_slots.data_unchecked<std::int64_t>();
    DSINFER_RETURN_IF_ERROR(run_nodes(frame, mem, dev, scratch.nodes, control, slots));
    outputs.clear();
    outputs.reserve(g.outputs.size());
    std::vector<std::pair<const void*, void*>> unstage;  // pinned block -> output, after the sync
    for (std::size_t o = 0; o < g.outputs.size(); ++o) {
        const ValueId id = g.outputs[o];
        // On the host the run's own tensor moves out (the frame drops it anyway); an
        // initializer's handle and an output named twice are copied.
        Tensor& slot = frame.values[static_cast<std::size_t>(id)];
        bool move = dev == nullptr && !g.values[static_cast<std::size_t>(id)].initializer;
        for (std::size_t q = o + 1; q < g.outputs.size() && move; ++q) move = g.outputs[q] != id;
        Tensor t;
        if (move)
            t = std::move(slot);
        else
            t = slot;
        if (!t.is_null() && t.device().kind != DeviceKind::cpu) {
            // Results go back to the host: every copy queued (through pinned blocks, so they are
            // asynchronous), then one synchronization.
            DSINFER_ASSIGN_OR_RETURN(Tensor h, Tensor::allocate(t.dtype(), t.shape(), *allocator_));
            void* dst = h.raw_data();
            if (void* pin = dev->staging(t.num_bytes())) {
                unstage.emplace_back(pin, dst);
                dst = pin;
            }
            DSINFER_RETURN_IF_ERROR(dev->rt->copy_to_host(dst, t.raw_data(), t.num_bytes(), dev->stream));
            transfers_.d2h.fetch_add(t.num_bytes(), std::memory_order_relaxed);
            transfers_.copies.fetch_add(1, std::memory_order_relaxed);
            t = std::move(h);
        } else if (mem.in_arena(t.raw_data())) {
            DSINFER_ASSIGN_OR_RETURN(t, copy_to(t, *allocator_));
        }
        // Outputs of a caller's pool keep it alive (the default pool is never destroyed).
        if (bind_outputs_to_pool_ && !t.is_null()) t = MemoryPool::bind(pool_, std::move(t));
        outputs.push_back(std::move(t));
    }
    if (dev != nullptr) {
        DSINFER_RETURN_IF_ERROR(dev->rt->synchronize(dev->stream));
        DSINFER_RETURN_IF_ERROR(check_device_errors(dev, slots));
        for (std::size_t k = 0, o = 0; k < outputs.size(); ++k) {
            if (o < unstage.size() && outputs[k].raw_data() == unstage[o].second) {
                std::memcpy(unstage[o].second, unstage[o].first, outputs[k].num_bytes());
                ++o;
            }
        }
    }
    if (fresh) keep_prepared(key, std::move(fresh));
    if (mem.rec != nullptr) {
        build_plan(key, *rec);
        keep_prepared(key, std::make_shared<PreparedShape>(std::move(rec->prepared)));
        // The recording run's per-tensor blocks (many size classes; BERT-base b8: 27.6 MiB for
        // an 18 MiB plan) would idle in the pool's cache next to the arena that replaces them:
        // give back what this run added to the cache.
        if (const std::size_t cached = pool_->stats().bytes_cached; cached > cached_before_recording &&
                                                                   pool_->trim(cached_before_recording) > 0)
            release_free_heap_pages();
    }
    values_guard.completed = true;
    return Status::ok();
}

}  // namespace dsinfer::detail
