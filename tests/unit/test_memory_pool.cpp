// MemoryPool (include/dsinfer/memory_pool.hpp): reuse by size class and hit counting, the hard
// limit (Tensor::allocate -> resource_exhausted, cached blocks trimmed first), trim, statistics,
// 8 threads at once, pass-through mode, lifetime (tensors and engine outputs keep their pool),
// and an engine fed 1,000 random input shapes staying within its pool's bounds.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>

#include "dsinfer/memory_pool.hpp"
#ifndef DSINFER_TEST_NO_ENGINE  // dsinfer_concurrency_tests builds the pool tests without the library
#include "core/executor.hpp"
#include "memory_models.hpp"
#endif

namespace {

using namespace dsinfer;
#ifndef DSINFER_TEST_NO_ENGINE
using dsinfer::test::engine_from;
using dsinfer::test::residual_mlp;
using dsinfer::test::same_bits;
#endif

/// An upstream that counts what it hands out (to see what the pool really holds).
class CountingAllocator final : public Allocator {
public:
    Device device() const noexcept override { return {}; }
    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        void* p = cpu_allocator().allocate(bytes, alignment);
        if (p != nullptr) {
            ++calls;
            ++live;
            live_bytes += bytes;
        }
        return p;
    }
    void deallocate(void* p, std::size_t bytes) noexcept override {
        if (p == nullptr) return;
        --live;
        live_bytes -= bytes;
        cpu_allocator().deallocate(p, bytes);
    }
    std::atomic<long> calls{0}, live{0};
    std::atomic<std::size_t> live_bytes{0};
};

constexpr std::size_t kMiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("memory pool size classes: multiples of 64, at most 12.5 % above the request",
          "[memory_pool]") {
    CHECK(MemoryPool::size_class(0) == 64);
    CHECK(MemoryPool::size_class(1) == 64);
    CHECK(MemoryPool::size_class(65) == 128);
    CHECK(MemoryPool::size_class(512) == 512);
    CHECK(MemoryPool::size_class(513) == 576);
    for (std::size_t b : {std::size_t{1000}, std::size_t{4097}, 3 * kMiB + 5, std::size_t{123456789}}) {
        const std::size_t c = MemoryPool::size_class(b);
        INFO(b << " -> " << c);
        CHECK(c >= b);
        CHECK(c % 64 == 0);
        CHECK(static_cast<double>(c) <= static_cast<double>(b) * 1.125 + 64);
        CHECK(MemoryPool::size_class(c) == c);
    }
}

TEST_CASE("memory pool reuses a freed block of the same class and counts hits", "[memory_pool]") {
    CountingAllocator up;
    MemoryPool pool({}, up);
    const std::size_t n = 3 * kMiB;
    void* a = pool.allocate(n, 64);
    REQUIRE(a != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
    std::memset(a, 1, n);
    pool.deallocate(a, n);
    void* b = pool.allocate(n - 1000, 64);  // same class
    REQUIRE(b != nullptr);
    std::memset(b, 2, n - 1000);
    void* c = pool.allocate(n, 64);  // the cached block is taken: a new one
    REQUIRE(c != nullptr);
    CHECK(c != b);
    const MemoryPoolStats s = pool.stats();
    CHECK(s.allocations == 3);
    if (pool.pass_through()) {
        CHECK(s.hits == 0);
        CHECK(s.misses == 3);
        CHECK(up.calls == 3);
    } else {
        CHECK(b == a);
        CHECK(s.hits == 1);
        CHECK(s.misses == 2);
        CHECK(s.hit_rate() == Approx(1.0 / 3.0));
        CHECK(up.calls == 2);
    }
    pool.deallocate(b, n - 1000);
    pool.deallocate(c, n);
    // Small and zero sizes are valid, distinct, aligned blocks too.
    void* z1 = pool.allocate(0, 64);
    void* z2 = pool.allocate(0, 64);
    REQUIRE(z1 != nullptr);
    REQUIRE(z2 != nullptr);
    CHECK(z1 != z2);
    pool.deallocate(z1, 0);
    pool.deallocate(z2, 0);
    pool.deallocate(nullptr, 100);
    // Over-aligned requests get their alignment.
    void* o = pool.allocate(1000, 4096);
    REQUIRE(o != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(o) % 4096 == 0);
    pool.deallocate(o, 1000);
    CHECK(pool.stats().bytes_in_use == 0);
}

TEST_CASE("memory pool statistics follow their definitions", "[memory_pool]") {
    CountingAllocator up;
    MemoryPool pool({}, up);
    const std::size_t a_bytes = 1000, b_bytes = 5 * kMiB + 3;
    void* a = pool.allocate(a_bytes, 64);
    void* b = pool.allocate(b_bytes, 64);
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    MemoryPoolStats s = pool.stats();
    const std::size_t ra = pool.pass_through() ? a_bytes : MemoryPool::size_class(a_bytes);
    const std::size_t rb = pool.pass_through() ? b_bytes : MemoryPool::size_class(b_bytes);
    CHECK(s.bytes_in_use == a_bytes + b_bytes);
    CHECK(s.peak_bytes_in_use == a_bytes + b_bytes);
    CHECK(s.bytes_reserved == ra + rb);
    CHECK(s.bytes_reserved == up.live_bytes.load());  // reserved = what the upstream gave
    CHECK(s.bytes_cached == 0);
    CHECK(s.fragmentation == Approx(1.0 - double(a_bytes + b_bytes) / double(ra + rb)));
    pool.deallocate(b, b_bytes);
    s = pool.stats();
    CHECK(s.bytes_in_use == a_bytes);
    CHECK(s.peak_bytes_in_use == a_bytes + b_bytes);
    if (!pool.pass_through()) {
        CHECK(s.bytes_cached == rb);
        CHECK(s.bytes_reserved == ra + rb);
        CHECK(s.fragmentation == Approx(1.0 - double(a_bytes) / double(ra + rb)));
    } else {
        CHECK(s.bytes_cached == 0);
        CHECK(s.bytes_reserved == ra);
    }
    pool.reset_peak();
    CHECK(pool.stats().peak_bytes_in_use == a_bytes);
    CHECK(pool.stats().peak_bytes_reserved == pool.stats().bytes_reserved);
    pool.deallocate(a, a_bytes);
    s = pool.stats();
    CHECK(s.bytes_in_use == 0);
    CHECK(s.bytes_reserved == s.bytes_cached);
    CHECK(s.fragmentation == (s.bytes_reserved == 0 ? 0.0 : 1.0));
}

TEST_CASE("memory pool trim returns cached blocks to the upstream", "[memory_pool]") {
    CountingAllocator up;
    MemoryPool pool({}, up);
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t k = 1; k <= 6; ++k) blocks.emplace_back(pool.allocate(k * kMiB, 64), k * kMiB);
    for (auto& [p, n] : blocks) {
        REQUIRE(p != nullptr);
        pool.deallocate(p, n);
    }
    const MemoryPoolStats before = pool.stats();
    CHECK(before.bytes_in_use == 0);
    if (pool.pass_through()) {
        CHECK(before.bytes_reserved == 0);
        CHECK(pool.trim() == 0);
        return;
    }
    CHECK(before.bytes_cached == 21 * kMiB);
    CHECK(up.live_bytes.load() == before.bytes_reserved);
    // Keep at most 8 MiB: the largest blocks go first (6 + 5 + 4 MiB), 6 MiB stay.
    CHECK(pool.trim(8 * kMiB) == 15 * kMiB);
    MemoryPoolStats s = pool.stats();
    CHECK(s.bytes_cached == 6 * kMiB);
    CHECK(s.bytes_reserved == 6 * kMiB);
    CHECK(up.live_bytes.load() == 6 * kMiB);
    CHECK(s.trimmed_bytes == 15 * kMiB);
    CHECK(pool.trim() == 6 * kMiB);
    CHECK(pool.stats().bytes_reserved == 0);
    CHECK(up.live == 0);
}

TEST_CASE("memory pool limit: over it Tensor::allocate is resource_exhausted; the cache is "
          "trimmed first",
          "[memory_pool]") {
    CountingAllocator up;
    MemoryPoolOptions o;
    o.limit_bytes = 8 * kMiB;
    auto pool = MemoryPool::create(o, up);
    {
        auto t = Tensor::allocate(DType::f32, Shape{3 * static_cast<std::int64_t>(kMiB) / 4}, *pool);
        REQUIRE(t.is_ok());  // 3 MiB
        auto u = Tensor::allocate(DType::f32, Shape{static_cast<std::int64_t>(kMiB)}, *pool);
        REQUIRE(u.is_ok());  // 4 MiB: 7 MiB reserved
        auto v = Tensor::allocate(DType::f32, Shape{static_cast<std::int64_t>(kMiB) / 2}, *pool);
        REQUIRE_FALSE(v.is_ok());  // 2 MiB more would pass 8 MiB
        CHECK(v.status().code() == ErrorCode::resource_exhausted);
        auto w = pool->allocate_tensor(DType::f32, Shape{static_cast<std::int64_t>(kMiB) / 2});
        REQUIRE_FALSE(w.is_ok());
        CHECK(w.status().code() == ErrorCode::resource_exhausted);
        CHECK(w.status().message().find("limit") != std::string::npos);
        CHECK(pool->stats().failed == 2);
        CHECK(pool->stats().bytes_reserved <= o.limit_bytes);
    }
    // Both blocks are cached now (7 MiB). A 6 MiB request fits only if cached blocks go back.
    if (!pool->pass_through()) CHECK(pool->stats().bytes_cached == 7 * kMiB);
    auto big = Tensor::allocate(DType::u8, Shape{6 * static_cast<std::int64_t>(kMiB)}, *pool);
    REQUIRE(big.is_ok());
    const MemoryPoolStats s = pool->stats();
    CHECK(s.bytes_reserved <= o.limit_bytes);
    CHECK(s.peak_bytes_reserved <= o.limit_bytes);
    CHECK(up.live_bytes.load() == s.bytes_reserved);
    // A request above the limit itself fails without touching anything.
    CHECK(pool->allocate(9 * kMiB, 64) == nullptr);
}

TEST_CASE("memory pool: a block allocated in place of the cache gives back as much first",
          "[memory_pool]") {
    CountingAllocator up;
    MemoryPool pool({}, up);
    for (std::size_t k : {1, 2, 3}) pool.deallocate(pool.allocate(k * kMiB, 64), k * kMiB);
    if (pool.pass_through()) {
        void* p = pool.allocate_replacing_cache(4 * kMiB, 64);
        REQUIRE(p != nullptr);
        CHECK(pool.stats().bytes_reserved == 4 * kMiB);
        pool.deallocate(p, 4 * kMiB);
        return;
    }
    REQUIRE(pool.stats().bytes_cached == 6 * kMiB);
    // A hit takes the cached block and evicts nothing.
    void* hit = pool.allocate_replacing_cache(2 * kMiB, 64);
    CHECK(pool.stats().bytes_cached == 4 * kMiB);
    CHECK(pool.stats().hits == 1);
    pool.deallocate(hit, 2 * kMiB);
    // A 4 MiB miss gives back the largest cached blocks until 4 MiB went: 3 + 2 MiB.
    void* p = pool.allocate_replacing_cache(4 * kMiB, 64);
    REQUIRE(p != nullptr);
    const MemoryPoolStats s = pool.stats();
    CHECK(s.bytes_cached == 1 * kMiB);
    CHECK(s.bytes_reserved == 5 * kMiB);
    CHECK(s.trimmed_bytes == 5 * kMiB);
    CHECK(up.live_bytes.load() == 5 * kMiB);
    pool.deallocate(p, 4 * kMiB);
}

TEST_CASE("memory pool cap on cached bytes sends surplus blocks back", "[memory_pool]") {
    CountingAllocator up;
    MemoryPoolOptions o;
    o.max_cached_bytes = 4 * kMiB;
    MemoryPool pool(o, up);
    void* a = pool.allocate(3 * kMiB, 64);
    void* b = pool.allocate(3 * kMiB, 64);
    pool.deallocate(a, 3 * kMiB);
    pool.deallocate(b, 3 * kMiB);  // would make 6 MiB cached: freed instead
    const MemoryPoolStats s = pool.stats();
    CHECK(s.bytes_cached <= o.max_cached_bytes);
    CHECK(s.bytes_cached == (pool.pass_through() ? 0 : 3 * kMiB));
    CHECK(up.live_bytes.load() == s.bytes_reserved);
}

TEST_CASE("memory pool under 8 threads: blocks are distinct and the counters balance",
          "[memory_pool][threads]") {
    CountingAllocator up;
    MemoryPoolOptions o;
    o.limit_bytes = 256 * kMiB;
    o.max_cached_bytes = 32 * kMiB;
    MemoryPool pool(o, up);
    std::atomic<int> corrupt{0}, failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t) + 1);
            std::uniform_int_distribution<std::size_t> size(1, 200'000);
            std::vector<std::pair<unsigned char*, std::size_t>> live;
            for (int i = 0; i < 2000; ++i) {
                if (live.size() < 8 && (rng() % 3 != 0 || live.empty())) {
                    const std::size_t n = size(rng);
                    auto* p = static_cast<unsigned char*>(pool.allocate(n, 64));
                    if (p == nullptr) {
                        ++failed;
                        continue;
                    }
                    std::memset(p, t + 1, n);
                    live.emplace_back(p, n);
                } else {
                    const std::size_t k = rng() % live.size();
                    auto [p, n] = live[k];
                    // Nobody else wrote into this block while it was ours.
                    if (p[0] != t + 1 || p[n / 2] != t + 1 || p[n - 1] != t + 1) ++corrupt;
                    pool.deallocate(p, n);
                    live[k] = live.back();
                    live.pop_back();
                }
            }
            for (auto [p, n] : live) pool.deallocate(p, n);
        });
    }
    for (auto& th : threads) th.join();
    CHECK(corrupt == 0);
    CHECK(failed == 0);  // 8 threads x 8 blocks x 200 KB stays far below the limit
    const MemoryPoolStats s = pool.stats();
    CHECK(s.bytes_in_use == 0);
    CHECK(s.bytes_reserved == s.bytes_cached);
    CHECK(s.bytes_cached <= o.max_cached_bytes);
    CHECK(s.peak_bytes_reserved <= o.limit_bytes);
    CHECK(up.live_bytes.load() == s.bytes_reserved);
    CHECK(s.hits + s.misses == s.allocations);
    if (!pool.pass_through()) CHECK(s.hits > 0);
    pool.trim();
    CHECK(up.live == 0);
}

TEST_CASE("memory pool pass-through mode sends every call to the upstream and keeps stats",
          "[memory_pool]") {
    CountingAllocator up;
    MemoryPoolOptions o;
    o.pass_through = true;
    o.limit_bytes = 10 * kMiB;
    MemoryPool pool(o, up);
    CHECK(pool.pass_through());
    void* a = pool.allocate(3 * kMiB, 64);
    REQUIRE(a != nullptr);
    pool.deallocate(a, 3 * kMiB);
    CHECK(up.live == 0);  // not cached: back upstream at once
    void* b = pool.allocate(3 * kMiB, 64);
    void* c = pool.allocate(5 * kMiB, 64);
    REQUIRE(b != nullptr);
    REQUIRE(c != nullptr);
    CHECK(up.calls == 3);
    CHECK(up.live_bytes.load() == 8 * kMiB);  // requested sizes, no class rounding
    CHECK(pool.allocate(3 * kMiB, 64) == nullptr);  // the limit still applies
    const MemoryPoolStats s = pool.stats();
    CHECK(s.allocations == 3);
    CHECK(s.misses == 3);
    CHECK(s.hits == 0);
    CHECK(s.failed == 1);
    CHECK(s.bytes_in_use == 8 * kMiB);
    CHECK(s.bytes_reserved == 8 * kMiB);
    CHECK(s.bytes_cached == 0);
    pool.deallocate(b, 3 * kMiB);
    pool.deallocate(c, 5 * kMiB);
    CHECK(up.live == 0);
}

TEST_CASE("tensors from allocate_tensor keep their pool alive", "[memory_pool]") {
    CountingAllocator up;
    auto pool = MemoryPool::create({}, up);
    std::weak_ptr<MemoryPool> weak = pool;
    Tensor t = pool->allocate_tensor(DType::f32, Shape{1000, 300}).value_or_throw();
    Tensor s = pool->allocate_tensor(DType::string, Shape{3}).value_or_throw();
    s.data<std::string>()[1] = std::string(100, 'x');  // heap-allocated string, destroyed later
    for (auto& x : t.span<float>()) x = 1.5f;
    pool.reset();
    CHECK_FALSE(weak.expired());
    CHECK(t.data<float>()[299999] == 1.5f);
    t = Tensor();
    CHECK_FALSE(weak.expired());
    s = Tensor();
    CHECK(weak.expired());  // the last tensor released the pool, which released its cache
    CHECK(up.live == 0);
    MemoryPool on_stack;
    CHECK(on_stack.allocate_tensor(DType::f32, Shape{4}).status().code() == ErrorCode::internal);
}

#ifndef DSINFER_TEST_NO_ENGINE
TEST_CASE("engine outputs keep the caller's pool alive after the engine is gone",
          "[memory_pool][engine]") {
    CountingAllocator up;
    auto pool = MemoryPool::create({}, up);
    std::weak_ptr<MemoryPool> weak = pool;
    const Tensor x = Tensor::from_vector<float>(
        {2, 3, dsinfer::test::kMlpHidden}, dsinfer::test::random_floats(2 * 3 * 32, 7, 1.f));
    std::vector<NamedTensor> out;
    {
        EngineOptions o;
        o.memory_pool = pool;
        auto engine = engine_from(residual_mlp(), o);
        out = engine.run({{"x", x}});
        out = engine.run({{"x", x}});  // planned run: the arena came from the pool too
        CHECK(pool->stats().allocations > 0);
    }
    pool.reset();
    REQUIRE_FALSE(weak.expired());
    const Tensor want = engine_from(residual_mlp()).run({{"x", x}})[0].tensor;
    CHECK(same_bits(out[0].tensor, want));
    out.clear();
    CHECK(weak.expired());
    CHECK(up.live == 0);
}

TEST_CASE("an engine fed 1,000 random input shapes stays within its pool's limit",
          "[memory_pool][engine][acceptance]") {
    CountingAllocator up;
    MemoryPoolOptions o;
    o.limit_bytes = 6 * kMiB;
    o.max_cached_bytes = 3 * kMiB;
    auto pool = MemoryPool::create(o, up);
    EngineOptions eo;
    eo.memory_pool = pool;
    eo.num_threads = 1;
    // Exact: a plan per input shape, recorded by its first run (tensor by tensor). Buckets: a
    // plan per shape bucket, and per shape that comes back, each measured (no recording run).
    const bool buckets = GENERATE(false, true);
    INFO("shape buckets " << buckets);
    eo.shape_buckets = buckets;
    const std::string model = residual_mlp();
    auto engine = engine_from(model, eo);
    EngineOptions plain;
    plain.plan_memory = false;
    plain.num_threads = 1;
    const auto reference = engine_from(model, plain);
    std::mt19937 rng(2024);
    std::uniform_int_distribution<std::int64_t> batch(1, 8), seq(1, 48);
    std::uint64_t max_reserved = 0, max_cached = 0, reserved_first_half = 0;
    int mismatches = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::int64_t b = batch(rng), s = seq(rng);
        const Tensor x = Tensor::from_vector<float>(
            {b, s, dsinfer::test::kMlpHidden},
            dsinfer::test::random_floats(static_cast<std::size_t>(b * s * 32), static_cast<unsigned>(i), 1.f));
        std::vector<NamedTensor> out;
        const Status st = engine.try_run({{"x", x}}, out);
        REQUIRE(st.is_ok());
        if (i % 25 == 0) {
            const auto want = reference.run({{"x", x}});
            for (std::size_t k = 0; k < want.size(); ++k)
                mismatches += same_bits(out[k].tensor, want[k].tensor) ? 0 : 1;
        }
        const MemoryPoolStats ps = pool->stats();
        max_reserved = std::max(max_reserved, ps.bytes_reserved);
        max_cached = std::max(max_cached, ps.bytes_cached);
        if (i == 499) reserved_first_half = ps.peak_bytes_reserved;
    }
    const MemoryPoolStats ps = pool->stats();
    INFO("peak reserved " << ps.peak_bytes_reserved << ", hit rate " << ps.hit_rate()
                          << ", plan classes " << engine.memory_plan_stats().shape_classes);
    CHECK(mismatches == 0);
    CHECK(ps.failed == 0);
    CHECK(ps.peak_bytes_reserved <= o.limit_bytes);
    CHECK(max_reserved <= o.limit_bytes);
    CHECK(max_cached <= o.max_cached_bytes);
    // No growth after the first half: the peak does not move once every size was seen.
    CHECK(ps.peak_bytes_reserved <= reserved_first_half + 2 * kMiB);
    CHECK(ps.bytes_in_use == 0);  // every output was dropped
    CHECK(ps.bytes_reserved == ps.bytes_cached);
    CHECK(up.live_bytes.load() == ps.bytes_reserved);
    CHECK(engine.memory_plan_stats().shape_classes <= detail::CompiledGraph::kMaxPlans);
    // Exact: the recording runs' per-tensor blocks come back from the cache. Buckets: no run
    // records, so a run takes its arena and its two outputs from the pool, plus a block for a
    // workspace that is larger at its length than at the bucket's edge (dsinfer's packed GEMM
    // below AVX-512 sizes its packing buffer by row blocks, not monotonically in the rows).
    if (!pool->pass_through() && !buckets) CHECK(ps.hit_rate() > 0.5);
    INFO("pool allocations " << ps.allocations << " over 1,000 runs");
    if (buckets) CHECK(ps.allocations <= 4 * 1000);
}
#endif  // DSINFER_TEST_NO_ENGINE

#ifndef DSINFER_TEST_NO_ENGINE
TEST_CASE("a run refused by the pool's limit names the limit, and a workspace as a workspace",
          "[memory_pool][engine]") {
    MemoryPoolOptions o;
    o.limit_bytes = 2 * kMiB;
    EngineOptions eo;
    eo.memory_pool = MemoryPool::create(o);
    eo.num_threads = 1;
    SECTION("a node's output") {
        const auto engine = engine_from(residual_mlp(), eo);
        const Tensor x = Tensor::empty(DType::f32, Shape{16, 512, dsinfer::test::kMlpHidden});
        std::vector<NamedTensor> out;
        const Status st = engine.try_run({{"x", x}}, out);
        REQUIRE(st.code() == ErrorCode::resource_exhausted);
        CHECK_THAT(st.message(), Catch::Contains("memory pool limit 2097152 bytes"));
        CHECK_THAT(st.message(), Catch::Contains("for a tensor of shape"));
        CHECK_THAT(st.message(), Catch::Contains("MatMul"));
    }
    SECTION("a kernel's workspace") {
        // Conv 3x3 over 64 channels into 1: a 16 KiB output, a workspace of megabytes (dsinfer's
        // im2col or Winograd transforms).
        onnx::ModelProto m = dsinfer::test::new_model(13, "wide_conv");
        auto& g = *m.mutable_graph();
        *g.add_input() = dsinfer::test::tensor_info("x", 1, {1, 64, 64, 64});
        *g.add_output() = dsinfer::test::tensor_info("y", 1, {1, 1, 64, 64});
        *g.add_initializer() = dsinfer::test::float_tensor(
            "w", {1, 64, 3, 3}, dsinfer::test::random_floats(576, 3, 0.1f));
        auto* conv = dsinfer::test::add_node(g, "Conv", {"x", "w"}, {"y"}, "wide_conv");
        auto* pads = conv->add_attribute();
        pads->set_name("pads");
        pads->set_type(onnx::AttributeProto::INTS);
        for (int i = 0; i < 4; ++i) pads->add_ints(1);
        eo.backends = {"cpu"};
        const auto engine = engine_from(dsinfer::test::bytes_of(m), eo);
        const Tensor x = Tensor::from_vector<float>(
            {1, 64, 64, 64}, dsinfer::test::random_floats(64 * 64 * 64, 4, 1.f));
        std::vector<NamedTensor> out;
        const Status st = engine.try_run({{"x", x}}, out);
        REQUIRE(st.code() == ErrorCode::resource_exhausted);
        CHECK_THAT(st.message(), Catch::Contains("-byte workspace of the kernel"));
        CHECK_THAT(st.message(), Catch::Contains("memory pool limit 2097152 bytes"));
        CHECK_THAT(st.message(), Catch::Contains("wide_conv"));
        CHECK_THAT(st.message(), !Catch::Contains("tensor of shape"));
    }
}
#endif  // DSINFER_TEST_NO_ENGINE
