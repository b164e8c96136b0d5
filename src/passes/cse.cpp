// Pass "eliminate_common_subexpressions" (level 1): merges nodes that compute the same thing.
//
// First identical small initializers (same dtype, shape and bytes, at most kMaxMergedBytes; not
// strings) are merged: readers of a duplicate read the first one instead, so more nodes match.
// Then, in topological order, a node whose (op, domain, attributes, inputs, omitted-output
// pattern) equals an earlier node's is removed and its outputs' readers read the earlier
// node's outputs. Readers are rewired as the sweep goes, so whole duplicated chains merge in
// one sweep. Never merged: random ops, Dropout, nodes with subgraph attributes, nodes with an
// attribute kind we cannot compare, and nodes with a pinned output (graph outputs and
// captured names keep their producer). Counts one per merged node or initializer.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

constexpr std::size_t kMaxMergedBytes = 4096;

bool never_merged(const Node& n) {
    static const char* const kOps[] = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                       "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"};
    if (n.domain.empty())
        for (const char* op : kOps)
            if (n.op_type == op) return true;
    return false;
}

void append_bytes(std::string& key, const void* p, std::size_t n) {
    key.append(static_cast<const char*>(p), n);
}
template <class T>
void append_pod(std::string& key, const T& v) {
    append_bytes(key, &v, sizeof v);
}

/// Appends the tensor's dtype, shape and bytes; false for strings or large tensors.
bool append_tensor(std::string& key, const Tensor& t) {
    if (t.is_null() || t.dtype() == DType::string || t.num_bytes() > kMaxMergedBytes) return false;
    append_pod(key, static_cast<int>(t.dtype()));
    append_pod(key, t.num_dims());
    for (auto d : t.shape().dims()) append_pod(key, d);
    append_bytes(key, t.raw_data(), t.num_bytes());
    return true;
}

/// The node's identity as a byte string; nullopt when it must not be merged.
std::optional<std::string> node_key(const Node& n) {
    if (never_merged(n)) return std::nullopt;
    std::string key = n.op_type;
    key += '\0';
    key += n.domain;
    key += '\0';
    append_pod(key, n.inputs.size());
    for (ValueId in : n.inputs) append_pod(key, in);
    append_pod(key, n.outputs.size());
    for (ValueId out : n.outputs) key += out == kNoValue ? '0' : '1';
    // Attributes in name order (their order in the node does not matter).
    std::vector<const std::pair<std::string, Attribute>*> attrs;
    for (const auto& a : n.attributes) attrs.push_back(&a);
    std::sort(attrs.begin(), attrs.end(), [](auto* a, auto* b) { return a->first < b->first; });
    for (const auto* na : attrs) {
        const Attribute& a = na->second;
        key += na->first;
        key += '\0';
        append_pod(key, static_cast<int>(a.kind));
        switch (a.kind) {
            case AttrKind::f: append_pod(key, a.f); break;  // bitwise: -0 and NaNs stay apart
            case AttrKind::i: append_pod(key, a.i); break;
            case AttrKind::s:
                append_pod(key, a.s.size());
                key += a.s;
                break;
            case AttrKind::floats:
                append_pod(key, a.floats.size());
                append_bytes(key, a.floats.data(), a.floats.size() * sizeof(float));
                break;
            case AttrKind::ints:
                append_pod(key, a.ints.size());
                append_bytes(key, a.ints.data(), a.ints.size() * sizeof(std::int64_t));
                break;
            case AttrKind::strings:
                append_pod(key, a.strings.size());
                for (const auto& s : a.strings) {
                    append_pod(key, s.size());
                    key += s;
                }
                break;
            case AttrKind::t:
                if (!append_tensor(key, a.t)) return std::nullopt;
                break;
            case AttrKind::tensors:
                append_pod(key, a.tensors.size());
                for (const auto& t : a.tensors)
                    if (!append_tensor(key, t)) return std::nullopt;
                break;
            default: return std::nullopt;  // subgraphs, sparse tensors, type protos
        }
    }
    return key;
}

StatusOr<int> eliminate(Graph& g) {
    int fired = 0;
    const GraphIndex index(g);
    Rewriter rw(g);
    // Identical small initializers.
    std::unordered_map<std::string, ValueId> constants;
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        const Value& val = g.values[v];
        if (!val.initializer || val.is_capture) continue;
        std::string key;
        if (!append_tensor(key, *val.initializer)) continue;
        auto [it, fresh] = constants.emplace(std::move(key), static_cast<ValueId>(v));
        if (fresh || index.consumers(static_cast<ValueId>(v)).empty()) continue;
        rw.replace_uses(static_cast<ValueId>(v), it->second);
        ++fired;
    }
    // Identical nodes.
    std::unordered_map<std::string, int> seen;
    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        bool has_subgraph = false;
        for (const auto& [name, a] : n.attributes)
            has_subgraph = has_subgraph || a.kind == AttrKind::g || a.kind == AttrKind::graphs;
        if (has_subgraph) continue;
        auto key = node_key(n);
        if (!key) continue;
        auto [it, fresh] = seen.emplace(std::move(*key), static_cast<int>(ni));
        if (fresh) continue;
        bool pinned = false;
        for (ValueId out : n.outputs) pinned = pinned || (out != kNoValue && index.pinned(out));
        if (pinned) continue;
        const Node& first = g.nodes[static_cast<std::size_t>(it->second)];
        for (std::size_t k = 0; k < n.outputs.size(); ++k)
            if (n.outputs[k] != kNoValue) rw.replace_uses(n.outputs[k], first.outputs[k]);
        rw.remove(static_cast<int>(ni));
        ++fired;
    }
    DSINFER_RETURN_IF_ERROR(rw.commit().status());
    return fired;
}

class EliminateCommonSubexpressions final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "eliminate_common_subexpressions"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        return apply_everywhere(graph, ctx, name(), eliminate);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_eliminate_common_subexpressions() {
    return std::make_unique<EliminateCommonSubexpressions>();
}

}  // namespace dsinfer::passes
