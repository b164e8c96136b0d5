// INT8 convolutions on the cpu backend's qgemm kernels (src/cpu/fast/fast_qconv.cpp,
// src/kernels/qconv.cpp): ConvInteger (s32) and QLinearConv (requantized u8/s8) checked BITWISE
// against the reference kernels (src/cpu/reference/quant.cpp) on odd shapes: 1x1, 3x3 pad 1,
// stride 2, dilation 2, asymmetric pads, groups 2 and depthwise, channel counts that are not
// multiples of 4 or 16, batch 1 and 3; u8 and s8 x and w; zero points at both ends of their
// range, per tensor and per output channel; per-tensor and per-channel scales; int32 biases that
// saturate the output; 1 and 2 threads. Bad inputs are typed errors naming the node.
// Runs once per ISA level ([fast]: DSINFER_TEST_ISA, tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/qconv.hpp"
#include "kernels/qgemm.hpp"
#include "runtime/parallel.hpp"
#include "unit/engine_models.hpp"
#include "unit/qconv_sums.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using std::int64_t;

namespace {

struct ConvCase {
    int64_t n = 1, c = 5, h = 7, w = 6, m = 9, kh = 1, kw = 1;
    int64_t stride = 1, dil = 1, group = 1;
    std::vector<int64_t> pads{0, 0, 0, 0};
    bool x_signed = false, w_unsigned = false;
    int x_zero = 0;            ///< in x's type
    int w_zero_kind = 1;       ///< 0 none, 1 per tensor, 2 per channel
    int w_zero = 0;            ///< per tensor, in w's type
    bool per_channel_scale = false;
    bool y_signed = false;
    int y_zero = 0;
    bool bias = true;
    float bias_scale = 1.f;    ///< magnitude of the int32 bias (large values saturate y)
    /// u8 x: -1 uniform over 0..255; else values below 128 and about this many per mille of
    /// them 128..255 (a ReLU's output: the avx2 byte form for 7-bit A, its high bits sparse)
    int x_high_permille = -1;
    bool x_high_top = false;  ///< and every value of the top quarter of each image's rows high
};

std::string describe(const ConvCase& k) {
    std::string s = "x [" + std::to_string(k.n) + "," + std::to_string(k.c) + "," +
                    std::to_string(k.h) + "," + std::to_string(k.w) + "] m " + std::to_string(k.m) +
                    " k " + std::to_string(k.kh) + "x" + std::to_string(k.kw) + " s " +
                    std::to_string(k.stride) + " d " + std::to_string(k.dil) + " g " +
                    std::to_string(k.group) + " pads";
    for (int64_t p : k.pads) s += " " + std::to_string(p);
    s += std::string(k.x_signed ? " x s8" : " x u8") + (k.w_unsigned ? " w u8" : " w s8") + " xz " +
         std::to_string(k.x_zero) + " wz kind " + std::to_string(k.w_zero_kind) + " wz " +
         std::to_string(k.w_zero) + (k.per_channel_scale ? " scale/ch" : "") +
         (k.y_signed ? " y s8" : " y u8") + " yz " + std::to_string(k.y_zero) + " x high " +
         std::to_string(k.x_high_permille) + (k.x_high_top ? " top" : "");
    return s;
}

Tensor int8_tensor(const std::vector<int64_t>& dims, bool is_signed, std::uint32_t seed) {
    Tensor t = Tensor::allocate(is_signed ? DType::i8 : DType::u8, Shape::make(dims).value()).value();
    std::mt19937 r(seed);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
        const int v = static_cast<int>(r() % 256);
        if (is_signed) t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v - 128);
        else t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
    }
    if (t.num_elements() >= 2) {  // the extremes somewhere
        if (is_signed) {
            t.data<std::int8_t>()[0] = 127;
            t.data<std::int8_t>()[1] = -128;
        } else {
            t.data<std::uint8_t>()[0] = 255;
            t.data<std::uint8_t>()[1] = 0;
        }
    }
    return t;
}

Tensor int8_scalar(bool is_signed, int v) {
    Tensor t = Tensor::allocate(is_signed ? DType::i8 : DType::u8, Shape{}).value();
    if (is_signed) t.data<std::int8_t>()[0] = static_cast<std::int8_t>(v);
    else t.data<std::uint8_t>()[0] = static_cast<std::uint8_t>(v);
    return t;
}

Tensor f32_vector(int64_t n, std::uint32_t seed, float lo, float hi) {
    Tensor t = Tensor::allocate(DType::f32, Shape{n}).value();
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = u(r);
    return t;
}

/// A copy of t with another shape of as many elements.
Tensor reshaped(const Tensor& t, const Shape& shape) {
    Tensor r = Tensor::allocate(t.dtype(), shape).value();
    std::memcpy(r.raw_data(), t.raw_data(), t.num_bytes());
    return r;
}

Tensor i32_vector(int64_t n, std::uint32_t seed, float mag) {
    Tensor t = Tensor::allocate(DType::i32, Shape{n}).value();
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-mag, mag);
    for (int64_t i = 0; i < n; ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(u(r));
    return t;
}

/// A one-node graph: ConvInteger (qlinear false) or QLinearConv of the case.
Graph conv_graph(const ConvCase& k, bool qlinear, std::uint32_t seed) {
    Graph g;
    g.name = "qconv";
    g.opset_imports = {{"", 17}};
    const ValueId x = g.add_value(
        "x", k.x_signed ? DType::i8 : DType::u8,
        SymbolicShape::from(Shape::make({k.n, k.c, k.h, k.w}).value()));
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer(
        "W", int8_tensor({k.m, k.c / k.group, k.kh, k.kw}, !k.w_unsigned, seed));
    const ValueId xz = g.add_initializer("x_zp", int8_scalar(k.x_signed, k.x_zero));
    ValueId wz = kNoValue;
    if (k.w_zero_kind == 1) wz = g.add_initializer("w_zp", int8_scalar(!k.w_unsigned, k.w_zero));
    if (k.w_zero_kind == 2) wz = g.add_initializer("w_zp", int8_tensor({k.m}, !k.w_unsigned, seed + 1));
    const ValueId y = g.add_value("y");
    std::vector<ValueId> in;
    if (!qlinear) {
        in = {x, w, xz, wz};
    } else {
        const ValueId xs = g.add_initializer("x_scale", Tensor::scalar<float>(0.0173f));
        const ValueId ws = g.add_initializer(
            "w_scale", k.per_channel_scale ? f32_vector(k.m, seed + 2, 1e-3f, 3e-2f)
                                           : Tensor::scalar<float>(0.0071f));
        // Sums spread about sqrt(K) * 1e4: y_scale puts most outputs inside the 8-bit range.
        const float k_sum = static_cast<float>(k.c / k.group * k.kh * k.kw);
        const float ys_value = 0.0173f * 0.0071f * std::sqrt(k_sum) * 1e4f / 60.f;
        const ValueId ys = g.add_initializer("y_scale", Tensor::scalar<float>(ys_value));
        const ValueId yz = g.add_initializer("y_zp", int8_scalar(k.y_signed, k.y_zero));
        if (wz == kNoValue) wz = g.add_initializer("w_zp", int8_scalar(!k.w_unsigned, 0));
        in = {x, xs, xz, w, ws, wz, ys, yz};
        if (k.bias) in.push_back(g.add_initializer("B", i32_vector(k.m, seed + 3, k.bias_scale)));
    }
    while (in.back() == kNoValue) in.pop_back();
    Node& node = g.add_node(qlinear ? "QLinearConv" : "ConvInteger", in, {y}, "conv");
    node.attributes = {{"kernel_shape", attr_ints({k.kh, k.kw})},
                       {"strides", attr_ints({k.stride, k.stride})},
                       {"dilations", attr_ints({k.dil, k.dil})},
                       {"pads", attr_ints(k.pads)},
                       {"group", attr_i(k.group)}};
    g.outputs.push_back(y);
    g.values[static_cast<std::size_t>(y)].dtype =
        !qlinear ? DType::i32 : (k.y_signed ? DType::i8 : DType::u8);
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

struct Ran {
    Tensor out;
    std::string provider;
    std::string algorithm;  ///< what ran for the conv node (NodeDescription::algorithm)
};

Ran run(const Graph& g, const Tensor& x, std::vector<std::string> backends, int threads) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    o.optimization_level = 0;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    Ran r;
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i)
        if (e.graph().nodes[i].name == "conv") r.provider = e.node_providers()[i];
    auto out = e.run({{"x", x}});
    r.out = out.at(0).tensor;
    for (const NodeDescription& d : e.node_descriptions())
        if (d.name == "conv") r.algorithm = d.algorithm;
    return r;
}

void require_same_bits(const Tensor& got, const Tensor& want) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    const auto* a = static_cast<const unsigned char*>(got.raw_data());
    const auto* b = static_cast<const unsigned char*>(want.raw_data());
    const std::size_t esize = got.num_bytes() / static_cast<std::size_t>(std::max<int64_t>(1, got.num_elements()));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < got.num_elements(); ++i)
        if (std::memcmp(a + i * esize, b + i * esize, esize) != 0 && bad++ == 0) first = i;
    INFO("differences " << bad << ", first at element " << first);
    CHECK(bad == 0);
}

/// x of the case (int8_tensor, or u8 values mostly below 128: ConvCase::x_high_permille).
Tensor conv_input(const ConvCase& k, std::uint32_t seed) {
    Tensor x = int8_tensor({k.n, k.c, k.h, k.w}, k.x_signed, seed);
    if (k.x_signed || k.x_high_permille < 0) return x;
    auto* v = x.data<std::uint8_t>();
    std::mt19937 r(seed + 1);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
        const auto high = static_cast<int>(r() % 1000) < k.x_high_permille;
        const int64_t row = i / k.w % k.h;
        v[i] = static_cast<std::uint8_t>(high || (k.x_high_top && row < k.h / 4) ? 128 + r() % 128
                                                                                 : r() % 128);
    }
    if (x.num_elements() >= 2 && k.x_high_permille > 0) v[0] = 255;  // the extremes somewhere
    if (x.num_elements() >= 2) v[1] = 0;
    return x;
}

/// Both ops of the case: the cpu kernel at 1 and 2 threads against the reference kernel.
/// Returns the algorithm the cpu kernel ran.
std::string check_case(const ConvCase& k, std::uint32_t seed) {
    INFO(describe(k));
    const Tensor x = conv_input(k, seed + 100);
    std::string algorithm;
    for (bool qlinear : {false, true}) {
        INFO((qlinear ? "QLinearConv" : "ConvInteger"));
        const Graph g = conv_graph(k, qlinear, seed);
        const Ran want = run(g, x, {"reference"}, 1);
        for (int threads : {1, 2}) {
            INFO("threads " << threads);
            const Ran got = run(g, x, {"cpu"}, threads);
            CHECK(got.provider == "cpu");
            require_same_bits(got.out, want.out);
            algorithm = got.algorithm;
        }
    }
    return algorithm;
}

ConvCase shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t kk, int64_t stride,
               int64_t pad, int64_t dil, int64_t group) {
    ConvCase k;
    k.n = n;
    k.c = c;
    k.h = h;
    k.w = w;
    k.m = m;
    k.kh = k.kw = kk;
    k.stride = stride;
    k.pads = {pad, pad, pad, pad};
    k.dil = dil;
    k.group = group;
    return k;
}

/// Runs `g` on the cpu backend and returns the error (ok when it ran).
Status run_status(const Graph& g, const Tensor& x) {
    try {
        EngineOptions o;
        o.backends = {"cpu"};
        o.optimization_level = 0;
        const InferenceEngine e = InferenceEngine::compile(g, o);
        (void)e.run({{"x", x}});
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
    return Status::ok();
}

// ---- the dynamically quantized form (ONNX Runtime's quantize_dynamic) ------------------------

enum class XKind { random, constant, zeros, nan, inf };

struct DynCase {
    ConvCase conv;
    bool per_channel_scale = false;
    bool bias = true;
    bool relu = false;
    bool shared = false;  ///< a second ConvInteger reads the DynamicQuantizeLinear: not fused
    XKind x = XKind::random;
};

/// One ConvInteger layer of the unfused form reading xq/xs/xzp; returns its output value.
ValueId add_dyn_layer(Graph& g, const DynCase& d, ValueId xq, ValueId xs, ValueId xzp, int layer,
                      std::uint32_t seed) {
    const ConvCase& k = d.conv;
    const std::string s = "l" + std::to_string(layer) + "_";
    const ValueId w = g.add_initializer(
        s + "W", int8_tensor({k.m, k.c / k.group, k.kh, k.kw}, !k.w_unsigned, seed));
    std::vector<ValueId> in{xq, w, xzp};
    if (k.w_zero_kind == 1) in.push_back(g.add_initializer(s + "w_zp", int8_scalar(!k.w_unsigned, k.w_zero)));
    if (k.w_zero_kind == 2) in.push_back(g.add_initializer(s + "w_zp", int8_tensor({k.m}, !k.w_unsigned, seed + 1)));
    const ValueId ci = g.add_value(s + "conv");
    Node& conv = g.add_node("ConvInteger", in, {ci}, s + "conv");
    conv.attributes = {{"kernel_shape", attr_ints({k.kh, k.kw})},
                       {"strides", attr_ints({k.stride, k.stride})},
                       {"dilations", attr_ints({k.dil, k.dil})},
                       {"pads", attr_ints(k.pads)},
                       {"group", attr_i(k.group)}};
    const ValueId cast = g.add_value(s + "cast");
    g.add_node("Cast", {ci}, {cast}, s + "cast").attributes = {{"to", attr_i(1)}};
    Tensor ws = Tensor::scalar<float>(0.0123f);
    if (d.per_channel_scale) {  // [M, 1, 1]: broadcast along the channel axis
        ws = reshaped(f32_vector(k.m, seed + 2, 1e-3f, 2e-2f), Shape{k.m, 1, 1});
    }
    const ValueId wsv = g.add_initializer(s + "w_scale", ws);
    const ValueId sm = g.add_value(s + "scales");
    g.add_node("Mul", {xs, wsv}, {sm}, s + "scales_mul");
    ValueId out = g.add_value(s + "mul");
    g.add_node("Mul", {cast, sm}, {out}, s + "output_mul");
    if (d.bias) {  // quantize_dynamic's Reshape(bias, [1, -1, 1, 1]), folded
        const ValueId bv = g.add_initializer(
            s + "bias", reshaped(f32_vector(k.m, seed + 3, -1.f, 1.f), Shape{1, k.m, 1, 1}));
        const ValueId y = g.add_value(s + "biased");
        g.add_node("Add", {out, bv}, {y}, s + "bias_add");
        out = y;
    }
    if (d.relu) {
        const ValueId y = g.add_value(s + "relu");
        g.add_node("Relu", {out}, {y}, s + "relu");
        out = y;
    }
    return out;
}

Graph dyn_graph(const DynCase& d, std::uint32_t seed) {
    const ConvCase& k = d.conv;
    Graph g;
    g.name = "qconv_dynamic";
    g.opset_imports = {{"", 17}};
    const ValueId x = g.add_value("x", DType::f32,
                                  SymbolicShape::from(Shape::make({k.n, k.c, k.h, k.w}).value()));
    g.inputs.push_back(x);
    const ValueId xq = g.add_value("xq"), xs = g.add_value("xs"), xzp = g.add_value("xzp");
    g.add_node("DynamicQuantizeLinear", {x}, {xq, xs, xzp}, "x_quantize");
    g.outputs.push_back(add_dyn_layer(g, d, xq, xs, xzp, 0, seed));
    if (d.shared) g.outputs.push_back(add_dyn_layer(g, d, xq, xs, xzp, 1, seed + 10));
    for (ValueId y : g.outputs) g.values[static_cast<std::size_t>(y)].dtype = DType::f32;
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

Tensor dyn_input(const DynCase& d, std::uint32_t seed) {
    const ConvCase& k = d.conv;
    Tensor t = random_f32({k.n, k.c, k.h, k.w}, seed, 2.f);
    float* p = t.data<float>();
    const int64_t n = t.num_elements();
    switch (d.x) {
        case XKind::random: break;
        case XKind::constant: std::fill(p, p + n, 0.75f); break;
        case XKind::zeros: std::fill(p, p + n, 0.f); break;
        case XKind::nan: p[0] = std::numeric_limits<float>::quiet_NaN(); break;
        case XKind::inf: p[n / 3] = std::numeric_limits<float>::infinity(); break;
    }
    return t;
}

struct DynRan {
    std::vector<NamedTensor> out;
    int fused = 0, fused_cpu = 0;
};

DynRan run_dyn(const Graph& g, const Tensor& x, std::vector<std::string> backends, int level,
               int threads) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    o.optimization_level = level;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    DynRan r;
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i)
        if (e.graph().nodes[i].op_type == "DynamicQuantizeConv") {
            ++r.fused;
            r.fused_cpu += e.node_providers()[i] == "cpu";
        }
    r.out = e.run({{"x", x}});
    return r;
}

/// Bitwise equal float32 tensors (any NaN matches any NaN).
void require_bitwise_f32(const Tensor& got, const Tensor& want) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
        const float a = got.data<float>()[i], b = want.data<float>()[i];
        const bool same = (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
        if (!same && bad++ == 0) first = i;
    }
    INFO("differences " << bad << ", first at " << first << ": "
                        << (first >= 0 ? got.data<float>()[first] : 0.f) << " vs "
                        << (first >= 0 ? want.data<float>()[first] : 0.f));
    CHECK(bad == 0);
}

void check_dyn(const DynCase& d, std::uint32_t seed) {
    INFO(describe(d.conv) << (d.per_channel_scale ? " ws/ch" : " ws/tensor")
                          << (d.bias ? " bias" : "") << (d.relu ? " relu" : "")
                          << (d.shared ? " shared" : "") << " x-kind " << static_cast<int>(d.x));
    const Graph g = dyn_graph(d, seed);
    const Tensor x = dyn_input(d, seed + 100);
    const DynRan want = run_dyn(g, x, {"reference"}, 0, 1);
    const int layers = d.shared ? 0 : 1;
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        const DynRan fast = run_dyn(g, x, {"cpu"}, 3, threads);
        CHECK(fast.fused_cpu == layers);
        REQUIRE(fast.out.size() == want.out.size());
        for (std::size_t o = 0; o < want.out.size(); ++o)
            require_bitwise_f32(fast.out[o].tensor, want.out[o].tensor);
    }
    const DynRan ref = run_dyn(g, x, {"reference"}, 3, 1);  // the fused op's reference kernel
    CHECK(ref.fused == layers);
    for (std::size_t o = 0; o < want.out.size(); ++o)
        require_bitwise_f32(ref.out[o].tensor, want.out[o].tensor);
}

}  // namespace

TEST_CASE("qconv: ConvInteger and QLinearConv equal the reference bitwise on odd shapes",
          "[fast][qconv]") {
    std::vector<ConvCase> shapes{
        shape(1, 5, 7, 6, 9, 1, 1, 0, 1, 1),      // 1x1 (A is the NHWC image)
        shape(3, 6, 9, 8, 17, 3, 1, 1, 1, 1),     // 3x3 pad 1, batch 3
        shape(1, 16, 11, 10, 33, 3, 2, 1, 1, 1),  // stride 2
        shape(1, 7, 12, 13, 5, 3, 1, 2, 2, 1),    // dilation 2
        shape(3, 6, 8, 9, 10, 3, 1, 1, 1, 2),     // groups 2
        shape(1, 8, 9, 9, 8, 3, 1, 1, 1, 8),      // depthwise
        shape(2, 20, 8, 8, 12, 1, 2, 0, 1, 1),    // 1x1 stride 2 (im2col)
        shape(1, 3, 5, 5, 1, 5, 1, 0, 1, 1),      // one output channel, 5x5
        // 1 to 3 channels (padded on avx512_vnni, qconv_packed_shape): an RGB
        // stem (7x7 stride 2 pad 3, odd sizes), 1 channel, 2 channels dilated
        shape(2, 3, 15, 13, 10, 7, 2, 3, 1, 1),
        shape(1, 1, 9, 8, 7, 3, 1, 1, 1, 1),
        shape(1, 2, 11, 10, 5, 3, 1, 2, 2, 1),
    };
    ConvCase asym = shape(1, 5, 6, 7, 6, 3, 1, 0, 1, 1);
    asym.pads = {0, 1, 2, 0};
    shapes.push_back(asym);
    std::uint32_t seed = 7;
    for (std::size_t si = 0; si < shapes.size(); ++si) {
        for (int variant = 0; variant < 4; ++variant) {
            ConvCase k = shapes[si];
            k.x_signed = (variant & 1) != 0;
            k.w_unsigned = (variant & 2) != 0;
            // Zero points at both ends of their ranges, in turn.
            const bool high = ((si + static_cast<std::size_t>(variant)) % 2) != 0;
            k.x_zero = k.x_signed ? (high ? 127 : -128) : (high ? 255 : 0);
            k.w_zero_kind = static_cast<int>((si + static_cast<std::size_t>(variant)) % 3);
            k.w_zero = k.w_unsigned ? (high ? 0 : 255) : (high ? -128 : 127);
            k.per_channel_scale = variant >= 2;
            k.y_signed = (variant == 1 || variant == 2);
            k.y_zero = k.y_signed ? (high ? -128 : 127) : (high ? 255 : 0);
            k.bias = variant != 3;
            k.bias_scale = 3000.f;
            check_case(k, seed++);
        }
    }
}

TEST_CASE("qconv: QLinearConv saturates and rounds as the reference; zero points mid-range",
          "[fast][qconv]") {
    ConvCase k = shape(1, 19, 10, 11, 21, 3, 1, 1, 1, 1);
    k.x_zero = 131;
    k.w_zero_kind = 2;
    k.y_zero = 77;
    for (float mag : {0.f, 1e4f, 1e7f, 2e9f}) {  // 2e9 overflows the s32 sum: wraps in both
        k.bias_scale = mag;
        k.per_channel_scale = mag > 1e5f;
        check_case(k, 300 + static_cast<std::uint32_t>(std::log10(mag + 1.f)));
    }
}

TEST_CASE("qconv: ResNet-like shapes cross qgemm's K and row blocks", "[fast][qconv]") {
    ConvCase a = shape(2, 64, 14, 14, 70, 3, 1, 1, 1, 1);  // K = 576, 392 rows per image
    a.w_zero_kind = 0;
    a.x_zero = 3;
    check_case(a, 900);
    ConvCase b = shape(1, 260, 7, 7, 40, 1, 1, 0, 1, 1);  // K = 260 on a 1x1
    b.per_channel_scale = true;
    b.w_zero_kind = 2;
    check_case(b, 901);
    ConvCase c = shape(1, 96, 15, 15, 33, 3, 2, 1, 1, 1);  // K = 864: two K blocks on AVX2
    c.x_signed = true;
    c.x_zero = -5;
    check_case(c, 902);
    // Wide images: several chunks of output rows per image (about 1 MiB of im2col each), their
    // windows overlapping at the chunk edges (stride 2, dilation 2, padding).
    ConvCase d = shape(1, 64, 30, 300, 6, 3, 2, 1, 2, 1);
    d.w_zero_kind = 2;
    check_case(d, 903);
    ConvCase e = shape(2, 300, 12, 400, 5, 1, 1, 0, 1, 1);  // 1x1: chunks of NHWC rows
    e.x_zero = 200;
    check_case(e, 904);
    DynCase f;
    f.conv = shape(1, 64, 30, 300, 6, 3, 2, 1, 2, 1);
    f.per_channel_scale = true;
    check_dyn(f, 905);
}

TEST_CASE("qconv: A read in place (u8 x, s8 weights of zero point 0) equals the reference",
          "[fast][qconv]") {
    // The conditions of qgemm_rows (kernels/qgemm.hpp): channels per group a multiple of 4 (the
    // VNNI families) or of 2 (the 16-bit families, which read the input rows widened to u16),
    // u8 x, no row-sum term (s8 weights with zero point 0, or none). Every tap
    // kind: inside, padding on each side, stride, dilation, groups, a 1x1 (one segment), rows
    // that do not fill a 12-row tile, channels that cross qgemm's K block (3x3 x 96 = 864) and
    // a partial column panel.
    std::vector<ConvCase> shapes{
        shape(1, 4, 7, 6, 9, 3, 1, 1, 1, 1),      // cg 4, one group of K per tap
        shape(2, 64, 9, 10, 64, 3, 1, 1, 1, 1),   // two full panels
        shape(1, 32, 11, 10, 40, 3, 2, 1, 1, 1),  // stride 2, a partial panel
        shape(1, 16, 12, 13, 5, 3, 1, 2, 2, 1),   // dilation 2
        shape(3, 16, 8, 9, 10, 3, 1, 1, 1, 2),    // groups 2 (cg 8)
        shape(1, 96, 6, 7, 33, 3, 1, 1, 1, 1),    // K = 864 crosses a K block
        shape(2, 256, 5, 5, 70, 1, 1, 0, 1, 1),   // 1x1: A is the image
        shape(1, 512, 4, 3, 20, 3, 1, 1, 1, 1),   // K = 4608, segments across blocks
        shape(2, 6, 9, 8, 11, 3, 1, 1, 1, 1),     // cg 6: in place on the 16-bit families only
        shape(1, 4, 8, 7, 10, 3, 2, 1, 1, 2),     // groups 2 of cg 2 (16-bit families only)
        // 1 to 3 channels: on avx512_vnni in a padded geometry (qconv_packed_shape: here each
        // kernel row widened), each kernel row one run of the padded rows (run_pointers): a
        // stem at 7x7 stride 2 pad 3 (windows past both ends of a row, rows past the image), a
        // kernel wider than the image, stride 3 with no pads, a 3x3 of 3 channels (padded
        // to 4)
        shape(2, 3, 17, 15, 40, 7, 2, 3, 1, 1),
        shape(1, 2, 5, 4, 9, 7, 1, 3, 1, 1),
        shape(1, 1, 13, 14, 33, 3, 3, 0, 1, 1),
        shape(1, 3, 9, 19, 12, 3, 1, 1, 1, 1),
    };
    ConvCase asym = shape(1, 8, 6, 7, 6, 3, 1, 0, 1, 1);
    asym.pads = {0, 1, 2, 0};
    shapes.push_back(asym);
    std::uint32_t seed = 1300;
    for (std::size_t si = 0; si < shapes.size(); ++si)
        for (int variant = 0; variant < 2; ++variant) {
            ConvCase k = shapes[si];
            k.x_zero = variant == 0 ? 0 : 255;
            k.w_zero_kind = variant;  // none, or 0 per tensor
            k.w_zero = 0;
            k.per_channel_scale = variant == 1;
            k.y_signed = variant == 1;
            k.y_zero = variant == 1 ? -3 : 200;
            k.bias_scale = 3000.f;
            check_case(k, seed++);
        }
}

TEST_CASE(
    "qconv: avx2's byte form for 7-bit A equals the reference, its high bits sparse and "
    "dense",
    "[fast][qconv]") {
    // u8 x of a constant zero point below 128, W without a zero-point term (s8 of 0 or none, u8
    // of 128), one group, channels a multiple of 4: on the avx2 family W is packed in the byte
    // form for 7-bit A (algorithm "...-avx2-a7", "-a7p" paired from K = 256 on: 288, 512 and
    // 4608 here; 3x3 convolutions of stride 1 go in the Winograd form instead, "-wino") and
    // x's bytes are split into their low 7 bits
    // and their high bits, as lists per pixel where at most 1 in 16 bytes have one, else dense;
    // per chunk of output rows (the wide image: its top quarter all high, its chunks below
    // sparse). Other families (VNNI, baseline) run these cases in their own forms.
    std::vector<ConvCase> shapes{
        shape(1, 4, 7, 6, 9, 3, 1, 1, 1, 1),      // cg 4: one group a tap
        shape(2, 20, 9, 10, 33, 3, 1, 1, 1, 1),   // 20 channels: lists past 16, a partial panel
        shape(1, 32, 11, 10, 40, 3, 2, 1, 1, 1),  // stride 2
        shape(1, 16, 12, 13, 5, 3, 1, 2, 2, 1),   // dilation 2
        shape(2, 64, 5, 5, 70, 1, 1, 0, 1, 1),    // 1x1: one segment
        shape(1, 512, 4, 3, 20, 3, 1, 1, 1, 1),   // K = 4608: segments across K blocks
        shape(1, 64, 40, 300, 6, 3, 1, 1, 1, 1),  // several chunks an image
        shape(1, 512, 4, 3, 20, 1, 1, 0, 1, 1),   // 1x1, K = 512: paired
        shape(1, 512, 7, 6, 20, 3, 2, 1, 1, 1),   // stride 2, K = 4608: the a7 form's segments
                                                  // across K blocks
    };
    std::uint32_t seed = 1700;
    for (std::size_t si = 0; si < shapes.size(); ++si)
        for (int variant = 0; variant < 5; ++variant) {
            ConvCase k = shapes[si];
            // high bits: none, sparse (8 per mille), dense (300 per mille), all, and sparse with
            // the top rows all high (chunks of both kinds in one convolution)
            constexpr int kHigh[] = {0, 8, 300, 1000, 8};
            k.x_high_permille = kHigh[variant];
            k.x_high_top = variant == 4;
            k.x_zero = variant == 0 ? 0 : variant == 1 ? 127 : 100;  // the padding's low bits
            k.w_unsigned = variant == 2;
            k.w_zero_kind = variant % 2 == 0 ? 1 : 0;
            k.w_zero = k.w_unsigned ? 128 : 0;
            k.per_channel_scale = variant >= 2;
            k.y_zero = variant == 3 ? 0 : 131;
            k.bias_scale = 3000.f;
            const std::string algorithm = check_case(k, seed++);
            INFO(describe(k) << ": " << algorithm);
            // 3x3 of stride 1 undilated: the Winograd form instead (its own tests:
            // test_qconv_winograd.cpp), on the avx2 family.
            const bool wino = k.kh == 3 && k.stride == 1 && k.dil == 1 &&
                              k.c >= dsinfer::detail::kWinogradMinChannels;
            if (algorithm.find("-avx2") != std::string::npos) {
                CHECK((algorithm.find("-wino") != std::string::npos) == wino);
                CHECK((algorithm.find("-a7") != std::string::npos) == !wino);
                // Two groups a step (paired_a7) from K = 256 on (qconv.cpp kPairedA7MinK).
                if (!wino)
                    CHECK((algorithm.find("-a7p") != std::string::npos) ==
                          (k.c * k.kh * k.kw >= 256));
            } else {
                CHECK(algorithm.find("-a7") == std::string::npos);
                CHECK(algorithm.find("-wino") == std::string::npos);
            }
        }
    // Not in the byte form: a zero point of 128 and more, s8 x, a weight zero-point term (3, or
    // u8 W without a zero point: 0), cg % 4.
    ConvCase k = shape(1, 32, 6, 7, 9, 3, 1, 1, 1, 1);
    k.x_high_permille = 8;
    k.w_zero_kind = 0;
    for (int variant = 0; variant < 5; ++variant) {
        ConvCase v = k;
        if (variant == 0) v.x_zero = 128;
        if (variant == 1) v.x_signed = true;
        if (variant == 2) {
            v.w_zero_kind = 1;
            v.w_zero = 3;
        }
        if (variant == 3) v.c = 6;
        if (variant == 4) v.w_unsigned = true;
        const std::string algorithm = check_case(v, seed++);
        INFO(describe(v) << ": " << algorithm);
        CHECK(algorithm.find("-a7") == std::string::npos);
        // The Winograd form takes any constant zero points of W (subtracted before the
        // transform: a zero point of 3, u8 W's 0) and of u8 x; not s8 x, nor 6 channels.
        if (algorithm.find("-avx2") != std::string::npos)
            CHECK((algorithm.find("-wino") != std::string::npos) ==
                  (!v.x_signed && v.c >= dsinfer::detail::kWinogradMinChannels));
    }
}

TEST_CASE("qconv: one W under two zero points gets a Winograd form for each", "[fast][qconv]") {
    // The form holds W minus its zero points, so its weight-store form is keyed by them: two
    // ConvIntegers sharing W with zero points 119 and 131 must not share one packing.
    Graph g;
    g.name = "qconv_shared_w";
    g.opset_imports = {{"", 17}};
    const ValueId x =
        g.add_value("x", DType::u8, SymbolicShape::from(Shape::make({2, 32, 6, 7}).value()));
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer("W", int8_tensor({16, 32, 3, 3}, false, 77));
    const ValueId xz = g.add_initializer("x_zp", int8_scalar(false, 3));
    for (int i = 0; i < 2; ++i) {
        const std::string n = std::to_string(i);
        const ValueId wz = g.add_initializer("w_zp" + n, int8_scalar(false, i == 0 ? 119 : 131));
        const ValueId y = g.add_value("y" + n);
        Node& node = g.add_node("ConvInteger", {x, w, xz, wz}, {y}, "conv" + n);
        node.attributes = {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}};
        g.outputs.push_back(y);
        g.values[static_cast<std::size_t>(y)].dtype = DType::i32;
    }
    REQUIRE(g.sort_topologically().is_ok());
    ConvCase k = shape(2, 32, 6, 7, 16, 3, 1, 1, 1, 1);
    const Tensor xv = conv_input(k, 78);
    const auto outputs = [&](const std::vector<std::string>& backends, int threads,
                             std::vector<std::string>* algorithms) {
        EngineOptions o;
        o.backends = backends;
        o.num_threads = threads;
        o.optimization_level = 0;
        const InferenceEngine e = InferenceEngine::compile(g, o);
        if (algorithms != nullptr)
            for (const NodeDescription& d : e.node_descriptions())
                algorithms->push_back(d.algorithm);
        return e.run({{"x", xv}});
    };
    const auto want = outputs({"reference"}, 1, nullptr);
    for (int threads : {1, 2}) {
        std::vector<std::string> algorithms;
        const auto got = outputs({"cpu"}, threads, &algorithms);
        REQUIRE(got.size() == 2);
        for (std::size_t o = 0; o < 2; ++o) require_same_bits(got[o].tensor, want[o].tensor);
        REQUIRE(algorithms.size() == 2);
        for (const std::string& a : algorithms) {
            INFO(a);
            if (a.find("-avx2") != std::string::npos) CHECK(a.find("-wino") != std::string::npos);
        }
    }
}

TEST_CASE("qconv: bad zero points, scales and biases are typed errors naming the node",
          "[fast][qconv]") {
    const ConvCase k = shape(1, 4, 5, 5, 6, 3, 1, 1, 1, 1);
    const Tensor x = int8_tensor({1, 4, 5, 5}, false, 5);
    auto expect_error = [&](Graph g, const char* what) {
        const Status s = run_status(g, x);
        INFO(what << ": " << s.message());
        CHECK(!s.is_ok());
        CHECK((s.code() == ErrorCode::invalid_argument || s.code() == ErrorCode::invalid_model));
        CHECK(s.message().find("conv") != std::string::npos);
    };
    auto replace = [](Graph& g, const char* name, Tensor t) {
        for (std::size_t i = 0; i < g.values.size(); ++i)
            if (g.values[i].name == name) {
                g.values[i].dtype = t.dtype();
                g.values[i].shape = SymbolicShape::from(t.shape());
                g.values[i].initializer = std::move(t);
            }
    };
    for (bool qlinear : {false, true}) {
        INFO((qlinear ? "QLinearConv" : "ConvInteger"));
        {  // w_zero_point of the wrong type
            Graph g = conv_graph(k, qlinear, 1);
            replace(g, "w_zp", int8_scalar(false, 3));  // u8 for s8 weights
            expect_error(std::move(g), "w_zero_point type");
        }
        {  // w_zero_point of the wrong length
            Graph g = conv_graph(k, qlinear, 1);
            replace(g, "w_zp", int8_tensor({k.m + 1}, true, 2));
            expect_error(std::move(g), "w_zero_point length");
        }
        {  // x_zero_point not a scalar
            Graph g = conv_graph(k, qlinear, 1);
            replace(g, "x_zp", int8_tensor({2}, false, 3));
            expect_error(std::move(g), "x_zero_point length");
        }
    }
    for (float bad : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
        for (const char* name : {"x_scale", "w_scale", "y_scale"}) {
            Graph g = conv_graph(k, true, 1);
            replace(g, name, Tensor::scalar<float>(bad));
            expect_error(std::move(g), name);
        }
    }
    {  // bias of the wrong length
        Graph g = conv_graph(k, true, 1);
        replace(g, "B", i32_vector(k.m - 1, 4, 10.f));
        expect_error(std::move(g), "bias length");
    }
}

TEST_CASE("qconv: the fused DynamicQuantizeConv equals the unfused graph bitwise",
          "[fast][qconv]") {
    const std::vector<ConvCase> shapes{
        shape(1, 5, 7, 6, 9, 1, 1, 0, 1, 1),     shape(3, 6, 9, 8, 17, 3, 1, 1, 1, 1),
        shape(1, 16, 11, 10, 33, 3, 2, 1, 1, 1), shape(1, 7, 12, 13, 5, 3, 1, 2, 2, 1),
        shape(2, 6, 8, 9, 10, 3, 1, 1, 1, 2),    shape(1, 8, 9, 9, 8, 3, 1, 1, 1, 8),
        shape(2, 3, 15, 13, 10, 7, 2, 3, 1, 1)};  // 3 channels (padded on avx512_vnni)
    std::uint32_t seed = 500;
    for (std::size_t si = 0; si < shapes.size(); ++si)
        for (int variant = 0; variant < 4; ++variant) {
            DynCase d;
            d.conv = shapes[si];
            d.conv.w_unsigned = (variant & 1) != 0;
            d.conv.w_zero_kind = static_cast<int>((si + static_cast<std::size_t>(variant)) % 3);
            d.conv.w_zero = d.conv.w_unsigned ? 255 : -128;
            d.per_channel_scale = (variant & 2) != 0;
            d.bias = variant != 1;
            d.relu = (si + static_cast<std::size_t>(variant)) % 2 == 0;
            check_dyn(d, seed++);
        }
    for (XKind xk : {XKind::constant, XKind::zeros, XKind::nan, XKind::inf}) {
        DynCase d;
        d.conv = shapes[1];
        d.x = xk;
        d.relu = true;
        check_dyn(d, seed++);
    }
    DynCase shared;  // a DynamicQuantizeLinear read by two convolutions stays unfused
    shared.conv = shapes[0];
    shared.shared = true;
    check_dyn(shared, seed++);
}

TEST_CASE("qconv: 1 to 3 channels in a padded geometry read NCHW and NHWC x alike, exactly",
          "[fast][qconv]") {
    // qconv_packed_shape: on the avx512_vnni family the weights of 1 to 3 input channels are
    // packed for 4 channels or for kernel rows widened to whole groups of 4 bytes, and qconv
    // copies x's rows (each kernel row one run of the chunk's padded rows where qgemm_rows reads
    // A in place: s8 w of zero point 0). The s32 sums against a scalar convolution
    // (unit/qconv_sums.hpp), for x NCHW and NHWC, y NCHW and NHWC, 1 and 2 threads, with and
    // without a weight zero-point term (the im2col path, the widened taps given x's zero point).
    namespace d = dsinfer::detail;
    struct Geo {
        int64_t n, c, h, w, m, k, stride, pad, dil;
        int64_t pc, pkw;  // the geometry packed on avx512_vnni
    };
    for (const Geo& g : {Geo{2, 3, 23, 21, 20, 7, 2, 3, 1, 3, 8},  // RGB stem: 7 taps -> 8
                         Geo{1, 1, 9, 7, 5, 3, 1, 1, 2, 1, 4},     // dilated: no runs
                         Geo{3, 2, 6, 19, 33, 5, 1, 2, 1, 2, 6},
                         Geo{1, 3, 10, 18, 7, 3, 1, 1, 1, 4, 3},    // a tie: the channels
                         Geo{2, 3, 8, 17, 6, 1, 1, 0, 1, 4, 1}}) {  // 1x1
        for (int wz : {0, 3}) {  // 3: a term of the weights' zero point (no A in place)
            INFO("x [" << g.n << "," << g.c << "," << g.h << "," << g.w << "] m " << g.m << " k "
                       << g.k << " s " << g.stride << " p " << g.pad << " d " << g.dil << " wz "
                       << wz);
            d::QConvShape s;
            s.batch = g.n;
            s.c = g.c;
            s.h = g.h;
            s.w = g.w;
            s.m = g.m;
            s.kh = s.kw = g.k;
            s.sh = s.sw = g.stride;
            s.dh = s.dw = g.dil;
            s.pt = s.pl = g.pad;
            s.oh = (g.h + 2 * g.pad - g.dil * (g.k - 1) - 1) / g.stride + 1;
            s.ow = (g.w + 2 * g.pad - g.dil * (g.k - 1) - 1) / g.stride + 1;
            std::mt19937 r(static_cast<std::uint32_t>(g.c * 100 + g.k + wz));
            std::vector<std::uint8_t> x(static_cast<std::size_t>(g.n * g.c * g.h * g.w)),
                w(static_cast<std::size_t>(g.m * g.c * g.k * g.k));
            for (auto& v : x) v = static_cast<std::uint8_t>(r());
            for (auto& v : w) v = static_cast<std::uint8_t>(r());
            x[0] = 255;
            w[0] = 0x80;  // -128
            const int zx = 131;
            const auto want = qconv_sums(
                s, x, w, false, zx, std::vector<std::int32_t>(static_cast<std::size_t>(g.m), wz));
            const d::PackedQConvW packed = d::pack_qconv_weights(w.data(), false, s);
            const bool vnni512 = d::qgemm_isa() == d::QIsa::avx512_vnni;
            CHECK(packed.c == (vnni512 ? g.pc : g.c));
            CHECK(packed.kw == (vnni512 ? g.pkw : g.k));
            const d::QConvShape sp = d::qconv_packed_shape(s, d::qgemm_isa());
            CHECK((sp.c == packed.c && sp.kw == packed.kw));
            d::QGemmParams p;
            p.out = d::QGemmOutput::s32;
            p.a_zero = zx;
            p.b_zero = wz;
            const int64_t hw = g.h * g.w, opix = s.oh * s.ow;
            for (bool x_nhwc : {false, true})
                for (bool y_nhwc : {false, true})
                    for (int threads : {1, 2}) {
                        INFO("x " << (x_nhwc ? "NHWC" : "NCHW") << ", y "
                                  << (y_nhwc ? "NHWC" : "NCHW") << ", threads " << threads);
                        d::ThreadBudget budget(threads);
                        d::QConvShape sl = s;
                        sl.x_nhwc = x_nhwc;
                        sl.y_nhwc = y_nhwc;
                        std::vector<std::uint8_t> xl = x;
                        if (x_nhwc)
                            for (int64_t n = 0; n < g.n; ++n)
                                for (int64_t c = 0; c < g.c; ++c)
                                    for (int64_t q = 0; q < hw; ++q)
                                        xl[static_cast<std::size_t>((n * hw + q) * g.c + c)] =
                                            x[static_cast<std::size_t>((n * g.c + c) * hw + q)];
                        std::vector<std::int32_t> y(want.size(), -1);
                        std::vector<unsigned char> ws(
                            d::qconv_workspace_bytes(sl, packed, 4, d::max_threads()));
                        REQUIRE(d::qconv(sl, xl.data(), nullptr, packed, y.data(), p, ws.data(),
                                         ws.size()));
                        int64_t bad = 0;
                        for (int64_t n = 0; n < g.n; ++n)
                            for (int64_t o = 0; o < g.m; ++o)
                                for (int64_t q = 0; q < opix; ++q) {
                                    const std::size_t at =
                                        static_cast<std::size_t>(y_nhwc ? (n * opix + q) * g.m + o
                                                                        : (n * g.m + o) * opix + q);
                                    bad += y[at] !=
                                           want[static_cast<std::size_t>((n * g.m + o) * opix + q)];
                                }
                        CHECK(bad == 0);
                    }
        }
    }
}
