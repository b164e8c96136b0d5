// dsinfer's packed-B INT8 GEMM (src/kernels/qgemm.cpp) against a naive 64-bit reference, for
// every micro-kernel family this CPU runs (baseline, avx2 with 16-bit vpmaddwd, AVX-VNNI,
// AVX-512 VNNI; the ones it lacks are named in a warning): odd shapes from 1 to 67 in M, N, K,
// K across the packed blocks, M across the row blocks, BERT's 128 x 768 x 768; extreme values
// (A = 255 against B = 127 / -128 everywhere, which saturates vpmaddubsw's 16-bit pair sums);
// per-tensor and per-column zero points; u8 and s8 A and B; transposed packing; lda / ldc
// strides; both work splits (column panels, row tiles) at 1 and 2 threads, with and without a
// workspace; and every epilogue:
//   s32  exact;
//   f32  float(c) * (a_scale * b_scale[n]) + bias[n], then Relu / other activations, against
//        the same expression in double: |got - want| <= 2^-21 * (|c * scale| + |bias|) (the two
//        f32 roundings; the product of the scales is rounded in both);
//   u8/s8 exact against ONNX QuantizeLinear (as src/cpu/reference/quant.cpp computes it:
//        f32 division, round half to even, saturate, NaN -> zero point) of the f32 epilogue's
//        value computed in f32 in the same order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/qgemm.hpp"
#include "kernels/activation_f32.hpp"
#include "ops/activation.hpp"
#include "ops/qlinear.hpp"
#include "runtime/parallel.hpp"

namespace {

using dsinfer::detail::Activation;
using dsinfer::detail::PackedQB;
using dsinfer::detail::QBForm;
using dsinfer::detail::QGemmOutput;
using dsinfer::detail::QGemmParams;
using dsinfer::detail::QIsa;
using std::int64_t;

/// The families this run covers, narrowest first; warns once about the ones the CPU lacks.
std::vector<QIsa> qisas() {
    std::vector<QIsa> out;
    std::ostringstream missing;
    const QIsa cap = dsinfer::detail::qgemm_isa();
    for (QIsa isa : {QIsa::baseline, QIsa::avx2, QIsa::avx_vnni, QIsa::avx512_vnni}) {
        if (static_cast<int>(isa) <= static_cast<int>(cap) && dsinfer::detail::qgemm_supported(isa))
            out.push_back(isa);
        else missing << ' ' << dsinfer::detail::qisa_name(isa);
    }
    static bool warned = false;
    if (!warned && !missing.str().empty()) {
        warned = true;
        WARN("qgemm families not tested here (this CPU / DSINFER_MAX_CPU_ISA lacks them):"
             << missing.str());
    }
    return out;
}

struct Case {
    int64_t m = 1, k = 1, n = 1;
    bool a_signed = false, b_unsigned = false, transposed = false;
    int32_t za = 0, zb = 0;
    bool zb_per_column = false;
    int64_t lda_pad = 0, ldc_pad = 0;
    QGemmOutput out = QGemmOutput::s32;
    bool scale_per_column = false, bias = false;
    Activation act = Activation::none;
    float y_scale = 1.f;
    int32_t y_zero = 0;
    bool workspace = true;
    // fill: 0 random, 1 A = max and B = max, 2 A = max and B = min
    int fill = 0;
};

/// The requantized output of an s32 sum c (ops/quantize.hpp requantize_product, written out
/// here): float(c) * ((a_scale * b_scale) / y_scale) in f32, Relu, rounded half to even, plus the
/// zero point, saturated; NaN -> the zero point.
int32_t requantize(int32_t c, float a_scale, float b_scale, float y_scale, int32_t zp,
                   QGemmOutput out, bool relu = false) {
    const double lo = out == QGemmOutput::u8 ? 0 : -128, hi = out == QGemmOutput::u8 ? 255 : 127;
    volatile float product = a_scale * b_scale;  // each step rounded to f32, none fused
    volatile float multiplier = product / y_scale;
    volatile float y = static_cast<float>(c) * multiplier;
    double q = static_cast<double>(y);
    if (relu && q < 0) q = 0;
    const double r = std::isnan(q) ? zp : std::nearbyint(q) + zp;
    return static_cast<int32_t>(std::clamp(r, lo, hi));
}

/// sum over q < k of (a[i, q] - za) * b[q, j] for u8 A [m, k] and s8 B [k, n] (row-major; u8 B
/// shifted by -128 when `b_unsigned`, as pack_qb stores it with zero point 128).
int64_t ref_dot(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t i, int64_t j,
                int64_t k, int64_t n, int32_t za, bool b_unsigned = false) {
    int64_t sum = 0;
    for (int64_t q = 0; q < k; ++q) {
        const uint8_t bv = b[static_cast<std::size_t>(q * n + j)];
        sum += (a[static_cast<std::size_t>(i * k + q)] - za) *
               (b_unsigned ? bv - 128 : static_cast<int8_t>(bv));
    }
    return sum;
}

/// Runs one case at one family and thread count and checks every element of C (and that C's
/// padding columns are untouched).
void check(const Case& t, QIsa isa, int threads,
           dsinfer::detail::QBForm form = dsinfer::detail::QBForm::automatic) {
    const int64_t m = t.m, k = t.k, n = t.n, lda = k + t.lda_pad, ldc = n + t.ldc_pad;
    std::mt19937 rng(static_cast<unsigned>(m * 7919 + k * 131 + n * 17 + t.fill));
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> a(static_cast<std::size_t>(m * lda)), b(static_cast<std::size_t>(k * n));
    for (auto& v : a) v = static_cast<uint8_t>(byte(rng));
    for (auto& v : b) v = static_cast<uint8_t>(byte(rng));
    if (t.fill != 0) {
        // A at its maximum (u8 255, s8 127) and B at its maximum or minimum.
        std::fill(a.begin(), a.end(), static_cast<uint8_t>(t.a_signed ? 127 : 255));
        const int bv = t.fill == 1 ? (t.b_unsigned ? 255 : 127) : (t.b_unsigned ? 0 : -128);
        std::fill(b.begin(), b.end(), static_cast<uint8_t>(bv));
    }
    auto aval = [&](int64_t i, int64_t p) -> int64_t {
        const uint8_t v = a[static_cast<std::size_t>(i * lda + p)];
        return t.a_signed ? static_cast<int8_t>(v) : v;
    };
    auto bval = [&](int64_t p, int64_t j) -> int64_t {
        const uint8_t v = b[static_cast<std::size_t>(t.transposed ? j * k + p : p * n + j)];
        return t.b_unsigned ? v : static_cast<int8_t>(v);
    };
    std::vector<int32_t> zbs(static_cast<std::size_t>(n), t.zb);
    if (t.zb_per_column)
        for (int64_t j = 0; j < n; ++j)
            zbs[static_cast<std::size_t>(j)] =
                t.b_unsigned ? byte(rng) : byte(rng) - 128;
    std::vector<float> bscale(static_cast<std::size_t>(n)), bias(static_cast<std::size_t>(n));
    std::uniform_real_distribution<float> u(0.5f, 2.f), ub(-3.f, 3.f);
    for (auto& s : bscale) s = u(rng) * (t.scale_per_column ? 1e-3f : 0.f) + 2e-3f;
    for (auto& s : bias) s = ub(rng);

    QGemmParams p;
    p.a_signed = t.a_signed;
    p.a_zero = t.za;
    p.b_zero = t.zb;
    p.b_zeros = t.zb_per_column ? zbs.data() : nullptr;
    p.out = t.out;
    p.a_scale = 0.05f;
    p.b_scale = bscale[0];
    p.b_scales = t.scale_per_column ? bscale.data() : nullptr;
    p.bias = t.bias ? bias.data() : nullptr;
    p.act.kind = t.act;
    p.act.alpha = t.act == Activation::clip ? -1.f : 0.1f;
    p.act.beta = 1.5f;
    p.y_scale = t.y_scale;
    p.y_zero = t.y_zero;

    const PackedQB packed =
        dsinfer::detail::pack_qb(b.data(), t.b_unsigned, k, n, t.transposed, isa, form);
    REQUIRE(packed.isa == isa);
    if (isa == QIsa::avx2 && form != dsinfer::detail::QBForm::automatic) {
        REQUIRE(packed.fixed() == (form != dsinfer::detail::QBForm::wide));
        if (packed.fixed()) REQUIRE(packed.paired() == (form == dsinfer::detail::QBForm::paired));
    }
    dsinfer::detail::ThreadBudget budget(threads);
    const std::size_t esize = t.out == QGemmOutput::s32 || t.out == QGemmOutput::f32 ? 4 : 1;
    std::vector<unsigned char> c(static_cast<std::size_t>(m * ldc) * esize, 0xA5);
    std::vector<unsigned char> ws;
    if (t.workspace)
        ws.resize(dsinfer::detail::qgemm_workspace_bytes(m, packed, dsinfer::detail::max_threads()));
    REQUIRE(dsinfer::detail::qgemm_packed(m, a.data(), lda, packed, c.data(), ldc, p,
                                          ws.empty() ? nullptr : ws.data(), ws.size()));
    int64_t bad = 0;
    for (int64_t i = 0; i < m && bad < 5; ++i) {
        for (int64_t j = 0; j < ldc && bad < 5; ++j) {
            const unsigned char* e = c.data() + static_cast<std::size_t>(i * ldc + j) * esize;
            INFO("isa=" << dsinfer::detail::qisa_name(isa)
                        << (packed.fixed() ? packed.paired() ? " (paired)" : " (bytes)" : "")
                        << " threads=" << threads << " m=" << m << " k=" << k << " n=" << n
                        << " i=" << i << " j=" << j << " a_signed=" << t.a_signed
                        << " b_unsigned=" << t.b_unsigned << " transposed=" << t.transposed
                        << " za=" << t.za << " zb=" << t.zb << " zb_per_column=" << t.zb_per_column
                        << " out=" << static_cast<int>(t.out) << " fill=" << t.fill);
            if (j >= n) {  // padding columns untouched
                for (std::size_t q = 0; q < esize; ++q)
                    if (e[q] != 0xA5) ++bad;
                CHECK(bad == 0);
                continue;
            }
            int64_t sum = 0;
            const int64_t zb = zbs[static_cast<std::size_t>(j)];
            for (int64_t q = 0; q < k; ++q) sum += (aval(i, q) - t.za) * (bval(q, j) - zb);
            const auto want_c = static_cast<int32_t>(sum);
            if (t.out == QGemmOutput::s32) {
                int32_t got;
                std::memcpy(&got, e, 4);
                if (got != want_c) ++bad;
                CHECK(got == want_c);
                continue;
            }
            const float scale = p.b_scales != nullptr ? p.a_scale * p.b_scales[j] : p.a_scale * p.b_scale;
            const float bj = p.bias != nullptr ? p.bias[j] : 0.f;
            volatile float product = static_cast<float>(want_c) * scale;  // not fused
            float y = product + bj;
            // The activation as the unfused op's fast kernel computes it (the vector loop of
            // activation_loop_f32), else the scalar one.
            if (const auto loop = dsinfer::detail::activation_loop_f32(p.act);
                loop != nullptr && p.act.kind != Activation::relu)
                loop(&y, &y, 1);
            else
                y = dsinfer::detail::apply_activation(y, p.act);
            if (t.out == QGemmOutput::f32) {
                float got;
                std::memcpy(&got, e, 4);
                double want = static_cast<double>(want_c) * scale + bj;
                const double tol = std::ldexp(std::fabs(static_cast<double>(want_c) * scale) +
                                                  std::fabs(bj), -21);
                if (t.act == Activation::relu) want = std::max(want, 0.0);
                if (t.act == Activation::none || t.act == Activation::relu) {
                    if (!(std::fabs(got - want) <= tol)) ++bad;
                    CHECK(std::fabs(got - want) <= tol);
                } else {  // the activation of the same f32 value
                    if (got != y) ++bad;
                    CHECK(got == y);
                }
                continue;
            }
            // u8/s8 outputs take no float bias and no activation but Relu (qgemm.hpp).
            REQUIRE(!t.bias);
            REQUIRE((t.act == Activation::none || t.act == Activation::relu));
            const float bscale = p.b_scales != nullptr ? p.b_scales[j] : p.b_scale;
            const int32_t want_q = requantize(want_c, p.a_scale, bscale, t.y_scale, t.y_zero, t.out,
                                              t.act == Activation::relu);
            const int32_t got = t.out == QGemmOutput::u8 ? static_cast<int32_t>(e[0])
                                                          : static_cast<int32_t>(static_cast<int8_t>(e[0]));
            if (got != want_q) ++bad;
            CHECK(got == want_q);
        }
    }
}

/// Every family the host runs; avx2 in all three forms (the byte forms with their corrections).
void check_all(const Case& t, std::vector<int> threads = {1}) {
    for (QIsa isa : qisas())
        for (int th : threads) {
            if (isa != QIsa::avx2) {
                check(t, isa, th);
                continue;
            }
            check(t, isa, th, dsinfer::detail::QBForm::wide);
            check(t, isa, th, dsinfer::detail::QBForm::bytes);
            check(t, isa, th, dsinfer::detail::QBForm::paired);
        }
}

}  // namespace

TEST_CASE("qgemm s32 matches the reference on odd shapes from 1 to 67", "[fast][qgemm]") {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> z(0, 255);
    int cases = 0;
    for (int64_t m : {1, 2, 3, 5, 7, 11, 12, 13, 25, 31, 67})
        for (int64_t k : {1, 2, 3, 4, 5, 7, 9, 31, 64, 67})
            for (int64_t n : {1, 3, 8, 15, 16, 17, 31, 33, 47, 63, 65, 67}) {
                Case t;
                t.m = m;
                t.k = k;
                t.n = n;
                // Rotate through the operand types, zero points and packing.
                t.a_signed = (cases & 1) != 0;
                t.b_unsigned = (cases & 2) != 0;
                t.transposed = (cases & 4) != 0;
                t.zb_per_column = (cases % 5) == 0;
                t.za = (cases % 3) == 0 ? 0 : t.a_signed ? z(rng) - 128 : z(rng);
                t.zb = (cases % 7) == 0 ? 0 : t.b_unsigned ? z(rng) : z(rng) - 128;
                t.lda_pad = (cases % 4) == 1 ? 3 : 0;
                t.ldc_pad = (cases % 6) == 1 ? 5 : 0;
                check_all(t);
                ++cases;
            }
    CHECK(cases == 1320);
}

TEST_CASE("qgemm crosses K blocks and row blocks, both work splits, 1 and 2 threads",
          "[fast][qgemm]") {
    struct S { int64_t m, k, n; };
    // K over the 512 / 768 / 1024-row blocks; M over the 96 / 192-row blocks; few panels
    // (row tiles per thread) and many (panel chunks); many panels and a row block per thread
    // (AVX-512 VNNI splits the rows: Family::split_rows).
    for (const S s : {S{50, 1537, 40}, S{300, 1025, 24}, S{37, 2049, 200}, S{200, 800, 130},
                      S{401, 90, 70}, S{9, 3072, 96}, S{390, 300, 560}}) {
        for (bool ws : {true, false}) {
            Case t;
            t.m = s.m;
            t.k = s.k;
            t.n = s.n;
            t.za = 3;
            t.zb = -5;
            t.workspace = ws;
            check_all(t, {1, 2});
            t.out = QGemmOutput::u8;
            t.scale_per_column = true;
            t.y_scale = 0.25f;
            t.y_zero = 100;
            check_all(t, {2});
        }
    }
}

TEST_CASE("qgemm at BERT-base's 128 x 768 x 768", "[fast][qgemm]") {
    Case t;
    t.m = 128;
    t.k = 768;
    t.n = 768;
    t.transposed = true;
    t.za = 131;
    t.zb_per_column = true;
    t.b_unsigned = false;
    check_all(t, {1, 2});
    t.out = QGemmOutput::f32;
    t.bias = true;
    t.scale_per_column = true;
    t.act = Activation::relu;
    check_all(t, {2});
}

TEST_CASE("qgemm's inline tile stores (B's zero point 0) equal the reference", "[fast][qgemm]") {
    // With B's zero point 0 as packed (s8 B at 0, u8 B at 128) and no residual, a full tile
    // (MR rows, a whole panel) stores u8/s8, and f32 with no activation or Relu, from its
    // registers (store_inline in qgemm_kernels.inc); short tiles, partial panels and K blocks
    // before the last go through store_tile. Shapes with both kinds of tile and panel, one and
    // several K blocks (the partial sums of earlier blocks added), padded rows of C, saturating
    // and non-saturating output scales, per-tensor and per-column scales, bias, 1 and 2 threads.
    struct S {
        int64_t m, k, n;
    };
    for (const S s : {S{24, 64, 64}, S{37, 256, 100}, S{50, 1537, 96}, S{13, 3072, 40}})
        for (QGemmOutput out : {QGemmOutput::u8, QGemmOutput::s8, QGemmOutput::f32})
            for (Activation act : {Activation::none, Activation::relu})
                for (bool b_unsigned : {false, true}) {
                    Case t;
                    t.m = s.m;
                    t.k = s.k;
                    t.n = s.n;
                    t.transposed = true;
                    t.b_unsigned = b_unsigned;
                    t.zb = b_unsigned ? 128 : 0;
                    t.za = b_unsigned ? 0 : 77;
                    t.ldc_pad = 3;
                    t.out = out;
                    t.act = act;
                    t.scale_per_column = b_unsigned;
                    t.bias = out == QGemmOutput::f32 && !b_unsigned;
                    t.y_scale = s.m % 2 != 0 ? 0.02f : 0.3f;
                    t.y_zero = out == QGemmOutput::u8 ? 100 : -20;
                    check_all(t, {1, 2});
                }
}

TEST_CASE("qgemm is exact at extreme values (vpmaddubsw would saturate)", "[fast][qgemm]") {
    for (int fill : {1, 2})
        for (bool a_signed : {false, true})
            for (bool b_unsigned : {false, true})
                for (int64_t k : {4, 67, 768, 1030}) {
                    Case t;
                    t.m = 13;
                    t.k = k;
                    t.n = 35;
                    t.fill = fill;
                    t.a_signed = a_signed;
                    t.b_unsigned = b_unsigned;
                    check_all(t);
                    // Zero points at both ends.
                    t.za = a_signed ? -128 : 255;
                    t.zb = b_unsigned ? 0 : 127;
                    check_all(t);
                    t.za = a_signed ? 127 : 0;
                    t.zb = b_unsigned ? 255 : -128;
                    check_all(t);
                }
}

TEST_CASE("qgemm dequantizes to f32 with per-tensor and per-column scales, bias, activations",
          "[fast][qgemm]") {
    for (bool per_col : {false, true})
        for (bool bias : {false, true})
            for (Activation act : {Activation::none, Activation::relu, Activation::sigmoid,
                                   Activation::clip, Activation::gelu}) {
                Case t;
                t.m = 29;
                t.k = 75;
                t.n = 45;
                t.za = 7;
                t.zb = 2;
                t.zb_per_column = per_col;
                t.out = QGemmOutput::f32;
                t.scale_per_column = per_col;
                t.bias = bias;
                t.act = act;
                check_all(t, {1, 2});
            }
}

TEST_CASE("qgemm requantizes to u8 and s8 as QLinearMatMul does", "[fast][qgemm]") {
    for (QGemmOutput out : {QGemmOutput::u8, QGemmOutput::s8})
        for (bool per_col : {false, true})
            for (Activation act : {Activation::none, Activation::relu})
                for (float ys : {0.01f, 0.05f, 0.5f, 3.f}) {  // saturating and not
                    Case t;
                    t.m = 19;
                    t.k = 130;
                    t.n = 37;
                    t.a_signed = per_col;
                    t.za = per_col ? -3 : 128;
                    t.zb = 1;
                    t.out = out;
                    t.scale_per_column = per_col;
                    t.act = act;
                    t.y_scale = ys;
                    t.y_zero = out == QGemmOutput::u8 ? 128 : -7;
                    check_all(t, {1, 2});
                }
}

TEST_CASE("qgemm requantization rounds half to even and maps NaN to the zero point",
          "[fast][qgemm]") {
    // 1 x 1 x n with A = 1 and B = j - 8: c = j - 8; scale 1, y_scale 2: y / 2 = -4, -3.5, ...
    for (QIsa isa : qisas()) {
        const int64_t n = 17;
        std::vector<int8_t> b(static_cast<std::size_t>(n));
        for (int64_t j = 0; j < n; ++j) b[static_cast<std::size_t>(j)] = static_cast<int8_t>(j - 8);
        const uint8_t a[1] = {1};
        const PackedQB packed = dsinfer::detail::pack_qb(b.data(), false, 1, n, false, isa);
        QGemmParams p;
        p.out = QGemmOutput::s8;
        p.y_scale = 2.f;
        p.y_zero = 0;
        std::vector<int8_t> c(static_cast<std::size_t>(n));
        REQUIRE(dsinfer::detail::qgemm_packed(1, a, 1, packed, c.data(), n, p));
        for (int64_t j = 0; j < n; ++j)
            CHECK(c[static_cast<std::size_t>(j)] ==
                  static_cast<int8_t>(std::nearbyint((static_cast<float>(j) - 8.f) / 2.f)));
        // A NaN multiplier (b_scale NaN): every element is the zero point.
        p.b_scale = std::numeric_limits<float>::quiet_NaN();
        p.y_zero = 9;
        REQUIRE(dsinfer::detail::qgemm_packed(1, a, 1, packed, c.data(), n, p));
        for (int64_t j = 0; j < n; ++j) CHECK(c[static_cast<std::size_t>(j)] == 9);
        // An infinite one (y_scale the smallest subnormal): c > 0 saturates high, c < 0 low,
        // c = 0 (inf * 0 = NaN) is the zero point.
        p.b_scale = 1.f;
        p.y_scale = std::numeric_limits<float>::denorm_min();
        REQUIRE(dsinfer::detail::qgemm_packed(1, a, 1, packed, c.data(), n, p));
        for (int64_t j = 0; j < n; ++j)
            CHECK(c[static_cast<std::size_t>(j)] == (j > 8 ? 127 : j < 8 ? -128 : 9));
    }
}

TEST_CASE("qgemm requantization is float(c) times the multiplier at near-ties", "[fast][qgemm]") {
    // With A = 1, B = c (every s8 value) and y_scale = 2 * a_scale * (1 + d 2^-23), float(c) *
    // multiplier lies within a few ulps of c / 2, where other evaluation orders (the division
    // y / y_scale, a double product) round to different integers. Every element must be
    // requantize_product's value. Also subnormal and huge y_scales (infinite and subnormal
    // multipliers).
    std::mt19937 rng(77);
    std::uniform_real_distribution<float> unit(1e-3f, 1.f);
    const int64_t n = 256;
    std::vector<int8_t> b(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) b[static_cast<std::size_t>(j)] = static_cast<int8_t>(j - 128);
    const uint8_t a[1] = {1};
    for (QIsa isa : qisas()) {
        INFO(dsinfer::detail::qisa_name(isa));
        const PackedQB packed = dsinfer::detail::pack_qb(b.data(), false, 1, n, false, isa);
        int64_t bad = 0;
        for (int trial = 0; trial < 200; ++trial) {
            const float s = unit(rng);
            for (int d = -6; d <= 6; ++d) {
                QGemmParams p;
                p.out = trial % 2 ? QGemmOutput::s8 : QGemmOutput::u8;
                p.a_scale = s;
                p.b_scale = 1.f;
                p.y_scale = trial == 0 ? 1e-40f : trial == 1 ? 3e38f
                                                             : 2.f * s * (1.f + d * 0x1p-23f);
                p.y_zero = p.out == QGemmOutput::u8 ? 128 : 0;
                std::vector<uint8_t> c(static_cast<std::size_t>(n));
                REQUIRE(dsinfer::detail::qgemm_packed(1, a, 1, packed, c.data(), n, p));
                for (int64_t j = 0; j < n; ++j) {
                    const int32_t want = requantize(static_cast<int32_t>(j - 128), s, 1.f,
                                                    p.y_scale, p.y_zero, p.out);
                    const int32_t got = p.out == QGemmOutput::u8
                                            ? static_cast<int32_t>(c[static_cast<std::size_t>(j)])
                                            : static_cast<int32_t>(static_cast<int8_t>(c[static_cast<std::size_t>(j)]));
                    bad += got != want;
                }
            }
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("qgemm's fused QLinearAdd equals the scalar QLinearAdd, finite or not",
          "[fast][qgemm]") {
    // C = QLinearAdd(requantized product, residual R) in the store, against requantize() and
    // ops/qlinear.hpp's scalar qlinear_add_value / qlinear_requantize per element. Ratios of
    // the scales up to 1e30 take the store's integer rounding (up to |ra| + |rb| = 8192 with no
    // clamp before it; above that, as ra 2.5e8 here, clamped to +-1024 first); beyond 1e30
    // (ra * 255 overflows, +inf + -inf = NaN) the lanes forms with their NaN -> zero point.
    namespace d = dsinfer::detail;
    // Full tiles (stored inline: B's zero point is 0), short ones and a partial panel at every
    // family; the residual apart from C and C itself (in place, as QLinearConvAdd runs).
    const int64_t m = 29, k = 40, n = 77;
    std::mt19937 rng(91);
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
        r(static_cast<std::size_t>(m * n));
    for (auto* v : {&a, &b, &r})
        for (auto& x : *v) x = static_cast<uint8_t>(byte(rng));
    struct Scales { float ys, rs, cs; };
    for (const Scales sc : {Scales{0.5f, 0.03f, 0.04f}, Scales{0.05f, 0.03f, 0.001f},
                            Scales{0.5f, 0.3f, 2e-9f}, Scales{0.06f, 0.5f, 2e-38f}})
        for (QGemmOutput out : {QGemmOutput::u8, QGemmOutput::s8})
            for (QIsa isa : qisas()) {
                INFO(d::qisa_name(isa) << " ys " << sc.ys << " cs " << sc.cs << " s8 "
                                       << (out == QGemmOutput::s8));
                const bool s8 = out == QGemmOutput::s8;
                const PackedQB packed = d::pack_qb(b.data(), false, k, n, false, isa);
                QGemmParams p;
                p.a_zero = 3;
                p.out = out;
                p.a_scale = 0.02f;
                p.b_scale = 0.01f;
                p.y_scale = sc.ys;
                p.y_zero = s8 ? -5 : 120;
                const int32_t rz = s8 ? 7 : 130, cz = s8 ? -3 : 100;
                p.add = d::qlinear_add_params(sc.ys, sc.rs, sc.cs, p.y_zero, rz, cz);
                p.residual = r.data();
                p.residual_row = n;
                p.residual_col = 1;
                std::vector<uint8_t> c(static_cast<std::size_t>(m * n));
                REQUIRE(d::qgemm_packed(m, a.data(), k, packed, c.data(), n, p));
                std::vector<uint8_t> c_in_place = r;
                p.residual = c_in_place.data();
                REQUIRE(d::qgemm_packed(m, a.data(), k, packed, c_in_place.data(), n, p));
                CHECK(c_in_place == c);
                int64_t bad = 0;
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) {
                        const int64_t sum = ref_dot(a, b, i, j, k, n, 3);
                        const int32_t y = requantize(static_cast<int32_t>(sum), p.a_scale,
                                                     p.b_scale, p.y_scale, p.y_zero, out);
                        const uint8_t rv = r[static_cast<std::size_t>(i * n + j)];
                        const int32_t rr = s8 ? static_cast<int8_t>(rv) : rv;
                        const float v = d::qlinear_add_value(y, rr, p.add);
                        const int32_t want = s8 ? d::qlinear_requantize<int8_t>(v, cz)
                                                : d::qlinear_requantize<uint8_t>(v, cz);
                        const uint8_t cv = c[static_cast<std::size_t>(i * n + j)];
                        const int32_t got = s8 ? static_cast<int8_t>(cv) : cv;
                        bad += got != want;
                    }
                CHECK(bad == 0);
            }
}

TEST_CASE("qgemm with K = 0 stores the epilogue of an empty sum", "[fast][qgemm]") {
    for (QIsa isa : qisas()) {
        const int8_t* none = nullptr;
        const PackedQB packed = dsinfer::detail::pack_qb(none, false, 0, 5, false, isa);
        const uint8_t a[3] = {1, 2, 3};
        QGemmParams p;
        p.a_zero = 4;
        p.b_zero = 6;
        p.out = QGemmOutput::f32;
        const float bias[5] = {1, -2, 3, -4, 5};
        p.bias = bias;
        p.act.kind = Activation::relu;
        float c[15];
        REQUIRE(dsinfer::detail::qgemm_packed(3, a, 1, packed, c, 5, p));
        for (int i = 0; i < 15; ++i) CHECK(c[i] == std::max(bias[i % 5], 0.f));
    }
}

TEST_CASE("qgemm packs for the capped family; the workspace query covers the call",
          "[fast][qgemm]") {
    const std::vector<int8_t> b(64 * 40, 1);
    const QIsa best = dsinfer::detail::qgemm_isa();
    CHECK(dsinfer::detail::pack_qb(b.data(), false, 64, 40, false, QIsa::avx512_vnni).isa == best);
    const PackedQB base = dsinfer::detail::pack_qb(b.data(), false, 64, 40, false, QIsa::baseline);
    CHECK(base.isa == QIsa::baseline);
    CHECK(base.kp == 64);
    CHECK(base.colsum.get()[0] == 64);
    for (QIsa isa : qisas()) {
        const PackedQB pk = dsinfer::detail::pack_qb(b.data(), false, 64, 40, false, isa);
        CHECK(pk.bytes() >= static_cast<std::uint64_t>(64 * 40));
        CHECK(dsinfer::detail::qgemm_workspace_bytes(100, pk, 2) > 0);
        CHECK(dsinfer::detail::qgemm_workspace_bytes(0, pk, 2) == 0);
    }
}

TEST_CASE("qgemm avx2 byte forms: cut values and exact corrections", "[fast][qgemm]") {
    // The byte forms' s16 sums overflow when the values of B in one of them (two rows of K: a
    // group a step; four, two of each group: paired) have positive ones summing to more than 128
    // or negative ones to less than -128; pack_qb cuts those and keeps the rest as corrections.
    // Kinds of B: random (most steps need one: the automatic choice is the 16-bit form), small
    // (|b| <= 20: none in either form, automatic picks paired), per-tensor-like (small, one in a
    // thousand +-127: both forms with corrections), values at the bounds (sums of exactly 128
    // and 129 of either sign: +-32, +-33, +-64, +-65, +-127, -128, 0), and normal like per-tensor
    // weights (sigma 127 / 4.5: in K order about one step in two of the paired form needs a
    // correction; pack_qb's pairing of the groups leaves few, and automatic picks the paired
    // form), across K blocks (K 2500 > 1024, 625 groups: the last block has an odd count, its
    // last group taken alone), against the reference s32 at both extremes of A. The paired
    // form's step order is a permutation of each block's groups.
    if (!dsinfer::detail::qgemm_supported(QIsa::avx2) ||
        static_cast<int>(dsinfer::detail::qgemm_isa()) < static_cast<int>(QIsa::avx2)) {
        WARN("avx2 byte forms not tested: no AVX2 family here");
        return;
    }
    const int64_t m = 29, k = 2500, n = 37;
    std::mt19937 rng(77);
    std::uniform_int_distribution<int> byte(0, 255), small(-20, 20), pick(0, 99);
    const int edges[] = {32, 33, 64, 65, 127, -32, -33, -64, -65, -127, -128, 0};
    std::uniform_int_distribution<int> edge(0, 11);
    std::normal_distribution<float> normal(0.f, 127.f / 4.5f);
    for (int kind = 0; kind < 5; ++kind) {
        INFO("kind " << kind);
        std::vector<uint8_t> b(static_cast<std::size_t>(k * n));
        for (auto& v : b) {
            int x = kind == 0   ? byte(rng) - 128
                    : kind == 3 ? edges[edge(rng)]
                    : kind == 4
                        ? static_cast<int>(std::clamp(std::nearbyint(normal(rng)), -127.f, 127.f))
                        : small(rng);
            if (kind == 2 && pick(rng) == 0 && pick(rng) < 10) x = pick(rng) < 50 ? 127 : -127;
            v = static_cast<uint8_t>(static_cast<int8_t>(x));
        }
        const PackedQB automatic =
            dsinfer::detail::pack_qb(b.data(), false, k, n, false, QIsa::avx2);
        if (kind == 0) CHECK_FALSE(automatic.fixed());
        if (kind == 1 || kind == 2 || kind == 4) {
            CHECK(automatic.fixed());
            CHECK(automatic.paired());
        }
        for (QBForm form : {QBForm::bytes, QBForm::paired}) {
            const bool paired = form == QBForm::paired;
            INFO((paired ? "paired" : "a group a step"));
            const PackedQB packed =
                dsinfer::detail::pack_qb(b.data(), false, k, n, false, QIsa::avx2, form);
            REQUIRE(packed.fixed());
            REQUIRE(packed.paired() == paired);
            CHECK((packed.fix_count() == 0) == (kind == 1));
            if (paired) {
                for (int64_t kb = 0; kb < packed.kp; kb += packed.kc) {
                    const int64_t groups = std::min(packed.kc, packed.kp - kb) / 4;
                    for (int64_t pi = 0; pi < packed.panels; ++pi) {
                        const uint16_t* ord =
                            packed.order.get() + kb / 4 * packed.panels + pi * groups;
                        std::vector<int> seen(static_cast<std::size_t>(groups), 0);
                        for (int64_t s = 0; s < groups; ++s) {
                            REQUIRE(ord[s] < groups);
                            ++seen[ord[s]];
                        }
                        CHECK(std::count(seen.begin(), seen.end(), 1) == groups);
                    }
                }
                // Corrections per 8 rows of K and panel.
                const double rate =
                    static_cast<double>(packed.fix_count()) /
                    (static_cast<double>(packed.kp) / 8.0 * static_cast<double>(packed.panels));
                if (kind == 4) CHECK(rate < 0.3);
            }
            CHECK_FALSE(dsinfer::detail::qgemm_rows_supported(packed, QGemmParams{}));
            for (int fill : {0, 255}) {
                std::vector<uint8_t> a(static_cast<std::size_t>(m * k));
                for (auto& v : a) v = fill == 0 ? static_cast<uint8_t>(byte(rng)) : 255;
                QGemmParams p;
                p.a_zero = 3;
                std::vector<int32_t> c(static_cast<std::size_t>(m * n));
                for (int threads : {1, 2}) {
                    dsinfer::detail::ThreadBudget budget(threads);
                    REQUIRE(dsinfer::detail::qgemm_packed(m, a.data(), k, packed, c.data(), n, p));
                    int64_t bad = 0;
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j)
                            bad += c[static_cast<std::size_t>(i * n + j)] !=
                                   static_cast<int32_t>(ref_dot(a, b, i, j, k, n, 3));
                    CHECK(bad == 0);
                }
            }
        }
    }
}

TEST_CASE("qgemm_rows (A through row pointers) equals the reference and qgemm_packed bitwise",
          "[fast][qgemm]") {
    // Each row of A is `segments` runs of `seg` elements, each run at its own place in a pool (as
    // a convolution's taps point into the image; u8 for the VNNI families, the same pool widened
    // to u16 for the 16-bit ones); the same A written out contiguously is what qgemm_packed gets.
    // s32 against a 64-bit reference; the f32 (bias, Relu), u8 and s8 (requantized) and u8 and
    // s8 + residual (the fused QLinearAdd; apart, and in place) epilogues bitwise against
    // qgemm_packed (one segment of K 16-768 on AVX-512: rows_overlap's stores interleaved
    // with the next tile's products, groups that do not divide in quarters; and for u8 and s8
    // without a residual several segments, each in one K block: 2, 3, 7 and 9 of them (9 x 96
    // across two K blocks on AVX-512), the pairs
    // stored after the segments that end each quarter, a stem's 7 kernel rows of 24 bytes among
    // them). Shapes: rows that do
    // not fill a tile, row blocks, partial panels, K blocks crossed inside a segment (seg 512 x 3
    // against KC 768 on AVX-512), a short last tile split with the one before it (1 or 2 rows at
    // any K: 13 and 14 rows at K 64 -> 7 + 6 and 7 + 7 on AVX-512; up to 5 where B's panel slice
    // exceeds L1: K 4608, 49 rows -> 12 x 3 + 7 + 6) or kept (17 rows at K 128), and a short last
    // row block joined to the one before (K 4608: blocks of 48 rows on AVX-512, 54 on AVX-VNNI; 197
    // rows). Segments of 2 and 6 elements (K = 2 mod 4) only for the 16-bit families, which read K
    // in pairs.
    struct Shape {
        int64_t m, segments, seg, n;
    };
    const Shape shapes[] = {
        {1, 1, 4, 1},      {5, 3, 4, 31},     {12, 9, 64, 64},  {13, 1, 64, 33}, {37, 9, 16, 100},
        {400, 1, 256, 70}, {29, 3, 512, 40},  {200, 9, 96, 64}, {17, 2, 64, 40}, {14, 1, 64, 33},
        {49, 9, 512, 64},  {197, 9, 512, 40}, {7, 5, 2, 20},    {9, 3, 6, 17},   {30, 1, 16, 64},
        {21, 1, 36, 64},   {24, 1, 768, 32},  {50, 7, 24, 64},  {26, 3, 12, 32}};
    int tested = 0;
    for (QIsa isa : qisas()) {
        const bool vnni = isa == QIsa::avx512_vnni || isa == QIsa::avx_vnni;
        for (const Shape& sh : shapes) {
            if (vnni && sh.seg % 4 != 0) continue;
            const int64_t m = sh.m, k = sh.segments * sh.seg, n = sh.n;
            INFO(dsinfer::detail::qisa_name(isa)
                 << " m " << m << " segments " << sh.segments << " seg " << sh.seg << " n " << n);
            std::mt19937 rng(static_cast<unsigned>(m * 31 + k * 7 + n));
            std::uniform_int_distribution<int> byte(0, 255);
            std::vector<uint8_t> pool(static_cast<std::size_t>(m * k + 64));
            for (auto& v : pool) v = static_cast<uint8_t>(byte(rng));
            const std::vector<uint16_t> pool16(pool.begin(), pool.end());
            // Row pointers at scattered offsets (runs may overlap, as neighbouring taps do).
            std::uniform_int_distribution<int64_t> where(0, m * k + 64 - sh.seg);
            std::vector<const uint8_t*> rows(static_cast<std::size_t>(m * sh.segments));
            std::vector<uint8_t> a(static_cast<std::size_t>(m * k));
            for (int64_t s = 0; s < sh.segments; ++s)
                for (int64_t i = 0; i < m; ++i) {
                    const int64_t at = where(rng);
                    const uint8_t* src = pool.data() + at;
                    rows[static_cast<std::size_t>(s * m + i)] =
                        vnni ? src : reinterpret_cast<const uint8_t*>(pool16.data() + at);
                    std::memcpy(a.data() + i * k + s * sh.seg, src,
                                static_cast<std::size_t>(sh.seg));
                }
            std::vector<uint8_t> b(static_cast<std::size_t>(k * n));
            for (auto& v : b) v = static_cast<uint8_t>(byte(rng));
            for (bool b_unsigned : {false, true}) {
                const PackedQB packed = dsinfer::detail::pack_qb(
                    b.data(), b_unsigned, k, n, false, isa, dsinfer::detail::QBForm::wide);
                REQUIRE(dsinfer::detail::qgemm_rows_elem_bytes(packed) == (vnni ? 1 : 2));
                dsinfer::detail::QRowsA ra;
                ra.m = m;
                ra.segments = sh.segments;
                ra.seg = sh.seg;
                ra.rows = rows.data();
                QGemmParams p;
                p.a_zero = byte(rng);
                p.b_zero = b_unsigned ? 128 : 0;  // no row-sum term
                REQUIRE(dsinfer::detail::qgemm_rows_supported(packed, p));
                QGemmParams signed_a = p;
                signed_a.a_signed = true;
                CHECK_FALSE(dsinfer::detail::qgemm_rows_supported(packed, signed_a));
                QGemmParams zb = p;
                zb.b_zero = b_unsigned ? 127 : 1;
                CHECK_FALSE(dsinfer::detail::qgemm_rows_supported(packed, zb));
                ++tested;
                // s32 against the reference.
                std::vector<int32_t> c(static_cast<std::size_t>(m * n));
                dsinfer::detail::qgemm_rows(ra, packed, c.data(), n, p);
                int64_t bad = 0;
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j)
                        bad +=
                            c[static_cast<std::size_t>(i * n + j)] !=
                            static_cast<int32_t>(ref_dot(a, b, i, j, k, n, p.a_zero, b_unsigned));
                CHECK(bad == 0);
                // The other epilogues against qgemm_packed on the contiguous A.
                std::vector<float> scales(static_cast<std::size_t>(n)),
                    bias(static_cast<std::size_t>(n));
                std::vector<int32_t> bias32(static_cast<std::size_t>(n));
                for (int64_t j = 0; j < n; ++j) {
                    scales[static_cast<std::size_t>(j)] =
                        0.001f * static_cast<float>(1 + byte(rng));
                    bias[static_cast<std::size_t>(j)] = static_cast<float>(byte(rng) - 128);
                    bias32[static_cast<std::size_t>(j)] = (byte(rng) - 128) * 50;
                }
                p.a_scale = 0.02f;
                p.b_scales = scales.data();
                // 3: u8 + residual; 4: s8 + residual; 5: u8 + residual in place (C is the
                // residual, as QLinearConvAdd runs); 6, 7: 3 and 5 with the residual's and the
                // sum's zero points 0 (ResNet's joins after a ReLU: rows_overlap's own path)
                for (int form = 0; form < 8; ++form) {
                    INFO("form " << form);
                    QGemmParams q = p;
                    std::vector<uint8_t> residual(static_cast<std::size_t>(m * n));
                    for (auto& v : residual) v = static_cast<uint8_t>(byte(rng));
                    const bool s8 = form == 2 || form == 4;
                    if (form == 0) {
                        q.out = QGemmOutput::f32;
                        q.bias = bias.data();
                        q.act.kind = Activation::relu;
                    } else {
                        q.out = s8 ? QGemmOutput::s8 : QGemmOutput::u8;
                        q.bias_s32 = bias32.data();
                        q.y_scale = 0.7f;
                        q.y_zero = s8 ? -7 : 120;
                        if (form >= 3) {
                            q.residual = residual.data();
                            q.residual_row = n;
                            q.residual_col = 1;
                            const bool zeros = form >= 6;
                            q.add =
                                dsinfer::detail::qlinear_add_params(q.y_scale, 0.4f, 0.6f, q.y_zero,
                                                                    s8      ? -3
                                                                    : zeros ? 0
                                                                            : 125,
                                                                    s8      ? 4
                                                                    : zeros ? 0
                                                                            : 130);
                        }
                    }
                    const std::size_t bytes =
                        static_cast<std::size_t>(m * n) * (q.out == QGemmOutput::f32 ? 4u : 1u);
                    std::vector<unsigned char> got(bytes), want(bytes);
                    if (form == 5 || form == 7) {  // got and want start as the residual
                        got.assign(residual.begin(), residual.end());
                        want = got;
                        q.residual = got.data();
                    }
                    dsinfer::detail::qgemm_rows(ra, packed, got.data(), n, q);
                    if (form == 5 || form == 7) q.residual = want.data();
                    REQUIRE(
                        dsinfer::detail::qgemm_packed(m, a.data(), k, packed, want.data(), n, q));
                    CHECK(got == want);
                }
            }
        }
    }
    CHECK(tested > 0);
}

TEST_CASE("qgemm_rows with B in avx2's byte form for 7-bit A: A split, exact", "[fast][qgemm]") {
    // QBForm::bytes_a7 (qgemm.hpp): qgemm_rows reads A's low 7 bits through the row pointers and
    // its high bits as per-(segment, row) lists of offsets or as dense rows of 0/1, and must give
    // the exact s32 sums of the whole values for any s8 (or u8) B: B over its full range with
    // -128 and +-127 in every column, A with no, few (2%), many (40%) and all values of 128 and
    // more (255 in places), K blocks crossed inside segments, partial panels and tiles; the
    // lists with and without QRowsA::hi_any. qgemm_packed refuses such a B; other families pack
    // their one layout.
    const std::vector<QIsa> isas = qisas();
    const bool have_avx2 = std::find(isas.begin(), isas.end(), QIsa::avx2) != isas.end();
    if (!have_avx2) {
        WARN("avx2 byte form for 7-bit A not tested: no AVX2 family here");
        const std::vector<int8_t> b(64 * 8, 1);
        CHECK_FALSE(dsinfer::detail::pack_qb(b.data(), false, 64, 8, false, QIsa::baseline,
                                             QBForm::bytes_a7)
                        .a7());
        return;
    }
    // QBForm::paired_a7 the same, two groups a step in K order except where a lane of four
    // values could pass the 7-bit bounds (+-258): B over its full range has many such lone
    // steps, B of at most 60 in magnitude none but for lanes put at the bounds (258 and -258
    // in even columns, paired; 259 and -259 in odd ones, lone); segments of 4 and 12 values
    // start runs between a step's two groups; high -1: A's values all 127 or 255 (low bits
    // 127, the largest sums).
    struct Shape {
        int64_t m, segments, seg, n;
    };
    const Shape shapes[] = {{1, 1, 4, 1},     {5, 3, 4, 31},    {13, 9, 64, 33}, {11, 9, 12, 40},
                            {37, 9, 16, 100}, {29, 3, 512, 40}, {49, 9, 512, 17}};
    for (const QBForm form : {QBForm::bytes_a7, QBForm::paired_a7})
        for (const int b_range : {256, 121})
            for (const Shape& sh : shapes)
                for (int high : {0, 20, 400, 1000, -1})
                    for (bool b_unsigned : {false, true}) {
                        const bool pairs = form == QBForm::paired_a7;
                        if (!pairs && b_range != 256) continue;
                        const int64_t m = sh.m, k = sh.segments * sh.seg, n = sh.n;
                        INFO((pairs ? "paired_a7" : "bytes_a7")
                             << " B in +-" << b_range / 2 << " m " << m << " segments "
                             << sh.segments << " seg " << sh.seg << " n " << n << " high per mille "
                             << high << (b_unsigned ? " u8 B" : " s8 B"));
                        std::mt19937 rng(static_cast<unsigned>(m * 31 + k * 7 + n + high));
                        std::vector<uint8_t> b(static_cast<std::size_t>(k * n));
                        for (auto& v : b)  // b_range 256: any byte; else |b| <= 60 (as stored)
                            v = static_cast<uint8_t>(b_range == 256
                                                         ? rng() % 256
                                                         : (b_unsigned ? 128 : 0) +
                                                               static_cast<int>(rng() % 121) - 60);
                        for (int64_t j = 0; j < n && k >= 3 && b_range == 256;
                             ++j) {  // the extremes
                            b[static_cast<std::size_t>(j)] =
                                b_unsigned ? 0 : 0x80;  // -128 as stored
                            b[static_cast<std::size_t>(n + j)] = b_unsigned ? 255 : 127;
                            b[static_cast<std::size_t>(2 * n + j)] = b_unsigned ? 1 : 0x81;  // -127
                        }
                        // Small B: in step 0 (groups 0, 1), half 0 sums 127 + 127 + 4 or 5 and half
                        // 1 -128 - 128 - 2 or 3 (rows 0, 1, 4 and 2, 3, 6); groups 3 and 4 hold
                        // 127, 127 in half 0 with zeros beside them in steps 1 and 2 (254 each),
                        // which groups 3 and 4 taken as a step (a run starting at group 3) would
                        // pass.
                        for (int64_t j = 0; j < n && k >= 24 && b_range != 256; ++j) {
                            const auto put = [&](int64_t row, int v) {
                                b[static_cast<std::size_t>(row * n + j)] =
                                    static_cast<uint8_t>(v + (b_unsigned ? 128 : 0));
                            };
                            const int odd = static_cast<int>(j % 2);
                            put(0, 127), put(1, 127), put(4, 4 + odd), put(5, 0);
                            put(2, -128), put(3, -128), put(6, -2 - odd), put(7, 0);
                            put(8, 0), put(9, 0), put(12, 127), put(13, 127);
                            put(16, 127), put(17, 127), put(20, 0), put(21, 0);
                        }
                        const PackedQB packed = dsinfer::detail::pack_qb(b.data(), b_unsigned, k, n,
                                                                         false, QIsa::avx2, form);
                        REQUIRE(packed.a7());
                        CHECK(packed.a7_pairs() == pairs);
                        CHECK_FALSE(packed.fixed());
                        // B held once, as bytes (the high bits read B's rows out of the lanes),
                        // plus paired_a7's two words of lone steps per K block and panel.
                        const int64_t blocks = (packed.kp + packed.kc - 1) / packed.kc;
                        CHECK(packed.bytes() == static_cast<std::uint64_t>(
                                                    packed.panels * packed.nr * packed.kp + 4 * n +
                                                    (pairs ? blocks * packed.panels * 16 : 0)));
                        if (pairs) {  // lone steps exactly where B's values pass the bounds
                            int64_t lone = 0;
                            for (int64_t w = 0; w < blocks * packed.panels * 2; ++w)
                                lone += __builtin_popcountll(packed.a7_lone.get()[w]);
                            if (b_range == 256 && k >= 16) CHECK(lone > 0);
                            // Step 0 lone in the panels with an odd column.
                            if (b_range != 256) CHECK(lone == (k >= 24 ? (n + 14) / 16 : 0));
                        }
                        // A: m rows of K, each segment its own run of a pool; the split copies.
                        std::vector<uint8_t> a(static_cast<std::size_t>(m * k));
                        for (auto& v : a) {
                            const bool hi = static_cast<int>(rng() % 1000) < high;
                            v = static_cast<uint8_t>(high < 0 ? (rng() % 2 != 0 ? 255 : 127)
                                                     : hi     ? 128 + rng() % 128
                                                              : rng() % 128);
                        }
                        if (high != 0) a[0] = 255;
                        std::vector<uint8_t> lo(a.size()), hib(a.size());
                        for (std::size_t q = 0; q < a.size(); ++q) {
                            lo[q] = a[q] & 127;
                            hib[q] = a[q] >> 7;
                        }
                        std::vector<const uint8_t*> rows, hi_rows;
                        std::vector<std::vector<uint16_t>> lists;
                        for (int64_t s = 0; s < sh.segments; ++s)
                            for (int64_t i = 0; i < m; ++i) {
                                const std::size_t at = static_cast<std::size_t>(i * k + s * sh.seg);
                                rows.push_back(lo.data() + at);
                                hi_rows.push_back(hib.data() + at);
                                std::vector<uint16_t> l{0};
                                for (int64_t e = 0; e < sh.seg; ++e)
                                    if (hib[at + static_cast<std::size_t>(e)] != 0)
                                        l.push_back(static_cast<uint16_t>(e));
                                l[0] = static_cast<uint16_t>(l.size() - 1);
                                lists.push_back(std::move(l));
                            }
                        std::vector<const uint16_t*> list_ptrs;
                        for (const auto& l : lists) list_ptrs.push_back(l.data());
                        // QRowsA::hi_any: per row, whether any of its segments' lists has an
                        // element.
                        std::vector<uint8_t> any(static_cast<std::size_t>(m), 0);
                        for (int64_t sg = 0; sg < sh.segments; ++sg)
                            for (int64_t i = 0; i < m; ++i)
                                any[static_cast<std::size_t>(i)] |=
                                    lists[static_cast<std::size_t>(sg * m + i)][0] != 0 ? 1 : 0;
                        QGemmParams p;
                        p.a_zero = static_cast<int32_t>(rng() % 128);
                        p.b_zero = b_unsigned ? 128 : 0;
                        REQUIRE(dsinfer::detail::qgemm_rows_supported(packed, p));
                        std::vector<int32_t> want(static_cast<std::size_t>(m * n));
                        for (int64_t i = 0; i < m; ++i)
                            for (int64_t j = 0; j < n; ++j)
                                want[static_cast<std::size_t>(i * n + j)] = static_cast<int32_t>(
                                    ref_dot(a, b, i, j, k, n, p.a_zero, b_unsigned));
                        for (int mode : {0, 1, 2}) {
                            const bool dense = mode == 2;
                            INFO((dense       ? "high bits dense"
                                  : mode == 1 ? "high bits as lists, rows without any marked"
                                              : "high bits as lists"));
                            dsinfer::detail::QRowsA ra;
                            ra.m = m;
                            ra.segments = sh.segments;
                            ra.seg = sh.seg;
                            ra.rows = rows.data();
                            if (dense)
                                ra.hi_rows = hi_rows.data();
                            else
                                ra.hi = list_ptrs.data();
                            if (mode == 1) ra.hi_any = any.data();
                            std::vector<int32_t> c(static_cast<std::size_t>(m * n), 7);
                            dsinfer::detail::qgemm_rows(ra, packed, c.data(), n, p);
                            int64_t bad = 0;
                            for (std::size_t q = 0; q < c.size(); ++q) bad += c[q] != want[q];
                            CHECK(bad == 0);
                        }
                        std::vector<int32_t> c(static_cast<std::size_t>(m * n));
                        CHECK_FALSE(
                            dsinfer::detail::qgemm_packed(m, a.data(), k, packed, c.data(), n, p));
                    }
}
