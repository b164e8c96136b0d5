// tools/progress.hpp — a terminal progress bar driven by dsinfer::ProgressCallback (phase, steps
// done, steps in all), for the tools' long phases (ds-convert's calibration).
//
// Purpose: one way to show a long phase whatever drives it:
//   * on a terminal (isatty of the stream, stderr by default) one line rewritten with '\r':
//       calibration [#####...............] 12/48  3.4 batch/s  ETA 11 s
//     (a total of 0, a source that does not know its length: the count and rate only), and at
//     the end of the phase the same line with the elapsed time instead of the ETA, then a
//     newline;
//   * elsewhere (a pipe, a log file) nothing while it runs and one plain line when the phase
//     ends: "calibration: 48 batches in 14.1 s (3.4 batch/s)";
//   * quiet: nothing at all.
// A phase ends when another phase reports, or at finish() (call it once the work returns: a
// source may stop before its total, e.g. CalibrationOptions::max_batches). Rate and ETA come from
// a steady clock: while the phase runs, the rate over the steps since its first report (the
// first step also pays the phase's setup), or over the whole phase while it has reported once,
// and the ETA the steps left at that rate; at its end, the steps over the whole phase's time
// (setup included: the phase starts at start(), or when the previous phase's last step ended).
// The terminal line is redrawn at most every 100 ms, and always on the last step.
//
// Ownership/threading: the callback refers to the ProgressBar (keep it alive while the library
// may call it); one thread at a time, as dsinfer calls a ProgressCallback (on the calling thread).
//
// Usage:
//   bench::ProgressBar progress(quiet);
//   options.calibration.progress = progress.callback();
//   progress.start();                       // the phase's clock starts here
//   auto report = quantizer.run(graph, source.get());
//   progress.finish();                      // the last phase's line
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <dsinfer/quantize.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace dsinfer::bench {

class ProgressBar {
public:
    using Clock = std::chrono::steady_clock;
    enum class Style {
        bar,    ///< one line rewritten with '\r' (a terminal)
        lines,  ///< one plain line per phase, at its end
        none,   ///< nothing (--quiet)
    };

    /// Writes to `out` (stderr by default): a bar on a terminal, lines otherwise, nothing when
    /// `quiet`.
    explicit ProgressBar(bool quiet, std::FILE* out = stderr)
        : ProgressBar(out, quiet                   ? Style::none
                           : ::isatty(::fileno(out)) ? Style::bar
                                                     : Style::lines) {}
    ProgressBar(std::FILE* out, Style style) : out_(out), style_(style) {}
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;
    ~ProgressBar() { finish(); }

    Style style() const noexcept { return style_; }

    /// The callback to give the library; it calls update() on this object.
    ProgressCallback callback() {
        return [this](std::string_view phase, std::size_t done, std::size_t total) {
            update(phase, done, total);
        };
    }

    /// The work starts now: the first phase's elapsed time counts from here (else from its
    /// first report).
    void start() { start_ = Clock::now(); }

    /// One step of `phase` is done: `done` of `total` (0: unknown).
    void update(std::string_view phase, std::size_t done, std::size_t total) {
        const Clock::time_point now = Clock::now();
        if (phase_ && phase != phase_->name) {
            const Clock::time_point previous_end = phase_->last;
            finish();
            start_ = previous_end;  // this phase's first step began when the last one ended
        }
        if (!phase_) {
            phase_ = Phase{std::string(phase), start_.value_or(now), now, done};
            start_.reset();
        }
        Phase& p = *phase_;
        p.done = done;
        p.total = total;
        p.last = now;
        if (style_ != Style::bar) return;
        const bool last_step = total > 0 && done >= total;
        if (!p.drawn || last_step || now - p.drawn_at >= std::chrono::milliseconds(100)) {
            draw(p, false);
            p.drawn = true;
            p.drawn_at = now;
        }
    }

    /// Ends the current phase (nothing when none is running): the bar's final state and a
    /// newline on a terminal, the phase's one line otherwise. The next phase's clock starts
    /// here.
    void finish() noexcept {
        if (!phase_) return;
        try {
            if (style_ == Style::bar) {
                draw(*phase_, true);
                std::fputc('\n', out_);
            } else if (style_ == Style::lines) {
                const Phase& p = *phase_;
                const std::string unit = unit_of(p.name);
                const std::string count =
                    p.total > 0 && p.done < p.total ? fmt::format("{} of {}", p.done, p.total)
                                                    : fmt::format("{}", p.done);
                fmt::print(out_, "{}: {} {} in {} ({} {}/s)\n", p.name, count,
                           p.done == 1 ? unit : plural(unit), seconds_text(elapsed(p)),
                           rate_text(overall_rate(p)), unit);
            }
            std::fflush(out_);
        } catch (...) {
            // Formatting or writing failed: progress is not worth failing the work for.
        }
        start_ = Clock::now();
        phase_.reset();
    }

    /// The line the bar shows (without '\r'), for `done` of `total` steps (0: unknown) of
    /// `phase` at `rate` steps per second (0: none yet); `final` shows `elapsed` seconds
    /// instead of the ETA.
    static std::string line(std::string_view phase, std::size_t done, std::size_t total,
                            double rate, double elapsed, bool final, int width = 20) {
        const std::string unit = unit_of(phase);
        std::string s(phase);
        if (total > 0) {
            const double f = std::clamp(static_cast<double>(done) / static_cast<double>(total),
                                        0.0, 1.0);
            const auto filled = static_cast<int>(std::floor(f * width));
            s += " [" + std::string(static_cast<std::size_t>(filled), '#') +
                 std::string(static_cast<std::size_t>(width - filled), '.') + "]";
            s += fmt::format(" {}/{}", done, total);
        } else {
            s += fmt::format(" {}", done);
        }
        if (rate > 0) s += fmt::format("  {} {}/s", rate_text(rate), unit);
        if (final)
            s += "  " + seconds_text(elapsed);
        else if (total > done && rate > 0)
            s += "  ETA " + seconds_text(static_cast<double>(total - done) / rate);
        return s;
    }

private:
    struct Phase {
        std::string name;
        Clock::time_point begin;  ///< when the phase began (start(), the previous phase's end)
        Clock::time_point first;  ///< its first report
        std::size_t first_done = 0;
        std::size_t done = 0, total = 0;
        Clock::time_point last{};
        bool drawn = false;
        Clock::time_point drawn_at{};
    };

    static double seconds_between(Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    }
    static double elapsed(const Phase& p) { return seconds_between(p.begin, p.last); }
    /// Steps per second over the whole phase, its setup included (the final figure).
    static double overall_rate(const Phase& p) {
        const double all = elapsed(p);
        return all > 0 ? static_cast<double>(p.done) / all : 0.0;
    }
    /// Steps per second: over the steps after the first report when there are some (steady
    /// state), else over the whole phase.
    static double rate(const Phase& p) {
        const double since_first = seconds_between(p.first, p.last);
        if (p.done > p.first_done && since_first > 0)
            return static_cast<double>(p.done - p.first_done) / since_first;
        const double all = elapsed(p);
        return all > 0 && p.done > 0 ? static_cast<double>(p.done) / all : 0.0;
    }
    void draw(const Phase& p, bool final) {
        // \x1b[K clears what a longer previous line left.
        fmt::print(out_, "\r{}\x1b[K",
                   line(p.name, p.done, p.total, final ? overall_rate(p) : rate(p), elapsed(p),
                        final));
        std::fflush(out_);
    }

    static std::string unit_of(std::string_view phase) {
        return phase == "calibration" ? "batch" : "step";
    }
    static std::string plural(const std::string& unit) {
        return unit == "batch" ? "batches" : unit + "s";
    }
    static std::string rate_text(double r) {
        return r >= 100 ? fmt::format("{:.0f}", r) : r >= 1 ? fmt::format("{:.1f}", r)
                                                            : fmt::format("{:.2f}", r);
    }
    static std::string seconds_text(double s) {
        if (s < 1) return fmt::format("{:.2f} s", s);
        if (s < 10) return fmt::format("{:.1f} s", s);
        const auto whole = static_cast<long long>(std::llround(s));
        if (whole < 60) return fmt::format("{} s", whole);
        if (whole < 3600) return fmt::format("{} min {} s", whole / 60, whole % 60);
        return fmt::format("{} h {} min", whole / 3600, whole % 3600 / 60);
    }

    std::FILE* out_;
    Style style_;
    std::optional<Clock::time_point> start_;
    std::optional<Phase> phase_;
};


/// What a tool is doing during calls that report nothing themselves (a model's load, a first
/// run, the timed runs), on a terminal only: a thread redraws one line on stderr every 250 ms,
///   ds-benchmark: loading bert_base.onnx  6.2 s
///   ds-benchmark: timed runs 412/1000  7.9 s
/// once a phase has run for a second (quick phases show nothing), and clears it when the phase
/// ends, so the tool's own output starts on a clean line. Off a terminal it does nothing. The
/// count is advanced with step() from the working thread (one atomic add).
class PhaseTicker {
public:
    using Clock = std::chrono::steady_clock;

    explicit PhaseTicker(std::string program, bool enabled = ::isatty(::fileno(stderr)) != 0)
        : program_(std::move(program)), enabled_(enabled) {
        if (enabled_) {
            try {
                thread_ = std::thread([this] { loop(); });
            } catch (...) {
                enabled_ = false;  // no thread: no ticker
            }
        }
    }
    PhaseTicker(const PhaseTicker&) = delete;
    PhaseTicker& operator=(const PhaseTicker&) = delete;
    ~PhaseTicker() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
            clear_locked();
        }
        cv_.notify_all();
        thread_.join();
    }

    /// A new phase (the previous one's line is cleared): its name and, when known, its steps.
    void phase(std::string name, std::size_t total = 0) {
        if (!enabled_) return;
        std::lock_guard<std::mutex> lock(mu_);
        clear_locked();
        name_ = std::move(name);
        total_ = total;
        done_.store(0, std::memory_order_relaxed);
        begin_ = Clock::now();
    }
    /// One step of the phase is done.
    void step() noexcept { done_.fetch_add(1, std::memory_order_relaxed); }
    /// The phase is over: its line is cleared.
    void end() {
        if (!enabled_) return;
        std::lock_guard<std::mutex> lock(mu_);
        clear_locked();
        name_.clear();
    }

private:
    void loop() {
        std::unique_lock<std::mutex> lock(mu_);
        while (!stop_) {
            cv_.wait_for(lock, std::chrono::milliseconds(250));
            if (stop_ || name_.empty()) continue;
            const double s = std::chrono::duration<double>(Clock::now() - begin_).count();
            if (s < 1.0) continue;
            const std::size_t done = done_.load(std::memory_order_relaxed);
            std::string count;
            if (total_ > 0) count = fmt::format(" {}/{}", done, total_);
            else if (done > 0) count = fmt::format(" {}", done);
            fmt::print(stderr, "\r{}: {}{}  {:.1f} s\x1b[K", program_, name_, count, s);
            std::fflush(stderr);
            drawn_ = true;
        }
    }
    void clear_locked() {
        if (!drawn_) return;
        std::fputs("\r\x1b[K", stderr);
        std::fflush(stderr);
        drawn_ = false;
    }

    std::string program_;
    bool enabled_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::string name_;
    std::size_t total_ = 0;
    std::atomic<std::size_t> done_{0};
    Clock::time_point begin_{};
    bool drawn_ = false;
    bool stop_ = false;
    std::thread thread_;  // last: started after everything it reads
};

}  // namespace dsinfer::bench
