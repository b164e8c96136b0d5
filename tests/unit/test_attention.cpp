// com.dsinfer MultiHeadAttention and the fuse_attention pass.
//
// Kernel: the fast kernel (backend "cpu", src/cpu/fast/fast_attention.cpp) against the reference
// kernel (backend "reference") through one-node graphs, values of Q/K/V uniform in [-1, 1]:
// |fast - reference| <= 1e-5 + 1e-5 |reference| per element (different summation order and
// the fast exp); fully masked rows are exact zeros in both; NaN in a row's scores gives a NaN
// row in both. The fast kernel is bitwise identical at 1, 2 and 3 threads.
// Pass: a 12-layer BERT-like encoder built here, its attention blocks written in the forms
// exporters produce (constant and Shape->Gather->Concat reshapes, Kᵀ in one or two transposes,
// Div/Mul on the scores or Mul on Q and Kᵀ, mask on either side of the Add or none): the pass
// fires 12 times and the optimized engine matches the unoptimized one within 1e-4 relative
// (|a - b| <= 1e-4 max(1, |b|));
// near misses (wrong perm, wrong softmax axis, an intermediate read elsewhere, mismatched heads,
// a non-constant scale) are left alone.
// bfloat16 (EngineOptions::precision bf16 on a CPU with AVX512_BF16): Q, K, P and V rounded to
// bfloat16 in the two products, so |fast - reference| <= 1/64 per element with Q/K/V in [-1, 1]
// (each product's operands carry 2^-9 relative rounding); bitwise identical at 1, 2 and 3
// threads; skipped, and said so, without AVX512_BF16.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <dsinfer/dsinfer.hpp>

#include "cpu/fast/fast_common.hpp"
#include "kernels/sgemm.hpp"

using namespace dsinfer;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Attribute attr_i(std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    return a;
}
Attribute attr_f(float v) {
    Attribute a;
    a.kind = AttrKind::f;
    a.f = v;
    return a;
}
Attribute attr_ints(std::vector<std::int64_t> v) {
    Attribute a;
    a.kind = AttrKind::ints;
    a.ints = std::move(v);
    return a;
}

std::mt19937& rng() {
    static std::mt19937 r(20261129u);
    return r;
}

Tensor uniform(const Shape& s, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::empty(DType::f32, s);
    std::uniform_real_distribution<float> u(lo, hi);
    for (auto& v : t.span<float>()) v = u(rng());
    return t;
}

// ---- the kernel -------------------------------------------------------------------------------

struct MhaCase {
    std::int64_t b, sq, sk, heads, dh, dv;
    std::vector<std::int64_t> mask_shape;  // empty: no mask
    std::optional<float> scale;
};

struct MhaInputs {
    Tensor q, k, v, mask;
};

Graph mha_graph(const MhaInputs& in, std::int64_t heads, std::optional<float> scale,
                std::optional<std::int64_t> heads_attr = std::nullopt, bool declared = true) {
    Graph g;
    g.opset_imports = {{"", 17}, {"com.dsinfer", 1}};
    std::vector<ValueId> ids;
    const char* names[4] = {"Q", "K", "V", "Mask"};
    const Tensor* ts[4] = {&in.q, &in.k, &in.v, &in.mask};
    for (int i = 0; i < 4; ++i) {
        if (ts[i]->is_null()) continue;
        ids.push_back(declared ? g.add_value(names[i], ts[i]->dtype(),
                                             SymbolicShape::from(ts[i]->shape()))
                               : g.add_value(names[i]));
        g.inputs.push_back(ids.back());
    }
    const ValueId y = g.add_value("Y");
    g.outputs = {y};
    Node& n = g.add_node("MultiHeadAttention", ids, {y}, "mha");
    n.domain = "com.dsinfer";
    n.attributes.emplace_back("num_heads", attr_i(heads_attr.value_or(heads)));
    if (scale) n.attributes.emplace_back("scale", attr_f(*scale));
    return g;
}

std::vector<NamedTensor> feeds_of(const MhaInputs& in) {
    std::vector<NamedTensor> f{{"Q", in.q}, {"K", in.k}, {"V", in.v}};
    if (!in.mask.is_null()) f.push_back({"Mask", in.mask});
    return f;
}

Tensor run_mha(const Graph& g, const MhaInputs& in, const std::string& backend, int threads = 2) {
    EngineOptions o;
    o.backends = {backend};
    o.num_threads = threads;
    o.optimization_level = 0;
    auto e = InferenceEngine::compile(g, o);
    return e.run(feeds_of(in)).at(0).tensor;
}

Tensor run_mha_bf16(const Graph& g, const MhaInputs& in, int threads = 2) {
    EngineOptions o;
    o.backends = {"cpu"};
    o.num_threads = threads;
    o.optimization_level = 0;
    o.precision = Precision::bf16;
    auto e = InferenceEngine::compile(g, o);
    return e.run(feeds_of(in)).at(0).tensor;
}

Status try_mha(const Graph& g, const MhaInputs& in, const std::string& backend) {
    EngineOptions o;
    o.backends = {backend};
    o.num_threads = 2;
    o.optimization_level = 0;
    auto e = InferenceEngine::compile(g, o);
    std::vector<NamedTensor> out;
    return e.try_run(feeds_of(in), out);
}

/// A mask of `shape`: 0 or -10000 at random, -inf on some entries, and (when it has a query
/// dim) one row fully -inf.
Tensor random_mask(const std::vector<std::int64_t>& shape) {
    Shape s;
    for (auto d : shape) s.push_back(d);
    Tensor m = Tensor::zeros(DType::f32, s);
    std::uniform_int_distribution<int> pick(0, 9);
    for (auto& v : m.span<float>()) {
        const int r = pick(rng());
        v = r == 0 ? -10000.f : r == 1 ? -kInf : 0.f;
    }
    if (shape.size() >= 2 && shape[shape.size() - 2] > 1) {
        const std::int64_t sk = shape.back();
        for (std::int64_t j = 0; j < sk; ++j) m.data<float>()[sk + j] = -kInf;  // query row 1
    }
    return m;
}

MhaInputs inputs_of(const MhaCase& c) {
    MhaInputs in;
    in.q = uniform({c.b, c.sq, c.heads * c.dh});
    in.k = uniform({c.b, c.sk, c.heads * c.dh});
    in.v = uniform({c.b, c.sk, c.heads * c.dv});
    if (!c.mask_shape.empty()) in.mask = random_mask(c.mask_shape);
    return in;
}

std::string describe(const MhaCase& c) {
    return "B " + std::to_string(c.b) + " Sq " + std::to_string(c.sq) + " Sk " +
           std::to_string(c.sk) + " H " + std::to_string(c.heads) + " Dh " + std::to_string(c.dh) +
           " Dv " + std::to_string(c.dv) + " mask rank " + std::to_string(c.mask_shape.size());
}

/// Max |got - want| / (1e-5 + 1e-5 |want|) (<= 1 passes); NaN must match NaN.
double tolerance_ratio(const Tensor& got, const Tensor& want) {
    REQUIRE(got.shape() == want.shape());
    double worst = 0;
    for (std::int64_t i = 0; i < got.num_elements(); ++i) {
        const float a = got.data<float>()[i], b = want.data<float>()[i];
        if (std::isnan(a) || std::isnan(b)) {
            if (std::isnan(a) != std::isnan(b)) return std::numeric_limits<double>::infinity();
            continue;
        }
        worst = std::max(worst, std::abs(static_cast<double>(a) - b) / (1e-5 + 1e-5 * std::abs(b)));
    }
    return worst;
}

}  // namespace

TEST_CASE("MultiHeadAttention: fast kernel matches the reference", "[attention]") {
    const std::vector<MhaCase> cases = {
        {2, 16, 16, 4, 16, 16, {2, 1, 1, 16}, std::nullopt},  // BERT mask form
        {1, 7, 33, 3, 5, 7, {1, 3, 7, 33}, std::nullopt},     // Sq != Sk, Dh and Dv odd
        {3, 9, 4, 5, 12, 24, {}, 0.3f},                        // no mask, explicit scale, Dv != Dh
        {2, 130, 257, 2, 64, 64, {130, 257}, std::nullopt},   // several key tiles, 2-D mask
        {1, 1, 200, 12, 64, 64, {1, 12, 1, 1}, std::nullopt}, // one query, per-head mask
        {2, 70, 70, 1, 1, 3, {2, 1, 70, 70}, std::nullopt},   // head size 1
        {1, 2048, 2048, 1, 64, 64, {1, 1, 1, 2048}, std::nullopt},  // long sequence
        {2, 3, 0, 2, 4, 4, {}, std::nullopt},                  // no keys: zeros
        {2, 0, 5, 2, 4, 4, {2, 1, 1, 5}, std::nullopt},       // no queries
    };
    for (const auto& c : cases) {
        INFO(describe(c));
        const MhaInputs in = inputs_of(c);
        const Graph g = mha_graph(in, c.heads, c.scale);
        const Tensor want = run_mha(g, in, "reference");
        const Tensor got = run_mha(g, in, "cpu");
        CHECK(got.shape() == Shape{c.b, c.sq, c.heads * c.dv});
        CHECK(tolerance_ratio(got, want) <= 1.0);
        // Determinism across thread counts.
        const Tensor one = run_mha(g, in, "cpu", 1);
        const Tensor three = run_mha(g, in, "cpu", 3);
        CHECK(std::memcmp(one.raw_data(), got.raw_data(), got.num_bytes()) == 0);
        CHECK(std::memcmp(three.raw_data(), got.raw_data(), got.num_bytes()) == 0);
    }
}

TEST_CASE("MultiHeadAttention: the bfloat16 tile loops stay within bfloat16 rounding",
          "[attention]") {
    if (!dsinfer::detail::sgemm_bf16_dot(dsinfer::detail::fast::active_isa())) {
        WARN("skipped: this CPU (or DSINFER_MAX_CPU_ISA) has no AVX512_BF16 at the AVX-512 level");
        return;
    }
    const std::vector<MhaCase> cases = {
        {2, 16, 16, 4, 16, 16, {2, 1, 1, 16}, std::nullopt},  // BERT mask form
        {1, 7, 33, 3, 5, 7, {1, 3, 7, 33}, std::nullopt},     // Dh, Dv and Sk odd
        {3, 9, 4, 5, 12, 24, {}, 0.3f},                        // no mask, Dv != Dh
        {2, 130, 257, 2, 64, 64, {130, 257}, std::nullopt},   // several key tiles, odd tail
        {1, 1, 200, 12, 64, 64, {1, 12, 1, 1}, std::nullopt}, // one query
        {2, 70, 71, 1, 1, 3, {2, 1, 70, 71}, std::nullopt},   // head size 1
        {8, 128, 128, 12, 64, 64, {8, 1, 1, 128}, std::nullopt},  // BERT-base's attention
    };
    double worst_seen = 0;
    for (const auto& c : cases) {
        INFO(describe(c));
        const MhaInputs in = inputs_of(c);
        const Graph g = mha_graph(in, c.heads, c.scale);
        const Tensor want = run_mha(g, in, "reference");
        const Tensor f32 = run_mha(g, in, "cpu");
        const Tensor got = run_mha_bf16(g, in);
        REQUIRE(got.shape() == want.shape());
        double worst = 0;
        bool differs = false;
        for (std::int64_t i = 0; i < got.num_elements(); ++i) {
            const float a = got.data<float>()[i], b = want.data<float>()[i];
            REQUIRE(std::isnan(a) == std::isnan(b));
            if (std::isnan(a)) continue;
            worst = std::max(worst, std::abs(static_cast<double>(a) - b));
            differs = differs || a != f32.data<float>()[i];
        }
        CHECK(worst <= 1.0 / 64);
        CHECK(differs);  // the bfloat16 loops ran, not the float32 ones
        worst_seen = std::max(worst_seen, worst);
        for (int threads : {1, 3}) {
            const Tensor other = run_mha_bf16(g, in, threads);
            CHECK(std::memcmp(other.raw_data(), got.raw_data(), got.num_bytes()) == 0);
        }
    }
    WARN("worst |bf16 - reference| over the cases: " << worst_seen);
}

TEST_CASE("MultiHeadAttention: fully masked rows are zeros, NaN scores give NaN", "[attention]") {
    const MhaCase c{1, 4, 150, 2, 8, 8, {}, std::nullopt};
    MhaInputs in = inputs_of(c);
    in.mask = Tensor::zeros(DType::f32, {1, 2, 4, 150});
    float* m = in.mask.data<float>();
    for (std::int64_t j = 0; j < 150; ++j) {
        m[0 * 150 + j] = -kInf;                    // head 0, query 0: every key masked
        m[(4 + 2) * 150 + j] = j < 140 ? -kInf : 0.f;  // head 1, query 2: only the last tile live
    }
    in.q.data<float>()[3 * 16 + 9] = std::nanf("");  // query 3, head 1: NaN scores
    const Graph g = mha_graph(in, 2, std::nullopt);
    for (const char* backend : {"reference", "cpu"}) {
        INFO(backend);
        const Tensor y = run_mha(g, in, backend);
        const float* yv = y.data<float>();
        for (int e = 0; e < 8; ++e) {
            CHECK(yv[0 * 16 + e] == 0.f);               // query 0, head 0
            CHECK(std::isnan(yv[3 * 16 + 8 + e]));      // query 3, head 1
            CHECK(std::isfinite(yv[2 * 16 + 8 + e]));   // query 2, head 1
        }
        // Query 2 of head 1 attends to the last 10 keys only: a convex combination of their V.
        for (int e = 0; e < 8; ++e) {
            float lo = kInf, hi = -kInf;
            for (int j = 140; j < 150; ++j) {
                const float vv = in.v.data<float>()[j * 16 + 8 + e];
                lo = std::min(lo, vv);
                hi = std::max(hi, vv);
            }
            CHECK(yv[2 * 16 + 8 + e] >= lo - 1e-6f);
            CHECK(yv[2 * 16 + 8 + e] <= hi + 1e-6f);
        }
    }
    CHECK(tolerance_ratio(run_mha(g, in, "cpu"), run_mha(g, in, "reference")) <= 1.0);
}

TEST_CASE("MultiHeadAttention: bad inputs are typed errors naming the input", "[attention]") {
    const MhaCase c{2, 5, 6, 2, 4, 4, {2, 1, 1, 6}, std::nullopt};
    struct Bad {
        const char* what;
        std::function<void(MhaInputs&)> mutate;
        ErrorCode code;
        const char* message;
    };
    const std::vector<Bad> bad = {
        {"K width", [](MhaInputs& in) { in.k = uniform({2, 6, 6}); }, ErrorCode::invalid_argument,
         "input K"},
        {"V length", [](MhaInputs& in) { in.v = uniform({2, 5, 8}); }, ErrorCode::invalid_argument,
         "input V"},
        {"V batch", [](MhaInputs& in) { in.v = uniform({3, 6, 8}); }, ErrorCode::invalid_argument,
         "input V"},
        {"Q rank", [](MhaInputs& in) { in.q = uniform({10, 8}); }, ErrorCode::invalid_argument,
         "input Q"},
        {"Q heads", [](MhaInputs& in) { in.q = uniform({2, 5, 7}); in.k = uniform({2, 6, 7}); },
         ErrorCode::invalid_argument, "input Q"},
        {"Mask shape", [](MhaInputs& in) { in.mask = uniform({2, 1, 5, 5}); },
         ErrorCode::invalid_argument, "input Mask"},
        {"Mask rank", [](MhaInputs& in) { in.mask = uniform({1, 2, 1, 1, 6}); },
         ErrorCode::invalid_argument, "input Mask"},
        {"Mask type", [](MhaInputs& in) { in.mask = Tensor::zeros(DType::f64, {2, 1, 1, 6}); },
         ErrorCode::invalid_argument, "input Mask"},
        {"Q type", [](MhaInputs& in) { in.q = Tensor::zeros(DType::i32, {2, 5, 8}); },
         ErrorCode::unsupported, "input Q"},
    };
    for (const auto& b : bad) {
        for (const char* backend : {"reference", "cpu"}) {
            INFO(b.what << " on " << backend);
            MhaInputs in = inputs_of(c);
            b.mutate(in);
            // Shapes known only at run: the run's error.
            const Status st = try_mha(mha_graph(in, 2, std::nullopt, std::nullopt, false), in, backend);
            CHECK(st.code() == b.code);
            CHECK_THAT(st.message(), Catch::Contains(b.message));
            // Declared shapes: the load's (load-time inference) error.
            try {
                (void)try_mha(mha_graph(in, 2, std::nullopt), in, backend);
                FAIL("loaded");
            } catch (const Error& e) {
                CHECK(e.code() == (b.code == ErrorCode::unsupported ? ErrorCode::unsupported
                                                                    : ErrorCode::invalid_model));
                CHECK_THAT(e.message(), Catch::Contains(b.message));
            }
        }
    }
    // num_heads: missing or not positive is an invalid model.
    MhaInputs in = inputs_of(c);
    for (std::int64_t h : {0, -2}) {
        Graph g = mha_graph(in, 2, std::nullopt, h);
        EngineOptions o;
        o.optimization_level = 0;
        try {
            (void)InferenceEngine::compile(std::move(g), o);
            FAIL("num_heads " << h << " accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_model);
            CHECK_THAT(e.message(), Catch::Contains("num_heads"));
        }
    }
}

// ---- the pass ---------------------------------------------------------------------------------

namespace {

/// How one attention block is written.
struct Form {
    bool dynamic_split = false;  // Shape->Gather->Unsqueeze->Concat instead of [0,0,H,Dh]
    bool dynamic_merge = false;
    bool two_transposes = false;  // Kᵀ as Transpose[0,2,1,3] then Transpose[0,1,3,2]
    int scale = 0;                // 0: Div(scores, sqrt(Dh)); 1: Mul(scores, 1/sqrt(Dh));
                                  // 2: Mul(Qh, Dh^-1/4) and Mul(Kt, Dh^-1/4); 3: Mul(0.125, scores)
    int mask = 0;                 // 0: Add(scores, mask); 1: Add(mask, scores); 2: none
    // Near misses.
    bool bad_perm = false;        // Q split transposed with [0,2,3,1]
    std::int64_t softmax_axis = -1;
    bool probs_output = false;    // the probabilities are also a graph output
    bool k_heads_differ = false;  // K split into H/2 heads of 2·Dh
    bool runtime_scale = false;   // the scores divided by a graph input
};

struct Bert {
    Graph g;
    int counter = 0;
    std::int64_t hidden, heads, head;

    ValueId value(const std::string& base) { return g.add_value(base + std::to_string(++counter)); }
    ValueId constant(const std::string& base, Tensor t) {
        return g.add_initializer(base + std::to_string(++counter), std::move(t));
    }
    ValueId ints(std::vector<std::int64_t> v) {
        return constant("c", Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v));
    }
    ValueId op(const std::string& type, std::vector<ValueId> ins,
               std::vector<std::pair<std::string, Attribute>> attrs = {}) {
        const ValueId out = value(type);
        g.add_node(type, std::move(ins), {out}, type + std::to_string(counter)).attributes =
            std::move(attrs);
        return out;
    }
    ValueId linear(ValueId x, std::int64_t in, std::int64_t out) {
        const ValueId w = constant("w", uniform({in, out}, -0.3f, 0.3f));
        const ValueId b = constant("b", uniform({out}, -0.1f, 0.1f));
        return op("Add", {op("MatMul", {x, w}), b});
    }
    ValueId dim_of(ValueId t, std::int64_t i) {
        const ValueId s = op("Shape", {t});
        const ValueId d = op("Gather", {s, constant("i", Tensor::scalar<std::int64_t>(i))},
                             {{"axis", attr_i(0)}});
        return op("Unsqueeze", {d, ints({0})});
    }
    ValueId split(ValueId x, std::int64_t h, std::int64_t d, bool dynamic) {
        const ValueId shape = dynamic ? op("Concat", {dim_of(x, 0), dim_of(x, 1), ints({h}), ints({d})},
                                           {{"axis", attr_i(0)}})
                                      : ints({0, 0, h, d});
        return op("Reshape", {x, shape});
    }
    ValueId scalar(float v) { return constant("s", Tensor::scalar(v)); }

    /// One attention block + output projection + residual.
    ValueId layer(ValueId x, ValueId mask, ValueId runtime_scale, const Form& f) {
        const ValueId q = linear(x, hidden, hidden), k = linear(x, hidden, hidden),
                      v = linear(x, hidden, hidden);
        const std::int64_t kh = f.k_heads_differ ? heads / 2 : heads;
        ValueId qh = op("Transpose", {split(q, heads, head, f.dynamic_split)},
                        {{"perm", attr_ints(f.bad_perm ? std::vector<std::int64_t>{0, 2, 3, 1}
                                                       : std::vector<std::int64_t>{0, 2, 1, 3})}});
        ValueId kt;
        const ValueId ks = split(k, kh, hidden / kh, f.dynamic_split);
        if (f.two_transposes) {
            kt = op("Transpose", {op("Transpose", {ks}, {{"perm", attr_ints({0, 2, 1, 3})}})},
                    {{"perm", attr_ints({0, 1, 3, 2})}});
        } else {
            kt = op("Transpose", {ks}, {{"perm", attr_ints({0, 2, 3, 1})}});
        }
        const ValueId vh =
            op("Transpose", {split(v, heads, head, f.dynamic_split)}, {{"perm", attr_ints({0, 2, 1, 3})}});
        const float d = static_cast<float>(head);
        if (f.scale == 2) {
            qh = op("Mul", {qh, scalar(std::pow(d, -0.25f))});
            kt = op("Mul", {kt, scalar(std::pow(d, -0.25f))});
        }
        ValueId s = op("MatMul", {qh, kt});
        if (f.runtime_scale) s = op("Div", {s, runtime_scale});
        else if (f.scale == 0) s = op("Div", {s, scalar(std::sqrt(d))});
        else if (f.scale == 1) s = op("Mul", {s, scalar(1.f / std::sqrt(d))});
        else if (f.scale == 3) s = op("Mul", {scalar(1.f / std::sqrt(d)), s});
        if (f.mask == 0) s = op("Add", {s, mask});
        if (f.mask == 1) s = op("Add", {mask, s});
        const ValueId p = op("Softmax", {s}, {{"axis", attr_i(f.softmax_axis)}});
        if (f.probs_output) g.outputs.push_back(p);
        const ValueId c = op("Transpose", {op("MatMul", {p, vh})}, {{"perm", attr_ints({0, 2, 1, 3})}});
        const ValueId shape = f.dynamic_merge
                                  ? op("Concat", {dim_of(c, 0), dim_of(c, 1), ints({hidden})},
                                       {{"axis", attr_i(0)}})
                                  : ints({0, 0, hidden});
        const ValueId merged = op("Reshape", {c, shape});
        return op("Add", {linear(merged, hidden, hidden), x});
    }
};

/// An encoder of `forms.size()` layers over x [batch, seq, hidden] with an additive mask
/// [batch, 1, 1, seq] (and a scalar input "scale" when a form uses it).
Graph bert_graph(const std::vector<Form>& forms, std::int64_t hidden = 32, std::int64_t heads = 4) {
    Bert b;
    b.hidden = hidden;
    b.heads = heads;
    b.head = hidden / heads;
    b.g.opset_imports = {{"", 13}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::named("seq"), Dim::fixed(hidden)};
    SymbolicShape ms;
    ms.known = true;
    ms.dims = {Dim::named("batch"), Dim::fixed(1), Dim::fixed(1), Dim::named("seq")};
    ValueId x = b.g.add_value("x", DType::f32, xs);
    const ValueId mask = b.g.add_value("mask", DType::f32, ms);
    const ValueId scale = b.g.add_value("scale", DType::f32, SymbolicShape::from(Shape{}));
    b.g.inputs = {x, mask, scale};
    for (const Form& f : forms) x = b.layer(x, mask, scale, f);
    b.g.outputs.insert(b.g.outputs.begin(), x);
    REQUIRE(b.g.sort_topologically().is_ok());
    return b.g;
}

std::vector<NamedTensor> bert_feeds(std::int64_t batch, std::int64_t seq, std::int64_t hidden) {
    Tensor mask = Tensor::zeros(DType::f32, {batch, 1, 1, seq});
    for (std::int64_t b = 1; b < batch; ++b)
        for (std::int64_t j = seq - 3 * b; j < seq; ++j) mask.data<float>()[b * seq + j] = -10000.f;
    return {{"x", uniform({batch, seq, hidden})}, {"mask", mask}, {"scale", Tensor::scalar(2.f)}};
}

int count_ops(const Graph& g, std::string_view op) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.op_type == op ? 1 : 0;
    return n;
}

/// Max |a - b| / max(1, |b|) over all elements (relative, absolute below 1).
double rel_error(const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    double worst = 0;
    for (std::int64_t i = 0; i < a.num_elements(); ++i) {
        const double x = a.data<float>()[i], y = b.data<float>()[i];
        worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
    }
    return worst;
}

std::vector<Form> twelve_forms() {
    std::vector<Form> forms;
    for (int i = 0; i < 12; ++i) {
        Form f;
        f.dynamic_split = (i % 2) == 1;
        f.dynamic_merge = (i % 3) == 2;
        f.two_transposes = (i % 4) >= 2;
        f.scale = i % 4;
        f.mask = i % 3;
        forms.push_back(f);
    }
    return forms;
}

}  // namespace

TEST_CASE("fuse_attention fires on every exporter form of a 12-layer encoder", "[attention]") {
    const Graph g = bert_graph(twelve_forms());
    Graph opt = g;
    const OptimizeReport r = optimize(opt, {.level = 2});
    CHECK(r.count("fuse_attention") == 12);
    CHECK(count_ops(opt, "MultiHeadAttention") == 12);
    CHECK(count_ops(opt, "Softmax") == 0);
    CHECK(count_ops(opt, "Transpose") == 0);
    CHECK(count_ops(opt, "Reshape") == 0);
    for (const Node& n : opt.nodes)
        if (n.op_type == "MultiHeadAttention") {
            CHECK(n.domain == "com.dsinfer");
            const Attribute* s = n.find_attr("scale");
            REQUIRE(s != nullptr);
            CHECK(s->f == Approx(1.0 / std::sqrt(8.0)).epsilon(1e-6));
            CHECK(n.find_attr("num_heads")->i == 4);
        }

    // Without the clean-up passes (eliminate_identity merges the two Kᵀ transposes, constant
    // folding and CSE touch the shape chains) the pass sees the forms as written.
    Graph raw = g;
    OptimizeOptions only;
    only.level = 2;
    only.disabled_passes = {"eliminate_identity", "constant_folding",
                            "eliminate_common_subexpressions", "eliminate_dead_code"};
    CHECK(optimize(raw, only).count("fuse_attention") == 12);

    const auto feeds = bert_feeds(3, 11, 32);
    EngineOptions plain;
    plain.optimization_level = 0;
    const Tensor want = InferenceEngine::compile(g, plain).run(feeds).at(0).tensor;
    for (const char* backend : {"reference", "cpu"}) {
        INFO(backend);
        EngineOptions o;
        o.backends = {backend};
        o.optimization_level = 3;
        auto e = InferenceEngine::compile(g, o);
        CHECK(e.optimization_report().count("fuse_attention") == 12);
        CHECK(rel_error(e.run(feeds).at(0).tensor, want) <= 1e-4);
    }
}

TEST_CASE("fuse_attention leaves near misses alone", "[attention]") {
    struct Miss {
        const char* what;
        Form form;
    };
    std::vector<Miss> misses;
    Form f;
    f.bad_perm = true;
    misses.push_back({"Q transposed with the wrong perm", f});
    f = Form{};
    f.softmax_axis = 2;
    misses.push_back({"softmax over the query axis", f});
    f = Form{};
    f.probs_output = true;
    misses.push_back({"probabilities read elsewhere", f});
    f = Form{};
    f.k_heads_differ = true;
    misses.push_back({"K split into other heads", f});
    f = Form{};
    f.runtime_scale = true;
    misses.push_back({"scale not a constant", f});
    for (const auto& m : misses) {
        INFO(m.what);
        Graph g = bert_graph({m.form, Form{}});  // the second layer is a regular block
        const OptimizeReport r = optimize(g, {.level = 2});
        CHECK(r.count("fuse_attention") == 1);
        CHECK(count_ops(g, "Softmax") == 1);
        CHECK(count_ops(g, "MultiHeadAttention") == 1);
    }
    // The near misses that are valid models still compute what they did.
    for (std::size_t i : {1u, 2u, 4u}) {
        INFO(misses[i].what);
        const Graph g = bert_graph({misses[i].form, Form{}});
        const auto feeds = bert_feeds(2, 6, 32);
        EngineOptions plain;
        plain.optimization_level = 0;
        const auto want = InferenceEngine::compile(g, plain).run(feeds);
        const auto got = InferenceEngine::compile(g).run(feeds);
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < got.size(); ++k)
            CHECK(rel_error(got[k].tensor, want[k].tensor) <= 1e-4);
    }
}
