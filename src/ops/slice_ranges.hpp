// slice_ranges: ONNX Slice's per-axis start/end/step after normalization and clamping, and the
// output length, shared by every backend's Slice (reference, CUDA) so they cut the same
// elements. Header-only, no dependencies beyond the vocabulary (nvcc includes it too).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

struct SliceRanges {
    std::array<std::int64_t, kMaxRank> start{}, end{}, step{}, length{};
};

/// Fills `r` for input shape `in` from n (start, end, axis, step) entries read through the
/// accessors: axes normalized and unique, steps non-zero, starts/ends clamped as ONNX says
/// (negative steps clamp to [-1, dim - 1]). Lengths are computed without overflow for any
/// int64 step (INT64_MIN included).
template <class FS, class FE, class FA, class FP>
Status slice_ranges(const Shape& in, std::int64_t n, FS&& starts, FE&& ends, FA&& axes,
                    FP&& steps, SliceRanges& r) {
    const int rank = in.rank();
    std::array<bool, kMaxRank> seen{};
    r = SliceRanges{};
    for (int d = 0; d < rank; ++d) {
        r.end[static_cast<std::size_t>(d)] = in[d];
        r.step[static_cast<std::size_t>(d)] = 1;
    }
    for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t a = axes(i);
        if (a < -rank || a >= rank)
            return Status::error(ErrorCode::invalid_argument, "axes[", i, "] = ", a,
                                 " is outside [", -rank, ", ", rank, ")");
        if (a < 0) a += rank;
        const auto au = static_cast<std::size_t>(a);
        if (seen[au])
            return Status::error(ErrorCode::invalid_argument, "axes contains axis ", a, " twice");
        seen[au] = true;
        const std::int64_t step = steps(i);
        if (step == 0) return Status::error(ErrorCode::invalid_argument, "steps[", i, "] is 0");
        const std::int64_t dim = in[static_cast<int>(a)];
        std::int64_t s = starts(i), e = ends(i);
        // Adding dim to a negative value cannot overflow (dim >= 0).
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        if (step > 0) {
            s = std::clamp<std::int64_t>(s, 0, dim);
            e = std::clamp<std::int64_t>(e, 0, dim);
        } else {
            s = std::clamp<std::int64_t>(s, 0, dim - 1);
            e = std::clamp<std::int64_t>(e, -1, dim - 1);
        }
        r.start[au] = s;
        r.end[au] = e;
        r.step[au] = step;
    }
    for (int d = 0; d < rank; ++d) {
        const auto du = static_cast<std::size_t>(d);
        const std::int64_t s = r.start[du], e = r.end[du], p = r.step[du];
        std::int64_t len = 0;
        // (distance - 1) / |step| + 1, in unsigned arithmetic: no overflow for huge steps.
        if (p > 0 && e > s)
            len = static_cast<std::int64_t>(static_cast<std::uint64_t>(e - s - 1) /
                                            static_cast<std::uint64_t>(p)) + 1;
        if (p < 0 && e < s)
            len = static_cast<std::int64_t>(static_cast<std::uint64_t>(s - e - 1) /
                                            (0 - static_cast<std::uint64_t>(p))) + 1;
        r.length[du] = len;
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
