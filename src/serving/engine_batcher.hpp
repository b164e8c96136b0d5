// EngineBatcher: serving::BatchingEngine::submit()'s dynamic batching (docs/BATCHING.md).
// Internal to the serving room: it reaches the engine only through the hooks BatchingEngine
// builds on InferenceEngine's public API (check_inputs, try_run).
//
// A BatchScheduler (dsinfer/batch_scheduler.hpp) of bound requests. At submit a request's
// inputs are checked like run()'s (a bad one is answered invalid_argument at once) and given a
// batch key: its non-batch dims (group mode), or those without the sequence dim plus the
// length bucket (pad mode). A batch of several requests is concatenated along dim 0 (padded
// along the sequence dim in pad mode), run once and split back per request; when the batched
// run fails, each request is run alone, so a request that fails does so by itself.
//
// The model is batchable when every input and output declares dim 0 with one shared symbol
// (e.g. "batch") and no input is a string tensor; otherwise every request runs alone.
//
// With BatchingOptions::adaptive, an AdaptiveBatchController (dsinfer/adaptive_batching.hpp)
// observes the scheduler next to the metrics and moves its cap and delay within the options.
//
// Threading: submit() is thread-safe; batches run on the scheduler's worker threads.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/adaptive_batching.hpp"
#include "dsinfer/batch_scheduler.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/metrics.hpp"
#include "dsinfer/serving.hpp"

namespace dsinfer::serving::detail {

class EngineBatcher {
public:
    using Outputs = std::vector<NamedTensor>;
    using Callback = std::function<void(StatusOr<Outputs>)>;

    /// What the batcher needs of its engine.
    struct Hooks {
        /// run()'s input checks; args in declaration order (InferenceEngine::check_inputs).
        std::function<Status(const std::vector<NamedTensor>&, std::vector<Tensor>&)> bind;
        /// Runs inputs in declaration order (InferenceEngine::try_run; records no metrics).
        std::function<Status(std::vector<Tensor>, Outputs&, const RunOptions&)> run;
        std::vector<IOInfo> inputs, outputs;
        BatchingOptions options;
        ServingMetrics* metrics = nullptr;
    };

    /// BatchingOptions checks: invalid_argument naming the field.
    static Status validate(const BatchingOptions& options);

    explicit EngineBatcher(Hooks hooks);
    ~EngineBatcher();

    std::future<Outputs> submit(std::vector<NamedTensor> inputs, RequestOptions options);
    void submit(std::vector<NamedTensor> inputs, Callback done, RequestOptions options);
    bool shutdown(std::chrono::milliseconds timeout);
    std::string info() const { return info_; }
    BatchingState state() const {
        const BatchSchedulerOptions o = scheduler_->options();
        const auto st = scheduler_->stats();
        return BatchingState{o.max_batch_size, o.max_queue_delay, st.queued, st.running};
    }

    /// A bound request: inputs in declaration order, rows along dim 0, and (pad mode) its
    /// sequence length.
    struct Request {
        std::vector<Tensor> args;
        std::int64_t rows = 1;
        std::int64_t seq = 0;
    };
    using Scheduler = BatchScheduler<Request, Outputs>;

private:
    /// Binds and keys a request; a non-ok status is answered at once.
    Status prepare(std::vector<NamedTensor>& inputs, const RequestOptions& options, Request& r,
                   SubmitOptions& so) const;
    /// prepare(), recording a refusal in the metrics.
    Status admit(std::vector<NamedTensor>& inputs, const RequestOptions& options, Request& r,
                 SubmitOptions& so) const;
    void run_batch(Scheduler::Batch& batch);
    void run_alone(Scheduler::Batch& batch, std::size_t i);
    /// Concatenates, runs and splits; false (nothing answered) when the batched run failed.
    bool run_together(Scheduler::Batch& batch);

    Hooks hooks_;
    bool batchable_ = false;
    bool pad_ = false;
    int mask_input_ = -1;
    std::vector<char> padded_input_;   ///< per input: dim 1 is the sequence dim (pad mode)
    std::vector<char> sliced_output_;  ///< per output: dim 1 is the sequence dim (pad mode)
    std::string info_;
    std::shared_ptr<AdaptiveBatchController> controller_;  // adaptive only; stopped first
    std::unique_ptr<Scheduler> scheduler_;  // last: stopped first
};

}  // namespace dsinfer::serving::detail
