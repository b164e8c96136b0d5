// Concat's attribute and shape, one definition for the reference, fast and CUDA kernels: the
// axis (default 1 before opset 4, required from it), the output shape and dtype checks, and
// the axis a run joins on. Header-only, vocabulary headers only.
#pragma once

#include <cstdint>
#include <memory>

#include "dsinfer/dtype.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"
#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

/// Concat's `axis`: required from opset 4, 1 when absent before.
inline StatusOr<std::int64_t> concat_axis(const Node& n, int opset) {
    if (opset >= 4) return n.attr<std::int64_t>("axis");
    return n.attr_or<std::int64_t>("axis", 1);
}

/// Concat's attributes, parsed once per node (parse_concat_attrs).
struct ConcatAttrs {
    std::int64_t axis = 1;
};

/// concat_axis once per node, shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<ConcatAttrs> parse_concat_attrs(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const ConcatAttrs> a,
                             ctx.parsed_attributes<ConcatAttrs>(
                                 [](const KernelCreateContext& c) -> StatusOr<ConcatAttrs> {
                                     DSINFER_ASSIGN_OR_RETURN(
                                         const std::int64_t axis,
                                         concat_axis(c.node(), static_cast<int>(c.opset())));
                                     return ConcatAttrs{axis};
                                 }));
    return *a;
}

/// The output shape of joining `n` inputs (shape_of(i), dtype_of(i)) along `axis`: the inputs
/// share dtype, rank (>= 1) and every dim but the axis; invalid_argument otherwise, invalid_model
/// for an axis outside the rank.
template <class ShapeOf, class DTypeOf>
StatusOr<Shape> concat_output_shape(std::int64_t axis, int n, ShapeOf&& shape_of,
                                    DTypeOf&& dtype_of) {
    DSINFER_CHECK(n >= 1, ErrorCode::invalid_model, "Concat needs inputs");
    const Shape& s0 = shape_of(0);
    const DType t0 = dtype_of(0);
    const int r = s0.rank();
    DSINFER_CHECK(r >= 1, ErrorCode::invalid_argument, "inputs must have rank >= 1");
    DSINFER_ASSIGN_OR_RETURN(const int a, normalize_axis(axis, r));
    Shape out = s0;
    std::int64_t total = 0;
    for (int i = 0; i < n; ++i) {
        const Shape& si = shape_of(i);
        DSINFER_CHECK(dtype_of(i) == t0, ErrorCode::invalid_argument, "input ", i, " has dtype ",
                      dtype_name(dtype_of(i)), ", input 0 has ", dtype_name(t0));
        DSINFER_CHECK(si.rank() == r, ErrorCode::invalid_argument, "input ", i, " has shape ",
                      si.to_string(), ", input 0 has ", s0.to_string(), " (ranks differ)");
        for (int d = 0; d < r; ++d)
            DSINFER_CHECK(d == a || si[d] == s0[d], ErrorCode::invalid_argument, "input ", i,
                          " has shape ", si.to_string(), ", input 0 has ", s0.to_string(),
                          " (dim ", d, " differs)");
        total += si[a];
    }
    out[a] = total;
    return out;
}

/// The axis in [0, rank) a run joins on, or -1 when `axis` is outside [-rank, rank) (prepare
/// has reported that already).
inline int concat_run_axis(std::int64_t axis, int rank) noexcept {
    if (rank < 1 || axis < -rank || axis >= rank) return -1;
    return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace dsinfer::detail
