// dsinfer/serving.hpp — serving on top of the engine (target dsinfer::serving): dynamic
// batching, adaptive control and metrics for one model (BatchingEngine), and a registry of
// named models whose engines can be replaced while requests are in flight (ModelRegistry).
//
// Purpose: InferenceEngine (dsinfer/engine.hpp) loads, compiles and runs a model; everything a
// server adds around run() lives here and uses only the engine's public API. A BatchingEngine
// wraps a shared engine: submit() queues requests for a BatchScheduler
// (dsinfer/batch_scheduler.hpp) that concatenates them along the batch dimension, runs them
// once and splits the outputs back (docs/BATCHING.md); with BatchingOptions::adaptive an
// AdaptiveBatchController (dsinfer/adaptive_batching.hpp) tunes the batch cap and the queue
// delay; every outcome of submit() is recorded in ServingMetrics (dsinfer/metrics.hpp:
// metrics()), and every run() in a second set of its own (run_metrics()): a direct call has no
// queue and no batch, and mixed in it would blur the batched path's percentiles. Several BatchingEngines may share one InferenceEngine.
//
// Ownership/threading: BatchingEngine is move-only and keeps its engine alive (shared_ptr);
// every member is thread-safe. Its destructor answers what is still queued cancelled
// (shutdown(0)) after letting running batches finish. ModelRegistry is thread-safe; it owns a
// BatchingEngine per model name, and get() hands out shared references.
//
// Usage:
//   auto engine = std::make_shared<dsinfer::InferenceEngine>(
//       dsinfer::InferenceEngine::load("model.onnx"));
//   dsinfer::serving::BatchingEngine server(engine, {.max_batch_size = 16});
//   std::future<dsinfer::serving::BatchingEngine::Outputs> f = server.submit({{"input", x}});
//   dsinfer::MetricsSnapshot m = server.metrics();            // submit(): queue, batches
//   std::string body = models.prometheus();                    // every model, labelled
//
//   dsinfer::serving::ModelRegistry models;
//   dsinfer::throw_if_error(models.add("resnet", engine, {.max_batch_size = 8}));
//   auto out = models.submit("resnet", {{"input", x}}).get();
//   models.swap("resnet", std::make_shared<dsinfer::InferenceEngine>(v2));  // hot reload
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/cancellation.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/metrics.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

#if defined(_WIN32) && defined(DSINFER_SHARED)
#if defined(DSINFER_SERVING_BUILDING)
#define DSINFER_SERVING_API __declspec(dllexport)
#else
#define DSINFER_SERVING_API __declspec(dllimport)
#endif
#elif defined(DSINFER_SHARED)
#define DSINFER_SERVING_API __attribute__((visibility("default")))
#else
#define DSINFER_SERVING_API
#endif

namespace dsinfer::serving {

/// How BatchingEngine::submit() batches requests (docs/BATCHING.md). Checked when the
/// BatchingEngine is created (invalid_argument naming the field).
struct BatchingOptions {
    /// Rows along the batch dimension per executed batch (a request of n rows counts n).
    /// 1 = no batching: each request runs alone (still asynchronously, queued and scheduled).
    std::size_t max_batch_size = 8;
    /// How long the oldest queued request may wait for its batch to fill.
    std::chrono::microseconds max_queue_delay{2000};
    /// Batch sizes (rows) dispatched at once when reached (Triton's preferred_batch_size).
    std::vector<std::size_t> preferred_batch_sizes{};
    /// Queued requests; one more is answered unavailable at once (back-pressure).
    std::size_t max_queue_size = 1024;
    /// Batches run concurrently, each with the engine's EngineOptions::num_threads intra-op
    /// threads: keep num_workers * num_threads within the cores.
    int num_workers = 1;
    /// RequestOptions::priority ranges over [0, priority_levels); 0 is the most urgent.
    int priority_levels = 3;
    /// Requests whose non-batch dims differ (sequence lengths):
    ///   group: only requests of identical non-batch shapes share a batch (always exact);
    ///   pad:   requests share a batch across lengths: the inputs with the sequence dim of
    ///          `mask_input` are zero-padded to the longest in the batch, the mask marks the
    ///          padding 0, and outputs with that dim at axis 1 are cut back per request.
    enum class Ragged : std::uint8_t { group, pad };
    Ragged ragged = Ragged::group;
    /// pad: the attention-mask input (1 = token, 0 = padding); "" = the input named
    /// "attention_mask".
    std::string mask_input{};
    /// pad: lengths share a batch only within buckets of this many positions (0 = any
    /// lengths), bounding the padding one request can cost another.
    std::int64_t pad_bucket = 0;
    /// Adaptive batching: tune max_queue_delay and max_batch_size online (the two fields
    /// above are the upper bounds) to maximize throughput while the p99 latency stays under
    /// p99_target_ms (docs/BATCHING.md).
    bool adaptive = false;
    double p99_target_ms = 0.0;
};

/// The dynamic batcher's current settings and queue (the adaptive controller moves the first
/// two within BatchingOptions' bounds).
struct BatchingState {
    std::size_t max_batch_size = 0;
    std::chrono::microseconds max_queue_delay{0};
    std::size_t queued = 0;   ///< requests waiting
    std::size_t running = 0;  ///< requests in batches executing
};

/// Per-request options of submit().
struct RequestOptions {
    /// 0 (most urgent) .. BatchingOptions::priority_levels - 1.
    int priority = 0;
    /// A request still queued at its deadline is answered deadline_exceeded and never runs.
    std::optional<std::chrono::steady_clock::time_point> deadline{};
    /// Cancelling a queued request answers it cancelled at once; it never runs.
    CancellationToken cancel{};
};

/// One model served with dynamic batching, adaptive control and metrics.
class DSINFER_SERVING_API BatchingEngine {
public:
    using Outputs = std::vector<NamedTensor>;
    using Callback = std::function<void(StatusOr<Outputs>)>;

    /// Serves `engine` (not null: invalid_argument). Throws dsinfer::Error invalid_argument
    /// when `options` are out of range, naming the field.
    explicit BatchingEngine(std::shared_ptr<const InferenceEngine> engine,
                            BatchingOptions options = {});
    BatchingEngine(BatchingEngine&&) noexcept;
    BatchingEngine& operator=(BatchingEngine&&) noexcept;
    BatchingEngine(const BatchingEngine&) = delete;
    BatchingEngine& operator=(const BatchingEngine&) = delete;
    ~BatchingEngine();

    /// `options`' checks alone: invalid_argument naming the field, else ok.
    static Status validate(const BatchingOptions& options);

    /// InferenceEngine::run(), its outcome recorded in the metrics. Thread-safe.
    Outputs run(const std::vector<NamedTensor>& inputs, const RunOptions& options = {}) const;
    /// InferenceEngine::try_run(), its outcome recorded in the metrics.
    Status try_run(const std::vector<NamedTensor>& inputs, Outputs& outputs,
                   const RunOptions& options = {}) const noexcept;

    /// Queues one request for the dynamic batcher: requests are concatenated along the batch
    /// dimension, run once and split back. Every request gets exactly one outcome: its
    /// outputs, or a dsinfer::Error in the future — invalid_argument (checked at submit, like
    /// run()'s input checks), unavailable (queue full, shutting down), cancelled,
    /// deadline_exceeded, or the run's error. A request that fails in a batch is retried
    /// alone, so one bad request never fails its batch mates. Thread-safe. Inputs are shared,
    /// not copied, until the batch runs: do not modify them.
    std::future<Outputs> submit(std::vector<NamedTensor> inputs,
                                RequestOptions options = {}) const;
    /// The same, delivering the outcome to `done` (called once, on a scheduler thread or, for
    /// an immediate rejection, before submit returns; exceptions it throws are contained).
    /// An empty `done` is invalid_argument (thrown).
    void submit(std::vector<NamedTensor> inputs, Callback done,
                RequestOptions options = {}) const;
    /// Stops accepting submissions (later ones: unavailable), lets queued and running requests
    /// finish for up to `timeout`, then answers what is still queued cancelled. True when
    /// everything finished. The destructor does shutdown(0).
    bool shutdown(std::chrono::milliseconds timeout) const;

    /// Serving metrics of submit() (dsinfer/metrics.hpp: counts by outcome, throughput,
    /// latency/queue/compute percentiles, batch sizes, the engine's memory pool's bytes in use
    /// and peak); to_json() / to_prometheus() export them. Recording costs ~60 ns a request.
    MetricsSnapshot metrics() const;
    /// The same for run() / try_run() calls (no queue, no batches: compute = latency).
    MetricsSnapshot run_metrics() const;
    /// Zeroes both sets and restarts their uptime (ServingMetrics::reset: meant for quiet
    /// moments, e.g. between benchmark phases; records racing with it may survive in part).
    void reset_metrics() const noexcept;
    /// What submit() can batch for this model, e.g. "batch dim 'batch' on every input and
    /// output", or why requests run alone.
    std::string batching_info() const;
    /// The batcher's settings now and its queue.
    BatchingState batching_state() const;
    /// The options it was created with.
    const BatchingOptions& options() const noexcept;
    /// The engine it serves.
    const std::shared_ptr<const InferenceEngine>& engine() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Models served by name, each by its own BatchingEngine. Thread-safe. Errors are typed:
/// an unknown name is invalid_argument naming the model (ErrorCode has no not_found), so is
/// adding a name twice or an empty name.
class DSINFER_SERVING_API ModelRegistry {
public:
    using Outputs = BatchingEngine::Outputs;
    using Callback = BatchingEngine::Callback;

    ModelRegistry();
    ModelRegistry(const ModelRegistry&) = delete;
    ModelRegistry& operator=(const ModelRegistry&) = delete;
    /// Shuts every model down (shutdown(0) each: queued requests are answered cancelled).
    ~ModelRegistry();

    /// Serves `engine` under `name` with `options` (BatchingEngine's checks).
    Status add(const std::string& name, std::shared_ptr<const InferenceEngine> engine,
               BatchingOptions options = {});
    /// The model's BatchingEngine (shared: it stays usable after a swap or remove, but then
    /// answers new submissions unavailable once drained).
    StatusOr<std::shared_ptr<BatchingEngine>> get(const std::string& name) const;
    /// Stops serving `name`: later submissions are invalid_argument at once, requests already
    /// submitted finish (up to `drain`, then the still-queued ones are answered cancelled).
    Status remove(const std::string& name,
                  std::chrono::milliseconds drain = std::chrono::seconds(60));
    /// Hot swap: from the moment it takes effect, submissions for `name` go to a new
    /// BatchingEngine serving `engine` (with `options`, or the current model's when empty);
    /// requests already submitted finish on the old engine, which swap() waits for (up to
    /// `drain`; then the still-queued ones are answered cancelled). Nothing submitted through
    /// the registry is lost: every request is answered by the old engine or the new one. Bad
    /// options leave the model as it was.
    Status swap(const std::string& name, std::shared_ptr<const InferenceEngine> engine,
                std::optional<BatchingOptions> options = std::nullopt,
                std::chrono::milliseconds drain = std::chrono::seconds(60));
    /// Names served now, sorted.
    std::vector<std::string> models() const;
    /// Every model's metrics in one Prometheus text document (to_prometheus with `prefix`):
    /// each series labelled model="NAME" and path="submit" (metrics()) or "run"
    /// (run_metrics()). For a server's GET /metrics.
    std::string prometheus(std::string_view prefix = "dsinfer") const;

    /// BatchingEngine::submit() of the model `name`; an unknown name is answered
    /// invalid_argument like any rejected request.
    std::future<Outputs> submit(const std::string& name, std::vector<NamedTensor> inputs,
                                RequestOptions options = {}) const;
    /// The same, delivering the outcome to `done` (an immediate rejection is delivered after
    /// the registry's lock is released, so `done` may call the registry).
    void submit(const std::string& name, std::vector<NamedTensor> inputs, Callback done,
                RequestOptions options = {}) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::serving
