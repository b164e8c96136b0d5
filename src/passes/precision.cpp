// convert_float_precision: float32 -> float16/bfloat16 for GPU engines (dsinfer/passes.hpp),
// and its converse for CPU engines, widen_half_float_compute (passes/precision.hpp): one
// conversion of a graph's float type that keeps the interface's.
#include "passes/precision.hpp"

#include <string>
#include <unordered_map>

#include "passes/pass_utils.hpp"

namespace dsinfer {

namespace {

float load_float(const Tensor& t, std::int64_t i) {
    switch (t.dtype()) {
        case DType::f16: return static_cast<float>(t.data_unchecked<float16>()[i]);
        case DType::bf16: return static_cast<float>(t.data_unchecked<bfloat16>()[i]);
        default: return t.data_unchecked<float>()[i];
    }
}

/// `t` (f32, f16 or bf16) as `to` (f32, f16 or bf16), rounded to nearest even.
StatusOr<Tensor> convert_tensor(const Tensor& t, DType to) {
    DSINFER_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(to, t.shape()));
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
        const float v = load_float(t, i);
        if (to == DType::f16) c.data_unchecked<float16>()[i] = float16(v);
        else if (to == DType::bf16) c.data_unchecked<bfloat16>()[i] = bfloat16(v);
        else c.data_unchecked<float>()[i] = v;
    }
    return c;
}

std::int64_t onnx_float_type(DType t) {  // TensorProto.FLOAT / FLOAT16 / BFLOAT16
    return t == DType::f16 ? 10 : t == DType::bf16 ? 16 : 1;
}

/// Every `from` initializer, value, Cast target and Constant/ConstantOfShape tensor of `g`
/// becomes `to`; graph inputs and outputs of type `from` keep it, through Casts. Subgraphs
/// are refused (`what` names the conversion in the error).
StatusOr<std::size_t> convert_float_type(Graph& g, DType from, DType to,
                                         const GraphEvaluator* evaluator, const char* what) {
    const std::int64_t onnx_from = onnx_float_type(from), onnx_to = onnx_float_type(to);
    for (const Node& n : g.nodes)
        for (const auto& [name, a] : n.attributes)
            DSINFER_CHECK(a.kind != AttrKind::g && a.kind != AttrKind::graphs, ErrorCode::unsupported,
                          n.describe(), ": ", what,
                          " is not supported for models with subgraphs (If/Loop/Scan)");
    // Value dtypes must be known (the graph's outputs especially): load-time inference.
    bool unknown = false;
    for (const auto& v : g.values) unknown = unknown || !v.dtype;
    if (unknown) passes::annotate_shapes(g, evaluator);
    std::size_t converted = 0;
    // Initializers that are graph inputs stay (none are, once loaded); everything else converts.
    for (auto& v : g.values) {
        if (v.initializer && v.initializer->dtype() == from && v.initializer->raw_data() != nullptr) {
            DSINFER_ASSIGN_OR_RETURN(Tensor c, convert_tensor(*v.initializer, to));
            v.initializer = std::move(c);
            v.dtype = to;
            ++converted;
        }
    }
    // The interface keeps `from`: remember which ids are graph inputs/outputs.
    std::vector<char> is_input(g.values.size(), 0), is_output(g.values.size(), 0);
    for (ValueId id : g.inputs) is_input[static_cast<std::size_t>(id)] = 1;
    for (ValueId id : g.outputs) is_output[static_cast<std::size_t>(id)] = 1;
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        Value& val = g.values[v];
        if (val.initializer || is_input[v] || is_output[v]) continue;
        if (val.dtype == from) val.dtype = to;
    }
    for (Node& n : g.nodes) {
        for (auto& [name, a] : n.attributes) {
            if (n.op_type == "Cast" && n.domain.empty() && name == "to" && a.kind == AttrKind::i &&
                a.i == onnx_from)
                a.i = onnx_to;
            if (a.kind == AttrKind::t && !a.t.is_null() && a.t.dtype() == from &&
                (n.op_type == "Constant" || n.op_type == "ConstantOfShape")) {
                DSINFER_ASSIGN_OR_RETURN(a.t, convert_tensor(a.t, to));
                ++converted;
            }
        }
    }
    auto cast_attr = [](std::int64_t onnx_type) {
        Attribute a;
        a.kind = AttrKind::i;
        a.i = onnx_type;
        return std::vector<std::pair<std::string, Attribute>>{{"to", a}};
    };
    // `from` inputs: Cast(input) -> input__<to>, read by the nodes instead of the input.
    const std::size_t num_inputs = g.inputs.size();
    for (std::size_t i = 0; i < num_inputs; ++i) {
        const ValueId in = g.inputs[i];
        if (g.value(in).dtype != from) continue;
        const std::string name = g.value(in).name + "__" + std::string(dtype_name(to));
        const ValueId cast = g.add_value(name, to, g.value(in).shape);
        for (Node& n : g.nodes)
            for (ValueId& x : n.inputs)
                if (x == in) x = cast;
        // (A graph output that is also this input stays the input itself.)
        g.add_node("Cast", {in}, {cast}, name).attributes = cast_attr(onnx_to);
    }
    // `from` outputs (produced by a node): the node writes output__<to>, a Cast restores it.
    for (const ValueId out : std::vector<ValueId>(g.outputs)) {
        const auto ov = static_cast<std::size_t>(out);
        if (g.values[ov].dtype != from || is_input[ov] || g.values[ov].initializer) continue;
        Node* producer = nullptr;
        std::size_t slot = 0;
        for (Node& n : g.nodes)
            for (std::size_t k = 0; k < n.outputs.size(); ++k)
                if (n.outputs[k] == out) {
                    producer = &n;
                    slot = k;
                }
        if (producer == nullptr) continue;
        const std::string name = g.values[ov].name + "__" + std::string(dtype_name(to));
        const ValueId half = g.add_value(name, to, g.values[ov].shape);
        // Other nodes reading the output read the converted value.
        for (Node& n : g.nodes)
            for (ValueId& x : n.inputs)
                if (x == out) x = half;
        producer->outputs[slot] = half;
        const std::string back = from == DType::f32 ? "_to_float" : "_to_" + std::string(dtype_name(from));
        g.add_node("Cast", {half}, {out}, name + back).attributes = cast_attr(onnx_from);
    }
    DSINFER_RETURN_IF_ERROR(g.sort_topologically());
    return converted;
}

}  // namespace

StatusOr<std::size_t> convert_float_precision(Graph& g, DType to,
                                              const GraphEvaluator* evaluator) {
    DSINFER_CHECK(to == DType::f16 || to == DType::bf16, ErrorCode::invalid_argument,
                  "convert_float_precision: target must be float16 or bfloat16, got ", dtype_name(to));
    const std::string what = std::string(dtype_name(to)) + " precision";
    return convert_float_type(g, DType::f32, to, evaluator, what.c_str());
}

bool detail::has_half_float_model(const Graph& g) noexcept {
    for (const Node& n : g.nodes)
        for (const auto& [name, a] : n.attributes)
            if (a.kind == AttrKind::g || a.kind == AttrKind::graphs) return false;
    auto half = [](const std::optional<DType>& t) {
        return t && (*t == DType::f16 || *t == DType::bf16);
    };
    for (const Value& v : g.values)
        if (v.initializer && half(v.initializer->dtype())) return true;
    for (ValueId id : g.inputs)
        if (half(g.value(id).dtype)) return true;
    return false;
}

StatusOr<std::size_t> detail::widen_half_float_compute(Graph& g, const GraphEvaluator* evaluator) {
    if (!has_half_float_model(g)) return std::size_t{0};
    std::size_t converted = 0;
    for (const DType from : {DType::f16, DType::bf16}) {
        DSINFER_ASSIGN_OR_RETURN(std::size_t n, convert_float_type(g, from, DType::f32, evaluator,
                                                                   "float32 compute"));
        converted += n;
    }
    return converted;
}

}  // namespace dsinfer
