// Malformed-model classes of shared/guide/BAD_INPUTS.md sections A-D: each asserts the exact
// ErrorCode the loader must produce (never a crash, never "some error").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
namespace fs = std::filesystem;

namespace {

/// x[1,4] + W -> y where W is an initializer (mutated by the tests).
onnx::ModelProto add_model(const onnx::TensorProto& w) {
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    *g->add_initializer() = w;
    add_node(*g, "Add", {"x", w.name()}, {"y"}, "add");
    return m;
}

onnx::TensorProto good_w() { return float_tensor("W", {1, 4}, {1, 2, 3, 4}); }

struct TempDir {
    fs::path path;
    TempDir() {
        static int counter = 0;
        path = fs::temp_directory_path() /
               ("dsinfer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    void write(const std::string& rel, const std::string& data) const {
        fs::create_directories((path / rel).parent_path());
        std::ofstream(path / rel, std::ios::binary) << data;
    }
};

std::string floats_bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

/// W stored externally at `location` with optional offset/length strings.
onnx::ModelProto external_model(const std::string& location, const std::string& offset = "",
                                const std::string& length = "") {
    return add_model(external_float_tensor("W", {1, 4}, location, offset, length));
}

ErrorCode load_file_code(const fs::path& p, std::string* msg = nullptr) {
    try {
        (void)load_onnx(p);
        return ErrorCode::ok;
    } catch (const Error& e) {
        if (msg) *msg = e.message();
        return e.code();
    }
}

}  // namespace

// ---- A. container level ----------------------------------------------------------------------

TEST_CASE("A: empty model file is invalid_model", "[loader][bad]") {
    CHECK(load_code(std::string()) == ErrorCode::invalid_model);
    TempDir d;
    d.write("empty.onnx", "");
    CHECK(load_file_code(d.path / "empty.onnx") == ErrorCode::invalid_model);
}

TEST_CASE("A: every truncation of a valid model is invalid_model", "[loader][bad]") {
    const std::string full = bytes_of(add_model(good_w()));
    REQUIRE(load_code(full) == ErrorCode::ok);
    for (std::size_t n = 1; n < full.size(); ++n) {
        INFO("prefix length " << n);
        CHECK(load_code(full.substr(0, n)) == ErrorCode::invalid_model);
    }
}

TEST_CASE("A: random bytes and other file types are invalid_model", "[loader][bad]") {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 200; ++trial) {
        std::string junk(static_cast<std::size_t>(1 + rng() % 512), '\0');
        for (auto& c : junk) c = static_cast<char>(rng());
        const ErrorCode c = load_code(junk);
        CHECK((c == ErrorCode::invalid_model || c == ErrorCode::unsupported));
    }
    const std::string png = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0";
    CHECK(load_code(png) == ErrorCode::invalid_model);
    CHECK(load_code(std::string("GGUF\x03\0\0\0\0\0\0\0\0\0\0\0", 16)) == ErrorCode::invalid_model);
}

TEST_CASE("A: a valid protobuf of another message type is invalid_model", "[loader][bad]") {
    std::string s;
    good_w().SerializeToString(&s);
    CHECK(load_code(s) == ErrorCode::invalid_model);
}

TEST_CASE("A: future IR version and opset are unsupported / naming the version", "[loader][bad]") {
    auto m = relu_model();
    m.set_ir_version(99);
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::unsupported);
    CHECK(msg.find("99") != std::string::npos);
    m = relu_model();
    m.mutable_opset_import(0)->set_version(500);
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::unsupported);
    CHECK(msg.find("500") != std::string::npos);
}

TEST_CASE("A: unknown fields are ignored", "[loader]") {
    std::string s = bytes_of(relu_model());
    s += std::string("\xa0\x06\x05", 3);  // field 100, varint 5
    CHECK(load_code(s) == ErrorCode::ok);
}

TEST_CASE("A: protobuf nesting beyond the recursion limit is invalid_model", "[loader][bad]") {
    // Graph -> node -> attribute -> graph ... 60 levels deep (~180 messages).
    onnx::ModelProto m = relu_model();
    onnx::GraphProto inner;
    inner.set_name("leaf");
    for (int i = 0; i < 60; ++i) {
        onnx::GraphProto outer;
        outer.set_name("g" + std::to_string(i));
        auto* n = add_node(outer, "If", {"c"}, {"o"});
        auto* a = n->add_attribute();
        a->set_name("then_branch");
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g() = inner;
        inner = outer;
    }
    auto* n = add_node(*m.mutable_graph(), "If", {"x"}, {"z"});
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = inner;
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("A: subgraph nesting beyond max_subgraph_depth is invalid_model", "[loader][bad]") {
    onnx::ModelProto m = relu_model();
    onnx::GraphProto inner;
    for (int i = 0; i < 5; ++i) {
        onnx::GraphProto outer;
        auto* n = add_node(outer, "If", {"x"}, {"o"});
        auto* a = n->add_attribute();
        a->set_name("then_branch");
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g() = inner;
        inner = outer;
    }
    auto* n = add_node(*m.mutable_graph(), "If", {"x"}, {"z"});
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = inner;
    ModelLimits limits;
    limits.max_subgraph_depth = 3;
    std::string msg;
    CHECK(load_code(m, {}, limits, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("nesting") != std::string::npos);
}

TEST_CASE("A: model over max_model_bytes is resource_exhausted before parsing", "[loader][bad]") {
    ModelLimits limits;
    limits.max_model_bytes = 16;
    CHECK(load_code(relu_model(), {}, limits) == ErrorCode::resource_exhausted);
    TempDir d;
    d.write("m.onnx", bytes_of(relu_model()));
    try {
        (void)load_onnx(d.path / "m.onnx", limits);
        FAIL("expected an error");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::resource_exhausted);
    }
}

TEST_CASE("A: a length prefix claiming more bytes than remain is invalid_model", "[loader][bad]") {
    // ir_version=8, then field 7 (graph, length-delimited) claiming ~4 GiB.
    const std::string s("\x08\x08\x3a\xff\xff\xff\xff\x0f\x0a\x00", 10);
    CHECK(load_code(s) == ErrorCode::invalid_model);
}

// ---- B. graph level --------------------------------------------------------------------------

TEST_CASE("B: undefined node input is invalid_model naming it", "[loader][bad]") {
    auto m = relu_model();
    m.mutable_graph()->mutable_node(0)->set_input(0, "nope");
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("nope") != std::string::npos);
}

TEST_CASE("B: duplicate output names (SSA violation) are invalid_model", "[loader][bad]") {
    auto m = relu_model();
    add_node(*m.mutable_graph(), "Relu", {"x"}, {"y"}, "again");
    CHECK(load_code(m) == ErrorCode::invalid_model);
    auto m2 = relu_model();
    add_node(*m2.mutable_graph(), "Relu", {"y"}, {"x"}, "redefine_input");
    CHECK(load_code(m2) == ErrorCode::invalid_model);
}

TEST_CASE("B: cycles are invalid_model", "[loader][bad]") {
    auto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    add_node(*g, "Add", {"x", "b"}, {"a"});
    add_node(*g, "Relu", {"a"}, {"b"});
    add_node(*g, "Relu", {"a"}, {"y"});
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("cycle") != std::string::npos);
    auto self = relu_model();
    self.mutable_graph()->mutable_node(0)->set_input(0, "y");
    CHECK(load_code(self) == ErrorCode::invalid_model);
}

TEST_CASE("B: unknown op / unknown domain and missing opset are unsupported", "[loader][bad]") {
    auto m = relu_model();
    m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::unsupported);
    CHECK(msg.find("NoSuchOp") != std::string::npos);
    auto d = relu_model();
    d.mutable_graph()->mutable_node(0)->set_domain("com.example");
    CHECK(load_code(d) == ErrorCode::unsupported);
}

TEST_CASE("B: attribute of the wrong type and missing required attribute", "[loader][bad]") {
    auto m = relu_model();
    auto* n = m.mutable_graph()->mutable_node(0);
    n->set_op_type("If");
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(1.0f);
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("then_branch") != std::string::npos);
    auto m2 = relu_model();
    m2.mutable_graph()->mutable_node(0)->set_op_type("If");
    CHECK(load_code(m2, {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("missing required attribute") != std::string::npos);
}

TEST_CASE("B: If branch output count mismatch is invalid_model", "[loader][bad]") {
    auto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_input();
    *g->add_input() = tensor_info("c", 9, {});
    g->clear_node();
    onnx::GraphProto branch;
    *branch.add_output() = tensor_info("c", 9, {});
    *branch.add_output() = tensor_info("c", 9, {});
    auto* n = add_node(*g, "If", {"c"}, {"y"});
    for (const char* name : {"then_branch", "else_branch"}) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g() = branch;
    }
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

TEST_CASE("B: subgraph reading an undefined outer name is invalid_model", "[loader][bad]") {
    auto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_input();
    *g->add_input() = tensor_info("c", 9, {});
    g->clear_node();
    onnx::GraphProto branch;
    *branch.add_output() = tensor_info("ghost", 1, {1, 4});
    auto* n = add_node(*g, "If", {"c"}, {"y"});
    for (const char* name : {"then_branch", "else_branch"}) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g() = branch;
    }
    std::string msg;
    CHECK(load_code(m, {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("ghost") != std::string::npos);
}

TEST_CASE("B: node count limit is resource_exhausted", "[loader][bad]") {
    auto m = relu_model();
    for (int i = 0; i < 20; ++i) add_node(*m.mutable_graph(), "Relu", {"x"}, {"r" + std::to_string(i)});
    ModelLimits limits;
    limits.max_nodes = 10;
    CHECK(load_code(m, {}, limits) == ErrorCode::resource_exhausted);
}

TEST_CASE("B: a 100000-node chain loads without recursion", "[loader]") {
    auto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    std::string prev = "x";
    // Nodes are added in reverse so the sort has to reorder all of them.
    const int n = 100000;
    for (int i = n - 1; i >= 0; --i)
        add_node(*g, "Relu", {i == 0 ? "x" : "v" + std::to_string(i - 1)},
                 {i == n - 1 ? "y" : "v" + std::to_string(i)});
    const std::string bytes = bytes_of(m);
    Graph graph = load_onnx_from_bytes(bytes.data(), bytes.size());
    REQUIRE(graph.nodes.size() == static_cast<std::size_t>(n));
    CHECK(graph.value(graph.nodes.front().inputs[0]).name == "x");
    CHECK(graph.value(graph.nodes.back().outputs[0]).name == "y");
}

TEST_CASE("B: graph output with an empty name is invalid_model", "[loader][bad]") {
    auto m = relu_model();
    m.mutable_graph()->mutable_output(0)->set_name("");
    CHECK(load_code(m) == ErrorCode::invalid_model);
}

// ---- C. tensor / initializer level ----------------------------------------------------------

TEST_CASE("C: negative dims / overflowing dims and excessive rank are invalid_model", "[loader][bad]") {
    auto w = good_w();
    w.set_dims(0, -1);
    CHECK(load_code(add_model(w)) == ErrorCode::invalid_model);
    auto big = good_w();
    big.clear_dims();
    for (int i = 0; i < 4; ++i) big.add_dims(std::int64_t{1} << 20);
    CHECK(load_code(add_model(big)) == ErrorCode::invalid_model);
    auto deep = good_w();
    deep.clear_dims();
    for (int i = 0; i < 9; ++i) deep.add_dims(1);
    CHECK(load_code(add_model(deep)) == ErrorCode::invalid_model);
}

TEST_CASE("C: raw_data size mismatch / typed count mismatch / both raw and typed", "[loader][bad]") {
    auto w = good_w();
    w.mutable_raw_data()->pop_back();
    std::string msg;
    CHECK(load_code(add_model(w), {}, {}, &msg) == ErrorCode::invalid_model);
    CHECK(msg.find("'W'") != std::string::npos);
    auto typed = good_w();
    typed.clear_raw_data();
    typed.add_float_data(1.0f);
    CHECK(load_code(add_model(typed)) == ErrorCode::invalid_model);
    auto both = good_w();
    both.add_float_data(1.0f);
    CHECK(load_code(add_model(both)) == ErrorCode::invalid_model);
}

TEST_CASE("C: huge dims with tiny data are rejected before allocation", "[loader][bad]") {
    auto w = good_w();
    w.clear_dims();
    w.add_dims(std::int64_t{1} << 40);  // 4 TiB of float claimed by 16 bytes
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(load_code(add_model(w)) == ErrorCode::invalid_model);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE("C: undefined and unsupported element types", "[loader][bad]") {
    auto w = good_w();
    w.set_data_type(99);
    CHECK(load_code(add_model(w)) == ErrorCode::invalid_model);
    w.set_data_type(0);
    CHECK(load_code(add_model(w)) == ErrorCode::invalid_model);
    w.set_data_type(17);  // FLOAT8E4M3FN
    std::string msg;
    CHECK(load_code(add_model(w), {}, {}, &msg) == ErrorCode::unsupported);
    CHECK(msg.find("FLOAT8E4M3FN") != std::string::npos);
}

TEST_CASE("C: string tensor with raw_data is invalid_model", "[loader][bad]") {
    auto w = good_w();
    w.set_data_type(8);
    CHECK(load_code(add_model(w)) == ErrorCode::invalid_model);
}

TEST_CASE("C: external data path attacks are invalid_model", "[loader][bad]") {
    TempDir d;
    d.write("weights.bin", floats_bytes({1, 2, 3, 4}));
    for (const char* loc : {"../x", "a/../../x", "/etc/passwd", "C:\\x", "\\\\server\\share",
                            "", "./../weights.bin", "*/_ORT_MEM_ADDR_/*"}) {
        INFO("location '" << loc << "'");
        CHECK(load_code(external_model(loc), d.path) == ErrorCode::invalid_model);
    }
}

TEST_CASE("C: external data through symlinks / hardlinks / FIFOs / directories", "[loader][bad]") {
    TempDir d, outside;
    outside.write("secret.bin", floats_bytes({9, 9, 9, 9}));
    d.write("weights.bin", floats_bytes({1, 2, 3, 4}));
    fs::create_symlink(outside.path / "secret.bin", d.path / "link.bin");
    fs::create_directory_symlink(outside.path, d.path / "linkdir");
    fs::create_directory(d.path / "subdir");
    REQUIRE(::link((outside.path / "secret.bin").c_str(), (d.path / "hard.bin").c_str()) == 0);
    REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
    for (const char* loc : {"link.bin", "linkdir/secret.bin", "hard.bin", "fifo", "subdir",
                            "missing.bin"}) {
        INFO("location '" << loc << "'");
        const auto t0 = std::chrono::steady_clock::now();
        CHECK(load_code(external_model(loc), d.path) == ErrorCode::invalid_model);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
    }
    // The original file itself now has 2 links too (hard.bin points at outside's file, not it).
    CHECK(load_code(external_model("weights.bin"), d.path) == ErrorCode::ok);
}

TEST_CASE("C: external offset/length out of range / overflowing / mismatched / negative", "[loader][bad]") {
    TempDir d;
    d.write("w.bin", floats_bytes({1, 2, 3, 4, 5, 6}));
    CHECK(load_code(external_model("w.bin", "16", "16"), d.path) == ErrorCode::invalid_model);
    CHECK(load_code(external_model("w.bin", "18446744073709551615", "16"), d.path) ==
          ErrorCode::invalid_model);
    CHECK(load_code(external_model("w.bin", "99999999999999999999999", "16"), d.path) ==
          ErrorCode::invalid_model);
    CHECK(load_code(external_model("w.bin", "0", "12"), d.path) == ErrorCode::invalid_model);
    CHECK(load_code(external_model("w.bin", "-1", "16"), d.path) == ErrorCode::invalid_model);
    CHECK(load_code(external_model("w.bin", "8", "16"), d.path) == ErrorCode::ok);
    // No base directory (model from memory): external data is refused.
    CHECK(load_code(external_model("w.bin")) == ErrorCode::invalid_model);
}

TEST_CASE("C: valid external data is read with its offset / in place when aligned", "[loader]") {
    TempDir d;
    std::vector<float> data(32);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    d.write("w.bin", floats_bytes(data));
    auto m = external_model("w.bin", "64", "16");
    d.write("model.onnx", bytes_of(m));
    Graph g = load_onnx(d.path / "model.onnx");
    const Value& w = g.value(*g.find_value("W"));
    REQUIRE(w.initializer);
    const float* p = w.initializer->data<float>();
    CHECK(p[0] == 16.0f);
    CHECK(p[3] == 19.0f);
}

// ---- D. operator attributes ------------------------------------------------------------------

TEST_CASE("D: Loop with an unbounded trip count stops at the run deadline", "[loader][bad]") {
    // Loop(M=INT64_MAX, cond=true) with a body that passes cond and v through unchanged.
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    g->clear_node();
    g->clear_input();
    *g->add_input() = tensor_info("x", 1, {1, 4});
    onnx::TensorProto trip;
    trip.set_name("M");
    trip.set_data_type(7);
    const std::int64_t big = INT64_MAX;
    trip.set_raw_data(std::string(reinterpret_cast<const char*>(&big), 8));
    *g->add_initializer() = trip;
    onnx::TensorProto cond;
    cond.set_name("cond");
    cond.set_data_type(9);
    cond.set_raw_data(std::string("\x01", 1));
    *g->add_initializer() = cond;
    onnx::GraphProto body;
    *body.add_input() = tensor_info("i", 7, {});
    *body.add_input() = tensor_info("c", 9, {});
    *body.add_input() = tensor_info("v", 1, {1, 4});
    *body.add_output() = tensor_info("c", 9, {});
    *body.add_output() = tensor_info("v", 1, {1, 4});
    auto* n = add_node(*g, "Loop", {"M", "cond", "x"}, {"y"});
    auto* a = n->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body;
    const std::string bytes = bytes_of(m);
    auto engine = InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()));
    RunOptions ro;
    ro.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    std::vector<NamedTensor> out;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = engine.try_run({{"x", Tensor::zeros(DType::f32, {1, 4})}}, out, ro);
    CHECK(st.code() == ErrorCode::deadline_exceeded);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    // Without a deadline the iteration limit ends it.
    EngineOptions eo;
    eo.limits.max_loop_iterations = 1000;
    auto limited = InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), eo);
    st = limited.try_run({{"x", Tensor::zeros(DType::f32, {1, 4})}}, out);
    CHECK(st.code() == ErrorCode::resource_exhausted);
}

// ---- the streaming file reader (weights read straight into their tensors) -----------------

namespace {
ErrorCode file_code(const TempDir& d, const std::string& bytes) {
    d.write("s.onnx", bytes);
    return load_file_code(d.path / "s.onnx");
}
}  // namespace

TEST_CASE("Streaming reader: file loads equal byte loads; every truncation is invalid_model",
          "[loader]") {
    TempDir d;
    onnx::ModelProto m = add_model(float_tensor("W", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
    *m.mutable_graph()->add_initializer() = float_tensor("unused", {3}, {9, 10, 11});
    m.mutable_graph()->mutable_initializer(1)->set_doc_string("after raw_data");
    const std::string bytes = bytes_of(m);
    d.write("m.onnx", bytes);
    Graph from_file = load_onnx(d.path / "m.onnx");
    Graph from_bytes = load_onnx_from_bytes(bytes.data(), bytes.size());
    for (const char* name : {"W", "unused"}) {
        const Tensor& a = *from_file.value(*from_file.find_value(name)).initializer;
        const Tensor& b = *from_bytes.value(*from_bytes.find_value(name)).initializer;
        REQUIRE(a.shape() == b.shape());
        CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0);
        CHECK(reinterpret_cast<std::uintptr_t>(a.raw_data()) % kTensorAlignment == 0);
    }
    // Every strict prefix is a typed error (most are invalid_model; none crashes or hangs).
    for (std::size_t n = 1; n < bytes.size(); ++n) {
        const ErrorCode c = file_code(d, bytes.substr(0, n));
        INFO("prefix of " << n << " bytes");
        CHECK(c != ErrorCode::ok);
        CHECK(c != ErrorCode::internal);
    }
}

TEST_CASE("Streaming reader: a graph split in two fields merges as protobuf does", "[loader]") {
    TempDir d;
    onnx::ModelProto m = add_model(good_w());
    // Move the initializer into a second `graph` field appended to the message.
    onnx::ModelProto tail;
    *tail.mutable_graph()->add_initializer() = m.graph().initializer(0);
    m.mutable_graph()->clear_initializer();
    const std::string bytes = bytes_of(m) + bytes_of(tail);
    CHECK(file_code(d, bytes) == ErrorCode::ok);
    Graph g = load_onnx(d.path / "s.onnx");
    CHECK(g.value(*g.find_value("W")).initializer->data<float>()[3] == 4.0f);
}

TEST_CASE("Streaming reader: hostile raw_data lengths and placements", "[loader][bad]") {
    TempDir d;
    SECTION("raw_data claiming far more bytes than the file holds") {
        onnx::TensorProto w = good_w();
        std::string bytes = bytes_of(add_model(w));
        // Rewrite W's raw_data length varint (16 bytes) as 1 GiB: truncated, no allocation.
        const std::string raw = w.raw_data();
        const auto at = bytes.find(raw);
        REQUIRE(at != std::string::npos);
        REQUIRE(bytes[at - 1] == 16);
        bytes.replace(at - 1, 1, std::string("\x80\x80\x80\x80\x04", 5));
        CHECK(file_code(d, bytes) == ErrorCode::invalid_model);
    }
    SECTION("raw_data over the tensor size limit") {
        onnx::ModelProto m = add_model(float_tensor("W", {1, 4}, {1, 2, 3, 4}));
        d.write("big.onnx", bytes_of(m));
        ModelLimits limits;
        limits.max_tensor_bytes = 8;
        try {
            (void)load_onnx(d.path / "big.onnx", limits);
            FAIL("expected an error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_model);
        }
    }
    SECTION("external data location together with inline raw_data") {
        onnx::ModelProto m = external_model("w.bin");
        m.mutable_graph()->mutable_initializer(0)->set_raw_data(floats_bytes({1, 2, 3, 4}));
        d.write("w.bin", floats_bytes({1, 2, 3, 4}));
        std::string msg;
        d.write("e.onnx", bytes_of(m));
        CHECK(load_file_code(d.path / "e.onnx", &msg) == ErrorCode::invalid_model);
        CHECK_THAT(msg, Catch::Contains("inline data"));
    }
}

// ---- weights used in place from the file (ModelLimits::map_weights) ------------------------

namespace {
/// The path of the file mapping that holds `p` in this process ("" if none: heap, anonymous).
std::string mapped_file_of(const void* p) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    while (std::getline(maps, line)) {
        std::uintptr_t lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || addr < lo || addr >= hi)
            continue;
        const auto slash = line.find('/');
        return slash == std::string::npos ? std::string() : line.substr(slash);
    }
    return {};
}

std::vector<float> ramp(std::size_t n, float base) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 977) * 0.5f;
    return v;
}
}  // namespace

TEST_CASE("Mapped weights: large aligned initializers are used in place, copy-on-write",
          "[loader]") {
    TempDir d;
    // Four 128 KiB initializers whose names differ in length: their raw_data lands at
    // different offsets modulo 4, some element-aligned (used in place), some not (copied).
    constexpr std::size_t n = 32768;
    onnx::ModelProto m = add_model(good_w());
    const std::vector<std::string> names = {"big", "big1", "big12", "big123"};
    for (std::size_t i = 0; i < names.size(); ++i)
        *m.mutable_graph()->add_initializer() =
            float_tensor(names[i], {static_cast<std::int64_t>(n)}, ramp(n, 10.0f * i));
    const std::string bytes = bytes_of(m);
    d.write("m.onnx", bytes);
    const fs::path file = d.path / "m.onnx";

    for (const bool map : {true, false}) {
        INFO("map_weights " << map);
        ModelLimits limits;
        limits.map_weights = map;
        Graph g = load_onnx(file, limits);
        int mapped = 0, copied = 0;
        for (std::size_t i = 0; i < names.size(); ++i) {
            const std::vector<float> want = ramp(n, 10.0f * i);
            Tensor& t = *g.value(*g.find_value(names[i])).initializer;
            const auto at = bytes.find(floats_bytes(want));
            REQUIRE(at != std::string::npos);
            INFO(names[i] << " at file offset " << at);
            REQUIRE(t.num_bytes() == n * 4);
            CHECK(std::memcmp(t.raw_data(), want.data(), n * 4) == 0);
            CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % alignof(float) == 0);
            const std::string where = mapped_file_of(t.raw_data());
            if (map && at % 4 == 0) {
                CHECK(fs::equivalent(fs::path(where), file));
                ++mapped;
                // Copy-on-write: the tensor changes, the file does not.
                t.data<float>()[5] = -1.0f;
                CHECK(t.data<float>()[5] == -1.0f);
                std::ifstream in(file, std::ios::binary);
                std::string now((std::istreambuf_iterator<char>(in)), {});
                CHECK(now == bytes);
            } else {
                CHECK(where.empty());
                ++copied;
            }
        }
        CHECK(mapped + copied == 4);
        if (map) {  // the file exercises both paths
            CHECK(mapped >= 1);
            CHECK(copied >= 1);
        } else {
            CHECK(mapped == 0);
        }
        // The small initializer is read into an aligned buffer either way.
        CHECK(mapped_file_of(g.value(*g.find_value("W")).initializer->raw_data()).empty());
    }
    // The mapping outlives the Graph's copies only as long as they do: a tensor kept from a
    // destroyed Graph still reads its values.
    Tensor kept;
    std::size_t kept_index = 0;
    {
        Graph g = load_onnx(file);
        for (std::size_t i = 0; i < names.size(); ++i) {
            const Tensor& t = *g.value(*g.find_value(names[i])).initializer;
            if (!mapped_file_of(t.raw_data()).empty()) {
                kept = t;
                kept_index = i;
            }
        }
    }
    REQUIRE(!kept.is_null());
    const std::vector<float> want = ramp(n, 10.0f * kept_index);
    CHECK(std::memcmp(kept.raw_data(), want.data(), n * 4) == 0);
}

TEST_CASE("Mapped weights: a file cut inside or after a mapped raw_data is invalid_model",
          "[loader][bad]") {
    TempDir d;
    onnx::ModelProto m = add_model(good_w());
    *m.mutable_graph()->add_initializer() = float_tensor("big", {32768}, ramp(32768, 1.0f));
    const std::string bytes = bytes_of(m);
    const auto at = bytes.find(floats_bytes(ramp(32768, 1.0f)));
    REQUIRE(at != std::string::npos);
    for (const std::size_t cut : {at, at + 1, at + 4096, at + 65536, at + 131071, bytes.size() - 1}) {
        INFO("cut at " << cut << " of " << bytes.size());
        CHECK(file_code(d, bytes.substr(0, cut)) == ErrorCode::invalid_model);
    }
    CHECK(file_code(d, bytes) == ErrorCode::ok);
}
