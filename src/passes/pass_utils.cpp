#include "passes/pass_utils.hpp"

#include <cstring>
#include <limits>

namespace dsinfer::passes {

void GraphIndex::collect_captures(const Node& n, std::unordered_set<std::string>& out) {
    for (const auto& [name, a] : n.attributes) {
        (void)name;
        auto visit = [&](const std::shared_ptr<Graph>& sg) {
            if (!sg) return;
            for (const Value& v : sg->values)
                if (v.is_capture) out.insert(v.name);
            for (const Node& inner : sg->nodes) collect_captures(inner, out);
        };
        if (a.kind == AttrKind::g) visit(a.g);
        if (a.kind == AttrKind::graphs)
            for (const auto& sg : a.graphs) visit(sg);
    }
}

std::optional<double> GraphIndex::scalar(ValueId v) const {
    const Tensor* t = constant(v);
    if (t == nullptr || t->num_elements() != 1) return std::nullopt;
    switch (t->dtype()) {
        case DType::f32: return static_cast<double>(*t->data_unchecked<float>());
        case DType::f64: return *t->data_unchecked<double>();
        case DType::f16: return static_cast<double>(static_cast<float>(*t->data_unchecked<float16>()));
        case DType::bf16: return static_cast<double>(static_cast<float>(*t->data_unchecked<bfloat16>()));
        case DType::i32: return static_cast<double>(*t->data_unchecked<std::int32_t>());
        case DType::i64: return static_cast<double>(*t->data_unchecked<std::int64_t>());
        default: return std::nullopt;
    }
}

Node& Rewriter::add(std::string op, std::string domain, std::vector<ValueId> inputs,
                    std::vector<ValueId> outputs, std::string name) {
    Node n;
    n.op_type = std::move(op);
    n.domain = std::move(domain);
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.name = unique_name(name.empty() ? n.op_type : name);
    added_.push_back(std::move(n));
    changed_ = true;
    return added_.back();
}

std::string Rewriter::unique_name(const std::string& base) {
    if (!names_ready_) {
        for (const Value& v : g_->values) names_.insert(v.name);
        for (const Node& n : g_->nodes) names_.insert(n.name);
        names_ready_ = true;
    }
    std::string name = base;
    while (names_.count(name) != 0) name = base + "/ds" + std::to_string(++counter_);
    names_.insert(name);
    return name;
}

ValueId Rewriter::new_value(const std::string& base, std::optional<DType> dtype,
                            SymbolicShape shape) {
    return g_->add_value(unique_name(base), dtype, std::move(shape));
}

ValueId Rewriter::new_constant(const std::string& base, Tensor t) {
    return g_->add_initializer(unique_name(base), std::move(t));
}

void Rewriter::replace_uses(ValueId from, ValueId to) {
    for (std::size_t ni = 0; ni < g_->nodes.size(); ++ni) {
        if (dead_.size() > ni && dead_[ni]) continue;
        for (ValueId& in : g_->nodes[ni].inputs)
            if (in == from) { in = to; changed_ = true; }
    }
    for (Node& n : added_)
        for (ValueId& in : n.inputs)
            if (in == from) in = to;
}

StatusOr<bool> Rewriter::commit() {
    bool any_dead = false;
    for (bool d : dead_) any_dead = any_dead || d;
    if (!any_dead && added_.empty() && !changed_) return false;
    std::vector<Node> kept;
    kept.reserve(g_->nodes.size() + added_.size());
    for (std::size_t ni = 0; ni < g_->nodes.size(); ++ni)
        if (ni >= dead_.size() || !dead_[ni]) kept.push_back(std::move(g_->nodes[ni]));
    for (Node& n : added_) kept.push_back(std::move(n));
    g_->nodes = std::move(kept);
    added_.clear();
    dead_.assign(g_->nodes.size(), false);
    changed_ = false;
    DSINFER_RETURN_IF_ERROR(g_->sort_topologically());
    return true;
}

Status Rewriter::finish_fusion(PassContext& ctx, std::string_view pass, int fired) {
    if (fired > 0) ensure_dsinfer_opset(*g_);
    DSINFER_RETURN_IF_ERROR(commit().status());
    ctx.fired(pass, fired);
    return Status::ok();
}

namespace {
Attribute& new_attr(Node& n, const std::string& name, AttrKind kind) {
    for (auto& [k, a] : n.attributes)
        if (k == name) {
            a = Attribute{};
            a.kind = kind;
            return a;
        }
    n.attributes.emplace_back(name, Attribute{});
    n.attributes.back().second.kind = kind;
    return n.attributes.back().second;
}
}  // namespace

void set_attr(Node& n, const std::string& name, std::int64_t v) { new_attr(n, name, AttrKind::i).i = v; }
void set_attr(Node& n, const std::string& name, float v) { new_attr(n, name, AttrKind::f).f = v; }
void set_attr(Node& n, const std::string& name, std::string v) {
    new_attr(n, name, AttrKind::s).s = std::move(v);
}
void set_attr(Node& n, const std::string& name, std::vector<std::int64_t> v) {
    new_attr(n, name, AttrKind::ints).ints = std::move(v);
}
void set_attr(Node& n, const std::string& name, std::vector<float> v) {
    new_attr(n, name, AttrKind::floats).floats = std::move(v);
}

Status for_each_subgraph(Graph& g, const std::function<Status(Graph&)>& fn) {
    for (Node& n : g.nodes) {
        for (auto& [name, a] : n.attributes) {
            (void)name;
            if (a.kind == AttrKind::g && a.g) {
                DSINFER_RETURN_IF_ERROR(fn(*a.g));
                DSINFER_RETURN_IF_ERROR(for_each_subgraph(*a.g, fn));
            }
            if (a.kind == AttrKind::graphs)
                for (auto& sg : a.graphs)
                    if (sg) {
                        DSINFER_RETURN_IF_ERROR(fn(*sg));
                        DSINFER_RETURN_IF_ERROR(for_each_subgraph(*sg, fn));
                    }
        }
    }
    return Status::ok();
}

Status apply_everywhere(Graph& g, PassContext& ctx, std::string_view pass,
                        const std::function<StatusOr<int>(Graph&)>& fn) {
    const std::function<Status(Graph&)> each = [&](Graph& graph) -> Status {
        DSINFER_ASSIGN_OR_RETURN(int n, fn(graph));
        ctx.fired(pass, n);
        return Status::ok();
    };
    DSINFER_RETURN_IF_ERROR(each(g));
    return for_each_subgraph(g, each);
}

}  // namespace dsinfer::passes

namespace dsinfer::passes {

std::optional<detail::ActivationSpec> match_activation(const GraphIndex& index, const Node& n) {
    using detail::Activation;
    detail::ActivationSpec s;
    const bool onnx = n.domain.empty();
    if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.size() != 1) return std::nullopt;
    if (onnx && n.op_type == "Relu") s.kind = Activation::relu;
    else if (onnx && n.op_type == "Sigmoid") s.kind = Activation::sigmoid;
    else if (onnx && n.op_type == "Tanh") s.kind = Activation::tanh;
    else if (onnx && n.op_type == "HardSwish") s.kind = Activation::hard_swish;
    else if (onnx && n.op_type == "LeakyRelu") {
        auto a = n.attr_or<float>("alpha", 0.01f);
        if (!a.is_ok()) return std::nullopt;
        s.kind = Activation::leaky_relu;
        s.alpha = a.value();
    } else if (onnx && n.op_type == "Clip") {
        float lo = -std::numeric_limits<float>::infinity();
        float hi = std::numeric_limits<float>::infinity();
        if (index.graph().opset("") < 11) {
            auto a = n.attr_or<float>("min", lo), b = n.attr_or<float>("max", hi);
            if (!a.is_ok() || !b.is_ok()) return std::nullopt;
            lo = a.value();
            hi = b.value();
        } else {
            for (std::size_t i = 1; i < n.inputs.size(); ++i) {
                if (n.inputs[i] == kNoValue) continue;
                const Tensor* t = index.constant(n.inputs[i]);
                if (t == nullptr || t->dtype() != DType::f32 || t->num_elements() != 1)
                    return std::nullopt;
                (i == 1 ? lo : hi) = *t->data_unchecked<float>();
            }
        }
        if (!(lo <= hi)) return std::nullopt;
        s.kind = Activation::clip;
        s.alpha = lo;
        s.beta = hi;
    } else if (n.op_type == "Gelu" && (onnx || n.domain == kDsinferDomain)) {
        auto a = n.attr_or<std::string>("approximate", "none");
        if (!a.is_ok() || (a.value() != "none" && a.value() != "tanh")) return std::nullopt;
        s.kind = a.value() == "tanh" ? Activation::gelu_tanh : Activation::gelu;
    } else {
        return std::nullopt;
    }
    if (onnx && n.inputs.size() != 1 && n.op_type != "Clip") return std::nullopt;
    return s;
}

void set_activation(Node& n, const detail::ActivationSpec& a) {
    if (a.empty()) return;
    set_attr(n, "activation", std::string(detail::activation_name(a.kind)));
    if (a.kind == detail::Activation::leaky_relu || a.kind == detail::Activation::clip)
        set_attr(n, "activation_alpha", a.alpha);
    if (a.kind == detail::Activation::clip) set_attr(n, "activation_beta", a.beta);
}

}  // namespace dsinfer::passes
