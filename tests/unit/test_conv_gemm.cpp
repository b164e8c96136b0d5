// Convolution as im2col + packed GEMM on blocked activations (src/kernels/conv_gemm.cpp) against
// a double-precision direct convolution: channel blocks of 8 (AVX2's nChw8c) and 16 (AVX-512's
// nChw16c; the kernel's code is the same on any CPU), windows 3x3, 5x5 and 1x3, strides 1 and 2,
// symmetric and one-sided pads, bias, a residual (separate, and the output itself), ReLU and
// activations applied after the scatter, several pixel chunks; bitwise determinism across thread
// counts and with or without the caller's workspace; the weights' pack/unpack round trip.
//
// Tolerance: |got - want| <= 1e-5 * (1 + sum |x * w|) (float accumulation grows with the
// magnitudes summed, as in test_packed_gemm.cpp), then the activation's own (Gelu: 1e-6 * (1 + |y|)).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/activation.hpp"
#include "kernels/conv_gemm.hpp"
#include "runtime/parallel.hpp"
#include "unit/blocked_conv_reference.hpp"

namespace {

using dsinfer::detail::Activation;
using dsinfer::detail::ActivationSpec;
using dsinfer::detail::ConvGemmShape;
using dsinfer::detail::PackedB;
using dsinfer::test::blocked_at;
using dsinfer::test::random_vec;
using std::int64_t;



struct Case {
    ConvGemmShape s;
    bool bias = true;
    int residual = 0;  // 0 none, 1 a separate tensor, 2 the output itself (in place)
    ActivationSpec act{};
};

ConvGemmShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh,
                    int64_t kw, int64_t stride, int64_t ph, int64_t pw, int64_t pad_end_h,
                    int64_t pad_end_w, int64_t block) {
    ConvGemmShape s;
    s.n = n;
    s.c = c;
    s.h = h;
    s.w = w;
    s.oc = oc;
    s.kh = kh;
    s.kw = kw;
    s.sh = s.sw = stride;
    s.ph = ph;
    s.pw = pw;
    s.oh = (h + ph + pad_end_h - kh) / stride + 1;
    s.ow = (w + pw + pad_end_w - kw) / stride + 1;
    s.block = block;
    return s;
}

void check(const Case& t) {
    const ConvGemmShape& s = t.s;
    std::mt19937 rng(static_cast<unsigned>(s.c * 31 + s.oc * 7 + s.kh * 3 + s.oh + s.block));
    const auto x = random_vec(static_cast<std::size_t>(s.n * s.c * s.h * s.w), rng);  // blocked
    const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * s.kh * s.kw), rng);  // OIHW
    const auto bias = random_vec(static_cast<std::size_t>(s.oc), rng);
    const std::size_t ysize = static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow);
    const auto z = random_vec(ysize, rng);
    const PackedB packed = dsinfer::detail::pack_conv_gemm_weights(w.data(), s);
    std::vector<float> y(ysize, 123.f);
    if (t.residual == 2) y = z;
    std::vector<unsigned char> ws(
        dsinfer::detail::conv_gemm_workspace_bytes(s, dsinfer::detail::max_threads()));
    REQUIRE(dsinfer::detail::conv_gemm_blocked(
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
                    INFO("n=" << n << " o=" << o << " oy=" << oy << " ox=" << ox << " c=" << s.c
                              << " oc=" << s.oc << " k=" << s.kh << "x" << s.kw << " stride="
                              << s.sh << " block=" << s.block << " residual=" << t.residual
                              << " act=" << static_cast<int>(t.act.kind));
                    const double tol_act =
                        t.act.kind == Activation::gelu ? 1e-6 * (1.0 + std::fabs(want)) : 0.0;
                    REQUIRE(std::fabs(y[at] - want) <= 1e-5 * (1.0 + mag) + tol_act);
                }
}

}  // namespace

TEST_CASE("conv GEMM matches a double direct convolution on blocked layouts", "[fast][conv]") {
    for (int64_t block : {8, 16}) {
        // ResNet's last stage in miniature: 3x3, pad 1, 7x7 maps, batch 2.
        check({shape(2, 32, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, block), true, 0,
               {Activation::relu}});
        // Stride 2 (14 -> 7), with a residual.
        check({shape(1, 16, 14, 14, 32, 3, 3, 2, 1, 1, 1, 1, block), true, 1,
               {Activation::relu}});
        // 5x5 with pad 2; one-sided pads (begin 0, end 1) on an odd map; a 1x3 window.
        check({shape(3, 16, 6, 5, 16, 5, 5, 1, 2, 2, 2, 2, block), false, 0, {}});
        check({shape(1, 32, 5, 7, 16, 3, 3, 2, 0, 0, 1, 1, block), true, 2, {}});
        check({shape(2, 16, 4, 8, 32, 1, 3, 1, 0, 1, 0, 1, block), true, 0, {}});
        // Activations after the scatter: scalar (LeakyRelu) and vector (Gelu) paths, with the
        // residual summed first.
        check({shape(1, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, block), true, 1,
               {Activation::leaky_relu, 0.1f}});
        check({shape(2, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, block), true, 2, {Activation::gelu}});
    }
}

TEST_CASE("conv GEMM takes the pixels in several chunks", "[fast][conv]") {
    // K = 3 * 3 * 512 = 4608 floats per pixel: about 455 pixels per 8 MiB chunk, 2 x 13 x 13 =
    // 338 here, so batch 3 (507 pixels) makes two chunks.
    check({shape(3, 512, 13, 13, 16, 3, 3, 1, 1, 1, 1, 1, 8), true, 1, {Activation::relu}});
}

TEST_CASE("conv GEMM is bitwise the same for any thread count and without a workspace",
          "[fast][conv]") {
    const ConvGemmShape s = shape(2, 64, 9, 9, 96, 3, 3, 1, 1, 1, 1, 1, 8);
    std::mt19937 rng(5);
    const auto x = random_vec(static_cast<std::size_t>(s.n * s.c * s.h * s.w), rng);
    const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * 9), rng);
    const auto bias = random_vec(static_cast<std::size_t>(s.oc), rng);
    const PackedB packed = dsinfer::detail::pack_conv_gemm_weights(w.data(), s);
    auto run = [&](int threads, bool workspace) {
        dsinfer::detail::ThreadBudget budget(threads);
        std::vector<unsigned char> ws(
            workspace ? dsinfer::detail::conv_gemm_workspace_bytes(s, threads) : 0);
        std::vector<float> y(static_cast<std::size_t>(s.n * s.oc * s.oh * s.ow));
        REQUIRE(dsinfer::detail::conv_gemm_blocked(s, x.data(), packed, bias.data(), nullptr,
                                                   y.data(), {Activation::relu},
                                                   workspace ? ws.data() : nullptr, ws.size()));
        return y;
    };
    const auto one = run(1, true);
    CHECK(run(2, true) == one);
    CHECK(run(3, true) == one);
    CHECK(run(2, false) == one);
}

TEST_CASE("conv GEMM weights unpack to the OIHW tensor they were packed from", "[fast][conv]") {
    for (const ConvGemmShape& s : {shape(1, 24, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 8),
                                   shape(1, 512, 7, 7, 24, 3, 3, 1, 1, 1, 1, 1, 8)}) {
        std::mt19937 rng(9);
        const auto w = random_vec(static_cast<std::size_t>(s.oc * s.c * 9), rng);
        const PackedB packed = dsinfer::detail::pack_conv_gemm_weights(w.data(), s);
        std::vector<float> back(w.size(), -1.f);
        dsinfer::detail::unpack_conv_gemm_weights(packed, s, back.data());
        CHECK(back == w);
    }
}
