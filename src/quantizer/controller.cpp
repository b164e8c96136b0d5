// The precision controller (QuantizeMode::automatic, dsinfer/quantize.hpp AutoQuantizeOptions):
// INT8 where the accuracy budget allows, the rest in one float precision.
//
//   1. The candidates are the Conv / MatMul / Gemm layers with constant float32 weights. The
//      INT8 form is static QDQ (calibrated once, every candidate's activations) when the model
//      has convolutions, dynamic otherwise (transformers).
//   2. Reference: the float32 model's outputs on the first eval_batches batches (or the task
//      metric of the float32 model).
//   3. Sensitivity: each candidate alone in INT8, measured on those batches; its float32 time
//      from the engine's per-node profile at optimization level 1 (node names as the model's).
//   4. Order: the layers that lose the most fidelity per millisecond of float32 time come back
//      to float first. Starting from every candidate in INT8, the number k of layers kept float
//      (in that order) is the smallest that meets the budget, found by bisection on measured
//      whole-model fidelity (the metric need not be monotone in k: the bisection's answer is
//      measured, never assumed).
//   5. The float layers share one precision: bfloat16 first when allowed and the CPU has
//      AVX512_BF16 (faster), float32 when bf16 cannot meet the budget.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/quantize.hpp"
#include "passes/quantize_common.hpp"
#include "quantizer/quantizer_internal.hpp"
#include "runtime/fidelity.hpp"

namespace dsinfer::quantizer {
namespace {

struct Candidate {
    std::string name, op;
    std::uint64_t weight_bytes = 0;
    double sensitivity = std::numeric_limits<double>::quiet_NaN();  ///< metric alone in INT8
    double float_ms = 0.0;
    double damage = 0.0;  ///< fidelity lost alone in INT8 (>= 0)
};


bool cpu_has_bf16() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

class Controller {
public:
    Controller(const QuantizerOptions& o, std::vector<std::vector<NamedTensor>> batches)
        : o_(o), a_(o.automatic), batches_(std::move(batches)) {
        eval_count_ = std::min<std::size_t>(std::max<std::size_t>(a_.eval_batches, 1),
                                            batches_.size());
    }

    StatusOr<QuantizeReport> run(Graph& graph) {
        QuantizeReport report;
        report.mode = QuantizeMode::automatic;
        if (passes::has_quantized_op(graph)) {
            report.already_quantized = true;
            return report;
        }
        DSINFER_CHECK(!batches_.empty(), ErrorCode::invalid_argument,
                      "auto: the calibration source gave no batch");
        base_ = graph;
        DSINFER_RETURN_IF_ERROR(preprocess(base_));
        find_candidates();
        DSINFER_CHECK(!cands_.empty(), ErrorCode::invalid_argument,
                      "auto: the graph has no layer to quantize (no Conv, MatMul or Gemm with "
                      "constant float32 weights)");
        static_form_ = std::any_of(cands_.begin(), cands_.end(),
                                   [](const Candidate& c) { return c.op == "Conv"; });
        AutoQuantizeReport ar;
        ar.metric = a_.budget.metric;
        ar.task_metric = static_cast<bool>(a_.budget.task_metric);
        ar.budget = ar.task_metric ? a_.budget.max_drop : a_.budget.threshold;
        ar.int8_form = static_form_ ? "static" : "dynamic";
        if (static_form_) {
            DSINFER_ASSIGN_OR_RETURN(std::vector<std::string> values,
                                     static_quantize_values(base_, o_.int8));
            auto source = calibration_batches(batches_);
            DSINFER_ASSIGN_OR_RETURN(table_, calibrate(base_, values, *source, o_.int8.calibration));
        }
        // The reference: float32 outputs (or task metric) and per-layer float32 times.
        DSINFER_RETURN_IF_ERROR(reference());
        ar.float32_value = ref_task_;
        // Sensitivity of each layer alone in INT8.
        const std::size_t n = cands_.size();
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<char> int8(n, 0);
            int8[i] = 1;
            DSINFER_ASSIGN_OR_RETURN(const double v, evaluate(int8, Precision::fp32));
            cands_[i].sensitivity = v;
            cands_[i].damage = std::max(0.0, loss(v));
            progress("sensitivity", i + 1, n);
        }
        // Revert order: most fidelity lost per float32 millisecond first.
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
            const double px = cands_[x].damage / std::max(cands_[x].float_ms, 1e-3);
            const double py = cands_[y].damage / std::max(cands_[y].float_ms, 1e-3);
            return px > py;
        });
        const auto assignment = [&](std::size_t k) {
            std::vector<char> int8(n, 1);
            for (std::size_t j = 0; j < k; ++j) int8[order[j]] = 0;
            return int8;
        };
        std::vector<Precision> floats;
        if (a_.allow_bf16 && cpu_has_bf16()) floats.push_back(Precision::bf16);
        floats.push_back(Precision::fp32);
        bool found = false;
        std::size_t best_k = n;
        double best_value = 0.0;
        Precision best_p = Precision::fp32;
        bool first = true;
        for (const Precision p : floats) {
            DSINFER_ASSIGN_OR_RETURN(const double v0, evaluate(assignment(0), p));
            if (first) ar.all_int8_value = v0;
            first = false;
            if (meets(v0)) {
                found = true;
                best_k = 0, best_value = v0, best_p = p;
                break;
            }
            DSINFER_ASSIGN_OR_RETURN(const double vn, evaluate(assignment(n), p));
            if (!meets(vn)) {
                if (p == Precision::fp32) best_value = vn, best_p = p, best_k = n;
                continue;
            }
            // Smallest k in (0, n] that meets, by bisection (lo fails, hi meets).
            std::size_t lo = 0, hi = n;
            double hi_value = vn;
            while (hi - lo > 1) {
                const std::size_t mid = lo + (hi - lo) / 2;
                DSINFER_ASSIGN_OR_RETURN(const double v, evaluate(assignment(mid), p));
                if (meets(v)) hi = mid, hi_value = v;
                else lo = mid;
            }
            found = true;
            best_k = hi, best_value = hi_value, best_p = p;
            break;
        }
        // The model.
        const std::vector<char> chosen = assignment(best_k);
        DSINFER_ASSIGN_OR_RETURN(Graph out, build(chosen));
        std::unordered_set<std::string> float_layers;
        for (std::size_t i = 0; i < n; ++i)
            if (!chosen[i]) float_layers.insert(cands_[i].name);
        if (best_p == Precision::bf16 && !float_layers.empty()) {
            QuantizeReport bf;
            DSINFER_RETURN_IF_ERROR(store_weights_bf16(out, bf, &float_layers));
        }
        ar.achieved = best_value;
        ar.met = found;
        ar.float_precision = best_p == Precision::bf16 ? "bf16" : "fp32";
        ar.evaluations = evaluations_;
        // Per-layer table, in graph order, with why.
        std::vector<std::size_t> rank(n);
        for (std::size_t j = 0; j < n; ++j) rank[order[j]] = j + 1;
        for (std::size_t i = 0; i < n; ++i) {
            const Candidate& c = cands_[i];
            LayerRecord r = record(c.name, c.op, chosen[i] ? "int8" : ar.float_precision, "");
            r.sensitivity = c.sensitivity;
            r.float_ms = c.float_ms;
            r.weight_bytes_before = c.weight_bytes;
            if (chosen[i]) {
                r.weight_bytes_after = c.weight_bytes / 4;
                ++ar.int8_layers;
                ++report.quantized_nodes;
            } else {
                r.weight_bytes_after = best_p == Precision::bf16 ? c.weight_bytes / 2 : c.weight_bytes;
                r.reason = "kept float: rank " + std::to_string(rank[i]) + " of " +
                           std::to_string(n) + " in fidelity lost per float32 ms";
                ++ar.float_layers;
            }
            report.float_weight_bytes += r.weight_bytes_before;
            report.quantized_weight_bytes += r.weight_bytes_after;
            report.layers.push_back(std::move(r));
        }
        if (static_form_) report.calibration = table_;
        report.automatic = ar;
        graph = std::move(out);
        return report;
    }

private:
    void find_candidates() {
        for (const Node& n : base_.nodes) {
            if (!n.domain.empty() || n.inputs.size() < 2 ||
                (n.op_type != "Conv" && n.op_type != "MatMul" && n.op_type != "Gemm"))
                continue;
            const Value& w = base_.value(n.inputs[1]);
            if (!w.initializer || w.initializer->dtype() != DType::f32 ||
                w.initializer->num_elements() == 0)
                continue;
            if (n.op_type == "MatMul" && w.initializer->num_dims() != 2) continue;
            Candidate c;
            c.name = layer_name(base_, n);
            c.op = n.op_type;
            c.weight_bytes = w.initializer->num_bytes();
            cands_.push_back(std::move(c));
        }
    }

    void progress(std::string_view phase, std::size_t done, std::size_t total) const {
        if (o_.int8.calibration.progress) o_.int8.calibration.progress(phase, done, total);
    }

    /// The model with the candidates flagged in `int8` quantized (the others float32).
    StatusOr<Graph> build(const std::vector<char>& int8) const {
        Graph g = base_;
        if (static_form_) {
            StaticQuantizeOptions so = o_.int8;
            for (std::size_t i = 0; i < cands_.size(); ++i)
                if (!int8[i]) so.exclude.push_back(cands_[i].name);
            DSINFER_ASSIGN_OR_RETURN(StaticQuantizeReport r, apply_static_quantization(g, table_, so));
            (void)r;
        } else {
            DynamicQuantizeOptions d = o_.dynamic;
            for (std::size_t i = 0; i < cands_.size(); ++i)
                if (!int8[i]) d.exclude.push_back(cands_[i].name);
            DSINFER_ASSIGN_OR_RETURN(DynamicQuantizeReport r, quantize_dynamic(g, d));
            (void)r;
        }
        return g;
    }

    EngineOptions engine_options(Precision p) const {
        EngineOptions eo;
        eo.num_threads = o_.int8.calibration.num_threads;
        eo.precision = p;
        return eo;
    }

    static StatusOr<InferenceEngine> compile(Graph g, const EngineOptions& eo) {
        try {
            return InferenceEngine::compile(std::move(g), eo);
        } catch (const Error& e) {
            return Status(e.code(), "auto: " + e.message());
        }
    }

    Status reference() {
        // Outputs of the float32 model, and each layer's float32 time at level 1 (names kept).
        EngineOptions eo = engine_options(Precision::fp32);
        eo.optimization_level = 1;
        DSINFER_ASSIGN_OR_RETURN(InferenceEngine e, compile(base_, eo));
        for (std::size_t b = 0; b < eval_count_; ++b) {
            std::vector<NamedTensor> outs;
            DSINFER_RETURN_IF_ERROR(e.try_run(batches_[b], outs));
            ref_.push_back(std::move(outs));
        }
        std::vector<NamedTensor> warm;
        DSINFER_RETURN_IF_ERROR(e.try_run(batches_[0], warm));
        std::vector<double> ms;
        RunOptions ro;
        ro.node_ms = &ms;
        std::vector<NamedTensor> outs;
        for (int r = 0; r < std::max(1, a_.timing_runs); ++r)
            DSINFER_RETURN_IF_ERROR(e.try_run(batches_[0], outs, ro));
        std::map<std::string, double> by_name;
        const Graph& cg = e.graph();
        for (std::size_t i = 0; i < cg.nodes.size() && i < ms.size(); ++i)
            by_name[layer_name(cg, cg.nodes[i])] += ms[i] / std::max(1, a_.timing_runs);
        for (Candidate& c : cands_) {
            const auto it = by_name.find(c.name);
            c.float_ms = it == by_name.end() ? 0.0 : it->second;
        }
        if (a_.budget.task_metric) {
            DSINFER_ASSIGN_OR_RETURN(InferenceEngine full, compile(base_, engine_options(Precision::fp32)));
            DSINFER_ASSIGN_OR_RETURN(ref_task_, a_.budget.task_metric(full));
        }
        return Status::ok();
    }

    /// The budget's metric of the model with `int8` layers quantized, float ones at `p`.
    StatusOr<double> evaluate(const std::vector<char>& int8, Precision p) {
        ++evaluations_;
        DSINFER_ASSIGN_OR_RETURN(Graph g, build(int8));
        DSINFER_ASSIGN_OR_RETURN(InferenceEngine e, compile(std::move(g), engine_options(p)));
        if (a_.budget.task_metric) {
            StatusOr<double> v = a_.budget.task_metric(e);
            if (!v.is_ok()) return v.status().with_context("auto: the task metric: ");
            return *v;
        }
        std::vector<detail::OutputSums> sums;
        for (std::size_t b = 0; b < eval_count_; ++b) {
            std::vector<NamedTensor> outs;
            DSINFER_RETURN_IF_ERROR(e.try_run(batches_[b], outs));
            if (sums.size() < outs.size()) sums.resize(outs.size());
            for (std::size_t k = 0; k < outs.size() && k < ref_[b].size(); ++k)
                sums[k].add(outs[k].tensor, ref_[b][k].tensor);
        }
        // The worst output counts.
        return detail::worst_fidelity(sums, a_.budget.metric);
    }

    /// Fidelity lost (>= 0 means worse than float32).
    double loss(double v) const {
        if (a_.budget.task_metric) return ref_task_ - v;
        return a_.budget.metric == FidelityMetric::relative_l2 ? v : 1.0 - v;
    }
    bool meets(double v) const {
        if (a_.budget.task_metric) return ref_task_ - v <= a_.budget.max_drop;
        return a_.budget.metric == FidelityMetric::relative_l2 ? v <= a_.budget.threshold
                                                                : v >= a_.budget.threshold;
    }

    const QuantizerOptions& o_;
    const AutoQuantizeOptions& a_;
    std::vector<std::vector<NamedTensor>> batches_;
    std::size_t eval_count_ = 0;
    Graph base_;
    std::vector<Candidate> cands_;
    bool static_form_ = false;
    CalibrationTable table_;
    std::vector<std::vector<NamedTensor>> ref_;
    double ref_task_ = 0.0;
    std::size_t evaluations_ = 0;
};

}  // namespace

StatusOr<QuantizeReport> auto_quantize(Graph& graph, CalibrationSource& data,
                                       const QuantizerOptions& options) {
    try {
        const AccuracyBudget& b = options.automatic.budget;
        if (!b.task_metric) {
            const bool ok = b.metric == FidelityMetric::relative_l2
                                ? b.threshold >= 0.0 && std::isfinite(b.threshold)
                                : b.threshold > -1.0 && b.threshold <= 1.0;
            DSINFER_CHECK(ok, ErrorCode::invalid_argument, "auto: the ", to_string(b.metric),
                          " budget ", b.threshold, " is out of range");
        } else {
            DSINFER_CHECK(b.max_drop >= 0.0 && std::isfinite(b.max_drop),
                          ErrorCode::invalid_argument, "auto: max_drop must be finite and >= 0, got ",
                          b.max_drop);
        }
        // Every batch is read once: calibration needs all of them, the budget the first ones.
        std::vector<std::vector<NamedTensor>> batches;
        const std::size_t cap = options.int8.calibration.max_batches;
        std::vector<NamedTensor> batch;
        while (cap == 0 || batches.size() < cap) {
            batch.clear();
            StatusOr<bool> more = data.next(batch);
            if (!more.is_ok())
                return more.status().with_context("calibration batch " +
                                                  std::to_string(batches.size()) + ": ");
            if (!*more) break;
            batches.push_back(batch);
        }
        Controller c(options, std::move(batches));
        return c.run(graph);
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "auto: out of memory");
    }
}

}  // namespace dsinfer::quantizer
