// serving::Cascade (dsinfer/cascade.hpp): rows routed per row to the model that must answer
// them, through run() and submit(); the built-in rules (max softmax on logits or
// probabilities, margin), a user rule, NaN and infinity always escalated, stats, and the
// construction checks naming what does not match.
//
// The models are x[batch, 3] -> scores = x + s, aux = x + a: the small one has s = 0, so its
// scores are the input and each test chooses which rows it is sure about; the large one adds
// 100 (scores) and 200 (aux), so every output row tells which model answered it.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "dsinfer/cascade.hpp"
#include "memory_models.hpp"

namespace {

using namespace dsinfer;
using namespace std::chrono_literals;
using serving::BatchingEngine;
using serving::BatchingOptions;
using serving::Cascade;
using serving::CascadeOptions;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

BatchingOptions batching() {
    BatchingOptions o;
    o.max_batch_size = 16;
    o.max_queue_delay = 200us;
    return o;
}

/// x[batch, classes] -> scores = x + s (elem_type `scores_type`: 1 float, 11 double via Cast),
/// and with `aux`, aux = x + a.
std::shared_ptr<BatchingEngine> model(float s, float a, bool aux = true, std::int64_t classes = 3,
                                      int scores_type = 1, const std::string& input = "x") {
    onnx::ModelProto m = test::new_model(13, "cascade_test");
    auto& g = *m.mutable_graph();
    *g.add_input() = test::sym_info(input, 1, {-1, classes});
    *g.add_output() = test::sym_info("scores", scores_type, {-1, classes});
    *g.add_initializer() = test::float_tensor("s", {}, {s});
    if (scores_type == 1) {
        test::add_node(g, "Add", {input, "s"}, {"scores"});
    } else {
        test::add_node(g, "Add", {input, "s"}, {"scores_f"});
        auto* cast = test::add_node(g, "Cast", {"scores_f"}, {"scores"});
        auto* to = cast->add_attribute();
        to->set_name("to");
        to->set_type(onnx::AttributeProto::INT);
        to->set_i(scores_type);
    }
    if (aux) {
        *g.add_output() = test::sym_info("aux", 1, {-1, classes});
        *g.add_initializer() = test::float_tensor("a", {}, {a});
        test::add_node(g, "Add", {input, "a"}, {"aux"});
    }
    EngineOptions o;
    o.num_threads = 1;
    auto engine = std::make_shared<const InferenceEngine>(test::engine_from(test::bytes_of(m), o));
    return std::make_shared<BatchingEngine>(engine, batching());
}

std::shared_ptr<BatchingEngine> small_model() { return model(0.f, 1.f); }
std::shared_ptr<BatchingEngine> large_model() { return model(100.f, 200.f); }

std::vector<NamedTensor> request(const std::vector<std::vector<float>>& rows) {
    std::vector<float> v;
    for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
    const auto n = static_cast<std::int64_t>(rows.size());
    return {{"x", Tensor::from_vector<float>({n, 3}, v)}};
}

enum class By { small, large };

/// Which model answered each row of `out` for the request `rows` (both outputs must agree);
/// nullopt when the outputs are malformed or a row matches neither. No Catch assertions: it
/// also runs on scheduler threads.
std::optional<std::vector<By>> which(const std::vector<NamedTensor>& out,
                                     const std::vector<std::vector<float>>& rows) {
    const auto n = static_cast<std::int64_t>(rows.size());
    if (out.size() != 2 || out[0].name != "scores" || out[1].name != "aux") return std::nullopt;
    for (const NamedTensor& o : out)
        if (o.tensor.dtype() != DType::f32 || !(o.tensor.shape() == Shape{n, 3}))
            return std::nullopt;
    const float* scores = out[0].tensor.data<float>();
    const float* aux = out[1].tensor.data<float>();
    // A NaN or infinite input stays so on either path: compare the finite columns.
    auto row_is = [&](std::size_t r, float s, float a) {
        bool all = true;
        for (std::size_t c = 0; c < 3; ++c) {
            const float x = rows[r][c];
            if (!std::isfinite(x)) continue;
            all = all && scores[r * 3 + c] == x + s && aux[r * 3 + c] == x + a;
        }
        return all;
    };
    std::vector<By> by;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const bool small = row_is(r, 0.f, 1.f), large = row_is(r, 100.f, 200.f);
        if (small == large) return std::nullopt;
        by.push_back(small ? By::small : By::large);
    }
    return by;
}

std::vector<By> answered_by(const std::vector<NamedTensor>& out,
                            const std::vector<std::vector<float>>& rows) {
    auto by = which(out, rows);
    REQUIRE(by.has_value());
    return *by;
}

// Logit rows: softmax top probability ~0.99991 (sure), 1/3 (unsure), ~0.576 (sure at 0.5,
// unsure at 0.9).
const std::vector<float> kSure{10.f, 0.f, 0.f};
const std::vector<float> kUnsure{1.f, 1.f, 1.f};
const std::vector<float> kMiddle{1.f, 0.f, 0.f};

ErrorCode code_of(const std::function<void()>& f, std::string* message = nullptr) {
    try {
        f();
        return ErrorCode::ok;
    } catch (const Error& e) {
        if (message != nullptr) *message = e.message();
        return e.code();
    }
}

}  // namespace

TEST_CASE("cascade: unsure rows go to the large model, the others keep the small one's answer",
          "[serving]") {
    auto small = small_model();
    auto large = large_model();
    Cascade cascade(small, large, CascadeOptions::max_softmax_below("scores", 0.9));
    const std::vector<std::vector<float>> rows{kSure, kUnsure, kSure, kMiddle, kUnsure};
    const std::vector<By> expected{By::small, By::large, By::small, By::large, By::large};

    CHECK(answered_by(cascade.run(request(rows)), rows) == expected);
    // The escalated rows reached the large model as one request of three rows.
    CHECK(large->run_metrics().requests.ok == 1);
    CHECK(small->run_metrics().requests.ok == 1);

    CHECK(answered_by(cascade.submit(request(rows)).get(), rows) == expected);
    std::promise<StatusOr<Cascade::Outputs>> answered;
    cascade.submit(request(rows), [&](StatusOr<Cascade::Outputs> r) { answered.set_value(r); });
    auto r = answered.get_future().get();
    REQUIRE(r.is_ok());
    CHECK(answered_by(r.value(), rows) == expected);
    CHECK(large->metrics().batches() >= 1);
    CHECK(large->metrics().batch_items.sum == 6);  // 3 rows from each of the two submits

    // At 0.5 the middle row is sure enough.
    Cascade lenient(small, large, CascadeOptions::max_softmax_below("scores", 0.5));
    CHECK(answered_by(lenient.run(request(rows)), rows) ==
          std::vector<By>{By::small, By::large, By::small, By::small, By::large});

    const serving::CascadeStats s = cascade.stats();
    CHECK(s.requests == 3);
    CHECK(s.failed == 0);
    CHECK(s.rows == 15);
    CHECK(s.escalated_rows == 9);
    CHECK(s.escalated_requests == 3);
    CHECK(s.nonfinite_rows == 0);
    CHECK(s.escalated_fraction() == Approx(0.6));
    CHECK(s.escalated_latency.count == 3);
    CHECK(s.small_only_latency.count == 0);
    cascade.reset_stats();
    CHECK(cascade.stats().requests == 0);
    CHECK(cascade.stats().escalated_latency.count == 0);
}

TEST_CASE(
    "cascade: requests the small model is sure of never reach the large one; all-unsure "
    "ones go there whole",
    "[serving]") {
    auto small = small_model();
    auto large = large_model();
    Cascade cascade(small, large, CascadeOptions::max_softmax_below("scores", 0.9));
    const std::vector<std::vector<float>> sure{kSure, kSure, {0.f, 9.f, 0.f}};
    CHECK(answered_by(cascade.run(request(sure)), sure) ==
          std::vector<By>{By::small, By::small, By::small});
    CHECK(answered_by(cascade.submit(request(sure)).get(), sure) ==
          std::vector<By>{By::small, By::small, By::small});
    CHECK(large->run_metrics().requests.submitted == 0);
    CHECK(large->metrics().requests.submitted == 0);

    const std::vector<std::vector<float>> unsure{kUnsure, kMiddle};
    CHECK(answered_by(cascade.run(request(unsure)), unsure) ==
          std::vector<By>{By::large, By::large});
    CHECK(answered_by(cascade.submit(request(unsure)).get(), unsure) ==
          std::vector<By>{By::large, By::large});

    const serving::CascadeStats s = cascade.stats();
    CHECK(s.requests == 4);
    CHECK(s.small_only_latency.count == 2);
    CHECK(s.escalated_latency.count == 2);
    CHECK(s.rows == 10);
    CHECK(s.escalated_rows == 4);
    CHECK(s.escalated_requests == 2);

    // An empty batch: nothing to judge, answered by the small model.
    const auto empty = cascade.run({{"x", Tensor::zeros(DType::f32, {0, 3})}});
    REQUIRE(empty.size() == 2);
    CHECK(empty[0].tensor.shape() == Shape{0, 3});
    CHECK(cascade.stats().small_only_latency.count == 3);
}

TEST_CASE("cascade: margin and probability rules", "[serving]") {
    auto small = small_model();
    auto large = large_model();
    using Scores = CascadeOptions::Scores;
    // Probabilities as they are: top 0.5 (margin 0.05), top 0.9 (margin 0.85), top 0.4
    // (margin 0.1).
    const std::vector<std::vector<float>> rows{
        {0.5f, 0.45f, 0.05f}, {0.05f, 0.9f, 0.05f}, {0.4f, 0.3f, 0.3f}};
    Cascade top(small, large,
                CascadeOptions::max_softmax_below("scores", 0.45, Scores::probabilities));
    CHECK(answered_by(top.run(request(rows)), rows) ==
          std::vector<By>{By::small, By::small, By::large});
    Cascade margin(small, large,
                   CascadeOptions::margin_below("scores", 0.45, Scores::probabilities));
    CHECK(answered_by(margin.run(request(rows)), rows) ==
          std::vector<By>{By::large, By::small, By::large});

    // On logits: [2, 1.9, -5] has top ~0.525 but margin ~0.05; [3, 0, 0] top ~0.91, margin
    // ~0.86.
    const std::vector<std::vector<float>> logits{{2.f, 1.9f, -5.f}, {3.f, 0.f, 0.f}};
    Cascade margin_logits(small, large, CascadeOptions::margin_below("scores", 0.5));
    CHECK(answered_by(margin_logits.run(request(logits)), logits) ==
          std::vector<By>{By::large, By::small});
    Cascade top_logits(small, large, CascadeOptions::max_softmax_below("scores", 0.5));
    CHECK(answered_by(top_logits.run(request(logits)), logits) ==
          std::vector<By>{By::small, By::small});

    // Threshold 1 escalates every row not fully certain; 0 none.
    Cascade all(small, large,
                CascadeOptions::max_softmax_below("scores", 1.0, Scores::probabilities));
    const std::vector<std::vector<float>> certain{{1.f, 0.f, 0.f}, {0.99f, 0.01f, 0.f}};
    CHECK(answered_by(all.run(request(certain)), certain) == std::vector<By>{By::small, By::large});
    Cascade none(small, large, CascadeOptions::margin_below("scores", 0.0));
    CHECK(answered_by(none.run(request(rows)), rows) ==
          std::vector<By>{By::small, By::small, By::small});
}

TEST_CASE("cascade: NaN and infinity in the small model's outputs always escalate", "[serving]") {
    auto small = small_model();
    auto large = large_model();
    const std::vector<std::vector<float>> rows{
        {10.f, kNaN, 0.f}, kSure, {kInf, 0.f, 0.f}, {-kInf, 10.f, 0.f}, kSure};
    const std::vector<By> expected{By::large, By::small, By::large, By::large, By::small};

    // A rule that escalates nothing still escalates the broken rows.
    Cascade none(small, large, CascadeOptions::max_softmax_below("scores", 0.0));
    CHECK(answered_by(none.run(request(rows)), rows) == expected);
    CHECK(answered_by(none.submit(request(rows)).get(), rows) == expected);
    const serving::CascadeStats s = none.stats();
    CHECK(s.escalated_rows == 6);
    CHECK(s.nonfinite_rows == 6);

    // So does a user rule that keeps every row.
    Cascade keep_all(small, large,
                     CascadeOptions::with_rule([](const std::vector<NamedTensor>& out) {
                         return std::vector<bool>(
                             static_cast<std::size_t>(out.front().tensor.shape()[0]), false);
                     }));
    CHECK(answered_by(keep_all.run(request(rows)), rows) == expected);
    CHECK(keep_all.stats().nonfinite_rows == 3);

    // The probabilities form too.
    Cascade probs(
        small, large,
        CascadeOptions::max_softmax_below("scores", 0.0, CascadeOptions::Scores::probabilities));
    const std::vector<std::vector<float>> p{{kNaN, 0.5f, 0.5f}, {0.9f, 0.1f, 0.f}};
    CHECK(answered_by(probs.run(request(p)), p) == std::vector<By>{By::large, By::small});
}

TEST_CASE("cascade: a user rule decides per row; its failures fail the request", "[serving]") {
    auto small = small_model();
    auto large = large_model();
    // Escalate the rows whose third score is above 0.5.
    Cascade cascade(small, large,
                    CascadeOptions::with_rule([](const std::vector<NamedTensor>& out) {
                        const Tensor t = NamedTensors(out).get("scores");  // a copy
                        std::vector<bool> flags;
                        for (std::int64_t r = 0; r < t.shape()[0]; ++r)
                            flags.push_back(t.data<float>()[r * 3 + 2] > 0.5f);
                        return flags;
                    }));
    const std::vector<std::vector<float>> rows{{0.f, 0.f, 1.f}, kSure, {0.f, 0.f, 0.7f}};
    CHECK(answered_by(cascade.run(request(rows)), rows) ==
          std::vector<By>{By::large, By::small, By::large});
    CHECK(answered_by(cascade.submit(request(rows)).get(), rows) ==
          std::vector<By>{By::large, By::small, By::large});

    Cascade short_rule(small, large, CascadeOptions::with_rule([](const std::vector<NamedTensor>&) {
                           return std::vector<bool>{true};
                       }));
    std::string message;
    CHECK(code_of([&] { (void)short_rule.run(request(rows)); }, &message) ==
          ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains("1 flags for 3 rows"));
    CHECK(code_of([&] { (void)short_rule.submit(request(rows)).get(); }) ==
          ErrorCode::invalid_argument);
    CHECK(short_rule.stats().failed == 2);

    Cascade throwing(
        small, large,
        CascadeOptions::with_rule([](const std::vector<NamedTensor>&) -> std::vector<bool> {
            throw Error(ErrorCode::unavailable, "rule service down");
        }));
    CHECK(code_of([&] { (void)throwing.run(request(rows)); }, &message) == ErrorCode::unavailable);
    CHECK_THAT(message, Catch::Contains("rule service down"));
}

TEST_CASE("cascade: models that do not match and bad options are rejected, naming the field",
          "[serving]") {
    auto small = small_model();
    auto large = large_model();
    const auto rule = CascadeOptions::max_softmax_below("scores", 0.9);
    auto rejected = [](const std::function<void()>& make) {
        std::string message;
        CHECK(code_of(make, &message) == ErrorCode::invalid_argument);
        return message;
    };
    CHECK_THAT(rejected([&] { Cascade(small, model(100.f, 0.f, /*aux=*/false), rule); }),
               Catch::Contains("'aux'"));
    CHECK_THAT(rejected([&] { Cascade(model(0.f, 0.f, false), large, rule); }),
               Catch::Contains("'aux'"));
    const std::string dtype =
        rejected([&] { Cascade(small, model(100.f, 200.f, true, 3, 11), rule); });
    CHECK_THAT(dtype, Catch::Contains("'scores'"));
    CHECK_THAT(dtype, Catch::Contains("float64"));
    const std::string dims = rejected([&] { Cascade(small, model(100.f, 200.f, true, 4), rule); });
    CHECK_THAT(dims, Catch::Contains("[batch,3]"));
    CHECK_THAT(dims, Catch::Contains("[batch,4]"));
    CHECK_THAT(rejected([&] { Cascade(small, model(100.f, 200.f, true, 3, 1, "pixels"), rule); }),
               Catch::Contains("'x'"));
    CHECK_THAT(rejected([&] { Cascade(nullptr, large, rule); }), Catch::Contains("small"));
    CHECK_THAT(rejected([&] { Cascade(small, nullptr, rule); }), Catch::Contains("large"));

    // The rule's output must exist and be float32 of rank >= 2.
    CHECK_THAT(
        rejected([&] { Cascade(small, large, CascadeOptions::max_softmax_below("probs", 0.9)); }),
        Catch::Contains("'probs'"));
    const auto f64 = model(0.f, 0.f, true, 3, 11);
    CHECK_THAT(rejected([&] { Cascade(f64, model(1.f, 0.f, true, 3, 11), rule); }),
               Catch::Contains("not float32"));

    for (const double bad : {-0.1, 1.5, std::nan("")}) {
        INFO("threshold " << bad);
        CHECK_THAT(rejected([&] {
                       Cascade(small, large, CascadeOptions::max_softmax_below("scores", bad));
                   }),
                   Catch::Contains("threshold"));
        CHECK(Cascade::validate(CascadeOptions::margin_below("scores", bad)).code() ==
              ErrorCode::invalid_argument);
    }
    CHECK_THAT(rejected([&] { Cascade(small, large, CascadeOptions::max_softmax_below("", 0.5)); }),
               Catch::Contains("output"));
    CHECK_THAT(rejected([&] { Cascade(small, large, CascadeOptions::with_rule(nullptr)); }),
               Catch::Contains("custom"));
    CHECK(Cascade::validate(rule).is_ok());
}

TEST_CASE("cascade: bad requests and a failing large model are answered once, with the error",
          "[serving]") {
    auto small = small_model();
    auto large = large_model();
    Cascade cascade(small, large, CascadeOptions::max_softmax_below("scores", 0.9));

    // Inputs whose rows disagree, or a wrong shape the small model refuses.
    std::vector<NamedTensor> ragged{{"x", Tensor::zeros(DType::f32, {2, 3})},
                                    {"y", Tensor::zeros(DType::f32, {3, 3})}};
    std::string message;
    CHECK(code_of([&] { (void)cascade.run(ragged); }, &message) == ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains("rows on dim 0"));
    CHECK(code_of([&] { (void)cascade.submit(ragged).get(); }) == ErrorCode::invalid_argument);
    const std::vector<NamedTensor> wrong{{"x", Tensor::zeros(DType::f32, {2, 4})}};
    CHECK(code_of([&] { (void)cascade.run(wrong); }, &message) == ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains("small model"));
    CHECK(code_of([&] { (void)cascade.submit(wrong).get(); }) == ErrorCode::invalid_argument);
    CHECK_THROWS_AS(cascade.submit(request({kSure}), Cascade::Callback{}), Error);

    // Once the large model stops taking requests, escalations fail (never answered by the small
    // model instead); sure requests still succeed.
    REQUIRE(large->shutdown(1s));
    std::atomic<int> calls{0};
    ErrorCode code = ErrorCode::ok;
    cascade.submit(request({kSure, kUnsure}), [&](StatusOr<Cascade::Outputs> r) {
        code = r.status().code();
        ++calls;
    });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (calls.load() == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(1ms);
    CHECK(calls.load() == 1);
    CHECK(code == ErrorCode::unavailable);
    CHECK(answered_by(cascade.submit(request({kSure})).get(), {kSure}) ==
          std::vector<By>{By::small});
    const serving::CascadeStats s = cascade.stats();
    CHECK(s.failed == 5);
    CHECK(s.requests == 6);
}

TEST_CASE("cascade: concurrent submissions are each answered once with their own rows",
          "[serving]") {
    auto small = small_model();
    auto large = large_model();
    std::atomic<int> answered{0}, wrong{0}, failed{0};
    constexpr int kThreads = 4, kPerThread = 50;
    {
        Cascade cascade(small, large, CascadeOptions::max_softmax_below("scores", 0.9));
        std::vector<std::thread> clients;
        for (int t = 0; t < kThreads; ++t)
            clients.emplace_back([&, t] {
                for (int i = 0; i < kPerThread; ++i) {
                    // Distinct rows per request; which ones are unsure varies with i.
                    const float v = static_cast<float>(t * 1000 + i);
                    std::vector<std::vector<float>> rows{{v, v, v}, {v + 10.f, v, v}};
                    if (i % 3 == 0) rows.push_back({v, v + 10.f, v});
                    std::vector<By> expected{By::large, By::small};
                    if (i % 3 == 0) expected.push_back(By::small);
                    cascade.submit(request(rows),
                                   [&, rows, expected](StatusOr<Cascade::Outputs> r) {
                                       if (!r.is_ok())
                                           ++failed;
                                       else if (which(r.value(), rows) != expected)
                                           ++wrong;
                                       ++answered;
                                   });
                }
            });
        for (auto& c : clients) c.join();
        // The destructor waits for every answer.
    }
    CHECK(answered.load() == kThreads * kPerThread);
    CHECK(failed.load() == 0);
    CHECK(wrong.load() == 0);
}
