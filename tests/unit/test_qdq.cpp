// Statically quantized (QDQ) models: the fuse_qdq pass (src/passes/fuse_qdq.cpp) and the cpu
// backend's INT8 kernels it leads to (src/cpu/fast/fast_qmatmul.cpp: QLinearMatMul,
// com.microsoft QGemm / DynamicQuantizeMatMul / MatMulIntegerToFloat; fast_qdq.cpp:
// QuantizeLinear, DequantizeLinear).
//   - each fast kernel against its reference kernel: BITWISE (odd shapes, zero points at both
//     ends of their range, per-tensor and per-column/axis parameters, 1 and 2 threads);
//   - each island form fused vs the unfused QDQ graph on the reference kernels: within ONE
//     quantization step of the output (the fused op rounds the exact integer product once,
//     the unfused graph rounds float products and sums first), bitwise for MaxPool and data
//     movement; the fused graph on the reference and on the default backends alike;
//   - islands that must not fuse; bad scales and zero points: typed errors naming the node.
// Runs once per ISA level ([fast]: DSINFER_TEST_ISA, tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
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

Tensor int8_tensor(const std::vector<int64_t>& dims, DType t, std::uint32_t seed, int lo = -128,
                   int hi = 127) {
    Tensor x = Tensor::allocate(t, Shape::make(dims).value()).value();
    std::mt19937 r(seed);
    if (t == DType::u8) {
        lo += 128;
        hi += 128;
    }
    std::uniform_int_distribution<int> u(lo, hi);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
        const int v = u(r);
        if (t == DType::u8) x.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
        else x.data<std::int8_t>()[i] = static_cast<std::int8_t>(v);
    }
    return x;
}

/// A scalar 8-bit zero point.
Tensor zp8(DType t, int v) {
    Tensor z = Tensor::allocate(t, Shape{}).value();
    if (t == DType::u8) z.data<std::uint8_t>()[0] = static_cast<std::uint8_t>(v);
    else z.data<std::int8_t>()[0] = static_cast<std::int8_t>(v);
    return z;
}

Tensor f32s(const std::vector<float>& v, bool scalar = false) {
    Tensor t = Tensor::allocate(DType::f32, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())})
                   .value();
    std::memcpy(t.raw_data(), v.data(), v.size() * 4);
    return t;
}

Tensor positive_f32(int64_t n, std::uint32_t seed, float lo, float hi) {
    std::vector<float> v(static_cast<std::size_t>(n));
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& x : v) x = u(r);
    return f32s(v);
}

struct Ran {
    std::vector<NamedTensor> out;    ///< the second run's: on the planned arena, in place
    std::vector<NamedTensor> first;  ///< the first run's (it records the plan)
    std::vector<std::string> ops, providers;
    int blocked = 0;  ///< nodes with a negotiated layout (blocked_layout_nodes)
};

Ran run(const Graph& g, const std::vector<NamedTensor>& feeds, std::vector<std::string> backends,
        int level, int threads, std::vector<std::string> disabled_passes = {}) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    o.optimization_level = level;
    o.disabled_passes = std::move(disabled_passes);
    const InferenceEngine e = InferenceEngine::compile(g, o);
    Ran r;
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i) {
        r.ops.push_back(e.graph().nodes[i].op_type);
        r.providers.push_back(e.node_providers()[i]);
    }
    r.blocked = e.blocked_layout_nodes();
    r.first = e.run(feeds);
    r.out = e.run(feeds);
    return r;
}

int count_op(const Ran& r, const std::string& op, const std::string& provider = "") {
    int n = 0;
    for (std::size_t i = 0; i < r.ops.size(); ++i)
        n += r.ops[i] == op && (provider.empty() || r.providers[i] == provider);
    return n;
}

void require_bitwise(const Tensor& got, const Tensor& want) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    int64_t bad = 0, first = -1;
    const std::size_t es = got.num_bytes() / static_cast<std::size_t>(std::max<int64_t>(1, got.num_elements()));
    for (int64_t i = 0; i < got.num_elements(); ++i) {
        const auto* a = static_cast<const unsigned char*>(got.raw_data()) + i * static_cast<int64_t>(es);
        const auto* b = static_cast<const unsigned char*>(want.raw_data()) + i * static_cast<int64_t>(es);
        bool same = std::memcmp(a, b, es) == 0;
        if (!same && got.dtype() == DType::f32) {
            float x, y;
            std::memcpy(&x, a, 4);
            std::memcpy(&y, b, 4);
            same = std::isnan(x) && std::isnan(y);
        }
        if (!same && bad++ == 0) first = i;
    }
    INFO("first difference at element " << first << " of " << got.num_elements());
    CHECK(bad == 0);
}

/// 8-bit tensors differing by at most `steps` per element.
void require_within(const Tensor& got, const Tensor& want, int steps) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    int worst = 0;
    int64_t off = 0;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
        const int a = got.dtype() == DType::u8 ? got.data<std::uint8_t>()[i] : got.data<std::int8_t>()[i];
        const int b = want.dtype() == DType::u8 ? want.data<std::uint8_t>()[i] : want.data<std::int8_t>()[i];
        worst = std::max(worst, std::abs(a - b));
        off += a != b;
    }
    INFO("worst " << worst << " steps; " << off << " of " << got.num_elements() << " differ");
    CHECK(worst <= steps);
}

SymbolicShape sym(const std::vector<int64_t>& d) { return SymbolicShape::from(Shape::make(d).value()); }

// ---- fast kernels vs reference -------------------------------------------------------------

struct MmCase {
    std::vector<int64_t> a_dims{7, 13};
    int64_t n = 19;
    DType a = DType::u8, b = DType::i8, y = DType::u8;
    bool per_column = false;
    int a_zero = 0, y_zero = 0;  ///< in the type's own range
};

Graph qlinear_matmul_graph(const MmCase& c, std::uint32_t seed) {
    Graph g;
    g.opset_imports = {{"", 13}};
    const ValueId a = g.add_value("a", c.a, sym(c.a_dims));
    g.inputs.push_back(a);
    const int64_t k = c.a_dims.back();
    const ValueId as = g.add_initializer("as", f32s({0.0173f}, true));
    const ValueId az = g.add_initializer("az", zp8(c.a, c.a_zero));
    const ValueId b = g.add_initializer("b", int8_tensor({k, c.n}, c.b, seed));
    const ValueId bs = g.add_initializer(
        "bs", c.per_column ? positive_f32(c.n, seed + 1, 1e-3f, 3e-2f) : f32s({0.0091f}, true));
    const ValueId bz = c.per_column ? g.add_initializer("bz", int8_tensor({c.n}, c.b, seed + 2, -5, 5))
                                    : g.add_initializer("bz", zp8(c.b, c.b == DType::u8 ? 128 : 0));
    const ValueId ys = g.add_initializer("ys", f32s({0.05f}, true));
    const ValueId yz = g.add_initializer("yz", zp8(c.y, c.y_zero));
    const ValueId y = g.add_value("y");
    g.add_node("QLinearMatMul", {a, as, az, b, bs, bz, ys, yz}, {y}, "qmm");
    g.outputs.push_back(y);
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

void check_fast_vs_reference(const Graph& g, const std::vector<NamedTensor>& feeds,
                             const std::string& op) {
    const Ran want = run(g, feeds, {"reference"}, 0, 1);
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        const Ran got = run(g, feeds, {"cpu"}, 0, threads);
        CHECK(count_op(got, op, "cpu") == 1);
        REQUIRE(got.out.size() == want.out.size());
        for (std::size_t o = 0; o < want.out.size(); ++o)
            require_bitwise(got.out[o].tensor, want.out[o].tensor);
    }
}

}  // namespace

TEST_CASE("qdq: fast QLinearMatMul equals the reference bitwise", "[fast][qdq]") {
    std::uint32_t seed = 11;
    std::vector<MmCase> cases;
    for (DType a : {DType::u8, DType::i8})
        for (DType b : {DType::u8, DType::i8})
            for (DType y : {DType::u8, DType::i8})
                for (bool pc : {false, true}) {
                    MmCase c;
                    c.a = a, c.b = b, c.y = y, c.per_column = pc;
                    const int lo = a == DType::u8 ? 0 : -128, hi = a == DType::u8 ? 255 : 127;
                    c.a_zero = (seed % 2) ? lo : hi;  // both ends
                    c.y_zero = (seed % 3) ? (y == DType::u8 ? 255 : -128) : (y == DType::u8 ? 0 : 127);
                    const std::vector<std::vector<int64_t>> shapes{{7, 13}, {1, 1}, {3, 5, 33}, {250, 70}};
                    c.a_dims = shapes[seed % shapes.size()];
                    c.n = std::vector<int64_t>{19, 1, 33, 64}[seed % 4];
                    cases.push_back(c);
                    ++seed;
                }
    for (const MmCase& c : cases) {
        INFO("a " << dtype_name(c.a) << " b " << dtype_name(c.b) << " y " << dtype_name(c.y)
                  << " per-column " << c.per_column << " M*K " << c.a_dims.front());
        const Graph g = qlinear_matmul_graph(c, seed);
        check_fast_vs_reference(g, {{"a", int8_tensor(c.a_dims, c.a, seed + 9)}}, "QLinearMatMul");
        ++seed;
    }
}

namespace {

struct GemmCase {
    int64_t m = 9, k = 21, n = 17;
    bool trans_b = false;
    float alpha = 1.f;
    int c = 0;  ///< 0: none, 1: [N], 2: [M, N], 3: scalar
    DType a = DType::u8, b = DType::i8;
    int y = 0;  ///< 0: float32 output, 1: u8, 2: s8
    bool per_column = false;
};

Graph qgemm_graph(const GemmCase& c, std::uint32_t seed) {
    Graph g;
    g.opset_imports = {{"", 13}, {"com.microsoft", 1}};
    const ValueId a = g.add_value("a", c.a, sym({c.m, c.k}));
    g.inputs.push_back(a);
    const ValueId as = g.add_initializer("as", f32s({0.021f}, true));
    const ValueId az = g.add_initializer("az", zp8(c.a, c.a == DType::u8 ? 255 : -128));
    const ValueId b = g.add_initializer(
        "b", int8_tensor(c.trans_b ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n},
                         c.b, seed));
    const ValueId bs = g.add_initializer(
        "bs", c.per_column ? positive_f32(c.n, seed + 1, 1e-3f, 3e-2f) : f32s({0.013f}, true));
    const ValueId bz = g.add_initializer(
        "bz", c.per_column ? int8_tensor({c.n}, c.b, seed + 2, -3, 3) : zp8(c.b, c.b == DType::u8 ? 127 : 1));
    std::vector<ValueId> in{a, as, az, b, bs, bz};
    if (c.c != 0 || c.y != 0) {
        ValueId cv = kNoValue;
        if (c.c != 0) {
            const std::vector<int64_t> dims = c.c == 1 ? std::vector<int64_t>{c.n}
                                               : c.c == 2 ? std::vector<int64_t>{c.m, c.n}
                                                          : std::vector<int64_t>{};
            Tensor t = Tensor::allocate(DType::i32, Shape::make(dims).value()).value();
            std::mt19937 r(seed + 3);
            for (int64_t i = 0; i < t.num_elements(); ++i)
                t.data<std::int32_t>()[i] = static_cast<std::int32_t>(r() % 20001) - 10000;
            cv = g.add_initializer("c", t);
        }
        in.push_back(cv);
    }
    if (c.y != 0) {
        const DType yt = c.y == 1 ? DType::u8 : DType::i8;
        in.push_back(g.add_initializer("ys", f32s({0.4f}, true)));
        in.push_back(g.add_initializer("yz", zp8(yt, c.y == 1 ? 3 : -2)));
    }
    const ValueId y = g.add_value("y");
    Node& n = g.add_node("QGemm", in, {y}, "qgemm");
    n.domain = "com.microsoft";
    n.attributes = {{"transB", attr_i(c.trans_b ? 1 : 0)}, {"alpha", attr_f(c.alpha)}};
    g.outputs.push_back(y);
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

}  // namespace

TEST_CASE("qdq: fast com.microsoft QGemm equals the reference bitwise", "[fast][qdq]") {
    std::uint32_t seed = 101;
    for (bool tb : {false, true})
        for (int c : {0, 1, 2, 3})
            for (int y : {0, 1, 2}) {
                GemmCase gc;
                gc.trans_b = tb;
                gc.c = c;
                gc.y = y;
                gc.alpha = (seed % 2) ? 1.f : 0.75f;
                gc.a = (seed % 3) ? DType::u8 : DType::i8;
                gc.b = (seed % 5) ? DType::i8 : DType::u8;
                gc.per_column = seed % 2 == 0;
                if (seed % 4 == 0) gc.m = 230, gc.k = 64, gc.n = 40;  // the row-slice path
                INFO("transB " << tb << " C " << c << " y " << y << " m " << gc.m);
                const Graph g = qgemm_graph(gc, seed);
                check_fast_vs_reference(g, {{"a", int8_tensor({gc.m, gc.k}, gc.a, seed + 7)}},
                                        "QGemm");
                ++seed;
            }
}

TEST_CASE("qdq: com.microsoft DynamicQuantizeMatMul / MatMulIntegerToFloat run the com.dsinfer "
          "kernels",
          "[fast][qdq]") {
    for (const char* domain : {"com.microsoft", "com.dsinfer"}) {
        INFO(domain);
        Graph g;
        g.opset_imports = {{"", 13}, {domain, 1}};
        const ValueId x = g.add_value("x", DType::f32, sym({5, 24}));
        const ValueId aq = g.add_value("aq", DType::u8, sym({5, 24}));
        g.inputs = {x, aq};
        const ValueId b = g.add_initializer("b", int8_tensor({24, 10}, DType::i8, 3));
        const ValueId bs = g.add_initializer("bs", positive_f32(10, 4, 1e-3f, 1e-2f));
        const ValueId bias = g.add_initializer("bias", positive_f32(10, 5, -1.f, 1.f));
        const ValueId as = g.add_initializer("as", f32s({0.02f}, true));
        const ValueId az = g.add_initializer("az", zp8(DType::u8, 131));
        const ValueId y0 = g.add_value("y0"), y1 = g.add_value("y1");
        g.add_node("DynamicQuantizeMatMul", {x, b, bs, kNoValue, bias}, {y0}, "dqmm").domain = domain;
        g.add_node("MatMulIntegerToFloat", {aq, b, as, bs, az, kNoValue, bias}, {y1}, "mmitf").domain =
            domain;
        g.outputs = {y0, y1};
        REQUIRE(g.sort_topologically().is_ok());
        const std::vector<NamedTensor> feeds{{"x", random_f32({5, 24}, 6, 3.f)},
                                             {"aq", int8_tensor({5, 24}, DType::u8, 7)}};
        const Ran want = run(g, feeds, {"reference"}, 0, 1);
        for (int threads : {1, 2}) {
            const Ran got = run(g, feeds, {"cpu"}, 0, threads);
            CHECK(count_op(got, "DynamicQuantizeMatMul", "cpu") == 1);
            CHECK(count_op(got, "MatMulIntegerToFloat", "cpu") == 1);
            for (std::size_t o = 0; o < 2; ++o) require_bitwise(got.out[o].tensor, want.out[o].tensor);
        }
    }
}

namespace {

/// x [shape] -> QuantizeLinear(scale, zp, axis) -> q -> DequantizeLinear -> d; outputs q, d.
Graph qdq_graph(const std::vector<int64_t>& dims, DType q, int64_t axis, int64_t len,
                std::uint32_t seed, bool subnormal_scale = false) {
    Graph g;
    g.opset_imports = {{"", 19}};
    const ValueId x = g.add_value("x", DType::f32, sym(dims));
    g.inputs.push_back(x);
    Tensor s = len == 0 ? f32s({0.037f}, true) : positive_f32(len, seed, 0.01f, 0.2f);
    if (subnormal_scale) s.data<float>()[0] = 1e-40f;
    const ValueId sv = g.add_initializer("s", s);
    Tensor z = len == 0 ? zp8(q, q == DType::u8 ? 250 : -120) : int8_tensor({len}, q, seed + 1);
    if (len >= 2) {  // both ends
        if (q == DType::u8) z.data<std::uint8_t>()[0] = 0, z.data<std::uint8_t>()[1] = 255;
        else z.data<std::int8_t>()[0] = -128, z.data<std::int8_t>()[1] = 127;
    }
    const ValueId zv = g.add_initializer("z", z);
    const ValueId qv = g.add_value("q"), dv = g.add_value("d");
    g.add_node("QuantizeLinear", {x, sv, zv}, {qv}, "quant").attributes = {{"axis", attr_i(axis)}};
    g.add_node("DequantizeLinear", {qv, sv, zv}, {dv}, "dequant").attributes = {{"axis", attr_i(axis)}};
    g.outputs = {qv, dv};
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

Tensor special_input(const std::vector<int64_t>& dims, std::uint32_t seed) {
    Tensor x = random_f32(dims, seed, 12.f);
    float* p = x.data<float>();
    const int64_t n = x.num_elements();
    const float specials[] = {kNaN, kInf, -kInf, 1e30f, -1e30f, 0.f, -0.f, 1e-42f};
    for (int64_t i = 0; i < n; ++i) {
        if (i % 11 == 0) p[i] = specials[(i / 11) % 8];
        else if (i % 5 == 0) p[i] = std::floor(p[i] * 10.f) * 0.0185f;  // ties near k.5 steps
    }
    return x;
}

}  // namespace

TEST_CASE("qdq: fast QuantizeLinear / DequantizeLinear equal the reference bitwise", "[fast][qdq]") {
    std::uint32_t seed = 300;
    struct L {
        std::vector<int64_t> dims;
        int64_t axis, len;
    };
    const std::vector<L> layouts{{{1}, 1, 0},          {{37}, 0, 0},           {{3, 1000}, 1, 0},
                                 {{2, 3, 5, 7}, 1, 3}, {{6, 9, 33}, 0, 6},     {{5, 67}, -1, 67},
                                 {{4, 40, 7}, 1, 40},  {{700, 1001}, 1, 0},    {{64, 3, 3, 3}, 0, 64}};
    for (const L& l : layouts)
        for (DType q : {DType::u8, DType::i8}) {
            INFO("dims[0] " << l.dims[0] << " axis " << l.axis << " len " << l.len << " "
                            << dtype_name(q));
            const Graph g = qdq_graph(l.dims, q, l.axis, l.len, seed);
            const std::vector<NamedTensor> feeds{{"x", special_input(l.dims, seed + 1)}};
            const Ran want = run(g, feeds, {"reference"}, 0, 1);
            for (int threads : {1, 2}) {
                const Ran got = run(g, feeds, {"cpu"}, 0, threads);
                CHECK(count_op(got, "QuantizeLinear", "cpu") == 1);
                CHECK(count_op(got, "DequantizeLinear", "cpu") == 1);
                for (std::size_t o = 0; o < 2; ++o) require_bitwise(got.out[o].tensor, want.out[o].tensor);
            }
            ++seed;
        }
    // A subnormal scale is positive and finite: accepted, quotients overflow to the ends.
    const Graph g = qdq_graph({3, 17}, DType::u8, 1, 0, seed, true);
    const std::vector<NamedTensor> feeds{{"x", special_input({3, 17}, seed)}};
    const Ran want = run(g, feeds, {"reference"}, 0, 1);
    const Ran got = run(g, feeds, {"cpu"}, 0, 2);
    for (std::size_t o = 0; o < 2; ++o) require_bitwise(got.out[o].tensor, want.out[o].tensor);
}

// ---- the pass ------------------------------------------------------------------------------

namespace {

/// Builds QDQ graphs the way ONNX Runtime's quantize_static writes them.
struct QdqBuilder {
    Graph g;
    std::uint32_t seed = 1;
    int uid = 0;

    QdqBuilder() { g.opset_imports = {{"", 17}}; }

    std::string fresh(const std::string& b) { return b + "_" + std::to_string(uid++); }

    /// Q -> DQ of a float activation (u8, per tensor); returns the DQ output.
    ValueId qdq(ValueId x, float scale, int zero, ValueId* q_out = nullptr) {
        const ValueId s = g.add_initializer(fresh("s"), f32s({scale}, true));
        const ValueId z = g.add_initializer(fresh("z"), zp8(DType::u8, zero));
        const ValueId q = g.add_value(fresh("q")), d = g.add_value(fresh("dq"));
        g.add_node("QuantizeLinear", {x, s, z}, {q}, fresh("Q"));
        g.add_node("DequantizeLinear", {q, s, z}, {d}, fresh("DQ"));
        if (q_out != nullptr) *q_out = q;
        return d;
    }
    /// DQ of a constant s8 weight, per channel on `axis` (len values) or per tensor (len 0).
    ValueId weight(const std::vector<int64_t>& dims, int64_t axis, int64_t len, Tensor* scale = nullptr) {
        const ValueId w = g.add_initializer(fresh("w"), int8_tensor(dims, DType::i8, seed++, -127, 127));
        Tensor st = len == 0 ? f32s({0.02f}, true) : positive_f32(len, seed++, 0.005f, 0.03f);
        if (scale != nullptr) *scale = st;
        const ValueId s = g.add_initializer(fresh("ws"), st);
        Tensor zt = len == 0 ? zp8(DType::i8, 0) : Tensor::allocate(DType::i8, Shape{len}).value();
        std::memset(zt.raw_data(), 0, zt.num_bytes());
        const ValueId z = g.add_initializer(fresh("wz"), zt);
        const ValueId d = g.add_value(fresh("wdq"));
        g.add_node("DequantizeLinear", {w, s, z}, {d}, fresh("WDQ")).attributes = {{"axis", attr_i(axis)}};
        return d;
    }
    /// DQ of an int32 bias with scale x_scale * w_scale (per channel).
    ValueId bias(float x_scale, const Tensor& w_scale, int64_t n) {
        Tensor b = Tensor::allocate(DType::i32, Shape{n}).value();
        std::mt19937 r(seed++);
        for (int64_t i = 0; i < n; ++i) b.data<std::int32_t>()[i] = static_cast<std::int32_t>(r() % 2001) - 1000;
        Tensor s = Tensor::allocate(DType::f32, Shape{n}).value();
        for (int64_t i = 0; i < n; ++i)
            s.data<float>()[i] = x_scale * w_scale.data<float>()[w_scale.num_elements() == 1 ? 0 : i];
        const ValueId bv = g.add_initializer(fresh("b"), b);
        const ValueId sv = g.add_initializer(fresh("bs"), s);
        const ValueId d = g.add_value(fresh("bdq"));
        g.add_node("DequantizeLinear", {bv, sv}, {d}, fresh("BDQ")).attributes = {{"axis", attr_i(0)}};
        return d;
    }
    ValueId node(const std::string& op, std::vector<ValueId> in, std::vector<std::pair<std::string, Attribute>> attrs = {}) {
        const ValueId y = g.add_value(fresh(op + "_out"));
        Node& n = g.add_node(op, std::move(in), {y}, fresh(op));
        for (auto& a : attrs) n.attributes.push_back(a);
        return y;
    }
    /// The Q of a float output; returns the 8-bit value (a graph output).
    ValueId quantize(ValueId x, float scale, int zero) {
        const ValueId s = g.add_initializer(fresh("s"), f32s({scale}, true));
        const ValueId z = g.add_initializer(fresh("z"), zp8(DType::u8, zero));
        const ValueId q = g.add_value(fresh("q"));
        g.add_node("QuantizeLinear", {x, s, z}, {q}, fresh("Q"));
        return q;
    }
    Graph done(std::vector<ValueId> outputs) {
        g.outputs = std::move(outputs);
        REQUIRE(g.sort_topologically().is_ok());
        return g;
    }
};

/// The graph unfused on the reference kernels (level 0) vs fused (level 3) on the reference
/// and on the default backends; 8-bit outputs within `steps`, float outputs bitwise unless
/// `float_tol` (absolute) > 0.
Ran check_fusion(const Graph& g, const std::vector<NamedTensor>& feeds, int steps,
                 float float_tol = 0.f) {
    const Ran want = run(g, feeds, {"reference"}, 0, 1);
    const Ran fused_ref = run(g, feeds, {"reference"}, 3, 1);
    Ran fused_fast;
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        Ran r = run(g, feeds, {}, 3, threads);  // the default backends
        for (std::size_t o = 0; o < want.out.size(); ++o)  // the fused graph: the same bits
            require_bitwise(r.out[o].tensor, fused_ref.out[o].tensor);
        fused_fast = std::move(r);
    }
    for (std::size_t o = 0; o < want.out.size(); ++o) {
        const Tensor& got = fused_ref.out[o].tensor;
        const Tensor& w = want.out[o].tensor;
        if (got.dtype() == DType::f32) {
            REQUIRE(got.shape() == w.shape());
            double worst = 0;
            for (int64_t i = 0; i < got.num_elements(); ++i)
                worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - w.data<float>()[i]));
            INFO("worst float difference " << worst);
            if (float_tol > 0) CHECK(worst <= float_tol);
            else require_bitwise(got, w);
        } else if (steps == 0) {
            require_bitwise(got, w);
        } else {
            require_within(got, w, steps);
        }
    }
    return fused_fast;
}

}  // namespace

TEST_CASE("qdq: Conv islands (per-channel weights, int32 bias, Relu) become QLinearConv",
          "[fast][qdq]") {
    for (bool relu : {false, true})
        for (bool per_channel : {true, false}) {
            INFO("relu " << relu << " per-channel " << per_channel);
            QdqBuilder b;
            const ValueId x = b.g.add_value("x", DType::f32, sym({2, 3, 9, 11}));
            b.g.inputs.push_back(x);
            const ValueId xd = b.qdq(x, 0.04f, 128);
            Tensor ws;
            const ValueId wd = b.weight({8, 3, 3, 3}, 0, per_channel ? 8 : 0, &ws);
            const ValueId bd = b.bias(0.04f, ws, 8);
            ValueId y = b.node("Conv", {xd, wd, bd}, {{"pads", attr_ints({1, 1, 1, 1})}});
            if (relu) y = b.node("Relu", {y});
            const ValueId q = b.quantize(y, 0.05f, relu ? 0 : 100);
            const Graph g = b.done({q});
            const Ran r = check_fusion(g, {{"x", random_f32({2, 3, 9, 11}, 5, 5.f)}}, 1);
            CHECK(count_op(r, "QLinearConv") == 1);
            CHECK(count_op(r, "Conv") == 0);
            CHECK(count_op(r, "Relu") == 0);
            CHECK(count_op(r, "DequantizeLinear") == 0);
        }
}

TEST_CASE("qdq: MatMul islands become QLinearMatMul, or MatMulIntegerToFloat without an output Q",
          "[fast][qdq]") {
    for (bool out_q : {true, false}) {
        INFO("output Q " << out_q);
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({2, 7, 24}));
        b.g.inputs.push_back(x);
        const ValueId xd = b.qdq(x, 0.03f, 120);
        const ValueId wd = b.weight({24, 19}, 1, 19);
        ValueId y = b.node("MatMul", {xd, wd});
        if (!out_q)  // the bias Add goes into MatMulIntegerToFloat
            y = b.node("Add", {y, b.g.add_initializer("bias", positive_f32(19, 3, -1.f, 1.f))});
        const ValueId out = out_q ? b.quantize(y, 0.02f, 128) : y;
        const Graph g = b.done({out});
        const Ran r = check_fusion(g, {{"x", random_f32({2, 7, 24}, 8, 3.f)}}, 1, out_q ? 0.f : 1e-4f);
        CHECK(count_op(r, out_q ? "QLinearMatMul" : "MatMulIntegerToFloat", "cpu") == 1);
        CHECK(count_op(r, "MatMul") == 0);
        CHECK(count_op(r, "Add") == 0);
        CHECK(count_op(r, "DequantizeLinear") == 0);
    }
}

TEST_CASE("qdq: Gemm islands become com.microsoft QGemm", "[fast][qdq]") {
    for (bool out_q : {true, false}) {
        INFO("output Q " << out_q);
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({4, 32}));
        b.g.inputs.push_back(x);
        const ValueId xd = b.qdq(x, 0.05f, 128);
        Tensor ws;
        const ValueId wd = b.weight({10, 32}, 0, 10, &ws);  // transB = 1: [N, K], axis 0
        const ValueId bd = b.bias(0.05f, ws, 10);
        const ValueId y = b.node("Gemm", {xd, wd, bd}, {{"transB", attr_i(1)}});
        const ValueId out = out_q ? b.quantize(y, 0.1f, 110) : y;
        const Graph g = b.done({out});
        const Ran r = check_fusion(g, {{"x", random_f32({4, 32}, 9, 6.f)}}, 1, out_q ? 0.f : 1e-4f);
        CHECK(count_op(r, "QGemm", "cpu") == 1);
        CHECK(count_op(r, "Gemm") == 0);
    }
}

TEST_CASE("qdq: MaxPool / Flatten / Concat islands run on the 8-bit tensor, bitwise",
          "[fast][qdq]") {
    QdqBuilder b;
    const ValueId x = b.g.add_value("x", DType::f32, sym({1, 4, 8, 8}));
    const ValueId x2 = b.g.add_value("x2", DType::f32, sym({1, 4, 8, 8}));
    b.g.inputs = {x, x2};
    const ValueId xd = b.qdq(x, 0.02f, 7);
    const ValueId xd2 = b.qdq(x2, 0.02f, 7);
    const ValueId cat = b.node("Concat", {xd, xd2}, {{"axis", attr_i(1)}});
    const ValueId catq = b.quantize(cat, 0.02f, 7);
    const ValueId catd = b.g.add_value("catd");
    b.g.add_node("DequantizeLinear", {catq, b.g.add_initializer("cs", f32s({0.02f}, true)),
                                      b.g.add_initializer("cz", zp8(DType::u8, 7))},
                 {catd}, "catDQ");
    const ValueId mp = b.node("MaxPool", {catd}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
    const ValueId mpq = b.quantize(mp, 0.02f, 7);
    const Graph g = b.done({mpq});
    const Ran r = check_fusion(g, {{"x", random_f32({1, 4, 8, 8}, 1, 2.f)}, {"x2", random_f32({1, 4, 8, 8}, 2, 2.f)}}, 0);
    CHECK(count_op(r, "MaxPool") == 1);
    CHECK(count_op(r, "Concat") == 1);
    CHECK(count_op(r, "QuantizeLinear") == 2);  // the graph inputs' own
    CHECK(count_op(r, "DequantizeLinear") == 0);
}

TEST_CASE("qdq: Add / Mul / GlobalAveragePool / Sigmoid islands become com.microsoft QLinear ops",
          "[fast][qdq]") {
    for (const char* op : {"Add", "Mul", "GlobalAveragePool", "Sigmoid"}) {
        INFO(op);
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({2, 5, 6, 7}));
        const ValueId x2 = b.g.add_value("x2", DType::f32, sym({2, 5, 6, 7}));
        b.g.inputs = {x, x2};
        const ValueId xd = b.qdq(x, 0.03f, 125);
        const bool binary = std::string(op) == "Add" || std::string(op) == "Mul";
        ValueId y = binary ? b.node(op, {xd, b.qdq(x2, 0.02f, 131)}) : b.node(op, {xd});
        const bool relu = std::string(op) == "Add";  // ORT drops it after Add: zero point 0
        if (relu) y = b.node("Relu", {y});
        const ValueId q = b.quantize(y, std::string(op) == "Sigmoid" ? 1.f / 256 : 0.04f, relu ? 0 : 117);
        const Graph g = b.done({q});
        const Ran r = check_fusion(g, {{"x", random_f32({2, 5, 6, 7}, 11, 3.f)},
                                       {"x2", random_f32({2, 5, 6, 7}, 12, 2.f)}}, 1);
        CHECK(count_op(r, std::string("QLinear") + op) == 1);
        CHECK(count_op(r, op) == 0);
        CHECK(count_op(r, "Relu") == 0);
        CHECK(count_op(r, "DequantizeLinear") == 0);
    }
}

TEST_CASE("qdq: a Conv -> Conv -> Add chain keeps int8 in between", "[fast][qdq]") {
    QdqBuilder b;
    const ValueId x = b.g.add_value("x", DType::f32, sym({1, 3, 10, 10}));
    b.g.inputs.push_back(x);
    const ValueId xd = b.qdq(x, 0.04f, 128);
    Tensor ws1, ws2;
    const ValueId w1 = b.weight({6, 3, 3, 3}, 0, 6, &ws1);
    const ValueId c1 = b.node("Relu", {b.node("Conv", {xd, w1, b.bias(0.04f, ws1, 6)})});
    const ValueId h = b.qdq(c1, 0.03f, 0);
    const ValueId w2 = b.weight({6, 6, 1, 1}, 0, 6, &ws2);
    const ValueId c2 = b.node("Conv", {h, w2, b.bias(0.03f, ws2, 6)});
    const ValueId h2 = b.qdq(c2, 0.05f, 128);
    const ValueId sum = b.node("Relu", {b.node("Add", {h2, h})});  // the residual reads h again
    const ValueId q = b.quantize(sum, 0.06f, 0);
    const Graph g = b.done({q});
    // Each rounding of the chain can move the output by one step: 3 steps at most.
    const Ran r = check_fusion(g, {{"x", random_f32({1, 3, 10, 10}, 3, 5.f)}}, 3);
    CHECK(count_op(r, "QLinearConv") == 1);
    CHECK(count_op(r, "QLinearConvAdd") == 1);  // fuse_qlinear_conv_add: the second conv + Add
    CHECK(count_op(r, "QLinearAdd") == 0);
    CHECK(count_op(r, "QuantizeLinear") == 1);  // the input's
    CHECK(count_op(r, "DequantizeLinear") == 0);
}

TEST_CASE("qdq: a ResNet-like chain runs channels last between its INT8 ops, bitwise",
          "[fast][qdq]") {
    // stem 3x3 stride 2 -> MaxPool 3x3 stride 2 -> bottleneck (1x1, 3x3 grouped, 1x1) + the
    // residual -> Relu -> a stride-2 1x1 -> GlobalAveragePool. The default backends negotiate
    // NHWC for every 8-bit tensor between the first convolution and the pooling (only the
    // stem's input is transposed); their output must be the fused graph's on the reference
    // kernels, bit for bit, at 1 and 2 threads (check_fusion).
    for (int64_t batch : {1, 3}) {
        INFO("batch " << batch);
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({batch, 3, 23, 21}));
        b.g.inputs.push_back(x);
        const ValueId xd = b.qdq(x, 0.04f, 128);
        Tensor s1, s2, s3, s4, s5;
        const auto conv = [&](ValueId in, float in_scale, std::vector<int64_t> wdims, Tensor& ws,
                              std::vector<std::pair<std::string, Attribute>> attrs) {
            const ValueId w = b.weight(wdims, 0, wdims[0], &ws);
            std::vector<ValueId> ins{in, w, b.bias(in_scale, ws, wdims[0])};
            return b.node("Conv", ins, std::move(attrs));
        };
        const ValueId stem = b.node("Relu", {conv(xd, 0.04f, {16, 3, 3, 3}, s1,
                                                  {{"pads", attr_ints({1, 1, 1, 1})},
                                                   {"strides", attr_ints({2, 2})}})});
        const ValueId h0 = b.qdq(stem, 0.05f, 0);
        const ValueId pool = b.node("MaxPool", {h0}, {{"kernel_shape", attr_ints({3, 3})},
                                                      {"strides", attr_ints({2, 2})},
                                                      {"pads", attr_ints({1, 1, 1, 1})}});
        const ValueId h1 = b.qdq(pool, 0.05f, 0);
        const ValueId c1 = b.node("Relu", {conv(h1, 0.05f, {8, 16, 1, 1}, s2, {})});
        const ValueId h2 = b.qdq(c1, 0.03f, 0);
        const ValueId c2 = b.node("Relu", {conv(h2, 0.03f, {8, 4, 3, 3}, s3,
                                                {{"pads", attr_ints({1, 1, 1, 1})},
                                                 {"group", attr_i(2)}})});
        const ValueId h3 = b.qdq(c2, 0.03f, 0);
        const ValueId c3 = conv(h3, 0.03f, {16, 8, 1, 1}, s4, {});
        const ValueId h4 = b.qdq(c3, 0.06f, 131);
        const ValueId sum = b.node("Relu", {b.node("Add", {h4, h1})});
        const ValueId h5 = b.qdq(sum, 0.07f, 0);
        const ValueId down = conv(h5, 0.07f, {24, 16, 1, 1}, s5, {{"strides", attr_ints({2, 2})}});
        const ValueId h6 = b.qdq(down, 0.08f, 120);
        const ValueId gap = b.node("GlobalAveragePool", {h6});
        const ValueId q = b.quantize(gap, 0.02f, 125);
        const Graph g = b.done({q});
        // Each rounding of the chain can move the output by one step.
        const Ran r = check_fusion(g, {{"x", random_f32({batch, 3, 23, 21}, 17, 4.f)}}, 6);
        CHECK(count_op(r, "QLinearConv", "cpu") == 4);
        CHECK(count_op(r, "QLinearConvAdd", "cpu") == 1);  // conv3 + the residual QLinearAdd
        CHECK(count_op(r, "QLinearAdd", "cpu") == 0);
        CHECK(count_op(r, "MaxPool", "cpu") == 1);
        CHECK(count_op(r, "QLinearGlobalAveragePool", "cpu") == 1);
        CHECK(r.blocked == 7);  // the 4 convolutions, QLinearConvAdd, MaxPool, the pooling
    }
}

TEST_CASE("qdq: channels-last MaxPool: large windows, channel tails, bitwise", "[fast][qdq]") {
    // QLinearConv -> MaxPool -> QLinearConv keeps the pool channels last; its window maxima
    // (fast_qlinear.cpp pool_nhwc: 64 bytes at a time across the window's valid pixels, in
    // batches of 64 pixels) must be the reference's bit for bit: a 9x9 window (81 pixels: two
    // batches) and a 3x3 one, channel counts of 72 and 100 (64-byte blocks, 16-byte vectors and
    // scalar tails), windows cut by padding on each side. Rows of up to 16384 bytes take the
    // separable path (each window's rows' maxima first), wider ones (72 channels x 240) the
    // gathering one.
    for (const int64_t w : {13, 240})
        for (int64_t c : {72, 100})
            for (int64_t k : {3, 9}) {
                if (w == 240 && c == 100) continue;
                INFO("channels " << c << " width " << w << " window " << k);
                QdqBuilder b;
                const ValueId x = b.g.add_value("x", DType::f32, sym({2, c, 15, w}));
                b.g.inputs.push_back(x);
                const ValueId xd = b.qdq(x, 0.04f, 128);
                Tensor s1, s2;
                const auto conv = [&](ValueId in, float in_scale, std::vector<int64_t> wdims,
                                      Tensor& ws) {
                    const ValueId w = b.weight(wdims, 0, wdims[0], &ws);
                    return b.node("Conv", {in, w, b.bias(in_scale, ws, wdims[0])});
                };
                const ValueId c1 = b.node("Relu", {conv(xd, 0.04f, {c, c, 1, 1}, s1)});
                const ValueId h1 = b.qdq(c1, 0.05f, 0);
                const ValueId pool = b.node("MaxPool", {h1},
                                            {{"kernel_shape", attr_ints({k, k})},
                                             {"strides", attr_ints({2, 2})},
                                             {"pads", attr_ints({k / 2, k / 2, k / 2, k / 2})}});
                const ValueId h2 = b.qdq(pool, 0.05f, 0);
                const ValueId c2 = conv(h2, 0.05f, {8, c, 1, 1}, s2);
                const ValueId q = b.quantize(c2, 0.06f, 120);
                const Graph g = b.done({q});
                const Ran r = check_fusion(g, {{"x", random_f32({2, c, 15, w}, 23, 4.f)}}, 2);
                CHECK(count_op(r, "MaxPool", "cpu") == 1);
                CHECK(r.blocked >= 2);  // the pool and the convolution before it channels last
            }
}

TEST_CASE("qdq: QLinearAdd writes into the block of an operand that dies at it", "[fast][qdq]") {
    // Q(x), Q(x2) -> QLinearAdd -> DQ: the three 8-bit intermediates (16 KiB each) need only
    // two blocks when the sum takes an operand's (executor_compile.cpp, elementwise_in_place);
    // bitwise the reference's either way (check_fusion runs the default backends too).
    QdqBuilder b;
    const ValueId x = b.g.add_value("x", DType::f32, sym({1, 16, 32, 32}));
    const ValueId x2 = b.g.add_value("x2", DType::f32, sym({1, 16, 32, 32}));
    b.g.inputs = {x, x2};
    const ValueId sum = b.node("Add", {b.qdq(x, 0.02f, 128), b.qdq(x2, 0.03f, 120)});
    const ValueId q = b.quantize(sum, 0.05f, 125);
    const ValueId out = b.g.add_value("out");
    b.g.add_node("DequantizeLinear", {q, b.g.add_initializer("os", f32s({0.05f}, true)),
                                      b.g.add_initializer("oz", zp8(DType::u8, 125))},
                 {out}, "outDQ");
    const Graph g = b.done({out});
    const std::vector<NamedTensor> feeds{{"x", random_f32({1, 16, 32, 32}, 21, 2.f)},
                                         {"x2", random_f32({1, 16, 32, 32}, 22, 2.f)}};
    const Ran r = check_fusion(g, feeds, 1);
    CHECK(count_op(r, "QLinearAdd", "cpu") == 1);
    EngineOptions o;
    o.num_threads = 2;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    (void)e.run(feeds);
    const MemoryPlanStats st = e.memory_plan_stats();
    CHECK(st.planned_values == 3);
    CHECK(st.planned_peak_bytes == 2 * 16 * 32 * 32);
}

namespace {

/// The parameters of one QLinearConv -> QLinearAdd case.
struct ConvAddCase {
    int64_t batch = 1, c = 5, m = 7, h = 6, w = 5, k = 1;
    int xz = 128, yz = 131, rz = 120, cz = 125;
    float ys = 0.06f, rs = 0.05f, cs = 0.07f;
    bool conv_first = true;   ///< Add(conv, residual) or Add(residual, conv)
    bool relu = false;        ///< a Relu the output Q makes a no-op (cz = 0)
    bool other_reader = false;  ///< the conv's output also read by a MaxPool: must not fuse
    /// Z straight from a QuantizeLinear (row-major) while y is channels last: y takes Z's
    /// block, so the kernel reads Z from a copy.
    bool z_from_quantize = false;
};

/// x -> 1x1 Conv -> Conv -> Q/DQ -> Add(.., residual x2 -> 1x1 Conv) [-> Relu] -> Q -> 1x1 Conv:
/// the 1x1 QLinearConvs (each end channels last on its own where negotiated) give the fused
/// op's x, Z and y NHWC neighbours at level 3; Z dies at the fused node (the output may take
/// its block).
Graph conv_add_graph(const ConvAddCase& t) {
    QdqBuilder b;
    const ValueId x = b.g.add_value("x", DType::f32, sym({t.batch, t.c, t.h, t.w}));
    const ValueId x2 = b.g.add_value("x2", DType::f32, sym({t.batch, t.m, t.h, t.w}));
    b.g.inputs = {x, x2};
    const auto conv = [&](ValueId in, float in_scale, int64_t cin, int64_t cout, int64_t k) {
        Tensor ws;
        const ValueId wd = b.weight({cout, cin, k, k}, 0, cout, &ws);
        const int64_t pad = k / 2;
        return b.node("Conv", {in, wd, b.bias(in_scale, ws, cout)},
                      {{"pads", attr_ints({pad, pad, pad, pad})}});
    };
    const ValueId xp = b.qdq(conv(b.qdq(x, 0.04f, t.xz), 0.04f, t.c, t.c, 1), 0.05f, t.xz);
    // With another reader of y, Z is x2 itself (a conv's output there would fuse instead).
    const ValueId rp = t.other_reader || t.z_from_quantize
                           ? b.qdq(x2, t.rs, t.rz)
                           : b.qdq(conv(b.qdq(x2, 0.03f, 128), 0.03f, t.m, t.m, 1), t.rs, t.rz);
    const ValueId yd = b.qdq(conv(xp, 0.05f, t.c, t.m, t.k), t.ys, t.yz);
    ValueId sum = t.conv_first ? b.node("Add", {yd, rp}) : b.node("Add", {rp, yd});
    if (t.relu) sum = b.node("Relu", {sum});
    const ValueId sd = b.qdq(sum, t.cs, t.cz);
    std::vector<ValueId> outs{b.quantize(conv(sd, t.cs, t.m, 3, 1), 0.1f, 128)};
    if (t.other_reader) outs.push_back(b.quantize(conv(yd, t.ys, t.m, 2, 1), 0.1f, 128));
    return b.done(outs);
}

/// The unfused pair on the reference kernels vs the fused op on the reference and on the
/// default backends (level 2: row-major; level 3: channels last where negotiated), 1 and 2
/// threads: every output bitwise.
void check_conv_add(const ConvAddCase& t) {
    const Graph g = conv_add_graph(t);
    const std::vector<NamedTensor> feeds{
        {"x", random_f32({t.batch, t.c, t.h, t.w}, 31, 6.f)},
        {"x2", random_f32({t.batch, t.m, t.h, t.w}, 32, 8.f)}};
    const Ran want = run(g, feeds, {"reference"}, 3, 1, {"fuse_qlinear_conv_add"});
    CHECK(count_op(want, "QLinearAdd") == 1);
    CHECK(count_op(want, "QLinearConvAdd") == 0);
    const int fused = t.other_reader ? 0 : 1;
    for (int level : {2, 3})
        for (const std::vector<std::string>& backends :
             {std::vector<std::string>{"reference"}, std::vector<std::string>{}})
            for (int threads : {1, 2}) {
                INFO("level " << level << " backends " << (backends.empty() ? "default" : "reference")
                              << " threads " << threads);
                const Ran r = run(g, feeds, backends, level, threads, {});
                CHECK(count_op(r, "QLinearConvAdd") == fused);
                CHECK(count_op(r, "QLinearAdd") == 1 - fused);
                if (backends.empty() && fused == 1)
                    CHECK(count_op(r, "QLinearConvAdd", "cpu") == 1);
                if (backends.empty() && level == 3 && fused == 1)
                    // The 1x1 QLinearConvs (three, or two where Z comes from a QuantizeLinear)
                    // and the fused op.
                    CHECK(r.blocked == (t.z_from_quantize ? 3 : 4));
                REQUIRE(r.out.size() == want.out.size());
                for (std::size_t o = 0; o < want.out.size(); ++o) {
                    require_bitwise(r.first[o].tensor, want.out[o].tensor);
                    require_bitwise(r.out[o].tensor, want.out[o].tensor);
                }
            }
}

}  // namespace

TEST_CASE("qdq: QLinearConv -> QLinearAdd fuses into QLinearConvAdd, bitwise the unfused pair",
          "[fast][qdq]") {
    for (int64_t batch : {1, 3})
        for (bool conv_first : {true, false}) {
            INFO("batch " << batch << " conv first " << conv_first);
            ConvAddCase t;
            t.batch = batch;
            t.conv_first = conv_first;
            check_conv_add(t);
        }
    SECTION("zero points at both ends, saturation") {
        for (int ends = 0; ends < 4; ++ends) {
            INFO("ends " << ends);
            ConvAddCase t;
            t.batch = 2;
            t.yz = ends % 2 == 0 ? 0 : 255;
            t.rz = ends % 2 == 0 ? 255 : 0;
            t.cz = ends < 2 ? 0 : 255;
            t.relu = t.cz == 0;
            t.cs = ends == 3 ? 0.004f : 0.07f;  // a small output scale saturates most sums
            t.ys = ends == 1 ? 0.01f : 0.06f;   // and a small y scale the convolution
            check_conv_add(t);
        }
    }
    SECTION("odd channel counts, a 3x3 window, partial panels") {
        ConvAddCase t;
        t.batch = 3;
        t.c = 13;
        t.m = 37;
        t.h = 7;
        t.w = 9;
        t.k = 3;
        check_conv_add(t);
        t.m = 67;
        t.k = 1;
        t.conv_first = false;
        check_conv_add(t);
    }
    SECTION("Z row-major, y channels last in Z's block: Z read from a copy") {
        for (int64_t k : {1, 3}) {
            ConvAddCase t;
            t.batch = 2;
            t.k = k;
            t.z_from_quantize = true;
            check_conv_add(t);
        }
    }
    SECTION("the conv's output read by another node: not fused") {
        ConvAddCase t;
        t.other_reader = true;
        check_conv_add(t);
    }
}

TEST_CASE("qdq: islands that must not fuse are left alone", "[fast][qdq]") {
    SECTION("a non-constant scale") {
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({3, 8}));
        const ValueId sc = b.g.add_value("sc", DType::f32, sym({}));
        b.g.inputs = {x, sc};
        const ValueId q = b.g.add_value("q"), d = b.g.add_value("d");
        b.g.add_node("QuantizeLinear", {x, sc}, {q}, "Qx");
        b.g.add_node("DequantizeLinear", {q, sc}, {d}, "DQx");
        const ValueId y = b.node("MatMul", {d, b.weight({8, 4}, 1, 4)});
        const Graph g = b.done({b.quantize(y, 0.1f, 128)});
        const std::vector<NamedTensor> feeds{{"x", random_f32({3, 8}, 4)},
                                             {"sc", f32s({0.01f}, true)}};
        const Ran r = check_fusion(g, feeds, 0);
        CHECK(count_op(r, "MatMul") == 1);
        CHECK(count_op(r, "QLinearMatMul") == 0);
    }
    SECTION("the float value between the op and its Q is a graph output") {
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({3, 8}));
        b.g.inputs = {x};
        const ValueId y = b.node("MatMul", {b.qdq(x, 0.02f, 128), b.weight({8, 4}, 1, 4)});
        const Graph g = b.done({b.quantize(y, 0.1f, 128), y});
        const Ran r = check_fusion(g, {{"x", random_f32({3, 8}, 4)}}, 0, 1e-4f);
        CHECK(count_op(r, "QLinearMatMul") == 0);
        CHECK(count_op(r, "MatMulIntegerToFloat") == 1);  // the float output stays
        CHECK(count_op(r, "QuantizeLinear") == 2);
    }
    SECTION("a DQ read by an island and by a float op stays for the float op") {
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({3, 8}));
        b.g.inputs = {x};
        const ValueId xd = b.qdq(x, 0.02f, 128);  // read by both MatMuls and the residual Add
        const ValueId y1 = b.node("MatMul", {xd, b.weight({8, 8}, 1, 8)});
        const ValueId y2 = b.node("MatMul", {xd, b.weight({8, 8}, 1, 0)});
        const ValueId sum = b.node("Add", {b.node("Add", {y1, y2}), xd});
        const Graph g = b.done({sum});
        const Ran r = check_fusion(g, {{"x", random_f32({3, 8}, 4)}}, 0, 1e-4f);
        CHECK(count_op(r, "MatMulIntegerToFloat") == 2);
        CHECK(count_op(r, "QuantizeLinear") == 1);
        CHECK(count_op(r, "DequantizeLinear") == 1);  // the residual's
    }
    SECTION("a Relu that the Q does not make a no-op stays") {
        QdqBuilder b;
        const ValueId x = b.g.add_value("x", DType::f32, sym({2, 3, 5, 5}));
        b.g.inputs = {x};
        Tensor ws;
        const ValueId w = b.weight({4, 3, 1, 1}, 0, 4, &ws);
        const ValueId y = b.node("Relu", {b.node("Conv", {b.qdq(x, 0.05f, 128), w})});
        const Graph g = b.done({b.quantize(y, 0.1f, 128)});  // zero point 128: Relu is not a no-op
        const Ran r = check_fusion(g, {{"x", random_f32({2, 3, 5, 5}, 4, 3.f)}}, 0);
        CHECK(count_op(r, "QLinearConv") == 0);
        // The Relu still runs: on its own, or as the activation of the float Conv that the
        // folded weight DequantizeLinear (fold_weight_dequantize) lets fuse_conv_add_activation
        // form.
        CHECK(count_op(r, "Relu") + count_op(r, "FusedConv") == 1);
        CHECK(count_op(r, "DequantizeLinear") == 1);  // x's; the weight's was folded
    }
}

TEST_CASE("qdq: bad scales and zero points are typed errors naming the node", "[fast][qdq]") {
    auto compile_error = [](const Graph& g, const std::vector<NamedTensor>& feeds) -> Error {
        try {
            const InferenceEngine e = InferenceEngine::compile(g, EngineOptions{});
            (void)e.run(feeds);
        } catch (const Error& e) {
            return e;
        }
        FAIL("no error");
        return Error(Status::ok());
    };
    for (float bad : {0.f, -0.5f, kNaN, kInf}) {
        INFO("scale " << bad);
        Graph g = qdq_graph({3, 4}, DType::u8, 1, 0, 1);
        for (Value& v : g.values)
            if (v.name == "s") v.initializer->data<float>()[0] = bad;
        const Error e = compile_error(g, {{"x", random_f32({3, 4}, 1)}});
        CHECK(e.code() == ErrorCode::invalid_model);
        CHECK_THAT(e.message(), Catch::Contains("quant"));
    }
    {
        // Per-axis scale whose length does not match the axis.
        Graph g = qdq_graph({3, 5}, DType::u8, 1, 4, 1);
        const Error e = compile_error(g, {{"x", random_f32({3, 5}, 1)}});
        CHECK(e.code() == ErrorCode::invalid_model);  // the model's constants
        CHECK_THAT(e.message(), Catch::Contains("quant"));
    }
    {
        // Zero point of another type than x (DequantizeLinear of u8 with an s8 zero point).
        Graph g;
        g.opset_imports = {{"", 19}};
        const ValueId x = g.add_value("x", DType::u8, sym({4}));
        g.inputs.push_back(x);
        const ValueId y = g.add_value("y");
        g.add_node("DequantizeLinear",
                   {x, g.add_initializer("s", f32s({0.1f}, true)), g.add_initializer("z", zp8(DType::i8, 3))},
                   {y}, "dq_wrong_zero");
        g.outputs.push_back(y);
        REQUIRE(g.sort_topologically().is_ok());
        const Error e = compile_error(g, {{"x", int8_tensor({4}, DType::u8, 1)}});
        CHECK(e.code() == ErrorCode::invalid_model);  // the model's constants
        CHECK_THAT(e.message(), Catch::Contains("dq_wrong_zero"));
    }
    {
        // QGemm: a zero scale, and a y_zero_point of a float type.
        GemmCase c;
        c.y = 1;
        Graph g = qgemm_graph(c, 1);
        for (Value& v : g.values)
            if (v.name == "bs") v.initializer->data<float>()[0] = 0.f;
        Error e = compile_error(g, {{"a", int8_tensor({c.m, c.k}, c.a, 2)}});
        CHECK(e.code() == ErrorCode::invalid_model);
        CHECK_THAT(e.message(), Catch::Contains("qgemm"));
        Graph g2 = qgemm_graph(c, 1);
        for (Value& v : g2.values)
            if (v.name == "yz") v.initializer = f32s({1.f}, true);
        e = compile_error(g2, {{"a", int8_tensor({c.m, c.k}, c.a, 2)}});
        CHECK(e.code() == ErrorCode::invalid_model);  // the model's constants
        CHECK_THAT(e.message(), Catch::Contains("qgemm"));
    }
}
