// Weights are held once whatever kernel family runs them (docs/PLATFORM.md): the oneDNN MatMul
// (forced with backends {"onednn"}, which takes constant-B MatMul/Gemm on every ISA level; by
// default it does so only on AVX-512), the oneDNN Conv with its Winograd and im2col paths, and
// dsinfer's packed GEMM. After the first runs of several shape classes, the engine's own report
// (InferenceEngine::weight_memory) must name no constant held twice, the packed copies must be
// there, and the outputs must match the reference kernels (relative 1e-4: f32 GEMMs and
// Winograd against the reference's sums). Runs once per ISA level ([isa]).
#include <catch2/catch.hpp>
#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/dsinfer.hpp>
#include <string>
#include <vector>

#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

/// x [batch, 3, 8, 8] -> Conv 3x3 (16, pads 1) -> Relu -> Conv 3x3 (16, pads 1) -> Relu -> Conv
/// 3x3 stride 2 (32) -> Relu -> Conv 1x1 (32) -> GlobalAveragePool -> y: at level 3 a blocked
/// chain after the first
/// convolution, whose second 3x3 takes Winograd from 16 tiles (batch 4) and the im2col GEMM
/// below; the strided one the im2col GEMM, the 1x1 oneDNN.
Graph conv_net() {
    Graph g;
    g.name = "conv_net";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(3), Dim::fixed(8), Dim::fixed(8)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w0 = g.add_initializer("W0", random_f32({16, 3, 3, 3}, 20, 0.3f));
    const ValueId w1 = g.add_initializer("W1", random_f32({16, 16, 3, 3}, 21, 0.2f));
    const ValueId b1 = g.add_initializer("B1", random_f32({16}, 22, 0.1f));
    const ValueId w2 = g.add_initializer("W2", random_f32({32, 16, 3, 3}, 23, 0.2f));
    const ValueId w3 = g.add_initializer("W3", random_f32({32, 32, 1, 1}, 24, 0.2f));
    auto v = [&](const char* name) { return g.add_value(name); };
    const ValueId c0 = v("c0"), r0 = v("r0"), c1 = v("c1"), r1 = v("r1"), c2 = v("c2"),
                  r2 = v("r2"), c3 = v("c3"), y = v("y");
    g.add_node("Conv", {x, w0}, {c0}, "conv0").attributes = {{"pads", attr_ints({1, 1, 1, 1})}};
    g.add_node("Relu", {c0}, {r0}, "relu0");
    g.add_node("Conv", {r0, w1, b1}, {c1}, "conv1").attributes = {{"pads", attr_ints({1, 1, 1, 1})}};
    g.add_node("Relu", {c1}, {r1}, "relu1");
    g.add_node("Conv", {r1, w2}, {c2}, "conv2").attributes = {
        {"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}};
    g.add_node("Relu", {c2}, {r2}, "relu2");
    g.add_node("Conv", {r2, w3}, {c3}, "conv3");
    g.add_node("GlobalAveragePool", {c3}, {y}, "gap");  // takes the blocked layout in
    g.outputs.push_back(y);
    return g;
}

/// x [batch, 64] -> Gemm (W [32, 64], transB = 1, bias) -> Relu -> MatMul [32, 48] -> y.
Graph gemm_net() {
    Graph g;
    g.name = "gemm_net";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(64)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer("W", random_f32({32, 64}, 31, 0.3f));
    const ValueId b = g.add_initializer("b", random_f32({32}, 32, 0.1f));
    const ValueId w2 = g.add_initializer("W2", random_f32({32, 48}, 33, 0.3f));
    const ValueId h = g.add_value("h"), r = g.add_value("r"), y = g.add_value("y");
    g.add_node("Gemm", {x, w, b}, {h}, "fc").attributes = {{"transB", attr_i(1)}};
    g.add_node("Relu", {h}, {r}, "relu");
    g.add_node("MatMul", {r, w2}, {y}, "proj");
    g.outputs.push_back(y);
    return g;
}

struct Case {
    Graph (*make)();
    std::vector<std::int64_t> batches;
    std::vector<NamedTensor> (*inputs)(std::int64_t batch);
};

std::vector<NamedTensor> conv_inputs(std::int64_t batch) {
    return {{"x", random_f32({batch, 3, 8, 8}, 40 + static_cast<std::uint32_t>(batch))}};
}
std::vector<NamedTensor> gemm_inputs(std::int64_t batch) {
    return {{"x", random_f32({batch, 64}, 50 + static_cast<std::uint32_t>(batch))}};
}
std::vector<NamedTensor> mlp_inputs(std::int64_t batch) {
    return {{"x", random_f32({batch, 8}, 60 + static_cast<std::uint32_t>(batch))}};
}
std::vector<NamedTensor> transformer_inputs(std::int64_t batch) {
    return {{"ids", ids_tensor(batch, 5, 50, 70 + static_cast<std::uint32_t>(batch))}};
}

}  // namespace

TEST_CASE("oneDNN MatMul and Conv hold every constant once", "[onednn][isa]") {
    if (!onednn_available()) {
        WARN("dsinfer was built without oneDNN: test skipped");
        return;
    }
    const std::vector<Case> cases = {
        // Batch 1 and 2: conv1 on the im2col GEMM; 4 and 8: on Winograd. (One layer serving
        // shape classes on both holds the GEMM's packed weights beside the stored ones Winograd
        // keeps for its non-finite chunks: docs/PLATFORM.md, "Weights".)
        {&conv_net, {1, 2}, &conv_inputs},
        {&conv_net, {4, 8}, &conv_inputs},
        {&gemm_net, {3, 1, 64}, &gemm_inputs},
        {[] { return mini_mlp(); }, {2, 5}, &mlp_inputs},
        {[] { return mini_transformer(); }, {2, 1}, &transformer_inputs},
    };
    for (const std::vector<std::string>& backends :
         {std::vector<std::string>{"onednn"}, std::vector<std::string>{"onednn", "cpu"},
          std::vector<std::string>{"cpu"}}) {
        for (const Case& c : cases) {
            EngineOptions o;
            o.backends = backends;
            o.num_threads = 2;
            const InferenceEngine engine = InferenceEngine::compile(c.make(), o);
            EngineOptions ro;
            ro.backends = {"reference"};
            const InferenceEngine ref = InferenceEngine::compile(c.make(), ro);
            const std::string what = c.make().name + " on " + backends[0] +
                                     (backends.size() > 1 ? "," + backends[1] : "") + " at " +
                                     cpu_kernel_isa();
            INFO(what);
            if (c.make == &conv_net && backends[0] == "onednn")
                CHECK(engine.blocked_layout_nodes() > 0);  // Winograd and im2col need it
            for (std::int64_t batch : c.batches) {
                const auto feeds = c.inputs(batch);
                const auto got = engine.run(feeds);
                const auto want = ref.run(feeds);
                REQUIRE(got.size() == want.size());
                for (std::size_t i = 0; i < got.size(); ++i)
                    CHECK(max_rel_diff(got[i].tensor, want[i].tensor) < 1e-4);
            }
            const WeightMemoryStats w = engine.weight_memory();
            std::string twice;
            for (const auto& name : w.held_twice) twice += name + " ";
            INFO("held twice: " << twice << "; graph " << w.graph_bytes << " B, released "
                                << w.released_bytes << " B, packed " << w.packed_bytes
                                << " B, derived " << w.derived_bytes << " B");
            CHECK(w.held_twice.empty());
            // The GEMM-like nodes' weights were packed by whichever kernel runs them and let
            // go in the graph (oneDNN's matmul may read the stored layout in place instead,
            // then nothing is packed and nothing released: still held once).
            const bool onednn_first = backends[0] == "onednn";
            bool onednn_gemm = false;
            for (std::size_t i = 0; i < engine.graph().nodes.size(); ++i) {
                const std::string& op = engine.graph().nodes[i].op_type;
                const bool gemm_like = op == "MatMul" || op == "Gemm" || op == "FusedMatMul" ||
                                       op == "FusedGemm" || op == "Conv" || op == "FusedConv";
                if (gemm_like && engine.node_providers()[i] == "onednn") onednn_gemm = true;
            }
            if (backends.size() == 1 && onednn_first) CHECK(onednn_gemm);
            CHECK(w.packed_bytes + w.graph_bytes > 0);
        }
    }
}
