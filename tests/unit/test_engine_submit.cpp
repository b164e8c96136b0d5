// serving::BatchingEngine::submit() (dsinfer/serving.hpp) over an InferenceEngine: requests
// batched along dim 0 give the outputs they give alone (group mode, and pad mode with an
// attention mask); a bad request fails alone; shape errors
// are answered at submit; deadlines, cancellation, back-pressure and shutdown reach the
// caller; metrics count every outcome; and an engine-level storm loses, duplicates and
// misroutes nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <future>
#include <latch>
#include <mutex>
#include <random>
#include <thread>

#include "dsinfer/serving.hpp"
#include "memory_models.hpp"
#include "test_env.hpp"

namespace {

using namespace dsinfer;
using dsinfer::test::engine_from;
using dsinfer::test::env_int;
using dsinfer::test::new_model;
using dsinfer::test::random_floats;
using dsinfer::test::sym_info;
using namespace std::chrono_literals;
using serving::BatchingOptions;
using serving::BatchingState;
using serving::RequestOptions;


void int_attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

/// ids[batch, 4] int64 -> Gather(E[10, 8]) -> y[batch, 4, 8]: an index out of [-10, 10) is a
/// data-dependent error (invalid_argument) that only the run finds.
std::string embedding_model() {
    onnx::ModelProto m = new_model(13, "embedding");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("ids", 7, {-1, 4});
    *g.add_output() = sym_info("y", 1, {-1, 4, 8});
    *g.add_initializer() = test::float_tensor("E", {10, 8}, random_floats(80, 3, 1.f));
    test::add_node(g, "Gather", {"E", "ids"}, {"y"});
    return test::bytes_of(m);
}

/// Masked self-attention over embeddings: ids, attention_mask [batch, seq] -> y[batch, seq, 8].
/// Padding positions (mask 0) get a -10000 score bias, so they do not change real positions.
std::string masked_attention_model() {
    onnx::ModelProto m = new_model(13, "masked_attention");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("ids", 7, {-1, -2});
    *g.add_input() = sym_info("attention_mask", 7, {-1, -2});
    *g.add_output() = sym_info("y", 1, {-1, -2, 8});
    *g.add_initializer() = test::float_tensor("E", {20, 8}, random_floats(160, 5, 0.5f));
    *g.add_initializer() = test::float_tensor("one", {}, {1.f});
    *g.add_initializer() = test::float_tensor("big", {}, {10000.f});
    *g.add_initializer() = test::i64_tensor("axis1", {1}, {1});
    test::add_node(g, "Gather", {"E", "ids"}, {"x"});
    auto* tr = test::add_node(g, "Transpose", {"x"}, {"xt"});
    auto* perm = tr->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    for (int p : {0, 2, 1}) perm->add_ints(p);
    test::add_node(g, "MatMul", {"x", "xt"}, {"scores"});
    int_attr(test::add_node(g, "Cast", {"attention_mask"}, {"mf"}), "to", 1);
    test::add_node(g, "Sub", {"mf", "one"}, {"m1"});
    test::add_node(g, "Mul", {"m1", "big"}, {"mb"});
    test::add_node(g, "Unsqueeze", {"mb", "axis1"}, {"mu"});
    test::add_node(g, "Add", {"scores", "mu"}, {"biased"});
    int_attr(test::add_node(g, "Softmax", {"biased"}, {"p"}), "axis", -1);
    test::add_node(g, "MatMul", {"p", "x"}, {"y"});
    return test::bytes_of(m);
}

/// x[batch, 4] -> y = 2x + 1 (exact in float for the small integers the storm sends).
std::string affine_model() {
    onnx::ModelProto m = new_model(13, "affine");
    auto& g = *m.mutable_graph();
    *g.add_input() = sym_info("x", 1, {-1, 4});
    *g.add_output() = sym_info("y", 1, {-1, 4});
    *g.add_initializer() = test::float_tensor("two", {}, {2.f});
    *g.add_initializer() = test::float_tensor("one", {}, {1.f});
    test::add_node(g, "Mul", {"x", "two"}, {"t"});
    test::add_node(g, "Add", {"t", "one"}, {"y"});
    return test::bytes_of(m);
}

Tensor floats(std::vector<std::int64_t> dims, unsigned seed) {
    Tensor t = Tensor::empty(DType::f32, Shape::make(dims).value());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (auto& v : t.span<float>()) v = d(rng);
    return t;
}

Tensor int64s(std::vector<std::int64_t> dims, std::vector<std::int64_t> values) {
    Tensor t = Tensor::empty(DType::i64, Shape::make(dims).value());
    std::copy(values.begin(), values.end(), t.data<std::int64_t>());
    return t;
}

/// |a - b| <= 1e-5 * max(1, |b|) element-wise, same shape: the bound submit() promises
/// between a request run in a batch and alone (docs/BATCHING.md).
bool close(const Tensor& a, const Tensor& b) {
    if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return false;
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    for (std::int64_t i = 0; i < a.num_elements(); ++i)
        if (!(std::abs(x[i] - y[i]) <= 1e-5f * std::max(1.f, std::abs(y[i])))) return false;
    return true;
}

ErrorCode code_of(std::future<InferenceEngine::Outputs>& f) {
    try {
        (void)f.get();
        return ErrorCode::ok;
    } catch (const Error& e) {
        return e.code();
    }
}

/// An engine's options and the batching options of the BatchingEngine that serves it.
struct ServeOptions {
    EngineOptions engine;
    BatchingOptions batching;
};

ServeOptions batching(std::size_t max_batch, std::chrono::microseconds delay) {
    ServeOptions o;
    o.engine.num_threads = 1;
    o.batching.max_batch_size = max_batch;
    o.batching.max_queue_delay = delay;
    return o;
}

/// The model compiled with o.engine, served with o.batching.
serving::BatchingEngine engine_from(const std::string& bytes, const ServeOptions& o) {
    return serving::BatchingEngine(
        std::make_shared<const InferenceEngine>(test::engine_from(bytes, o.engine)), o.batching);
}

}  // namespace

TEST_CASE("submit: batched requests give their alone outputs and really batch", "[submit]") {
    const serving::BatchingEngine e =
        engine_from(test::residual_mlp(), batching(8, std::chrono::microseconds(200'000)));
    CHECK_THAT(e.batching_info(), Catch::Contains("batch dim 'batch'"));
    // 3 sequence lengths x 4 requests of 1-2 rows; the 8-row cap fills batches at once.
    std::vector<std::vector<NamedTensor>> requests;
    for (int i = 0; i < 12; ++i)
        requests.push_back({{"x", floats({1 + i % 2, 3 + 2 * (i % 3), test::kMlpHidden},
                                         static_cast<unsigned>(100 + i))}});
    std::vector<std::future<InferenceEngine::Outputs>> futures;
    for (const auto& r : requests) futures.push_back(e.submit(r));
    (void)e.shutdown(10s);  // dispatches the partial batches too
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO("request " << i);
        const auto got = futures[i].get();
        const auto want = e.run(requests[i]);
        REQUIRE(got.size() == want.size());
        for (std::size_t o = 0; o < got.size(); ++o) {
            CHECK(got[o].name == want[o].name);
            CHECK(close(got[o].tensor, want[o].tensor));
        }
    }
    const MetricsSnapshot m = e.metrics();
    // 12 submitted; the 12 run() calls are counted apart.
    CHECK(m.requests.ok == 12);
    CHECK(e.run_metrics().requests.ok == 12);
    CHECK(e.run_metrics().batches() == 0);
    CHECK(m.batches() >= 3);          // one shape class per sequence length at least
    CHECK(m.batches() < 12);          // but not one batch per request
    CHECK(m.mean_batch_size() > 1.0);
}

TEST_CASE("submit: a request whose run fails does not fail its batch mates", "[submit]") {
    const serving::BatchingEngine e = engine_from(embedding_model(), batching(4, 10s));
    std::vector<std::future<InferenceEngine::Outputs>> f;
    for (int i = 0; i < 4; ++i) {
        const std::int64_t bad = i == 2 ? 10 : 0;  // index 10 of 10 rows: out of range
        f.push_back(e.submit({{"ids", int64s({1, 4}, {i, 1 + bad, 9, -1})}}));
    }
    for (int i = 0; i < 4; ++i) {
        INFO("request " << i);
        if (i == 2) {
            try {
                (void)f[2].get();
                FAIL("an out-of-range index was accepted");
            } catch (const Error& err) {
                CHECK(err.code() == ErrorCode::invalid_argument);
                CHECK_THAT(err.message(), Catch::Contains("Gather"));
            }
        } else {
            const auto got = f[static_cast<std::size_t>(i)].get();
            const auto want = e.run({{"ids", int64s({1, 4}, {i, 1, 9, -1})}});
            CHECK(close(got[0].tensor, want[0].tensor));
        }
    }
    const MetricsSnapshot m = e.metrics();
    CHECK(m.batches() == 1);  // the 4 filled one batch; the retries alone are not batches
    CHECK(m.requests.failed == 1);
}

TEST_CASE("submit: input errors are answered at submit, before any batching", "[submit]") {
    const serving::BatchingEngine e = engine_from(test::residual_mlp(), batching(8, 10s));
    auto wrong_dim = e.submit({{"x", floats({1, 3, 31}, 1)}});
    REQUIRE(wrong_dim.wait_for(0s) == std::future_status::ready);
    try {
        (void)wrong_dim.get();
        FAIL("wrong dim accepted");
    } catch (const Error& err) {
        CHECK(err.code() == ErrorCode::invalid_argument);
        CHECK_THAT(err.message(), Catch::Contains("input 'x'"));
    }
    auto wrong_name = e.submit({{"z", floats({1, 3, 32}, 1)}});
    REQUIRE(wrong_name.wait_for(0s) == std::future_status::ready);
    CHECK(code_of(wrong_name) == ErrorCode::invalid_argument);
    // The callback form answers before submit returns.
    bool called = false;
    e.submit({{"x", floats({2}, 1)}}, [&](StatusOr<InferenceEngine::Outputs> r) {
        called = true;
        CHECK(r.status().code() == ErrorCode::invalid_argument);
    });
    CHECK(called);
    auto bad_priority = e.submit({{"x", floats({1, 3, 32}, 1)}}, RequestOptions{.priority = 7});
    CHECK(code_of(bad_priority) == ErrorCode::invalid_argument);
}

TEST_CASE("submit: pad mode batches different lengths and cuts outputs back", "[submit]") {
    ServeOptions o = batching(4, 10s);
    o.batching.ragged = BatchingOptions::Ragged::pad;
    const serving::BatchingEngine e = engine_from(masked_attention_model(), o);
    CHECK_THAT(e.batching_info(), Catch::Contains("sequence dim 'seq' padded"));
    std::vector<std::vector<NamedTensor>> requests;
    for (std::int64_t len : {3, 8, 5, 1}) {
        std::vector<std::int64_t> ids, mask;
        for (std::int64_t t = 0; t < len; ++t) {
            ids.push_back((len * 7 + t * 3) % 20);
            mask.push_back(1);
        }
        requests.push_back({{"ids", int64s({1, len}, ids)},
                            {"attention_mask", int64s({1, len}, mask)}});
    }
    std::vector<std::future<InferenceEngine::Outputs>> f;
    for (const auto& r : requests) f.push_back(e.submit(r));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto got = f[i].get();
        const auto want = e.run(requests[i]);
        INFO("request " << i << ": " << got[0].tensor.shape() << " vs " << want[0].tensor.shape());
        CHECK(close(got[0].tensor, want[0].tensor));
    }
    CHECK(e.metrics().batches() == 1);  // all four lengths in one padded batch

    // Group mode never mixes lengths.
    const serving::BatchingEngine g = engine_from(masked_attention_model(), batching(4, 10s));
    std::vector<std::future<InferenceEngine::Outputs>> fg;
    for (const auto& r : requests) fg.push_back(g.submit(r));
    (void)g.shutdown(10s);
    for (std::size_t i = 0; i < requests.size(); ++i)
        CHECK(close(fg[i].get()[0].tensor, g.run(requests[i])[0].tensor));
    CHECK(g.metrics().batches() == 4);
}

TEST_CASE("submit: pad mode needs a mask input; without one it groups", "[submit]") {
    ServeOptions o = batching(4, 1000us);
    o.batching.ragged = BatchingOptions::Ragged::pad;
    const serving::BatchingEngine e = engine_from(test::residual_mlp(), o);
    CHECK_THAT(e.batching_info(), Catch::Contains("padding is off"));
    CHECK_THAT(e.batching_info(), Catch::Contains("attention_mask"));
    auto f = e.submit({{"x", floats({1, 2, test::kMlpHidden}, 4)}});
    CHECK(f.get().size() == 2);
}

TEST_CASE("submit: a model without a named batch dim runs each request alone", "[submit]") {
    const serving::BatchingEngine e = engine_from(test::bytes_of(test::relu_model()), batching(8, 1000us));
    CHECK_THAT(e.batching_info(), Catch::Contains("requests run alone"));
    Tensor x = Tensor::from_vector<float>({1, 4}, {-1.f, 2.f, -3.f, 4.f});
    std::vector<std::future<InferenceEngine::Outputs>> f;
    for (int i = 0; i < 5; ++i) f.push_back(e.submit({{"x", x}}));
    for (auto& fut : f) {
        const auto out = fut.get();
        CHECK(out[0].tensor.data<float>()[0] == 0.f);
        CHECK(out[0].tensor.data<float>()[3] == 4.f);
    }
    CHECK(e.metrics().batch_requests.max == 1);
}

TEST_CASE("submit: cancellation, deadlines, back-pressure and shutdown reach the caller",
          "[submit]") {
    ServeOptions o = batching(64, 10s);  // nothing dispatches on its own for 10 s
    o.batching.max_queue_size = 3;
    const serving::BatchingEngine e = engine_from(affine_model(), o);
    Tensor x = Tensor::from_vector<float>({1, 4}, {1.f, 2.f, 3.f, 4.f});
    RequestOptions cancellable;
    auto cancelled = e.submit({{"x", x}}, cancellable);
    auto expiring = e.submit({{"x", x}}, RequestOptions{.deadline = std::chrono::steady_clock::now() + 50ms});
    auto kept = e.submit({{"x", x}});
    const BatchingState state = e.batching_state();
    CHECK(state.queued == 3);
    CHECK(state.max_batch_size == 64);
    CHECK(state.max_queue_delay == std::chrono::microseconds(10'000'000));
    auto overflow = e.submit({{"x", x}});  // 3 queued: answered at once
    REQUIRE(overflow.wait_for(0s) == std::future_status::ready);
    CHECK(code_of(overflow) == ErrorCode::unavailable);
    cancellable.cancel.cancel();
    REQUIRE(cancelled.wait_for(5s) == std::future_status::ready);
    CHECK(code_of(cancelled) == ErrorCode::cancelled);
    REQUIRE(expiring.wait_for(5s) == std::future_status::ready);
    CHECK(code_of(expiring) == ErrorCode::deadline_exceeded);
    CHECK(e.shutdown(10s));  // drains `kept`
    const auto out = kept.get();
    CHECK(out[0].tensor.data<float>()[3] == 9.f);
    auto late = e.submit({{"x", x}});
    CHECK(code_of(late) == ErrorCode::unavailable);
    const MetricsSnapshot m = e.metrics();
    CHECK(m.requests.ok == 1);
    CHECK(m.requests.cancelled == 1);
    CHECK(m.requests.timed_out == 1);
    CHECK(m.requests.rejected == 2);
    const std::string prom = to_prometheus(m);
    CHECK_THAT(prom, Catch::Contains("dsinfer_requests"));
    CHECK_THAT(to_json(m), Catch::Contains("\"latency_ms\""));
}

TEST_CASE("submit: BatchingOptions are checked when the BatchingEngine is created", "[submit]") {
    ServeOptions o;
    o.batching.max_batch_size = 0;
    CHECK_THROWS_WITH(engine_from(affine_model(), o), Catch::Contains("max_batch_size"));
    ServeOptions a;
    a.batching.adaptive = true;
    CHECK_THROWS_WITH(engine_from(affine_model(), a), Catch::Contains("p99_target_ms"));
}

TEST_CASE("submit storm: every request answered once, with its own outputs", "[submit][storm]") {
    // DSINFER_STORM_THREADS x DSINFER_STORM_REQUESTS (64 x 10,000 by default; the TSan run
    // uses 16 x 2,000). ~5% cancelled, ~2% short deadlines, a queue small enough to reject.
    const int threads = env_int("DSINFER_STORM_THREADS", 64);
    const int per_thread = env_int("DSINFER_STORM_REQUESTS", 10000);
    // Each submitter keeps at most kWindow requests in flight: 64 x 32 = 2,048 against a
    // queue of 1,536, so the queue overflows when most submitters wait on it at once.
    constexpr int kWindow = 32;
    ServeOptions o = batching(16, 300us);
    o.batching.max_queue_size = static_cast<std::size_t>(threads) * kWindow * 3 / 4;
    o.batching.num_workers = 2;
    const serving::BatchingEngine e = engine_from(affine_model(), o);

    std::atomic<std::int64_t> ok{0}, cancelled{0}, expired{0}, rejected{0}, wrong{0}, other{0};
    std::atomic<std::int64_t> answers{0};
    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(threads) *
                                       static_cast<std::size_t>(per_thread));
    auto check = [&](std::int64_t id, std::int64_t rows, const StatusOr<InferenceEngine::Outputs>& r) {
        seen[static_cast<std::size_t>(id)].fetch_add(1);
        answers.fetch_add(1);
        if (!r.is_ok()) {
            switch (r.status().code()) {
                case ErrorCode::cancelled: ++cancelled; break;
                case ErrorCode::deadline_exceeded: ++expired; break;
                case ErrorCode::unavailable: ++rejected; break;
                default: ++other; break;
            }
            return;
        }
        // y = 2x + 1 of this request's own x: x encodes the id and the element.
        const Tensor& y = r.value().at(0).tensor;
        bool good = y.shape()[0] == rows && y.shape()[1] == 4;
        for (std::int64_t k = 0; good && k < rows * 4; ++k)
            good = y.data<float>()[k] ==
                   2.f * static_cast<float>((id % 100000) * 8 + k % 8) + 1.f;
        if (good) ++ok;
        else ++wrong;
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            std::vector<std::pair<std::future<InferenceEngine::Outputs>, std::pair<std::int64_t, std::int64_t>>> futures;
            std::atomic<int> callbacks_pending{0};
            auto drain = [&] {
                for (auto& [f, idr] : futures) {
                    try {
                        check(idr.first, idr.second, f.get());
                    } catch (const Error& err) {
                        check(idr.first, idr.second, Status(err.code(), err.message()));
                    }
                }
                futures.clear();
                while (callbacks_pending.load() > 0) std::this_thread::sleep_for(50us);
            };
            for (int i = 0; i < per_thread; ++i) {
                if (i % kWindow == 0) drain();
                const std::int64_t id = static_cast<std::int64_t>(t) * per_thread + i;
                const std::int64_t rows = 1 + static_cast<std::int64_t>(rng() % 2);
                Tensor x = Tensor::empty(DType::f32, Shape::make({rows, 4}).value());
                for (std::int64_t k = 0; k < rows * 4; ++k)
                    x.data<float>()[k] = static_cast<float>((id % 100000) * 8 + k % 8);
                RequestOptions ro;
                const unsigned dice = rng() % 100;
                if (dice < 2) ro.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 500);
                if (i % 2 == 0) {
                    auto f = e.submit({{"x", x}}, ro);
                    if (dice >= 2 && dice < 7) ro.cancel.cancel();
                    futures.emplace_back(std::move(f), std::make_pair(id, rows));
                } else {
                    RequestOptions ro2 = ro;
                    ++callbacks_pending;
                    e.submit({{"x", x}},
                             [&, id, rows](StatusOr<InferenceEngine::Outputs> r) {
                                 check(id, rows, r);
                                 --callbacks_pending;
                             },
                             ro2);
                    if (dice >= 2 && dice < 7) ro2.cancel.cancel();
                }
            }
            drain();
        });
    for (auto& th : pool) th.join();
    CHECK(e.shutdown(60s));
    const std::int64_t total = static_cast<std::int64_t>(threads) * per_thread;
    // Callbacks may still be finishing after the futures: shutdown drained them all.
    CHECK(answers.load() == total);
    std::int64_t lost = 0, duplicated = 0;
    for (const auto& s : seen) {
        if (s.load() == 0) ++lost;
        if (s.load() > 1) ++duplicated;
    }
    WARN("engine storm: " << threads << " x " << per_thread << ": ok " << ok << ", cancelled "
                          << cancelled << ", deadline " << expired << ", unavailable " << rejected
                          << ", mean batch " << e.metrics().mean_batch_size());
    CHECK(lost == 0);
    CHECK(duplicated == 0);
    CHECK(wrong == 0);
    CHECK(other == 0);
    CHECK(ok + cancelled + expired + rejected == total);
    CHECK(cancelled > 0);
    CHECK(ok > total / 2);
    const MetricsSnapshot m = e.metrics();
    CHECK(m.requests.submitted == static_cast<std::uint64_t>(total));
    CHECK(m.requests.ok == static_cast<std::uint64_t>(ok.load()));
}
