// Sliding-window geometry shared by Conv and the pooling kernels: the auto_pad attribute and
// one spatial dimension's output size and begin/end padding.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

enum class AutoPad { notset, same_upper, same_lower, valid };

inline StatusOr<AutoPad> parse_auto_pad(const Node& n) {
    DSINFER_ASSIGN_OR_RETURN(std::string s, n.attr_or<std::string>("auto_pad", "NOTSET"));
    if (s == "NOTSET" || s.empty()) return AutoPad::notset;
    if (s == "SAME_UPPER") return AutoPad::same_upper;
    if (s == "SAME_LOWER") return AutoPad::same_lower;
    if (s == "VALID") return AutoPad::valid;
    return Status::error(ErrorCode::invalid_model, "attribute 'auto_pad' has invalid value '", s,
                         "' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)");
}

/// v[i], or `dflt` when the attribute list is empty.
inline std::int64_t attr_at(const std::vector<std::int64_t>& v, int i, std::int64_t dflt) {
    return v.empty() ? dflt : v[static_cast<std::size_t>(i)];
}

struct WindowDim {
    std::int64_t out = 0, pb = 0, pe = 0;
};

/// Spatial dim i (of nsp) of a window of size k over `in` elements: output size and begin/end
/// pads from auto_pad or the explicit `pads` ([b0.., e0..]). With ceil_mode the last window
/// must still start inside the input or its leading padding.
inline StatusOr<WindowDim> window_dim(int i, int nsp, std::int64_t in, std::int64_t k,
                                      std::int64_t stride, std::int64_t dil, AutoPad auto_pad,
                                      const std::vector<std::int64_t>& pads, bool ceil_mode) {
    WindowDim d;
    const std::int64_t ek = dil * (k - 1) + 1;
    if (auto_pad == AutoPad::same_upper || auto_pad == AutoPad::same_lower) {
        d.out = (in + stride - 1) / stride;
        const std::int64_t total = std::max<std::int64_t>(0, (d.out - 1) * stride + ek - in);
        const std::int64_t small = total / 2;
        d.pb = auto_pad == AutoPad::same_upper ? small : total - small;
        d.pe = total - d.pb;
        return d;
    }
    d.pb = auto_pad == AutoPad::valid ? 0 : attr_at(pads, i, 0);
    d.pe = auto_pad == AutoPad::valid ? 0 : attr_at(pads, nsp + i, 0);
    const std::int64_t padded = in + d.pb + d.pe;
    if (padded < ek)
        return Status::error(ErrorCode::invalid_argument, "spatial dimension ", i,
                             ": padded input size ", padded,
                             " is smaller than the dilated kernel size ", ek);
    if (ceil_mode && auto_pad != AutoPad::valid) {
        d.out = (padded - ek + stride - 1) / stride + 1;
        if ((d.out - 1) * stride >= in + d.pb) --d.out;
    } else {
        d.out = (padded - ek) / stride + 1;
    }
    return d;
}

}  // namespace dsinfer::detail
