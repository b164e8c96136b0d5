// Winograd F(4x4, 3x3) convolution on blocked layouts
// (src/kernels/conv_winograd.cpp) against a double-precision direct convolution: channel blocks of
// 8 (AVX2's nChw8c) and 16 (AVX-512's nChw16c; on a CPU without AVX-512 its portable code runs),
// maps that are and are not multiples of the tile (7x7, 5x9, 1x1), pads 1, 0 and one-sided, bias,
// a residual (separate, and the output itself), ReLU and activations applied afterwards, tiles in
// several chunks; bitwise determinism across thread counts and with or without the caller's
// workspace; the selection rule; weights of another geometry refused.
//
// Tolerance: |got - want| <= 1e-5 * (1 + sum |x * w|), as for im2col + GEMM in
// test_conv_gemm.cpp: the transforms add a few roundings per product on top of the GEMM's (the
// output transform multiplies by up to 8 x 8). The largest error seen is printed, so a drift
// shows before it fails.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "ops/activation.hpp"
#include "kernels/conv_winograd.hpp"
#include "runtime/parallel.hpp"
#include "unit/blocked_conv_reference.hpp"

namespace {

using dsinfer::detail::Activation;
using dsinfer::detail::ActivationSpec;
using dsinfer::detail::ConvGemmShape;
using dsinfer::detail::WinogradWeights;
using dsinfer::test::blocked_at;
using dsinfer::test::random_vec;
using std::int64_t;

/// The weights as pack_winograd_weights keeps them (the vector outlives the packed copy).
std::shared_ptr<const float> borrow(const std::vector<float>& w) {
    return std::shared_ptr<const float>(std::shared_ptr<void>(), w.data());
}



ConvGemmShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t ph,
                    int64_t pw, int64_t pad_end_h, int64_t pad_end_w, int64_t block) {
    ConvGemmShape s;
    s.n = n;
    s.c = c;
    s.h = h;
    s.w = w;
    s.oc = oc;
    s.kh = s.kw = 3;
    s.ph = ph;
    s.pw = pw;
    s.oh = h + ph + pad_end_h - 2;
    s.ow = w + pw + pad_end_w - 2;
    s.block = block;
    return s;
}

struct Case {
    ConvGemmShape s;
    bool bias = true;
    int residual = 0;  // 0 none, 1 a separate tensor, 2 the output itself (in place)
    ActivationSpec act{};
};

double worst_ratio = 0;  // the largest |got - want| / (1 + mag) seen

void check(const Case& t) {
    const ConvGemmShape& s = t.s;
    std::mt19937 rng(static_cast<unsigned>(s.c * 31 + s.oc * 7 + s.oh + s.block));
    const auto x = random_vec(static_cast<std::size_t>(s.n * s.c * s.h * s.w), rng);  // blocked
    const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * 9), rng);          // OIHW
    const auto bias = random_vec(static_cast<std::size_t>(s.oc), rng);
    const std::size_t ysize = static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow);
    const auto z = random_vec(ysize, rng);
    const WinogradWeights packed = dsinfer::detail::pack_winograd_weights(borrow(w), s);
    std::vector<float> y(ysize, 123.f);
    if (t.residual == 2) y = z;
    std::vector<unsigned char> ws(
        dsinfer::detail::conv_winograd_workspace_bytes(s, dsinfer::detail::max_threads()));
    REQUIRE(dsinfer::detail::conv_winograd_blocked(
        s, x.data(), packed, t.bias ? bias.data() : nullptr,
        t.residual == 1 ? z.data() : t.residual == 2 ? y.data() : nullptr, y.data(), t.act,
        ws.data(), ws.size()));
    for (int64_t n = 0; n < s.n; ++n)
        for (int64_t o = 0; o < s.oc; ++o)
            for (int64_t oy = 0; oy < s.oh; ++oy)
                for (int64_t ox = 0; ox < s.ow; ++ox) {
                    const auto d = dsinfer::test::direct_conv(s, x, w, n, o, oy, ox);
                    double sum = (t.bias ? bias[static_cast<std::size_t>(o)] : 0.0) + d.sum;
                    const double mag = d.mag;
                    const auto at = static_cast<std::size_t>(
                        blocked_at(n, o, oy, ox, s.oc, s.oh, s.ow, s.block));
                    if (t.residual != 0) sum += z[at];
                    const double want =
                        dsinfer::detail::apply_activation(static_cast<float>(sum), t.act);
                    INFO("n=" << n << " o=" << o << " oy=" << oy
                              << " ox=" << ox << " c=" << s.c << " oc=" << s.oc << " map="
                              << s.h << "x" << s.w << " block=" << s.block << " residual="
                              << t.residual << " act=" << static_cast<int>(t.act.kind));
                    const double tol_act =
                        t.act.kind == Activation::gelu ? 1e-6 * (1.0 + std::fabs(want)) : 0.0;
                    const double err = std::fabs(y[at] - want);
                    worst_ratio = std::max(worst_ratio, err / (1.0 + mag));
                    REQUIRE(err <= 1e-5 * (1.0 + mag) + tol_act);
                }
}

}  // namespace

TEST_CASE("Winograd convolution matches a double direct convolution on blocked layouts",
          "[fast][conv][winograd]") {
    for (int64_t block : {8, 16}) {
        // ResNet's 3x3 layers in miniature: pad 1 on 7x7 (not a multiple of the tile) and 8x8
        // maps, batch 2, ReLU.
        check({shape(2, 32, 7, 7, 48, 1, 1, 1, 1, block), true, 0, {Activation::relu}});
        check({shape(2, 16, 8, 8, 32, 1, 1, 1, 1, block), true, 1, {Activation::relu}});
        // No pads (5x9 -> 3x7), one-sided pads (begin 0, end 1), a 1x1 map from pad 1.
        check({shape(3, 16, 5, 9, 16, 0, 0, 0, 0, block), false, 0, {}});
        check({shape(1, 32, 6, 7, 16, 0, 1, 1, 0, block), true, 2, {}});
        check({shape(2, 16, 1, 1, 16, 1, 1, 1, 1, block), true, 1, {Activation::relu}});
        // Activations applied after the tiles: scalar (LeakyRelu) and vector (Gelu), the
        // residual summed first.
        check({shape(1, 16, 7, 7, 16, 1, 1, 1, 1, block), true, 1,
               {Activation::leaky_relu, 0.1f}});
        check({shape(2, 16, 7, 7, 16, 1, 1, 1, 1, block), true, 2, {Activation::gelu}});
    }
    // A deep K (512 channels) where the float sums are longest.
    check({shape(1, 512, 6, 6, 16, 1, 1, 1, 1, 8), true, 0, {}});
    std::printf("Winograd F(4x4, 3x3): largest |err| / (1 + sum |x w|) %.3g\n", worst_ratio);
}

TEST_CASE("Winograd convolution takes the tiles in several chunks", "[fast][conv][winograd]") {
    // 3 x 28 x 28 map: 147 tiles of 36 x (64 + 64) floats (18 KiB): chunks of at most 96 tiles,
    // so two or more on any thread count.
    check({shape(3, 64, 28, 28, 64, 1, 1, 1, 1, 8), true, 1, {Activation::relu}});
}

TEST_CASE("Winograd convolution keeps a NaN or an infinity to the outputs whose windows hold it",
          "[fast][conv][winograd]") {
    // One NaN and one +Inf pixel (in different chunks' tiles) in a 2 x 16 x 12 x 12 input: the
    // direct sum gives NaN / +-Inf exactly at the outputs whose 3x3 windows hold them (all
    // channels: every weight is non-zero) and finite values elsewhere. The transforms would mix
    // them into whole 4x4 tiles; the kernel computes such chunks by the direct sum instead.
    for (int64_t block : {8, 16}) {
        const ConvGemmShape s = shape(2, 16, 12, 12, 16, 1, 1, 1, 1, block);
        std::mt19937 rng(11);
        auto x = random_vec(static_cast<std::size_t>(s.n * s.c * s.h * s.w), rng);
        const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * 9), rng);
        const auto bias = random_vec(static_cast<std::size_t>(s.oc), rng);
        x[static_cast<std::size_t>(blocked_at(0, 3, 5, 6, s.c, s.h, s.w, block))] =
            std::numeric_limits<float>::quiet_NaN();
        x[static_cast<std::size_t>(blocked_at(1, 9, 0, 11, s.c, s.h, s.w, block))] =
            std::numeric_limits<float>::infinity();
        const WinogradWeights packed = dsinfer::detail::pack_winograd_weights(borrow(w), s);
        std::vector<float> y(static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow));
        for (int threads : {1, 2}) {
            dsinfer::detail::ThreadBudget budget(threads);
            REQUIRE(dsinfer::detail::conv_winograd_blocked(s, x.data(), packed, bias.data(),
                                                           nullptr, y.data(), {}, nullptr, 0));
            int64_t non_finite = 0;
            for (int64_t n = 0; n < s.n; ++n)
                for (int64_t o = 0; o < s.oc; ++o)
                    for (int64_t oy = 0; oy < s.oh; ++oy)
                        for (int64_t ox = 0; ox < s.ow; ++ox) {
                            const auto d = dsinfer::test::direct_conv(s, x, w, n, o, oy, ox);
                            const double want = d.sum + bias[static_cast<std::size_t>(o)];
                            const float got = y[static_cast<std::size_t>(
                                blocked_at(n, o, oy, ox, s.oc, s.oh, s.ow, block))];
                            INFO("threads=" << threads << " block=" << block << " n=" << n
                                            << " o=" << o << " oy=" << oy << " ox=" << ox);
                            if (std::isfinite(want)) {
                                REQUIRE(std::isfinite(got));
                                REQUIRE(std::fabs(got - want) <= 1e-5 * (1.0 + d.mag));
                            } else {
                                ++non_finite;
                                REQUIRE(std::isnan(got) == std::isnan(want));
                                if (!std::isnan(want)) REQUIRE(got == want);
                            }
                        }
            // The NaN's 3x3 neighbourhood (9 pixels) and the Inf's at a corner (4), all 16
            // output channels.
            CHECK(non_finite == (9 + 4) * s.oc);
        }
    }
}

TEST_CASE("Winograd convolution is bitwise the same for any thread count and without a workspace",
          "[fast][conv][winograd]") {
    {
        const ConvGemmShape s = shape(2, 64, 13, 11, 96, 1, 1, 1, 1, 8);
        std::mt19937 rng(5);
        const auto x = random_vec(static_cast<std::size_t>(s.n * s.c * s.h * s.w), rng);
        const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * 9), rng);
        const auto bias = random_vec(static_cast<std::size_t>(s.oc), rng);
        const WinogradWeights packed = dsinfer::detail::pack_winograd_weights(borrow(w), s);
        auto run = [&](int threads, bool workspace) {
            dsinfer::detail::ThreadBudget budget(threads);
            std::vector<unsigned char> ws(
                workspace ? dsinfer::detail::conv_winograd_workspace_bytes(s, threads) : 0);
            std::vector<float> y(static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow));
            REQUIRE(dsinfer::detail::conv_winograd_blocked(
                s, x.data(), packed, bias.data(), nullptr, y.data(), {Activation::relu},
                workspace ? ws.data() : nullptr, ws.size()));
            return y;
        };
        const auto one = run(1, true);
        CHECK(run(2, true) == one);
        CHECK(run(3, true) == one);
        CHECK(run(2, false) == one);
    }
}

TEST_CASE("Winograd convolution takes 3x3 stride-1 windows over whole channel blocks",
          "[fast][conv][winograd]") {
    // Which geometries it is chosen for is the dispatcher's (test_conv_dispatch.cpp).
    const ConvGemmShape s = shape(8, 64, 56, 56, 64, 1, 1, 1, 1, 8);
    CHECK(dsinfer::detail::conv_winograd_supported(s));
    ConvGemmShape strided = s;
    strided.sh = strided.sw = 2;
    strided.oh = strided.ow = 28;
    CHECK_FALSE(dsinfer::detail::conv_winograd_supported(strided));
    ConvGemmShape five = s;
    five.kh = five.kw = 5;
    CHECK_FALSE(dsinfer::detail::conv_winograd_supported(five));
    ConvGemmShape odd = s;
    odd.c = 60;  // not a whole number of channel blocks
    CHECK_FALSE(dsinfer::detail::conv_winograd_supported(odd));
    // Weights of another geometry are refused, not read past their end.
    std::vector<float> w(static_cast<std::size_t>(16 * 16 * 9), 0.f);
    const ConvGemmShape small = shape(1, 16, 8, 8, 16, 1, 1, 1, 1, 8);
    const WinogradWeights other = dsinfer::detail::pack_winograd_weights(borrow(w), small);
    const ConvGemmShape big = shape(1, 32, 8, 8, 32, 1, 1, 1, 1, 8);
    std::vector<float> x(static_cast<std::size_t>(32 * 64)), y(x.size());
    CHECK_FALSE(dsinfer::detail::conv_winograd_blocked(big, x.data(), other, nullptr, nullptr,
                                                       y.data(), {}, nullptr, 0));
    WinogradWeights few = other;
    few.u.pop_back();
    CHECK_FALSE(dsinfer::detail::conv_winograd_blocked(small, x.data(), few, nullptr, nullptr,
                                                       y.data(), {}, nullptr, 0));
}
