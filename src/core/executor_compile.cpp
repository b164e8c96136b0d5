// The executor's compile stages (CompiledGraph::compile): kernel selection and creation per
// node, subgraphs, load-time shape inference (probes), layout negotiation, value lifetimes,
// device constants, and whether a run can be captured as a CUDA graph.
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
            ctx.share_parsed_attributes(*this);  // attributes parsed once down the chain
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
    DType weight_precision() const noexcept override { return options_.weight_precision; }
    bool measure_algorithms() const noexcept override { return options_.measure_algorithms; }
    std::shared_ptr<WeightStore> weight_store() const override { return options_.weights; }

private:
    bool fallback_ = false;
    const CompileOptions& options_;
    const CompiledGraph* self_;
    int depth_;
    std::vector<std::shared_ptr<CompiledGraph>>& subgraphs_;
    std::span<const KernelEntry* const> lower_;
};

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
    cg->weights_ = options.weights ? options.weights : std::make_shared<WeightStore>();
    cg->allocator_ = cg->pool_.get();
    cg->bind_outputs_to_pool_ = parent == nullptr && cg->pool_ != default_memory_pool();
    cg->plan_memory_ = parent == nullptr && options.plan_memory;
    cg->device_ = options.device_runtime;
    const Graph& g = *cg->graph_;
    cg->transient_shapes_ = options.transient_shapes;
    cg->serial_small_nodes_ = options.serial_small_nodes;
    cg->prepare_threads_ = options.prepare_threads;
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
    // The store owns every constant from here on (kernels key their forms by them).
    for (const Value& v : g.values)
        if (v.initializer && v.initializer->raw_data() != nullptr)
            cg->weights_->add_constant(v.name, *v.initializer);
    CompileOptions with_store = options;
    with_store.weights = cg->weights_;
    DSINFER_RETURN_IF_ERROR(cg->compile_nodes(with_store, depth));
    for (auto& pd : cg->probe_data_) pd = {};
    cg->shape_fixed_ = {};
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        cg->nodes_[ni].spec_begin = cg->num_output_specs_;
        cg->num_output_specs_ += static_cast<std::uint32_t>(g.nodes[ni].outputs.size());
    }
    if (cg->device_) DSINFER_RETURN_IF_ERROR(cg->upload_constants());
    if (options.blocked_layouts)
        DSINFER_RETURN_IF_ERROR(cg->negotiate_layouts(options.observed_any_layout));
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
            weights_->release_constant(weights_->source(*init));
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
                cn.work_kind = work_kind_of(n);
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
        bool asked_run_data = false;
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            const ValueId id = n.inputs[k];
            if (id == kNoValue || g.value(id).initializer) continue;
            const auto vi = static_cast<std::size_t>(id);
            if (!shape_fixed_[vi]) return f;
            const bool load_known = !probe_data_[0][vi].is_null() && !probe_data_[1][vi].is_null();
            if (ContextAccess::data_queried(c, k) && !load_known) asked_run_data = true;
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
    ContextAccess::set_prepared_state(rctx, ContextAccess::state(ctx).get());
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

Status CompiledGraph::negotiate_layouts(bool observed_any_layout) {
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
        if (g.values[v].initializer || g.values[v].is_capture ||
            (g.values[v].observed && !observed_any_layout))
            pinned[v] = true;
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
        value_blocked_.resize(nv, 0);
        for (std::size_t j = 0; j < n.outputs.size() && j < 64; ++j)
            if (out >> j & 1u) value_blocked_[static_cast<std::size_t>(n.outputs[j])] = 1;
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
/// (its exponent-1 path is a memcpy), nor ops whose outputs change dtype. ONNX Runtime's
/// QLinearAdd / QLinearMul (8-bit A, B and C; a QDQ ResNet's residual joins) are too.
bool elementwise_in_place(const Node& n) {
    static constexpr const char* kOps[] = {
        "Relu", "LeakyRelu", "Elu", "Sigmoid", "Tanh", "Erf", "Exp", "Sqrt", "Abs", "Neg",
        "Reciprocal", "Floor", "Ceil", "HardSwish", "Add", "Sub", "Mul", "Div"};
    if (n.outputs.size() != 1) return false;
    if (n.domain == "com.microsoft") return n.op_type == "QLinearAdd" || n.op_type == "QLinearMul";
    if (!n.domain.empty()) return false;
    return std::any_of(std::begin(kOps), std::end(kOps),
                       [&](const char* op) { return n.op_type == op; });
}

/// The in-place rule of node n (CompiledGraph::inplace_op_): 0 none, 1 elementwise (the first
/// input of the output's dtype and shape), k + 2 only input k. FusedConv's residual Z (input 3)
/// is summed into Y by every kernel that runs it (oneDNN's sum post-op; the reference kernel
/// saves Z first), so Y may take Z's block. So may QLinearConvAdd's (Z input 9: every kernel
/// reads each element of Z just before it writes that element of Y, or reads a copy of Z).
char inplace_rule(const Node& n) {
    if (elementwise_in_place(n)) return 1;
    if (n.op_type == "FusedConv" && n.domain == kDsinferDomain && n.outputs.size() == 1 &&
        n.inputs.size() > 3 && n.inputs[3] != kNoValue)
        return 3 + 2;
    if (n.op_type == "QLinearConvAdd" && n.domain == kDsinferDomain && n.outputs.size() == 1 &&
        n.inputs.size() > 9 && n.inputs[9] != kNoValue)
        return 9 + 2;
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

Status CompiledGraph::upload_constants() {
    const Graph& g = *graph_;
    device_constants_.assign(g.values.size(), Tensor());
    device_forms_.assign(g.values.size(), nullptr);
    DSINFER_RETURN_IF_ERROR(device_->activate());
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const CompiledNode& cn = nodes_[ni];
        if (!cn.on_device) continue;
        const Node& n = g.nodes[ni];
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
            if (n.inputs[k] == kNoValue || (k < 64 && ((cn.host_inputs >> k) & 1u) != 0)) continue;
            const auto v = static_cast<std::size_t>(n.inputs[k]);
            const auto& init = g.values[v].initializer;
            if (!init || !device_constants_[v].is_null() || init->dtype() == DType::string) continue;
            if (init->raw_data() == nullptr && init->num_bytes() > 0) {
                // Released to its kernels (each reads its own copy): runs hand them a view on
                // the device without data, so nothing is copied from the missing host data.
                device_constants_[v] = Tensor::wrap(nullptr, init->dtype(), init->shape(),
                                                    device_->device(), std::make_shared<char>(0));
                continue;
            }
            if (init->raw_data() == nullptr) {
                // Empty and without data: nothing to copy, nothing the store could key it by.
                auto t = Tensor::allocate(init->dtype(), init->shape(), *device_->pool());
                if (!t.is_ok()) return t.status().with_context(node_context(n));
                device_constants_[v] = std::move(t).value();
                continue;
            }
            // The store's device copy: made once, shared with every graph and device kernel
            // that reads this constant on this device.
            auto form = device_constant_form(*weights_, weights_->source(*init), *init, *device_);
            if (!form.is_ok()) return form.status().with_context(node_context(n));
            device_forms_[v] = std::move(form).value();
            device_constants_[v] = *device_forms_[v];
        }
    }
    return Status::ok();
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
    // The store counts each buffer once however many kernels share it; subgraphs share it.
    for (const WeightForm& f : weights_->forms()) {
        if (is_device_target(f.target)) continue;  // host memory only: device copies are in forms()
        if (f.kind == WeightKind::derived) s.derived_bytes += f.bytes;
        else if (f.kind == WeightKind::stored && f.owned && f.layout == "onnx") s.graph_bytes += f.bytes;
        else s.packed_bytes += f.bytes;  // packed copies, and stored copies kernels keep
    }
    s.held_twice = weights_->held_twice();
    auto released = [](const CompiledGraph& cg, auto& self) -> std::uint64_t {
        std::uint64_t bytes = cg.released_constant_bytes_;
        for (const CompiledNode& n : cg.nodes_)
            for (const auto& sub : n.subgraphs) bytes += self(*sub, self);
        return bytes;
    };
    s.released_bytes = released(*this, released);
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

}  // namespace dsinfer::detail
