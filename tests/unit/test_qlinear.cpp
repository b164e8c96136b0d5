// ONNX Runtime's com.microsoft elementwise quantized ops: QLinearAdd, QLinearMul,
// QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu.
//   - the reference kernels (src/cpu/reference/quant_ms.cpp) against values worked out here in
//     exact integer arithmetic (scales that are powers of two: every f32 step is exact, so the
//     rounding half to even and the saturation are what is checked);
//   - the cpu backend's kernels (src/cpu/fast/fast_qlinear.cpp) BITWISE against the reference:
//     u8 and s8, odd shapes and broadcasts (same shape, scalar, per-channel rows, both sides),
//     zero points at both ends of the type (0/255, -128/127), saturating scales, NaN/Inf-free
//     but extreme ratios, channels first and last, constant and run-time parameters, 1 and 2
//     threads identical.
// Runs once per ISA level ([fast]: DSINFER_TEST_ISA, tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "unit/engine_models.hpp"
#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using std::int64_t;

namespace {

constexpr const char* kMs = "com.microsoft";
using Attrs = std::vector<std::pair<std::string, Attribute>>;

Tensor q8_tensor(const std::vector<int64_t>& dims, bool is_unsigned, std::uint32_t seed) {
    Tensor t = Tensor::allocate(is_unsigned ? DType::u8 : DType::i8, Shape::make(dims).value())
                   .value();
    std::mt19937 r(seed);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
        const int v = static_cast<int>(r() % 256);
        if (is_unsigned) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
        else t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v - 128);
    }
    return t;
}

Tensor q8_scalar(bool is_unsigned, int v) {
    return is_unsigned ? Tensor::scalar<std::uint8_t>(static_cast<std::uint8_t>(v))
                       : Tensor::scalar<std::int8_t>(static_cast<std::int8_t>(v));
}

/// One input of the node under test: absent (omitted), a constant, or a graph input.
struct In {
    std::optional<Tensor> t;
    bool constant = true;
};

struct Ran {
    Tensor y;
    std::string provider;
};

/// Runs one com.microsoft node `op` on `ins` with backends `backends` and `threads`.
Ran run_node(const std::string& op, const std::vector<In>& ins, const Attrs& attrs,
             std::vector<std::string> backends, int threads, const std::string& domain = kMs) {
    Graph g;
    g.opset_imports = {{"", 17}, {kMs, 1}};
    std::vector<ValueId> vs;
    std::vector<NamedTensor> feeds;
    for (std::size_t i = 0; i < ins.size(); ++i) {
        const std::string name = "in" + std::to_string(i);
        if (!ins[i].t) {
            vs.push_back(kNoValue);
        } else if (ins[i].constant) {
            vs.push_back(g.add_initializer(name, ins[i].t->clone()));
        } else {
            const ValueId v =
                g.add_value(name, ins[i].t->dtype(), SymbolicShape::from(ins[i].t->shape()));
            g.inputs.push_back(v);
            feeds.push_back({name, *ins[i].t});
            vs.push_back(v);
        }
    }
    const ValueId y = g.add_value("y");
    Node& n = g.add_node(op, vs, {y}, "the_node");
    n.domain = domain;
    n.attributes = attrs;
    g.outputs = {y};
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    Ran r;
    r.provider = e.node_providers().empty() ? "(folded)" : e.node_providers()[0];
    r.y = e.run(feeds).at(0).tensor;
    return r;
}

void require_same_bits(const Tensor& got, const Tensor& want) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    int64_t bad = 0, first = -1;
    const auto* a = static_cast<const std::uint8_t*>(got.raw_data());
    const auto* b = static_cast<const std::uint8_t*>(want.raw_data());
    for (int64_t i = 0; i < static_cast<int64_t>(got.num_bytes()); ++i)
        if (a[i] != b[i] && bad++ == 0) first = i;
    INFO("first difference at " << first << ": " << (first >= 0 ? int(a[first]) : 0) << " vs "
                                << (first >= 0 ? int(b[first]) : 0) << " (" << bad << " in all)");
    CHECK(bad == 0);
}

/// The fast kernel (provider "cpu") equals the reference bitwise at 1 and 2 threads.
void check_fast(const std::string& op, const std::vector<In>& ins, const Attrs& attrs = {},
                const std::string& domain = kMs) {
    const Ran want = run_node(op, ins, attrs, {"reference"}, 1, domain);
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        const Ran got = run_node(op, ins, attrs, {"cpu"}, threads, domain);
        CHECK(got.provider == "cpu");
        require_same_bits(got.y, want.y);
    }
}

/// round half to even of n / 2^k (k >= 1), exact integers.
int64_t rne_div_pow2(int64_t num, int k) {
    const int64_t d = int64_t{1} << k;
    int64_t q = num >= 0 ? num / d : -((-num) / d);
    int64_t rem = num - q * d;  // same sign as num
    if (2 * std::abs(rem) > d || (2 * std::abs(rem) == d && (q % 2 != 0))) q += num >= 0 ? 1 : -1;
    return q;
}

int clamp_q(int64_t v, bool is_unsigned) {
    const int64_t lo = is_unsigned ? 0 : -128, hi = is_unsigned ? 255 : 127;
    return static_cast<int>(std::min(hi, std::max(lo, v)));
}

int elem(const Tensor& t, int64_t i) {
    return t.dtype() == DType::u8 ? t.data<std::uint8_t>()[i] : t.data<std::int8_t>()[i];
}

}  // namespace

TEST_CASE("qlinear: reference QLinearAdd / QLinearMul round half to even and saturate",
          "[qlinear]") {
    for (bool u : {true, false}) {
        INFO((u ? "u8" : "s8"));
        const int za = u ? 131 : -3, zb = u ? 0 : 127, zc = u ? 255 : -128;
        const Tensor a = q8_tensor({3, 1, 40}, u, 1), b = q8_tensor({5, 1}, u, 2);
        // Add: scales 0.5, 0.25, 0.5: v = (a - za) + (b - zb) / 2, halves tie to even.
        const Ran add = run_node("QLinearAdd",
                                 {{a, false}, {Tensor::scalar<float>(0.5f)}, {q8_scalar(u, za)},
                                  {b, false}, {Tensor::scalar<float>(0.25f)}, {q8_scalar(u, zb)},
                                  {Tensor::scalar<float>(0.5f)}, {q8_scalar(u, zc)}},
                                 {}, {"reference"}, 1);
        // Mul: scales 0.5, 0.25, 4: v = (a - za)(b - zb) / 32.
        const Ran mul = run_node("QLinearMul",
                                 {{a, false}, {Tensor::scalar<float>(0.5f)}, {q8_scalar(u, za)},
                                  {b, false}, {Tensor::scalar<float>(0.25f)}, {q8_scalar(u, zb)},
                                  {Tensor::scalar<float>(4.f)}, {q8_scalar(u, zc)}},
                                 {}, {"reference"}, 1);
        REQUIRE(add.y.shape() == Shape{3, 5, 40});
        REQUIRE(mul.y.shape() == Shape{3, 5, 40});
        REQUIRE(add.y.dtype() == a.dtype());
        for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 5; ++j)
                for (int64_t k = 0; k < 40; ++k) {
                    const int64_t x = elem(a, i * 40 + k) - za, y = elem(b, j) - zb;
                    const int64_t o = (i * 5 + j) * 40 + k;
                    CHECK(elem(add.y, o) == clamp_q(rne_div_pow2(2 * x + y, 1) + zc, u));
                    CHECK(elem(mul.y, o) == clamp_q(rne_div_pow2(x * y, 5) + zc, u));
                }
    }
}

TEST_CASE("qlinear: reference QLinearGlobalAveragePool, channels first and last", "[qlinear]") {
    for (bool u : {true, false}) {
        const int zx = u ? 255 : -128, zy = u ? 7 : 0;
        // 2 x 3 channels over 4 x 2 = 8 elements; scales 1 and 1: v = sum / 8.
        const Tensor x = q8_tensor({2, 3, 4, 2}, u, 3);
        const Ran first = run_node("QLinearGlobalAveragePool",
                                   {{x, false}, {Tensor::scalar<float>(1.f)}, {q8_scalar(u, zx)},
                                    {Tensor::scalar<float>(1.f)}, {q8_scalar(u, zy)}},
                                   {}, {"reference"}, 1);
        REQUIRE(first.y.shape() == Shape{2, 3, 1, 1});
        for (int64_t n = 0; n < 2; ++n)
            for (int64_t c = 0; c < 3; ++c) {
                int64_t s = 0;
                for (int64_t i = 0; i < 8; ++i) s += elem(x, (n * 3 + c) * 8 + i) - zx;
                CHECK(elem(first.y, n * 3 + c) == clamp_q(rne_div_pow2(s, 3) + zy, u));
            }
        // The same tensor read as [N, H, W, C] = [2, 3, 4, 2]: 2 channels over 12 elements,
        // x_scale 3 / y_scale 4 * ... : scales 0.75 and 1 give v = sum * 0.75 / 12 = sum / 16.
        const Ran last = run_node("QLinearGlobalAveragePool",
                                  {{x, false}, {Tensor::scalar<float>(0.75f)}, {q8_scalar(u, zx)},
                                   {Tensor::scalar<float>(0.5f)}, {q8_scalar(u, zy)}},
                                  {{"channels_last", attr_i(1)}}, {"reference"}, 1);
        REQUIRE(last.y.shape() == Shape{2, 1, 1, 2});
        for (int64_t n = 0; n < 2; ++n)
            for (int64_t c = 0; c < 2; ++c) {
                int64_t s = 0;
                for (int64_t i = 0; i < 12; ++i) s += elem(x, (n * 12 + i) * 2 + c) - zx;
                // v = s * (0.75 / (0.5 * 12)) = s / 8 (the multiplier 0.125 is exact)
                CHECK(elem(last.y, n * 2 + c) == clamp_q(rne_div_pow2(s, 3) + zy, u));
            }
    }
}

TEST_CASE("qlinear: reference QLinearSigmoid / QLinearLeakyRelu", "[qlinear]") {
    const Tensor x = Tensor::from_vector<std::int8_t>(Shape{6}, {-128, -9, -1, 0, 1, 127});
    const Ran lr = run_node("QLinearLeakyRelu",
                            {{x, false}, {Tensor::scalar<float>(0.5f)}, {q8_scalar(false, -1)},
                             {Tensor::scalar<float>(0.5f)}, {q8_scalar(false, 2)}},
                            {{"alpha", attr_f(0.25f)}}, {"reference"}, 1);
    // d = (x + 1) * 0.5; f = d or d / 4; v = f / 0.5 = x + 1 or (x + 1) / 4; + 2
    const int want_lr[] = {static_cast<int>(rne_div_pow2(-127, 2)) + 2, -2 + 2, 0 + 2, 1 + 2,
                           2 + 2, 127};
    for (int i = 0; i < 6; ++i) CHECK(elem(lr.y, i) == want_lr[i]);
    const Ran sg = run_node("QLinearSigmoid",
                            {{x, false}, {Tensor::scalar<float>(0.1f)}, {q8_scalar(false, 0)},
                             {Tensor::scalar<float>(1.f / 256)}, {q8_scalar(false, -128)}},
                            {}, {"reference"}, 1);
    for (int i = 0; i < 6; ++i) {
        const double d = elem(x, i) * 0.1;
        const double want = std::nearbyint(256.0 / (1.0 + std::exp(-d))) - 128;
        CHECK(std::abs(elem(sg.y, i) - clamp_q(static_cast<int64_t>(want), false)) <= 1);
    }
    CHECK(elem(sg.y, 3) == 0);  // sigmoid(0) = 0.5 exactly: 128 - 128
}

TEST_CASE("qlinear: fast QLinearAdd / QLinearMul equal the reference bitwise",
          "[fast][qlinear]") {
    struct Shapes {
        std::vector<int64_t> a, b;
    };
    const Shapes shapes[] = {
        {{3, 37, 5}, {3, 37, 5}},           // same shape, odd
        {{2, 64, 56, 56}, {2, 64, 56, 56}},  // big: threads
        {{2, 13, 9, 7}, {1}},               // scalar B
        {{}, {4, 33}},                      // scalar A
        {{2, 17, 5, 3}, {17, 1, 1}},        // per-channel rows
        {{4, 1, 19}, {1, 6, 1}},            // both sides broadcast
        {{7, 1}, {1, 45}},
        {{0, 5}, {1, 5}},                   // empty
        {{8, 64, 28, 28}, {64, 1, 1}},      // big per-channel
    };
    for (const std::string op : {"QLinearAdd", "QLinearMul"})
        for (bool u : {true, false})
            for (const Shapes& s : shapes) {
                std::uint32_t seed = 5;
                const Tensor a = q8_tensor(s.a, u, seed++), b = q8_tensor(s.b, u, seed++);
                // zero points: interior, both ends; scales: mild and saturating; then either
                // side of the fast kernels' lean-store bound (every |value| below 2^22: Add
                // (|ra| + |rb|) * 255, Mul |ra| * 255 * 255): Add 16448 and 16449, Mul 64
                // and 65.
                const int zs[][3] = {{u ? 128 : 0, u ? 3 : -7, u ? 120 : 1},
                                     {u ? 0 : -128, u ? 255 : 127, u ? 255 : -128},
                                     {u ? 255 : 127, u ? 0 : -128, u ? 0 : 127}};
                const float scales[][3] = {{0.02f, 0.03f, 0.05f},  {0.5f, 0.7f, 1e-3f},
                                           {1e-30f, 3e30f, 7e-7f}, {8224.f, 8224.f, 1.f},
                                           {8225.f, 8224.f, 1.f},  {8.f, 8.f, 1.f},
                                           {8.f, 8.125f, 1.f}};
                for (const auto& z : zs)
                    for (const auto& sc : scales) {
                        INFO(op << (u ? " u8 " : " s8 ") << a.shape().to_string() << " x "
                                << b.shape().to_string() << " zp " << z[0] << "," << z[1] << ","
                                << z[2] << " scales " << sc[0] << "," << sc[1] << "," << sc[2]);
                        check_fast(op, {{a, false}, {Tensor::scalar<float>(sc[0])},
                                        {q8_scalar(u, z[0])}, {b, false},
                                        {Tensor::scalar<float>(sc[1])}, {q8_scalar(u, z[1])},
                                        {Tensor::scalar<float>(sc[2])}, {q8_scalar(u, z[2])}});
                        if (s.a.size() > 3) break;  // the big shapes: one setting each
                    }
            }
    // Omitted zero points, run-time scales.
    const Tensor a = q8_tensor({5, 31}, true, 9), b = q8_tensor({31}, true, 10);
    check_fast("QLinearAdd", {{a, false}, {Tensor::scalar<float>(0.1f), false}, {}, {b, false},
                              {Tensor::scalar<float>(0.2f), false}, {},
                              {Tensor::scalar<float>(0.25f), false}, {}});
}

TEST_CASE("qlinear: fast QLinearGlobalAveragePool equals the reference bitwise",
          "[fast][qlinear]") {
    const std::vector<int64_t> shapes[] = {
        {1, 3, 7, 7}, {2, 2048, 7, 7}, {3, 5, 1, 1}, {2, 300, 3}, {1, 17, 33, 35}, {4, 9},
        {1, 4, 300, 300}, {0, 3, 2, 2}};
    for (bool last : {false, true})
        for (bool u : {true, false})
            for (const auto& dims : shapes) {
                const Tensor x = q8_tensor(dims, u, 11);
                const int zs[][2] = {{u ? 0 : -128, u ? 255 : 127}, {u ? 255 : 127, u ? 0 : -128},
                                     {u ? 100 : 3, u ? 30 : -5}};
                const float scales[][2] = {{0.02f, 0.015f}, {0.5f, 1e-3f}, {1e-3f, 0.9f}};
                for (const auto& z : zs)
                    for (const auto& sc : scales) {
                        INFO("dims " << Shape::make(dims).value().to_string()
                                     << (last ? " last" : " first") << (u ? " u8" : " s8")
                                     << " zp " << z[0] << "," << z[1] << " scales " << sc[0]
                                     << "," << sc[1]);
                        check_fast("QLinearGlobalAveragePool",
                                   {{x, false}, {Tensor::scalar<float>(sc[0])},
                                    {q8_scalar(u, z[0])}, {Tensor::scalar<float>(sc[1])},
                                    {q8_scalar(u, z[1])}},
                                   {{"channels_last", attr_i(last ? 1 : 0)}});
                    }
            }
}

TEST_CASE("qlinear: fast QLinearSigmoid / QLinearLeakyRelu equal the reference bitwise",
          "[fast][qlinear]") {
    for (const std::string op : {"QLinearSigmoid", "QLinearLeakyRelu"})
        for (bool u : {true, false})
            for (bool constant : {true, false})
                for (const auto& dims :
                     {std::vector<int64_t>{1, 16, 57, 57}, std::vector<int64_t>{13},
                      std::vector<int64_t>{0, 4}}) {
                    INFO(op << (u ? " u8" : " s8") << (constant ? " constant" : " run-time")
                            << " params, " << dims.size() << "-D");
                    // Every byte value appears (the whole table is compared).
                    Tensor x = q8_tensor(dims, u, 21);
                    auto* p = static_cast<std::uint8_t*>(x.raw_data());
                    for (int64_t i = 0; i < std::min<int64_t>(256, x.num_elements()); ++i)
                        p[i] = static_cast<std::uint8_t>(i);
                    check_fast(op,
                               {{x, false}, {Tensor::scalar<float>(0.06f), constant},
                                {q8_scalar(u, u ? 255 : -128), constant},
                                {Tensor::scalar<float>(op == "QLinearSigmoid" ? 1.f / 256 : 0.05f),
                                 constant},
                                {q8_scalar(u, u ? 0 : 127), constant}},
                               {{"alpha", attr_f(0.3f)}});
                }
}

TEST_CASE("qlinear: fast MaxPool on uint8 / int8 equals the reference bitwise", "[fast][qlinear]") {
    struct PoolCase {
        std::vector<int64_t> dims;
        Attrs attrs;
    };
    const PoolCase cases[] = {
        {{2, 64, 112, 112},  // ResNet-50's stem pool
         {{"kernel_shape", attr_ints({3, 3})},
          {"strides", attr_ints({2, 2})},
          {"pads", attr_ints({1, 1, 1, 1})}}},
        {{1, 3, 13, 11},
         {{"kernel_shape", attr_ints({3, 2})},
          {"strides", attr_ints({2, 3})},
          {"pads", attr_ints({1, 0, 2, 1})},
          {"ceil_mode", attr_i(1)}}},
        {{2, 2, 9, 10}, {{"kernel_shape", attr_ints({2, 3})}, {"dilations", attr_ints({2, 2})}}},
        {{1, 4, 7, 7}, {{"kernel_shape", attr_ints({3, 3})}, {"auto_pad", attr_s("SAME_UPPER")}}},
        {{3, 1, 5, 6}, {{"kernel_shape", attr_ints({5, 6})}, {"pads", attr_ints({4, 5, 4, 5})}}},
        // 2 wide, stride 2: the loop over the windows inside the row, and the edges
        {{1, 3, 8, 34}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}},
        {{1, 2, 7, 21},
         {{"kernel_shape", attr_ints({2, 2})},
          {"strides", attr_ints({2, 2})},
          {"pads", attr_ints({1, 1, 0, 1})},
          {"ceil_mode", attr_i(1)}}},
    };
    for (bool u : {true, false})
        for (const PoolCase& c : cases) {
            INFO((u ? "u8 " : "s8 ") << Shape::make(c.dims).value().to_string());
            check_fast("MaxPool", {{q8_tensor(c.dims, u, 31), false}}, c.attrs, "");
        }
}

TEST_CASE("qlinear: fast MaxPool on float32 equals the reference bitwise, NaN and infinities",
          "[fast][qlinear]") {
    // 2 wide and stride 2 (a U-Net's pools) has a loop of its own over the windows inside the
    // row; odd widths, leading and trailing pads and ceil_mode put windows at both edges. NaN,
    // -inf and +inf in both places of a window: a NaN wins (of several NaN payloads in one
    // window the fast loop, vertical first, may keep another than the reference: one payload).
    struct PoolCase {
        std::vector<int64_t> dims;
        Attrs attrs;
    };
    const PoolCase cases[] = {
        {{1, 3, 8, 34}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}},
        {{2, 2, 7, 37},
         {{"kernel_shape", attr_ints({2, 2})},
          {"strides", attr_ints({2, 2})},
          {"ceil_mode", attr_i(1)}}},
        {{1, 2, 6, 21},
         {{"kernel_shape", attr_ints({2, 2})},
          {"strides", attr_ints({2, 2})},
          {"pads", attr_ints({1, 1, 0, 1})}}},
        {{1, 2, 6, 3}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}},
        {{1, 2, 9, 10},
         {{"kernel_shape", attr_ints({3, 3})},
          {"strides", attr_ints({2, 2})},
          {"pads", attr_ints({1, 1, 1, 1})}}},
    };
    for (const PoolCase& c : cases) {
        INFO(Shape::make(c.dims).value().to_string());
        Tensor x = Tensor::empty(DType::f32, Shape::make(c.dims).value());
        std::mt19937 r(41);
        const std::uint32_t nan_bits = 0x7fc00abcu;
        float na;
        std::memcpy(&na, &nan_bits, 4);
        const float inf = std::numeric_limits<float>::infinity();
        for (auto& v : x.span<float>()) {
            const auto k = r() % 40;
            v = k <= 1   ? na
                : k == 2 ? -inf
                : k == 3 ? inf
                         : static_cast<float>(static_cast<int>(r() % 2001) - 1000) * 1e-2f;
        }
        check_fast("MaxPool", {{x, false}}, c.attrs, "");
    }
}

TEST_CASE("qlinear: QLinear ops load from an ONNX model importing com.microsoft", "[qlinear]") {
    onnx::ModelProto m = new_model(17, "qlinear_add");
    auto* ms = m.add_opset_import();
    ms->set_domain(kMs);
    ms->set_version(1);
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("a", 2, {2, 3});  // uint8
    *g->add_input() = tensor_info("b", 2, {2, 3});
    *g->add_output() = tensor_info("c", 2, {2, 3});
    for (const char* s : {"sa", "sb", "sc"}) {
        auto* t = g->add_initializer();
        t->set_name(s);
        t->set_data_type(1);
        t->add_float_data(0.5f);
    }
    for (const char* z : {"za", "zb", "zc"}) {
        auto* t = g->add_initializer();
        t->set_name(z);
        t->set_data_type(2);
        t->add_int32_data(10);
    }
    add_node(*g, "QLinearAdd", {"a", "sa", "za", "b", "sb", "zb", "sc", "zc"}, {"c"}, "qadd")
        ->set_domain(kMs);
    const std::string bytes = bytes_of(m);
    for (const char* backend : {"cpu", "reference"}) {
        EngineOptions o;
        o.backends = {backend};
        InferenceEngine e =
            InferenceEngine::compile(load_onnx_from_bytes(bytes.data(), bytes.size()), o);
        const Tensor a = Tensor::from_vector<std::uint8_t>(Shape{2, 3}, {10, 11, 12, 13, 255, 0});
        const Tensor b = Tensor::from_vector<std::uint8_t>(Shape{2, 3}, {10, 10, 11, 12, 255, 0});
        const Tensor c = e.run({{"a", a}, {"b", b}}).at(0).tensor;
        // v = (a - 10) + (b - 10), + 10, saturated.
        const std::vector<int> want{10, 11, 13, 15, 255, 0};
        for (int i = 0; i < 6; ++i) CHECK(c.data<std::uint8_t>()[i] == want[static_cast<std::size_t>(i)]);
    }
}
