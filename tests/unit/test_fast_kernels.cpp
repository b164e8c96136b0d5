// The fast CPU kernels (src/cpu/fast) against the reference kernels: every op through a one-node
// graph on backends {"cpu"} and {"reference"}, over randomized shapes (broadcasting, empty
// tensors, rank 0, 1 and 6) and values (NaN, +-Inf, +-0, subnormals).
//
// Tolerances (the reference is the numerical truth):
//   - exact (bitwise; NaNs compared as NaN): data movement, casts, neg/abs/relu/sqrt/reciprocal/
//     floor/ceil, + - * / max min on float32 and integers, comparisons, Where, Pow with
//     exponent 1, 2 and general exponents, ReduceMax/Min, column (outer-axis) reductions;
//   - within 1 ulp: row (inner-axis) float32 sums/means/L2 (the double accumulation order
//     differs), Pow with exponent 2 (x * x, correctly rounded; glibc's powf is not always),
//     3 and 0.5, Exp;
//   - within 2 ulp: Sigmoid, Tanh;
//   - Erf: within 2e-7 absolute of the exact erf (std::erf in double) and of std::erf(float).
// Determinism: every fast kernel splits work independently of the thread count, so two runs
// at 2 threads and runs at 1 and 2 threads are bitwise equal.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>

using namespace dsinfer;

namespace {

// ---- graphs -----------------------------------------------------------------------------------

struct In {
    std::string name;
    Tensor t;               // null: omitted optional input
    bool constant = false;  // initializer instead of graph input
    bool declared = true;   // false: graph input without declared dtype/shape
};

using Attrs = std::vector<std::pair<std::string, Attribute>>;

Attribute attr_i(std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    return a;
}
Attribute attr_ints(std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(v);
    return a;
}

Graph one_node(const std::string& op, const std::vector<In>& ins, int num_outputs,
               const Attrs& attrs, std::int64_t opset) {
    Graph g;
    g.opset_imports = {{"", opset}};
    std::vector<ValueId> in_ids, out_ids;
    for (const auto& i : ins) {
        if (i.t.is_null()) {
            in_ids.push_back(kNoValue);
        } else if (i.constant) {
            in_ids.push_back(g.add_initializer(i.name, i.t));
        } else {
            ValueId id = i.declared ? g.add_value(i.name, i.t.dtype(), SymbolicShape::from(i.t.shape()))
                                    : g.add_value(i.name);
            g.inputs.push_back(id);
            in_ids.push_back(id);
        }
    }
    for (int k = 0; k < num_outputs; ++k) {
        out_ids.push_back(g.add_value("y" + std::to_string(k)));
        g.outputs.push_back(out_ids.back());
    }
    Node& n = g.add_node(op, in_ids, out_ids, "node");
    n.attributes = attrs;
    return g;
}

std::vector<Tensor> run_graph(const Graph& g, const std::vector<In>& ins,
                              std::vector<std::string> backends, int threads = 2) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    auto e = InferenceEngine::compile(g, o);
    std::vector<NamedTensor> feeds;
    for (const auto& i : ins)
        if (!i.t.is_null() && !i.constant) feeds.push_back({i.name, i.t});
    std::vector<Tensor> out;
    for (auto& nt : e.run(feeds)) out.push_back(nt.tensor);
    return out;
}

/// Runs on "cpu" and "reference"; returns {cpu outputs, reference outputs}.
std::pair<std::vector<Tensor>, std::vector<Tensor>> both(const std::string& op,
                                                         const std::vector<In>& ins,
                                                         const Attrs& attrs = {},
                                                         std::int64_t opset = 17,
                                                         int num_outputs = 1) {
    const Graph g = one_node(op, ins, num_outputs, attrs, opset);
    return {run_graph(g, ins, {"cpu"}), run_graph(g, ins, {"reference"})};
}

/// The error code and message of a run on `backends` (ok when it ran).
Status try_both(const Graph& g, const std::vector<In>& ins, std::vector<std::string> backends) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = 2;
    auto e = InferenceEngine::compile(g, o);
    std::vector<NamedTensor> feeds, out;
    for (const auto& i : ins)
        if (!i.t.is_null() && !i.constant) feeds.push_back({i.name, i.t});
    return e.try_run(feeds, out);
}

// ---- data -------------------------------------------------------------------------------------

std::mt19937& rng() {
    static std::mt19937 r(20240611u);
    return r;
}

/// Mostly uniform in [-lo, hi], with a share of special values.
float sample(float range, bool specials) {
    static const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     0.0f,
                                     -0.0f,
                                     1e-40f,
                                     -3e-39f,
                                     1e30f,
                                     -2e25f,
                                     1.0f,
                                     -1.0f,
                                     0.5f};
    std::uniform_real_distribution<float> u(-range, range);
    if (specials && std::uniform_int_distribution<int>(0, 19)(rng()) == 0)
        return kSpecial[std::uniform_int_distribution<std::size_t>(0, std::size(kSpecial) - 1)(rng())];
    return u(rng());
}

Tensor rand_f32(const Shape& s, float range = 4.0f, bool specials = true) {
    Tensor t = Tensor::empty(DType::f32, s);
    for (auto& v : t.span<float>()) v = sample(range, specials);
    return t;
}

Tensor rand_i64(const Shape& s, std::int64_t lo, std::int64_t hi) {
    Tensor t = Tensor::empty(DType::i64, s);
    std::uniform_int_distribution<std::int64_t> u(lo, hi);
    for (auto& v : t.span<std::int64_t>()) v = u(rng());
    return t;
}

Tensor rand_bool(const Shape& s) {
    Tensor t = Tensor::empty(DType::boolean, s);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<bool>()[i] = std::uniform_int_distribution<int>(0, 1)(rng()) != 0;
    return t;
}

/// Random bytes of any fixed-size dtype (for data movement).
Tensor rand_bytes(DType dt, const Shape& s) {
    Tensor t = Tensor::empty(dt, s);
    auto* p = static_cast<unsigned char*>(t.raw_data());
    for (std::size_t i = 0; i < t.num_bytes(); ++i)
        p[i] = static_cast<unsigned char>(std::uniform_int_distribution<int>(0, 255)(rng()));
    if (dt == DType::boolean)
        for (std::size_t i = 0; i < t.num_bytes(); ++i) p[i] &= 1u;
    return t;
}

Tensor f32_of(const Shape& s, std::vector<float> v) { return Tensor::from_vector(s, v); }
Tensor i64_of(const Shape& s, std::vector<std::int64_t> v) { return Tensor::from_vector(s, v); }

Shape rand_shape(int rank, std::int64_t max_dim = 6) {
    Shape s;
    for (int d = 0; d < rank; ++d) s.push_back(std::uniform_int_distribution<std::int64_t>(1, max_dim)(rng()));
    return s;
}

// ---- comparisons ------------------------------------------------------------------------------

/// Distance in units in the last place between two finite-or-inf floats (0 if both NaN).
std::int64_t ulp_diff(float a, float b) {
    if (std::isnan(a) && std::isnan(b)) return 0;
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<std::int64_t>::max();
    auto key = [](float f) {
        const auto u = static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(f));
        return u & 0x80000000 ? 0x80000000 - u : u;  // monotonic: -0 and +0 both map to 0
    };
    if (a == b && std::signbit(a) != std::signbit(b)) return 1;  // +0 vs -0
    return std::abs(key(a) - key(b));
}

/// Bitwise equal, NaNs compared as NaN. For f32 with max_ulp > 0, within max_ulp ulp.
void expect_close(const Tensor& got, const Tensor& want, std::int64_t max_ulp = 0) {
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    const std::int64_t n = got.num_elements();
    if (got.dtype() == DType::f32) {
        std::int64_t worst = 0, at = -1;
        for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t d = ulp_diff(got.data<float>()[i], want.data<float>()[i]);
            if (d > worst) worst = d, at = i;
        }
        INFO("worst ulp " << worst << " at " << at << ": got "
                          << (at >= 0 ? got.data<float>()[at] : 0.f) << " want "
                          << (at >= 0 ? want.data<float>()[at] : 0.f));
        CHECK(worst <= max_ulp);
        return;
    }
    if (got.dtype() == DType::f16 || got.dtype() == DType::bf16) {
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const std::uint16_t a = static_cast<const std::uint16_t*>(got.raw_data())[i];
            const std::uint16_t b = static_cast<const std::uint16_t*>(want.raw_data())[i];
            const bool nan_a = got.dtype() == DType::f16 ? std::isnan(float16::to_float(a))
                                                         : std::isnan(static_cast<float>(bfloat16::from_bits(a)));
            const bool nan_b = got.dtype() == DType::f16 ? std::isnan(float16::to_float(b))
                                                         : std::isnan(static_cast<float>(bfloat16::from_bits(b)));
            if (a != b && !(nan_a && nan_b)) ++bad;
        }
        CHECK(bad == 0);
        return;
    }
    if (got.dtype() == DType::string) {
        for (std::int64_t i = 0; i < n; ++i)
            CHECK(got.data<std::string>()[i] == want.data<std::string>()[i]);
        return;
    }
    CHECK(std::memcmp(got.raw_data(), want.raw_data(), got.num_bytes()) == 0);
}

void expect_bitwise(const Tensor& a, const Tensor& b) {
    REQUIRE(a.dtype() == b.dtype());
    REQUIRE(a.shape() == b.shape());
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0);
}

void compare(const std::string& op, const std::vector<In>& ins, const Attrs& attrs = {},
             std::int64_t opset = 17, std::int64_t max_ulp = 0, int num_outputs = 1) {
    auto [fast, ref] = both(op, ins, attrs, opset, num_outputs);
    REQUIRE(fast.size() == ref.size());
    for (std::size_t k = 0; k < fast.size(); ++k) expect_close(fast[k], ref[k], max_ulp);
}

/// Shapes every unary test covers: rank 0, 1, 6, empty, odd sizes around the vector widths,
/// and one large enough to be split across threads.
std::vector<Shape> unary_shapes() {
    return {Shape{}, Shape{1}, Shape{7}, Shape{17}, Shape{0}, Shape{3, 0, 2},
            Shape{2, 1, 3, 1, 2, 3}, Shape{33, 65}, Shape{70001}};
}

}  // namespace

// ---- unary ------------------------------------------------------------------------------------

TEST_CASE("fast unary float ops match the reference", "[fast]") {
    struct Case {
        const char* op;
        std::int64_t ulp;
        float range;
    };
    const Case cases[] = {{"Neg", 0, 4},     {"Abs", 0, 4},       {"Relu", 0, 4},
                          {"Sqrt", 0, 4},    {"Reciprocal", 0, 4}, {"Floor", 0, 1e8f},
                          {"Ceil", 0, 1e8f}, {"Floor", 0, 3},     {"Ceil", 0, 3},
                          {"Exp", 1, 100},   {"Exp", 1, 4},       {"Sigmoid", 2, 30},
                          {"Tanh", 2, 12},   {"Tanh", 2, 1}};
    for (const auto& c : cases) {
        for (const Shape& s : unary_shapes()) {
            INFO(c.op << " range " << c.range << " shape " << s.to_string());
            compare(c.op, {{"x", rand_f32(s, c.range)}}, {}, 17, c.ulp);
        }
    }
}

TEST_CASE("fast unary ops on float16 and bfloat16 match the reference", "[fast]") {
    for (DType dt : {DType::f16, DType::bf16}) {
        for (const char* op : {"Neg", "Relu", "Sqrt", "Floor", "Erf", "Exp", "Sigmoid", "Tanh"}) {
            Tensor x = Tensor::empty(dt, Shape{3, 1031});
            const Tensor src = rand_f32(x.shape(), 3.0f);
            for (std::int64_t i = 0; i < x.num_elements(); ++i) {
                const float v = src.data<float>()[i];
                if (dt == DType::f16) x.data<float16>()[i] = float16(v);
                else x.data<bfloat16>()[i] = bfloat16(v);
            }
            auto [fast, ref] = both(op, {{"x", x}});
            // The 16-bit rounding hides the float32 approximation error except at ties:
            // allow a 1-ulp (16-bit) difference for the approximated functions.
            const bool approx = std::string(op) == "Erf" || std::string(op) == "Exp" ||
                                std::string(op) == "Sigmoid" || std::string(op) == "Tanh";
            INFO(op << " " << dtype_name(dt));
            std::int64_t worst = 0;
            for (std::int64_t i = 0; i < x.num_elements(); ++i) {
                const std::uint16_t a = static_cast<const std::uint16_t*>(fast[0].raw_data())[i];
                const std::uint16_t b = static_cast<const std::uint16_t*>(ref[0].raw_data())[i];
                const float fa = dt == DType::f16 ? float16::to_float(a) : static_cast<float>(bfloat16::from_bits(a));
                const float fb = dt == DType::f16 ? float16::to_float(b) : static_cast<float>(bfloat16::from_bits(b));
                if (std::isnan(fa) && std::isnan(fb)) continue;
                worst = std::max<std::int64_t>(worst, std::abs(static_cast<int>(a) - static_cast<int>(b)));
            }
            CHECK(worst <= (approx ? 1 : 0));
        }
    }
}

namespace {

/// Every 64th float bit pattern in [0, hi], each with its negative, then `specials`.
std::vector<float> every_64th_float(float hi, std::initializer_list<float> specials) {
    std::vector<float> v;
    for (std::uint32_t b = 0; b <= std::bit_cast<std::uint32_t>(hi); b += 64) {
        const float f = std::bit_cast<float>(b);
        v.push_back(f);
        v.push_back(-f);
    }
    v.insert(v.end(), specials);
    return v;
}

}  // namespace

TEST_CASE("fast Erf is within 2e-7 of the exact erf", "[fast]") {
    // Every 64th float bit pattern in [0, 5] (plus the negatives), 17 M values, and specials.
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> v =
        every_64th_float(5.0f, {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.921875f,
                                -0.921875f, 3.925f, 1e30f, -1e-45f});
    const Tensor x = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
    auto [fast, ref] = both("Erf", {{"x", x}});
    double worst_exact = 0, worst_ref = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const float got = fast[0].data<float>()[i];
        if (std::isnan(v[i])) {
            CHECK(std::isnan(got));
            continue;
        }
        worst_exact = std::max(worst_exact, std::abs(got - std::erf(static_cast<double>(v[i]))));
        worst_ref = std::max(worst_ref, std::abs(static_cast<double>(got) - ref[0].data<float>()[i]));
    }
    INFO("max abs error vs erf: " << worst_exact << ", vs std::erf(float): " << worst_ref);
    CHECK(worst_exact <= 2e-7);
    CHECK(worst_ref <= 2e-7);
    // Odd symmetry and the limits are exact.
    const Tensor e = run_graph(one_node("Erf", {{"x", f32_of({4}, {0, 0, 0, 0})}}, 1, {}, 13),
                               {{"x", f32_of({4}, {0.0f, -0.0f, 10.0f, -10.0f})}}, {"cpu"})[0];
    CHECK(std::signbit(e.data<float>()[1]));
    CHECK(e.data<float>()[2] == 1.0f);
    CHECK(e.data<float>()[3] == -1.0f);
}

TEST_CASE("fast Gelu is within 1e-7 (1 + |Gelu|) of the exact Gelu", "[fast]") {
    // Every 64th float bit pattern in [0, 8] (plus the negatives), 17.6 M values: both sides of
    // the formula's switch at |x| = 4 sqrt 2, and specials. The exact Gelu in double; the
    // reference kernel's 0.5 x (1 + erf(x / sqrt 2)) in float is itself off by up to an ulp of
    // 1 + erf times 0.5 |x|.
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> v =
        every_64th_float(8.0f, {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 5.656854f,
                                -5.656854f, 5.6568546f, -5.6568546f, 1e30f, -1e30f, -1e-45f});
    const Tensor x = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
    auto [fast, ref] = both("Gelu", {{"x", x}}, {}, 20);
    double worst = 0, worst_ref = 0;
    float worst_at = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const float got = fast[0].data<float>()[i];
        const float want_ref = ref[0].data<float>()[i];
        if (std::isnan(want_ref)) {  // NaN and -inf (-inf * 0)
            CHECK(std::isnan(got));
            continue;
        }
        if (std::isinf(v[i])) {
            CHECK(got == want_ref);
            continue;
        }
        const double xd = v[i];
        const double g = 0.5 * xd * (1.0 + std::erf(xd / std::numbers::sqrt2));
        const double err = std::abs(got - g) / (1.0 + std::abs(g));
        if (err > worst) {
            worst = err;
            worst_at = v[i];
        }
        worst_ref = std::max(worst_ref,
                             std::abs(got - static_cast<double>(want_ref)) / (1.0 + std::abs(g)));
    }
    INFO("max error vs the exact Gelu, relative to 1 + |Gelu|: "
         << worst << " at " << worst_at << "; vs the reference kernel: " << worst_ref);
    CHECK(worst <= 1e-7);
    CHECK(worst_ref <= 2e-7);
    // Signs and limits: Gelu(-0) = -0, large negative x gives -0, large positive x itself.
    const Tensor e = run_graph(one_node("Gelu", {{"x", f32_of({4}, {0, 0, 0, 0})}}, 1, {}, 20),
                               {{"x", f32_of({4}, {-0.0f, -30.0f, 30.0f, 7.0f})}}, {"cpu"})[0];
    CHECK((e.data<float>()[0] == 0.0f && std::signbit(e.data<float>()[0])));
    CHECK((e.data<float>()[1] == 0.0f && std::signbit(e.data<float>()[1])));
    CHECK(e.data<float>()[2] == 30.0f);
    CHECK(e.data<float>()[3] == 7.0f);
}

TEST_CASE("fast Not and unaccelerated dtypes go through the reference", "[fast]") {
    compare("Not", {{"x", rand_bool({5, 77})}});
    // int64 Neg/Abs/Relu and float64 Sqrt are not accelerated (their dtype filters them out
    // at load); with undeclared input types the fast kernel is chosen and falls back at run.
    Tensor i = rand_i64({3, 40}, -1000, 1000);
    for (const char* op : {"Neg", "Abs", "Relu"}) {
        compare(op, {{"x", i}});
        compare(op, {{"x", i, false, false}});
    }
    Tensor d = Tensor::empty(DType::f64, Shape{9});
    for (auto& v : d.span<double>()) v = std::uniform_real_distribution<double>(0, 9)(rng());
    compare("Sqrt", {{"x", d, false, false}});
}

// ---- binary -----------------------------------------------------------------------------------

namespace {

/// Broadcast pairs: same shape, scalars on either side, inner row, column, BERT mask,
/// general, rank 0, empty, rank 6, large (threaded).
std::vector<std::pair<Shape, Shape>> binary_shapes() {
    return {{{4, 37}, {4, 37}},     {{4, 37}, {}},           {{}, {4, 37}},
            {{5, 3, 37}, {37}},     {{5, 37}, {5, 1}},       {{1, 37}, {5, 1}},
            {{2, 1, 1, 9}, {2, 12, 9, 9}},                   {{2, 1, 4}, {3, 1}},
            {{}, {}},               {{0, 3}, {3}},           {{2, 0}, {1}},
            {{2, 1, 3, 1, 2, 3}, {3, 2, 1}},                 {{1, 1, 1}, {1}},
            {{64, 1024}, {1024}},   {{64, 1024}, {64, 1}},   {{256, 1030}, {256, 1030}}};
}

}  // namespace

TEST_CASE("fast float32 arithmetic matches the reference bitwise", "[fast]") {
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
        for (const auto& [sa, sb] : binary_shapes()) {
            INFO(op << " " << sa.to_string() << " op " << sb.to_string());
            compare(op, {{"a", rand_f32(sa)}, {"b", rand_f32(sb)}});
        }
    }
    // A constant operand (initializer), like BERT's weights and epsilons.
    compare("Add", {{"a", rand_f32({8, 96})}, {"b", rand_f32({96}), true}});
    compare("Mul", {{"a", rand_f32({8, 96})}, {"b", f32_of({}, {-10000.0f}), true}});
}

TEST_CASE("fast Pow matches the reference for constant and tensor exponents", "[fast]") {
    struct Case {
        float e;
        std::int64_t ulp;
    };
    for (const Case c : {Case{2.0f, 1}, Case{1.0f, 0}, Case{3.0f, 1}, Case{0.5f, 1},
                         Case{-1.5f, 0}, Case{0.0f, 0}}) {
        for (const Shape& s : {Shape{}, Shape{9}, Shape{0}, Shape{33, 1031}}) {
            INFO("exponent " << c.e << " shape " << s.to_string());
            compare("Pow", {{"x", rand_f32(s, 30.0f)}, {"e", f32_of({}, {c.e}), true}}, {}, 15, c.ulp);
            compare("Pow", {{"x", rand_f32(s, 30.0f)}, {"e", f32_of({1}, {c.e})}}, {}, 15, c.ulp);
        }
    }
    // Signed zeros and infinities of the exponent-0.5 path follow pow, not sqrt.
    auto [fast, ref] = both("Pow", {{"x", f32_of({4}, {-0.0f, -INFINITY, INFINITY, -4.0f})},
                                    {"e", f32_of({}, {0.5f})}});
    expect_close(fast[0], ref[0]);
    CHECK_FALSE(std::signbit(fast[0].data<float>()[0]));
    compare("Pow", {{"x", rand_f32({5, 7}, 3.0f)}, {"e", rand_f32({7}, 3.0f)}});
    // Mixed base/exponent types run the reference code.
    compare("Pow", {{"x", rand_f32({5, 7}, 3.0f)}, {"e", i64_of({1}, {3})}});
}

TEST_CASE("fast integer arithmetic wraps like the reference", "[fast]") {
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    for (const char* op : {"Add", "Sub", "Mul", "Max", "Min"}) {
        for (const auto& [sa, sb] : binary_shapes()) {
            INFO(op << " " << sa.to_string() << " op " << sb.to_string());
            compare(op, {{"a", rand_i64(sa, -big, big)}, {"b", rand_i64(sb, -big, big)}});
            Tensor a32 = Tensor::empty(DType::i32, sa), b32 = Tensor::empty(DType::i32, sb);
            for (auto& v : a32.span<std::int32_t>()) v = static_cast<std::int32_t>(rng()());
            for (auto& v : b32.span<std::int32_t>()) v = static_cast<std::int32_t>(rng()());
            compare(op, {{"a", a32}, {"b", b32}});
        }
    }
    // BERT's attention-mask arithmetic on int64 [B,1,1,S].
    compare("Sub", {{"a", i64_of({}, {1})}, {"b", rand_i64({2, 1, 1, 128}, 0, 1)}});
    compare("Mul", {{"a", rand_i64({2, 1, 1, 128}, 0, 1)}, {"b", i64_of({}, {-10000})}});
    // Integer division keeps the reference's zero check.
    const Graph g = one_node("Div", {{"a", i64_of({2}, {1, 1})}, {"b", i64_of({2}, {1, 1})}}, 1, {}, 14);
    const std::vector<In> ins{{"a", i64_of({2}, {7, 8})}, {"b", i64_of({2}, {2, 0})}};
    const Status fast = try_both(g, ins, {"cpu"});
    const Status ref = try_both(g, ins, {"reference"});
    CHECK(fast.code() == ErrorCode::invalid_argument);
    CHECK(fast.message() == ref.message());
}

TEST_CASE("fast comparisons and logical ops match the reference", "[fast]") {
    for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
        for (const auto& [sa, sb] : binary_shapes()) {
            INFO(op << " " << sa.to_string() << " op " << sb.to_string());
            // Few distinct values so that equality happens.
            Tensor a = rand_f32(sa, 2.0f), b = rand_f32(sb, 2.0f);
            for (auto& v : a.span<float>()) v = std::isnan(v) ? v : std::round(v);
            for (auto& v : b.span<float>()) v = std::isnan(v) ? v : std::round(v);
            compare(op, {{"a", a}, {"b", b}});
            compare(op, {{"a", rand_i64(sa, -3, 3)}, {"b", rand_i64(sb, -3, 3)}});
        }
    }
    compare("Equal", {{"a", rand_bool({3, 50})}, {"b", rand_bool({50})}});
    for (const char* op : {"And", "Or", "Xor"})
        for (const auto& [sa, sb] : binary_shapes())
            compare(op, {{"a", rand_bool(sa)}, {"b", rand_bool(sb)}});
}

TEST_CASE("fast Where broadcasts three operands like the reference", "[fast]") {
    const std::vector<std::array<Shape, 3>> shapes = {
        {Shape{4, 33}, Shape{4, 33}, Shape{4, 33}}, {Shape{2, 1, 1, 9}, Shape{2, 4, 9, 9}, Shape{}},
        {Shape{9}, Shape{}, Shape{3, 9}},           {Shape{}, Shape{5}, Shape{5}},
        {Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},    {Shape{0, 2}, Shape{2}, Shape{1}},
        {Shape{128, 300}, Shape{300}, Shape{128, 1}}};
    for (const auto& s : shapes) {
        INFO(s[0].to_string() << " " << s[1].to_string() << " " << s[2].to_string());
        compare("Where", {{"c", rand_bool(s[0])}, {"x", rand_f32(s[1])}, {"y", rand_f32(s[2])}});
        compare("Where", {{"c", rand_bool(s[0])}, {"x", rand_i64(s[1], -9, 9)}, {"y", rand_i64(s[2], -9, 9)}});
        compare("Where", {{"c", rand_bool(s[0])}, {"x", rand_bytes(DType::u8, s[1])}, {"y", rand_bytes(DType::u8, s[2])}});
        compare("Where", {{"c", rand_bool(s[0])}, {"x", rand_bytes(DType::f16, s[1])}, {"y", rand_bytes(DType::f16, s[2])}});
    }
    Tensor sx = Tensor::empty(DType::string, Shape{2}), sy = Tensor::empty(DType::string, Shape{2});
    sx.data<std::string>()[0] = "a";
    sx.data<std::string>()[1] = "b";
    sy.data<std::string>()[0] = "c";
    sy.data<std::string>()[1] = "d";
    compare("Where", {{"c", rand_bool({2})}, {"x", sx}, {"y", sy}});
}

TEST_CASE("fast two-input Max and Min propagate NaN like the reference", "[fast]") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    compare("Max", {{"a", f32_of({6}, {nan, 1.f, -0.f, 0.f, 2.f, nan})},
                    {"b", f32_of({6}, {1.f, nan, 0.f, -0.f, -INFINITY, nan})}});
    compare("Min", {{"a", f32_of({6}, {nan, 1.f, -0.f, 0.f, 2.f, nan})},
                    {"b", f32_of({6}, {1.f, nan, 0.f, -0.f, -INFINITY, nan})}});
    // Three inputs and one input run the reference code.
    compare("Max", {{"a", rand_f32({3, 4})}, {"b", rand_f32({4})}, {"c", rand_f32({3, 1})}});
    compare("Min", {{"a", rand_f32({3, 4})}});
}

// ---- data movement ----------------------------------------------------------------------------

TEST_CASE("fast Transpose matches the reference for random perms and dtypes", "[fast]") {
    for (int rank = 1; rank <= 6; ++rank) {
        for (int rep = 0; rep < 6; ++rep) {
            const Shape s = rand_shape(rank, rank <= 3 ? 40 : 7);
            std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng());
            for (DType dt : {DType::f32, DType::u8, DType::i64, DType::f16}) {
                INFO(s.to_string() << " " << dtype_name(dt) << " perm " << perm[0]);
                compare("Transpose", {{"x", rand_bytes(dt, s)}}, {{"perm", attr_ints(perm)}});
            }
        }
    }
    // BERT's head split/merge, default (reversed) perm, rank 0, empty.
    compare("Transpose", {{"x", rand_f32({2, 128, 12, 64})}}, {{"perm", attr_ints({0, 2, 1, 3})}});
    compare("Transpose", {{"x", rand_f32({2, 128, 12, 64})}}, {{"perm", attr_ints({0, 2, 3, 1})}});
    compare("Transpose", {{"x", rand_f32({2, 12, 128, 64})}}, {{"perm", attr_ints({0, 2, 1, 3})}});
    compare("Transpose", {{"x", rand_f32({300, 257})}});
    compare("Transpose", {{"x", rand_f32({})}});
    compare("Transpose", {{"x", rand_f32({3, 0, 4})}}, {{"perm", attr_ints({2, 0, 1})}});
    compare("Transpose", {{"x", rand_f32({1, 5, 1, 7})}}, {{"perm", attr_ints({3, 2, 1, 0})}});
}

TEST_CASE("fast Gather copies rows on any axis and rejects bad indices", "[fast]") {
    const Tensor table = rand_f32({50, 24});
    compare("Gather", {{"x", table, true}, {"i", rand_i64({2, 16}, -50, 49)}});  // embedding
    compare("Gather", {{"x", rand_f32({4, 9, 5})}, {"i", rand_i64({3}, -9, 8)}}, {{"axis", attr_i(1)}});
    compare("Gather", {{"x", rand_f32({4, 9, 5})}, {"i", rand_i64({2, 2}, -5, 4)}}, {{"axis", attr_i(-1)}});
    compare("Gather", {{"x", rand_bytes(DType::u8, {6, 3})}, {"i", i64_of({}, {-2})}});
    compare("Gather", {{"x", rand_f32({6, 3})}, {"i", rand_i64({0}, 0, 0)}});
    Tensor i32 = Tensor::from_vector(Shape{3}, std::vector<std::int32_t>{0, -1, 2});
    compare("Gather", {{"x", rand_f32({3, 70000})}, {"i", i32}});
    // Out of range: the same invalid_argument naming the index on both backends.
    const Graph g = one_node("Gather", {{"x", rand_f32({5, 2})}, {"i", i64_of({2}, {0, 0})}}, 1, {}, 13);
    const std::vector<In> ins{{"x", rand_f32({5, 2})}, {"i", i64_of({2}, {1, 7})}};
    const Status fast = try_both(g, ins, {"cpu"});
    const Status ref = try_both(g, ins, {"reference"});
    CHECK(fast.code() == ErrorCode::invalid_argument);
    CHECK(fast.message().find("index 7") != std::string::npos);
    CHECK(fast.message() == ref.message());
}

TEST_CASE("fast Concat and Split match the reference", "[fast]") {
    for (int axis = -3; axis < 3; ++axis) {
        const int a = axis < 0 ? axis + 3 : axis;
        Shape s0{3, 4, 5}, s1{3, 4, 5}, s2{3, 4, 5};
        s1[a] = 2;
        s2[a] = 0;
        INFO("axis " << axis);
        compare("Concat", {{"a", rand_f32(s0)}, {"b", rand_f32(s1)}, {"c", rand_f32(s2)}, {"d", rand_f32(s0)}},
                {{"axis", attr_i(axis)}});
        compare("Concat", {{"a", rand_bytes(DType::i64, s1)}, {"b", rand_bytes(DType::i64, s0)}},
                {{"axis", attr_i(axis)}});
        const Tensor sx = rand_f32({6, 4, 8});
        const std::int64_t dim = sx.shape()[a];
        compare("Split", {{"x", sx}, {"s", i64_of({3}, {1, 0, dim - 1})}}, {{"axis", attr_i(axis)}},
                17, 0, 3);
    }
    compare("Concat", {{"a", rand_f32({1, 100000})}, {"b", rand_f32({1, 70001})}}, {{"axis", attr_i(1)}});
    compare("Concat", {{"a", rand_f32({300, 100})}, {"b", rand_f32({300, 7})}}, {{"axis", attr_i(1)}});
    compare("Concat", {{"a", i64_of({1}, {4})}, {"b", i64_of({2}, {-1, 64})}}, {{"axis", attr_i(0)}});
    compare("Split", {{"x", rand_f32({2, 300, 2304})}}, {{"axis", attr_i(2)}}, 17, 0, 3);
    compare("Split", {{"x", rand_f32({7, 3})}}, {{"axis", attr_i(0)}, {"num_outputs", attr_i(3)}}, 18, 0, 3);
    compare("Split", {{"x", rand_f32({6, 2})}}, {{"split", attr_ints({2, 4})}}, 11, 0, 2);
}

TEST_CASE("fast Slice handles steps negative indices and clamping", "[fast]") {
    const Tensor x = rand_f32({6, 7, 8});
    auto slice = [&](std::vector<std::int64_t> st, std::vector<std::int64_t> en,
                     std::vector<std::int64_t> ax, std::vector<std::int64_t> sp) {
        const auto n = static_cast<std::int64_t>(st.size());
        INFO("starts " << st[0] << " ends " << en[0]);
        compare("Slice", {{"x", x}, {"s", i64_of({n}, st)}, {"e", i64_of({n}, en)},
                          {"a", i64_of({n}, ax)}, {"p", i64_of({n}, sp)}});
    };
    slice({1}, {5}, {0}, {1});
    slice({-1}, {-9}, {1}, {-2});
    slice({0, 100}, {1000, -100}, {2, 0}, {3, -1});
    slice({5, 2}, {1, 2}, {-1, 1}, {1, 1});  // empty
    slice({std::numeric_limits<std::int64_t>::max()}, {std::numeric_limits<std::int64_t>::min()},
          {2}, {-1});
    slice({0, 0, 0}, {6, 7, 8}, {0, 1, 2}, {2, 3, 5});
    compare("Slice", {{"x", x}, {"s", i64_of({1}, {2})}, {"e", i64_of({1}, {-1})}});  // no axes/steps
    compare("Slice", {{"x", rand_f32({4, 128, 768})}, {"s", i64_of({1}, {0})}, {"e", i64_of({1}, {1})},
                      {"a", i64_of({1}, {1})}});  // BERT's [CLS] token
    compare("Slice", {{"x", x}}, {{"starts", attr_ints({1, -3})}, {"ends", attr_ints({4, 100})},
                                  {"axes", attr_ints({0, 2})}},
            9);
}

TEST_CASE("fast Expand and the reshaping ops match the reference", "[fast]") {
    compare("Expand", {{"x", rand_f32({3, 1})}, {"s", i64_of({3}, {2, 3, 70})}});
    compare("Expand", {{"x", rand_bytes(DType::u8, {1, 5})}, {"s", i64_of({2}, {4, 1})}});
    compare("Expand", {{"x", rand_f32({})}, {"s", i64_of({2}, {300, 300})}});
    compare("Expand", {{"x", rand_f32({2, 1, 3})}, {"s", i64_of({4}, {2, 1, 0, 3})}});
    const Tensor x = rand_f32({2, 3, 1, 40000});
    compare("Reshape", {{"x", x}, {"s", i64_of({2}, {6, -1})}});
    compare("Flatten", {{"x", x}}, {{"axis", attr_i(2)}});
    compare("Squeeze", {{"x", x}, {"a", i64_of({1}, {2})}});
    compare("Unsqueeze", {{"x", x}, {"a", i64_of({2}, {0, -1})}});
    compare("Identity", {{"x", rand_bytes(DType::boolean, {9})}});
}

TEST_CASE("fast Pad in constant mode matches the reference", "[fast]") {
    const Tensor x = rand_f32({3, 4, 5});
    auto pad = [&](const Tensor& in, std::vector<std::int64_t> pads, Tensor value = Tensor(),
                   Tensor axes = Tensor(), std::int64_t opset = 18) {
        const auto n = static_cast<std::int64_t>(pads.size());
        INFO("pads " << pads[0] << " " << pads[n - 1]);
        compare("Pad", {{"x", in}, {"p", i64_of({n}, pads)}, {"v", value}, {"a", axes}}, {}, opset);
    };
    pad(x, {1, 0, 2, 0, 3, 1});
    pad(x, {-1, 2, 0, 1, -2, -3}, f32_of({}, {2.5f}));  // crops
    pad(x, {0, 0, -5, 0, 0, 0});                         // empty output
    pad(x, {2, 1}, f32_of({}, {-1.0f}), i64_of({1}, {-1}));
    pad(x, {0, 0, 0, 0, 0, 0});
    pad(x, {0, -1, 7, 0, 1, -6});  // no input column left in the last dim: whole rows pad
    pad(rand_bytes(DType::u8, {2, 1, 3, 1, 2, 3}), {1, 0, 0, 1, 0, 2, 0, 0, 1, 0, 0, 0},
        Tensor::from_vector(Shape{}, std::vector<std::uint8_t>{7}), Tensor(), 13);
    pad(rand_f32({0, 3}), {1, 1, 0, 0}, f32_of({}, {4.0f}));
    pad(rand_f32({256, 768}), {0, 1, 0, 3}, Tensor(), Tensor(), 11);
    // Other modes run the reference code.
    compare("Pad", {{"x", x}, {"p", i64_of({6}, {1, 0, 2, 0, 3, 1})}},
            {{"mode", [] {
                  Attribute a;
                  a.kind = AttrKind::s;
                  a.s = "reflect";
                  return a;
              }()}},
            13);
}

// ---- reductions -------------------------------------------------------------------------------

TEST_CASE("fast reductions match the reference on every axis pattern", "[fast]") {
    struct Axes {
        Shape shape;
        std::vector<std::int64_t> axes;
    };
    const std::vector<Axes> patterns = {
        {{8, 128, 768}, {-1}},     // BERT LayerNorm: rows
        {{4, 64, 7, 7}, {2, 3}},   // global average pool: rows
        {{3, 5, 6}, {0}},          // columns
        {{3, 5, 6}, {1}},          // kept, reduced, kept
        {{3, 1, 5, 6}, {0, 1}},    // columns after dropping a 1-dim
        {{2, 3, 4, 5}, {0, 2}},    // mixed: reference code
        {{3, 5, 6}, {}},           // everything
        {{300000}, {0}},           // one long row (chunked)
        {{2, 1, 3, 1, 2, 3}, {1, 3, 5}},
        {{}, {}},
        {{0, 4}, {1}},             // empty output
        {{4, 0}, {1}},             // empty reduction
        {{5, 1}, {1}}};
    const char* ops[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2",
                         "ReduceSumSquare"};
    for (const char* op : ops) {
        const std::string name(op);
        const bool exact = name == "ReduceMax" || name == "ReduceMin";
        for (const auto& p : patterns) {
            for (std::int64_t keep : {0, 1}) {
                INFO(op << " " << p.shape.to_string() << " keepdims " << keep << " axes "
                        << p.axes.size());
                const Tensor x = rand_f32(p.shape, 3.0f, !exact ? false : true);
                const auto na = static_cast<std::int64_t>(p.axes.size());
                // Opset 18 (axes input; for ReduceSum from 13) and 13 (axes attribute).
                compare(op, {{"x", x}, {"a", p.axes.empty() ? Tensor() : i64_of({na}, p.axes)}},
                        {{"keepdims", attr_i(keep)}}, 18, exact ? 0 : 1);
                if (name != "ReduceSum")
                    compare(op, {{"x", x}},
                            {{"keepdims", attr_i(keep)}, {"axes", attr_ints(p.axes)}}, 13,
                            exact ? 0 : 1);
            }
        }
    }
    // NaN and infinities (the canonical NaN, exact extremum and signed zeros).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const Tensor special = f32_of({4, 5}, {1.f,  nan, 2.f,  3.f,  4.f,  INFINITY, 1.f,  2.f, 3.f,  -INFINITY,
                                         -0.f, 0.f, -0.f, -1.f, -2.f, 0.f,      -0.f, 0.f, -0.f, 0.f});
    for (const char* op : ops)
        for (std::int64_t axis : {0, 1})
            compare(op, {{"x", special}}, {{"axes", attr_ints({axis})}}, 11, 0);
    // noop_with_empty_axes: every element its own reduction.
    compare("ReduceL2", {{"x", rand_f32({3, 40}, 1e20f)}, {"a", Tensor()}}, {{"noop_with_empty_axes", attr_i(1)}}, 18);
    compare("ReduceSum", {{"x", rand_f32({3, 40})}, {"a", i64_of({0}, {})}}, {{"noop_with_empty_axes", attr_i(1)}}, 18);
}

TEST_CASE("fast column reductions are bitwise equal to the reference", "[fast]") {
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2"})
        compare(op, {{"x", rand_f32({64, 3, 1000}, 100.0f, false)}, {"a", i64_of({1}, {1})}}, {}, 18, 0);
}

// ---- Cast -------------------------------------------------------------------------------------

TEST_CASE("fast Cast matches the reference bitwise", "[fast]") {
    // float32 -> 16-bit floats: random values, every rounding boundary region, specials.
    std::vector<float> v;
    for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng()())));
    for (float f : {65504.f, 65520.f, 65519.99f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-45f,
                    -0.f, 3.4e38f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7fa00001u)})
        v.push_back(f);
    const Tensor x = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
    for (std::int64_t to : {10, 16, 11, 7, 6, 2, 9, 1}) {  // f16 bf16 f64 i64 i32 u8 bool f32
        INFO("to " << to);
        compare("Cast", {{"x", x}}, {{"to", attr_i(to)}});
    }
    // Every float16 / bfloat16 bit pattern -> float32, and back.
    for (DType dt : {DType::f16, DType::bf16}) {
        Tensor h = Tensor::empty(dt, Shape{65536});
        for (std::int64_t i = 0; i < 65536; ++i)
            static_cast<std::uint16_t*>(h.raw_data())[i] = static_cast<std::uint16_t>(i);
        compare("Cast", {{"x", h}}, {{"to", attr_i(1)}});
        compare("Cast", {{"x", h}}, {{"to", attr_i(dt == DType::f16 ? 16 : 10)}});  // reference path
    }
    const Tensor i = rand_i64({1000}, std::numeric_limits<std::int64_t>::min(),
                              std::numeric_limits<std::int64_t>::max());
    for (std::int64_t to : {1, 11, 6, 2, 9, 7}) compare("Cast", {{"x", i}}, {{"to", attr_i(to)}});
    for (std::int64_t to : {1, 7, 6, 9}) compare("Cast", {{"x", rand_bool({77})}}, {{"to", attr_i(to)}});
    compare("CastLike", {{"x", x}, {"t", rand_bytes(DType::f16, {1})}});
    compare("Cast", {{"x", x}}, {{"to", attr_i(8)}});  // to string: reference path
}

// ---- determinism ------------------------------------------------------------------------------

TEST_CASE("fast kernels are deterministic across runs and thread counts", "[fast]") {
    struct Case {
        const char* op;
        std::vector<In> ins;
        Attrs attrs;
    };
    const std::vector<Case> cases = {
        {"ReduceMean", {{"x", rand_f32({8, 128, 768})}}, {{"axes", attr_ints({-1})}}},
        {"ReduceSumSquare", {{"x", rand_f32({2, 400000})}}, {{"axes", attr_ints({1})}}},
        {"ReduceL2", {{"x", rand_f32({1000000})}}, {}},
        {"ReduceMean", {{"x", rand_f32({300, 512})}}, {{"axes", attr_ints({0})}}},
        {"Erf", {{"x", rand_f32({8, 128, 300})}}, {}},
        {"Add", {{"a", rand_f32({8, 128, 768})}, {"b", rand_f32({768})}}, {}},
        {"Transpose", {{"x", rand_f32({8, 128, 12, 64})}}, {{"perm", attr_ints({0, 2, 3, 1})}}},
    };
    for (const auto& c : cases) {
        INFO(c.op);
        const Graph g = one_node(c.op, c.ins, 1, c.attrs, 13);
        const Tensor a = run_graph(g, c.ins, {"cpu"}, 2)[0];
        const Tensor b = run_graph(g, c.ins, {"cpu"}, 2)[0];
        const Tensor one = run_graph(g, c.ins, {"cpu"}, 1)[0];
        expect_bitwise(a, b);
        expect_bitwise(a, one);
    }
}
