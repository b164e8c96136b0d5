// The malformed-model corpus: ONNX models that each carry exactly ONE defect from
// shared/guide/BAD_INPUTS.md sections A-D (container, graph, tensor/initializer, operator
// semantics), with the ErrorCode loading each one must produce.
//
// bad_model_cases() returns the cases; each writes its model as `dir/model.onnx` (kBadModelFile)
// plus any side files it needs (external data, symlinks, hard links, FIFOs) into an empty
// directory. valid_base_models() returns the valid models the defects are applied to (each must
// load), so a case fails for its one defect only.
//
// Users: tests/unit/test_bad_models.cpp (loads every case in a forked child, checks the code,
// time and memory) and tools/make_bad_models.cpp (writes the corpus with a manifest.json).
//
// Where BAD_INPUTS.md and docs/ARCHITECTURE.md "Defined behaviours" differ, the documented
// behaviour is the expected one (model-local functions and sparse initializers: unsupported;
// no outputs / output that is an input / initializers listed as inputs: load).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "unit/model_builder.hpp"

namespace dsinfer::test {

/// The model file every case writes into its directory.
inline constexpr const char* kBadModelFile = "model.onnx";

struct BadModelCase {
    std::string name;         ///< unique, [a-z0-9_]
    char section = 'A';       ///< BAD_INPUTS.md section (A-D)
    std::string description;  ///< one line: the defect
    ErrorCode expected = ErrorCode::invalid_model;  ///< the exact code loading must give
    /// Writes dir/model.onnx and its side files into the (existing, empty) directory `dir`.
    std::function<void(const std::filesystem::path& dir)> write;
    ModelLimits limits{};     ///< limits the load uses (defaults unless the row is about one)
    std::string mention{};    ///< a substring the error message must contain ("" = unchecked)
};

namespace bad {

namespace fs = std::filesystem;
using Writer = std::function<void(const fs::path&)>;

// ---- writing ----------------------------------------------------------------------------------

inline void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + p.string());
}

inline void write_model(const fs::path& dir, const onnx::ModelProto& m) {
    write_bytes(dir / kBadModelFile, bytes_of(m));
}

inline Writer model_writer(onnx::ModelProto m) {
    return [m = std::move(m)](const fs::path& dir) { write_model(dir, m); };
}

inline Writer bytes_writer(std::string bytes) {
    return [b = std::move(bytes)](const fs::path& dir) { write_bytes(dir / kBadModelFile, b); };
}

/// A string literal with its embedded NULs (all its bytes but the terminating one).
template <std::size_t N>
std::string lit(const char (&bytes)[N]) {
    return std::string(bytes, N - 1);
}

/// prefix + the decimal number (built by appending: GCC 12 warns falsely about
/// `"literal" + std::to_string(n)`).
template <class N>
std::string numbered(const char* prefix, N n) {
    std::string s(prefix);
    s += std::to_string(n);
    return s;
}

inline std::string floats_bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// ---- protobuf wire encoding (for defects protobuf's own serializer cannot produce) ----------

inline std::string varint(std::uint64_t v) {
    std::string out;
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
    return out;
}
inline std::string tag(int field, int wire) {
    return varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire));
}
/// A length-delimited field holding `payload`.
inline std::string ld(int field, const std::string& payload) {
    return tag(field, 2) + varint(payload.size()) + payload;
}
/// A length-delimited field whose length claims `claimed` bytes but holds `present`.
inline std::string ld_claim(int field, std::uint64_t claimed, const std::string& present) {
    return tag(field, 2) + varint(claimed) + present;
}

/// `m` serialized with `graph_tail` appended to its graph's payload (the graph field is
/// re-encoded with the right length, so only the appended bytes carry the defect).
inline std::string with_graph_tail(const onnx::ModelProto& m, const std::string& graph_tail) {
    onnx::ModelProto rest = m;
    rest.clear_graph();
    std::string g;
    m.graph().SerializeToString(&g);
    return bytes_of(rest) + ld(7, g + graph_tail);
}

// ---- attributes -------------------------------------------------------------------------------

inline onnx::AttributeProto* attr(onnx::NodeProto* n, const std::string& name,
                                  onnx::AttributeProto::AttributeType type) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
}
inline void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
inline void set_float(onnx::NodeProto* n, const std::string& name, float v) {
    attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
inline void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = attr(n, name, onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}
inline void set_tensor(onnx::NodeProto* n, const std::string& name, const onnx::TensorProto& t) {
    *attr(n, name, onnx::AttributeProto::TENSOR)->mutable_t() = t;
}

// ---- tensors ----------------------------------------------------------------------------------

inline onnx::TensorProto i32_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                    const std::vector<std::int32_t>& v) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(6);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    return t;
}
inline onnx::TensorProto u8_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                   const std::vector<std::uint8_t>& v) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(2);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size()));
    return t;
}
inline onnx::TensorProto bool_tensor(const std::string& name, bool v) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(9);
    t.set_raw_data(std::string(1, v ? '\1' : '\0'));
    return t;
}
/// W float[1,4] = {1, 2, 3, 4}: the initializer the tensor-level defects are applied to.
inline onnx::TensorProto good_w() { return float_tensor("W", {1, 4}, {1, 2, 3, 4}); }

// ---- valid base models ------------------------------------------------------------------------

/// An empty model (ir 8, ai.onnx opset `opset`) with graph "g".
inline onnx::ModelProto empty_model(int opset = 13) {
    onnx::ModelProto m = new_model(opset, "g");
    m.set_producer_name("dsinfer-bad-models");
    return m;
}

/// x float[1,4] + W -> y (W is an initializer; the tensor-level defects mutate it).
inline onnx::ModelProto add_model(const onnx::TensorProto& w = good_w()) {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 4});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    *g->add_initializer() = w;
    add_node(*g, "Add", {"x", w.name()}, {"y"}, "add_w");
    return m;
}

/// x float[xdims] -> op(x, inits...) named "bad_node" -> y (untyped output).
inline onnx::ModelProto op_model(const std::string& op, const std::vector<std::int64_t>& xdims,
                                 const std::vector<onnx::TensorProto>& inits = {}, int opset = 13,
                                 int x_elem = 1) {
    onnx::ModelProto m = empty_model(opset);
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", x_elem, xdims);
    g->add_output()->set_name("y");
    std::vector<std::string> ins{"x"};
    for (const auto& t : inits) {
        *g->add_initializer() = t;
        ins.push_back(t.name());
    }
    add_node(*g, op, ins, {"y"}, "bad_node");
    return m;
}
inline onnx::NodeProto* bad_node(onnx::ModelProto& m) {
    for (auto& n : *m.mutable_graph()->mutable_node())
        if (n.name() == "bad_node") return &n;
    throw std::logic_error("no bad_node");
}

/// x float[1,8] -> MatMul W1[8,16] -> Add b1 -> Relu -> MatMul W2[16,4] -> Add b2 -> y[1,4].
inline onnx::ModelProto mlp_model() {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 8});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    auto fill = [](std::size_t n, float scale) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i)
            v[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3);
        return v;
    };
    *g->add_initializer() = float_tensor("W1", {8, 16}, fill(128, 0.05f));
    *g->add_initializer() = float_tensor("b1", {16}, fill(16, 0.01f));
    *g->add_initializer() = float_tensor("W2", {16, 4}, fill(64, 0.02f));
    *g->add_initializer() = float_tensor("b2", {4}, fill(4, 0.1f));
    add_node(*g, "MatMul", {"x", "W1"}, {"h0"}, "mm1");
    add_node(*g, "Add", {"h0", "b1"}, {"h1"}, "bias1");
    add_node(*g, "Relu", {"h1"}, {"h2"}, "relu1");
    add_node(*g, "MatMul", {"h2", "W2"}, {"h3"}, "mm2");
    add_node(*g, "Add", {"h3", "b2"}, {"y"}, "bias2");
    return m;
}

/// A branch graph: out = op(x) (x read from the enclosing graph).
inline onnx::GraphProto unary_branch(const std::string& name, const std::string& op,
                                     const std::string& out, int out_elem = 1) {
    onnx::GraphProto b;
    b.set_name(name);
    add_node(b, op, {"x"}, {out}, name + "_node");
    *b.add_output() = tensor_info(out, out_elem, {1, 4});
    return b;
}

/// c bool[], x float[1,4] -> If(c) {then: Relu(x)} {else: Neg(x)} -> y.
inline onnx::ModelProto if_model() {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("c", 9, {});
    *g->add_input() = tensor_info("x", 1, {1, 4});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    auto* n = add_node(*g, "If", {"c"}, {"y"}, "if_node");
    set_graph_attr(n, "then_branch", unary_branch("then_g", "Relu", "t"));
    set_graph_attr(n, "else_branch", unary_branch("else_g", "Neg", "e"));
    return m;
}

/// x float[1,4] -> Loop(M=3, cond=true, v=x) { v + one } -> y.
inline onnx::GraphProto loop_body() {
    onnx::GraphProto body;
    body.set_name("loop_body");
    *body.add_input() = tensor_info("i", 7, {});
    *body.add_input() = tensor_info("cond_in", 9, {});
    *body.add_input() = tensor_info("v", 1, {1, 4});
    *body.add_initializer() = float_tensor("one", {1, 4}, {1, 1, 1, 1});
    add_node(body, "Identity", {"cond_in"}, {"cond_out"}, "loop_cond");
    add_node(body, "Add", {"v", "one"}, {"v_out"}, "loop_add");
    *body.add_output() = tensor_info("cond_out", 9, {});
    *body.add_output() = tensor_info("v_out", 1, {1, 4});
    return body;
}
inline onnx::ModelProto loop_model(std::int64_t trips = 3, onnx::GraphProto body = loop_body()) {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 4});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    *g->add_initializer() = i64_tensor("M", {}, {trips});
    *g->add_initializer() = bool_tensor("cond", true);
    auto* n = add_node(*g, "Loop", {"M", "cond", "x"}, {"y"}, "loop_node");
    set_graph_attr(n, "body", body);
    return m;
}

/// x float[3,4] -> Scan(s0 = zeros[4], x) { s + row } -> (s_final, rows).
inline onnx::GraphProto scan_body() {
    onnx::GraphProto body;
    body.set_name("scan_body");
    *body.add_input() = tensor_info("s", 1, {4});
    *body.add_input() = tensor_info("row", 1, {4});
    add_node(body, "Add", {"s", "row"}, {"s_out"}, "scan_add");
    add_node(body, "Identity", {"s_out"}, {"row_out"}, "scan_id");
    *body.add_output() = tensor_info("s_out", 1, {4});
    *body.add_output() = tensor_info("row_out", 1, {4});
    return body;
}
inline onnx::ModelProto scan_model(onnx::GraphProto body = scan_body()) {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {3, 4});
    *g->add_output() = tensor_info("s_final", 1, {4});
    *g->add_output() = tensor_info("rows", 1, {3, 4});
    *g->add_initializer() = float_tensor("s0", {4}, {0, 0, 0, 0});
    auto* n = add_node(*g, "Scan", {"s0", "x"}, {"s_final", "rows"}, "scan_node");
    set_graph_attr(n, "body", body);
    set_int(n, "num_scan_inputs", 1);
    return m;
}

/// x float[1,2,6,6] -> Conv(W[4,2,3,3], B[4], pads 1) -> y.
inline onnx::ModelProto conv_model() {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 2, 6, 6});
    g->add_output()->set_name("y");
    std::vector<float> w(4 * 2 * 3 * 3);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i % 11);
    *g->add_initializer() = float_tensor("W", {4, 2, 3, 3}, w);
    *g->add_initializer() = float_tensor("B", {4}, {0.1f, 0.2f, 0.3f, 0.4f});
    auto* n = add_node(*g, "Conv", {"x", "W", "B"}, {"y"}, "bad_node");
    set_ints(n, "pads", {1, 1, 1, 1});
    set_ints(n, "kernel_shape", {3, 3});
    return m;
}

/// x float[1,4] -> 16 chained Adds of distinct initializers c0..c15 -> y (many initializers).
inline onnx::ModelProto many_initializers_model(int count = 16) {
    onnx::ModelProto m = empty_model();
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {1, 4});
    *g->add_output() = tensor_info("y", 1, {1, 4});
    std::string prev = "x";
    for (int i = 0; i < count; ++i) {
        const std::string c = numbered("c", i);
        const float f = static_cast<float>(i);
        *g->add_initializer() = float_tensor(c, {1, 4}, {f, -f, 0.5f * f, 1.0f});
        const std::string out = i + 1 == count ? "y" : numbered("a", i);
        add_node(*g, i % 2 == 0 ? "Add" : "Mul", {prev, c}, {out}, numbered("n", i));
        prev = out;
    }
    return m;
}

/// W float[1,4] stored externally at `location` (with optional offset/length strings).
inline onnx::ModelProto external_model(const std::string& location, const std::string& offset = "",
                                       const std::string& length = "") {
    return add_model(external_float_tensor("W", {1, 4}, location, offset, length));
}

/// The external-data model with its side files made by `setup` (run first, in `dir`).
inline Writer external_writer(onnx::ModelProto m, std::function<void(const fs::path&)> setup) {
    return [m = std::move(m), setup = std::move(setup)](const fs::path& dir) {
        if (setup) setup(dir);
        write_model(dir, m);
    };
}
/// dir/w.bin holding W's 16 bytes (and `extra` floats after them).
inline void write_weights(const fs::path& dir, const std::string& file = "w.bin", int extra = 0) {
    std::vector<float> v{1, 2, 3, 4};
    for (int i = 0; i < extra; ++i) v.push_back(static_cast<float>(5 + i));
    write_bytes(dir / file, floats_bytes(v));
}
inline void check_posix(int rc, const char* what) {
    if (rc != 0) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

// ---- random and foreign bytes -------------------------------------------------------------------

inline std::string random_bytes(std::uint32_t seed, std::size_t n) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
}

}  // namespace bad

/// The valid models the defects are applied to: each must load (ErrorCode::ok).
inline std::vector<BadModelCase> valid_base_models() {
    using namespace bad;
    std::vector<BadModelCase> v;
    auto add = [&](std::string name, std::string what, onnx::ModelProto m) {
        v.push_back({std::move(name), 'A', std::move(what), ErrorCode::ok, model_writer(std::move(m))});
    };
    add("base_relu", "x[1,4] -> Relu -> y", relu_model());
    add("base_add", "x[1,4] + initializer W[1,4]", add_model());
    add("base_mlp", "two-layer MLP (MatMul/Add/Relu)", mlp_model());
    add("base_if", "If with Relu/Neg branches reading an outer value", if_model());
    add("base_loop", "Loop of 3 iterations adding a body initializer", loop_model());
    add("base_scan", "Scan summing the rows of x", scan_model());
    add("base_conv", "Conv 3x3 with bias and pads", conv_model());
    add("base_many_initializers", "16 chained Add/Mul of distinct initializers",
        many_initializers_model());
    v.push_back({"base_external", 'C', "W from external data w.bin", ErrorCode::ok,
                 external_writer(external_model("w.bin"), [](const fs::path& d) { write_weights(d); })});
    return v;
}

/// The corpus: one defect per case, every row of BAD_INPUTS.md sections A-D.
inline std::vector<BadModelCase> bad_model_cases() {
    using namespace bad;
    using E = ErrorCode;
    std::vector<BadModelCase> v;
    // Appends a case; `mention` is a substring the error message must contain.
    auto add = [&](char section, std::string name, E code, std::string what, Writer w,
                   std::string mention = {}, ModelLimits limits = {}) {
        BadModelCase c;
        c.name = std::move(name);
        c.section = section;
        c.description = std::move(what);
        c.expected = code;
        c.write = std::move(w);
        c.limits = limits;
        c.mention = std::move(mention);
        v.push_back(std::move(c));
    };
    auto addm = [&](char section, std::string name, E code, std::string what, onnx::ModelProto m,
                    std::string mention = {}, ModelLimits limits = {}) {
        add(section, std::move(name), code, std::move(what), model_writer(std::move(m)),
            std::move(mention), limits);
    };
    const E invalid = E::invalid_model;
    const E unsupported = E::unsupported;
    const E exhausted = E::resource_exhausted;

    // ==== A. container level ======================================================================
    const std::string mlp = bytes_of(mlp_model());
    add('A', "empty_file", invalid, "0-byte model file", bytes_writer(""));
    add('A', "truncated_1_byte", invalid, "first byte of a valid model only",
        bytes_writer(mlp.substr(0, 1)));
    add('A', "truncated_10_bytes", invalid, "first 10 bytes of a valid model",
        bytes_writer(mlp.substr(0, 10)));
    add('A', "truncated_half", invalid, "first half of a valid model",
        bytes_writer(mlp.substr(0, mlp.size() / 2)));
    add('A', "truncated_last_byte", invalid, "a valid model without its last byte",
        bytes_writer(mlp.substr(0, mlp.size() - 1)));
    {
        const std::string w1 = mlp_model().graph().initializer(0).raw_data();
        const auto at = mlp.find(w1);
        add('A', "truncated_in_raw_data", invalid, "cut in the middle of an initializer's raw_data",
            bytes_writer(mlp.substr(0, at + w1.size() / 2)));
    }
    add('A', "truncated_varint_at_end", invalid,
        "a valid model followed by a tag and an unfinished varint",
        bytes_writer(mlp + tag(1, 0) + lit("\x80\x80")));
    add('A', "trailing_garbage", invalid, "a valid model followed by 0xff 0xff",
        bytes_writer(mlp + lit("\xff\xff")));
    for (std::uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
        const std::size_t n = std::size_t{16} << (2 * (seed - 1));  // 16 B .. 4 KiB
        add('A', numbered("random_bytes_", seed), invalid,
            numbered("random bytes (", n) + numbered(", seed ", seed) + ")",
            bytes_writer(random_bytes(seed, n)));
    }
    add('A', "all_zero_bytes", invalid, "4 KiB of zero bytes", bytes_writer(std::string(4096, '\0')));
    add('A', "all_ff_bytes", invalid, "4 KiB of 0xff bytes", bytes_writer(std::string(4096, '\xff')));
    add('A', "png_file", invalid, "a PNG header",
        bytes_writer(lit("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0")));
    add('A', "gguf_file", invalid, "a GGUF v3 header",
        bytes_writer(lit("GGUF\x03\0\0\0\x02\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0")));
    add('A', "jpeg_file", invalid, "a JPEG header",
        bytes_writer(lit("\xff\xd8\xff\xe0\0\x10JFIF\0\x01\x01\0\0\x01\0\x01\0\0")));
    add('A', "zip_file", invalid, "a zip local file header (PyTorch .pt archive)",
        bytes_writer(lit("PK\x03\x04\x14\0\0\0\x08\0") + "archive/data.pkl"));
    add('A', "gzip_file", invalid, "a gzip stream header",
        bytes_writer(lit("\x1f\x8b\x08\0\0\0\0\0\0\x03\x01\0\0\xff\xff")));
    add('A', "elf_file", invalid, "an ELF header",
        bytes_writer(lit("\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0")));
    add('A', "onnx_text_format", invalid, "the model in ONNX text format, not binary",
        bytes_writer("ir_version: 8\nopset_import { version: 13 }\ngraph { name: \"g\" }\n"));
    add('A', "json_file", invalid, "a JSON document",
        bytes_writer("{\"ir_version\": 8, \"graph\": {\"node\": []}}\n"));
    {
        std::string s;
        good_w().SerializeToString(&s);
        add('A', "tensor_proto_as_model", invalid, "a serialized TensorProto", bytes_writer(s));
        relu_model().graph().SerializeToString(&s);
        add('A', "graph_proto_as_model", invalid, "a serialized GraphProto", bytes_writer(s));
        relu_model().graph().node(0).SerializeToString(&s);
        add('A', "node_proto_as_model", invalid, "a serialized NodeProto", bytes_writer(s));
    }
    {
        auto m = relu_model();
        m.clear_ir_version();
        addm('A', "missing_ir_version", invalid, "ModelProto without ir_version", m, "ir_version");
        m = relu_model();
        m.set_ir_version(0);
        addm('A', "ir_version_zero", invalid, "ir_version 0", m, "ir_version");
        m = relu_model();
        m.set_ir_version(-5);
        addm('A', "ir_version_negative", invalid, "ir_version -5", m, "ir_version");
        m = relu_model();
        m.clear_graph();
        addm('A', "missing_graph", invalid, "ModelProto without a graph", m, "graph");
    }
    {
        // Unknown fields: compatible, ignored.
        add('A', "unknown_field_model", E::ok, "unknown varint field 100 in ModelProto (ignored)",
            bytes_writer(bytes_of(relu_model()) + tag(100, 0) + varint(5)));
        add('A', "unknown_ld_field_model", E::ok,
            "unknown 1 KiB length-delimited field 99 in ModelProto (ignored)",
            bytes_writer(bytes_of(relu_model()) + ld(99, std::string(1024, 'u'))));
        auto m = relu_model();
        std::string node;
        m.graph().node(0).SerializeToString(&node);
        node += tag(77, 0) + varint(1);
        m.mutable_graph()->clear_node();
        add('A', "unknown_field_node", E::ok, "unknown field 77 in a NodeProto (ignored)",
            bytes_writer(with_graph_tail(m, ld(1, node))));
        auto a = add_model();
        std::string init;
        a.graph().initializer(0).SerializeToString(&init);
        init += tag(60, 5) + lit("\0\0\0\0");
        a.mutable_graph()->clear_initializer();
        add('A', "unknown_field_initializer", E::ok,
            "unknown fixed32 field 60 in an initializer TensorProto (ignored)",
            bytes_writer(with_graph_tail(a, ld(5, init))));
    }
    {
        auto m = relu_model();
        m.set_ir_version(99);
        addm('A', "future_ir_version", unsupported, "ir_version 99 (newer than supported)", m, "99");
        m = relu_model();
        m.mutable_opset_import(0)->set_version(500);
        addm('A', "future_opset", unsupported, "ai.onnx opset 500 (newer than supported)", m, "500");
        m = relu_model();
        auto* op = m.add_opset_import();
        op->set_domain("com.example.future");
        op->set_version(7);
        addm('A', "unknown_domain_imported_unused", E::ok,
             "imports an unknown opset domain no node uses (compatible)", m);
        m = relu_model();
        op = m.add_opset_import();
        op->set_domain("com.example.future");
        op->set_version(7);
        m.mutable_graph()->mutable_node(0)->set_domain("com.example.future");
        addm('A', "unknown_domain_used", unsupported, "a node in an unknown opset domain", m,
             "com.example.future");
        m = relu_model();
        m.mutable_opset_import(0)->set_version(0);
        addm('A', "opset_version_zero", invalid, "ai.onnx opset version 0", m, "version");
        m = relu_model();
        *m.add_opset_import() = m.opset_import(0);
        addm('A', "opset_imported_twice", invalid, "ai.onnx imported twice", m, "twice");
        m = relu_model();
        m.clear_opset_import();
        addm('A', "no_opset_import", invalid, "ir_version 8 model without opset_import", m, "opset");
    }
    {
        // Protobuf nesting: Graph -> Node -> Attribute -> Graph ... 40 levels (~120 messages).
        onnx::GraphProto inner;
        inner.set_name("leaf");
        for (int i = 0; i < 40; ++i) {
            onnx::GraphProto outer;
            outer.set_name(numbered("g", i));
            set_graph_attr(add_node(outer, "If", {"c"}, {"o"}), "then_branch", inner);
            inner = outer;
        }
        auto m = relu_model();
        set_graph_attr(add_node(*m.mutable_graph(), "If", {"x"}, {"z"}), "then_branch", inner);
        addm('A', "protobuf_nesting_subgraphs", invalid,
             "subgraphs nested 40 deep: protobuf nesting over the recursion limit (100)", m);
        // TypeProto nesting: sequence(sequence(...)) 80 deep on a graph input.
        auto t = relu_model();
        onnx::TypeProto ty;
        ty.mutable_tensor_type()->set_elem_type(1);
        for (int i = 0; i < 80; ++i) {
            onnx::TypeProto s;
            *s.mutable_sequence_type()->mutable_elem_type() = ty;
            ty = s;
        }
        auto* in = t.mutable_graph()->add_input();
        in->set_name("deep");
        *in->mutable_type() = ty;
        addm('A', "protobuf_nesting_types", invalid,
             "a graph input whose sequence type nests 80 deep (160 messages)", t);
    }
    add('A', "file_over_2gib", invalid,
        "a sparse file of 2 GiB + 1 byte (one protobuf message cannot exceed 2 GiB); never read",
        [](const fs::path& dir) {
            const std::string p = (dir / kBadModelFile).string();
            const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0) throw std::runtime_error("cannot create " + p);
            const std::string head = bytes_of(relu_model());
            const bool ok = ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()) &&
                            ::ftruncate(fd, (off_t{1} << 31) + 1) == 0;
            ::close(fd);
            if (!ok) throw std::runtime_error("cannot size " + p);
        },
        "2 GiB");
    {
        ModelLimits l;
        l.max_model_bytes = 64;
        addm('A', "over_max_model_bytes", exhausted, "a ~1 KB model with max_model_bytes = 64",
             mlp_model(), "limit", l);
    }
    {
        // Repeated-field amplification (CVE-2022-1941 shape): 2-byte entries that each become a
        // message object. Bounded by the node limit before protobuf allocates them.
        ModelLimits l;
        l.max_nodes = 1000;
        std::string tail;
        for (int i = 0; i < 300000; ++i) tail += lit("\x0a\x00");
        add('A', "amplification_empty_nodes", exhausted,
            "300000 empty NodeProto entries (600 KB) with max_nodes = 1000",
            bytes_writer(with_graph_tail(relu_model(), tail)), "nodes", l);
        std::string attrs;
        for (int i = 0; i < 200000; ++i) attrs += lit("\x2a\x00");
        auto m = relu_model();
        std::string node;
        m.graph().node(0).SerializeToString(&node);
        m.mutable_graph()->clear_node();
        add('A', "amplification_empty_attributes", invalid,
            "one node with 200000 empty AttributeProto entries (400 KB)",
            bytes_writer(with_graph_tail(m, ld(1, node + attrs))), "attribute");
        std::string inits;
        for (int i = 0; i < 300000; ++i) inits += lit("\x2a\x00");
        add('A', "amplification_empty_initializers", exhausted,
            "300000 empty initializer TensorProto entries (600 KB) with max_nodes = 1000",
            bytes_writer(with_graph_tail(relu_model(), inits)), "initializers", l);
        std::string infos;
        for (int i = 0; i < 300000; ++i) infos += lit("\x6a\x00");
        add('A', "amplification_empty_value_info", exhausted,
            "300000 empty value_info entries (600 KB) with max_nodes = 1000",
            bytes_writer(with_graph_tail(relu_model(), infos)), "value_info", l);
        std::string unknown;
        for (int i = 0; i < 200000; ++i) unknown += tag(1000 + i % 1000, 0) + varint(1);
        add('A', "amplification_unknown_fields", E::ok,
            "200000 unknown varint fields in ModelProto (MessageSet-like; ignored, bounded)",
            bytes_writer(bytes_of(relu_model()) + unknown));
    }
    {
        // Length prefixes claiming more than remains (each enclosing length is consistent).
        const std::string m8 = tag(1, 0) + varint(8);
        add('A', "length_prefix_graph_4gib", invalid,
            "the graph field claims ~4 GiB; the file holds 2 bytes more",
            bytes_writer(m8 + ld_claim(7, 0xffffffffull, lit("\x0a\x00"))));
        auto a = add_model();
        std::string init = ld(8, "W") + tag(2, 0) + varint(1) + tag(1, 0) + varint(1) +
                           tag(1, 0) + varint(4) + ld_claim(9, 1ull << 30, floats_bytes({1, 2, 3, 4}));
        a.mutable_graph()->clear_initializer();
        add('A', "length_prefix_raw_data_1gib", invalid,
            "an initializer's raw_data claims 1 GiB; 16 bytes follow",
            bytes_writer(with_graph_tail(a, ld(5, init))));
        auto r = relu_model();
        r.mutable_graph()->clear_node();
        const std::string node = ld(1, "x") + ld(2, "y") + ld(4, "Relu") +
                                 ld_claim(3, 0x7fffffffull, "relu");
        add('A', "length_prefix_node_name_2gib", invalid, "a node name claims 2 GiB; 4 bytes follow",
            bytes_writer(with_graph_tail(r, ld(1, node))));
        std::string dims_init = ld(8, "W") + tag(2, 0) + varint(1) +
                                ld_claim(1, 1ull << 30, varint(1) + varint(4)) ;
        add('A', "length_prefix_packed_dims", invalid,
            "an initializer's packed dims claim 1 GiB; 2 bytes follow",
            bytes_writer(with_graph_tail(a, ld(5, dims_init))));
        auto c = relu_model();
        c.mutable_graph()->clear_node();
        const std::string tensor = tag(1, 0) + varint(4) + tag(2, 0) + varint(1) +
                                   ld_claim(9, 1ull << 30, floats_bytes({1, 2, 3, 4}));
        const std::string attr_bytes = ld(1, "value") + tag(20, 0) + varint(4) + ld(5, tensor);
        const std::string cnode = ld(2, "k") + ld(4, "Constant") + ld(5, attr_bytes);
        add('A', "length_prefix_attribute_tensor", invalid,
            "a Constant's value tensor raw_data claims 1 GiB; 16 bytes follow",
            bytes_writer(with_graph_tail(c, ld(1, cnode) + ld(1, ld(1, "x") + ld(2, "y") + ld(4, "Relu")))));
        add('A', "length_prefix_opset_domain", invalid,
            "an opset_import domain claims 2 GiB at the end of the file",
            bytes_writer(bytes_of(relu_model()) + ld_claim(8, 0x7fffffffull, ld(1, "ai"))));
        add('A', "length_varint_too_long", invalid, "a length varint of 11 bytes",
            bytes_writer(bytes_of(relu_model()) + tag(7, 2) + std::string(10, '\xff') + "\x01"));
        add('A', "bad_wire_type", invalid, "a field with wire type 7 (undefined)",
            bytes_writer(bytes_of(relu_model()) + tag(3, 7) + varint(1)));
        add('A', "group_wire_type", invalid, "a start-group field (wire type 3; ONNX has none)",
            bytes_writer(bytes_of(relu_model()) + tag(3, 3) + tag(3, 4)));
        add('A', "field_number_zero", invalid, "a field with number 0",
            bytes_writer(bytes_of(relu_model()) + tag(0, 0) + varint(1)));
    }

    // ==== B. graph level ==========================================================================
    {
        auto m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_input(0, "undefined_in");
        addm('B', "undefined_node_input", invalid, "a node reads a name nothing defines", m,
             "undefined_in");
        m = relu_model();
        m.mutable_graph()->mutable_output(0)->set_name("ghost_out");
        addm('B', "undefined_graph_output", invalid, "a graph output nothing produces", m, "ghost_out");
        m = relu_model();
        add_node(*m.mutable_graph(), "Neg", {"x"}, {"y"}, "dup_out");
        addm('B', "duplicate_node_output", invalid, "two nodes produce 'y' (SSA violation)", m, "'y'");
        m = relu_model();
        add_node(*m.mutable_graph(), "Neg", {"y"}, {"x"}, "redefine_input");
        addm('B', "node_output_redefines_input", invalid, "a node output named like a graph input",
             m, "'x'");
        auto a = add_model();
        add_node(*a.mutable_graph(), "Neg", {"x"}, {"W"}, "redefine_w");
        addm('B', "node_output_redefines_initializer", invalid,
             "a node output named like an initializer", a, "'W'");
        a = add_model();
        *a.mutable_graph()->add_initializer() = good_w();
        addm('B', "duplicate_initializer", invalid, "two initializers named 'W'", a, "'W'");
        m = relu_model();
        *m.mutable_graph()->add_input() = tensor_info("x", 1, {1, 4});
        addm('B', "duplicate_graph_input", invalid, "graph input 'x' declared twice", m, "'x'");
    }
    {
        auto m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_input(0, "y");
        addm('B', "cycle_self_loop", invalid, "a node consumes its own output", m, "cycle");
        m = relu_model();
        auto* g = m.mutable_graph();
        g->clear_node();
        add_node(*g, "Add", {"x", "b"}, {"a"}, "cyc_a");
        add_node(*g, "Relu", {"a"}, {"b"}, "cyc_b");
        add_node(*g, "Relu", {"a"}, {"y"}, "cyc_out");
        addm('B', "cycle_two_nodes", invalid, "a -> b -> a", m, "cycle");
        m = relu_model();
        g = m.mutable_graph();
        g->clear_node();
        add_node(*g, "Add", {"x", "c"}, {"a"}, "cyc_a");
        add_node(*g, "Relu", {"a"}, {"b"}, "cyc_b");
        add_node(*g, "Neg", {"b"}, {"c"}, "cyc_c");
        add_node(*g, "Relu", {"b"}, {"y"}, "cyc_out");
        addm('B', "cycle_transitive", invalid, "a -> b -> c -> a", m, "cycle");
    }
    {
        auto m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
        addm('B', "unknown_op", unsupported, "op type NoSuchOp", m, "NoSuchOp");
        m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_domain("com.example");
        addm('B', "node_domain_not_imported", unsupported,
             "a node in domain com.example that the model does not import", m, "com.example");
        m = op_model("Gelu", {1, 4});
        addm('B', "op_newer_than_opset", unsupported, "Gelu (ai.onnx 20) in an opset-13 model", m,
             "Gelu");
        m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_op_type("");
        addm('B', "empty_op_type", invalid, "a node with an empty op_type", m, "op_type");
        m = relu_model();
        add_node(*m.mutable_graph(), "Identity", {}, {"no_in"}, "inputless");
        addm('B', "node_without_inputs", invalid, "an Identity node with no inputs", m, "inputless");
        m = op_model("Softmax", {2, 3});
        bad_node(m)->set_input(0, "");
        addm('B', "required_input_omitted", invalid, "Softmax with its only input omitted (\"\")",
             m, "bad_node");
        m = op_model("GatherND", {2, 3});
        addm('B', "node_missing_required_input", invalid, "GatherND with only its data input", m,
             "bad_node");
        m = conv_model();
        bad_node(m)->mutable_input()->DeleteSubrange(1, 2);
        addm('B', "conv_missing_weights", invalid, "Conv with only its X input", m, "bad_node");
        m = mlp_model();
        m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();
        addm('B', "matmul_missing_input", invalid, "MatMul with one input", m, "mm1");
        m = op_model("OneHot", {2, 3}, {i64_tensor("depth", {}, {4})});
        addm('B', "onehot_missing_values_input", invalid, "OneHot without its 'values' input", m,
             "bad_node");
    }
    {
        auto m = op_model("Transpose", {2, 3});
        set_float(bad_node(m), "perm", 1.0f);
        addm('B', "attribute_wrong_type", invalid, "Transpose perm given as FLOAT", m, "perm");
        m = relu_model();
        auto* n = m.mutable_graph()->mutable_node(0);
        n->set_op_type("If");
        set_float(n, "then_branch", 1.0f);
        set_graph_attr(n, "else_branch", unary_branch("else_g", "Neg", "e"));
        addm('B', "attribute_wrong_type_graph", invalid, "If then_branch given as FLOAT", m,
             "then_branch");
        m = if_model();
        m.mutable_graph()->mutable_node(0)->mutable_attribute()->RemoveLast();
        addm('B', "missing_required_attribute_if", invalid, "If without else_branch", m,
             "else_branch");
        m = op_model("Cast", {1, 4});
        addm('B', "missing_required_attribute_cast", invalid, "Cast without 'to'", m, "to");
        m = op_model("Cast", {1, 4});
        set_int(bad_node(m), "to", 99);
        addm('B', "attribute_bad_enum_value", invalid, "Cast to element type 99", m, "99");
        m = relu_model();
        m.mutable_graph()->mutable_node(0)->add_attribute()->set_name("empty_attr");
        addm('B', "attribute_no_type_no_value", invalid, "an attribute with neither type nor value",
             m, "empty_attr");
        m = op_model("Softmax", {2, 3});
        set_int(bad_node(m), "axis", 1);
        set_int(bad_node(m), "axis", 0);
        addm('B', "attribute_given_twice", invalid, "Softmax 'axis' given twice", m, "axis");
    }
    {
        // Control-flow bodies.
        auto m = if_model();
        auto then_g = unary_branch("then_g", "Relu", "t");
        add_node(then_g, "Neg", {"x"}, {"t2"}, "extra");
        *then_g.add_output() = tensor_info("t2", 1, {1, 4});
        *m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g() = then_g;
        addm('B', "if_branch_output_count_mismatch", invalid,
             "If branches with 2 and 1 outputs for a 1-output node", m, "output");
        m = if_model();
        {
            onnx::GraphProto e;
            e.set_name("else_g");
            add_node(e, "Cast", {"x"}, {"e"}, "to_i64");
            set_int(e.mutable_node(0), "to", 7);
            *e.add_output() = tensor_info("e", 7, {1, 4});
            *m.mutable_graph()->mutable_node(0)->mutable_attribute(1)->mutable_g() = e;
        }
        addm('B', "if_branch_output_type_mismatch", invalid,
             "then branch yields float, else branch int64", m);
        m = if_model();
        m.mutable_graph()->mutable_node(0)->add_output("y_extra");
        addm('B', "if_node_output_count_mismatch", invalid,
             "If node with 2 outputs, branches with 1", m);
        m = if_model();
        m.mutable_graph()->mutable_input(0)->CopyFrom(tensor_info("c", 1, {}));
        addm('B', "if_condition_not_bool", invalid, "If condition declared float", m);
        auto body = loop_body();
        body.mutable_input()->RemoveLast();
        addm('B', "loop_body_input_count_mismatch", invalid,
             "Loop body with 2 inputs for 1 loop-carried value (needs 3)", loop_model(3, body));
        body = loop_body();
        body.mutable_output()->RemoveLast();
        addm('B', "loop_body_output_count_mismatch", invalid,
             "Loop body with 1 output for 1 loop-carried value (needs 2)", loop_model(3, body));
        auto sb = scan_body();
        sb.mutable_input()->RemoveLast();
        addm('B', "scan_body_input_count_mismatch", invalid,
             "Scan body with 1 input for 1 state + 1 scan input", scan_model(sb));
        sb = scan_body();
        sb.mutable_output()->RemoveLast();
        addm('B', "scan_body_output_count_mismatch", invalid,
             "Scan body with 1 output for 2 Scan outputs", scan_model(sb));
        m = if_model();
        *m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g() =
            unary_branch("then_g", "Relu", "t");
        m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)->set_input(
            0, "ghost_outer");
        addm('B', "subgraph_undefined_outer_name", invalid,
             "an If branch reads 'ghost_outer', defined in no enclosing graph", m, "ghost_outer");
    }
    {
        // Subgraph nesting 33 > max_subgraph_depth 32 (protobuf depth raised so that only the
        // subgraph limit is exceeded).
        onnx::GraphProto inner = unary_branch("leaf", "Relu", "t");
        for (int i = 0; i < 33; ++i) {
            onnx::GraphProto outer;
            outer.set_name(numbered("level", i));
            auto* n = add_node(outer, "If", {"c"}, {"t"}, numbered("nest", i));
            set_graph_attr(n, "then_branch", inner);
            set_graph_attr(n, "else_branch", unary_branch("leaf_else", "Neg", "t"));
            *outer.add_output() = tensor_info("t", 1, {1, 4});
            inner = outer;
        }
        auto m = if_model();
        *m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g() = inner;
        ModelLimits l;
        l.max_protobuf_depth = 400;
        addm('B', "subgraph_nesting_33", invalid, "If bodies nested 34 deep (limit 32)", m,
             "nesting", l);
    }
    {
        // Model-local functions (documented: unsupported), including recursive ones.
        auto fn = [](const std::string& name, const std::string& calls) {
            onnx::FunctionProto f;
            f.set_name(name);
            f.set_domain("local");
            f.add_input("fx");
            f.add_output("fy");
            auto* op = f.add_opset_import();
            op->set_domain("");
            op->set_version(13);
            auto* op2 = f.add_opset_import();
            op2->set_domain("local");
            op2->set_version(1);
            auto* n = f.add_node();
            n->set_op_type(calls.empty() ? "Relu" : calls);
            if (!calls.empty()) n->set_domain("local");
            n->add_input("fx");
            n->add_output("fy");
            return f;
        };
        auto with_functions = [&](std::vector<onnx::FunctionProto> fs_) {
            auto m = relu_model();
            auto* op = m.add_opset_import();
            op->set_domain("local");
            op->set_version(1);
            m.mutable_graph()->mutable_node(0)->set_op_type("FnA");
            m.mutable_graph()->mutable_node(0)->set_domain("local");
            for (auto& f : fs_) *m.add_functions() = f;
            return m;
        };
        addm('B', "recursive_functions", unsupported,
             "local functions FnA -> FnB -> FnA (model-local functions: unsupported)",
             with_functions({fn("FnA", "FnB"), fn("FnB", "FnA")}), "function");
        addm('B', "self_recursive_function", unsupported, "local function FnA calls itself",
             with_functions({fn("FnA", "FnA")}), "function");
        onnx::FunctionProto fa = fn("FnA", "");
        fa.clear_node();
        auto* n = fa.add_node();
        n->set_op_type("If");
        n->add_input("fx");
        n->add_output("fy");
        onnx::GraphProto b;
        b.set_name("fn_branch");
        auto* call = b.add_node();
        call->set_op_type("FnA");
        call->set_domain("local");
        call->add_input("fx");
        call->add_output("r");
        *b.add_output() = tensor_info("r", 1, {1, 4});
        set_graph_attr(n, "then_branch", b);
        set_graph_attr(n, "else_branch", b);
        addm('B', "recursive_function_via_if", unsupported,
             "local function FnA calls itself from an If body", with_functions({fa}), "function");
    }
    {
        ModelLimits l;
        l.max_nodes = 1000;
        auto m = relu_model();
        for (int i = 0; i < 1000; ++i)
            add_node(*m.mutable_graph(), "Relu", {"x"}, {numbered("r", i)});
        addm('B', "node_count_over_limit", exhausted, "1001 nodes with max_nodes = 1000", m,
             "nodes", l);
        auto f = if_model();
        auto then_g = unary_branch("then_g", "Relu", "t");
        for (int i = 0; i < 1000; ++i)
            add_node(then_g, "Relu", {"x"}, {numbered("r", i)});
        *f.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g() = then_g;
        addm('B', "node_count_over_limit_in_subgraph", exhausted,
             "1003 nodes, 1001 of them in an If branch, with max_nodes = 1000", f, "nodes", l);
        auto chain = [](int n) {
            auto c = relu_model();
            auto* g = c.mutable_graph();
            g->clear_node();
            for (int i = n - 1; i >= 0; --i)  // reverse order: the sort must reorder them all
                add_node(*g, "Relu", {i == 0 ? "x" : numbered("v", i - 1)},
                         {i == n - 1 ? "y" : numbered("v", i)}, numbered("c", i));
            return c;
        };
        ModelLimits l5;
        l5.max_nodes = 50000;
        addm('B', "deep_chain_100k_over_limit", exhausted,
             "a 100000-node chain with max_nodes = 50000", chain(100000), "nodes", l5);
        addm('B', "deep_chain_10k", E::ok, "a 10000-node chain in reverse order (loads, no recursion)",
             chain(10000));
        auto w = relu_model();
        auto* g = w.mutable_graph();
        g->clear_node();
        std::vector<std::string> outs;
        for (int i = 0; i < 5000; ++i) {
            outs.push_back(numbered("f", i));
            add_node(*g, "Relu", {"x"}, {outs.back()}, numbered("fan", i));
        }
        add_node(*g, "Sum", outs, {"y"}, "fan_in");
        addm('B', "wide_fanout_5k", E::ok, "one value read by 5000 nodes summed by one (loads)", w);
    }
    {
        auto m = relu_model();
        m.mutable_graph()->clear_output();
        addm('B', "no_outputs", E::ok, "a graph with no outputs (documented: loads)", m);
        m = relu_model();
        *m.mutable_graph()->add_output() = tensor_info("x", 1, {1, 4});
        addm('B', "output_is_input", E::ok, "a graph output that is a graph input (documented: copy)", m);
        m = relu_model();
        m.mutable_graph()->mutable_output(0)->set_name("");
        addm('B', "empty_output_name", invalid, "a graph output with an empty name", m, "empty name");
        m = relu_model();
        *m.mutable_graph()->add_input() = tensor_info("", 1, {1, 4});
        addm('B', "empty_input_name", invalid, "a graph input with an empty name", m, "empty name");
        auto a = add_model();
        a.mutable_graph()->mutable_initializer(0)->set_name("");
        a.mutable_graph()->mutable_node(0)->set_input(1, "");
        addm('B', "empty_initializer_name", invalid, "an initializer with an empty name", a,
             "empty name");
        a = add_model();
        *a.mutable_graph()->add_input() = tensor_info("W", 1, {1, 4});
        addm('B', "initializer_listed_as_input", E::ok,
             "an initializer also listed as a graph input (documented: keeps its value)", a);
        m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_name(std::string(5000, 'n'));
        addm('B', "node_name_too_long", invalid, "a 5000-byte node name", m, "4096");
        m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_output(0, std::string(5000, 'v'));
        m.mutable_graph()->mutable_output(0)->set_name(std::string(5000, 'v'));
        addm('B', "value_name_too_long", invalid, "a 5000-byte value name", m, "4096");
        addm('B', "loop_trip_count_int64_max", E::ok,
             "Loop with M = INT64_MAX and cond always true (loads; runs until the deadline)",
             loop_model(std::numeric_limits<std::int64_t>::max()));
        m = relu_model();
        {
            auto* in = m.mutable_graph()->add_input();
            in->set_name("seq_in");
            in->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
        }
        addm('B', "sequence_graph_input", unsupported,
             "a sequence-typed graph input (documented: unsupported)", m, "seq_in");
        m = relu_model();
        {
            auto* in = m.mutable_graph()->add_input();
            in->set_name("map_in");
            auto* mt = in->mutable_type()->mutable_map_type();
            mt->set_key_type(7);
            mt->mutable_value_type()->mutable_tensor_type()->set_elem_type(1);
        }
        addm('B', "map_graph_input", unsupported, "a map-typed graph input (documented: unsupported)",
             m, "map_in");
        m = relu_model();
        add_node(*m.mutable_graph(), "Optional", {"x"}, {"opt"}, "make_opt");
        {
            auto* o = m.mutable_graph()->add_output();
            o->set_name("opt");
            o->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
        }
        m.mutable_opset_import(0)->set_version(15);
        addm('B', "optional_graph_output", unsupported,
             "an optional-typed graph output (documented: unsupported)", m, "opt");
    }

    // ==== C. tensor / initializer level ===========================================================
    {
        auto w = good_w();
        w.set_dims(0, -1);
        addm('C', "negative_dim_initializer", invalid, "initializer dims [-1, 4]", add_model(w), "'W'");
        auto m = relu_model();
        m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(-4);
        addm('C', "negative_dim_declared_input", invalid, "graph input declared [1, -4]", m, "'x'");
        w = good_w();
        w.clear_dims();
        for (int i = 0; i < 4; ++i) w.add_dims(std::int64_t{1} << 20);
        addm('C', "dims_overflow_int64", invalid, "initializer dims 4 x 2^20 (2^80 elements)",
             add_model(w), "'W'");
        w = good_w();
        w.clear_dims();
        w.add_dims(std::int64_t{1} << 61);
        w.add_dims(4);
        addm('C', "dims_bytes_overflow", invalid,
             "initializer dims [2^61, 4]: element count fits int64, bytes overflow", add_model(w), "'W'");
        w = good_w();
        w.clear_dims();
        for (int i = 0; i < 9; ++i) w.add_dims(1);
        w.set_raw_data(floats_bytes({1}));
        addm('C', "rank_9_initializer", invalid, "initializer of rank 9 (max 8)", add_model(w), "rank");
        {
            // A bool stored as a byte other than 0/1 (a bit flip in raw_data): not a bool value.
            onnx::ModelProto lm = loop_model();
            lm.mutable_graph()->mutable_initializer(1)->set_raw_data(std::string(1, '\x81'));
            addm('C', "bool_initializer_byte_not_0_or_1", invalid,
                 "Loop cond initializer stored as byte 0x81", lm, "must be 0 or 1");
        }
        m = relu_model();
        auto* shp = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
        for (int i = 0; i < 7; ++i) shp->add_dim()->set_dim_value(1);
        addm('C', "rank_9_declared_input", invalid, "graph input declared with rank 9", m, "rank");
        w = good_w();
        w.clear_dims();
        for (int i = 0; i < 64; ++i) w.add_dims(1);
        w.set_raw_data(floats_bytes({1}));
        addm('C', "rank_64_initializer", invalid, "initializer of rank 64", add_model(w), "rank");
    }
    {
        auto w = good_w();
        w.mutable_raw_data()->pop_back();
        addm('C', "raw_data_short", invalid, "raw_data of 15 bytes for float[1,4]", add_model(w), "'W'");
        w = good_w();
        w.mutable_raw_data()->push_back('\0');
        addm('C', "raw_data_long", invalid, "raw_data of 17 bytes for float[1,4]", add_model(w), "'W'");
        w = good_w();
        w.clear_dims();
        w.set_raw_data(floats_bytes({1, 2}));
        addm('C', "raw_data_scalar_mismatch", invalid, "scalar float with 8 bytes of raw_data",
             add_model(w), "'W'");
        w = good_w();
        w.clear_raw_data();
        for (float f : {1.f, 2.f, 3.f}) w.add_float_data(f);
        addm('C', "typed_count_short", invalid, "float_data with 3 values for 4 elements",
             add_model(w), "'W'");
        w = good_w();
        w.clear_raw_data();
        for (float f : {1.f, 2.f, 3.f, 4.f, 5.f}) w.add_float_data(f);
        addm('C', "typed_count_long", invalid, "float_data with 5 values for 4 elements",
             add_model(w), "'W'");
        w = good_w();
        w.clear_raw_data();
        for (int i = 0; i < 4; ++i) w.add_int64_data(i);
        addm('C', "typed_wrong_field", invalid, "a float tensor's values in int64_data",
             add_model(w), "'W'");
        w = good_w();
        w.add_float_data(1.0f);
        addm('C', "raw_and_typed_data", invalid, "data in both raw_data and float_data",
             add_model(w), "'W'");
        auto idx = i64_tensor("idx", {2}, {0, 1});
        idx.clear_raw_data();
        idx.add_int64_data(0);
        addm('C', "int64_data_count_mismatch", invalid, "int64 tensor [2] with 1 int64_data value",
             op_model("Gather", {2, 3}, {idx}), "'idx'");
        onnx::TensorProto zp;
        zp.set_name("zp");
        zp.set_data_type(2);
        zp.add_int32_data(0);
        zp.add_int32_data(0);
        addm('C', "int32_data_count_mismatch", invalid, "uint8 scalar with 2 int32_data values",
             op_model("QuantizeLinear", {1, 4}, {float_tensor("scale", {}, {0.5f}), zp}), "'zp'");
        onnx::TensorProto zp300;
        zp300.set_name("zp");
        zp300.set_data_type(2);
        zp300.add_int32_data(300);
        addm('C', "int32_data_out_of_type_range", invalid,
             "uint8 zero point given as int32_data 300 (outside uint8)",
             op_model("QuantizeLinear", {1, 4}, {float_tensor("scale", {}, {0.5f}), zp300}), "'zp'");
    }
    {
        auto w = good_w();
        w.clear_dims();
        w.add_dims(std::int64_t{1} << 40);
        addm('C', "huge_dims_tiny_raw_data", invalid, "dims [2^40] (4 TiB of float) with 16 bytes",
             add_model(w), "'W'");
        w = good_w();
        w.clear_dims();
        w.add_dims(std::int64_t{1} << 31);  // 8 GiB: under the tensor limit, over the data
        w.clear_raw_data();
        for (float f : {1.f, 2.f, 3.f, 4.f}) w.add_float_data(f);
        addm('C', "huge_dims_tiny_typed_data", invalid,
             "dims [2^31] (8 GiB of float) with 4 float_data values: rejected before allocation",
             add_model(w), "'W'");
        w = good_w();
        w.clear_dims();
        w.add_dims(std::int64_t{1} << 31);
        w.clear_raw_data();
        addm('C', "huge_dims_no_data", invalid,
             "dims [2^31] with no data at all: rejected before allocation", add_model(w), "'W'");
        auto k = relu_model();
        k.mutable_graph()->clear_node();
        auto* n = add_node(*k.mutable_graph(), "Constant", {}, {"k"}, "huge_const");
        auto big = float_tensor("kval", {}, {1});
        big.add_dims(std::int64_t{1} << 40);
        set_tensor(n, "value", big);
        add_node(*k.mutable_graph(), "Add", {"x", "k"}, {"y"}, "add_k");
        addm('C', "huge_dims_attribute_tensor", invalid,
             "Constant value dims [2^40] with 4 bytes", k, "huge_const");
    }
    {
        auto w = good_w();
        w.set_data_type(99);
        addm('C', "data_type_99", invalid, "initializer data_type 99", add_model(w), "99");
        w.set_data_type(0);
        addm('C', "data_type_undefined", invalid, "initializer data_type 0 (UNDEFINED)", add_model(w), "'W'");
        w.set_data_type(-3);
        addm('C', "data_type_negative", invalid, "initializer data_type -3", add_model(w), "'W'");
        w.set_data_type(17);
        addm('C', "data_type_float8", unsupported, "FLOAT8E4M3FN initializer", add_model(w), "FLOAT8E4M3FN");
        w.set_data_type(14);
        addm('C', "data_type_complex64", unsupported, "COMPLEX64 initializer", add_model(w), "COMPLEX64");
        w.set_data_type(22);
        addm('C', "data_type_int4", unsupported, "INT4 initializer", add_model(w), "INT4");
        auto m = relu_model();
        m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
        addm('C', "declared_elem_type_99", invalid, "graph input elem_type 99", m, "99");
        w = good_w();
        w.set_data_type(8);
        addm('C', "string_tensor_raw_data", invalid, "string tensor with raw_data", add_model(w), "string");
        onnx::TensorProto s;
        s.set_name("S");
        s.set_data_type(8);
        s.add_dims(4);
        for (const char* x : {"a", "b", "c"}) s.add_string_data(x);
        auto sm = relu_model();
        *sm.mutable_graph()->add_initializer() = s;
        addm('C', "string_tensor_count_mismatch", invalid, "string tensor [4] with 3 strings", sm, "'S'");
        w = good_w();
        w.mutable_segment()->set_begin(0);
        w.mutable_segment()->set_end(4);
        addm('C', "segmented_tensor", unsupported, "an initializer with a segment", add_model(w), "segment");
    }
    {
        // Sparse tensors (documented: unsupported), in the four shapes of bad sparse data.
        auto sparse = [](const std::vector<std::int64_t>& idx, int nvalues) {
            onnx::SparseTensorProto sp;
            sp.add_dims(1);
            sp.add_dims(4);
            std::vector<float> vals(static_cast<std::size_t>(nvalues), 1.0f);
            *sp.mutable_values() = float_tensor("SW", {nvalues}, vals);
            *sp.mutable_indices() = i64_tensor("", {static_cast<std::int64_t>(idx.size())}, idx);
            auto m = relu_model();
            *m.mutable_graph()->add_sparse_initializer() = sp;
            return m;
        };
        addm('C', "sparse_indices_out_of_bounds", unsupported,
             "sparse initializer with index 9 in 4 elements (sparse: unsupported)", sparse({1, 9}, 2), "sparse");
        addm('C', "sparse_indices_negative", unsupported,
             "sparse initializer with index -1 (sparse: unsupported)", sparse({-1, 2}, 2), "sparse");
        addm('C', "sparse_indices_unsorted", unsupported,
             "sparse initializer with indices 3, 1 (sparse: unsupported)", sparse({3, 1}, 2), "sparse");
        addm('C', "sparse_nnz_mismatch", unsupported,
             "sparse initializer with 2 indices and 3 values (sparse: unsupported)", sparse({0, 1}, 3), "sparse");
        auto k = relu_model();
        k.mutable_graph()->clear_node();
        auto* n = add_node(*k.mutable_graph(), "Constant", {}, {"k"}, "sparse_const");
        onnx::SparseTensorProto sp;
        sp.add_dims(4);
        *sp.mutable_values() = float_tensor("", {1}, {1});
        *sp.mutable_indices() = i64_tensor("", {1}, {7});
        auto* a = attr(n, "sparse_value", onnx::AttributeProto::SPARSE_TENSOR);
        *a->mutable_sparse_tensor() = sp;
        add_node(*k.mutable_graph(), "Add", {"x", "k"}, {"y"}, "add_k");
        addm('C', "sparse_constant_attribute", unsupported,
             "Constant with a sparse_value (index 7 of 4; sparse: unsupported)", k, "sparse");
    }
    {
        // External data: path attacks.
        auto weights = [](const fs::path& d) { write_weights(d); };
        auto ext = [&](std::string name, std::string loc, std::string what, std::string mention = {},
                       std::function<void(const fs::path&)> setup = nullptr) {
            add('C', std::move(name), invalid, std::move(what),
                external_writer(external_model(loc),
                                [weights, setup](const fs::path& d) {
                                    weights(d);
                                    if (setup) setup(d);
                                }),
                std::move(mention));
        };
        ext("ext_parent_dir", "../w.bin", "external location '../w.bin'", "escapes");
        ext("ext_nested_parent", "a/../../w.bin", "external location 'a/../../w.bin'", "escapes",
            [](const fs::path& d) { fs::create_directory(d / "a"); });
        ext("ext_absolute", "/etc/passwd", "external location '/etc/passwd'", "escapes");
        ext("ext_drive_path", "C:\\w.bin", "external location 'C:\\w.bin'", "escapes");
        ext("ext_unc_path", "\\\\server\\share\\w.bin", "external location '\\\\server\\share\\w.bin'",
            "escapes");
        ext("ext_empty_location", "", "external location ''", "empty location");
        ext("ext_symlink_final", "w_link.bin", "external file is a symlink (to w.bin, inside)",
            "symlink", [](const fs::path& d) { fs::create_symlink("w.bin", d / "w_link.bin"); });
        ext("ext_symlink_parent", "linkdir/w.bin",
            "external path's directory component is a symlink (to a directory inside)", "symlink",
            [](const fs::path& d) {
                fs::create_directory(d / "real");
                write_weights(d / "real");
                fs::create_directory_symlink("real", d / "linkdir");
            });
        ext("ext_hardlink", "w.bin", "external file has 2 hard links (st_nlink > 1)", "hard link",
            [](const fs::path& d) {
                check_posix(::link((d / "w.bin").c_str(), (d / "w_alias.bin").c_str()), "link");
            });
        ext("ext_fifo", "fifo.bin", "external file is a FIFO (must not block)", "not a regular file",
            [](const fs::path& d) { check_posix(::mkfifo((d / "fifo.bin").c_str(), 0600), "mkfifo"); });
        ext("ext_dev_zero", "/dev/zero", "external location '/dev/zero'", "escapes");
        ext("ext_directory", "subdir", "external location is a directory", "not a regular file",
            [](const fs::path& d) { fs::create_directory(d / "subdir"); });
        ext("ext_symlink_to_dev_zero", "zero.bin", "external file is a symlink to /dev/zero",
            "symlink", [](const fs::path& d) { fs::create_symlink("/dev/zero", d / "zero.bin"); });
        ext("ext_dot_then_parent", "./../w.bin", "external location './../w.bin'", "escapes");
        ext("ext_backslash_relative", "sub\\w.bin", "external location with a backslash", "escapes");
        ext("ext_nul_in_location", lit("w.bin\0.txt"), "external location with a NUL byte",
            "escapes");
        ext("ext_in_memory_sentinel", "*/_ORT_MEM_ADDR_/*", "ORT's in-memory address sentinel",
            "in-memory");
        ext("ext_missing_file", "missing.bin", "external file does not exist", "missing.bin");
        ext("ext_missing_directory", "nodir/w.bin", "external file's directory does not exist", "nodir");
    }
    {
        // External data: offsets and lengths (w.bin holds 6 floats = 24 bytes).
        auto six = [](const fs::path& d) { write_weights(d, "w.bin", 2); };
        auto ext = [&](std::string name, std::string off, std::string len, std::string what,
                       std::string mention) {
            add('C', std::move(name), invalid, std::move(what),
                external_writer(external_model("w.bin", off, len), six), std::move(mention));
        };
        ext("ext_offset_length_beyond_file", "16", "16", "offset 16 + length 16 > 24-byte file", "exceeds");
        ext("ext_offset_beyond_file", "100", "16", "offset 100 beyond a 24-byte file", "exceeds");
        ext("ext_offset_length_overflow", "18446744073709551615", "16",
            "offset 2^64-1 + length 16 overflows", "exceeds");
        ext("ext_offset_too_many_digits", "99999999999999999999999", "16",
            "offset of 23 digits (overflows uint64)", "offset");
        ext("ext_length_mismatch", "0", "12", "length 12 for a 16-byte tensor", "length");
        ext("ext_length_huge", "0", "18446744073709551615", "length 2^64-1", "length");
        ext("ext_negative_offset", "-1", "16", "offset -1", "offset");
        ext("ext_negative_length", "0", "-16", "length -16", "length");
        ext("ext_offset_not_a_number", "abc", "16", "offset 'abc'", "offset");
        add('C', "ext_file_too_short", invalid, "no offset/length; the file has 8 of 16 bytes",
            external_writer(external_model("w.bin"),
                            [](const fs::path& d) { write_bytes(d / "w.bin", floats_bytes({1, 2})); }),
            "exceeds");
        auto m = external_model("w.bin");
        auto* kv = m.mutable_graph()->mutable_initializer(0)->add_external_data();
        kv->set_key("sha256");
        kv->set_value("00");
        add('C', "ext_unknown_key", invalid, "external_data key 'sha256' (unknown)",
            external_writer(m, [](const fs::path& d) { write_weights(d); }), "sha256");
        m = external_model("w.bin");
        m.mutable_graph()->mutable_initializer(0)->set_raw_data(floats_bytes({1, 2, 3, 4}));
        add('C', "ext_also_raw_data", invalid, "external tensor that also has raw_data",
            external_writer(m, [](const fs::path& d) { write_weights(d); }), "inline data");
        m = external_model("w.bin");
        m.mutable_graph()->mutable_initializer(0)->clear_external_data();
        add('C', "ext_no_location_key", invalid, "data_location EXTERNAL without external_data entries",
            external_writer(m, [](const fs::path& d) { write_weights(d); }), "empty location");
        m = external_model("w.bin");
        kv = m.mutable_graph()->mutable_initializer(0)->add_external_data();
        kv->set_key("checksum");
        kv->set_value("0123456789abcdef");
        add('C', "ext_checksum_not_verified", E::ok,
            "a wrong 'checksum' (not verified by design: loads)",
            external_writer(m, [](const fs::path& d) { write_weights(d); }));
        ModelLimits l;
        l.max_external_bytes = 8;
        add('C', "ext_over_max_external_bytes", exhausted, "16 external bytes with max_external_bytes 8",
            external_writer(external_model("w.bin"), [](const fs::path& d) { write_weights(d); }),
            "limit", l);
        auto s = external_model("w.bin");
        s.mutable_graph()->mutable_initializer(0)->set_data_type(8);
        add('C', "ext_string_tensor", invalid, "a string tensor with external data",
            external_writer(s, [](const fs::path& d) { write_weights(d); }), "string");
    }

    // ==== D. operator semantics (attributes and constant data) ====================================
    {
        auto m = op_model("DepthToSpace", {1, 4, 2, 2});
        set_int(bad_node(m), "blocksize", 0);
        addm('D', "depth_to_space_blocksize_0", invalid, "DepthToSpace blocksize 0", m, "bad_node");
        m = op_model("SpaceToDepth", {1, 1, 4, 4});
        set_int(bad_node(m), "blocksize", 0);
        addm('D', "space_to_depth_blocksize_0", invalid, "SpaceToDepth blocksize 0", m, "bad_node");
        m = op_model("DepthToSpace", {1, 4, 2, 2});
        set_int(bad_node(m), "blocksize", -2);
        addm('D', "depth_to_space_blocksize_negative", invalid, "DepthToSpace blocksize -2", m, "bad_node");
        m = conv_model();
        set_int(bad_node(m), "group", 0);
        addm('D', "conv_group_0", invalid, "Conv group 0", m, "bad_node");
        m = conv_model();
        set_ints(bad_node(m), "strides", {0, 1});
        addm('D', "conv_stride_0", invalid, "Conv strides [0, 1]", m, "bad_node");
        m = conv_model();
        set_ints(bad_node(m), "dilations", {1, 0});
        addm('D', "conv_dilation_0", invalid, "Conv dilations [1, 0]", m, "bad_node");
        m = conv_model();
        set_int(bad_node(m), "group", 3);
        addm('D', "conv_channels_not_divisible_by_group", invalid, "Conv of 2 channels with group 3",
             m, "bad_node");
        m = conv_model();
        set_ints(bad_node(m), "pads", {-2, 0, 0, 0});
        bad_node(m)->mutable_attribute()->DeleteSubrange(0, 1);  // drop the original pads
        addm('D', "conv_negative_pads", invalid, "Conv pads [-2, 0, 0, 0]", m, "bad_node");
        m = conv_model();
        bad_node(m)->mutable_attribute()->DeleteSubrange(0, 1);
        set_ints(bad_node(m), "pads", {0, 0, 0, 0});
        m.mutable_graph()->mutable_input(0)->CopyFrom(tensor_info("x", 1, {1, 2, 2, 2}));
        addm('D', "conv_kernel_larger_than_input", invalid,
             "Conv 3x3 on a 2x2 input without pads (negative output dims)", m, "bad_node");
        m = conv_model();
        bad_node(m)->mutable_attribute()->DeleteSubrange(1, 1);
        set_ints(bad_node(m), "kernel_shape", {5, 5});
        addm('D', "conv_kernel_shape_mismatch", invalid, "Conv kernel_shape 5x5 for 3x3 weights", m,
             "bad_node");
        m = op_model("MaxPool", {1, 1, 4, 4});
        set_ints(bad_node(m), "kernel_shape", {2, 2});
        set_ints(bad_node(m), "strides", {0, 0});
        addm('D', "maxpool_stride_0", invalid, "MaxPool strides [0, 0]", m, "bad_node");
        m = op_model("MaxPool", {1, 1, 4, 4});
        set_ints(bad_node(m), "kernel_shape", {0, 2});
        addm('D', "maxpool_kernel_0", invalid, "MaxPool kernel_shape [0, 2]", m, "bad_node");
        m = op_model("AveragePool", {1, 1, 2, 2});
        set_ints(bad_node(m), "kernel_shape", {3, 3});
        addm('D', "avgpool_kernel_larger_than_input", invalid,
             "AveragePool 3x3 on a 2x2 input without pads", m, "bad_node");
        m = op_model("MaxPool", {1, 1, 4, 4});
        set_ints(bad_node(m), "kernel_shape", {2, 2});
        set_ints(bad_node(m), "dilations", {0, 1});
        addm('D', "maxpool_dilation_0", invalid, "MaxPool dilations [0, 1]", m, "bad_node");
        m = op_model("Split", {2, 6}, {}, 18);
        set_int(bad_node(m), "num_outputs", 0);
        addm('D', "split_num_outputs_0", invalid, "Split (opset 18) num_outputs 0", m, "bad_node");
        m = op_model("Split", {2, 6}, {i64_tensor("split", {2}, {1, 7})});
        set_int(bad_node(m), "axis", 1);
        bad_node(m)->add_output("y2");
        addm('D', "split_sizes_mismatch", invalid, "Split sizes [1, 7] of a dim of 6", m, "bad_node");
        m = op_model("LRN", {1, 3, 2, 2});
        set_int(bad_node(m), "size", 0);
        addm('D', "lrn_size_0", invalid, "LRN size 0", m, "bad_node");
    }
    {
        // Integer division by constants at load (constant folding must not trap).
        auto binary_const = [](const std::string& op, onnx::TensorProto a, onnx::TensorProto b) {
            onnx::ModelProto m = empty_model();
            auto* g = m.mutable_graph();
            *g->add_input() = tensor_info("x", 7, {1});
            g->add_output()->set_name("y");
            *g->add_initializer() = a;
            *g->add_initializer() = b;
            add_node(*g, op, {a.name(), b.name()}, {"q"}, "bad_node");
            add_node(*g, "Add", {"x", "q"}, {"y"}, "use_q");
            return m;
        };
        const std::int64_t mn = std::numeric_limits<std::int64_t>::min();
        addm('D', "int64_min_div_minus_one", invalid, "Div of constants INT64_MIN / -1",
             binary_const("Div", i64_tensor("A", {1}, {mn}), i64_tensor("B", {1}, {-1})), "bad_node");
        addm('D', "int_div_by_zero_constant", invalid, "Div of int64 constants 7 / 0",
             binary_const("Div", i64_tensor("A", {1}, {7}), i64_tensor("B", {1}, {0})), "bad_node");
        addm('D', "int_mod_by_zero_constant", invalid, "Mod of int64 constants 7 % 0",
             binary_const("Mod", i64_tensor("A", {1}, {7}), i64_tensor("B", {1}, {0})), "bad_node");
        addm('D', "int64_min_mod_minus_one", E::ok,
             "Mod of constants INT64_MIN % -1 (defined: 0; must not trap at load)",
             binary_const("Mod", i64_tensor("A", {1}, {mn}), i64_tensor("B", {1}, {-1})));
    }
    {
        auto axis_case = [&](std::string name, const std::string& op, std::vector<std::int64_t> dims,
                             std::int64_t axis, std::vector<onnx::TensorProto> inits = {},
                             int opset = 13) {
            auto m = op_model(op, dims, inits, opset);
            set_int(bad_node(m), "axis", axis);
            addm('D', std::move(name), invalid,
                 op + numbered(" axis ", axis) + numbered(" on rank ", dims.size()), m,
                 "bad_node");
        };
        axis_case("softmax_axis_out_of_range", "Softmax", {2, 3}, 2);
        axis_case("softmax_axis_below_range", "Softmax", {2, 3}, -3);
        axis_case("concat_axis_out_of_range", "Concat", {2, 3}, 3);
        axis_case("gather_axis_out_of_range", "Gather", {2, 3}, -3, {i64_tensor("idx", {1}, {0})});
        axis_case("flatten_axis_out_of_range", "Flatten", {2, 3}, 4);
        axis_case("argmax_axis_out_of_range", "ArgMax", {2, 3}, 5);
        axis_case("layernorm_axis_out_of_range", "LayerNormalization", {2, 3}, 3,
                  {float_tensor("gamma", {3}, {1, 1, 1})}, 17);
        auto cs = op_model("CumSum", {2, 3}, {i64_tensor("ax", {}, {9})});
        addm('D', "cumsum_axis_out_of_range", invalid, "CumSum axis input 9 on rank 2", cs, "bad_node");
        auto m = op_model("ReduceSum", {2, 3}, {i64_tensor("axes", {1}, {5})});
        addm('D', "reduce_axes_out_of_range", invalid, "ReduceSum axes [5] on rank 2", m, "bad_node");
        m = op_model("ReduceMean", {2, 3});
        set_ints(bad_node(m), "axes", {0, 0});
        addm('D', "reduce_axes_duplicate", invalid, "ReduceMean axes [0, 0]", m, "bad_node");
        m = op_model("Transpose", {2, 3});
        set_ints(bad_node(m), "perm", {0, 0});
        addm('D', "transpose_perm_duplicate", invalid, "Transpose perm [0, 0]", m, "bad_node");
        m = op_model("Transpose", {2, 3});
        set_ints(bad_node(m), "perm", {1});
        addm('D', "transpose_perm_wrong_length", invalid, "Transpose perm [1] on rank 2", m, "bad_node");
        m = op_model("Transpose", {2, 3});
        set_ints(bad_node(m), "perm", {0, 2});
        addm('D', "transpose_perm_out_of_range", invalid, "Transpose perm [0, 2] on rank 2", m, "bad_node");
        m = op_model("Pad", {2, 3}, {i64_tensor("pads", {4}, {0, -5, 0, 0})});
        addm('D', "pad_negative_beyond_dim", invalid, "Pad pads [0,-5,0,0] on a dim of 3", m, "bad_node");
        m = op_model("Pad", {2, 3}, {i64_tensor("pads", {3}, {0, 0, 0})});
        addm('D', "pad_wrong_length", invalid, "Pad with 3 pads on rank 2", m, "bad_node");
        m = op_model("Slice", {2, 3},
                     {i64_tensor("starts", {1}, {0}), i64_tensor("ends", {1}, {1}),
                      i64_tensor("axes", {1}, {4})});
        addm('D', "slice_axes_out_of_range", invalid, "Slice axes [4] on rank 2", m, "bad_node");
        m = op_model("Slice", {2, 3},
                     {i64_tensor("starts", {1}, {0}), i64_tensor("ends", {1}, {1}),
                      i64_tensor("axes", {1}, {0}), i64_tensor("steps", {1}, {0})});
        addm('D', "slice_step_0", invalid, "Slice steps [0]", m, "bad_node");
        m = op_model("Squeeze", {2, 3}, {i64_tensor("axes", {1}, {3})});
        addm('D', "squeeze_axis_out_of_range", invalid, "Squeeze axes [3] on rank 2", m, "bad_node");
        m = op_model("Squeeze", {2, 3}, {i64_tensor("axes", {1}, {0})});
        addm('D', "squeeze_non_unit_dim", invalid, "Squeeze axis 0 of size 2", m, "bad_node");
        m = op_model("Unsqueeze", {2, 3}, {i64_tensor("axes", {1}, {5})});
        addm('D', "unsqueeze_axis_out_of_range", invalid, "Unsqueeze axes [5] on rank 2", m, "bad_node");
    }
    {
        auto m = op_model("Gather", {2, 3}, {i64_tensor("idx", {1}, {5})});
        addm('D', "gather_const_index_out_of_range", invalid, "Gather constant index 5 on a dim of 2",
             m, "bad_node");
        m = op_model("Gather", {2, 3}, {i64_tensor("idx", {1}, {-3})});
        addm('D', "gather_const_index_negative", invalid, "Gather constant index -3 on a dim of 2", m,
             "bad_node");
        m = op_model("Gather", {2, 3},
                     {i64_tensor("idx", {1}, {std::numeric_limits<std::int64_t>::min()})});
        addm('D', "gather_const_index_int64_min", invalid, "Gather constant index INT64_MIN", m,
             "bad_node");
        m = op_model("GatherElements", {2, 3}, {i64_tensor("idx", {2, 1}, {0, 7})});
        addm('D', "gather_elements_const_out_of_range", invalid, "GatherElements constant index 7", m,
             "bad_node");
        m = op_model("GatherND", {2, 3}, {i64_tensor("idx", {1, 2}, {1, 9})});
        addm('D', "gather_nd_const_out_of_range", invalid, "GatherND constant index [1, 9]", m, "bad_node");
        m = op_model("ScatterND", {2, 3},
                     {i64_tensor("idx", {1, 1}, {4}), float_tensor("upd", {1, 3}, {1, 2, 3})});
        addm('D', "scatter_nd_const_out_of_range", invalid, "ScatterND constant index 4 on a dim of 2",
             m, "bad_node");
        m = op_model("ScatterElements", {2, 3},
                     {i64_tensor("idx", {1, 1}, {-9}), float_tensor("upd", {1, 1}, {1})});
        addm('D', "scatter_elements_const_out_of_range", invalid,
             "ScatterElements constant index -9 on a dim of 2", m, "bad_node");
        m = op_model("OneHot", {2, 3},
                     {i64_tensor("depth", {}, {-4}), float_tensor("values", {2}, {0, 1})});
        m.mutable_graph()->mutable_input(0)->CopyFrom(tensor_info("x", 7, {2, 3}));
        addm('D', "onehot_negative_depth", invalid, "OneHot depth -4", m, "bad_node");
        m = op_model("TopK", {2, 3}, {i64_tensor("k", {1}, {-1})});
        bad_node(m)->add_output("topk_idx");
        addm('D', "topk_negative_k", invalid, "TopK k -1", m, "bad_node");
        m = op_model("TopK", {2, 3}, {i64_tensor("k", {1}, {4})});
        bad_node(m)->add_output("topk_idx");
        addm('D', "topk_k_over_dim", invalid, "TopK k 4 on a dim of 3", m, "bad_node");
    }
    {
        auto m = op_model("Reshape", {2, 3}, {i64_tensor("shape", {2}, {4, 4})});
        addm('D', "reshape_element_count", invalid, "Reshape [2,3] to [4,4]", m, "bad_node");
        m = op_model("Reshape", {2, 3}, {i64_tensor("shape", {2}, {-1, -1})});
        addm('D', "reshape_two_minus_one", invalid, "Reshape with two -1 dims", m, "bad_node");
        m = op_model("Reshape", {2, 3}, {i64_tensor("shape", {9}, {1, 1, 1, 1, 1, 1, 1, 2, 3})});
        addm('D', "reshape_rank_9", invalid, "Reshape to rank 9 (max 8)", m, "bad_node");
        m = op_model("Reshape", {2, 3}, {i64_tensor("shape", {2}, {-2, 3})});
        addm('D', "reshape_negative_dim", invalid, "Reshape to [-2, 3]", m, "bad_node");
        const std::int64_t huge = std::int64_t{1} << 40;
        m = op_model("Expand", {1, 4}, {i64_tensor("shape", {2}, {huge, 4})});
        addm('D', "expand_over_budget", invalid, "Expand [1,4] to [2^40, 4] (16 TiB)", m, "bad_node");
        m = op_model("Tile", {1, 4}, {i64_tensor("repeats", {2}, {huge, 1})});
        addm('D', "tile_over_budget", invalid, "Tile [1,4] by [2^40, 1]", m, "bad_node");
        m = op_model("Tile", {1, 4}, {i64_tensor("repeats", {2}, {-1, 1})});
        addm('D', "tile_negative_repeats", invalid, "Tile repeats [-1, 1]", m, "bad_node");
        {
            auto c = empty_model();
            auto* g = c.mutable_graph();
            *g->add_input() = tensor_info("x", 1, {1});
            g->add_output()->set_name("y");
            *g->add_initializer() = i64_tensor("shape", {2}, {huge, 4});
            add_node(*g, "ConstantOfShape", {"shape"}, {"big"}, "bad_node");
            add_node(*g, "Add", {"x", "big"}, {"y"}, "use_big");
            addm('D', "constant_of_shape_over_budget", invalid, "ConstantOfShape [2^40, 4]", c,
                 "bad_node");
            *g->mutable_initializer(0) = i64_tensor("shape", {2}, {-1, 4});
            addm('D', "constant_of_shape_negative", invalid, "ConstantOfShape [-1, 4]", c, "bad_node");
        }
        {
            auto r = empty_model();
            auto* g = r.mutable_graph();
            *g->add_input() = tensor_info("x", 7, {1});
            g->add_output()->set_name("y");
            *g->add_initializer() = i64_tensor("start", {}, {0});
            *g->add_initializer() = i64_tensor("limit", {}, {std::int64_t{1} << 60});
            *g->add_initializer() = i64_tensor("delta", {}, {1});
            add_node(*g, "Range", {"start", "limit", "delta"}, {"big"}, "bad_node");
            add_node(*g, "Add", {"x", "big"}, {"y"}, "use_big");
            addm('D', "range_over_budget", invalid, "Range(0, 2^60, 1) (8 EiB)", r, "bad_node");
            *g->mutable_initializer(2) = i64_tensor("delta", {}, {0});
            addm('D', "range_delta_0", invalid, "Range with delta 0", r, "bad_node");
        }
    }
    {
        auto q = [&](std::string name, std::string what, float scale) {
            auto m = op_model("QuantizeLinear", {1, 4},
                              {float_tensor("scale", {}, {scale}), u8_tensor("zp", {}, {0})});
            addm('D', std::move(name), invalid, std::move(what), m, "bad_node");
        };
        q("quantize_scale_zero", "QuantizeLinear scale 0", 0.0f);
        q("quantize_scale_negative", "QuantizeLinear scale -1", -1.0f);
        q("quantize_scale_nan", "QuantizeLinear scale NaN", std::numeric_limits<float>::quiet_NaN());
        q("quantize_scale_inf", "QuantizeLinear scale +Inf", std::numeric_limits<float>::infinity());
        auto dq = op_model("DequantizeLinear", {1, 4},
                           {float_tensor("scale", {}, {0.0f}), u8_tensor("zp", {}, {0})}, 13, 2);
        addm('D', "dequantize_scale_zero", invalid, "DequantizeLinear scale 0", dq, "bad_node");
        dq = op_model("DequantizeLinear", {1, 4},
                      {float_tensor("scale", {}, {std::numeric_limits<float>::infinity()}),
                       u8_tensor("zp", {}, {0})},
                      13, 2);
        addm('D', "dequantize_scale_inf", invalid, "DequantizeLinear scale +Inf", dq, "bad_node");
        auto pa = op_model("QuantizeLinear", {2, 3},
                           {float_tensor("scale", {3}, {1, 1, 1}), u8_tensor("zp", {3}, {0, 0, 0})});
        set_int(bad_node(pa), "axis", 0);
        addm('D', "quantize_per_axis_length_mismatch", invalid,
             "per-axis scale of 3 on axis 0 of size 2", pa, "bad_node");
        pa = op_model("QuantizeLinear", {2, 3},
                      {float_tensor("scale", {2}, {1, 1}), u8_tensor("zp", {2}, {0, 0})});
        set_int(bad_node(pa), "axis", 4);
        addm('D', "quantize_axis_out_of_range", invalid, "per-axis QuantizeLinear axis 4 on rank 2",
             pa, "bad_node");
        pa = op_model("QuantizeLinear", {2, 3},
                      {float_tensor("scale", {2}, {1, 1}), u8_tensor("zp", {3}, {0, 0, 0})});
        set_int(bad_node(pa), "axis", 0);
        addm('D', "quantize_zero_point_length_mismatch", invalid,
             "per-axis zero point of 3 for a scale of 2", pa, "bad_node");
        auto zpt = op_model("DequantizeLinear", {1, 4},
                            {float_tensor("scale", {}, {0.5f}),
                             [] {
                                 onnx::TensorProto t;
                                 t.set_name("zp");
                                 t.set_data_type(3);
                                 t.set_raw_data(std::string(1, '\0'));
                                 return t;
                             }()},
                            13, 2);
        addm('D', "dequantize_zero_point_type_mismatch", invalid,
             "uint8 input with an int8 zero point", zpt, "bad_node");
    }
    return v;
}

}  // namespace dsinfer::test
