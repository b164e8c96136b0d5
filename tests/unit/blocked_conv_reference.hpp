// Shared by the blocked-layout convolution tests (test_conv_gemm.cpp, test_conv_winograd.cpp):
// random data, indexing into nChw{B}c, and a double-precision direct convolution of one output
// element with the sum of |x * w| that scales its tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/conv_gemm.hpp"

namespace dsinfer::test {

inline std::vector<float> random_vec(std::size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

/// Index of (n, c, y, x) in the blocked layout of a [N, C, H, W] tensor.
inline std::int64_t blocked_at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x,
                               std::int64_t channels, std::int64_t h, std::int64_t w,
                               std::int64_t block) {
    return (((n * (channels / block) + c / block) * h + y) * w + x) * block + c % block;
}

struct DirectConv {
    double sum = 0;  ///< sum of x * w over the window (no bias)
    double mag = 0;  ///< sum of |x * w|
};

/// Output element (n, o, oy, ox) of conv(X, W), X blocked, W OIHW, in double.
inline DirectConv direct_conv(const detail::ConvGemmShape& s, const std::vector<float>& x,
                              const std::vector<float>& w, std::int64_t n, std::int64_t o,
                              std::int64_t oy, std::int64_t ox) {
    DirectConv r;
    for (std::int64_t ci = 0; ci < s.c; ++ci)
        for (std::int64_t ky = 0; ky < s.kh; ++ky)
            for (std::int64_t kx = 0; kx < s.kw; ++kx) {
                const std::int64_t iy = oy * s.sh - s.ph + ky, ix = ox * s.sw - s.pw + kx;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const double p =
                    double(x[static_cast<std::size_t>(
                        blocked_at(n, ci, iy, ix, s.c, s.h, s.w, s.block))]) *
                    w[static_cast<std::size_t>(((o * s.c + ci) * s.kh + ky) * s.kw + kx)];
                r.sum += p;
                r.mag += std::fabs(p);
            }
    return r;
}

}  // namespace dsinfer::test
