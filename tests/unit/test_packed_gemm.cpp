// dsinfer's packed-B f32 GEMM (src/kernels/sgemm.cpp) against a double-precision reference,
// for every micro-kernel family this CPU runs (baseline 6x8, AVX2 6x16, AVX-512 12x32): edge
// tiles (rows not a multiple of the tile height, columns not a multiple of the panel width, K
// crossing the 192/256 blocks, M crossing the 96/144/192-row blocks), transposed packing, lda
// and ldc strides, alpha, bias and ReLU; the few-row path (M <= 16, A read in place); and
// bitwise determinism across runs and thread counts in every work split (column panels, row
// tiles, few rows), the few-row path giving each row the tiled path's bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/dsinfer.hpp"

namespace {

using dsinfer::detail::GemmActivation;
using dsinfer::detail::PackedB;
using dsinfer::detail::fast::Isa;

std::vector<float> random_vec(std::size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

/// The families this CPU runs, narrowest first.
std::vector<Isa> isas() {
    std::vector<Isa> out;
    for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512})
        if (static_cast<int>(isa) <= static_cast<int>(dsinfer::detail::sgemm_isa()))
            out.push_back(isa);
    return out;
}

struct Case {
    std::int64_t m, k, n;
    bool transposed = false;
    float alpha = 1.f;
    bool bias = false;
    GemmActivation act = GemmActivation::none;
    std::int64_t lda_pad = 0, ldc_pad = 0;  // extra floats per row of A / C
};

// |got - want| <= 1e-5 * (1 + |alpha| sum_k |a_ik * b_kj|): float accumulation error grows with
// K and with the magnitudes summed, not with the (possibly cancelling) result. C's padding
// columns must be left as they were.
void check_gemm(const Case& t, Isa isa) {
    const std::int64_t m = t.m, k = t.k, n = t.n;
    const std::int64_t lda = k + t.lda_pad, ldc = n + t.ldc_pad;
    std::mt19937 rng(static_cast<unsigned>(m * 131 + k * 17 + n));
    const auto a = random_vec(static_cast<std::size_t>(m * lda), rng);
    const auto b = random_vec(static_cast<std::size_t>(k * n), rng);  // [K,N] or [N,K]
    const auto c0 = random_vec(static_cast<std::size_t>(n), rng);
    const PackedB packed = dsinfer::detail::pack_b(b.data(), k, n, t.transposed, isa);
    REQUIRE(packed.isa == isa);
    std::vector<float> c(static_cast<std::size_t>(m * ldc), -7.f);
    dsinfer::detail::sgemm_packed(m, a.data(), lda, packed, c.data(), ldc,
                                  t.bias ? c0.data() : nullptr, t.alpha, t.act);
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0, mag = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const double bv = t.transposed ? b[static_cast<std::size_t>(j * k + p)]
                                               : b[static_cast<std::size_t>(p * n + j)];
                const double prod = a[static_cast<std::size_t>(i * lda + p)] * bv;
                sum += prod;
                mag += std::fabs(prod);
            }
            double want = t.alpha * sum + (t.bias ? c0[static_cast<std::size_t>(j)] : 0.0);
            if (t.act == GemmActivation::relu) want = std::max(want, 0.0);
            const double got = c[static_cast<std::size_t>(i * ldc + j)];
            INFO("isa=" << dsinfer::detail::fast::isa_name(isa) << " m=" << m << " k=" << k
                        << " n=" << n << " i=" << i << " j=" << j
                        << " transposed=" << t.transposed);
            REQUIRE(std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(t.alpha) * mag));
        }
        for (std::int64_t j = n; j < ldc; ++j) REQUIRE(c[static_cast<std::size_t>(i * ldc + j)] == -7.f);
    }
}

}  // namespace

TEST_CASE("packed GEMM matches a double reference on edge shapes", "[fast][gemm]") {
    for (Isa isa : isas())
        for (std::int64_t m : {1, 5, 6, 7, 11, 12, 13, 64, 97})
            for (std::int64_t k : {1, 3, 17, 192, 193, 256, 257, 513})
                for (std::int64_t n : {1, 15, 16, 17, 33, 40})
                    check_gemm({m, k, n, (m + k + n) % 2 == 0}, isa);
}

TEST_CASE("packed GEMM's few-row path (M <= 16, A in place, B streamed once) matches a "
          "double reference",
          "[fast][gemm]") {
    // N and K not multiples of the panel width (8, 16, 32) or of the K block (192, 256): edge
    // panels and short last K blocks; lda / ldc strides; alpha, bias and ReLU.
    for (Isa isa : isas())
        for (std::int64_t m : {1, 2, 3, 4, 5, 8, 16})
            for (std::int64_t k : {1, 7, 193, 577})
                for (std::int64_t n : {1, 33, 97, 301}) {
                    const bool odd = (m + k + n) % 2 != 0;
                    check_gemm({m, k, n, odd, odd ? -0.75f : 1.5f, n != 33,
                                (m + n) % 3 == 0 ? GemmActivation::relu : GemmActivation::none,
                                m % 2, n % 5},
                               isa);
                }
}

TEST_CASE("packed GEMM's few-row path gives each row bitwise the tiled path's result, for any "
          "thread count",
          "[fast][gemm]") {
    // The rows of a 40-row product (packed A, row tiles) computed again 1 to 16 at a time (A
    // read in place): the same FMAs in the same K order, the same epilogue.
    std::mt19937 rng(13);
    const std::int64_t shapes[][2] = {{577, 301}, {1030, 70}, {96, 2000}};
    for (Isa isa : isas())
        for (const auto& s : shapes) {
            const std::int64_t k = s[0], n = s[1], rows = 40;
            const auto a = random_vec(static_cast<std::size_t>(rows * k), rng);
            const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
            const auto bias = random_vec(static_cast<std::size_t>(n), rng);
            const PackedB packed = dsinfer::detail::pack_b(b.data(), k, n, true, isa);
            std::vector<float> want(static_cast<std::size_t>(rows * n));
            REQUIRE(dsinfer::detail::sgemm_packed(rows, a.data(), k, packed, want.data(), n,
                                                  bias.data(), 0.5f, GemmActivation::relu));
            for (std::int64_t m : {1, 2, 3, 4, 5, 8, 16})
                for (int threads : {1, 2, 3}) {
                    dsinfer::detail::ThreadBudget budget(threads);
                    INFO("isa=" << dsinfer::detail::fast::isa_name(isa) << " m=" << m
                                << " k=" << k << " n=" << n << " threads=" << threads);
                    for (std::int64_t r0 : {std::int64_t{0}, rows - m}) {
                        std::vector<float> c(static_cast<std::size_t>(m * n));
                        REQUIRE(dsinfer::detail::sgemm_packed(m, a.data() + r0 * k, k, packed,
                                                              c.data(), n, bias.data(), 0.5f,
                                                              GemmActivation::relu));
                        CHECK(std::equal(c.begin(), c.end(), want.begin() + r0 * n));
                    }
                }
        }
}

TEST_CASE("packed GEMM splits a short last row tile with the full one before it",
          "[fast][gemm]") {
    // M mod the tile height <= half a tile: the last two tiles share the rows (AVX2: 8 = 4 + 4,
    // 14 = 6 + 4 + 4, 15 = 6 + 5 + 4, 128 = 20 x 6 + 4 + 4); in the row-tile split too (n 20).
    for (Isa isa : isas())
        for (std::int64_t m : {8, 14, 15, 128, 134})
            for (std::int64_t n : {20, 48}) check_gemm({m, 300, n, n == 48, 1.f, true}, isa);
}

TEST_CASE("packed GEMM crosses row blocks and K blocks", "[fast][gemm]") {
    // M beyond one packed A block (96, 144 or 192 rows) with short last tiles; K over several.
    for (Isa isa : isas()) {
        check_gemm({193, 600, 70, true}, isa);
        check_gemm({229, 1030, 33, false}, isa);
        check_gemm({400, 64, 50, true, 1.f, true}, isa);
    }
}

TEST_CASE("packed GEMM honours lda and ldc", "[fast][gemm]") {
    for (Isa isa : isas()) {
        check_gemm({13, 300, 37, false, 1.f, false, GemmActivation::none, 5, 3}, isa);
        check_gemm({64, 257, 48, true, 1.f, true, GemmActivation::relu, 64, 16}, isa);
        check_gemm({7, 9, 17, false, 1.f, false, GemmActivation::none, 1, 1}, isa);
    }
}

TEST_CASE("packed GEMM applies alpha then bias then ReLU", "[fast][gemm]") {
    for (Isa isa : isas()) {
        check_gemm({13, 600, 40, true, 0.5f, true, GemmActivation::relu}, isa);
        check_gemm({7, 9, 17, false, -2.f, true, GemmActivation::none}, isa);
        check_gemm({64, 1024, 48, false, 1.f, true, GemmActivation::relu}, isa);
        check_gemm({20, 3, 31, true, 1.5f, false, GemmActivation::relu}, isa);
    }
}

TEST_CASE("packed GEMM ReLU keeps NaN", "[fast][gemm]") {
    // max(v, 0) with v first, like std::max(v, 0.f): a NaN product stays NaN.
    for (Isa isa : isas()) {
        std::vector<float> a(2 * 4, 1.f), b(4 * 20, 1.f);
        a[4] = std::numeric_limits<float>::quiet_NaN();  // row 1
        const PackedB packed = dsinfer::detail::pack_b(b.data(), 4, 20, false, isa);
        std::vector<float> c(2 * 20, 0.f);
        dsinfer::detail::sgemm_packed(2, a.data(), 4, packed, c.data(), 20, nullptr, -1.f,
                                      GemmActivation::relu);
        for (int j = 0; j < 20; ++j) {
            CHECK(c[static_cast<std::size_t>(j)] == 0.f);  // -4 -> 0
            CHECK(std::isnan(c[static_cast<std::size_t>(20 + j)]));
        }
    }
}

TEST_CASE("packed GEMM with K equal to zero writes the bias", "[fast][gemm]") {
    std::vector<float> bias{1.f, -2.f, 3.f};
    auto packed = dsinfer::detail::pack_b(nullptr, 0, 3, false);
    std::vector<float> c(6, 9.f);
    dsinfer::detail::sgemm_packed(2, nullptr, 0, packed, c.data(), 3, bias.data(), 1.f,
                                  GemmActivation::relu);
    CHECK(c == std::vector<float>{1.f, 0.f, 3.f, 1.f, 0.f, 3.f});
}

TEST_CASE("packed GEMM packs for the active ISA, capped by the request", "[fast][gemm]") {
    std::vector<float> b(8 * 40, 0.5f);
    const auto isa = dsinfer::detail::sgemm_isa();
    CHECK(isa == dsinfer::detail::fast::active_isa());  // DSINFER_MAX_CPU_ISA caps both
    CHECK(dsinfer::detail::pack_b(b.data(), 8, 40, false).isa == isa);
    // A wider family than the CPU (or the cap) allows falls back to the active one.
    CHECK(dsinfer::detail::pack_b(b.data(), 8, 40, false, Isa::avx512).isa == isa);
    const PackedB base = dsinfer::detail::pack_b(b.data(), 8, 40, false, Isa::baseline);
    CHECK(base.isa == Isa::baseline);
    CHECK(base.panels == (40 + base.nr - 1) / base.nr);
}

TEST_CASE("packed GEMM is bitwise deterministic across runs and thread counts", "[fast][gemm]") {
    std::mt19937 rng(7);
    // {m, k, n}: panel chunks (many panels; one or several row blocks), and row tiles split
    // among threads (few panels, many rows; several row blocks per thread).
    const std::int64_t shapes[][3] = {
        {100, 700, 260}, {64, 1024, 1000}, {400, 300, 100}, {501, 530, 20}};
    for (Isa isa : isas())
        for (const auto& s : shapes) {
            const std::int64_t m = s[0], k = s[1], n = s[2];
            const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
            const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
            const auto bias = random_vec(static_cast<std::size_t>(n), rng);
            const PackedB packed = dsinfer::detail::pack_b(b.data(), k, n, false, isa);
            auto run = [&](int threads) {
                dsinfer::detail::ThreadBudget budget(threads);
                std::vector<float> c(static_cast<std::size_t>(m * n));
                dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, bias.data(),
                                              1.f, GemmActivation::relu);
                return c;
            };
            const auto one = run(1);
            INFO("isa=" << dsinfer::detail::fast::isa_name(isa) << " m=" << m << " n=" << n);
            CHECK(run(1) == one);
            // Each element is one thread's dot product in the same K order, whatever the split.
            CHECK(run(2) == one);
            CHECK(run(3) == one);
        }
}

TEST_CASE("packed GEMM packs A and sums K blocks in the caller's workspace, or in its own "
          "buffers and C when that is short, with bitwise the same result",
          "[fast][gemm]") {
    std::mt19937 rng(9);
    // {m, k, n, ldc}: panel chunks (one A buffer, equal row blocks) and row tiles (one A buffer
    // per thread); K over several blocks with C's rows colliding in L1 (ldc 512 and 1024: the
    // partial sums go to accumulation buffers; ldc 768 with K over 4 blocks too) or not, and K
    // in one block.
    const std::int64_t shapes[][4] = {{1024, 300, 512, 512}, {401, 600, 20, 1024},
                                      {300, 1100, 80, 768},  {1024, 300, 200, 200},
                                      {300, 96, 100, 100}};
    for (Isa isa : isas())
        for (const auto& s : shapes) {
            const std::int64_t m = s[0], k = s[1], n = s[2], ldc = s[3];
            const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
            const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
            const PackedB packed = dsinfer::detail::pack_b(b.data(), k, n, true, isa);
            for (int threads : {1, 2, 3}) {
                dsinfer::detail::ThreadBudget budget(threads);
                std::vector<float> want(static_cast<std::size_t>(m * ldc), -3.f);
                REQUIRE(dsinfer::detail::sgemm_packed(m, a.data(), k, packed, want.data(), ldc,
                                                      nullptr));
                const std::size_t bytes =
                    dsinfer::detail::sgemm_workspace_bytes(m, k, n, isa, threads, ldc);
                // An A buffer is a row block, whole tiles of up to 192 rows, by K (one per
                // thread when threads split the rows); an accumulation buffer per thread is at
                // most a row block by N (columns rounded up to the panel width).
                CHECK(bytes >= static_cast<std::size_t>(6 * k) * 4);
                CHECK(bytes <= static_cast<std::size_t>(
                                   threads * (192 * (k + (n + 31) / 32 * 32) * 4 + 128) + 64));
                INFO("isa=" << dsinfer::detail::fast::isa_name(isa) << " m=" << m << " k=" << k
                            << " n=" << n << " ldc=" << ldc << " threads=" << threads);
                // Misaligned on purpose: the GEMM aligns inside it (the queried size allows).
                for (std::size_t size : {bytes, bytes / 2, std::size_t{1}}) {
                    std::vector<unsigned char> ws(size + 4, 0xAB);
                    std::vector<float> c(static_cast<std::size_t>(m * ldc), -3.f);
                    REQUIRE(dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), ldc,
                                                          nullptr, 1.f, GemmActivation::none,
                                                          ws.data() + 4, size));
                    CHECK(c == want);
                    const bool written = std::any_of(ws.begin() + 4, ws.end(),
                                                     [](unsigned char x) { return x != 0xAB; });
                    if (size == bytes) CHECK(written);  // A was packed there
                    if (size < bytes) CHECK_FALSE(written);
                }
            }
        }
}

// ---- the packed MatMul kernel in an engine: weights held once -----------------------------------

namespace {

/// x[?, 64] -> MatMul(w1) -> FusedMatMul-able Add(bias) -> Relu -> MatMul(w2) -> y; when
/// `share_w2` a ReduceSum of w2 is a second output, so w2 has a reader that needs its data.
dsinfer::Graph two_layer(std::mt19937& rng, bool share_w2) {
    using namespace dsinfer;
    Graph g;
    g.opset_imports.push_back({"", 17});
    auto tensor = [&](std::vector<std::int64_t> dims) {
        Tensor t = Tensor::empty(DType::f32, Shape::make(dims).value());
        std::uniform_real_distribution<float> d(-1.f, 1.f);
        for (auto& v : t.span<float>()) v = d(rng);
        return t;
    };
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(64)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w1 = g.add_initializer("w1", tensor({64, 48}));
    const ValueId b1 = g.add_initializer("b1", tensor({48}));
    const ValueId w2 = g.add_initializer("w2", tensor({48, 16}));
    const ValueId h = g.add_value("h"), hb = g.add_value("hb"), hr = g.add_value("hr");
    const ValueId y = g.add_value("y");
    g.add_node("MatMul", {x, w1}, {h}, "mm1");
    g.add_node("Add", {h, b1}, {hb}, "add1");
    g.add_node("Relu", {hb}, {hr}, "relu1");
    g.add_node("MatMul", {hr, w2}, {y}, "mm2");
    g.outputs.push_back(y);
    if (share_w2) {
        const ValueId s = g.add_value("w2_sum");
        g.add_node("ReduceSum", {w2}, {s}, "sum_w2");
        g.outputs.push_back(s);
    }
    return g;
}

}  // namespace

TEST_CASE("packed MatMul kernels own their weights: the graph's copy is freed unless another "
          "reader needs it",
          "[fast][gemm]") {
    using namespace dsinfer;
    for (bool share : {false, true}) {
        INFO("w2 shared with ReduceSum: " << share);
        std::mt19937 rng(11);
        const Graph proto = two_layer(rng, share);
        EngineOptions fast_opts;
        fast_opts.num_threads = 2;
        // Level 3 fuses mm1 + add1 into FusedMatMul; it would also fold ReduceSum(w2) away.
        fast_opts.optimization_level = share ? 0 : 3;
        const InferenceEngine fast = InferenceEngine::compile(proto, fast_opts);
        EngineOptions ref_opts;
        ref_opts.backends = {"reference"};
        ref_opts.optimization_level = 0;
        const InferenceEngine ref = InferenceEngine::compile(proto, ref_opts);

        const Graph& g = fast.graph();
        std::map<std::string, std::string> provider;
        for (std::size_t i = 0; i < g.nodes.size(); ++i)
            provider[g.nodes[i].name] = fast.node_providers()[i];
        for (const Value& v : g.values) {
            if (!v.initializer || (v.name != "w1" && v.name != "w2")) continue;
            // The reader of w1/w2 (MatMul, or FusedMatMul after the bias fusion).
            std::string reader;
            for (const Node& n : g.nodes)
                if (n.inputs.size() > 1 && g.value(n.inputs[1]).name == v.name) reader = n.name;
            INFO(v.name << " read by " << reader << " on " << provider[reader]);
            // dsinfer's packed GEMM and oneDNN's matmul (the reader on AVX-512) both hold the
            // weights in their own layout and release the graph's copy.
            const bool packed_reader = provider[reader] == "cpu" || provider[reader] == "onednn";
            const bool released = packed_reader && !(share && v.name == "w2");
            CHECK((v.initializer->raw_data() == nullptr) == released);
            // Dtype and shape stay for prepare.
            CHECK(v.initializer->dtype() == DType::f32);
            CHECK(v.initializer->num_dims() == 2);
        }
        // The reference graph keeps everything.
        for (const Value& v : ref.graph().values)
            if (v.initializer) CHECK(v.initializer->raw_data() != nullptr);

        for (std::int64_t batch : {1, 5, 300}) {
            Tensor x = Tensor::empty(DType::f32, Shape::make({batch, 64}).value());
            std::uniform_real_distribution<float> d(-1.f, 1.f);
            for (auto& v : x.span<float>()) v = d(rng);
            const auto got = fast.run({{"x", x}});
            const auto want = ref.run({{"x", x}});
            REQUIRE(got.size() == want.size());
            for (std::size_t o = 0; o < got.size(); ++o) {
                REQUIRE(got[o].tensor.shape() == want[o].tensor.shape());
                const float* a = got[o].tensor.data<float>();
                const float* b = want[o].tensor.data<float>();
                for (std::int64_t i = 0; i < want[o].tensor.num_elements(); ++i)
                    REQUIRE(std::abs(a[i] - b[i]) <= 1e-4f * (1.f + std::abs(b[i])));
            }
        }
        // A shape prepare rejects still gets its typed error, not a read of freed weights.
        Tensor bad = Tensor::empty(DType::f32, Shape::make({2, 63}).value());
        try {
            (void)fast.run({{"x", bad}});
            FAIL("K mismatch accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_argument);
        }
    }
}

TEST_CASE("packed_b_zeros filled through packed_b_index is pack_b's layout", "[fast][gemm]") {
    // K across two K blocks with a short last one, N with a padded last panel, every ISA family.
    for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
        const std::int64_t k = 300, n = 37;
        std::vector<float> b(static_cast<std::size_t>(k * n));  // [K, N]
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 1013) - 500.f;
        const PackedB want = dsinfer::detail::pack_b(b.data(), k, n, false, isa);
        PackedB got = dsinfer::detail::packed_b_zeros(k, n, isa);
        REQUIRE(got.isa == want.isa);
        REQUIRE(got.panels == want.panels);
        for (std::int64_t kk = 0; kk < k; ++kk)
            for (std::int64_t j = 0; j < n; ++j)
                got.data.get()[dsinfer::detail::packed_b_index(got, kk, j)] =
                    b[static_cast<std::size_t>(kk * n + j)];
        const auto count = static_cast<std::size_t>(want.panels * want.nr * k);
        CHECK(std::equal(got.data.get(), got.data.get() + count, want.data.get()));
    }
}
