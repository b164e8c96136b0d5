// Transient shapes in the oneDNN backend (PrepareContext::transient_shape; src/onednn/): shapes
// inside their bucket, with EngineOptions::transient_shapes, build no primitive for themselves;
// the path is decided from the shapes alone. Kernels of ops that work row by row run the rows
// as pieces of power-of-two row counts on a few primitives cached per kernel: MatMul/Gemm
// with packed weights (on AVX-512's brgemm matmul; below it the exact primitive is built, which
// compiles nothing per shape there), unary eltwise, LayerNorm and Softmax over the last axis.
// Binary ops run their fallback kernel (one IEEE operation per element). Either way the results
// are the exact primitive's bits (checked here), so an engine with transient shapes agrees
// bitwise with one without. A shape prepared without the flag gets its exact primitive.
//
// Kernels are created as the executor would (the registry's entries best first, each one's
// fallback the next entry that accepts the node) and prepared and run directly, so that the
// flag is set by the test. The whole-engine case runs the residual MLP at every length 1..40
// on an engine with shape buckets and EngineOptions::transient_shapes (its runs at lengths off
// the bucket edges are transient shapes) against an engine without memory planning (exact
// primitives only), bitwise.
//
// Tolerances against the reference kernels (as tests/unit/test_onednn.cpp): MatMul/Gemm
// |got - want| <= s * (1e-4 + 1e-4 * |want|), s = max(1, sqrt(K / 64)); the single-primitive
// kernels 1e-5 + 1e-5 * |want| (test_onednn.cpp's widest for these ops).
#include <catch2/catch.hpp>

#include <dsinfer/backends/cpu.hpp>
#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/config.hpp>
#include <dsinfer/dsinfer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "unit/memory_models.hpp"

#if DSINFER_WITH_ONEDNN
#include "onednn/onednn_common.hpp"
#endif

namespace {

using namespace dsinfer;
using namespace dsinfer::test;
using Dims = std::vector<std::int64_t>;

/// True (after a message) when this build has no oneDNN backend: the caller returns.
bool no_onednn() {
    if (onednn_available()) return false;
    WARN("dsinfer was built without oneDNN (DSINFER_WITH_ONEDNN=OFF): first-sight test skipped");
    return true;
}

Tensor rnd(const Dims& d, unsigned seed) {
    const auto shape = Shape::make(std::span<const std::int64_t>(d)).value();
    std::size_t n = 1;
    for (auto v : d) n *= static_cast<std::size_t>(v);
    return Tensor::from_vector<float>(shape, random_floats(n, seed, 1.f));
}

/// Elements of `got` farther from `want` than abs + rel * |want| (NaN only matches NaN).
std::int64_t mismatches(const Tensor& got, const Tensor& want, double abs, double rel) {
    if (!(got.shape() == want.shape())) return -1;
    std::int64_t bad = 0;
    const float* g = got.data<float>();
    const float* w = want.data<float>();
    for (std::int64_t i = 0; i < got.num_elements(); ++i) {
        if (std::isnan(w[i]) || std::isnan(g[i])) {
            bad += std::isnan(w[i]) != std::isnan(g[i]);
            continue;
        }
        const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
        bad += d > abs + rel * std::fabs(static_cast<double>(w[i]));
    }
    return bad;
}

/// The dot-product tolerance for products of length k.
double dot_scale(std::int64_t k) { return std::max(1.0, std::sqrt(static_cast<double>(k) / 64.0)); }

#if DSINFER_WITH_ONEDNN
namespace on = dsinfer::detail::onednn;

/// The executor's create context in miniature: entries best first; create_fallback() makes the
/// next entry's kernel that accepts the node.
class CreateContext final : public KernelCreateContext {
public:
    CreateContext(const Node& n, const Graph& g, std::vector<const Tensor*> constants,
                  const std::vector<const KernelEntry*>& entries, std::size_t at)
        : KernelCreateContext(n, g, g.opset(n.domain), constants), constants_(std::move(constants)),
          entries_(entries), at_(at) {}

    StatusOr<std::unique_ptr<Kernel>> create_fallback() const override {
        for (std::size_t i = at_ + 1; i < entries_.size(); ++i) {
            CreateContext c(node(), graph(), constants_, entries_, i);
            auto k = entries_[i]->factory(c);
            if (k.is_ok() || k.status().code() != ErrorCode::unsupported) return k;
        }
        return Status(ErrorCode::unsupported, "no fallback");
    }
    bool creating_fallback() const noexcept override { return at_ > 0; }
    bool lower_provider(std::string_view provider) const noexcept override {
        for (std::size_t i = at_ + 1; i < entries_.size(); ++i)
            if (entries_[i]->provider == provider) return true;
        return false;
    }

private:
    std::vector<const Tensor*> constants_;
    const std::vector<const KernelEntry*>& entries_;
    std::size_t at_;
};

struct MadeKernel {
    std::unique_ptr<Kernel> kernel;
    std::string provider;
};

/// The kernel the first accepting backend of `backends` makes for node `ni` of `g`.
MadeKernel make_kernel_for(const Graph& g, std::size_t ni, const std::vector<std::string>& backends) {
    KernelRegistry r;
    for (const auto& b : backends) {
        if (b == "onednn") register_onednn_kernels(r);
        if (b == "cpu") REQUIRE(cpu_backend()->register_kernels(r).is_ok());
        if (b == "reference") REQUIRE(reference_backend()->register_kernels(r).is_ok());
    }
    const Node& n = g.nodes[ni];
    std::vector<const Tensor*> constants;
    for (ValueId id : n.inputs) {
        const Value* v = id == kNoValue ? nullptr : &g.value(id);
        constants.push_back(v != nullptr && v->initializer ? &*v->initializer : nullptr);
    }
    const auto entries = r.find_all(g, n, g.opset(n.domain), DeviceKind::cpu);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        CreateContext c(n, g, constants, entries, i);
        auto k = entries[i]->factory(c);
        if (k.is_ok()) return {std::move(k).value(), entries[i]->provider};
        REQUIRE(k.status().code() == ErrorCode::unsupported);
    }
    FAIL("no kernel for " << n.op_type);
    return {};
}

/// Prepares (transient or not) and runs `k` on `inputs`; output 0.
Tensor prepare_and_run(const Kernel& k, const Node& n, const std::vector<Tensor>& inputs,
                       bool transient) {
    PrepareContext pc(n, inputs, /*inferring=*/false);
    dsinfer::detail::ContextAccess::set_transient_shape(pc, transient);
    const Status st = k.prepare(pc);
    INFO(st.to_string());
    REQUIRE(st.is_ok());
    REQUIRE(pc.output_spec(0).set);
    Tensor y = Tensor::empty(pc.output_spec(0).dtype, pc.output_spec(0).shape);
    std::vector<unsigned char> ws(pc.workspace_bytes() + 64);
    void* aligned_ws = ws.data() + (64 - reinterpret_cast<std::uintptr_t>(ws.data()) % 64) % 64;
    std::vector<TensorView> ins, outs{y.view()};
    for (const Tensor& t : inputs) ins.push_back(t.view());
    RunControl control;
    RunContext rc(n, ins, outs, aligned_ws, pc.workspace_bytes(), cpu_allocator(), control);
    dsinfer::detail::ContextAccess::set_prepared_state(rc, dsinfer::detail::ContextAccess::state(pc).get());
    const Status rs = k.run(rc);
    INFO(rs.to_string());
    REQUIRE(rs.is_ok());
    return y;
}

Graph graph_of(const onnx::ModelProto& m) {
    const std::string b = bytes_of(m);
    return load_onnx_from_bytes(b.data(), b.size());
}

/// x[-1 "batch", K] (or [-1, -2, K] with `rank3`) times constant B[K, N]: MatMul, or Gemm with
/// transB and a constant C[N] (`gemm`).
onnx::ModelProto matmul_model(std::int64_t k, std::int64_t n, bool gemm, bool rank3) {
    onnx::ModelProto m = new_model(13, "transient_shape_matmul");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, rank3 ? Dims{-1, -2, k} : Dims{-1, k});
    *g.add_output() = sym_info("y", 1, rank3 ? Dims{-1, -2, n} : Dims{-1, n});
    const auto w = random_floats(static_cast<std::size_t>(k * n), 11, 1.f);
    if (gemm) {
        *g.add_initializer() = float_tensor("w", {n, k}, w);
        *g.add_initializer() = float_tensor("c", {n}, random_floats(static_cast<std::size_t>(n), 12, 1.f));
        auto* node = add_node(g, "Gemm", {"x", "w", "c"}, {"y"}, "gemm");
        auto* a = node->add_attribute();
        a->set_name("transB");
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(1);
    } else {
        *g.add_initializer() = float_tensor("w", {k, n}, w);
        add_node(g, "MatMul", {"x", "w"}, {"y"}, "matmul");
    }
    return m;
}

/// The constant inputs of node 0 as the kernels see them, after `x`.
std::vector<Tensor> node_inputs(const Graph& g, const Tensor& x) {
    std::vector<Tensor> in{x};
    const Node& n = g.nodes[0];
    for (std::size_t i = 1; i < n.inputs.size(); ++i) in.push_back(*g.value(n.inputs[i]).initializer);
    return in;
}

void check_transient_shape_matmul(bool gemm, bool rank3) {
    constexpr std::int64_t K = 96, N = 80;
    const Graph g = graph_of(matmul_model(K, N, gemm, rank3));
    // Without "cpu", so that the oneDNN kernel takes a constant B at every ISA (with it, and
    // below AVX-512, dsinfer's packed GEMM runs these nodes).
    MadeKernel dnn = make_kernel_for(g, 0, {"onednn", "reference"});
    MadeKernel ref = make_kernel_for(g, 0, {"reference"});
    REQUIRE(dnn.provider == "onednn");
    const bool brgemm = on::channel_block() == 16;  // AVX-512: pieces
    const double s = dot_scale(K);
    const std::vector<std::int64_t> ms{1, 3, 17, 100, 300};

    std::set<std::int64_t> sizes;  // piece row counts these transient shapes need
    std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
    for (std::int64_t m : ms) {
        for (int tails : {2, 3}) {  // the kernel takes either
            on::row_pieces(m, /*overlap=*/true, pieces, tails);
            for (const auto& p : pieces) sizes.insert(p.second);
        }
    }
    const on::PrimitiveBuilds before = on::primitive_builds();
    std::vector<Tensor> xs, first;
    for (int round = 0; round < 2; ++round) {  // the second round builds nothing more
        for (std::int64_t m : ms) {
            const auto seed = static_cast<unsigned>(100 + m);
            const Tensor x = !rank3   ? rnd({m, K}, seed)
                             : m >= 100 ? rnd({m / 25, 25, K}, seed)
                                        : rnd({1, m, K}, seed);
            const Tensor got = prepare_and_run(*dnn.kernel, g.nodes[0], node_inputs(g, x), true);
            const Tensor want = prepare_and_run(*ref.kernel, g.nodes[0], node_inputs(g, x), false);
            INFO("gemm " << gemm << " rank3 " << rank3 << " M " << m << " round " << round);
            CHECK(mismatches(got, want, 1e-4 * s, 1e-4 * s) == 0);
            if (round == 0) {
                xs.push_back(x);
                first.push_back(got);
            }
        }
    }
    const on::PrimitiveBuilds after = on::primitive_builds();
    INFO("brgemm " << brgemm << ", exact builds " << after.exact - before.exact
                   << ", piece builds " << after.pieces - before.pieces << ", piece sizes "
                   << sizes.size());
    if (brgemm) {
        // No exact primitive; one per piece size at most, each once (the kernel's piece cache).
        CHECK(after.exact == before.exact);
        CHECK(after.pieces - before.pieces <= sizes.size());
        CHECK(after.pieces - before.pieces >= 1);
    } else {
        CHECK(after.pieces == before.pieces);
        CHECK(after.exact - before.exact == ms.size());
    }

    // Prepared without the flag, each shape gets its exact primitive, whose results are the
    // pieces' bits...
    for (std::size_t i = 0; i < xs.size(); ++i) {
        const Tensor got = prepare_and_run(*dnn.kernel, g.nodes[0], node_inputs(g, xs[i]), false);
        INFO("M " << xs[i].num_elements() / K);
        CHECK(std::memcmp(got.raw_data(), first[i].raw_data(), got.num_bytes()) == 0);
        // ... and a transient prepare again takes its own path (from the shapes alone):
        // nothing built, the same bits.
        const on::PrimitiveBuilds mid = on::primitive_builds();
        const Tensor again = prepare_and_run(*dnn.kernel, g.nodes[0], node_inputs(g, xs[i]), true);
        CHECK(on::primitive_builds().exact == mid.exact);
        CHECK(on::primitive_builds().pieces == mid.pieces);
        CHECK(std::memcmp(again.raw_data(), got.raw_data(), got.num_bytes()) == 0);
    }
    CHECK(on::primitive_builds().exact - after.exact == (brgemm ? xs.size() : 0));
}
#endif

}  // namespace

TEST_CASE("transient shapes: row pieces are powers of two that cover M with a small overlap",
          "[onednn][transient_shape]") {
    if (no_onednn()) return;
#if DSINFER_WITH_ONEDNN
    std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
    for (int tails : {0, 2, 3}) {  // 0: no overlap
        const bool overlap = tails > 0;
        std::set<std::int64_t> sizes;
        for (std::int64_t m = 1; m <= 5000; ++m) {
            on::row_pieces(m, overlap, pieces, tails);
            std::vector<int> covered(static_cast<std::size_t>(m), 0);
            std::int64_t rows = 0;
            bool ok = true;
            for (const auto& [row0, count] : pieces) {
                ok = ok && count > 0 && (count & (count - 1)) == 0 && count <= 512 && row0 >= 0 &&
                     row0 + count <= m;
                for (std::int64_t r = row0; ok && r < row0 + count; ++r)
                    covered[static_cast<std::size_t>(r)] = 1;
                rows += count;
                sizes.insert(count);
            }
            INFO("M " << m << " tail pieces " << tails);
            REQUIRE(ok);
            CHECK(std::count(covered.begin(), covered.end(), 0) == 0);
            if (overlap) {
                CHECK(pieces.size() <= static_cast<std::size_t>(m / 512 + tails));
                // Rows computed twice: under 1/3 (two tail pieces) or 1/7 (three).
                CHECK((tails == 2 ? 3 : 7) * (rows - m) < m);
            } else {
                CHECK(pieces.size() <= static_cast<std::size_t>(m / 512 + 9));
                CHECK(rows == m);
            }
        }
        CHECK(sizes.size() == 10);  // 1, 2, 4, ..., 512
    }
#endif
}

TEST_CASE("transient shapes: MatMul with packed weights runs row pieces that match the reference",
          "[onednn][transient_shape]") {
    if (no_onednn()) return;
#if DSINFER_WITH_ONEDNN
    SECTION("MatMul [M, K]") { check_transient_shape_matmul(false, false); }
    SECTION("MatMul [B, S, K] (batch dims folded into M)") { check_transient_shape_matmul(false, true); }
    SECTION("Gemm with transB and a bias") { check_transient_shape_matmul(true, false); }
#endif
}

TEST_CASE("transient shapes: eltwise, LayerNorm and Softmax run row pieces, binary ops the fallback",
          "[onednn][transient_shape]") {
    if (no_onednn()) return;
#if DSINFER_WITH_ONEDNN
    struct Case {
        const char* op;
        std::int64_t opset;
        std::vector<std::string> inputs;  // "x" fed, the rest constants
        bool binary;
    };
    const Case cases[] = {{"Tanh", 13, {"x"}, false},
                          {"Elu", 13, {"x"}, false},
                          {"Add", 13, {"x", "b"}, true},
                          {"Mul", 13, {"x", "b"}, true},
                          {"LayerNormalization", 17, {"x", "scale", "bias"}, false},
                          {"Softmax", 13, {"x"}, false},
                          {"Softmax", 11, {"x"}, false}};  // opset < 13: the coerced 2-D block
    constexpr std::int64_t H = 48;
    for (const Case& c : cases) {
        onnx::ModelProto m = new_model(c.opset, "transient_shape_eltwise");
        auto& g = *m.mutable_graph();
        *g.add_input() = sym_info("x", 1, {-1, -2, H});
        *g.add_output() = sym_info("y", 1, {-1, -2, H});
        for (std::size_t i = 1; i < c.inputs.size(); ++i)
            *g.add_initializer() = float_tensor(c.inputs[i], {H}, random_floats(H, 20 + i, 1.f));
        add_node(g, c.op, c.inputs, {"y"}, "node");
        const Graph graph = graph_of(m);
        MadeKernel dnn = make_kernel_for(graph, 0, {"onednn", "cpu", "reference"});
        MadeKernel next = make_kernel_for(graph, 0, {"cpu", "reference"});
        MadeKernel ref = make_kernel_for(graph, 0, {"reference"});
        INFO(c.op << "-" << c.opset << ": " << dnn.provider << " kernel, fallback " << next.provider);
        if (dnn.provider != "onednn") {
            WARN(c.op << " does not run on oneDNN at this ISA: not checked");
            continue;
        }
        const on::PrimitiveBuilds start = on::primitive_builds();
        for (std::int64_t s : {1, 5, 33, 130, 1400}) {
            const Tensor x = rnd({2, s, H}, 300 + static_cast<unsigned>(s));
            const Tensor y_ref = prepare_and_run(*ref.kernel, graph.nodes[0], node_inputs(graph, x), false);
            const Tensor y_next =
                prepare_and_run(*next.kernel, graph.nodes[0], node_inputs(graph, x), false);
            const on::PrimitiveBuilds before = on::primitive_builds();
            const Tensor got = prepare_and_run(*dnn.kernel, graph.nodes[0], node_inputs(graph, x), true);
            INFO("seq " << s);
            // Binary ops on the reference kernel only up to 64 Ki elements.
            const bool built = c.binary && next.provider != "cpu" && x.num_elements() > (1 << 16);
            CHECK(on::primitive_builds().exact == before.exact + (built ? 1 : 0));
            CHECK(mismatches(got, y_ref, 1e-5, 1e-5) == 0);
            if (c.binary && !built)  // the fallback ran: its bits
                CHECK(std::memcmp(got.raw_data(), y_next.raw_data(), got.num_bytes()) == 0);
            // Prepared again without the flag: the exact primitive, and the same bits.
            const Tensor exact = prepare_and_run(*dnn.kernel, graph.nodes[0], node_inputs(graph, x), false);
            CHECK(on::primitive_builds().exact == before.exact + 1);
            CHECK(std::memcmp(exact.raw_data(), got.raw_data(), got.num_bytes()) == 0);
            // A transient prepare again: its own path (from the shapes alone), the same bits.
            const Tensor cached = prepare_and_run(*dnn.kernel, graph.nodes[0], node_inputs(graph, x), true);
            CHECK(std::memcmp(cached.raw_data(), exact.raw_data(), got.num_bytes()) == 0);
            CHECK(on::primitive_builds().exact == before.exact + 1);
        }
        // Rows 2..2800: pieces of at most 10 sizes, each built once.
        CHECK(on::primitive_builds().pieces - start.pieces <= (c.binary ? 0u : 10u));
    }
#endif
}

TEST_CASE("transient shapes: an engine with shape buckets at every length 1..40 gives exact runs' bits",
          "[onednn][transient_shape]") {
    if (no_onednn()) return;
#if DSINFER_WITH_ONEDNN
    const std::string model = residual_mlp();
    EngineOptions o;
    o.num_threads = 2;
    o.transient_shapes = true;  // lengths off the bucket edges: transient, every run
    const InferenceEngine bucketed = engine_from(model, o);
    o.plan_memory = false;
    o.transient_shapes = false;
    const InferenceEngine plain = engine_from(model, o);
    const double s = dot_scale(2 * kMlpFfn);
    auto x_of = [](std::int64_t len) {
        return rnd({1, len, kMlpHidden}, 500 + static_cast<unsigned>(len));
    };
    const InferenceEngine reference_engine = engine_from(model, [] {
        EngineOptions r;
        r.backends = {"reference"};
        return r;
    }());
    auto compare = [&](std::int64_t len, const char* what) {
        const Tensor x = x_of(len);
        const auto got = bucketed.run({{"x", x}});
        const auto want = plain.run({{"x", x}});
        const auto ref = reference_engine.run({{"x", x}});
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < got.size(); ++k) {
            INFO(what << ", length " << len << ", output " << k);
            CHECK(same_bits(got[k].tensor, want[k].tensor));
            CHECK(mismatches(got[k].tensor, ref[k].tensor, 1e-4 * s, 1e-4 * s) == 0);
        }
    };
    for (std::int64_t len = 1; len <= 40; ++len) compare(len, "transient");
    for (std::int64_t len = 1; len <= 40; len += 3) compare(len, "second run");
    // Lengths 41..63 (bucket 64, measured: its edge's primitives exist) build no exact
    // primitive, their second runs neither.

    // Row pieces: at most log2(32) + 1 = 6 sizes for each of the 3 MatMuls and Sigmoid, fewer
    // once built; binary ops on the fallback.
    (void)bucketed.run({{"x", x_of(64)}});
    const on::PrimitiveBuilds before = on::primitive_builds();
    for (int round = 0; round < 2; ++round)
        for (std::int64_t len = 41; len < 64; ++len) (void)bucketed.run({{"x", x_of(len)}});
    const on::PrimitiveBuilds after = on::primitive_builds();
    INFO("exact builds " << after.exact - before.exact << ", piece builds " << after.pieces - before.pieces);
    CHECK(after.exact == before.exact);
    CHECK(after.pieces - before.pieces <= 4 * 6);
    for (std::int64_t len = 41; len < 64; len += 5) compare(len, "bucket 64");
#endif
}

TEST_CASE("oneDNN's primitive cache keeps a primitive per thread budget", "[onednn][fast]") {
#if DSINFER_WITH_ONEDNN
    // A primitive sizes its OpenMP team when it is created: one made for 2 threads must not run
    // a node the executor gives 1 thread (a small node, a lease that got no helper).
    detail::onednn::PrimitiveCache<int> cache;
    int builds = 0;
    auto make = [&] { return StatusOr<int>(++builds); };
    const std::vector<std::int64_t> key{2, 64, 64};
    {
        const detail::ThreadBudget two(2);
        CHECK(*cache.get(key, make).value() == 1);
        CHECK(*cache.get(key, make).value() == 1);
    }
    {
        const detail::ThreadBudget one(1);
        CHECK(cache.find(key) == nullptr);
        CHECK(*cache.get(key, make).value() == 2);
    }
    const detail::ThreadBudget two(2);
    REQUIRE(cache.find(key) != nullptr);
    CHECK(*cache.find(key) == 1);
    CHECK(builds == 2);
#else
    (void)no_onednn();
#endif
}
