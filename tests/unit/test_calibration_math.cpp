// The calibration range math of static INT8 quantization (src/quantizer/range_histogram.hpp):
// RangeHistogram's one-pass statistics and bins (exact against a brute-force histogram, the same
// for any thread count, batch split and order as long as the final R is the same), the range
// each CalibrationMethod chooses (minmax exact, percentile against a sorted quantile, entropy
// and mse on data with outliers, their quantization error computed here independently), the
// bad values of shared guide BAD_INPUTS.md section F, and choose_qparams (ONNX QuantizeLinear's
// scale and zero point).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "quantizer/range_histogram.hpp"

namespace {

using dsinfer::CalibrationMethod;
using dsinfer::DType;
using dsinfer::quantizer::choose_qparams;
using dsinfer::quantizer::QParams;
using dsinfer::quantizer::RangeHistogram;

constexpr CalibrationMethod kMethods[] = {CalibrationMethod::minmax, CalibrationMethod::percentile,
                                          CalibrationMethod::entropy, CalibrationMethod::mse};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> gaussian(std::size_t n, unsigned seed, float sigma = 1.f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.f, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

/// Bin width 2R / kBins.
double bin_width(const RangeHistogram& h) {
    return 2.0 * static_cast<double>(h.range()) / RangeHistogram::kBins;
}

/// The histogram computed value by value in double (exact: R is a power of two).
std::vector<std::uint64_t> brute_force_bins(const std::vector<float>& v, double range) {
    std::vector<std::uint64_t> b(RangeHistogram::kBins, 0);
    const double scale = RangeHistogram::kBins / (2.0 * range);
    std::size_t outside = 0;
    for (float x : v) {
        if (!std::isfinite(x)) continue;
        const auto j = static_cast<long>(std::floor(static_cast<double>(x) * scale)) +
                       RangeHistogram::kBins / 2;
        if (j < 0 || j >= RangeHistogram::kBins)
            ++outside;
        else
            ++b[static_cast<std::size_t>(j)];
    }
    REQUIRE(outside == 0);  // every finite |x| < R
    return b;
}

/// QuantizeLinear -> DequantizeLinear of x, written out here (ONNX: x / scale in float, round
/// half to even, add the zero point, saturate; then (q - zp) * scale).
float fake_quantize(float x, const QParams& q) {
    const double lo = q.type == DType::i8 ? -128.0 : 0.0;
    const double hi = q.type == DType::i8 ? 127.0 : 255.0;
    const double r = std::nearbyint(static_cast<double>(x / q.scale)) + q.zero_point;
    const double level = std::clamp(r, lo, hi);
    return static_cast<float>(level - q.zero_point) * q.scale;
}

double quantization_error(const std::vector<float>& v, const QParams& q) {
    double e = 0.0;
    for (float x : v) {
        const double d = static_cast<double>(x) - static_cast<double>(fake_quantize(x, q));
        e += d * d;
    }
    return e / static_cast<double>(v.size());
}

void check_qparams(const QParams& q, bool symmetric) {
    INFO("scale " << q.scale << " zero point " << q.zero_point);
    CHECK(std::isfinite(q.scale));
    CHECK(q.scale >= std::numeric_limits<float>::min());
    if (symmetric) {
        CHECK(q.type == DType::i8);
        CHECK(q.zero_point == 0);
    } else {
        CHECK(q.type == DType::u8);
        CHECK(q.zero_point >= 0);
        CHECK(q.zero_point <= 255);
    }
    // 0 is exactly representable: it quantizes to the zero point, which dequantizes to 0.
    CHECK(fake_quantize(0.f, q) == 0.f);
}

/// Every method, both modes: a finite range holding 0, and usable parameters.
void check_all_choices(const RangeHistogram& h) {
    for (CalibrationMethod m : kMethods) {
        for (bool symmetric : {false, true}) {
            INFO("method " << static_cast<int>(m) << " symmetric " << symmetric);
            const auto [lo, hi] = h.choose(m, 99.9, symmetric);
            CHECK(std::isfinite(lo));
            CHECK(std::isfinite(hi));
            CHECK(lo <= 0.f);
            CHECK(hi >= 0.f);
            if (symmetric) CHECK(lo == -hi);
            check_qparams(choose_qparams(lo, hi, symmetric), symmetric);
        }
    }
}

void require_same(const RangeHistogram& a, const RangeHistogram& b) {
    REQUIRE(a.count() == b.count());
    REQUIRE(a.nonfinite() == b.nonfinite());
    REQUIRE(a.min() == b.min());
    REQUIRE(a.max() == b.max());
    REQUIRE(a.range() == b.range());
    REQUIRE(a.bins() == b.bins());
    for (CalibrationMethod m : kMethods)
        for (bool symmetric : {false, true})
            REQUIRE(a.choose(m, 99.99, symmetric) == b.choose(m, 99.99, symmetric));
}

}  // namespace

TEST_CASE("calibration: statistics and bins are exact; minmax is the range widened to 0",
          "[calibration]") {
    std::vector<float> v = gaussian(100000, 1, 1.5f);
    for (float& x : v) x = std::clamp(x, -7.f, 6.f);
    v.push_back(-7.25f);
    v.push_back(6.5f);
    RangeHistogram h;
    h.add(v.data(), v.size());
    CHECK(h.count() == v.size());
    CHECK(h.nonfinite() == 0);
    CHECK(h.min() == *std::min_element(v.begin(), v.end()));
    CHECK(h.max() == *std::max_element(v.begin(), v.end()));
    CHECK(h.range() == 8.f);  // the smallest power of two above 7.25
    CHECK(h.bins() == brute_force_bins(v, h.range()));
    const auto [lo, hi] = h.choose(CalibrationMethod::minmax, 99.999, false);
    CHECK(lo == h.min());
    CHECK(hi == h.max());
    const auto [slo, shi] = h.choose(CalibrationMethod::minmax, 99.999, true);
    CHECK(shi == 7.25f);
    CHECK(slo == -7.25f);

    // One-sided data: the range is widened to include 0.
    std::vector<float> pos = {0.5f, 1.f, 3.f, 2.f};
    RangeHistogram hp;
    hp.add(pos.data(), pos.size());
    CHECK(hp.choose(CalibrationMethod::minmax, 99.999, false) == std::pair<float, float>{0.f, 3.f});
    CHECK(hp.range() == 4.f);  // 3 < 4, strictly above the largest |x|
    CHECK(hp.bins() == brute_force_bins(pos, 4.f));
}

TEST_CASE("calibration: percentile matches a sorted quantile within one bin width",
          "[calibration]") {
    // Skewed data: a Gaussian, a wide uniform tail on the right.
    std::vector<float> v = gaussian(200000, 2);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> tail(0.f, 40.f);
    for (int i = 0; i < 3000; ++i) v.push_back(tail(rng));
    RangeHistogram h;
    h.add(v.data(), v.size());
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const double n = static_cast<double>(sorted.size());
    // The ceil(f * N)-th smallest value (1-based), as range_histogram.hpp defines the quantile.
    const auto brute = [&](double f) {
        const double r = std::clamp(std::ceil(f * n), 1.0, n);
        return sorted[static_cast<std::size_t>(r) - 1];
    };
    const double w = bin_width(h);
    for (double p : {99.999, 99.99, 99.9, 99.0, 90.0, 75.0}) {
        INFO("percentile " << p);
        const auto [lo, hi] = h.choose(CalibrationMethod::percentile, p, false);
        const float want_lo = std::min(brute(1.0 - p / 100.0), 0.f);
        const float want_hi = std::max(brute(p / 100.0), 0.f);
        CHECK(std::fabs(static_cast<double>(lo) - want_lo) <= w);
        CHECK(std::fabs(static_cast<double>(hi) - want_hi) <= w);
        CHECK(lo >= h.min());
        CHECK(hi <= h.max());
    }
    // Clipping really happens: the 99% point is far below the maximum (1.5% of the data is
    // uniform on [0, 40]).
    CHECK(h.choose(CalibrationMethod::percentile, 99.0, false).second < 0.5f * h.max());
    // p = 100 keeps everything: minmax.
    CHECK(h.choose(CalibrationMethod::percentile, 100.0, false) ==
          h.choose(CalibrationMethod::minmax, 100.0, false));
}

TEST_CASE("calibration: entropy clips rare far outliers above 3 sigma", "[calibration]") {
    std::vector<float> v = gaussian(1000000, 4);
    for (int i = 0; i < 10; ++i) {
        v.push_back(60.f + static_cast<float>(i));
        v.push_back(-60.f - static_cast<float>(i));
    }
    RangeHistogram h;
    h.add(v.data(), v.size());
    const auto [lo, hi] = h.choose(CalibrationMethod::entropy, 99.999, false);
    INFO("entropy range [" << lo << ", " << hi << "]");
    CHECK(hi > 3.f);
    CHECK(hi < 20.f);
    CHECK(lo < -3.f);
    CHECK(lo > -20.f);

    // Non-negative (a Relu's output, half exact zeros): 256 levels, still clipped.
    std::vector<float> relu(v.size());
    std::transform(v.begin(), v.end(), relu.begin(), [](float x) { return std::max(x, 0.f); });
    RangeHistogram hr;
    hr.add(relu.data(), relu.size());
    const auto [rlo, rhi] = hr.choose(CalibrationMethod::entropy, 99.999, false);
    INFO("relu entropy range [" << rlo << ", " << rhi << "]");
    CHECK(rlo == 0.f);
    CHECK(rhi > 3.f);
    CHECK(rhi < 20.f);

    // A Relu of a clean Gaussian: the spike of exact zeros must not pull the threshold in
    // (without the first-bin rule the search clips at about 2 sigma).
    std::vector<float> clean = gaussian(1000000, 15);
    for (float& x : clean) x = std::max(x, 0.f);
    RangeHistogram hc;
    hc.add(clean.data(), clean.size());
    const auto [clo, chi] = hc.choose(CalibrationMethod::entropy, 99.999, false);
    INFO("clean relu entropy range [" << clo << ", " << chi << "], max " << hc.max());
    CHECK(clo == 0.f);
    CHECK(chi > 3.f);
}

TEST_CASE("calibration: mse chooses a range within the data that beats minmax",
          "[calibration]") {
    // Laplace-like heavy tails plus a few outliers: clipping pays.
    std::mt19937 rng(5);
    std::exponential_distribution<float> expo(1.f);
    std::bernoulli_distribution sign(0.5);
    std::vector<float> v(300000);
    for (float& x : v) x = sign(rng) ? expo(rng) : -expo(rng);
    v.push_back(40.f);
    v.push_back(-25.f);
    RangeHistogram h;
    h.add(v.data(), v.size());
    for (bool symmetric : {false, true}) {
        INFO("symmetric " << symmetric);
        const auto [lo, hi] = h.choose(CalibrationMethod::mse, 99.999, symmetric);
        const auto [mlo, mhi] = h.choose(CalibrationMethod::minmax, 99.999, symmetric);
        INFO("mse [" << lo << ", " << hi << "] minmax [" << mlo << ", " << mhi << "]");
        CHECK(lo >= mlo);
        CHECK(hi <= mhi);
        CHECK(hi - lo < 0.9f * (mhi - mlo));  // it did clip
        CHECK(lo < 0.f);
        CHECK(hi > 0.f);
        const double e_mse = quantization_error(v, choose_qparams(lo, hi, symmetric));
        const double e_minmax = quantization_error(v, choose_qparams(mlo, mhi, symmetric));
        INFO("error mse " << e_mse << " minmax " << e_minmax);
        CHECK(e_mse <= e_minmax);
    }
    // Uniform data has nothing to clip: mse keeps (nearly) the full range.
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::vector<float> u(100000);
    for (float& x : u) x = uni(rng);
    RangeHistogram hu;
    hu.add(u.data(), u.size());
    const auto [ulo, uhi] = hu.choose(CalibrationMethod::mse, 99.999, false);
    CHECK(ulo <= 0.95f * hu.min());
    CHECK(uhi >= 0.95f * hu.max());
}

TEST_CASE("calibration: results are the same for 1 and 2 threads and any batch split",
          "[calibration]") {
    // Large enough for the per-thread partials and two threads; NaN/Inf sprinkled in; values
    // growing in magnitude along the data so that R grows inside one add.
    std::vector<float> v = gaussian(700000, 6);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= 1.f + static_cast<float>(i) * 1e-4f;
    for (std::size_t i = 17; i < v.size(); i += 9973) v[i] = (i % 3 == 0) ? kNaN : (i % 3 == 1 ? kInf : -kInf);
    v[100] = 0.f;
    v[101] = -0.f;
    v[102] = 1e-40f;   // subnormals
    v[103] = -1e-40f;

    RangeHistogram one;
    one.add(v.data(), v.size(), 1);
    RangeHistogram two;
    two.add(v.data(), v.size(), 2);
    require_same(one, two);
    CHECK(one.bins() == brute_force_bins(v, one.range()));
    CHECK(one.nonfinite() == static_cast<std::uint64_t>(std::count_if(
                                 v.begin(), v.end(), [](float x) { return !std::isfinite(x); })));

    // Batches of uneven sizes (some below the partials' threshold, some above), 2 threads.
    RangeHistogram split;
    std::mt19937 rng(7);
    std::size_t at = 0;
    while (at < v.size()) {
        const std::size_t size = std::min<std::size_t>(v.size() - at, (rng() % 3 == 0) ? 300000 : rng() % 5000);
        split.add(v.data() + at, size, 2);
        at += size;
    }
    require_same(one, split);

    // The same batches in reverse order: R is final from the start.
    RangeHistogram reversed;
    for (std::size_t end = v.size(); end > 0;) {
        const std::size_t size = std::min<std::size_t>(end, 65537);
        reversed.add(v.data() + end - size, size, 2);
        end -= size;
    }
    require_same(one, reversed);
}

TEST_CASE("calibration: when R doubles, old bin pairs merge exactly", "[calibration]") {
    std::vector<float> small = gaussian(50000, 8, 0.01f);
    std::vector<float> large = gaussian(80000, 9, 300.f);
    RangeHistogram small_first;
    small_first.add(small.data(), small.size());
    const float r_small = small_first.range();
    small_first.add(large.data(), large.size());
    CHECK(small_first.range() > 1000.f * r_small);  // many doublings at once

    RangeHistogram large_first;
    large_first.add(large.data(), large.size());
    large_first.add(small.data(), small.size());
    require_same(small_first, large_first);

    std::vector<float> all = small;
    all.insert(all.end(), large.begin(), large.end());
    CHECK(small_first.bins() == brute_force_bins(all, small_first.range()));

    // One doubling at a time, through the per-thread partials.
    RangeHistogram steps;
    RangeHistogram at_once;
    std::vector<float> grown;
    for (int k = 0; k < 12; ++k) {
        std::vector<float> b = gaussian(70000, 10 + static_cast<unsigned>(k),
                                        std::ldexp(1.f, k));
        steps.add(b.data(), b.size(), 2);
        grown.insert(grown.end(), b.begin(), b.end());
    }
    at_once.add(grown.data(), grown.size(), 1);
    require_same(steps, at_once);
}

TEST_CASE("calibration: bad values give usable ranges and parameters", "[calibration]") {
    SECTION("empty") {
        RangeHistogram h;
        h.add(nullptr, 0);
        float x = 1.f;
        h.add(&x, 0);
        CHECK(h.count() == 0);
        CHECK(h.min() == 0.f);
        CHECK(h.max() == 0.f);
        CHECK(h.range() == 0.f);
        check_all_choices(h);
        CHECK(h.choose(CalibrationMethod::entropy, 99.9, false) == std::pair<float, float>{0.f, 0.f});
    }
    SECTION("all zero, large and small adds") {
        std::vector<float> z(200000, 0.f);
        z[5] = -0.f;
        RangeHistogram h;
        h.add(z.data(), z.size(), 2);
        h.add(z.data(), 10);
        CHECK(h.range() == 0.f);
        CHECK(h.bins()[RangeHistogram::kBins / 2] == z.size() + 10);
        check_all_choices(h);
        const QParams q = choose_qparams(0.f, 0.f, false);
        CHECK(q.scale == 1.f);
        CHECK(q.zero_point == 0);
    }
    SECTION("constant tensors") {
        for (float c : {3.7f, -2.f, 1e-30f, -1e-30f, 1e-40f, 3e38f, -3e38f}) {
            INFO("constant " << c);
            std::vector<float> v(100000, c);
            RangeHistogram h;
            h.add(v.data(), v.size(), 2);
            CHECK(h.min() == c);
            CHECK(h.max() == c);
            check_all_choices(h);
            const auto [lo, hi] = h.choose(CalibrationMethod::minmax, 99.9, false);
            CHECK(lo == std::min(c, 0.f));
            CHECK(hi == std::max(c, 0.f));
        }
    }
    SECTION("tiny range") {
        std::vector<float> v = gaussian(10000, 11, 1e-30f);
        RangeHistogram h;
        h.add(v.data(), v.size());
        check_all_choices(h);
        std::vector<float> sub = {1e-45f, -1e-45f, 3e-44f};
        RangeHistogram hs;
        hs.add(sub.data(), sub.size());
        CHECK(hs.range() == std::ldexp(1.f, RangeHistogram::kMinExponent));
        CHECK(hs.bins() == brute_force_bins(sub, hs.range()));
        check_all_choices(hs);
    }
    SECTION("huge values") {
        std::vector<float> v = gaussian(10000, 12, 1e37f);
        v.push_back(3e38f);
        v.push_back(-3e38f);
        v.push_back(std::numeric_limits<float>::max());
        // Tiny values next to huge ones: their products with the bin scale 2^-117 underflow
        // (to -0 for the negative ones, which still belong below 0).
        for (float t : {-1e-45f, -1e-30f, 1e-45f, -0.f, 0.f}) v.push_back(t);
        RangeHistogram h;
        h.add(v.data(), v.size());
        CHECK(h.max() == std::numeric_limits<float>::max());
        CHECK(h.range() == kInf);  // R = 2^128
        CHECK(h.bins() == brute_force_bins(v, std::ldexp(1.0, 128)));
        CHECK(h.bins()[RangeHistogram::kBins / 2 - 1] >= 2);
        check_all_choices(h);
        const auto [lo, hi] = h.choose(CalibrationMethod::minmax, 99.9, false);
        CHECK(lo == -3e38f);
        CHECK(hi == std::numeric_limits<float>::max());
    }
    SECTION("NaN and Inf mixed in") {
        std::vector<float> v = gaussian(100000, 13);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < v.size(); i += 7, ++bad) v[i] = (i % 2) ? kNaN : -kInf;
        v.push_back(kInf);
        ++bad;
        for (int threads : {1, 2}) {
            RangeHistogram h;
            h.add(v.data(), v.size(), threads);
            CHECK(h.nonfinite() == bad);
            CHECK(h.count() == v.size());
            CHECK(std::isfinite(h.min()));
            CHECK(std::isfinite(h.max()));
            CHECK(h.max() < 10.f);
            std::uint64_t binned = 0;
            for (std::uint64_t c : h.bins()) binned += c;
            CHECK(binned == v.size() - bad);
            check_all_choices(h);
        }
        std::vector<float> all_bad(70000, kNaN);
        RangeHistogram h;
        h.add(all_bad.data(), all_bad.size(), 2);
        h.add(all_bad.data(), 3);
        CHECK(h.nonfinite() == all_bad.size() + 3);
        CHECK(h.min() == 0.f);
        CHECK(h.max() == 0.f);
        check_all_choices(h);
    }
    SECTION("percentile out of (50, 100]") {
        std::vector<float> v = gaussian(10000, 14);
        RangeHistogram h;
        h.add(v.data(), v.size());
        for (double p : {kNaN * 1.0, 150.0, 100.0, 50.0, 10.0, -1.0}) {
            const auto [lo, hi] = h.choose(CalibrationMethod::percentile, p, false);
            CHECK(std::isfinite(lo));
            CHECK(std::isfinite(hi));
            CHECK(lo <= 0.f);
            CHECK(hi >= 0.f);
        }
    }
}

TEST_CASE("calibration: choose_qparams", "[calibration]") {
    SECTION("asymmetric u8: ONNX Runtime's formula, 0 exact") {
        const QParams q = choose_qparams(-1.f, 3.f, false);
        CHECK(q.type == DType::u8);
        CHECK(q.scale == 4.f / 255.f);
        CHECK(q.zero_point == static_cast<std::int32_t>(std::nearbyint(1.f / (4.f / 255.f))));
        check_qparams(q, false);
        // The range's ends are within half a step of the grid's ends.
        CHECK(std::fabs(fake_quantize(-1.f, q) + 1.f) <= q.scale / 2);
        CHECK(std::fabs(fake_quantize(3.f, q) - 3.f) <= q.scale / 2);
        // Ranges that do not hold 0 are widened to it.
        CHECK(choose_qparams(2.f, 5.f, false).zero_point == 0);
        CHECK(choose_qparams(2.f, 5.f, false).scale == 5.f / 255.f);
        CHECK(choose_qparams(-5.f, -2.f, false).zero_point == 255);
        for (float lo : {-0.1f, -1.f, -7.3f, -100.f})
            for (float hi : {0.05f, 1.f, 9.9f, 1000.f}) check_qparams(choose_qparams(lo, hi, false), false);
    }
    SECTION("zero point rounds half to even") {
        // scale 1: -rmin / scale = 2.5 -> 2, 3.5 -> 4.
        const QParams a = choose_qparams(-2.5f, 252.5f, false);
        CHECK(a.scale == 1.f);
        CHECK(a.zero_point == 2);
        const QParams b = choose_qparams(-3.5f, 251.5f, false);
        CHECK(b.scale == 1.f);
        CHECK(b.zero_point == 4);
    }
    SECTION("symmetric s8: zero point 0") {
        const QParams q = choose_qparams(-1.f, 3.f, true);
        CHECK(q.type == DType::i8);
        CHECK(q.zero_point == 0);
        CHECK(q.scale == 3.f / 127.f);
        CHECK(choose_qparams(-6.f, 2.f, true).scale == 6.f / 127.f);
        check_qparams(q, true);
    }
    SECTION("degenerate ranges") {
        for (bool symmetric : {false, true}) {
            INFO("symmetric " << symmetric);
            CHECK(choose_qparams(0.f, 0.f, symmetric).scale == 1.f);
            CHECK(choose_qparams(kNaN, 1.f, symmetric).scale == 1.f);
            CHECK(choose_qparams(-kInf, 1.f, symmetric).scale == 1.f);
            CHECK(choose_qparams(0.f, kInf, symmetric).zero_point == 0);
            // Tiny: the smallest normal scale.
            CHECK(choose_qparams(-1e-40f, 1e-40f, symmetric).scale == std::numeric_limits<float>::min());
            CHECK(choose_qparams(0.f, 1e-45f, symmetric).scale == std::numeric_limits<float>::min());
            for (float lo : {0.f, -1e-30f, -1e-38f, -1e-45f, -3e38f, -std::numeric_limits<float>::max()})
                for (float hi : {0.f, 1e-30f, 1e-38f, 1e-45f, 3e38f, std::numeric_limits<float>::max()})
                    check_qparams(choose_qparams(lo, hi, symmetric), symmetric);
        }
        // rmax - rmin overflows: rmax / 255 - rmin / 255.
        const float big = std::numeric_limits<float>::max();
        const QParams q = choose_qparams(-big, big, false);
        CHECK(q.scale == big / 255.f - (-big) / 255.f);
        CHECK((q.zero_point == 127 || q.zero_point == 128));  // -rmin / scale ~ 127.5
    }
}
