// serving::BatchingEngine and serving::ModelRegistry (dsinfer/serving.hpp): the dynamic
// batcher (engine_batcher.cpp), its metrics and the model registry, over InferenceEngine's
// public API only.
#include "dsinfer/serving.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <utility>

#include "dsinfer/memory_pool.hpp"
#include "serving/engine_batcher.hpp"

namespace dsinfer::serving {

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<const InferenceEngine> checked_engine(std::shared_ptr<const InferenceEngine> e) {
    if (e == nullptr)
        throw Error(ErrorCode::invalid_argument, "serving: the InferenceEngine is null");
    return e;
}

}  // namespace

struct BatchingEngine::Impl {
    std::shared_ptr<const InferenceEngine> engine;
    BatchingOptions options;
    /// submit() outcomes (the batcher records them through its observer).
    ServingMetrics metrics;
    /// run() / try_run() outcomes.
    ServingMetrics run_metrics;
    /// Declared last: destroyed first, so queued and running requests are answered while
    /// everything they use is alive.
    std::unique_ptr<detail::EngineBatcher> batcher;
};

Status BatchingEngine::validate(const BatchingOptions& options) {
    return detail::EngineBatcher::validate(options);
}

BatchingEngine::BatchingEngine(std::shared_ptr<const InferenceEngine> engine,
                               BatchingOptions options)
    : impl_(std::make_unique<Impl>()) {
    impl_->engine = checked_engine(std::move(engine));
    throw_if_error(detail::EngineBatcher::validate(options));
    impl_->options = std::move(options);
    const InferenceEngine* e = impl_->engine.get();
    detail::EngineBatcher::Hooks hooks;
    hooks.bind = [e](const std::vector<NamedTensor>& in, std::vector<Tensor>& args) {
        return e->check_inputs(in, &args);
    };
    hooks.run = [e](std::vector<Tensor> args, Outputs& out, const RunOptions& o) {
        // Inputs in declaration order: named back for the public run path.
        std::vector<NamedTensor> named;
        try {
            named.reserve(args.size());
            for (std::size_t i = 0; i < args.size(); ++i)
                named.push_back(NamedTensor{e->inputs()[i].name, std::move(args[i])});
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory during run");
        }
        return e->try_run(named, out, o);
    };
    hooks.inputs = e->inputs();
    hooks.outputs = e->outputs();
    hooks.options = impl_->options;
    hooks.metrics = &impl_->metrics;
    impl_->batcher = std::make_unique<detail::EngineBatcher>(std::move(hooks));
}

BatchingEngine::BatchingEngine(BatchingEngine&&) noexcept = default;
BatchingEngine& BatchingEngine::operator=(BatchingEngine&&) noexcept = default;
BatchingEngine::~BatchingEngine() = default;

Status BatchingEngine::try_run(const std::vector<NamedTensor>& inputs, Outputs& outputs,
                               const RunOptions& options) const noexcept {
    const auto t0 = Clock::now();
    const Status st = impl_->engine->try_run(inputs, outputs, options);
    const auto t1 = Clock::now();
    impl_->run_metrics.record_request(st.code(), std::chrono::nanoseconds(0), t1 - t0, t1 - t0, t1);
    return st;
}

BatchingEngine::Outputs BatchingEngine::run(const std::vector<NamedTensor>& inputs,
                                            const RunOptions& options) const {
    Outputs outputs;
    throw_if_error(try_run(inputs, outputs, options));
    return outputs;
}

std::future<BatchingEngine::Outputs> BatchingEngine::submit(std::vector<NamedTensor> inputs,
                                                            RequestOptions options) const {
    return impl_->batcher->submit(std::move(inputs), std::move(options));
}

void BatchingEngine::submit(std::vector<NamedTensor> inputs, Callback done,
                            RequestOptions options) const {
    impl_->batcher->submit(std::move(inputs), std::move(done), std::move(options));
}

bool BatchingEngine::shutdown(std::chrono::milliseconds timeout) const {
    return impl_->batcher->shutdown(timeout);
}

MetricsSnapshot BatchingEngine::metrics() const {
    const MemoryPoolStats ps = impl_->engine->memory_pool()->stats();
    impl_->metrics.set_memory(ps.bytes_in_use, ps.peak_bytes_in_use);
    return impl_->metrics.snapshot();
}

MetricsSnapshot BatchingEngine::run_metrics() const {
    const MemoryPoolStats ps = impl_->engine->memory_pool()->stats();
    impl_->run_metrics.set_memory(ps.bytes_in_use, ps.peak_bytes_in_use);
    return impl_->run_metrics.snapshot();
}

void BatchingEngine::reset_metrics() const noexcept {
    impl_->metrics.reset();
    impl_->run_metrics.reset();
}

std::string BatchingEngine::batching_info() const { return impl_->batcher->info(); }
BatchingState BatchingEngine::batching_state() const { return impl_->batcher->state(); }
const BatchingOptions& BatchingEngine::options() const noexcept { return impl_->options; }
const std::shared_ptr<const InferenceEngine>& BatchingEngine::engine() const noexcept {
    return impl_->engine;
}

// ---- ModelRegistry ----

struct ModelRegistry::Impl {
    /// Guards `models`. submit() holds it shared while it enqueues (a short, non-blocking
    /// step), so once add/swap/remove holds it exclusively, no submission can still be on its
    /// way into the engine they replace: draining that engine afterwards answers them all.
    mutable std::shared_mutex mu;
    std::map<std::string, std::shared_ptr<BatchingEngine>, std::less<>> models;

    Status unknown(const std::string& name) const {
        std::string known;
        for (const auto& [n, m] : models) known += (known.empty() ? "'" : ", '") + n + "'";
        return Status::error(ErrorCode::invalid_argument, "serving: no model named '", name,
                             "' (served: ", known.empty() ? std::string("none") : known, ")");
    }
};

ModelRegistry::ModelRegistry() : impl_(std::make_unique<Impl>()) {}

ModelRegistry::~ModelRegistry() {
    std::map<std::string, std::shared_ptr<BatchingEngine>, std::less<>> models;
    {
        std::unique_lock lock(impl_->mu);
        models.swap(impl_->models);
    }
    for (auto& [name, m] : models) (void)m->shutdown(std::chrono::milliseconds(0));
}

namespace {

/// A BatchingEngine for the registry; every failure a Status.
StatusOr<std::shared_ptr<BatchingEngine>> make_served(std::shared_ptr<const InferenceEngine> e,
                                                      BatchingOptions options) noexcept {
    DSINFER_CHECK(e != nullptr, ErrorCode::invalid_argument, "serving: the InferenceEngine is null");
    DSINFER_RETURN_IF_ERROR(BatchingEngine::validate(options));
    try {
        return std::make_shared<BatchingEngine>(std::move(e), std::move(options));
    } catch (const std::exception& x) {  // memory, threads
        return Status::error(ErrorCode::resource_exhausted,
                             "serving: cannot start the model's batcher: ", x.what());
    }
}

}  // namespace

Status ModelRegistry::add(const std::string& name, std::shared_ptr<const InferenceEngine> engine,
                          BatchingOptions options) {
    DSINFER_CHECK(!name.empty(), ErrorCode::invalid_argument,
                  "serving: a model name must not be empty");
    auto served = make_served(std::move(engine), std::move(options));
    DSINFER_RETURN_IF_ERROR(served.status());
    std::unique_lock lock(impl_->mu);
    DSINFER_CHECK(impl_->models.find(name) == impl_->models.end(), ErrorCode::invalid_argument,
                  "serving: a model named '", name,
                  "' is already served (swap() replaces its engine)");
    impl_->models.emplace(name, std::move(served).value());
    return Status::ok();
}

StatusOr<std::shared_ptr<BatchingEngine>> ModelRegistry::get(const std::string& name) const {
    std::shared_lock lock(impl_->mu);
    auto it = impl_->models.find(name);
    if (it == impl_->models.end()) return impl_->unknown(name);
    return it->second;
}

Status ModelRegistry::remove(const std::string& name, std::chrono::milliseconds drain) {
    std::shared_ptr<BatchingEngine> old;
    {
        std::unique_lock lock(impl_->mu);
        auto it = impl_->models.find(name);
        if (it == impl_->models.end()) return impl_->unknown(name);
        old = std::move(it->second);
        impl_->models.erase(it);
    }
    (void)old->shutdown(drain);
    return Status::ok();
}

Status ModelRegistry::swap(const std::string& name, std::shared_ptr<const InferenceEngine> engine,
                           std::optional<BatchingOptions> options,
                           std::chrono::milliseconds drain) {
    std::shared_ptr<BatchingEngine> old;
    {
        // Created outside the lock (it starts threads); the options are the current model's
        // unless given, read under the lock.
        std::shared_ptr<BatchingEngine> current;
        {
            std::shared_lock lock(impl_->mu);
            auto it = impl_->models.find(name);
            if (it == impl_->models.end()) return impl_->unknown(name);
            current = it->second;
        }
        auto next = make_served(std::move(engine),
                                options ? std::move(*options) : current->options());
        DSINFER_RETURN_IF_ERROR(next.status());
        std::unique_lock lock(impl_->mu);
        auto it = impl_->models.find(name);
        if (it == impl_->models.end()) return impl_->unknown(name);  // removed meanwhile
        old = std::exchange(it->second, std::move(next).value());
    }
    // No submission can reach `old` any more: drain what it holds.
    (void)old->shutdown(drain);
    return Status::ok();
}

std::vector<std::string> ModelRegistry::models() const {
    std::shared_lock lock(impl_->mu);
    std::vector<std::string> names;
    names.reserve(impl_->models.size());
    for (const auto& [n, m] : impl_->models) names.push_back(n);
    return names;
}

std::string ModelRegistry::prometheus(std::string_view prefix) const {
    std::vector<std::pair<std::string, std::shared_ptr<BatchingEngine>>> models;
    {
        std::shared_lock lock(impl_->mu);
        for (const auto& [name, engine] : impl_->models) models.emplace_back(name, engine);
    }
    std::vector<MetricsSnapshot> snapshots;
    snapshots.reserve(2 * models.size());
    for (const auto& m : models) {
        snapshots.push_back(m.second->metrics());
        snapshots.push_back(m.second->run_metrics());
    }
    std::vector<PrometheusSeries> series;
    for (std::size_t i = 0; i < models.size(); ++i) {
        series.push_back({&snapshots[2 * i], {{"model", models[i].first}, {"path", "submit"}}});
        series.push_back({&snapshots[2 * i + 1], {{"model", models[i].first}, {"path", "run"}}});
    }
    return to_prometheus(series, prefix);
}

std::future<ModelRegistry::Outputs> ModelRegistry::submit(const std::string& name,
                                                          std::vector<NamedTensor> inputs,
                                                          RequestOptions options) const {
    std::shared_lock lock(impl_->mu);
    auto it = impl_->models.find(name);
    if (it == impl_->models.end()) {
        std::promise<Outputs> p;
        p.set_exception(std::make_exception_ptr(Error(impl_->unknown(name))));
        return p.get_future();
    }
    return it->second->submit(std::move(inputs), std::move(options));
}

void ModelRegistry::submit(const std::string& name, std::vector<NamedTensor> inputs,
                           Callback done, RequestOptions options) const {
    if (!done) throw Error(ErrorCode::invalid_argument, "submit: the callback is empty");
    // An outcome decided on this thread while the lock is held (a rejection at submit) is
    // kept and delivered after the lock is released, so `done` may call the registry.
    struct Delivery {
        Callback done;
        std::thread::id submitter = std::this_thread::get_id();
        std::atomic<bool> submitting{true};
        std::optional<StatusOr<Outputs>> early;
    };
    auto d = std::make_shared<Delivery>();
    d->done = std::move(done);
    auto deliver = [](Delivery& x, StatusOr<Outputs> r) {
        try {
            x.done(std::move(r));
        } catch (...) {  // contained, as the scheduler's callbacks are
        }
    };
    {
        std::shared_lock lock(impl_->mu);
        auto it = impl_->models.find(name);
        if (it == impl_->models.end()) {
            d->early.emplace(impl_->unknown(name));
        } else {
            it->second->submit(
                std::move(inputs),
                [d, deliver](StatusOr<Outputs> r) {
                    if (d->submitting.load(std::memory_order_acquire) &&
                        std::this_thread::get_id() == d->submitter) {
                        d->early.emplace(std::move(r));
                        return;
                    }
                    deliver(*d, std::move(r));
                },
                std::move(options));
        }
    }
    d->submitting.store(false, std::memory_order_release);
    if (d->early) deliver(*d, std::move(*d->early));
}

}  // namespace dsinfer::serving
