// dsinfer's own thread pool (src/runtime/thread_pool.hpp) and the wait policies
// (EngineOptions::wait_policy): every slot of a region runs exactly once under each policy and
// any region size; nested regions run on the thread that starts them; a region completes on its
// calling thread when no helper takes a slot (a descheduled helper is never waited for);
// run_team / parallel_for give the same chunks on dsinfer's pool as on OpenMP's team; an
// engine's outputs are bitwise the same under every policy and thread count as on the OpenMP
// team; concurrent callers each get their own team.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dsinfer/engine.hpp"
#include "kernels/sgemm.hpp"
#include "runtime/parallel.hpp"
#include "runtime/thread_pool.hpp"
#include "unit/memory_models.hpp"

using namespace dsinfer;
using namespace dsinfer::detail;

#if defined(__SANITIZE_ADDRESS__)
namespace {
std::atomic<bool> g_forked_child{false};
}
// LeakSanitizer asks this at exit. A forked child still holds the thread_local buffers of the
// parent's other threads (OpenMP's workers, the pool's helpers), which no thread of the child
// can reach: they are the parent's, not leaks of the child.
extern "C" int __lsan_is_turned_off() { return g_forked_child.load() ? 1 : 0; }
#endif

namespace {

constexpr PoolWait kWaits[] = {PoolWait::spin, PoolWait::yield, PoolWait::block};

const char* wait_name(PoolWait w) {
    return w == PoolWait::spin ? "spin" : w == PoolWait::yield ? "yield" : "block";
}

/// Restores the helpers at scope exit even when a REQUIRE throws.
struct HoldHelpers {
    HoldHelpers() { pool_hold_helpers_for_test(true); }
    ~HoldHelpers() { pool_hold_helpers_for_test(false); }
};

}  // namespace

TEST_CASE("the pool runs every slot of a region exactly once under each wait policy",
          "[thread_pool][fast]") {
    for (PoolWait wait : kWaits) {
        INFO("wait " << wait_name(wait));
        const ParallelModeScope mode({true, wait});
        for (std::int64_t slots : {1, 2, 3, 5, 8, 17}) {
            INFO("slots " << slots);
            for (int rep = 0; rep < 200; ++rep) {
                std::vector<std::atomic<int>> count(static_cast<std::size_t>(slots));
                for (auto& c : count) c.store(0);
                run_team(slots, [&](std::int64_t s) { count[static_cast<std::size_t>(s)]++; });
                int wrong = 0;
                for (auto& c : count) wrong += c.load() != 1;
                REQUIRE(wrong == 0);
            }
        }
        // The team keeps the helpers the widest region asked for.
        CHECK(pool_helpers() == 16);
    }
}

TEST_CASE("a region inside a pool region runs on the thread that starts it",
          "[thread_pool][fast]") {
    const ParallelModeScope mode({true, PoolWait::spin});
    constexpr int kOuter = 4, kInner = 6;
    std::vector<std::atomic<int>> ran(kOuter * kInner);
    for (auto& r : ran) r.store(0);
    std::atomic<int> off_thread{0}, wide{0};
    run_team(kOuter, [&](std::int64_t o) {
        if (max_threads() != 1) wide++;
        const std::thread::id me = std::this_thread::get_id();
        run_team(kInner, [&](std::int64_t i) {
            if (std::this_thread::get_id() != me) off_thread++;
            ran[static_cast<std::size_t>(o * kInner + i)]++;
        });
    });
    CHECK(off_thread.load() == 0);
    CHECK(wide.load() == 0);
    for (auto& r : ran) CHECK(r.load() == 1);
}

TEST_CASE("a pool region completes on its calling thread when no helper takes a slot",
          "[thread_pool][fast]") {
    for (PoolWait wait : kWaits) {
        INFO("wait " << wait_name(wait));
        const ParallelModeScope mode({true, wait});
        run_team(4, [](std::int64_t) {});  // the helpers exist
        const HoldHelpers hold;
        const std::thread::id caller = std::this_thread::get_id();
        for (int rep = 0; rep < 50; ++rep) {
            std::atomic<int> elsewhere{0}, ran{0};
            run_team(4, [&](std::int64_t) {
                if (std::this_thread::get_id() != caller) elsewhere++;
                ran++;
            });
            REQUIRE(ran.load() == 4);
            REQUIRE(elsewhere.load() == 0);
        }
    }
}

TEST_CASE("parallel_for covers [0, n) with the same chunks on the pool and on OpenMP",
          "[thread_pool][fast]") {
    for (int threads : {1, 2, 3, 7}) {
        const ThreadBudget budget(threads);
        for (std::int64_t n : {1, 5, 64, 1000, 4097}) {
            auto chunks_of = [&](bool own_pool) {
                const ParallelModeScope mode({own_pool, PoolWait::block});
                std::vector<std::int64_t> begin_of(static_cast<std::size_t>(n), -1);
                std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
                for (auto& h : hits) h.store(0);
                parallel_for(n, 16, [&](std::int64_t b, std::int64_t e) {
                    for (std::int64_t i = b; i < e; ++i) {
                        begin_of[static_cast<std::size_t>(i)] = b;
                        hits[static_cast<std::size_t>(i)]++;
                    }
                });
                for (auto& h : hits) REQUIRE(h.load() == 1);
                return begin_of;
            };
            INFO("threads " << threads << ", n " << n);
            CHECK(chunks_of(true) == chunks_of(false));
        }
    }
}

TEST_CASE("callers on several threads each get their own team", "[thread_pool][fast]") {
    constexpr int kCallers = 4, kRegions = 300;
    std::atomic<int> wrong{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c)
        callers.emplace_back([&, c] {
            const ParallelModeScope mode({true, kWaits[c % 3]});
            for (int r = 0; r < kRegions; ++r) {
                std::atomic<std::int64_t> sum{0};
                run_team(3 + c, [&](std::int64_t s) { sum += s + 1; });
                const std::int64_t n = 3 + c;
                if (sum.load() != n * (n + 1) / 2) wrong++;
            }
            if (pool_helpers() != 2 + c) wrong++;
        });
    for (auto& t : callers) t.join();
    CHECK(wrong.load() == 0);
}

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

void add_weight(onnx::GraphProto& g, const std::string& name, const std::vector<std::int64_t>& dims,
                std::uint32_t seed) {
    std::size_t n = 1;
    for (auto d : dims) n *= static_cast<std::size_t>(d);
    *g.add_initializer() = dsinfer::test::float_tensor(name, dims, dsinfer::test::random_floats(n, seed, 0.1f));
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}

/// x [2, 8, 32, 32] -> Conv 3x3 (32) + Relu -> Conv 3x3 (32) -> Conv 1x1 (16) ->
/// GlobalAveragePool -> Flatten -> Gemm (10) -> y: convolutions large enough to split.
std::string conv_net_bytes() {
    using namespace dsinfer::test;
    onnx::ModelProto m = new_model(17, "pool_conv_net");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {2, 8, 32, 32});
    *g->add_output() = tensor_info("y", 1, {2, 10});
    add_weight(*g, "W1", {32, 8, 3, 3}, 1);
    add_weight(*g, "b1", {32}, 2);
    add_weight(*g, "W2", {32, 32, 3, 3}, 3);
    add_weight(*g, "W3", {16, 32, 1, 1}, 4);
    add_weight(*g, "G", {16, 10}, 5);
    set_ints(add_node(*g, "Conv", {"x", "W1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
    add_node(*g, "Relu", {"c1"}, {"r1"});
    set_ints(add_node(*g, "Conv", {"r1", "W2"}, {"c2"}), "pads", {1, 1, 1, 1});
    add_node(*g, "Conv", {"c2", "W3"}, {"c3"});
    add_node(*g, "GlobalAveragePool", {"c3"}, {"p"});
    add_node(*g, "Flatten", {"p"}, {"f"});
    add_node(*g, "Gemm", {"f", "G"}, {"y"});
    return bytes_of(m);
}

/// x [64, 256] -> MatMul (512) + bias -> Relu -> MatMul (128) -> y.
std::string mlp_bytes() {
    using namespace dsinfer::test;
    onnx::ModelProto m = new_model(17, "pool_mlp");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {64, 256});
    *g->add_output() = tensor_info("y", 1, {64, 128});
    add_weight(*g, "W1", {256, 512}, 6);
    add_weight(*g, "b1", {512}, 7);
    add_weight(*g, "W2", {512, 128}, 8);
    add_node(*g, "MatMul", {"x", "W1"}, {"h"});
    add_node(*g, "Add", {"h", "b1"}, {"hb"});
    add_node(*g, "Relu", {"hb"}, {"r"});
    add_node(*g, "MatMul", {"r", "W2"}, {"y"});
    return bytes_of(m);
}

Tensor pseudo_random(const Shape& s, unsigned seed) {
    return Tensor::from_vector<float>(
        s, dsinfer::test::random_floats(static_cast<std::size_t>(s.num_elements()), seed, 1.f));
}

}  // namespace

TEST_CASE("an engine's outputs are bitwise the same under every wait policy",
          "[thread_pool][wait_policy]") {
    // A conv net (dsinfer's im2col/Winograd convolutions, packed GEMM) and an MLP, on the
    // "cpu" backend (every parallel region is dsinfer's) and on the default backends.
    const std::string conv = conv_net_bytes();
    const std::string mlp = mlp_bytes();
    struct Case {
        const std::string* bytes;
        Shape shape;
    };
    for (const Case& c : {Case{&conv, Shape{2, 8, 32, 32}}, Case{&mlp, Shape{64, 256}}}) {
        for (const std::vector<std::string>& backends :
             {std::vector<std::string>{"cpu"}, std::vector<std::string>{}}) {
            for (int threads : {2, 3}) {
                INFO("backends " << (backends.empty() ? "default" : backends[0]) << ", threads "
                                 << threads);
                auto engine_for = [&](WaitPolicy p) {
                    EngineOptions o;
                    o.backends = backends;
                    o.num_threads = threads;
                    o.wait_policy = p;
                    o.log.level = LogLevel::error;  // yield/block on oneDNN models warn
                    return InferenceEngine::compile(load_onnx_from_bytes(c.bytes->data(),
                                                                         c.bytes->size()),
                                                    o);
                };
                // The OpenMP team: the reference bits (a spin engine with oneDNN nodes, else
                // the same engine with dsinfer's regions forced onto the team below).
                const InferenceEngine base = engine_for(WaitPolicy::spin);
                const std::string in = base.inputs()[0].name;
                const std::vector<NamedTensor> inputs{{in, pseudo_random(c.shape, 11)}};
                const std::vector<NamedTensor> want = base.run(inputs);
                for (WaitPolicy p : {WaitPolicy::yield, WaitPolicy::block}) {
                    INFO("wait_policy " << wait_policy_name(p));
                    const InferenceEngine e = engine_for(p);
                    CHECK_THAT(e.describe(), Catch::Contains("dsinfer pool"));
                    for (int rep = 0; rep < 20; ++rep) {
                        const std::vector<NamedTensor> got = e.run(inputs);
                        REQUIRE(got.size() == want.size());
                        for (std::size_t i = 0; i < got.size(); ++i)
                            REQUIRE(same_bits(got[i].tensor, want[i].tensor));
                    }
                }
            }
        }
    }
}

TEST_CASE("spin keeps dsinfer's kernels on OpenMP's team only where oneDNN runs nodes",
          "[thread_pool][wait_policy][fast]") {
    const std::string mlp = mlp_bytes();
    EngineOptions o;
    o.backends = {"cpu"};
    CHECK_THAT(InferenceEngine::compile(load_onnx_from_bytes(mlp.data(), mlp.size()), o).describe(),
               Catch::Contains("wait spin: dsinfer pool, spin"));
    o.backends = {"onednn", "cpu"};
    const InferenceEngine e = InferenceEngine::compile(load_onnx_from_bytes(mlp.data(), mlp.size()), o);
    bool onednn = false;
    for (const std::string& p : e.node_providers()) onednn = onednn || p == "onednn";
    if (onednn) {
        CHECK_THAT(e.describe(), Catch::Contains("wait spin: OpenMP team"));
    } else {
        WARN("this build runs no MLP node on oneDNN: the OpenMP-team case is not exercised");
    }
    o.wait_policy = WaitPolicy::block;
    o.log.level = LogLevel::error;
    CHECK_THAT(InferenceEngine::compile(load_onnx_from_bytes(mlp.data(), mlp.size()), o).describe(),
               Catch::Contains("wait block: dsinfer pool, block"));
    o.wait_policy = static_cast<WaitPolicy>(9);
    try {
        (void)InferenceEngine::compile(load_onnx_from_bytes(mlp.data(), mlp.size()), o);
        FAIL("an out-of-range wait_policy was accepted");
    } catch (const Error& err) {
        CHECK(err.code() == ErrorCode::invalid_argument);
        CHECK_THAT(std::string(err.what()), Catch::Contains("wait_policy"));
    }
}

TEST_CASE("dsinfer's packed GEMM gives the same bits on OpenMP's team and on the pool",
          "[thread_pool][fast]") {
    struct Case {
        std::int64_t m, k, n;
    };
    // Row tiles split by thread (small M), and the shared-counter path (large M); several K
    // blocks.
    for (const Case c : {Case{8, 64, 48}, Case{96, 300, 200}, Case{700, 520, 64}}) {
        std::vector<float> a(static_cast<std::size_t>(c.m * c.k)), b(static_cast<std::size_t>(c.k * c.n));
        std::uint32_t x = 5;
        for (float& v : a) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 9) / 8388608.0f - 1.0f;
        for (float& v : b) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 9) / 8388608.0f - 1.0f;
        const PackedB packed = pack_b(b.data(), c.k, c.n, false);
        for (int threads : {2, 3}) {
            const ThreadBudget budget(threads);
            auto product = [&](ParallelMode mode) {
                const ParallelModeScope scope(mode);
                std::vector<float> out(static_cast<std::size_t>(c.m * c.n));
                std::vector<unsigned char> ws(
                    sgemm_workspace_bytes(c.m, c.k, c.n, packed.isa, threads));
                REQUIRE(sgemm_packed(c.m, a.data(), c.k, packed, out.data(), c.n, nullptr, 1.f,
                                     GemmActivation::none, ws.data(), ws.size()));
                return out;
            };
            INFO("M " << c.m << ", K " << c.k << ", N " << c.n << ", threads " << threads);
            const std::vector<float> team = product({false, PoolWait::spin});
            for (PoolWait w : kWaits) {
                const std::vector<float> pool = product({true, w});
                CHECK(std::memcmp(team.data(), pool.data(), team.size() * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("a thread exits cleanly while its helper is late for the last region",
          "[thread_pool][fast]") {
    // A helper wakes for a region, is delayed (as if descheduled) while the calling thread
    // runs every slot itself and exits; the team's destructor must not wait for a helper that
    // went back to sleep on the team's final wake-up. In a forked child with a deadline, so a
    // hang fails the test instead of stalling the suite.
    std::cout.flush();
    std::fflush(nullptr);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int done = 0;
        for (PoolWait wait : kWaits)
            for (int rep = 0; rep < 5; ++rep) {
                std::thread caller([&] {
                    const ParallelModeScope mode({true, wait});
                    run_team(2, [](std::int64_t) {});  // the helper exists, then idles
                    std::this_thread::sleep_for(std::chrono::milliseconds(3));
                    pool_delay_helpers_for_test(20000);
                    // Each slot takes 5 ms: the helper wakes during the first and is still
                    // in its delay when the caller has run both.
                    std::atomic<int> ran{0};
                    run_team(2, [&](std::int64_t) {
                        ran++;
                        std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    });
                    if (ran.load() == 2) ++done;
                });  // exits at once: ~Team while the helper sleeps in its delay
                caller.join();
                pool_delay_helpers_for_test(0);
            }
        std::_Exit(done == 15 ? 0 : 1);
    }
    int status = 0;
    pid_t got = 0;
    for (int ms = 0; ms < 20000 && (got = waitpid(child, &status, WNOHANG)) == 0; ms += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (got == 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        FAIL("a thread whose helper was late for its last region did not exit within 20 s");
    }
    REQUIRE(got == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a forked child runs pool regions and exits cleanly", "[thread_pool][fast]") {
    const ParallelModeScope mode({true, PoolWait::spin});
    run_team(3, [](std::int64_t) {});  // this thread's team has helpers now
    REQUIRE(pool_helpers() >= 2);
    std::cout.flush();  // nothing buffered twice
    std::fflush(nullptr);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
#if defined(__SANITIZE_ADDRESS__)
        g_forked_child = true;
#endif
        // The parent's helpers do not exist here: regions still complete (a new team), and
        // exit does not try to join the parent's threads.
        std::atomic<int> ran{0};
        for (int r = 0; r < 20; ++r) run_team(3, [&](std::int64_t) { ran++; });
        std::exit(ran.load() == 60 ? 0 : 1);  // runs thread_local destructors
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
