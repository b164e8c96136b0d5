// NaN and ±Inf through every op family on every CPU backend configuration, compared with the
// reference kernels (issue "Step 7": an engine must not change the meaning of a model; a NaN in
// must not come out as a confident number on one backend and as NaN on another).
//
// Each case is a small graph fed with ordinary values in [-2, 2] and NaN / +Inf / -Inf sprinkled
// in (patterns "nan", "inf", "mixed"), run on the default backends (oneDNN + cpu), on "cpu"
// alone and on "reference". Default and cpu must agree with reference element by element: NaN
// exactly where the reference has NaN, the same infinity where it has one, and finite values
// within 1e-3 * (1 + |ref|) (the cases test propagation, not rounding). A case whose input holds
// a NaN must give the reference at least one NaN, so that no case passes vacuously.
//
// Families: elementwise unary (activations included) and binary with broadcasting; pooling;
// BatchNormalization, LayerNormalization, Softmax/LogSoftmax (opset 13 axis and the coerced
// opset 11 form); MatMul/Gemm (constant and run-time B); Conv/ConvTranspose (1x1, 3x3, strided,
// depthwise); Resize; dsinfer's fused operators FusedConv (with and without the residual Z),
// FusedMatMul and FusedGemm with every fused activation; and level-3 chains, where the
// optimizer fuses Conv/BatchNorm/Add/Relu, values stay in oneDNN's blocked layout between
// kernels, and the convolution runs each of its implementations (oneDNN's direct kernel,
// dsinfer's im2col GEMM on small maps, Winograd on 3x3 maps with >= 16 tiles). Last, the model
// check: models/digits/digits.onnx with one NaN pixel gives NaN probabilities everywhere.
//
// DSINFER_MAX_CPU_ISA=avx2|baseline changes which kernels the default backends pick (oneDNN
// hands constant-B MatMul to dsinfer's packed GEMM without AVX-512); every level must pass.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <dsinfer/dsinfer.hpp>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "dsinfer/ops.hpp"

using namespace dsinfer;
namespace fs = std::filesystem;

namespace {

using Dims = std::vector<std::int64_t>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Pattern { nan, inf, mixed };

const char* pattern_name(Pattern p) {
    return p == Pattern::nan ? "nan" : p == Pattern::inf ? "inf" : "mixed";
}

std::uint32_t mix(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/// Ordinary values in [-2, 2] (seeded), and every `period`-th element (at seeded offsets) a
/// special value of the pattern; period 0: no specials.
Shape shape_of(const Dims& d) {
    Shape s;
    for (std::int64_t x : d) s.push_back(x);
    return s;
}

Tensor data(const Dims& dims, std::uint32_t seed, Pattern p, std::int64_t period) {
    Tensor t = Tensor::zeros(DType::f32, shape_of(dims));
    float* v = t.data<float>();
    const std::int64_t n = t.num_elements();
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t h = mix(static_cast<std::uint32_t>(i) * 2654435761U + seed);
        v[i] = static_cast<float>(h % 4001) / 1000.f - 2.f;
    }
    if (period > 0) {
        std::int64_t k = 0;
        for (std::int64_t i = static_cast<std::int64_t>(mix(seed) % static_cast<std::uint32_t>(period));
             i < n; i += period, ++k) {
            // Jitter the spacing so that specials fall on different SIMD lanes and window
            // positions; the kinds rotate.
            const std::int64_t at = std::min(n - 1, i + static_cast<std::int64_t>(mix(seed + static_cast<std::uint32_t>(k)) % 3));
            switch (p) {
                case Pattern::nan: v[at] = kNaN; break;
                case Pattern::inf: v[at] = k % 2 == 0 ? kInf : -kInf; break;
                case Pattern::mixed: v[at] = k % 3 == 0 ? kNaN : k % 3 == 1 ? kInf : -kInf; break;
            }
        }
    }
    return t;
}

/// Positive values (variances, scales) in [0.5, 1.5].
Tensor positive(const Dims& dims, std::uint32_t seed) {
    Tensor t = data(dims, seed, Pattern::nan, 0);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<float>()[i] = 1.f + t.data<float>()[i] / 4.f;
    return t;
}

/// Weights scaled by 1/sqrt(fan_in) so that activations stay O(1).
Tensor weights(const Dims& dims, std::uint32_t seed, std::int64_t fan_in) {
    Tensor t = data(dims, seed, Pattern::nan, 0);
    const float s = 1.f / std::sqrt(static_cast<float>(fan_in));
    for (std::int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] *= s;
    return t;
}

Tensor ints(const Dims& v) {
    Tensor t = Tensor::zeros(DType::i64, Shape{static_cast<std::int64_t>(v.size())});
    for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
    return t;
}

Tensor floats(const Dims& dims, const std::vector<float>& v) {
    Tensor t = Tensor::zeros(DType::f32, shape_of(dims));
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
    return t;
}

/// A graph under construction with its feeds.
struct Net {
    Graph g;
    std::vector<NamedTensor> feeds;
    bool has_nan_input = false;
    int level = 0;  ///< optimization level

    explicit Net(std::int64_t opset = 17) {
        g.opset_imports.push_back({"", opset});
        g.opset_imports.push_back({kDsinferDomain, 1});
    }
    ValueId input(const std::string& name, const Tensor& t) {
        const ValueId id = g.add_value(name, t.dtype(), SymbolicShape::from(t.shape()));
        g.inputs.push_back(id);
        feeds.push_back({name, t});
        for (std::int64_t i = 0; i < t.num_elements() && !has_nan_input; ++i)
            has_nan_input = t.dtype() == DType::f32 && std::isnan(t.data<float>()[i]);
        return id;
    }
    ValueId constant(const std::string& name, const Tensor& t) { return g.add_initializer(name, t); }
    ValueId value(const std::string& name) { return g.add_value(name); }
    Node& node(const std::string& op, std::vector<ValueId> in, std::vector<ValueId> out) {
        Node& n = g.add_node(op, std::move(in), std::move(out), op + std::to_string(g.nodes.size()));
        if (op.rfind("Fused", 0) == 0) n.domain = kDsinferDomain;
        return n;
    }
    /// One node over fresh values; returns its output.
    ValueId op(const std::string& op, std::vector<ValueId> in, Node** out_node = nullptr) {
        const ValueId y = value("v" + std::to_string(g.values.size()));
        Node& n = node(op, std::move(in), {y});
        if (out_node != nullptr) *out_node = &n;
        return y;
    }
    void output(ValueId y) { g.outputs.push_back(y); }
};

template <class T>
void set(Node& n, const char* name, T v) {
    Attribute a;
    if constexpr (std::is_same_v<T, std::int64_t>) {
        a.kind = AttrKind::i;
        a.i = v;
    } else if constexpr (std::is_same_v<T, float>) {
        a.kind = AttrKind::f;
        a.f = v;
    } else if constexpr (std::is_same_v<T, const char*>) {
        a.kind = AttrKind::s;
        a.s = v;
    } else {
        a.kind = AttrKind::ints;
        a.ints = std::move(v);
    }
    n.attributes.emplace_back(name, std::move(a));
}

struct Config {
    const char* name;
    std::vector<std::string> backends;
};

const std::vector<Config>& configs() {
    static const std::vector<Config> c = {{"default", {}}, {"cpu", {"cpu"}}, {"reference", {"reference"}}};
    return c;
}

std::string show(float v) {
    if (std::isnan(v)) return "nan";
    std::ostringstream os;
    os.precision(7);
    os << v;
    return os.str();
}

struct Result {
    std::vector<NamedTensor> out;
    std::vector<std::string> providers;
};

Result run(const Net& net, const Config& cfg) {
    EngineOptions o;
    o.backends = cfg.backends;
    o.optimization_level = net.level;
    o.num_threads = 2;
    InferenceEngine e = InferenceEngine::compile(net.g, o);
    Result r;
    r.out = e.run(net.feeds);
    r.providers = e.node_providers();
    return r;
}

/// Mismatches of `got` against `ref` (NaN positions, infinities with their sign, finite values
/// within 1e-3 relative); the first few described in `what`.
int compare(const Tensor& got, const Tensor& ref, std::string& what) {
    if (!(got.shape() == ref.shape())) {
        what = "shape " + got.shape().to_string() + " vs " + ref.shape().to_string();
        return 1;
    }
    const float* a = got.data<float>();
    const float* r = ref.data<float>();
    int bad = 0;
    for (std::int64_t i = 0; i < ref.num_elements(); ++i) {
        bool ok;
        if (std::isnan(r[i]))
            ok = std::isnan(a[i]);
        else if (std::isinf(r[i]))
            ok = a[i] == r[i];
        else
            ok = std::isfinite(a[i]) && std::fabs(a[i] - r[i]) <= 1e-3f * (1.f + std::fabs(r[i]));
        if (!ok && ++bad <= 4)
            what += " [" + std::to_string(i) + "] " + show(a[i]) + " (reference " + show(r[i]) + ")";
    }
    return bad;
}

/// Runs `net` on every configuration and compares default and cpu with reference.
void check(const std::string& name, const Net& net) {
    const Result ref = run(net, configs()[2]);
    int ref_nan = 0;
    for (const auto& nt : ref.out)
        for (std::int64_t i = 0; i < nt.tensor.num_elements(); ++i)
            ref_nan += std::isnan(nt.tensor.data<float>()[i]) ? 1 : 0;
    if (net.has_nan_input) {
        INFO(name << ": the reference output has no NaN although the input has one");
        CHECK(ref_nan > 0);
    }
    for (std::size_t c = 0; c < 2; ++c) {
        const Config& cfg = configs()[c];
        const Result got = run(net, cfg);
        REQUIRE(got.out.size() == ref.out.size());
        for (std::size_t k = 0; k < ref.out.size(); ++k) {
            std::string what;
            const int bad = compare(got.out[k].tensor, ref.out[k].tensor, what);
            if (bad != 0) {
                std::string prov;
                for (const auto& p : got.providers) prov += (prov.empty() ? "" : ",") + p;
                FAIL_CHECK(name << " on " << cfg.name << " (providers " << prov << "), output "
                                << k << ": " << bad << " of " << ref.out[k].tensor.num_elements()
                                << " differ from the reference:" << what);
            }
        }
    }
}

const Pattern kPatterns[] = {Pattern::nan, Pattern::inf, Pattern::mixed};

// ---- the fused activations --------------------------------------------------------------------

struct Act {
    const char* name;
    float alpha = 0.f, beta = 0.f;
};

const std::vector<Act>& activations() {
    static const std::vector<Act> a = {
        {"Relu"}, {"LeakyRelu", 0.1f}, {"LeakyRelu", 0.f}, {"Sigmoid"}, {"Tanh"},
        {"Clip", 0.f, 6.f}, {"Clip", -1.f, 1.f}, {"HardSwish"}, {"Gelu"}, {"GeluTanh"}};
    return a;
}

void set_activation(Node& n, const Act& a) {
    set(n, "activation", a.name);
    if (std::string(a.name) == "LeakyRelu" || std::string(a.name) == "Clip")
        set(n, "activation_alpha", a.alpha);
    if (std::string(a.name) == "Clip") set(n, "activation_beta", a.beta);
}

std::string act_name(const Act& a) {
    std::string s = a.name;
    if (std::string(a.name) == "LeakyRelu") s += "(" + show(a.alpha) + ")";
    if (std::string(a.name) == "Clip") s += "(" + show(a.alpha) + "," + show(a.beta) + ")";
    return s;
}

}  // namespace

// ---- elementwise -----------------------------------------------------------------------------

TEST_CASE("non-finite: unary ops and activations agree with the reference on every backend",
          "[special][nonfinite]") {
    struct U {
        const char* op;
        int opset;
        std::function<void(Net&, Node&)> attrs;
    };
    const std::vector<U> ops = {
        {"Relu", 17, {}},
        {"LeakyRelu", 17, [](Net&, Node& n) { set(n, "alpha", 0.1f); }},
        {"LeakyRelu", 17, [](Net&, Node& n) { set(n, "alpha", 0.f); }},
        {"LeakyRelu", 17, [](Net&, Node& n) { set(n, "alpha", -0.5f); }},
        {"Elu", 17, {}},
        {"Elu", 17, [](Net&, Node& n) { set(n, "alpha", 0.f); }},
        {"Tanh", 17, {}},
        {"Sigmoid", 17, {}},
        {"HardSigmoid", 17, {}},
        {"HardSwish", 17, {}},
        {"Exp", 17, {}},
        {"Log", 17, {}},
        {"Sqrt", 17, {}},
        {"Abs", 17, {}},
        {"Neg", 17, {}},
        {"Softplus", 17, {}},
        {"Mish", 18, {}},
        {"Gelu", 20, {}},
        {"Gelu", 20, [](Net&, Node& n) { set(n, "approximate", "tanh"); }},
        {"Erf", 17, {}},
        {"Clip", 17,
         [](Net& net, Node& n) {
             n.inputs.push_back(net.constant("lo", floats({}, {0.f})));
             n.inputs.push_back(net.constant("hi", floats({}, {6.f})));
         }},
        {"Clip", 17,
         [](Net& net, Node& n) {
             n.inputs.push_back(net.constant("lo", floats({}, {-1.f})));
             n.inputs.push_back(net.constant("hi", floats({}, {1.f})));
         }},
    };
    for (const U& u : ops)
        for (Pattern p : kPatterns) {
            // 1-D over 1000 elements (SIMD bodies and tails) and a blockable 4-D shape.
            for (const Dims& d : {Dims{1000}, Dims{2, 16, 5, 3}}) {
                Net net(u.opset);
                const ValueId x = net.input("x", data(d, 11, p, 7));
                Node* n = nullptr;
                net.output(net.op(u.op, {x}, &n));
                if (u.attrs) u.attrs(net, *n);
                check(std::string(u.op) + " " + pattern_name(p) + " " + shape_of(d).to_string(), net);
            }
        }
}

TEST_CASE("non-finite: binary ops agree with the reference on every backend (broadcasting too)",
          "[special][nonfinite]") {
    const std::vector<std::pair<Dims, Dims>> shapes = {
        {{4, 16, 3, 3}, {4, 16, 3, 3}}, {{4, 16, 3, 3}, {1, 16, 1, 1}}, {{4, 16, 3, 3}, {}},
        {{1, 16, 1, 1}, {4, 16, 3, 3}}, {{300}, {300}}};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"})
        for (Pattern p : kPatterns)
            for (const auto& [da, db] : shapes)
                for (bool b_const : {false, true}) {
                    Net net(17);
                    const ValueId a = net.input("a", data(da, 21, p, 5));
                    const Tensor tb = data(db, 22, p, 3);
                    const ValueId b = b_const ? net.constant("b", tb) : net.input("b", tb);
                    net.output(net.op(op, {a, b}));
                    check(std::string(op) + " " + pattern_name(p) + " " + shape_of(da).to_string() +
                              (b_const ? " with constant " : " with ") + shape_of(db).to_string(),
                          net);
                }
}

// ---- pooling, normalization, softmax, resize -------------------------------------------------

TEST_CASE("non-finite: pooling agrees with the reference on every backend", "[special][nonfinite]") {
    struct P {
        const char* op;
        Dims kernel, strides, pads;
        std::int64_t include_pad = 0, ceil = 0;
    };
    const std::vector<P> pools = {
        {"MaxPool", {2, 2}, {2, 2}, {0, 0, 0, 0}},
        {"MaxPool", {3, 3}, {2, 2}, {1, 1, 1, 1}},
        {"MaxPool", {3, 3}, {1, 1}, {1, 1, 1, 1}},
        {"AveragePool", {2, 2}, {2, 2}, {0, 0, 0, 0}},
        {"AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1}},
        {"AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},
        {"GlobalMaxPool", {}, {}, {}},
        {"GlobalAveragePool", {}, {}, {}},
    };
    for (const P& pl : pools)
        for (Pattern p : kPatterns)
            for (std::int64_t period : {11, 97}) {
                Net net(17);
                const ValueId x = net.input("x", data({2, 16, 9, 9}, 31, p, period));
                Node* n = nullptr;
                net.output(net.op(pl.op, {x}, &n));
                if (!pl.kernel.empty()) {
                    set(*n, "kernel_shape", pl.kernel);
                    set(*n, "strides", pl.strides);
                    set(*n, "pads", pl.pads);
                    if (std::string(pl.op) == "AveragePool")
                        set(*n, "count_include_pad", pl.include_pad);
                }
                check(std::string(pl.op) + " k" + std::to_string(pl.kernel.empty() ? 0 : pl.kernel[0]) +
                          " s" + std::to_string(pl.strides.empty() ? 0 : pl.strides[0]) +
                          (pl.include_pad ? " include_pad " : " ") + pattern_name(p) +
                          " every " + std::to_string(period),
                      net);
            }
}

TEST_CASE("non-finite: BatchNorm, LayerNorm, Softmax, LogSoftmax agree with the reference",
          "[special][nonfinite]") {
    for (Pattern p : kPatterns) {
        const std::string pn = pattern_name(p);
        // BatchNormalization: specials in X; and in the statistics (constant).
        for (bool special_stats : {false, true}) {
            Net net(15);
            const ValueId x = net.input("x", data({2, 16, 4, 4}, 41, p, special_stats ? 0 : 13));
            Tensor mean = data({16}, 42, p, special_stats ? 5 : 0);
            Tensor var = positive({16}, 43);
            Tensor scale = positive({16}, 44);
            if (special_stats) {
                var.data<float>()[3] = kInf;
                scale.data<float>()[7] = 0.f;
                scale.data<float>()[9] = kInf;
                var.data<float>()[11] = 0.f;
            }
            net.has_nan_input = net.has_nan_input || (special_stats && p != Pattern::inf);
            net.output(net.op("BatchNormalization",
                              {x, net.constant("s", scale), net.constant("b", data({16}, 45, p, 0)),
                               net.constant("m", mean), net.constant("v", var)}));
            check("BatchNormalization " + pn + (special_stats ? " in the statistics" : " in X"), net);
        }
        // Rows of 37 (SIMD bodies and tails), specials sparse enough to leave clean rows.
        for (std::int64_t period : {29, 113}) {
            const std::string what = pn + " every " + std::to_string(period);
            {
                Net net(17);
                const ValueId x = net.input("x", data({12, 37}, 51, p, period));
                Node* n = nullptr;
                net.output(net.op("LayerNormalization",
                                  {x, net.constant("g", positive({37}, 52)),
                                   net.constant("b", data({37}, 53, p, 0))},
                                  &n));
                set(*n, "axis", std::int64_t{-1});
                check("LayerNormalization " + what, net);
            }
            for (const char* op : {"Softmax", "LogSoftmax"}) {
                for (std::int64_t axis : {-1, 1}) {
                    Net net(13);
                    const ValueId x = net.input("x", data({3, 4, 37}, 54, p, period));
                    Node* n = nullptr;
                    net.output(net.op(op, {x}, &n));
                    set(*n, "axis", axis);
                    check(std::string(op) + " axis " + std::to_string(axis) + " " + what, net);
                }
                Net v11(11);  // coerced to 2-D at axis 1
                const ValueId x = v11.input("x", data({3, 4, 37}, 55, p, period));
                v11.output(v11.op(op, {x}));
                check(std::string(op) + "-11 " + what, v11);
            }
        }
        // All -Inf rows and rows with both infinities.
        for (const char* op : {"Softmax", "LogSoftmax"}) {
            std::vector<float> v(4 * 19, 0.5f);
            for (int j = 0; j < 19; ++j) v[static_cast<std::size_t>(j)] = -kInf;
            v[19 + 4] = kInf;
            v[19 + 10] = -kInf;
            v[38 + 18] = kInf;
            v[57 + 0] = kInf;
            v[57 + 18] = kInf;
            Net net(13);
            net.output(net.op(op, {net.input("x", floats({4, 19}, v))}));
            check(std::string(op) + " infinite rows", net);
        }
    }
}

TEST_CASE("non-finite: Resize agrees with the reference on every backend", "[special][nonfinite]") {
    struct R {
        const char* mode;
        const char* ctm;
        const char* nearest;
        float scale;
    };
    const std::vector<R> rs = {{"linear", "half_pixel", "", 2.f},
                               {"linear", "half_pixel", "", 3.f},
                               {"linear", "pytorch_half_pixel", "", 2.f},
                               {"nearest", "asymmetric", "floor", 2.f},
                               {"nearest", "half_pixel", "round_prefer_floor", 3.f}};
    for (const R& r : rs)
        for (Pattern p : kPatterns) {
            Net net(13);
            const ValueId x = net.input("x", data({1, 16, 5, 6}, 61, p, 17));
            Node* n = nullptr;
            net.output(net.op("Resize",
                              {x, kNoValue, net.constant("scales", floats({4}, {1.f, 1.f, r.scale, r.scale}))},
                              &n));
            set(*n, "mode", r.mode);
            set(*n, "coordinate_transformation_mode", r.ctm);
            if (*r.nearest != '\0') set(*n, "nearest_mode", r.nearest);
            check(std::string("Resize ") + r.mode + " " + r.ctm + " x" + show(r.scale) + " " +
                      pattern_name(p),
                  net);
        }
}

// ---- matmul, gemm, conv and the fused operators ----------------------------------------------

TEST_CASE("non-finite: MatMul, Gemm, FusedMatMul and FusedGemm agree with the reference",
          "[special][nonfinite]") {
    for (Pattern p : kPatterns) {
        const std::string pn = pattern_name(p);
        for (std::int64_t m : {7, 64}) {
            const std::string rows = " M=" + std::to_string(m) + " " + pn;
            for (bool b_const : {true, false}) {
                Net net(13);
                const ValueId a = net.input("a", data({m, 24}, 71, p, 37));
                const Tensor tb = weights({24, 40}, 72, 24);
                const ValueId b = b_const ? net.constant("b", tb) : net.input("b", tb);
                net.output(net.op("MatMul", {a, b}));
                check(std::string("MatMul") + (b_const ? " constant B" : "") + rows, net);
            }
            {
                Net net(13);
                const ValueId a = net.input("a", data({m, 24}, 73, p, 37));
                Node* n = nullptr;
                net.output(net.op("Gemm",
                                  {a, net.constant("b", weights({40, 24}, 74, 24)),
                                   net.constant("c", data({40}, 75, p, 0))},
                                  &n));
                set(*n, "transB", std::int64_t{1});
                check("Gemm" + rows, net);
            }
            // B with specials (constant): 0 * Inf and Inf - Inf inside the dot products.
            {
                Net net(13);
                const ValueId a = net.input("a", data({m, 24}, 76, Pattern::nan, 0));
                Tensor tb = weights({24, 40}, 77, 24);
                tb.data<float>()[5 * 40 + 3] = p == Pattern::inf ? kInf : kNaN;
                tb.data<float>()[9 * 40 + 3] = -kInf;
                net.has_nan_input = true;
                net.output(net.op("MatMul", {a, net.constant("b", tb)}));
                check("MatMul with specials in constant B" + rows, net);
            }
            for (const Act& act : activations()) {
                {
                    Net net(13);
                    const ValueId a = net.input("a", data({m, 24}, 78, p, 37));
                    Node* n = nullptr;
                    net.output(net.op("FusedMatMul",
                                      {a, net.constant("b", weights({24, 40}, 79, 24)),
                                       net.constant("bias", data({40}, 80, p, 0))},
                                      &n));
                    set_activation(*n, act);
                    check("FusedMatMul " + act_name(act) + rows, net);
                }
                {
                    Net net(13);
                    const ValueId a = net.input("a", data({m, 24}, 81, p, 37));
                    Node* n = nullptr;
                    net.output(net.op("FusedGemm",
                                      {a, net.constant("b", weights({40, 24}, 82, 24)),
                                       net.constant("c", data({40}, 83, p, 0))},
                                      &n));
                    set(*n, "transB", std::int64_t{1});
                    set_activation(*n, act);
                    check("FusedGemm " + act_name(act) + rows, net);
                }
            }
        }
    }
}

namespace {

/// x [1, c, s, s] -> Conv (kernel k, stride st, pad k/2, groups g) [+ bias], level 0.
Net conv_net(std::int64_t c, std::int64_t oc, std::int64_t s, std::int64_t k, std::int64_t st,
             std::int64_t g, Pattern p, std::int64_t period, const char* op = "Conv") {
    Net net(13);
    const ValueId x = net.input("x", data({1, c, s, s}, 91, p, period));
    const bool transpose = std::string(op) == "ConvTranspose";
    const Dims wd = transpose ? Dims{c, oc / g, k, k} : Dims{oc, c / g, k, k};
    Node* n = nullptr;
    net.output(net.op(op,
                      {x, net.constant("w", weights(wd, 92, c / g * k * k)),
                       net.constant("bias", data({oc}, 93, p, 0))},
                      &n));
    set(*n, "kernel_shape", Dims{k, k});
    set(*n, "strides", Dims{st, st});
    set(*n, "pads", Dims{k / 2, k / 2, k / 2, k / 2});
    set(*n, "group", g);
    return net;
}

}  // namespace

TEST_CASE("non-finite: Conv and ConvTranspose agree with the reference on every backend",
          "[special][nonfinite]") {
    for (Pattern p : kPatterns) {
        const std::string pn = pattern_name(p);
        check("Conv 1x1 " + pn, conv_net(16, 32, 10, 1, 1, 1, p, 61));
        check("Conv 3x3 " + pn, conv_net(16, 16, 12, 3, 1, 1, p, 97));
        check("Conv 3x3 s2 " + pn, conv_net(16, 32, 12, 3, 2, 1, p, 97));
        check("Conv 3x3 depthwise " + pn, conv_net(16, 16, 9, 3, 1, 16, p, 53));
        check("Conv 3x3 3 channels " + pn, conv_net(3, 16, 12, 3, 1, 1, p, 47));
        check("ConvTranspose 3x3 s2 " + pn, conv_net(16, 8, 6, 3, 2, 1, p, 41, "ConvTranspose"));
    }
}

TEST_CASE("non-finite: FusedConv with every activation and residual agrees with the reference",
          "[special][nonfinite]") {
    // Single nodes (row-major) at level 0.
    for (Pattern p : kPatterns)
        for (const Act& act : activations())
            for (bool residual : {false, true})
                for (std::int64_t k : {1, 3}) {
                    Net net(13);
                    const ValueId x = net.input("x", data({1, 16, 10, 10}, 101, p, 71));
                    std::vector<ValueId> in = {
                        x, net.constant("w", weights({16, 16, k, k}, 102, 16 * k * k)),
                        net.constant("bias", data({16}, 103, p, 0))};
                    if (residual) in.push_back(net.input("z", data({1, 16, 10, 10}, 104, p, 53)));
                    Node* n = nullptr;
                    net.output(net.op("FusedConv", in, &n));
                    set(*n, "kernel_shape", Dims{k, k});
                    set(*n, "pads", Dims{k / 2, k / 2, k / 2, k / 2});
                    set_activation(*n, act);
                    check("FusedConv " + std::to_string(k) + "x" + std::to_string(k) + " " +
                              act_name(act) + (residual ? " + Z " : " ") + pattern_name(p),
                          net);
                }
}

namespace {

/// A level-3 chain whose middle FusedConv runs on blocked values: x [1, 16, s, s] -> Conv 1x1
/// (16 -> 16) = t -> FusedConv 3x3 or 1x1 (activation, optional residual t) -> Conv 1x1 -> y.
/// s picks the convolution's implementation on the default backends: 8 -> dsinfer's im2col
/// GEMM, 12 -> oneDNN's direct kernel, 16 -> Winograd (3x3).
Net blocked_fused(const Act& act, bool residual, std::int64_t k, std::int64_t s, Pattern p) {
    Net net(13);
    net.level = 3;
    const ValueId x = net.input("x", data({1, 16, s, s}, 111, p, 67));
    auto conv1x1 = [&](ValueId in, std::uint32_t seed) {
        Node* n = nullptr;
        const ValueId y = net.op("Conv", {in, net.constant("w" + std::to_string(seed), weights({16, 16, 1, 1}, seed, 16))}, &n);
        set(*n, "kernel_shape", Dims{1, 1});
        return y;
    };
    const ValueId t = conv1x1(x, 112);
    std::vector<ValueId> in = {t, net.constant("wf", weights({16, 16, k, k}, 113, 16 * k * k)),
                               net.constant("bf", data({16}, 114, p, 0))};
    if (residual) in.push_back(t);
    Node* n = nullptr;
    const ValueId f = net.op("FusedConv", in, &n);
    set(*n, "kernel_shape", Dims{k, k});
    set(*n, "pads", Dims{k / 2, k / 2, k / 2, k / 2});
    set_activation(*n, act);
    net.output(conv1x1(f, 115));
    return net;
}

}  // namespace

TEST_CASE("non-finite: FusedConv on blocked layouts (GEMM, direct, Winograd) agrees with the "
          "reference",
          "[special][nonfinite]") {
    for (Pattern p : kPatterns)
        for (const Act& act : activations())
            for (bool residual : {false, true})
                for (std::int64_t s : {8, 12, 16})
                    for (std::int64_t k : {1, 3}) {
                        if (k == 1 && s == 16) continue;
                        check("blocked FusedConv " + std::to_string(k) + "x" + std::to_string(k) +
                                  " on " + std::to_string(s) + "x" + std::to_string(s) + " " +
                                  act_name(act) + (residual ? " + Z " : " ") + pattern_name(p),
                              blocked_fused(act, residual, k, s, p));
                    }
}

TEST_CASE("non-finite: ResNet-style and MLP chains (optimizer fusions, blocked layouts) agree "
          "with the reference",
          "[special][nonfinite]") {
    for (Pattern p : kPatterns)
        for (std::int64_t s : {8, 12, 16}) {
            // x -> Conv 3x3 -> BN -> Relu = a -> Conv 3x3 -> BN -> Add(a) -> Relu -> MaxPool
            // -> Conv 1x1 -> Clip(0, 6) -> GlobalAveragePool -> Flatten -> Gemm -> Softmax.
            Net net(13);
            net.level = 3;
            const ValueId x = net.input("x", data({1, 16, s, s}, 121, p, 89));
            std::uint32_t seed = 122;
            auto conv_bn = [&](ValueId in, std::int64_t k, std::int64_t c_out) {
                Node* n = nullptr;
                ValueId y = net.op("Conv", {in, net.constant("w" + std::to_string(seed), weights({c_out, 16, k, k}, seed, 16 * k * k))}, &n);
                set(*n, "kernel_shape", Dims{k, k});
                set(*n, "pads", Dims{k / 2, k / 2, k / 2, k / 2});
                ++seed;
                y = net.op("BatchNormalization",
                           {y, net.constant("s" + std::to_string(seed), positive({c_out}, seed)),
                            net.constant("b" + std::to_string(seed), data({c_out}, seed + 1, p, 0)),
                            net.constant("m" + std::to_string(seed), data({c_out}, seed + 2, p, 0)),
                            net.constant("v" + std::to_string(seed), positive({c_out}, seed + 3))});
                seed += 4;
                return y;
            };
            const ValueId a = net.op("Relu", {conv_bn(x, 3, 16)});
            const ValueId r = net.op("Relu", {net.op("Add", {conv_bn(a, 3, 16), a})});
            Node* mp = nullptr;
            const ValueId m = net.op("MaxPool", {r}, &mp);
            set(*mp, "kernel_shape", Dims{3, 3});
            set(*mp, "strides", Dims{2, 2});
            set(*mp, "pads", Dims{1, 1, 1, 1});
            const ValueId c = net.op("Clip", {conv_bn(m, 1, 16), net.constant("lo", floats({}, {0.f})),
                                             net.constant("hi", floats({}, {6.f}))});
            const ValueId gap = net.op("Flatten", {net.op("GlobalAveragePool", {c})});
            Node* gm = nullptr;
            const ValueId logits = net.op("Gemm", {gap, net.constant("fw", weights({10, 16}, 140, 16)),
                                                   net.constant("fb", data({10}, 141, p, 0))},
                                          &gm);
            set(*gm, "transB", std::int64_t{1});
            net.output(net.op("Softmax", {logits}));
            net.output(r);
            check("ResNet-style chain on " + std::to_string(s) + "x" + std::to_string(s) + " " +
                      pattern_name(p),
                  net);
        }
    for (Pattern p : kPatterns)
        for (std::int64_t m : {1, 9}) {
            // The digits model's shape: MatMul -> Add -> Relu -> Gemm -> Softmax.
            Net net(13);
            net.level = 3;
            const ValueId x = net.input("x", data({m, 64}, 151, p, 97));
            const ValueId h = net.op("Relu", {net.op("Add", {net.op("MatMul", {x, net.constant("w1", weights({64, 32}, 152, 64))}),
                                                            net.constant("b1", data({32}, 153, p, 0))})});
            Node* gm = nullptr;
            const ValueId logits = net.op("Gemm", {h, net.constant("w2", weights({10, 32}, 154, 32)),
                                                   net.constant("b2", data({10}, 155, p, 0))},
                                          &gm);
            set(*gm, "transB", std::int64_t{1});
            net.output(net.op("Softmax", {logits}));
            check("MLP chain M=" + std::to_string(m) + " " + pattern_name(p), net);
        }
}

// ---- the digits model ------------------------------------------------------------------------

TEST_CASE("non-finite: the digits model with one NaN pixel gives NaN probabilities on every "
          "backend",
          "[special][nonfinite]") {
    const fs::path model =
        fs::path(__FILE__).parent_path() / ".." / ".." / "models" / "digits" / "digits.onnx";
    if (!fs::exists(model)) {
        WARN("SKIPPED: " << model << " not found");
        return;
    }
    // Three samples: the NaN pixel in the first, +Inf in the second, the third clean.
    Tensor x = Tensor::zeros(DType::f32, Shape{3, 64});
    for (std::int64_t i = 0; i < 3 * 64; ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 17);
    x.data<float>()[20] = kNaN;
    x.data<float>()[64 + 33] = kInf;
    std::vector<std::vector<float>> ref_probs;
    for (const Config& cfg : {configs()[2], configs()[0], configs()[1]}) {
        for (int level : {0, 3}) {
            EngineOptions o;
            o.backends = cfg.backends;
            o.optimization_level = level;
            o.num_threads = 2;
            InferenceEngine e = InferenceEngine::load(model, o);
            const auto out = e.run({{e.inputs()[0].name, x}});
            const Tensor* probs = nullptr;
            for (const auto& nt : out)
                if (nt.name == "probabilities") probs = &nt.tensor;
            REQUIRE(probs != nullptr);
            REQUIRE(probs->num_elements() == 30);
            INFO(cfg.name << " level " << level);
            const float* p = probs->data<float>();
            for (int j = 0; j < 10; ++j) {
                INFO("probabilities[0][" << j << "] = " << show(p[j]));
                CHECK(std::isnan(p[j]));
            }
            // The clean sample stays a distribution.
            float sum = 0.f;
            for (int j = 20; j < 30; ++j) sum += p[j];
            CHECK(std::fabs(sum - 1.f) < 1e-4f);
            std::vector<float> v(p, p + 30);
            if (ref_probs.empty()) {
                ref_probs.push_back(v);
            } else {
                // The +Inf sample: what the reference gives (NaN or not), element by element.
                for (int j = 10; j < 30; ++j) {
                    const float r = ref_probs[0][static_cast<std::size_t>(j)];
                    INFO("probabilities[" << j / 10 << "][" << j % 10 << "] = " << show(v[static_cast<std::size_t>(j)])
                                          << ", reference " << show(r));
                    if (std::isnan(r))
                        CHECK(std::isnan(v[static_cast<std::size_t>(j)]));
                    else
                        CHECK(std::fabs(v[static_cast<std::size_t>(j)] - r) <= 1e-4f);
                }
            }
        }
    }
}
