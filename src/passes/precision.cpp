// convert_float_precision: float32 -> float16/bfloat16 for GPU engines (dsinfer/passes.hpp).
#include <string>
#include <unordered_map>

#include "dsinfer/passes.hpp"
#include "passes/pass_utils.hpp"

namespace dsinfer {

namespace {

StatusOr<Tensor> convert_tensor(const Tensor& t, DType to) {
    DSINFER_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(to, t.shape()));
    const float* src = t.data<float>();
    if (to == DType::f16) {
        auto* dst = c.data<float16>();
        for (std::int64_t i = 0; i < t.num_elements(); ++i) dst[i] = float16(src[i]);
    } else {
        auto* dst = c.data<bfloat16>();
        for (std::int64_t i = 0; i < t.num_elements(); ++i) dst[i] = bfloat16(src[i]);
    }
    return c;
}

}  // namespace

StatusOr<std::size_t> convert_float_precision(Graph& g, DType to,
                                              const GraphEvaluator* evaluator) {
    DSINFER_CHECK(to == DType::f16 || to == DType::bf16, ErrorCode::invalid_argument,
                  "convert_float_precision: target must be float16 or bfloat16, got ", dtype_name(to));
    const std::int64_t onnx_to = to == DType::f16 ? 10 : 16;  // TensorProto.FLOAT16 / BFLOAT16
    for (const Node& n : g.nodes)
        for (const auto& [name, a] : n.attributes)
            DSINFER_CHECK(a.kind != AttrKind::g && a.kind != AttrKind::graphs, ErrorCode::unsupported,
                          n.describe(), ": ", dtype_name(to),
                          " precision is not supported for models with subgraphs (If/Loop/Scan)");
    // Value dtypes must be known (the graph's outputs especially): load-time inference.
    bool unknown = false;
    for (const auto& v : g.values) unknown = unknown || !v.dtype;
    if (unknown) passes::annotate_shapes(g, evaluator);
    std::size_t converted = 0;
    // Initializers that are graph inputs stay (none are, once loaded); everything else converts.
    for (auto& v : g.values) {
        if (v.initializer && v.initializer->dtype() == DType::f32 && v.initializer->raw_data() != nullptr) {
            DSINFER_ASSIGN_OR_RETURN(Tensor c, convert_tensor(*v.initializer, to));
            v.initializer = std::move(c);
            v.dtype = to;
            ++converted;
        }
    }
    // The interface keeps float32: remember which ids are graph inputs/outputs.
    std::vector<char> is_input(g.values.size(), 0), is_output(g.values.size(), 0);
    for (ValueId id : g.inputs) is_input[static_cast<std::size_t>(id)] = 1;
    for (ValueId id : g.outputs) is_output[static_cast<std::size_t>(id)] = 1;
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        Value& val = g.values[v];
        if (val.initializer || is_input[v] || is_output[v]) continue;
        if (val.dtype == DType::f32) val.dtype = to;
    }
    for (Node& n : g.nodes) {
        for (auto& [name, a] : n.attributes) {
            if (n.op_type == "Cast" && n.domain.empty() && name == "to" && a.kind == AttrKind::i && a.i == 1)
                a.i = onnx_to;
            if (a.kind == AttrKind::t && !a.t.is_null() && a.t.dtype() == DType::f32 &&
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
    // float32 inputs: Cast(input) -> input__<to>, read by the nodes instead of the input.
    const std::size_t num_inputs = g.inputs.size();
    for (std::size_t i = 0; i < num_inputs; ++i) {
        const ValueId in = g.inputs[i];
        if (g.value(in).dtype != DType::f32) continue;
        const std::string name = g.value(in).name + "__" + std::string(dtype_name(to));
        const ValueId cast = g.add_value(name, to, g.value(in).shape);
        for (Node& n : g.nodes)
            for (ValueId& x : n.inputs)
                if (x == in) x = cast;
        // (A graph output that is also this input stays the float32 input itself.)
        g.add_node("Cast", {in}, {cast}, name).attributes = cast_attr(onnx_to);
    }
    // float32 outputs (produced by a node): the node writes output__<to>, a Cast restores it.
    for (const ValueId out : std::vector<ValueId>(g.outputs)) {
        const auto ov = static_cast<std::size_t>(out);
        if (g.values[ov].dtype != DType::f32 || is_input[ov] || g.values[ov].initializer) continue;
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
        // Other nodes reading the output read the low-precision value.
        for (Node& n : g.nodes)
            for (ValueId& x : n.inputs)
                if (x == out) x = half;
        producer->outputs[slot] = half;
        g.add_node("Cast", {half}, {out}, name + "_to_float").attributes = cast_attr(1);
    }
    DSINFER_RETURN_IF_ERROR(g.sort_topologically());
    return converted;
}

}  // namespace dsinfer
