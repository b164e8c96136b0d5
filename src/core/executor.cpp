#include "core/executor.hpp"

#include "core/memory_planner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
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
        DSINFER_ASSIGN_OR_RETURN(auto cg,
                                 CompiledGraph::compile(subgraph, options_, self_, depth_ + 1));
        subgraphs_.push_back(cg);
        return std::shared_ptr<SubgraphRunner>(cg);
    }

    bool creating_fallback() const noexcept override { return fallback_; }

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
    const Graph& g = *cg->graph_;
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
    if (options.blocked_layouts) DSINFER_RETURN_IF_ERROR(cg->negotiate_layouts());
    cg->plan_lifetimes();
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
        std::optional<DType> dtype;
        if (!n.inputs.empty() && n.inputs[0] != kNoValue) dtype = g.value(n.inputs[0]).dtype;
        auto candidates = options.registry->find_all(n.op_type, n.domain, opset, options.device, dtype);
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
            ExecCreateContext ctx(n, g, opset, constants, options, this, depth, cn.subgraphs,
                                  std::span<const KernelEntry* const>(candidates).subspan(ci + 1));
            StatusOr<std::unique_ptr<Kernel>> k = Status::error(ErrorCode::internal, "no factory");
            try {
                k = entry->factory(ctx);
            } catch (const std::bad_alloc&) {
                k = Status::error(ErrorCode::resource_exhausted, "out of memory creating kernel");
            } catch (const std::exception& e) {
                k = Status::error(ErrorCode::internal, "kernel factory threw: ", e.what());
            }
            if (k.is_ok()) {
                cn.kernel = std::move(k).value();
                cn.entry = entry;
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
    auto compute = [&](int p, const std::vector<Tensor>& ins, const PrepareContext& ctx) {
        if (!(all_data || shape_only) || !n.domain.empty()) return;
        std::vector<Tensor> outs(n.outputs.size());
        std::vector<TensorView> in_views, out_views(n.outputs.size());
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            const auto& spec = ctx.output_spec(i);
            if (!ctx.has_output(i)) continue;
            if (!spec.set || spec.shape.num_elements() > 1024 || spec.dtype == DType::string)
                return;
            auto t = Tensor::allocate(spec.dtype, spec.shape, *allocator_);
            if (!t.is_ok()) return;
            outs[static_cast<std::size_t>(i)] = std::move(t).value();
            out_views[static_cast<std::size_t>(i)] = outs[static_cast<std::size_t>(i)].view();
        }
        for (std::size_t i = 0; i < ins.size(); ++i)  // meta tensors (no data) keep their shape
            in_views.push_back(n.inputs[i] == kNoValue ? TensorView{} : ins[i].view());
        auto ws = Tensor::allocate(DType::u8, Shape{static_cast<std::int64_t>(ctx.workspace_bytes())},
                                   *allocator_);
        if (!ws.is_ok()) return;
        RunControl control;
        RunContext rctx(n, in_views, out_views, ws.value().raw_data(), ctx.workspace_bytes(),
                        *allocator_, control);
        if (!nodes_[ni].kernel->run(rctx).is_ok()) return;
        for (std::size_t i = 0; i < outs.size(); ++i)
            if (n.outputs[i] != kNoValue && !outs[i].is_null())
                probe_data_[p][static_cast<std::size_t>(n.outputs[i])] = std::move(outs[i]);
    };
    auto prepare = [&](PrepareContext& ctx) -> Status {
        try {
            return nodes_[ni].kernel->prepare(ctx);
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "prepare threw: ", e.what());
        }
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
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (!ctx.has_output(i)) continue;
            const auto& spec = ctx.output_spec(i);
            Value& ov = g.value(n.outputs[static_cast<std::size_t>(i)]);
            if (!spec.set && !spec.dynamic) continue;
            if (!ov.dtype && spec.dtype_known) ov.dtype = spec.dtype;
            if (spec.set && !ov.shape.is_static()) ov.shape = SymbolicShape::from(spec.shape);
        }
        compute(0, ins, ctx);
        for (ValueId id : n.outputs)
            if (id != kNoValue) probe_data_[1][static_cast<std::size_t>(id)] = probe_data_[0][static_cast<std::size_t>(id)];
        return Status::ok();
    }
    // Probes: errors only mean "not known at load" (the placeholders may be invalid).
    const std::vector<Tensor> ins0 = probes[0], ins1 = probes[1];
    PrepareContext c0(n, std::move(probes[0]), true, /*probing=*/true);
    PrepareContext c1(n, std::move(probes[1]), true, /*probing=*/true);
    if (!prepare(c0).is_ok() || !prepare(c1).is_ok()) return Status::ok();
    compute(0, ins0, c0);
    compute(1, ins1, c1);
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
};

/// One run's memory: the plan and its arena, or the recording.
struct CompiledGraph::RunMemory {
    const ExecutionPlan* plan = nullptr;
    std::shared_ptr<void> arena;
    unsigned char* base = nullptr;
    Recording* rec = nullptr;
    bool in_arena(const void* p) const noexcept {
        const auto* c = static_cast<const unsigned char*>(p);
        return base != nullptr && c >= base && c < base + plan->arena_bytes;
    }
};

namespace {

/// Input-shape class key: per input, dtype, rank and dims.
std::vector<std::int64_t> shape_key(const std::vector<Tensor>& inputs) {
    std::vector<std::int64_t> key;
    for (const Tensor& t : inputs) {
        key.push_back(static_cast<std::int64_t>(t.dtype()));
        key.push_back(t.num_dims());
        for (int d = 0; d < t.num_dims(); ++d) key.push_back(t.shape()[d]);
    }
    return key;
}

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

}  // namespace

std::shared_ptr<const ExecutionPlan> CompiledGraph::find_plan(
    const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    for (auto it = plans_.lru.begin(); it != plans_.lru.end(); ++it) {
        if (it->first != key) continue;
        plans_.lru.splice(plans_.lru.begin(), plans_.lru, it);
        return it->second;
    }
    return nullptr;
}

void CompiledGraph::build_plan(std::vector<std::int64_t> key, const Recording& rec) const {
    const std::size_t nv = rec.value_bytes.size();
    const std::size_t nn = rec.workspace_bytes.size();
    // In-place pairs share one block: a value joins its input's block (inputs come first).
    std::vector<std::size_t> block(nv, SIZE_MAX);
    std::vector<PlanItem> items;
    for (std::size_t v = 0; v < nv; ++v) {
        if (rec.value_bytes[v] == 0) continue;
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
        if (rec.workspace_bytes[ni] == 0) continue;
        ws_block[ni] = items.size();
        items.push_back({rec.workspace_bytes[ni], static_cast<std::int32_t>(ni),
                         static_cast<std::int32_t>(ni)});
    }
    const ArenaLayout layout = plan_arena(items);
    auto plan = std::make_shared<ExecutionPlan>();
    plan->value_offset.assign(nv, -1);
    plan->value_bytes = rec.value_bytes;
    plan->inplace_input = rec.inplace_input;
    plan->workspace_offset.assign(nn, -1);
    plan->workspace_bytes = rec.workspace_bytes;
    plan->arena_bytes = layout.peak_bytes;
    std::size_t placed = 0;
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
    plan->stats.planned_peak_bytes = layout.peak_bytes;
    plan->stats.lower_bound_bytes = layout.lower_bound_bytes;
    plan->stats.planned_values = placed;
    std::lock_guard<std::mutex> lock(plans_.mu);
    for (const auto& [k, p] : plans_.lru)
        if (k == key) return;  // a concurrent first run of the class planned it already
    plans_.lru.emplace_front(std::move(key), plan);
    if (plans_.lru.size() > kMaxPlans) plans_.lru.pop_back();
    plans_.last = plan->stats;
}

MemoryPlanStats CompiledGraph::memory_plan_stats() const {
    std::lock_guard<std::mutex> lock(plans_.mu);
    MemoryPlanStats s = plans_.last;
    s.shape_classes = plans_.lru.size();
    return s;
}

StatusOr<Tensor> CompiledGraph::output_tensor(RunMemory& mem, std::size_t ni, ValueId id,
                                              DType dtype, const Shape& shape,
                                              const std::vector<Tensor>& inputs) const {
    const auto v = static_cast<std::size_t>(id);
    if (!plannable_[v] || dtype == DType::string) return Tensor::allocate(dtype, shape, *allocator_);
    const std::size_t bytes = tensor_bytes(dtype, shape);
    const Node& n = graph_->nodes[ni];
    if (mem.rec != nullptr && bytes > 0) {
        mem.rec->value_bytes[v] = bytes;
        if (inplace_op_[ni] && n.outputs[0] == id) {
            const int k = inplace_slot(inplace_op_[ni], inputs, dtype, shape);
            const ValueId in = k < 0 ? kNoValue : n.inputs[static_cast<std::size_t>(k)];
            if (in != kNoValue && last_step_[static_cast<std::size_t>(in)] == static_cast<std::int32_t>(ni) &&
                mem.rec->value_bytes[static_cast<std::size_t>(in)] == bytes)
                mem.rec->inplace_input[v] = in;
        }
    }
    if (mem.plan != nullptr && bytes > 0) {
        const ExecutionPlan& p = *mem.plan;
        if (p.value_offset[v] >= 0 && bytes <= p.value_bytes[v]) {
            unsigned char* at = mem.base + p.value_offset[v];
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
            if (ok) return Tensor::wrap(at, dtype, shape, allocator_->device(), mem.arena);
        }
    }
    return Tensor::allocate(dtype, shape, *allocator_);
}

Status CompiledGraph::execute(const std::vector<Tensor>& inputs, const Frame* outer,
                              const RunControl& control, std::vector<Tensor>& outputs) const {
    const Graph& g = *graph_;
    DSINFER_CHECK(inputs.size() == g.inputs.size(), ErrorCode::invalid_argument, "graph '", g.name,
                  "' takes ", g.inputs.size(), " inputs, got ", inputs.size());
    Frame frame;
    frame.graph = this;
    frame.parent = outer;
    frame.values.resize(g.values.size());
    for (std::size_t v = 0; v < g.values.size(); ++v)
        if (g.values[v].initializer) frame.values[v] = *g.values[v].initializer;
    for (std::size_t i = 0; i < inputs.size(); ++i)
        frame.values[static_cast<std::size_t>(g.inputs[i])] = inputs[i];
    for (const Capture& c : captures_) {
        const Frame* f = outer;
        for (int l = 1; l < c.levels_up && f != nullptr; ++l) f = f->parent;
        DSINFER_ASSERT(f != nullptr, "capture frame missing for '", g.value(c.id).name, "'");
        frame.values[static_cast<std::size_t>(c.id)] = f->values[static_cast<std::size_t>(c.outer)];
    }
    // Memory: this shape class's plan and one arena for it, or a recording that makes the plan.
    RunMemory mem;
    Recording rec;
    std::shared_ptr<const ExecutionPlan> plan;
    std::vector<std::int64_t> key;
    if (plan_memory_) {
        key = shape_key(inputs);
        plan = find_plan(key);
        if (!plan) {
            rec.value_bytes.assign(g.values.size(), 0);
            rec.inplace_input.assign(g.values.size(), kNoValue);
            rec.workspace_bytes.assign(g.nodes.size(), 0);
            mem.rec = &rec;
        } else if (plan->arena_bytes > 0) {
            // Without an arena (the pool's limit), the run allocates tensor by tensor. A new
            // arena replaces idle cached blocks (the recording run's) instead of adding to them.
            const std::size_t bytes = plan->arena_bytes;
            if (void* p = pool_->allocate_replacing_cache(bytes, kTensorAlignment)) {
                mem.arena = std::shared_ptr<void>(
                    p, [pool = pool_, bytes](void* q) { pool->deallocate(q, bytes); });
                mem.base = static_cast<unsigned char*>(p);
                mem.plan = plan.get();
            }
        }
    }

    std::vector<Tensor> node_inputs;
    std::vector<TensorView> in_views, out_views;
    std::vector<Tensor> out_tensors;
    // Profiling covers the top-level graph only (subgraphs run inside their node's time).
    std::vector<double>* node_ms = outer == nullptr ? control.node_ms : nullptr;
    if (node_ms != nullptr) node_ms->resize(g.nodes.size(), 0.0);
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        DSINFER_RETURN_IF_ERROR(control.check());
        const auto t_node = node_ms != nullptr ? std::chrono::steady_clock::now()
                                               : std::chrono::steady_clock::time_point{};
        const Node& n = g.nodes[ni];
        const CompiledNode& cn = nodes_[ni];
        node_inputs.clear();
        for (ValueId id : n.inputs) {
            if (id == kNoValue) {
                node_inputs.emplace_back();
                continue;
            }
            const Tensor& t = frame.values[static_cast<std::size_t>(id)];
            if (t.is_null())
                return Status::error(ErrorCode::internal, node_context(n), "input '",
                                     g.value(id).name, "' has no value at run time");
            node_inputs.push_back(t);
        }
        PrepareContext pctx(n, node_inputs, /*inferring=*/false);
        Status st = cn.kernel->prepare(pctx);
        if (!st.is_ok()) return st.with_context(node_context(n));

        out_views.assign(n.outputs.size(), TensorView{});
        out_tensors.assign(n.outputs.size(), Tensor());
        for (int i = 0; i < pctx.num_outputs(); ++i) {
            if (!pctx.has_output(i)) continue;
            const auto& spec = pctx.output_spec(i);
            if (spec.dynamic) continue;
            if (!spec.set)
                return Status::error(ErrorCode::internal, node_context(n),
                                     "kernel did not define output ", i);
            auto t = output_tensor(mem, ni, n.outputs[static_cast<std::size_t>(i)], spec.dtype,
                                   spec.shape, node_inputs);
            if (!t.is_ok()) return t.status().with_context(node_context(n));
            out_tensors[static_cast<std::size_t>(i)] = std::move(t).value();
            out_views[static_cast<std::size_t>(i)] = out_tensors[static_cast<std::size_t>(i)].view();
        }
        Tensor workspace;
        void* workspace_data = nullptr;
        if (const std::size_t wb = pctx.workspace_bytes(); wb > 0) {
            if (mem.rec != nullptr) mem.rec->workspace_bytes[ni] = wb;
            if (mem.plan != nullptr && mem.plan->workspace_offset[ni] >= 0 &&
                wb <= mem.plan->workspace_bytes[ni]) {
                workspace_data = mem.base + mem.plan->workspace_offset[ni];
            } else {
                auto w = Tensor::allocate(DType::u8, Shape{static_cast<std::int64_t>(wb)}, *allocator_);
                if (!w.is_ok()) return w.status().with_context(node_context(n));
                workspace = std::move(w).value();
                workspace_data = workspace.raw_data();
            }
        }
        in_views.clear();
        for (const Tensor& t : node_inputs) in_views.push_back(t.is_null() ? TensorView{} : t.view());
        RunContext rctx(n, in_views, out_views, workspace_data, pctx.workspace_bytes(),
                        *allocator_, control);
        rctx.set_frame(&frame);
        st = cn.kernel->run(rctx);
        if (!st.is_ok()) return st.with_context(node_context(n));
        for (int i = 0; i < pctx.num_outputs(); ++i) {
            if (!pctx.has_output(i)) continue;
            Tensor& dst = frame.values[static_cast<std::size_t>(n.outputs[static_cast<std::size_t>(i)])];
            if (pctx.output_spec(i).dynamic) {
                dst = std::move(rctx.dynamic_output(i));
                if (dst.is_null())
                    return Status::error(ErrorCode::internal, node_context(n),
                                         "kernel did not produce dynamic output ", i);
                // A kernel that passed an input through must not leave it in the arena, whose
                // block is reused once the input dies.
                if (mem.in_arena(dst.raw_data())) {
                    auto c = copy_to(dst, *allocator_);
                    if (!c.is_ok()) return c.status().with_context(node_context(n));
                    dst = std::move(c).value();
                }
            } else {
                dst = std::move(out_tensors[static_cast<std::size_t>(i)]);
            }
        }
        node_inputs.clear();
        for (ValueId id : cn.release_after) frame.values[static_cast<std::size_t>(id)] = Tensor();
        if (node_ms != nullptr)
            (*node_ms)[ni] += std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t_node)
                                  .count();
    }
    outputs.clear();
    for (ValueId id : g.outputs) {
        Tensor t = frame.values[static_cast<std::size_t>(id)];
        if (mem.in_arena(t.raw_data())) {
            DSINFER_ASSIGN_OR_RETURN(t, copy_to(t, *allocator_));
        }
        // Outputs of a caller's pool keep it alive (the default pool is never destroyed).
        if (bind_outputs_to_pool_ && !t.is_null()) t = MemoryPool::bind(pool_, std::move(t));
        outputs.push_back(std::move(t));
    }
    if (mem.rec != nullptr) build_plan(std::move(key), rec);
    return Status::ok();
}

}  // namespace dsinfer::detail
