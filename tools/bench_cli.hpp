// tools/bench_cli.hpp — the command line and output helpers shared by ds-benchmark and
// ds-loadgen.
//
// Purpose: one implementation of what both tools parse and print:
//   * ArgParser walks argv: `--flag value` or `--flag=value`, -h/--help prints the usage, and
//     every bad command line ends the process with exit status 2 and a one-line message
//     followed by the usage ("<program>: <message>");
//   * parse_common_flag() handles the flags both tools share (--model, --json, the input
//     generator's --batch, --seq, --shape, --seed, and the engine's --threads, --backends,
//     --opt-level) into CommonArgs, whose engine_options() fills EngineOptions;
//   * small JSON writers (json_string, json_number, json_array), the interpolated quantile of
//     sorted samples, and the machine figures (processors available, load average).
//
// Ownership/threading: plain values and functions; ArgParser borrows argv. Not thread-safe
// (used on the main thread, before any work starts).
//
// Usage:
//   bench::ArgParser p({"ds-tool", kUsage}, argc, argv);
//   Args a;  // struct Args : bench::CommonArgs { ... }
//   while (p.next()) {
//       if (bench::parse_common_flag(p, a)) continue;
//       if (p.flag() == "--iterations") a.n = p.integer(1, 1 << 30);
//       else p.unknown();
//   }
//   bench::check_common(p, a);   // --model is required
#pragma once

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_inputs.hpp"

namespace dsinfer::bench {

inline constexpr int kExitError = 1;  ///< engine error (load, run) or a feature not available
inline constexpr int kExitUsage = 2;  ///< bad command line

/// A tool's name and usage text, for command-line errors.
struct Usage {
    std::string_view program;
    std::string_view text;
    /// Prints "<program>: <message>", a blank line and the usage to stderr; exits 2.
    [[noreturn]] void error(const std::string& message) const {
        fmt::print(stderr, "{}: {}\n\n{}", program, message, text);
        std::exit(kExitUsage);
    }
};

/// Walks the arguments of main(). Every error exits with kExitUsage.
class ArgParser {
public:
    ArgParser(Usage usage, int argc, char** argv) : usage_(usage), argc_(argc), argv_(argv) {}

    /// Advances to the next argument; false when there is none. Handles -h/--help (prints the
    /// usage, exits 0).
    bool next() {
        if (++i_ >= argc_) return false;
        flag_ = argv_[i_];
        inline_value_.reset();
        if (const auto eq = flag_.find('='); flag_.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value_ = flag_.substr(eq + 1);
            flag_.resize(eq);
        }
        if (flag_ == "-h" || flag_ == "--help") {
            fmt::print("{}", usage_.text);
            std::exit(0);
        }
        return true;
    }
    /// The current flag, without an inline "=value".
    const std::string& flag() const noexcept { return flag_; }
    /// The current flag's value: the inline one or the next argument.
    std::string value() {
        if (inline_value_) return *inline_value_;
        if (i_ + 1 >= argc_) error(flag_ + " expects a value");
        return argv_[++i_];
    }
    /// For flags without a value: refuses "--flag=value".
    void no_value() const {
        if (inline_value_) error(flag_ + " takes no value");
    }
    [[noreturn]] void unknown() const {
        error("unknown argument '" + std::string(argv_[i_]) + "'");
    }
    [[noreturn]] void error(const std::string& message) const { usage_.error(message); }

    /// An integer in [min, max], read from `text` (error messages name `flag`).
    std::int64_t parse_int(std::string_view flag, std::string_view text, std::int64_t min,
                           std::int64_t max) const {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty())
            error(fmt::format("{} expects an integer, got '{}'", flag, text));
        if (v < min || v > max)
            error(fmt::format("{} must be in [{}, {}], got {}", flag, min, max, v));
        return v;
    }
    /// A finite number >= min (> min when `exclusive`), read from `text`; `what` names the unit
    /// in messages ("a number of seconds").
    double parse_number(std::string_view flag, std::string_view text, double min,
                        bool exclusive = false, std::string_view what = "a number") const {
        const std::string s(text);
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < min ||
            (exclusive && v == min))
            error(fmt::format("{} expects {} {} {}, got '{}'", flag, what,
                              exclusive ? ">" : ">=", min, text));
        return v;
    }
    /// The current flag's value as an integer in [min, max].
    std::int64_t integer(std::int64_t min, std::int64_t max) {
        const std::string v = value();
        return parse_int(flag_, v, min, max);
    }
    /// The current flag's value as a number >= min (> min when `exclusive`).
    double number(double min, bool exclusive = false, std::string_view what = "a number") {
        const std::string v = value();
        return parse_number(flag_, v, min, exclusive, what);
    }

private:
    Usage usage_;
    int argc_;
    char** argv_;
    int i_ = 0;
    std::string flag_;
    std::optional<std::string> inline_value_;
};

/// "input_ids=2x128" -> {"input_ids", {2, 128}} into `req.overrides`.
inline void parse_shape(const ArgParser& p, std::string_view text, ShapeRequest& req) {
    const auto eq = text.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
        p.error(fmt::format("--shape expects NAME=DxD..., got '{}'", text));
    const std::string name(text.substr(0, eq));
    std::vector<std::int64_t> dims;
    std::string_view rest = text.substr(eq + 1);
    while (true) {
        const auto x = rest.find('x');
        dims.push_back(p.parse_int("--shape " + name, rest.substr(0, x), 0, 1ll << 40));
        if (x == std::string_view::npos) break;
        rest = rest.substr(x + 1);
    }
    if (!req.overrides.emplace(name, std::move(dims)).second)
        p.error(fmt::format("--shape {} is given twice", name));
}

/// "onednn,cpu" -> {"onednn", "cpu"}; unknown or repeated names are errors.
inline std::vector<std::string> parse_backends(const ArgParser& p, std::string_view text) {
    std::vector<std::string> list;
    while (true) {
        const auto comma = text.find(',');
        const std::string b(text.substr(0, comma));
        if (b != "onednn" && b != "cpu" && b != "reference")
            p.error(
                fmt::format("--backends: unknown backend '{}' (known: onednn, cpu, reference)", b));
        if (std::find(list.begin(), list.end(), b) != list.end())
            p.error(fmt::format("--backends lists '{}' twice", b));
        list.push_back(b);
        if (comma == std::string_view::npos) break;
        text = text.substr(comma + 1);
    }
    return list;
}

/// The model, inputs, engine settings and output format both tools take.
struct CommonArgs {
    std::filesystem::path model;        ///< --model (required)
    bool json = false;                  ///< --json
    ShapeRequest shapes;                ///< --batch, --seq, --shape, --seed
    int threads = 0;                    ///< --threads (0 = the processors available)
    std::vector<std::string> backends;  ///< --backends (empty = the build's default)
    int opt_level = 3;                  ///< --opt-level

    EngineOptions engine_options() const {
        EngineOptions o;
        o.backends = backends;
        o.num_threads = threads;
        o.optimization_level = opt_level;
        return o;
    }
};

/// The usage lines of parse_common_flag()'s input and engine flags (--model and --json are in
/// each tool's own text).
inline constexpr const char* kEngineFlagsUsage =
    "  --batch N           first symbolic dim of every input (default 1)\n"
    "  --seq N             every later symbolic dim (required when the model has one)\n"
    "  --shape NAME=DxD    the whole shape of input NAME (repeatable; e.g. input_ids=2x128)\n"
    "  --seed N            seed of the input generator (default 12345, as the ORT harness)\n"
    "  --threads N         intra-op threads; 0 = the processors available (default 0)\n"
    "  --backends LIST     comma-separated, in priority order (default: the build's default)\n"
    "  --opt-level N       graph optimization level 0-3 (default 3)\n";

/// Consumes the current flag when it is one of CommonArgs'; false otherwise.
inline bool parse_common_flag(ArgParser& p, CommonArgs& a) {
    const std::string& f = p.flag();
    if (f == "--model") {
        a.model = p.value();
    } else if (f == "--json") {
        p.no_value();
        a.json = true;
    } else if (f == "--batch") {
        a.shapes.batch = p.integer(1, 1 << 24);
    } else if (f == "--seq") {
        a.shapes.seq = p.integer(1, 1 << 24);
    } else if (f == "--shape") {
        parse_shape(p, p.value(), a.shapes);
    } else if (f == "--seed") {
        a.shapes.seed = static_cast<std::uint32_t>(p.integer(0, 0xffffffffll));
    } else if (f == "--threads") {
        a.threads = static_cast<int>(p.integer(0, 4096));
    } else if (f == "--backends") {
        a.backends = parse_backends(p, p.value());
    } else if (f == "--opt-level") {
        a.opt_level = static_cast<int>(p.integer(0, 3));
    } else {
        return false;
    }
    return true;
}

/// After parsing: --model must have been given.
inline void check_common(const ArgParser& p, const CommonArgs& a) {
    if (a.model.empty()) p.error("--model PATH is required");
}

/// The generated inputs of `req`; an invalid_argument (a --shape or --seq problem) is a usage
/// error, anything else is thrown.
inline GeneratedInputs make_inputs_or_exit(const Usage& usage, const InferenceEngine& engine,
                                           const ShapeRequest& req) {
    auto generated = make_inputs(engine, req);
    if (!generated) {
        const Status& st = generated.status();
        if (st.code() != ErrorCode::invalid_argument) throw Error(st);
        usage.error(st.message());
    }
    return std::move(*generated);
}

// ---- output ----

/// Linear interpolation between order statistics of sorted, non-empty samples (as
/// ort_bench.mjs).
inline double quantile(const std::vector<double>& sorted, double q) {
    const double pos = static_cast<double>(sorted.size() - 1) * q;
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = static_cast<std::size_t>(std::ceil(pos));
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

inline std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\')
            out += '\\', out += c;
        else if (static_cast<unsigned char>(c) < 0x20)
            out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
            out += c;
    }
    return out + "\"";
}

/// Six significant digits; NaN and infinities as null.
inline std::string json_number(double v) {
    return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null";
}

template <class Range, class F>
std::string json_array(const Range& r, F element) {
    std::string out = "[";
    for (const auto& x : r) {
        if (out.size() > 1) out += ',';
        out += element(x);
    }
    return out + "]";
}

// ---- the machine ----

inline int available_processors() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    return 1;
}

/// /proc/loadavg's 1, 5 and 15 minute figures (zeros when unreadable).
inline std::vector<double> load_average() {
    std::ifstream in("/proc/loadavg");
    std::vector<double> l(3, 0.0);
    in >> l[0] >> l[1] >> l[2];
    return l;
}

}  // namespace dsinfer::bench
