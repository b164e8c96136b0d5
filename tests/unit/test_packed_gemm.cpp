// dsinfer's packed-B f32 GEMM (src/cpu/fast/sgemm.cpp) against a double-precision reference,
// over edge-tile shapes (rows not a multiple of 6, columns not a multiple of 16, K crossing the
// 512 block), transposed packing, alpha, bias and ReLU; and determinism across runs and
// against the thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/fast/sgemm.hpp"
#include "cpu/parallel.hpp"

namespace {

using dsinfer::detail::GemmActivation;

std::vector<float> random_vec(std::size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// |got - want| <= 1e-5 * (1 + sum_k |a_ik * b_kj|): float accumulation error grows with K and
// with the magnitudes summed, not with the (possibly cancelling) result.
void check_gemm(std::int64_t m, std::int64_t k, std::int64_t n, bool transposed, float alpha,
                bool bias, GemmActivation act) {
    std::mt19937 rng(static_cast<unsigned>(m * 131 + k * 17 + n));
    const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
    const auto b = random_vec(static_cast<std::size_t>(k * n), rng);  // [K,N] or [N,K]
    const auto c0 = random_vec(static_cast<std::size_t>(n), rng);
    auto packed = dsinfer::detail::pack_b(b.data(), k, n, transposed);
    std::vector<float> c(static_cast<std::size_t>(m * n), -7.f);
    dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, bias ? c0.data() : nullptr,
                                  alpha, act);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0, mag = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const double bv = transposed ? b[static_cast<std::size_t>(j * k + p)]
                                             : b[static_cast<std::size_t>(p * n + j)];
                const double prod = a[static_cast<std::size_t>(i * k + p)] * bv;
                sum += prod;
                mag += std::fabs(prod);
            }
            double want = alpha * sum + (bias ? c0[static_cast<std::size_t>(j)] : 0.0);
            if (act == GemmActivation::relu) want = std::max(want, 0.0);
            const double got = c[static_cast<std::size_t>(i * n + j)];
            INFO("m=" << m << " k=" << k << " n=" << n << " i=" << i << " j=" << j
                      << " transposed=" << transposed);
            REQUIRE(std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(alpha) * mag));
        }
}

}  // namespace

TEST_CASE("packed GEMM matches a double reference on edge shapes", "[fast][gemm]") {
    for (std::int64_t m : {1, 5, 6, 7, 13, 64, 97})
        for (std::int64_t k : {1, 3, 17, 512, 513, 1030})
            for (std::int64_t n : {1, 15, 16, 17, 33})
                check_gemm(m, k, n, (m + k + n) % 2 == 0, 1.f, false, GemmActivation::none);
}

TEST_CASE("packed GEMM applies alpha then bias then ReLU", "[fast][gemm]") {
    check_gemm(13, 600, 40, true, 0.5f, true, GemmActivation::relu);
    check_gemm(7, 9, 17, false, -2.f, true, GemmActivation::none);
    check_gemm(64, 1024, 48, false, 1.f, true, GemmActivation::relu);
}

TEST_CASE("packed GEMM with K equal to zero writes the bias", "[fast][gemm]") {
    std::vector<float> bias{1.f, -2.f, 3.f};
    auto packed = dsinfer::detail::pack_b(nullptr, 0, 3, false);
    std::vector<float> c(6, 9.f);
    dsinfer::detail::sgemm_packed(2, nullptr, 0, packed, c.data(), 3, bias.data(), 1.f,
                                  GemmActivation::relu);
    CHECK(c == std::vector<float>{1.f, 0.f, 3.f, 1.f, 0.f, 3.f});
}

TEST_CASE("packed GEMM is bitwise deterministic across runs and thread counts", "[fast][gemm]") {
    std::mt19937 rng(7);
    const std::int64_t m = 100, k = 700, n = 260;
    const auto a = random_vec(static_cast<std::size_t>(m * k), rng);
    const auto b = random_vec(static_cast<std::size_t>(k * n), rng);
    auto packed = dsinfer::detail::pack_b(b.data(), k, n, false);
    auto run = [&](int threads) {
        dsinfer::detail::ThreadBudget budget(threads);
        std::vector<float> c(static_cast<std::size_t>(m * n));
        dsinfer::detail::sgemm_packed(m, a.data(), k, packed, c.data(), n, nullptr);
        return c;
    };
    const auto one = run(1);
    CHECK(run(1) == one);
    // Each element is one thread's dot product in the same K order, whatever the split.
    CHECK(run(2) == one);
    CHECK(run(3) == one);
}
