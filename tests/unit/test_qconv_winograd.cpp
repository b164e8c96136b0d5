// The INT8 convolution's Winograd form (src/kernels/qconv.cpp, PackedQConvW::wino: F(2x2, 3x3)
// in 16-bit integers): its s32 sums against a scalar convolution (unit/qconv_sums.hpp), and its
// requantized, dequantized and residual outputs BITWISE against the direct form of the same
// family (whose own tests compare it with the reference kernels). On every 16-bit family the
// run covers (baseline and avx2), 1 and 2 threads, NCHW and NHWC x and y, odd and 1x1 images,
// asymmetric pads, channels that are not multiples of 16 or that cross a K block, zero points
// of x at 0, mid-range and 255, s8 weights and u8 weights of zero point 128 (packed without a
// zero-point term), u8 and s8 weights of other zero points (one, or one per output channel:
// subtracted before the transform), and the magnitude bound under which the form is exact (and
// beyond which the weights are not packed in it).
// Runs once per ISA level ([fast]: DSINFER_TEST_ISA, tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/qconv.hpp"
#include "kernels/qgemm.hpp"
#include "ops/qlinear.hpp"
#include "runtime/parallel.hpp"
#include "unit/qconv_sums.hpp"

namespace {

using dsinfer::detail::PackedQConvW;
using dsinfer::detail::QConvShape;
using dsinfer::detail::QGemmOutput;
using dsinfer::detail::QGemmParams;
using dsinfer::detail::QIsa;
using std::int64_t;

/// The 16-bit families this run covers (the Winograd form's layouts), narrowest first.
std::vector<QIsa> wino_isas() {
    std::vector<QIsa> out{QIsa::baseline};
    if (static_cast<int>(dsinfer::detail::qgemm_isa()) >= static_cast<int>(QIsa::avx2))
        out.push_back(QIsa::avx2);
    else
        WARN(
            "the avx2 family's Winograd form is not tested here (this CPU / "
            "DSINFER_MAX_CPU_ISA lacks AVX2)");
    return out;
}

struct WCase {
    int64_t n = 1, c = 4, h = 7, w = 6, m = 9;
    int64_t pt = 1, pl = 1, pb = 1, pr = 1;
};

QConvShape shape_of(const WCase& k, bool x_nhwc, bool y_nhwc) {
    QConvShape s;
    s.batch = k.n;
    s.c = k.c;
    s.h = k.h;
    s.w = k.w;
    s.m = k.m;
    s.kh = s.kw = 3;
    s.pt = k.pt;
    s.pl = k.pl;
    s.oh = k.h + k.pt + k.pb - 2;
    s.ow = k.w + k.pl + k.pr - 2;
    s.x_nhwc = x_nhwc;
    s.y_nhwc = y_nhwc;
    s.r_nhwc = y_nhwc;
    return s;
}

/// NCHW -> NHWC of `e`-byte elements (or back, with c and hw swapped).
std::vector<std::uint8_t> to_nhwc(const std::vector<std::uint8_t>& v, int64_t n, int64_t c,
                                  int64_t hw, int64_t e) {
    std::vector<std::uint8_t> out(v.size());
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t p = 0; p < hw; ++p)
                std::memcpy(&out[static_cast<std::size_t>(((b * hw + p) * c + ch) * e)],
                            &v[static_cast<std::size_t>(((b * c + ch) * hw + p) * e)],
                            static_cast<std::size_t>(e));
    return out;
}

/// Runs qconv with `w` and returns y's bytes (in y's own order).
std::vector<std::uint8_t> run(const QConvShape& s, const std::vector<std::uint8_t>& x,
                              const PackedQConvW& w, const QGemmParams& p, std::size_t esize,
                              const std::vector<std::uint8_t>& y0, int threads) {
    dsinfer::detail::ThreadBudget budget(threads);
    std::vector<std::uint8_t> y = y0;
    y.resize(static_cast<std::size_t>(s.batch * s.m * s.oh * s.ow) * esize);
    QGemmParams q = p;
    if (q.residual != nullptr && q.residual == y0.data())
        q.residual = y.data();  // in place, as ResNet's joins run
    std::vector<unsigned char> ws(
        dsinfer::detail::qconv_workspace_bytes(s, w, esize, dsinfer::detail::max_threads()));
    REQUIRE(dsinfer::detail::qconv(s, x.data(), nullptr, w, y.data(), q, ws.data(), ws.size()));
    return y;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 r(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) b = static_cast<std::uint8_t>(r());
    return v;
}

/// Every output kind of one case on every covered family and layout.
void check_case(const WCase& k, std::uint32_t seed) {
    INFO("x [" << k.n << "," << k.c << "," << k.h << "," << k.w << "] m " << k.m << " pads " << k.pt
               << " " << k.pl << " " << k.pb << " " << k.pr);
    const auto x_nchw = random_bytes(static_cast<std::size_t>(k.n * k.c * k.h * k.w), seed);
    // 0: s8 w; 1: u8 w of zero point 128 (both packed without a zero-point term); 2: s8 w;
    // 3: u8 w of one other zero point (ONNX Runtime's dynamic quantization); 4: u8 w, a zero
    // point per output channel from 0 to 255; 5: s8 w, per channel from -128 to 127.
    for (int variant = 0; variant < 6; ++variant) {
        const bool w_unsigned = variant == 1 || variant == 3 || variant == 4;
        const int zx = variant == 0 ? 0 : variant == 1 || variant == 4 ? 131 : 255;
        std::vector<std::int32_t> zw;  // empty: as packed (128 for u8, 0 for s8)
        if (variant >= 3) {
            std::mt19937 r(seed + 5);
            for (int64_t o = 0; o < k.m; ++o)
                zw.push_back(variant == 3   ? 119
                             : variant == 4 ? static_cast<std::int32_t>(r() % 256)
                                            : static_cast<std::int32_t>(r() % 256) - 128);
            zw[0] = variant == 4 ? 255 : variant == 5 ? -128 : zw[0];  // |w - zw| up to 255
        }
        INFO("w " << (w_unsigned ? "u8" : "s8") << ", zero point "
                  << (variant == 3   ? "119"
                      : variant >= 4 ? "per channel"
                                     : "as packed")
                  << ", x zero point " << zx);
        auto w = random_bytes(static_cast<std::size_t>(k.m * k.c * 9), seed + 1);
        if (w.size() >= 2) {  // the extremes somewhere
            w[0] = w_unsigned ? 0 : 0x80;
            w[1] = w_unsigned ? 255 : 0x7f;
        }
        for (bool x_nhwc : {false, true})
            for (bool y_nhwc : {false, true}) {
                INFO("x " << (x_nhwc ? "NHWC" : "NCHW") << ", y " << (y_nhwc ? "NHWC" : "NCHW"));
                const QConvShape s = shape_of(k, x_nhwc, y_nhwc);
                const auto x = x_nhwc ? to_nhwc(x_nchw, k.n, k.c, k.h * k.w, 1) : x_nchw;
                auto want32 = dsinfer::test::qconv_sums(s, x_nchw, w, w_unsigned, zx, zw);
                for (QIsa isa : wino_isas()) {
                    INFO("family " << dsinfer::detail::qisa_name(isa));
                    const PackedQConvW wino =
                        dsinfer::detail::pack_qconv_weights(w.data(), w_unsigned, s, isa, false,
                                                            true, zw.empty() ? nullptr : zw.data());
                    REQUIRE(wino.winograd());
                    CHECK(wino.wino.front().isa == isa);
                    const PackedQConvW direct = dsinfer::detail::pack_qconv_weights(
                        w.data(), w_unsigned, s, isa, false, false);
                    REQUIRE(!direct.winograd());
                    QGemmParams p;
                    p.a_zero = zx;
                    p.b_zero = w_unsigned ? 128 : 0;
                    if (!zw.empty()) p.b_zeros = zw.data();  // the direct form: a term
                    std::vector<float> scales(static_cast<std::size_t>(k.m));
                    std::vector<std::int32_t> bias(static_cast<std::size_t>(k.m));
                    std::mt19937 r(seed + 2);
                    for (int64_t o = 0; o < k.m; ++o) {
                        scales[static_cast<std::size_t>(o)] =
                            1e-4f * static_cast<float>(1 + r() % 50);
                        bias[static_cast<std::size_t>(o)] =
                            static_cast<std::int32_t>(r() % 20001) - 10000;
                    }
                    for (int threads : {1, 2}) {
                        INFO("threads " << threads);
                        // s32: the exact sums.
                        p.out = QGemmOutput::s32;
                        auto got = run(s, x, wino, p, 4, {}, threads);
                        std::vector<std::uint8_t> want(want32.size() * 4);
                        std::memcpy(want.data(), want32.data(), want.size());
                        if (y_nhwc) want = to_nhwc(want, k.n, k.m, s.oh * s.ow, 4);
                        int64_t bad = 0;
                        for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
                        CHECK(bad == 0);
                        // u8, s8 requantized (per-channel scales, int32 bias, Relu), f32, and
                        // the fused QLinearAdd of a residual: as the direct form, bitwise.
                        // (4: the residual in the other memory order than y's)
                        for (int out = 0; out < 5; ++out) {
                            INFO("output kind " << out);
                            QGemmParams q = p;
                            q.out = out == 1   ? QGemmOutput::s8
                                    : out == 2 ? QGemmOutput::f32
                                               : QGemmOutput::u8;
                            q.a_scale = 0.05f;
                            q.b_scales = scales.data();
                            q.bias_s32 = out == 2 ? nullptr : bias.data();
                            q.y_scale = 0.3f;
                            q.y_zero = out == 1 ? -7 : 100;
                            if (out == 0) q.act.kind = dsinfer::detail::Activation::relu;
                            std::vector<std::uint8_t> y0, r;
                            QConvShape sr = s;
                            if (out >= 3) {
                                y0 = random_bytes(static_cast<std::size_t>(k.n * k.m * s.oh * s.ow),
                                                  seed + 3);
                                q.residual = y0.data();  // (run: y itself)
                                if (out == 4) {          // apart, in the other order
                                    r = random_bytes(y0.size(), seed + 4);
                                    q.residual = r.data();
                                    sr.r_nhwc = !s.y_nhwc;
                                }
                                q.residual_row = sr.r_nhwc ? k.m : 1;
                                q.residual_col = sr.r_nhwc ? 1 : s.oh * s.ow;
                                q.add = dsinfer::detail::qlinear_add_params(q.y_scale, 0.4f, 0.6f,
                                                                            q.y_zero, 120, 125);
                            }
                            const std::size_t e = out == 2 ? 4 : 1;
                            const auto a = run(sr, x, wino, q, e, y0, threads);
                            const auto b = run(sr, x, direct, q, e, y0, threads);
                            CHECK(a == b);
                        }
                    }
                }
            }
    }
}

}  // namespace

TEST_CASE("qconv's Winograd form equals the exact sums and the direct form bitwise",
          "[fast][qconv]") {
    std::vector<WCase> cases{
        {1, 4, 7, 6, 9, 1, 1, 1, 1},      // odd output height
        {2, 20, 9, 10, 33, 1, 1, 1, 1},   // channels past 16, a partial panel
        {1, 64, 12, 13, 64, 0, 0, 0, 0},  // no padding: 10 x 11
        {1, 16, 5, 5, 5, 0, 1, 2, 0},     // asymmetric pads
        {3, 32, 1, 1, 8, 1, 1, 1, 1},     // a 1x1 image
        {1, 8, 40, 300, 6, 1, 1, 1, 1},   // several chunks an image
        {1, 520, 4, 3, 20, 1, 1, 1, 1},   // K past the 16-bit block (512 rows)
        {2, 2, 6, 6, 3, 1, 1, 1, 1},      // two channels
    };
    std::uint32_t seed = 4100;
    for (const WCase& k : cases) check_case(k, seed += 10);
}

TEST_CASE("qconv's Winograd form is exact at its bound and not packed past it", "[fast][qconv]") {
    // Each output channel's sum of |w| times 255 must stay below 2^29 (the sums times 4 in s32):
    // 1800 channels of -128 weights give 528,768,000 (packed; x all 255 makes the sums
    // -528,768,000, times 4 within 1% of -2^31), 1830 pass it (the direct form instead).
    // u8 weights 0 of zero point 255 (|w - zw| = 255, the most any zero point allows): 917
    // channels give 917 * 9 * 255 * 255 = 536,651,325 (packed; the sums times 4 within 0.05% of
    // -2^31), 918 pass 2^29.
    struct Bound {
        bool w_unsigned;
        std::uint8_t w;
        std::int32_t zw;
        int64_t packed_c, past_c;
    };
    for (const Bound& bd : {Bound{false, 0x80, 0, 1800, 1830}, Bound{true, 0, 255, 917, 918}})
        for (QIsa isa : wino_isas()) {
            INFO("family " << dsinfer::detail::qisa_name(isa) << ", w " << int{bd.w}
                           << " zero point " << bd.zw);
            for (int64_t c : {bd.packed_c, bd.past_c}) {
                WCase k{1, c, 4, 4, 2, 1, 1, 1, 1};
                const QConvShape s = shape_of(k, true, true);
                const std::vector<std::uint8_t> w(static_cast<std::size_t>(k.m * c * 9), bd.w);
                const std::vector<std::int32_t> zw(static_cast<std::size_t>(k.m), bd.zw);
                const PackedQConvW packed = dsinfer::detail::pack_qconv_weights(
                    w.data(), bd.w_unsigned, s, isa, false, true, zw.data());
                CHECK(packed.winograd() == (c == bd.packed_c));
                if (!packed.winograd()) continue;
                const std::vector<std::uint8_t> x_nchw(static_cast<std::size_t>(c * 16), 255);
                QGemmParams p;
                p.out = QGemmOutput::s32;
                p.b_zero = bd.zw;
                const auto got = run(s, to_nhwc(x_nchw, 1, c, 16, 1), packed, p, 4, {}, 2);
                const auto want = dsinfer::test::qconv_sums(s, x_nchw, w, bd.w_unsigned, 0, zw);
                // an inner pixel: all nine taps
                REQUIRE(want[5] ==
                        (int{bd.w_unsigned ? bd.w : static_cast<std::int8_t>(bd.w)} - bd.zw) * 255 *
                            9 * c);
                std::vector<std::int32_t> g(want.size());
                std::memcpy(g.data(), got.data(), got.size());
                const auto want_nhwc = [&](int64_t o, int64_t px) {
                    return want[static_cast<std::size_t>(o * 16 + px)];
                };
                int64_t bad = 0;
                for (int64_t px = 0; px < 16; ++px)
                    for (int64_t o = 0; o < 2; ++o)
                        bad += g[static_cast<std::size_t>(px * 2 + o)] != want_nhwc(o, px);
                CHECK(bad == 0);
            }
        }
}
