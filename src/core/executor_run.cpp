// The executor's run loop (CompiledGraph::execute): run scratch, plan lookup, arenas, staging
// between host and device, prepare (or its kept result) and run per node, outputs.
#include "core/executor.hpp"
#include "core/executor_internal.hpp"
#include "core/memory_planner.hpp"

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
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) s->frame.values[v] = *g.values[v].initializer;
    return s;
}

void CompiledGraph::clear_run_values(RunScratch& s) const noexcept {
    // Drop the run's tensors (initializer handles stay: they are the same every run; a graph
    // input with an initializer gets its initializer back).
    const Graph& g = *graph_;
    Frame& f = s.frame;
    for (std::size_t v = 0; v < f.values.size(); ++v)
        if (!g.values[v].initializer && !f.values[v].is_null()) f.values[v] = Tensor();
    for (ValueId id : g.inputs)
        if (const auto& init = g.values[static_cast<std::size_t>(id)].initializer)
            f.values[static_cast<std::size_t>(id)] = *init;
    f.other.clear();
    f.parent = nullptr;
    NodeScratch& n = s.nodes;
    n.node_inputs.clear();
    n.prepare_inputs.clear();
    n.out_tensors.clear();
    n.dynamic.clear();
}

void CompiledGraph::release_scratch(std::unique_ptr<RunScratch> s) const noexcept {
    clear_run_values(*s);
    std::lock_guard<std::mutex> lock(scratch_.mu);
    scratch_.free.push_back(std::move(s));  // capacity reserved in acquire_scratch
}

StatusOr<Tensor> CompiledGraph::allocate_on(DeviceScope* dev, bool device, DType dtype,
                                            const Shape& shape) const {
    if (!device || dev == nullptr) return Tensor::allocate(dtype, shape, *allocator_);
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

StatusOr<Tensor> CompiledGraph::output_tensor(RunMemory& mem, DeviceScope* dev, std::size_t ni,
                                              ValueId id, DType dtype, const Shape& shape,
                                              const std::vector<Tensor>& inputs) const {
    const auto v = static_cast<std::size_t>(id);
    const bool on_dev = nodes_[ni].on_device && dev != nullptr;
    if (!plannable_[v] || dtype == DType::string) return allocate_on(dev, on_dev, dtype, shape);
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
                    aliased = aliased || (n.inputs[k] == in && inputs[k].raw_data() == at);
                const int k0 = inplace_slot(inplace_op_[ni], inputs, dtype, shape);
                ok = !aliased || (k0 >= 0 && n.inputs[static_cast<std::size_t>(k0)] == in);
            }
            if (ok)
                return on_dev ? Tensor::wrap(at, dtype, shape, dev->device(), mem.device_arena)
                              : Tensor::wrap(at, dtype, shape, allocator_->device(), mem.arena);
        }
    }
    return allocate_on(dev, on_dev, dtype, shape);
}

Status CompiledGraph::run_nodes(Frame& frame, RunMemory& mem, DeviceScope* dev,
                                NodeScratch& scratch, const RunControl& control,
                                std::int64_t* error_slots) const {
    const Graph& g = *graph_;
    std::vector<Tensor>& node_inputs = scratch.node_inputs;
    std::vector<Tensor>& prepare_inputs = scratch.prepare_inputs;
    std::vector<TensorView>& in_views = scratch.in_views;
    std::vector<TensorView>& out_views = scratch.out_views;
    std::vector<Tensor>& out_tensors = scratch.out_tensors;
    std::vector<Tensor>& dynamic = scratch.dynamic;
    // Profiling covers the top-level graph only (subgraphs run inside their node's time).
    std::vector<double>* node_ms =
        frame.parent == nullptr && (dev == nullptr || !dev->retain) ? control.node_ms : nullptr;
    if (node_ms != nullptr) node_ms->resize(g.nodes.size(), 0.0);
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        DSINFER_RETURN_IF_ERROR(control.check());
        const auto t_node = node_ms != nullptr ? std::chrono::steady_clock::now()
                                               : std::chrono::steady_clock::time_point{};
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        const bool on_dev = cn.on_device && dev != nullptr;
        // A planned run of a stable node reads what the recording run's prepare said.
        const bool replay_prepare = mem.prepared != nullptr && cn.stable_prepare && !on_dev;
        node_inputs.clear();
        prepare_inputs.clear();
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            const ValueId id = n.inputs[k];
            if (id == kNoValue) {
                node_inputs.emplace_back();
                if (!replay_prepare) prepare_inputs.emplace_back();
                continue;
            }
            if (frame.values[static_cast<std::size_t>(id)].is_null())
                return Status::error(ErrorCode::internal, node_context(n), "input '",
                                     g.value(id).name, "' has no value at run time");
            if (dev == nullptr) {
                node_inputs.push_back(frame.values[static_cast<std::size_t>(id)]);
            } else {
                auto t = stage_input(frame, dev, ni, k);
                if (!t.is_ok()) return t.status().with_context(node_context(n));
                node_inputs.push_back(std::move(t).value());
            }
            if (replay_prepare) continue;
            // A device kernel's prepare sees device inputs as meta tensors (dtype and shape).
            const Tensor& staged = node_inputs.back();
            if (staged.device().kind != DeviceKind::cpu)
                prepare_inputs.push_back(Tensor::wrap(nullptr, staged.dtype(), staged.shape(),
                                                      staged.device(), std::make_shared<char>(0)));
            else
                prepare_inputs.push_back(staged);
        }
        std::optional<PrepareContext> pctx;
        const PrepareContext::OutputSpec* specs = nullptr;
        const int num_outputs = static_cast<int>(n.outputs.size());
        std::size_t wb = 0;
        const void* state = nullptr;
        if (replay_prepare) {
            specs = mem.prepared->output_specs.data() + cn.spec_begin;
            wb = mem.prepared->workspace_bytes[ni];
            state = mem.prepared->node_states[ni].get();
        } else {
            pctx.emplace(n, std::move(prepare_inputs), /*inferring=*/false);
            pctx->set_transient_shape(mem.transient);
            Status st = guarded_kernel_call("prepare", [&] { return cn.kernel->prepare(*pctx); });
            // Its capacity serves the next node.
            prepare_inputs = std::move(pctx->mutable_inputs());
            if (!st.is_ok()) return st.with_context(node_context(n));
            wb = pctx->workspace_bytes();
            state = pctx->state().get();
            if (mem.record_prepared != nullptr && cn.stable_prepare && !on_dev) {
                PreparedShape& ps = *mem.record_prepared;
                for (int i = 0; i < num_outputs; ++i)
                    ps.output_specs[cn.spec_begin + static_cast<std::uint32_t>(i)] = pctx->output_spec(i);
                ps.node_states[ni] = pctx->state();
                ps.workspace_bytes[ni] = wb;
            }
        }
        auto spec_of = [&](int i) -> const PrepareContext::OutputSpec& {
            return specs != nullptr ? specs[i] : pctx->output_spec(i);
        };
        auto has_output = [&](int i) { return n.outputs[static_cast<std::size_t>(i)] != kNoValue; };

        out_views.assign(n.outputs.size(), TensorView{});
        out_tensors.resize(n.outputs.size());
        dynamic.resize(n.outputs.size());
        for (int i = 0; i < num_outputs; ++i) {
            if (!has_output(i)) continue;
            const auto& spec = spec_of(i);
            if (spec.dynamic) continue;
            if (!spec.set)  // the node lists more outputs than the operator produces
                return Status::error(ErrorCode::invalid_model, node_context(n), "output ", i,
                                     " ('", g.value(n.outputs[static_cast<std::size_t>(i)]).name,
                                     "') is not an output of ", n.op_type);
            auto t = output_tensor(mem, dev, ni, n.outputs[static_cast<std::size_t>(i)], spec.dtype,
                                   spec.shape, node_inputs);
            if (!t.is_ok()) return t.status().with_context(node_context(n));
            out_tensors[static_cast<std::size_t>(i)] = std::move(t).value();
            out_views[static_cast<std::size_t>(i)] = out_tensors[static_cast<std::size_t>(i)].view();
        }
        Tensor workspace;
        void* workspace_data = nullptr;
        if (wb > 0) {
            if (mem.rec != nullptr) mem.rec->workspace_bytes[ni] = wb;
            unsigned char* base = on_dev ? mem.device_base : mem.base;
            if (mem.plan != nullptr && base != nullptr && mem.plan->workspace_offset[ni] >= 0 &&
                wb <= mem.plan->workspace_bytes[ni]) {
                workspace_data = base + mem.plan->workspace_offset[ni];
            } else {
                auto w = allocate_on(dev, on_dev, DType::u8, Shape{static_cast<std::int64_t>(wb)});
                if (!w.is_ok()) return w.status().with_context(node_context(n));
                workspace = std::move(w).value();
                workspace_data = workspace.raw_data();
            }
        }
        in_views.clear();
        for (const Tensor& t : node_inputs) in_views.push_back(t.is_null() ? TensorView{} : t.view());
        Allocator& node_alloc = on_dev ? static_cast<Allocator&>(*dev) : *allocator_;
        RunContext rctx(n, std::span<const TensorView>(in_views), std::span<TensorView>(out_views),
                        std::span<Tensor>(dynamic), workspace_data, wb, node_alloc, control);
        rctx.set_frame(&frame);
        rctx.set_prepared_state(state);
        if (on_dev) {
            rctx.set_stream(dev->stream);
            if (error_slots != nullptr) rctx.set_device_error_slots(error_slots + 4 * ni);
        }
        const testing::KernelRunHook hook = testing::kernel_run_hook.load(std::memory_order_relaxed);
        if (hook != nullptr) hook(n, true);
        Status st = cn.kernel->run(rctx);
        if (hook != nullptr) hook(n, false);
        if (!st.is_ok()) {
            for (Tensor& t : dynamic) t = Tensor();
            return st.with_context(node_context(n));
        }
        for (int i = 0; i < num_outputs; ++i) {
            if (!has_output(i)) continue;
            const auto vo = static_cast<std::size_t>(n.outputs[static_cast<std::size_t>(i)]);
            Tensor& dst = frame.values[vo];
            if (dev != nullptr) frame.other[vo] = Tensor();
            if (spec_of(i).dynamic) {
                dst = std::move(rctx.dynamic_output(i));
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
            } else {
                dst = std::move(out_tensors[static_cast<std::size_t>(i)]);
            }
        }
        for (Tensor& t : dynamic) t = Tensor();
        for (Tensor& t : node_inputs) t = Tensor();
        prepare_inputs.clear();
        for (ValueId id : cn.release_after) {
            frame.values[static_cast<std::size_t>(id)] = Tensor();
            if (dev != nullptr) frame.other[static_cast<std::size_t>(id)] = Tensor();
        }
        if (node_ms != nullptr) {
            if (on_dev) DSINFER_RETURN_IF_ERROR(dev->rt->synchronize(dev->stream));
            (*node_ms)[ni] += std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t_node)
                                  .count();
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
    // A shape inside its bucket (a symbolic dim off its bucket edge).
    const bool off_edges = buckets_ && off_bucket_edges(inputs);
    if (plan_memory_) {
        exact_key(inputs, key);
        // The shape's own plan (it came back, or the graph plans per exact shape), else the
        // bucket's (measured at its edges on the bucket's first run). A shape inside the bucket
        // that comes back gets a plan of its own, measured at its dims (tight memory for shapes
        // that repeat; the bucket's for those seen once, as in a decode loop).
        plan = find_plan(key);
        if (!plan && buckets_ && bucketable_.load(std::memory_order_relaxed)) {
            std::vector<std::int64_t>& bkey = scratch.bucket;
            bucket_key(inputs, bkey);
            std::shared_ptr<const ExecutionPlan> bucket = find_plan(bkey);
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
            }
            if (!bucket->exact_only) {
                plan = bucket;
                if (off_edges && (prepared = find_prepared(key)) != nullptr) {
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
        ~RunValuesGuard() { cg->clear_run_values(*s); }
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
    Recording rec;
    // A planned run of a shape whose prepare results are not kept yet records them.
    std::shared_ptr<PreparedShape> fresh;
    auto start_prepared = [&](PreparedShape& ps) {
        ps.output_specs.assign(num_output_specs_, PrepareContext::OutputSpec{});
        ps.node_states.assign(g.nodes.size(), nullptr);
        ps.workspace_bytes.assign(g.nodes.size(), 0);
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
            start_recording(rec);
            start_prepared(rec.prepared);
            mem.rec = &rec;
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
    std::int64_t* slots = error_slots.is_null() ? nullptr : error_slots.data<std::int64_t>();
    DSINFER_RETURN_IF_ERROR(run_nodes(frame, mem, dev, scratch.nodes, control, slots));
    outputs.clear();
    outputs.reserve(g.outputs.size());
    std::vector<std::pair<const void*, void*>> unstage;  // pinned block -> output, after the sync
    for (ValueId id : g.outputs) {
        Tensor t = frame.values[static_cast<std::size_t>(id)];
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
        build_plan(key, rec);
        keep_prepared(key, std::make_shared<PreparedShape>(std::move(rec.prepared)));
        // The recording run's per-tensor blocks (many size classes; BERT-base b8: 27.6 MiB for
        // an 18 MiB plan) would idle in the pool's cache next to the arena that replaces them:
        // give back what this run added to the cache.
        if (const std::size_t cached = pool_->stats().bytes_cached; cached > cached_before_recording &&
                                                                   pool_->trim(cached_before_recording) > 0)
            release_free_heap_pages();
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
