// The memory planner (src/core/memory_planner.hpp) on its own — random lifetime sets never
// overlap, peak vs lower bound — and in the executor: planned runs are bitwise identical to
// unplanned ones, the second run of a shape class uses the plan (one arena), in-place reuse,
// re-planning on new shapes with a bounded cache, data-dependent sizes, subgraph captures,
// and concurrent runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <thread>

#include "core/executor.hpp"
#include "core/memory_planner.hpp"
#include "memory_models.hpp"

namespace {

using namespace dsinfer;
using dsinfer::detail::ArenaLayout;
using dsinfer::detail::plan_arena;
using dsinfer::detail::PlanItem;
using dsinfer::detail::PlanStrategy;
using dsinfer::test::engine_from;
using dsinfer::test::same_bits;

std::size_t aligned64(std::size_t b) { return (b + 63) / 64 * 64; }

/// Every pair of items live at the same step occupies disjoint bytes; offsets are aligned and
/// the peak is what the offsets say.
void check_layout(const std::vector<PlanItem>& items, const ArenaLayout& a) {
    REQUIRE(a.offsets.size() == items.size());
    std::size_t peak = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
        CHECK(a.offsets[i] % 64 == 0);
        peak = std::max(peak, a.offsets[i] + aligned64(items[i].bytes));
    }
    CHECK(a.peak_bytes == peak);
    int overlaps = 0;
    for (std::size_t i = 0; i < items.size(); ++i)
        for (std::size_t j = i + 1; j < items.size(); ++j) {
            const bool in_time = items[i].first <= items[j].last && items[j].first <= items[i].last;
            const bool in_space = a.offsets[i] < a.offsets[j] + aligned64(items[j].bytes) &&
                                  a.offsets[j] < a.offsets[i] + aligned64(items[i].bytes);
            overlaps += in_time && in_space ? 1 : 0;
        }
    CHECK(overlaps == 0);
    CHECK(a.peak_bytes >= a.lower_bound_bytes);
}

/// Lifetimes like a network's: mostly short (a few steps), some long (residuals), sizes from
/// a handful of activation shapes.
std::vector<PlanItem> random_items(std::mt19937& rng, int n, int steps) {
    std::uniform_int_distribution<int> start(0, steps - 1);
    std::uniform_int_distribution<int> short_len(0, 3), long_len(4, steps / 2);
    const std::size_t shapes[] = {4096, 4096, 16384, 16384, 65536, 1000, 200000};
    std::vector<PlanItem> items;
    for (int i = 0; i < n; ++i) {
        const int f = start(rng);
        const int len = rng() % 5 == 0 ? long_len(rng) : short_len(rng);
        items.push_back({shapes[rng() % 7] + (rng() % 3) * 64, f, std::min(steps - 1, f + len)});
    }
    return items;
}

constexpr std::int64_t kH = dsinfer::test::kMlpHidden;

Tensor mlp_input(std::int64_t b, std::int64_t s, unsigned seed) {
    return Tensor::from_vector<float>(
        {b, s, kH}, dsinfer::test::random_floats(static_cast<std::size_t>(b * s * kH), seed, 1.f));
}

/// `buckets` false: one plan per exact input shape, made by the shape's first (recording)
/// run, as before shape buckets.
EngineOptions options(bool plan, std::shared_ptr<MemoryPool> pool = nullptr, bool buckets = true) {
    EngineOptions o;
    o.plan_memory = plan;
    o.shape_buckets = buckets;
    o.num_threads = 2;
    o.memory_pool = std::move(pool);
    return o;
}

}  // namespace

TEST_CASE("planner: random lifetime sets never overlap; peak near the lower bound",
          "[memory_planner]") {
    std::mt19937 rng(7);
    double worst = 1.0, sum = 0.0;
    const int sets = 200;
    for (int k = 0; k < sets; ++k) {
        const auto items = random_items(rng, 10 + static_cast<int>(rng() % 150), 40 + static_cast<int>(rng() % 100));
        const ArenaLayout best = plan_arena(items);
        check_layout(items, best);
        for (PlanStrategy s : {PlanStrategy::greedy_by_size, PlanStrategy::greedy_by_breadth,
                               PlanStrategy::greedy_by_size_perturbed}) {
            const ArenaLayout a = plan_arena(items, s);
            check_layout(items, a);
            CHECK(best.peak_bytes <= a.peak_bytes);  // best = the better of the two
        }
        std::size_t total = 0;
        for (const auto& it : items) total += aligned64(it.bytes);
        CHECK(best.peak_bytes <= total);
        const double ratio = double(best.peak_bytes) / double(best.lower_bound_bytes);
        worst = std::max(worst, ratio);
        sum += ratio;
    }
    INFO("mean peak / lower bound " << sum / sets << ", worst " << worst);
    CHECK(sum / sets < 1.15);
    CHECK(worst < 1.6);
}

TEST_CASE("planner: a chain reuses memory; the lower bound is the widest step",
          "[memory_planner]") {
    // Each tensor is read by the next step only: two live at a time.
    std::vector<PlanItem> chain;
    for (int i = 0; i < 20; ++i) chain.push_back({1000, i, i + 1});
    const ArenaLayout a = plan_arena(chain);
    check_layout(chain, a);
    CHECK(a.lower_bound_bytes == 2 * 1024);
    CHECK(a.peak_bytes == 2 * 1024);
    // Disjoint lifetimes share one block; one tensor live everywhere adds to every step.
    std::vector<PlanItem> items = {{64, 0, 0}, {128, 1, 1}, {100, 2, 2}, {640, 0, 2}};
    const ArenaLayout b = plan_arena(items);
    check_layout(items, b);
    CHECK(b.lower_bound_bytes == 640 + 128);
    CHECK(b.peak_bytes == 640 + 128);
    CHECK(plan_arena(std::vector<PlanItem>{}).peak_bytes == 0);
}

TEST_CASE("planner: perturbed orders find the interleaving greedy by size misses",
          "[memory_planner]") {
    // The first steps of ResNet-50 at batch 2 (activations, and convolution workspaces of one
    // step each): largest-first puts the workspaces at offset 0 and pushes the 6 MB chain up.
    const std::vector<PlanItem> items = {
        {6422528, 0, 1}, {1605632, 1, 3}, {1605632, 3, 4}, {1605632, 4, 5},
        {6422528, 2, 5}, {6422528, 5, 8}, {1605632, 6, 7}, {1605632, 7, 8},
        {7375872, 0, 0}, {7225344, 4, 4}, {7225344, 7, 7}};
    const ArenaLayout by_size = plan_arena(items, PlanStrategy::greedy_by_size);
    const ArenaLayout best = plan_arena(items);
    check_layout(items, by_size);
    check_layout(items, best);
    CHECK(double(by_size.peak_bytes) / double(by_size.lower_bound_bytes) > 1.2);
    CHECK(best.peak_bytes == best.lower_bound_bytes);
    CHECK(best.strategy == PlanStrategy::greedy_by_size_perturbed);
}

TEST_CASE("planned runs are bitwise identical to unplanned runs (branches, residuals)",
          "[memory_planner][engine]") {
    const std::string model = dsinfer::test::residual_mlp();
    const auto planned = engine_from(model, options(true));
    const auto plain = engine_from(model, options(false));
    for (auto [b, s] : {std::pair<std::int64_t, std::int64_t>{2, 7}, {4, 16}, {1, 1}}) {
        const Tensor x = mlp_input(b, s, static_cast<unsigned>(b * 100 + s));
        const auto want = plain.run({{"x", x}});
        for (int r = 0; r < 3; ++r) {  // run 0 records, runs 1-2 use the plan
            const auto got = planned.run({{"x", x}});
            REQUIRE(got.size() == want.size());
            for (std::size_t k = 0; k < got.size(); ++k) {
                INFO("batch " << b << " seq " << s << " run " << r << " output " << k);
                CHECK(same_bits(got[k].tensor, want[k].tensor));
            }
        }
    }
    CHECK(plain.memory_plan_stats().shape_classes == 0);
    CHECK(plain.memory_plan_stats().planned_peak_bytes == 0);
}

TEST_CASE("the second run of a shape class uses its plan: one arena near the lower bound",
          "[memory_planner][engine]") {
    auto pool = MemoryPool::create();
    const auto engine = engine_from(dsinfer::test::residual_mlp(), options(true, pool, false));
    CHECK(engine.memory_plan_stats().planned_peak_bytes == 0);
    const Tensor x = mlp_input(8, 64, 3);
    auto first = engine.run({{"x", x}});
    const std::uint64_t first_allocs = pool->stats().allocations;
    // The recording run's per-tensor blocks went back to the upstream (the arena replaces
    // them); only the outputs, still held here, remain.
    CHECK(pool->stats().bytes_cached == 0);
    std::size_t output_bytes = 0;
    for (const auto& o : first) output_bytes += o.tensor.num_bytes();
    CHECK(pool->stats().bytes_in_use == output_bytes);
    const MemoryPlanStats s = engine.memory_plan_stats();
    INFO("planned " << s.planned_peak_bytes << " lower bound " << s.lower_bound_bytes
                    << " values " << s.planned_values);
    CHECK(s.shape_classes == 1);
    CHECK(s.planned_values >= 3);
    CHECK(s.lower_bound_bytes > 0);
    CHECK(s.planned_peak_bytes >= s.lower_bound_bytes);
    CHECK(s.ratio() <= 1.1);
    auto second = engine.run({{"x", x}});
    const std::uint64_t second_allocs = pool->stats().allocations - first_allocs;
    // The planned run allocates the arena and the two outputs, nothing per intermediate.
    CHECK(second_allocs == 3);
    CHECK(first_allocs > second_allocs);
    for (std::size_t k = 0; k < first.size(); ++k) CHECK(same_bits(first[k].tensor, second[k].tensor));
    // The arena went back to the pool after the run, and so do the outputs once dropped: the
    // next run takes all three from the cache.
    first.clear();
    second.clear();
    const MemoryPoolStats before = pool->stats();
    (void)engine.run({{"x", x}});
    if (!pool->pass_through()) {
        CHECK(pool->stats().hits - before.hits == 3);
        CHECK(pool->stats().misses == before.misses);
    }
}

TEST_CASE("elementwise outputs reuse the block of an input that dies (in place)",
          "[memory_planner][engine]") {
    const std::string model = dsinfer::test::elementwise_chain();
    const auto plain = engine_from(model, options(false));
    const Tensor x = Tensor::from_vector<float>({3, 1000}, dsinfer::test::random_floats(3000, 5, 3.f));
    const auto want = plain.run({{"x", x}});
    // Exact: planned by the recording run at batch 3; bucketed: measured at batch 4.
    for (const bool buckets : {false, true}) {
        const auto planned = engine_from(model, options(true, nullptr, buckets));
        (void)planned.run({{"x", x}});
        const MemoryPlanStats s = planned.memory_plan_stats();
        // Relu -> Sigmoid -> Tanh -> Neg: four intermediates of one size, one block in place.
        INFO("buckets " << buckets);
        CHECK(s.planned_values == 4);
        CHECK(s.planned_peak_bytes == aligned64((buckets ? 4 : 3) * 1000 * 4));
        CHECK(s.lower_bound_bytes == s.planned_peak_bytes);
        for (int r = 0; r < 2; ++r) CHECK(same_bits(planned.run({{"x", x}})[0].tensor, want[0].tensor));
    }
}

TEST_CASE("new input shapes re-plan; the plan cache is bounded", "[memory_planner][engine]") {
    const std::string model = dsinfer::test::residual_mlp();
    const auto planned = engine_from(model, options(true, nullptr, false));
    const auto plain = engine_from(model, options(false));
    std::uint64_t previous_peak = 0;
    for (std::int64_t s = 1; s <= 12; ++s) {
        const Tensor x = mlp_input(2, s * 4, static_cast<unsigned>(s));
        (void)planned.run({{"x", x}});
        const MemoryPlanStats st = planned.memory_plan_stats();
        CHECK(st.shape_classes ==
              std::min<std::size_t>(static_cast<std::size_t>(s), detail::CompiledGraph::kMaxPlans));
        CHECK(st.plans_recorded == static_cast<std::uint64_t>(s));
        CHECK(st.planned_peak_bytes > previous_peak);  // longer sequences, larger plans
        previous_peak = st.planned_peak_bytes;
        const auto got = planned.run({{"x", x}});
        const auto want = plain.run({{"x", x}});
        CHECK(same_bits(got[0].tensor, want[0].tensor));
    }
    // The first classes were evicted: running one again records and plans it anew.
    for (std::int64_t s = 13; s <= static_cast<std::int64_t>(detail::CompiledGraph::kMaxPlans) + 1; ++s)
        (void)planned.run({{"x", mlp_input(2, s * 4, static_cast<unsigned>(s))}});
    const std::uint64_t recorded = planned.memory_plan_stats().plans_recorded;
    const Tensor x = mlp_input(2, 4, 1);
    const auto again = planned.run({{"x", x}});
    CHECK(planned.memory_plan_stats().shape_classes == detail::CompiledGraph::kMaxPlans);
    CHECK(planned.memory_plan_stats().plans_recorded == recorded + 1);
    CHECK(same_bits(again[0].tensor, plain.run({{"x", x}})[0].tensor));
}

TEST_CASE("data-dependent sizes larger than planned fall back to their own blocks",
          "[memory_planner][engine]") {
    const auto engine = engine_from(dsinfer::test::nonzero_model(), options(true));
    auto run = [&](const std::vector<float>& v) {
        const Tensor x = Tensor::from_vector<float>({static_cast<std::int64_t>(v.size())}, v);
        return engine.run({{"x", x}})[0].tensor;
    };
    auto check = [](const Tensor& y, const std::vector<float>& v) {
        std::vector<float> want;
        for (std::size_t i = 0; i < v.size(); ++i)
            if (v[i] != 0.f) want.push_back(2.f * static_cast<float>(i) + 1.f);
        REQUIRE(y.shape() == Shape{1, static_cast<std::int64_t>(want.size())});
        for (std::size_t i = 0; i < want.size(); ++i) CHECK(y.data<float>()[i] == want[i]);
    };
    // Same input shape (one class), different numbers of non-zeros.
    const std::vector<std::vector<float>> data = {
        {0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3},          // 3: recorded
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},          // 16: larger than planned
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5},          // 1: fits in the plan
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},          // none
        {7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0}};         // 8
    for (int round = 0; round < 2; ++round)
        for (const auto& v : data) check(run(v), v);
    CHECK(engine.memory_plan_stats().shape_classes == 1);
    CHECK(engine.memory_plan_stats().planned_values > 0);
}

TEST_CASE("values read by subgraphs stay out of the arena (a branch returns one)",
          "[memory_planner][engine][control_flow]") {
    // r = Relu(x); o = If(c) then r (the captured value itself) else Neg(r); y = (o + 1) * 2.
    onnx::ModelProto m = dsinfer::test::new_model(13, "if_capture");
    auto& g = *m.mutable_graph();
    *g.add_input() = dsinfer::test::sym_info("x", 1, {-1, 4});
    *g.add_input() = dsinfer::test::tensor_info("c", 9, {});
    *g.add_output() = dsinfer::test::sym_info("y", 1, {-1, 4});
    *g.add_initializer() = dsinfer::test::float_tensor("one", {}, {1.f});
    *g.add_initializer() = dsinfer::test::float_tensor("two", {}, {2.f});
    dsinfer::test::add_node(g, "Relu", {"x"}, {"r"});
    onnx::GraphProto then_g, else_g;
    then_g.set_name("then");
    *then_g.add_output() = dsinfer::test::sym_info("r", 1, {-1, 4});
    else_g.set_name("else");
    dsinfer::test::add_node(else_g, "Neg", {"r"}, {"nr"});
    *else_g.add_output() = dsinfer::test::sym_info("nr", 1, {-1, 4});
    auto* n = dsinfer::test::add_node(g, "If", {"c"}, {"o"});
    dsinfer::test::set_graph_attr(n, "then_branch", then_g);
    dsinfer::test::set_graph_attr(n, "else_branch", else_g);
    dsinfer::test::add_node(g, "Add", {"o", "one"}, {"p"});
    dsinfer::test::add_node(g, "Mul", {"p", "two"}, {"y"});
    const auto engine = engine_from(dsinfer::test::bytes_of(m), options(true));
    const Tensor x = Tensor::from_vector<float>({2, 4}, {-1, 2, -3, 4, 5, -6, 7, -8});
    for (int r = 0; r < 3; ++r)
        for (bool c : {true, false}) {
            const Tensor y = engine.run({{"x", x}, {"c", Tensor::scalar<bool>(c)}})[0].tensor;
            for (std::int64_t i = 0; i < 8; ++i) {
                const float relu = std::max(0.f, x.data<float>()[i]);
                const float want = ((c ? relu : -relu) + 1.f) * 2.f;
                INFO("run " << r << " cond " << c << " element " << i);
                CHECK(y.data<float>()[i] == want);
            }
        }
}

TEST_CASE("concurrent planned runs on one engine are correct", "[memory_planner][engine][threads]") {
    const std::string model = dsinfer::test::residual_mlp();
    const bool buckets = GENERATE(false, true);
    INFO("shape buckets " << buckets);
    const auto planned = engine_from(model, options(true, nullptr, buckets));
    const auto plain = engine_from(model, options(false));
    const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 5}, {3, 9}, {2, 33}};
    std::vector<Tensor> inputs, want;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
        inputs.push_back(mlp_input(shapes[k].first, shapes[k].second, static_cast<unsigned>(k + 40)));
        want.push_back(plain.run({{"x", inputs.back()}})[0].tensor);
    }
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int r = 0; r < 12; ++r) {
                const std::size_t k = static_cast<std::size_t>(t + r) % inputs.size();
                const Tensor y = planned.run({{"x", inputs[k]}})[0].tensor;
                if (!same_bits(y, want[k])) ++wrong;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(wrong == 0);
    // Exact: one plan per shape. Buckets: one per bucket (all three shapes lie inside theirs:
    // 1x8, 4x16, 2x64) and, each shape coming back, one of its own.
    CHECK(planned.memory_plan_stats().shape_classes == (buckets ? 2 : 1) * shapes.size());
    CHECK(planned.memory_plan_stats().plans_recorded == (buckets ? 2 : 1) * shapes.size());
}

// ---- shape buckets (EngineOptions::shape_buckets) -------------------------------------------

TEST_CASE("shape buckets: a growing sequence plans once per bucket, sized at its edge",
          "[memory_planner][engine][buckets]") {
    const std::string model = dsinfer::test::residual_mlp();
    auto pool = MemoryPool::create();
    const auto bucketed = engine_from(model, options(true, pool));
    const auto plain = engine_from(model, options(false));
    // Every length 1..40 once, as a decode loop sees them, then again (the prepare results of
    // the last 16 lengths are kept).
    for (int round = 0; round < 2; ++round)
        for (std::int64_t s = 1; s <= 40; ++s) {
            const Tensor x = mlp_input(2, s, static_cast<unsigned>(s + 1000 * round));
            const auto got = bucketed.run({{"x", x}});
            const auto want = plain.run({{"x", x}});
            REQUIRE(got.size() == want.size());
            for (std::size_t k = 0; k < got.size(); ++k) {
                INFO("round " << round << " seq " << s << " output " << k);
                CHECK(same_bits(got[k].tensor, want[k].tensor));
            }
        }
    // Buckets 1, 2, 4, 8, 16, 32, 64: one plan each, none re-recorded in the second round.
    const MemoryPlanStats st = bucketed.memory_plan_stats();
    CHECK(st.plans_recorded == 7);
    CHECK(st.shape_classes == 7);
    CHECK(st.prepared_shapes == detail::CompiledGraph::kMaxPreparedShapes);
    // Bucket 64's plan (the most recent) is the plan an exact run at 64 records.
    const auto exact = engine_from(model, options(true, nullptr, false));
    (void)exact.run({{"x", mlp_input(2, 64, 7)}});
    CHECK(st.planned_peak_bytes == exact.memory_plan_stats().planned_peak_bytes);
    CHECK(st.planned_values == exact.memory_plan_stats().planned_values);
    CHECK(st.cached_arena_bytes >= st.planned_peak_bytes);
    // A bucket's arena is c + l b at edge b (c: workspaces that do not grow with the rows): over
    // b = 1, 2, ..., 64 the arenas together stay under twice the largest plus 7 times bucket 1's.
    const auto one = engine_from(model, options(true));
    (void)one.run({{"x", mlp_input(2, 1, 1)}});
    const std::uint64_t smallest = one.memory_plan_stats().planned_peak_bytes;
    INFO("cached " << st.cached_arena_bytes << " largest " << st.planned_peak_bytes << " smallest " << smallest);
    CHECK(st.cached_arena_bytes <= 2 * st.planned_peak_bytes + 7 * smallest);
}

TEST_CASE("shape buckets: a new length in a known bucket allocates only its arena and outputs; "
          "a length that comes back gets a plan of its own",
          "[memory_planner][engine][buckets]") {
    auto pool = MemoryPool::create();
    const auto engine = engine_from(dsinfer::test::residual_mlp(), options(true, pool));
    (void)engine.run({{"x", mlp_input(2, 20, 1)}});  // bucket 32: measured at its edge
    CHECK(engine.memory_plan_stats().plans_recorded == 1);
    const std::uint64_t bucket_bytes = engine.memory_plan_stats().planned_peak_bytes;
    for (std::int64_t s : {21, 30, 32, 17}) {
        const std::uint64_t before = pool->stats().allocations;
        const auto out = engine.run({{"x", mlp_input(2, s, static_cast<unsigned>(s))}});
        INFO("seq " << s);
        // The arena and the two outputs: every intermediate fits the bucket's plan.
        CHECK(pool->stats().allocations - before == 3);
    }
    CHECK(engine.memory_plan_stats().plans_recorded == 1);
    CHECK(engine.memory_plan_stats().prepared_shapes == 5);  // 20, 21, 30, 32, 17
    // 30 comes back: its own plan, measured at its dims (smaller than the bucket's), then used.
    for (int r = 0; r < 3; ++r) {
        const std::uint64_t before = pool->stats().allocations;
        (void)engine.run({{"x", mlp_input(2, 30, 30)}});
        CHECK(pool->stats().allocations - before == 3);
    }
    const MemoryPlanStats st = engine.memory_plan_stats();
    CHECK(st.plans_recorded == 2);
    CHECK(st.planned_peak_bytes < bucket_bytes);
}

TEST_CASE("shape buckets: user-given edges, then powers of two; bad edges fail the load",
          "[memory_planner][engine][buckets]") {
    const std::string model = dsinfer::test::residual_mlp();
    EngineOptions o = options(true);
    o.shape_bucket_edges = {10, 20};
    const auto engine = engine_from(model, o);
    const auto plain = engine_from(model, options(false));
    for (std::int64_t s = 1; s <= 25; ++s) {
        const Tensor x = mlp_input(1, s, static_cast<unsigned>(s));
        CHECK(same_bits(engine.run({{"x", x}})[0].tensor, plain.run({{"x", x}})[0].tensor));
    }
    // batch 1 x seq: 1..10 -> 10, 11..20 -> 20, 21..25 -> 32.
    CHECK(engine.memory_plan_stats().plans_recorded == 3);
    for (const std::vector<std::int64_t>& bad :
         {std::vector<std::int64_t>{8, 8}, {0, 4}, {16, 4}, {-2}}) {
        EngineOptions b = options(true);
        b.shape_bucket_edges = bad;
        try {
            (void)engine_from(model, b);
            FAIL("shape_bucket_edges accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_argument);
            CHECK(std::string(e.what()).find("shape_bucket_edges") != std::string::npos);
        }
    }
}

TEST_CASE("shape buckets: a graph whose sizes need run-time data plans per exact shape",
          "[memory_planner][engine][buckets]") {
    // NonZero's output size depends on the data: no bucket plan can be measured.
    const auto engine = engine_from(dsinfer::test::nonzero_model(), options(true));
    for (std::int64_t n : {16, 17, 16}) {
        std::vector<float> v(static_cast<std::size_t>(n), 0.f);
        v[3] = 1.f;
        const Tensor x = Tensor::from_vector<float>({n}, v);
        const Tensor y = engine.run({{"x", x}})[0].tensor;
        REQUIRE(y.shape() == Shape{1, 1});
        CHECK(y.data<float>()[0] == 7.f);
    }
    CHECK(engine.memory_plan_stats().plans_recorded == 2);  // 16 and 17, exact
}
