// ds-loadgen: drives serving::BatchingEngine::submit() (the dynamic batcher) with an open-loop or a
// closed-loop load and reports throughput, latency, outcomes and batching (docs/LOADGEN.md).
//
//   ds-loadgen --model PATH (--rate QPS | --concurrency N) --duration SECONDS
//              [--rate-steps QPS:SECONDS,...] [--batching off | --max-batch N
//              --max-queue-delay-us N] [--adaptive --p99-target-ms X] [--workers N] [--queue N]
//              [--threads N] [--batch N] [--seq N] [--shape NAME=DxD]... [--seed N]
//              [--backends LIST] [--opt-level N] [--deadline-ms X] [--warmup N] [--drain-s S]
//              [--timeline] [--json]
//
// Open loop (--rate, --rate-steps): a pacing thread issues requests at Poisson arrival times
// (exponential gaps from a generator seeded by --seed) on an absolute schedule, through the
// callback form of submit() so it never waits for an answer; latency is measured from each
// request's scheduled arrival, so a generator that falls behind does not hide queueing
// (coordinated omission): its lag is measured, counted and reported. Closed loop
// (--concurrency N): N client threads each submit and wait, back to back; latency from the
// submit. Before the measured window: the load, the first run alone (first_run_ms) and a burst
// of --warmup requests through the batcher. After it: the queued requests are drained for up
// to --drain-s seconds, then cancelled. Inputs: tools/bench_inputs.hpp, as ds-benchmark.
// Exit status: 0 ok (whatever the requests' outcomes), 1 engine error (load, first run,
// warm-up), 2 bad command line. The command line is parsed with CLI11 (tools/bench_cli.hpp),
// every value checked before any work; --json prints one nlohmann::json object on one line.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.hpp"
#include "dsinfer/serving.hpp"

using namespace dsinfer;

namespace {

using bench::Json;
using bench::quantile;
using Clock = std::chrono::steady_clock;
using serving::BatchingEngine;
using serving::BatchingOptions;
using serving::BatchingState;
using serving::RequestOptions;

const char* const kSynopsis =
    "usage: ds-loadgen --model PATH (--rate QPS | --concurrency N) --duration SECONDS\n"
    "                  [--rate-steps QPS:SECONDS,...] [--batching on|off]\n"
    "                  [--max-batch N] [--max-queue-delay-us N]\n"
    "                  [--adaptive --p99-target-ms X] [--workers N] [--queue N]\n"
    "                  [--threads N] [--batch N] [--seq N] [--shape NAME=DxD]... [--seed N]\n"
    "                  [--backends LIST] [--opt-level N] [--deadline-ms X] [--warmup N]\n"
    "                  [--drain-s S] [--timeline] [--json]\n"
    "       ds-loadgen --help | --version\n";

const char* const kDescription =
    "Drives serving::BatchingEngine::submit() (the dynamic batcher) with an open-loop or a\n"
    "closed-loop load and reports throughput, latency percentiles, the requests' outcomes and\n"
    "the batches formed (docs/LOADGEN.md).\n"
    "\n"
    "Open loop (--rate, --rate-steps): Poisson arrivals on an absolute schedule; latency from\n"
    "each request's scheduled arrival (no coordinated omission). Closed loop (--concurrency):\n"
    "clients submit and wait, back to back; latency from the submit. Inputs are generated as\n"
    "ds-benchmark makes them.\n";

const char* const kExamples =
    "ds-loadgen --model models/digits/digits.onnx --rate 500 --duration 10\n"
    "    500 requests/s for 10 s, dynamically batched\n"
    "ds-loadgen --model models/digits/digits.onnx --concurrency 8 --duration 5 --batching off\n"
    "    8 clients back to back, each request run alone\n"
    "ds-loadgen --model bert.onnx --seq 128 --rate-steps 50:5,400:5 --adaptive \\\n"
    "        --p99-target-ms 20 --json\n"
    "    a rate step with the adaptive batcher holding p99 at 20 ms, as one JSON line\n";

const char* const kExitStatus =
    "0  ok (whatever the requests' outcomes)\n"
    "1  engine error (load, first run, warm-up)\n"
    "2  bad command line (nothing runs)\n";

/// One piece of an open-loop schedule: Poisson arrivals at `qps` for `seconds`.
struct RateStep {
    double qps = 0;
    double seconds = 0;
};

struct Args : bench::CommonArgs {
    std::vector<RateStep> steps;  ///< open loop; empty = closed loop
    int concurrency = 0;          ///< closed loop
    double duration_s = 0;
    bool batching_off = false;
    std::optional<std::int64_t> max_batch, max_queue_delay_us, workers, queue;
    bool adaptive = false;
    std::optional<double> p99_target_ms, deadline_ms;
    std::optional<std::int64_t> warmup;
    double drain_s = 10;
    bool timeline = false;

    bool open_loop() const { return !steps.empty(); }
    double total_s() const {
        double t = 0;
        for (const RateStep& s : steps) t += s.seconds;
        return open_loop() ? t : duration_s;
    }
    /// The mean offered rate of the open-loop schedule.
    double mean_rate() const {
        double n = 0;
        for (const RateStep& s : steps) n += s.qps * s.seconds;
        return n / total_s();
    }
};

/// "QPS:SECONDS,..." into `out`; a problem ("" when valid) otherwise.
std::string parse_rate_steps(std::string_view text, std::vector<RateStep>& out) {
    std::vector<RateStep> steps;
    while (true) {
        const auto comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        const auto colon = item.find(':');
        if (colon == std::string_view::npos)
            return fmt::format("expects QPS:SECONDS,..., got '{}'", item);
        RateStep s;
        if (auto problem = bench::parse_number(item.substr(0, colon), 0.0, false, "a rate", s.qps);
            !problem.empty())
            return "QPS " + problem;
        if (auto problem = bench::parse_number(item.substr(colon + 1), 0.0, true,
                                               "a number of seconds", s.seconds);
            !problem.empty())
            return "SECONDS " + problem;
        steps.push_back(s);
        if (comma == std::string_view::npos) break;
        text = text.substr(comma + 1);
    }
    out = std::move(steps);
    return {};
}

Args parse_args(int argc, char** argv) {
    Args a;
    std::optional<double> rate;
    bench::Cli cli({"ds-loadgen", "load-test the dynamic batcher", kSynopsis, kDescription,
                    kExamples, kExitStatus});
    cli.add_common(a);
    const char* load = "Load";
    cli.number("--rate", rate, 0.0, true, "a rate", "QPS",
               "open loop: Poisson arrivals at QPS requests/s;\nlatency is measured from each "
               "request's scheduled\narrival (no coordinated omission)")
        ->group(load);
    cli.option("--rate-steps", "LIST",
               "open loop with a rate that changes:\nQPS:SECONDS,QPS:SECONDS,... (instead of "
               "--rate and\n--duration; QPS may be 0)",
               [&a](const std::string& s) { return parse_rate_steps(s, a.steps); })
        ->group(load);
    cli.integer("--concurrency", a.concurrency, 1, 4096,
                "closed loop: N clients, each submits and waits, back\nto back; latency from "
                "the submit")
        ->group(load);
    cli.number("--duration", a.duration_s, 0.0, true, "a number of seconds", "S",
               "seconds of measured load (required with\n--rate/--concurrency)")
        ->group(load);
    cli.number("--deadline-ms", a.deadline_ms, 0.0, true, "a number of milliseconds", "X",
               "each request's deadline, X ms after its arrival\n(default none)")
        ->group(load);
    cli.integer("--warmup", a.warmup, 0, 1 << 20,
                "requests submitted at once before the clock starts\n(default: 2 x the max "
                "batch, at most the queue size)")
        ->group(load);
    cli.number("--drain-s", a.drain_s, 0.0, false, "a number of seconds", "S",
               "after the window, wait up to S s for queued requests,\nthen cancel them "
               "(default 10)")
        ->group(load);
    const char* batching = "Batching";
    cli.option("--batching", "on|off",
               "off: BatchingOptions::max_batch_size = 1, each\nrequest runs alone (still "
               "queued); on (default): the\nsettings below",
               [&a](const std::string& v) {
                   if (v != "on" && v != "off") return "must be on or off, got '" + v + "'";
                   a.batching_off = v == "off";
                   return std::string();
               })
        ->group(batching);
    cli.integer("--max-batch", a.max_batch, 1, 1 << 20,
                "BatchingOptions::max_batch_size, rows (default: the\nengine's, 8)")
        ->group(batching);
    cli.integer("--max-queue-delay-us", a.max_queue_delay_us, 0, 60'000'000,
                "BatchingOptions::max_queue_delay (default: the\nengine's, 2000)")
        ->group(batching);
    cli.flag("--adaptive", a.adaptive, "BatchingOptions::adaptive (needs --p99-target-ms)")
        ->group(batching);
    cli.number("--p99-target-ms", a.p99_target_ms, 0.0, true, "a number of milliseconds", "X",
               "BatchingOptions::p99_target_ms")
        ->group(batching);
    cli.integer("--workers", a.workers, 1, 256, "BatchingOptions::num_workers (default 1)")
        ->group(batching);
    cli.integer("--queue", a.queue, 1, 1 << 24, "BatchingOptions::max_queue_size (default 1024)")
        ->group(batching);
    cli.flag("--timeline", a.timeline, "print the per-second timeline (always in --json)")
        ->group("Output");
    cli.parse(argc, argv);

    const bool have_duration = cli.given("--duration");
    const bool open = rate.has_value() || !a.steps.empty();
    if (rate && !a.steps.empty()) cli.error("give --rate or --rate-steps, not both");
    if (open && a.concurrency > 0)
        cli.error("give --rate/--rate-steps (open loop) or --concurrency (closed loop), not both");
    if (!open && a.concurrency == 0)
        cli.error("give --rate QPS or --rate-steps (open loop), or --concurrency N (closed loop)");
    if (!a.steps.empty() && have_duration)
        cli.error("--rate-steps gives the durations: drop --duration");
    if (a.steps.empty() && !have_duration) cli.error("--duration SECONDS is required");
    if (rate) a.steps.push_back({*rate, a.duration_s});
    if (a.open_loop()) a.duration_s = a.total_s();
    if (a.batching_off && (a.max_batch || a.max_queue_delay_us || a.adaptive))
        cli.error(
            "--batching off runs requests alone: drop --max-batch, --max-queue-delay-us "
            "and --adaptive");
    if (a.adaptive && !a.p99_target_ms) cli.error("--adaptive needs --p99-target-ms X");
    if (!a.adaptive && a.p99_target_ms) cli.error("--p99-target-ms needs --adaptive");
    return a;
}

// ---- recording ----

/// One finished request: times in ns since the start of the measured window.
struct Record {
    std::int64_t arrival_ns = 0;  ///< scheduled arrival (open loop) or submit (closed loop)
    std::int64_t done_ns = 0;     ///< outcome delivered
    ErrorCode code = ErrorCode::ok;
};

/// Collects the outcomes of the requests in flight; wait_idle() waits for the last one.
class Recorder {
public:
    void begin() {
        std::lock_guard<std::mutex> lock(mu_);
        ++outstanding_;
    }
    void finish(const Record& r) noexcept {
        std::lock_guard<std::mutex> lock(mu_);
        records_.push_back(r);  // reserved: no allocation on the hot path in practice
        if (--outstanding_ == 0) idle_.notify_all();
    }
    void wait_idle() {
        std::unique_lock<std::mutex> lock(mu_);
        idle_.wait(lock, [&] { return outstanding_ == 0; });
    }
    void reserve(std::size_t n) {
        std::lock_guard<std::mutex> lock(mu_);
        records_.reserve(n);
    }
    /// After wait_idle().
    std::vector<Record> take() {
        std::lock_guard<std::mutex> lock(mu_);
        return std::move(records_);
    }

private:
    std::mutex mu_;
    std::condition_variable idle_;
    std::size_t outstanding_ = 0;
    std::vector<Record> records_;
};

std::int64_t ns_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

/// How far behind its schedule the open-loop generator issued requests.
struct PacingStats {
    std::vector<double> lag_ms;  ///< per issued request: issue time - scheduled time
    std::uint64_t late = 0;      ///< issued more than kLateMs after their arrival time
    static constexpr double kLateMs = 1.0;
};

/// Open loop: issues Poisson arrivals on the schedule of `steps` from `start` until its end.
PacingStats run_open_loop(const BatchingEngine& engine, const std::vector<NamedTensor>& inputs,
                          const Args& a, Clock::time_point start, Recorder& rec) {
    PacingStats ps;
    ps.lag_ms.reserve(static_cast<std::size_t>(a.mean_rate() * a.duration_s * 1.2) + 64);
    std::mt19937_64 rng(a.shapes.seed);
    double t = 0;  // seconds since start: the last arrival
    double step_end = 0;
    for (const RateStep& step : a.steps) {
        step_end += step.seconds;
        std::exponential_distribution<double> gap(step.qps > 0 ? step.qps : 1.0);
        while (true) {
            // Memoryless arrivals: restarting the draw at a step boundary is exact.
            const double next = step.qps > 0 ? t + gap(rng) : step_end;
            if (next >= step_end) {
                t = step_end;
                break;
            }
            t = next;
            const auto scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(t));
            std::this_thread::sleep_until(scheduled);
            const auto now = Clock::now();
            const double lag = std::chrono::duration<double, std::milli>(now - scheduled).count();
            ps.lag_ms.push_back(lag);
            if (lag > PacingStats::kLateMs) ++ps.late;
            RequestOptions ro;
            if (a.deadline_ms)
                ro.deadline =
                    scheduled + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double, std::milli>(*a.deadline_ms));
            const std::int64_t arrival = ns_between(start, scheduled);
            rec.begin();
            engine.submit(
                inputs,
                [&rec, start, arrival](StatusOr<BatchingEngine::Outputs> r) {
                    rec.finish({arrival, ns_between(start, Clock::now()),
                                r.is_ok() ? ErrorCode::ok : r.status().code()});
                },
                std::move(ro));
        }
    }
    return ps;
}

/// Closed loop: `a.concurrency` clients submit and wait until `end`.
void run_closed_loop(const BatchingEngine& engine, const std::vector<NamedTensor>& inputs,
                     const Args& a, Clock::time_point start, Clock::time_point end, Recorder& rec) {
    std::vector<std::thread> clients;
    for (int c = 0; c < a.concurrency; ++c)
        clients.emplace_back([&] {
            while (Clock::now() < end) {
                RequestOptions ro;
                const auto t0 = Clock::now();
                if (a.deadline_ms)
                    ro.deadline =
                        t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double, std::milli>(*a.deadline_ms));
                rec.begin();
                ErrorCode code = ErrorCode::ok;
                try {
                    (void)engine.submit(inputs, std::move(ro)).get();
                } catch (const Error& e) {
                    code = e.code();
                } catch (...) {
                    code = ErrorCode::internal;
                }
                rec.finish({ns_between(start, t0), ns_between(start, Clock::now()), code});
            }
        });
    for (auto& t : clients) t.join();
}

/// batching_state() samples, 10 per second of the window.
struct StateSample {
    double t = 0;  ///< seconds since the start of the window
    BatchingState state;
};

std::vector<StateSample> sample_state(const BatchingEngine& engine, Clock::time_point start,
                                      double seconds, const std::atomic<bool>& stop) {
    constexpr auto kTick = std::chrono::milliseconds(100);
    std::vector<StateSample> out;
    for (int k = 1;; ++k) {
        const auto at = start + k * kTick;
        if (std::chrono::duration<double>(at - start).count() > seconds + 1e-9) break;
        std::this_thread::sleep_until(at);
        if (stop.load()) break;
        out.push_back({std::chrono::duration<double>(at - start).count(), engine.batching_state()});
    }
    return out;
}

/// a - b: the histogram of the records between two snapshots. Its min and max are unknown, so
/// its quantiles come from the buckets alone (within 1/64 of the value).
HistogramSnapshot since(const HistogramSnapshot& a, const HistogramSnapshot& b) {
    HistogramSnapshot d;
    d.buckets.resize(a.buckets.size());
    for (std::size_t i = 0; i < a.buckets.size(); ++i)
        d.buckets[i] = a.buckets[i] - (i < b.buckets.size() ? b.buckets[i] : 0);
    d.count = a.count - b.count;
    d.sum_ns = a.sum_ns - b.sum_ns;
    d.min_ns = 1;  // min > max: "ends unknown" (quantile_ns uses the buckets)
    d.max_ns = 0;
    return d;
}

// ---- results ----

struct Second {
    std::uint64_t offered = 0, completed = 0;
    std::vector<double> latency_ms;  // OK requests that completed in this second
    std::optional<BatchingState> state;
    std::size_t max_queued = 0;
};

struct Result {
    double load_ms = 0, first_run_ms = 0, warmup_ms = 0;
    std::int64_t warmup = 0;
    std::uint64_t issued = 0, completed = 0, completed_in_window = 0, failed = 0, rejected = 0,
                  timed_out = 0, cancelled = 0;
    std::vector<double> latency_ms;  // OK requests, sorted
    double latency_mean = NAN;
    HistogramSnapshot queue, compute;
    std::uint64_t batches = 0, batch_requests = 0, batch_items = 0, max_batch_requests = 0;
    PacingStats pacing;
    std::vector<Second> seconds;
    std::vector<double> loadavg;
    std::string info;
    BatchingOptions batching;
    bool drained = true;
};

double ms_quantile(const HistogramSnapshot& h, double q) {
    return h.count == 0 ? NAN : h.quantile_ns(q) / 1e6;
}
double sorted_quantile(const std::vector<double>& v, double q) {
    return v.empty() ? NAN : quantile(v, q);
}

std::string latency_from(const Args& a) { return a.open_loop() ? "scheduled_arrival" : "submit"; }

void print_json(const Args& a, const bench::GeneratedInputs& in, const Result& r) {
    const double d = a.duration_s;
    const std::int64_t rows = in.batch.value_or(a.shapes.batch);
    const double throughput = static_cast<double>(r.completed_in_window) / d;
    const BatchingOptions& b = r.batching;
    const auto& l = r.latency_ms;
    auto mean = [](std::uint64_t sum, std::uint64_t n) {
        return n == 0 ? NAN : static_cast<double>(sum) / static_cast<double>(n);
    };
    Json steps = Json::array();
    for (const RateStep& s : a.steps) steps.push_back({{"qps", s.qps}, {"seconds", s.seconds}});
    Json doc = {
        {"tool", "ds-loadgen"},
        {"model", a.model.string()},
        {"mode", a.open_loop() ? "open" : "closed"},
        {"arrivals", a.open_loop() ? Json("poisson") : Json(nullptr)},
        {"offered_rate", a.open_loop() ? a.mean_rate() : static_cast<double>(r.issued) / d},
        {"rate_steps", std::move(steps)},
        {"concurrency", a.concurrency > 0 ? Json(a.concurrency) : Json(nullptr)},
        {"duration_s", d},
        {"batch", rows},
        {"seq", bench::json_or_null(in.seq)},
        {"threads", a.threads > 0 ? a.threads : bench::available_processors()},
        {"seed", a.shapes.seed},
        {"batching",
         {{"enabled", !a.batching_off},
          {"max_batch_size", b.max_batch_size},
          {"max_queue_delay_us", b.max_queue_delay.count()},
          {"max_queue_size", b.max_queue_size},
          {"num_workers", b.num_workers},
          {"adaptive", b.adaptive},
          {"p99_target_ms", b.adaptive ? Json(b.p99_target_ms) : Json(nullptr)},
          {"info", r.info}}},
        {"deadline_ms", bench::json_or_null(a.deadline_ms)},
        {"load_ms", r.load_ms},
        {"first_run_ms", r.first_run_ms},
        {"warmup", {{"requests", r.warmup}, {"ms", r.warmup_ms}}},
        {"issued", r.issued},
        {"completed", r.completed},
        {"completed_in_window", r.completed_in_window},
        {"failed", r.failed},
        {"rejected", r.rejected},
        {"timed_out", r.timed_out},
        {"cancelled", r.cancelled},
        {"drained", r.drained},
        {"throughput", throughput},
        {"throughput_rows", throughput * static_cast<double>(rows)},
        {"latency_from", latency_from(a)},
        {"latency_ms",
         {{"p50", sorted_quantile(l, 0.5)},
          {"p90", sorted_quantile(l, 0.9)},
          {"p99", sorted_quantile(l, 0.99)},
          {"p999", sorted_quantile(l, 0.999)},
          {"max", l.empty() ? NAN : l.back()},
          {"mean", r.latency_mean}}}};
    for (const auto& [key, h] :
         {std::pair<const char*, const HistogramSnapshot*>{"queue_ms", &r.queue},
          {"compute_ms", &r.compute}})
        doc[key] = {{"p50", ms_quantile(*h, 0.5)},
                    {"p99", ms_quantile(*h, 0.99)},
                    {"mean", h->count == 0 ? NAN : h->mean_ns() / 1e6}};
    doc["batches"] = r.batches;
    doc["mean_batch_size"] = mean(r.batch_requests, r.batches);
    doc["mean_batch_rows"] = mean(r.batch_items, r.batches);
    doc["max_batch_size_seen"] = r.max_batch_requests;
    std::vector<double> lag = r.pacing.lag_ms;
    std::sort(lag.begin(), lag.end());
    doc["generator"] = a.open_loop() ? Json{{"late", r.pacing.late},
                                            {"late_threshold_ms", PacingStats::kLateMs},
                                            {"lag_ms_p99", sorted_quantile(lag, 0.99)},
                                            {"lag_ms_max", lag.empty() ? NAN : lag.back()}}
                                     : Json(nullptr);
    doc["loadavg"] = r.loadavg;
    doc["cpus"] = bench::available_processors();
    Json timeline = Json::array();
    for (std::size_t s = 0; s < r.seconds.size(); ++s) {
        const Second& sec = r.seconds[s];
        std::vector<double> lat = sec.latency_ms;
        std::sort(lat.begin(), lat.end());
        timeline.push_back(
            {{"t", s},
             {"offered", sec.offered},
             {"completed", sec.completed},
             {"p99_ms", sorted_quantile(lat, 0.99)},
             {"max_batch_size", sec.state ? Json(sec.state->max_batch_size) : Json(nullptr)},
             {"max_queue_delay_us",
              sec.state ? Json(sec.state->max_queue_delay.count()) : Json(nullptr)},
             {"queued", sec.max_queued}});
    }
    doc["timeline"] = std::move(timeline);
    fmt::print("{}\n", bench::json_text(doc));
}

void print_text(const Args& a, const bench::GeneratedInputs& in, const Result& r) {
    const double d = a.duration_s;
    const std::int64_t rows = in.batch.value_or(a.shapes.batch);
    const BatchingOptions& b = r.batching;
    std::string load;
    if (a.open_loop()) {
        if (a.steps.size() == 1) {
            load =
                fmt::format("open loop, Poisson {:.1f} requests/s for {:.1f} s", a.steps[0].qps, d);
        } else {
            load = "open loop, Poisson rate steps";
            for (const RateStep& s : a.steps)
                load += fmt::format(" {:.1f}/s x {:.1f} s", s.qps, s.seconds);
        }
    } else {
        load = fmt::format("closed loop, {} clients for {:.1f} s", a.concurrency, d);
    }
    fmt::print("ds-loadgen {}  ({}; {} row(s) per request, threads {})\n", a.model.string(), load,
               rows, a.threads > 0 ? a.threads : bench::available_processors());
    fmt::print(
        "  {:<12}{}\n", "batching",
        a.batching_off
            ? fmt::format("off (each request alone), queue {}, workers {}", b.max_queue_size,
                          b.num_workers)
            : fmt::format(
                  "max batch {} rows, max queue delay {} us, queue {}, workers {}{}",
                  b.max_batch_size, b.max_queue_delay.count(), b.max_queue_size, b.num_workers,
                  b.adaptive ? fmt::format(", adaptive (p99 target {} ms)", b.p99_target_ms) : ""));
    fmt::print("  {:<12}{}\n", "model", r.info);
    fmt::print("  {:<12}{:.1f} ms, first run {:.3f} ms, warm-up {} requests in {:.1f} ms\n", "load",
               r.load_ms, r.first_run_ms, r.warmup, r.warmup_ms);
    fmt::print(
        "  {:<12}issued {}, completed {} ({} in the window), failed {}, rejected {}, "
        "timed out {}, cancelled {}{}\n",
        "requests", r.issued, r.completed, r.completed_in_window, r.failed, r.rejected, r.timed_out,
        r.cancelled, r.drained ? "" : " (not drained in --drain-s)");
    const double tp = static_cast<double>(r.completed_in_window) / d;
    fmt::print("  {:<12}{:.1f} requests/s ({:.1f} rows/s), offered {:.1f} requests/s\n",
               "throughput", tp, tp * static_cast<double>(rows),
               a.open_loop() ? a.mean_rate() : static_cast<double>(r.issued) / d);
    const auto& l = r.latency_ms;
    if (l.empty()) {
        fmt::print("  {:<12}no request completed\n", "latency ms");
    } else {
        fmt::print(
            "  {:<12}p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  max {:.3f}  mean {:.3f}  (from the "
            "{})\n",
            "latency ms", quantile(l, 0.5), quantile(l, 0.9), quantile(l, 0.99), l.back(),
            r.latency_mean, a.open_loop() ? "scheduled arrival" : "submit");
    }
    fmt::print("  {:<12}queue p50 {:.3f} p99 {:.3f}; compute p50 {:.3f} p99 {:.3f}\n", "engine ms",
               ms_quantile(r.queue, 0.5), ms_quantile(r.queue, 0.99), ms_quantile(r.compute, 0.5),
               ms_quantile(r.compute, 0.99));
    fmt::print(
        "  {:<12}{}, mean {:.2f} requests ({:.2f} rows), largest {} requests\n", "batches",
        r.batches,
        r.batches ? static_cast<double>(r.batch_requests) / static_cast<double>(r.batches) : 0.0,
        r.batches ? static_cast<double>(r.batch_items) / static_cast<double>(r.batches) : 0.0,
        r.max_batch_requests);
    if (a.open_loop()) {
        const double max_lag = r.pacing.lag_ms.empty() ? 0.0
                                                       : *std::max_element(r.pacing.lag_ms.begin(),
                                                                           r.pacing.lag_ms.end());
        if (r.pacing.late == 0)
            fmt::print("  {:<12}on schedule (largest lag {:.3f} ms)\n", "generator", max_lag);
        else
            fmt::print(
                "  {:<12}BEHIND: {} requests issued > {} ms late (largest lag {:.3f} ms); "
                "their latency still counts from the scheduled arrival\n",
                "generator", r.pacing.late, PacingStats::kLateMs, max_lag);
    }
    fmt::print("  {:<12}{:.2f} {:.2f} {:.2f} ({} cpus)\n", "loadavg", r.loadavg[0], r.loadavg[1],
               r.loadavg[2], bench::available_processors());
    if (!a.timeline) return;
    fmt::print("  timeline    {:>4} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}\n", "t", "offered",
               "completed", "p99 ms", "max batch", "delay us", "queued");
    for (std::size_t s = 0; s < r.seconds.size(); ++s) {
        const Second& sec = r.seconds[s];
        std::vector<double> lat = sec.latency_ms;
        std::sort(lat.begin(), lat.end());
        fmt::print("              {:>4} {:>8} {:>9} {:>9.2f} {:>9} {:>9} {:>7}\n", s, sec.offered,
                   sec.completed, sorted_quantile(lat, 0.99),
                   sec.state ? std::to_string(sec.state->max_batch_size) : "-",
                   sec.state ? std::to_string(sec.state->max_queue_delay.count()) : "-",
                   sec.max_queued);
    }
}

int run(const Args& a) {
    Result r;
    Recorder rec;  // before the engine: outlives every callback the engine delivers
    const EngineOptions options = a.engine_options();
    BatchingOptions b;
    if (a.batching_off) b.max_batch_size = 1;
    if (a.max_batch) b.max_batch_size = static_cast<std::size_t>(*a.max_batch);
    if (a.max_queue_delay_us) b.max_queue_delay = std::chrono::microseconds(*a.max_queue_delay_us);
    if (a.workers) b.num_workers = static_cast<int>(*a.workers);
    if (a.queue) b.max_queue_size = static_cast<std::size_t>(*a.queue);
    b.adaptive = a.adaptive;
    if (a.p99_target_ms) b.p99_target_ms = *a.p99_target_ms;
    r.batching = b;

    auto t0 = Clock::now();
    const auto model =
        std::make_shared<const InferenceEngine>(InferenceEngine::load(a.model, options));
    const BatchingEngine engine(model, b);
    r.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const bench::GeneratedInputs generated = bench::make_inputs_or_exit(a.usage, *model, a.shapes);
    const std::vector<NamedTensor> inputs = generated.tensors();
    r.info = engine.batching_info();

    // Warm-up: the first run alone, then a burst through the batcher (full batches).
    t0 = Clock::now();
    (void)engine.run(inputs);
    r.first_run_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    r.warmup = a.warmup.value_or(static_cast<std::int64_t>(2 * b.max_batch_size));
    r.warmup = std::min<std::int64_t>(r.warmup, static_cast<std::int64_t>(b.max_queue_size));
    t0 = Clock::now();
    {
        std::vector<std::future<BatchingEngine::Outputs>> burst;
        for (std::int64_t i = 0; i < r.warmup; ++i) burst.push_back(engine.submit(inputs));
        for (auto& f : burst) (void)f.get();  // an error ends the tool (exit 1)
    }
    r.warmup_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    const MetricsSnapshot before = engine.metrics();
    const std::size_t expected =
        a.open_loop() ? static_cast<std::size_t>(a.mean_rate() * a.duration_s * 1.2) + 1024
                      : 1 << 16;
    rec.reserve(expected);
    std::atomic<bool> stop{false};
    std::vector<StateSample> samples;
    const auto start = Clock::now() + std::chrono::milliseconds(5);
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(a.duration_s));
    std::thread sampler([&] { samples = sample_state(engine, start, a.duration_s, stop); });
    if (a.open_loop()) {
        std::thread pacer([&] { r.pacing = run_open_loop(engine, inputs, a, start, rec); });
        pacer.join();
    } else {
        run_closed_loop(engine, inputs, a, start, end, rec);
    }
    // The window is over: drain what is queued, cancel what does not drain in time.
    r.drained =
        engine.shutdown(std::chrono::milliseconds(static_cast<std::int64_t>(a.drain_s * 1000)));
    rec.wait_idle();
    stop.store(true);
    sampler.join();
    const MetricsSnapshot after = engine.metrics();
    r.loadavg = bench::load_average();

    // Outcomes and latency.
    const std::vector<Record> records = rec.take();
    const std::int64_t window_ns = ns_between(start, end);
    const auto nsec = static_cast<std::size_t>(std::ceil(a.duration_s - 1e-9));
    r.seconds.resize(std::max<std::size_t>(nsec, 1));
    auto second_of = [&](std::int64_t ns) -> Second* {
        if (ns < 0) return nullptr;
        const auto s = static_cast<std::size_t>(ns / 1'000'000'000);
        return s < r.seconds.size() ? &r.seconds[s] : nullptr;
    };
    double sum = 0;
    for (const Record& x : records) {
        ++r.issued;
        if (Second* s = second_of(x.arrival_ns)) ++s->offered;
        switch (x.code) {
            case ErrorCode::ok: {
                ++r.completed;
                const double ms = static_cast<double>(x.done_ns - x.arrival_ns) / 1e6;
                r.latency_ms.push_back(ms);
                sum += ms;
                if (x.done_ns <= window_ns) ++r.completed_in_window;
                if (Second* s = second_of(x.done_ns)) {
                    ++s->completed;
                    s->latency_ms.push_back(ms);
                }
                break;
            }
            case ErrorCode::unavailable: ++r.rejected; break;
            case ErrorCode::deadline_exceeded: ++r.timed_out; break;
            case ErrorCode::cancelled: ++r.cancelled; break;
            default: ++r.failed; break;
        }
    }
    std::sort(r.latency_ms.begin(), r.latency_ms.end());
    if (!r.latency_ms.empty()) r.latency_mean = sum / static_cast<double>(r.latency_ms.size());
    for (const StateSample& s : samples) {
        const auto i = static_cast<std::size_t>(std::ceil(s.t - 1e-9)) - 1;  // (i, i+1]
        if (i >= r.seconds.size()) continue;
        r.seconds[i].state = s.state;  // the last sample of the second
        r.seconds[i].max_queued = std::max(r.seconds[i].max_queued, s.state.queued);
    }

    // The engine's view of the window (warm-up excluded).
    r.queue = since(after.queue, before.queue);
    r.compute = since(after.compute, before.compute);
    r.batches = after.batch_requests.count - before.batch_requests.count;
    r.batch_requests = after.batch_requests.sum - before.batch_requests.sum;
    r.batch_items = after.batch_items.sum - before.batch_items.sum;
    const auto& ca = after.batch_requests.counts;
    const auto& cb = before.batch_requests.counts;
    for (std::size_t s = 0; s < ca.size(); ++s)
        if (ca[s] > (s < cb.size() ? cb[s] : 0)) r.max_batch_requests = s;
    if (after.batch_requests.overflow > before.batch_requests.overflow)
        r.max_batch_requests = after.batch_requests.max;

    if (a.json)
        print_json(a, generated, r);
    else
        print_text(a, generated, r);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-loadgen", [&] { return run(a); });
}
