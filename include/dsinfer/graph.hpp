// dsinfer/graph.hpp — the graph IR: values, nodes, attributes, subgraphs.
//
// Purpose: an ONNX-shaped, index-based DAG. Values are identified by ValueId (an index into
// Graph::values); nodes refer to values by id, never by pointer. A value is produced by at
// most one node (SSA) or is a graph input, an initializer, or a capture of a name from an
// enclosing graph (subgraphs of If/Loop/Scan). Graph::nodes are kept in topological order once
// sort_topologically() has run (the ONNX importer always runs it).
//
// Ownership/threading: a Graph owns its values, nodes and (through shared_ptr) its subgraphs.
// A Graph is not synchronized: mutate it from one thread; const access is thread-safe.
//
// Usage:
//   dsinfer::Graph g;
//   auto x = g.add_value("x", dsinfer::DType::f32);
//   auto y = g.add_value("y", dsinfer::DType::f32);
//   g.inputs = {x};
//   g.outputs = {y};
//   g.add_node("Relu", {x}, {y});
//   auto st = g.sort_topologically();   // also rejects cycles
#pragma once

#include <algorithm>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer {

using ValueId = std::int32_t;
/// Marks an omitted optional input or output (ONNX's empty name).
inline constexpr ValueId kNoValue = -1;

class Graph;

enum class AttrKind : std::uint8_t {
    undefined, f, i, s, t, g, floats, ints, strings, tensors, graphs, sparse_tensor, type_proto,
    sparse_tensors, type_protos,
};

constexpr std::string_view attr_kind_name(AttrKind k) noexcept {
    switch (k) {
        case AttrKind::undefined: return "undefined";
        case AttrKind::f: return "float";
        case AttrKind::i: return "int";
        case AttrKind::s: return "string";
        case AttrKind::t: return "tensor";
        case AttrKind::g: return "graph";
        case AttrKind::floats: return "floats";
        case AttrKind::ints: return "ints";
        case AttrKind::strings: return "strings";
        case AttrKind::tensors: return "tensors";
        case AttrKind::graphs: return "graphs";
        case AttrKind::sparse_tensor: return "sparse_tensor";
        case AttrKind::type_proto: return "type_proto";
        case AttrKind::sparse_tensors: return "sparse_tensors";
        case AttrKind::type_protos: return "type_protos";
    }
    return "?";
}

/// A node attribute. Only the field matching `kind` is meaningful.
struct Attribute {
    AttrKind kind = AttrKind::undefined;
    float f = 0.0f;
    std::int64_t i = 0;
    std::string s;
    Tensor t;
    std::shared_ptr<Graph> g;
    std::vector<float> floats;
    std::vector<std::int64_t> ints;
    std::vector<std::string> strings;
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Graph>> graphs;
};

namespace detail {
template <class T> struct AttrTraits;
template <> struct AttrTraits<float> {
    static constexpr AttrKind kind = AttrKind::f;
    static const float& get(const Attribute& a) { return a.f; }
};
template <> struct AttrTraits<std::int64_t> {
    static constexpr AttrKind kind = AttrKind::i;
    static const std::int64_t& get(const Attribute& a) { return a.i; }
};
template <> struct AttrTraits<std::string> {
    static constexpr AttrKind kind = AttrKind::s;
    static const std::string& get(const Attribute& a) { return a.s; }
};
template <> struct AttrTraits<Tensor> {
    static constexpr AttrKind kind = AttrKind::t;
    static const Tensor& get(const Attribute& a) { return a.t; }
};
template <> struct AttrTraits<std::shared_ptr<Graph>> {
    static constexpr AttrKind kind = AttrKind::g;
    static const std::shared_ptr<Graph>& get(const Attribute& a) { return a.g; }
};
template <> struct AttrTraits<std::vector<float>> {
    static constexpr AttrKind kind = AttrKind::floats;
    static const std::vector<float>& get(const Attribute& a) { return a.floats; }
};
template <> struct AttrTraits<std::vector<std::int64_t>> {
    static constexpr AttrKind kind = AttrKind::ints;
    static const std::vector<std::int64_t>& get(const Attribute& a) { return a.ints; }
};
template <> struct AttrTraits<std::vector<std::string>> {
    static constexpr AttrKind kind = AttrKind::strings;
    static const std::vector<std::string>& get(const Attribute& a) { return a.strings; }
};
template <> struct AttrTraits<std::vector<Tensor>> {
    static constexpr AttrKind kind = AttrKind::tensors;
    static const std::vector<Tensor>& get(const Attribute& a) { return a.tensors; }
};
}  // namespace detail

/// What kind of thing a value holds. dsinfer executes tensors; sequence/optional values are
/// represented so that the loader can name them in an `unsupported` error.
enum class ValueKind : std::uint8_t { tensor, sequence, optional, map, other };

struct Value {
    std::string name;
    ValueKind kind = ValueKind::tensor;
    /// Element type; nullopt when the model does not declare it and it is not yet inferred.
    std::optional<DType> dtype;
    SymbolicShape shape;
    /// Set for initializers (constant weights).
    std::optional<Tensor> initializer;
    /// Index of the producing node in Graph::nodes, or -1.
    std::int32_t producer = -1;
    /// True for a name this (sub)graph reads from an enclosing graph.
    bool is_capture = false;
    /// Kept visible for an observer (EngineOptions::observed_values): passes treat it as they
    /// treat a graph output (they may replace its producer but keep producing it) and the
    /// executor holds it row-major. Not written to ONNX.
    bool observed = false;
};

struct Node {
    std::string name;
    std::string op_type;
    std::string domain;  ///< "" for the default ai.onnx domain
    std::vector<ValueId> inputs;   ///< kNoValue for an omitted optional input
    std::vector<ValueId> outputs;  ///< kNoValue for an omitted optional output
    std::vector<std::pair<std::string, Attribute>> attributes;

    const Attribute* find_attr(std::string_view attr_name) const noexcept {
        for (const auto& [n, a] : attributes)
            if (n == attr_name) return &a;
        return nullptr;
    }
    /// "node 'name' (OpType)" for messages.
    std::string describe() const {
        return "node '" + (name.empty() ? std::string("<unnamed>") : name) + "' (" +
               (domain.empty() ? "" : domain + ":") + op_type + ")";
    }
    /// Required attribute of type T; invalid_model if missing or of another type. The message
    /// does not name the node: the caller (kernel creation) adds that context.
    template <class T>
    StatusOr<T> attr(std::string_view attr_name) const {
        const Attribute* a = find_attr(attr_name);
        if (a == nullptr)
            return Status::error(ErrorCode::invalid_model, "missing required attribute '",
                                 attr_name, "'");
        return attr_value<T>(attr_name, *a);
    }
    /// Optional attribute of type T with a default; invalid_model if present with another type.
    template <class T>
    StatusOr<T> attr_or(std::string_view attr_name, T fallback) const {
        const Attribute* a = find_attr(attr_name);
        if (a == nullptr) return fallback;
        return attr_value<T>(attr_name, *a);
    }
    bool has_attr(std::string_view attr_name) const noexcept {
        return find_attr(attr_name) != nullptr;
    }

private:
    template <class T>
    StatusOr<T> attr_value(std::string_view attr_name, const Attribute& a) const {
        using Tr = detail::AttrTraits<T>;
        if (a.kind != Tr::kind)
            return Status::error(ErrorCode::invalid_model, "attribute '", attr_name,
                                 "' has type ", attr_kind_name(a.kind), ", expected ",
                                 attr_kind_name(Tr::kind));
        return Tr::get(a);
    }
};

/// What a model file says of itself. load_onnx sets it on the model's graph (not on
/// subgraphs); a graph built in code leaves it empty. save_onnx writes its own IR version and
/// producer ("dsinfer").
struct ModelInfo {
    std::int64_t ir_version = 0;  ///< ONNX IR version; 0 when not read from a file
    std::string producer_name;    ///< the program that wrote the file ("pytorch", "tf2onnx")
    std::string producer_version;
    std::string domain;           ///< the model's reverse-DNS namespace, if any
    std::int64_t model_version = 0;
    /// The model's metadata_props (key, value) in file order (e.g. a decoder's configuration);
    /// save_onnx writes them back.
    std::vector<std::pair<std::string, std::string>> metadata;
};

struct OpsetImport {
    std::string domain;  ///< "" (or "ai.onnx") for the default domain
    std::int64_t version = 0;
};

class Graph {
public:
    std::string name;
    std::vector<Value> values;
    std::vector<Node> nodes;
    std::vector<ValueId> inputs;   ///< graph inputs in declaration order (initializers excluded)
    std::vector<ValueId> outputs;  ///< graph outputs in declaration order
    /// Opset imports of the model; subgraphs share their model's imports.
    std::vector<OpsetImport> opset_imports;
    /// The model file's IR version and producer (the model's graph only).
    ModelInfo model_info;

    ValueId add_value(std::string value_name, std::optional<DType> dtype = std::nullopt,
                      SymbolicShape shape = {}) {
        Value v;
        v.name = std::move(value_name);
        v.dtype = dtype;
        v.shape = std::move(shape);
        values.push_back(std::move(v));
        return static_cast<ValueId>(values.size() - 1);
    }
    ValueId add_initializer(std::string value_name, Tensor t) {
        ValueId id = add_value(std::move(value_name), t.dtype(), SymbolicShape::from(t.shape()));
        values[static_cast<std::size_t>(id)].initializer = std::move(t);
        return id;
    }
    Node& add_node(std::string op_type, std::vector<ValueId> node_inputs,
                   std::vector<ValueId> node_outputs, std::string node_name = {}) {
        Node n;
        n.op_type = std::move(op_type);
        n.inputs = std::move(node_inputs);
        n.outputs = std::move(node_outputs);
        n.name = std::move(node_name);
        nodes.push_back(std::move(n));
        return nodes.back();
    }
    const Value& value(ValueId id) const { return values[static_cast<std::size_t>(id)]; }
    Value& value(ValueId id) { return values[static_cast<std::size_t>(id)]; }
    std::size_t num_values() const noexcept { return values.size(); }

    /// Opset version imported for `domain` ("" and "ai.onnx" are the same), or 0.
    std::int64_t opset(std::string_view domain) const noexcept {
        const bool dflt = domain.empty() || domain == "ai.onnx";
        for (const auto& o : opset_imports) {
            const bool odflt = o.domain.empty() || o.domain == "ai.onnx";
            if ((dflt && odflt) || o.domain == domain) return o.version;
        }
        return 0;
    }

    /// Recomputes Value::producer and checks SSA: every value is produced at most once and
    /// never both produced and an input/initializer/capture. Node ids must be in range.
    Status link() {
        for (auto& v : values) v.producer = -1;
        const auto nv = static_cast<ValueId>(values.size());
        for (std::size_t ni = 0; ni < nodes.size(); ++ni) {
            const Node& n = nodes[ni];
            for (ValueId in : n.inputs)
                DSINFER_CHECK(in == kNoValue || (in >= 0 && in < nv), ErrorCode::invalid_model,
                              n.describe(), ": input value id ", in, " out of range");
            for (ValueId out : n.outputs) {
                if (out == kNoValue) continue;
                DSINFER_CHECK(out >= 0 && out < nv, ErrorCode::invalid_model, n.describe(),
                              ": output value id ", out, " out of range");
                Value& v = values[static_cast<std::size_t>(out)];
                DSINFER_CHECK(v.producer < 0, ErrorCode::invalid_model, n.describe(),
                              ": output '", v.name, "' is already produced by ",
                              nodes[static_cast<std::size_t>(v.producer)].describe(),
                              " (duplicate output name)");
                DSINFER_CHECK(!v.initializer && !v.is_capture, ErrorCode::invalid_model,
                              n.describe(), ": output '", v.name,
                              "' redefines an initializer or outer-scope value");
                v.producer = static_cast<std::int32_t>(ni);
            }
        }
        for (ValueId in : inputs) {
            DSINFER_CHECK(in >= 0 && in < nv, ErrorCode::invalid_model, "graph input id ", in,
                          " out of range");
            DSINFER_CHECK(values[static_cast<std::size_t>(in)].producer < 0,
                          ErrorCode::invalid_model, "graph input '",
                          values[static_cast<std::size_t>(in)].name,
                          "' is also produced by a node");
        }
        return Status::ok();
    }

    /// Orders `nodes` so every node comes after the producers of its inputs (Kahn's
    /// algorithm, iterative, stable for already-sorted graphs). Rejects cycles and values
    /// that are read but never defined. Calls link() first.
    Status sort_topologically() {
        DSINFER_RETURN_IF_ERROR(link());
        const std::size_t n = nodes.size();
        std::vector<std::int32_t> pending(n, 0);
        std::vector<std::vector<std::int32_t>> consumers(n);
        std::vector<bool> is_input(values.size(), false);
        for (ValueId in : inputs) is_input[static_cast<std::size_t>(in)] = true;
        for (std::size_t ni = 0; ni < n; ++ni) {
            for (ValueId in : nodes[ni].inputs) {
                if (in == kNoValue) continue;
                const Value& v = values[static_cast<std::size_t>(in)];
                if (v.producer >= 0) {
                    ++pending[ni];
                    consumers[static_cast<std::size_t>(v.producer)].push_back(
                        static_cast<std::int32_t>(ni));
                } else if (!v.initializer && !v.is_capture &&
                           !is_input[static_cast<std::size_t>(in)]) {
                    return Status::error(ErrorCode::invalid_model, nodes[ni].describe(),
                                         ": input '", v.name,
                                         "' is not a graph input, an initializer, or the output "
                                         "of any node");
                }
            }
        }
        // Names a node's subgraphs capture are implicit inputs: the node runs after their
        // producers here.
        std::unordered_map<std::string, ValueId> by_name;
        for (std::size_t ni = 0; ni < n; ++ni) {
            std::vector<std::string> captured;
            collect_captures(nodes[ni], captured);
            if (captured.empty()) continue;
            if (by_name.empty())
                for (std::size_t v = 0; v < values.size(); ++v)
                    by_name.emplace(values[v].name, static_cast<ValueId>(v));
            for (const std::string& name : captured) {
                auto it = by_name.find(name);
                if (it == by_name.end()) continue;
                const std::int32_t p = values[static_cast<std::size_t>(it->second)].producer;
                if (p < 0) continue;
                DSINFER_CHECK(p != static_cast<std::int32_t>(ni), ErrorCode::invalid_model,
                              nodes[ni].describe(), ": a subgraph reads '", name,
                              "', an output of the node itself (a cycle)");
                ++pending[ni];
                consumers[static_cast<std::size_t>(p)].push_back(static_cast<std::int32_t>(ni));
            }
        }
        std::vector<std::int32_t> order;
        order.reserve(n);
        // Min-heap on the original index keeps an already-sorted graph unchanged.
        std::vector<std::int32_t> ready;
        for (std::size_t ni = 0; ni < n; ++ni)
            if (pending[ni] == 0) ready.push_back(static_cast<std::int32_t>(ni));
        std::make_heap(ready.begin(), ready.end(), std::greater<>());
        while (!ready.empty()) {
            std::pop_heap(ready.begin(), ready.end(), std::greater<>());
            const std::int32_t cur = ready.back();
            ready.pop_back();
            order.push_back(cur);
            for (std::int32_t c : consumers[static_cast<std::size_t>(cur)]) {
                if (--pending[static_cast<std::size_t>(c)] == 0) {
                    ready.push_back(c);
                    std::push_heap(ready.begin(), ready.end(), std::greater<>());
                }
            }
        }
        if (order.size() != n) {
            for (std::size_t ni = 0; ni < n; ++ni)
                if (pending[ni] > 0)
                    return Status::error(ErrorCode::invalid_model,
                                         "graph has a cycle: ", nodes[ni].describe(),
                                         " depends (directly or transitively) on its own output");
        }
        bool sorted = true;
        for (std::size_t i = 0; i < n; ++i) sorted = sorted && order[i] == static_cast<std::int32_t>(i);
        if (!sorted) {
            std::vector<Node> reordered;
            reordered.reserve(n);
            for (std::int32_t i : order) reordered.push_back(std::move(nodes[static_cast<std::size_t>(i)]));
            nodes = std::move(reordered);
            DSINFER_RETURN_IF_ERROR(link());
        }
        for (ValueId out : outputs) {
            DSINFER_CHECK(out >= 0 && out < static_cast<ValueId>(values.size()),
                          ErrorCode::invalid_model, "graph output id ", out, " out of range");
            const Value& v = values[static_cast<std::size_t>(out)];
            DSINFER_CHECK(v.producer >= 0 || v.initializer || v.is_capture ||
                              is_input[static_cast<std::size_t>(out)],
                          ErrorCode::invalid_model, "graph output '", v.name,
                          "' is not produced by any node, input or initializer");
        }
        return Status::ok();
    }

    /// Names that `n`'s subgraphs (at any depth) read from enclosing graphs, excluding names
    /// an intermediate subgraph defines itself.
    static void collect_captures(const Node& n, std::vector<std::string>& out) {
        for (const auto& [attr_name, a] : n.attributes) {
            (void)attr_name;
            auto visit = [&](const std::shared_ptr<Graph>& sg) {
                if (!sg) return;
                std::vector<std::string> inner;
                for (const Node& sn : sg->nodes) collect_captures(sn, inner);
                for (const Value& v : sg->values)
                    if (v.is_capture) out.push_back(v.name);
                for (auto& name : inner) {
                    bool defined = false;
                    for (const Value& v : sg->values)
                        defined = defined || (!v.is_capture && v.name == name);
                    if (!defined) out.push_back(std::move(name));
                }
            };
            if (a.kind == AttrKind::g) visit(a.g);
            if (a.kind == AttrKind::graphs)
                for (const auto& sg : a.graphs) visit(sg);
        }
    }

    /// Looks a value up by name (linear; for tests and tools, not hot paths).
    std::optional<ValueId> find_value(std::string_view value_name) const {
        for (std::size_t i = 0; i < values.size(); ++i)
            if (values[i].name == value_name) return static_cast<ValueId>(i);
        return std::nullopt;
    }
};

}  // namespace dsinfer
