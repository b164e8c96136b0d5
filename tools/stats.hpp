// The tools' sample statistics: a quantile of sorted samples and the median of any samples.
// Header-only, tools only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dsinfer::bench {

/// Linear interpolation between order statistics of sorted, non-empty samples (as
/// ort_bench.mjs).
inline double quantile(const std::vector<double>& sorted, double q) {
    const double pos = static_cast<double>(sorted.size() - 1) * q;
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = static_cast<std::size_t>(std::ceil(pos));
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

/// The median of `v` (the mean of the two middle samples for an even count; 0 when empty).
inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    const double hi = v[mid];
    if (v.size() % 2 == 1) return hi;
    return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

}  // namespace dsinfer::bench
