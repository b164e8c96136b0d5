// Pass "eliminate_dead_code" (level 1, and again after the fusions): removes nodes none of whose
// outputs is used, then the initializers nothing reads any more.
//
// A value is used when it is pinned (graph output, or a name a subgraph captures) or read by a
// node that stays. One reverse sweep over the sorted nodes decides every node (consumers come
// after producers); the sweep repeats while removing a node with subgraphs frees captured
// names. Subgraphs are cleaned first (post-order), so the captures they drop free outer values.
// Unread initializers lose their tensor (Value::initializer is reset, so the memory is freed
// when nothing else shares it); the Value itself stays (ValueIds are indices) as an orphan that
// no node, input or output refers to, which the executor and save_onnx skip. A subgraph's
// capture that nothing reads any more stops being a capture (so it no longer pins the outer
// value).
// Counts one per removed node and per dropped initializer.
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

StatusOr<int> eliminate(Graph& g) {
    int fired = 0;
    // Subgraphs first: what they stop capturing may free values here.
    for (Node& n : g.nodes)
        for (auto& [name, a] : n.attributes) {
            (void)name;
            if (a.kind == AttrKind::g && a.g) {
                DSINFER_ASSIGN_OR_RETURN(int k, eliminate(*a.g));
                fired += k;
            }
            if (a.kind == AttrKind::graphs)
                for (auto& sg : a.graphs)
                    if (sg) {
                        DSINFER_ASSIGN_OR_RETURN(int k, eliminate(*sg));
                        fired += k;
                    }
        }
    for (bool changed = true; changed;) {
        changed = false;
        const GraphIndex index(g);
        std::vector<bool> used(g.values.size(), false);
        for (std::size_t v = 0; v < g.values.size(); ++v)
            used[v] = index.pinned(static_cast<ValueId>(v));
        Rewriter rw(g);
        for (std::size_t k = g.nodes.size(); k-- > 0;) {
            const Node& n = g.nodes[k];
            bool live = false;
            for (ValueId out : n.outputs) live = live || (out != kNoValue && used[static_cast<std::size_t>(out)]);
            if (!live) {
                rw.remove(static_cast<int>(k));
                ++fired;
                changed = true;
                continue;
            }
            for (ValueId in : n.inputs)
                if (in != kNoValue) used[static_cast<std::size_t>(in)] = true;
        }
        DSINFER_RETURN_IF_ERROR(rw.commit().status());
        if (!changed) {
            for (std::size_t v = 0; v < g.values.size(); ++v) {
                Value& val = g.values[v];
                if (val.initializer && !used[v]) {
                    val.initializer.reset();
                    ++fired;
                }
                // A capture nothing reads any more stops pinning the enclosing graph's value.
                if (val.is_capture && !used[v]) val.is_capture = false;
            }
        }
    }
    return fired;
}

class EliminateDeadCode final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "eliminate_dead_code"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        DSINFER_ASSIGN_OR_RETURN(int n, eliminate(graph));
        ctx.fired(name(), n);
        return Status::ok();
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_eliminate_dead_code() { return std::make_unique<EliminateDeadCode>(); }

}  // namespace dsinfer::passes
