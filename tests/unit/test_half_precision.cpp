// BF16 and FP16 on the CPU.
//
// The packed GEMM with half-width B (src/kernels/sgemm.cpp: the widening families at every ISA
// level, bf16 K pairs on vdpbf16ps where the CPU has AVX512_BF16) against a double reference
// of its rounded operands: B rounded to f16 / bf16 (nearest even), and A rounded to bf16 too
// for the vdpbf16ps family (it multiplies bf16 pairs). The products of the rounded operands are
// exact in float32 (8 x 8 or 11 x 11 significant bits), so what is left is float32
// accumulation, bounded as for the f32 GEMM: |got - want| <= 1e-5 (1 + |alpha| sum |a b|).
// Thread counts give bitwise identical results.
//
// The engine at EngineOptions::precision fp16 / bf16 on the CPU (half-width GEMM weights,
// float32 activations) against fp32: the weights' relative rounding is 2^-11 (fp16) and 2^-8
// (bf16, A too on vdpbf16ps), so the outputs stay within 5e-3 (fp16) and 3e-2 (bf16) of
// 1 + |fp32 result|, cosine >= 0.9999 / 0.999; the packed weights take half the bytes and the
// float32 initializers are released.
//
// A float16 CNN (weights and activations float16) runs on the fast kernels in float32 with no
// node on the reference kernels; its outputs agree with the reference kernels on the float16
// graph (which round every node's output to float16) within 2e-2 of 1 + |reference|: a few
// float16 ulps (2^-11 relative each) of the intermediate roundings the float32 graph skips.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dsinfer/dsinfer.hpp"
#include "engine_models.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"

namespace {

using namespace dsinfer;
using dsinfer::detail::GemmActivation;
using dsinfer::detail::PackedB;
using dsinfer::detail::fast::Isa;

std::vector<float> random_vec(std::size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

float round_to(float v, DType t) {
    if (t == DType::f16) return static_cast<float>(float16(v));
    if (t == DType::bf16) return static_cast<float>(bfloat16(v));
    return v;
}

/// One half-width family: ISA level, element type, vdpbf16ps or widening.
struct Family {
    Isa isa;
    DType dtype;
    bool dot;
};

/// The half-width families this CPU runs (DSINFER_TEST_ISA / DSINFER_MAX_CPU_ISA cap them).
std::vector<Family> families() {
    std::vector<Family> out;
    for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
        if (static_cast<int>(isa) > static_cast<int>(detail::sgemm_isa())) continue;
        out.push_back({isa, DType::f16, false});
        out.push_back({isa, DType::bf16, false});
        if (detail::sgemm_bf16_dot(isa)) out.push_back({isa, DType::bf16, true});
    }
    return out;
}

std::string describe(const Family& f) {
    return std::string(detail::fast::isa_name(f.isa)) + " " + std::string(dtype_name(f.dtype)) +
           (f.dot ? " vdpbf16ps" : " widening");
}

struct Case {
    std::int64_t m, k, n;
    bool transposed = false;
    float alpha = 1.f;
    bool bias = false;
    GemmActivation act = GemmActivation::none;
};

void check_half_gemm(const Case& t, const Family& f) {
    const std::int64_t m = t.m, k = t.k, n = t.n;
    std::mt19937 rng(static_cast<unsigned>(m * 131 + k * 17 + n));
    const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
    const auto b = random_vec(static_cast<std::size_t>(k * n), rng);  // [K,N] or [N,K]
    const auto c0 = random_vec(static_cast<std::size_t>(n), rng);
    const PackedB packed = detail::pack_b(b.data(), k, n, t.transposed, f.isa, f.dtype, f.dot);
    INFO(describe(f) << " m=" << m << " k=" << k << " n=" << n << " transposed=" << t.transposed);
    REQUIRE(packed.isa == f.isa);
    REQUIRE(packed.dtype == f.dtype);
    REQUIRE(packed.pairs == f.dot);
    REQUIRE(packed.data == nullptr);
    // Half the bytes of the f32 packing (vdpbf16ps pairs pad an odd K by one row).
    const PackedB full = detail::pack_b(b.data(), k, n, t.transposed, f.isa);
    CHECK(packed.bytes() * 2 == full.bytes() / static_cast<std::uint64_t>(k) *
                                    static_cast<std::uint64_t>(packed.k_stored()));
    std::vector<float> c(static_cast<std::size_t>(m * n), -7.f);
    REQUIRE(detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, t.bias ? c0.data() : nullptr,
                                 t.alpha, t.act));
    const DType a_round = f.dot ? DType::bf16 : DType::f32;
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0, mag = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const float bv = t.transposed ? b[static_cast<std::size_t>(j * k + p)]
                                              : b[static_cast<std::size_t>(p * n + j)];
                const double prod =
                    static_cast<double>(round_to(a[static_cast<std::size_t>(i * k + p)], a_round)) *
                    round_to(bv, f.dtype);
                sum += prod;
                mag += std::fabs(prod);
            }
            double want = t.alpha * sum + (t.bias ? c0[static_cast<std::size_t>(j)] : 0.0);
            if (t.act == GemmActivation::relu) want = std::max(want, 0.0);
            const double got = c[static_cast<std::size_t>(i * n + j)];
            INFO("i=" << i << " j=" << j << " got " << got << " want " << want);
            REQUIRE(std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(t.alpha) * mag));
        }
    }
}

}  // namespace

TEST_CASE("half-width packed GEMM matches a double reference of its rounded operands",
          "[fast][half]") {
    const std::vector<Case> cases = {
        {1, 1, 1},
        {1, 3, 5},
        {5, 7, 3, true},
        {13, 193, 37},                    // K crosses the 192-row block (odd last block)
        {37, 385, 70, true, 0.5f, true},  // odd K across blocks, transposed, bias
        {7, 64, 33, false, 1.f, true, GemmActivation::relu},
        {150, 257, 40},  // M crosses the 144-row block; by row tiles
        // The bf16-pairs family's K block is 3072 and it converts A in chunks of 96 pairs: odd
        // K across both, transposed; and K over two blocks with bias and ReLU
        {13, 3275, 37, true},
        {30, 6337, 20, false, 1.f, true, GemmActivation::relu},
        {1, 512, 300, true, 1.f, true},  // a row (memory-bound shape)
        // Few rows (A in place, B streamed once): odd N and K, across K blocks
        {2, 577, 97, false, -0.5f, true, GemmActivation::relu},
        {4, 255, 33, true},
        {8, 193, 65, false, 1.f, true},
        {16, 385, 47, true, 2.f, true, GemmActivation::relu},
    };
    for (const Family& f : families())
        for (const Case& t : cases) check_half_gemm(t, f);
}

TEST_CASE("narrow_packed_b holds each weight rounded where packed_b_index says", "[fast][half]") {
    std::mt19937 rng(5);
    for (const Family& f : families()) {
        for (const auto& [k, n] :
             {std::pair<std::int64_t, std::int64_t>{7, 9}, {385, 33}, {3277, 35}}) {
            const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
            const PackedB full = detail::pack_b(b.data(), k, n, false, f.isa);
            const PackedB half = detail::narrow_packed_b(full, f.dtype, f.dot);
            INFO(describe(f) << " k=" << k << " n=" << n);
            REQUIRE(half.pairs == f.dot);
            const std::uint16_t* h = half.half.get();
            for (std::int64_t kk = 0; kk < k; ++kk)
                for (std::int64_t j = 0; j < n; ++j) {
                    const float want = round_to(b[static_cast<std::size_t>(kk * n + j)], f.dtype);
                    const std::uint16_t bits = h[detail::packed_b_index(half, kk, j)];
                    const float got = f.dtype == DType::f16
                                          ? static_cast<float>(float16::from_bits(bits))
                                          : static_cast<float>(bfloat16::from_bits(bits));
                    REQUIRE(got == want);
                }
        }
    }
}

TEST_CASE("half-width B widens exactly: every f16 / bf16 value times one is itself",
          "[fast][half]") {
    // C = 1 x B over all 65536 bit patterns (k = 1): each element of C is 0 + 1 * b, so it
    // must be b's float value exactly (NaN stays NaN). vdpbf16ps treats subnormal inputs as
    // zero (DAZ), so the pairs family is checked on the others.
    for (const Family& f : families()) {
        INFO(describe(f));
        std::vector<float> b;
        for (std::uint32_t bits = 0; bits < 65536; ++bits) {
            const auto h = static_cast<std::uint16_t>(bits);
            const float v = f.dtype == DType::f16 ? static_cast<float>(float16::from_bits(h))
                                                  : static_cast<float>(bfloat16::from_bits(h));
            if (f.dot && std::fpclassify(v) == FP_SUBNORMAL) continue;
            b.push_back(v);
        }
        const auto n = static_cast<std::int64_t>(b.size());
        const PackedB packed = detail::pack_b(b.data(), 1, n, false, f.isa, f.dtype, f.dot);
        const float one = 1.f;
        std::vector<float> c(b.size());
        REQUIRE(detail::sgemm_packed(1, &one, 1, packed, c.data(), n, nullptr));
        for (std::size_t j = 0; j < b.size(); ++j) {
            INFO("value " << b[j]);
            if (std::isnan(b[j])) REQUIRE(std::isnan(c[j]));
            else REQUIRE(c[j] == b[j]);
        }
    }
}

TEST_CASE("half-width packed GEMM is bitwise identical across thread counts", "[fast][half]") {
    std::mt19937 rng(9);
    for (const Family& f : families()) {
        // By column panels (many panels), by row tiles (few panels, many rows), and few rows;
        // 350 rows: bf16 pairs split the rows at 1 and 2 threads (a row block each), the
        // panels at 3.
        for (const auto& [m, k, n] :
             {std::tuple<std::int64_t, std::int64_t, std::int64_t>{200, 450, 700},
              {400, 300, 64},
              {350, 450, 700},
              {5, 450, 700}}) {  // few rows: A in place
            const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
            const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
            const PackedB packed = detail::pack_b(b.data(), k, n, false, f.isa, f.dtype, f.dot);
            std::vector<std::vector<float>> out;
            for (int threads : {1, 2, 3}) {
                detail::ThreadBudget budget(threads);
                std::vector<float> c(static_cast<std::size_t>(m * n));
                const std::size_t ws_bytes = detail::sgemm_workspace_bytes(m, packed, threads);
                std::vector<unsigned char> ws(ws_bytes);
                REQUIRE(detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, nullptr, 1.f,
                                             GemmActivation::none, ws.data(), ws.size()));
                out.push_back(std::move(c));
            }
            INFO(describe(f) << " m=" << m << " k=" << k << " n=" << n);
            CHECK(out[0] == out[1]);
            CHECK(out[0] == out[2]);
        }
    }
}

namespace {

/// x [batch, 64] -> MatMul [64, 256] + bias -> Relu -> MatMul [256, 64] + bias -> y.
Graph mlp_graph() {
    Graph g;
    g.name = "half_mlp";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(64)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w1 = g.add_initializer("W1", test::random_f32({64, 256}, 31, 0.2f));
    const ValueId b1 = g.add_initializer("b1", test::random_f32({256}, 32, 0.1f));
    const ValueId w2 = g.add_initializer("W2", test::random_f32({256, 64}, 33, 0.1f));
    const ValueId b2 = g.add_initializer("b2", test::random_f32({64}, 34, 0.1f));
    auto v = [&](const char* name) { return g.add_value(name); };
    const ValueId h0 = v("h0"), h1 = v("h1"), h2 = v("h2"), o0 = v("o0"), y = v("y");
    g.add_node("MatMul", {x, w1}, {h0}, "fc1");
    g.add_node("Add", {h0, b1}, {h1}, "bias1");
    g.add_node("Relu", {h1}, {h2}, "relu");
    g.add_node("MatMul", {h2, w2}, {o0}, "fc2");
    g.add_node("Add", {o0, b2}, {y}, "bias2");
    g.outputs.push_back(y);
    return g;
}

double cosine(const Tensor& a, const Tensor& b) {
    double ab = 0, aa = 0, bb = 0;
    for (std::int64_t i = 0; i < a.num_elements(); ++i) {
        const double x = a.data<float>()[i], y = b.data<float>()[i];
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    return ab / std::sqrt(aa * bb);
}

std::uint64_t sgemm_packed_bytes(const InferenceEngine& e, const std::string& suffix) {
    std::uint64_t bytes = 0;
    for (const WeightForm& f : e.weight_store()->forms())
        if (f.layout.rfind("sgemm.packed_b", 0) == 0 &&
            f.layout.size() >= suffix.size() &&
            f.layout.compare(f.layout.size() - suffix.size(), suffix.size(), suffix) == 0)
            bytes += f.bytes;
    return bytes;
}

}  // namespace

TEST_CASE("CPU precision fp16 / bf16: half-width GEMM weights, float32 activations",
          "[fast][half]") {
    struct Model {
        Graph g;
        std::vector<NamedTensor> feeds;
    };
    const std::vector<Model> models = {
        {mlp_graph(), {{"x", test::random_f32({9, 64}, 41)}}},
        {test::mini_transformer(), {{"ids", test::ids_tensor(2, 7, 50, 42)}}},
    };
    for (const Model& model : models) {
        INFO(model.g.name);
        const auto e32 = InferenceEngine::compile(model.g, EngineOptions{});
        const auto want = e32.run(model.feeds);
        // The GEMM weights' float32 bytes (W1, W2; their panels are whole here).
        std::uint64_t f32_bytes = 0;
        for (const Value& v : model.g.values)
            if (v.initializer && v.name.rfind("W", 0) == 0) f32_bytes += v.initializer->num_bytes();
        REQUIRE(f32_bytes > 0);
        const WeightBytes all32 = e32.weight_store()->bytes();
        for (const auto& [p, suffix, tol, cos] :
             {std::tuple{Precision::fp16, ".f16", 5e-3, 0.9999},
              std::tuple{Precision::bf16, ".bf16", 3e-2, 0.999}}) {
            EngineOptions o;
            o.precision = p;
            const auto e = InferenceEngine::compile(model.g, o);
            INFO(suffix);
            const auto got = e.run(model.feeds);
            REQUIRE(got[0].tensor.dtype() == DType::f32);
            CHECK(test::max_rel_diff(got[0].tensor, want[0].tensor) <= tol);
            CHECK(cosine(got[0].tensor, want[0].tensor) >= cos);
            // Every GEMM weight is held at half width (and no f32 packing remains).
            CHECK(sgemm_packed_bytes(e, suffix) * 2 == f32_bytes);
            for (const WeightForm& f : e.weight_store()->forms()) {
                INFO(f.tensor << " " << f.layout);
                if (f.layout.rfind("sgemm.packed_b", 0) == 0)
                    CHECK(f.layout.find(suffix) != std::string::npos);
                // The float32 GEMM weights are released once packed.
                if (f.tensor.rfind("W", 0) == 0) CHECK(f.kind != WeightKind::stored);
            }
            // All weights together: the MLP's are its GEMMs' but for the biases.
            const WeightBytes all = e.weight_store()->bytes();
            if (model.g.name == "half_mlp")
                CHECK(all.stored + all.packed + all.derived <=
                      (all32.stored + all32.packed + all32.derived) * 6 / 10);
            // Runs are repeatable.
            const auto again = e.run(model.feeds);
            CHECK(test::max_rel_diff(again[0].tensor, got[0].tensor) == 0.0);
        }
    }
}

TEST_CASE("CPU precision: tf32 stays a GPU mode", "[half][precision]") {
    EngineOptions o;
    o.precision = Precision::tf32;
    try {
        (void)InferenceEngine::compile(test::mini_mlp(), o);
        FAIL("tf32 accepted on the CPU");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("tf32") != std::string::npos);
    }
}

namespace {

Tensor random_f16(const std::vector<std::int64_t>& dims, std::uint32_t seed, float scale) {
    const Tensor f = test::random_f32(dims, seed, scale);
    auto t = Tensor::allocate(DType::f16, f.shape()).value();
    for (std::int64_t i = 0; i < f.num_elements(); ++i)
        t.data<float16>()[i] = float16(f.data<float>()[i]);
    return t;
}

/// A float16 CNN: x f16 [N, 8, 20, 20] -> Conv 3x3 (16, bias) -> Relu -> Conv 3x3 (16) ->
/// Add (residual) -> Relu -> Conv 1x1 stride 2 (8, bias) -> MaxPool 2x2 -> y f16.
Graph f16_cnn() {
    Graph g;
    g.name = "f16_cnn";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(8), Dim::fixed(20), Dim::fixed(20)};
    const ValueId x = g.add_value("x", DType::f16, xs);
    g.inputs.push_back(x);
    const ValueId w1 = g.add_initializer("W1", random_f16({16, 8, 3, 3}, 51, 0.25f));
    const ValueId b1 = g.add_initializer("B1", random_f16({16}, 52, 0.1f));
    const ValueId w2 = g.add_initializer("W2", random_f16({16, 16, 3, 3}, 53, 0.15f));
    const ValueId w3 = g.add_initializer("W3", random_f16({8, 16, 1, 1}, 54, 0.3f));
    const ValueId b3 = g.add_initializer("B3", random_f16({8}, 55, 0.1f));
    auto v = [&](const char* name) { return g.add_value(name); };
    const ValueId c1 = v("c1"), r1 = v("r1"), c2 = v("c2"), s = v("s"), r2 = v("r2"), c3 = v("c3");
    const ValueId y = v("y");
    using test::attr_ints;
    g.add_node("Conv", {x, w1, b1}, {c1}, "conv1").attributes = {
        {"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}};
    g.add_node("Relu", {c1}, {r1}, "relu1");
    g.add_node("Conv", {r1, w2}, {c2}, "conv2").attributes = {
        {"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}};
    g.add_node("Add", {c2, r1}, {s}, "residual");
    g.add_node("Relu", {s}, {r2}, "relu2");
    g.add_node("Conv", {r2, w3, b3}, {c3}, "conv3").attributes = {
        {"kernel_shape", attr_ints({1, 1})}, {"strides", attr_ints({2, 2})}};
    g.add_node("MaxPool", {c3}, {y}, "pool").attributes = {
        {"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}};
    g.outputs.push_back(y);
    return g;
}

double max_rel_diff_f16(const Tensor& a, const Tensor& b) {
    double worst = 0;
    for (std::int64_t i = 0; i < b.num_elements(); ++i) {
        const double x = static_cast<float>(a.data<float16>()[i]);
        const double y = static_cast<float>(b.data<float16>()[i]);
        const double d = std::abs(x - y) / (1.0 + std::abs(y));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

}  // namespace

TEST_CASE("a float16 CNN runs in float32 on the fast kernels, none on the reference ones",
          "[fast][half]") {
    const Graph g = f16_cnn();
    const std::vector<NamedTensor> feeds = {{"x", random_f16({2, 8, 20, 20}, 61, 1.f)}};
    EngineOptions ref;
    ref.backends = {"reference"};
    const auto oracle = InferenceEngine::compile(g, ref);
    const auto want = oracle.run(feeds);
    for (const Precision p : {Precision::fp32, Precision::fp16, Precision::bf16}) {
        EngineOptions o;
        o.precision = p;
        const auto e = InferenceEngine::compile(g, o);
        INFO("precision " << static_cast<int>(p));
        for (std::size_t i = 0; i < e.node_providers().size(); ++i) {
            INFO(e.graph().nodes[i].describe());
            CHECK(e.node_providers()[i] != "reference");
        }
        // The interface keeps float16.
        REQUIRE(e.inputs()[0].dtype == DType::f16);
        REQUIRE(e.outputs()[0].dtype == DType::f16);
        const auto got = e.run(feeds);
        REQUIRE(got[0].tensor.dtype() == DType::f16);
        REQUIRE(got[0].tensor.shape() == want[0].tensor.shape());
        // fp32 compute: a few float16 ulps of the reference's intermediate roundings; bf16
        // weights add their own 2^-8 rounding where the convolutions hold them so.
        CHECK(max_rel_diff_f16(got[0].tensor, want[0].tensor) <=
              (p == Precision::bf16 ? 3e-2 : 2e-2));
    }
}
