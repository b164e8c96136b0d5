// [cuda] engine-level tests of the CUDA backend: placement and CPU fallback with the bytes that
// crossed, every precision against the CPU, CUDA graph capture and replay, device-side index
// errors, and out-of-memory failing only its request. They skip (WARN "SKIPPED: ...") without
// a GPU. Tolerances (relative to 1 + |reference|, the reference being the CPU float32 run):
// fp32 1e-4 (cuBLASLt float32 products, other summation order), tf32 1e-2 (10-bit mantissa
// products), fp16 2e-2 and bf16 6e-2 (storage rounding through six layers, LayerNorm in float).
#include <catch2/catch.hpp>

#include <dsinfer/dsinfer.hpp>

#include "cuda_op_tester.hpp"
#if DSINFER_WITH_CUDA
#include <dsinfer/backends/cuda.hpp>
#endif
#include "engine_models.hpp"

using namespace dsinfer;
using dsinfer::test::cuda_ops::cuda_ready;

namespace {

std::vector<NamedTensor> run_on(const InferenceEngine& e, const Tensor& ids) {
    return e.run({{"ids", ids}});
}

EngineOptions gpu(Precision p = Precision::fp32, bool graphs = true) {
    EngineOptions o;
    o.device = "cuda";
    o.precision = p;
    o.cuda_graphs = graphs;
    return o;
}

}  // namespace

TEST_CASE("cuda engine: every node of a small transformer block runs on the GPU, at every precision",
          "[cuda]") {
    if (!cuda_ready()) return;
    const Graph g = test::mini_transformer();
    EngineOptions cpu;
    cpu.backends = {"reference"};
    const auto ref = InferenceEngine::compile(g, cpu);
    const Tensor ids = test::ids_tensor(3, 17, 50, 7);
    const Tensor want = run_on(ref, ids)[0].tensor;
    const std::pair<Precision, double> cases[] = {
        {Precision::fp32, 1e-4}, {Precision::tf32, 1e-2}, {Precision::fp16, 2e-2}, {Precision::bf16, 6e-2}};
    for (const auto& [p, tol] : cases) {
        INFO("precision " << static_cast<int>(p));
        const auto e = InferenceEngine::compile(g, gpu(p));
        const NodePlacement pl = e.node_placement();
        CHECK(pl.fallback_nodes == 0);
        CHECK(pl.device_nodes == e.graph().nodes.size());
        CHECK(pl.device.rfind("cuda:0", 0) == 0);
        for (int rep = 0; rep < 3; ++rep) {  // record, capture + replay, replay
            const auto got = run_on(e, ids);
            REQUIRE(got[0].tensor.dtype() == DType::f32);
            REQUIRE(got[0].tensor.shape() == want.shape());
            CHECK(test::max_rel_diff(got[0].tensor, want) <= tol);
        }
    }
}

TEST_CASE("cuda engine: CUDA graph replays equal node-by-node runs; new shapes are captured too",
          "[cuda]") {
    if (!cuda_ready()) return;
    const Graph g = test::mini_transformer();
    const auto graphs = InferenceEngine::compile(g, gpu(Precision::fp32, true));
    const auto plain = InferenceEngine::compile(g, gpu(Precision::fp32, false));
    const Tensor a = test::ids_tensor(2, 9, 50, 1), b = test::ids_tensor(2, 9, 50, 2);
    for (int rep = 0; rep < 3; ++rep) {
        const Tensor& ids = rep % 2 ? b : a;  // replays read each run's inputs
        const auto x = run_on(graphs, ids), y = run_on(plain, ids);
        CHECK(test::max_rel_diff(x[0].tensor, y[0].tensor) <= 1e-6);
    }
    CHECK(graphs.node_placement().graph_replays == 2);  // runs 2 and 3
    CHECK(plain.node_placement().graph_replays == 0);
    const Tensor c = test::ids_tensor(4, 31, 50, 3);  // another shape class
    for (int rep = 0; rep < 2; ++rep)
        CHECK(test::max_rel_diff(run_on(graphs, c)[0].tensor, run_on(plain, c)[0].tensor) <= 1e-6);
    CHECK(graphs.node_placement().graph_replays == 3);
}

TEST_CASE("cuda engine: an out-of-range Gather index fails its request (also when replayed) and "
          "the next one succeeds", "[cuda]") {
    if (!cuda_ready()) return;
    const Graph g = test::mini_transformer();
    for (bool graphs : {false, true}) {
        INFO("cuda_graphs " << graphs);
        const auto e = InferenceEngine::compile(g, gpu(Precision::fp32, graphs));
        const Tensor good = test::ids_tensor(2, 5, 50, 4);
        Tensor bad = good.clone();
        bad.data<std::int64_t>()[7] = 50;
        for (int rep = 0; rep < 2; ++rep) (void)run_on(e, good);  // plan, then capture
        std::vector<NamedTensor> out;
        const Status st = e.try_run({{"ids", bad}}, out);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK(st.message().find("embed") != std::string::npos);
        CHECK(st.message().find("50") != std::string::npos);
        CHECK(e.try_run({{"ids", good}}, out).is_ok());
    }
}

TEST_CASE("cuda engine: a node without a CUDA kernel runs on the CPU, and the copies are counted",
          "[cuda]") {
    if (!cuda_ready()) return;
    Graph g;
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::fixed(4), Dim::fixed(33)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId a = g.add_value("a"), b = g.add_value("b"), y = g.add_value("y");
    g.add_node("Relu", {x}, {a}, "relu");
    g.add_node("Sin", {a}, {b}, "sin");  // no CUDA kernel: runs on the CPU
    g.add_node("Neg", {b}, {y}, "neg");
    g.outputs.push_back(y);
    const auto e = InferenceEngine::compile(g, gpu());
    const NodePlacement p0 = e.node_placement();
    CHECK(p0.device_nodes == 2);
    CHECK(p0.fallback_nodes == 1);
    const Tensor in = test::random_f32({4, 33}, 9);
    EngineOptions cpu;
    cpu.backends = {"reference"};
    const auto want = InferenceEngine::compile(g, cpu).run({{"x", in}});
    const auto got = e.run({{"x", in}});
    CHECK(test::max_rel_diff(got[0].tensor, want[0].tensor) <= 1e-6);
    const NodePlacement p1 = e.node_placement();
    // x up, a down, b up, y down: 4 copies of 4 x 33 floats.
    CHECK(p1.transfers - p0.transfers == 4);
    CHECK(p1.host_to_device_bytes - p0.host_to_device_bytes == 2 * 4 * 33 * 4);
    CHECK(p1.device_to_host_bytes - p0.device_to_host_bytes == 2 * 4 * 33 * 4);
}

TEST_CASE("cuda engine: running out of device memory fails only that request", "[cuda]") {
    if (!cuda_ready()) return;
    Graph g;
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::fixed(1)};
    SymbolicShape ss;
    ss.known = true;
    ss.dims = {Dim::fixed(1)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    const ValueId s = g.add_value("shape", DType::i64, ss);
    g.inputs = {x, s};
    const ValueId e1 = g.add_value("e1"), y = g.add_value("y");
    g.add_node("Expand", {x, s}, {e1}, "expand");
    g.add_node("Relu", {e1}, {y}, "relu");
    g.outputs.push_back(y);
    const auto e = InferenceEngine::compile(g, gpu());
    const Tensor one = test::random_f32({1}, 3);
    auto shape_of = [](std::int64_t n) {
        auto t = Tensor::allocate(DType::i64, Shape{1}).value();
        t.data<std::int64_t>()[0] = n;
        return t;
    };
    std::vector<NamedTensor> out;
    // 2^38 floats = 1 TiB: more than any GPU has.
    const Status st = e.try_run({{"x", one}, {"shape", shape_of(std::int64_t{1} << 38)}}, out);
    CHECK(st.code() == ErrorCode::resource_exhausted);
    REQUIRE(e.try_run({{"x", one}, {"shape", shape_of(1000)}}, out).is_ok());
    CHECK(out[0].tensor.num_elements() == 1000);
    CHECK(out[0].tensor.data<float>()[999] == std::max(0.f, one.data<float>()[0]));
}

TEST_CASE("cuda engine: device names are checked", "[cuda]") {
    if (!cuda_ready()) return;
    EngineOptions o;
    o.device = "cuda:99";
    try {
        (void)InferenceEngine::compile(test::mini_mlp(), o);
        FAIL("cuda:99 loaded");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unavailable);
        CHECK(e.message().find("99") != std::string::npos);
    }
}

TEST_CASE("cuda engine: the device pool's limit fails requests beyond it; trim and statistics",
          "[cuda]") {
    if (!cuda_ready()) return;
#if DSINFER_WITH_CUDA
    Graph g;
    g.opset_imports = {{"", 17}};
    SymbolicShape one;
    one.known = true;
    one.dims = {Dim::fixed(1)};
    const ValueId x = g.add_value("x", DType::f32, one);
    const ValueId s = g.add_value("shape", DType::i64, one);
    g.inputs = {x, s};
    const ValueId e1 = g.add_value("e1"), y = g.add_value("y");
    g.add_node("Expand", {x, s}, {e1}, "expand");
    g.add_node("Relu", {e1}, {y}, "relu");
    g.outputs.push_back(y);
    const auto e = InferenceEngine::compile(g, gpu());
    auto shape_of = [](std::int64_t n) {
        auto t = Tensor::allocate(DType::i64, Shape{1}).value();
        t.data<std::int64_t>()[0] = n;
        return t;
    };
    const Tensor v = test::random_f32({1}, 5);
    std::vector<NamedTensor> out;
    REQUIRE(e.try_run({{"x", v}, {"shape", shape_of(1 << 20)}}, out).is_ok());  // warm
    const MemoryPoolStats before = cuda_memory_stats(0);
    CHECK(before.peak_bytes_in_use >= (std::uint64_t{1} << 22));  // two 4 MiB tensors lived
    REQUIRE(cuda_set_memory_limit(0, before.bytes_reserved + (std::size_t{64} << 20)));
    // 2 x 400 MB of intermediates: beyond the limit.
    const Status st = e.try_run({{"x", v}, {"shape", shape_of(100'000'000)}}, out);
    CHECK(st.code() == ErrorCode::resource_exhausted);
    REQUIRE(e.try_run({{"x", v}, {"shape", shape_of(1000)}}, out).is_ok());  // still fine
    REQUIRE(cuda_set_memory_limit(0, 0));
    REQUIRE(e.try_run({{"x", v}, {"shape", shape_of(100'000'000)}}, out).is_ok());
    CHECK(cuda_trim(0) > 0);  // the 400 MB blocks were cached
    CHECK_FALSE(cuda_set_memory_limit(99, 1));
#endif
}

TEST_CASE("cuda engine: large inputs and outputs go through pinned staging and arrive intact",
          "[cuda]") {
    if (!cuda_ready()) return;
    Graph g;
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(1024)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId a = g.add_value("a"), y = g.add_value("y");
    g.add_node("Neg", {x}, {a}, "neg");
    g.add_node("Relu", {a}, {y}, "relu");
    g.outputs.push_back(y);
    for (bool graphs : {false, true}) {
        const auto e = InferenceEngine::compile(g, gpu(Precision::fp32, graphs));
        for (std::int64_t rows : {1, 300, 300, 300, 7}) {  // 4 KiB (pageable) and 1.2 MiB (pinned)
            const Tensor in = test::random_f32({rows, 1024}, static_cast<std::uint32_t>(rows) + 3);
            const auto out = e.run({{"x", in}});
            REQUIRE(out[0].tensor.shape() == in.shape());
            std::int64_t bad = 0;
            for (std::int64_t i = 0; i < in.num_elements(); ++i)
                bad += out[0].tensor.data<float>()[i] != std::max(0.f, -in.data<float>()[i]);
            CHECK(bad == 0);
        }
        if (graphs) CHECK(e.node_placement().graph_replays >= 1);
    }
}
