#include "core/executor.hpp"

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

class ExecCreateContext final : public KernelCreateContext {
public:
    ExecCreateContext(const Node& node, const Graph& graph, std::int64_t opset,
                      std::vector<const Tensor*> constants, const CompileOptions& options,
                      const CompiledGraph* self, int depth,
                      std::vector<std::shared_ptr<CompiledGraph>>& subgraphs,
                      std::span<const KernelEntry* const> lower)
        : KernelCreateContext(node, graph, opset, std::move(constants)),
          options_(options), self_(self), depth_(depth), subgraphs_(subgraphs), lower_(lower) {}

    StatusOr<std::unique_ptr<Kernel>> create_fallback() const override {
        Status last = Status::error(ErrorCode::unsupported, "no lower-priority kernel for ",
                                    node().op_type);
        for (std::size_t i = 0; i < lower_.size(); ++i) {
            std::vector<const Tensor*> constants;
            for (int k = 0; k < num_inputs(); ++k) constants.push_back(constant_input(k));
            ExecCreateContext ctx(node(), graph(), opset(), std::move(constants), options_, self_,
                                  depth_, subgraphs_, lower_.subspan(i + 1));
            ctx.fallback_ = true;
            auto k = lower_[i]->factory(ctx);
            if (k.is_ok() || k.status().code() != ErrorCode::unsupported) return k;
            last = k.status();
        }
        return last;
    }

    StatusOr<std::shared_ptr<SubgraphRunner>> compile_subgraph(
        const std::shared_ptr<Graph>& subgraph) const override {
        if (!subgraph) return Status::error(ErrorCode::invalid_model, "missing subgraph");
        DSINFER_CHECK(depth_ + 1 <= options_.max_subgraph_depth, ErrorCode::invalid_model,
                      "subgraph nesting exceeds the limit of ", options_.max_subgraph_depth);
        // Bodies run on the CPU (their control-flow kernel is a CPU kernel).
        CompileOptions sub = options_;
        sub.device_runtime = nullptr;
        DSINFER_ASSIGN_OR_RETURN(auto cg, CompiledGraph::compile(subgraph, sub, self_, depth_ + 1));
        subgraphs_.push_back(cg);
        return std::shared_ptr<SubgraphRunner>(cg);
    }

    bool creating_fallback() const noexcept override { return fallback_; }
    bool lower_provider(std::string_view provider) const noexcept override {
        for (const KernelEntry* e : lower_)
            if (e->provider == provider) return true;
        return false;
    }
    Device device() const noexcept override {
        return options_.device_runtime ? options_.device_runtime->device() : Device{};
    }
    bool allow_tf32() const noexcept override { return options_.allow_tf32; }

private:
    bool fallback_ = false;
    const CompileOptions& options_;
    const CompiledGraph* self_;
    int depth_;
    std::vector<std::shared_ptr<CompiledGraph>>& subgraphs_;
    std::span<const KernelEntry* const> lower_;
};

std::string node_context(const Node& n) { return n.describe() + ": "; }

}  // namespace

StatusOr<std::shared_ptr<CompiledGraph>> CompiledGraph::compile(std::shared_ptr<Graph> graph,
                                                                const CompileOptions& options,
                                                                const CompiledGraph* parent,
                                                                int depth) {
    DSINFER_ASSERT(options.registry != nullptr && graph != nullptr);
    std::shared_ptr<CompiledGraph> cg(new CompiledGraph());
    cg->graph_ = std::move(graph);
    cg->parent_ = parent;
    cg->pool_ = options.memory_pool ? options.memory_pool : default_memory_pool();
    cg->allocator_ = cg->pool_.get();
    cg->bind_outputs_to_pool_ = parent == nullptr && cg->pool_ != default_memory_pool();
    cg->plan_memory_ = parent == nullptr && options.plan_memory;
    cg->device_ = options.device_runtime;
    const Graph& g = *cg->graph_;
    cg->transient_shapes_ = options.transient_shapes;
    if (parent == nullptr && options.shape_buckets) {
        for (std::size_t i = 0; i < options.bucket_edges.size(); ++i)
            DSINFER_CHECK(options.bucket_edges[i] > 0 &&
                              (i == 0 || options.bucket_edges[i] > options.bucket_edges[i - 1]),
                          ErrorCode::invalid_argument,
                          "shape_bucket_edges must be positive and strictly ascending (edge ", i,
                          " is ", options.bucket_edges[i], ")");
        cg->bucket_edges_ = options.bucket_edges;
        for (ValueId id : g.inputs) {
            const SymbolicShape& decl = g.value(id).shape;
            std::vector<char> sym;
            for (const Dim& d : decl.dims) sym.push_back(d.is_static() ? 0 : 1);
            cg->buckets_ = cg->buckets_ || !decl.known ||
                           std::find(sym.begin(), sym.end(), 1) != sym.end();
            cg->input_symbolic_.push_back(decl.known ? std::move(sym) : std::vector<char>{});
        }
        // GPU engines plan per exact shape (their captured graphs are per shape anyway).
        cg->buckets_ = cg->buckets_ && cg->device_ == nullptr;
    }
    for (std::size_t i = 0; i < g.values.size(); ++i)
        cg->names_.emplace(g.values[i].name, static_cast<ValueId>(i));
    for (std::size_t i = 0; i < g.values.size(); ++i) {
        const Value& v = g.values[i];
        if (!v.is_capture) continue;
        int level = 1;
        bool found = false;
        for (const CompiledGraph* p = parent; p != nullptr; p = p->parent_, ++level) {
            if (auto it = p->names_.find(v.name); it != p->names_.end()) {
                cg->captures_.push_back({static_cast<ValueId>(i), level, it->second});
                cg->outer_refs_.emplace_back(level, it->second);
                found = true;
                break;
            }
        }
        DSINFER_CHECK(found, ErrorCode::invalid_model, "subgraph '", g.name,
                      "' reads outer-scope name '", v.name, "' that no enclosing graph defines");
    }
    for (ValueId id : g.inputs) {
        const Value& v = g.value(id);
        DSINFER_CHECK(v.kind == ValueKind::tensor, ErrorCode::unsupported, "graph input '", v.name,
                      "' is a sequence/optional/map value; only tensors are supported");
    }
    for (ValueId id : g.outputs) {
        const Value& v = g.value(id);
        DSINFER_CHECK(v.kind == ValueKind::tensor, ErrorCode::unsupported, "graph output '",
                      v.name, "' is a sequence/optional/map value; only tensors are supported");
    }
    DSINFER_RETURN_IF_ERROR(cg->compile_nodes(options, depth));
    for (auto& pd : cg->probe_data_) pd = {};
    cg->shape_fixed_ = {};
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        cg->nodes_[ni].spec_begin = cg->num_output_specs_;
        cg->num_output_specs_ += static_cast<std::uint32_t>(g.nodes[ni].outputs.size());
    }
    if (cg->device_) DSINFER_RETURN_IF_ERROR(cg->upload_constants());
    if (options.blocked_layouts) DSINFER_RETURN_IF_ERROR(cg->negotiate_layouts());
    cg->plan_lifetimes();
    cg->graphable_ = options.cuda_graphs && parent == nullptr && cg->plan_memory_ &&
                     cg->device_ != nullptr && cg->decide_graphable();
    return cg;
}

Status CompiledGraph::compile_nodes(const CompileOptions& options, int depth) {
    Graph& g = *graph_;
    nodes_.resize(g.nodes.size());
    // Initializers whose every reader keeps its own copy (Kernel::released_constant_inputs) are
    // freed as soon as the last reader is created, so that a packed copy and the original never
    // coexist for the whole model. Graph inputs/outputs and names subgraphs capture are kept.
    std::vector<int> readers(g.values.size(), 0);
    std::vector<char> keep(g.values.size(), 0), consumed(g.values.size(), 0);
    for (ValueId id : g.inputs) keep[static_cast<std::size_t>(id)] = 1;
    for (ValueId id : g.outputs) keep[static_cast<std::size_t>(id)] = 1;
    for (const Node& n : g.nodes) {
        for (ValueId in : n.inputs)
            if (in != kNoValue) ++readers[static_cast<std::size_t>(in)];
        std::vector<std::string> captured;
        Graph::collect_captures(n, captured);
        for (const auto& name : captured)
            if (auto it = names_.find(name); it != names_.end())
                keep[static_cast<std::size_t>(it->second)] = 1;
    }
    auto release_read_constants = [&](std::size_t ni) {
        const Node& n = g.nodes[ni];
        const std::uint64_t bits = nodes_[ni].kernel->released_constant_inputs();
        for (std::size_t i = 0; i < n.inputs.size(); ++i) {
            if (n.inputs[i] == kNoValue) continue;
            const auto v = static_cast<std::size_t>(n.inputs[i]);
            if (i < 64 && ((bits >> i) & 1u) != 0) consumed[v] = 1;
            else keep[v] = 1;
            if (--readers[v] > 0 || !consumed[v] || keep[v]) continue;
            auto& init = g.values[v].initializer;
            if (!init || init->raw_data() == nullptr) continue;
            released_constant_bytes_ += init->num_bytes();
            // No data, but not a null tensor: readers see its dtype and shape.
            init = Tensor::wrap(nullptr, init->dtype(), init->shape(), init->device(),
                                std::make_shared<char>(0));
        }
    };
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        const std::int64_t opset = g.opset(n.domain);
        if (opset == 0)
            return Status::error(ErrorCode::unsupported, node_context(n), "domain '", n.domain,
                                 "' is not imported by the model (no opset_import entry)");
        // Filtered by the node's whole input dtype signature (KernelKey::input_dtypes).
        auto candidates = options.registry->find_all(g, n, opset, options.device);
        // Shape-like values computed at load (every non-constant input known then: Shape ->
        // Gather -> Concat chains) stay on the host, where their consumers read them.
        bool load_known = true, reads_values = false;
        for (ValueId in : n.inputs) {
            if (in == kNoValue || g.value(in).initializer) continue;
            reads_values = true;
            const auto vi = static_cast<std::size_t>(in);
            if (probe_data_[0].size() != g.values.size() || probe_data_[0][vi].is_null()) load_known = false;
        }
        const bool host_only = n.op_type == "Shape" || n.op_type == "Size" || (reads_values && load_known);
        // A GPU engine tries the device backend's kernels first; their fallback (the shape
        // semantics they share, CudaKernel::prepare) is the reference kernel.
        std::size_t device_candidates = 0;
        std::vector<const KernelEntry*> references;
        if (options.device_runtime && !host_only) {
            auto dev = options.registry->find_all(g, n, opset, DeviceKind::cuda);
            device_candidates = dev.size();
            for (const KernelEntry* e : candidates)
                if (e->priority == kPriorityReference) references.push_back(e);
            dev.insert(dev.end(), candidates.begin(), candidates.end());
            candidates = std::move(dev);
        }
        if (candidates.empty()) {
            if (options.registry->knows(n.op_type, n.domain))
                return Status::error(ErrorCode::unsupported, node_context(n), "opset ", opset,
                                     " of ", n.domain.empty() ? "ai.onnx" : n.domain,
                                     " is not supported for this op");
            return Status::error(ErrorCode::unsupported, node_context(n), "op type '", n.op_type,
                                 "' (domain '", n.domain.empty() ? "ai.onnx" : n.domain,
                                 "') is not supported");
        }
        std::vector<const Tensor*> constants;
        for (ValueId in : n.inputs) {
            const Value* v = in == kNoValue ? nullptr : &g.value(in);
            constants.push_back(v != nullptr && v->initializer ? &*v->initializer : nullptr);
        }
        CompiledNode& cn = nodes_[ni];
        Status last;
        for (std::size_t ci = 0; ci < candidates.size(); ++ci) {
            const KernelEntry* entry = candidates[ci];
            cn.subgraphs.clear();
            const std::span<const KernelEntry* const> lower =
                ci < device_candidates ? std::span<const KernelEntry* const>(references)
                                       : std::span<const KernelEntry* const>(candidates).subspan(ci + 1);
            ExecCreateContext ctx(n, g, opset, constants, options, this, depth, cn.subgraphs, lower);
            StatusOr<std::unique_ptr<Kernel>> k = Status::error(ErrorCode::internal, "no factory");
            try {
                k = entry->factory(ctx);
            } catch (const std::bad_alloc&) {
                k = Status::error(ErrorCode::resource_exhausted, "out of memory creating kernel");
            } catch (const Error& e) {  // a typed failure (e.g. Tensor allocation) keeps its code
                k = Status(e.code(), e.message());
            } catch (const std::exception& e) {
                k = Status::error(ErrorCode::internal, "kernel factory threw: ", e.what());
            }
            if (k.is_ok()) {
                cn.kernel = std::move(k).value();
                cn.entry = entry;
                cn.on_device = entry->key.device != DeviceKind::cpu;
                if (cn.on_device) {
                    cn.host_inputs = cn.kernel->host_inputs();
                    reports_device_errors_ = reports_device_errors_ || cn.kernel->reports_device_errors();
                    ++device_nodes_;
                } else {
                    cn.shape_derived = host_only;
                }
                break;
            }
            last = k.status();
            // Fall through to the next candidate only when this one cannot handle the node.
            if (last.code() != ErrorCode::unsupported) break;
        }
        if (!cn.kernel) return last.with_context(node_context(n));
        for (const auto& sub : cn.subgraphs)
            for (const auto& [lvl, id] : sub->outer_refs_)
                if (lvl > 1) outer_refs_.emplace_back(lvl - 1, id);
        // Infer this node's output types/shapes before later nodes pick kernels by them.
        DSINFER_RETURN_IF_ERROR(infer_node(ni));
        release_read_constants(ni);
    }
    return Status::ok();
}

namespace {

/// Placeholder value of the k-th distinct symbol in probe p (0 or 1): every symbol gets its
/// own value, different in the two probes, so that dims derived from different symbols never
/// coincide by accident.
std::int64_t probe_value(std::size_t k, int probe) {
    static constexpr std::int64_t kPrimes[] = {5,  7,  11, 13, 17, 19, 23, 29, 31, 37, 41, 43,
                                               47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101};
    constexpr std::size_t n = sizeof(kPrimes) / sizeof(kPrimes[0]) / 2;
    if (k < n) return kPrimes[2 * k + static_cast<std::size_t>(probe)];
    return 103 + 2 * static_cast<std::int64_t>(k) + probe;  // beyond the table: still distinct
}

}  // namespace

Status CompiledGraph::infer_node(std::size_t ni) {
    Graph& g = *graph_;
    const Node& n = g.nodes[ni];
    if (probe_data_[0].size() != g.values.size())
        for (auto& pd : probe_data_) pd.assign(g.values.size(), Tensor());
    if (shape_fixed_.size() != g.values.size()) {
        // Graph inputs (the shape class is their shapes) and constants; node outputs join
        // when their node's prepare is stable (mark_stable).
        shape_fixed_.assign(g.values.size(), 0);
        for (ValueId id : g.inputs) shape_fixed_[static_cast<std::size_t>(id)] = 1;
    }
    // Inputs as meta tensors (constants, and small shape-like values computed at load, carry
    // data). With symbolic dims, probe twice with placeholder values: output dims equal in
    // both probes are static, the others symbolic.
    bool symbolic = false;
    bool all_data = true;
    std::vector<Tensor> probes[2];
    for (ValueId id : n.inputs) {
        if (id == kNoValue) {
            for (auto& ins : probes) ins.emplace_back();
            continue;
        }
        const Value& v = g.value(id);
        // (An initializer released to its kernels carries no data: it is probed as meta.)
        if (v.initializer && (v.initializer->raw_data() != nullptr || v.initializer->num_bytes() == 0)) {
            for (auto& ins : probes) ins.push_back(*v.initializer);
            continue;
        }
        const auto vi = static_cast<std::size_t>(id);
        if (!probe_data_[0][vi].is_null() && !probe_data_[1][vi].is_null()) {
            const Tensor& t0 = probe_data_[0][vi];
            const Tensor& t1 = probe_data_[1][vi];
            if (!(t0.shape() == t1.shape()) ||
                (t0.dtype() != DType::string && std::memcmp(t0.raw_data(), t1.raw_data(), t0.num_bytes()) != 0))
                symbolic = true;
            probes[0].push_back(t0);
            probes[1].push_back(t1);
            continue;
        }
        all_data = false;
        if (v.kind != ValueKind::tensor || !v.dtype || !v.shape.known) return Status::ok();
        for (int p = 0; p < 2; ++p) {
            std::vector<std::int64_t> dims;
            for (std::size_t di = 0; di < v.shape.dims.size(); ++di) {
                const Dim& d = v.shape.dims[di];
                if (!d.is_static()) symbolic = true;
                dims.push_back(d.is_static()
                                   ? d.value
                                   : probe_value(symbol_index(d.symbol.empty()
                                                                  ? v.name + "#" + std::to_string(di)
                                                                  : d.symbol),
                                                 p));
            }
            auto s = Shape::make(dims);
            if (!s.is_ok()) return Status::ok();
            probes[p].push_back(Tensor::wrap(nullptr, *v.dtype, s.value()));
        }
    }
    // Shape-like values are computed at load (both probes) when their inputs are known.
    const bool shape_only = n.op_type == "Shape" || n.op_type == "Size";
    // Out of memory fails the load (like every other allocation); other failures only mean
    // the value is not known at load.
    auto compute = [&](int p, const std::vector<Tensor>& ins, const PrepareContext& ctx) -> Status {
        if (!(all_data || shape_only)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(std::vector<Tensor> outs, compute_small(ni, ins, ctx));
        for (std::size_t i = 0; i < outs.size(); ++i)
            if (n.outputs[i] != kNoValue && !outs[i].is_null())
                probe_data_[p][static_cast<std::size_t>(n.outputs[i])] = std::move(outs[i]);
        return Status::ok();
    };
    auto prepare = [&](PrepareContext& ctx) -> Status {
        try {
            return nodes_[ni].kernel->prepare(ctx);
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in prepare");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "prepare threw: ", e.what());
        }
    };
    // Whether the outputs' shapes are fixed by the input-shape class (every output set without
    // reading data the class does not fix, every non-constant input's shape fixed), and whether
    // prepare's whole result is (besides, has_data() asked only of constants and load-computed
    // shape values): CompiledNode::stable_prepare.
    struct Fixed {
        bool shapes = false, prepare = false;
    };
    auto fixed_after = [&](const PrepareContext& c) {
        Fixed f;
        if (nodes_[ni].on_device || !nodes_[ni].subgraphs.empty()) return f;
        for (int i = 0; i < c.num_outputs(); ++i)
            if (c.has_output(i) && (!c.output_spec(i).set || c.output_spec(i).dynamic)) return f;
        const std::uint64_t asked = c.data_queried();
        bool asked_run_data = (asked >> 63) != 0;
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            const ValueId id = n.inputs[k];
            if (id == kNoValue || g.value(id).initializer) continue;
            const auto vi = static_cast<std::size_t>(id);
            if (!shape_fixed_[vi]) return f;
            const bool load_known = !probe_data_[0][vi].is_null() && !probe_data_[1][vi].is_null();
            if (((asked >> k) & 1u) != 0 && !load_known) asked_run_data = true;
        }
        f.shapes = true;
        f.prepare = !asked_run_data;
        return f;
    };
    if (!symbolic) {
        const std::vector<Tensor> ins = probes[0];
        PrepareContext ctx(n, std::move(probes[0]), /*inferring=*/true);
        Status st = prepare(ctx);
        if (!st.is_ok()) {
            const ErrorCode code =
                st.code() == ErrorCode::invalid_argument ? ErrorCode::invalid_model : st.code();
            return Status(code, node_context(n) + st.message());
        }
        mark_fixed(ni, fixed_after(ctx).shapes, fixed_after(ctx).prepare);
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (!ctx.has_output(i)) continue;
            const auto& spec = ctx.output_spec(i);
            Value& ov = g.value(n.outputs[static_cast<std::size_t>(i)]);
            if (!spec.set && !spec.dynamic) continue;
            if (!ov.dtype && spec.dtype_known) ov.dtype = spec.dtype;
            if (spec.set && !ov.shape.is_static()) ov.shape = SymbolicShape::from(spec.shape);
        }
        DSINFER_RETURN_IF_ERROR(compute(0, ins, ctx));
        for (ValueId id : n.outputs)
            if (id != kNoValue) probe_data_[1][static_cast<std::size_t>(id)] = probe_data_[0][static_cast<std::size_t>(id)];
        return Status::ok();
    }
    // Probes: errors only mean "not known at load" (the placeholders may be invalid).
    const std::vector<Tensor> ins0 = probes[0], ins1 = probes[1];
    PrepareContext c0(n, std::move(probes[0]), true, /*probing=*/true);
    PrepareContext c1(n, std::move(probes[1]), true, /*probing=*/true);
    for (PrepareContext* c : {&c0, &c1}) {
        const Status st = prepare(*c);
        // Out of memory fails the load; other errors only mean the shapes are not known yet.
        if (st.code() == ErrorCode::resource_exhausted)
            return Status(st.code(), node_context(n) + st.message());
        if (!st.is_ok()) return Status::ok();
    }
    {
        const Fixed f0 = fixed_after(c0), f1 = fixed_after(c1);
        mark_fixed(ni, f0.shapes && f1.shapes, f0.prepare && f1.prepare);
    }
    DSINFER_RETURN_IF_ERROR(compute(0, ins0, c0));
    DSINFER_RETURN_IF_ERROR(compute(1, ins1, c1));
    for (int i = 0; i < c0.num_outputs(); ++i) {
        if (!c0.has_output(i)) continue;
        const auto& s0 = c0.output_spec(i);
        const auto& s1 = c1.output_spec(i);
        Value& ov = g.value(n.outputs[static_cast<std::size_t>(i)]);
        if ((s0.set || s0.dynamic) && s0.dtype_known && !ov.dtype) ov.dtype = s0.dtype;
        if (!s0.set || !s1.set || s0.shape.rank() != s1.shape.rank()) continue;
        SymbolicShape out;
        out.known = true;
        for (int d = 0; d < s0.shape.rank(); ++d) {
            if (s0.shape[d] == s1.shape[d]) {
                out.dims.push_back(Dim::fixed(s0.shape[d]));
                continue;
            }
            // A dim equal to a symbol's placeholder in both probes is that symbol.
            Dim dim;
            for (const auto& [name, k] : probe_symbols_)
                if (probe_value(k, 0) == s0.shape[d] && probe_value(k, 1) == s1.shape[d])
                    dim = Dim::named(name);
            out.dims.push_back(dim);
        }
        // A declared shape stays unless the probe knows more of it.
        auto static_count = [](const SymbolicShape& s) {
            int k = 0;
            for (const auto& d : s.dims) k += d.is_static() ? 1 : 0;
            return s.known ? k : -1;
        };
        if (!ov.shape.known ||
            (ov.shape.rank() == out.rank() && static_count(out) > static_count(ov.shape)))
            ov.shape = out;
    }
    return Status::ok();
}

StatusOr<std::vector<Tensor>> CompiledGraph::compute_small(std::size_t ni,
                                                           const std::vector<Tensor>& ins,
                                                           const PrepareContext& ctx) const {
    const Node& n = graph_->nodes[ni];
    std::vector<Tensor> outs;
    if (!n.domain.empty() || nodes_[ni].on_device) return outs;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
        const auto& spec = ctx.output_spec(i);
        if (ctx.has_output(i) &&
            (!spec.set || spec.shape.num_elements() > 1024 || spec.dtype == DType::string))
            return outs;
    }
    outs.resize(n.outputs.size());
    std::vector<TensorView> in_views, out_views(n.outputs.size());
    for (int i = 0; i < ctx.num_outputs(); ++i) {
        if (!ctx.has_output(i)) continue;
        const auto& spec = ctx.output_spec(i);
        auto t = Tensor::allocate(spec.dtype, spec.shape, *allocator_);
        if (!t.is_ok()) return Status(t.status().code(), node_context(n) + t.status().message());
        outs[static_cast<std::size_t>(i)] = std::move(t).value();
        out_views[static_cast<std::size_t>(i)] = outs[static_cast<std::size_t>(i)].view();
    }
    for (std::size_t i = 0; i < ins.size(); ++i)  // meta tensors (no data) keep their shape
        in_views.push_back(n.inputs[i] == kNoValue ? TensorView{} : ins[i].view());
    auto ws = Tensor::allocate(DType::u8, Shape{static_cast<std::int64_t>(ctx.workspace_bytes())},
                               *allocator_);
    if (!ws.is_ok()) return Status(ws.status().code(), node_context(n) + ws.status().message());
    RunControl control;
    RunContext rctx(n, in_views, out_views, ws.value().raw_data(), ctx.workspace_bytes(),
                    *allocator_, control);
    rctx.set_prepared_state(ctx.state().get());
    if (const Status st = nodes_[ni].kernel->run(rctx); !st.is_ok()) {
        if (st.code() == ErrorCode::resource_exhausted)
            return Status(st.code(), node_context(n) + st.message());
        outs.clear();
    }
    return outs;
}

void CompiledGraph::mark_fixed(std::size_t ni, bool shapes, bool prepare) {
    nodes_[ni].stable_prepare = shapes && prepare;
    if (!shapes) return;
    for (ValueId id : graph_->nodes[ni].outputs)
        if (id != kNoValue) shape_fixed_[static_cast<std::size_t>(id)] = 1;
}

std::size_t CompiledGraph::symbol_index(const std::string& symbol) {
    auto [it, fresh] = probe_symbols_.emplace(symbol, probe_symbols_.size());
    return it->second;
}

Status CompiledGraph::negotiate_layouts() {
    const Graph& g = *graph_;
    const std::size_t nv = g.values.size();
    std::vector<LayoutSupport> support(g.nodes.size());
    bool any = false;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        support[ni] = nodes_[ni].kernel->layout_support(g, g.nodes[ni]);
        any = any || support[ni].layout != 0;
    }
    if (!any) return Status::ok();
    // Candidate values: offered by the producer, accepted by every consumer, same layout id.
    std::vector<int> layout(nv, 0);
    std::vector<bool> pinned(nv, false);  // must stay row-major
    for (ValueId id : g.inputs) pinned[static_cast<std::size_t>(id)] = true;
    for (ValueId id : g.outputs) pinned[static_cast<std::size_t>(id)] = true;
    for (std::size_t v = 0; v < nv; ++v)
        if (g.values[v].initializer || g.values[v].is_capture) pinned[v] = true;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
        for (const auto& sub : nodes_[ni].subgraphs)
            for (const auto& [lvl, id] : sub->outer_refs_)
                if (lvl == 1) pinned[static_cast<std::size_t>(id)] = true;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        for (std::size_t j = 0; j < n.outputs.size() && j < 64; ++j) {
            const ValueId id = n.outputs[j];
            if (id != kNoValue && (support[ni].outputs >> j & 1u) && !pinned[static_cast<std::size_t>(id)])
                layout[static_cast<std::size_t>(id)] = support[ni].layout;
        }
    }
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        for (std::size_t i = 0; i < n.inputs.size(); ++i) {
            const ValueId id = n.inputs[i];
            if (id == kNoValue) continue;
            const bool ok = i < 64 && (support[ni].inputs >> i & 1u) &&
                            support[ni].layout == layout[static_cast<std::size_t>(id)];
            if (!ok) layout[static_cast<std::size_t>(id)] = 0;
        }
    }
    // Uniform kernels: all offered slots agree, else all go row-major. Iterate to a fixed point.
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
            if (!support[ni].uniform) continue;
            const Node& n = g.nodes[ni];
            bool all = true;
            auto visit = [&](const std::vector<ValueId>& slots, std::uint64_t mask, auto&& f) {
                for (std::size_t i = 0; i < slots.size() && i < 64; ++i)
                    if ((mask >> i & 1u) && slots[i] != kNoValue) f(static_cast<std::size_t>(slots[i]));
            };
            auto check = [&](std::size_t v) { all = all && layout[v] != 0; };
            visit(n.inputs, support[ni].inputs, check);
            visit(n.outputs, support[ni].outputs, check);
            if (all) continue;
            auto clear = [&](std::size_t v) {
                if (layout[v] != 0) {
                    layout[v] = 0;
                    changed = true;
                }
            };
            visit(n.inputs, support[ni].inputs, clear);
            visit(n.outputs, support[ni].outputs, clear);
        }
    }
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        if (support[ni].layout == 0) continue;
        const Node& n = g.nodes[ni];
        std::uint64_t in = 0, out = 0;
        for (std::size_t i = 0; i < n.inputs.size() && i < 64; ++i)
            if (n.inputs[i] != kNoValue && layout[static_cast<std::size_t>(n.inputs[i])] != 0)
                in |= std::uint64_t{1} << i;
        for (std::size_t j = 0; j < n.outputs.size() && j < 64; ++j)
            if (n.outputs[j] != kNoValue && layout[static_cast<std::size_t>(n.outputs[j])] != 0)
                out |= std::uint64_t{1} << j;
        if (in == 0 && out == 0) continue;
        Status st = nodes_[ni].kernel->use_layouts(in, out);
        if (!st.is_ok()) return st.with_context(node_context(n));
        ++blocked_nodes_;
    }
    return Status::ok();
}

namespace {

/// Ops whose kernels (reference, fast, oneDNN) compute output element i from input element i
/// only, reading it before writing, so output 0 may share the block of the first input of the
/// output's dtype and shape (oneDNN's src0) when that input dies at the node. Pow is not here
/// (its exponent-1 path is a memcpy), nor ops whose outputs change dtype.
bool elementwise_in_place(const Node& n) {
    static constexpr const char* kOps[] = {
        "Relu", "LeakyRelu", "Elu", "Sigmoid", "Tanh", "Erf", "Exp", "Sqrt", "Abs", "Neg",
        "Reciprocal", "Floor", "Ceil", "HardSwish", "Add", "Sub", "Mul", "Div"};
    if (!n.domain.empty() || n.outputs.size() != 1) return false;
    return std::any_of(std::begin(kOps), std::end(kOps),
                       [&](const char* op) { return n.op_type == op; });
}

/// The in-place rule of node n (CompiledGraph::inplace_op_): 0 none, 1 elementwise (the first
/// input of the output's dtype and shape), k + 2 only input k. FusedConv's residual Z (input 3)
/// is summed into Y by every kernel that runs it (oneDNN's sum post-op; the reference kernel
/// saves Z first), so Y may take Z's block.
char inplace_rule(const Node& n) {
    if (elementwise_in_place(n)) return 1;
    if (n.op_type == "FusedConv" && n.domain == kDsinferDomain && n.outputs.size() == 1 &&
        n.inputs.size() > 3 && n.inputs[3] != kNoValue)
        return 3 + 2;
    return 0;
}

}  // namespace

void CompiledGraph::plan_lifetimes() {
    const Graph& g = *graph_;
    std::vector<std::int32_t> last_use(g.values.size(), -1);
    std::vector<char> captured(g.values.size(), 0);
    def_step_.assign(g.values.size(), -1);
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        for (ValueId id : g.nodes[ni].inputs)
            if (id != kNoValue) last_use[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(ni);
        // Values read by subgraphs (captures) live until the node that runs them.
        for (const auto& sub : nodes_[ni].subgraphs)
            for (const auto& [lvl, id] : sub->outer_refs_)
                if (lvl == 1) {
                    last_use[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(ni);
                    captured[static_cast<std::size_t>(id)] = 1;
                }
        // Outputs nobody reads are released right after their node.
        for (ValueId id : g.nodes[ni].outputs) {
            if (id == kNoValue) continue;
            def_step_[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(ni);
            if (last_use[static_cast<std::size_t>(id)] < 0)
                last_use[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(ni);
        }
    }
    std::vector<bool> keep(g.values.size(), false);
    for (ValueId id : g.outputs) keep[static_cast<std::size_t>(id)] = true;
    // Values that descendants read through captures must survive the whole run of this frame
    // only if read by a later node — handled above; values an *ancestor* provides are not ours.
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        if (keep[v] || last_use[v] < 0 || g.values[v].initializer) continue;
        nodes_[static_cast<std::size_t>(last_use[v])].release_after.push_back(static_cast<ValueId>(v));
    }
    last_step_ = std::move(last_use);
    // Arena candidates: intermediates that neither escape (graph outputs) nor are read by a
    // subgraph (a body may hand a captured value back as the control-flow node's output).
    plannable_.assign(g.values.size(), 0);
    inplace_op_.assign(g.nodes.size(), 0);
    if (!plan_memory_) return;
    for (std::size_t v = 0; v < g.values.size(); ++v)
        plannable_[v] = def_step_[v] >= 0 && !keep[v] && !captured[v] && !g.values[v].initializer;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
        inplace_op_[ni] = inplace_rule(g.nodes[ni]);
}

// ---- memory planning ------------------------------------------------------------------------

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
    std::vector<Tensor> node_inputs, prepare_inputs, out_tensors, dynamic;
    std::vector<TensorView> in_views, out_views;
};

/// Everything a run of this graph needs besides its memory plan: the frame (initializer
/// handles filled once), the node vectors and the shape key.
struct CompiledGraph::RunScratch {
    Frame frame;
    NodeScratch nodes;
    std::vector<std::int64_t> key, bucket;
    /// Storage for the control block of the run's arena handle (one shared_ptr per run,
    /// whose last reference goes when the run's tensors do): no heap allocation for it.
    alignas(std::max_align_t) unsigned char arena_ctrl[192];
    bool arena_ctrl_used = false;
};

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

Status CompiledGraph::upload_constants() {
    const Graph& g = *graph_;
    device_constants_.assign(g.values.size(), Tensor());
    DSINFER_RETURN_IF_ERROR(device_->activate());
    DSINFER_ASSIGN_OR_RETURN(void* stream, device_->acquire_stream());
    Status st;
    for (std::size_t ni = 0; ni < g.nodes.size() && st.is_ok(); ++ni) {
        const CompiledNode& cn = nodes_[ni];
        if (!cn.on_device) continue;
        const Node& n = g.nodes[ni];
        for (std::size_t k = 0; k < n.inputs.size() && st.is_ok(); ++k) {
            if (n.inputs[k] == kNoValue || (k < 64 && ((cn.host_inputs >> k) & 1u) != 0)) continue;
            const auto v = static_cast<std::size_t>(n.inputs[k]);
            const auto& init = g.values[v].initializer;
            if (!init || !device_constants_[v].is_null() || init->dtype() == DType::string) continue;
            if (init->raw_data() == nullptr && init->num_bytes() > 0) continue;  // released to its kernels
            auto t = Tensor::allocate(init->dtype(), init->shape(), *device_->pool());
            if (!t.is_ok()) {
                st = t.status().with_context(node_context(n));
                break;
            }
            st = device_->copy_to_device(t.value().raw_data(), init->raw_data(), init->num_bytes(), stream);
            device_constants_[v] = std::move(t).value();
        }
    }
    const Status sync = device_->synchronize(stream);
    device_->release_stream(stream);
    DSINFER_RETURN_IF_ERROR(st);
    return sync;
}

NodePlacement CompiledGraph::placement() const {
    NodePlacement p;
    if (device_) p.device = device_->device().to_string() + " (" + device_->description() + ")";
    p.device_nodes = device_nodes_;
    p.fallback_nodes = nodes_.size() - device_nodes_;
    p.host_to_device_bytes = transfers_.h2d.load(std::memory_order_relaxed);
    p.device_to_host_bytes = transfers_.d2h.load(std::memory_order_relaxed);
    p.transfers = transfers_.copies.load(std::memory_order_relaxed);
    p.graph_replays = transfers_.replays.load(std::memory_order_relaxed);
    return p;
}

WeightMemoryStats CompiledGraph::weight_memory() const {
    WeightMemoryStats s;
    s.released_bytes = released_constant_bytes_;
    const Graph& g = *graph_;
    // Per constant: the distinct buffers that hold its numbers (the graph's data, kernels'
    // stored and packed copies). Buffers are counted once however many kernels share them.
    std::map<ValueId, std::vector<const void*>> same;
    std::vector<const void*> counted;
    auto first_sight = [&counted](const void* p) {
        if (std::find(counted.begin(), counted.end(), p) != counted.end()) return false;
        counted.push_back(p);
        return true;
    };
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        const auto& init = g.values[v].initializer;
        if (!init || init->raw_data() == nullptr) continue;
        s.graph_bytes += init->num_bytes();
        (void)first_sight(init->raw_data());
        same[static_cast<ValueId>(v)].push_back(init->raw_data());
    }
    std::vector<ConstantForm> forms;
    for (std::size_t ni = 0; ni < nodes_.size(); ++ni) {
        const Node& n = g.nodes[ni];
        forms.clear();
        nodes_[ni].kernel->constant_forms(forms);
        for (const ConstantForm& f : forms) {
            if (f.data == nullptr || f.input < 0 || static_cast<std::size_t>(f.input) >= n.inputs.size() ||
                n.inputs[static_cast<std::size_t>(f.input)] == kNoValue)
                continue;
            const bool fresh = first_sight(f.data);
            if (f.kind == ConstantForm::Kind::derived) {
                if (fresh) s.derived_bytes += f.bytes;
                continue;
            }
            if (fresh) s.packed_bytes += f.bytes;
            auto& bufs = same[n.inputs[static_cast<std::size_t>(f.input)]];
            if (std::find(bufs.begin(), bufs.end(), f.data) == bufs.end()) bufs.push_back(f.data);
        }
        for (const auto& sub : nodes_[ni].subgraphs) {
            const WeightMemoryStats inner = sub->weight_memory();
            s.graph_bytes += inner.graph_bytes;
            s.released_bytes += inner.released_bytes;
            s.packed_bytes += inner.packed_bytes;
            s.derived_bytes += inner.derived_bytes;
            s.held_twice.insert(s.held_twice.end(), inner.held_twice.begin(), inner.held_twice.end());
        }
    }
    for (const auto& [v, bufs] : same)
        if (bufs.size() > 1) s.held_twice.push_back(g.value(v).name);
    return s;
}

bool CompiledGraph::decide_graphable() const {
    const Graph& g = *graph_;
    if (device_nodes_ == 0) return false;
    // Values produced by shape-derived host nodes (fixed for a shape class).
    std::vector<char> fixed(g.values.size(), 0);
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) fixed[v] = 1;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        if (!cn.subgraphs.empty()) return false;
        if (!cn.on_device) {
            // Host work is allowed only where it depends on shapes alone (it runs at capture).
            if (!cn.shape_derived) return false;
            for (ValueId out : n.outputs)
                if (out != kNoValue) fixed[static_cast<std::size_t>(out)] = 1;
            continue;
        }
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            if (n.inputs[k] == kNoValue) continue;
            const bool host = k < 64 && ((cn.host_inputs >> k) & 1u) != 0;
            if (host && !fixed[static_cast<std::size_t>(n.inputs[k])]) return false;
        }
    }
    // Graph outputs must come from the device (their buffers are the graph's).
    for (ValueId out : g.outputs)
        if (fixed[static_cast<std::size_t>(out)] || std::find(g.inputs.begin(), g.inputs.end(), out) != g.inputs.end())
            return false;
    return true;
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

// Plan keys (into `key`, whose capacity is kept): a marker (1 exact, 0 bucket), then per input
// its dtype, rank and dims; a bucket key has each symbolic dim's bucket edge instead.
void CompiledGraph::exact_key(const std::vector<Tensor>& inputs, std::vector<std::int64_t>& key) const {
    key.clear();
    key.push_back(1);
    for (const Tensor& t : inputs) {
        key.push_back(static_cast<std::int64_t>(t.dtype()));
        key.push_back(t.num_dims());
        for (int d = 0; d < t.num_dims(); ++d) key.push_back(t.shape()[d]);
    }
}

void CompiledGraph::bucket_key(const std::vector<Tensor>& inputs, std::vector<std::int64_t>& key) const {
    key.clear();
    key.push_back(0);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& t = inputs[i];
        const std::vector<char>& sym = input_symbolic_[i];
        key.push_back(static_cast<std::int64_t>(t.dtype()));
        key.push_back(t.num_dims());
        for (int d = 0; d < t.num_dims(); ++d) {
            // A declared static dim keeps its value (a run with another fails in a kernel).
            const bool symbolic = sym.empty() || static_cast<std::size_t>(d) >= sym.size() ||
                                  sym[static_cast<std::size_t>(d)] != 0;
            key.push_back(symbolic ? bucket_edge(t.shape()[d]) : t.shape()[d]);
        }
    }
}

namespace {

/// Byte size of dtype x shape, 0 on overflow (such tensors are never planned).
std::size_t tensor_bytes(DType dtype, const Shape& shape) {
    const auto n = shape.num_elements();
    const auto esize = dtype_size(dtype);
    if (n < 0 || static_cast<std::uint64_t>(n) > SIZE_MAX / esize) return 0;
    return static_cast<std::size_t>(n) * esize;
}

/// The input output 0 of an in-place capable node may share: the first with its dtype and
/// shape (for binary ops, the operand oneDNN takes as src0), or -1.
int inplace_slot(char rule, const std::vector<Tensor>& inputs, DType dtype, const Shape& shape) {
    auto fits = [&](std::size_t k) {
        return k < inputs.size() && !inputs[k].is_null() && inputs[k].dtype() == dtype &&
               inputs[k].shape() == shape;
    };
    if (rule >= 2) return fits(static_cast<std::size_t>(rule - 2)) ? rule - 2 : -1;
    for (std::size_t k = 0; k < inputs.size(); ++k)
        if (fits(k)) return static_cast<int>(k);
    return -1;
}

/// A copy of `t` from `alloc` (used for tensors that must not stay in an arena).
StatusOr<Tensor> copy_to(const Tensor& t, Allocator& alloc) {
    DSINFER_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(t.dtype(), t.shape(), alloc));
    if (t.dtype() == DType::string) {
        for (std::int64_t i = 0; i < t.num_elements(); ++i)
            c.data<std::string>()[i] = t.data<std::string>()[i];
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

}  // namespace

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
    plan->bucket = !key.empty() && key.front() == 0;  // bucket_key's marker
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

bool CompiledGraph::off_bucket_edges(const std::vector<Tensor>& inputs) const noexcept {
    for (std::size_t i = 0; i < inputs.size() && i < input_symbolic_.size(); ++i) {
        const Tensor& t = inputs[i];
        const std::vector<char>& sym = input_symbolic_[i];
        for (int d = 0; d < t.num_dims(); ++d) {
            const bool symbolic = sym.empty() || static_cast<std::size_t>(d) >= sym.size() ||
                                  sym[static_cast<std::size_t>(d)] != 0;
            if (symbolic && bucket_edge(t.shape()[d]) != t.shape()[d]) return true;
        }
    }
    return false;
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
        // With transient shapes, the edges themselves run with a full prepare, the shapes inside
        // the bucket with a transient one (PrepareContext::transient_shape): the workspace
        // serves both. A shape's own plan takes the prepare its runs take.
        PrepareContext transient(n, node_ins, /*inferring=*/false);
        transient.set_transient_shape(true);
        PrepareContext ctx(n, std::move(ins), /*inferring=*/false);
        ctx.set_transient_shape(!at_edges && transient_shapes_);
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
        ins = std::move(ctx.mutable_inputs());
        rec.workspace_bytes[ni] = std::max(ctx.workspace_bytes(), both ? transient.workspace_bytes() : 0);
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (!ctx.has_output(i)) continue;
            const auto& spec = ctx.output_spec(i);
            if (!spec.set || spec.dynamic) return false;
            const ValueId id = n.outputs[static_cast<std::size_t>(i)];
            const auto v = static_cast<std::size_t>(id);
            if (plannable_[v] && spec.dtype != DType::string) {
                rec.value_bytes[v] = tensor_bytes(spec.dtype, spec.shape);
                if (rec.value_bytes[v] > 0) note_inplace(rec, ni, id, spec.dtype, spec.shape, node_ins);
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
                                 const Shape& shape, const std::vector<Tensor>& inputs) const {
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

std::shared_ptr<CompiledGraph::CapturedRun> CompiledGraph::find_captured(
    const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(graphs_.mu);
    return lru_find(graphs_.lru, key);
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
            Status st = cn.kernel->prepare(*pctx);
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

namespace {

/// Sets up a frame: initializers, inputs, captures.
void fill_frame(Frame& frame, const Graph& g, const std::vector<Tensor>& inputs) {
    frame.values.resize(g.values.size());
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) frame.values[v] = *g.values[v].initializer;
    for (std::size_t i = 0; i < inputs.size(); ++i)
        frame.values[static_cast<std::size_t>(g.inputs[i])] = inputs[i];
}

}  // namespace

Status CompiledGraph::replay(CapturedRun& run, const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
    DSINFER_RETURN_IF_ERROR(device_->health());
    DSINFER_RETURN_IF_ERROR(device_->activate());
    DeviceScope dev(device_.get());
    DSINFER_ASSIGN_OR_RETURN(dev.stream, device_->acquire_stream());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& b = run.inputs[i];
        if (b.ptr == nullptr) continue;
        if (!(inputs[i].shape() == b.shape) || inputs[i].dtype() != b.dtype)
            return Status::error(ErrorCode::internal, "captured graph replayed with another shape class");
        const void* src = inputs[i].raw_data();
        if (void* pin = dev.staging(inputs[i].num_bytes())) {
            std::memcpy(pin, src, inputs[i].num_bytes());
            src = pin;
        }
        DSINFER_RETURN_IF_ERROR(device_->copy_to_device(b.ptr, src, inputs[i].num_bytes(), dev.stream));
        transfers_.h2d.fetch_add(inputs[i].num_bytes(), std::memory_order_relaxed);
        transfers_.copies.fetch_add(1, std::memory_order_relaxed);
    }
    DSINFER_RETURN_IF_ERROR(device_->replay(run.exec.get(), dev.stream));
    outputs.clear();
    std::vector<void*> pins(run.outputs.size(), nullptr);
    for (std::size_t k = 0; k < run.outputs.size(); ++k) {
        const auto& b = run.outputs[k];
        DSINFER_ASSIGN_OR_RETURN(Tensor h, Tensor::allocate(b.dtype, b.shape, *allocator_));
        pins[k] = dev.staging(h.num_bytes());
        DSINFER_RETURN_IF_ERROR(device_->copy_to_host(pins[k] != nullptr ? pins[k] : h.raw_data(),
                                                      b.ptr, h.num_bytes(), dev.stream));
        transfers_.d2h.fetch_add(h.num_bytes(), std::memory_order_relaxed);
        transfers_.copies.fetch_add(1, std::memory_order_relaxed);
        if (bind_outputs_to_pool_) h = MemoryPool::bind(pool_, std::move(h));
        outputs.push_back(std::move(h));
    }
    DSINFER_RETURN_IF_ERROR(device_->synchronize(dev.stream));
    DSINFER_RETURN_IF_ERROR(check_device_errors(&dev, run.error_slots));
    for (std::size_t k = 0; k < outputs.size(); ++k)
        if (pins[k] != nullptr) std::memcpy(outputs[k].raw_data(), pins[k], outputs[k].num_bytes());
    transfers_.replays.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
}

Status CompiledGraph::capture_and_run(const std::vector<Tensor>& inputs,
                                      const std::vector<std::int64_t>& key,
                                      const ExecutionPlan& plan, const RunControl& control,
                                      std::vector<Tensor>& outputs, bool& handled) const {
    const Graph& g = *graph_;
    handled = false;
    auto run = std::make_shared<CapturedRun>();
    run->rt = device_.get();
    std::unique_lock<std::mutex> busy(run->busy);
    auto remember = [&] {
        std::lock_guard<std::mutex> lock(graphs_.mu);
        (void)lru_insert(graphs_.lru, key, run, kMaxCapturedGraphs);
    };
    DSINFER_RETURN_IF_ERROR(device_->health());
    DSINFER_RETURN_IF_ERROR(device_->activate());
    {
        DeviceScope dev(device_.get());
        DSINFER_ASSIGN_OR_RETURN(dev.stream, device_->acquire_stream());
        dev.retain = true;
        // Everything below is allocated for the graph's lifetime (retained).
        Status st;
        {
            Frame frame;
            frame.graph = this;
            frame.other.resize(g.values.size());
            fill_frame(frame, g, inputs);
            RunMemory mem;
            mem.plan = &plan;
            if (plan.arena_bytes > 0) {
                const std::size_t bytes = plan.arena_bytes;
                if (void* p = pool_->allocate_replacing_cache(bytes, kTensorAlignment)) {
                    mem.arena = std::shared_ptr<void>(p, [pool = pool_, bytes](void* q) { pool->deallocate(q, bytes); });
                    mem.base = static_cast<unsigned char*>(p);
                }
            }
            if (plan.device_arena_bytes > 0) {
                const std::size_t bytes = plan.device_arena_bytes;
                if (void* p = dev.allocate(bytes, kTensorAlignment)) {
                    mem.device_arena = std::shared_ptr<void>(p, [](void*) {});
                    mem.device_base = static_cast<unsigned char*>(p);
                }
            }
            // Graph inputs go to fixed device buffers before the capture; replays refill them.
            run->inputs.resize(inputs.size());
            for (std::size_t i = 0; i < inputs.size() && st.is_ok(); ++i) {
                const auto v = static_cast<std::size_t>(g.inputs[i]);
                bool device_reader = false;
                for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
                    for (std::size_t k = 0; k < g.nodes[ni].inputs.size(); ++k)
                        if (g.nodes[ni].inputs[k] == g.inputs[i] && nodes_[ni].on_device &&
                            !(k < 64 && ((nodes_[ni].host_inputs >> k) & 1u) != 0))
                            device_reader = true;
                if (!device_reader) continue;
                auto t = allocate_on(&dev, true, inputs[i].dtype(), inputs[i].shape());
                if (!t.is_ok()) {
                    st = t.status();
                    break;
                }
                st = device_->copy_to_device(t.value().raw_data(), inputs[i].raw_data(), inputs[i].num_bytes(), dev.stream);
                run->inputs[i] = {t.value().raw_data(), inputs[i].dtype(), inputs[i].shape()};
                frame.other[v] = std::move(t).value();
            }
            if (st.is_ok() && reports_device_errors_) {
                auto t = allocate_on(&dev, true, DType::i64, Shape{static_cast<std::int64_t>(4 * g.nodes.size())});
                if (t.is_ok()) run->error_slots = t.value().data<std::int64_t>();
                else st = t.status();
            }
            if (st.is_ok()) st = device_->synchronize(dev.stream);
            if (st.is_ok()) st = device_->begin_capture(dev.stream);
            if (st.is_ok()) {
                Status body = Status::ok();
                if (run->error_slots != nullptr)
                    body = device_->memset_async(run->error_slots, 0, 32 * g.nodes.size(), dev.stream);
                NodeScratch scratch;
                if (body.is_ok())
                    body = run_nodes(frame, mem, &dev, scratch, control, run->error_slots);
                auto exec = device_->end_capture(dev.stream);
                if (!body.is_ok() && body.code() != ErrorCode::internal) {
                    st = body;  // a real error of this run (bad input, limits)
                } else if (!body.is_ok() || !exec.is_ok()) {
                    run->failed = true;  // this class cannot be captured: run it normally
                } else {
                    run->exec = std::move(exec).value();
                    run->outputs.reserve(g.outputs.size());
                    for (ValueId id : g.outputs) {
                        const Tensor& t = frame.values[static_cast<std::size_t>(id)];
                        if (t.is_null() || t.device().kind == DeviceKind::cpu) {
                            run->failed = true;
                            break;
                        }
                        run->outputs.push_back({t.raw_data(), t.dtype(), t.shape()});
                    }
                }
            }
        }  // the frame's tensors are released (retained blocks stay)
        const Status sync = device_->synchronize(dev.stream);
        run->owned = std::move(dev.retained);
        dev.retained.clear();
        DSINFER_RETURN_IF_ERROR(st);
        DSINFER_RETURN_IF_ERROR(sync);
    }
    if (run->failed) {
        // Keep only the verdict: the capture run's memory goes back now (its stream is idle).
        run->exec.reset();
        for (const auto& [p, cls] : run->owned) device_->pool()->deallocate(p, cls);
        run->owned.clear();
        remember();
        return Status::ok();
    }
    handled = true;
    Status st = replay(*run, inputs, outputs);
    if (st.is_ok() || st.code() != ErrorCode::internal) remember();
    return st;
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
