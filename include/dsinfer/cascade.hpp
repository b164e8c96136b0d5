// dsinfer/cascade.hpp — a two-model cascade (target dsinfer::serving): a small model answers
// every row, and only the rows a rule finds it unsure about are answered by a large model.
//
// Purpose: when most inputs are easy, a cheap model can answer them and the expensive one is
// needed only for the rest. Cascade runs a request through the small model, asks the rule
// which rows (dim 0 of every input and output) to escalate, gathers those rows into one
// request to the large model and scatters its answers back: the outputs have the request's
// full batch, each row from the model that answered it. Rules: the top class's probability
// below a threshold (CascadeOptions::max_softmax_below), the gap between the two most probable
// classes below one (margin_below), or a callback that returns a flag per row (with_rule).
// Whatever the rule, a row in which any floating-point output of the small model holds a NaN
// or an infinity is escalated: a broken answer never passes silently.
// Both models serve through BatchingEngines (dsinfer/serving.hpp), so a server can share the
// models' dynamic batchers between the cascade and direct traffic: submit() queues the first
// stage on the small model's batcher and, from its callback, the second on the large one's.
// run() runs both stages on the caller's thread (BatchingEngine::try_run: no queue).
//
// Ownership/threading: Cascade is move-only and keeps both BatchingEngines alive (shared_ptr).
// Every member is thread-safe. submit() never blocks a scheduler thread: the second stage is
// queued from the first stage's callback and answers from the large model's. Every submit()
// gets exactly one answer. The destructor waits until every submitted request has been
// answered (the BatchingEngines answer what they hold, cancelled once shut down), so a Cascade
// must not be destroyed from inside one of its own callbacks. A BatchingEngine that a
// ModelRegistry replaces (swap) stops taking requests once drained: build a new Cascade on the
// new engines then.
//
// Usage:
//   auto small = std::make_shared<dsinfer::serving::BatchingEngine>(small_engine);
//   auto large = std::make_shared<dsinfer::serving::BatchingEngine>(large_engine);
//   dsinfer::serving::Cascade cascade(
//       small, large, dsinfer::serving::CascadeOptions::max_softmax_below("logits", 0.9));
//   auto out = cascade.run({{"pixels", x}});                      // x: [batch, 64]
//   cascade.submit({{"pixels", x}}, [](dsinfer::StatusOr<dsinfer::serving::Cascade::Outputs> r) {
//       ...                                                       // once, on a scheduler thread
//   });
//   dsinfer::serving::CascadeStats s = cascade.stats();
//   double fraction = s.escalated_fraction();                   // rows the large model answered
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/metrics.hpp"
#include "dsinfer/serving.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::serving {

/// A user rule: given the small model's outputs for a request of N rows (dim 0 of every
/// output), returns N flags, true for the rows the large model must answer. Called on the
/// thread that finished the first stage (a scheduler thread for submit()); must be
/// thread-safe. A dsinfer::Error it throws fails the request with its code, any other
/// exception with invalid_argument; a flag count other than N fails it with invalid_argument.
using EscalationRule =
    std::function<std::vector<bool>(const std::vector<NamedTensor>& small_outputs)>;

/// How a Cascade decides which rows to escalate. Checked when the Cascade is created
/// (invalid_argument naming the field); the factories below fill it.
struct CascadeOptions {
    enum class Rule : std::uint8_t {
        /// Escalate a row whose most probable class has probability < threshold.
        max_softmax_below,
        /// Escalate a row whose two most probable classes differ by < threshold
        /// (probability of the top class minus that of the second; 1 with one class).
        margin_below,
        /// `custom` decides.
        custom,
    };
    /// What the built-in rules read in `output`.
    enum class Scores : std::uint8_t {
        logits,         ///< unnormalized: the rule applies a softmax over the last axis
        probabilities,  ///< already probabilities (a Softmax output): read as they are
    };

    Rule rule = Rule::max_softmax_below;
    /// Built-in rules: the small model's output they read, float32 [batch, ..., classes]; the
    /// softmax runs over the last axis, and a row with several positions (dims between the
    /// first and the last) is as confident as its least confident position.
    std::string output{};
    Scores scores = Scores::logits;
    /// Built-in rules: the confidence a row must reach to be kept, in [0, 1]. 0 escalates
    /// nothing (but non-finite rows), 1 everything not fully certain.
    double threshold = 0.9;
    /// Rule::custom: the rule (not empty).
    EscalationRule custom{};

    static CascadeOptions max_softmax_below(std::string output, double threshold,
                                            Scores scores = Scores::logits) {
        CascadeOptions o;
        o.rule = Rule::max_softmax_below;
        o.output = std::move(output);
        o.threshold = threshold;
        o.scores = scores;
        return o;
    }
    static CascadeOptions margin_below(std::string output, double threshold,
                                       Scores scores = Scores::logits) {
        CascadeOptions o = max_softmax_below(std::move(output), threshold, scores);
        o.rule = Rule::margin_below;
        return o;
    }
    static CascadeOptions with_rule(EscalationRule rule) {
        CascadeOptions o;
        o.rule = Rule::custom;
        o.custom = std::move(rule);
        return o;
    }
};

/// What a Cascade did since it was created or its stats were reset.
struct CascadeStats {
    std::uint64_t requests = 0;  ///< answered, run() and submit(), any outcome
    std::uint64_t failed = 0;    ///< answered with an error (either stage, or the rule)
    /// Rows the rule judged (requests whose first stage succeeded).
    std::uint64_t rows = 0;
    /// Rows sent to the large model (nonfinite_rows included).
    std::uint64_t escalated_rows = 0;
    /// Rows escalated because a floating-point output of the small model held NaN or ±Inf.
    std::uint64_t nonfinite_rows = 0;
    /// Requests with at least one escalated row.
    std::uint64_t escalated_requests = 0;
    /// End-to-end time of the successful requests the small model answered alone.
    HistogramSnapshot small_only_latency;
    /// End-to-end time of the successful requests that also ran on the large model.
    HistogramSnapshot escalated_latency;

    /// escalated_rows / rows (0 before any row).
    double escalated_fraction() const noexcept {
        return rows == 0 ? 0.0 : static_cast<double>(escalated_rows) / static_cast<double>(rows);
    }
};

/// A small model whose unsure rows are answered by a large one. See the top of this header.
class DSINFER_SERVING_API Cascade {
public:
    using Outputs = BatchingEngine::Outputs;
    using Callback = BatchingEngine::Callback;

    /// Throws dsinfer::Error invalid_argument when an engine is null, `options` are out of
    /// range (naming the field), or the models do not match: both must have the same inputs
    /// (names and element types) and the same outputs (names, element types, ranks and
    /// non-batch dims where both declare them), each mismatch named in the message; a
    /// built-in rule's output must be a float32 output of rank >= 2.
    Cascade(std::shared_ptr<const BatchingEngine> small,
            std::shared_ptr<const BatchingEngine> large, CascadeOptions options);
    Cascade(Cascade&&) noexcept;
    Cascade& operator=(Cascade&&) noexcept;
    Cascade(const Cascade&) = delete;
    Cascade& operator=(const Cascade&) = delete;
    /// Waits until every submitted request has been answered.
    ~Cascade();

    /// `options`' checks alone (no models): invalid_argument naming the field, else ok.
    static Status validate(const CascadeOptions& options);

    /// Both stages on the calling thread (BatchingEngine::try_run, recorded in each engine's
    /// run_metrics()). Every input must carry the request's rows on dim 0. `options` goes to
    /// both runs (its deadline spans the cascade). Errors: invalid_argument (inputs, or the
    /// rule), and whatever either model's run returns; the outputs are the small model's,
    /// in its order, with the escalated rows replaced by the large model's.
    Status try_run(const std::vector<NamedTensor>& inputs, Outputs& outputs,
                   const RunOptions& options = {}) const noexcept;
    /// try_run(), throwing dsinfer::Error.
    Outputs run(const std::vector<NamedTensor>& inputs, const RunOptions& options = {}) const;

    /// Queues the request on the small model's batcher; from its callback, the escalated rows
    /// are queued on the large model's, and `done` is called once with the merged outputs or
    /// the first error (an immediate rejection: before submit returns; otherwise on a
    /// scheduler thread; exceptions it throws are contained). `options` apply to both stages
    /// (priority, the deadline spanning both, cancellation). An empty `done` is
    /// invalid_argument (thrown). Inputs are shared, not copied: do not modify them until
    /// answered.
    void submit(std::vector<NamedTensor> inputs, Callback done, RequestOptions options = {}) const;
    /// The same, answered through a future (a dsinfer::Error on failure).
    std::future<Outputs> submit(std::vector<NamedTensor> inputs, RequestOptions options = {}) const;

    /// Counts and per-path latencies (CascadeStats).
    CascadeStats stats() const;
    /// Zeroes the stats (meant for quiet moments: records racing with it may survive in part).
    void reset_stats() const noexcept;

    const CascadeOptions& options() const noexcept;
    const std::shared_ptr<const BatchingEngine>& small_model() const noexcept;
    const std::shared_ptr<const BatchingEngine>& large_model() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::serving
