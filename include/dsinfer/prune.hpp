// dsinfer/prune.hpp — structured channel pruning: a graph pass that removes whole channels
// (convolution filters, Linear output neurons) and leaves a smaller dense model.
//
// Channels that must be removed together form a *group* (the ops' channel flow,
// src/ops/op_info.hpp): the output channels of a Conv, Gemm or MatMul with a constant weight,
// carried through per-channel ops (BatchNormalization, a bias Add or scale Mul by a constant,
// PRelu), elementwise activations and pooling, joined by residual Adds (every branch of the sum
// is one group: the channels of a ResNet stage are scored and removed together), through a
// depthwise convolution (its filters and `group` follow the channels) and a Flatten into a
// Gemm (each channel its block of H x W features), into the next layers' input channels. A
// group that reaches anything else — a graph output, a Concat, a Reshape, a normalization
// over channels, a grouped convolution — is left intact and the report says why.
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
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/graph.hpp"
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
    /// Keep the channels the first weight layer makes (the stem of a CNN; with it, nothing of
    /// a two-layer MLP is prunable).
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
};

/// One dependency group.
struct PruneGroup {
    std::vector<std::string> producers;  ///< the weight layers making its channels
    std::int64_t channels = 0;           ///< before
    std::int64_t kept = 0;               ///< after (== channels when left intact)
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

}  // namespace dsinfer
