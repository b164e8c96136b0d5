// tools/bench_cli.hpp — the command line and output helpers shared by ds-benchmark and
// ds-loadgen (make-bad-models uses its Cli too).
//
// Purpose: one implementation of what the tools parse and print:
//   * Cli wraps a CLI11 App (Debian's libcli11-dev): `--flag value` or `--flag=value`; every
//     value is converted and range-checked while parsing, so a bad command line ends the
//     process before any work with exit status 2, one line "<program>: <problem>" on stderr
//     (a problem names its flag first: "--batch: must be in [1, 16777216], got 0") and the
//     usage (ManPage::usage(): the synopsis); -h/--help prints the tool's manual page on
//     stdout and --version its version (tools/tool_cli.hpp), each exiting 0. CLI11's own
//     errors are worded by tools/tool_cli.hpp, as ds-conformance's;
//   * add_common() registers the flags both tools share (--model, --json, the input
//     generator's --batch, --seq, --shape, --seed, and the engine's --threads, --backends,
//     --opt-level) into CommonArgs, whose engine_options() fills EngineOptions;
//   * JSON goes through nlohmann::json (tools/tool_json.hpp: bench::Json, json_text()); the
//     interpolated quantile of sorted samples, and the machine figures (processors available,
//     load average).
//
// Ownership/threading: Cli owns its CLI::App and writes into targets the caller keeps alive
// until parse() returns. Not thread-safe (used on the main thread, before any work starts).
//
// Usage:
//   struct Args : bench::CommonArgs { std::int64_t n = 10; };
//   Args a;
//   bench::Cli cli({"ds-tool", "what it does", kSynopsis, kDescription, kExamples, kExitStatus});
//   cli.add_common(a);
//   cli.integer("--iterations", a.n, 1, 1 << 30, "at least N timed runs (default 10)");
//   cli.parse(argc, argv);   // exits 0 (help, version) or 2 (bad command line; --model is
//                            // required)
//   fmt::print("{}\n", bench::json_text(bench::Json{{"n", a.n}}));
#pragma once

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sched.h>

#include <dsinfer/quantize.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_inputs.hpp"
#include "stats.hpp"
#include "tool_cli.hpp"
#include "tool_json.hpp"

namespace dsinfer::bench {

inline constexpr int kExitError = 1;  ///< engine error (load, run) or a feature not available

/// A tool's work after its command line is parsed: body()'s exit status, or, when it throws, the
/// error on stderr as "<tool>: error [<code>]: <message>" and kExitError.
template <class F>
int run_reporting_errors(const char* tool, F&& body) {
    try {
        return body();
    } catch (const Error& e) {
        fmt::print(stderr, "{}: error [{}]: {}\n", tool, to_string(e.code()), e.message());
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: error: {}\n", tool, e.what());
    }
    return kExitError;
}
inline constexpr int kExitUsage = 2;  ///< bad command line

// ---- command line ----

/// A tool's name and usage, for command-line errors found after parsing (an input --shape
/// names, known once the model is loaded).
struct Usage {
    std::string program;
    std::string text;  ///< ManPage::usage()
    /// Prints "<program>: <message>" and the usage to stderr; exits 2.
    [[noreturn]] void error(const std::string& message) const {
        fmt::print(stderr, "{}: {}\n{}", program, message, text);
        std::exit(kExitUsage);
    }
};

/// An integer in [min, max] from all of `text`; a problem ("" when valid) otherwise.
inline std::string parse_integer(std::string_view text, std::int64_t min, std::int64_t max,
                                 std::int64_t& out) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size())
        return fmt::format("expects an integer, got '{}'", text);
    if (ec == std::errc::result_out_of_range || v < min || v > max)
        return fmt::format("must be in [{}, {}], got {}", min, max, text);
    out = v;
    return {};
}

/// A finite number >= min (> min when `exclusive`) from all of `text`; `what` names the unit
/// in the problem ("a number of seconds").
inline std::string parse_number(std::string_view text, double min, bool exclusive,
                                std::string_view what, double& out) {
    const std::string s(text);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < min ||
        (exclusive && v == min))
        return fmt::format("expects {} {} {}, got '{}'", what, exclusive ? ">" : ">=", min, text);
    out = v;
    return {};
}

/// The model, inputs, engine settings and output format both tools take.
struct CommonArgs {
    std::filesystem::path model;        ///< --model (required)
    bool json = false;                  ///< --json
    ShapeRequest shapes;                ///< --batch, --seq, --shape, --seed
    int threads = 0;                    ///< --threads (0 = the processors available)
    WaitPolicy wait_policy = WaitPolicy::spin;  ///< --wait-policy
    std::vector<std::string> backends;  ///< --backends (empty = the build's default)
    int opt_level = 3;                  ///< --opt-level
    AlgoSearch algo_search = AlgoSearch::rule;  ///< --algo-search
    Usage usage;                        ///< for usage errors found after parsing

    EngineOptions engine_options() const {
        EngineOptions o;
        o.backends = backends;
        o.num_threads = threads;
        o.wait_policy = wait_policy;
        o.optimization_level = opt_level;
        o.algo_search = algo_search;
        return o;
    }
};

/// A CLI11 App whose options convert their values as they are parsed (see the file comment).
class Cli {
public:
    /// Converts one value of an option into its target: a problem, or "" when valid.
    using Convert = std::function<std::string(const std::string&)>;

    explicit Cli(ManPage page) : page_(std::move(page)), app_(page_.summary, page_.program) {
        use_man_page(app_, page_, 26);
        app_.allow_extras();   // reported by parse() as "unknown option", in the tools' words
        app_.set_help_flag();  // added by parse(), last in the help
    }

    CLI::App& app() noexcept { return app_; }

    /// `--name VALUE`, handed to `convert` once per occurrence (the last one wins; repeatable
    /// options collect). CLI11 takes the next argument as the value whatever it looks like, so
    /// a value that is one of the tool's options (`--model --json`) is refused here.
    CLI::Option* option(const std::string& name, const std::string& type, const std::string& help,
                        Convert convert) {
        names_.insert(name);
        auto* o = app_.add_option(name, CLI::callback_t{}, help);
        o->type_name(type)->expected(1)->allow_extra_args(false);
        o->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
        o->check(CLI::Validator(
            [this, convert = std::move(convert)](std::string& s) {
                if (names_.count(s)) return "expects a value, got the option '" + s + "'";
                return convert(s);
            },
            ""));
        return o;
    }
    /// `--name VALUE` into a string; `check` (optional) finds a problem with it.
    CLI::Option* text(const std::string& name, std::string& target, const std::string& type,
                      const std::string& help, Convert check = nullptr) {
        return option(name, type, help, [&target, check](const std::string& s) {
            std::string problem = check ? check(s) : std::string();
            if (problem.empty()) target = s;
            return problem;
        });
    }
    /// `--name N`, an integer in [min, max] (T may be a std::optional).
    template <class T>
    CLI::Option* integer(const std::string& name, T& target, std::int64_t min, std::int64_t max,
                         const std::string& help) {
        return option(name, "N", help, [&target, min, max](const std::string& s) {
            std::int64_t v = 0;
            std::string problem = parse_integer(s, min, max, v);
            if (problem.empty()) target = static_cast<T>(v);
            return problem;
        });
    }
    /// `--name X`, a finite number >= min (> min when `exclusive`); `what` names the unit (T:
    /// double or std::optional<double>).
    template <class T>
    CLI::Option* number(const std::string& name, T& target, double min, bool exclusive,
                        std::string_view what, const std::string& type, const std::string& help) {
        return option(name, type, help, [&target, min, exclusive, what](const std::string& s) {
            double v = 0;
            std::string problem = parse_number(s, min, exclusive, what, v);
            if (problem.empty()) target = v;
            return problem;
        });
    }
    /// `--name`, a flag without a value (`--name=value` is refused).
    CLI::Option* flag(const std::string& name, bool& target, const std::string& help) {
        names_.insert(name);
        return app_.add_flag(name, target, help)->disable_flag_override();
    }

    /// The flags of CommonArgs (--model is checked and --json added by parse()).
    void add_common(CommonArgs& a) {
        common_ = &a;
        text("--model", model_, "PATH", "ONNX model (required)")->group("Model and inputs");
        integer("--batch", a.shapes.batch, 1, 1 << 24,
                "first symbolic dim of every input (default 1)")
            ->group("Model and inputs");
        integer("--seq", a.shapes.seq, 1, 1 << 24,
                "every later symbolic dim (required when the model\nhas one)")
            ->group("Model and inputs");
        option("--shape", "NAME=DxD",
               "the whole shape of input NAME (repeatable; e.g.\ninput_ids=2x128)",
               [&a](const std::string& s) { return parse_shape(s, a.shapes); })
            ->group("Model and inputs");
        integer("--seed", a.shapes.seed, 0, 0xffffffffll,
                "seed of the input generator (default 12345, as the\nORT harness)")
            ->group("Model and inputs");
        integer("--threads", a.threads, 0, 4096,
                "intra-op threads; 0 = the processors available\n(default 0)")
            ->group("Engine");
        option("--wait-policy", "HOW",
               "how idle helper threads wait between parallel\nregions: spin (default), yield, "
               "block\n(EngineOptions::wait_policy)",
               [&a](const std::string& s) {
                   for (WaitPolicy p : {WaitPolicy::spin, WaitPolicy::yield, WaitPolicy::block})
                       if (s == wait_policy_name(p)) {
                           a.wait_policy = p;
                           return std::string();
                       }
                   return "must be spin, yield or block, got '" + s + "'";
               })
            ->group("Engine");
        option("--backends", "LIST",
               "comma-separated, in priority order: onednn, cpu,\nreference (default: the "
               "build's default)",
               [&a](const std::string& s) { return parse_backends(s, a.backends); })
            ->group("Engine");
        integer("--opt-level", a.opt_level, 0, 3, "graph optimization level 0-3 (default 3)")
            ->group("Engine");
        option("--algo-search", "HOW",
               "rule (default): the convolutions' fitted cost rule;\nmeasure: time the candidates "
               "on this machine",
               [&a](const std::string& s) {
                   if (s == "rule") a.algo_search = AlgoSearch::rule;
                   else if (s == "measure") a.algo_search = AlgoSearch::measure;
                   else return "must be rule or measure, got '" + s + "'";
                   return std::string();
               })
            ->group("Engine");
    }

    /// Parses argv: -h/--help prints the manual page and --version the version, each exiting
    /// 0; a bad command line exits 2. With add_common(), --model is required.
    void parse(int argc, char** argv) {
        if (common_)
            flag("--json", common_->json, "print one JSON object on one line")->group("Output");
        // --version and --help close the help: in the "Output" group when the tool has one.
        const bool has_output = !app_.get_options([](const CLI::Option* o) {
                                         return o->get_group() == "Output";
                                     }).empty();
        const std::string last_group = has_output ? "Output" : "Options";
        names_.insert("--version");
        add_version_flag(app_, page_.program)->group(last_group);
        app_.set_help_flag("-h,--help", "print this help and exit")->group(last_group);
        try {
            app_.parse(argc, argv);
        } catch (const CLI::CallForHelp&) {
            std::cout << app_.help();
            std::exit(0);
        } catch (const CLI::CallForVersion& v) {
            std::cout << v.what() << "\n";
            std::exit(0);
        } catch (const CLI::ParseError& e) {
            error(cli_problem(e));
        }
        if (auto problem = extras_problem(app_); !problem.empty()) error(problem);
        if (common_) {
            if (model_.empty()) error("--model PATH is required");
            common_->model = model_;
            common_->usage = usage();
        }
    }

    /// True when `name` was on the command line.
    bool given(const std::string& name) const { return app_.count(name) > 0; }
    [[noreturn]] void error(const std::string& message) const { usage().error(message); }
    Usage usage() const { return {page_.program, page_.usage()}; }

    /// "input_ids=2x128" -> {"input_ids", {2, 128}} into `req.overrides`.
    static std::string parse_shape(std::string_view text, ShapeRequest& req) {
        const auto eq = text.find('=');
        if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
            return fmt::format("expects NAME=DxD..., got '{}'", text);
        const std::string name(text.substr(0, eq));
        std::vector<std::int64_t> dims;
        std::string_view rest = text.substr(eq + 1);
        while (true) {
            const auto x = rest.find('x');
            std::int64_t d = 0;
            if (auto problem = parse_integer(rest.substr(0, x), 0, 1ll << 40, d); !problem.empty())
                return name + ": " + problem;
            dims.push_back(d);
            if (x == std::string_view::npos) break;
            rest = rest.substr(x + 1);
        }
        if (!req.overrides.emplace(name, std::move(dims)).second)
            return fmt::format("{} is given twice", name);
        return {};
    }

    /// "onednn,cpu" -> {"onednn", "cpu"}; unknown or repeated names are problems.
    static std::string parse_backends(std::string_view text, std::vector<std::string>& out) {
        std::vector<std::string> list;
        while (true) {
            const auto comma = text.find(',');
            const std::string b(text.substr(0, comma));
            if (b != "onednn" && b != "cpu" && b != "reference")
                return fmt::format("unknown backend '{}' (known: onednn, cpu, reference)", b);
            if (std::find(list.begin(), list.end(), b) != list.end())
                return fmt::format("lists '{}' twice", b);
            list.push_back(b);
            if (comma == std::string_view::npos) break;
            text = text.substr(comma + 1);
        }
        out = std::move(list);
        return {};
    }

private:
    ManPage page_;
    CLI::App app_;
    std::set<std::string> names_ = {"-h", "--help"};
    CommonArgs* common_ = nullptr;
    std::string model_;
};

/// The Precision a --precision value names (check_precision() accepted it; fp32 otherwise).
inline Precision precision_of(const std::string& precision) {
    return precision == "tf32"   ? Precision::tf32
           : precision == "fp16" ? Precision::fp16
           : precision == "bf16" ? Precision::bf16
           : precision == "int8" ? Precision::int8
                                 : Precision::fp32;
}

/// The engine of `model` at `precision` (--precision), EngineOptions::precision: int8 runs a
/// pre-quantized model as it is and quantizes a float32 one dynamically at load
/// (Precision::int8), its report in `int8` when given. Throws dsinfer::Error.
inline InferenceEngine load_at_precision(const std::filesystem::path& model, EngineOptions o,
                                         const std::string& precision,
                                         std::optional<DynamicQuantizeReport>* int8 = nullptr) {
    o.precision = precision_of(precision);
    InferenceEngine e = InferenceEngine::load(model, o);
    if (int8 != nullptr && e.int8_report() != nullptr) *int8 = *e.int8_report();
    return e;
}

/// The values --precision takes.
inline std::string check_precision(const std::string& p) {
    return p == "fp32" || p == "tf32" || p == "fp16" || p == "bf16" || p == "int8"
               ? std::string()
               : "must be fp32, tf32, fp16, bf16 or int8, got '" + p + "'";
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

// ---- statistics and the machine ----

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

/// CPU time of the whole machine and of this process, to tell how much of the processors
/// other processes (or the hypervisor: steal) took between two samples.
struct CpuSample {
    double busy_s = -1;  ///< all processors' non-idle time since boot (/proc/stat), -1: unknown
    double self_s = 0;   ///< this process's user + system time
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();

    static CpuSample now() {
        CpuSample c;
        std::ifstream in("/proc/stat");
        std::string cpu;
        double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
        if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal &&
            cpu == "cpu") {
            const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
            c.busy_s = (user + nice + system + irq + softirq + steal) / hz;
        }
        rusage ru{};
        getrusage(RUSAGE_SELF, &ru);
        c.self_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
        c.at = std::chrono::steady_clock::now();
        return c;
    }
    /// Processors' worth of time others used from `start` to this sample (0 .. processors;
    /// -1 when unknown or the interval is too short for /proc/stat's ticks).
    double others_since(const CpuSample& start) const {
        const double wall = std::chrono::duration<double>(at - start.at).count();
        if (busy_s < 0 || start.busy_s < 0 || wall < 0.2) return -1;
        return std::max(0.0, (busy_s - start.busy_s) - (self_s - start.self_s)) / wall;
    }
};

// ---- the machine, as the tools report it ----

/// The CPU's model name from /proc/cpuinfo ("unknown" when absent).
inline std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? std::string() : line.substr(start);
    }
    return "unknown";
}

/// The widest vector ISA this CPU has, detected at run time.
inline std::string cpu_isa() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
    if (__builtin_cpu_supports("sse4.2")) return "sse4.2";
    return "baseline";
}

/// Extensions beyond the ISA level that matter to the kernels (from /proc/cpuinfo flags).
inline std::vector<std::string> cpu_isa_extensions() {
    static const char* const kWanted[] = {"avx512_vnni", "avx512_bf16", "avx_vnni",
                                          "amx_tile",    "amx_bf16",    "amx_int8"};
    std::ifstream in("/proc/cpuinfo");
    std::vector<std::string> found;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        std::vector<std::string> flags{std::istream_iterator<std::string>(words), {}};
        for (const char* w : kWanted)
            if (std::find(flags.begin(), flags.end(), w) != flags.end()) found.emplace_back(w);
        break;
    }
    return found;
}

}  // namespace dsinfer::bench
