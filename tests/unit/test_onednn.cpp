// The oneDNN backend (src/onednn), its layout negotiation (src/core/executor_compile.cpp) and dsinfer's
// packed-B GEMM (src/kernels/sgemm.cpp, src/cpu/fast/fast_matmul.cpp) against the reference kernels.
//
// Every case builds a small ONNX model (model_builder.hpp), runs it on the default backends
// {"onednn", "cpu"} and on {"reference"}, compares every output within the tolerance stated
// below, and checks through node_providers() which provider ran the node, so that a node that
// silently fell through to another backend cannot pass vacuously. Where the expected provider is
// "" the form is one the backends are designed to hand on (results are checked only). A oneDNN
// kernel that delegates one shape class to its fallback kernel at run time (rank-1 MatMul, a
// broadcast first operand of Sub/Div, pooling geometry oneDNN lacks, ...) still reports
// "onednn": those cases are checked for their results.
//
// Constant-B 2-D MatMul/Gemm run on the oneDNN kernel; without AVX-512 it hands shape classes of
// fewer than 512 rows to dsinfer's packed GEMM inside the same kernel (onednn_matmul.cpp), so the
// provider is "onednn" either way; Gemm forms oneDNN declines go to the "cpu" packed kernel.
//
// Tolerances (the reference kernels are the truth; data uniform in [-1, 1] unless stated):
//  - MatMul, Gemm, Conv, ConvTranspose: |got - want| <= s * (1e-4 + 1e-4 * |want|) with
//    s = max(1, sqrt(K / 64)), K the length of one dot product (K; C/group * kernel volume).
//    Both sides sum K float32 products in different orders (blocked, FMA); that rounding
//    difference grows like sqrt(K) ulps of the partial sums (about sqrt(K)/3 in magnitude
//    here), so 1e-4 at K <= 64 leaves a margin of ~100x, and scaling by sqrt(K) keeps that
//    margin as K grows, while a wrong index, pad, group or bias errs by ~0.1.
//  - bitwise (NaN matches NaN, +0 and -0 are told apart): Relu, LeakyRelu, Abs, Clip, Sqrt,
//    MaxPool/GlobalMaxPool, Add/Sub/Mul/Div/Max/Min: one IEEE operation per element on both
//    sides. Neg by value (see the signed-zero test).
//  - Exp, Tanh, Sigmoid: 4 ulp (measured <= 3). Elu, HardSwish: 4 ulp or 2e-7 absolute; Gelu
//    4 ulp or 1e-6 absolute; Mish 4 ulp or 1.5e-6 absolute: oneDNN evaluates them with its own
//    formulas, and the reasons (cancellation near zero crossings) are given at each constant.
//  - AveragePool, GlobalAveragePool, BatchNormalization: 1e-6 + 1e-6 * |want| (sums of <= 64
//    terms, a different operation order); Softmax 1e-6 + 1e-5 * |want|, LogSoftmax and
//    LayerNormalization 1e-5 + 1e-5 * |want| (exp/log/rsqrt evaluated differently).
//  - multi-layer graphs: the dot-product tolerance at twice the widest layer's K (errors carry
//    from layer to layer).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/dsinfer.hpp>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <thread>

#include "kernels/conv_dispatch.hpp"
#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

using Dims = std::vector<std::int64_t>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// True (after a message) when this build has no oneDNN backend: the caller returns.
bool no_onednn() {
    if (onednn_available()) return false;
    WARN("dsinfer was built without oneDNN (DSINFER_WITH_ONEDNN=OFF): oneDNN test skipped");
    return true;
}


/// Provider of a constant-B 2-D MatMul/Gemm whose form both oneDNN and the packed GEMM take:
/// oneDNN where it has a packed-weight matmul (AVX-512), else dsinfer's packed GEMM
/// (onednn_matmul.cpp declines those nodes).
std::string packed_provider() {
    return onednn_version().find("avx512") != std::string::npos ? "onednn" : "cpu";
}

// ---- data ---------------------------------------------------------------------------------------

Shape shape_of(const Dims& d) { return Shape::make(std::span<const std::int64_t>(d)).value(); }

Tensor rnd(const Dims& d, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::empty(DType::f32, shape_of(d));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (auto& v : t.span<float>()) v = u(rng);
    return t;
}

Tensor values(const Dims& d, const std::vector<float>& v) {
    return Tensor::from_vector<float>(shape_of(d), v);
}

// ---- models -------------------------------------------------------------------------------------

/// An ONNX model under construction plus the feeds of its graph inputs.
class Net {
public:
    explicit Net(std::int64_t opset = 17) {
        m_.set_ir_version(opset >= 19 ? 9 : 8);
        auto* op = m_.add_opset_import();
        op->set_domain("");
        op->set_version(opset);
        m_.mutable_graph()->set_name("onednn_test");
    }

    /// A graph input fed with `t`, declared with t's shape; in `declared`, negative dims are
    /// the symbol "batch" and `symbol_axis` (if >= 0) gets the symbol "channels".
    Net& feed(const std::string& name, const Tensor& t, Dims declared = {}, int symbol_axis = -1) {
        if (declared.empty()) declared = t.shape().to_vector();
        onnx::ValueInfoProto v = tensor_info(name, 1, declared);
        if (symbol_axis >= 0)
            v.mutable_type()
                ->mutable_tensor_type()
                ->mutable_shape()
                ->mutable_dim(symbol_axis)
                ->set_dim_param("channels");
        *g()->add_input() = v;
        feeds.push_back({name, t});
        return *this;
    }
    /// An initializer.
    Net& constant(const std::string& name, const Tensor& t) {
        const auto s = t.span<float>();
        *g()->add_initializer() =
            float_tensor(name, t.shape().to_vector(), std::vector<float>(s.begin(), s.end()));
        return *this;
    }
    onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs, const std::string& name) {
        return *add_node(*g(), op, ins, outs, name);
    }
    Net& output(const std::string& name) {
        auto* v = g()->add_output();
        v->set_name(name);
        v->mutable_type()->mutable_tensor_type()->set_elem_type(1);
        return *this;
    }
    Graph graph() const {
        const std::string b = bytes_of(m_);
        return load_onnx_from_bytes(b.data(), b.size());
    }

    std::vector<NamedTensor> feeds;

private:
    onnx::GraphProto* g() { return m_.mutable_graph(); }
    onnx::ModelProto m_;
};

onnx::AttributeProto& new_attr(onnx::NodeProto& n, const std::string& name,
                               onnx::AttributeProto::AttributeType type) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(type);
    return *a;
}
void ai(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    new_attr(n, name, onnx::AttributeProto::INT).set_i(v);
}
void aints(onnx::NodeProto& n, const std::string& name, const Dims& v) {
    auto& a = new_attr(n, name, onnx::AttributeProto::INTS);
    for (auto x : v) a.add_ints(x);
}
void af(onnx::NodeProto& n, const std::string& name, float v) {
    new_attr(n, name, onnx::AttributeProto::FLOAT).set_f(v);
}
void as(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    new_attr(n, name, onnx::AttributeProto::STRING).set_s(v);
}

/// Attributes of Conv, ConvTranspose and pooling nodes; empty or negative members are omitted.
/// Tables use designated initializers in this member order.
struct Window {
    Dims kernel_shape = {}, strides = {}, pads = {}, dilations = {}, output_padding = {},
         output_shape = {};
    std::string auto_pad = {};
    std::int64_t group = 0, ceil_mode = -1, count_include_pad = -1;

    void apply(onnx::NodeProto& n) const {
        const std::pair<const char*, const Dims*> lists[] = {{"kernel_shape", &kernel_shape},
                                                             {"strides", &strides},
                                                             {"pads", &pads},
                                                             {"dilations", &dilations},
                                                             {"output_padding", &output_padding},
                                                             {"output_shape", &output_shape}};
        for (const auto& [name, v] : lists)
            if (!v->empty()) aints(n, name, *v);
        if (!auto_pad.empty()) as(n, "auto_pad", auto_pad);
        if (group > 0) ai(n, "group", group);
        if (ceil_mode >= 0) ai(n, "ceil_mode", ceil_mode);
        if (count_include_pad >= 0) ai(n, "count_include_pad", count_include_pad);
    }
};

// ---- running ------------------------------------------------------------------------------------

const std::vector<std::string> kFast{"onednn", "cpu"};
const std::vector<std::string> kReference{"reference"};

InferenceEngine compile(const Net& net, const std::vector<std::string>& backends, int threads = 2) {
    EngineOptions o;
    o.backends = backends;
    o.num_threads = threads;
    // These cases test the kernels node by node (providers looked up by node name): no fusions,
    // but level 3's blocked layouts. test_fusions.cpp covers the fused forms.
    o.disabled_passes = {"fuse_conv_batchnorm", "fuse_conv_add_activation",
                         "fuse_matmul_bias_activation"};
    return InferenceEngine::compile(net.graph(), o);
}

std::map<std::string, std::string> providers_of(const InferenceEngine& e) {
    std::map<std::string, std::string> p;
    for (std::size_t i = 0; i < e.graph().nodes.size(); ++i)
        p[e.graph().nodes[i].name] = e.node_providers()[i];
    return p;
}

std::vector<Tensor> outputs_of(const InferenceEngine& e, const std::vector<NamedTensor>& feeds) {
    std::vector<Tensor> out;
    for (auto& nt : e.run(feeds)) out.push_back(nt.tensor);
    return out;
}

// ---- comparing ----------------------------------------------------------------------------------

struct Tol {
    double abs = 0, rel = 0;
    std::int64_t ulps = 0;
    bool bitwise = false;
};

Tol bitwise() { return {0, 0, 0, true}; }
Tol close(double abs, double rel) { return {abs, rel, 0, false}; }
Tol ulps(std::int64_t n, double abs) { return {abs, 0, n, false}; }
/// Dot products of length k (see the file comment).
Tol dot(std::int64_t k) {
    const double s = std::max(1.0, std::sqrt(static_cast<double>(k) / 64.0));
    return close(1e-4 * s, 1e-4 * s);
}

std::int64_t ordered(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? -static_cast<std::int64_t>(u & 0x7fffffffu)
                             : static_cast<std::int64_t>(u);
}
std::int64_t ulp_distance(float a, float b) { return std::llabs(ordered(a) - ordered(b)); }

bool within(float got, float want, const Tol& t) {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
    if (t.bitwise) return std::memcmp(&got, &want, sizeof got) == 0;
    if (got == want) return true;
    if (std::isinf(got) || std::isinf(want)) return false;
    const double d = std::fabs(static_cast<double>(got) - static_cast<double>(want));
    return d <= t.abs + t.rel * std::fabs(static_cast<double>(want)) ||
           ulp_distance(got, want) <= t.ulps;
}

/// Number of elements of `got` outside `tol` of `want` (shape mismatch: all); the first few
/// are reported.
std::int64_t mismatches(const Tensor& got, const Tensor& want, const Tol& tol,
                        const std::string& what) {
    if (!(got.shape() == want.shape()) || got.dtype() != want.dtype()) {
        UNSCOPED_INFO(what << ": shape " << got.shape() << " vs reference " << want.shape());
        return std::max<std::int64_t>(1, want.num_elements());
    }
    const float* g = got.data<float>();
    const float* w = want.data<float>();
    std::int64_t bad = 0;
    std::ostringstream os;
    for (std::int64_t i = 0; i < want.num_elements(); ++i) {
        if (within(g[i], w[i], tol)) continue;
        if (bad < 6) os << "  [" << i << "] got " << g[i] << " want " << w[i] << "\n";
        ++bad;
    }
    if (bad > 0)
        UNSCOPED_INFO(what << ": " << bad << " of " << want.num_elements() << " outside tolerance\n"
                           << os.str());
    return bad;
}

/// Runs `net` on the default backends and on the reference, compares every output within `tol`
/// and checks that each node in `providers` ran on the given provider ("" = any).
void check_vs_reference(const Net& net, const Tol& tol,
                        const std::map<std::string, std::string>& providers,
                        const std::string& what) {
    INFO(what);
    const InferenceEngine fast = compile(net, kFast);
    const InferenceEngine ref = compile(net, kReference);
    const auto p = providers_of(fast);
    for (const auto& [node, want] : providers) {
        if (want.empty()) continue;
        INFO("node " << node);
        REQUIRE(p.count(node) == 1);
        if (want[0] == '!')  // "!onednn": any provider but that one
            CHECK(p.at(node) != want.substr(1));
        else
            CHECK(p.at(node) == want);
    }
    const auto got = outputs_of(fast, net.feeds);
    const auto exp = outputs_of(ref, net.feeds);
    REQUIRE(got.size() == exp.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        CHECK(mismatches(got[i], exp[i], tol, what + " output " + std::to_string(i)) == 0);
}

/// Bitwise equality of two output lists.
bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (!(a[i].shape() == b[i].shape()) || a[i].num_bytes() != b[i].num_bytes() ||
            std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].num_bytes()) != 0)
            return false;
    return true;
}

std::string dims_str(const Dims& d) { return shape_of(d).to_string(); }

}  // namespace

// ---- MatMul and Gemm ----------------------------------------------------------------------------

TEST_CASE("oneDNN MatMul matches the reference for 2-D batched broadcast and rank-1 operands",
          "[onednn]") {
    if (no_onednn()) return;
    struct Case {
        Dims a, b;
        bool b_const;
        std::string provider;
    };
    const std::string packed = packed_provider();
    const std::vector<Case> cases = {
        {{5, 7}, {7, 9}, false, "onednn"},
        {{2, 5, 7}, {2, 7, 9}, false, "onednn"},
        {{2, 5, 7}, {7, 9}, false, "onednn"},              // B broadcast over A's batch
        {{5, 7}, {3, 7, 9}, false, "onednn"},              // A broadcast over B's batch
        {{2, 1, 5, 7}, {1, 3, 7, 9}, false, "onednn"},     // both broadcast
        {{3, 1, 4, 6}, {4, 6, 5}, false, "onednn"},        // rank 4 x rank 3
        {{2, 4, 16, 8}, {2, 4, 8, 16}, false, "onednn"},   // attention Q.K^T
        {{2, 4, 16, 16}, {2, 4, 16, 8}, false, "onednn"},  // attention P.V
        {{10, 64}, {64, 48}, true, packed},
        {{2, 3, 64}, {64, 48}, true, packed},
        {{3, 2, 5, 7}, {7, 33}, true, packed},   // N not a multiple of the panel
        {{13, 600}, {600, 40}, true, packed},    // K over one K block of the GEMM
        {{200, 64}, {64, 20}, true, packed},     // rows split among threads
        {{10, 64}, {64, 80}, true, packed},      // panels split among threads
        {{2, 5, 7}, {2, 7, 9}, true, "onednn"},  // constant B of rank 3
        {{7}, {7, 9}, false, "onednn"},          // rank 1: kernel's fallback
        {{5, 7}, {7}, false, "onednn"},
        {{7}, {7}, false, "onednn"},
        {{2, 3, 7}, {7}, false, "onednn"},
        {{7}, {7, 9}, true, packed},
        {{5, 0}, {0, 9}, false, "onednn"},  // empty sum
    };
    std::uint32_t seed = 1;
    for (const auto& c : cases) {
        Net net(13);
        net.feed("a", rnd(c.a, seed++));
        if (c.b_const)
            net.constant("b", rnd(c.b, seed++));
        else
            net.feed("b", rnd(c.b, seed++));
        net.node("MatMul", {"a", "b"}, {"y"}, "mm");
        net.output("y");
        const std::int64_t k = c.a.back();
        check_vs_reference(
            net, dot(k), {{"mm", c.provider}},
            "MatMul " + dims_str(c.a) + " x " + dims_str(c.b) + (c.b_const ? " constant B" : ""));
    }
}

namespace {

enum class CForm { none, const_n, const_1n, const_mn, const_scalar, rt_n, rt_1n, rt_mn };

/// Gemm [M=5, K=7] x [K, N=6] with one combination of attributes and C against the reference.
void check_gemm(int ta, int tb, bool b_const, CForm c, float alpha, float beta,
                std::uint32_t seed) {
    const std::int64_t M = 5, K = 7, N = 6;
    Net net(13);
    net.feed("a", rnd(ta ? Dims{K, M} : Dims{M, K}, seed));
    const Tensor b = rnd(tb ? Dims{N, K} : Dims{K, N}, seed + 1);
    if (b_const)
        net.constant("b", b);
    else
        net.feed("b", b);
    std::vector<std::string> ins{"a", "b"};
    const bool c_rt = c == CForm::rt_n || c == CForm::rt_1n || c == CForm::rt_mn;
    if (c != CForm::none) {
        const bool n = c == CForm::const_n || c == CForm::rt_n;
        const bool row = c == CForm::const_1n || c == CForm::rt_1n;
        const Tensor ct = c == CForm::const_scalar
                              ? values({}, {0.25f})
                              : rnd(n ? Dims{N} : Dims{row ? 1 : M, N}, seed + 2);
        if (c_rt)
            net.feed("c", ct);
        else
            net.constant("c", ct);
        ins.push_back("c");
    }
    auto& node = net.node("Gemm", ins, {"y"}, "gemm");
    ai(node, "transA", ta);
    ai(node, "transB", tb);
    af(node, "alpha", alpha);
    af(node, "beta", beta);
    net.output("y");
    // Which backend is designed to take this form (make_gemm in onednn_matmul.cpp and in
    // fast_matmul.cpp); "" = a form both hand on (results checked only).
    const bool c_used = c != CForm::none && beta != 0.f;
    const bool c_row_const = c == CForm::const_n || c == CForm::const_1n;
    const bool c_row_rt = c == CForm::rt_n || c == CForm::rt_1n;
    const bool onednn_ok = !c_used || ((c_row_const || (c_row_rt && beta == 1.f)) && alpha == 1.f);
    const bool cpu_ok = b_const && ta == 0 && (!c_used || c_row_const);
    std::string want = onednn_ok ? "onednn" : "";
    if (b_const)
        want = cpu_ok && packed_provider() == "cpu" ? "cpu"
               : onednn_ok                          ? "onednn"
               : cpu_ok                             ? "cpu"
                                                    : "";
    std::ostringstream what;
    what << "Gemm transA " << ta << " transB " << tb << (b_const ? " constant B" : " run-time B")
         << " C form " << static_cast<int>(c) << " alpha " << alpha << " beta " << beta;
    check_vs_reference(net, dot(K), {{"gemm", want}}, what.str());
}

}  // namespace

TEST_CASE("oneDNN and packed Gemm match the reference for every transpose alpha beta and C form",
          "[onednn]") {
    if (no_onednn()) return;
    std::uint32_t seed = 100;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (bool b_const : {false, true})
                for (CForm c : {CForm::none, CForm::const_n, CForm::const_1n, CForm::const_mn,
                                CForm::const_scalar, CForm::rt_n, CForm::rt_1n, CForm::rt_mn})
                    for (float alpha : {1.f, 0.5f})
                        for (float beta : {1.f, -2.f, 0.f})
                            if (c != CForm::none || beta == 1.f)
                                check_gemm(ta, tb, b_const, c, alpha, beta, seed += 3);
}

// ---- Conv and ConvTranspose ---------------------------------------------------------------------

namespace {

struct ConvCase {
    std::string op, what;
    Dims x, w;
    bool bias = false;
    Window win = {};
    Dims declared = {};  // declared input shape (negative = "batch"); empty = x's shape
};

// clang-format off
const std::vector<ConvCase> kConvCases = {
    {"Conv", "1-D strided asymmetric pads", {2, 4, 11}, {6, 4, 3}, true,
     {.strides = {2}, .pads = {1, 2}}},
    {"Conv", "2-D 3x3 pad 1", {1, 3, 10, 9}, {8, 3, 3, 3}, true, {.pads = {1, 1, 1, 1}}},
    {"Conv", "2-D no bias no pads", {2, 5, 6, 7}, {4, 5, 2, 3}, false},
    {"Conv", "2-D groups 2 stride 2", {2, 8, 7, 7}, {12, 4, 3, 3}, false,
     {.strides = {2, 2}, .group = 2}},
    {"Conv", "2-D depthwise", {1, 16, 9, 9}, {16, 1, 3, 3}, true,
     {.pads = {1, 1, 1, 1}, .group = 16}},
    {"Conv", "2-D depthwise multiplier 2", {1, 8, 9, 9}, {16, 1, 3, 3}, true, {.group = 8}},
    {"Conv", "2-D dilations", {1, 4, 12, 12}, {8, 4, 3, 3}, true,
     {.pads = {2, 3, 2, 3}, .dilations = {2, 3}}},
    {"Conv", "2-D asymmetric pads and strides", {1, 4, 8, 8}, {8, 4, 3, 2}, true,
     {.strides = {2, 1}, .pads = {0, 1, 2, 0}}},
    {"Conv", "2-D SAME_UPPER", {1, 4, 9, 8}, {8, 4, 4, 3}, true,
     {.strides = {2, 2}, .auto_pad = "SAME_UPPER"}},
    {"Conv", "2-D SAME_LOWER", {1, 4, 9, 8}, {8, 4, 4, 3}, false,
     {.strides = {2, 2}, .auto_pad = "SAME_LOWER"}},
    {"Conv", "2-D VALID", {1, 4, 9, 8}, {8, 4, 3, 3}, true,
     {.strides = {2, 1}, .auto_pad = "VALID"}},
    {"Conv", "2-D 1x1", {2, 16, 5, 5}, {32, 16, 1, 1}, true},
    {"Conv", "2-D wide reduction", {1, 64, 8, 8}, {32, 64, 3, 3}, true, {.pads = {1, 1, 1, 1}}},
    {"Conv", "3-D", {1, 3, 6, 7, 5}, {4, 3, 3, 2, 3}, true,
     {.strides = {1, 2, 1}, .pads = {1, 0, 1, 1, 1, 0}}},
    {"Conv", "3-D groups dilations", {1, 4, 7, 7, 7}, {4, 2, 2, 2, 2}, false,
     {.dilations = {2, 1, 2}, .group = 2}},
    {"Conv", "2-D symbolic batch", {3, 8, 8, 8}, {16, 8, 3, 3}, true,
     {.pads = {1, 1, 1, 1}}, {-1, 8, 8, 8}},
    {"ConvTranspose", "2-D stride 2 pads output_padding", {1, 4, 5, 5}, {4, 6, 3, 3}, true,
     {.strides = {2, 2}, .pads = {1, 1, 1, 1}, .output_padding = {1, 1}}},
    {"ConvTranspose", "2-D groups", {1, 8, 5, 4}, {8, 3, 3, 3}, true,
     {.strides = {2, 1}, .group = 2}},
    {"ConvTranspose", "2-D depthwise", {2, 8, 4, 4}, {8, 1, 3, 3}, false,
     {.strides = {2, 2}, .pads = {1, 0, 0, 1}, .group = 8}},
    {"ConvTranspose", "2-D output_padding beyond the end pad", {1, 4, 5, 5}, {4, 4, 3, 3}, false,
     {.strides = {2, 2}, .output_padding = {1, 1}}},
    {"ConvTranspose", "2-D dilations", {1, 4, 5, 5}, {4, 4, 3, 3}, true, {.dilations = {2, 2}}},
    {"ConvTranspose", "2-D asymmetric pads", {1, 3, 6, 5}, {3, 5, 4, 3}, true,
     {.strides = {2, 3}, .pads = {0, 2, 1, 1}}},
    {"ConvTranspose", "2-D SAME_UPPER", {1, 4, 5, 5}, {4, 4, 3, 3}, true,
     {.strides = {2, 2}, .auto_pad = "SAME_UPPER"}},
    {"ConvTranspose", "2-D output_shape", {1, 4, 5, 5}, {4, 4, 3, 3}, false,
     {.strides = {2, 2}, .output_shape = {10, 10}}},
    {"ConvTranspose", "1-D", {2, 4, 7}, {4, 3, 4}, true, {.strides = {3}, .pads = {1, 2}}},
    {"ConvTranspose", "3-D", {1, 2, 3, 4, 3}, {2, 3, 2, 2, 2}, true, {.strides = {2, 2, 2}}},
    {"ConvTranspose", "2-D symbolic batch", {2, 16, 4, 4}, {16, 8, 2, 2}, true,
     {.strides = {2, 2}}, {-1, 16, 4, 4}},
};
// clang-format on

/// Runs every case of kConvCases for `op` against the reference.
void run_conv_cases(const std::string& op) {
    std::uint32_t seed = 1000;
    for (const auto& c : kConvCases) {
        seed += 10;
        if (c.op != op) continue;
        const bool transpose = op == "ConvTranspose";
        const std::int64_t group = std::max<std::int64_t>(1, c.win.group);
        Net net(17);
        net.feed("x", rnd(c.x, seed), c.declared);
        net.constant("w", rnd(c.w, seed + 1));
        std::vector<std::string> ins{"x", "w"};
        if (c.bias) {
            net.constant("bias", rnd({transpose ? c.w[1] * group : c.w[0]}, seed + 2));
            ins.push_back("bias");
        }
        c.win.apply(net.node(op, ins, {"y"}, "conv"));
        net.output("y");
        std::int64_t k = transpose ? c.w[0] / group : c.w[1];
        for (std::size_t i = 2; i < c.w.size(); ++i) k *= c.w[i];
        check_vs_reference(net, dot(k), {{"conv", "onednn"}}, op + " " + c.what);
    }
}

}  // namespace

TEST_CASE("oneDNN Conv matches the reference in 1-D 2-D and 3-D with groups pads and auto_pad",
          "[onednn]") {
    if (no_onednn()) return;
    run_conv_cases("Conv");
}

TEST_CASE("oneDNN ConvTranspose matches the reference with strides pads output_padding and groups",
          "[onednn]") {
    if (no_onednn()) return;
    run_conv_cases("ConvTranspose");
}

TEST_CASE("oneDNN Conv with a symbolic batch runs several batch sizes on one engine", "[onednn]") {
    // The kernel lets the stored weights go after packing them (WeightPacker): the empty batch,
    // which oneDNN does not take, runs the reference kernel on weights rebuilt from the packed
    // copy, and the batches after it use the packed copy again.
    if (no_onednn()) return;
    Net net(17);
    net.feed("x", rnd({1, 8, 6, 6}, 1), {-1, 8, 6, 6});
    net.constant("w", rnd({16, 8, 3, 3}, 2)).constant("b", rnd({16}, 3));
    aints(net.node("Conv", {"x", "w", "b"}, {"y"}, "conv"), "pads", {1, 1, 1, 1});
    net.output("y");
    const InferenceEngine fast = compile(net, kFast);
    const InferenceEngine ref = compile(net, kReference);
    CHECK(providers_of(fast).at("conv") == "onednn");
    for (std::int64_t batch : {1, 4, 0, 2, 4}) {
        const std::vector<NamedTensor> feeds{
            {"x", rnd({batch, 8, 6, 6}, 10 + static_cast<std::uint32_t>(batch))}};
        const Tensor y = outputs_of(fast, feeds)[0];
        CHECK(y.shape() == Shape{batch, 16, 6, 6});
        CHECK(mismatches(y, outputs_of(ref, feeds)[0], dot(72), "batch " + std::to_string(batch)) == 0);
    }
}

// ---- pooling ------------------------------------------------------------------------------------

TEST_CASE("oneDNN MaxPool AveragePool and global pooling match the reference", "[onednn]") {
    if (no_onednn()) return;
    struct Case {
        std::string op;
        Dims x;
        Window win = {};
        std::int64_t opset = 17;
    };
    // clang-format off
    const std::vector<Case> cases = {
        {"MaxPool", {2, 8, 9, 10},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}}},
        {"MaxPool", {2, 8, 9, 10}, {.kernel_shape = {3, 3}, .strides = {2, 2}, .ceil_mode = 1}},
        {"MaxPool", {1, 3, 11, 11},
         {.kernel_shape = {2, 3}, .pads = {0, 1, 1, 0}, .dilations = {2, 2}}},
        {"MaxPool", {1, 3, 9, 8},
         {.kernel_shape = {3, 2}, .strides = {2, 2}, .auto_pad = "SAME_UPPER"}},
        {"MaxPool", {1, 3, 9, 8},
         {.kernel_shape = {3, 2}, .strides = {2, 2}, .auto_pad = "SAME_LOWER"}},
        {"MaxPool", {2, 4, 13}, {.kernel_shape = {3}, .strides = {2}, .pads = {1, 1}}},
        {"MaxPool", {1, 2, 5, 6, 7},
         {.kernel_shape = {2, 2, 3}, .strides = {2, 2, 2}, .ceil_mode = 1}},
        {"AveragePool", {2, 8, 9, 10},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}}},
        {"AveragePool", {2, 8, 9, 10},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}, .count_include_pad = 1}},
        {"AveragePool", {2, 8, 8, 8}, {.kernel_shape = {3, 3}, .strides = {2, 2}, .ceil_mode = 1}},
        {"AveragePool", {2, 8, 8, 8},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .ceil_mode = 1, .count_include_pad = 1}},
        {"AveragePool", {2, 8, 9, 9},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .pads = {1, 0, 1, 0}, .ceil_mode = 1}},
        {"AveragePool", {1, 3, 9, 9},
         {.kernel_shape = {3, 2}, .pads = {0, 1, 2, 0}, .count_include_pad = 1}},
        {"AveragePool", {1, 3, 10, 10},
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .auto_pad = "SAME_UPPER"}},
        {"AveragePool", {1, 3, 11, 11},
         {.kernel_shape = {2, 2}, .pads = {1, 1, 1, 1}, .dilations = {2, 3}}, 19},
        {"AveragePool", {2, 4, 13},
         {.kernel_shape = {4}, .strides = {3}, .pads = {2, 1}, .count_include_pad = 1}},
        {"AveragePool", {1, 2, 5, 6, 7}, {.kernel_shape = {2, 3, 3}, .pads = {1, 1, 0, 0, 1, 1}}},
        {"GlobalAveragePool", {2, 8, 5, 6}},
        {"GlobalMaxPool", {2, 8, 5, 6}},
        {"GlobalAveragePool", {1, 3, 4, 5, 2}},
        {"GlobalMaxPool", {3, 5, 7}},
    };
    // clang-format on
    std::uint32_t seed = 3000;
    for (const auto& c : cases) {
        Net net(c.opset);
        net.feed("x", rnd(c.x, seed++, -2.f, 2.f));
        c.win.apply(net.node(c.op, {"x"}, {"y"}, "pool"));
        net.output("y");
        const bool max = c.op.find("Max") != std::string::npos;
        check_vs_reference(net, max ? bitwise() : close(1e-6, 1e-6), {{"pool", "onednn"}},
                           c.op + " " + dims_str(c.x));
    }
}

// ---- normalization and softmax ------------------------------------------------------------------

TEST_CASE("oneDNN BatchNormalization matches the reference", "[onednn]") {
    if (no_onednn()) return;
    for (const Dims& x : {Dims{2, 8, 5, 5}, Dims{2, 3, 7}, Dims{1, 16, 3, 2, 2}}) {
        for (bool runtime_params : {false, true}) {
            const std::int64_t c = x[1];
            Net net(15);
            net.feed("x", rnd(x, 1, -3.f, 3.f));
            const Tensor params[4] = {rnd({c}, 2, 0.5f, 1.5f), rnd({c}, 3), rnd({c}, 4),
                                      rnd({c}, 5, 0.2f, 2.f)};
            const char* names[4] = {"scale", "bias", "mean", "var"};
            for (int i = 0; i < 4; ++i) {
                if (runtime_params)
                    net.feed(names[i], params[i]);
                else
                    net.constant(names[i], params[i]);
            }
            af(net.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn"),
               "epsilon", 1e-3f);
            net.output("y");
            check_vs_reference(net, close(1e-6, 1e-6), {{"bn", "onednn"}},
                               "BatchNormalization " + dims_str(x) +
                                   (runtime_params ? " run-time parameters" : ""));
        }
    }
}

TEST_CASE("oneDNN LayerNormalization matches the reference on axis -1 and -2 with and without bias",
          "[onednn]") {
    if (no_onednn()) return;
    for (std::int64_t axis : {-1, -2, 1}) {
        for (bool bias : {true, false}) {
            const Dims x{2, 5, 16};
            const Dims p = axis == -1 ? Dims{16} : Dims{5, 16};
            Net net(17);
            net.feed("x", rnd(x, 7, -3.f, 3.f));
            net.constant("scale", rnd(p, 8, 0.5f, 1.5f));
            std::vector<std::string> ins{"x", "scale"};
            if (bias) {
                net.constant("bias", rnd(p, 9));
                ins.push_back("bias");
            }
            auto& n = net.node("LayerNormalization", ins, {"y"}, "ln");
            ai(n, "axis", axis);
            af(n, "epsilon", 1e-5f);
            net.output("y");
            check_vs_reference(net, close(1e-5, 1e-5), {{"ln", "onednn"}},
                               "LayerNormalization axis " + std::to_string(axis) +
                                   (bias ? " with bias" : " without bias"));
        }
    }
}

TEST_CASE("oneDNN Softmax and LogSoftmax match the reference for coerced and single-axis forms",
          "[onednn]") {
    if (no_onednn()) return;
    const Dims x{2, 3, 4, 5};
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        const bool log = std::string(op) == "LogSoftmax";
        for (std::int64_t opset : {11, 13}) {
            for (std::int64_t axis : {-100, 0, 1, 2, -1}) {  // -100: attribute omitted
                Net net(opset);
                net.feed("x", rnd(x, 11, -6.f, 6.f));
                auto& n = net.node(op, {"x"}, {"y"}, "sm");
                if (axis != -100) ai(n, "axis", axis);
                net.output("y");
                check_vs_reference(net, log ? close(1e-5, 1e-5) : close(1e-6, 1e-5),
                                   {{"sm", "onednn"}},
                                   std::string(op) + " opset " + std::to_string(opset) + " axis " +
                                       std::to_string(axis));
            }
        }
    }
}

TEST_CASE("oneDNN Softmax and LogSoftmax handle masked and extreme logits like the reference",
          "[onednn]") {
    if (no_onednn()) return;
    // Rows of 6 logits as attention masks make them: -inf, the lowest float, -1e9, huge values.
    const float lo = std::numeric_limits<float>::lowest();
    const std::vector<float> x{
        1.f,   -kInf, 2.f,   -kInf,  0.5f,  -kInf,  // masked with -inf
        1.f,   lo,    2.f,   lo,     0.5f,  lo,     // masked with the lowest float
        1.f,   -1e9f, 2.f,   -1e9f,  0.5f,  -1e9f,  // masked with -1e9
        3e38f, 3e38f, 1.f,   -3e38f, 0.f,   2e38f,  // huge logits
        -kInf, 0.f,   -kInf, -kInf,  -kInf, -kInf,  // one live entry
        7.f,   7.f,   7.f,   7.f,    7.f,   7.f,    // uniform
    };
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        Net net(13);
        net.feed("x", values({6, 6}, x));
        net.node(op, {"x"}, {"y"}, "sm");
        net.output("y");
        // LogSoftmax: oneDNN's log(1) of the one-live-entry row is 1.4e-6, inside 1e-5.
        const bool log = std::string(op) == "LogSoftmax";
        check_vs_reference(net, log ? close(1e-5, 1e-5) : close(1e-6, 1e-5), {{"sm", "onednn"}},
                           std::string(op) + " on masked rows");
    }
}

TEST_CASE("packed Gemm with alpha beta and a long K matches the reference", "[onednn]") {
    if (no_onednn()) return;
    // K = 1100 spans three K blocks of the packed GEMM: alpha and the bias apply once, at the end.
    for (int tb = 0; tb < 2; ++tb) {
        const std::int64_t M = 37, K = 1100, N = 50;
        Net net(13);
        net.feed("a", rnd({M, K}, 1));
        net.constant("b", rnd(tb ? Dims{N, K} : Dims{K, N}, 2));
        net.constant("c", rnd({N}, 3));
        auto& n = net.node("Gemm", {"a", "b", "c"}, {"y"}, "gemm");
        ai(n, "transB", tb);
        af(n, "alpha", 0.5f);
        af(n, "beta", 2.f);
        net.output("y");
        check_vs_reference(net, dot(K), {{"gemm", "cpu"}}, "Gemm transB " + std::to_string(tb));
    }
}

// ---- elementwise --------------------------------------------------------------------------------

namespace {

/// x[3, 5, 7] spread over [-6, 6], with zeros, infinities, tiny, subnormal and large values at
/// the front (no NaN: NaN handling is tested on its own below).
Tensor eltwise_input() {
    Tensor t = rnd({3, 5, 7}, 42, -6.f, 6.f);
    const float specials[] = {0.f,  -0.f,  kInf, -kInf, 1e-30f, -1e-30f, 1e-40f,
                              90.f, -90.f, 1e6f, -1e6f, 3.f,    -3.f};
    std::copy(std::begin(specials), std::end(specials), t.data<float>());
    return t;
}

struct Unary {
    std::string op;
    std::int64_t opset;
    Tol tol;
    std::vector<std::pair<std::string, float>> attrs = {};  // float attributes
    std::vector<float> bounds = {};  // Clip >= 11: min (and max) inputs, constants...
    bool runtime_bounds = false;     // ... or graph inputs
    std::string approximate = {};    // Gelu
};

// Measured against the reference over [-30, 30]: Exp <= 3 ulp, Tanh and Sigmoid <= 2 ulp.
// Results below FLT_MIN may flush to zero (oneDNN gives Exp(-90) = 0, the reference 8.2e-40).
const Tol kTranscendental = ulps(4, std::numeric_limits<float>::min());
// Elu: oneDNN computes alpha * (exp(x) - 1) where the reference uses expm1, so near 0 the
// difference is an ulp of 1 (1e-7 absolute, 14 ulp of the result). HardSwish: 1 ulp of x.
const Tol kEluHardSwish = ulps(4, 2e-7);
// Gelu: 0.5 * x * (1 + erf(x / sqrt 2)) cancels for x < 0 on both sides (|x|/2 times a few
// ulp of 1: up to 4e-7 measured at x ~ -3.3, 1e-6 bounds it for every x).
const Tol kGelu = ulps(4, 1e-6);
// Mish: oneDNN evaluates x * ((1 + e^x)^2 - 1) / ((1 + e^x)^2 + 1), which cancels for x << 0:
// relative error 1e-2 at x = -12 and the result flushes to 0 below x ~ -17, where
// |mish(x)| < 1e-6. Absolute error measured <= 9.9e-7 over [-30, 30].
const Tol kMish = ulps(4, 1.5e-6);

// clang-format off
const std::vector<Unary> kUnaryOps = {
    {"Relu", 14, bitwise()},
    {"LeakyRelu", 16, bitwise(), {{"alpha", 0.125f}}},
    {"Abs", 13, bitwise()},
    {"Neg", 13, bitwise()},
    {"Sqrt", 13, bitwise()},
    {"Clip", 6, bitwise(), {{"min", -0.5f}, {"max", 0.75f}}},
    {"Clip", 6, bitwise(), {{"min", 2.f}, {"max", -2.f}}},  // min > max
    {"Clip", 13, bitwise(), {}, {-1.5f, 2.f}},
    {"Clip", 13, bitwise(), {}, {-1.5f}},                   // no max
    {"Clip", 13, bitwise(), {}, {1.f, -1.f}},               // min > max
    {"Clip", 13, bitwise(), {}, {kNaN, 2.f}},               // NaN bounds
    {"Clip", 13, bitwise(), {}, {-2.f, kNaN}},
    {"Clip", 13, bitwise(), {}, {-0.25f, 0.5f}, true},      // run-time bounds
    {"Exp", 13, kTranscendental},
    {"Tanh", 13, kTranscendental},
    {"Sigmoid", 13, kTranscendental},
    {"Elu", 6, kEluHardSwish, {{"alpha", 0.7f}}},
    {"HardSwish", 14, kEluHardSwish},
    {"Mish", 18, kMish},
    {"Gelu", 20, kGelu},
    {"Gelu", 20, kGelu, {}, {}, false, "tanh"},
};
// clang-format on

Net unary_net(const Unary& u, const Tensor& x) {
    Net net(u.opset);
    net.feed("x", x);
    std::vector<std::string> ins{"x"};
    for (std::size_t i = 0; i < u.bounds.size(); ++i) {
        const std::string name = i == 0 ? "min" : "max";
        if (u.runtime_bounds)
            net.feed(name, values({}, {u.bounds[i]}));
        else
            net.constant(name, values({}, {u.bounds[i]}));
        ins.push_back(name);
    }
    auto& n = net.node(u.op, ins, {"y"}, "op");
    for (const auto& [name, v] : u.attrs) af(n, name, v);
    if (!u.approximate.empty()) as(n, "approximate", u.approximate);
    net.output("y");
    return net;
}

std::string unary_name(const Unary& u) {
    std::ostringstream os;
    os << u.op << " opset " << u.opset;
    for (const auto& [name, v] : u.attrs) os << " " << name << " " << v;
    for (float b : u.bounds) os << " bound " << b;
    if (!u.approximate.empty()) os << " approximate " << u.approximate;
    return os.str();
}

Tensor specials_cross(const std::vector<float>& s, bool first) {
    std::vector<float> v;
    for (float x : s)
        for (float y : s) v.push_back(first ? x : y);
    return values({static_cast<std::int64_t>(v.size())}, v);
}

}  // namespace

/// Where an op runs: oneDNN does not register the ops whose NaN or signed-zero results differ
/// from ONNX (Exp, Clip, Neg; binary Max, Min); dsinfer's own kernels run them.
std::string provider_of_op(const std::string& op) {
    for (const char* o : {"Exp", "Clip", "Neg", "Max", "Min"})
        if (op == o) return "!onednn";
    // Below AVX2 oneDNN's logistic is not accurate enough: dsinfer's loop runs Sigmoid.
    if (op == "Sigmoid" && onednn_version().find("isa: sse41") != std::string::npos) return "!onednn";
    return "onednn";
}

TEST_CASE("oneDNN unary eltwise ops match the reference including zeros and infinities",
          "[onednn]") {
    if (no_onednn()) return;
    for (const auto& u : kUnaryOps) {
        // Neg is compared by value: oneDNN's linear eltwise (-1 * x + 0) turns -0 into +0 (see
        // the signed-zero test below).
        const Tol tol = u.op == "Neg" ? close(0, 0) : u.tol;
        check_vs_reference(unary_net(u, eltwise_input()), tol, {{"op", provider_of_op(u.op)}},
                           unary_name(u));
    }
}

TEST_CASE("oneDNN smooth unary ops are accurate over their whole range", "[onednn]") {
    if (no_onednn()) return;
    // Dense coverage of [-30, 30], where the polynomials switch pieces and saturate.
    for (const auto& u : kUnaryOps) {
        if (u.tol.bitwise) continue;
        for (float range : {1.f, 12.f, 30.f})
            check_vs_reference(unary_net(u, rnd({4096}, 77, -range, range)), u.tol,
                               {{"op", provider_of_op(u.op)}},
                               unary_name(u) + " over +-" + std::to_string(range));
    }
}

TEST_CASE("oneDNN unary ops keep NaN and the sign of zero like the reference", "[onednn]") {
    // oneDNN 2.6 gives Relu(NaN) = 0, Clip(NaN) = the lower bound, Exp(NaN) = +inf and
    // Neg(+-0) = +0. Exp, Clip and Neg therefore run on dsinfer's kernels (provider_of_op);
    // Relu stays in the oneDNN backend (it is in blocked CNN chains) but computes with
    // dsinfer's loop, which keeps NaN (src/onednn/onednn_eltwise.cpp).
    if (no_onednn()) return;
    const Tensor x = values({6}, {kNaN, -kNaN, 0.f, -0.f, 1.f, -1.f});
    for (const auto& u : kUnaryOps) {
        check_vs_reference(unary_net(u, x), u.tol, {{"op", provider_of_op(u.op)}},
                           unary_name(u) + " on NaN and signed zeros");
    }
}

TEST_CASE("oneDNN binary ops broadcast both ways and match the reference bitwise", "[onednn]") {
    if (no_onednn()) return;
    const std::vector<std::pair<Dims, Dims>> shapes = {
        {{2, 3, 4}, {2, 3, 4}},
        {{2, 3, 4}, {4}},
        {{2, 3, 4}, {3, 1}},
        {{2, 3, 4}, {1}},
        {{2, 3, 4}, {}},
        {{4}, {2, 3, 4}},  // broadcast first operand (Sub/Div: the kernel's fallback)
        {{3, 1}, {2, 3, 4}},
        {{}, {2, 3, 4}},
        {{2, 1, 4}, {3, 1}},  // both broadcast
        {{2, 8, 3, 3}, {1, 8, 1, 1}},
    };
    std::uint32_t seed = 500;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
        for (const auto& [a, b] : shapes) {
            for (bool b_const : {false, true}) {
                Net net(14);
                net.feed("a", rnd(a, seed, -4.f, 4.f));
                if (b_const)
                    net.constant("b", rnd(b, seed + 1, -4.f, 4.f));
                else
                    net.feed("b", rnd(b, seed + 1, -4.f, 4.f));
                net.node(op, {"a", "b"}, {"y"}, "op");
                net.output("y");
                check_vs_reference(net, bitwise(), {{"op", provider_of_op(op)}},
                                   std::string(op) + " " + dims_str(a) + " with " +
                                       (b_const ? "constant " : "") + dims_str(b));
            }
            seed += 2;
        }
    }
}

TEST_CASE("oneDNN binary ops match the reference on zeros and infinities", "[onednn]") {
    if (no_onednn()) return;
    const std::vector<float> s{1.f, -kInf, kInf, 0.f, -0.f, 2.f, -3.f, 1e-40f, 3e38f};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
        // Max/Min by value: of +0 and -0, oneDNN returns the second operand, the reference the
        // first (see the NaN test below).
        const bool max_min = op[0] == 'M' && op[1] != 'u';
        Net net(14);
        net.feed("a", specials_cross(s, true)).feed("b", specials_cross(s, false));
        net.node(op, {"a", "b"}, {"y"}, "op");
        net.output("y");
        check_vs_reference(net, max_min ? close(0, 0) : bitwise(), {{"op", provider_of_op(op)}},
                           std::string(op) + " on zeros and infinities");
    }
}

TEST_CASE("oneDNN binary Max and Min propagate NaN like the reference", "[onednn]") {
    // oneDNN's binary_max/binary_min return the second operand when one is NaN or both are
    // zeros (vmaxps/vminps semantics), so Max and Min run on dsinfer's kernels, which return
    // NaN and the first operand of +0/-0 like the reference.
    if (no_onednn()) return;
    const std::vector<float> s{kNaN, 1.f, -kInf, kInf, 0.f, -0.f, -2.f};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
        Net net(14);
        net.feed("a", specials_cross(s, true)).feed("b", specials_cross(s, false));
        net.node(op, {"a", "b"}, {"y"}, "op");
        net.output("y");
        check_vs_reference(net, bitwise(), {{"op", provider_of_op(op)}},
                           std::string(op) + " with NaN operands");
    }
}

// ---- blocked layout -----------------------------------------------------------------------------

namespace {

/// Weights scaled by 1/sqrt(fan_in) so that activations stay O(1) through the layers.
Tensor weights(const Dims& d, std::uint32_t seed) {
    std::int64_t fan_in = 1;
    for (std::size_t i = 1; i < d.size(); ++i) fan_in *= d[i];
    const float s = std::sqrt(3.f / static_cast<float>(fan_in));
    return rnd(d, seed, -s, s);
}

void conv(Net& net, const std::string& name, const std::string& x, const std::string& y,
          const Dims& w, std::uint32_t seed, bool bias = true) {
    net.constant(name + ".w", weights(w, seed));
    std::vector<std::string> ins{x, name + ".w"};
    if (bias) {
        net.constant(name + ".b", rnd({w[0]}, seed + 1, -0.1f, 0.1f));
        ins.push_back(name + ".b");
    }
    auto& n = net.node("Conv", ins, {y}, name);
    if (w[2] == 3) aints(n, "pads", {1, 1, 1, 1});
}

// Where a value that must stay row-major sits: none; in the main chain (every oneDNN kernel of
// the chain is "uniform", so the whole chain turns row-major); or in a side branch from x
// (Conv(3->16) -> Relu -> Conv -> GlobalAveragePool), so the main chain stays blocked.
enum class Variant {
    plain,
    output_in_chain,
    foreign_in_chain,
    output_in_branch,
    foreign_in_branch
};

const char* variant_name(Variant v) {
    switch (v) {
        case Variant::plain: return "plain";
        case Variant::output_in_chain: return "intermediate graph output in the chain";
        case Variant::foreign_in_chain: return "non-oneDNN consumer in the chain";
        case Variant::output_in_branch: return "intermediate graph output in a side branch";
        case Variant::foreign_in_branch: return "non-oneDNN consumer in a side branch";
    }
    return "";
}

/// x[batch,3,12,12] -> Conv(3->16) -> BatchNorm -> Relu -> Conv(16->16) -> Add(residual) -> Relu
/// -> MaxPool -> Conv(16->32) -> GlobalAveragePool -> Flatten -> Gemm -> y[batch,10].
Net resnet_like(std::int64_t batch, Variant v) {
    Net net(17);
    net.feed("x", rnd({batch, 3, 12, 12}, 900 + static_cast<std::uint32_t>(batch), -2.f, 2.f),
             {-1, 3, 12, 12});
    conv(net, "conv1", "x", "c1", {16, 3, 3, 3}, 1);
    net.constant("bn.scale", rnd({16}, 10, 0.5f, 1.5f)).constant("bn.bias", rnd({16}, 11));
    net.constant("bn.mean", rnd({16}, 12, -0.2f, 0.2f))
        .constant("bn.var", rnd({16}, 13, 0.5f, 2.f));
    net.node("BatchNormalization", {"c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, {"b1"},
             "bn");
    net.node("Relu", {"b1"}, {"r1"}, "relu1");
    conv(net, "conv2", "r1", "c2", {16, 16, 3, 3}, 20);
    net.node("Add", {"c2", "r1"}, {"s"}, "add");
    net.node("Relu", {"s"}, {"r2"}, "relu2");
    Window{.kernel_shape = {2, 2}, .strides = {2, 2}}.apply(
        net.node("MaxPool", {"r2"}, {"p"}, "pool"));
    conv(net, "conv3", "p", "c3", {32, 16, 3, 3}, 30);
    net.node("GlobalAveragePool", {"c3"}, {"g"}, "gap");
    net.node("Flatten", {"g"}, {"f"}, "flatten");
    net.constant("fc.w", weights({10, 32}, 40)).constant("fc.b", rnd({10}, 41));
    ai(net.node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc"), "transB", 1);
    net.output("y");
    if (v == Variant::output_in_branch || v == Variant::foreign_in_branch) {
        conv(net, "side1", "x", "sc", {16, 3, 3, 3}, 50);
        net.node("Relu", {"sc"}, {"sr"}, "side_relu");
        conv(net, "side2", "sr", "sc2", {16, 16, 3, 3}, 52);
        net.node("GlobalAveragePool", {"sc2"}, {"side"}, "side_gap");
        net.output("side");
    }
    const std::string watched =
        v == Variant::output_in_chain || v == Variant::foreign_in_chain ? "r2" : "sr";
    if (v == Variant::output_in_chain || v == Variant::output_in_branch) net.output(watched);
    if (v == Variant::foreign_in_chain || v == Variant::foreign_in_branch) {
        // A value oneDNN could keep blocked also feeds a non-oneDNN op.
        aints(net.node("Transpose", {watched}, {"t"}, "transpose"), "perm", {0, 2, 3, 1});
        net.output("t");
    }
    return net;
}

std::map<std::string, std::string> resnet_providers() {
    std::map<std::string, std::string> p;
    for (const char* n : {"conv1", "bn", "relu1", "conv2", "add", "relu2", "pool", "conv3", "gap"})
        p[n] = "onednn";
    p["fc"] = packed_provider();
    return p;
}

}  // namespace

TEST_CASE("oneDNN blocked layout through a ResNet-like chain matches the reference", "[onednn]") {
    if (no_onednn()) return;
    for (Variant v : {Variant::plain, Variant::output_in_chain, Variant::foreign_in_chain,
                      Variant::output_in_branch, Variant::foreign_in_branch}) {
        INFO(variant_name(v));
        const Net proto = resnet_like(2, v);
        const InferenceEngine fast = compile(proto, kFast);
        const InferenceEngine ref = compile(proto, kReference);
        const auto p = providers_of(fast);
        for (const auto& [node, want] : resnet_providers()) {
            INFO("node " << node);
            CHECK(p.at(node) == want);
        }
        // A value pinned row-major turns its whole chain row-major (all of its oneDNN kernels
        // are uniform); elsewhere the chain keeps the blocked layout.
        if (v == Variant::plain || v == Variant::output_in_branch ||
            v == Variant::foreign_in_branch)
            CHECK(fast.blocked_layout_nodes() > 0);
        CHECK(ref.blocked_layout_nodes() == 0);
        for (std::int64_t batch : {2, 3, 1}) {  // one engine, several batch sizes
            const auto feeds = resnet_like(batch, v).feeds;
            const auto got = outputs_of(fast, feeds);
            const auto exp = outputs_of(ref, feeds);
            REQUIRE(got.size() == exp.size());
            for (std::size_t i = 0; i < got.size(); ++i)
                CHECK(mismatches(
                          got[i], exp[i], dot(2 * 16 * 9),
                          "batch " + std::to_string(batch) + " output " + std::to_string(i)) == 0);
        }
    }
}

TEST_CASE("oneDNN blocked layout stays right around kernels that fall back inside",
          "[onednn]") {
    // Pooling and ConvTranspose accept the blocked layout at compile time (layout_support) but
    // hand some geometries to their fallback (reference) kernel at run time: the fallback then
    // runs on row-major copies made in the workspace (FallbackKernel::run_fallback). The first
    // two cases are controls that oneDNN runs itself.
    if (no_onednn()) return;
    struct Case {
        std::string what;
        std::string op;  // "r" [N,16,8,8] -> op -> "m"; ConvTranspose: 16->16, 3x3
        Window win;
    };
    // clang-format off
    const std::vector<Case> cases = {
        {"MaxPool ceil_mode", "MaxPool",
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .ceil_mode = 1}},
        {"ConvTranspose with pads", "ConvTranspose",
         {.strides = {2, 2}, .pads = {1, 1, 1, 1}, .output_padding = {1, 1}}},
        {"AveragePool ceil_mode with count_include_pad", "AveragePool",
         {.kernel_shape = {3, 3}, .strides = {2, 2}, .ceil_mode = 1, .count_include_pad = 1}},
        {"ConvTranspose with output_padding beyond the end pad", "ConvTranspose",
         {.strides = {2, 2}, .output_padding = {1, 1}}},
        {"ConvTranspose with auto_pad", "ConvTranspose",
         {.strides = {2, 2}, .auto_pad = "SAME_UPPER"}},
        {"ConvTranspose with output_shape", "ConvTranspose",
         {.strides = {2, 2}, .output_shape = {16, 16}}},
    };
    // clang-format on
    for (const auto& c : cases) {
        INFO(c.what);
        // x[N,3,8,8] -> Conv(3->16) -> Relu -> op -> Conv(16->16) -> GlobalMaxPool -> y:
        // everything between the first Conv's output and the pooling input may be blocked.
        Net net(17);
        net.feed("x", rnd({2, 3, 8, 8}, 70, -2.f, 2.f), {-1, 3, 8, 8});
        conv(net, "conv1", "x", "c", {16, 3, 3, 3}, 71);
        net.node("Relu", {"c"}, {"r"}, "relu");
        std::vector<std::string> ins{"r"};
        if (c.op == "ConvTranspose") {
            net.constant("ct.w", weights({16, 16, 3, 3}, 60));
            ins.push_back("ct.w");
        }
        c.win.apply(net.node(c.op, ins, {"m"}, "middle"));
        conv(net, "conv2", "m", "c2", {16, 16, 3, 3}, 72);
        net.node("GlobalMaxPool", {"c2"}, {"y"}, "gmp");
        net.output("y");
        CHECK(compile(net, kFast).blocked_layout_nodes() > 0);
        check_vs_reference(net, dot(2 * 16 * 9),
                           {{"conv1", "onednn"}, {"middle", "onednn"}, {"conv2", "onednn"}},
                           "blocked chain through " + c.what);
    }
}

TEST_CASE("oneDNN Conv on small maps runs the im2col GEMM with a fused residual and matches the "
          "reference",
          "[onednn]") {
    // Windows on output maps of at most 8x8 run on dsinfer's im2col + packed GEMM inside the
    // oneDNN kernel (choose_conv_algo; stride-1 ones only with blocks of 8, below AVX-512)
    // when both sides are blocked: here conv2 (7x7, with the
    // residual Add and Relu fused into it at level 3) and conv3 (stride 2, 7x7 -> 4x4); conv1's
    // row-major 3-channel input keeps it on oneDNN. One engine, several batch sizes (shape
    // classes share the GEMM's packed weights).
    if (no_onednn()) return;
    auto build = [](std::int64_t batch) {
        Net net(17);
        net.feed("x", rnd({batch, 3, 14, 14}, 80 + static_cast<std::uint32_t>(batch), -2.f, 2.f),
                 {-1, 3, 14, 14});
        conv(net, "conv1", "x", "c1", {16, 3, 3, 3}, 81);  // stride 1 here, 14x14
        net.node("Relu", {"c1"}, {"r1"}, "relu1");
        Window{.kernel_shape = {2, 2}, .strides = {2, 2}}.apply(
            net.node("MaxPool", {"r1"}, {"p1"}, "pool"));
        conv(net, "conv2", "p1", "c2", {16, 16, 3, 3}, 82);
        net.node("Add", {"c2", "p1"}, {"s"}, "add");
        net.node("Relu", {"s"}, {"r2"}, "relu2");
        // 32 output channels: whole channel blocks at every ISA level (8 on AVX2 and SSE4.1,
        // 16 on AVX-512), so the blocked chain is negotiated on every CPU.
        net.constant("conv3.w", weights({32, 16, 3, 3}, 83));
        Window{.strides = {2, 2}, .pads = {1, 1, 1, 1}}.apply(
            net.node("Conv", {"r2", "conv3.w"}, {"c3"}, "conv3"));
        net.node("GlobalAveragePool", {"c3"}, {"y"}, "gap");
        net.output("y");
        return net;
    };
    EngineOptions o;
    o.backends = kFast;
    o.num_threads = 2;
    const InferenceEngine fast = InferenceEngine::compile(build(2).graph(), o);
    const InferenceEngine ref = compile(build(2), kReference);
    CHECK(fast.blocked_layout_nodes() > 0);
    int residual_convs = 0;
    for (std::size_t i = 0; i < fast.graph().nodes.size(); ++i) {
        const Node& n = fast.graph().nodes[i];
        if (n.op_type == "FusedConv" && n.inputs.size() == 4) ++residual_convs;
        if (n.op_type == "Conv" || n.op_type == "FusedConv") CHECK(fast.node_providers()[i] == "onednn");
    }
    CHECK(residual_convs == 1);
    for (std::int64_t batch : {2, 1, 3}) {
        const auto feeds = build(batch).feeds;
        const auto got = outputs_of(fast, feeds);
        const auto exp = outputs_of(ref, feeds);
        REQUIRE(got.size() == 1);
        CHECK(mismatches(got[0], exp[0], dot(2 * 16 * 9), "batch " + std::to_string(batch)) == 0);
    }
}

TEST_CASE("oneDNN keeps a U-Net's skip Concat and its few-channel head in the blocked layout and "
          "matches the reference",
          "[onednn]") {
    // Conv -> MaxPool -> Conv -> Resize -> Concat(skip) -> Conv -> head Conv to 2 channels: the
    // Concat joins whole channel blocks (onednn_concat.cpp, a copy per image and input) and
    // the head reads the blocked input and writes row-major through a padded blocked
    // destination. Without them every uniform kernel here runs row-major (the head's
    // row-major input spreads through them all).
    if (no_onednn()) return;
    const std::int64_t c = 32;  // whole blocks at every ISA level (8 or 16)
    Net net(17);
    net.feed("x", rnd({2, 3, 16, 16}, 90, -2.f, 2.f), {-1, 3, 16, 16});
    net.constant("c0.w", weights({c, 3, 3, 3}, 91));
    Window{.pads = {1, 1, 1, 1}}.apply(net.node("Conv", {"x", "c0.w"}, {"c0"}, "conv0"));
    net.node("Relu", {"c0"}, {"skip"}, "relu0");
    Window{.kernel_shape = {2, 2}, .strides = {2, 2}}.apply(
        net.node("MaxPool", {"skip"}, {"p"}, "pool"));
    net.constant("c1.w", weights({2 * c, c, 3, 3}, 92));
    Window{.pads = {1, 1, 1, 1}}.apply(net.node("Conv", {"p", "c1.w"}, {"c1"}, "conv1"));
    net.constant("scales", values({4}, {1.f, 1.f, 2.f, 2.f}));
    as(net.node("Resize", {"c1", "", "scales"}, {"up"}, "up"), "mode", "nearest");
    ai(net.node("Concat", {"up", "skip"}, {"cat"}, "cat"), "axis", 1);
    net.constant("c2.w", weights({c, 3 * c, 3, 3}, 93));
    Window{.pads = {1, 1, 1, 1}}.apply(net.node("Conv", {"cat", "c2.w"}, {"c2"}, "conv2"));
    net.constant("head.w", weights({2, c, 1, 1}, 94));
    net.node("Conv", {"c2", "head.w"}, {"y"}, "head");
    net.output("y");
    for (int threads : {1, 2}) {
        const InferenceEngine fast = compile(net, kFast, threads);
        const InferenceEngine ref = compile(net, kReference);
        const auto providers = providers_of(fast);
        CHECK(providers.at("cat") == "onednn");
        CHECK(providers.at("head") == "onednn");
        // Every node but the first conv's row-major input is blocked: 8 nodes negotiated.
        CHECK(fast.blocked_layout_nodes() == 8);
        const auto got = outputs_of(fast, net.feeds);
        const auto exp = outputs_of(ref, net.feeds);
        REQUIRE(got.size() == 1);
        CHECK(mismatches(got[0], exp[0], dot(3 * c * 9), "threads " + std::to_string(threads)) == 0);
    }
}

TEST_CASE("oneDNN Conv runs 3x3 stride-1 windows with enough tiles on Winograd and matches the "
          "reference",
          "[onednn][winograd]") {
    // conv2 (3x3, stride 1, 8x8 map, residual Add and Relu fused at level 3) has 4 output tiles
    // of 4x4 per image: Winograd F(4x4, 3x3) (choose_conv_algo: at least 16 tiles) from
    // batch 4, the im2col GEMM below it. One kernel serves both: the GEMM lets the stored
    // weights go and the Winograd transform then reads them back from the GEMM's copy, or
    // Winograd transforms them first. Both orders, against the reference kernels.
    if (no_onednn()) return;
    auto build = [](std::int64_t batch) {
        Net net(17);
        net.feed("x", rnd({batch, 3, 16, 16}, 90 + static_cast<std::uint32_t>(batch), -2.f, 2.f),
                 {-1, 3, 16, 16});
        conv(net, "conv1", "x", "c1", {16, 3, 3, 3}, 91);
        net.node("Relu", {"c1"}, {"r1"}, "relu1");
        Window{.kernel_shape = {2, 2}, .strides = {2, 2}}.apply(
            net.node("MaxPool", {"r1"}, {"p1"}, "pool"));
        conv(net, "conv2", "p1", "c2", {16, 16, 3, 3}, 92);
        net.node("Add", {"c2", "p1"}, {"s"}, "add");
        net.node("Relu", {"s"}, {"r2"}, "relu2");
        conv(net, "conv3", "r2", "c3", {32, 16, 3, 3}, 93);  // whole blocks of 8 and 16
        net.node("GlobalAveragePool", {"c3"}, {"y"}, "gap");
        net.output("y");
        return net;
    };
    const InferenceEngine ref = compile(build(1), kReference);
    for (const std::vector<std::int64_t>& batches :
         {std::vector<std::int64_t>{4, 1, 5, 1}, std::vector<std::int64_t>{1, 4, 2, 6}}) {
        EngineOptions o;
        o.backends = kFast;
        o.num_threads = 2;
        const InferenceEngine fast = InferenceEngine::compile(build(batches[0]).graph(), o);
        CHECK(fast.blocked_layout_nodes() > 0);
        for (std::int64_t batch : batches) {
            const auto feeds = build(batch).feeds;
            const auto got = outputs_of(fast, feeds);
            const auto exp = outputs_of(ref, feeds);
            REQUIRE(got.size() == 1);
            CHECK(mismatches(got[0], exp[0], dot(2 * 16 * 9),
                             "batch " + std::to_string(batch) + " after " +
                                 std::to_string(batches[0])) == 0);
        }
    }
}

TEST_CASE("oneDNN Conv with algo_search = measure times its blocked candidates and matches the "
          "reference",
          "[onednn][conv_dispatch]") {
    // conv2 (3x3 stride 1, 16 -> 16 channels on a 10x9 map: Winograd, the im2col GEMM and
    // oneDNN's direct primitive all apply on the blocked layout) is timed at its first prepare
    // per batch size; whichever wins, the outputs match the reference kernels.
    if (no_onednn()) return;
    auto build = [](std::int64_t batch) {
        Net net(17);
        net.feed("x", rnd({batch, 3, 20, 18}, 95 + static_cast<std::uint32_t>(batch), -2.f, 2.f),
                 {-1, 3, 20, 18});
        conv(net, "conv1", "x", "c1", {16, 3, 3, 3}, 96);
        net.node("Relu", {"c1"}, {"r1"}, "relu1");
        Window{.kernel_shape = {2, 2}, .strides = {2, 2}}.apply(
            net.node("MaxPool", {"r1"}, {"p1"}, "pool"));
        conv(net, "conv2", "p1", "c2", {16, 16, 3, 3}, 97);
        net.node("Relu", {"c2"}, {"r2"}, "relu2");
        conv(net, "conv3", "r2", "c3", {32, 16, 3, 3}, 98);
        net.node("GlobalAveragePool", {"c3"}, {"y"}, "gap");
        net.output("y");
        return net;
    };
    const InferenceEngine ref = compile(build(1), kReference);
    EngineOptions o;
    o.backends = kFast;
    o.num_threads = 2;
    o.algo_search = AlgoSearch::measure;
    const InferenceEngine fast = InferenceEngine::compile(build(3).graph(), o);
    CHECK(fast.blocked_layout_nodes() > 0);
    for (std::int64_t batch : {3, 1, 3}) {
        const std::uint64_t before = detail::conv_algo_measurements();
        const auto feeds = build(batch).feeds;
        const auto got = outputs_of(fast, feeds);
        const auto exp = outputs_of(ref, feeds);
        REQUIRE(got.size() == 1);
        CHECK(mismatches(got[0], exp[0], dot(2 * 16 * 9), "batch " + std::to_string(batch)) == 0);
        // A new batch size is new geometry (timed once per process); a repeated one is not.
        if (batch == 1) CHECK(detail::conv_algo_measurements() > before);
    }
    const std::uint64_t settled = detail::conv_algo_measurements();
    (void)outputs_of(fast, build(1).feeds);
    CHECK(detail::conv_algo_measurements() == settled);
}

// ---- threads and determinism --------------------------------------------------------------------

namespace {

/// An attention-like block: constant-B projections, Q.K^T and P.V on run-time operands,
/// Softmax, LayerNormalization and Gelu. x[batch,16,32] -> y[batch,16,32].
Net attention_like(std::int64_t batch) {
    Net net(20);
    net.feed("x", rnd({batch, 16, 32}, 300 + static_cast<std::uint32_t>(batch)), {-1, 16, 32});
    net.constant("wq", weights({32, 32}, 301)).constant("wk", weights({32, 32}, 302));
    net.node("MatMul", {"x", "wq"}, {"q"}, "q");
    net.node("MatMul", {"x", "wk"}, {"k"}, "k");
    aints(net.node("Transpose", {"k"}, {"kt"}, "kt"), "perm", {0, 2, 1});
    net.node("MatMul", {"q", "kt"}, {"s"}, "qk");
    net.node("Softmax", {"s"}, {"p"}, "softmax");
    net.node("MatMul", {"p", "x"}, {"o"}, "pv");
    net.constant("gamma", rnd({32}, 303, 0.5f, 1.5f)).constant("beta", rnd({32}, 304));
    net.node("LayerNormalization", {"o", "gamma", "beta"}, {"n"}, "ln");
    net.node("Gelu", {"n"}, {"y"}, "gelu");
    net.output("y");
    return net;
}

}  // namespace

TEST_CASE("oneDNN runs are bitwise identical run to run at 1 and 2 threads", "[onednn]") {
    if (no_onednn()) return;
    for (bool attention : {false, true}) {
        const Net net = attention ? attention_like(3) : resnet_like(3, Variant::plain);
        INFO((attention ? "attention-like" : "ResNet-like"));
        const auto ref = outputs_of(compile(net, kReference), net.feeds);
        for (int threads : {1, 2}) {
            INFO("threads " << threads);
            const InferenceEngine e = compile(net, kFast, threads);
            const auto first = outputs_of(e, net.feeds);
            for (int r = 0; r < 2; ++r) CHECK(same_bits(outputs_of(e, net.feeds), first));
            CHECK(mismatches(first[0], ref[0], attention ? close(1e-4, 1e-4) : dot(2 * 16 * 9),
                             "vs reference") == 0);
        }
    }
}

TEST_CASE("oneDNN concurrent runs on one engine give the bits of sequential runs", "[onednn]") {
    if (no_onednn()) return;
    for (bool attention : {false, true}) {
        INFO((attention ? "attention-like" : "ResNet-like"));
        const Net proto = attention ? attention_like(1) : resnet_like(1, Variant::plain);
        const InferenceEngine e = compile(proto, kFast, 2);
        // Each thread has its own batch size (shape class) and input.
        std::vector<std::vector<NamedTensor>> feeds;
        std::vector<std::vector<Tensor>> sequential;
        for (std::int64_t b = 1; b <= 4; ++b) {
            feeds.push_back((attention ? attention_like(b) : resnet_like(b, Variant::plain)).feeds);
            sequential.push_back(outputs_of(e, feeds.back()));
        }
        std::vector<int> same(4, 0);
        std::vector<std::string> errors(4);
        std::vector<std::thread> pool;
        for (int t = 0; t < 4; ++t)
            pool.emplace_back([&, t] {
                try {
                    for (int r = 0; r < 3; ++r)
                        same[static_cast<std::size_t>(t)] +=
                            same_bits(outputs_of(e, feeds[static_cast<std::size_t>(t)]),
                                      sequential[static_cast<std::size_t>(t)])
                                ? 1
                                : 0;
                } catch (const std::exception& ex) {
                    errors[static_cast<std::size_t>(t)] = ex.what();
                }
            });
        for (auto& th : pool) th.join();
        for (int t = 0; t < 4; ++t) {
            INFO("thread " << t << " " << errors[static_cast<std::size_t>(t)]);
            CHECK(errors[static_cast<std::size_t>(t)].empty());
            CHECK(same[static_cast<std::size_t>(t)] == 3);
        }
    }
}

// ---- bad input ----------------------------------------------------------------------------------

TEST_CASE("oneDNN Conv with a wrong run-time channel count is invalid_argument naming the node",
          "[onednn]") {
    if (no_onednn()) return;
    for (bool blocked_chain : {false, true}) {
        Net net(17);
        // Channels are a symbol, so the engine's input check cannot catch the mismatch.
        const Dims declared{-1, 8, 6, 6};
        net.feed("x", rnd({1, 8, 6, 6}, 1), declared, 1);
        conv(net, "bad_conv", "x", "c", {16, 8, 3, 3}, 2);
        if (blocked_chain) {
            net.node("Relu", {"c"}, {"r"}, "relu");
            conv(net, "conv2", "r", "y", {16, 16, 3, 3}, 4);
        } else {
            net.node("Relu", {"c"}, {"y"}, "relu");
        }
        net.output("y");
        const InferenceEngine e = compile(net, kFast);
        CHECK(providers_of(e).at("bad_conv") == "onednn");
        CHECK_NOTHROW(e.run({{"x", rnd({2, 8, 6, 6}, 3)}}));
        for (std::int64_t c : {3, 9, 16}) {
            std::vector<NamedTensor> out;
            const Status st = e.try_run({{"x", rnd({1, c, 6, 6}, 5)}}, out);
            INFO("channels " << c << ": " << st.message());
            CHECK(st.code() == ErrorCode::invalid_argument);
            CHECK(st.message().find("bad_conv") != std::string::npos);
        }
    }
}

TEST_CASE("oneDNN MatMul with a wrong run-time inner dimension is invalid_argument naming the node",
          "[onednn]") {
    if (no_onednn()) return;
    Net net(13);
    net.feed("a", rnd({4, 8}, 1), {-1, 8}, 1);
    net.feed("b", rnd({8, 5}, 2));
    net.node("MatMul", {"a", "b"}, {"y"}, "bad_matmul");
    net.output("y");
    const InferenceEngine e = compile(net, kFast);
    CHECK(providers_of(e).at("bad_matmul") == "onednn");
    std::vector<NamedTensor> out;
    const Status st = e.try_run({{"a", rnd({4, 7}, 3)}, {"b", rnd({8, 5}, 2)}}, out);
    INFO(st.message());
    CHECK(st.code() == ErrorCode::invalid_argument);
    CHECK(st.message().find("bad_matmul") != std::string::npos);
}
