// Overhead of the serving metrics (include/dsinfer/metrics.hpp): what the engine pays per
// finished request and per batch, and what one scrape costs.
//   BM_LatencyHistogramRecord         one LatencyHistogram::record
//   BM_RecordRequest                  ServingMetrics::record_request of an OK request (reads
//                                     steady_clock), 1 thread and 2 threads on one object
//   BM_RecordRequestWithNow           the same with the completion time passed in (no clock read)
//   BM_RecordBatch                    ServingMetrics::record_batch
//   BM_SteadyClockNow                 the clock read alone, for comparison
//   BM_SnapshotToPrometheus / Json    snapshot() + the export of a populated object
// Times are per call and per thread (real time): with Threads(2) both threads hit the same
// counters, so the figure includes the cache-line traffic of two cores recording at once.
// Latencies come from a fixed lognormal sample (median 2 ms) so records spread over buckets.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <dsinfer/metrics.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsinfer;

const std::vector<std::chrono::nanoseconds>& sample_latencies() {
    static const std::vector<std::chrono::nanoseconds> v = [] {
        std::vector<std::chrono::nanoseconds> out(4096);
        std::mt19937_64 rng(1);
        std::lognormal_distribution<double> d(std::log(2e6), 1.0);
        for (auto& x : out) x = std::chrono::nanoseconds(static_cast<std::int64_t>(d(rng)));
        return out;
    }();
    return v;
}

ServingMetrics& shared_metrics() {
    static ServingMetrics m;
    return m;
}

void BM_LatencyHistogramRecord(benchmark::State& state) {
    static LatencyHistogram h;
    const auto& lat = sample_latencies();
    std::size_t i = static_cast<std::size_t>(state.thread_index()) * 997;
    for (auto _ : state) {
        h.record(lat[i++ & 4095]);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LatencyHistogramRecord)->Threads(1)->Threads(2)->UseRealTime();

void BM_RecordRequest(benchmark::State& state) {
    ServingMetrics& m = shared_metrics();
    const auto& lat = sample_latencies();
    std::size_t i = static_cast<std::size_t>(state.thread_index()) * 997;
    for (auto _ : state) {
        const auto total = lat[i++ & 4095];
        m.record_request(ErrorCode::ok, total / 8, total / 2, total);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordRequest)->Threads(1)->Threads(2)->UseRealTime();

void BM_RecordRequestWithNow(benchmark::State& state) {
    ServingMetrics& m = shared_metrics();
    const auto& lat = sample_latencies();
    const auto now = ServingMetrics::Clock::now();
    std::size_t i = static_cast<std::size_t>(state.thread_index()) * 997;
    for (auto _ : state) {
        const auto total = lat[i++ & 4095];
        m.record_request(ErrorCode::ok, total / 8, total / 2, total, now);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordRequestWithNow)->Threads(1)->Threads(2)->UseRealTime();

void BM_RecordBatch(benchmark::State& state) {
    ServingMetrics& m = shared_metrics();
    const auto& lat = sample_latencies();
    std::size_t i = 0;
    for (auto _ : state) {
        const std::size_t n = 1 + (i & 31);
        m.record_batch(n, 4 * n, lat[i++ & 4095]);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordBatch)->UseRealTime();

void BM_SteadyClockNow(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(ServingMetrics::Clock::now());
}
BENCHMARK(BM_SteadyClockNow);

/// A ServingMetrics with a realistic spread of requests, batches and outcomes.
ServingMetrics& populated_metrics() {
    static ServingMetrics* m = [] {
        auto* p = new ServingMetrics();
        const auto& lat = sample_latencies();
        for (std::size_t i = 0; i < 100000; ++i) {
            const auto total = lat[i & 4095];
            const ErrorCode c = i % 50 == 0 ? ErrorCode::unavailable
                                : i % 97 == 0 ? ErrorCode::deadline_exceeded
                                              : ErrorCode::ok;
            p->record_request(c, total / 8, total / 2, total);
            if (i % 8 == 0) p->record_batch(1 + i % 32, 4 * (1 + i % 32), total / 2);
        }
        p->set_memory(512u << 20, 768u << 20);
        return p;
    }();
    return *m;
}

/// One scrape: snapshot() of the populated object and `format` of it.
template <class Format>
void scrape(benchmark::State& state, Format format) {
    ServingMetrics& m = populated_metrics();
    std::size_t bytes = 0;
    for (auto _ : state) {
        const std::string text = format(m.snapshot());
        bytes = text.size();
        benchmark::DoNotOptimize(text.data());
    }
    state.counters["bytes"] = static_cast<double>(bytes);
}
void BM_SnapshotToPrometheus(benchmark::State& state) {
    scrape(state, [](const MetricsSnapshot& s) { return to_prometheus(s); });
}
BENCHMARK(BM_SnapshotToPrometheus)->Unit(benchmark::kMicrosecond);
void BM_SnapshotToJson(benchmark::State& state) {
    scrape(state, [](const MetricsSnapshot& s) { return to_json(s); });
}
BENCHMARK(BM_SnapshotToJson)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
