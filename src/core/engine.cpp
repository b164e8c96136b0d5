#include "dsinfer/engine.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>

#include "core/cpu_isa.hpp"
#include "core/device_runtime.hpp"
#include "core/engine_impl.hpp"
#include "core/executor.hpp"
#include "core/graph_evaluator.hpp"
#include "core/log.hpp"
#include "runtime/parallel.hpp"
#include "runtime/thread_lease.hpp"
#include "dsinfer/backend.hpp"
#include "dsinfer/backends/cpu.hpp"
#include "dsinfer/memory_pool.hpp"
#include "dsinfer/version.hpp"
#include "onnx/onnx_loader.hpp"
#include "passes/precision.hpp"

namespace dsinfer {

namespace {

using Clock = std::chrono::steady_clock;

/// EngineOptions::device: "cpu" -> null (a host engine), else the device backend it names.
StatusOr<std::shared_ptr<const Backend>> device_backend(const std::string& d) {
    if (d == "cpu") return std::shared_ptr<const Backend>();
    std::shared_ptr<const Backend> b = find_backend(d);
    if (b == nullptr || b->device().kind == DeviceKind::cpu)
        return Status::error(ErrorCode::invalid_argument, "EngineOptions::device '", d,
                             "' is not one of cpu, cuda, cuda:N");
    return b;
}

/// EngineOptions::backends as Backend objects (empty: default_backends()): host backends
/// known to this library and available in this build.
StatusOr<std::vector<std::shared_ptr<const Backend>>> host_backends(
    const std::vector<std::string>& names) {
    std::vector<std::shared_ptr<const Backend>> out;
    for (const auto& name : names.empty() ? default_backends() : names) {
        std::shared_ptr<const Backend> b = find_backend(name);
        if (b == nullptr) {
            std::string known;
            for (const auto& k : host_backend_names()) known += (known.empty() ? "" : ", ") + k;
            return Status::error(ErrorCode::invalid_argument, "unknown backend '", name,
                                 "' (known: ", known, ")");
        }
        if (b->device().kind != DeviceKind::cpu)
            return Status::error(ErrorCode::invalid_argument, "backend '", name,
                                 "': choose the GPU with EngineOptions::device = \"", name,
                                 "\" (backends lists the CPU backends used for fallbacks)");
        DSINFER_RETURN_IF_ERROR(b->availability());
        out.push_back(std::move(b));
    }
    return out;
}

/// EngineOptions::disabled_passes: every name must be a default pass's (a typo would leave the
/// pass on without a word).
Status check_disabled_passes(const std::vector<std::string>& names) {
    if (names.empty()) return Status::ok();
    std::vector<std::string> known;
    for (const auto& pass : default_passes()) {
        std::string name(pass->name());
        if (std::find(known.begin(), known.end(), name) == known.end()) known.push_back(name);
    }
    for (const std::string& name : names) {
        if (std::find(known.begin(), known.end(), name) != known.end()) continue;
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        return Status::error(ErrorCode::invalid_argument,
                             "EngineOptions::disabled_passes: no optimizer pass is named '", name,
                             "' (the passes: ", list, ")");
    }
    return Status::ok();
}

Status validate_options(const EngineOptions& o) {
    DSINFER_RETURN_IF_ERROR(detail::check_cpu_isa_cap());
    DSINFER_RETURN_IF_ERROR(check_disabled_passes(o.disabled_passes));
    DSINFER_CHECK(o.num_threads >= 0, ErrorCode::invalid_argument,
                  "EngineOptions::num_threads must be >= 0, got ", o.num_threads);
    DSINFER_CHECK(static_cast<unsigned>(o.wait_policy) <= static_cast<unsigned>(WaitPolicy::block),
                  ErrorCode::invalid_argument, "EngineOptions::wait_policy has no policy numbered ",
                  static_cast<unsigned>(o.wait_policy),
                  " (spin, yield or block)");
    DSINFER_RETURN_IF_ERROR(host_backends(o.backends).status());
    DSINFER_RETURN_IF_ERROR(device_backend(o.device).status());
    // On the CPU, fp16 / bf16 hold the MatMul/Gemm weights at half width (float32 activations
    // and accumulation); tf32 is a tensor-core mode only.
    if (o.precision == Precision::tf32 && o.device == "cpu")
        return Status::error(ErrorCode::invalid_argument,
                             "EngineOptions::precision tf32 needs a CUDA device "
                             "(EngineOptions::device = \"cuda\"); the CPU takes fp32, fp16, "
                             "bf16 or int8");
    if (o.precision == Precision::int8 && o.device != "cpu")
        return Status::error(ErrorCode::invalid_argument,
                             "EngineOptions::precision int8 (dynamic INT8 at load) runs on the "
                             "CPU; device '", o.device, "' takes fp32, tf32, fp16 or bf16");
    DSINFER_CHECK(o.optimization_level >= 0 && o.optimization_level <= 3,
                  ErrorCode::invalid_argument,
                  "EngineOptions::optimization_level must be 0..3, got ", o.optimization_level);
    DSINFER_CHECK(o.limits.max_subgraph_depth >= 0 && o.limits.max_rank >= 0 &&
                      o.limits.max_rank <= kMaxRank,
                  ErrorCode::invalid_argument, "ModelLimits out of range (max_rank must be <= ",
                  kMaxRank, ")");
    return Status::ok();
}

/// Fills the registry from EngineOptions::backends (validated: every name a host backend
/// available here). Each backend's kernels carry its priority; the reference kernels are
/// always registered last as the fall-through.
void register_backends(EngineOptions& o, KernelRegistry& registry) {
    if (o.backends.empty()) o.backends = default_backends();
    std::vector<std::shared_ptr<const Backend>> added;
    auto add = [&](std::shared_ptr<const Backend> b) {
        if (std::find(added.begin(), added.end(), b) != added.end()) return;  // listed twice
        throw_if_error(b->register_kernels(registry));
        added.push_back(std::move(b));
    };
    for (auto& b : host_backends(o.backends).value_or_throw()) add(std::move(b));
    add(reference_backend());
}

/// Adds the application's kernels (EngineOptions::custom_kernels) above every built-in one,
/// in their own priority order.
void add_custom_kernels(const EngineOptions& o, KernelRegistry& registry) {
    if (!o.custom_kernels) return;
    for (const KernelEntry& e : o.custom_kernels->entries())
        registry.add(e.key, e.factory,
                     kPriorityCustom +
                         std::clamp(e.priority, -kPriorityCustomSpan, kPriorityCustomSpan),
                     e.provider);
}

IOInfo io_info(const Value& v) { return IOInfo{v.name, v.dtype, v.shape}; }

/// Options that are valid but change nothing as given: said at warning level, once per load.
void warn_ineffective_options(const EngineOptions& o, const detail::Logger& log) {
    if (!o.shape_buckets && !o.shape_bucket_edges.empty())
        log.log(LogLevel::warning,
                "EngineOptions::shape_bucket_edges are ignored: shape_buckets is false");
    if (!o.shape_buckets && o.transient_shapes)
        log.log(LogLevel::warning,
                "EngineOptions::transient_shapes has no effect: shape_buckets is false (no shape "
                "lies inside a bucket)");
    if (!o.plan_memory && o.shape_buckets && !o.transient_shapes && !o.shape_bucket_edges.empty())
        log.log(LogLevel::warning,
                "EngineOptions::shape_bucket_edges have no effect: plan_memory and "
                "transient_shapes are false");
    if (o.observed_values_any_layout && o.observed_values.empty())
        log.log(LogLevel::warning,
                "EngineOptions::observed_values_any_layout has no effect: no observed_values");
}

/// Where dsinfer's kernels run their regions for this policy. oneDNN's primitives always run on
/// libgomp's team; with spin, an engine that has nodes on them keeps dsinfer's kernels there too
/// (a second pool's helpers would spin on the cores libgomp's threads spin on, and the other way
/// round: libgomp's idle threads spin ~ms after each primitive; dsinfer/threads.hpp).
detail::ParallelMode parallel_mode_for(WaitPolicy policy, const std::vector<std::string>& providers,
                                       const detail::Logger& log) {
    const bool onednn_nodes =
        std::find(providers.begin(), providers.end(), "onednn") != providers.end();
    if (policy == WaitPolicy::spin) return {!onednn_nodes, detail::PoolWait::spin};
    const char* omp = std::getenv("OMP_WAIT_POLICY");
    if (onednn_nodes && (omp == nullptr || (std::string_view(omp) != "passive" &&
                                            std::string_view(omp) != "PASSIVE")))
        log.logf(LogLevel::warning,
                 "EngineOptions::wait_policy {} applies to dsinfer's kernels; this model also runs "
                 "oneDNN primitives, whose OpenMP threads spin after each one unless the process "
                 "starts with OMP_WAIT_POLICY=passive",
                 wait_policy_name(policy));
    return {true, policy == WaitPolicy::yield ? detail::PoolWait::yield : detail::PoolWait::block};
}

/// "12.3 MiB", "4.0 KiB", "512 B".
std::string human_bytes(std::uint64_t b) {
    if (b < 1024) return fmt::format("{} B", b);
    if (b < (std::uint64_t{1} << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
    if (b < (std::uint64_t{1} << 30))
        return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1024.0 * 1024.0));
    return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
}

const char* precision_name(Precision p) {
    switch (p) {
        case Precision::fp32: return "fp32";
        case Precision::tf32: return "tf32";
        case Precision::fp16: return "fp16";
        case Precision::bf16: return "bf16";
        case Precision::int8: return "int8";
    }
    return "?";
}

/// "onednn 120, cpu 2": nodes per provider, in order of first appearance.
std::string provider_counts(const std::vector<std::string>& providers) {
    std::vector<std::pair<std::string, std::size_t>> counts;
    for (const std::string& p : providers) {
        auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == p; });
        if (it == counts.end()) counts.emplace_back(p, 1);
        else ++it->second;
    }
    std::string s;
    for (const auto& [p, n] : counts) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", p, n);
    return s;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

/// The weights as held now, one phrase.
std::string weights_phrase(const WeightMemoryStats& w) {
    const std::uint64_t total = w.graph_bytes + w.packed_bytes + w.derived_bytes;
    std::string s = fmt::format("weights {}", human_bytes(total));
    std::string parts;
    if (w.graph_bytes > 0) parts += fmt::format("graph {}", human_bytes(w.graph_bytes));
    if (w.packed_bytes > 0)
        parts += fmt::format("{}packed {}", parts.empty() ? "" : ", ", human_bytes(w.packed_bytes));
    if (w.derived_bytes > 0)
        parts += fmt::format("{}derived {}", parts.empty() ? "" : ", ", human_bytes(w.derived_bytes));
    if (!parts.empty()) s += " (" + parts + ")";
    return s;
}

std::string dims_string(const Shape& s) { return s.to_string(); }

}  // namespace

std::vector<std::string> default_backends() {
    // Every host backend available here, fastest first, but the reference kernels (the
    // engine's fall-through anyway).
    std::vector<std::string> names;
    for (const auto& name : host_backend_names())
        if (name != reference_backend()->name() && find_backend(name)->available())
            names.push_back(name);
    return names;
}

InferenceEngine::InferenceEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceEngine::InferenceEngine(InferenceEngine&&) noexcept = default;
InferenceEngine& InferenceEngine::operator=(InferenceEngine&&) noexcept = default;
InferenceEngine::~InferenceEngine() = default;

std::string InferenceEngine::Impl::threads_phrase() const {
    std::string out = "wait " + std::string(wait_policy_name(options.wait_policy)) + ": ";
    if (!parallel.own_pool) return out + "OpenMP team";
    static constexpr const char* kWait[] = {"spin", "yield", "block"};
    return out + "dsinfer pool, " + kWait[static_cast<int>(parallel.wait)];
}

void InferenceEngine::Impl::log_loaded() const noexcept {
    if (!log.enabled(LogLevel::info)) return;
    try {  // a message that cannot be made (out of memory) never fails the load
        const std::string device =
            options.device == "cpu" ? std::string() : ", device " + options.device;
        log.logf(LogLevel::info,
                 "dsinfer {}: loaded {} in {:.1f} ms: {} nodes ({}), ISA {} (kernels {}), "
                 "threads {} ({}), backends {}{}, precision {}, {}",
                 version(), model, load_ms, providers.size(), provider_counts(providers),
                 detail::host_cpu_isa(), cpu_kernel_isa(), run_threads, threads_phrase(),
                 join(options.backends, ","), device, precision_name(options.precision),
                 weights_phrase(compiled->weight_memory()));
    } catch (...) {
    }
}

InferenceEngine InferenceEngine::load(const std::filesystem::path& model, EngineOptions options) {
    try {
        const auto t0 = Clock::now();
        throw_if_error(validate_options(options));
        Graph g = detail::read_onnx_model(model, options.limits).value_or_throw();
        InferenceEngine e = build(std::move(g), std::move(options));
        e.impl_->load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        e.impl_->model = model.filename().string();
        e.impl_->log_loaded();
        return e;
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::resource_exhausted, "out of memory while loading the model");
    }
}

InferenceEngine InferenceEngine::compile(Graph graph, EngineOptions options) {
    InferenceEngine e = build(std::move(graph), std::move(options));
    e.impl_->log_loaded();
    return e;
}

InferenceEngine InferenceEngine::build(Graph graph, EngineOptions options) {
    try {
        const auto t0 = Clock::now();
        throw_if_error(validate_options(options));
        auto impl = std::make_unique<Impl>();
        impl->options = std::move(options);
        impl->log = detail::Logger(impl->options.log);
        impl->model = graph.name.empty() ? std::string("an unnamed graph") : "graph '" + graph.name + "'";
        warn_ineffective_options(impl->options, impl->log);
        register_backends(impl->options, impl->registry);
        add_custom_kernels(impl->options, impl->registry);
        throw_if_error(graph.sort_topologically());
        // A float16 / bfloat16 model on a CPU engine computes in float32 on the fast kernels
        // (most ops' only half-width CPU kernels are the reference ones), its interface kept;
        // unless the engine runs the reference kernels alone (the oracle).
        if (impl->options.device == "cpu" &&
            std::any_of(impl->options.backends.begin(), impl->options.backends.end(),
                        [](const std::string& b) { return b != reference_backend()->name(); }))
            (void)detail::widen_half_float_compute(graph, &kernel_evaluator()).value_or_throw();
        // precision int8: a float32 model's MatMul/Gemm layers quantized dynamically at load
        // (ONNX Runtime's dynamic form, which the optimizer fuses onto the INT8 GEMM); a graph
        // that holds quantized operators already is left as it is.
        if (impl->options.precision == Precision::int8)
            impl->int8 = quantize_dynamic(graph).value_or_throw();
        // Values an observer must see stay produced and row-major (Value::observed).
        if (!impl->options.observed_values.empty()) {
            std::unordered_map<std::string_view, std::size_t> by_name;
            for (std::size_t v = 0; v < graph.values.size(); ++v)
                by_name.emplace(graph.values[v].name, v);
            for (const std::string& name : impl->options.observed_values) {
                const auto it = by_name.find(name);
                if (it == by_name.end())
                    throw Error(ErrorCode::invalid_argument,
                                "EngineOptions::observed_values: the graph has no value '" + name +
                                    "'");
                graph.values[it->second].observed = true;
            }
        }
        {
            OptimizeOptions oo;
            oo.level = impl->options.optimization_level;
            oo.disabled_passes = impl->options.disabled_passes;
            // The decoder fusions write operators only the CPU backends run: on a GPU the
            // decomposed RMSNorm, rotary embedding and gated MLP stay on the device's kernels.
            if (impl->options.device != "cpu")
                for (const char* p : {"fuse_rms_norm", "fuse_rotary_embedding", "fuse_gated_mlp"})
                    oo.disabled_passes.emplace_back(p);
            // With application kernels, the optimizer's evaluator (shape annotation, constant
            // folding) has the reference kernels and theirs: over the reference kernels alone a
            // graph with a custom op would not be annotated at all.
            KernelRegistry evaluator_kernels;
            std::optional<detail::KernelEvaluator> evaluator;
            if (impl->options.custom_kernels) {
                throw_if_error(reference_backend()->register_kernels(evaluator_kernels));
                add_custom_kernels(impl->options, evaluator_kernels);
                oo.evaluator = &evaluator.emplace(evaluator_kernels);
            }
            throw_if_error(try_optimize(graph, oo, impl->optimization));
            if (impl->log.enabled(LogLevel::debug)) {
                std::string fired;
                for (const auto& [pass, n] : impl->optimization.fired)
                    fired += fmt::format("{}{} {}", fired.empty() ? "" : ", ", pass, n);
                impl->log.logf(LogLevel::debug, "optimizer (level {}): {} -> {} nodes in {:.1f} ms{}{}",
                               oo.level, impl->optimization.nodes_before,
                               impl->optimization.nodes_after, impl->optimization.ms,
                               fired.empty() ? "" : ": ", fired);
            }
            if (!impl->options.dump_optimized_graph.empty())
                save_onnx(graph, impl->options.dump_optimized_graph);
        }
        const auto device = device_backend(impl->options.device).value_or_throw();
        std::shared_ptr<detail::DeviceRuntime> runtime;
        if (device != nullptr) {
            runtime = device->device_runtime().value_or_throw();
            throw_if_error(device->register_kernels(impl->registry));
            const Precision p = impl->options.precision;
            if (p == Precision::fp16 || p == Precision::bf16)
                (void)convert_float_precision(graph,
                                              p == Precision::fp16 ? DType::f16 : DType::bf16)
                    .value_or_throw();
        }
        impl->graph = std::make_shared<Graph>(std::move(graph));
        detail::CompileOptions co;
        co.device_runtime = runtime;
        co.allow_tf32 = impl->options.precision == Precision::tf32;
        if (device == nullptr && impl->options.precision == Precision::fp16)
            co.weight_precision = DType::f16;
        if (device == nullptr && impl->options.precision == Precision::bf16)
            co.weight_precision = DType::bf16;
        co.cuda_graphs = impl->options.cuda_graphs;
        co.measure_algorithms = impl->options.algo_search == AlgoSearch::measure;
        co.registry = &impl->registry;
        // Kernels may create primitives and pack weights at load: they see the same budget.
        impl->run_threads = impl->options.num_threads > 0 ? impl->options.num_threads
                                                          : detail::default_thread_count();
        detail::ThreadBudget threads(impl->run_threads);
        co.max_subgraph_depth = impl->options.limits.max_subgraph_depth;
        co.blocked_layouts = impl->options.optimization_level >= 3;
        co.observed_any_layout = impl->options.observed_values_any_layout;
        co.memory_pool = impl->options.memory_pool;
        co.plan_memory = impl->options.plan_memory;
        co.shape_buckets = impl->options.shape_buckets;
        co.bucket_edges = impl->options.shape_bucket_edges;
        co.transient_shapes = impl->options.transient_shapes;
        co.serial_small_nodes = impl->options.num_threads == 0;
        co.prepare_threads = impl->run_threads;
        impl->compiled = detail::CompiledGraph::compile(impl->graph, co).value_or_throw();
        for (std::size_t i = 0; i < impl->graph->inputs.size(); ++i) {
            const Value& v = impl->graph->value(impl->graph->inputs[i]);
            impl->inputs.push_back(io_info(v));
            impl->input_index.emplace(v.name, i);
        }
        for (ValueId id : impl->graph->outputs)
            impl->outputs.push_back(io_info(impl->graph->value(id)));
        for (std::size_t i = 0; i < impl->graph->nodes.size(); ++i)
            impl->providers.push_back(impl->compiled->provider(i));
        impl->parallel = parallel_mode_for(impl->options.wait_policy, impl->providers, impl->log);
        detail::release_free_heap_pages();
        impl->load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        return InferenceEngine(std::move(impl));
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::resource_exhausted, "out of memory while compiling the model");
    }
}

Status InferenceEngine::Impl::bind_inputs(const std::vector<NamedTensor>& given,
                                          std::vector<Tensor>& args) const {
    // Names: every input exactly once, nothing unknown. (Nothing here allocates for a valid
    // request of up to 16 inputs: the planned run path counts its allocations, see
    // tests/fault/test_fault_injection.cpp.)
    constexpr std::size_t kInline = 16;
    std::array<const Tensor*, kInline> bound_inline{};
    std::vector<const Tensor*> bound_heap;
    if (inputs.size() > kInline) bound_heap.assign(inputs.size(), nullptr);
    const std::span<const Tensor*> bound =
        inputs.size() > kInline ? std::span<const Tensor*>(bound_heap)
                                : std::span<const Tensor*>(bound_inline.data(), inputs.size());
    std::vector<std::string> unknown, duplicate;
    for (std::size_t gi = 0; gi < given.size(); ++gi) {
        const NamedTensor& nt = given[gi];
        // Inputs given in declaration order need no lookup.
        std::size_t index = gi;
        if (gi >= inputs.size() || nt.name != inputs[gi].name) {
            auto it = input_index.find(nt.name);
            if (it == input_index.end()) {
                unknown.push_back(nt.name);
                continue;
            }
            index = it->second;
        }
        if (bound[index] != nullptr)
            duplicate.push_back(nt.name);
        else
            bound[index] = &nt.tensor;
    }
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < bound.size(); ++i)
        if (bound[i] == nullptr) missing.push_back(inputs[i].name);
    if (!unknown.empty() || !missing.empty() || !duplicate.empty()) {
        auto join = [](const std::vector<std::string>& v) {
            std::string s;
            for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
            return s;
        };
        std::string msg = "input names do not match the model:";
        if (!missing.empty()) msg += " missing " + join(missing) + ";";
        if (!unknown.empty()) msg += " unknown " + join(unknown) + ";";
        if (!duplicate.empty()) msg += " given more than once " + join(duplicate) + ";";
        std::string expected;
        for (const auto& io : inputs) expected += (expected.empty() ? "" : ", ") + io.name;
        return Status(ErrorCode::invalid_argument, msg + " expected: " + expected);
    }
    // Types and shapes against the declared signature; symbolic dims bind consistently.
    // Symbol -> (value, the input that bound it); linear: models have a handful of symbols.
    struct Binding {
        const std::string* symbol;
        std::int64_t value;
        const std::string* input;
    };
    std::array<Binding, kInline> symbols_inline;
    std::vector<Binding> symbols_heap;
    std::size_t num_symbols = 0;
    auto bind_symbol = [&](const std::string& symbol, std::int64_t value,
                           const std::string& input) -> const Binding& {
        Binding* all = symbols_heap.empty() ? symbols_inline.data() : symbols_heap.data();
        for (std::size_t k = 0; k < num_symbols; ++k)
            if (*all[k].symbol == symbol) return all[k];
        if (num_symbols == kInline && symbols_heap.empty())
            symbols_heap.assign(symbols_inline.begin(), symbols_inline.end());
        const Binding b{&symbol, value, &input};
        if (symbols_heap.empty()) {
            symbols_inline[num_symbols] = b;
            return symbols_inline[num_symbols++];
        }
        symbols_heap.push_back(b);
        ++num_symbols;
        return symbols_heap.back();
    };
    args.clear();
    args.reserve(bound.size());
    for (std::size_t i = 0; i < bound.size(); ++i) {
        const IOInfo& io = inputs[i];
        const Tensor& t = *bound[i];
        const auto what = [&io] { return "input '" + io.name + "'"; };
        DSINFER_CHECK(!t.is_null(), ErrorCode::invalid_argument, what(), " is an empty Tensor");
        DSINFER_CHECK(t.device().kind == DeviceKind::cpu, ErrorCode::invalid_argument, what(),
                      " is on ", t.device().to_string(), "; the CPU engine needs host tensors");
        DSINFER_CHECK(t.raw_data() != nullptr || t.num_elements() == 0,
                      ErrorCode::invalid_argument, what(), " has a null data pointer and ",
                      t.num_elements(), " elements");
        if (io.dtype)
            DSINFER_CHECK(t.dtype() == *io.dtype, ErrorCode::invalid_argument, what(),
                          ": expected element type ", dtype_name(*io.dtype), ", got ",
                          dtype_name(t.dtype()));
        if (t.dtype() == DType::boolean) {  // kernels read bools as bool: bytes 0 or 1 only
            const auto* b = static_cast<const std::uint8_t*>(t.raw_data());
            for (std::int64_t k = 0; k < t.num_elements(); ++k)
                DSINFER_CHECK(b[k] <= 1, ErrorCode::invalid_argument, what(), ": bool element ", k,
                              " is stored as byte ", static_cast<int>(b[k]), " (must be 0 or 1)");
        }
        if (io.shape.known) {
            DSINFER_CHECK(t.num_dims() == io.shape.rank(), ErrorCode::invalid_argument, what(),
                          ": expected rank ", io.shape.rank(), " ", io.shape.to_string(),
                          ", got rank ", t.num_dims(), " ", dims_string(t.shape()));
            for (int d = 0; d < io.shape.rank(); ++d) {
                const Dim& dim = io.shape.dims[static_cast<std::size_t>(d)];
                const std::int64_t got = t.shape()[d];
                if (dim.is_static()) {
                    DSINFER_CHECK(got == dim.value, ErrorCode::invalid_argument, what(),
                                  ": dimension ", d, " must be ", dim.value, " (model shape ",
                                  io.shape.to_string(), "), got ", got, " (shape ",
                                  dims_string(t.shape()), ")");
                } else if (!dim.symbol.empty()) {
                    const Binding& b = bind_symbol(dim.symbol, got, io.name);
                    DSINFER_CHECK(b.value == got, ErrorCode::invalid_argument, what(),
                                  ": dimension ", d, " ('", dim.symbol, "') is ", got,
                                  " but input '", *b.input, "' binds '", dim.symbol, "' to ",
                                  b.value);
                }
            }
        }
        args.push_back(t);
    }
    return Status::ok();
}

Status InferenceEngine::Impl::execute(std::vector<Tensor> args, std::vector<NamedTensor>& outputs,
                                      const RunOptions& options) const {
    const auto run_t0 = Clock::now();
    RunControl control;
    if (options.deadline) control.deadline = *options.deadline;
    control.node_ms = options.node_ms;
    control.observer = options.observer;
    control.kv_cache = options.kv_cache;
    control.max_loop_iterations = this->options.limits.max_loop_iterations;
    std::vector<Tensor> outs;
    // The run's threads: num_threads, or fewer where the process budget (dsinfer/threads.hpp)
    // has fewer helpers free now.
    const detail::ThreadLease lease(run_threads);
    detail::ThreadBudget threads(lease.threads());
    const detail::ParallelModeScope mode(parallel);
    DSINFER_RETURN_IF_ERROR(compiled->execute(args, nullptr, control, outs));
    outputs.clear();
    outputs.reserve(outs.size());
    for (std::size_t i = 0; i < outs.size(); ++i) {
        const ValueId id = graph->outputs[i];
        const Value& v = graph->value(id);
        // Never hand out the engine's weights or the caller's own input buffers.
        const bool alias = v.initializer.has_value() ||
                           std::find(graph->inputs.begin(), graph->inputs.end(), id) !=
                               graph->inputs.end();
        outputs.push_back(NamedTensor{v.name, alias ? outs[i].clone() : std::move(outs[i])});
    }
    if (!first_run_claimed.load(std::memory_order_relaxed) && !first_run_claimed.exchange(true))
        first_run_ms.store(std::chrono::duration<double, std::milli>(Clock::now() - run_t0).count());
    return Status::ok();
}

namespace {

/// Runs `f` (returning Status), turning exceptions into a Status.
template <class F>
Status guarded_call(F&& f) noexcept {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory during run");
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "unexpected exception: ", e.what());
    }
}

}  // namespace

Status InferenceEngine::try_run(const std::vector<NamedTensor>& inputs,
                                std::vector<NamedTensor>& outputs,
                                const RunOptions& options) const noexcept {
    const Impl& m = *impl_;
    const Status st = guarded_call([&] {
        std::vector<Tensor> args;
        DSINFER_RETURN_IF_ERROR(m.bind_inputs(inputs, args));
        return m.execute(std::move(args), outputs, options);
    });
    return st;
}

NamedTensors InferenceEngine::run(const std::vector<NamedTensor>& inputs,
                                  const RunOptions& options) const {
    NamedTensors outputs;
    throw_if_error(try_run(inputs, outputs, options));
    return outputs;
}

Status InferenceEngine::check_inputs(const std::vector<NamedTensor>& inputs,
                                     std::vector<Tensor>* ordered) const noexcept {
    return guarded_call([&] {
        std::vector<Tensor> args;
        DSINFER_RETURN_IF_ERROR(impl_->bind_inputs(inputs, args));
        if (ordered != nullptr) *ordered = std::move(args);
        return Status::ok();
    });
}

std::shared_ptr<MemoryPool> InferenceEngine::memory_pool() const {
    return impl_->options.memory_pool ? impl_->options.memory_pool : default_memory_pool();
}

const std::vector<IOInfo>& InferenceEngine::inputs() const noexcept { return impl_->inputs; }
const std::vector<IOInfo>& InferenceEngine::outputs() const noexcept { return impl_->outputs; }
const Graph& InferenceEngine::graph() const noexcept { return *impl_->graph; }
double InferenceEngine::load_ms() const noexcept { return impl_->load_ms; }
double InferenceEngine::first_run_ms() const noexcept { return impl_->first_run_ms.load(); }
const DynamicQuantizeReport* InferenceEngine::int8_report() const noexcept {
    return impl_->int8 ? &*impl_->int8 : nullptr;
}

const OptimizeReport& InferenceEngine::optimization_report() const noexcept {
    return impl_->optimization;
}
MemoryPlanStats InferenceEngine::memory_plan_stats() const {
    return impl_->compiled->memory_plan_stats();
}
const std::vector<std::string>& InferenceEngine::node_providers() const noexcept {
    return impl_->providers;
}
std::vector<NodeDescription> InferenceEngine::node_descriptions() const {
    return impl_->compiled->node_descriptions();
}

std::string InferenceEngine::describe() const {
    const Impl& m = *impl_;
    std::vector<Shape> class_inputs;
    const std::vector<NodeDescription> nodes = m.compiled->node_descriptions(&class_inputs);
    const MemoryPlanStats plan = m.compiled->memory_plan_stats();
    std::string out = fmt::format("dsinfer {}: {}, {} nodes ({})\n", version(), m.model,
                                  nodes.size(), provider_counts(m.providers));
    out += fmt::format("  CPU ISA {} (kernels {}), threads {} ({}), backends {}{}, precision {}, "
                       "optimization level {}\n",
                       detail::host_cpu_isa(), cpu_kernel_isa(), m.run_threads, m.threads_phrase(),
                       join(m.options.backends, ","),
                       m.options.device == "cpu" ? std::string() : ", device " + m.options.device,
                       precision_name(m.options.precision), m.options.optimization_level);
    out += fmt::format("  {}\n", weights_phrase(m.compiled->weight_memory()));
    if (plan.plans_recorded > 0)
        out += fmt::format("  memory plan: arena {}, lower bound {} (ratio {:.2f}), {} values and "
                           "workspaces placed; shape classes cached: {} ({} in all)\n",
                           human_bytes(plan.planned_peak_bytes), human_bytes(plan.lower_bound_bytes),
                           plan.ratio(), plan.planned_values, plan.shape_classes,
                           human_bytes(plan.cached_arena_bytes));
    else
        out += m.options.plan_memory ? "  memory plan: none yet (planned at the first run)\n"
                                     : "  memory plan: off (EngineOptions::plan_memory)\n";
    if (!class_inputs.empty()) {
        std::string shapes;
        for (std::size_t i = 0; i < class_inputs.size() && i < m.inputs.size(); ++i)
            shapes += fmt::format("{}{} {}", shapes.empty() ? "" : ", ", m.inputs[i].name,
                                  class_inputs[i].to_string());
        out += "  described: the most recent input shape, " + shapes + "\n";
    } else {
        out += "  described: before any run (algorithms are chosen at the first run of each "
               "input shape: the providers are shown)\n";
    }
    // One line per node, the name, op, provider and algorithm columns aligned.
    std::size_t wn = 4, wo = 2, wp = 8, wa = 9;
    for (const NodeDescription& d : nodes) {
        wn = std::max(wn, d.name.size());
        wo = std::max(wo, d.op.size());
        wp = std::max(wp, d.provider.size());
        wa = std::max(wa, d.algorithm.size());
    }
    wn = std::min<std::size_t>(wn, 40);
    const std::size_t wi = fmt::formatted_size("{}", nodes.size());
    out += fmt::format("  {:>{}} {:<{}} {:<{}} {:<{}} {:<{}} {}\n", "#", wi, "node", wn, "op", wo,
                       "provider", wp, "algorithm", wa, "inputs -> outputs, workspace");
    auto shapes = [](const std::vector<SymbolicShape>& v) {
        std::string s;
        for (const SymbolicShape& x : v) s += (s.empty() ? "" : " ") + x.to_string();
        return s;
    };
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const NodeDescription& d = nodes[i];
        out += fmt::format("  {:>{}} {:<{}} {:<{}} {:<{}} {:<{}} {} -> {}", i, wi, d.name, wn, d.op,
                           wo, d.provider, wp, d.algorithm, wa, shapes(d.input_shapes),
                           shapes(d.output_shapes));
        if (d.workspace_bytes > 0) out += ", workspace " + human_bytes(d.workspace_bytes);
        out += '\n';
    }
    return out;
}
int InferenceEngine::blocked_layout_nodes() const noexcept {
    return impl_->compiled->blocked_nodes();
}
NodePlacement InferenceEngine::node_placement() const { return impl_->compiled->placement(); }
WeightMemoryStats InferenceEngine::weight_memory() const { return impl_->compiled->weight_memory(); }
std::shared_ptr<WeightStore> InferenceEngine::weight_store() const {
    return impl_->compiled->weight_store();
}

}  // namespace dsinfer
