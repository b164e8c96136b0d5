// RangeHistogram and choose_qparams (range_histogram.hpp).
//
// add() works in blocks of kBlock values that stay in L1: a first loop takes the block's
// min/max and counts its non-finite values (plain lane-wise code the compiler vectorises), R
// grows if the block needs it, a second vectorised loop computes every value's bin index
// (non-finite values are binned as 0 and taken out of the central bin afterwards, so the loop
// has no branch), then a scalar loop increments the counters. Large adds split the data into
// one contiguous part per thread, each binned into its own uint32 partial with its own R, and
// the partials are merged exactly into the uint64 bins (range_histogram.hpp: bins depend only
// on the values and the final R).
#include "quantizer/range_histogram.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "ops/quantize.hpp"
#include "runtime/parallel.hpp"

namespace dsinfer::quantizer {
namespace {

constexpr int kBins = RangeHistogram::kBins;
constexpr int kHalf = kBins / 2;
constexpr float kMaxFloat = std::numeric_limits<float>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
/// Values per block (a multiple of the lane count and of the number of sub-histograms).
constexpr std::size_t kBlock = 2048;
/// Adds of at least this many values go through the per-thread partials.
constexpr std::size_t kPartialMin = std::size_t{1} << 16;
/// The least number of values worth a thread.
constexpr std::size_t kThreadGrain = std::size_t{1} << 17;
/// One add() is processed in chunks of at most this many values, so that no uint32 counter of
/// a partial can overflow (a sub-histogram sees at most kMaxChunk / 4 values per chunk).
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;
/// A shift by this much maps every bin to one of the two central ones (any larger shift is the
/// same).
constexpr int kMaxShift = 30;

/// The exponent e of the smallest power of two 2^e > a (a > 0, finite), at least kMinExponent.
int exponent_above(float a) noexcept {
    int e = 0;
    (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): 2^(e-1) <= a < 2^e
    return std::max(e, RangeHistogram::kMinExponent);
}

/// Where bin j goes when R grows by 2^d (d >= 0).
inline int shifted_bin(int j, int d) noexcept { return ((j - kHalf) >> d) + kHalf; }

/// Moves the counts of h[0, kBins) to the bins of an R 2^d times larger, in place: the upper
/// half only moves down and the lower half only up, so walking each half away from the centre
/// reads every count before anything lands on it.
template <class C>
void rescale(C* h, int d) noexcept {
    if (d <= 0) return;
    d = std::min(d, kMaxShift);
    for (int j = kHalf; j < kBins; ++j) {
        const int t = shifted_bin(j, d);
        if (t != j) {
            h[t] += h[j];
            h[j] = 0;
        }
    }
    for (int j = kHalf - 1; j >= 0; --j) {
        const int t = shifted_bin(j, d);
        if (t != j) {
            h[t] += h[j];
            h[j] = 0;
        }
    }
}

/// The shift from exponent `from` to `to` (>= from), kNoRange counted as far below anything.
inline int shift_between(int from, int to, int no_range) noexcept {
    if (from == to) return 0;
    if (from == no_range) return kMaxShift;
    return std::min(to - from, kMaxShift);
}

/// Min/max of the finite values of x[0, m) (mn > mx when none), the count of non-finite values
/// at positions i with i % S == s in nf[s], and clean[i] = x[i] with the non-finite values
/// replaced by 0. Eight independent lanes so that the compiler turns the loop into vector
/// compares and blends.
template <int S>
void scan_block(const float* x, std::size_t m, float& out_min, float& out_max,
                std::uint32_t (&nf)[S], float* clean) noexcept {
    constexpr int kLanes = 8;
    static_assert(kLanes % S == 0);
    float mn[kLanes], mx[kLanes];
    std::uint32_t bad[kLanes];
    for (int j = 0; j < kLanes; ++j) {
        mn[j] = kInf;
        mx[j] = -kInf;
        bad[j] = 0;
    }
    std::size_t i = 0;
    for (; i + kLanes <= m; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
            const float v = x[i + j];
            const bool finite = std::fabs(v) <= kMaxFloat;  // false for NaN and +-inf
            const float lo = finite ? v : kInf;
            const float hi = finite ? v : -kInf;
            mn[j] = lo < mn[j] ? lo : mn[j];
            mx[j] = hi > mx[j] ? hi : mx[j];
            bad[j] += finite ? 0u : 1u;
            clean[i + j] = finite ? v : 0.f;
        }
    }
    for (; i < m; ++i) {
        const float v = x[i];
        const int j = static_cast<int>(i % kLanes);
        if (std::fabs(v) <= kMaxFloat) {
            mn[j] = std::min(mn[j], v);
            mx[j] = std::max(mx[j], v);
            clean[i] = v;
        } else {
            ++bad[j];
            clean[i] = 0.f;
        }
    }
    out_min = kInf;
    out_max = -kInf;
    for (int s = 0; s < S; ++s) nf[s] = 0;
    for (int j = 0; j < kLanes; ++j) {
        out_min = std::min(out_min, mn[j]);
        out_max = std::max(out_max, mx[j]);
        nf[j % S] += bad[j];
    }
}

/// idx[i] = the bin of x[i] (finite) at the bin scale `scale` (= kBins / (2R), a power of two,
/// so x * scale is exact) plus (i % S) * kBins. Every |x| < R, so x * scale lies in
/// (-kHalf, kHalf) and the bin in [0, kBins); the mask only keeps the index in range whatever
/// the floating-point environment does.
template <int S>
void bin_indices(const float* x, std::size_t m, float scale, std::int32_t* idx) noexcept {
    static_assert((kBins & (kBins - 1)) == 0 && (S & (S - 1)) == 0);
    const auto mi = static_cast<std::int32_t>(m);  // m <= kBlock: 32-bit lanes throughout
    for (std::int32_t i = 0; i < mi; ++i) {
        const float v = x[i];
        const float t = v * scale;
        const auto k = static_cast<std::int32_t>(t);  // truncation
        // floor: one less when truncation went up, and for a negative value whose product
        // underflowed to -0 (it belongs below 0, in bin kHalf - 1, whatever R is).
        const std::int32_t down = (t < static_cast<float>(k)) | ((v < 0.f) & (t == 0.f)) ? 1 : 0;
        const std::int32_t sub = (i & (S - 1)) * kBins;
        idx[i] = ((k - down + kHalf) & (kBins - 1)) | sub;
    }
}

/// Bins x[0, n) into S interleaved histograms of counter type C (sub s at counts + s * kBins),
/// growing `exponent` (and moving the counts) as needed, and updates min/max/nonfinite.
template <class C, int S>
void bin_values(const float* x, std::size_t n, C* counts, float& min,
                float& max, std::uint64_t& nonfinite, int& exponent, int no_range,
                bool bins = true) noexcept {
    alignas(64) std::int32_t idx[kBlock];
    alignas(64) float clean[kBlock];
    for (std::size_t b = 0; b < n; b += kBlock) {
        const std::size_t m = std::min(kBlock, n - b);
        const float* xb = x + b;
        float bmin = 0.f, bmax = 0.f;
        std::uint32_t nf[S];
        scan_block<S>(xb, m, bmin, bmax, nf, clean);
        std::uint32_t nf_total = 0;
        for (int s = 0; s < S; ++s) nf_total += nf[s];
        nonfinite += nf_total;
        if (!(bmin <= bmax)) continue;  // nothing finite in this block
        min = std::min(min, bmin);
        max = std::max(max, bmax);
        if (!bins) continue;  // min/max only (RangeHistogram(false))
        const float a = std::max(-bmin, bmax);
        if (a > 0.f) {
            const int e = exponent_above(a);
            if (e > exponent) {
                const int d = shift_between(exponent, e, no_range);
                for (int s = 0; s < S; ++s) rescale(counts + static_cast<std::size_t>(s) * kBins, d);
                exponent = e;
            }
        }
        // While R is 0 every finite value is +-0: any scale bins it at kHalf.
        const float scale = exponent == no_range ? 1.f : std::ldexp(1.f, 11 - exponent);
        bin_indices<S>(clean, m, scale, idx);
        std::size_t i = 0;
        for (; i + 4 <= m; i += 4) {
            ++counts[idx[i]];
            ++counts[idx[i + 1]];
            ++counts[idx[i + 2]];
            ++counts[idx[i + 3]];
        }
        for (; i < m; ++i) ++counts[idx[i]];
        for (int s = 0; s < S; ++s) counts[static_cast<std::size_t>(s) * kBins + kHalf] -= nf[s];
    }
}

}  // namespace

RangeHistogram::RangeHistogram(bool with_bins)
    : bins_(with_bins ? kBins : 0, 0), partials_(1), min_(kInf), max_(-kInf), with_bins_(with_bins) {
    if (with_bins_) partials_[0].counts.assign(kSubs * kBins, 0);
}

float RangeHistogram::range() const noexcept {
    return exponent_ == kNoRange ? 0.f : std::ldexp(1.f, exponent_);
}

void RangeHistogram::grow(int exponent) noexcept {
    if (exponent <= exponent_) return;
    rescale(bins_.data(), shift_between(exponent_, exponent, kNoRange));
    exponent_ = exponent;
}

void RangeHistogram::add(const float* data, std::size_t n, int num_threads) noexcept {
    if (data == nullptr || n == 0) return;
    while (n > 0) {
        const std::size_t m = std::min(n, kMaxChunk);
        if (m < kPartialMin)
            add_small(data, m);
        else
            add_chunk(data, m, num_threads);
        data += m;
        n -= m;
    }
}

void RangeHistogram::add_small(const float* data, std::size_t n) noexcept {
    bin_values<std::uint64_t, 1>(data, n, bins_.data(), min_, max_, nonfinite_, exponent_,
                                 kNoRange, with_bins_);
    count_ += n;
}

void RangeHistogram::add_chunk(const float* data, std::size_t n, int num_threads) noexcept {
    std::size_t want = std::max(1, num_threads);
    want = std::min(want, std::max<std::size_t>(1, n / kThreadGrain));
    if (dsinfer::detail::in_parallel_region()) want = 1;
    if (partials_.size() < want) {
        try {
            const std::size_t old = partials_.size();
            partials_.reserve(want);
            for (std::size_t t = old; t < want; ++t) {
                Partial p;
                if (with_bins_) p.counts.assign(kSubs * kBins, 0);
                partials_.push_back(std::move(p));
            }
        } catch (...) {
            // Fewer threads, same result.
        }
        want = std::min(want, partials_.size());
    }
    for (std::size_t t = 0; t < want; ++t) {
        Partial& p = partials_[t];
        p.min = kInf;
        p.max = -kInf;
        p.nonfinite = 0;
        p.exponent = exponent_;
    }
    const auto work = [&](std::size_t t, std::size_t team) noexcept {
        const std::size_t begin = n * t / team, end = n * (t + 1) / team;
        Partial& p = partials_[t];
        bin_values<std::uint32_t, kSubs>(data + begin, end - begin, p.counts.data(),
                                         p.min, p.max, p.nonfinite, p.exponent, kNoRange,
                                         with_bins_);
    };
    dsinfer::detail::run_team(static_cast<std::int64_t>(want),
             [&](std::int64_t t) noexcept { work(static_cast<std::size_t>(t), want); });
    // Merge: everything to the largest R, summed exactly.
    int exponent = exponent_;
    for (std::size_t t = 0; t < want; ++t) exponent = std::max(exponent, partials_[t].exponent);
    grow(exponent);
    for (std::size_t t = 0; t < want; ++t) {
        Partial& p = partials_[t];
        nonfinite_ += p.nonfinite;
        if (p.min <= p.max) {
            min_ = std::min(min_, p.min);
            max_ = std::max(max_, p.max);
        }
        if (!with_bins_) continue;
        const int d = shift_between(p.exponent, exponent, kNoRange);
        std::uint32_t* c = p.counts.data();
        for (int j = 0; j < kBins; ++j) {
            std::uint64_t sum = 0;
            for (int s = 0; s < kSubs; ++s) sum += c[static_cast<std::size_t>(s) * kBins + j];
            if (sum != 0) bins_[static_cast<std::size_t>(shifted_bin(j, d))] += sum;
        }
        std::memset(c, 0, p.counts.size() * sizeof(std::uint32_t));
    }
    count_ += n;
}

std::pair<float, float> RangeHistogram::choose(CalibrationMethod method, double percentile,
                                               bool symmetric) const {
    const auto finish = [symmetric](double lo, double hi) {
        lo = std::min(lo, 0.0);
        hi = std::max(hi, 0.0);
        float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
        if (symmetric) {
            const float a = std::max(std::fabs(flo), std::fabs(fhi));
            flo = -a;
            fhi = a;
        }
        return std::pair<float, float>{flo, fhi};
    };
    const std::uint64_t total = finite_count();
    if (total == 0 || (min_ == 0.f && max_ == 0.f)) return finish(0.0, 0.0);
    const double mn = min_, mx = max_;
    if (method == CalibrationMethod::minmax || !with_bins_) return finish(mn, mx);
    if (exponent_ == kNoRange) return finish(0.0, 0.0);
    const double width = std::ldexp(1.0, exponent_ - 11);  // 2R / kBins
    const auto lower_edge = [width](int j) { return static_cast<double>(j - kHalf) * width; };

    switch (method) {
    case CalibrationMethod::minmax:
        return finish(mn, mx);

    case CalibrationMethod::percentile: {
        double p = percentile;
        if (std::isnan(p) || p > 100.0) p = 100.0;
        p = std::max(p, 50.0);
        const double n = static_cast<double>(total);
        // The value at rank r (1..n, fractional): linear within the bin holding rank ceil(r).
        const auto quantile = [&](double r) {
            if (r <= 0.0) return mn;
            if (r >= n) return mx;
            std::uint64_t cum = 0;
            for (int j = 0; j < kBins; ++j) {
                const std::uint64_t c = bins_[static_cast<std::size_t>(j)];
                if (c != 0 && static_cast<double>(cum + c) >= r) {
                    const double v = lower_edge(j) + (r - static_cast<double>(cum)) /
                                                         static_cast<double>(c) * width;
                    return std::clamp(v, mn, mx);
                }
                cum += c;
            }
            return mx;
        };
        const double lo = quantile((1.0 - p / 100.0) * n);
        const double hi = quantile(p / 100.0 * n);
        return finish(lo, hi);
    }

    case CalibrationMethod::entropy: {
        // |x| histogram: folded bin k holds |x| in [k w, (k + 1) w] (w: the bin width).
        std::vector<double> fold(kHalf);
        for (int k = 0; k < kHalf; ++k)
            fold[static_cast<std::size_t>(k)] =
                static_cast<double>(bins_[static_cast<std::size_t>(kHalf + k)] +
                                    bins_[static_cast<std::size_t>(kHalf - 1 - k)]);
        fold[0] = fold[1];  // pytorch-quantization: the zero spike does not count
        std::vector<double> csum(kHalf + 1, 0.0);  // prefix sums of the counts
        std::vector<int> nz(kHalf + 1, 0);         // prefix counts of the nonzero bins
        for (std::size_t k = 0; k < static_cast<std::size_t>(kHalf); ++k) {
            csum[k + 1] = csum[k] + fold[k];
            nz[k + 1] = nz[k] + (fold[k] > 0.0 ? 1 : 0);
        }
        const double sum = csum[kHalf];
        if (!(sum > 0.0)) return finish(mn, mx);
        const int levels = min_ < 0.f ? 128 : 256;
        const double eps = 1e-4;  // smoothing, in counts (MXNet / ONNX Runtime)
        std::vector<double> level_q(static_cast<std::size_t>(levels));
        int best_i = -1;
        double best = std::numeric_limits<double>::infinity();
        for (int i = levels; i <= kHalf; ++i) {
            const auto ui = static_cast<std::size_t>(i);
            const double kept = csum[ui];
            if (!(kept > 0.0)) continue;
            const double outliers = sum - kept;
            // P: fold[0, i) with the outliers added to bin i - 1. Q: level L takes bins
            // [ceil(L i / levels), ceil((L + 1) i / levels)) of fold (no outliers), its count
            // spread evenly over the bins where P is nonzero.
            const bool last_extra = fold[ui - 1] == 0.0 && outliers > 0.0;  // P > 0, fold 0
            const int nz_p = nz[ui] + (last_extra ? 1 : 0);
            int nz_q = 0;
            for (int level = 0; level < levels; ++level) {
                const auto s = static_cast<std::size_t>((level * i + levels - 1) / levels);
                const auto e = static_cast<std::size_t>(((level + 1) * i + levels - 1) / levels);
                const double lsum = csum[e] - csum[s];
                const int nzl = nz[e] - nz[s] + (e == ui && last_extra ? 1 : 0);
                level_q[static_cast<std::size_t>(level)] = lsum > 0.0 ? lsum / nzl : 0.0;
                if (lsum > 0.0) nz_q += nzl;
            }
            // Smoothing: zero bins get eps, nonzero ones give it back evenly (sums kept).
            const double eps_p = eps * (i - nz_p) / nz_p;
            const double eps_q = eps * (i - nz_q) / nz_q;
            // KL(P || Q) = (1/S) sum_k P_k (log P_k - log Q_k) + log(Sq / S) on the
            // unnormalised counts (S = sum, Sq = kept); bins where both are eps add nothing.
            double acc = 0.0;
            bool finite = true;
            for (int level = 0; level < levels && finite; ++level) {
                const auto s = static_cast<std::size_t>((level * i + levels - 1) / levels);
                const auto e = static_cast<std::size_t>(((level + 1) * i + levels - 1) / levels);
                const double q = level_q[static_cast<std::size_t>(level)];
                const double qs = q > 0.0 ? q - eps_q : eps;
                if (!(qs > 0.0)) {
                    finite = false;  // smoothing would make Q negative (MXNet: infinite)
                    break;
                }
                const double log_q = std::log(qs);
                for (std::size_t k = s; k < e; ++k) {
                    double pk = fold[k] + (k + 1 == ui ? outliers : 0.0);
                    if (pk == 0.0) continue;  // P = Q = eps
                    pk -= eps_p;
                    acc += pk * (std::log(pk) - log_q);
                }
            }
            if (!finite) continue;
            const double kl = acc / sum + std::log(kept / sum);
            if (std::isfinite(kl) && kl <= best) {  // ties: the wider
                best = kl;
                best_i = i;
            }
        }
        if (best_i < 0) return finish(mn, mx);
        const double t = static_cast<double>(best_i) * width;
        return finish(std::max(mn, -t), std::min(mx, t));
    }

    case CalibrationMethod::mse: {
        const double lo0 = std::min(mn, 0.0), hi0 = std::max(mx, 0.0);
        struct Point {
            float x;
            double count;
        };
        std::vector<Point> points;
        for (int j = 0; j < kBins; ++j) {
            const std::uint64_t c = bins_[static_cast<std::size_t>(j)];
            if (c == 0) continue;
            const double centre = std::clamp(lower_edge(j) + 0.5 * width, mn, mx);
            points.push_back({static_cast<float>(centre), static_cast<double>(c)});
        }
        double best_err = std::numeric_limits<double>::infinity();
        double best_lo = lo0, best_hi = hi0;
        for (int k = 100; k >= 30; --k) {
            const double a = k / 100.0;
            const float clo = static_cast<float>(a * lo0), chi = static_cast<float>(a * hi0);
            const QParams q = choose_qparams(clo, chi, symmetric);
            const auto zp = static_cast<double>(q.zero_point);
            double err = 0.0;
            for (const Point& pt : points) {
                const double quotient = static_cast<double>(pt.x / q.scale);
                const double level =
                    symmetric ? detail::saturate_round<std::int8_t>(quotient, zp)
                              : detail::saturate_round<std::uint8_t>(quotient, zp);
                const float dq = static_cast<float>(level - zp) * q.scale;
                const double diff = static_cast<double>(pt.x) - static_cast<double>(dq);
                err += pt.count * diff * diff;
            }
            if (err < best_err) {  // ties: the wider (found first)
                best_err = err;
                best_lo = clo;
                best_hi = chi;
            }
        }
        return finish(best_lo, best_hi);
    }
    }
    return finish(mn, mx);
}

QParams choose_qparams(float lo, float hi, bool symmetric) noexcept {
    // One definition of the quantizer's parameters: src/ops/quantize.hpp (also what
    // apply_static_quantization writes).
    const detail::StaticQuantParams sp = detail::static_quant_params(lo, hi, symmetric);
    QParams p;
    p.type = symmetric ? DType::i8 : DType::u8;
    p.scale = sp.scale;
    p.zero_point = sp.zero_point;
    return p;
}

}  // namespace dsinfer::quantizer
