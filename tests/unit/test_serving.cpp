// serving::ModelRegistry and serving::BatchingEngine (dsinfer/serving.hpp): models served by
// name (add, get, remove; unknown names and bad options are typed errors naming the model),
// submissions after a remove are refused, and a hot swap under load loses no request: every
// request submitted while engines are swapped is answered with the outputs of the old model or
// of the new one, and requests after the swap see the new one.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "dsinfer/serving.hpp"
#include "memory_models.hpp"

namespace {

using namespace dsinfer;
using namespace std::chrono_literals;
using serving::BatchingEngine;
using serving::BatchingOptions;
using serving::ModelRegistry;

/// x[batch, 4] -> y = scale * x + 1.
std::shared_ptr<const InferenceEngine> affine(float scale) {
    onnx::ModelProto m = test::new_model(13, "affine");
    auto& g = *m.mutable_graph();
    *g.add_input() = test::sym_info("x", 1, {-1, 4});
    *g.add_output() = test::sym_info("y", 1, {-1, 4});
    *g.add_initializer() = test::float_tensor("scale", {}, {scale});
    *g.add_initializer() = test::float_tensor("one", {}, {1.f});
    test::add_node(g, "Mul", {"x", "scale"}, {"t"});
    test::add_node(g, "Add", {"t", "one"}, {"y"});
    EngineOptions o;
    o.num_threads = 1;
    return std::make_shared<const InferenceEngine>(test::engine_from(test::bytes_of(m), o));
}

std::vector<NamedTensor> request(float v) {
    return {{"x", Tensor::from_vector<float>({1, 4}, {v, v + 1, v + 2, v + 3})}};
}

/// The scale a result was computed with (y = scale * x + 1), or 0 when it fits neither.
float scale_of(const std::vector<NamedTensor>& out, float v, std::initializer_list<float> scales) {
    if (out.size() != 1 || out[0].tensor.num_elements() != 4) return 0;
    const float* y = out[0].tensor.data<float>();
    for (float s : scales) {
        bool all = true;
        for (int i = 0; i < 4; ++i) all = all && y[i] == s * (v + static_cast<float>(i)) + 1.f;
        if (all) return s;
    }
    return 0;
}

ErrorCode code_of(std::future<BatchingEngine::Outputs>& f, std::string* message = nullptr) {
    try {
        (void)f.get();
        return ErrorCode::ok;
    } catch (const Error& e) {
        if (message != nullptr) *message = e.message();
        return e.code();
    }
}

BatchingOptions batching(std::size_t max_batch, std::chrono::microseconds delay) {
    BatchingOptions o;
    o.max_batch_size = max_batch;
    o.max_queue_delay = delay;
    return o;
}

}  // namespace

TEST_CASE("serving: the registry adds, gets and removes models by name", "[serving]") {
    ModelRegistry models;
    CHECK(models.models().empty());
    REQUIRE(models.add("double", affine(2.f), batching(4, 500us)).is_ok());
    REQUIRE(models.add("triple", affine(3.f)).is_ok());
    CHECK(models.models() == std::vector<std::string>{"double", "triple"});

    auto got = models.get("triple");
    REQUIRE(got.is_ok());
    CHECK(scale_of(got.value()->submit(request(1.f)).get(), 1.f, {2.f, 3.f}) == 3.f);
    CHECK(scale_of(models.submit("double", request(1.f)).get(), 1.f, {2.f, 3.f}) == 2.f);
    CHECK(models.get("double").value()->options().max_batch_size == 4);

    // Unknown names, names given twice, empty names, null engines, bad options: typed errors
    // naming what is wrong; nothing changes.
    const auto unknown = models.get("quadruple");
    REQUIRE_FALSE(unknown.is_ok());
    CHECK(unknown.status().code() == ErrorCode::invalid_argument);
    CHECK_THAT(unknown.status().message(), Catch::Contains("'quadruple'"));
    CHECK_THAT(unknown.status().message(), Catch::Contains("'double'"));  // what is served
    const Status twice = models.add("double", affine(2.f));
    CHECK(twice.code() == ErrorCode::invalid_argument);
    CHECK_THAT(twice.message(), Catch::Contains("'double'"));
    CHECK(models.add("", affine(2.f)).code() == ErrorCode::invalid_argument);
    CHECK(models.add("null", nullptr).code() == ErrorCode::invalid_argument);
    const Status bad = models.add("bad", affine(2.f), batching(0, 500us));
    CHECK(bad.code() == ErrorCode::invalid_argument);
    CHECK_THAT(bad.message(), Catch::Contains("max_batch_size"));
    CHECK(models.models() == std::vector<std::string>{"double", "triple"});

    const Status gone = models.remove("nothing");
    CHECK(gone.code() == ErrorCode::invalid_argument);
    CHECK_THAT(gone.message(), Catch::Contains("'nothing'"));
    REQUIRE(models.remove("triple").is_ok());
    CHECK(models.models() == std::vector<std::string>{"double"});
    CHECK_FALSE(models.get("triple").is_ok());
}

TEST_CASE("serving: submissions after a remove are refused; queued ones finish", "[serving]") {
    ModelRegistry models;
    // Nothing dispatches on its own for 10 s: the requests wait in the queue.
    REQUIRE(models.add("m", affine(2.f), batching(64, 10s)).is_ok());
    std::vector<std::future<BatchingEngine::Outputs>> queued;
    for (int i = 0; i < 5; ++i) queued.push_back(models.submit("m", request(static_cast<float>(i))));
    CHECK(models.get("m").value()->batching_state().queued == 5);
    REQUIRE(models.remove("m", 10s).is_ok());  // drains the five
    for (int i = 0; i < 5; ++i)
        CHECK(scale_of(queued[static_cast<std::size_t>(i)].get(), static_cast<float>(i), {2.f}) ==
              2.f);

    auto late = models.submit("m", request(1.f));
    REQUIRE(late.wait_for(0s) == std::future_status::ready);
    std::string message;
    CHECK(code_of(late, &message) == ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains("'m'"));

    // The callback form: answered once, and it may call the registry (no lock is held then).
    std::atomic<int> calls{0};
    ErrorCode code = ErrorCode::ok;
    std::size_t served = 99;
    const auto done = [&](StatusOr<BatchingEngine::Outputs> r) {
        code = r.status().code();
        served = models.models().size();
        ++calls;
    };
    models.submit("m", request(1.f), done);
    CHECK(calls.load() == 1);
    CHECK(code == ErrorCode::invalid_argument);
    CHECK(served == 0);
    // A rejected input on a served model, delivered the same way.
    REQUIRE(models.add("m", affine(2.f)).is_ok());
    models.submit("m", {{"x", Tensor::from_vector<float>({1, 3}, {1.f, 2.f, 3.f})}}, done);
    CHECK(calls.load() == 2);
    CHECK(code == ErrorCode::invalid_argument);
    CHECK(served == 1);
}

TEST_CASE("serving: a swap under load loses no request", "[serving]") {
    ModelRegistry models;
    REQUIRE(models.add("m", affine(2.f), batching(8, 300us)).is_ok());
    const std::shared_ptr<const InferenceEngine> engines[2] = {affine(2.f), affine(3.f)};

    constexpr int kThreads = 4;
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> submitted{0}, answered{0}, wrong{0}, failed{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < kThreads; ++t)
        clients.emplace_back([&, t] {
            std::vector<std::pair<std::future<BatchingEngine::Outputs>, float>> window;
            auto settle = [&](std::pair<std::future<BatchingEngine::Outputs>, float>& p) {
                try {
                    if (scale_of(p.first.get(), p.second, {2.f, 3.f}) == 0) ++wrong;
                } catch (const Error&) {
                    ++failed;
                }
                ++answered;
            };
            for (int i = 0; !stop.load(); ++i) {
                const float v = static_cast<float>(t * 100000 + i % 1000);
                ++submitted;
                if (i % 3 == 0) {  // the callback form
                    models.submit("m", request(v), [&, v](StatusOr<BatchingEngine::Outputs> r) {
                        if (!r.is_ok()) ++failed;
                        else if (scale_of(r.value(), v, {2.f, 3.f}) == 0) ++wrong;
                        ++answered;
                    });
                } else {
                    window.emplace_back(models.submit("m", request(v)), v);
                }
                if (window.size() >= 16) {
                    for (auto& p : window) settle(p);
                    window.clear();
                }
            }
            for (auto& p : window) settle(p);
        });

    // Swap back and forth while the clients submit; after each swap a request sees the new one.
    for (int k = 1; k <= 10; ++k) {
        std::this_thread::sleep_for(20ms);
        const float scale = k % 2 == 1 ? 3.f : 2.f;
        REQUIRE(models.swap("m", engines[k % 2]).is_ok());
        CHECK(scale_of(models.submit("m", request(7.f)).get(), 7.f, {2.f, 3.f}) == scale);
        CHECK(models.get("m").value()->engine() == engines[k % 2]);
        CHECK(models.get("m").value()->options().max_batch_size == 8);  // kept
    }
    stop.store(true);
    for (auto& c : clients) c.join();
    // Callbacks may still be running on the current engine's threads: drain it.
    REQUIRE(models.get("m").value()->shutdown(30s));
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (answered.load() < submitted.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(1ms);
    INFO("submitted " << submitted.load() << ", answered " << answered.load());
    CHECK(submitted.load() > 100);
    CHECK(answered.load() == submitted.load());
    CHECK(failed.load() == 0);
    CHECK(wrong.load() == 0);

    // A swap with bad options or for an unknown model changes nothing.
    const Status bad = models.swap("m", engines[0], batching(0, 1us));
    CHECK(bad.code() == ErrorCode::invalid_argument);
    CHECK(models.get("m").value()->engine() == engines[0]);
    const Status unknown = models.swap("other", engines[1]);
    CHECK(unknown.code() == ErrorCode::invalid_argument);
    CHECK_THAT(unknown.message(), Catch::Contains("'other'"));
}

TEST_CASE("serving: a BatchingEngine records run() and submit() apart; engines can be shared",
          "[serving]") {
    const auto engine = affine(2.f);
    const BatchingEngine a(engine, batching(4, 500us));
    const BatchingEngine b(engine);
    CHECK(scale_of(a.run(request(1.f)), 1.f, {2.f}) == 2.f);
    CHECK(scale_of(b.submit(request(2.f)).get(), 2.f, {2.f}) == 2.f);
    std::vector<NamedTensor> out;
    CHECK(a.try_run({{"y", Tensor::from_vector<float>({1, 4}, {1, 2, 3, 4})}}, out).code() ==
          ErrorCode::invalid_argument);
    CHECK(a.run_metrics().requests.ok == 1);
    CHECK(a.run_metrics().requests.failed == 1);
    CHECK(a.metrics().requests.submitted == 0);  // a only ran
    CHECK(b.metrics().requests.ok == 1);
    CHECK(b.metrics().batches() == 1);
    CHECK(b.run_metrics().requests.submitted == 0);  // b only took a submission
    a.reset_metrics();
    CHECK(a.run_metrics().requests.submitted == 0);
    CHECK(engine->check_inputs(request(1.f)).is_ok());
    CHECK(engine->check_inputs({{"x", Tensor::from_vector<float>({4}, {1, 2, 3, 4})}}).code() ==
          ErrorCode::invalid_argument);
    CHECK_THROWS_AS(BatchingEngine(nullptr), Error);
}

TEST_CASE("serving: the registry's Prometheus document labels every model and path",
          "[serving]") {
    ModelRegistry models;
    REQUIRE(models.add("alpha", affine(2.f)).is_ok());
    REQUIRE(models.add("beta", affine(3.f)).is_ok());
    CHECK(scale_of(models.submit("alpha", request(1.f)).get(), 1.f, {2.f}) == 2.f);
    CHECK(scale_of(models.submit("alpha", request(2.f)).get(), 2.f, {2.f}) == 2.f);
    CHECK(scale_of(models.get("beta").value()->run(request(1.f)), 1.f, {3.f}) == 3.f);
    const std::string text = models.prometheus();
    CHECK_THAT(text, Catch::Contains(
                         "dsinfer_requests_total{model=\"alpha\",path=\"submit\",outcome=\"ok\"} 2\n"));
    CHECK_THAT(text, Catch::Contains(
                         "dsinfer_requests_total{model=\"alpha\",path=\"run\",outcome=\"ok\"} 0\n"));
    CHECK_THAT(text, Catch::Contains(
                         "dsinfer_requests_total{model=\"beta\",path=\"run\",outcome=\"ok\"} 1\n"));
    CHECK_THAT(text, Catch::Contains(
                         "dsinfer_requests_total{model=\"beta\",path=\"submit\",outcome=\"ok\"} 0\n"));
    std::size_t help = 0;
    for (std::size_t at = 0; (at = text.find("# HELP dsinfer_request_duration_seconds ", at)) !=
                             std::string::npos;
         ++at)
        ++help;
    CHECK(help == 1);
    CHECK_THAT(models.prometheus("svc"), Catch::Contains("svc_requests_total{model=\"beta\""));
}
