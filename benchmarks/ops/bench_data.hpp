// Inputs shared by the kernel benchmarks (bench_sgemm.cpp, bench_conv.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace dsinfer::bench {

/// n floats uniform in [-scale, scale), the same for the same seed.
inline std::vector<float> uniform(std::int64_t n, unsigned seed, float scale) {
    std::vector<float> v(static_cast<std::size_t>(n));
    std::minstd_rand gen(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& x : v) x = dist(gen);
    return v;
}

}  // namespace dsinfer::bench
