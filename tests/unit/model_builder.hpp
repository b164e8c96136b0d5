// Builds small ONNX models in memory for tests (valid ones, then mutated into malformed ones).
#pragma once

#include <onnx/onnx_pb.h>

#include <dsinfer/dsinfer.hpp>
#include <string>
#include <vector>

namespace dsinfer::test {

inline onnx::ValueInfoProto tensor_info(const std::string& name, int elem_type,
                                        const std::vector<std::int64_t>& dims) {
    onnx::ValueInfoProto v;
    v.set_name(name);
    auto* tt = v.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (auto d : dims) {
        if (d < 0) shape->add_dim()->set_dim_param("batch");
        else shape->add_dim()->set_dim_value(d);
    }
    return v;
}

inline onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op,
                                 const std::vector<std::string>& ins,
                                 const std::vector<std::string>& outs,
                                 const std::string& name = "") {
    auto* n = g.add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(g.node_size()) : name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
}

/// Sets a graph-valued attribute (If branches, Loop/Scan bodies).
inline void set_graph_attr(onnx::NodeProto* n, const std::string& name, const onnx::GraphProto& g) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
}

/// An empty model (IR version 8) importing the default domain at `opset`, its graph named
/// `name`: the callers add inputs, outputs, initializers and nodes.
inline onnx::ModelProto new_model(std::int64_t opset, const std::string& name) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    m.mutable_graph()->set_name(name);
    return m;
}

/// x float[1,4] -> Relu -> y, opset 13.
inline onnx::ModelProto relu_model() {
    onnx::ModelProto m = new_model(13, "relu");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 4});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    add_node(*g, "Relu", {"x"}, {"y"}, "relu");
    return m;
}

inline std::string bytes_of(const onnx::ModelProto& m) {
    std::string s;
    m.SerializeToString(&s);
    return s;
}

/// Loads serialized model bytes; returns the error code (ErrorCode::ok when it loaded).
inline ErrorCode load_code(const std::string& bytes, const std::filesystem::path& dir = {},
                           const ModelLimits& limits = {}, std::string* message = nullptr) {
    try {
        Graph g = load_onnx_from_bytes(bytes.data(), bytes.size(), dir, limits);
        (void)InferenceEngine::compile(std::move(g));
        return ErrorCode::ok;
    } catch (const Error& e) {
        if (message) *message = e.message();
        return e.code();
    }
}

inline ErrorCode load_code(const onnx::ModelProto& m, const std::filesystem::path& dir = {},
                           const ModelLimits& limits = {}, std::string* message = nullptr) {
    return load_code(bytes_of(m), dir, limits, message);
}

inline onnx::TensorProto float_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                      const std::vector<float>& values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(1);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
    return t;
}

/// Float tensor `name` of `dims` stored externally at `location` (offset/length as the
/// strings a model carries; "" leaves the key out).
inline onnx::TensorProto external_float_tensor(const std::string& name,
                                               const std::vector<std::int64_t>& dims,
                                               const std::string& location,
                                               const std::string& offset = "",
                                               const std::string& length = "") {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(1);
    for (auto d : dims) t.add_dims(d);
    t.set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    auto add_kv = [&](const char* k, const std::string& v) {
        auto* e = t.add_external_data();
        e->set_key(k);
        e->set_value(v);
    };
    add_kv("location", location);
    if (!offset.empty()) add_kv("offset", offset);
    if (!length.empty()) add_kv("length", length);
    return t;
}

inline onnx::TensorProto i64_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                    const std::vector<std::int64_t>& values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(7);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8));
    return t;
}

}  // namespace dsinfer::test
