// InferenceEngine::Impl: what an engine owns (engine.cpp). Internal. (Serving — batching,
// adaptive control, metrics — wraps the public engine in src/serving/.)
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/executor.hpp"
#include "core/log.hpp"
#include "runtime/thread_pool.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/quantize.hpp"

namespace dsinfer {

struct InferenceEngine::Impl {
    EngineOptions options;
    /// Where this engine's messages go (EngineOptions::log over the process-wide sink).
    detail::Logger log;
    /// What was loaded, for the start-up line and describe(): the file name, or the graph's.
    std::string model;
    /// options.num_threads, 0 resolved once at compile to the processors available (asking
    /// the system on every run cost a system call per run).
    int run_threads = 1;
    /// Where dsinfer's kernels run their parallel regions (options.wait_policy resolved after
    /// compile: automatic looks at which nodes oneDNN holds).
    detail::ParallelMode parallel{};
    KernelRegistry registry;
    std::shared_ptr<Graph> graph;
    std::shared_ptr<detail::CompiledGraph> compiled;
    std::vector<IOInfo> inputs;
    std::vector<IOInfo> outputs;
    std::unordered_map<std::string, std::size_t> input_index;
    std::vector<std::string> providers;
    OptimizeReport optimization;
    /// EngineOptions::precision int8: what quantize_dynamic did at load.
    std::optional<DynamicQuantizeReport> int8;
    double load_ms = 0.0;
    /// The first run's wall time, published once by the run that claims it.
    mutable std::atomic<bool> first_run_claimed{false};
    mutable std::atomic<double> first_run_ms{0.0};

    /// Checks inputs against the signature (names, dtypes, ranks, static dims, symbols bound
    /// consistently) and puts them in declaration order.
    Status bind_inputs(const std::vector<NamedTensor>& inputs, std::vector<Tensor>& args) const;
    /// The start-up summary at info level (model, nodes per provider, ISA, threads, backends,
    /// weights): once per load, after load_ms and model are set.
    void log_loaded() const noexcept;
    /// "dsinfer pool, spin" / "OpenMP team": where the kernels' regions run, for the start-up
    /// line and describe().
    std::string threads_phrase() const;
    /// Runs bound inputs; outputs in declaration order.
    Status execute(std::vector<Tensor> args, std::vector<NamedTensor>& outputs,
                   const RunOptions& options) const;
};

}  // namespace dsinfer
