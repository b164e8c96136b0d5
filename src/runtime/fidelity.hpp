// Output fidelity of a candidate model against a reference model's outputs (the quantizer's
// precision controller, the pruner's report and target allocation): sums accumulated over
// every evaluation batch, per output, and the metrics of dsinfer/quantize.hpp FidelityMetric.
//
// Internal (namespace dsinfer::detail).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsinfer/quantize.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::detail {

/// One output's sums over every batch.
struct OutputSums {
    double dot = 0, nc = 0, nr = 0, diff2 = 0;
    std::int64_t rows = 0, same = 0;
    bool nonfinite = false;  ///< NaN / infinity where the reference had a finite value

    /// Adds a batch: `got` from the candidate, `want` from the reference (float32 outputs of
    /// the same size; others are skipped). Top-1 compares the argmax of each row of the last
    /// axis.
    void add(const Tensor& got, const Tensor& want) {
        if (got.dtype() != DType::f32 || want.dtype() != DType::f32 ||
            got.num_elements() != want.num_elements())
            return;
        const float* c = got.data_unchecked<float>();
        const float* r = want.data_unchecked<float>();
        const std::int64_t count = got.num_elements();
        for (std::int64_t i = 0; i < count; ++i) {
            if (!std::isfinite(c[i]) || !std::isfinite(r[i])) {
                nonfinite = nonfinite || std::isfinite(r[i]);
                continue;
            }
            dot += static_cast<double>(c[i]) * r[i];
            nc += static_cast<double>(c[i]) * c[i];
            nr += static_cast<double>(r[i]) * r[i];
            diff2 += (static_cast<double>(c[i]) - r[i]) * (static_cast<double>(c[i]) - r[i]);
        }
        const std::int64_t width = got.num_dims() > 0 ? got.shape()[got.num_dims() - 1] : 1;
        if (width <= 1) return;
        for (std::int64_t row = 0; row + width <= count; row += width) {
            const auto bc = std::max_element(c + row, c + row + width) - (c + row);
            const auto br = std::max_element(r + row, r + row + width) - (r + row);
            ++rows;
            same += bc == br;
        }
    }

    /// The metric's value; the worst value when the candidate made NaN or infinity where the
    /// reference did not.
    double value(FidelityMetric m) const {
        switch (m) {
            case FidelityMetric::cosine:
                if (nonfinite) return -1.0;
                return nc > 0 && nr > 0 ? dot / std::sqrt(nc * nr) : 1.0;
            case FidelityMetric::relative_l2:
                if (nonfinite) return std::numeric_limits<double>::infinity();
                return nr > 0 ? std::sqrt(diff2 / nr) : 0.0;
            case FidelityMetric::top1:
                if (nonfinite) return 0.0;
                return rows > 0 ? static_cast<double>(same) / static_cast<double>(rows) : 1.0;
        }
        return 0.0;
    }
};

/// The worst output's value of `m` (higher is better except for relative L2).
inline double worst_fidelity(const std::vector<OutputSums>& sums, FidelityMetric m) {
    double worst = m == FidelityMetric::relative_l2 ? 0.0 : 1.0;
    for (const OutputSums& s : sums) {
        const double v = s.value(m);
        worst = m == FidelityMetric::relative_l2 ? std::max(worst, v) : std::min(worst, v);
    }
    return worst;
}

}  // namespace dsinfer::detail
