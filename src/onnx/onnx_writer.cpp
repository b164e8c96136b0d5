// save_onnx(): dsinfer::Graph -> ONNX ModelProto file (the loader's mapping, reversed).
//
// Written: opset imports (com.dsinfer included when a pass added it), nodes with every
// attribute kind the IR holds values for (sparse tensors and type protos are carried by kind
// only, so they are `unsupported`), initializers inline as raw_data (strings as string_data),
// graph inputs/outputs with element types and symbolic shapes, value_info for every other
// value with a known dtype or shape (declared or inferred), and subgraphs (captured names are
// referenced by name, as ONNX does). Values nothing refers to any more (initializers dropped by
// eliminate_dead_code) are not written. The IR version is the lowest that the default-domain
// opset needs (at least 4: initializers need not be graph inputs).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <fstream>

#include "dsinfer/onnx.hpp"

namespace dsinfer {
namespace {

std::int64_t ir_version_for(std::int64_t opset) {
    // onnx/helper.py VERSION_TABLE: the IR version released with each opset.
    static const std::pair<std::int64_t, std::int64_t> kTable[] = {
        {9, 4},   {10, 5},  {11, 6},  {14, 7},  {18, 8},
        {20, 9},  {22, 10}, {23, 11}, {24, 12}, {1000, 13},
    };
    for (const auto& [max_opset, ir] : kTable)
        if (opset <= max_opset) return ir;
    return 13;
}

class Writer {
public:
    Status write_graph(const Graph& g, onnx::GraphProto& out, int depth) {
        DSINFER_CHECK(depth <= 64, ErrorCode::invalid_argument,
                      "save_onnx: subgraphs nested deeper than 64");
        out.set_name(g.name.empty() ? std::string("graph") : g.name);
        std::vector<bool> referenced(g.values.size(), false);
        auto mark = [&](ValueId v) {
            if (v != kNoValue) referenced[static_cast<std::size_t>(v)] = true;
        };
        for (const Node& n : g.nodes) {
            for (ValueId v : n.inputs) mark(v);
            for (ValueId v : n.outputs) mark(v);
        }
        for (ValueId v : g.inputs) mark(v);
        for (ValueId v : g.outputs) mark(v);
        std::vector<bool> is_io(g.values.size(), false);
        for (ValueId v : g.inputs) is_io[static_cast<std::size_t>(v)] = true;
        for (ValueId v : g.outputs) is_io[static_cast<std::size_t>(v)] = true;

        for (std::size_t v = 0; v < g.values.size(); ++v) {
            const Value& val = g.values[v];
            if (!referenced[v]) continue;
            DSINFER_CHECK(!val.name.empty(), ErrorCode::invalid_argument,
                          "save_onnx: value ", v, " of graph '", g.name, "' has no name");
            if (val.initializer) {
                DSINFER_RETURN_IF_ERROR(write_tensor(*val.initializer, val.name, *out.add_initializer()));
            } else if (!is_io[v] && !val.is_capture && (val.dtype || val.shape.known) &&
                       val.kind == ValueKind::tensor) {
                write_value_info(val, *out.add_value_info());
            }
        }
        for (ValueId v : g.inputs) write_value_info(g.value(v), *out.add_input());
        for (ValueId v : g.outputs) write_value_info(g.value(v), *out.add_output());
        for (const Node& n : g.nodes) {
            onnx::NodeProto& np = *out.add_node();
            np.set_name(n.name);
            np.set_op_type(n.op_type);
            if (!n.domain.empty()) np.set_domain(n.domain);
            for (ValueId v : n.inputs) np.add_input(v == kNoValue ? std::string() : g.value(v).name);
            for (ValueId v : n.outputs) np.add_output(v == kNoValue ? std::string() : g.value(v).name);
            for (const auto& [name, a] : n.attributes) {
                Status st = write_attribute(name, a, *np.add_attribute(), depth);
                if (!st.is_ok()) return st.with_context(n.describe() + ": ");
            }
        }
        return Status::ok();
    }

private:
    static void write_value_info(const Value& v, onnx::ValueInfoProto& out) {
        out.set_name(v.name);
        onnx::TypeProto& type = *out.mutable_type();
        switch (v.kind) {
            case ValueKind::sequence: type.mutable_sequence_type(); return;
            case ValueKind::optional: type.mutable_optional_type(); return;
            case ValueKind::map: type.mutable_map_type(); return;
            case ValueKind::other: type.mutable_sparse_tensor_type(); return;
            case ValueKind::tensor: break;
        }
        auto& tt = *type.mutable_tensor_type();
        if (v.dtype) tt.set_elem_type(to_onnx_dtype(*v.dtype));
        if (v.shape.known) {
            auto& shape = *tt.mutable_shape();
            for (const Dim& d : v.shape.dims) {
                auto& dim = *shape.add_dim();
                if (d.is_static()) dim.set_dim_value(d.value);
                else if (!d.symbol.empty()) dim.set_dim_param(d.symbol);
            }
        }
    }

    static Status write_tensor(const Tensor& t, const std::string& name, onnx::TensorProto& out) {
        out.set_name(name);
        out.set_data_type(to_onnx_dtype(t.dtype()));
        for (auto d : t.shape().dims()) out.add_dims(d);
        if (t.dtype() == DType::string) {
            for (std::int64_t i = 0; i < t.num_elements(); ++i)
                out.add_string_data(t.data_unchecked<std::string>()[i]);
            return Status::ok();
        }
        DSINFER_CHECK(t.num_bytes() == 0 || t.raw_data() != nullptr, ErrorCode::invalid_argument,
                      "save_onnx: tensor '", name, "' has no data");
        out.set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.num_bytes()));
        return Status::ok();
    }

    Status write_attribute(const std::string& name, const Attribute& a, onnx::AttributeProto& out,
                           int depth) {
        using AP = onnx::AttributeProto;
        out.set_name(name);
        switch (a.kind) {
            case AttrKind::f: out.set_type(AP::FLOAT); out.set_f(a.f); break;
            case AttrKind::i: out.set_type(AP::INT); out.set_i(a.i); break;
            case AttrKind::s: out.set_type(AP::STRING); out.set_s(a.s); break;
            case AttrKind::floats:
                out.set_type(AP::FLOATS);
                for (float f : a.floats) out.add_floats(f);
                break;
            case AttrKind::ints:
                out.set_type(AP::INTS);
                for (auto i : a.ints) out.add_ints(i);
                break;
            case AttrKind::strings:
                out.set_type(AP::STRINGS);
                for (const auto& s : a.strings) out.add_strings(s);
                break;
            case AttrKind::t:
                out.set_type(AP::TENSOR);
                DSINFER_RETURN_IF_ERROR(write_tensor(a.t, {}, *out.mutable_t()));
                break;
            case AttrKind::tensors:
                out.set_type(AP::TENSORS);
                for (const auto& t : a.tensors)
                    DSINFER_RETURN_IF_ERROR(write_tensor(t, {}, *out.add_tensors()));
                break;
            case AttrKind::g:
                out.set_type(AP::GRAPH);
                DSINFER_CHECK(a.g != nullptr, ErrorCode::invalid_argument, "attribute '", name,
                              "' has no graph");
                DSINFER_RETURN_IF_ERROR(write_graph(*a.g, *out.mutable_g(), depth + 1));
                break;
            case AttrKind::graphs:
                out.set_type(AP::GRAPHS);
                for (const auto& sg : a.graphs) {
                    DSINFER_CHECK(sg != nullptr, ErrorCode::invalid_argument, "attribute '", name,
                                  "' has a missing graph");
                    DSINFER_RETURN_IF_ERROR(write_graph(*sg, *out.add_graphs(), depth + 1));
                }
                break;
            default:
                return Status::error(ErrorCode::unsupported, "attribute '", name, "' of kind ",
                                     attr_kind_name(a.kind),
                                     " cannot be written (its value is not kept by the loader)");
        }
        return Status::ok();
    }
};

}  // namespace

void save_onnx(const Graph& graph, const std::filesystem::path& file) {
    onnx::ModelProto model;
    model.set_producer_name("dsinfer");
    model.set_ir_version(std::max<std::int64_t>(4, ir_version_for(graph.opset(""))));
    for (const OpsetImport& o : graph.opset_imports) {
        auto& op = *model.add_opset_import();
        op.set_domain(o.domain == "ai.onnx" ? std::string() : o.domain);
        op.set_version(o.version);
    }
    for (const auto& [key, value] : graph.model_info.metadata) {
        auto& prop = *model.add_metadata_props();
        prop.set_key(key);
        prop.set_value(value);
    }
    Writer w;
    throw_if_error(w.write_graph(graph, *model.mutable_graph(), 0));
    const std::size_t bytes = model.ByteSizeLong();
    if (bytes > static_cast<std::size_t>(INT_MAX))
        throw Error(ErrorCode::unsupported,
                    "save_onnx: the model is " + std::to_string(bytes) +
                        " bytes; a single protobuf message cannot exceed 2 GiB (external data "
                        "is not written)");
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    if (!out)
        throw Error(ErrorCode::io_error, "save_onnx: cannot open '" + file.string() + "' for writing");
    if (!model.SerializeToOstream(&out) || !out.flush())
        throw Error(ErrorCode::io_error, "save_onnx: writing '" + file.string() + "' failed");
}

}  // namespace dsinfer
