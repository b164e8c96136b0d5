// The executor's memory plans: shape keys (exact and bucket), measuring a bucket at its edges,
// building plans from a recording, the plan and prepared-shape caches (docs/MEMORY.md).
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

// ---- memory planning ------------------------------------------------------------------------

void release_free_heap_pages() noexcept {
#if defined(__GLIBC__)
    (void)::malloc_trim(0);
#endif
}

std::int64_t CompiledGraph::bucket_edge(std::int64_t v) const noexcept {
    if (v <= 0) return v;
    for (std::int64_t e : bucket_edges_)
        if (v <= e) return e;
    if (v > (std::int64_t{1} << 62)) return v;
    std::int64_t p = 1;
    while (p < v) p <<= 1;
    return p;
}

// Plan keys (into vectors whose capacity is kept): a marker (1 exact, 0 bucket), then per input
// its dtype, rank and dims; a bucket key has each symbolic dim's bucket edge instead.
bool CompiledGraph::shape_keys(const std::vector<Tensor>& inputs, std::vector<std::int64_t>* key,
                               std::vector<std::int64_t>* bucket) const {
    if (key != nullptr) {
        key->clear();
        key->push_back(1);
    }
    if (bucket != nullptr) {
        bucket->clear();
        bucket->push_back(0);
    }
    bool off_edges = false;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& t = inputs[i];
        const std::vector<char>* sym = i < input_symbolic_.size() ? &input_symbolic_[i] : nullptr;
        for (std::vector<std::int64_t>* k : {key, bucket}) {
            if (k == nullptr) continue;
            k->push_back(static_cast<std::int64_t>(t.dtype()));
            k->push_back(t.num_dims());
        }
        for (int d = 0; d < t.num_dims(); ++d) {
            const std::int64_t dim = t.shape()[d];
            if (key != nullptr) key->push_back(dim);
            // A declared static dim keeps its value (a run with another fails in a kernel).
            const bool symbolic = sym == nullptr || sym->empty() ||
                                  static_cast<std::size_t>(d) >= sym->size() ||
                                  (*sym)[static_cast<std::size_t>(d)] != 0;
            const std::int64_t edge = buckets_ && symbolic ? bucket_edge(dim) : dim;
            off_edges = off_edges || edge != dim;
            if (bucket != nullptr) bucket->push_back(edge);
        }
    }
    return off_edges;
}

std::shared_ptr<const ExecutionPlan> CompiledGraph::find_plan(
    const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    return lru_find(plans_.lru, key);
}

std::shared_ptr<const ExecutionPlan> CompiledGraph::mark_exact_only(
    const std::vector<std::int64_t>& key) const {
    auto plan = std::make_shared<ExecutionPlan>();
    plan->exact_only = true;
    std::lock_guard<std::mutex> lock(plans_.mu);
    return lru_insert(plans_.lru, key, std::move(plan), kMaxPlans);
}

std::shared_ptr<const PreparedShape> CompiledGraph::find_prepared(
    const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    return lru_find(plans_.prepared, key);
}

void CompiledGraph::keep_prepared(const std::vector<std::int64_t>& key,
                                  std::shared_ptr<const PreparedShape> prepared) const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    (void)lru_insert(plans_.prepared, key, std::move(prepared), kMaxPreparedShapes);
}

std::shared_ptr<const ExecutionPlan> CompiledGraph::build_plan(const std::vector<std::int64_t>& key,
                                                               const Recording& rec) const {
    const std::size_t nv = rec.value_bytes.size();
    const std::size_t nn = rec.workspace_bytes.size();
    auto plan = std::make_shared<ExecutionPlan>();
    plan->value_offset.assign(nv, -1);
    plan->value_bytes = rec.value_bytes;
    plan->inplace_input = rec.inplace_input;
    plan->workspace_offset.assign(nn, -1);
    plan->workspace_bytes = rec.workspace_bytes;
    plan->value_on_device.assign(nv, 0);
    for (std::size_t v = 0; v < nv && v < rec.value_device.size(); ++v)
        plan->value_on_device[v] = rec.value_device[v];
    std::size_t placed = 0;
    // One arena per side (host; device on GPU engines), each planned on its own.
    for (int side = 0; side < (device_ ? 2 : 1); ++side) {
        // In-place pairs share one block: a value joins its input's block (inputs come first).
        std::vector<std::size_t> block(nv, SIZE_MAX);
        std::vector<PlanItem> items;
        for (std::size_t v = 0; v < nv; ++v) {
            if (rec.value_bytes[v] == 0 || plan->value_on_device[v] != side) continue;
            const PlanItem own{rec.value_bytes[v], def_step_[v], last_step_[v]};
            const ValueId in = rec.inplace_input[v];
            if (in != kNoValue && block[static_cast<std::size_t>(in)] != SIZE_MAX) {
                PlanItem& b = items[block[static_cast<std::size_t>(in)]];
                b.bytes = std::max(b.bytes, own.bytes);
                b.first = std::min(b.first, own.first);
                b.last = std::max(b.last, own.last);
                block[v] = block[static_cast<std::size_t>(in)];
                continue;
            }
            block[v] = items.size();
            items.push_back(own);
        }
        std::vector<std::size_t> ws_block(nn, SIZE_MAX);
        for (std::size_t ni = 0; ni < nn; ++ni) {
            if (rec.workspace_bytes[ni] == 0 || static_cast<int>(nodes_[ni].on_device) != side) continue;
            ws_block[ni] = items.size();
            items.push_back({rec.workspace_bytes[ni], static_cast<std::int32_t>(ni),
                             static_cast<std::int32_t>(ni)});
        }
        if (items.empty()) continue;
        const ArenaLayout layout = plan_arena(items);
        (side == 0 ? plan->arena_bytes : plan->device_arena_bytes) = layout.peak_bytes;
        for (std::size_t v = 0; v < nv; ++v)
            if (block[v] != SIZE_MAX) {
                plan->value_offset[v] = static_cast<std::int64_t>(layout.offsets[block[v]]);
                ++placed;
            }
        for (std::size_t ni = 0; ni < nn; ++ni)
            if (ws_block[ni] != SIZE_MAX) {
                plan->workspace_offset[ni] = static_cast<std::int64_t>(layout.offsets[ws_block[ni]]);
                ++placed;
            }
        plan->stats.planned_peak_bytes += layout.peak_bytes;
        plan->stats.lower_bound_bytes += layout.lower_bound_bytes;
    }
    plan->stats.planned_values = placed;
    std::lock_guard<std::mutex> lock(plans_.mu);
    const auto& kept = lru_insert(plans_.lru, key, plan, kMaxPlans);
    if (kept != plan) return kept;  // a concurrent first run of the class planned it already
    plans_.last = plan->stats;
    ++plans_.recorded;
    return plan;
}

MemoryPlanStats CompiledGraph::memory_plan_stats() const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    MemoryPlanStats s = plans_.last;
    s.shape_classes = 0;
    for (const auto& [k, p] : plans_.lru) {
        if (p->exact_only) continue;
        ++s.shape_classes;
        s.cached_arena_bytes += p->arena_bytes + p->device_arena_bytes;
    }
    s.plans_recorded = plans_.recorded;
    s.prepared_shapes = plans_.prepared.size();
    return s;
}

std::vector<NodeDescription> CompiledGraph::node_descriptions(std::vector<Shape>* inputs) const {
    const Graph& g = *graph_;
    // The most recently used exact shape and what its first run recorded (immutable once kept).
    std::vector<std::int64_t> key;
    std::shared_ptr<const PreparedShape> ps;
    {
        std::lock_guard<std::mutex> lock(plans_.mu);
        if (!plans_.prepared.empty()) {
            key = plans_.prepared.front().first;
            ps = plans_.prepared.front().second;
        }
    }
    if (ps != nullptr && ps->algorithms.size() != g.nodes.size()) ps = nullptr;
    // Per value: its shape in that class where known.
    std::vector<std::optional<Shape>> shape(g.values.size());
    if (ps != nullptr) {
        // The exact key: 1, then per graph input its dtype, rank and dims (shape_keys).
        std::size_t at = 1;
        for (std::size_t i = 0; i < g.inputs.size() && at + 1 < key.size(); ++i) {
            const std::int64_t rank = key[at + 1];
            at += 2;
            if (rank < 0 || at + static_cast<std::size_t>(rank) > key.size()) break;
            auto s = Shape::make(std::span<const std::int64_t>(key.data() + at,
                                                               static_cast<std::size_t>(rank)));
            at += static_cast<std::size_t>(rank);
            if (!s.is_ok()) continue;
            shape[static_cast<std::size_t>(g.inputs[i])] = s.value();
            if (inputs != nullptr) inputs->push_back(s.value());
        }
        for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
            const Node& n = g.nodes[ni];
            for (std::size_t o = 0; o < n.outputs.size(); ++o) {
                const std::size_t spec = nodes_[ni].spec_begin + o;
                if (n.outputs[o] != kNoValue && spec < ps->output_recorded.size() &&
                    ps->output_recorded[spec] != 0)
                    shape[static_cast<std::size_t>(n.outputs[o])] = ps->output_shapes[spec];
            }
        }
    }
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (!shape[v] && g.values[v].initializer) shape[v] = g.values[v].initializer->shape();
    auto shape_of = [&](ValueId id) {
        if (id == kNoValue) return SymbolicShape{};
        const auto v = static_cast<std::size_t>(id);
        return shape[v] ? SymbolicShape::from(*shape[v]) : g.values[v].shape;
    };
    std::vector<NodeDescription> out(g.nodes.size());
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        NodeDescription& d = out[ni];
        d.name = n.name;
        d.op = n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type;
        d.provider = nodes_[ni].entry != nullptr ? nodes_[ni].entry->provider : std::string();
        bool ran = ps != nullptr;
        for (std::size_t o = 0; ran && o < n.outputs.size(); ++o) {
            const std::size_t spec = nodes_[ni].spec_begin + o;
            ran = n.outputs[o] == kNoValue ||
                  (spec < ps->output_recorded.size() && ps->output_recorded[spec] != 0);
        }
        d.ran = ran;
        d.algorithm = ran && !ps->algorithms[ni].empty() ? ps->algorithms[ni] : d.provider;
        d.workspace_bytes = ran ? ps->node_workspace[ni] : 0;
        for (ValueId id : n.inputs) d.input_shapes.push_back(shape_of(id));
        for (ValueId id : n.outputs) d.output_shapes.push_back(shape_of(id));
    }
    return out;
}

StatusOr<bool> CompiledGraph::measure_bucket(const std::vector<Tensor>& inputs, Recording& rec,
                                             bool at_edges) const {
    const Graph& g = *graph_;
    // Every value as a tensor of its shape at the bucket's edges: meta (no data) unless it is a
    // constant or a small shape-like value computed on the way.
    std::vector<Tensor> vals(g.values.size());
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) vals[v] = *g.values[v].initializer;
    // Meta tensors: dtype and shape, no data (a non-null owner marks the value as produced).
    const std::shared_ptr<void> meta = std::make_shared<char>(0);
    auto meta_tensor = [&](DType dtype, const Shape& shape) {
        return Tensor::wrap(nullptr, dtype, shape, Device{}, meta);
    };
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& t = inputs[i];
        const std::vector<char>& sym = input_symbolic_[i];
        std::vector<std::int64_t> dims;
        for (int d = 0; d < t.num_dims(); ++d) {
            const bool symbolic = sym.empty() || static_cast<std::size_t>(d) >= sym.size() ||
                                  sym[static_cast<std::size_t>(d)] != 0;
            dims.push_back(symbolic && at_edges ? bucket_edge(t.shape()[d]) : t.shape()[d]);
        }
        auto shape = Shape::make(std::span<const std::int64_t>(dims.data(), dims.size()));
        if (!shape.is_ok()) return false;
        vals[static_cast<std::size_t>(g.inputs[i])] = meta_tensor(t.dtype(), shape.value());
    }
    std::vector<Tensor> ins;
    std::vector<const Tensor*> node_in_ptrs;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        if (!cn.subgraphs.empty() || cn.on_device) {
            bucketable_.store(false, std::memory_order_relaxed);
            return false;
        }
        ins.clear();
        bool all_data = true;
        for (ValueId id : n.inputs) {
            if (id == kNoValue) {
                ins.emplace_back();
                continue;
            }
            const Tensor& t = vals[static_cast<std::size_t>(id)];
            if (t.is_null()) return false;  // produced by a node whose outputs are dynamic
            all_data = all_data && (t.raw_data() != nullptr || t.num_elements() == 0);
            ins.push_back(t);
        }
        const std::vector<Tensor> node_ins = ins;
        node_in_ptrs.clear();
        for (const Tensor& t : node_ins) node_in_ptrs.push_back(&t);
        // With transient shapes, the edges themselves run with a full prepare, the shapes inside
        // the bucket with a transient one (PrepareContext::transient_shape): the workspace
        // serves both. A shape's own plan takes the prepare its runs take.
        PrepareContext transient(n, node_ins, /*inferring=*/false);
        ContextAccess::set_transient_shape(transient, true);
        PrepareContext ctx(n, std::move(ins), /*inferring=*/false);
        ContextAccess::set_transient_shape(ctx, !at_edges && transient_shapes_);
        const bool both = at_edges && transient_shapes_;
        for (PrepareContext* c : {&ctx, &transient}) {
            if (c == &transient && !both) break;
            Status st;
            try {
                st = cn.kernel->prepare(*c);
            } catch (const std::bad_alloc&) {
                st = Status(ErrorCode::resource_exhausted, "out of memory in prepare");
            } catch (const std::exception&) {
                return false;
            }
            // Out of memory fails the run; any other error only means "not at these edges".
            if (st.code() == ErrorCode::resource_exhausted) return st.with_context(node_context(n));
            if (!st.is_ok()) return false;
        }
        ins = std::move(ContextAccess::inputs(ctx));
        rec.workspace_bytes[ni] = std::max(ctx.workspace_bytes(), both ? transient.workspace_bytes() : 0);
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (!ctx.has_output(i)) continue;
            const auto& spec = ctx.output_spec(i);
            if (!spec.set || spec.dynamic) return false;
            const ValueId id = n.outputs[static_cast<std::size_t>(i)];
            const auto v = static_cast<std::size_t>(id);
            if (plannable_[v] && spec.dtype != DType::string) {
                rec.value_bytes[v] = tensor_bytes(spec.dtype, spec.shape);
                if (rec.value_bytes[v] > 0)
                    note_inplace(rec, ni, id, spec.dtype, spec.shape, node_in_ptrs);
            }
            vals[v] = meta_tensor(spec.dtype, spec.shape);
        }
        const bool shape_only = n.op_type == "Shape" || n.op_type == "Size";
        if (all_data || shape_only) {
            auto outs = compute_small(ni, node_ins, ctx);
            if (!outs.is_ok()) return outs.status();
            for (std::size_t i = 0; i < outs.value().size(); ++i)
                if (n.outputs[i] != kNoValue && !outs.value()[i].is_null())
                    vals[static_cast<std::size_t>(n.outputs[i])] = std::move(outs.value()[i]);
        }
        for (ValueId id : cn.release_after) vals[static_cast<std::size_t>(id)] = Tensor();
    }
    return true;
}

void CompiledGraph::note_inplace(Recording& rec, std::size_t ni, ValueId id, DType dtype,
                                 const Shape& shape, std::span<const Tensor* const> inputs) const {
    const Node& n = graph_->nodes[ni];
    const auto v = static_cast<std::size_t>(id);
    if (!inplace_op_[ni] || n.outputs[0] != id) return;
    const int k = inplace_slot(inplace_op_[ni], inputs, dtype, shape);
    const ValueId in = k < 0 ? kNoValue : n.inputs[static_cast<std::size_t>(k)];
    // Under rule k + 2 only input k is overwritten element by element; when the same value also
    // feeds another input (FusedConv(X, W, B, Z = X)), the kernel would read that input while
    // writing the shared block: not in place.
    bool other_reader = false;
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
        other_reader = other_reader ||
                       (inplace_op_[ni] >= 2 && static_cast<int>(j) != k && n.inputs[j] == in);
    if (in != kNoValue && !other_reader &&
        last_step_[static_cast<std::size_t>(in)] == static_cast<std::int32_t>(ni) &&
        rec.value_bytes[static_cast<std::size_t>(in)] == rec.value_bytes[v] &&
        rec.value_device[static_cast<std::size_t>(in)] == rec.value_device[v])
        rec.inplace_input[v] = in;
}

}  // namespace dsinfer::detail
