// The bad-input set of quantized models (shared guide BAD_INPUTS.md, section F, as it applies
// to the kernels): QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
// ConvInteger, QLinearMatMul, QLinearConv, com.microsoft QLinearAdd / QLinearMul /
// QLinearGlobalAveragePool / QLinearSigmoid and com.dsinfer DynamicQuantizeMatMul /
// MatMulIntegerToFloat, each a one-node model run through InferenceEngine on the default
// backends and on {"reference"}. Every case either runs with the defined result (checked) or
// fails with a typed Status (invalid_model at load for constant inputs, invalid_argument at run
// for fed ones, unsupported for types no kernel takes) whose message names the node — never a
// crash, hang or garbage. The rules (docs/OPS.md, "Quantized models: bad inputs"):
//   - a constant scale that is zero, negative, NaN or infinite: invalid_model at load;
//   - a subnormal scale is a positive finite scale: quotients overflow to +-inf and saturate;
//   - a scale fed at run time is used as given (IEEE: 0 -> +-inf saturating, 0/0 and NaN -> the
//     zero point), the same bits on every backend;
//   - zero points of another type than the data (or output), of the wrong count, per-axis
//     parameters whose length is not the axis size, an axis out of range, blocked scales whose
//     shape is not ceil(dim / block_size) (a block size that does not divide the dim is valid:
//     the last block is short), a negative block size: invalid_model at load;
//   - empty tensors run and give empty outputs (DynamicQuantizeLinear: scale 1, zero point 0);
//   - QLinearGlobalAveragePool over zero spatial elements: invalid_model.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <dsinfer/dsinfer.hpp>

#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using std::int64_t;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSubnormal = 1e-45f;
constexpr const char* kNodeName = "bad_q_node";

/// One input: absent, a constant (initializer) or fed at run time.
struct Input {
    std::optional<Tensor> t;
    bool fed = false;
};
Input c(Tensor t) { return {std::move(t), false}; }
Input fed(Tensor t) { return {std::move(t), true}; }
Input none() { return {}; }

struct Case {
    std::string name;
    std::string op;
    std::string domain;  ///< "" (ai.onnx), "com.microsoft", kDsinferDomain
    std::vector<Input> inputs;
    std::vector<std::pair<std::string, Attribute>> attrs;
    int outputs = 1;
    int opset = 21;
    /// Expected error codes (empty: must run), and a word the message must hold besides the node.
    std::vector<ErrorCode> codes;
    std::string mention;
    /// For cases that run: checks the outputs.
    std::function<void(const std::vector<NamedTensor>&)> check;
};

Tensor f32(std::initializer_list<float> v) {
    return Tensor::from_vector<float>(Shape{static_cast<int64_t>(v.size())}, std::vector<float>(v));
}
Tensor u8(const std::vector<int64_t>& dims, std::uint8_t fill) {
    Tensor t = Tensor::allocate(DType::u8, Shape::make(dims).value()).value();
    std::memset(t.raw_data(), fill, t.num_bytes());
    return t;
}
Tensor s8(const std::vector<int64_t>& dims, std::int8_t fill) {
    Tensor t = Tensor::allocate(DType::i8, Shape::make(dims).value()).value();
    std::memset(t.raw_data(), static_cast<unsigned char>(fill), t.num_bytes());
    return t;
}
Tensor x23() { return Tensor::from_vector<float>(Shape{2, 3}, {-2.f, -0.5f, 0.f, 0.25f, 1.f, 300.f}); }
Tensor sf(float v) { return Tensor::scalar<float>(v); }
Tensor zu8(std::uint8_t v) { return Tensor::scalar<std::uint8_t>(v); }
Tensor zs8(std::int8_t v) { return Tensor::scalar<std::int8_t>(v); }

/// Runs a case on `backends`: the outputs, or throws dsinfer::Error. `provider`: the node's.
std::vector<NamedTensor> run_case(const Case& k, std::vector<std::string> backends,
                                  std::string& provider) {
    Graph g;
    g.opset_imports = {{"", k.opset}, {"com.microsoft", 1},
                       {kDsinferDomain, kDsinferOpsetVersion}};
    std::vector<ValueId> ins;
    std::vector<NamedTensor> feeds;
    for (std::size_t i = 0; i < k.inputs.size(); ++i) {
        const Input& in = k.inputs[i];
        const std::string name = "in" + std::to_string(i);
        if (!in.t) {
            ins.push_back(kNoValue);
        } else if (!in.fed) {
            ins.push_back(g.add_initializer(name, in.t->clone()));
        } else {
            const ValueId v = g.add_value(name, in.t->dtype(), SymbolicShape::from(in.t->shape()));
            g.inputs.push_back(v);
            feeds.push_back({name, *in.t});
            ins.push_back(v);
        }
    }
    std::vector<ValueId> outs;
    for (int o = 0; o < k.outputs; ++o) outs.push_back(g.add_value("out" + std::to_string(o)));
    Node& n = g.add_node(k.op, ins, outs, kNodeName);
    n.domain = k.domain;
    n.attributes = k.attrs;
    g.outputs = outs;
    EngineOptions o;
    o.backends = std::move(backends);
    o.optimization_level = 0;  // keep constant nodes as they are: the kernels are under test
    const InferenceEngine e = InferenceEngine::compile(g, o);
    provider = e.node_providers().empty() ? std::string() : e.node_providers()[0];
    return e.run(feeds);
}

void check_case(const Case& k) {
    std::optional<std::vector<NamedTensor>> first;
    for (const auto& backends :
         {std::vector<std::string>{}, std::vector<std::string>{"reference"}}) {
        INFO(k.name << " on " << (backends.empty() ? "the default backends" : "reference"));
        std::string provider;
        try {
            std::vector<NamedTensor> out = run_case(k, backends, provider);
            if (!k.codes.empty()) {
                FAIL("ran on provider '" << provider << "'; expected an error");
                continue;
            }
            if (k.check) k.check(out);
            // Every backend gives the same bits.
            if (!first) {
                first = out;
            } else {
                REQUIRE(out.size() == first->size());
                for (std::size_t i = 0; i < out.size(); ++i) {
                    REQUIRE(out[i].tensor.shape() == (*first)[i].tensor.shape());
                    CHECK(std::memcmp(out[i].tensor.raw_data(), (*first)[i].tensor.raw_data(),
                                      out[i].tensor.num_bytes()) == 0);
                }
            }
        } catch (const Error& e) {
            INFO("error " << e.what());
            REQUIRE_FALSE(k.codes.empty());
            bool listed = false;
            for (ErrorCode code : k.codes) listed = listed || e.code() == code;
            CHECK(listed);
            CHECK_THAT(std::string(e.what()), Catch::Contains(kNodeName));
            if (!k.mention.empty()) CHECK_THAT(std::string(e.what()), Catch::Contains(k.mention));
        }
    }
}

const std::vector<ErrorCode> kLoad{ErrorCode::invalid_model};
const std::vector<ErrorCode> kType{ErrorCode::invalid_model, ErrorCode::unsupported};

template <class T>
std::vector<int> elems(const Tensor& t) {
    std::vector<int> v;
    for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(static_cast<int>(t.data<T>()[i]));
    return v;
}

std::vector<Case> quantize_cases() {
    std::vector<Case> cs;
    const auto q = [](std::string name, std::vector<Input> in,
                      std::vector<std::pair<std::string, Attribute>> attrs = {}) {
        Case k;
        k.name = std::move(name);
        k.op = "QuantizeLinear";
        k.inputs = std::move(in);
        k.attrs = std::move(attrs);
        return k;
    };
    for (float bad : {0.f, -1.f, kNaN, kInf}) {
        Case k = q("QuantizeLinear y_scale " + std::to_string(bad), {fed(x23()), c(sf(bad)), c(zu8(3))});
        k.codes = kLoad;
        k.mention = "y_scale";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear subnormal y_scale saturates", {fed(x23()), c(sf(kSubnormal)), c(zu8(3))});
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>{0, 0, 3, 255, 255, 255});
        };
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear run-time zero y_scale: +-inf saturate, 0/0 the zero point",
                   {fed(x23()), fed(sf(0.f)), c(zs8(-5))});
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(elems<std::int8_t>(o[0].tensor) == std::vector<int>{-128, -128, -5, 127, 127, 127});
        };
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear run-time NaN y_scale: the zero point", {fed(x23()), fed(sf(kNaN)), c(zu8(9))});
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(6, 9));
        };
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear float zero point", {fed(x23()), c(sf(0.1f)), c(sf(1.f))});
        k.codes = kType;
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear zero point shape differs from the scale's",
                   {fed(x23()), c(sf(0.1f)), c(u8({2}, 1))});
        k.codes = kLoad;
        k.mention = "zero point";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear per-axis scale of the wrong length",
                   {fed(x23()), c(f32({0.1f, 0.2f, 0.3f, 0.4f})), c(u8({4}, 1))}, {{"axis", attr_i(1)}});
        k.codes = kLoad;
        k.mention = "axis";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear axis out of range",
                   {fed(x23()), c(f32({0.1f, 0.2f, 0.3f})), c(u8({3}, 1))}, {{"axis", attr_i(5)}});
        k.codes = kLoad;
        k.mention = "axis";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear block size 2 on a dim of 3 (ceil: 2 blocks) runs",
                   {fed(x23()), c(Tensor::from_vector<float>(Shape{2, 2}, {1.f, 0.5f, 0.25f, 1.f}))},
                   {{"axis", attr_i(1)}, {"block_size", attr_i(2)}});
        k.check = [](const std::vector<NamedTensor>& o) {
            // row 0: -2/1, -0.5/1 -> 0 (u8 floor 0), 0/0.5; row 1: 0.25/0.25, 1/0.25, 300/1
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>{0, 0, 0, 1, 4, 255});
        };
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear blocked scale of the wrong shape",
                   {fed(x23()), c(Tensor::from_vector<float>(Shape{2, 1}, {1.f, 1.f}))},
                   {{"axis", attr_i(1)}, {"block_size", attr_i(2)}});
        k.codes = kLoad;
        k.mention = "block_size";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear negative block size", {fed(x23()), c(sf(0.1f))},
                   {{"block_size", attr_i(-2)}});
        k.codes = kLoad;
        k.mention = "block_size";
        cs.push_back(k);
    }
    {
        Case k = q("QuantizeLinear empty x", {fed(Tensor::zeros(DType::f32, Shape{0, 3})), c(sf(0.1f)), c(zs8(0))});
        k.check = [](const std::vector<NamedTensor>& o) { CHECK(o[0].tensor.shape() == Shape{0, 3}); };
        cs.push_back(k);
    }
    return cs;
}

std::vector<Case> dequantize_cases() {
    std::vector<Case> cs;
    const auto dq = [](std::string name, std::vector<Input> in,
                       std::vector<std::pair<std::string, Attribute>> attrs = {}) {
        Case k;
        k.name = std::move(name);
        k.op = "DequantizeLinear";
        k.inputs = std::move(in);
        k.attrs = std::move(attrs);
        return k;
    };
    for (float bad : {0.f, -1.f, kNaN, kInf}) {
        Case k = dq("DequantizeLinear x_scale " + std::to_string(bad), {fed(u8({2, 3}, 7)), c(sf(bad)), c(zu8(3))});
        k.codes = kLoad;
        k.mention = "x_scale";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear subnormal x_scale", {fed(u8({2, 3}, 7)), c(sf(kSubnormal)), c(zu8(3))});
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(o[0].tensor.data<float>()[0] == 4.f * kSubnormal);
        };
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear zero point of another type than x",
                    {fed(s8({2, 3}, 7)), c(sf(0.5f)), c(zu8(3))});
        k.codes = kLoad;
        k.mention = "x_zero_point";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear int16 zero point for uint8 x",
                    {fed(u8({2, 3}, 7)), c(sf(0.5f)), c(Tensor::scalar<std::int16_t>(3))});
        k.codes = kLoad;
        k.mention = "x_zero_point";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear non-zero zero point for int32 x",
                    {fed(Tensor::zeros(DType::i32, Shape{4})), c(sf(0.5f)), c(Tensor::scalar<std::int32_t>(2))});
        k.codes = kLoad;
        k.mention = "x_zero_point";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear per-axis scale of the wrong length",
                    {fed(u8({2, 3}, 7)), c(f32({0.1f, 0.2f})), c(u8({2}, 0))}, {{"axis", attr_i(1)}});
        k.codes = kLoad;
        k.mention = "axis";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear axis out of range",
                    {fed(u8({2, 3}, 7)), c(f32({0.1f, 0.2f, 0.3f}))}, {{"axis", attr_i(-3)}});
        k.codes = kLoad;
        k.mention = "axis";
        cs.push_back(k);
    }
    {
        Case k = dq("DequantizeLinear empty x", {fed(u8({0, 3}, 0)), c(sf(0.5f)), c(zu8(1))});
        k.check = [](const std::vector<NamedTensor>& o) { CHECK(o[0].tensor.shape() == Shape{0, 3}); };
        cs.push_back(k);
    }
    return cs;
}

std::vector<Case> integer_op_cases() {
    std::vector<Case> cs;
    {
        Case k;
        k.name = "DynamicQuantizeLinear empty x: scale 1, zero point 0";
        k.op = "DynamicQuantizeLinear";
        k.inputs = {fed(Tensor::zeros(DType::f32, Shape{0}))};
        k.outputs = 3;
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(o[0].tensor.num_elements() == 0);
            CHECK(*o[1].tensor.data<float>() == 1.f);
            CHECK(*o[2].tensor.data<std::uint8_t>() == 0);
        };
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "DynamicQuantizeLinear NaN and Inf: y is the zero point";
        k.op = "DynamicQuantizeLinear";
        k.inputs = {fed(f32({kNaN, kInf, -1.f, 2.f}))};
        k.outputs = 3;
        k.check = [](const std::vector<NamedTensor>& o) {
            const std::uint8_t z = *o[2].tensor.data<std::uint8_t>();
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(4, z));
        };
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "DynamicQuantizeLinear float64 x";
        k.op = "DynamicQuantizeLinear";
        k.inputs = {fed(Tensor::zeros(DType::f64, Shape{3}))};
        k.outputs = 3;
        k.codes = kType;
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "MatMulInteger zero point of another type than A";
        k.op = "MatMulInteger";
        k.inputs = {fed(s8({2, 4}, 1)), c(s8({4, 3}, 2)), c(zu8(1))};
        k.codes = kLoad;
        k.mention = "a_zero_point";
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "MatMulInteger per-row zero point of the wrong length";
        k.op = "MatMulInteger";
        k.inputs = {fed(u8({2, 4}, 1)), c(s8({4, 3}, 2)), c(u8({3}, 1))};
        k.codes = kLoad;
        k.mention = "a_zero_point";
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "MatMulInteger empty A";
        k.op = "MatMulInteger";
        k.inputs = {fed(u8({0, 4}, 1)), c(s8({4, 3}, 2))};
        k.check = [](const std::vector<NamedTensor>& o) { CHECK(o[0].tensor.shape() == Shape{0, 3}); };
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "ConvInteger w_zero_point of another type than W";
        k.op = "ConvInteger";
        k.inputs = {fed(u8({1, 2, 5, 5}, 3)), c(s8({4, 2, 3, 3}, 1)), c(zu8(0)), c(zu8(0))};
        k.codes = kLoad;
        k.mention = "w_zero_point";
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "ConvInteger float x";
        k.op = "ConvInteger";
        k.inputs = {fed(Tensor::zeros(DType::f32, Shape{1, 2, 5, 5})), c(s8({4, 2, 3, 3}, 1))};
        k.codes = kType;
        cs.push_back(k);
    }
    return cs;
}

/// QLinearMatMul (a [2,4] u8, b [4,3] s8) with the given parameter overrides.
Case qlinear_matmul(std::string name, Tensor a_scale, Tensor b_scale, Tensor y_scale,
                    Tensor y_zero) {
    Case k;
    k.name = std::move(name);
    k.op = "QLinearMatMul";
    k.inputs = {fed(u8({2, 4}, 130)), c(std::move(a_scale)), c(zu8(128)), c(s8({4, 3}, 3)),
                c(std::move(b_scale)),  c(zs8(0)),  c(std::move(y_scale)), c(std::move(y_zero))};
    return k;
}

/// QLinearConv (x [1,2,5,5] u8, w [4,2,3,3] s8).
Case qlinear_conv(std::string name, Tensor w_scale, Tensor y_scale, std::optional<Tensor> bias) {
    Case k;
    k.name = std::move(name);
    k.op = "QLinearConv";
    k.inputs = {fed(u8({1, 2, 5, 5}, 140)), c(sf(0.05f)), c(zu8(128)), c(s8({4, 2, 3, 3}, 2)),
                c(std::move(w_scale)), c(zs8(0)), c(std::move(y_scale)), c(zu8(100))};
    if (bias) k.inputs.push_back(c(std::move(*bias)));
    return k;
}

std::vector<Case> qlinear_cases() {
    std::vector<Case> cs;
    for (float bad : {0.f, -1.f, kNaN, kInf}) {
        Case k = qlinear_matmul("QLinearMatMul y_scale " + std::to_string(bad), sf(0.1f),
                                sf(0.1f), sf(bad), zu8(0));
        k.codes = kLoad;
        k.mention = "y_scale";
        cs.push_back(k);
        Case v = qlinear_conv("QLinearConv w_scale " + std::to_string(bad), sf(bad), sf(0.2f),
                              std::nullopt);
        v.codes = kLoad;
        v.mention = "w_scale";
        cs.push_back(v);
    }
    {
        Case k = qlinear_matmul("QLinearMatMul y_zero_point not a scalar", sf(0.1f), sf(0.1f),
                                sf(0.2f), u8({2}, 1));
        k.codes = kLoad;
        k.mention = "y_zero_point";
        cs.push_back(k);
    }
    {
        Case k = qlinear_matmul("QLinearMatMul per-column b_scale of the wrong length",
                                sf(0.1f), f32({0.1f, 0.2f}), sf(0.2f), zu8(0));
        k.codes = kLoad;
        k.mention = "b_scale";
        cs.push_back(k);
    }
    {
        Case k = qlinear_matmul("QLinearMatMul subnormal y_scale saturates", sf(0.1f), sf(0.1f),
                                sf(kSubnormal), zu8(0));
        k.check = [](const std::vector<NamedTensor>& o) {
            // (130 - 128) * 3 * 4 = 24 > 0: +inf saturates to 255
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(6, 255));
        };
        cs.push_back(k);
    }
    {
        Case k = qlinear_conv("QLinearConv per-channel w_scale of the wrong length",
                              f32({0.1f, 0.2f, 0.3f}), sf(0.2f), std::nullopt);
        k.codes = kLoad;
        k.mention = "w_scale";
        cs.push_back(k);
    }
    {
        Case k = qlinear_conv("QLinearConv float32 bias", sf(0.1f), sf(0.2f), f32({1, 2, 3, 4}));
        k.codes = kLoad;
        k.mention = "'B'";
        cs.push_back(k);
    }
    return cs;
}

/// com.microsoft QLinearAdd (A, B [2,3] u8) with the given parameters.
Case qlinear_add(std::string name, Input a_scale, Input a_zero, Input b, Input c_scale) {
    Case k;
    k.name = std::move(name);
    k.op = "QLinearAdd";
    k.domain = "com.microsoft";
    k.inputs = {fed(u8({2, 3}, 100)), std::move(a_scale), std::move(a_zero), std::move(b),
                c(sf(0.1f)), c(zu8(10)), std::move(c_scale), c(zu8(5))};
    return k;
}

std::vector<Case> ms_cases() {
    std::vector<Case> cs;
    for (float bad : {0.f, -1.f, kNaN, kInf}) {
        Case k = qlinear_add("QLinearAdd C_scale " + std::to_string(bad), c(sf(0.1f)), c(zu8(0)),
                             fed(u8({2, 3}, 20)), c(sf(bad)));
        k.codes = kLoad;
        k.mention = "C_scale";
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd A_scale not a scalar", c(f32({0.1f, 0.1f, 0.1f})),
                             c(zu8(0)), fed(u8({2, 3}, 20)), c(sf(0.2f)));
        k.codes = kLoad;
        k.mention = "A_scale";
        cs.push_back(k);
    }
    for (Tensor z : {Tensor::scalar<std::int16_t>(1), Tensor::scalar<float>(1.f), zs8(1)}) {
        Case k = qlinear_add("QLinearAdd " + std::string(dtype_name(z.dtype())) + " A_zero_point",
                             c(sf(0.1f)), c(z), fed(u8({2, 3}, 20)), c(sf(0.2f)));
        k.codes = kLoad;
        k.mention = "A_zero_point";
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd uint8 A with int8 B", c(sf(0.1f)), c(zu8(0)),
                             fed(s8({2, 3}, 20)), c(sf(0.2f)));
        k.codes = kLoad;
        k.mention = "'B'";
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd shapes that do not broadcast", c(sf(0.1f)), c(zu8(0)),
                             fed(u8({4}, 20)), c(sf(0.2f)));
        k.codes = {ErrorCode::invalid_model, ErrorCode::invalid_argument};
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd run-time zero C_scale saturates, same on every backend",
                             c(sf(0.1f)), c(zu8(0)), fed(u8({2, 3}, 20)), fed(sf(0.f)));
        k.check = [](const std::vector<NamedTensor>& o) {
            // A - 0 = 100, B - 10 = 10: +inf + +inf = +inf -> 255 (0 * inf would be NaN -> 5)
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(6, 255));
        };
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd run-time NaN A_scale: the zero point", fed(sf(kNaN)),
                             c(zu8(0)), fed(u8({2, 3}, 10)), c(sf(0.2f)));
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(6, 5));
        };
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd subnormal C_scale saturates", c(sf(0.1f)), c(zu8(0)),
                             fed(u8({2, 3}, 20)), c(sf(kSubnormal)));
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(elems<std::uint8_t>(o[0].tensor) == std::vector<int>(6, 255));
        };
        cs.push_back(k);
    }
    {
        Case k = qlinear_add("QLinearAdd empty", c(sf(0.1f)), c(zu8(0)), fed(u8({0, 3}, 10)),
                             c(sf(0.2f)));
        k.inputs[0] = fed(u8({0, 3}, 1));
        k.check = [](const std::vector<NamedTensor>& o) { CHECK(o[0].tensor.shape() == Shape{0, 3}); };
        cs.push_back(k);
    }
    const auto gap = [](std::string name, Tensor x, Tensor xs, Tensor zx) {
        Case k;
        k.name = std::move(name);
        k.op = "QLinearGlobalAveragePool";
        k.domain = "com.microsoft";
        k.inputs = {fed(std::move(x)), c(std::move(xs)), c(std::move(zx)), c(sf(0.1f)), c(zs8(0))};
        return k;
    };
    {
        Case k = gap("QLinearGlobalAveragePool NaN x_scale", s8({1, 2, 3, 3}, 1), sf(kNaN), zs8(0));
        k.codes = kLoad;
        k.mention = "x_scale";
        cs.push_back(k);
    }
    {
        Case k = gap("QLinearGlobalAveragePool uint8 zero point for int8 X", s8({1, 2, 3, 3}, 1),
                     sf(0.1f), zu8(0));
        k.codes = kLoad;
        k.mention = "x_zero_point";
        cs.push_back(k);
    }
    {
        Case k = gap("QLinearGlobalAveragePool no spatial elements", s8({1, 2, 0, 3}, 1), sf(0.1f),
                     zs8(0));
        k.codes = kLoad;
        k.mention = "spatial";
        cs.push_back(k);
    }
    {
        Case k = gap("QLinearGlobalAveragePool rank 1", s8({4}, 1), sf(0.1f), zs8(0));
        k.codes = kLoad;
        k.mention = "rank";
        cs.push_back(k);
    }
    {
        Case k = gap("QLinearGlobalAveragePool empty batch", s8({0, 2, 3, 3}, 1), sf(0.1f), zs8(0));
        k.check = [](const std::vector<NamedTensor>& o) {
            CHECK(o[0].tensor.shape() == Shape{0, 2, 1, 1});
        };
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "QLinearSigmoid int16 X";
        k.op = "QLinearSigmoid";
        k.domain = "com.microsoft";
        k.inputs = {fed(Tensor::zeros(DType::i16, Shape{3})), c(sf(0.1f)), none(), c(sf(0.1f))};
        k.codes = kType;
        cs.push_back(k);
    }
    return cs;
}

std::vector<Case> dsinfer_cases() {
    std::vector<Case> cs;
    {
        Case k;
        k.name = "DynamicQuantizeMatMul per-column b_scale of the wrong length";
        k.op = "DynamicQuantizeMatMul";
        k.domain = kDsinferDomain;
        k.inputs = {fed(random_f32({2, 4}, 1)), c(s8({4, 3}, 2)), c(f32({0.1f, 0.2f}))};
        k.codes = kLoad;
        k.mention = "b_scale";
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "DynamicQuantizeMatMul empty A";
        k.op = "DynamicQuantizeMatMul";
        k.domain = kDsinferDomain;
        k.inputs = {fed(Tensor::zeros(DType::f32, Shape{0, 4})), c(s8({4, 3}, 2)), c(sf(0.1f))};
        k.check = [](const std::vector<NamedTensor>& o) { CHECK(o[0].tensor.shape() == Shape{0, 3}); };
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "MatMulIntegerToFloat a_scale not a scalar";
        k.op = "MatMulIntegerToFloat";
        k.domain = kDsinferDomain;
        k.inputs = {fed(u8({2, 4}, 1)), c(s8({4, 3}, 2)), c(f32({0.1f, 0.2f})), c(sf(0.1f))};
        k.codes = kLoad;
        k.mention = "a_scale";
        cs.push_back(k);
    }
    {
        Case k;
        k.name = "MatMulIntegerToFloat zero a_scale";
        k.op = "MatMulIntegerToFloat";
        k.domain = kDsinferDomain;
        k.inputs = {fed(u8({2, 4}, 1)), c(s8({4, 3}, 2)), c(sf(0.f)), c(sf(0.1f))};
        k.codes = kLoad;
        k.mention = "a_scale";
        cs.push_back(k);
    }
    return cs;
}

void check_all(const std::vector<Case>& cs) {
    for (const Case& k : cs) {
        SECTION(k.name) { check_case(k); }
    }
}

}  // namespace

TEST_CASE("quant_bad: QuantizeLinear", "[quant_bad]") { check_all(quantize_cases()); }
TEST_CASE("quant_bad: DequantizeLinear", "[quant_bad]") { check_all(dequantize_cases()); }
TEST_CASE("quant_bad: DynamicQuantizeLinear, MatMulInteger, ConvInteger", "[quant_bad]") {
    check_all(integer_op_cases());
}
TEST_CASE("quant_bad: QLinearMatMul, QLinearConv", "[quant_bad]") { check_all(qlinear_cases()); }
TEST_CASE("quant_bad: com.microsoft QLinearAdd, QLinearGlobalAveragePool, QLinearSigmoid",
          "[quant_bad]") {
    check_all(ms_cases());
}
TEST_CASE("quant_bad: com.dsinfer DynamicQuantizeMatMul, MatMulIntegerToFloat", "[quant_bad]") {
    check_all(dsinfer_cases());
}
