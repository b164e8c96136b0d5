// [cuda] tests of the CUDA elementwise family (cuda/kernels/elementwise.cu) against the reference
// CPU kernels: every unary op (with its attributes), the broadcasting binary ops and their fast
// paths (same shape, scalar, trailing row, general strided), the variadic Max/Min/Sum/Mean,
// Where, Clip (attribute and input forms), Identity, Cast/CastLike (the full type matrix),
// integer paths, odd sizes, empty tensors, 4M-element cases and special values.
//
// Tolerances:
//  - Exact ops ({0, 0}): Relu, Neg, Abs, Floor, Ceil, Add/Sub/Mul/Div/Max/Min and comparisons on
//    special values, Cast, Where, Identity. Both sides do one IEEE operation in float and round
//    once to the element type (CUDA's division and sqrt are IEEE by default; denormals are kept,
//    no flush-to-zero), so the results are bit-identical up to the sign of zero and NaN payloads
//    (the comparison treats -0 == +0 and NaN == NaN).
//  - f32 transcendental ops (exp, log, tanh, erf, pow, expm1, log1p and what uses them): CUDA's
//    accurate functions are within 1-4 ulp, glibc's within ~1 ulp, so results differ by a few
//    ulp = a few 1.2e-7 relative: rtol 2e-6, plus atol 1e-6 for results near zero (cancellation
//    in Gelu's 1 + erf/tanh for negative x: an ulp of 1.0 times 0.5|x| <= 1.5 with |x| <= 3,
//    hence atol 2e-6 for Gelu). A bug (wrong formula, wrong constant) is off by far more.
//  - f16 / bf16: both compute in float and round once; a few-ulp float difference can flip one
//    rounding, at most 1 ulp of the 16-bit type: tol_for(dtype).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_op_tester.hpp"

namespace {

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;
using std::int64_t;

const char* const kDs = "com.dsinfer";
const std::vector<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16};
const Tolerance kExact{0.0, 0.0};

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }

std::string dims_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

/// Tolerance for ops built on transcendental functions (see the file comment).
Tolerance trans_tol(DType dt, double atol32 = 1e-6) {
    if (dt == DType::f32) return {atol32, 2e-6};
    return tol_for(dt);
}

Tensor alloc(DType dt, const std::vector<int64_t>& dims) {
    return Tensor::allocate(dt, Shape::make(dims).value()).value();
}

/// A float-type tensor holding `vals` (converted to the type).
Tensor float_tensor(DType dt, const std::vector<int64_t>& dims, const std::vector<double>& vals) {
    Tensor t = alloc(dt, dims);
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == vals.size());
    for (std::size_t i = 0; i < vals.size(); ++i) {
        const double v = vals[i];
        switch (dt) {
            case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
            case DType::f64: t.data<double>()[i] = v; break;
            case DType::f16: t.data<float16>()[i] = float16(static_cast<float>(v)); break;
            case DType::bf16: t.data<bfloat16>()[i] = bfloat16(static_cast<float>(v)); break;
            default: FAIL("float_tensor: float types only");
        }
    }
    return t;
}

/// An integer or bool tensor holding `vals` (converted modulo the type's width; bool: != 0).
Tensor int_tensor(DType dt, const std::vector<int64_t>& dims, const std::vector<int64_t>& vals) {
    Tensor t = alloc(dt, dims);
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == vals.size());
    for (std::size_t i = 0; i < vals.size(); ++i) {
        const int64_t v = vals[i];
        switch (dt) {
            case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
            case DType::i64: t.data<std::int64_t>()[i] = v; break;
            case DType::i8: t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v); break;
            case DType::u8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v); break;
            case DType::boolean: t.data<bool>()[i] = v != 0; break;
            default: FAIL("int_tensor: integer/bool types only");
        }
    }
    return t;
}

int64_t count(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

Tensor rand_ints(DType dt, const std::vector<int64_t>& dims, int64_t lo, int64_t hi) {
    std::uniform_int_distribution<int64_t> u(lo, hi);
    std::vector<int64_t> v(static_cast<std::size_t>(count(dims)));
    for (auto& x : v) x = u(rng());
    return int_tensor(dt, dims, v);
}

Tensor rand_bool(const std::vector<int64_t>& dims) { return rand_ints(DType::boolean, dims, 0, 1); }

/// Uniform values in [lo, hi] rounded to multiples of `step` (so that Equal sometimes holds and
/// the rounding to 16-bit types is exact).
Tensor rand_quantized(DType dt, const std::vector<int64_t>& dims, float lo, float hi, float step) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<double> v(static_cast<std::size_t>(count(dims)));
    for (auto& x : v) x = std::round(u(rng()) / step) * step;
    return float_tensor(dt, dims, v);
}

/// Special float values: NaN, +-Inf, -0, +0, f32 denormals, an f16 denormal, ordinary values,
/// near-FLT_MAX values (Inf in f16).
const std::vector<double>& specials() {
    static const std::vector<double> v = {
        std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(),
        -0.0,
        0.0,
        1e-40,
        -1e-40,
        1.4e-45,
        3e-5,
        1.0,
        -2.5,
        3.0e38,
        -3.0e38,
    };
    return v;
}

}  // namespace

// ---- unary ------------------------------------------------------------------------------------

namespace {

struct UnaryCase {
    const char* op;
    float lo, hi;
    Attrs attrs;
    std::int64_t opset;
    const char* domain;
    enum Kind { exact, plain, trans } kind;
    double atol32 = 1e-6;
};

const std::vector<UnaryCase>& unary_cases() {
    static const std::vector<UnaryCase> c = {
        {"Relu", -4, 4, {}, 17, "", UnaryCase::exact},
        {"Neg", -4, 4, {}, 17, "", UnaryCase::exact},
        {"Abs", -4, 4, {}, 17, "", UnaryCase::exact},
        {"Floor", -9, 9, {}, 17, "", UnaryCase::exact},
        {"Ceil", -9, 9, {}, 17, "", UnaryCase::exact},
        {"Identity", -4, 4, {}, 17, "", UnaryCase::exact},
        {"Sqrt", 0, 50, {}, 17, "", UnaryCase::plain},
        {"Reciprocal", 0.1f, 5, {}, 17, "", UnaryCase::plain},
        {"LeakyRelu", -4, 4, {{"alpha", attr_f(0.2f)}}, 17, "", UnaryCase::plain},
        {"LeakyRelu", -4, 4, {}, 17, "", UnaryCase::plain},  // default alpha 0.01
        {"HardSigmoid", -5, 5, {{"alpha", attr_f(0.3f)}, {"beta", attr_f(0.4f)}}, 17, "",
         UnaryCase::trans},  // alpha*x+beta may contract to an fma on the GPU
        {"HardSigmoid", -5, 5, {}, 17, "", UnaryCase::trans},
        {"HardSwish", -5, 5, {}, 17, "", UnaryCase::trans},
        {"Sigmoid", -10, 10, {}, 17, "", UnaryCase::trans},
        {"Tanh", -5, 5, {}, 17, "", UnaryCase::trans},
        {"Erf", -3, 3, {}, 17, "", UnaryCase::trans},
        {"Exp", -8, 8, {}, 17, "", UnaryCase::trans},
        {"Log", 0.01f, 50, {}, 17, "", UnaryCase::trans},
        {"Elu", -4, 4, {{"alpha", attr_f(0.7f)}}, 17, "", UnaryCase::trans},
        {"Elu", -4, 4, {}, 17, "", UnaryCase::trans},
        {"Softplus", -20, 20, {}, 17, "", UnaryCase::trans},
        {"Gelu", -3, 3, {}, 20, "", UnaryCase::trans, 2e-6},
        {"Gelu", -3, 3, {{"approximate", attr_s("none")}}, 20, "", UnaryCase::trans, 2e-6},
        {"Gelu", -3, 3, {{"approximate", attr_s("tanh")}}, 20, "", UnaryCase::trans, 2e-6},
        {"Gelu", -3, 3, {}, 17, kDs, UnaryCase::trans, 2e-6},
        {"Gelu", -3, 3, {{"approximate", attr_s("tanh")}}, 17, kDs, UnaryCase::trans, 2e-6},
    };
    return c;
}

Tolerance unary_tol(const UnaryCase& c, DType dt) {
    switch (c.kind) {
        case UnaryCase::exact: return kExact;
        case UnaryCase::plain: return tol_for(dt);
        case UnaryCase::trans: return trans_tol(dt, c.atol32);
    }
    return tol_for(dt);
}

std::string unary_name(const UnaryCase& c, DType dt, const std::vector<int64_t>& dims) {
    std::string s = std::string(*c.domain ? "com.dsinfer:" : "") + c.op;
    for (const auto& [k, a] : c.attrs)
        s += " " + k + "=" + (a.kind == AttrKind::s ? a.s : std::to_string(a.f));
    return s + " " + dt_name(dt) + " " + dims_str(dims);
}

}  // namespace

TEST_CASE("cuda elementwise: unary ops, float types", "[cuda]") {
    for (const auto& c : unary_cases()) {
        for (DType dt : kFloatTypes) {
            // 3*5*67 = 1005 elements: not a multiple of the 4/8-element packs (tail path).
            std::vector<std::vector<int64_t>> shapes = {{3, 5, 67}};
            if (dt == DType::f32) shapes.push_back({64});  // whole packs only
            for (const auto& dims : shapes) {
                check_op(unary_name(c, dt, dims), c.op, {{"x", rand_tensor(dt, dims, c.lo, c.hi)}},
                         c.attrs, unary_tol(c, dt), c.opset, 1, c.domain);
            }
        }
    }
}

TEST_CASE("cuda elementwise: unary ops, odd sizes, scalars and empty tensors", "[cuda]") {
    const std::vector<std::vector<int64_t>> shapes = {{}, {1}, {3}, {7}, {13}, {1001}, {2, 17, 3}};
    for (DType dt : kFloatTypes) {
        for (const auto& dims : shapes) {
            check_op("Relu " + dt_name(dt) + " " + dims_str(dims), "Relu",
                     {{"x", rand_tensor(dt, dims, -2, 2)}}, {}, kExact);
            check_op("Sigmoid " + dt_name(dt) + " " + dims_str(dims), "Sigmoid",
                     {{"x", rand_tensor(dt, dims, -6, 6)}}, {}, trans_tol(dt));
        }
        for (const auto& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 0, 5}}) {
            check_op("Relu empty " + dt_name(dt) + " " + dims_str(dims), "Relu",
                     {{"x", rand_tensor(dt, dims)}}, {}, kExact);
            check_op("Exp empty " + dt_name(dt) + " " + dims_str(dims), "Exp",
                     {{"x", rand_tensor(dt, dims)}}, {}, kExact);
            check_op("Identity empty " + dt_name(dt) + " " + dims_str(dims), "Identity",
                     {{"x", rand_tensor(dt, dims)}}, {}, kExact);
        }
    }
}

TEST_CASE("cuda elementwise: unary special values (NaN, Inf, -0, denormals)", "[cuda]") {
    const std::vector<int64_t> dims{static_cast<int64_t>(specials().size())};
    for (DType dt : kFloatTypes) {
        const Tensor x = float_tensor(dt, dims, specials());
        for (const char* op : {"Relu", "Neg", "Abs", "Floor", "Ceil", "Identity"})
            check_op(std::string(op) + " specials " + dt_name(dt), op, {{"x", x}}, {}, kExact);
        // Clip and HardSigmoid keep NaN, like the reference (np.clip).
        check_op("Clip-6 specials " + dt_name(dt), "Clip", {{"x", x}},
                 {{"min", attr_f(-1.f)}, {"max", attr_f(2.f)}}, kExact, 6);
        check_op("HardSigmoid specials " + dt_name(dt), "HardSigmoid", {{"x", x}}, {},
                 trans_tol(dt));
        check_op("LeakyRelu specials " + dt_name(dt), "LeakyRelu", {{"x", x}}, {}, tol_for(dt));
        for (const char* op : {"Sigmoid", "Tanh", "Exp", "Softplus", "Erf"})
            check_op(std::string(op) + " specials " + dt_name(dt), op, {{"x", x}}, {},
                     trans_tol(dt));
    }
}

TEST_CASE("cuda elementwise: Relu/Neg/Abs on int32 and int64 (wrap-around)", "[cuda]") {
    const std::vector<int64_t> vals = {0, 1, -1, 7, -7, 2147483647, -2147483648LL,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min(), 12345, -54321};
    for (DType dt : {DType::i32, DType::i64}) {
        const Tensor x = int_tensor(dt, {static_cast<int64_t>(vals.size())}, vals);
        for (const char* op : {"Relu", "Neg", "Abs"}) {
            check_op(std::string(op) + " " + dt_name(dt) + " edge values", op, {{"x", x}}, {},
                     kExact);
            check_op(std::string(op) + " " + dt_name(dt) + " [5,33]", op,
                     {{"x", rand_ints(dt, {5, 33}, -1000, 1000)}}, {}, kExact);
        }
    }
}

// ---- Clip -------------------------------------------------------------------------------------

TEST_CASE("cuda elementwise: Clip, attribute form (opset 6) and input form (opset 11+)", "[cuda]") {
    for (DType dt : kFloatTypes) {
        const std::vector<int64_t> dims{7, 53};
        const std::string t = " " + dt_name(dt);
        check_op("Clip-6 min/max" + t, "Clip", {{"x", rand_tensor(dt, dims, -2, 2)}},
                 {{"min", attr_f(-0.5f)}, {"max", attr_f(0.7f)}}, kExact, 6);
        check_op("Clip-6 min only" + t, "Clip", {{"x", rand_tensor(dt, dims, -2, 2)}},
                 {{"min", attr_f(0.1f)}}, kExact, 6);
        check_op("Clip-6 no bounds" + t, "Clip", {{"x", rand_tensor(dt, dims, -2, 2)}}, {}, kExact,
                 6);
        for (std::int64_t opset : {11, 13, 17}) {
            const std::string o = " opset " + std::to_string(opset) + t;
            const Tensor lo = float_tensor(dt, {}, {-0.25});
            const Tensor hi = float_tensor(dt, {}, {0.6});
            check_op("Clip min/max inputs" + o, "Clip",
                     {{"x", rand_tensor(dt, dims, -2, 2)}, {"min", lo}, {"max", hi}}, {}, kExact,
                     opset);
            check_op("Clip min/max constants" + o, "Clip",
                     {{"x", rand_tensor(dt, dims, -2, 2)}, {"min", lo, true}, {"max", hi, true}},
                     {}, kExact, opset);
            check_op("Clip max only (min omitted)" + o, "Clip",
                     {{"x", rand_tensor(dt, dims, -2, 2)}, {"min", Tensor()}, {"max", hi}}, {},
                     kExact, opset);
            check_op("Clip min only" + o, "Clip",
                     {{"x", rand_tensor(dt, dims, -2, 2)}, {"min", lo}}, {}, kExact, opset);
            check_op("Clip no bounds" + o, "Clip", {{"x", rand_tensor(dt, dims, -2, 2)}}, {},
                     kExact, opset);
            check_op("Clip min > max" + o, "Clip",
                     {{"x", rand_tensor(dt, dims, -2, 2)}, {"min", hi}, {"max", lo}}, {}, kExact,
                     opset);
        }
        check_op("Clip empty" + t, "Clip",
                 {{"x", rand_tensor(dt, {0, 4})}, {"min", float_tensor(dt, {}, {0.0})}}, {},
                 kExact, 13);
    }
}

// ---- binary -----------------------------------------------------------------------------------

namespace {

struct BinShape {
    std::vector<int64_t> a, b;
    const char* path;
};

/// Broadcast patterns hitting each launch path.
const std::vector<BinShape>& bin_shapes() {
    static const std::vector<BinShape> s = {
        {{3, 5, 67}, {3, 5, 67}, "same shape (packs + tail)"},
        {{64}, {64}, "same shape, whole packs"},
        {{1}, {1}, "single element"},
        {{}, {}, "rank-0 scalars"},
        {{4, 6, 40}, {}, "scalar B"},
        {{}, {4, 6, 41}, "scalar A, odd size"},
        {{1}, {2, 3}, "[1] against [2,3]"},
        {{4, 6, 40}, {40}, "row B (N % 8 == 0)"},
        {{40}, {4, 6, 40}, "row A"},
        {{2, 3, 40}, {1, 1, 40}, "row B with leading 1s"},
        {{6, 37}, {37}, "row B, odd N (general path)"},
        {{33, 17}, {33, 1}, "column B [M,1]"},
        {{33, 1}, {33, 17}, "column A [M,1]"},
        {{2, 3, 5, 7}, {3, 1, 7}, "rank 4 general"},
        {{2, 1, 5, 1}, {1, 3, 1, 7}, "rank 4, both sides broadcast"},
        {{4, 1, 9}, {1, 6, 9}, "both sides broadcast"},
        {{7, 1}, {1, 11}, "outer product"},
        {{2, 1, 3, 1, 2, 1, 2, 3}, {1, 2, 1, 3, 1, 2, 2, 1}, "rank 8"},
    };
    return s;
}

/// One case per launch path (for the types and ops that do not need every pattern).
const std::vector<BinShape>& bin_shapes_short() {
    static const std::vector<BinShape> s = {
        {{3, 5, 67}, {3, 5, 67}, "same shape (packs + tail)"},
        {{4, 6, 40}, {}, "scalar B"},
        {{}, {4, 6, 41}, "scalar A, odd size"},
        {{4, 6, 40}, {40}, "row B (N % 8 == 0)"},
        {{40}, {4, 6, 40}, "row A"},
        {{33, 17}, {33, 1}, "column B [M,1]"},
        {{2, 1, 5, 1}, {1, 3, 1, 7}, "rank 4, both sides broadcast"},
    };
    return s;
}

struct BinOpCase {
    const char* op;
    float alo, ahi, blo, bhi;
    bool trans;
};

const std::vector<BinOpCase>& bin_ops() {
    static const std::vector<BinOpCase> c = {
        {"Add", -4, 4, -4, 4, false},     {"Sub", -4, 4, -4, 4, false},
        {"Mul", -4, 4, -4, 4, false},     {"Div", -4, 4, 0.25f, 4, false},
        {"Pow", 0.1f, 3, -2, 2, true},    {"Max", -4, 4, -4, 4, false},
        {"Min", -4, 4, -4, 4, false},     {"Equal", -2, 2, -2, 2, false},
        {"Less", -2, 2, -2, 2, false},    {"Greater", -2, 2, -2, 2, false},
        {"Sum", -4, 4, -4, 4, false},     {"Mean", -4, 4, -4, 4, false},
    };
    return c;
}

}  // namespace

TEST_CASE("cuda elementwise: binary ops x broadcast patterns, float types", "[cuda]") {
    for (const auto& c : bin_ops()) {
        const bool cmp = std::string(c.op) == "Equal" || std::string(c.op) == "Less" ||
                         std::string(c.op) == "Greater";
        for (DType dt : kFloatTypes) {
            // Every pattern in f32; one per launch path in the 16-bit types.
            for (const auto& s : dt == DType::f32 ? bin_shapes() : bin_shapes_short()) {
                const std::string what = std::string(c.op) + " " + dt_name(dt) + " " +
                                         dims_str(s.a) + " . " + dims_str(s.b) + " (" + s.path +
                                         ")";
                // Comparisons: quantized values so that ties occur (and compare exactly).
                const Tensor a = cmp ? rand_quantized(dt, s.a, c.alo, c.ahi, 0.25f)
                                     : rand_tensor(dt, s.a, c.alo, c.ahi);
                const Tensor b = cmp ? rand_quantized(dt, s.b, c.blo, c.bhi, 0.25f)
                                     : rand_tensor(dt, s.b, c.blo, c.bhi);
                const Tolerance tol = cmp ? kExact : c.trans ? trans_tol(dt) : tol_for(dt);
                check_op(what, c.op, {{"a", a}, {"b", b}}, {}, tol);
            }
        }
    }
}

TEST_CASE("cuda elementwise: binary with a constant operand", "[cuda]") {
    for (DType dt : kFloatTypes) {
        check_op("Add constant row " + dt_name(dt), "Add",
                 {{"a", rand_tensor(dt, {5, 24})}, {"b", rand_tensor(dt, {24}), true}}, {},
                 tol_for(dt));
        check_op("Mul constant scalar " + dt_name(dt), "Mul",
                 {{"a", rand_tensor(dt, {5, 23})}, {"b", rand_tensor(dt, {}), true}}, {},
                 tol_for(dt));
        check_op("Div constant A " + dt_name(dt), "Div",
                 {{"a", rand_tensor(dt, {}, 1, 2), true}, {"b", rand_tensor(dt, {9, 7}, 0.5f, 2)}},
                 {}, tol_for(dt));
    }
}

TEST_CASE("cuda elementwise: Pow with negative bases and integral exponents", "[cuda]") {
    for (DType dt : kFloatTypes) {
        check_op("Pow negative base " + dt_name(dt), "Pow",
                 {{"a", rand_tensor(dt, {6, 19}, -3, 3)},
                  {"b", rand_quantized(dt, {19}, -2, 3, 1.f)}},
                 {}, trans_tol(dt));
        check_op("Pow scalar exponent 2 " + dt_name(dt), "Pow",
                 {{"a", rand_tensor(dt, {6, 19}, -3, 3)}, {"b", float_tensor(dt, {}, {2.0}), true}},
                 {}, trans_tol(dt));
        check_op("Pow scalar exponent 0.5 " + dt_name(dt), "Pow",
                 {{"a", rand_tensor(dt, {6, 19}, 0, 3)}, {"b", float_tensor(dt, {}, {0.5})}}, {},
                 trans_tol(dt));
    }
    // A mixed exponent type is declined (the node runs on the CPU) and still matches.
    check_op("Pow f32 ^ i64 (declined -> CPU)", "Pow",
             {{"a", rand_tensor(DType::f32, {4, 5}, 0.5f, 2)},
              {"b", int_tensor(DType::i64, {5}, {0, 1, 2, 3, -1})}},
             {}, trans_tol(DType::f32), 17, 1, "", /*expect_cuda=*/false);
}

TEST_CASE("cuda elementwise: binary special values (all pairs)", "[cuda]") {
    // a[i, j] = s[i], b[i, j] = s[j]: every pair of special values, as full tensors and through
    // the broadcast path ([S,1] against [S]).
    const auto& s = specials();
    const auto n = static_cast<int64_t>(s.size());
    std::vector<double> va, vb;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            va.push_back(s[static_cast<std::size_t>(i)]);
            vb.push_back(s[static_cast<std::size_t>(j)]);
        }
    for (DType dt : kFloatTypes) {
        const Tensor fa = float_tensor(dt, {n, n}, va);
        const Tensor fb = float_tensor(dt, {n, n}, vb);
        const Tensor col = float_tensor(dt, {n, 1}, s);
        const Tensor row = float_tensor(dt, {n}, s);
        for (const char* op :
             {"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "Sum", "Mean"}) {
            check_op(std::string(op) + " specials full " + dt_name(dt), op, {{"a", fa}, {"b", fb}},
                     {}, kExact);
            check_op(std::string(op) + " specials [S,1] . [S] " + dt_name(dt), op,
                     {{"a", col}, {"b", row}}, {}, kExact);
        }
        // Scalar NaN / Inf operands through the scalar path.
        for (double v : {std::numeric_limits<double>::quiet_NaN(),
                         -std::numeric_limits<double>::infinity(), -0.0}) {
            const Tensor sc = float_tensor(dt, {}, {v});
            for (const char* op : {"Add", "Max", "Min"}) {
                check_op(std::string(op) + " specials . scalar " + std::to_string(v) + " " +
                             dt_name(dt),
                         op, {{"a", row}, {"b", sc}}, {}, kExact);
                check_op(std::string(op) + " scalar " + std::to_string(v) + " . specials " +
                             dt_name(dt),
                         op, {{"a", sc}, {"b", row}}, {}, kExact);
            }
        }
    }
}

TEST_CASE("cuda elementwise: integer binary ops (int32, int64, wrap-around)", "[cuda]") {
    for (DType dt : {DType::i32, DType::i64}) {
        const std::vector<int64_t> edge = {std::numeric_limits<std::int32_t>::max(),
                                           std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min(),
                                           -1, 0, 1, 3037000500LL};
        const auto ne = static_cast<int64_t>(edge.size());
        std::vector<int64_t> ea, eb;
        for (int64_t i = 0; i < ne; ++i)
            for (int64_t j = 0; j < ne; ++j) {
                ea.push_back(edge[static_cast<std::size_t>(i)]);
                eb.push_back(edge[static_cast<std::size_t>(j)]);
            }
        const Tensor xa = int_tensor(dt, {ne, ne}, ea);
        const Tensor xb = int_tensor(dt, {ne, ne}, eb);
        for (const char* op : {"Add", "Sub", "Mul", "Max", "Min", "Sum", "Mean", "Equal", "Less",
                               "Greater"}) {
            const std::string t = std::string(op) + " " + dt_name(dt);
            check_op(t + " edge pairs", op, {{"a", xa}, {"b", xb}}, {}, kExact);
            for (const auto& s : bin_shapes_short()) {
                check_op(t + " " + dims_str(s.a) + " . " + dims_str(s.b) + " (" + s.path + ")", op,
                         {{"a", rand_ints(dt, s.a, -50, 50)}, {"b", rand_ints(dt, s.b, -50, 50)}},
                         {}, kExact);
            }
        }
    }
}

TEST_CASE("cuda elementwise: variadic Max/Min/Sum/Mean with 1, 3 and 4 inputs", "[cuda]") {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
        const bool fl = dt != DType::i32 && dt != DType::i64;
        auto mk = [&](const std::vector<int64_t>& dims) {
            return fl ? rand_tensor(dt, dims, -4, 4) : rand_ints(dt, dims, -100, 100);
        };
        for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
            const std::string t = std::string(op) + " " + dt_name(dt);
            check_op(t + " 1 input", op, {{"a", mk({5, 7})}}, {}, kExact);
            check_op(t + " 3 inputs [4,5] [5] [4,1]", op,
                     {{"a", mk({4, 5})}, {"b", mk({5})}, {"c", mk({4, 1})}}, {},
                     fl ? tol_for(dt) : kExact);
            check_op(t + " 3 inputs, the first broadcast [5] [4,5] []", op,
                     {{"a", mk({5})}, {"b", mk({4, 5})}, {"c", mk({})}}, {},
                     fl ? tol_for(dt) : kExact);
            check_op(t + " 4 inputs same shape", op,
                     {{"a", mk({3, 37})}, {"b", mk({3, 37})}, {"c", mk({3, 37})}, {"d", mk({3, 37})}},
                     {}, fl ? tol_for(dt) : kExact);
            check_op(t + " empty", op, {{"a", mk({0, 3})}, {"b", mk({3})}}, {}, kExact);
        }
    }
}

TEST_CASE("cuda elementwise: binary odd sizes and empty tensors", "[cuda]") {
    for (DType dt : kFloatTypes) {
        for (int64_t n : {1, 3, 7, 9, 17, 33, 1001}) {
            check_op("Add " + dt_name(dt) + " n=" + std::to_string(n), "Add",
                     {{"a", rand_tensor(dt, {n})}, {"b", rand_tensor(dt, {n})}}, {}, tol_for(dt));
            check_op("Mul row " + dt_name(dt) + " [3," + std::to_string(n) + "] . [n]", "Mul",
                     {{"a", rand_tensor(dt, {3, n})}, {"b", rand_tensor(dt, {n})}}, {}, tol_for(dt));
            check_op("Less scalar " + dt_name(dt) + " n=" + std::to_string(n), "Less",
                     {{"a", rand_tensor(dt, {n})}, {"b", rand_tensor(dt, {})}}, {}, kExact);
        }
        check_op("Add empty [0,4] . [4] " + dt_name(dt), "Add",
                 {{"a", rand_tensor(dt, {0, 4})}, {"b", rand_tensor(dt, {4})}}, {}, kExact);
        check_op("Add empty [3,0] . [3,1] " + dt_name(dt), "Add",
                 {{"a", rand_tensor(dt, {3, 0})}, {"b", rand_tensor(dt, {3, 1})}}, {}, kExact);
        check_op("Equal empty [0] . [] " + dt_name(dt), "Equal",
                 {{"a", rand_tensor(dt, {0})}, {"b", rand_tensor(dt, {})}}, {}, kExact);
    }
}

// ---- Where ------------------------------------------------------------------------------------

TEST_CASE("cuda elementwise: Where with broadcasting, every element size", "[cuda]") {
    struct WShape {
        std::vector<int64_t> c, x, y;
        const char* path;
    };
    const std::vector<WShape> shapes = {
        {{5, 67}, {5, 67}, {5, 67}, "same shape"},
        {{67}, {5, 67}, {}, "row cond, scalar Y"},
        {{4, 1, 6}, {1, 5, 1}, {6}, "all three broadcast"},
        {{}, {3, 7}, {3, 7}, "scalar cond"},
        {{2, 3, 1, 4}, {3, 5, 1}, {2, 1, 1, 1}, "rank 4"},
        {{0, 3}, {3}, {0, 3}, "empty"},
    };
    auto mk = [](DType dt, const std::vector<int64_t>& dims) {
        switch (dt) {
            case DType::i64: return rand_ints(dt, dims, -1000000, 1000000);
            case DType::i32: return rand_ints(dt, dims, -1000, 1000);
            case DType::u8: return rand_ints(dt, dims, 0, 255);
            case DType::boolean: return rand_bool(dims);
            default: return rand_tensor(dt, dims, -3, 3);
        }
    };
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64, DType::i32,
                     DType::u8, DType::boolean}) {
        for (const auto& s : shapes) {
            check_op("Where " + dt_name(dt) + " " + dims_str(s.c) + " " + dims_str(s.x) + " " +
                         dims_str(s.y) + " (" + s.path + ")",
                     "Where", {{"c", rand_bool(s.c)}, {"x", mk(dt, s.x)}, {"y", mk(dt, s.y)}}, {},
                     kExact);
        }
    }
    // NaN and Inf are moved, not computed.
    const Tensor sp = float_tensor(DType::f32, {static_cast<int64_t>(specials().size())}, specials());
    check_op("Where specials", "Where",
             {{"c", rand_bool({static_cast<int64_t>(specials().size())})}, {"x", sp},
              {"y", rand_tensor(DType::f32, {})}},
             {}, kExact);
}

// ---- Cast -------------------------------------------------------------------------------------

namespace {

const std::vector<DType> kCastTypes = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32,
                                       DType::i64, DType::i8,  DType::u8,   DType::boolean};

/// Source values for Cast: floats cover rounding, truncation toward zero, saturation, NaN, Inf,
/// -0 and f16 overflow/rounding boundaries; integers cover every target's wrap-around.
Tensor cast_source(DType dt) {
    static const std::vector<double> fv = {
        0.0,    -0.0,   1.0,    -1.0,  2.5,    -2.5,    0.49,   -0.99, 127.0,  128.0,
        255.0,  256.0,  -129.0, 1e5,   -1e5,   3e9,     -3e9,   1e19,  -1e19,  65504.0,
        65519.0, 65520.0, 1e-3, 300.7, 1e-8,   2049.0,  16777217.0,
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(), 1e-40, 4.0000001, 1.00048828125 /*f16 tie*/};
    static const std::vector<int64_t> iv = {
        0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 1000, -1000, 65504, 65520, 70000,
        2049, 16777217, 2147483647, -2147483648LL, 4294967296LL, 9007199254740993LL,
        std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
        -9007199254740993LL, 300, -300, 33, 3, 4, 5, 6, 7, 8};
    REQUIRE(fv.size() == iv.size());
    const std::vector<int64_t> dims{static_cast<int64_t>(fv.size())};
    if (is_floating(dt)) return float_tensor(dt, dims, fv);
    return int_tensor(dt, dims, iv);
}

}  // namespace

TEST_CASE("cuda elementwise: Cast matrix (9 x 9 types, special values)", "[cuda]") {
    for (DType from : kCastTypes) {
        const Tensor x = cast_source(from);
        for (DType to : kCastTypes) {
            check_op("Cast " + dt_name(from) + " -> " + dt_name(to), "Cast", {{"x", x}},
                     {{"to", attr_i(to_onnx_dtype(to))}}, kExact);
        }
    }
}

TEST_CASE("cuda elementwise: Cast odd sizes, empty, CastLike", "[cuda]") {
    for (int64_t n : {1, 3, 7, 17, 1001}) {
        check_op("Cast f32 -> f16 n=" + std::to_string(n), "Cast",
                 {{"x", rand_tensor(DType::f32, {n}, -70000, 70000)}},
                 {{"to", attr_i(to_onnx_dtype(DType::f16))}}, kExact);
        check_op("Cast f32 -> i64 n=" + std::to_string(n), "Cast",
                 {{"x", rand_tensor(DType::f32, {n}, -1e4f, 1e4f)}},
                 {{"to", attr_i(to_onnx_dtype(DType::i64))}}, kExact);
        check_op("Cast u8 -> f64 n=" + std::to_string(n), "Cast",
                 {{"x", rand_ints(DType::u8, {n}, 0, 255)}},
                 {{"to", attr_i(to_onnx_dtype(DType::f64))}}, kExact);
        check_op("Cast bool -> bf16 n=" + std::to_string(n), "Cast", {{"x", rand_bool({n})}},
                 {{"to", attr_i(to_onnx_dtype(DType::bf16))}}, kExact);
    }
    check_op("Cast empty f16 -> f32", "Cast", {{"x", rand_tensor(DType::f16, {0, 7})}},
             {{"to", attr_i(to_onnx_dtype(DType::f32))}}, kExact);
    check_op("CastLike f32 -> bf16", "CastLike",
             {{"x", rand_tensor(DType::f32, {5, 9}, -10, 10)}, {"like", rand_tensor(DType::bf16, {1})}},
             {}, kExact);
    check_op("CastLike i64 -> f16 (like constant)", "CastLike",
             {{"x", rand_ints(DType::i64, {5, 9}, -70000, 70000)},
              {"like", rand_tensor(DType::f16, {}), true}},
             {}, kExact);
}

// ---- large (grid-stride loops) ------------------------------------------------------------------

TEST_CASE("cuda elementwise: 4M-element cases", "[cuda]") {
    const int64_t m4 = int64_t{1} << 22;
    check_op("Sigmoid bf16 4M+3", "Sigmoid", {{"x", rand_tensor(DType::bf16, {m4 + 3}, -8, 8)}}, {},
             trans_tol(DType::bf16));
    check_op("Gelu f32 4M", "Gelu", {{"x", rand_tensor(DType::f32, {m4}, -3, 3)}}, {},
             trans_tol(DType::f32, 2e-6), 20);
    check_op("Add f32 [4,1024,1024] . [1024] (row)", "Add",
             {{"a", rand_tensor(DType::f32, {4, 1024, 1024})},
              {"b", rand_tensor(DType::f32, {1024})}},
             {}, tol_for(DType::f32));
    check_op("Mul f16 [2048,2048] . [2048,1] (general)", "Mul",
             {{"a", rand_tensor(DType::f16, {2048, 2048})},
              {"b", rand_tensor(DType::f16, {2048, 1})}},
             {}, tol_for(DType::f16));
    check_op("Max f32 4M+1 . scalar", "Max",
             {{"a", rand_tensor(DType::f32, {m4 + 1})}, {"b", rand_tensor(DType::f32, {})}}, {},
             kExact);
    check_op("Where f32 [1,2048] [2048,2048] [] (general)", "Where",
             {{"c", rand_bool({1, 2048})},
              {"x", rand_tensor(DType::f32, {2048, 2048})},
              {"y", rand_tensor(DType::f32, {})}},
             {}, kExact);
    check_op("Cast f32 -> f16 4M+5", "Cast", {{"x", rand_tensor(DType::f32, {m4 + 5}, -100, 100)}},
             {{"to", attr_i(to_onnx_dtype(DType::f16))}}, kExact);
}
