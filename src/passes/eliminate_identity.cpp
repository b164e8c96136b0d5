// Pass "eliminate_identity" (level 1): removes nodes that return their input unchanged and
// shortens chains of layout-only ops.
//
// Rewrites (each counts once in the report):
// - Identity; Dropout in inference (training_mode absent or constant false, mask unused);
//   Cast/CastLike to the input's own element type; Tile with all repeats 1; Expand whose shape
//   cannot change the input's shape (all 1s, or equal to static dims, never adding a dim);
//   Flatten(axis 1) of a rank-2 input; Reshape to the input's own static shape.
// - Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]), removed when that is the identity.
// - A chain of Reshape/Flatten/Squeeze/Unsqueeze ending in a node whose target shape is a
//   known constant (a Reshape with a constant shape and no copied 0 dims, or a node whose
//   declared output shape is static when the chain's input is static too) becomes one Reshape
//   of the chain's input. The skipped nodes stay for other readers; eliminate_dead_code
//   removes them when nothing else reads them.
//
// A removed node's output is replaced by its input everywhere. When that output is pinned
// (graph output or captured by a subgraph) the input's producer is made to produce it under
// its own name instead; when neither is possible the node stays.
#include <numeric>

#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

/// The values of a 1-D (or scalar) i32/i64 initializer, or nullopt.
std::optional<std::vector<std::int64_t>> const_ints(const Graph& g, ValueId v) {
    if (v == kNoValue) return std::nullopt;
    const Value& val = g.value(v);
    if (!val.initializer || val.initializer->num_dims() > 1) return std::nullopt;
    const Tensor& t = *val.initializer;
    std::vector<std::int64_t> out;
    if (t.dtype() == DType::i64) {
        for (std::int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.data_unchecked<std::int64_t>()[i]);
    } else if (t.dtype() == DType::i32) {
        for (std::int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.data_unchecked<std::int32_t>()[i]);
    } else {
        return std::nullopt;
    }
    return out;
}

bool is_reshape_like(const Node& n) {
    return n.domain.empty() && (n.op_type == "Reshape" || n.op_type == "Flatten" ||
                                n.op_type == "Squeeze" || n.op_type == "Unsqueeze");
}

std::optional<std::vector<std::int64_t>> static_dims(const SymbolicShape& s) {
    if (!s.is_static()) return std::nullopt;
    std::vector<std::int64_t> d;
    for (const Dim& x : s.dims) d.push_back(x.value);
    return d;
}

std::int64_t product(const std::vector<std::int64_t>& d) {
    std::int64_t n = 1;
    for (auto x : d) n *= x;
    return n;
}

/// Reshape target `target` (ONNX semantics: 0 copies, -1 infers) applied to `in`; nullopt when
/// it does not resolve.
std::optional<std::vector<std::int64_t>> resolve_reshape(const std::vector<std::int64_t>& in,
                                                         std::vector<std::int64_t> target,
                                                         bool allowzero) {
    int infer = -1;
    std::int64_t known = 1;
    for (std::size_t i = 0; i < target.size(); ++i) {
        if (target[i] == 0 && !allowzero) {
            if (i >= in.size()) return std::nullopt;
            target[i] = in[i];
        }
        if (target[i] == -1) {
            if (infer >= 0) return std::nullopt;
            infer = static_cast<int>(i);
            continue;
        }
        if (target[i] < 0) return std::nullopt;
        known *= target[i];
    }
    const std::int64_t total = product(in);
    if (infer >= 0) {
        if (known == 0 || total % known != 0) return std::nullopt;
        target[static_cast<std::size_t>(infer)] = total / known;
    } else if (known != total) {
        return std::nullopt;
    }
    return target;
}

class Eliminator {
public:
    explicit Eliminator(Graph& g) : g_(g), index_(g), rw_(g), num_values_(g.values.size()) {}

    StatusOr<int> run() {
        const std::int64_t opset = g_.opset("");
        for (std::size_t ni = 0; ni < g_.nodes.size(); ++ni) {
            if (rw_.removed(static_cast<int>(ni))) continue;
            const Node& n = g_.nodes[ni];
            if (!n.domain.empty() || n.outputs.empty() || n.inputs.empty() ||
                n.inputs[0] == kNoValue)
                continue;
            const int i = static_cast<int>(ni);
            const std::string& op = n.op_type;
            if (op == "Identity") {
                count(bypass(i));
            } else if (op == "Dropout") {
                count(dropout(i, opset));
            } else if (op == "Cast" || op == "CastLike") {
                count(cast(i));
            } else if (op == "Transpose") {
                count(transpose(i));
            } else if (op == "Tile") {
                const auto reps = const_ints(g_, input(n, 1));
                if (reps && std::all_of(reps->begin(), reps->end(), [](auto r) { return r == 1; }))
                    count(bypass(i));
            } else if (op == "Expand") {
                count(expand(i));
            } else if (is_reshape_like(n) && opset >= 5) {
                count(reshape(i, opset));
            }
        }
        DSINFER_RETURN_IF_ERROR(rw_.commit().status());
        return fired_;
    }

private:
    static ValueId input(const Node& n, std::size_t k) {
        return k < n.inputs.size() ? n.inputs[k] : kNoValue;
    }
    bool pinned(ValueId v) const {
        return v != kNoValue && static_cast<std::size_t>(v) < num_values_ && index_.pinned(v);
    }
    void count(bool fired) { fired_ += fired ? 1 : 0; }

    /// Node `ni`'s output 0 equals `x` (default: its input 0); its other outputs are unused.
    bool bypass(int ni, ValueId x = kNoValue) {
        const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        if (x == kNoValue) x = n.inputs[0];
        const ValueId y = n.outputs[0];
        if (y == kNoValue) {
            rw_.remove(ni);
            return true;
        }
        if (!pinned(y)) {
            rw_.replace_uses(y, x);
            rw_.remove(ni);
            return true;
        }
        // y keeps its name: x's producer produces y instead (when x is internal).
        if (pinned(x)) return false;
        const int p = g_.value(x).producer;
        if (p < 0 || p == ni || rw_.removed(p)) return false;
        for (ValueId& out : g_.nodes[static_cast<std::size_t>(p)].outputs)
            if (out == x) out = y;
        rw_.remove(ni);
        rw_.replace_uses(x, y);
        g_.value(y).producer = p;
        g_.value(x).producer = -1;
        return true;
    }

    bool output_unused(ValueId v) const {
        if (v == kNoValue) return true;
        if (pinned(v)) return false;
        for (int c : index_.consumers(v))
            if (!rw_.removed(c)) return false;
        return true;
    }

    bool dropout(int ni, std::int64_t opset) {
        const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        if (n.outputs.size() > 1 && !output_unused(n.outputs[1])) return false;
        if (opset < 7) {  // is_test = 0 asks for training behaviour
            auto is_test = n.attr_or<std::int64_t>("is_test", 0);
            if (!is_test.is_ok() || is_test.value() == 0) return false;
        }
        if (opset >= 12 && input(n, 2) != kNoValue) {
            const Value& tm = g_.value(input(n, 2));
            if (!tm.initializer || tm.initializer->dtype() != DType::boolean ||
                tm.initializer->num_elements() != 1 || *tm.initializer->data_unchecked<bool>())
                return false;
        }
        return bypass(ni);
    }

    bool cast(int ni) {
        const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        const auto& from = g_.value(n.inputs[0]).dtype;
        if (!from) return false;
        std::optional<DType> to;
        if (n.op_type == "Cast") {
            const Attribute* a = n.find_attr("to");
            if (a == nullptr || a->kind != AttrKind::i) return false;
            to = from_onnx_dtype(static_cast<int>(a->i));
        } else {
            const ValueId like = input(n, 1);
            if (like == kNoValue) return false;
            to = g_.value(like).dtype;
        }
        return to && *to == *from && bypass(ni);
    }

    /// The permutation of a Transpose node, or nullopt (absent and rank unknown, or invalid).
    std::optional<std::vector<std::int64_t>> perm_of(const Node& n) const {
        const Attribute* a = n.find_attr("perm");
        if (a != nullptr) {
            if (a->kind != AttrKind::ints) return std::nullopt;
            std::vector<bool> seen(a->ints.size(), false);
            for (auto p : a->ints) {
                if (p < 0 || p >= static_cast<std::int64_t>(seen.size()) ||
                    seen[static_cast<std::size_t>(p)])
                    return std::nullopt;
                seen[static_cast<std::size_t>(p)] = true;
            }
            return a->ints;
        }
        const Value& x = g_.value(n.inputs[0]);
        if (!x.shape.known) return std::nullopt;
        std::vector<std::int64_t> p(static_cast<std::size_t>(x.shape.rank()));
        std::iota(p.rbegin(), p.rend(), 0);
        return p;
    }

    bool transpose(int ni) {
        Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        bool merged = false;
        auto p2 = perm_of(n);
        const int prod = g_.value(n.inputs[0]).producer;
        if (p2 && prod >= 0 && !rw_.removed(prod)) {
            const Node& t1 = g_.nodes[static_cast<std::size_t>(prod)];
            if (t1.op_type == "Transpose" && t1.domain.empty() && !t1.inputs.empty() &&
                t1.inputs[0] != kNoValue) {
                auto p1 = perm_of(t1);
                if (p1 && p1->size() == p2->size()) {
                    std::vector<std::int64_t> p(p2->size());
                    for (std::size_t i = 0; i < p.size(); ++i)
                        p[i] = (*p1)[static_cast<std::size_t>((*p2)[i])];
                    n.inputs[0] = t1.inputs[0];
                    set_attr(n, "perm", p);
                    p2 = p;
                    merged = true;
                }
            }
        }
        bool ident = p2.has_value();
        for (std::size_t i = 0; p2 && i < p2->size(); ++i) ident = ident && (*p2)[i] == static_cast<std::int64_t>(i);
        if (ident && bypass(ni)) return true;
        return merged;
    }

    bool expand(int ni) {
        const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        const auto shape = const_ints(g_, input(n, 1));
        const SymbolicShape& xs = g_.value(n.inputs[0]).shape;
        if (!shape || !xs.known || shape->size() > xs.dims.size()) return false;
        const std::size_t off = xs.dims.size() - shape->size();
        for (std::size_t i = 0; i < shape->size(); ++i) {
            const Dim& d = xs.dims[off + i];
            const std::int64_t s = (*shape)[i];
            if (s != 1 && !(d.is_static() && d.value == s)) return false;
        }
        return bypass(ni);
    }

    bool reshape(int ni, std::int64_t opset) {
        Node& n = g_.nodes[static_cast<std::size_t>(ni)];
        const ValueId y = n.outputs[0];
        if (y == kNoValue) return false;
        // The chain's input: walk up through layout-only producers.
        ValueId root = n.inputs[0];
        for (int guard = 0; guard < 1024; ++guard) {
            const int p = g_.value(root).producer;
            if (p < 0 || rw_.removed(p)) break;
            const Node& pn = g_.nodes[static_cast<std::size_t>(p)];
            if (!is_reshape_like(pn) || pn.inputs.empty() || pn.inputs[0] == kNoValue) break;
            root = pn.inputs[0];
        }
        const auto root_dims = static_dims(g_.value(root).shape);
        // The target: a constant Reshape shape without copied (0) dims, else a static declared
        // output shape consistent with a static input.
        std::optional<std::vector<std::int64_t>> target;
        if (n.op_type == "Reshape") {
            auto allowzero = n.attr_or<std::int64_t>("allowzero", 0);
            auto s = const_ints(g_, input(n, 1));
            if (allowzero.is_ok() && s &&
                (allowzero.value() != 0 ||
                 std::none_of(s->begin(), s->end(), [](auto d) { return d == 0; })))
                target = s;
        }
        if (!target) {
            auto out = static_dims(g_.value(y).shape);
            if (out && root_dims && product(*out) == product(*root_dims)) target = out;
        }
        if (!target) return false;
        // Reshape to the input's own shape.
        if (root_dims) {
            auto r = resolve_reshape(*root_dims, *target, true);
            if (r && *r == *root_dims && bypass(ni, root)) return true;
        }
        if (root == n.inputs[0]) return false;  // nothing to collapse
        const bool zeros = std::any_of(target->begin(), target->end(), [](auto d) { return d == 0; });
        if (zeros && opset < 14) return false;  // a 0 would mean "copy" without allowzero
        const std::string base = n.name.empty() ? g_.value(y).name : n.name;
        const ValueId shape = rw_.new_constant(
            base + "/shape",
            Tensor::from_vector(Shape{static_cast<std::int64_t>(target->size())}, *target));
        Node& r = g_.nodes[static_cast<std::size_t>(ni)];
        r.op_type = "Reshape";
        r.inputs = {root, shape};
        r.attributes.clear();
        if (zeros) set_attr(r, "allowzero", std::int64_t{1});
        return true;
    }

    Graph& g_;
    GraphIndex index_;
    Rewriter rw_;
    std::size_t num_values_;
    int fired_ = 0;
};

StatusOr<int> eliminate(Graph& g) {
    int total = 0;
    // A second sweep catches what the first exposed (bounded: each sweep removes nodes).
    for (int sweep = 0; sweep < 4; ++sweep) {
        Eliminator e(g);
        DSINFER_ASSIGN_OR_RETURN(int n, e.run());
        total += n;
        if (n == 0) break;
    }
    return total;
}

class EliminateIdentity final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "eliminate_identity"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        return apply_everywhere(graph, ctx, name(), eliminate);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_eliminate_identity() { return std::make_unique<EliminateIdentity>(); }

}  // namespace dsinfer::passes
