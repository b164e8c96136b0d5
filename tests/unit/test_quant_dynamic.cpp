// Dynamically quantized Linear layers (ONNX Runtime's quantize_dynamic form):
//   DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(Mul(x_scale, w_scale)) [-> Add bias]
//   [-> Relu]
// fused by fuse_dynamic_quant_matmul (src/passes/fuse_quant.cpp) into com.dsinfer
// DynamicQuantizeMatMul / MatMulIntegerToFloat and run on the cpu backend's qgemm kernels
// (src/cpu/fast/fast_qmatmul.cpp), checked against the unfused graph on the reference kernels
// (optimization level 0): the results must be BITWISE equal (NaN where the reference has NaN),
// at 1 and 2 threads. Also: the fused ops' reference kernels (bitwise too), the fast
// DynamicQuantizeLinear and MatMulInteger (s32) against theirs, odd and batched shapes,
// per-tensor / per-column scales and zero points, u8 and s8 weights, A holding a constant,
// zeros, NaN, +-Inf, subnormals and ranges whose width overflows f32; where the pass fires and
// where it must not; bad scales and zero points: typed errors naming the node.
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

enum class AKind { random, constant, zeros, nan, inf, neg_inf, huge_range, subnormal, wide };

struct QCase {
    std::vector<int64_t> a_dims{7, 13};  ///< A's shape; the last dim is K
    int64_t n = 19;
    bool w_unsigned = false;
    bool per_column_scale = false;
    bool per_column_zero = false;
    bool zero_point = true;   ///< MatMulInteger has a w_zero_point input
    bool bias = true;
    bool relu = false;
    const char* act = nullptr;  ///< an activation op after the layer ("Gelu": com.dsinfer)
    bool shared = false;      ///< a second MatMulInteger reads the same DynamicQuantizeLinear
    AKind a = AKind::random;
};

int64_t k_of(const QCase& c) { return c.a_dims.back(); }

Tensor make_a(const QCase& c, std::uint32_t seed) {
    Tensor t = random_f32(c.a_dims, seed, 2.f);
    float* p = t.data<float>();
    const int64_t n = t.num_elements();
    switch (c.a) {
        case AKind::random: break;
        case AKind::constant: std::fill(p, p + n, 0.75f); break;
        case AKind::zeros: std::fill(p, p + n, 0.f); break;
        case AKind::nan: p[0] = kNaN; p[n / 2] = kNaN; break;
        case AKind::inf: p[n / 3] = kInf; break;
        case AKind::neg_inf: p[n - 1] = -kInf; break;
        case AKind::huge_range: p[0] = 3e38f; p[n - 1] = -3e38f; break;  // hi - lo overflows
        case AKind::subnormal:
            for (int64_t i = 0; i < n; ++i) p[i] *= 1e-40f;  // scale (hi - lo) / 255 underflows
            break;
        case AKind::wide:
            for (int64_t i = 0; i < n; ++i) p[i] *= (i % 7 == 0) ? 1e6f : 1.f;
            break;
    }
    return t;
}

Tensor int8_tensor(const std::vector<int64_t>& dims, bool is_unsigned, std::uint32_t seed) {
    Tensor t = Tensor::allocate(is_unsigned ? DType::u8 : DType::i8, Shape::make(dims).value())
                   .value();
    std::mt19937 r(seed);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
        const int v = static_cast<int>(r() % 256);
        if (is_unsigned) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
        else t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v - 128);
    }
    // The extremes somewhere.
    if (t.num_elements() >= 2) {
        if (is_unsigned) {
            t.data<std::uint8_t>()[0] = 255;
            t.data<std::uint8_t>()[1] = 0;
        } else {
            t.data<std::int8_t>()[0] = 127;
            t.data<std::int8_t>()[1] = -128;
        }
    }
    return t;
}

Tensor f32_vector(int64_t n, std::uint32_t seed, float lo, float hi) {
    Tensor t = Tensor::allocate(DType::f32, Shape{n}).value();
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = u(r);
    return t;
}

/// One Linear layer of the unfused form, reading x's quantized value `xq` (etc.); returns its
/// output value.
ValueId add_layer(Graph& g, const QCase& c, ValueId xq, ValueId xs, ValueId xzp, int layer,
                  std::uint32_t seed) {
    const std::string s = "l" + std::to_string(layer) + "_";
    const int64_t k = k_of(c), n = c.n;
    const ValueId w = g.add_initializer(s + "W", int8_tensor({k, n}, c.w_unsigned, seed));
    std::vector<ValueId> mm_in{xq, w, xzp};
    if (c.zero_point) {
        Tensor z = int8_tensor({n}, c.w_unsigned, seed + 1);
        if (!c.per_column_zero) {  // a scalar inside the range (not an extreme)
            z = Tensor::allocate(c.w_unsigned ? DType::u8 : DType::i8, Shape{}).value();
            if (c.w_unsigned) z.data<std::uint8_t>()[0] = 131;
            else z.data<std::int8_t>()[0] = -3;
        }
        mm_in.push_back(g.add_initializer(s + "W_zp", z));
    }
    Tensor ws = c.per_column_scale ? f32_vector(n, seed + 2, 1e-3f, 2e-2f)
                                   : Tensor::scalar<float>(0.0123f);
    const ValueId wsv = g.add_initializer(s + "W_scale", ws);
    const ValueId mi = g.add_value(s + "mmi");
    g.add_node("MatMulInteger", mm_in, {mi}, s + "quant");
    const ValueId cast = g.add_value(s + "cast");
    g.add_node("Cast", {mi}, {cast}, s + "cast").attributes = {{"to", attr_i(1)}};
    const ValueId sm = g.add_value(s + "scales");
    g.add_node("Mul", {xs, wsv}, {sm}, s + "scales_mul");
    ValueId out = g.add_value(s + "mul");
    g.add_node("Mul", {cast, sm}, {out}, s + "output_mul");
    if (c.bias) {
        const ValueId b = g.add_initializer(s + "bias", f32_vector(n, seed + 3, -1.f, 1.f));
        const ValueId y = g.add_value(s + "biased");
        g.add_node("Add", {out, b}, {y}, s + "bias_add");
        out = y;
    }
    if (c.relu) {
        const ValueId y = g.add_value(s + "relu");
        g.add_node("Relu", {out}, {y}, s + "relu");
        out = y;
    }
    if (c.act != nullptr) {
        const ValueId y = g.add_value(s + "act");
        g.add_node(c.act, {out}, {y}, s + "act").domain =
            std::string(c.act) == "Gelu" ? kDsinferDomain : "";
        out = y;
    }
    return out;
}

Graph unfused_graph(const QCase& c, std::uint32_t seed) {
    Graph g;
    g.name = "quant_dynamic";
    g.opset_imports = {{"", 17}, {kDsinferDomain, 1}};
    const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape::make(c.a_dims).value()));
    g.inputs.push_back(x);
    const ValueId xq = g.add_value("xq"), xs = g.add_value("xs"), xzp = g.add_value("xzp");
    g.add_node("DynamicQuantizeLinear", {x}, {xq, xs, xzp}, "x_quantize");
    g.outputs.push_back(add_layer(g, c, xq, xs, xzp, 0, seed));
    if (c.shared) g.outputs.push_back(add_layer(g, c, xq, xs, xzp, 1, seed + 10));
    for (ValueId y : g.outputs) g.values[static_cast<std::size_t>(y)].dtype = DType::f32;
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

struct Ran {
    std::vector<NamedTensor> out;
    std::vector<std::string> ops, providers;
};

Ran run(const Graph& g, const std::vector<NamedTensor>& feeds, std::vector<std::string> backends,
        int level, int threads) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    o.optimization_level = level;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    Ran r;
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i) {
        r.ops.push_back(e.graph().nodes[i].op_type);
        r.providers.push_back(e.node_providers()[i]);
    }
    r.out = e.run(feeds);
    return r;
}

/// Bitwise equal float32 tensors (any NaN matches any NaN).
void require_bitwise(const Tensor& got, const Tensor& want) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    if (got.dtype() != DType::f32) {
        REQUIRE(std::memcmp(got.raw_data(), want.raw_data(), got.num_bytes()) == 0);
        return;
    }
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
        const float a = got.data<float>()[i], b = want.data<float>()[i];
        const bool same = (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
        if (!same && bad++ == 0) first = i;
    }
    INFO("first difference at " << first << ": "
                                << (first >= 0 ? got.data<float>()[first] : 0.f) << " vs "
                                << (first >= 0 ? want.data<float>()[first] : 0.f));
    CHECK(bad == 0);
}

int count_op(const Ran& r, const std::string& op, const std::string& provider = "") {
    int n = 0;
    for (std::size_t i = 0; i < r.ops.size(); ++i)
        n += r.ops[i] == op && (provider.empty() || r.providers[i] == provider);
    return n;
}

void check_case(const QCase& c, std::uint32_t seed) {
    const Graph g = unfused_graph(c, seed);
    const std::vector<NamedTensor> feeds{{"x", make_a(c, seed + 100)}};
    const Ran want = run(g, feeds, {"reference"}, 0, 1);
    const char* fused = c.shared ? "MatMulIntegerToFloat" : "DynamicQuantizeMatMul";
    const int layers = c.shared ? 2 : 1;
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        const Ran fast = run(g, feeds, {"cpu"}, 3, threads);
        CHECK(count_op(fast, fused, "cpu") == layers);
        CHECK(count_op(fast, "MatMulInteger") == 0);
        CHECK(count_op(fast, "DynamicQuantizeLinear", "cpu") == (c.shared ? 1 : 0));
        REQUIRE(fast.out.size() == want.out.size());
        for (std::size_t o = 0; o < want.out.size(); ++o) require_bitwise(fast.out[o].tensor, want.out[o].tensor);
    }
    // The fused ops' reference kernels: the same bits.
    const Ran ref = run(g, feeds, {"reference"}, 3, 1);
    CHECK(count_op(ref, fused) == layers);
    for (std::size_t o = 0; o < want.out.size(); ++o) require_bitwise(ref.out[o].tensor, want.out[o].tensor);
}

std::string describe(const QCase& c) {
    std::string s = "A [";
    for (int64_t d : c.a_dims) s += std::to_string(d) + ",";
    s += "] N " + std::to_string(c.n) + (c.w_unsigned ? " u8" : " s8") +
         (c.per_column_scale ? " scale/col" : " scale/tensor") +
         (c.zero_point ? (c.per_column_zero ? " zp/col" : " zp/tensor") : " no-zp") +
         (c.bias ? " bias" : "") + (c.relu ? " relu" : "") + (c.shared ? " shared" : "") +
         " a-kind " + std::to_string(static_cast<int>(c.a));
    return s;
}

}  // namespace

TEST_CASE("quant_dynamic: fused DynamicQuantizeMatMul / MatMulIntegerToFloat equal the unfused "
          "graph bitwise",
          "[fast][quant_dynamic]") {
    std::vector<QCase> cases;
    std::uint32_t seed = 1;
    for (bool wu : {false, true})
        for (bool pcs : {false, true})
            for (int zp : {0, 1, 2})  // none, per tensor, per column
                for (bool bias : {false, true})
                    for (bool shared : {false, true}) {
                        QCase c;
                        c.w_unsigned = wu;
                        c.per_column_scale = pcs;
                        c.zero_point = zp != 0;
                        c.per_column_zero = zp == 2;
                        c.bias = bias;
                        c.shared = shared;
                        c.relu = (seed % 3) == 0;
                        const std::vector<std::vector<int64_t>> shapes{
                            {7, 13}, {1, 5}, {2, 3, 33}, {67, 1}, {31}};
                        c.a_dims = shapes[seed % shapes.size()];
                        c.n = std::vector<int64_t>{19, 1, 33, 64, 5}[seed % 5];
                        cases.push_back(c);
                        ++seed;
                    }
    for (AKind a : {AKind::constant, AKind::zeros, AKind::nan, AKind::inf, AKind::neg_inf,
                    AKind::huge_range, AKind::subnormal, AKind::wide}) {
        for (bool shared : {false, true}) {
            QCase c;
            c.a = a;
            c.shared = shared;
            c.per_column_scale = shared;
            c.relu = !shared;
            c.a_dims = {2, 9, 21};
            cases.push_back(c);
        }
    }
    {
        QCase big;  // K across qgemm blocks, many rows, threads on the quantize loops
        big.a_dims = {3, 128, 1000};
        big.n = 96;
        big.per_column_scale = true;
        big.per_column_zero = true;
        cases.push_back(big);
        big.shared = true;
        big.w_unsigned = true;
        cases.push_back(big);
    }
    for (const QCase& c : cases) {
        INFO(describe(c));
        check_case(c, seed++);
    }
}

TEST_CASE("quant_dynamic: an activation after the layer (BERT's Gelu) joins the fused op's "
          "epilogue, bitwise the unfused graph's",
          "[fast][quant_dynamic]") {
    // fuse_matmul_bias_activation gives the activation to DynamicQuantizeMatMul /
    // MatMulIntegerToFloat. On the cpu backend the epilogue runs the activation's vector loop,
    // as the unfused activation's fast kernel does: bitwise the unfused graph on the cpu
    // backend; on the reference kernels bitwise the unfused reference graph.
    std::uint32_t seed = 500;
    for (const char* act : {"Gelu", "Sigmoid"})
        for (bool shared : {false, true})
            for (const std::vector<int64_t>& dims :
                 std::vector<std::vector<int64_t>>{{7, 13}, {2, 33, 70}}) {
                QCase c;
                c.act = act;
                c.shared = shared;
                c.a_dims = dims;
                c.n = shared ? 37 : 64;
                c.per_column_scale = true;
                INFO(describe(c) << " " << act);
                const Graph g = unfused_graph(c, seed);
                const std::vector<NamedTensor> feeds{{"x", make_a(c, seed + 100)}};
                ++seed;
                const char* fused = shared ? "MatMulIntegerToFloat" : "DynamicQuantizeMatMul";
                const int layers = shared ? 2 : 1;
                const Ran unfused_cpu = run(g, feeds, {"cpu"}, 0, 1);
                CHECK(count_op(unfused_cpu, act, "cpu") == layers);
                for (int threads : {1, 2}) {
                    INFO("threads " << threads);
                    const Ran fast = run(g, feeds, {"cpu"}, 3, threads);
                    CHECK(count_op(fast, fused, "cpu") == layers);
                    CHECK(count_op(fast, act) == 0);
                    for (std::size_t o = 0; o < fast.out.size(); ++o)
                        require_bitwise(fast.out[o].tensor, unfused_cpu.out[o].tensor);
                }
                const Ran want = run(g, feeds, {"reference"}, 0, 1);
                const Ran ref = run(g, feeds, {"reference"}, 3, 1);
                CHECK(count_op(ref, fused) == layers);
                for (std::size_t o = 0; o < want.out.size(); ++o)
                    require_bitwise(ref.out[o].tensor, want.out[o].tensor);
            }
}

TEST_CASE("quant_dynamic: the fast DynamicQuantizeLinear equals the reference bitwise",
          "[fast][quant_dynamic]") {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{1000}, int64_t{600001}}) {
        for (AKind a : {AKind::random, AKind::constant, AKind::zeros, AKind::nan, AKind::inf,
                        AKind::huge_range, AKind::subnormal, AKind::wide}) {
            INFO("n " << n << " kind " << static_cast<int>(a));
            QCase c;
            c.a_dims = {n};
            c.a = a;
            Tensor x = make_a(c, static_cast<std::uint32_t>(n) + 7);
            if (a == AKind::random) {
                // Quotients at exact .5 ties: scale (hi - lo) / 255 with hi = 127.5, lo = -127.5.
                float* p = x.data<float>();
                p[0] = 127.5f;
                if (n > 1) p[1] = -127.5f;
                for (int64_t i = 2; i < n; ++i) p[i] = std::floor(p[i] * 50.f) + 0.5f;
            }
            Graph g;
            g.opset_imports = {{"", 17}};
            const ValueId xv = g.add_value("x", DType::f32, SymbolicShape::from(Shape{n}));
            g.inputs.push_back(xv);
            const ValueId y = g.add_value("y"), s = g.add_value("s"), z = g.add_value("z");
            g.add_node("DynamicQuantizeLinear", {xv}, {y, s, z}, "dql");
            g.outputs = {y, s, z};
            const std::vector<NamedTensor> feeds{{"x", x}};
            const Ran want = run(g, feeds, {"reference"}, 0, 1);
            const Ran got = run(g, feeds, {"cpu"}, 0, 2);
            CHECK(count_op(got, "DynamicQuantizeLinear", "cpu") == 1);
            for (std::size_t o = 0; o < 3; ++o) require_bitwise(got.out[o].tensor, want.out[o].tensor);
        }
    }
}

TEST_CASE("quant_dynamic: the fast MatMulInteger (s32) equals the reference",
          "[fast][quant_dynamic]") {
    for (bool a_unsigned : {true, false})
        for (bool w_unsigned : {false, true})
            for (int azp : {0, 1, 2})  // none, scalar graph input, per-row constant
                for (bool pcz : {false, true}) {
                    INFO("A " << (a_unsigned ? "u8" : "s8") << " W " << (w_unsigned ? "u8" : "s8")
                              << " azp " << azp << " per-column wzp " << pcz);
                    const int64_t m = 9, k = 37, n = 23;
                    Graph g;
                    g.opset_imports = {{"", 17}};
                    const DType at = a_unsigned ? DType::u8 : DType::i8;
                    const ValueId a = g.add_value("a", at, SymbolicShape::from(Shape{2, m, k}));
                    g.inputs.push_back(a);
                    std::vector<ValueId> in{a, g.add_initializer("W", int8_tensor({k, n}, w_unsigned, 3))};
                    std::vector<NamedTensor> feeds{{"a", int8_tensor({2, m, k}, a_unsigned, 4)}};
                    if (azp == 1) {
                        const ValueId z = g.add_value("az", at, SymbolicShape::from(Shape{}));
                        g.inputs.push_back(z);
                        in.push_back(z);
                        Tensor zt = Tensor::allocate(at, Shape{}).value();
                        if (a_unsigned) zt.data<std::uint8_t>()[0] = 200;
                        else zt.data<std::int8_t>()[0] = -100;
                        feeds.push_back({"az", zt});
                    } else if (azp == 2) {
                        in.push_back(g.add_initializer("az", int8_tensor({m}, a_unsigned, 5)));
                    } else {
                        in.push_back(kNoValue);
                    }
                    in.push_back(g.add_initializer("wz", int8_tensor({pcz ? n : 1}, w_unsigned, 6)));
                    const ValueId y = g.add_value("y");
                    g.add_node("MatMulInteger", in, {y}, "mmi");
                    g.outputs = {y};
                    const Ran want = run(g, feeds, {"reference"}, 0, 1);
                    const Ran got = run(g, feeds, {"cpu"}, 0, 2);
                    // A per-row a_zero_point runs the reference's loop inside the cpu kernel
                    // (which then keeps B).
                    CHECK(count_op(got, "MatMulInteger", "cpu") == 1);
                    require_bitwise(got.out[0].tensor, want.out[0].tensor);
                }
}

namespace {

int count_in(const Graph& g, const std::string& op) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.op_type == op;
    return n;
}

Graph optimized(Graph g) {
    optimize(g, OptimizeOptions{.level = 3});
    return g;
}

Node* find_node(Graph& g, const std::string& name) {
    for (Node& n : g.nodes)
        if (n.name == name) return &n;
    return nullptr;
}

}  // namespace

TEST_CASE("quant_dynamic: the pass fires on the quantize_dynamic pattern only",
          "[quant_dynamic][passes]") {
    QCase c;
    {
        const Graph g = optimized(unfused_graph(c, 1));
        CHECK(count_in(g, "DynamicQuantizeMatMul") == 1);
        CHECK(count_in(g, "DynamicQuantizeLinear") == 0);
        CHECK(count_in(g, "MatMulInteger") == 0);
        CHECK(count_in(g, "Cast") == 0);
        CHECK(count_in(g, "Mul") == 0);
        CHECK(count_in(g, "Add") == 0);
        CHECK(g.opset(kDsinferDomain) == kDsinferOpsetVersion);
    }
    {
        QCase s = c;
        s.shared = true;
        s.relu = true;
        const Graph g = optimized(unfused_graph(s, 1));
        CHECK(count_in(g, "MatMulIntegerToFloat") == 2);
        CHECK(count_in(g, "DynamicQuantizeLinear") == 1);
        CHECK(count_in(g, "Relu") == 0);
        for (const Node& n : g.nodes)
            if (n.op_type == "MatMulIntegerToFloat") CHECK(n.inputs.size() == 7);
    }
    // Each broken condition leaves the graph unfused.
    const auto unchanged = [&](auto&& edit) {
        Graph g = unfused_graph(c, 1);
        edit(g);
        REQUIRE(g.sort_topologically().is_ok());
        const Graph o = optimized(g);
        CHECK(count_in(o, "DynamicQuantizeMatMul") == 0);
        CHECK(count_in(o, "MatMulIntegerToFloat") == 0);
        CHECK(count_in(o, "MatMulInteger") == 1);
    };
    SECTION("weights not constant") {
        unchanged([](Graph& g) {
            Node* mm = find_node(g, "l0_quant");
            const ValueId w = g.add_value("w_in", DType::i8, SymbolicShape::from(Shape{13, 19}));
            g.inputs.push_back(w);
            mm->inputs[1] = w;
        });
    }
    SECTION("Cast to double") {
        unchanged([](Graph& g) { find_node(g, "l0_cast")->attributes = {{"to", attr_i(11)}}; });
    }
    SECTION("weight scale of the wrong length") {
        unchanged([](Graph& g) {
            Node* sm = find_node(g, "l0_scales_mul");
            sm->inputs[1] = g.add_initializer("bad_scale", f32_vector(7, 1, 0.01f, 0.02f));
        });
    }
    SECTION("scales Mul reading something else than the DynamicQuantizeLinear's scale") {
        unchanged([](Graph& g) {
            Node* sm = find_node(g, "l0_scales_mul");
            sm->inputs[0] = g.add_initializer("other_scale", Tensor::scalar<float>(0.5f));
        });
    }
    SECTION("the output Mul by the weight scale alone") {
        unchanged([](Graph& g) {
            Node* om = find_node(g, "l0_output_mul");
            om->inputs[1] = find_node(g, "l0_scales_mul")->inputs[1];
        });
    }
    SECTION("MatMulInteger without the activation's zero point") {
        unchanged([](Graph& g) {
            Node* mm = find_node(g, "l0_quant");
            mm->inputs[2] = g.add_initializer("zero_zp", Tensor::scalar<std::uint8_t>(0));
        });
    }
    SECTION("an intermediate read outside the pattern") {
        unchanged([](Graph& g) {
            const ValueId cast = find_node(g, "l0_cast")->outputs[0];
            g.outputs.push_back(cast);
        });
    }
}

TEST_CASE("quant_dynamic: bad scales and zero points are typed errors naming the node",
          "[quant_dynamic]") {
    const auto compile_fused = [](Tensor b_scale, Tensor b_zero, const char* backend) {
        Graph g;
        g.opset_imports = {{"", 17}, {kDsinferDomain, kDsinferOpsetVersion}};
        const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{4, 8}));
        g.inputs.push_back(x);
        const ValueId y = g.add_value("y");
        Node& n = g.add_node("DynamicQuantizeMatMul",
                             {x, g.add_initializer("W", int8_tensor({8, 5}, false, 1)),
                              g.add_initializer("ws", std::move(b_scale)),
                              g.add_initializer("wz", std::move(b_zero))},
                             {y}, "the_dqmm_node");
        n.domain = kDsinferDomain;
        g.outputs = {y};
        EngineOptions o;
        o.backends = {backend};
        InferenceEngine e = InferenceEngine::compile(g, o);
        e.run({{"x", random_f32({4, 8}, 1)}});
    };
    const Tensor zp = Tensor::scalar<std::int8_t>(0);
    for (const char* backend : {"cpu", "reference"}) {
        INFO(backend);
        for (float bad : {0.f, -1.f, kNaN, kInf}) {
            INFO("b_scale " << bad);
            try {
                compile_fused(Tensor::scalar<float>(bad), zp.clone(), backend);
                FAIL("no error");
            } catch (const Error& e) {
                CHECK(e.code() == ErrorCode::invalid_model);
                CHECK_THAT(e.message(), Catch::Contains("the_dqmm_node"));
                CHECK_THAT(e.message(), Catch::Contains("b_scale"));
            }
        }
        try {  // a uint8 zero point for int8 weights
            compile_fused(Tensor::scalar<float>(0.1f), Tensor::scalar<std::uint8_t>(3), backend);
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_model);  // a model constant
            CHECK_THAT(e.message(), Catch::Contains("the_dqmm_node"));
            CHECK_THAT(e.message(), Catch::Contains("b_zero_point"));
        }
        try {  // per-column scale of the wrong length
            compile_fused(f32_vector(3, 1, 0.1f, 0.2f), zp.clone(), backend);
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_model);
            CHECK_THAT(e.message(), Catch::Contains("b_scale"));
            CHECK_THAT(e.message(), Catch::Contains("the_dqmm_node"));
        }
    }
}
