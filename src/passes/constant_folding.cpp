// Pass "constant_folding" (level 1): evaluates nodes whose value is known at load and replaces
// them by initializers.
//
// Folded, in one topological sweep (a folded output makes its readers foldable):
// - nodes whose inputs are all initializers (or omitted), Constant nodes included;
// - Shape and Size of a value whose shape is static (declared, or inferred as below);
// - Gather/Slice/Concat/Unsqueeze/Squeeze/Reshape/Flatten/Identity/Cast-to-integer chains over
//   the Shape of a value with symbolic dims, when the elements they select are static dims
//   (e.g. Gather(Shape(x), 2) = 768 for x [batch, seq, 768]). Decided by evaluating the chain
//   twice with different placeholder values for the symbolic dims: equal results do not depend
//   on them. Only element-selecting ops take placeholders, and only in their data inputs.
//
// Evaluation goes through OptimizeOptions::evaluator (kernel_evaluator(): a one-node Graph,
// inputs as initializers, compiled by the executor with the reference kernels and run). The
// evaluator sizes the outputs before computing them, so an output over
// OptimizeOptions::max_folded_bytes (or of unknown size: dynamic outputs) is refused before
// anything is allocated or computed. A node it cannot evaluate stays as it is (the engine
// reports the error, if any, when it runs). Without an evaluator only Constant nodes fold.
// Never folded: random ops (RandomNormal*, RandomUniform*, Multinomial, Bernoulli), nodes with
// subgraphs, DequantizeLinear (quantized weights stay quantized), non-tensor values.
//
// fold_weight_dequantize (level 2, right after fuse_qdq): folds the DequantizeLinear nodes of
// constants that fuse_qdq left read by float ops (a weight-only INT8 model: its weights are
// stored 8-bit and used as float32 constants, so the float kernels pack them once; DQs only
// fused islands read are skipped: dead-code elimination drops them).
//
// Shapes of intermediate values: when a Shape/Size reads a node output whose shape is not
// static, annotate_shapes() (the evaluator's load-time inference) first writes the inferred
// dtypes/shapes into the graph.
// Subgraphs are folded too (their captured values are not constants). Counts one per folded
// node.
#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <unordered_map>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

bool never_folded(const Node& n) {
    static const char* const kOps[] = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                       "RandomUniformLike", "Multinomial", "Bernoulli",
                                       "DequantizeLinear"};
    if (n.domain.empty())
        for (const char* op : kOps)
            if (n.op_type == op) return true;
    for (const auto& [name, a] : n.attributes)
        if (a.kind == AttrKind::g || a.kind == AttrKind::graphs) return true;
    return false;
}

/// Ops whose outputs only select or rearrange elements of their data inputs (which may carry
/// shape placeholders); every other input must be a constant.
bool selects_elements(const Node& n, std::size_t input) {
    if (!n.domain.empty()) return false;
    const std::string& op = n.op_type;
    if (op == "Concat") return true;
    if (input != 0) return false;
    if (op == "Cast") {
        const Attribute* to = n.find_attr("to");
        return to != nullptr && to->kind == AttrKind::i &&
               (to->i == to_onnx_dtype(DType::i64) || to->i == to_onnx_dtype(DType::i32));
    }
    return op == "Gather" || op == "Slice" || op == "Unsqueeze" || op == "Squeeze" ||
           op == "Reshape" || op == "Flatten" || op == "Identity";
}

/// A data-free tensor of `shape` (Shape and Size read only the shape).
Tensor meta_tensor(DType dtype, const Shape& shape) {
    return Tensor::wrap(nullptr, dtype, shape, Device{}, std::make_shared<int>(0));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && a.dtype() != DType::string &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

class Folder {
public:
    Folder(Graph& g, const std::vector<OpsetImport>& opsets, const PassContext& ctx,
           bool subgraph, bool only_dequantize = false)
        : g_(g),
          opsets_(opsets),
          evaluator_(ctx.options.evaluator),
          max_bytes_(ctx.options.max_folded_bytes),
          subgraph_(subgraph),
          only_dequantize_(only_dequantize) {}

    StatusOr<int> run() {
        infer_shapes_if_needed();
        const GraphIndex index(g_);
        Rewriter rw(g_);
        int fired = 0;
        for (std::size_t ni = 0; ni < g_.nodes.size(); ++ni) {
            const Node& n = g_.nodes[ni];
            if (only_dequantize_) {
                if (!n.domain.empty() || n.op_type != "DequantizeLinear" || n.outputs.empty() ||
                    n.outputs[0] == kNoValue ||
                    (index.consumers(n.outputs[0]).empty() && !index.pinned(n.outputs[0])))
                    continue;
            } else if (never_folded(n)) {
                continue;
            }
            bool any_output = false, tensors = true;
            for (ValueId out : n.outputs) {
                if (out == kNoValue) continue;
                any_output = true;
                tensors = tensors && g_.value(out).kind == ValueKind::tensor;
            }
            if (!any_output || !tensors) continue;
            std::vector<Tensor> outs;
            if (fold(n, outs)) {
                for (std::size_t k = 0; k < n.outputs.size(); ++k) {
                    const ValueId out = n.outputs[k];
                    if (out == kNoValue) continue;
                    Value& v = g_.value(out);
                    v.dtype = outs[k].dtype();
                    // A graph output keeps its declared (possibly symbolic) shape.
                    if (!index.pinned(out) || !v.shape.known || v.shape.rank() != outs[k].num_dims())
                        v.shape = SymbolicShape::from(outs[k].shape());
                    v.initializer = std::move(outs[k]);
                }
                rw.remove(static_cast<int>(ni));
                ++fired;
            }
        }
        DSINFER_RETURN_IF_ERROR(rw.commit().status());
        return fired;
    }

private:
    /// Decides and evaluates node `n`; true with `outs` (one per output slot) when folded.
    bool fold(const Node& n, std::vector<Tensor>& outs) {
        bool all_const = true, any_probe = false, probes_ok = true;
        for (std::size_t i = 0; i < n.inputs.size(); ++i) {
            const ValueId in = n.inputs[i];
            if (in == kNoValue || g_.value(in).initializer) continue;
            all_const = false;
            if (probes_.count(in) != 0) {
                any_probe = true;
                probes_ok = probes_ok && selects_elements(n, i);
            } else {
                probes_ok = false;
            }
        }
        if (only_dequantize_ && !all_const) return false;
        if (all_const) {
            // A Constant's tensor attribute becomes the initializer as it is (shared, any size).
            const Attribute* value = n.find_attr("value");
            if (n.domain.empty() && n.op_type == "Constant" && n.attributes.size() == 1 &&
                value != nullptr && value->kind == AttrKind::t && !value->t.is_null() &&
                n.outputs.size() == 1) {
                outs = {value->t};
                return true;
            }
            std::vector<Tensor> ins;
            for (ValueId in : n.inputs)
                ins.push_back(in == kNoValue ? Tensor() : *g_.value(in).initializer);
            return evaluate(n, ins, outs);
        }
        if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size") &&
            n.inputs.size() == 1)
            return fold_shape(n, outs);
        if (any_probe && probes_ok) return fold_probed(n, outs);
        return false;
    }

    /// Shape/Size of a value with a known rank.
    bool fold_shape(const Node& n, std::vector<Tensor>& outs) {
        const Value& x = g_.value(n.inputs[0]);
        if (x.kind != ValueKind::tensor || !x.dtype || !x.shape.known) return false;
        // Loop/Scan bodies' inputs may change shape between iterations whatever they declare.
        if (subgraph_ && std::find(g_.inputs.begin(), g_.inputs.end(), n.inputs[0]) != g_.inputs.end())
            return false;
        if (x.shape.is_static()) {
            std::vector<std::int64_t> dims;
            for (const Dim& d : x.shape.dims) dims.push_back(d.value);
            auto s = Shape::make(dims);
            return s.is_ok() && evaluate(n, {meta_tensor(*x.dtype, s.value())}, outs);
        }
        if (n.op_type != "Shape" || n.outputs[0] == kNoValue) return false;
        // Symbolic dims: evaluate with two placeholder sets; dims equal in both are static.
        std::array<std::vector<Tensor>, 2> probe;
        for (int p = 0; p < 2; ++p) {
            std::vector<std::int64_t> dims;
            for (std::size_t di = 0; di < x.shape.dims.size(); ++di) {
                const Dim& d = x.shape.dims[di];
                dims.push_back(d.is_static() ? d.value
                                             : placeholder(d.symbol.empty()
                                                               ? "#" + std::to_string(n.inputs[0]) +
                                                                     "#" + std::to_string(di)
                                                               : d.symbol,
                                                           p));
            }
            auto s = Shape::make(dims);
            if (!s.is_ok() ||
                !evaluate(n, {meta_tensor(*x.dtype, s.value())}, probe[static_cast<std::size_t>(p)]))
                return false;
        }
        return record_or_fold(n, probe, outs);
    }

    /// A node whose data inputs carry shape placeholders.
    bool fold_probed(const Node& n, std::vector<Tensor>& outs) {
        std::array<std::vector<Tensor>, 2> results;
        for (int p = 0; p < 2; ++p) {
            std::vector<Tensor> ins;
            for (ValueId in : n.inputs) {
                if (in == kNoValue) ins.emplace_back();
                else if (g_.value(in).initializer) ins.push_back(*g_.value(in).initializer);
                else ins.push_back(probes_.at(in)[static_cast<std::size_t>(p)]);
            }
            if (!evaluate(n, ins, results[static_cast<std::size_t>(p)])) return false;
        }
        return record_or_fold(n, results, outs);
    }

    /// Folds when both probes agree on every output; else keeps small results as probes.
    bool record_or_fold(const Node& n, std::array<std::vector<Tensor>, 2>& r,
                        std::vector<Tensor>& outs) {
        bool equal = true;
        for (std::size_t k = 0; k < n.outputs.size(); ++k)
            if (n.outputs[k] != kNoValue) equal = equal && same_bytes(r[0][k], r[1][k]);
        if (equal) {
            outs = std::move(r[0]);
            return true;
        }
        for (std::size_t k = 0; k < n.outputs.size(); ++k) {
            if (n.outputs[k] == kNoValue || r[0][k].num_elements() > 64 ||
                !is_integer(r[0][k].dtype()))
                continue;
            probes_[n.outputs[k]] = {r[0][k], r[1][k]};
        }
        return false;
    }

    /// Placeholder for a symbolic dim in probe p: distinct per symbol and per probe, far from
    /// real dims.
    std::int64_t placeholder(const std::string& symbol, int p) {
        auto [it, fresh] = symbols_.emplace(symbol, static_cast<std::int64_t>(symbols_.size()));
        (void)fresh;
        return (std::int64_t{1} << 26) + 2 * it->second + p;
    }

    /// Node `n` on `inputs` (null Tensor = omitted) by the evaluator; true with `outs` when it
    /// could be evaluated within max_bytes_.
    bool evaluate(const Node& n, const std::vector<Tensor>& inputs, std::vector<Tensor>& outs) {
        if (evaluator_ == nullptr) return false;
        auto r = evaluator_->evaluate(n, inputs, opsets_, max_bytes_);
        // Out of memory fails the load (not a skipped fold): try_run_passes reports it.
        if (r.status().code() == ErrorCode::resource_exhausted) throw std::bad_alloc();
        if (!r.is_ok()) return false;  // leave the node to the engine
        outs = std::move(r).value();
        return outs.size() == n.outputs.size();
    }

    /// Annotates the graph with load-time inferred dtypes/shapes (annotate_shapes) when a
    /// Shape/Size reads a node output whose shape is not static (only then can it help).
    void infer_shapes_if_needed() {
        bool needed = false;
        for (const Node& n : g_.nodes) {
            if (!n.domain.empty() || (n.op_type != "Shape" && n.op_type != "Size") ||
                n.inputs.empty() || n.inputs[0] == kNoValue)
                continue;
            const Value& x = g_.value(n.inputs[0]);
            needed = needed || (x.producer >= 0 && !x.shape.is_static());
        }
        if (needed) annotate_shapes(g_, evaluator_);
    }

    Graph& g_;
    const std::vector<OpsetImport>& opsets_;
    const GraphEvaluator* evaluator_;
    std::uint64_t max_bytes_;
    bool subgraph_;
    bool only_dequantize_;
    std::unordered_map<ValueId, std::array<Tensor, 2>> probes_;
    std::unordered_map<std::string, std::int64_t> symbols_;
};

StatusOr<int> fold_all(Graph& g, const std::vector<OpsetImport>& opsets, PassContext& ctx,
                       bool subgraph, bool only_dequantize = false) {
    Folder f(g, g.opset_imports.empty() ? opsets : g.opset_imports, ctx, subgraph,
             only_dequantize);
    DSINFER_ASSIGN_OR_RETURN(int n, f.run());
    for (Node& node : g.nodes)
        for (auto& [name, a] : node.attributes) {
            (void)name;
            if (a.kind == AttrKind::g && a.g) {
                DSINFER_ASSIGN_OR_RETURN(int k, fold_all(*a.g, opsets, ctx, true, only_dequantize));
                n += k;
            }
            if (a.kind == AttrKind::graphs)
                for (auto& sg : a.graphs)
                    if (sg) {
                        DSINFER_ASSIGN_OR_RETURN(int k, fold_all(*sg, opsets, ctx, true, only_dequantize));
                        n += k;
                    }
        }
    return n;
}

class ConstantFolding final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "constant_folding"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        DSINFER_ASSIGN_OR_RETURN(int n, fold_all(graph, graph.opset_imports, ctx, false));
        ctx.fired(name(), n);
        return Status::ok();
    }
};

class FoldWeightDequantize final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fold_weight_dequantize"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        DSINFER_ASSIGN_OR_RETURN(int n, fold_all(graph, graph.opset_imports, ctx, false, true));
        ctx.fired(name(), n);
        return Status::ok();
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_constant_folding() { return std::make_unique<ConstantFolding>(); }
std::unique_ptr<GraphPass> make_fold_weight_dequantize() {
    return std::make_unique<FoldWeightDequantize>();
}

}  // namespace dsinfer::passes
