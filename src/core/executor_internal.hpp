// The executor's private parts shared by its files (executor_compile.cpp: compile stages;
// executor_plan.cpp: shape keys, bucket measurement and memory plans; executor_run.cpp: the
// run loop; executor_cuda_graph.cpp: captured CUDA graphs). Not included outside them.
#pragma once

#include <algorithm>
#include <cstring>
#include <list>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/executor.hpp"

namespace dsinfer::detail {

/// "node 'name' (Op): ", the prefix of every error about a node.
inline std::string node_context(const Node& n) { return n.describe() + ": "; }

/// A kernel's prepare, with an exception (an application's kernel may throw; run() is noexcept)
/// turned into a Status: resource_exhausted for bad_alloc, internal otherwise (the caller names
/// the node).
template <class Call>
Status guarded_kernel_call(const char* what, Call&& call) noexcept {
    try {
        return call();
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory in the kernel's ", what);
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "the kernel's ", what, " threw: ", e.what());
    } catch (...) {
        return Status::error(ErrorCode::internal, "the kernel's ", what, " threw");
    }
}

/// What the first run of a shape class saw: bytes per planned value and per workspace.
struct CompiledGraph::Recording {
    std::vector<std::size_t> value_bytes;      // per value, 0 = not an arena candidate
    std::vector<ValueId> inplace_input;        // per value, kNoValue = own block
    std::vector<std::size_t> workspace_bytes;  // per node
    std::vector<char> value_device;            // per value: produced on the device
    PreparedShape prepared;  // what prepare said (recorded runs only)
};

/// The per-node vectors of run_nodes, kept between runs (RunScratch) so that a planned run
/// does not allocate them.
struct CompiledGraph::NodeScratch {
    /// node_inputs: the inputs staged for a device run (copies); host runs read the frame.
    std::vector<Tensor> node_inputs, prepare_inputs, dynamic;
    /// Per input of the node being run: its tensor (in the frame, or in node_inputs).
    std::vector<const Tensor*> inputs;
    std::vector<TensorView> in_views, out_views;
    /// Host runs: every node's input views, nodes one after the other (node ni's from
    /// views_begin[ni]); those of constants (and absent inputs) are written once, when the
    /// frame's initializer handles are in place, and flagged in view_fixed.
    std::vector<TensorView> node_views;
    std::vector<std::uint32_t> views_begin;
    std::vector<char> view_fixed;
    bool views_ready = false;
    /// What the node's prepare said when it was called (not replayed): its output specs and
    /// the state it set (kept until the node ran).
    std::vector<PrepareContext::OutputSpec> specs;
    std::shared_ptr<const void> state;
    Tensor workspace;  // a workspace outside the arena (unplanned runs), until the node ran
    Tensor none;       // an absent optional input (stays null)

    /// A planned host run whose plan, prepared results and arena are those of the previous
    /// run of this scratch runs from a program: the nodes whose prepare is replayed and whose
    /// outputs and workspace all have slots of their own in the arena ("fixed" nodes) take
    /// their output views, workspace and the views of inputs another fixed node produced from
    /// here, written once; only graph inputs and values of other nodes are read from the
    /// frame, and a fixed node's output gets a frame tensor only when another node reads it
    /// from there. Built on the second run in a row of a shape class (a loop of changing
    /// shapes never builds one), in vectors sized on the scratch's first host run.
    struct Program {
        /// One node as the program runs it.
        struct Step {
            bool fixed = false;
            std::uint32_t num_in = 0, num_out = 0;
            std::uint32_t views = 0;  // its input views: in_views[views, views + num_in)
            std::uint32_t outs = 0;   // its output views: out_views[outs, outs + num_out)
            std::uint32_t reads = 0, reads_end = 0;  // its inputs read from the frame
            std::uint32_t drops = 0, drops_end = 0;  // the frame tensors it releases
            bool out_tensor = false;                  // some output gets a frame tensor
            const void* state = nullptr;
            void* workspace = nullptr;
            std::size_t workspace_bytes = 0;
        };
        bool valid = false;
        std::uint64_t plan = 0, prepared = 0;  // the serials it was built for
        const unsigned char* base = nullptr;   // and the arena
        std::uint64_t seen_plan = 0, seen_prepared = 0;  // the previous planned run's
        std::vector<Step> steps;                         // per node
        std::vector<TensorView> in_views;                // per node's inputs (views_begin)
        std::vector<std::pair<std::uint32_t, ValueId>> reads;  // (input view, value)
        std::vector<ValueId> drops;
        std::vector<TensorView> out_views;  // per node's outputs
        std::vector<char> out_tensor;       // per output: the frame gets its tensor
        // Used while building: per node its first output, per value its output slot (if a
        // fixed node's) and whether it holds a frame tensor during a run.
        std::vector<std::uint32_t> outs_begin, value_out;
        std::vector<char> has_tensor;
    };
    Program program;
};

/// Everything a run of this graph needs besides its memory plan: the frame (initializer
/// handles filled once), the node vectors and the shape key.
struct CompiledGraph::RunScratch {
    Frame frame;
    NodeScratch nodes;
    std::vector<std::int64_t> key, bucket;
    /// The values a run sets (graph inputs, captured outer values, node outputs), cleared
    /// after a failed run; and those a completed run leaves set (no node releases them: graph
    /// inputs and outputs nobody reads last), cleared after it.
    std::vector<ValueId> run_values, kept_values;
    /// Storage for the control block of the run's arena handle (one shared_ptr per run, held
    /// by its RunMemory; host arena tensors do not own it): no heap allocation for it.
    alignas(std::max_align_t) unsigned char arena_ctrl[192];
    bool arena_ctrl_used = false;
};

/// One run's memory: the plan and its arenas (host, device), or the recording.
struct CompiledGraph::RunMemory {
    const ExecutionPlan* plan = nullptr;
    /// What prepare said for this exact shape (its nodes with stable_prepare skip prepare),
    /// or where to record it.
    const PreparedShape* prepared = nullptr;
    PreparedShape* record_prepared = nullptr;
    /// The shape lies inside its bucket, off the edges: prepare with
    /// PrepareContext::transient_shape (a function of the shape alone, so reproducible).
    bool transient = false;
    std::shared_ptr<void> arena;
    unsigned char* base = nullptr;
    std::shared_ptr<void> device_arena;
    unsigned char* device_base = nullptr;
    Recording* rec = nullptr;
    bool in_arena(const void* p) const noexcept {
        const auto* c = static_cast<const unsigned char*>(p);
        return (base != nullptr && c >= base && c < base + plan->arena_bytes) ||
               (device_base != nullptr && c >= device_base && c < device_base + plan->device_arena_bytes);
    }
};

/// One run's device state: its stream, and a stream-ordered allocator over the device pool.
/// Blocks freed during the run are reused by later allocations of the same run (same stream,
/// so ordered after the work that used them); all go back to the shared pool only after the
/// stream is synchronized, when the scope ends (device_runtime.hpp). Declared before the frame
/// in execute(), so every device tensor of the run is dead when it ends.
struct CompiledGraph::DeviceScope final : public Allocator {
    DeviceRuntime* rt = nullptr;
    void* stream = nullptr;
    std::mutex mu;
    std::multimap<std::size_t, void*> free_blocks;  // size class -> block
    /// Capturing a CUDA graph: every block allocated is kept (the graph's addresses) and
    /// handed to the CapturedRun, which returns them to the pool when it is destroyed.
    bool retain = false;
    std::vector<std::pair<void*, std::size_t>> retained;
    /// Pinned staging blocks of this run's copies (returned after the stream is synchronized).
    std::vector<std::pair<void*, std::size_t>> pinned;

    /// A pinned block of at least `bytes` for a copy of this run, or null (then the copy
    /// goes through pageable memory, synchronously).
    void* staging(std::size_t bytes) noexcept {
        if (bytes < kMinPinnedCopy) return nullptr;
        const std::size_t cls = MemoryPool::size_class(bytes);
        void* p = cls == 0 ? nullptr : rt->pinned_pool()->allocate(cls, kTensorAlignment);
        if (p == nullptr) return nullptr;
        try {
            pinned.emplace_back(p, cls);
        } catch (...) {
            rt->pinned_pool()->deallocate(p, cls);
            return nullptr;
        }
        return p;
    }
    /// Copies below this go straight from pageable memory (the driver stages them itself).
    static constexpr std::size_t kMinPinnedCopy = 64 * 1024;

    explicit DeviceScope(DeviceRuntime* runtime) : rt(runtime) {}
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;
    ~DeviceScope() override {
        if (stream != nullptr) (void)rt->synchronize(stream);
        for (const auto& [cls, p] : free_blocks) rt->pool()->deallocate(p, cls);
        for (const auto& [p, cls] : pinned) rt->pinned_pool()->deallocate(p, cls);
        if (stream != nullptr) rt->release_stream(stream);
    }
    Device device() const noexcept override { return rt->device(); }
    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        const std::size_t cls = MemoryPool::size_class(bytes);
        if (cls == 0) return nullptr;
        if (retain) {
            void* p = rt->pool()->allocate(cls, alignment);
            if (p == nullptr) return nullptr;
            try {
                std::lock_guard<std::mutex> lock(mu);
                retained.emplace_back(p, cls);
            } catch (...) {
                rt->pool()->deallocate(p, cls);
                return nullptr;
            }
            return p;
        }
        try {
            std::lock_guard<std::mutex> lock(mu);
            if (auto it = free_blocks.find(cls); it != free_blocks.end()) {
                void* p = it->second;
                free_blocks.erase(it);
                return p;
            }
        } catch (...) {
            return nullptr;
        }
        return rt->pool()->allocate(cls, alignment);
    }
    void deallocate(void* p, std::size_t bytes) noexcept override {
        if (p == nullptr || retain) return;  // retained blocks belong to the captured graph
        const std::size_t cls = MemoryPool::size_class(bytes);
        try {
            std::lock_guard<std::mutex> lock(mu);
            free_blocks.emplace(cls, p);
        } catch (...) {
            // Cannot defer: wait for the stream, then return it at once.
            if (stream != nullptr) (void)rt->synchronize(stream);
            rt->pool()->deallocate(p, cls);
        }
    }
};

/// Byte size of dtype x shape, 0 on overflow (such tensors are never planned).
inline std::size_t tensor_bytes(DType dtype, const Shape& shape) {
    const auto n = shape.num_elements();
    const auto esize = dtype_size(dtype);
    if (n < 0 || static_cast<std::uint64_t>(n) > SIZE_MAX / esize) return 0;
    return static_cast<std::size_t>(n) * esize;
}

/// The input output 0 of an in-place capable node may share: the first with its dtype and
/// shape (for binary ops, the operand oneDNN takes as src0), or -1.
inline int inplace_slot(char rule, std::span<const Tensor* const> inputs, DType dtype,
                        const Shape& shape) {
    auto fits = [&](std::size_t k) {
        return k < inputs.size() && !inputs[k]->is_null() && inputs[k]->dtype() == dtype &&
               inputs[k]->shape() == shape;
    };
    if (rule >= 2) return fits(static_cast<std::size_t>(rule - 2)) ? rule - 2 : -1;
    for (std::size_t k = 0; k < inputs.size(); ++k)
        if (fits(k)) return static_cast<int>(k);
    return -1;
}

/// A copy of `t` from `alloc` (used for tensors that must not stay in an arena).
inline StatusOr<Tensor> copy_to(const Tensor& t, Allocator& alloc) {
    DSINFER_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(t.dtype(), t.shape(), alloc));
    if (t.dtype() == DType::string) {
        for (std::int64_t i = 0; i < t.num_elements(); ++i)
            c.data_unchecked<std::string>()[i] = t.data_unchecked<std::string>()[i];
    } else if (t.num_bytes() > 0) {
        std::memcpy(c.raw_data(), t.raw_data(), t.num_bytes());
    }
    return c;
}

/// The entry under `key` in a least-recently-used list (moved to the front), or null; and the
/// entry under `key`, inserted at the front when missing (beyond `capacity` the least recently
/// used goes). The caller holds the list's lock.
template <class List>
typename List::value_type::second_type lru_find(List& lru, const std::vector<std::int64_t>& key) {
    for (auto it = lru.begin(); it != lru.end(); ++it) {
        if (it->first != key) continue;
        lru.splice(lru.begin(), lru, it);
        return it->second;
    }
    return nullptr;
}
template <class List>
typename List::value_type::second_type& lru_insert(List& lru, const std::vector<std::int64_t>& key,
                                                   typename List::value_type::second_type value,
                                                   std::size_t capacity) {
    for (auto& [k, v] : lru)
        if (k == key) return v;  // a concurrent run put it there first
    lru.emplace_front(key, std::move(value));
    if (lru.size() > capacity) lru.pop_back();
    return lru.front().second;
}

/// Sets up a frame: initializers, inputs, captures.
inline void fill_frame(Frame& frame, const Graph& g, const std::vector<Tensor>& inputs) {
    frame.values.resize(g.values.size());
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) frame.values[v] = *g.values[v].initializer;
    for (std::size_t i = 0; i < inputs.size(); ++i)
        frame.values[static_cast<std::size_t>(g.inputs[i])] = inputs[i];
}

/// One shape class's captured CUDA graph: the executable graph, the device memory its kernels
/// read and write (the arena, graph inputs and outputs, other tensors of the capture run, the
/// error slots), owned here and returned to the pool when the entry is evicted. `busy` makes
/// replays of one entry exclusive (a concurrent run of the class runs uncaptured).
struct CompiledGraph::CapturedRun {
    struct Buffer {
        void* ptr = nullptr;
        DType dtype = DType::f32;
        Shape shape;
    };
    std::mutex busy;
    bool failed = false;          // capture impossible for this class: run normally
    std::shared_ptr<void> exec;   // cudaGraphExec_t
    std::vector<Buffer> inputs;   // per graph input: its device buffer (null: not on the device)
    std::vector<Buffer> outputs;  // per graph output
    std::int64_t* error_slots = nullptr;
    DeviceRuntime* rt = nullptr;
    std::vector<std::pair<void*, std::size_t>> owned;
    ~CapturedRun() {
        exec.reset();
        if (rt != nullptr)
            for (const auto& [p, cls] : owned) rt->pool()->deallocate(p, cls);
    }
};

}  // namespace dsinfer::detail
