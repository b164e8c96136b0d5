// The INT8 convolution's exact s32 sums written plainly, for the direct tests of
// src/kernels/qconv.hpp (test_qconv.cpp, test_qconv_winograd.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/qconv.hpp"

namespace dsinfer::test {

/// y's exact s32 sums (NCHW) of geometry s (one group; kernel, strides, dilations and leading
/// pads from s): over channels and taps, (x - zx) (w - zw[o]), taps in the padding adding 0.
/// zw empty: 128 for u8 w, 0 for s8 w (the zero points packed without a term).
inline std::vector<std::int32_t> qconv_sums(const dsinfer::detail::QConvShape& s,
                                            const std::vector<std::uint8_t>& x_nchw,
                                            const std::vector<std::uint8_t>& w, bool w_unsigned,
                                            int zx, const std::vector<std::int32_t>& zw = {}) {
    std::vector<std::int32_t> y(static_cast<std::size_t>(s.batch * s.m * s.oh * s.ow));
    for (std::int64_t n = 0; n < s.batch; ++n)
        for (std::int64_t o = 0; o < s.m; ++o) {
            const int z = !zw.empty() ? zw[static_cast<std::size_t>(o)] : w_unsigned ? 128 : 0;
            for (std::int64_t oy = 0; oy < s.oh; ++oy)
                for (std::int64_t ox = 0; ox < s.ow; ++ox) {
                    std::int64_t sum = 0;
                    for (std::int64_t c = 0; c < s.c; ++c)
                        for (std::int64_t i = 0; i < s.kh; ++i)
                            for (std::int64_t j = 0; j < s.kw; ++j) {
                                const std::int64_t iy = oy * s.sh - s.pt + i * s.dh;
                                const std::int64_t ix = ox * s.sw - s.pl + j * s.dw;
                                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                                const std::uint8_t wb = w[static_cast<std::size_t>(
                                    ((o * s.c + c) * s.kh + i) * s.kw + j)];
                                const int g = (w_unsigned ? wb : static_cast<std::int8_t>(wb)) - z;
                                sum += static_cast<std::int64_t>(
                                           x_nchw[static_cast<std::size_t>(
                                               ((n * s.c + c) * s.h + iy) * s.w + ix)] -
                                           zx) *
                                       g;
                            }
                    y[static_cast<std::size_t>(((n * s.m + o) * s.oh + oy) * s.ow + ox)] =
                        static_cast<std::int32_t>(sum);
                }
        }
    return y;
}

}  // namespace dsinfer::test
