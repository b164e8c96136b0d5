// Op coverage: behaviours of the reference kernels that the ONNX backend node tests do not pin
// down (ONNX Runtime conventions, older opsets, integer outputs). Expected values are worked out
// by hand from the ONNX operator definitions; every model runs on the reference backend only.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

template <class T>
onnx::TensorProto raw_tensor(const std::string& name, int elem_type,
                             const std::vector<std::int64_t>& dims, const std::vector<T>& v) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(elem_type);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
    return t;
}

onnx::AttributeProto* attr(onnx::NodeProto* n, const std::string& name,
                           onnx::AttributeProto::AttributeType type) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
}
void set_str(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = attr(n, name, onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}

/// One node `op` at `opset`: graph inputs `inputs`, constant inputs `inits` (named in
/// `node_inputs` with the graph inputs; "" = omitted), a graph output per non-empty name in
/// `outputs`.
struct OneNode {
    onnx::ModelProto model;
    onnx::NodeProto* node = nullptr;

    OneNode(const std::string& op, int opset, const std::vector<onnx::ValueInfoProto>& inputs,
            const std::vector<onnx::TensorProto>& inits,
            const std::vector<std::string>& node_inputs, const std::vector<std::string>& outputs)
        : model(new_model(opset, op)) {
        auto* g = model.mutable_graph();
        for (const auto& i : inputs) *g->add_input() = i;
        for (const auto& t : inits) *g->add_initializer() = t;
        for (const auto& o : outputs)
            if (!o.empty()) g->add_output()->set_name(o);
        node = add_node(*g, op, node_inputs, outputs, "op");
    }

    std::vector<NamedTensor> run(const std::vector<NamedTensor>& feeds) const {
        const std::string bytes = bytes_of(model);
        EngineOptions options;
        options.backends = {"reference"};
        auto engine =
            InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), options);
        return engine.run(feeds);
    }
};

template <class T>
std::vector<T> values(const Tensor& t) {
    REQUIRE(t.dtype() == dtype_of<T>());
    return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

}  // namespace

// ---- Resize -------------------------------------------------------------------------------

namespace {
/// Resize of x (elem_type, dims) by constant `scales`; opset 10 has no roi input.
OneNode resize(int opset, int elem_type, const std::vector<std::int64_t>& dims,
               const std::vector<float>& scales, const std::string& mode) {
    std::vector<onnx::TensorProto> inits{float_tensor("scales", {4}, scales)};
    std::vector<std::string> ins{"x", "scales"};
    if (opset >= 11) {
        inits.insert(inits.begin(), float_tensor("roi", {0}, {}));
        ins.insert(ins.begin() + 1, "roi");
    }
    OneNode m("Resize", opset, {tensor_info("x", elem_type, dims)}, inits, ins, {"y"});
    set_str(m.node, "mode", mode);
    return m;
}
}  // namespace

TEST_CASE("Resize-10 nearest rounds up when downsampling", "[ops][resize]") {
    // The Resize-10 example: asymmetric x = o / 0.6 gives 0 and 1.67 along the width; opset-10
    // nearest takes the ceiling when downsampling (ONNX Runtime, the opset-10 test data).
    OneNode m = resize(10, 1, {1, 1, 2, 4}, {1.f, 1.f, 0.6f, 0.6f}, "nearest");
    auto out = m.run({{"x", Tensor::from_vector<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})}});
    CHECK(out[0].tensor.shape() == Shape{1, 1, 1, 2});
    CHECK(values<float>(out[0].tensor) == std::vector<float>{1, 3});
}

TEST_CASE("Resize-10 nearest rounds down when upsampling", "[ops][resize]") {
    OneNode m = resize(10, 1, {1, 1, 1, 2}, {1.f, 1.f, 1.f, 2.5f}, "nearest");
    auto out = m.run({{"x", Tensor::from_vector<float>({1, 1, 1, 2}, {10, 20})}});
    // x = o / 2.5 = 0, 0.4, 0.8, 1.2, 1.6 -> floor.
    CHECK(values<float>(out[0].tensor) == std::vector<float>{10, 10, 10, 20, 20});
}

TEST_CASE("Resize nearest leaves axes with scale 1 untouched", "[ops][resize]") {
    // tf_half_pixel_for_nn maps o to (o + 0.5) / scale; with ceil that would move channel 0 to
    // channel 1 if it were applied to the unscaled channel axis.
    OneNode m = resize(11, 1, {1, 2, 1, 2}, {1.f, 1.f, 1.f, 2.f}, "nearest");
    set_str(m.node, "coordinate_transformation_mode", "tf_half_pixel_for_nn");
    set_str(m.node, "nearest_mode", "ceil");
    auto out = m.run({{"x", Tensor::from_vector<float>({1, 2, 1, 2}, {1, 2, 3, 4})}});
    // Width: x = 0.25, 0.75, 1.25, 1.75 -> ceil 1, 1, 2, 2 -> clamped to 1.
    CHECK(values<float>(out[0].tensor) == std::vector<float>{2, 2, 2, 2, 4, 4, 4, 4});
}

TEST_CASE("Resize linear on uint8 truncates toward zero", "[ops][resize]") {
    OneNode m = resize(13, 2, {1, 1, 1, 2}, {1.f, 1.f, 1.f, 2.f}, "linear");
    auto out = m.run({{"x", Tensor::from_vector<std::uint8_t>({1, 1, 1, 2}, {0, 3})}});
    // half_pixel x = -0.25, 0.25, 0.75, 1.25 -> 0, 0.75, 2.25, 3 -> truncated 0, 0, 2, 3.
    CHECK(values<std::uint8_t>(out[0].tensor) == std::vector<std::uint8_t>{0, 0, 2, 3});
}

TEST_CASE("Resize nearest floor computes coordinates of float scales in float32", "[ops][resize]") {
    // (1 + 0.5) / 0.6f - 0.5 is exactly 2 in float32 (1.9999999 in float64).
    OneNode m = resize(13, 1, {1, 1, 1, 5}, {1.f, 1.f, 1.f, 0.6f}, "nearest");
    set_str(m.node, "nearest_mode", "floor");
    auto out = m.run({{"x", Tensor::from_vector<float>({1, 1, 1, 5}, {0, 1, 2, 3, 4})}});
    CHECK(values<float>(out[0].tensor) == std::vector<float>{0, 2, 3});
}

// ---- Scan ---------------------------------------------------------------------------------

TEST_CASE("Scan-8 runs sequence_lens steps per batch entry and zero-pads", "[ops][scan]") {
    // body: (s, x) -> (s + x, s + x), reversed scan input.
    onnx::GraphProto body;
    body.set_name("body");
    *body.add_input() = tensor_info("s", 1, {1});
    *body.add_input() = tensor_info("x", 1, {1});
    *body.add_output() = tensor_info("s_out", 1, {1});
    *body.add_output() = tensor_info("y", 1, {1});
    add_node(body, "Add", {"s", "x"}, {"s_out"});
    add_node(body, "Identity", {"s_out"}, {"y"});
    OneNode m("Scan", 8,
              {tensor_info("lens", 7, {2}), tensor_info("init", 1, {2, 1}),
               tensor_info("xs", 1, {2, 3, 1})},
              {}, {"lens", "init", "xs"}, {"final", "ys"});
    set_int(m.node, "num_scan_inputs", 1);
    set_ints(m.node, "directions", {1});
    auto* b = attr(m.node, "body", onnx::AttributeProto::GRAPH);
    *b->mutable_g() = body;
    auto out = m.run({{"lens", Tensor::from_vector<std::int64_t>({2}, {3, 2})},
                      {"init", Tensor::from_vector<float>({2, 1}, {0, 100})},
                      {"xs", Tensor::from_vector<float>({2, 3, 1}, {1, 2, 3, 10, 20, 30})}});
    // Batch 0 visits 3, 2, 1; batch 1 visits its first two steps reversed: 20, 10.
    CHECK(values<float>(out[0].tensor) == std::vector<float>{6, 130});
    CHECK(out[1].tensor.shape() == Shape{2, 3, 1});
    CHECK(values<float>(out[1].tensor) == std::vector<float>{3, 5, 6, 120, 130, 0});
}

TEST_CASE("Loop without iterations gives scan outputs of the declared shape", "[ops][loop]") {
    // body: (i, cond, acc[2]) -> (cond, acc, acc as scan output); M = 0.
    onnx::GraphProto body;
    body.set_name("body");
    *body.add_input() = tensor_info("i", 7, {});
    *body.add_input() = tensor_info("cond", 9, {});
    *body.add_input() = tensor_info("acc", 1, {2});
    *body.add_output() = tensor_info("cond_out", 9, {});
    *body.add_output() = tensor_info("acc_out", 1, {2});
    *body.add_output() = tensor_info("scan", 1, {2});
    add_node(body, "Identity", {"cond"}, {"cond_out"});
    add_node(body, "Identity", {"acc"}, {"acc_out"});
    add_node(body, "Identity", {"acc"}, {"scan"});
    OneNode m("Loop", 13, {tensor_info("acc0", 1, {2})},
              {raw_tensor<std::int64_t>("M", 7, {}, {0})}, {"M", "", "acc0"}, {"final", "scans"});
    *attr(m.node, "body", onnx::AttributeProto::GRAPH)->mutable_g() = body;
    auto out = m.run({{"acc0", Tensor::from_vector<float>({2}, {1.f, 2.f})}});
    CHECK(values<float>(out[0].tensor) == std::vector<float>{1, 2});
    CHECK(out[1].tensor.dtype() == DType::f32);
    CHECK(out[1].tensor.shape() == Shape{0, 2});
}

// ---- RNNs and quantization ------------------------------------------------------------------

TEST_CASE("LSTM input_forget couples the forget gate to the input gate", "[ops][rnn]") {
    // One step, hidden 1, input 1; W rows are the gates i, o, f, c. With input_forget the forget
    // gate is 1 - i (ONNX Runtime), so the large W_f has no effect.
    OneNode m("LSTM", 14, {tensor_info("x", 1, {1, 1, 1}), tensor_info("c0", 1, {1, 1, 1})},
              {float_tensor("W", {1, 4, 1}, {1.f, 0.f, 5.f, 1.f}),
               float_tensor("R", {1, 4, 1}, {0.f, 0.f, 0.f, 0.f})},
              {"x", "W", "R", "", "", "", "c0"}, {"", "y_h", "y_c"});
    set_int(m.node, "hidden_size", 1);
    set_int(m.node, "input_forget", 1);
    auto out = m.run({{"x", Tensor::from_vector<float>({1, 1, 1}, {1.f})},
                      {"c0", Tensor::from_vector<float>({1, 1, 1}, {1.f})}});
    const double i = 1.0 / (1.0 + std::exp(-1.0));
    const double c = (1.0 - i) * 1.0 + i * std::tanh(1.0);
    CHECK(out[1].tensor.data<float>()[0] == Approx(c).epsilon(1e-6));
    CHECK(out[0].tensor.data<float>()[0] == Approx(0.5 * std::tanh(c)).epsilon(1e-6));
}

TEST_CASE("DynamicQuantizeLinear of zeros has scale 1", "[ops][quant]") {
    OneNode m("DynamicQuantizeLinear", 11, {tensor_info("x", 1, {3})}, {}, {"x"},
              {"y", "scale", "zp"});
    auto out = m.run({{"x", Tensor::from_vector<float>({3}, {0.f, 0.f, 0.f})}});
    CHECK(values<std::uint8_t>(out[0].tensor) == std::vector<std::uint8_t>{0, 0, 0});
    CHECK(out[1].tensor.data<float>()[0] == 1.f);
    CHECK(out[2].tensor.data<std::uint8_t>()[0] == 0);
}

// ---- TfIdfVectorizer ----------------------------------------------------------------------

TEST_CASE("TfIdfVectorizer counts string n-grams", "[ops][text]") {
    // Pool: 1-grams "a", "b"; 2-gram ("a", "b"). Row "a b a b": a x2, b x2, (a, b) x2.
    for (const char* mode : {"TF", "IDF", "TFIDF"}) {
        OneNode m("TfIdfVectorizer", 9, {tensor_info("x", 8, {1, 4})}, {}, {"x"}, {"y"});
        set_str(m.node, "mode", mode);
        set_int(m.node, "min_gram_length", 1);
        set_int(m.node, "max_gram_length", 2);
        set_int(m.node, "max_skip_count", 0);
        set_ints(m.node, "ngram_counts", {0, 2});
        set_ints(m.node, "ngram_indexes", {0, 1, 2});
        auto* pool = attr(m.node, "pool_strings", onnx::AttributeProto::STRINGS);
        for (const char* s : {"a", "b", "a", "b"}) pool->add_strings(s);
        auto* w = attr(m.node, "weights", onnx::AttributeProto::FLOATS);
        for (float v : {1.f, 2.f, 3.f}) w->add_floats(v);
        auto out = m.run({{"x", Tensor::from_vector<std::string>({1, 4}, {"a", "b", "a", "b"})}});
        const std::string md = mode;
        const std::vector<float> want = md == "TF"    ? std::vector<float>{2, 2, 2}
                                        : md == "IDF" ? std::vector<float>{1, 2, 3}
                                                      : std::vector<float>{2, 4, 6};
        CHECK(values<float>(out[0].tensor) == want);
    }
}
