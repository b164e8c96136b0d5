// Helpers shared by the graph passes (src/passes/): a read-only index of a Graph (producers,
// consumers, pinned values) and the few mutations passes make (add a node or value, rewire
// uses, delete nodes and re-sort).
//
// Rules every pass follows:
// - A value is *pinned* when it is a graph output, is read by name from a subgraph (a
//   capture) or is kept for an observer (Value::observed): a pass may replace the node producing it but must keep producing it under the
//   same ValueId, and must not delete it.
// - A pattern's intermediate values must have all their consumers inside the pattern and must
//   not be pinned (GraphIndex::internal()).
// - Passes mark nodes dead and append replacement nodes; commit() compacts and re-sorts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/passes.hpp"

namespace dsinfer::passes {

class GraphIndex {
public:
    explicit GraphIndex(const Graph& g) : g_(&g) { rebuild(); }

    void rebuild() {
        const Graph& g = *g_;
        consumers_.assign(g.values.size(), {});
        pinned_.assign(g.values.size(), false);
        for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
            for (ValueId in : g.nodes[ni].inputs)
                if (in != kNoValue)
                    consumers_[static_cast<std::size_t>(in)].push_back(static_cast<int>(ni));
        for (ValueId out : g.outputs) pinned_[static_cast<std::size_t>(out)] = true;
        for (std::size_t v = 0; v < g.values.size(); ++v)
            if (g.values[v].observed) pinned_[v] = true;
        std::unordered_set<std::string> captured;
        for (const Node& n : g.nodes) collect_captures(n, captured);
        if (!captured.empty())
            for (std::size_t v = 0; v < g.values.size(); ++v)
                if (captured.count(g.values[v].name) != 0) pinned_[v] = true;
    }

    const Graph& graph() const noexcept { return *g_; }
    const std::vector<int>& consumers(ValueId v) const {
        return consumers_[static_cast<std::size_t>(v)];
    }
    bool pinned(ValueId v) const { return pinned_[static_cast<std::size_t>(v)]; }
    /// Producing node index, or -1 (input, initializer, capture, unset).
    int producer(ValueId v) const {
        return v == kNoValue ? -1 : g_->values[static_cast<std::size_t>(v)].producer;
    }
    /// The producing node when it has op `op` (default domain unless given), else nullptr.
    const Node* producer_op(ValueId v, std::string_view op, std::string_view domain = "") const {
        const int p = producer(v);
        if (p < 0) return nullptr;
        const Node& n = g_->nodes[static_cast<std::size_t>(p)];
        return (n.op_type == op && n.domain == domain) ? &n : nullptr;
    }
    /// The only consumer of `v` when it has exactly one and is not pinned, else -1.
    int sole_consumer(ValueId v) const {
        if (v == kNoValue || pinned(v)) return -1;
        const auto& c = consumers(v);
        return c.size() == 1 ? c[0] : -1;
    }
    /// True if `v` can disappear when the nodes in `pattern` are replaced: not pinned and all
    /// its consumers are in `pattern`.
    bool internal(ValueId v, const std::vector<int>& pattern) const {
        if (v == kNoValue || pinned(v)) return false;
        for (int c : consumers(v)) {
            bool in = false;
            for (int p : pattern) in = in || p == c;
            if (!in) return false;
        }
        return true;
    }
    /// True when `n` has an output 0 and none of its other outputs is read or pinned (a fusion
    /// may then replace `n` by a node computing output 0 only).
    bool only_output0_read(const Node& n) const {
        if (n.outputs.empty() || n.outputs[0] == kNoValue) return false;
        for (std::size_t o = 1; o < n.outputs.size(); ++o)
            if (n.outputs[o] != kNoValue &&
                (pinned(n.outputs[o]) || !consumers(n.outputs[o]).empty()))
                return false;
        return true;
    }
    /// The initializer behind `v`, or nullptr.
    const Tensor* constant(ValueId v) const {
        if (v == kNoValue) return nullptr;
        const Value& val = g_->values[static_cast<std::size_t>(v)];
        return val.initializer ? &*val.initializer : nullptr;
    }
    /// A constant holding exactly one element, converted to double; nullopt otherwise.
    std::optional<double> scalar(ValueId v) const;

private:
    static void collect_captures(const Node& n, std::unordered_set<std::string>& out);

    const Graph* g_;
    std::vector<std::vector<int>> consumers_;
    std::vector<bool> pinned_;
};

/// Staged edits of one graph: nodes to delete and nodes to add, applied by commit().
class Rewriter {
public:
    explicit Rewriter(Graph& g) : g_(&g), dead_(g.nodes.size(), false) {}
    Graph& graph() noexcept { return *g_; }
    void remove(int node) { dead_[static_cast<std::size_t>(node)] = true; }
    bool removed(int node) const { return dead_[static_cast<std::size_t>(node)]; }
    /// Adds a node (placed after every existing node; commit() re-sorts).
    Node& add(std::string op, std::string domain, std::vector<ValueId> inputs,
              std::vector<ValueId> outputs, std::string name);
    /// A fresh value named after `base` (unique in the graph).
    ValueId new_value(const std::string& base, std::optional<DType> dtype = std::nullopt,
                      SymbolicShape shape = {});
    /// A fresh initializer named after `base`.
    ValueId new_constant(const std::string& base, Tensor t);
    /// Makes every node input reading `from` read `to` instead (not graph outputs).
    void replace_uses(ValueId from, ValueId to);
    /// Drops removed nodes, appends added ones, re-sorts and re-links. Returns whether anything
    /// changed.
    StatusOr<bool> commit();
    /// The end of a fusion pass: adds the com.dsinfer opset import when `fired` > 0, commits,
    /// and records `fired` rewrites for `pass`.
    Status finish_fusion(PassContext& ctx, std::string_view pass, int fired);

private:
    std::string unique_name(const std::string& base);

    Graph* g_;
    std::vector<bool> dead_;
    std::vector<Node> added_;
    std::unordered_set<std::string> names_;
    bool names_ready_ = false;
    bool changed_ = false;
    std::uint64_t counter_ = 0;
};

/// The sole consumer of `v` (GraphIndex::sole_consumer) when it is the ai.onnx op `op` and `rw`
/// has not removed it, else nullptr; `idx` is the consumer's index (or -1).
inline const Node* sole_consumer_op(const GraphIndex& ix, const Rewriter& rw, ValueId v,
                                    std::string_view op, int& idx) {
    idx = ix.sole_consumer(v);
    if (idx < 0 || rw.removed(idx)) return nullptr;
    const Node& n = ix.graph().nodes[static_cast<std::size_t>(idx)];
    return n.op_type == op && n.domain.empty() ? &n : nullptr;
}

// Attribute builders for new nodes.
void set_attr(Node& n, const std::string& name, std::int64_t v);
void set_attr(Node& n, const std::string& name, float v);
void set_attr(Node& n, const std::string& name, std::string v);
void set_attr(Node& n, const std::string& name, std::vector<std::int64_t> v);
void set_attr(Node& n, const std::string& name, std::vector<float> v);

/// Adds the com.dsinfer opset import (version 1) to `g` if missing: fused nodes are resolved by
/// the registry through it.
inline void ensure_dsinfer_opset(Graph& g) {
    if (g.opset(kDsinferDomain) == 0)
        g.opset_imports.push_back(OpsetImport{kDsinferDomain, kDsinferOpsetVersion});
}

/// Runs `fn(graph)` on every subgraph attribute of every node, recursively (for passes that
/// also optimize If/Loop/Scan bodies).
Status for_each_subgraph(Graph& g, const std::function<Status(Graph&)>& fn);

/// Runs `fn` on `g` and then on every subgraph (for_each_subgraph order), adding the rewrite
/// counts it returns to `pass` in the report.
Status apply_everywhere(Graph& g, PassContext& ctx, std::string_view pass,
                        const std::function<StatusOr<int>(Graph&)>& fn);

}  // namespace dsinfer::passes

namespace dsinfer::passes {

/// Fills Value::dtype/shape of `g`'s values where the graph lacks them: first with the ops' own
/// rules (detail::annotate_graph_shapes, src/ops/op_info.hpp: no kernel, so an offline tool with
/// no evaluator gets them too); then, only when some node has no rule or left an output unknown
/// and `evaluator` is given, with GraphEvaluator::infer_shapes (kernel_evaluator(): the
/// executor's load-time inference over the reference kernels) for the rest. Fusions that need
/// equal shapes call it once; a graph neither can infer keeps what it had (the real compile
/// reports the error later). Out of memory throws std::bad_alloc (try_run_passes fails the
/// optimization with resource_exhausted).
void annotate_shapes(Graph& g, const GraphEvaluator* evaluator);

/// True when both shapes are known and provably equal (static dims equal, symbolic dims with
/// the same non-empty symbol).
inline bool same_shape(const SymbolicShape& a, const SymbolicShape& b) {
    if (!a.known || !b.known || a.rank() != b.rank()) return false;
    for (int i = 0; i < a.rank(); ++i) {
        const Dim& x = a.dims[static_cast<std::size_t>(i)];
        const Dim& y = b.dims[static_cast<std::size_t>(i)];
        if (x.is_static() != y.is_static()) return false;
        if (x.is_static() ? x.value != y.value : (x.symbol.empty() || x.symbol != y.symbol))
            return false;
    }
    return true;
}

/// The f32 dtype is known for `v` (declared or inferred).
inline bool is_f32(const Value& v) { return v.dtype && *v.dtype == DType::f32; }

}  // namespace dsinfer::passes

#include "ops/activation.hpp"

namespace dsinfer::passes {

/// The activation node `n` computes, as a fused-activation spec (Relu, LeakyRelu, Sigmoid,
/// Tanh, HardSwish, Clip with constant bounds, Gelu of ai.onnx or com.dsinfer); nullopt for
/// anything else.
std::optional<detail::ActivationSpec> match_activation(const GraphIndex& index, const Node& n);

/// Writes the `activation`, `activation_alpha`, `activation_beta` attributes of a fused node.
void set_activation(Node& n, const detail::ActivationSpec& a);

/// For a binary node `n` with one operand `known`, the other operand (kNoValue if neither).
inline ValueId other_operand(const Node& n, ValueId known) {
    if (n.inputs.size() != 2) return kNoValue;
    if (n.inputs[0] == known) return n.inputs[1];
    if (n.inputs[1] == known) return n.inputs[0];
    return kNoValue;
}

/// `n` is the ai.onnx op `op`.
inline bool is_op(const Node& n, std::string_view op) {
    return n.op_type == op && n.domain.empty();
}

/// The elements of an int64 or int32 constant of rank <= 1; nullopt otherwise.
inline std::optional<std::vector<std::int64_t>> constant_ints(const GraphIndex& ix, ValueId v) {
    const Tensor* t = ix.constant(v);
    if (t == nullptr || t->num_dims() > 1) return std::nullopt;
    if (t->dtype() != DType::i64 && t->dtype() != DType::i32) return std::nullopt;
    std::vector<std::int64_t> out(static_cast<std::size_t>(t->num_elements()));
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = t->dtype() == DType::i64 ? t->data_unchecked<std::int64_t>()[i]
                                          : t->data_unchecked<std::int32_t>()[i];
    return out;
}

/// Copies `from`'s attributes into `to` (fused nodes keep the plain op's attributes).
inline void copy_attributes(const Node& from, Node& to) {
    for (const auto& kv : from.attributes) to.attributes.push_back(kv);
}

}  // namespace dsinfer::passes
