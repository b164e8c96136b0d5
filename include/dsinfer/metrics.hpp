// dsinfer/metrics.hpp — serving metrics: lock-free latency and size histograms, request and
// batch counters, throughput and memory gauges, exported as JSON and Prometheus text.
//
// Purpose: the sink an inference server feeds with plain numbers (no dependency on the engine
// or the scheduler): ServingMetrics::record_request() once per finished request (its ErrorCode
// and its queue, compute and end-to-end times), record_batch() once per executed batch,
// set_memory() with the memory pool's figures. snapshot() returns a plain MetricsSnapshot
// (counts by outcome, throughput since start and over the last 10 s, p50/p90/p99/p99.9/mean/max
// of latency, queue and compute time, batch-size histograms, memory), which to_json() and
// to_prometheus() (text exposition format 0.0.4) turn into one document. LatencyHistogram and
// SizeHistogram are usable on their own. docs/METRICS.md lists every field.
//
// LatencyHistogram layout (log-linear, HDR-like; values in integer nanoseconds):
//   [0, 1024 ns)          32 linear buckets of 32 ns;
//   [2^10, 2^42) ns       32 buckets per power of two (2^42 ns = 73.3 min), a bucket [lo, hi)
//                         is at most lo/32 wide;
//   >= 2^42 ns            one overflow bucket (clamped: counted, never lost);
//   the fine buckets holding an exported Prometheus boundary (10 µs .. 100 s, 1-2.5-5 series:
//   kLatencyExportBoundsNs) are split at it, so the exported `le` counts are exact.
//   1080 counters: 8.4 KiB per histogram. count, sum, min and max are exact.
// Quantile accuracy: quantile_ns(q) estimates the nearest-rank quantile (the value of rank
//   ceil(q * count) in sorted order) by the middle of its bucket (whole ns), narrowed to
//   [min, max]. Its error is at most 1/64 (1.5625 %) of the exact value for values in
//   [1024 ns, 2^42 ns), and at most 16 ns below 1024 ns; a quantile in the overflow bucket
//   lies in [2^42 ns, max].
//   q = 0 and q = 1 (rank 1 and rank count) return the exact min and max.
//
// Threading: every record/set method is thread-safe, lock-free and noexcept: one relaxed atomic
// add per counter and a compare-exchange only when a min/max/throughput second changes. A
// snapshot taken while other threads record is not one atomic cut: each counter is exact at
// its read, a histogram's count is the sum of its buckets (so a Prometheus +Inf bucket always
// equals its _count), and sum/min/max may include or miss records in flight. reset() is meant
// for quiescent moments (between benchmark phases); records racing with it may survive it in
// part.
//
// Cost (bench_metrics; figures and machine in docs/METRICS.md): an OK record_request() is 8
// relaxed atomic adds plus a steady_clock read — about 25 ns with `now` passed in, 65 ns with
// the clock read (half of it the clock) — against a request's compute time of 0.1-100 ms:
// cheap enough to leave on. Memory: ServingMetrics is 26 KiB. A scrape (snapshot() +
// to_prometheus(), about 8 KiB of text) costs 20-40 µs.
//
// Usage:
//   dsinfer::ServingMetrics metrics;
//   // per request, when its outcome is known (queue/compute/total: std::chrono durations):
//   metrics.record_request(dsinfer::ErrorCode::ok, queue, compute, total);
//   // per batch the engine ran:
//   metrics.record_batch(requests_in_batch, items_in_batch, batch_compute);
//   metrics.set_memory(pool_stats.bytes_in_use, pool_stats.peak_bytes_in_use);
//   dsinfer::MetricsSnapshot s = metrics.snapshot();
//   double p99_ms = s.latency.quantile_ns(0.99) / 1e6;
//   std::string body = dsinfer::to_prometheus(s);   // GET /metrics
//   std::string json = dsinfer::to_json(s);
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsinfer/status.hpp"

namespace dsinfer {

/// Number of ErrorCode values (ErrorCode::internal is the last one).
inline constexpr std::size_t kErrorCodeCount = static_cast<std::size_t>(ErrorCode::internal) + 1;
static_assert(to_string(static_cast<ErrorCode>(kErrorCodeCount)) == "unknown",
              "a code was added after ErrorCode::internal: update kErrorCodeCount");

/// The Prometheus `le` boundaries of the exported latency histograms, in nanoseconds
/// (10 µs .. 100 s, 1-2.5-5 series), and their labels in seconds.
inline constexpr std::array<std::uint64_t, 22> kLatencyExportBoundsNs = {
    10'000,         25'000,         50'000,         100'000,         250'000,
    500'000,        1'000'000,      2'500'000,      5'000'000,       10'000'000,
    25'000'000,     50'000'000,     100'000'000,    250'000'000,     500'000'000,
    1'000'000'000,  2'500'000'000,  5'000'000'000,  10'000'000'000,  25'000'000'000,
    50'000'000'000, 100'000'000'000};
inline constexpr std::array<std::string_view, 22> kLatencyExportBoundLabels = {
    "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
    "0.005", "0.01",    "0.025", "0.05",   "0.1",     "0.25",   "0.5",   "1",
    "2.5",   "5",       "10",    "25",     "50",      "100"};

namespace detail::metrics {

inline constexpr unsigned kSubBits = 5;                    // 32 sub-buckets per power of two
inline constexpr unsigned kMinExp = 10;                    // linear below 2^10 ns
inline constexpr unsigned kMaxExp = 42;                    // overflow from 2^42 ns
inline constexpr std::uint64_t kMaxTracked = std::uint64_t{1} << kMaxExp;
inline constexpr std::size_t kFine = ((kMaxExp - kMinExp + 1) << kSubBits) + 1;  // 1057
inline constexpr std::size_t kOverflowFine = kFine - 1;

/// Index of `v` among the unsplit buckets (value order).
constexpr std::size_t fine_index(std::uint64_t v) noexcept {
    if (v >= kMaxTracked) return kOverflowFine;
    const unsigned e = std::max(static_cast<unsigned>(std::bit_width(v)), kMinExp + 1) - 1;
    return (static_cast<std::size_t>(e - kMinExp) << kSubBits) +
           static_cast<std::size_t>(v >> (e - kSubBits));
}
constexpr std::uint64_t fine_lower(std::size_t f) noexcept {
    if (f < (std::size_t{2} << kSubBits)) return std::uint64_t{f} << kSubBits;  // width 32 ns
    const unsigned e = static_cast<unsigned>(f >> kSubBits) + kMinExp - 1;
    const std::uint64_t m = (f & ((std::size_t{1} << kSubBits) - 1)) + (std::size_t{1} << kSubBits);
    return m << (e - kSubBits);
}
/// An export boundary strictly inside fine bucket f splits it (b == upper - 1 needs no split).
constexpr bool splits(std::uint64_t b, std::size_t f) noexcept {
    return f != kOverflowFine && fine_lower(f) <= b && b + 1 < fine_lower(f + 1);
}
constexpr std::size_t count_splits() noexcept {
    std::size_t n = 0;
    for (const std::uint64_t b : kLatencyExportBoundsNs)
        if (splits(b, fine_index(b))) ++n;
    return n;
}
inline constexpr std::size_t kBuckets = kFine + count_splits();

struct Layout {
    std::array<std::uint64_t, kBuckets> lower{};  // inclusive lower bound of each bucket
    std::array<std::uint16_t, kFine> pos{};       // fine bucket -> its (first) bucket
};
constexpr Layout make_layout() noexcept {
    Layout l;
    std::size_t p = 0;
    for (std::size_t f = 0; f < kFine; ++f) {
        l.pos[f] = static_cast<std::uint16_t>(p);
        l.lower[p++] = fine_lower(f);
        for (const std::uint64_t b : kLatencyExportBoundsNs)
            if (splits(b, f)) l.lower[p++] = b + 1;  // at most one: boundaries are 2x apart
    }
    return l;
}
inline constexpr Layout kLayout = make_layout();
static_assert(kBuckets < 65536);

/// The bucket of `v`: its fine bucket, or the upper part when that one is split below `v`.
constexpr std::size_t bucket_index(std::uint64_t v) noexcept {
    const std::size_t f = fine_index(v);
    if (f == kOverflowFine) return kBuckets - 1;
    const std::size_t p = kLayout.pos[f];
    return v >= kLayout.lower[p + 1] ? p + 1 : p;
}

inline void update_min(std::atomic<std::uint64_t>& m, std::uint64_t v) noexcept {
    std::uint64_t cur = m.load(std::memory_order_relaxed);
    while (v < cur && !m.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
}
inline void update_max(std::atomic<std::uint64_t>& m, std::uint64_t v) noexcept {
    std::uint64_t cur = m.load(std::memory_order_relaxed);
    while (v > cur && !m.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
}
/// Relaxed loads of `counters` into `out`; returns their sum.
template <class Counters>
std::uint64_t load_counters(const Counters& counters, std::vector<std::uint64_t>& out) {
    out.resize(counters.size());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < counters.size(); ++i) {
        out[i] = counters[i].load(std::memory_order_relaxed);
        total += out[i];
    }
    return total;
}
inline std::uint64_t to_ns(std::chrono::nanoseconds d) noexcept {
    return d.count() <= 0 ? 0 : static_cast<std::uint64_t>(d.count());
}
/// Locale-independent number formatting (std::to_chars: shortest round-trip for doubles).
inline void append_number(std::string& out, std::uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}
inline void append_number(std::string& out, double v) {
    if (!std::isfinite(v)) v = 0.0;  // never produced; JSON has no NaN/Inf
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

}  // namespace detail::metrics

/// One exported histogram bucket: observations <= le (cumulative).
struct CumulativeBucket {
    std::uint64_t le = 0;  ///< upper bound, inclusive (nanoseconds for latencies)
    std::uint64_t count = 0;
};

/// A copy of a LatencyHistogram's counters. Value type; all methods work on an empty one.
struct HistogramSnapshot {
    /// Count per bucket in value order; bucket i holds [bucket_lower_ns(i), bucket_upper_ns(i)].
    std::vector<std::uint64_t> buckets;
    std::uint64_t count = 0;   ///< sum of `buckets`
    std::uint64_t sum_ns = 0;  ///< exact sum of the recorded values
    std::uint64_t min_ns = 0;  ///< exact; 0 when empty
    std::uint64_t max_ns = 0;  ///< exact; 0 when empty

    static constexpr std::size_t bucket_count() noexcept { return detail::metrics::kBuckets; }
    static constexpr std::uint64_t bucket_lower_ns(std::size_t i) noexcept {
        return detail::metrics::kLayout.lower[i];
    }
    static constexpr std::uint64_t bucket_upper_ns(std::size_t i) noexcept {
        return i + 1 < bucket_count() ? detail::metrics::kLayout.lower[i + 1] - 1
                                      : std::numeric_limits<std::uint64_t>::max();
    }

    double mean_ns() const noexcept {
        return count == 0 ? 0.0 : static_cast<double>(sum_ns) / static_cast<double>(count);
    }

    /// The nearest-rank q-quantile (q in [0, 1], clamped), estimated as documented at the top
    /// of this header (error <= 1/64 of the value in range). 0 when empty.
    double quantile_ns(double q) const noexcept {
        if (count == 0) return 0.0;
        q = q > 0.0 ? std::min(q, 1.0) : 0.0;  // NaN -> 0
        std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count)));
        rank = std::clamp<std::uint64_t>(rank, 1, count);
        const bool exact_ends = min_ns <= max_ns;  // false only in a snapshot torn by a record
        if (exact_ends && rank == 1) return static_cast<double>(min_ns);
        if (exact_ends && rank == count) return static_cast<double>(max_ns);
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < buckets.size(); ++i) {
            seen += buckets[i];
            if (seen < rank) continue;
            std::uint64_t lo = bucket_lower_ns(i), hi = bucket_upper_ns(i);
            if (exact_ends && std::max(lo, min_ns) <= std::min(hi, max_ns)) {
                lo = std::max(lo, min_ns);
                hi = std::min(hi, max_ns);
            }
            return static_cast<double>(lo + (hi - lo) / 2);  // whole ns: the bound still holds
        }
        return static_cast<double>(max_ns);
    }

    /// Observations <= `ns`: exact when `ns` is a bucket's upper bound (every value of
    /// kLatencyExportBoundsNs is), otherwise the count up to the last bucket ending below it.
    std::uint64_t count_at_or_below(std::uint64_t ns) const noexcept {
        std::uint64_t n = 0;
        for (std::size_t i = 0; i < buckets.size() && bucket_upper_ns(i) <= ns; ++i) n += buckets[i];
        return n;
    }

    /// The exported buckets: one per kLatencyExportBoundsNs, cumulative (+Inf is `count`).
    std::vector<CumulativeBucket> export_buckets() const {
        std::vector<CumulativeBucket> out;
        out.reserve(kLatencyExportBoundsNs.size());
        std::uint64_t n = 0;
        std::size_t i = 0;
        for (const std::uint64_t le : kLatencyExportBoundsNs) {
            for (; i < buckets.size() && bucket_upper_ns(i) <= le; ++i) n += buckets[i];
            out.push_back({le, n});
        }
        return out;
    }
};

/// Lock-free histogram of durations in nanoseconds (layout and accuracy: top of this header).
class LatencyHistogram {
public:
    LatencyHistogram() noexcept { reset(); }
    LatencyHistogram(const LatencyHistogram&) = delete;
    LatencyHistogram& operator=(const LatencyHistogram&) = delete;

    /// Records one value; values >= 2^42 ns go to the overflow bucket (still exact in
    /// sum/min/max).
    void record(std::uint64_t ns) noexcept {
        detail::metrics::update_min(min_, ns);  // before the bucket: a snapshot that sees the
        detail::metrics::update_max(max_, ns);  // bucket usually sees min/max too
        sum_.fetch_add(ns, std::memory_order_relaxed);
        buckets_[detail::metrics::bucket_index(ns)].fetch_add(1, std::memory_order_relaxed);
    }
    /// Negative durations are recorded as 0.
    void record(std::chrono::nanoseconds d) noexcept { record(detail::metrics::to_ns(d)); }

    HistogramSnapshot snapshot() const {
        HistogramSnapshot s;
        s.count = detail::metrics::load_counters(buckets_, s.buckets);
        s.sum_ns = sum_.load(std::memory_order_relaxed);
        if (s.count != 0) {
            s.min_ns = min_.load(std::memory_order_relaxed);
            s.max_ns = max_.load(std::memory_order_relaxed);
        }
        return s;
    }

    void reset() noexcept {
        for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
        sum_.store(0, std::memory_order_relaxed);
        min_.store(std::numeric_limits<std::uint64_t>::max(), std::memory_order_relaxed);
        max_.store(0, std::memory_order_relaxed);
    }

private:
    std::array<std::atomic<std::uint64_t>, detail::metrics::kBuckets> buckets_;
    std::atomic<std::uint64_t> sum_, min_, max_;
};

/// A copy of a SizeHistogram's counters.
struct SizeHistogramSnapshot {
    std::vector<std::uint64_t> counts;  ///< counts[s]: records of size s, s in [0, max_exact]
    std::uint64_t overflow = 0;         ///< records of size > max_exact
    std::uint64_t count = 0;            ///< all records (sum of counts + overflow)
    std::uint64_t sum = 0;              ///< exact sum of the sizes
    std::uint64_t max = 0;              ///< exact largest size; 0 when empty

    std::size_t max_exact() const noexcept { return counts.empty() ? 0 : counts.size() - 1; }
    double mean() const noexcept {
        return count == 0 ? 0.0 : static_cast<double>(sum) / static_cast<double>(count);
    }
    /// Records of size <= s: exact for s <= max_exact() and s >= max; in between, the
    /// overflow records are left out.
    std::uint64_t count_at_or_below(std::uint64_t s) const noexcept {
        if (s >= max) return count;
        if (s >= max_exact()) return count - overflow;
        std::uint64_t n = 0;
        for (std::size_t i = 0; i <= s; ++i) n += counts[i];
        return n;
    }
};

/// Lock-free histogram of small integers (batch sizes): exact counts for 0..max_exact, one
/// overflow bucket above.
class SizeHistogram {
public:
    explicit SizeHistogram(std::size_t max_exact = 256) : counts_(max_exact + 1) { reset(); }
    SizeHistogram(const SizeHistogram&) = delete;
    SizeHistogram& operator=(const SizeHistogram&) = delete;

    std::size_t max_exact() const noexcept { return counts_.size() - 1; }

    void record(std::size_t size) noexcept {
        if (size < counts_.size())
            counts_[size].fetch_add(1, std::memory_order_relaxed);
        else
            overflow_.fetch_add(1, std::memory_order_relaxed);
        sum_.fetch_add(size, std::memory_order_relaxed);
        detail::metrics::update_max(max_, size);
    }

    SizeHistogramSnapshot snapshot() const {
        SizeHistogramSnapshot s;
        s.overflow = overflow_.load(std::memory_order_relaxed);
        s.count = detail::metrics::load_counters(counts_, s.counts) + s.overflow;
        s.sum = sum_.load(std::memory_order_relaxed);
        s.max = s.count == 0 ? 0 : max_.load(std::memory_order_relaxed);
        return s;
    }

    void reset() noexcept {
        for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
        overflow_.store(0, std::memory_order_relaxed);
        sum_.store(0, std::memory_order_relaxed);
        max_.store(0, std::memory_order_relaxed);
    }

private:
    std::vector<std::atomic<std::uint64_t>> counts_;
    std::atomic<std::uint64_t> overflow_, sum_, max_;
};

/// Requests by outcome. submitted = ok + failed + rejected + timed_out + cancelled.
struct RequestCounts {
    std::uint64_t submitted = 0;  ///< every request whose outcome was recorded
    std::uint64_t ok = 0;
    std::uint64_t failed = 0;     ///< any error not listed below (invalid_argument, internal, ...)
    std::uint64_t rejected = 0;   ///< ErrorCode::unavailable (queue full, shutting down)
    std::uint64_t timed_out = 0;  ///< ErrorCode::deadline_exceeded
    std::uint64_t cancelled = 0;  ///< ErrorCode::cancelled
    /// Per ErrorCode (index static_cast<std::size_t>(code)); by_code[0] == ok.
    std::array<std::uint64_t, kErrorCodeCount> by_code{};
};

/// Everything ServingMetrics knows at one moment (a plain value; see docs/METRICS.md).
struct MetricsSnapshot {
    double uptime_s = 0.0;  ///< since construction or reset()
    RequestCounts requests;
    double throughput_rps = 0.0;         ///< OK requests / uptime
    double recent_throughput_rps = 0.0;  ///< OK requests / s over the last recent_window_s
    double recent_window_s = 0.0;        ///< whole seconds, <= 10 (uptime when under 1 s)
    HistogramSnapshot latency;  ///< end-to-end time of OK requests
    HistogramSnapshot queue;    ///< queue time of every request not rejected
    HistogramSnapshot compute;  ///< compute time of every request that ran (compute > 0)
    SizeHistogramSnapshot batch_requests;  ///< requests per batch
    SizeHistogramSnapshot batch_items;     ///< items (batch rows) per batch
    std::uint64_t batch_compute_ns = 0;    ///< sum of the batches' compute time
    std::uint64_t memory_in_use_bytes = 0;
    std::uint64_t memory_peak_bytes = 0;

    std::uint64_t batches() const noexcept { return batch_requests.count; }
    double mean_batch_size() const noexcept { return batch_requests.mean(); }
};

struct ServingMetricsOptions {
    std::size_t max_batch_requests = 256;  ///< exact batch-size buckets, in requests
    std::size_t max_batch_items = 1024;    ///< exact batch-size buckets, in items
};

/// The engine's metrics sink. Thread-safe; record/set methods are lock-free and noexcept.
/// Not copyable or movable (atomics; the engine owns one and hands out references).
class ServingMetrics {
public:
    using Clock = std::chrono::steady_clock;
    /// recent_throughput_rps averages the OK requests of the last this many whole seconds.
    static constexpr std::uint64_t kThroughputWindowSeconds = 10;

    explicit ServingMetrics(ServingMetricsOptions options = {}, Clock::time_point start = Clock::now())
        : batch_requests_(options.max_batch_requests), batch_items_(options.max_batch_items) {
        reset(start);
    }
    ServingMetrics(const ServingMetrics&) = delete;
    ServingMetrics& operator=(const ServingMetrics&) = delete;

    /// One finished request. `outcome` classifies it (RequestCounts); `total_latency` goes to
    /// the latency histogram when OK, `queue_time` to the queue histogram unless rejected
    /// (unavailable), `compute_time` to the compute histogram when > 0 (pass 0 for a request
    /// that never ran). Reads the clock for OK requests (the throughput window).
    void record_request(ErrorCode outcome, std::chrono::nanoseconds queue_time,
                        std::chrono::nanoseconds compute_time,
                        std::chrono::nanoseconds total_latency) noexcept {
        record_request_impl(outcome, queue_time, compute_time, total_latency, nullptr);
    }
    /// Same, with the completion time supplied (no clock read; also for tests).
    void record_request(ErrorCode outcome, std::chrono::nanoseconds queue_time,
                        std::chrono::nanoseconds compute_time,
                        std::chrono::nanoseconds total_latency, Clock::time_point now) noexcept {
        record_request_impl(outcome, queue_time, compute_time, total_latency, &now);
    }

    /// One executed batch of `requests` requests holding `items` rows, computed in `compute`.
    void record_batch(std::size_t requests, std::size_t items,
                      std::chrono::nanoseconds compute) noexcept {
        batch_requests_.record(requests);
        batch_items_.record(items);
        batch_compute_ns_.fetch_add(detail::metrics::to_ns(compute), std::memory_order_relaxed);
    }

    /// Memory gauges (e.g. MemoryPoolStats::bytes_in_use / peak_bytes_in_use).
    void set_memory(std::uint64_t in_use_bytes, std::uint64_t peak_bytes) noexcept {
        memory_in_use_.store(in_use_bytes, std::memory_order_relaxed);
        memory_peak_.store(peak_bytes, std::memory_order_relaxed);
    }

    MetricsSnapshot snapshot() const { return snapshot(Clock::now()); }
    /// The snapshot as of `now` (uptime and the throughput window are computed for it).
    MetricsSnapshot snapshot(Clock::time_point now) const {
        MetricsSnapshot s;
        const std::uint64_t up_ns = ns_since_start(now);
        s.uptime_s = static_cast<double>(up_ns) / 1e9;
        RequestCounts& r = s.requests;
        for (std::size_t c = 0; c < kErrorCodeCount; ++c) {
            r.by_code[c] = by_code_[c].load(std::memory_order_relaxed);
            r.submitted += r.by_code[c];
        }
        r.ok = r.by_code[code_index(ErrorCode::ok)];
        r.rejected = r.by_code[code_index(ErrorCode::unavailable)];
        r.timed_out = r.by_code[code_index(ErrorCode::deadline_exceeded)];
        r.cancelled = r.by_code[code_index(ErrorCode::cancelled)];
        r.failed = r.submitted - r.ok - r.rejected - r.timed_out - r.cancelled;
        s.throughput_rps = up_ns == 0 ? 0.0 : static_cast<double>(r.ok) / s.uptime_s;
        // Recent window: the last whole seconds [first, sec), or the first partial second.
        const std::uint64_t sec = up_ns / kNsPerSecond;
        const std::uint64_t first = sec > kThroughputWindowSeconds ? sec - kThroughputWindowSeconds : 0;
        if (sec > first) {
            std::uint64_t n = 0;
            for (std::uint64_t k = first; k < sec; ++k) n += ok_in_second(k);
            s.recent_window_s = static_cast<double>(sec - first);
            s.recent_throughput_rps = static_cast<double>(n) / s.recent_window_s;
        } else if (up_ns != 0) {
            s.recent_window_s = s.uptime_s;
            s.recent_throughput_rps = static_cast<double>(ok_in_second(0)) / s.uptime_s;
        }
        s.latency = latency_.snapshot();
        s.queue = queue_.snapshot();
        s.compute = compute_.snapshot();
        s.batch_requests = batch_requests_.snapshot();
        s.batch_items = batch_items_.snapshot();
        s.batch_compute_ns = batch_compute_ns_.load(std::memory_order_relaxed);
        s.memory_in_use_bytes = memory_in_use_.load(std::memory_order_relaxed);
        s.memory_peak_bytes = memory_peak_.load(std::memory_order_relaxed);
        return s;
    }

    /// Zeroes every counter and histogram and restarts the uptime at `now`. The memory gauges
    /// are kept (they are state the engine sets, not accumulations).
    void reset(Clock::time_point now = Clock::now()) noexcept {
        start_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
                        std::memory_order_relaxed);
        for (auto& c : by_code_) c.store(0, std::memory_order_relaxed);
        for (auto& s : ok_per_second_) s.store(0, std::memory_order_relaxed);
        latency_.reset();
        queue_.reset();
        compute_.reset();
        batch_requests_.reset();
        batch_items_.reset();
        batch_compute_ns_.store(0, std::memory_order_relaxed);
    }

private:
    static constexpr std::uint64_t kNsPerSecond = 1'000'000'000;
    // Ring of per-second OK counts: slot k % 16 holds (second k mod 2^32) << 32 | count.
    static constexpr std::size_t kRing = 16;
    static_assert(kRing > kThroughputWindowSeconds);

    static constexpr std::size_t code_index(ErrorCode c) noexcept {
        const auto i = static_cast<std::size_t>(c);
        return i < kErrorCodeCount ? i : code_index(ErrorCode::internal);  // unknown: a bug
    }
    std::uint64_t ns_since_start(Clock::time_point now) const noexcept {
        const std::int64_t t =
            std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
        const std::int64_t d = t - start_ns_.load(std::memory_order_relaxed);
        return d <= 0 ? 0 : static_cast<std::uint64_t>(d);
    }
    static std::uint64_t tag_of(std::uint64_t second) noexcept { return second << 32; }
    std::uint64_t ok_in_second(std::uint64_t second) const noexcept {
        const std::uint64_t v = ok_per_second_[second % kRing].load(std::memory_order_relaxed);
        return (v >> 32) == (second & 0xffff'ffffu) ? (v & 0xffff'ffffu) : 0;
    }
    void note_ok(Clock::time_point now) noexcept {
        const std::uint64_t second = ns_since_start(now) / kNsPerSecond;
        auto& slot = ok_per_second_[second % kRing];
        const std::uint64_t tag = tag_of(second);
        std::uint64_t cur = slot.load(std::memory_order_relaxed);
        for (;;) {
            if ((cur & ~std::uint64_t{0xffff'ffffu}) == tag) {
                slot.fetch_add(1, std::memory_order_relaxed);
                return;
            }
            // The slot holds an older second: start this one (a lost race retries).
            if (slot.compare_exchange_weak(cur, tag | 1, std::memory_order_relaxed)) return;
        }
    }

    void record_request_impl(ErrorCode outcome, std::chrono::nanoseconds queue_time,
                             std::chrono::nanoseconds compute_time,
                             std::chrono::nanoseconds total_latency,
                             const Clock::time_point* now) noexcept {
        by_code_[code_index(outcome)].fetch_add(1, std::memory_order_relaxed);
        if (outcome != ErrorCode::unavailable) queue_.record(queue_time);
        if (compute_time.count() > 0) compute_.record(compute_time);
        if (outcome == ErrorCode::ok) {
            latency_.record(total_latency);
            note_ok(now != nullptr ? *now : Clock::now());
        }
    }

    std::atomic<std::int64_t> start_ns_{0};
    std::array<std::atomic<std::uint64_t>, kErrorCodeCount> by_code_;
    std::array<std::atomic<std::uint64_t>, kRing> ok_per_second_;
    LatencyHistogram latency_, queue_, compute_;
    SizeHistogram batch_requests_, batch_items_;
    std::atomic<std::uint64_t> batch_compute_ns_{0};
    std::atomic<std::uint64_t> memory_in_use_{0}, memory_peak_{0};
};

namespace detail::metrics {

inline void json_key(std::string& o, std::string_view key) {
    o += '"';
    o += key;
    o += "\":";
}
template <class T>
void json_field(std::string& o, std::string_view key, T v, bool last = false) {
    json_key(o, key);
    append_number(o, v);
    if (!last) o += ',';
}
inline void json_latency(std::string& o, std::string_view key, const HistogramSnapshot& h) {
    constexpr double kMs = 1e6;
    json_key(o, key);
    o += '{';
    json_field(o, "count", h.count);
    json_field(o, "mean", h.mean_ns() / kMs);
    json_field(o, "min", static_cast<double>(h.min_ns) / kMs);
    json_field(o, "p50", h.quantile_ns(0.5) / kMs);
    json_field(o, "p90", h.quantile_ns(0.9) / kMs);
    json_field(o, "p99", h.quantile_ns(0.99) / kMs);
    json_field(o, "p999", h.quantile_ns(0.999) / kMs);
    json_field(o, "max", static_cast<double>(h.max_ns) / kMs, true);
    o += "},";
}
inline void json_sizes(std::string& o, std::string_view key, const SizeHistogramSnapshot& h) {
    json_key(o, key);
    o += '{';
    json_field(o, "batches", h.count);
    json_field(o, "mean", h.mean());
    json_field(o, "max", h.max);
    json_key(o, "histogram");
    o += '{';
    bool first = true;
    for (std::size_t s = 0; s < h.counts.size(); ++s) {
        if (h.counts[s] == 0) continue;
        if (!first) o += ',';
        first = false;
        o += '"';
        append_number(o, static_cast<std::uint64_t>(s));
        o += "\":";
        append_number(o, h.counts[s]);
    }
    o += "},";
    json_field(o, "overflow", h.overflow, true);
    o += "},";
}

/// Prometheus metric-name prefix: characters outside [a-zA-Z0-9_:] become '_', a leading
/// digit gets a '_' before it; "" means no prefix.
inline std::string prometheus_prefix(std::string_view prefix) {
    std::string p;
    if (prefix.empty()) return p;
    if (prefix.front() >= '0' && prefix.front() <= '9') p += '_';
    for (const char c : prefix) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '_' || c == ':';
        p += ok ? c : '_';
    }
    p += '_';
    return p;
}
inline void prom_header(std::string& o, const std::string& name, std::string_view type,
                        std::string_view help) {
    o += "# HELP ";
    o += name;
    o += ' ';
    o += help;
    o += "\n# TYPE ";
    o += name;
    o += ' ';
    o += type;
    o += '\n';
}
/// `base` and `extra` label lists joined with a comma (either may be empty).
inline std::string prom_labels(std::string_view base, std::string_view extra) {
    std::string l(base);
    if (!l.empty() && !extra.empty()) l += ',';
    l += extra;
    return l;
}
template <class T>
void prom_sample(std::string& o, const std::string& name, std::string_view labels, T v) {
    o += name;
    if (!labels.empty()) {
        o += '{';
        o += labels;
        o += '}';
    }
    o += ' ';
    append_number(o, v);
    o += '\n';
}
inline void prom_latency(std::string& o, const std::string& name, std::string_view base,
                         const HistogramSnapshot& h) {
    const std::string bucket = name + "_bucket";
    const std::vector<CumulativeBucket> b = h.export_buckets();
    for (std::size_t i = 0; i < b.size(); ++i)
        prom_sample(o, bucket,
                    prom_labels(base, "le=\"" + std::string(kLatencyExportBoundLabels[i]) + '"'),
                    b[i].count);
    prom_sample(o, bucket, prom_labels(base, "le=\"+Inf\""), h.count);
    prom_sample(o, name + "_sum", base, static_cast<double>(h.sum_ns) / 1e9);
    prom_sample(o, name + "_count", base, h.count);
}
inline void prom_sizes(std::string& o, const std::string& name, std::string_view base,
                       const SizeHistogramSnapshot& h) {
    const std::string bucket = name + "_bucket";
    std::vector<std::uint64_t> bounds;  // 1, 2, 4, ... below max_exact, then max_exact
    const std::uint64_t top = h.max_exact();
    for (std::uint64_t s = 1; s < top; s *= 2) bounds.push_back(s);
    if (top != 0) bounds.push_back(top);
    std::string le;
    for (const std::uint64_t s : bounds) {
        le = "le=\"";
        append_number(le, s);
        le += '"';
        prom_sample(o, bucket, prom_labels(base, le), h.count_at_or_below(s));
    }
    prom_sample(o, bucket, prom_labels(base, "le=\"+Inf\""), h.count);
    prom_sample(o, name + "_sum", base, h.sum);
    prom_sample(o, name + "_count", base, h.count);
}
/// name="value" pairs in the exposition format: a name must match [a-zA-Z_][a-zA-Z0-9_]* and
/// not start with "__" (reserved) nor be "le" (the histograms' own); values escape \\, " and
/// newline. invalid_argument (dsinfer::Error) naming the label otherwise.
inline std::string prom_label_text(const std::vector<std::pair<std::string, std::string>>& labels) {
    std::string o;
    for (const auto& [name, value] : labels) {
        bool ok = !name.empty() && !(name.front() >= '0' && name.front() <= '9') &&
                  name.rfind("__", 0) != 0 && name != "le";
        for (const char c : name)
            ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_');
        if (!ok)
            throw Error(ErrorCode::invalid_argument,
                        "to_prometheus: '" + name +
                            "' is not a label name this document can carry ([a-zA-Z_][a-zA-Z0-9_]*, "
                            "not __reserved, not le)");
        if (!o.empty()) o += ',';
        o += name;
        o += "=\"";
        for (const char c : value) {
            if (c == '\\') o += "\\\\";
            else if (c == '"') o += "\\\"";
            else if (c == '\n') o += "\\n";
            else o += c;
        }
        o += '"';
    }
    return o;
}

}  // namespace detail::metrics

/// One JSON object with stable field names (docs/METRICS.md): uptime_s, requests {submitted,
/// ok, failed, rejected, timed_out, cancelled, by_code {...}}, throughput_rps {since_start,
/// recent, window_s}, latency_ms / queue_ms / compute_ms {count, mean, min, p50, p90, p99,
/// p999, max}, batch_size / batch_items {batches, mean, max, histogram {"size": count},
/// overflow}, batch_compute_s, memory {in_use_bytes, peak_bytes}. Times in milliseconds unless
/// the name says otherwise.
inline std::string to_json(const MetricsSnapshot& s) {
    using namespace detail::metrics;
    std::string o;
    o.reserve(2048);
    o += '{';
    json_field(o, "uptime_s", s.uptime_s);
    json_key(o, "requests");
    o += '{';
    const RequestCounts& r = s.requests;
    json_field(o, "submitted", r.submitted);
    json_field(o, "ok", r.ok);
    json_field(o, "failed", r.failed);
    json_field(o, "rejected", r.rejected);
    json_field(o, "timed_out", r.timed_out);
    json_field(o, "cancelled", r.cancelled);
    json_key(o, "by_code");
    o += '{';
    for (std::size_t c = 0; c < kErrorCodeCount; ++c)
        json_field(o, to_string(static_cast<ErrorCode>(c)), r.by_code[c], c + 1 == kErrorCodeCount);
    o += "}},";
    json_key(o, "throughput_rps");
    o += '{';
    json_field(o, "since_start", s.throughput_rps);
    json_field(o, "recent", s.recent_throughput_rps);
    json_field(o, "window_s", s.recent_window_s, true);
    o += "},";
    json_latency(o, "latency_ms", s.latency);
    json_latency(o, "queue_ms", s.queue);
    json_latency(o, "compute_ms", s.compute);
    json_sizes(o, "batch_size", s.batch_requests);
    json_sizes(o, "batch_items", s.batch_items);
    json_field(o, "batch_compute_s", static_cast<double>(s.batch_compute_ns) / 1e9);
    json_key(o, "memory");
    o += '{';
    json_field(o, "in_use_bytes", s.memory_in_use_bytes);
    json_field(o, "peak_bytes", s.memory_peak_bytes, true);
    o += "}}";
    return o;
}

/// One snapshot and the labels of its series in a Prometheus document (to_prometheus below),
/// e.g. {{"model", "resnet50"}, {"path", "submit"}}. The snapshot must outlive the call.
struct PrometheusSeries {
    const MetricsSnapshot* snapshot = nullptr;
    std::vector<std::pair<std::string, std::string>> labels;
};

/// Prometheus text exposition format 0.0.4 (Content-Type: text/plain; version=0.0.4) for
/// several snapshots in one document: each family's # HELP and # TYPE once, then every
/// series' samples with its labels (several models, or the submit() and run() paths of one,
/// scraped together). Counters end in _total; times are seconds, sizes bytes. Latency
/// histograms export the kLatencyExportBoundsNs buckets (exact counts); batch-size histograms
/// export le = 1, 2, 4, ... up to the exact range. Names (with prefix "dsinfer"):
/// dsinfer_uptime_seconds, dsinfer_requests_total{outcome}, dsinfer_request_errors_total{code},
/// dsinfer_throughput_requests_per_second, dsinfer_request_duration_seconds,
/// dsinfer_request_queue_duration_seconds, dsinfer_request_compute_duration_seconds,
/// dsinfer_batch_size_requests, dsinfer_batch_size_items, dsinfer_batch_compute_seconds_total,
/// dsinfer_memory_in_use_bytes, dsinfer_memory_peak_bytes. A null snapshot or a label name the
/// format cannot carry is invalid_argument (dsinfer::Error); two series with the same labels
/// would be one series twice, also invalid_argument.
inline std::string to_prometheus(const std::vector<PrometheusSeries>& series,
                                 std::string_view prefix = "dsinfer") {
    using namespace detail::metrics;
    const std::string p = prometheus_prefix(prefix);
    std::vector<std::string> base;
    base.reserve(series.size());
    for (const PrometheusSeries& s : series) {
        if (s.snapshot == nullptr)
            throw Error(ErrorCode::invalid_argument, "to_prometheus: a series has no snapshot");
        base.push_back(prom_label_text(s.labels));
        for (std::size_t i = 0; i + 1 < base.size(); ++i)
            if (base[i] == base.back())
                throw Error(ErrorCode::invalid_argument,
                            "to_prometheus: two series have the same labels {" + base.back() + "}");
    }
    std::string o;
    o.reserve(8192 * std::max<std::size_t>(1, series.size()));
    // One family: its header, then each series' samples.
    auto family = [&](const std::string& name, std::string_view type, std::string_view help,
                      auto&& samples) {
        prom_header(o, name, type, help);
        for (std::size_t i = 0; i < series.size(); ++i) samples(*series[i].snapshot, base[i]);
    };
    auto single = [&](const std::string& name, std::string_view type, std::string_view help,
                      auto&& value) {
        family(name, type, help, [&](const MetricsSnapshot& s, const std::string& b) {
            prom_sample(o, name, b, value(s));
        });
    };
    single(p + "uptime_seconds", "gauge", "Seconds since the metrics started or were reset.",
           [](const MetricsSnapshot& s) { return s.uptime_s; });

    const std::string requests = p + "requests_total";
    family(requests, "counter",
           "Finished requests by outcome (ok, failed, rejected, timed_out, cancelled).",
           [&](const MetricsSnapshot& s, const std::string& b) {
               const RequestCounts& r = s.requests;
               prom_sample(o, requests, prom_labels(b, "outcome=\"ok\""), r.ok);
               prom_sample(o, requests, prom_labels(b, "outcome=\"failed\""), r.failed);
               prom_sample(o, requests, prom_labels(b, "outcome=\"rejected\""), r.rejected);
               prom_sample(o, requests, prom_labels(b, "outcome=\"timed_out\""), r.timed_out);
               prom_sample(o, requests, prom_labels(b, "outcome=\"cancelled\""), r.cancelled);
           });

    const std::string errors = p + "request_errors_total";
    family(errors, "counter", "Requests that ended with an error, by error code.",
           [&](const MetricsSnapshot& s, const std::string& b) {
               for (std::size_t c = 1; c < kErrorCodeCount; ++c)
                   prom_sample(o, errors,
                               prom_labels(b, "code=\"" +
                                                  std::string(to_string(static_cast<ErrorCode>(c))) +
                                                  '"'),
                               s.requests.by_code[c]);
           });

    single(p + "throughput_requests_per_second", "gauge",
           "OK requests per second over the last 10 seconds.",
           [](const MetricsSnapshot& s) { return s.recent_throughput_rps; });
    auto latency = [&](const std::string& name, std::string_view help,
                       HistogramSnapshot MetricsSnapshot::*member) {
        family(name, "histogram", help, [&](const MetricsSnapshot& s, const std::string& b) {
            prom_latency(o, name, b, s.*member);
        });
    };
    latency(p + "request_duration_seconds", "End-to-end latency of OK requests.",
            &MetricsSnapshot::latency);
    latency(p + "request_queue_duration_seconds",
            "Time requests waited before their batch ran (all but rejected).", &MetricsSnapshot::queue);
    latency(p + "request_compute_duration_seconds", "Compute time of requests that ran.",
            &MetricsSnapshot::compute);
    auto sizes = [&](const std::string& name, std::string_view help,
                     SizeHistogramSnapshot MetricsSnapshot::*member) {
        family(name, "histogram", help, [&](const MetricsSnapshot& s, const std::string& b) {
            prom_sizes(o, name, b, s.*member);
        });
    };
    sizes(p + "batch_size_requests", "Requests per executed batch.", &MetricsSnapshot::batch_requests);
    sizes(p + "batch_size_items", "Items (batch rows) per executed batch.", &MetricsSnapshot::batch_items);
    single(p + "batch_compute_seconds_total", "counter", "Compute time of all executed batches.",
           [](const MetricsSnapshot& s) { return static_cast<double>(s.batch_compute_ns) / 1e9; });
    single(p + "memory_in_use_bytes", "gauge", "Bytes in use (as last set by the engine).",
           [](const MetricsSnapshot& s) { return s.memory_in_use_bytes; });
    single(p + "memory_peak_bytes", "gauge", "Peak bytes in use (as last set by the engine).",
           [](const MetricsSnapshot& s) { return s.memory_peak_bytes; });
    return o;
}

/// One snapshot, no labels: to_prometheus({{&s, {}}}, prefix).
inline std::string to_prometheus(const MetricsSnapshot& s, std::string_view prefix = "dsinfer") {
    return to_prometheus(std::vector<PrometheusSeries>{PrometheusSeries{&s, {}}}, prefix);
}

}  // namespace dsinfer
