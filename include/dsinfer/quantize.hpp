// Quantization of a float32 graph (the quantizer's entry points; Step 10 adds calibration).
//
// quantize_dynamic rewrites the Linear layers of a float32 graph into ONNX Runtime's
// dynamic-quantization form (what onnxruntime.quantization.quantize_dynamic writes): for every
// MatMul whose B is a constant float32 matrix, and every Gemm (transA 0, alpha 1, beta 1) whose
// B is one,
//
//   x --DynamicQuantizeLinear--> (x_q u8, x_scale, x_zero_point)    one per activation tensor,
//                                                                      shared by its readers
//   MatMulInteger(x_q, W_q s8 [K, N], x_zero_point, W_zero_point) -> Cast(float)
//       -> Mul(., Mul(x_scale, W_scale)) [-> Add(., C)]              the layer's output
//
// with W quantized symmetrically to [-127, 127] (zero point 0; ONNX Runtime's QInt8 default),
// per tensor or per output column, rounding half to even. The graph stays standard ONNX (opset
// >= 11); the engine's optimizer then fuses each layer into com.dsinfer DynamicQuantizeMatMul /
// MatMulIntegerToFloat on dsinfer's INT8 GEMM (docs/OPTIMIZER.md). A graph that already holds
// quantized operators is left as it is (quantized once, by whoever made it).
//
//   dsinfer::Graph g = dsinfer::load_onnx("bert.onnx");
//   auto report = dsinfer::quantize_dynamic(g).value_or_throw();
//   auto engine = dsinfer::InferenceEngine::compile(std::move(g));
//
// Thread safety: mutates the one graph it is given.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer {

class InferenceEngine;  // dsinfer/engine.hpp

/// What quantize_dynamic quantizes and how.
struct DynamicQuantizeOptions {
    /// One scale per output column (N) instead of one per weight.
    bool per_channel = false;
    bool matmul = true;  ///< quantize MatMul with a constant B
    bool gemm = true;    ///< quantize Gemm with a constant B (transA 0, alpha 1, beta 1)
    /// Weights with fewer elements stay float32 (tiny layers gain nothing).
    std::int64_t min_weight_elements = 0;
    /// Node names (or output names) that stay float32.
    std::vector<std::string> exclude{};
};

/// What quantize_dynamic did.
struct DynamicQuantizeReport {
    bool already_quantized = false;   ///< the graph held quantized operators: nothing changed
    std::size_t matmuls = 0;          ///< MatMul nodes quantized
    std::size_t gemms = 0;            ///< Gemm nodes quantized
    std::size_t activations = 0;      ///< DynamicQuantizeLinear nodes added
    std::uint64_t float_weight_bytes = 0;  ///< float32 bytes of the weights replaced
    std::uint64_t int8_weight_bytes = 0;   ///< bytes of their int8 forms (scales included)
    /// Why candidate nodes stayed float32: "<node>: <reason>", one per node.
    std::vector<std::string> skipped{};
    /// The nodes quantized (node name, or output name when unnamed), in graph order.
    std::vector<std::string> quantized_nodes{};
};

/// Rewrites `graph` into the dynamic-quantization form above. invalid_argument for an unsorted
/// or unlinked graph; resource_exhausted when memory runs out.
DSINFER_API StatusOr<DynamicQuantizeReport> quantize_dynamic(Graph& graph,
                                                              const DynamicQuantizeOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Static INT8 (Step 10): calibration, then ONNX Runtime's QDQ form.
//
//   dsinfer::Graph g = dsinfer::load_onnx("resnet50.onnx");
//   auto data = dsinfer::calibration_batches(std::move(batches));   // or your own source
//   dsinfer::StaticQuantizeOptions o;
//   o.calibration.method = dsinfer::CalibrationMethod::entropy;
//   auto report = dsinfer::quantize_static(g, *data, o).value_or_throw();
//   dsinfer::save_onnx(g, "resnet50_int8.onnx");                    // ONNX Runtime runs it too
//
// The rewrite follows onnxruntime.quantization.quantize_static(QuantFormat.QDQ): every
// quantized activation tensor T gets QuantizeLinear -> DequantizeLinear once, right after its
// producer, read by every consumer; weights are stored 8-bit with a DequantizeLinear; Conv /
// Gemm biases int32 at scale x_scale * w_scale. The engine's fuse_qdq pass turns each island
// into an INT8 kernel (docs/OPTIMIZER.md "QDQ").

/// How a tensor's range is chosen from what calibration observed.
enum class CalibrationMethod : std::uint8_t {
    minmax,      ///< the smallest and largest value seen
    percentile,  ///< clip both tails at CalibrationOptions::percentile (of the signed values)
    entropy,     ///< the clip threshold minimising the KL divergence of the 8-bit histogram
    mse,         ///< the clip range minimising the mean squared quantization error
};
/// "minmax", "percentile", "entropy", "mse".
DSINFER_API std::string_view to_string(CalibrationMethod m) noexcept;
/// invalid_argument for another name.
DSINFER_API StatusOr<CalibrationMethod> parse_calibration_method(std::string_view name);

/// Progress of a long phase: its name ("calibration", "sensitivity"), steps done, steps in all
/// (0 when the source does not know its length). Called on the calling thread after each step.
using ProgressCallback =
    std::function<void(std::string_view phase, std::size_t done, std::size_t total)>;

/// Calibration data: batches of model inputs (each a full set of the graph's inputs, by name).
class DSINFER_API CalibrationSource {
public:
    virtual ~CalibrationSource() = default;
    /// Number of batches when known (progress and ETA), 0 otherwise.
    virtual std::size_t size() const { return 0; }
    /// The next batch into `batch` and true, or false at the end. An error ends calibration
    /// with that status.
    virtual StatusOr<bool> next(std::vector<NamedTensor>& batch) = 0;
};
/// A source over batches in memory. Each batch is moved out by next(), so its memory is freed
/// once the caller drops it.
DSINFER_API std::unique_ptr<CalibrationSource> calibration_batches(
    std::vector<std::vector<NamedTensor>> batches);
/// A source over a callback (`next` as CalibrationSource::next; `size` as size()). An exception
/// the callback throws becomes next()'s Status (a dsinfer::Error keeps its code; bad_alloc is
/// resource_exhausted, anything else invalid_argument); an empty callback is invalid_argument.
DSINFER_API std::unique_ptr<CalibrationSource> calibration_callback(
    std::function<StatusOr<bool>(std::vector<NamedTensor>&)> next, std::size_t size = 0);

struct CalibrationOptions {
    CalibrationMethod method = CalibrationMethod::minmax;
    /// The percentile method's level, in (50, 100]: 99.999 keeps all but 1e-5 of each tail.
    double percentile = 99.999;
    /// Stop after this many batches (0: the whole source).
    std::size_t max_batches = 0;
    /// Threads of the calibration runs and the histograms (0: the processors available).
    int num_threads = 0;
    ProgressCallback progress{};
};

/// What calibration saw of one tensor and the range it chose.
struct TensorRange {
    std::string name;
    float min = 0.f, max = 0.f;  ///< over every finite value seen
    float lo = 0.f, hi = 0.f;    ///< the chosen range (lo <= 0 <= hi)
    std::uint64_t count = 0;     ///< values seen
    std::uint64_t nonfinite = 0; ///< NaN / infinities seen (left out of the range)
};

struct CalibrationTable {
    CalibrationMethod method = CalibrationMethod::minmax;
    std::vector<TensorRange> ranges;  ///< in the order the values were asked for
    std::size_t batches = 0;
    double seconds = 0.0;             ///< wall time of the calibration runs
    const TensorRange* find(std::string_view name) const noexcept {
        for (const TensorRange& r : ranges)
            if (r.name == name) return &r;
        return nullptr;
    }
};

/// Runs the float32 `graph` over `data` on a CPU engine and returns the range of each named
/// value, observed through RunOptions::observer (the graph is not edited: the values are kept
/// visible through the optimizer's fusions, EngineOptions::observed_values). Errors:
/// invalid_argument for an empty source, a batch whose inputs do not match the graph (the
/// engine's message, naming the input and batch), a value name the graph lacks, a value never
/// seen or seen with no finite element.
DSINFER_API StatusOr<CalibrationTable> calibrate(const Graph& graph,
                                                 const std::vector<std::string>& values,
                                                 CalibrationSource& data,
                                                 const CalibrationOptions& options = {});

/// What quantize_static quantizes and how.
struct StaticQuantizeOptions {
    /// Weights: one scale per output channel (s8 symmetric, zero point 0), else one per tensor.
    bool per_channel = true;
    /// Activations: s8 symmetric (zero point 0) instead of u8 asymmetric.
    bool symmetric_activations = false;
    /// Node names (or output names) that stay float32.
    std::vector<std::string> exclude{};
    /// Operator types to quantize; empty = the defaults: Conv, MatMul (constant B), Gemm
    /// (constant B), Add, Mul, MaxPool, GlobalAveragePool, Concat, and the data movement
    /// between them (Flatten, Reshape, Transpose, Squeeze, Unsqueeze), which share their
    /// input's parameters. Operators without weights are quantized only inside an INT8 chain:
    /// when some input comes from a quantized layer (float regions get no Q/DQ pairs).
    std::vector<std::string> op_types{};
    /// Graph outputs stay float32 (the last layer's product is dequantized).
    bool keep_float_outputs = true;
    CalibrationOptions calibration{};
};

/// One layer's outcome.
struct LayerRecord {
    std::string node;        ///< node name (output name when unnamed)
    std::string op_type;
    std::string precision;   ///< "int8", "bf16", "fp16" or "fp32"
    std::string reason;      ///< why it stayed at higher precision; empty when quantized
    std::uint64_t weight_bytes_before = 0, weight_bytes_after = 0;
    /// automatic: the metric with this layer alone in INT8 (NaN when not measured) and its
    /// measured float32 time per run (ms).
    double sensitivity = std::numeric_limits<double>::quiet_NaN();
    double float_ms = 0.0;
};

/// What quantize_static did.
struct StaticQuantizeReport {
    bool already_quantized = false;   ///< the graph held quantized operators: nothing changed
    CalibrationTable calibration;     ///< ranges (before the shared-parameter groups merged)
    std::vector<LayerRecord> layers;  ///< every candidate node, in graph order
    std::size_t quantized_nodes = 0;
    std::size_t quantized_tensors = 0;  ///< QuantizeLinear -> DequantizeLinear pairs added
    std::uint64_t float_weight_bytes = 0, int8_weight_bytes = 0;
};

/// The tensors quantize_static would calibrate on `graph` with `options` (activations read or
/// written by a quantized node), in graph order. For callers that calibrate themselves.
DSINFER_API StatusOr<std::vector<std::string>> static_quantize_values(
    const Graph& graph, const StaticQuantizeOptions& options = {});

/// Rewrites `graph` into QDQ with the ranges of `table` (every value static_quantize_values
/// names must be in it: invalid_argument otherwise). Part of the passes (no engine needed).
DSINFER_API StatusOr<StaticQuantizeReport> apply_static_quantization(
    Graph& graph, const CalibrationTable& table, const StaticQuantizeOptions& options = {});

/// static_quantize_values + calibrate + apply_static_quantization. The graph is first
/// cleaned up as the optimizer's level 1 does and BatchNormalization folded into the Conv
/// before it, so that what is calibrated is what is quantized. invalid_argument when the
/// graph has no quantizable layer.
DSINFER_API StatusOr<StaticQuantizeReport> quantize_static(Graph& graph, CalibrationSource& data,
                                                           const StaticQuantizeOptions& options = {});

/// Weight-only INT8 (memory-bound layers): each MatMul/Gemm/Conv with a constant float32
/// weight reads it through DequantizeLinear of an s8 copy (per output channel by default), so
/// the file holds a quarter of the bytes; activations stay float32.
DSINFER_API StatusOr<StaticQuantizeReport> quantize_weight_only(
    Graph& graph, const StaticQuantizeOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Calibration data from files (ds-convert --calibration).

/// Batches from a folder, checked against the graph's inputs (names, element types, ranks,
/// static dims). Two layouts:
///   DIR/<batch>/<input>.{pb,npy} or DIR/<batch>/input_<i>.{pb,npy}: one subfolder per batch
///       (taken in name order; ONNX's test_data_set_N/input_<i>.pb layout), one file per input;
///   DIR/<file>.{pb,npy}: a model with one input, one batch per file (name order).
/// Name order is natural: digit runs compare as numbers (set_2 before set_10), then bytes.
/// A file stem naming a graph input gives that input; otherwise input_<i> gives the i-th fed
/// input (graph inputs in declaration order, initializer-backed ones excluded). Ignored: names
/// starting with '.', .onnx files directly in DIR (a model beside its data) and output_<i>
/// files in a batch folder (ONNX test data's expected outputs); any other file or folder is an
/// error naming it, so that a typo never drops data silently.
/// Files are ONNX TensorProto (.pb) or NumPy arrays (.npy 1.0/2.0/3.0: little-endian, C order,
/// bool, 8- to 64-bit integers, float16/32/64). Element types must match the graph's, except
/// that float64 data for a float32 input is converted (numpy's default dtype; a finite value
/// beyond float32's range is invalid_argument). Symbolic dims take any value, the same one
/// across the inputs of a batch. Errors name the file: invalid_argument for an empty folder, a
/// missing input, a wrong dtype/rank/dim, a malformed file; io_error when the folder is missing
/// or a file cannot be read. The folder structure is checked by this call (size() is the batch
/// count); files are read lazily, one batch per next().
DSINFER_API StatusOr<std::unique_ptr<CalibrationSource>> calibration_folder(
    const std::filesystem::path& dir, const Graph& graph);
/// Batches of `batch_size` rows from a CSV file of numbers, one sample per line, for a graph
/// with one float32 input of shape [batch, N]: a line of N + 1 values starts with a label,
/// which is skipped (the digits CSV); each value is multiplied by `scale`. invalid_argument
/// naming the line for a bad number or width, or a graph of another form.
/// Values are comma-separated decimal or scientific numbers (spaces around them, "inf" and
/// "nan" allowed); a label is any non-empty text; every line has as many values as the first;
/// blank lines are skipped; no header line; CRLF and a UTF-8 BOM are accepted. The whole file
/// is validated by this call (size() is the batch count), then read batch by batch. The last
/// batch may be short; when the model fixes the batch dim, `batch_size` must equal it and the
/// samples past the last full batch are left out. invalid_argument also for batch_size <= 0, a
/// non-finite scale, a file without samples or a value out of float32 range; io_error when
/// the file cannot be read.
DSINFER_API StatusOr<std::unique_ptr<CalibrationSource>> calibration_csv(
    const std::filesystem::path& file, const Graph& graph, std::int64_t batch_size = 32,
    float scale = 1.f);

// ---------------------------------------------------------------------------------------------
// The Quantizer: one entry for every mode (ds-convert --quantize, EngineOptions).

enum class QuantizeMode : std::uint8_t {
    none,          ///< nothing changes
    int8_dynamic,  ///< quantize_dynamic: MatMul/Gemm weights s8, activations per run (transformers)
    int8_static,   ///< quantize_static: calibrated QDQ (CNNs); needs a CalibrationSource
    int8_weight,   ///< quantize_weight_only: s8 weights through DequantizeLinear, float compute
    bf16,          ///< weights stored bfloat16 (a Cast to float32 before their readers)
    fp16,          ///< the whole model float16 (convert_float_precision), interface float32
    automatic,     ///< the precision controller: INT8 where the accuracy budget allows
};
/// "none", "int8-dynamic", "int8-static", "int8-weight", "bf16", "fp16", "auto".
DSINFER_API std::string_view to_string(QuantizeMode m) noexcept;
/// Accepts the names above; invalid_argument listing them for another.
DSINFER_API StatusOr<QuantizeMode> parse_quantize_mode(std::string_view name);

/// The default fidelity metrics of the precision controller, against the float32 model's
/// outputs on the calibration batches (every float output; the worst of them counts).
enum class FidelityMetric : std::uint8_t {
    cosine,       ///< cosine similarity of the whole outputs; budget: at least `threshold`
    relative_l2,  ///< ||y - y_fp32|| / ||y_fp32||; budget: at most `threshold`
    top1,         ///< fraction of rows (last axis) whose argmax agrees; budget: at least
};
/// "cosine", "relative-l2", "top1".
DSINFER_API std::string_view to_string(FidelityMetric m) noexcept;

/// What the precision controller must keep.
struct AccuracyBudget {
    FidelityMetric metric = FidelityMetric::cosine;
    double threshold = 0.999;
    /// A task metric instead (higher is better, e.g. accuracy on labelled data), computed by
    /// the caller on an engine of the candidate model; the budget is then
    /// task_metric(float32) - task_metric(candidate) <= max_drop.
    std::function<StatusOr<double>(const InferenceEngine&)> task_metric{};
    double max_drop = 0.005;
};

/// QuantizeMode::automatic.
///
/// The controller (1) measures each candidate layer's sensitivity: the model with that layer
/// alone in INT8 (static QDQ when the model has convolutions, else dynamic) against the float32
/// model on the calibration batches; (2) measures each layer's float32 time on this machine
/// (the engine's per-node profile); (3) keeps in float the layers that cost the most accuracy
/// per millisecond saved, choosing how many by bisection on the measured budget of the whole
/// mixed model; (4) the float layers share one precision (the CPU engine's precision is per
/// engine): bfloat16 when the machine computes it natively (AVX512_BF16) and the budget holds,
/// else float32. If no mix meets the budget the best one found is returned, with
/// AutoQuantizeReport::met false.
struct AutoQuantizeOptions {
    AccuracyBudget budget{};
    /// Batches (of the calibration source) the budget is measured on; the first ones.
    std::size_t eval_batches = 4;
    /// Allow bfloat16 for the float layers.
    bool allow_bf16 = true;
    /// Timed runs per float32 profile.
    int timing_runs = 3;
};

/// What the controller decided.
struct AutoQuantizeReport {
    FidelityMetric metric = FidelityMetric::cosine;
    bool task_metric = false;
    double budget = 0.0;           ///< threshold, or max_drop for a task metric
    double float32_value = 0.0;    ///< the task metric of the float32 model (task metric only)
    double all_int8_value = 0.0;   ///< the metric with every candidate layer in INT8
    double achieved = 0.0;         ///< the metric of the returned model
    bool met = false;
    std::string int8_form;         ///< "static" or "dynamic"
    std::string float_precision;   ///< "fp32" or "bf16": run the model at this precision
    std::size_t int8_layers = 0, float_layers = 0;
    std::size_t evaluations = 0;   ///< whole-model evaluations made
};

struct QuantizerOptions {
    QuantizeMode mode = QuantizeMode::int8_dynamic;
    StaticQuantizeOptions int8{};       ///< int8_static and int8_weight (and automatic's static form)
    DynamicQuantizeOptions dynamic{};   ///< int8_dynamic (and automatic's dynamic form)
    AutoQuantizeOptions automatic{};    ///< automatic
};

/// What a Quantizer did, whatever the mode.
struct QuantizeReport {
    QuantizeMode mode = QuantizeMode::none;
    bool already_quantized = false;      ///< the graph held quantized operators: unchanged
    std::vector<LayerRecord> layers;     ///< every candidate node, in graph order
    std::optional<CalibrationTable> calibration;  ///< int8_static, automatic (static form)
    std::optional<AutoQuantizeReport> automatic;  ///< automatic
    std::size_t quantized_nodes = 0;
    std::uint64_t float_weight_bytes = 0;      ///< bytes of the weights that were replaced
    std::uint64_t quantized_weight_bytes = 0;  ///< bytes of their new forms
};

/// A composable quantizer: the graph pass of its mode plus, for int8_static, the calibration
/// driver. Holds only options; run() may be called on several graphs (not concurrently on one).
class DSINFER_API Quantizer {
public:
    explicit Quantizer(QuantizerOptions options = {});
    /// Quantizes `graph` in place. `data` is needed by int8_static and automatic
    /// (invalid_argument without it) and ignored otherwise. On error the graph is left as it
    /// was. automatic: the mixed model's float layers are stored at the chosen float precision
    /// (bf16: weights bfloat16 + Cast), and report.automatic says how to run it.
    StatusOr<QuantizeReport> run(Graph& graph, CalibrationSource* data = nullptr) const;
    const QuantizerOptions& options() const noexcept { return options_; }

private:
    QuantizerOptions options_;
};

}  // namespace dsinfer
