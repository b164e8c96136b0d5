// dsinfer/prune.hpp — structured channel pruning: a graph pass that removes whole channels
// (convolution filters, Linear output neurons) and leaves a smaller dense model.
//
// Channels that must be removed together form a *group* (the ops' channel flow,
// src/ops/op_info.hpp): the output channels of a Conv, Gemm or MatMul with a constant weight,
// carried through per-channel ops (BatchNormalization, a bias Add or scale Mul by a constant,
// PRelu), elementwise activations and pooling, joined by residual Adds (every branch of the sum
// is one group: the channels of a ResNet stage are scored and removed together), through a
// depthwise convolution (its filters and `group` follow the channels), a Flatten into a Gemm
// (each channel its block of H x W features), a Concat along the channels (each input keeps
// its own group; what reads the Concat loses the channels of every one) and a Split or Slice of
// them (each output a window of the group: the Split's sizes and the Slice's bounds follow what
// the window keeps, and a window never loses every channel), into the next layers' input
// channels. Attention heads are groups of whole heads: the Reshape that splits Q, K and
// V's channels into [heads, head size] makes the head the unit, the per-head products Q K^T and
// P V join Q, K and V into one group, and the Reshape that merges the heads leads into the
// output projection's rows (each head-count Reshape gets a shape constant of its own). An FFN's
// intermediate neurons are a group like any Linear layer's. A group that reaches anything
// else — a graph output, windows of one group joined again (a gated product of two halves),
// another Reshape, a normalization over channels, a grouped convolution — is left intact and
// the report says why.
//
// Each channel is scored by its producers' weights (L1 or L2 norm of its filter, each
// producer's scores divided by their mean so coupled layers weigh alike) or by |gamma| of the
// BatchNormalizations in its group; `ratio` of every prunable group's channels with the lowest
// scores go (uniform), or `ratio` of all of them under one threshold over the normalized scores
// (global). Kept channels are rounded to a multiple of `channel_multiple` (16 by default:
// widths the fast convolutions take whole). The
// graph's inputs and outputs do not change.
//
//   dsinfer::Graph g = dsinfer::load_onnx("resnet50.onnx");
//   dsinfer::PruneOptions o;
//   o.ratio = 0.4;
//   auto report = dsinfer::prune_channels(g, o).value_or_throw();
//   dsinfer::save_onnx(g, "resnet50_pruned.onnx");
//
// Thread safety: mutates the one graph it is given; on error the graph is left as it was.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/quantize.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

/// How a channel's importance is measured.
enum class PruneCriterion : std::uint8_t {
    l1,        ///< sum of |w| over the channel's filter in each producer (default)
    l2,        ///< Euclidean norm of the filter
    bn_scale,  ///< |gamma| of the BatchNormalizations in the group (L1 where a group has none)
};

/// "l1", "l2", "bn".
DSINFER_API std::string_view to_string(PruneCriterion c) noexcept;
/// invalid_argument for another name.
DSINFER_API StatusOr<PruneCriterion> parse_prune_criterion(std::string_view name);

struct PruneOptions {
    /// Fraction of channels removed, in [0, 1): of every prunable group (uniform), or of all
    /// prunable channels under one threshold (global). 0 changes nothing.
    double ratio = 0.0;
    PruneCriterion criterion = PruneCriterion::l1;
    /// One threshold across groups instead of the same fraction of each.
    bool global = false;
    /// Keep the channels the first weight layer makes when it is a convolution: the stem of a
    /// CNN, whose few channels every later layer builds on. (A first Linear layer, an MLP's
    /// hidden layer or a transformer's first attention, is prunable: name it in `protect` to
    /// keep it.)
    bool protect_first = true;
    /// Keep the channels the last weight layer makes (a classifier's outputs are usually a
    /// graph output, kept anyway; its input features stay prunable).
    bool protect_last = true;
    /// Node names whose output channels are kept.
    std::vector<std::string> protect{};
    /// Kept channels of a group are rounded to the nearest multiple of this (>= 1; at least
    /// one multiple, never above the group's channels). 16, the default, is what oneDNN's
    /// blocked convolutions and AVX-512's float32 lanes take whole: ResNet-50 pruned by 40% ran
    /// 1.3x slower than unpruned with widths such as 39, 77 and 615, whose convolutions have
    /// no fast blocked form. 1 keeps exactly the ratio.
    std::int64_t channel_multiple = 16;
    /// Per-group ratios: a group any of whose producers (weight layers) has this name is
    /// pruned by its own ratio (uniformly, in [0, 1)) instead of `ratio` or the global
    /// threshold. prune_to_target() fills this from its sensitivity allocation.
    std::vector<std::pair<std::string, double>> group_ratios{};
};

/// One dependency group.
struct PruneGroup {
    std::vector<std::string> producers;  ///< the weight layers making its channels
    std::int64_t channels = 0;           ///< before
    std::int64_t kept = 0;               ///< after (== channels when left intact)
    /// Channels per unit: 1, or the head size of attention heads (whole heads are removed).
    std::int64_t unit = 1;
    /// The channels kept, in order (indices before pruning); empty when nothing was removed.
    std::vector<std::int64_t> kept_channels;
    /// The weight layers that read these channels (Conv, Gemm, MatMul): their input channels
    /// shrink with the group, and recovery refits them.
    std::vector<std::string> consumers;
    /// Why it was left intact ("" when pruned, or when the ratio left it whole).
    std::string intact_reason;
};

/// One weight layer (Conv, Gemm, MatMul with a constant weight).
struct PruneLayer {
    std::string node;
    std::string op;
    std::int64_t params_before = 0, params_after = 0;  ///< its weight and bias elements
    double flops_before = 0, flops_after = 0;          ///< per sample (symbolic dims as 1)
};

struct PruneReport {
    std::vector<PruneGroup> groups;
    std::vector<PruneLayer> layers;
    std::int64_t params_before = 0, params_after = 0;  ///< elements of every initializer
    double flops_before = 0, flops_after = 0;          ///< the weight layers', per sample
    std::int64_t prunable_channels = 0;                ///< channels of the prunable groups
    std::int64_t removed_channels = 0;
};

/// Prunes `graph` in place as the options say (file comment). invalid_argument for a ratio
/// outside [0, 1) or NaN, a channel_multiple below 1, a `protect` name no node has, or a graph
/// that is not a DAG; resource_exhausted when memory runs out. Groups that cannot be pruned are
/// reported, not errors.
DSINFER_API StatusOr<PruneReport> prune_channels(Graph& graph, const PruneOptions& options = {});

// ---------------------------------------------------------------------------------------------
// The Pruner: prune_channels plus, with calibration data, a per-layer allocation that meets a
// FLOPs or parameter target, recovery without retraining, and the fidelity of the result.
//
//   auto data = dsinfer::calibration_batches(std::move(batches));   // dsinfer/quantize.hpp
//   dsinfer::PrunerOptions o;
//   o.prune.ratio = 0.3;
//   auto r = dsinfer::Pruner(o).run(graph, data.get()).value_or_throw();
//   // r.before_recovery / r.after_recovery: the outputs against the unpruned model's

/// How the layers after the removed channels are corrected (no retraining).
enum class PruneRecovery : std::uint8_t {
    none,
    /// Each consumer's bias absorbs the mean of what the removed channels contributed.
    bias,
    /// Each consumer (in graph order, each on the already-corrected layers before it) is refit
    /// on its kept input channels by least squares to reproduce the unpruned model's output of
    /// that layer on the calibration data, bias included (ridge-regularized toward the pruned
    /// weights). The default.
    least_squares,
};
/// "none", "bias", "lsq".
DSINFER_API std::string_view to_string(PruneRecovery r) noexcept;
/// invalid_argument for another name.
DSINFER_API StatusOr<PruneRecovery> parse_prune_recovery(std::string_view name);

/// What a target counts.
enum class PruneTargetKind : std::uint8_t { none, flops, params };

struct PrunerOptions {
    /// The pass's options (ratio, criterion, protection, multiple). With a target, `ratio`
    /// and `global` are ignored: the allocation sets group_ratios.
    PruneOptions prune{};
    /// Remove at least this fraction (in (0, 1)) of the weight layers' FLOPs or of the model's
    /// parameters. With calibration data each group's ratio comes from its measured
    /// sensitivity (each group pruned alone at every level of `sensitivity_levels`: the
    /// fidelity lost per FLOP or parameter saved decides, greedily, which group gives up more);
    /// without data, one global threshold over the weight norms, found by bisection.
    PruneTargetKind target = PruneTargetKind::none;
    double target_fraction = 0.0;
    std::vector<double> sensitivity_levels{0.25, 0.5, 0.75};
    /// Needs calibration data; ignored without it (the report says so).
    PruneRecovery recovery = PruneRecovery::least_squares;
    /// Ridge strength of least-squares recovery, toward the pruned weights: lambda = ridge x
    /// (inputs / rows) x the mean diagonal of the inputs' Gram matrix, so it matters where the
    /// calibration rows barely outnumber a layer's inputs and fades as data grows. 0: plain
    /// least squares.
    double ridge = 0.1;
    /// Calibration batches read (0: all). Fidelity is measured on the first `eval_batches`.
    std::size_t max_batches = 0;
    std::size_t eval_batches = 4;
    /// Rows (output positions) of a convolution sampled per batch for its least squares.
    std::int64_t max_rows_per_batch = 4096;
    /// Threads of the engines that observe the activations (0: the processors available).
    int num_threads = 0;
    ProgressCallback progress{};  ///< phases "sensitivity" and "recovery"
};

/// One refit consumer layer.
struct RecoveredLayer {
    std::string node, op;
    std::int64_t inputs = 0;   ///< kept input features (channels x kernel taps)
    std::int64_t rows = 0;     ///< rows of the least squares (samples x positions)
    /// ||y - y_unpruned|| / ||y_unpruned|| of this layer's output on the calibration data,
    /// with the pruned weights and with the recovered ones.
    double error_before = 0.0, error_after = 0.0;
    bool bias = true;          ///< had a bias to compensate (else only the weights refit)
    std::string skipped;       ///< why it was left as pruned ("" when refit)
};

/// Outputs against the unpruned model (worst output of each metric).
struct PruneFidelity {
    bool measured = false;
    double cosine = 1.0, relative_l2 = 0.0, top1 = 1.0;
};

/// One group's sensitivity (target allocation): the fidelity lost pruned alone at each level.
struct PruneSensitivity {
    std::string group;                ///< its first producer
    std::vector<double> levels;       ///< ratios
    std::vector<double> loss;         ///< 1 - cosine at each level
    std::vector<double> saved;        ///< FLOPs (or parameters) saved at each level
    double chosen = 0.0;              ///< the ratio allocated
};

struct PrunerReport {
    PruneReport prune;
    PruneRecovery recovery = PruneRecovery::none;  ///< what ran (none without data)
    std::vector<RecoveredLayer> recovered;
    PruneFidelity before_recovery, after_recovery;
    /// Target allocation.
    PruneTargetKind target = PruneTargetKind::none;
    double target_fraction = 0.0, achieved_fraction = 0.0;
    std::string allocation;  ///< "sensitivity" or "global threshold (no calibration data)"
    std::vector<PruneSensitivity> sensitivity;
    std::size_t evaluations = 0;  ///< whole-model runs over the eval batches
    double seconds = 0.0;
};

/// A composable pruner (the pass plus its calibration driver). Holds only options.
class DSINFER_API Pruner {
public:
    explicit Pruner(PrunerOptions options = {});
    /// Prunes `graph` in place. `data` (optional) drives the target allocation, the recovery
    /// and the fidelity report; without it only the pass runs (a target then uses the global
    /// threshold). invalid_argument for bad options (prune_channels's, a target fraction
    /// outside (0, 1), a sensitivity level outside (0, 1), a negative ridge) or a source that
    /// gives no batch; the source's and the engine's errors as they are. On error the graph
    /// is left as it was.
    StatusOr<PrunerReport> run(Graph& graph, CalibrationSource* data = nullptr) const;
    const PrunerOptions& options() const noexcept { return options_; }

private:
    PrunerOptions options_;
};

}  // namespace dsinfer
