// The "cpu" backend's Conv and FusedConv on plain NCHW (src/cpu/fast/fast_conv.cpp) against the
// reference kernels: one-node graphs on backends {"cpu"} and {"reference"} over 1x1, 3x3
// stride 1 and 2, 5x5 and 7x7 windows, symmetric, one-sided and SAME pads, dilation 2, with and
// without bias, FusedConv with a residual Z (a graph input, and an intermediate whose block
// the output may take) and Relu, LeakyRelu, Sigmoid, Clip, batch 1 and 8, odd channel counts
// and map sizes, and inputs holding NaN and infinities. Which of dsinfer's paths ran (Winograd,
// im2col GEMM, fallback) is checked through fast_conv_path_runs, and the node through
// node_providers() == "cpu". Results are bitwise equal at 1 and 2 threads.
//
// Tolerance: |cpu - reference| <= 1e-5 * (1 + K * max|x| * max|w| + max|bias| + max|z|),
// K = c * kh * kw: a bound on sum |x * w| as in test_conv_winograd.cpp (Winograd's transforms
// add a few roundings per product; the GEMM's sums run in another order than Eigen's). NaN and
// infinities must sit where the reference has them. Runs once per ISA level ([fast]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <dsinfer/dsinfer.hpp>

#include "cpu/fast/fast_conv.hpp"
#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
using dsinfer::detail::ConvAlgo;
using std::int64_t;

namespace {

struct ConvCase {
    int64_t n = 1, c = 16, h = 14, w = 14, oc = 16, kh = 3, kw = 3;
    std::vector<int64_t> strides{1, 1}, pads{1, 1, 1, 1}, dilations{1, 1};
    std::string auto_pad;  // "" = explicit pads
    bool bias = true;
    int residual = 0;  // FusedConv: 0 none, 1 Z a graph input, 2 Z an intermediate (Relu of zin)
    std::string act;   // FusedConv's activation ("" none)
    float act_alpha = 0.f, act_beta = 0.f;
    bool fused = false;
    bool specials = false;  // NaN and infinities in X
    ConvAlgo want = ConvAlgo::im2col_gemm;
};

int64_t out_dim(const ConvCase& t, int i) {
    const int64_t in = i == 0 ? t.h : t.w, k = i == 0 ? t.kh : t.kw;
    const int64_t s = t.strides[static_cast<std::size_t>(i)];
    if (!t.auto_pad.empty()) return (in + s - 1) / s;
    const int64_t ek = t.dilations[static_cast<std::size_t>(i)] * (k - 1) + 1;
    return (in + t.pads[static_cast<std::size_t>(i)] + t.pads[static_cast<std::size_t>(i + 2)] - ek) / s + 1;
}

Graph conv_graph(const ConvCase& t, const Tensor& w, const Tensor& b) {
    Graph g;
    g.name = "conv";
    g.opset_imports = {{"", 17}, {kDsinferDomain, kDsinferOpsetVersion}};
    const ValueId x = g.add_value("x", DType::f32, SymbolicShape::from(Shape{t.n, t.c, t.h, t.w}));
    g.inputs.push_back(x);
    std::vector<ValueId> ins{x, g.add_initializer("W", w)};
    ins.push_back(t.bias ? g.add_initializer("B", b) : kNoValue);
    const Shape ys{t.n, t.oc, out_dim(t, 0), out_dim(t, 1)};
    if (t.residual != 0) {
        const ValueId zin = g.add_value("zin", DType::f32, SymbolicShape::from(ys));
        g.inputs.push_back(zin);
        if (t.residual == 2) {
            const ValueId z = g.add_value("z");
            g.add_node("Relu", {zin}, {z}, "zrelu");
            ins.push_back(z);
        } else {
            ins.push_back(zin);
        }
    }
    if (!t.fused && ins.back() == kNoValue) ins.pop_back();
    const ValueId y = g.add_value("y");
    g.outputs.push_back(y);
    Node& node = g.add_node(t.fused ? "FusedConv" : "Conv", ins, {y}, "conv");
    if (t.fused) node.domain = kDsinferDomain;
    node.attributes = {{"kernel_shape", attr_ints({t.kh, t.kw})},
                       {"strides", attr_ints(t.strides)},
                       {"dilations", attr_ints(t.dilations)}};
    if (t.auto_pad.empty()) node.attributes.push_back({"pads", attr_ints(t.pads)});
    else node.attributes.push_back({"auto_pad", attr_s(t.auto_pad)});
    if (!t.act.empty()) {
        node.attributes.push_back({"activation", attr_s(t.act)});
        node.attributes.push_back({"activation_alpha", attr_f(t.act_alpha)});
        node.attributes.push_back({"activation_beta", attr_f(t.act_beta)});
    }
    return g;
}

float max_abs(const Tensor& t) {
    float m = 0;
    for (int64_t i = 0; i < t.num_elements(); ++i)
        if (std::isfinite(t.data<float>()[i])) m = std::max(m, std::fabs(t.data<float>()[i]));
    return m;
}

std::vector<NamedTensor> run(const Graph& g, const std::vector<NamedTensor>& feeds,
                             std::vector<std::string> backends, int threads,
                             std::string* provider = nullptr) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.num_threads = threads;
    const InferenceEngine e = InferenceEngine::compile(g, o);
    if (provider != nullptr)
        for (std::size_t i = 0; i < e.graph().nodes.size(); ++i)
            if (e.graph().nodes[i].op_type == "Conv" || e.graph().nodes[i].op_type == "FusedConv")
                *provider = e.node_providers()[i];
    return e.run(feeds);
}

void check(const ConvCase& t, std::uint32_t seed) {
    const Tensor x = random_f32({t.n, t.c, t.h, t.w}, seed, 1.f);
    const Tensor w = random_f32({t.oc, t.c, t.kh, t.kw}, seed + 1, 0.3f);
    const Tensor b = random_f32({t.oc}, seed + 2, 0.5f);
    const Tensor z = random_f32({t.n, t.oc, out_dim(t, 0), out_dim(t, 1)}, seed + 3, 1.f);
    if (t.specials) {
        float* p = x.data<float>();
        const float inf = std::numeric_limits<float>::infinity();
        p[0] = std::numeric_limits<float>::quiet_NaN();
        p[x.num_elements() / 3] = inf;
        p[x.num_elements() / 2 + 5] = -inf;
    }
    std::vector<NamedTensor> feeds{{"x", x}};
    if (t.residual != 0) feeds.push_back({"zin", z});
    const Graph g = conv_graph(t, w, b);
    const auto runs = [&] { return detail::fast_conv_path_runs(t.want); };
    const std::uint64_t before = runs();
    std::string provider;
    const auto got = run(g, feeds, {"cpu"}, 2, &provider);
    CHECK(provider == "cpu");
    CHECK(runs() == before + 1);
    const auto want = run(g, feeds, {"reference"}, 1);
    REQUIRE(got.size() == 1);
    REQUIRE(got[0].tensor.shape() == want[0].tensor.shape());
    const double k = static_cast<double>(t.c * t.kh * t.kw);
    const double tol = 1e-5 * (1 + k * max_abs(x) * max_abs(w) + (t.bias ? max_abs(b) : 0.f) +
                               (t.residual != 0 ? max_abs(z) : 0.f));
    const float* gp = got[0].tensor.data<float>();
    const float* wp = want[0].tensor.data<float>();
    double worst = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < got[0].tensor.num_elements(); ++i) {
        if (std::isnan(wp[i]) || std::isinf(wp[i])) {
            const bool same = std::isnan(wp[i]) ? std::isnan(gp[i]) : gp[i] == wp[i];
            if (!same) ++bad;
            continue;
        }
        const double d = std::fabs(static_cast<double>(gp[i]) - wp[i]);
        if (!(d <= tol)) ++bad;
        if (d > worst) worst = d;
    }
    INFO("worst |cpu - reference| " << worst << ", tolerance " << tol);
    CHECK(bad == 0);
    // Bitwise the same at 1 thread (NaN payloads included).
    const auto one = run(g, feeds, {"cpu"}, 1);
    CHECK(std::memcmp(one[0].tensor.raw_data(), got[0].tensor.raw_data(),
                      got[0].tensor.num_bytes()) == 0);
}

}  // namespace

TEST_CASE("cpu Conv/FusedConv on NCHW match the reference kernels", "[fast]") {
    const int64_t blk = detail::fast_conv_block();
    std::vector<std::pair<std::string, ConvCase>> cases;
    auto add = [&](std::string name, ConvCase t) { cases.emplace_back(std::move(name), t); };
    auto add_with_specials = [&](const std::string& name, ConvCase t) {  // and with NaN/Inf in X
        add(name, t);
        t.specials = true;
        add(name + " with NaN/Inf", t);
    };
    {
        ConvCase t;  // 1x1 stride 1: a GEMM per chunk of columns, no im2col copy of windows
        t.kh = t.kw = 1;
        t.pads = {0, 0, 0, 0};
        t.c = 24;
        t.oc = 40;
        t.h = t.w = 7;
        add("1x1 s1 b1", t);
        t.n = 8;
        add("1x1 s1 b8", t);
        t.strides = {2, 2};
        t.bias = false;
        add("1x1 s2 b8, no bias", t);
    }
    {
        ConvCase t;  // 3x3 stride 1, channels in whole blocks, >= 16 tiles: Winograd
        t.c = 2 * blk;
        t.oc = 4 * blk;
        t.want = ConvAlgo::winograd_f4x3;
        add("3x3 s1 b1 14x14 winograd", t);
        t.n = 8;
        t.h = 9;
        t.w = 11;
        add_with_specials("3x3 s1 b8 9x11 winograd", t);
        t.pads = {0, 1, 2, 0};
        add("3x3 s1 b8 one-sided pads winograd", t);
        t.n = 1;
        t.h = t.w = 7;  // 4 tiles: still Winograd
        t.pads = {1, 1, 1, 1};
        add("3x3 s1 b1 7x7 (4 tiles) winograd", t);
        t.h = 5;  // 2 tiles: the GEMM
        t.w = 4;
        t.want = ConvAlgo::im2col_gemm;
        add("3x3 s1 b1 5x4 (2 tiles) gemm", t);
    }
    {
        ConvCase t;  // odd channels: the GEMM
        t.c = 3;
        t.oc = 5;
        t.h = 13;
        t.w = 10;
        add_with_specials("3x3 s1 odd channels", t);
        t.strides = {2, 2};
        t.n = 8;
        t.h = 15;
        t.w = 13;
        add("3x3 s2 b8 odd map", t);
        t.kh = t.kw = 7;
        t.pads = {3, 3, 3, 3};
        t.oc = 16;
        t.h = t.w = 32;
        add("7x7 s2 p3 stem", t);
        t.kh = t.kw = 5;
        t.strides = {1, 2};
        t.pads = {2, 1, 0, 2};
        t.h = 12;
        t.w = 17;
        add("5x5 strides 1,2 asymmetric pads", t);
        t.kh = t.kw = 3;
        t.strides = {1, 1};
        t.dilations = {2, 2};
        t.pads = {2, 2, 2, 2};
        add("3x3 dilation 2", t);
        t.dilations = {1, 1};
        t.auto_pad = "SAME_UPPER";
        t.strides = {2, 2};
        add("3x3 s2 SAME_UPPER", t);
        t.auto_pad = "SAME_LOWER";
        add("3x3 s2 SAME_LOWER", t);
    }
    {
        ConvCase t;  // FusedConv: bias, residual, activations, on both paths
        t.fused = true;
        t.c = blk;
        t.oc = 2 * blk;
        t.n = 8;
        t.residual = 1;
        t.act = "Relu";
        t.want = ConvAlgo::winograd_f4x3;
        add("FusedConv winograd Z Relu", t);
        t.residual = 2;
        add("FusedConv winograd Z in place Relu", t);
        t.act = "LeakyRelu";
        t.act_alpha = 0.1f;
        add_with_specials("FusedConv winograd Z LeakyRelu", t);
        t.strides = {2, 2};
        t.want = ConvAlgo::im2col_gemm;
        t.act = "Sigmoid";
        add("FusedConv gemm s2 Z Sigmoid", t);
        t.residual = 2;
        t.act = "Clip";
        t.act_alpha = -0.5f;
        t.act_beta = 0.5f;
        add("FusedConv gemm s2 Z in place Clip", t);
        t.kh = t.kw = 1;
        t.pads = {0, 0, 0, 0};
        t.strides = {1, 1};
        t.residual = 0;
        t.act = "Tanh";
        add("FusedConv gemm 1x1 Tanh", t);
        t.bias = false;
        t.act = "";
        add("FusedConv gemm 1x1 no bias", t);
        t.residual = 1;
        t.act = "Relu";
        add_with_specials("FusedConv gemm 1x1 Z Relu", t);
    }
    std::uint32_t seed = 100;
    for (const auto& [name, t] : cases) {
        INFO(name << " (block " << blk << ")");
        check(t, seed += 10);
    }
}

TEST_CASE("cpu Conv leaves grouped and dynamic-weight convolutions to the reference", "[fast]") {
    ConvCase t;
    const Tensor x = random_f32({1, 8, 6, 6}, 7, 1.f);
    Graph g;
    g.opset_imports = {{"", 17}};
    const ValueId xv = g.add_value("x", DType::f32, SymbolicShape::from(Shape{1, 8, 6, 6}));
    g.inputs.push_back(xv);
    const ValueId wv = g.add_initializer("W", random_f32({8, 4, 3, 3}, 8, 0.3f));
    const ValueId y = g.add_value("y");
    g.outputs.push_back(y);
    g.add_node("Conv", {xv, wv}, {y}, "conv").attributes = {{"group", attr_i(2)}};
    std::string provider;
    const auto got = run(g, {{"x", x}}, {"cpu", "reference"}, 2, &provider);
    CHECK(provider == "reference");
    const auto want = run(g, {{"x", x}}, {"reference"}, 1);
    CHECK(max_rel_diff(got[0].tensor, want[0].tensor) == 0);
}

TEST_CASE("cpu Conv with algo_search = measure runs the path timed fastest and matches the "
          "reference",
          "[fast][conv_dispatch]") {
    // Geometries of their own (the measured choice is cached per process): a 3x3 stride-1 one
    // (Winograd and the GEMM both apply: timed) and a strided one (the GEMM alone: not timed),
    // with a fused activation; two batch sizes through one engine.
    const int64_t blk = detail::fast_conv_block();
    ConvCase t;
    t.c = 3 * blk;
    t.oc = 2 * blk;
    t.h = 18;
    t.w = 15;
    t.fused = true;
    t.act = "Relu";
    ConvCase strided = t;
    strided.strides = {2, 2};
    for (const ConvCase& c : {t, strided}) {
        const Tensor w = random_f32({c.oc, c.c, c.kh, c.kw}, 31, 0.3f);
        const Tensor b = random_f32({c.oc}, 32, 0.5f);
        const Graph g = conv_graph(c, w, b);
        EngineOptions o;
        o.backends = {"cpu"};
        o.num_threads = 2;
        o.algo_search = AlgoSearch::measure;
        const std::uint64_t before = detail::conv_algo_measurements();
        const std::uint64_t gemm = detail::fast_conv_path_runs(ConvAlgo::im2col_gemm);
        const std::uint64_t wino = detail::fast_conv_path_runs(ConvAlgo::winograd_f4x3);
        const InferenceEngine e = InferenceEngine::compile(g, o);
        const Tensor x = random_f32({c.n, c.c, c.h, c.w}, 33, 1.f);
        const auto got = e.run({{"x", x}});
        const auto want = run(g, {{"x", x}}, {"reference"}, 1);
        // Timed only where two paths apply (the first prepare of the shape).
        CHECK(detail::conv_algo_measurements() == before + (c.strides[0] == 1 ? 1 : 0));
        // One of dsinfer's paths ran (not the fallback).
        CHECK(detail::fast_conv_path_runs(ConvAlgo::im2col_gemm) - gemm +
                  detail::fast_conv_path_runs(ConvAlgo::winograd_f4x3) - wino ==
              1);
        const double tol = 1e-5 * (1 + static_cast<double>(c.c * c.kh * c.kw) * max_abs(x) *
                                           max_abs(w) + max_abs(b));
        REQUIRE(got[0].tensor.shape() == want[0].tensor.shape());
        int64_t bad = 0;
        for (int64_t i = 0; i < got[0].tensor.num_elements(); ++i)
            if (!(std::fabs(got[0].tensor.data<float>()[i] - want[0].tensor.data<float>()[i]) <=
                  tol))
                ++bad;
        CHECK(bad == 0);
        // A second engine on the same geometry reuses the process's answer: nothing timed.
        const std::uint64_t after = detail::conv_algo_measurements();
        const InferenceEngine again = InferenceEngine::compile(g, o);
        const auto got2 = again.run({{"x", x}});
        CHECK(detail::conv_algo_measurements() == after);
        CHECK(std::memcmp(got2[0].tensor.raw_data(), got[0].tensor.raw_data(),
                          got[0].tensor.num_bytes()) == 0);
    }
}
