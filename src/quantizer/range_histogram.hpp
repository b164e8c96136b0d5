// The calibration range math of static INT8 quantization (Step 10): what one observed tensor's
// values were over every calibration batch (RangeHistogram, one pass, any number of batches and
// threads), the clip range a CalibrationMethod chooses from that (RangeHistogram::choose), and
// the ONNX QuantizeLinear scale / zero point of a range (choose_qparams).
//
// The histogram: kBins equal bins over [-R, R), R = 2^e the smallest power of two strictly
// above every finite |x| seen (R = 0 until a nonzero value comes). Bin of x:
// floor(x * kBins / (2R)) + kBins / 2, computed exactly (the scale is a power of two). When a
// value needs a larger R, R doubles (d times) and bin j moves to ((j - kBins/2) >> d) + kBins/2:
// bin pairs merge exactly into the bins the values would have had under the new R. So the bins
// depend only on the multiset of values and the final R, never on the order, the batch splits
// or the thread count (the tests check this bitwise). R is at least 2^kMinExponent (values
// smaller than that all share the two central bins); R = 2^128 (range() == +inf) only when a
// finite value has |x| >= 2^127.
//
// Users: the calibration driver (src/quantizer/), one RangeHistogram per observed tensor.
// Ownership/threading: a RangeHistogram is a value; one object is not safe to use from two
// threads at once (add() parallelises itself). Internal (namespace dsinfer::quantizer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dsinfer/dtype.hpp"
#include "dsinfer/quantize.hpp"

namespace dsinfer::quantizer {

/// QuantizeLinear's parameters for one tensor: y = saturate(round_half_even(x / scale) + zp).
/// type is DType::u8 (asymmetric) or DType::i8 (symmetric, zero_point 0).
struct QParams {
    float scale = 1.f;
    std::int32_t zero_point = 0;
    DType type = DType::u8;
};

/// One tensor's values over many batches, in one pass: min/max of the finite values, counts, and
/// the histogram described above.
class RangeHistogram {
public:
    static constexpr int kBins = 4096;
    /// The smallest R is 2^kMinExponent (so that the bin scale kBins / (2R) stays a normal float).
    static constexpr int kMinExponent = -100;

    /// `with_bins` false: min, max and counts only (the minmax method needs no histogram;
    /// choose() then gives the minmax range whatever the method).
    explicit RangeHistogram(bool with_bins = true);

    /// Adds n values. NaN/±Inf are counted in nonfinite() and otherwise ignored. Uses up to
    /// `num_threads` threads (below 1: 1; one inside an OpenMP parallel region) when n is large
    /// (from 2^17 values a thread): OpenMP, each thread binning a contiguous part into its own
    /// partial histogram, merged exactly, so results do not depend on the thread count.
    /// Never throws; allocates nothing except, the first time a larger thread count is asked
    /// for, the per-thread partials (kept; if that allocation fails, fewer threads are used).
    void add(const float* data, std::size_t n, int num_threads = 1) noexcept;

    float min() const noexcept { return finite_count() > 0 ? min_ : 0.f; }  ///< 0 when none finite
    float max() const noexcept { return finite_count() > 0 ? max_ : 0.f; }  ///< 0 when none finite
    std::uint64_t count() const noexcept { return count_; }  ///< all values added
    std::uint64_t nonfinite() const noexcept { return nonfinite_; }
    /// R: 0 before any nonzero finite value; +inf when R = 2^128 (see above).
    float range() const noexcept;
    /// kBins counts; bin j covers [-R + j * 2R / kBins, -R + (j + 1) * 2R / kBins). Exact zeros
    /// are in bin kBins / 2. The counts sum to count() - nonfinite().
    const std::vector<std::uint64_t>& bins() const noexcept { return bins_; }

    /// The chosen clip range [lo, hi], always finite with lo <= 0 <= hi ([0, 0] when no finite
    /// value was seen):
    ///  minmax: [min(min, 0), max(max, 0)];
    ///  percentile p (in (50, 100]; NaN or above 100 is taken as 100, 50 or below as 50): lo =
    ///    the (100 - p)% quantile of the signed values, hi = the p% quantile, each interpolated
    ///    linearly within its bin (at rank f * N of the N finite values: within one bin width of
    ///    the ceil(f * N)-th smallest value) and clamped to [min, max]; then widened to include 0;
    ///  entropy: TensorRT-style KL-divergence threshold search on the histogram of |x| (the
    ///    signed histogram folded at 0: kBins / 2 bins), with 128 quantized levels when the
    ///    tensor has negative values and 256 when it is non-negative; as NVIDIA's
    ///    pytorch-quantization, the first |x| bin takes the second's count (so a Relu's spike of
    ///    exact zeros, which quantize exactly whatever the range, does not drive the choice);
    ///    candidate i keeps i bins (i = levels ... kBins / 2): P = those bins with the outliers
    ///    added to the last; Q = bin k in level floor(k * levels / i), each level's count spread
    ///    evenly over its bins where P is nonzero; as MXNet and ONNX Runtime, both smoothed
    ///    (zero bins get 1e-4 counts, taken evenly from the nonzero ones) so that outliers
    ///    clipped into an empty bin cost a finite divergence; the smallest divergence wins
    ///    (ties: the wider); T = i * bin width; range [max(min, -T), min(max, T)] widened to
    ///    include 0 (minmax when no candidate has a finite divergence). About 5-20 ms a call;
    ///  mse: candidates [a * lo0, a * hi0], a in {1.00, 0.99, ..., 0.30}, [lo0, hi0] the minmax
    ///    range; minimises the expected squared error of QuantizeLinear -> DequantizeLinear with
    ///    choose_qparams(candidate, symmetric), over the values at bin centres (clamped to
    ///    [min, max]) weighted by the counts, clipping included; ties go to the wider range.
    /// `symmetric`: the range is then made [-a, a], a = max(|lo|, |hi|).
    std::pair<float, float> choose(CalibrationMethod method, double percentile,
                                   bool symmetric) const;

private:
    static constexpr int kNoRange = -100000;  ///< exponent while R == 0
    static constexpr int kSubs = 4;           ///< interleaved sub-histograms per thread partial

    /// One thread's part of a large add(): kSubs interleaved uint32 sub-histograms (element i
    /// of a block goes to sub i % kSubs: repeated bins, as a Relu's zeros, do not serialise on
    /// one counter) and its own R.
    struct Partial {
        std::vector<std::uint32_t> counts;  ///< kSubs * kBins
        float min = 0.f, max = 0.f;
        std::uint64_t nonfinite = 0;
        int exponent = kNoRange;
    };

    std::uint64_t finite_count() const noexcept { return count_ - nonfinite_; }
    void add_chunk(const float* data, std::size_t n, int num_threads) noexcept;
    void add_small(const float* data, std::size_t n) noexcept;
    void grow(int exponent) noexcept;

    std::vector<std::uint64_t> bins_;
    std::vector<Partial> partials_;  ///< at least one; more when add() was asked for threads
    float min_, max_;                ///< over the finite values (meaningful when any)
    std::uint64_t count_ = 0, nonfinite_ = 0;
    int exponent_ = kNoRange;        ///< R = 2^exponent_
    bool with_bins_ = true;
};

/// ONNX QuantizeLinear parameters for a range: asymmetric u8: rmin = min(lo, 0), rmax =
/// max(hi, 0), scale = (rmax - rmin) / 255, zero_point = clamp(round_half_even(-rmin / scale),
/// 0, 255) (all in float); symmetric (DType::i8): a = max(|lo|, |hi|), scale = a / 127,
/// zero_point 0. The scale is always finite and positive: a zero or non-finite range (NaN or
/// infinite lo/hi) gives scale 1 and zero point 0; a range so small that the scale would be
/// subnormal or zero gives std::numeric_limits<float>::min(); a range so large that
/// rmax - rmin overflows computes the scale as rmax / 255 - rmin / 255.
QParams choose_qparams(float lo, float hi, bool symmetric) noexcept;

}  // namespace dsinfer::quantizer
