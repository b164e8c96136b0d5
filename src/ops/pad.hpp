// Pad: its attributes and its pads/axes rule, defined once for every backend (the reference
// kernel, src/cpu/reference/tensor_misc.cpp, and the CUDA kernel, cuda/kernels/tensor_ops.cu).
//
// Opset < 11 carries the pads ("paddings" before opset 2) and the fill value as attributes;
// from opset 11 they are inputs (pads, constant_value, and from opset 18 axes), read by the
// kernels, which hand their elements to pad_extents through a reader.
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

enum class PadMode { constant, reflect, edge, wrap };

struct PadAttrs {
    PadMode mode = PadMode::constant;
    std::vector<std::int64_t> pads;  ///< opset < 11: the attribute (begins, then ends)
    float value = 0.0f;              ///< opset < 11: the fill value
};

/// Reads Pad's attributes for `opset` (invalid_model on a bad mode or a missing attribute).
inline StatusOr<PadAttrs> read_pad_attrs(const Node& n, std::int64_t opset) {
    PadAttrs a;
    DSINFER_ASSIGN_OR_RETURN(std::string m, n.attr_or<std::string>("mode", std::string("constant")));
    if (m == "reflect") a.mode = PadMode::reflect;
    else if (m == "edge") a.mode = PadMode::edge;
    else if (m == "wrap") a.mode = PadMode::wrap;
    else if (m != "constant")
        return Status::error(ErrorCode::invalid_model, "attribute 'mode' '", m,
                             "' is not constant, reflect, edge or wrap");
    if (opset < 11) {
        DSINFER_ASSIGN_OR_RETURN(a.pads, n.attr<std::vector<std::int64_t>>(opset < 2 ? "paddings"
                                                                                     : "pads"));
        DSINFER_ASSIGN_OR_RETURN(a.value, n.attr_or<float>("value", 0.0f));
    }
    return a;
}

/// read_pad_attrs once per node, shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<PadAttrs> parse_pad_attrs(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const PadAttrs> a,
                             ctx.parsed_attributes<PadAttrs>([](const KernelCreateContext& c) {
                                 return read_pad_attrs(c.node(), c.opset());
                             }));
    return *a;
}

/// Begin and end pads per dim of a rank-`rank` input from `np` pads (`pad_at(i)`: begins for
/// the `na` axes, then ends) over `na` axes (`axis_at(i)`, negative from the end; without axes
/// pass na = rank and axis_at(i) = i). invalid_argument on a count that is not 2 * na, an axis
/// out of range or given twice.
template <class PadAt, class AxisAt>
Status pad_extents(int rank, std::int64_t np, PadAt&& pad_at, std::int64_t na, AxisAt&& axis_at,
                   std::array<std::int64_t, kMaxRank>& begin,
                   std::array<std::int64_t, kMaxRank>& end) {
    begin.fill(0);
    end.fill(0);
    if (np != 2 * na)
        return Status::error(ErrorCode::invalid_argument, "pads has ", np, " entries; expected ",
                             2 * na);
    std::array<bool, kMaxRank> seen{};
    for (std::int64_t i = 0; i < na; ++i) {
        std::int64_t a = axis_at(i);
        if (a < -rank || a >= rank)
            return Status::error(ErrorCode::invalid_argument, "axes entry ", a, " is outside [",
                                 -rank, ", ", rank, ")");
        if (a < 0) a += rank;
        const auto au = static_cast<std::size_t>(a);
        if (seen[au])
            return Status::error(ErrorCode::invalid_argument, "axes contains axis ", a, " twice");
        seen[au] = true;
        begin[au] = pad_at(i);
        end[au] = pad_at(i + na);
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
