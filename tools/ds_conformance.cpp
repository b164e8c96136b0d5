// ds-conformance: runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_N.pb)
// through InferenceEngine and compares outputs the way onnx's runner does
// (|actual - expected| <= atol + rtol * |expected|, NaN equal to NaN, exact shapes/dtypes).
//
//   ds-conformance --suite DIR [--filter REGEX] [--rtol X] [--atol Y] [--json FILE]
//                  [--expect-pass FILE] [--timeout SECONDS] [--no-fork] [--quiet] [--stats]
//                  [--backends LIST]   (comma-separated EngineOptions::backends: onednn, cpu,
//                                       reference)
//                  [--device D]        (EngineOptions::device: cpu (default), cuda, cuda:N;
//                                       on a GPU, unsupported nodes run on the CPU)
//                  [--precision P]     (EngineOptions::precision on a GPU: fp32, tf32, fp16,
//                                       bf16; pass the tolerances that go with it)
//                  [--compare-levels]  (a test that passes at the default optimization level
//                                       also runs at level 0; outputs must agree within
//                                       1e-4 relative + 1e-5 absolute, NaNs in the same
//                                       places, integers exactly; a mismatch is a failure)
//   ds-conformance --help | --version
//
// A test is a subfolder of the suite holding model.onnx; --filter (a regex searched in the
// folder name) selects among them. Each test runs in a forked child with a timeout (--timeout,
// default 120 s; --no-fork runs in-process without one), so a crash or hang is a failure of
// that test instead of ending the run. Every test ends in one of:
//   pass
//   fail         wrong outputs, an engine error, a crash or a hang
//   broken       the test's own data is unusable: no test_data_set_*, no output_0.pb, gaps in
//                the numbering (checked before the model loads); a .pb that cannot be read or
//                parsed, more input/output files than the model has inputs/outputs (checked
//                once it loaded: a model with sequence or optional inputs is unsupported, and
//                its SequenceProto/OptionalProto files are no broken TensorProtos)
//   unsupported  the engine reports ErrorCode::unsupported loading the model (an op, opset or
//                dtype this build lacks), or a .pb holds a dtype it lacks
// The last stdout line sums them up ("P passed, F failed, S skipped (U unsupported, N not run),
// B broken data"; "not run" counts the tests --filter left out). --json FILE writes the counts
// and every test's status, time and detail (one line, nlohmann::json: tools/tool_json.hpp).
//
// Exit status: 0 when no test failed or had broken data and not every selected test was
// unsupported. With --expect-pass FILE (one test name a line, # comments) instead: every listed
// test that --filter selects passed (failures of unlisted tests are printed but allowed; so are
// unsupported ones, unless all are) and nothing crashed, hung or had broken data. 1 otherwise,
// and when no test matched --filter or the suite holds no test, or the --json file could not
// be written at the end: a last stderr line "ds-conformance: ..." says why. 2 for a bad command line (an
// unknown option, a missing or malformed value, an unknown backend or device, a suite folder
// or --expect-pass file that cannot be read, a --json file that cannot be written), found
// before any test runs: a first stderr line "ds-conformance: <problem>", then the usage.
// --help / -h prints the manual page (tools/tool_cli.hpp) on stdout and --version the version,
// each exiting 0. Options are parsed with CLI11; the engine options are checked by the engine's
// own validation.
#include <CLI/CLI.hpp>
#include <dsinfer/dsinfer.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "onnx_test_data.hpp"
#include "tool_cli.hpp"
#include "tool_json.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

// The numbers travel through the pipe from the forked child: append new outcomes at the end.
enum class Outcome { pass, fail, unsupported, broken };

const char* outcome_name(Outcome o) {
    switch (o) {
        case Outcome::pass: return "pass";
        case Outcome::fail: return "fail";
        case Outcome::unsupported: return "unsupported";
        case Outcome::broken: return "broken";
    }
    return "fail";
}

struct Result {
    std::string name;
    Outcome outcome = Outcome::fail;
    std::string detail;
    double ms = 0;
    bool crashed = false;
};

struct Options {
    fs::path suite;
    std::string filter;
    double rtol = 1e-3;
    double atol = 1e-7;
    std::string json;
    std::string expect_pass;
    std::set<std::string> must_pass;  // --expect-pass FILE, read before any test runs
    int timeout_s = 120;
    bool fork = true;
    bool quiet = false;
    bool stats = false;
    std::vector<std::string> backends;  // empty = the engine's default
    std::string device = "cpu";         // EngineOptions::device
    Precision precision = Precision::fp32;
    bool compare_levels = false;
};

// --compare-levels: optimized (default level) vs unoptimized (level 0) outputs.
constexpr double kLevelsRtol = 1e-4;
constexpr double kLevelsAtol = 1e-5;

double to_double(const Tensor& t, std::int64_t i) {
    switch (t.dtype()) {
        case DType::f32: return t.data<float>()[i];
        case DType::f64: return t.data<double>()[i];
        case DType::f16: return static_cast<float>(t.data<float16>()[i]);
        case DType::bf16: return static_cast<float>(t.data<bfloat16>()[i]);
        case DType::i8: return t.data<std::int8_t>()[i];
        case DType::u8: return t.data<std::uint8_t>()[i];
        case DType::i16: return t.data<std::int16_t>()[i];
        case DType::u16: return t.data<std::uint16_t>()[i];
        case DType::i32: return t.data<std::int32_t>()[i];
        case DType::u32: return t.data<std::uint32_t>()[i];
        case DType::i64: return static_cast<double>(t.data<std::int64_t>()[i]);
        case DType::u64: return static_cast<double>(t.data<std::uint64_t>()[i]);
        case DType::boolean: return t.data<bool>()[i] ? 1 : 0;
        case DType::string: return 0;
    }
    return 0;
}

/// Empty string when equal within tolerance; else a description of the worst element.
std::string compare(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
    if (actual.dtype() != expected.dtype())
        return std::string("dtype ") + std::string(dtype_name(actual.dtype())) + ", expected " +
               std::string(dtype_name(expected.dtype()));
    if (!(actual.shape() == expected.shape()))
        return "shape " + actual.shape().to_string() + ", expected " + expected.shape().to_string();
    const std::int64_t n = expected.num_elements();
    if (expected.dtype() == DType::string) {
        for (std::int64_t i = 0; i < n; ++i)
            if (actual.data<std::string>()[i] != expected.data<std::string>()[i])
                return "string element " + std::to_string(i) + " is '" +
                       actual.data<std::string>()[i] + "', expected '" +
                       expected.data<std::string>()[i] + "'";
        return {};
    }
    const bool exact = is_integer(expected.dtype()) || expected.dtype() == DType::boolean;
    std::int64_t worst = -1;
    double worst_excess = 0;
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        if (exact) {
            // Compare integers exactly (64-bit values do not survive a double round trip).
            bool eq;
            if (expected.dtype() == DType::i64) eq = actual.data<std::int64_t>()[i] == expected.data<std::int64_t>()[i];
            else if (expected.dtype() == DType::u64) eq = actual.data<std::uint64_t>()[i] == expected.data<std::uint64_t>()[i];
            else eq = to_double(actual, i) == to_double(expected, i);
            if (!eq) {
                ++bad;
                if (worst < 0) worst = i;
            }
            continue;
        }
        const double a = to_double(actual, i), e = to_double(expected, i);
        if (std::isnan(a) && std::isnan(e)) continue;
        if (std::isinf(e) && a == e) continue;
        const double err = std::fabs(a - e);
        const double allowed = atol + rtol * std::fabs(e);
        if (!(err <= allowed)) {
            ++bad;
            const double excess = std::isnan(err) ? INFINITY : err - allowed;
            if (worst < 0 || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
        }
    }
    if (bad == 0) return {};
    std::ostringstream os;
    os.precision(9);
    os << bad << " of " << n << " elements differ; worst at " << worst << ": got "
       << to_double(actual, worst) << ", expected " << to_double(expected, worst) << " (abs err "
       << std::fabs(to_double(actual, worst) - to_double(expected, worst)) << ")";
    return os.str();
}

EngineOptions engine_options(const Options& opt) {
    EngineOptions eo;
    eo.backends = opt.backends;
    eo.device = opt.device;
    eo.precision = opt.precision;
    return eo;
}

/// One test_data_set_* folder: its numbered files, then (once the model loaded) their tensors.
struct DataSet {
    fs::path dir;
    std::vector<fs::path> input_files, output_files;
    std::vector<Tensor> inputs, outputs;
};

/// DIR/PREFIX0.pb, PREFIX1.pb, ... into `files`; why the numbering is unusable, or "".
std::string list_numbered(const fs::path& dir, const std::string& prefix,
                          std::vector<fs::path>& files) {
    files = dsinfer::tools::numbered_pb_files(dir, prefix);
    const std::regex numbered(prefix + "[0-9]+\\.pb");
    std::size_t present = 0;
    for (const auto& ent : fs::directory_iterator(dir))
        if (std::regex_match(ent.path().filename().string(), numbered)) ++present;
    if (present == files.size()) return {};
    return dir.filename().string() + ": " + std::to_string(present) + " " + prefix + "N.pb files, but no " +
           prefix + std::to_string(files.size()) + ".pb (numbered 0, 1, 2, ... without gaps)";
}

/// Why a test cannot be run as its data stands: broken, or unsupported (a dtype the engine lacks).
struct DataProblem {
    Outcome outcome;
    std::string detail;
};

/// Reads the tensors of `files`.
std::optional<DataProblem> load_files(const std::vector<fs::path>& files, std::vector<Tensor>& tensors) {
    for (const auto& f : files) {
        try {
            tensors.push_back(load_tensor_proto(f));
        } catch (const Error& e) {
            return DataProblem{e.code() == ErrorCode::unsupported ? Outcome::unsupported
                                                                  : Outcome::broken,
                               f.parent_path().filename().string() + "/" +
                                   f.filename().string() + ": " + e.what()};
        }
    }
    return std::nullopt;
}

Result run_test(const fs::path& dir, const Options& opt) {
    Result r;
    r.name = dir.filename().string();
    const auto t0 = std::chrono::steady_clock::now();
    auto finish = [&](Outcome o, std::string detail) {
        r.outcome = o;
        r.detail = std::move(detail);
        r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return r;
    };
    // The layout of the test's data first: a broken layout is reported whatever the engine
    // supports. The .pb files are parsed once the model has loaded: a model with sequence or
    // optional inputs or outputs (unsupported at load) has SequenceProto/OptionalProto files,
    // which are no TensorProto but no broken data either.
    std::vector<DataSet> sets;
    try {
        for (const auto& ent : fs::directory_iterator(dir))
            if (ent.is_directory() && ent.path().filename().string().rfind("test_data_set_", 0) == 0)
                sets.push_back({ent.path(), {}, {}, {}, {}});
        std::sort(sets.begin(), sets.end(),
                  [](const DataSet& a, const DataSet& b) { return a.dir < b.dir; });
        if (sets.empty()) return finish(Outcome::broken, "no test_data_set_* folder");
        for (auto& set : sets) {
            std::string problem = list_numbered(set.dir, "input_", set.input_files);
            if (problem.empty()) problem = list_numbered(set.dir, "output_", set.output_files);
            if (problem.empty() && set.output_files.empty())
                problem = set.dir.filename().string() + ": no output_0.pb (no reference output)";
            if (!problem.empty()) return finish(Outcome::broken, problem);
        }
    } catch (const std::exception& e) {  // a folder that cannot be listed
        return finish(Outcome::broken, std::string("listing the test data: ") + e.what());
    }
    std::optional<InferenceEngine> engine;
    try {
        engine.emplace(InferenceEngine::load(dir / "model.onnx", engine_options(opt)));
    } catch (const Error& e) {
        return finish(e.code() == ErrorCode::unsupported ? Outcome::unsupported : Outcome::fail,
                      "load: " + std::string(e.what()));
    }
    for (auto& set : sets) {
        if (auto p = load_files(set.input_files, set.inputs)) return finish(p->outcome, p->detail);
        if (auto p = load_files(set.output_files, set.outputs)) return finish(p->outcome, p->detail);
    }
    const auto& ins = engine->inputs();
    const auto& outs = engine->outputs();
    std::string unchecked, stats;
    // Per test-data set: inputs and the default level's outputs (for --compare-levels).
    std::vector<std::vector<NamedTensor>> set_inputs, set_outputs;
    for (auto& set : sets) {
        const std::string where = set.dir.filename().string() + ": ";
        if (set.inputs.size() > ins.size())
            return finish(Outcome::broken, where + std::to_string(set.inputs.size()) +
                                               " input files for " + std::to_string(ins.size()) +
                                               " graph inputs");
        if (set.outputs.size() > outs.size())
            return finish(Outcome::broken, where + std::to_string(set.outputs.size()) +
                                               " reference outputs for " +
                                               std::to_string(outs.size()) + " graph outputs");
        std::vector<NamedTensor> inputs;
        for (std::size_t i = 0; i < set.inputs.size(); ++i)
            inputs.push_back({ins[i].name, std::move(set.inputs[i])});
        std::vector<NamedTensor> outputs;
        Status st = engine->try_run(inputs, outputs);
        if (!st.is_ok())
            return finish(st.code() == ErrorCode::unsupported ? Outcome::unsupported : Outcome::fail,
                          "run: " + st.to_string());
        if (set.outputs.size() > outputs.size())
            return finish(Outcome::fail, "run returned " + std::to_string(outputs.size()) +
                                             " outputs for " + std::to_string(set.outputs.size()) +
                                             " references");
        for (std::size_t j = 0; j < set.outputs.size(); ++j) {
            const Tensor& expected = set.outputs[j];
            std::string diff = compare(outputs[j].tensor, expected, opt.rtol, opt.atol);
            if (opt.stats && is_floating(expected.dtype()) &&
                outputs[j].tensor.shape() == expected.shape() &&
                outputs[j].tensor.dtype() == expected.dtype()) {
                double max_abs = 0, max_ref = 0;
                for (std::int64_t k = 0; k < expected.num_elements(); ++k) {
                    max_abs = std::max(max_abs, std::fabs(to_double(outputs[j].tensor, k) -
                                                          to_double(expected, k)));
                    max_ref = std::max(max_ref, std::fabs(to_double(expected, k)));
                }
                std::ostringstream os;
                os << "output " << j << ": max abs err " << max_abs << ", max |ref| " << max_ref
                   << ", max abs err / max |ref| " << (max_ref > 0 ? max_abs / max_ref : 0.0);
                stats += (stats.empty() ? "" : "; ") + os.str();
            }
            if (!diff.empty())
                return finish(Outcome::fail, "output " + std::to_string(j) + " ('" +
                                                 outputs[j].name + "'): " + diff);
        }
        for (std::size_t j = set.outputs.size(); j < outputs.size(); ++j)
            unchecked += (unchecked.empty() ? "" : ", ") + outputs[j].name;
        if (opt.compare_levels) {
            set_inputs.push_back(std::move(inputs));
            set_outputs.push_back(std::move(outputs));
        }
    }
    if (opt.compare_levels) {
        std::optional<InferenceEngine> plain;
        try {
            EngineOptions eo = engine_options(opt);
            eo.optimization_level = 0;
            plain.emplace(InferenceEngine::load(dir / "model.onnx", eo));
        } catch (const Error& e) {
            return finish(Outcome::fail, "level 0 load: " + std::string(e.what()));
        }
        for (std::size_t s = 0; s < set_inputs.size(); ++s) {
            std::vector<NamedTensor> ref;
            Status st = plain->try_run(set_inputs[s], ref);
            if (!st.is_ok()) return finish(Outcome::fail, "level 0 run: " + st.to_string());
            if (ref.size() != set_outputs[s].size())
                return finish(Outcome::fail, "level 0 returns " + std::to_string(ref.size()) +
                                                 " outputs, the default level " +
                                                 std::to_string(set_outputs[s].size()));
            for (std::size_t j = 0; j < ref.size(); ++j) {
                std::string diff = compare(set_outputs[s][j].tensor, ref[j].tensor, kLevelsRtol,
                                           kLevelsAtol);
                if (!diff.empty())
                    return finish(Outcome::fail, "optimized vs level 0, " +
                                                     sets[s].dir.filename().string() + " output " +
                                                     std::to_string(j) + " ('" + ref[j].name +
                                                     "'): " + diff);
            }
        }
    }
    std::string detail = stats;
    if (!unchecked.empty())
        detail += (detail.empty() ? "" : "; ") + std::string("unchecked outputs (no reference): ") + unchecked;
    return finish(Outcome::pass, detail);
}

// Runs one test in a child process; a crash or timeout becomes a failure.
Result run_isolated(const fs::path& dir, const Options& opt) {
    int fds[2];
    if (::pipe(fds) != 0) return run_test(dir, opt);
    std::cout.flush();  // the child must not re-emit the parent's buffered output
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        ::alarm(static_cast<unsigned>(opt.timeout_s));
        Result r = run_test(dir, opt);
        std::string msg = std::to_string(static_cast<int>(r.outcome)) + "\n" +
                          std::to_string(r.ms) + "\n" + r.detail;
        const char* p = msg.data();
        std::size_t left = msg.size();
        while (left > 0) {
            const ssize_t w = ::write(fds[1], p, left);
            if (w <= 0) break;
            p += w;
            left -= static_cast<std::size_t>(w);
        }
        ::close(fds[1]);
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string data;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n <= 0) break;
        data.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    Result r;
    r.name = dir.filename().string();
    if (WIFSIGNALED(status) || data.empty()) {
        r.outcome = Outcome::fail;
        r.crashed = true;
        const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        r.detail = sig == SIGALRM ? "HANG: exceeded " + std::to_string(opt.timeout_s) + " s"
                                  : "CRASH: signal " + std::to_string(sig) + " (" +
                                        (sig ? strsignal(sig) : "no result") + ")";
        return r;
    }
    std::istringstream is(data);
    std::string line;
    std::getline(is, line);
    r.outcome = static_cast<Outcome>(std::stoi(line));
    std::getline(is, line);
    r.ms = std::stod(line);
    std::getline(is, r.detail, '\0');
    return r;
}

// ---- command line ----------------------------------------------------------------------------

constexpr const char* kProgram = "ds-conformance";

const char* const kSynopsis =
    "usage: ds-conformance --suite DIR [--filter REGEX] [--rtol X] [--atol Y] [--json FILE]\n"
    "                      [--expect-pass FILE] [--timeout SECONDS] [--no-fork] [--quiet]\n"
    "                      [--stats] [--backends LIST] [--device cpu|cuda|cuda:N]\n"
    "                      [--precision fp32|tf32|fp16|bf16] [--compare-levels]\n"
    "       ds-conformance --help | --version\n";

const char* const kDescription =
    "Runs ONNX backend-test folders (DIR/TEST/model.onnx beside\n"
    "DIR/TEST/test_data_set_*/{input,output}_N.pb) through dsinfer's InferenceEngine and\n"
    "compares the outputs: |actual - expected| <= atol + rtol * |expected|, NaN equal to NaN,\n"
    "integers, strings, shapes and dtypes exactly.\n"
    "\n"
    "A test is a subfolder of DIR holding model.onnx. Outcomes: pass; fail (wrong outputs, an\n"
    "engine error, a crash or a hang); broken (the test's own data is unusable: no\n"
    "test_data_set_*, a .pb that cannot be read or parsed, no output_0.pb, gaps in the\n"
    "numbering, more files than the model has inputs or outputs); unsupported (the engine\n"
    "lacks an op, opset or dtype). The last line counts them: \"skipped\" is unsupported\n"
    "plus \"not run\", the tests --filter left out; broken data is a failure of its own.\n";

const char* const kExamples =
    "ds-conformance --suite onnx-backend-tests/node --quiet\n"
    "    every node test, printing only the failures\n"
    "ds-conformance --suite onnx-backend-tests/node --filter '^test_conv' --backends reference\n"
    "    the convolution tests on the reference kernels alone\n"
    "ds-conformance --suite onnx-backend-tests/node --expect-pass tests/conformance/node_pass.txt\n"
    "    the must-pass list: the exit status follows the listed tests\n";

const char* const kExitStatus =
    "0  no test failed or had broken data and not every test was unsupported (with\n"
    "   --expect-pass: every listed test passed, nothing crashed, hung or had broken data)\n"
    "1  otherwise, also when no test matched or the --json file could not be written\n"
    "2  bad command line (nothing runs)\n";

const bench::ManPage kManPage{kProgram, "run ONNX backend tests through the engine", kSynopsis,
                              kDescription, kExamples, kExitStatus};

/// A CLI11 check running `convert` on the option's text: an error message, or "" when valid.
CLI::Validator checked(std::function<std::string(const std::string&)> convert) {
    return CLI::Validator([convert](std::string& s) { return convert(s); }, "");
}

/// All of `s` as a T (std::from_chars: no sign, space or suffix); nullopt when it is none, the
/// type's maximum when it does not fit.
template <class T>
std::optional<T> parse_all(const std::string& s) {
    T v{};
    const char* end = s.data() + s.size();
    const auto [p, ec] = std::from_chars(s.data(), end, v);
    if (s.empty() || ec == std::errc::invalid_argument || p != end) return std::nullopt;
    if (ec == std::errc::result_out_of_range) return std::numeric_limits<T>::max();
    return v;
}

std::string parse_tolerance(const std::string& s, double& out) {
    const auto v = parse_all<double>(s);
    if (!v) return "'" + s + "' is not a number";
    if (!std::isfinite(*v) || *v < 0 || *v == std::numeric_limits<double>::max())
        return "'" + s + "' is out of range (a finite number >= 0)";
    out = *v;
    return {};
}

constexpr long kMaxTimeout = 86400;

std::string parse_timeout(const std::string& s, int& out) {
    const auto v = parse_all<long>(s);
    if (!v) return "'" + s + "' is not a whole number of seconds";
    if (*v < 1 || *v > kMaxTimeout)
        return "'" + s + "' is out of range (1 to " + std::to_string(kMaxTimeout) + " seconds)";
    out = static_cast<int>(*v);
    return {};
}

/// The engine's own verdict on the options, before any test runs. InferenceEngine::load
/// validates EngineOptions (backend names, device syntax, precision) before it reads the model,
/// so loading a model that does not exist fails with io_error exactly when the options are
/// valid. Nothing is initialized (no CUDA in this process, which forks the tests).
std::string engine_rejects(const EngineOptions& eo) {
    try {
        (void)InferenceEngine::load(fs::path("/nonexistent/ds-conformance-option-check/model.onnx"), eo);
    } catch (const Error& e) {
        if (e.code() != ErrorCode::io_error) return e.message();
    }
    return {};
}

/// Parses and validates the command line into `opt`: -1 to go on, else the exit status.
int parse_command_line(int argc, char** argv, Options& opt) {
    CLI::App app(kManPage.summary, kProgram);
    bench::use_man_page(app, kManPage, 24);
    app.allow_extras();  // reported below as "unknown option", in this tool's words

    std::set<std::string> names = {"-h", "--help"};
    // CLI11 takes the next argument as the value whatever it looks like: `--json --quiet` must
    // not write a file named --quiet.
    auto not_an_option = [&names](const std::string& s) {
        return names.count(s) ? "expects a value, got the option '" + s + "'" : std::string();
    };
    auto add = [&](const std::string& name, std::string& target, const std::string& type,
                   const std::string& help, std::function<std::string(const std::string&)> convert) {
        names.insert(name);
        auto* o = app.add_option(name, target, help)->type_name(type);
        o->check(checked([not_an_option, convert](const std::string& s) {
            std::string problem = not_an_option(s);
            if (problem.empty() && convert) problem = convert(s);
            return problem;
        }));
        return o;
    };
    std::string suite, filter, rtol, atol, timeout, backends, device, precision;
    add("--suite", suite, "DIR", "folder of tests, e.g. onnx-backend-tests/node (required)", nullptr)
        ->required();
    add("--filter", filter, "REGEX", "run only the tests whose folder name matches (regex search)",
        [](const std::string& s) {
            try {
                std::regex r(s);
            } catch (const std::regex_error& e) {
                return "'" + s + "' is not a valid regex: " + e.what();
            }
            return std::string();
        });
    add("--rtol", rtol, "X", "relative tolerance, >= 0 (default 1e-3)",
        [&opt](const std::string& s) { return parse_tolerance(s, opt.rtol); });
    add("--atol", atol, "Y", "absolute tolerance, >= 0 (default 1e-7)",
        [&opt](const std::string& s) { return parse_tolerance(s, opt.atol); });
    add("--json", opt.json, "FILE",
        "write the counts and each test's status, time and detail as JSON", nullptr);
    add("--expect-pass", opt.expect_pass, "FILE",
        "must-pass list (one test name a line, # comments): the exit status\n"
        "follows these tests; unlisted tests may fail or be unsupported",
        nullptr);
    add("--timeout", timeout, "SECONDS",
        "per test, 1 to " + std::to_string(kMaxTimeout) +
            " (default 120); a test running longer fails\n(HANG)",
        [&opt](const std::string& s) { return parse_timeout(s, opt.timeout_s); });
    add("--backends", backends, "LIST",
        "comma-separated CPU backends in priority order: onednn, cpu,\n"
        "reference (default: the build's, onednn,cpu or cpu)",
        nullptr);
    add("--device", device, "D",
        "cpu (default), cuda or cuda:N; on a GPU, unsupported nodes run\non the CPU", nullptr);
    add("--precision", precision, "P",
        "fp32 (default); tf32, fp16 or bf16 with a CUDA --device (pass\n"
        "the tolerances that go with it)",
        [&opt](const std::string& s) {
            if (s == "fp32") opt.precision = Precision::fp32;
            else if (s == "tf32") opt.precision = Precision::tf32;
            else if (s == "fp16") opt.precision = Precision::fp16;
            else if (s == "bf16") opt.precision = Precision::bf16;
            else return "'" + s + "' is not one of fp32, tf32, fp16, bf16";
            return std::string();
        });
    bool no_fork = false;
    app.add_flag("--no-fork", no_fork, "run the tests in this process: no crash isolation, no timeout");
    app.add_flag("--quiet", opt.quiet, "print only the tests that fail or have broken data");
    app.add_flag("--stats", opt.stats,
                 "add each float output's max abs error and max |ref| to the\ntest's line");
    app.add_flag("--compare-levels", opt.compare_levels,
                 "a test that passes also runs at optimization level 0; outputs\n"
                 "must agree within 1e-4 relative + 1e-5 absolute, NaNs in the\n"
                 "same places, integers exactly");
    names.insert({"--no-fork", "--quiet", "--stats", "--compare-levels", "--version"});
    bench::add_version_flag(app, kProgram);

    auto bad = [](const std::string& problem) {
        return bench::command_line_error(kManPage, problem);
    };
    if (auto stop = bench::parse_command_line(app, kManPage, argc, argv)) return *stop;
    opt.fork = !no_fork;
    opt.filter = filter;
    opt.suite = suite;

    // Engine options, checked by the engine itself one flag at a time (its messages name the
    // known backends and devices), so that a typo fails once here instead of in every test.
    if (app.count("--backends")) {
        std::stringstream list(backends);
        for (std::string b; std::getline(list, b, ',');) opt.backends.push_back(b);
        if (opt.backends.empty() || backends.back() == ',')
            return bad("--backends: '" + backends + "' has an empty backend name");
        EngineOptions eo;
        eo.backends = opt.backends;
        if (auto why = engine_rejects(eo); !why.empty()) return bad("--backends: " + why);
    }
    if (app.count("--device")) {
        opt.device = device;
        EngineOptions eo;
        eo.device = opt.device;
        if (auto why = engine_rejects(eo); !why.empty()) return bad("--device: " + why);
    }
    if (opt.precision != Precision::fp32 && opt.device == "cpu")
        return bad("--precision " + precision + " needs a CUDA --device (cuda or cuda:N)");
    if (auto why = engine_rejects(engine_options(opt)); !why.empty()) return bad(why);

    std::error_code ec;
    if (!fs::exists(opt.suite, ec)) return bad("--suite: no such folder '" + suite + "'");
    if (!fs::is_directory(opt.suite, ec)) return bad("--suite: '" + suite + "' is not a folder");
    if (!opt.expect_pass.empty()) {
        std::ifstream in(opt.expect_pass);
        if (!in || fs::is_directory(opt.expect_pass, ec))
            return bad("--expect-pass: cannot read '" + opt.expect_pass + "'");
        for (std::string line; std::getline(in, line);) {
            if (line.empty() || line[0] == '#') continue;
            opt.must_pass.insert(line);
        }
    }
    // Last, as it may create the file: it must be writable now, not only after the run.
    if (!opt.json.empty()) {
        std::FILE* f = std::fopen(opt.json.c_str(), "a");
        if (!f) return bad("--json: cannot write '" + opt.json + "': " + std::strerror(errno));
        std::fclose(f);
    }
    return -1;
}

/// "1 test", "2 tests".
std::string tests_count(int n) { return std::to_string(n) + (n == 1 ? " test" : " tests"); }

/// Writes the --json document; false (with errno's reason in `why`) when it could not be written.
bool write_json(const Options& opt, const std::vector<Result>& results, int passed, int failed,
                int broken, int unsupported, int not_run, int crashed, std::string& why) {
    bench::Json tests = bench::Json::array();
    for (const auto& r : results)
        tests.push_back({{"name", r.name},
                         {"status", outcome_name(r.outcome)},
                         {"ms", r.ms},
                         {"detail", r.detail}});
    const bench::Json doc = {{"suite", opt.suite.string()}, {"passed", passed},
                             {"failed", failed},            {"broken", broken},
                             {"unsupported", unsupported},  {"not_run", not_run},
                             {"crashed", crashed},          {"tests", std::move(tests)}};
    errno = 0;
    std::ofstream out(opt.json, std::ios::trunc);
    out << bench::json_text(doc) << "\n";
    out.close();
    if (!out) why = errno ? std::strerror(errno) : "write failed";
    return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    if (const int rc = parse_command_line(argc, argv, opt); rc >= 0) return rc;
    const std::regex filter(opt.filter.empty() ? ".*" : opt.filter);

    std::vector<fs::path> tests;
    int not_run = 0;
    try {
        for (const auto& ent : fs::directory_iterator(opt.suite))
            if (ent.is_directory() && fs::exists(ent.path() / "model.onnx")) {
                if (std::regex_search(ent.path().filename().string(), filter)) tests.push_back(ent.path());
                else ++not_run;
            }
    } catch (const fs::filesystem_error& e) {
        std::cerr << kProgram << ": cannot list --suite '" << opt.suite.string() << "': "
                  << e.code().message() << "\n";
        return 1;
    }
    std::sort(tests.begin(), tests.end());

    std::vector<Result> results;
    int passed = 0, failed = 0, broken = 0, unsupported = 0, crashed = 0;
    for (const auto& t : tests) {
        Result r = opt.fork ? run_isolated(t, opt) : run_test(t, opt);
        switch (r.outcome) {
            case Outcome::pass: ++passed; break;
            case Outcome::fail: ++failed; break;
            case Outcome::broken: ++broken; break;
            case Outcome::unsupported: ++unsupported; break;
        }
        if (r.crashed) ++crashed;
        if (!opt.quiet || r.outcome == Outcome::fail || r.outcome == Outcome::broken) {
            std::cout << outcome_name(r.outcome) << " " << r.name;
            if (!r.detail.empty()) std::cout << ": " << r.detail;
            std::cout << "\n";
        }
        results.push_back(std::move(r));
    }

    // Why the run fails, for the last stderr line (empty: it passes).
    std::vector<std::string> problems;
    if (tests.empty()) {
        const std::string suite = "'" + opt.suite.string() + "'";
        if (not_run > 0)
            problems.push_back("--filter '" + opt.filter + "' matches none of the " +
                               tests_count(not_run) + " in " + suite);
        else if (fs::exists(opt.suite / "model.onnx"))
            problems.push_back(suite + " is one test (it holds model.onnx), not a suite: pass "
                               "its parent folder and --filter '^" +
                               opt.suite.filename().string() + "$'");
        else
            problems.push_back("no tests in " + suite +
                               " (a test is a subfolder holding model.onnx)");
    } else if (unsupported == static_cast<int>(tests.size())) {
        problems.push_back("no test ran: all " + std::to_string(unsupported) + " are unsupported");
    }
    if (!tests.empty()) {
        if (!opt.expect_pass.empty()) {
            int regressions = 0;
            std::set<std::string> seen;
            for (const auto& r : results) {
                seen.insert(r.name);
                if (opt.must_pass.count(r.name) && r.outcome != Outcome::pass) {
                    std::cout << "REGRESSION " << r.name << ": " << r.detail << "\n";
                    ++regressions;
                }
            }
            for (const auto& m : opt.must_pass)
                if (std::regex_search(m, filter) && !seen.count(m)) {
                    std::cout << "MISSING " << m << " (listed as must-pass, not found)\n";
                    ++regressions;
                }
            std::cout << "must-pass list: " << opt.must_pass.size() << " tests, " << regressions
                      << " regressions\n";
            if (regressions > 0)
                problems.push_back(std::to_string(regressions) + " must-pass " +
                                   (regressions == 1 ? "test" : "tests") + " regressed");
            if (crashed > 0) problems.push_back(tests_count(crashed) + " crashed or hung");
        } else if (failed > 0) {
            problems.push_back(tests_count(failed) + " failed" +
                               (crashed > 0 ? " (" + std::to_string(crashed) + " crashed or hung)"
                                            : std::string()));
        }
        if (broken > 0) problems.push_back("broken data in " + tests_count(broken));
        if (crashed > 0) std::cout << crashed << " tests crashed or hung\n";
        std::cout << passed << " passed, " << failed << " failed, " << unsupported + not_run
                  << " skipped (" << unsupported << " unsupported, " << not_run << " not run), "
                  << broken << " broken data\n";
    }
    if (!opt.json.empty()) {
        std::string why;
        if (!write_json(opt, results, passed, failed, broken, unsupported, not_run, crashed, why))
            problems.push_back("cannot write --json '" + opt.json + "': " + why);
    }
    std::cout.flush();
    if (problems.empty()) return 0;
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    std::cerr << kProgram << ": " << all << "\n";
    return 1;
}
