// The reductions' attributes and axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare), one definition for the
// reference, fast and CUDA kernels: keepdims, noop_with_empty_axes, axes from the attribute or
// (from the opset that made it one) the input, and which dims a set of axes folds.
// Header-only, vocabulary headers only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::detail {

struct ReduceAttrs {
    bool keepdims = true;
    bool noop_with_empty_axes = false;
    bool axes_from_input = false;    ///< axes is input 1 (else the attribute, in `axes`)
    std::vector<std::int64_t> axes;  ///< the attribute's axes, unnormalized
};

/// The opset from which a reduction takes axes as an input: ReduceSum 13, the others 18.
inline int reduce_axes_input_opset(bool reduce_sum) noexcept { return reduce_sum ? 13 : 18; }

/// Reads and checks a reduction's attributes (invalid_model): keepdims and noop_with_empty_axes
/// are 0 or 1, and axes comes as the attribute or the input the node's `opset` allows
/// (`has_axes_input`: input 1 is given). For a node outside a kernel factory (the ops' shape
/// rules, src/ops/op_info.cpp).
inline StatusOr<ReduceAttrs> parse_reduce_attrs(const Node& node, std::int64_t opset,
                                                bool has_axes_input, bool reduce_sum) {
    ReduceAttrs a;
    DSINFER_ASSIGN_OR_RETURN(const std::int64_t keepdims,
                             node.attr_or<std::int64_t>("keepdims", 1));
    DSINFER_ASSIGN_OR_RETURN(const std::int64_t noop,
                             node.attr_or<std::int64_t>("noop_with_empty_axes", 0));
    a.axes_from_input = opset >= reduce_axes_input_opset(reduce_sum);
    if (a.axes_from_input) {
        if (node.has_attr("axes"))
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'axes' is not allowed at opset ", opset,
                                 "; axes is an input");
    } else {
        DSINFER_ASSIGN_OR_RETURN(a.axes, node.attr_or<std::vector<std::int64_t>>("axes", {}));
        if (has_axes_input)
            return Status::error(ErrorCode::invalid_model, "input 'axes' is not allowed at opset ",
                                 opset, "; use the 'axes' attribute");
    }
    if (keepdims != 0 && keepdims != 1)
        return Status::error(ErrorCode::invalid_model, "attribute 'keepdims' must be 0 or 1, got ",
                             keepdims);
    if (noop != 0 && noop != 1)
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'noop_with_empty_axes' must be 0 or 1, got ", noop);
    a.keepdims = keepdims != 0;
    a.noop_with_empty_axes = noop != 0;
    return a;
}

/// parse_reduce_attrs() of a kernel factory's node, once per node: shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<ReduceAttrs> parse_reduce_attrs(const KernelCreateContext& ctx, bool reduce_sum) {
    DSINFER_ASSIGN_OR_RETURN(
        std::shared_ptr<const ReduceAttrs> a,
        ctx.parsed_attributes<ReduceAttrs>([reduce_sum](const KernelCreateContext& c) {
            return parse_reduce_attrs(c.node(), c.opset(), c.num_inputs() > 1 && c.has_input(1),
                                      reduce_sum);
        }));
    return *a;
}

/// Reads a 1-D int64 (or int32) axes tensor view into `out` (at most kMaxRank entries);
/// invalid_argument otherwise. Allocates only for an error.
inline Status read_axes_view(const TensorView& v, std::array<std::int64_t, kMaxRank>& out,
                             int& count) {
    const std::int64_t n = v.num_elements();
    if (v.shape.rank() > 1)
        return Status::error(ErrorCode::invalid_argument, "input 'axes' must be 1-D, got shape ",
                             v.shape.to_string());
    if (n > kMaxRank)
        return Status::error(ErrorCode::invalid_argument, "input 'axes' has ", n,
                             " entries, more than the maximum rank ", kMaxRank);
    count = static_cast<int>(n);
    for (int i = 0; i < count; ++i) {
        auto& dst = out[static_cast<std::size_t>(i)];
        if (v.dtype == DType::i64)
            dst = v.data_unchecked<std::int64_t>()[i];
        else if (v.dtype == DType::i32)
            dst = v.data_unchecked<std::int32_t>()[i];
        else
            return Status::error(ErrorCode::invalid_argument, "input 'axes' must be int64, got ",
                                 dtype_name(v.dtype));
    }
    return Status::ok();
}

/// Marks the dims of a rank-`rank` input that `axes` (n values in [-rank, rank), each once;
/// `bad_axis` otherwise) fold; no axes fold every dim, or none with noop_with_empty_axes.
/// Allocates only for an error.
inline Status mark_reduced_axes(int rank, const std::int64_t* axes, int n,
                                bool noop_with_empty_axes, ErrorCode bad_axis,
                                std::array<bool, kMaxRank>& reduced) {
    reduced.fill(false);
    if (n == 0) {
        if (!noop_with_empty_axes)
            for (int d = 0; d < rank; ++d) reduced[static_cast<std::size_t>(d)] = true;
        return Status::ok();
    }
    for (int i = 0; i < n; ++i) {
        const std::int64_t a = axes[i];
        if (a < -rank || a >= rank)
            return Status::error(bad_axis, "axis ", a, " is outside [", -rank, ", ", rank,
                                 ") for an input of rank ", rank);
        const auto d = static_cast<std::size_t>(a < 0 ? a + rank : a);
        if (reduced[d])
            return Status::error(bad_axis, "axis ", a, " appears more than once in 'axes'");
        reduced[d] = true;
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
