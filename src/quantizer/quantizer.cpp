// The quantizer room (dsinfer/quantize.hpp): calibration (an engine over the float32 graph with
// an observer on the values to quantize), quantize_static (pre-processing, calibration, the
// QDQ rewrite of src/passes/quantize_static.cpp) and the Quantizer, one entry for every mode.
//
// Room: vocabulary (engine.hpp included), passes.hpp and the passes' quantization helpers
// (passes/quantize_common.hpp), the runtime; never the executor or a backend.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "dsinfer/engine.hpp"
#include "dsinfer/passes.hpp"
#include "dsinfer/quantize.hpp"
#include "passes/quantize_common.hpp"
#include "quantizer/quantizer_internal.hpp"
#include "quantizer/range_histogram.hpp"
#include "runtime/parallel.hpp"

namespace dsinfer {
namespace {

using Clock = std::chrono::steady_clock;

/// Histograms of the values to calibrate, fed by the engine's observer.
class HistogramObserver final : public ValueObserver {
public:
    /// `bins`: histograms for the methods that choose from one (minmax needs min/max only).
    HistogramObserver(const std::vector<std::string>& names, int threads, bool bins)
        : names_(names),
          hist_(names.size(), quantizer::RangeHistogram(bins)),
          other_dtype_(names.size(), 0),
          threads_(threads) {
        for (std::size_t i = 0; i < names_.size(); ++i) index_.emplace(names_[i], i);
    }
    void observe(std::string_view name, const TensorView& value) noexcept override {
        const auto it = index_.find(name);
        if (it == index_.end()) return;
        if (value.dtype != DType::f32) {
            other_dtype_[it->second] = 1;
            return;
        }
        hist_[it->second].add(value.data_unchecked<float>(), static_cast<std::size_t>(value.num_elements()),
                              threads_);
    }
    /// Ranges and histograms do not depend on the elements' order: blocked values are shown.
    bool any_layout() const noexcept override { return true; }
    const quantizer::RangeHistogram& histogram(std::size_t i) const { return hist_[i]; }
    bool other_dtype(std::size_t i) const { return other_dtype_[i] != 0; }

private:
    const std::vector<std::string>& names_;
    std::unordered_map<std::string_view, std::size_t> index_;
    std::vector<quantizer::RangeHistogram> hist_;
    std::vector<char> other_dtype_;
    int threads_;
};

/// invalid_argument naming the batch and input when a float input holds NaN or infinity.
Status check_finite_inputs(const std::vector<NamedTensor>& batch, std::size_t index) {
    for (const NamedTensor& in : batch) {
        const Tensor& t = in.tensor;
        if (t.is_null() || t.dtype() != DType::f32) continue;
        const float* p = t.data_unchecked<float>();
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < t.num_elements(); ++i) bad += std::isfinite(p[i]) ? 0 : 1;
        DSINFER_CHECK(bad == 0, ErrorCode::invalid_argument, "calibration batch ", index,
                      ", input '", in.name, "': ", bad,
                      " NaN or infinite values (calibration data must be finite)");
    }
    return Status::ok();
}

}  // namespace

namespace quantizer {

/// The graph the quantizer calibrates and rewrites: the optimizer's level-1 clean-up and
/// constant folding, and BatchNormalization folded into the Conv before it (standard ONNX
/// operators only, so ONNX Runtime runs the result too).
Status preprocess(Graph& g) {
    OptimizeOptions oo;
    oo.level = 2;
    PassPipeline pipeline;
    const PassPipeline defaults = PassPipeline::defaults();
    for (const auto& pass : defaults.passes())
        if (pass->level() <= 1 || pass->name() == "fuse_conv_batchnorm") pipeline.add(pass);
    oo.passes = std::move(pipeline);
    OptimizeReport report;
    return try_optimize(g, oo, report);
}

LayerRecord record(std::string node, std::string op, std::string precision, std::string reason) {
    LayerRecord r;
    r.node = std::move(node);
    r.op_type = std::move(op);
    r.precision = std::move(precision);
    r.reason = std::move(reason);
    return r;
}

/// Weights of MatMul / Gemm / Conv stored bfloat16 (rounded to nearest even) with a Cast to
/// float32 before their reader: half the bytes in the file; an engine at Precision::bf16 packs
/// them for its bfloat16 GEMMs.
Status store_weights_bf16(Graph& g, QuantizeReport& report,
                          const std::unordered_set<std::string>* only) {
    std::unordered_map<ValueId, ValueId> cast_of;
    const std::size_t num_nodes = g.nodes.size();
    std::vector<Node> added;
    for (std::size_t ni = 0; ni < num_nodes; ++ni) {
        const Node n = g.nodes[ni];
        const bool weighted = n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm" ||
                                                   n.op_type == "Conv");
        if (!weighted || n.inputs.size() < 2) continue;
        if (only != nullptr && only->count(layer_name(g, n)) == 0) continue;
        const ValueId wv = n.inputs[1];
        const Value& val = g.value(wv);
        if (!val.initializer || val.initializer->dtype() != DType::f32 ||
            val.initializer->num_elements() == 0) {
            if (val.initializer || n.op_type == "Conv")
                report.layers.push_back(record(n.name, n.op_type, "fp32",
                                               "weight is not a constant float32 tensor"));
            continue;
        }
        auto it = cast_of.find(wv);
        if (it == cast_of.end()) {
            const Tensor w = *val.initializer;
            const std::string name = val.name;
            DSINFER_ASSIGN_OR_RETURN(Tensor h, Tensor::allocate(DType::bf16, w.shape()));
            const float* src = w.data_unchecked<float>();
            auto* dst = h.data_unchecked<bfloat16>();
            for (std::int64_t i = 0; i < w.num_elements(); ++i) dst[i] = bfloat16(src[i]);
            report.float_weight_bytes += w.num_bytes();
            report.quantized_weight_bytes += h.num_bytes();
            const ValueId hv = g.add_initializer(name + "_bf16", std::move(h));
            const ValueId fv = g.add_value(name + "_f32", DType::f32, g.value(wv).shape);
            Node cast;
            cast.name = name + "_Cast";
            cast.op_type = "Cast";
            cast.inputs = {hv};
            cast.outputs = {fv};
            Attribute to;
            to.kind = AttrKind::i;
            to.i = 1;  // FLOAT
            cast.attributes.emplace_back("to", std::move(to));
            added.push_back(std::move(cast));
            it = cast_of.emplace(wv, fv).first;
        }
        g.nodes[ni].inputs[1] = it->second;
        LayerRecord r = record(n.name.empty() ? g.value(n.outputs[0]).name : n.name, n.op_type,
                               "bf16", "");
        const Value& w = g.value(wv);
        r.weight_bytes_before = w.initializer ? w.initializer->num_bytes() : 0;
        r.weight_bytes_after = r.weight_bytes_before / 2;
        report.layers.push_back(std::move(r));
        ++report.quantized_nodes;
    }
    for (Node& n : added) g.nodes.push_back(std::move(n));
    // The float32 weights nobody reads any more go.
    std::vector<char> read(g.values.size(), 0);
    for (const Node& n : g.nodes)
        for (ValueId v : n.inputs)
            if (v != kNoValue) read[static_cast<std::size_t>(v)] = 1;
    for (ValueId v : g.outputs) read[static_cast<std::size_t>(v)] = 1;
    for (const auto& [w, f] : cast_of)
        if (!read[static_cast<std::size_t>(w)]) g.values[static_cast<std::size_t>(w)].initializer.reset();
    return g.sort_topologically();
}

std::string layer_name(const Graph& g, const Node& n) {
    return n.name.empty() && !n.outputs.empty() && n.outputs[0] != kNoValue
               ? g.value(n.outputs[0]).name
               : n.name;
}

}  // namespace quantizer

using quantizer::preprocess;
using quantizer::record;
using quantizer::store_weights_bf16;

std::string_view to_string(CalibrationMethod m) noexcept {
    switch (m) {
        case CalibrationMethod::minmax: return "minmax";
        case CalibrationMethod::percentile: return "percentile";
        case CalibrationMethod::entropy: return "entropy";
        case CalibrationMethod::mse: return "mse";
    }
    return "?";
}

StatusOr<CalibrationMethod> parse_calibration_method(std::string_view name) {
    for (CalibrationMethod m : {CalibrationMethod::minmax, CalibrationMethod::percentile,
                                CalibrationMethod::entropy, CalibrationMethod::mse})
        if (name == to_string(m)) return m;
    return Status::error(ErrorCode::invalid_argument, "unknown calibration method '", name,
                         "' (expected minmax, percentile, entropy or mse)");
}

std::string_view to_string(QuantizeMode m) noexcept {
    switch (m) {
        case QuantizeMode::none: return "none";
        case QuantizeMode::int8_dynamic: return "int8-dynamic";
        case QuantizeMode::int8_static: return "int8-static";
        case QuantizeMode::int8_weight: return "int8-weight";
        case QuantizeMode::bf16: return "bf16";
        case QuantizeMode::fp16: return "fp16";
        case QuantizeMode::automatic: return "auto";
    }
    return "?";
}

std::string_view to_string(FidelityMetric m) noexcept {
    switch (m) {
        case FidelityMetric::cosine: return "cosine";
        case FidelityMetric::relative_l2: return "relative-l2";
        case FidelityMetric::top1: return "top1";
    }
    return "?";
}

StatusOr<QuantizeMode> parse_quantize_mode(std::string_view name) {
    for (QuantizeMode m : {QuantizeMode::none, QuantizeMode::int8_dynamic, QuantizeMode::int8_static,
                           QuantizeMode::int8_weight, QuantizeMode::bf16, QuantizeMode::fp16,
                           QuantizeMode::automatic})
        if (name == to_string(m)) return m;
    return Status::error(ErrorCode::invalid_argument, "unknown quantization mode '", name,
                         "' (expected none, int8-dynamic, int8-static, int8-weight, bf16, fp16 or auto)");
}

StatusOr<CalibrationTable> calibrate(const Graph& graph, const std::vector<std::string>& values,
                                     CalibrationSource& data, const CalibrationOptions& o) {
    try {
        DSINFER_CHECK(o.percentile > 50.0 && o.percentile <= 100.0, ErrorCode::invalid_argument,
                      "calibrate: the percentile must lie in (50, 100], got ", o.percentile);
        DSINFER_CHECK(!values.empty(), ErrorCode::invalid_argument,
                      "calibrate: no value to calibrate");
        EngineOptions eo;
        eo.num_threads = o.num_threads;
        eo.observed_values = values;  // invalid_argument for a name the graph lacks
        eo.observed_values_any_layout = true;
        const int threads = o.num_threads > 0 ? o.num_threads : detail::default_thread_count();
        StatusOr<InferenceEngine> engine = [&]() -> StatusOr<InferenceEngine> {
            try {
                return InferenceEngine::compile(Graph(graph), eo);
            } catch (const Error& e) {
                return Status(e.code(), "calibrate: " + e.message());
            }
        }();
        if (!engine.is_ok()) return engine.status();
        HistogramObserver observer(values, threads, o.method != CalibrationMethod::minmax);
        RunOptions ro;
        ro.observer = &observer;
        const std::size_t total = o.max_batches > 0 && data.size() > 0
                                      ? std::min(o.max_batches, data.size())
                                      : (o.max_batches > 0 ? 0 : data.size());
        CalibrationTable table;
        table.method = o.method;
        const auto t0 = Clock::now();
        std::vector<NamedTensor> batch, outputs;
        while (o.max_batches == 0 || table.batches < o.max_batches) {
            batch.clear();
            StatusOr<bool> more = data.next(batch);
            if (!more.is_ok())
                return more.status().with_context("calibration batch " +
                                                  std::to_string(table.batches) + ": ");
            if (!*more) break;
            DSINFER_RETURN_IF_ERROR(check_finite_inputs(batch, table.batches));
            // Graph inputs are no node's output: the observer sees them from the batch.
            for (const NamedTensor& in : batch)
                if (!in.tensor.is_null()) observer.observe(in.name, in.tensor.view());
            Status st = engine->try_run(batch, outputs, ro);
            if (!st.is_ok())
                return st.with_context("calibration batch " + std::to_string(table.batches) +
                                       ": ");
            ++table.batches;
            if (o.progress) o.progress("calibration", table.batches, total);
        }
        table.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        DSINFER_CHECK(table.batches > 0, ErrorCode::invalid_argument,
                      "calibrate: the calibration source gave no batch");
        table.ranges.reserve(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
            const quantizer::RangeHistogram& h = observer.histogram(i);
            DSINFER_CHECK(!observer.other_dtype(i), ErrorCode::invalid_argument,
                          "calibrate: value '", values[i], "' is not float32");
            DSINFER_CHECK(h.count() > 0, ErrorCode::invalid_argument, "calibrate: value '",
                          values[i], "' was never computed on the host during calibration");
            DSINFER_CHECK(h.count() > h.nonfinite(), ErrorCode::invalid_argument,
                          "calibrate: every value of '", values[i], "' was NaN or infinite (",
                          h.count(), " seen)");
            TensorRange r;
            r.name = values[i];
            r.min = h.min();
            r.max = h.max();
            r.count = h.count();
            r.nonfinite = h.nonfinite();
            std::tie(r.lo, r.hi) = h.choose(o.method, o.percentile, false);
            r.lo = std::min(r.lo, 0.f);
            r.hi = std::max(r.hi, 0.f);
            table.ranges.push_back(std::move(r));
        }
        return table;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "calibrate: out of memory");
    }
}

StatusOr<StaticQuantizeReport> quantize_static(Graph& graph, CalibrationSource& data,
                                               const StaticQuantizeOptions& o) {
    try {
        if (passes::has_quantized_op(graph)) {
            StaticQuantizeReport report;
            report.already_quantized = true;
            return report;
        }
        Graph work = graph;
        DSINFER_RETURN_IF_ERROR(preprocess(work));
        DSINFER_ASSIGN_OR_RETURN(std::vector<std::string> values, static_quantize_values(work, o));
        DSINFER_CHECK(!values.empty(), ErrorCode::invalid_argument,
                      "quantize_static: the graph has no layer to quantize (no Conv, MatMul or "
                      "Gemm with constant float32 weights, nor any other operator of the list, "
                      "reading a float32 activation)");
        DSINFER_ASSIGN_OR_RETURN(CalibrationTable table, calibrate(work, values, data, o.calibration));
        DSINFER_ASSIGN_OR_RETURN(StaticQuantizeReport report,
                                 apply_static_quantization(work, table, o));
        graph = std::move(work);
        return report;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "quantize_static: out of memory");
    }
}

Quantizer::Quantizer(QuantizerOptions options) : options_(std::move(options)) {}

StatusOr<QuantizeReport> Quantizer::run(Graph& graph, CalibrationSource* data) const {
    try {
        QuantizeReport report;
        report.mode = options_.mode;
        const auto from_static = [&](StaticQuantizeReport&& s) {
            report.already_quantized = s.already_quantized;
            report.layers = std::move(s.layers);
            report.quantized_nodes = s.quantized_nodes;
            report.float_weight_bytes = s.float_weight_bytes;
            report.quantized_weight_bytes = s.int8_weight_bytes;
        };
        switch (options_.mode) {
            case QuantizeMode::none:
                return report;
            case QuantizeMode::int8_dynamic: {
                Graph work = graph;
                // Each candidate's op and weight bytes, by name, from the float graph.
                struct Candidate {
                    std::string op;
                    std::uint64_t bytes = 0, elements = 0, columns = 1;
                };
                std::unordered_map<std::string, Candidate> candidates;
                for (const Node& n : graph.nodes) {
                    if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm") ||
                        n.inputs.size() < 2 || n.outputs.empty() || n.outputs[0] == kNoValue)
                        continue;
                    Candidate c{n.op_type};
                    if (const Value& w = graph.value(n.inputs[1]); w.initializer) {
                        c.bytes = w.initializer->num_bytes();
                        c.elements = static_cast<std::uint64_t>(w.initializer->num_elements());
                        if (options_.dynamic.per_channel && w.initializer->num_dims() == 2)
                            c.columns = static_cast<std::uint64_t>(w.initializer->shape()[1]);
                    }
                    candidates.emplace(n.name.empty() ? graph.value(n.outputs[0]).name : n.name,
                                       std::move(c));
                }
                DSINFER_ASSIGN_OR_RETURN(DynamicQuantizeReport d,
                                         quantize_dynamic(work, options_.dynamic));
                report.already_quantized = d.already_quantized;
                for (std::string& name : d.quantized_nodes) {
                    const auto it = candidates.find(name);
                    LayerRecord r = record(std::move(name),
                                           it == candidates.end() ? "" : it->second.op, "int8", "");
                    if (it != candidates.end()) {
                        r.weight_bytes_before = it->second.bytes;
                        r.weight_bytes_after = it->second.elements + 5 * it->second.columns;
                    }
                    report.layers.push_back(std::move(r));
                }
                // "node 'NAME' (OP): reason"
                for (const std::string& why : d.skipped) {
                    const auto q1 = why.find('\''), q2 = why.find("' (");
                    const auto close = why.find("): ");
                    if (q1 == std::string::npos || q2 == std::string::npos ||
                        close == std::string::npos) {
                        report.layers.push_back(record(why, "", "fp32", ""));
                        continue;
                    }
                    LayerRecord r = record(why.substr(q1 + 1, q2 - q1 - 1),
                                           why.substr(q2 + 3, close - q2 - 3), "fp32",
                                           why.substr(close + 3));
                    if (const auto it = candidates.find(r.node); it != candidates.end())
                        r.weight_bytes_before = r.weight_bytes_after = it->second.bytes;
                    report.layers.push_back(std::move(r));
                }
                report.quantized_nodes = d.matmuls + d.gemms;
                report.float_weight_bytes = d.float_weight_bytes;
                report.quantized_weight_bytes = d.int8_weight_bytes;
                graph = std::move(work);
                return report;
            }
            case QuantizeMode::int8_static: {
                DSINFER_CHECK(data != nullptr, ErrorCode::invalid_argument,
                              "Quantizer: int8-static needs calibration data");
                DSINFER_ASSIGN_OR_RETURN(StaticQuantizeReport s,
                                         quantize_static(graph, *data, options_.int8));
                report.calibration = s.calibration;
                from_static(std::move(s));
                return report;
            }
            case QuantizeMode::int8_weight: {
                Graph work = graph;
                DSINFER_ASSIGN_OR_RETURN(StaticQuantizeReport s,
                                         quantize_weight_only(work, options_.int8));
                from_static(std::move(s));
                graph = std::move(work);
                return report;
            }
            case QuantizeMode::bf16: {
                if (passes::has_quantized_op(graph)) {
                    report.already_quantized = true;
                    return report;
                }
                Graph work = graph;
                DSINFER_RETURN_IF_ERROR(store_weights_bf16(work, report, nullptr));
                graph = std::move(work);
                return report;
            }
            case QuantizeMode::automatic: {
                DSINFER_CHECK(data != nullptr, ErrorCode::invalid_argument,
                              "Quantizer: auto needs calibration data (the accuracy budget is "
                              "measured on it)");
                return quantizer::auto_quantize(graph, *data, options_);
            }
            case QuantizeMode::fp16: {
                if (passes::has_quantized_op(graph)) {
                    report.already_quantized = true;
                    return report;
                }
                Graph work = graph;
                std::uint64_t before = 0;
                for (const Value& v : work.values)
                    if (v.initializer && v.initializer->dtype() == DType::f32)
                        before += v.initializer->num_bytes();
                DSINFER_ASSIGN_OR_RETURN(const std::size_t converted,
                                         convert_float_precision(work, DType::f16));
                std::uint64_t after = 0;
                for (const Value& v : work.values)
                    if (v.initializer && v.initializer->dtype() == DType::f16)
                        after += v.initializer->num_bytes();
                (void)converted;
                report.float_weight_bytes = before;
                report.quantized_weight_bytes = after;
                for (const Node& n : work.nodes) {
                    if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm" &&
                                              n.op_type != "Conv") || n.inputs.size() < 2)
                        continue;
                    LayerRecord r = record(n.name, n.op_type, "fp16", "");
                    if (const Value& w = work.value(n.inputs[1]); w.initializer) {
                        r.weight_bytes_after = w.initializer->num_bytes();
                        r.weight_bytes_before = 2 * r.weight_bytes_after;
                    }
                    report.layers.push_back(std::move(r));
                    ++report.quantized_nodes;
                }
                graph = std::move(work);
                return report;
            }
        }
        return Status(ErrorCode::invalid_argument, "Quantizer: unknown mode");
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "Quantizer: out of memory");
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
}

}  // namespace dsinfer
