#include "serving/engine_batcher.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/fnv.hpp"

namespace dsinfer::serving::detail {
namespace {

using std::int64_t;

/// Feeds the scheduler's outcomes to the engine's ServingMetrics.
class MetricsObserver final : public SchedulerObserver {
public:
    explicit MetricsObserver(ServingMetrics& m) : m_(m) {}
    void on_request_done(ErrorCode code, std::chrono::nanoseconds queue,
                         std::chrono::nanoseconds compute,
                         std::chrono::nanoseconds total) noexcept override {
        m_.record_request(code, queue, compute, total);
    }
    void on_batch(std::size_t requests, std::size_t items,
                  std::chrono::nanoseconds compute) noexcept override {
        m_.record_batch(requests, items, compute);
    }

private:
    ServingMetrics& m_;
};

/// Passes each observation to several observers in order.
class ObserverChain final : public SchedulerObserver {
public:
    explicit ObserverChain(std::vector<std::shared_ptr<SchedulerObserver>> observers)
        : observers_(std::move(observers)) {}
    void on_request_done(ErrorCode code, std::chrono::nanoseconds queue,
                         std::chrono::nanoseconds compute,
                         std::chrono::nanoseconds total) noexcept override {
        for (const auto& o : observers_) o->on_request_done(code, queue, compute, total);
    }
    void on_batch(std::size_t requests, std::size_t items,
                  std::chrono::nanoseconds compute) noexcept override {
        for (const auto& o : observers_) o->on_batch(requests, items, compute);
    }

private:
    std::vector<std::shared_ptr<SchedulerObserver>> observers_;
};

BatchSchedulerOptions scheduler_options(const BatchingOptions& o, bool batchable) {
    BatchSchedulerOptions s;
    s.max_batch_size = batchable ? o.max_batch_size : 1;
    s.max_queue_delay = batchable ? o.max_queue_delay : std::chrono::microseconds(0);
    if (batchable) s.preferred_batch_sizes = o.preferred_batch_sizes;
    s.priority_levels = o.priority_levels;
    s.max_queue_size = o.max_queue_size;
    s.num_workers = o.num_workers;
    return s;
}

/// The symbol of dim `axis` of a declared shape, "" when static, unnamed or absent.
std::string dim_symbol(const IOInfo& io, int axis) {
    if (!io.shape.known || io.shape.rank() <= axis) return {};
    const Dim& d = io.shape.dims[static_cast<std::size_t>(axis)];
    return d.is_static() ? std::string() : d.symbol;
}

/// Elements of one row of `t` past its first `skip` dims.
int64_t inner_elements(const Shape& s, int skip) {
    int64_t n = 1;
    for (int d = skip; d < s.rank(); ++d) n *= s[d];
    return n;
}

}  // namespace

Status EngineBatcher::validate(const BatchingOptions& o) {
    DSINFER_RETURN_IF_ERROR(
        dsinfer::detail::validate_batch_scheduler_options(scheduler_options(o, true))
            .with_context("BatchingOptions: "));
    DSINFER_CHECK(o.pad_bucket >= 0, ErrorCode::invalid_argument,
                  "BatchingOptions::pad_bucket must be >= 0, got ", o.pad_bucket);
    DSINFER_CHECK(!o.adaptive || o.p99_target_ms > 0.0, ErrorCode::invalid_argument,
                  "BatchingOptions::adaptive needs p99_target_ms > 0, got ",
                  o.p99_target_ms);
    return Status::ok();
}

EngineBatcher::EngineBatcher(Hooks hooks) : hooks_(std::move(hooks)) {
    const auto& ins = hooks_.inputs;
    const auto& outs = hooks_.outputs;
    const BatchingOptions& o = hooks_.options;
    std::string why;
    const std::string symbol = ins.empty() ? std::string() : dim_symbol(ins[0], 0);
    if (ins.empty()) why = "the model has no inputs";
    else if (symbol.empty())
        why = "input '" + ins[0].name + "' does not declare dim 0 as a named symbol";
    for (const IOInfo& io : ins) {
        if (!why.empty()) break;
        if (!io.dtype || *io.dtype == DType::string)
            why = "input '" + io.name + "' is not a numeric tensor of declared type";
        else if (dim_symbol(io, 0) != symbol)
            why = "input '" + io.name + "' does not have dim 0 '" + symbol + "'";
    }
    for (const IOInfo& io : outs) {
        if (!why.empty()) break;
        if (dim_symbol(io, 0) != symbol)
            why = "output '" + io.name + "' does not have dim 0 '" + symbol + "'";
        else if (io.dtype && *io.dtype == DType::string)
            why = "output '" + io.name + "' is a string tensor";
    }
    batchable_ = why.empty();
    if (!batchable_) {
        info_ = "requests run alone: " + why;
    } else {
        info_ = "batch dim '" + symbol + "' on every input and output";
        if (o.ragged == BatchingOptions::Ragged::group) {
            info_ += "; requests of different non-batch shapes run in different batches";
        } else {
            std::string pad_why;
            const std::string mask = o.mask_input.empty() ? "attention_mask" : o.mask_input;
            for (std::size_t i = 0; i < ins.size(); ++i)
                if (ins[i].name == mask) mask_input_ = static_cast<int>(i);
            std::string seq;
            if (mask_input_ < 0) {
                pad_why = "no input named '" + mask + "'";
            } else {
                const IOInfo& m = ins[static_cast<std::size_t>(mask_input_)];
                seq = dim_symbol(m, 1);
                if (m.shape.rank() != 2 || seq.empty() || seq == symbol)
                    pad_why = "mask input '" + mask + "' is not [" + symbol + ", <sequence symbol>]";
            }
            auto classify = [&](const std::vector<IOInfo>& ios, std::vector<char>& flags,
                                const char* kind) {
                flags.assign(ios.size(), 0);
                for (std::size_t i = 0; i < ios.size() && pad_why.empty(); ++i)
                    for (int a = 1; a < ios[i].shape.rank(); ++a) {
                        if (dim_symbol(ios[i], a) != seq) continue;
                        if (a == 1) flags[i] = 1;
                        else pad_why = std::string(kind) + " '" + ios[i].name +
                                       "' has the sequence dim '" + seq + "' at axis " +
                                       std::to_string(a) + " (only axis 1 is padded/cut)";
                    }
            };
            if (pad_why.empty()) classify(ins, padded_input_, "input");
            if (pad_why.empty()) classify(outs, sliced_output_, "output");
            pad_ = pad_why.empty();
            if (pad_) {
                info_ += "; sequence dim '" + seq + "' padded to the longest in a batch";
                if (o.pad_bucket > 0)
                    info_ += " (lengths batched within buckets of " +
                             std::to_string(o.pad_bucket) + ")";
            } else {
                info_ += "; padding is off (" + pad_why +
                         "): requests of different non-batch shapes run in different batches";
            }
        }
    }
    BatchSchedulerOptions so = scheduler_options(o, batchable_);
    std::vector<std::shared_ptr<SchedulerObserver>> observers;
    if (hooks_.metrics != nullptr)
        observers.push_back(std::make_shared<MetricsObserver>(*hooks_.metrics));
    if (o.adaptive && batchable_) {
        // Starts at the full cap (throughput is never limited at the start) and no delay (the
        // lowest latency); the controller adds delay only while it pays (docs/BATCHING.md).
        AdaptiveBatchingOptions ao;
        ao.max_batch_size = o.max_batch_size;
        ao.max_queue_delay = o.max_queue_delay;
        ao.p99_target = std::chrono::nanoseconds(
            std::max<long long>(1, std::llround(std::min(o.p99_target_ms, 1e12) * 1e6)));
        ao.num_workers = o.num_workers;
        controller_ = std::make_shared<AdaptiveBatchController>(
            ao, [this](std::size_t n) { scheduler_->set_max_batch_size(n); },
            [this](std::chrono::microseconds d) { scheduler_->set_max_queue_delay(d); });
        const AdaptiveBatchState start = controller_->state();
        so.max_batch_size = start.max_batch_size;
        so.max_queue_delay = start.max_queue_delay;
        observers.push_back(controller_);
        std::string target;
        dsinfer::detail::metrics::append_number(target, o.p99_target_ms);
        info_ += "; adaptive: p99 target " + target + " ms, cap 1.." +
                 std::to_string(o.max_batch_size) + ", delay 0.." +
                 std::to_string(o.max_queue_delay.count()) + " us (starts at cap " +
                 std::to_string(start.max_batch_size) + ", delay " +
                 std::to_string(start.max_queue_delay.count()) + " us)";
    } else if (o.adaptive) {
        info_ += "; adaptive batching is off: requests run alone";
    }
    if (observers.size() == 1)
        so.observer = observers.front();
    else if (observers.size() > 1)
        so.observer = std::make_shared<ObserverChain>(std::move(observers));
    scheduler_ = std::make_unique<Scheduler>([this](Scheduler::Batch& b) { run_batch(b); },
                                             std::move(so));
}

EngineBatcher::~EngineBatcher() {
    if (controller_) controller_->stop();  // no setter calls while the scheduler goes away
}

Status EngineBatcher::prepare(std::vector<NamedTensor>& inputs, const RequestOptions& options,
                              Request& r, SubmitOptions& so) const {
    DSINFER_RETURN_IF_ERROR(hooks_.bind(inputs, r.args));
    inputs.clear();  // the bound tensors share the buffers
    so.priority = options.priority;
    so.deadline = options.deadline;
    so.cancel = options.cancel;
    if (!batchable_) return Status::ok();
    r.rows = r.args[0].shape()[0];
    std::uint64_t key = dsinfer::detail::kFnvOffset;
    for (std::size_t i = 0; i < r.args.size(); ++i) {
        const Shape& s = r.args[i].shape();
        dsinfer::detail::fnv_mix(key, static_cast<std::uint64_t>(s.rank()));
        for (int d = 1; d < s.rank(); ++d)
            dsinfer::detail::fnv_mix(key, pad_ && d == 1 && padded_input_[i]
                                              ? ~std::uint64_t{0}
                                              : static_cast<std::uint64_t>(s[d]));
    }
    if (pad_) {
        r.seq = r.args[static_cast<std::size_t>(mask_input_)].shape()[1];
        const int64_t b = hooks_.options.pad_bucket;
        dsinfer::detail::fnv_mix(key, b > 0 ? static_cast<std::uint64_t>((r.seq + b - 1) / b) : 0);
    }
    so.batch_key = key;
    // A request larger than a batch runs as a batch of its own.
    so.size = static_cast<std::size_t>(
        std::clamp<int64_t>(r.rows, 1, static_cast<int64_t>(hooks_.options.max_batch_size)));
    return Status::ok();
}

Status EngineBatcher::admit(std::vector<NamedTensor>& inputs, const RequestOptions& options,
                            Request& r, SubmitOptions& so) const {
    Status st = prepare(inputs, options, r, so);
    if (!st.is_ok() && hooks_.metrics != nullptr)
        hooks_.metrics->record_request(st.code(), {}, {}, {});
    return st;
}

std::future<EngineBatcher::Outputs> EngineBatcher::submit(std::vector<NamedTensor> inputs,
                                                          RequestOptions options) {
    Request r;
    SubmitOptions so;
    if (Status st = admit(inputs, options, r, so); !st.is_ok()) {
        std::promise<Outputs> p;
        p.set_exception(std::make_exception_ptr(Error(st)));
        return p.get_future();
    }
    return scheduler_->submit(std::move(r), std::move(so));
}

void EngineBatcher::submit(std::vector<NamedTensor> inputs, Callback done,
                           RequestOptions options) {
    if (!done) throw Error(ErrorCode::invalid_argument, "submit: the callback is empty");
    Request r;
    SubmitOptions so;
    if (Status st = admit(inputs, options, r, so); !st.is_ok()) {
        try {
            done(std::move(st));
        } catch (...) {  // contained, as the scheduler's callbacks are
        }
        return;
    }
    scheduler_->submit(std::move(r), std::move(done), std::move(so));
}

bool EngineBatcher::shutdown(std::chrono::milliseconds timeout) {
    return scheduler_->shutdown(timeout);
}

void EngineBatcher::run_alone(Scheduler::Batch& batch, std::size_t i) {
    RunOptions ro;
    ro.deadline = batch.options(i).deadline;
    Outputs out;
    const Status st = hooks_.run(batch.request(i).args, out, ro);
    if (st.is_ok()) batch.set_result(i, std::move(out));
    else batch.set_error(i, st);
}

void EngineBatcher::run_batch(Scheduler::Batch& batch) {
    try {
        if (batch.size() > 1 && run_together(batch)) return;
        for (std::size_t i = 0; i < batch.size(); ++i) run_alone(batch, i);
    } catch (const std::bad_alloc&) {
        for (std::size_t i = 0; i < batch.size(); ++i)
            batch.set_error(i, Status(ErrorCode::resource_exhausted,
                                      "out of memory batching the request"));
    }
}

bool EngineBatcher::run_together(Scheduler::Batch& batch) {
    const std::size_t n = batch.size();
    const Request& r0 = batch.request(0);
    const std::size_t num_in = r0.args.size();
    auto padded = [&](std::size_t j) { return pad_ && padded_input_[j] != 0; };
    // Same non-batch dims (the key is a hash: check), except the padded sequence dim.
    int64_t total = 0, seq_max = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const Request& r = batch.request(i);
        for (std::size_t j = 0; j < num_in; ++j) {
            const Shape& a = r.args[j].shape();
            const Shape& b = r0.args[j].shape();
            if (a.rank() != b.rank()) return false;
            for (int d = 1; d < a.rank(); ++d)
                if (a[d] != b[d] && !(d == 1 && padded(j))) return false;
        }
        total += r.rows;
        seq_max = std::max(seq_max, r.seq);
    }
    // Concatenate along dim 0 (zero-padding the sequence dim).
    std::vector<Tensor> args(num_in);
    for (std::size_t j = 0; j < num_in; ++j) {
        const Tensor& t0 = r0.args[j];
        std::vector<int64_t> dims = t0.shape().to_vector();
        dims[0] = total;
        if (padded(j)) dims[1] = seq_max;
        const Shape shape = Shape::make(dims).value();
        args[j] = padded(j) ? Tensor::zeros(t0.dtype(), shape) : Tensor::empty(t0.dtype(), shape);
        const std::size_t esz = dtype_size(t0.dtype());
        auto* dst = static_cast<unsigned char*>(args[j].raw_data());
        int64_t row0 = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const Request& r = batch.request(i);
            const Tensor& src = r.args[j];
            if (padded(j)) {
                const int64_t inner = inner_elements(src.shape(), 2);
                const auto run = static_cast<std::size_t>(r.seq * inner) * esz;
                const auto stride = static_cast<std::size_t>(seq_max * inner) * esz;
                for (int64_t row = 0; row < r.rows; ++row)
                    std::memcpy(dst + static_cast<std::size_t>(row0 + row) * stride,
                                static_cast<const unsigned char*>(src.raw_data()) +
                                    static_cast<std::size_t>(row) * run,
                                run);
            } else if (src.num_bytes() > 0) {
                std::memcpy(dst + static_cast<std::size_t>(row0) * (src.num_bytes() /
                                                                    static_cast<std::size_t>(r.rows)),
                            src.raw_data(), src.num_bytes());
            }
            row0 += r.rows;
        }
    }
    Outputs out;
    if (!hooks_.run(std::move(args), out, RunOptions{}).is_ok()) return false;
    // Split back: every output must carry the batch on dim 0 (and the padded length on dim 1).
    for (std::size_t o = 0; o < out.size(); ++o) {
        const Tensor& y = out[o].tensor;
        if (y.num_dims() < 1 || y.shape()[0] != total || y.dtype() == DType::string) return false;
        if (pad_ && sliced_output_[o] && (y.num_dims() < 2 || y.shape()[1] != seq_max))
            return false;
    }
    int64_t row0 = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const Request& r = batch.request(i);
        Outputs res;
        res.reserve(out.size());
        for (std::size_t o = 0; o < out.size(); ++o) {
            const Tensor& y = out[o].tensor;
            const bool cut = pad_ && sliced_output_[o] != 0;
            std::vector<int64_t> dims = y.shape().to_vector();
            dims[0] = r.rows;
            if (cut) dims[1] = r.seq;
            Tensor t = Tensor::empty(y.dtype(), Shape::make(dims).value());
            const std::size_t esz = dtype_size(y.dtype());
            const auto* src = static_cast<const unsigned char*>(y.raw_data());
            auto* dst = static_cast<unsigned char*>(t.raw_data());
            if (cut) {
                const int64_t inner = inner_elements(y.shape(), 2);
                const auto run = static_cast<std::size_t>(r.seq * inner) * esz;
                const auto stride = static_cast<std::size_t>(seq_max * inner) * esz;
                for (int64_t row = 0; row < r.rows; ++row)
                    std::memcpy(dst + static_cast<std::size_t>(row) * run,
                                src + static_cast<std::size_t>(row0 + row) * stride, run);
            } else if (t.num_bytes() > 0) {
                const std::size_t row_bytes = t.num_bytes() / static_cast<std::size_t>(r.rows);
                std::memcpy(dst, src + static_cast<std::size_t>(row0) * row_bytes, t.num_bytes());
            }
            res.push_back(NamedTensor{out[o].name, std::move(t)});
        }
        batch.set_result(i, std::move(res));
        row0 += r.rows;
    }
    return true;
}

}  // namespace dsinfer::serving::detail
