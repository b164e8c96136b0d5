// ds-conformance: runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_N.pb)
// through InferenceEngine and compares outputs the way onnx's runner does
// (|actual - expected| <= atol + rtol * |expected|, NaN equal to NaN, exact shapes/dtypes).
//
//   ds-conformance --suite DIR [--filter REGEX] [--rtol X] [--atol Y] [--json FILE]
//                  [--expect-pass FILE] [--timeout SECONDS] [--no-fork] [--quiet]
//                  [--backends LIST]   (comma-separated EngineOptions::backends, e.g. cpu)
//                  [--device D]        (EngineOptions::device: cpu (default), cuda, cuda:N;
//                                       on a GPU, unsupported nodes run on the CPU)
//                  [--precision P]     (EngineOptions::precision on a GPU: fp32, tf32, fp16,
//                                       bf16; pass the tolerances that go with it)
//                  [--compare-levels]  (a test that passes at the default optimization level
//                                       also runs at level 0; outputs must agree within
//                                       1e-4 relative + 1e-5 absolute, NaNs in the same
//                                       places, integers exactly; a mismatch is a failure)
//
// Each test runs in a forked child with a timeout, so a crash or hang is reported as a failure
// of that test (and makes the exit status non-zero) instead of ending the run.
#include <dsinfer/dsinfer.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "onnx_test_data.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

enum class Outcome { pass, fail, unsupported };

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
    std::optional<InferenceEngine> engine;
    try {
        EngineOptions eo;
        eo.backends = opt.backends;
        eo.device = opt.device;
        eo.precision = opt.precision;
        engine.emplace(InferenceEngine::load(dir / "model.onnx", eo));
    } catch (const Error& e) {
        return finish(e.code() == ErrorCode::unsupported ? Outcome::unsupported : Outcome::fail,
                      "load: " + std::string(e.what()));
    }
    std::vector<fs::path> sets;
    for (const auto& ent : fs::directory_iterator(dir))
        if (ent.is_directory() && ent.path().filename().string().rfind("test_data_set_", 0) == 0)
            sets.push_back(ent.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) return finish(Outcome::unsupported, "no test_data_set_* folder");
    std::string unchecked, stats;
    // Per test-data set: inputs and the default level's outputs (for --compare-levels).
    std::vector<std::vector<NamedTensor>> set_inputs, set_outputs;
    for (const auto& set : sets) {
        auto in_files = dsinfer::tools::numbered_pb_files(set, "input_");
        auto out_files = dsinfer::tools::numbered_pb_files(set, "output_");
        const auto& ins = engine->inputs();
        if (in_files.size() > ins.size())
            return finish(Outcome::fail, std::to_string(in_files.size()) + " input files for " +
                                             std::to_string(ins.size()) + " graph inputs");
        std::vector<NamedTensor> inputs;
        for (std::size_t i = 0; i < in_files.size(); ++i) {
            try {
                inputs.push_back({ins[i].name, load_tensor_proto(in_files[i])});
            } catch (const Error& e) {
                return finish(Outcome::unsupported, "input " + std::to_string(i) + ": " + e.what());
            }
        }
        std::vector<NamedTensor> outputs;
        Status st = engine->try_run(inputs, outputs);
        if (!st.is_ok())
            return finish(st.code() == ErrorCode::unsupported ? Outcome::unsupported : Outcome::fail,
                          "run: " + st.to_string());
        if (out_files.size() > outputs.size())
            return finish(Outcome::fail, std::to_string(out_files.size()) + " reference outputs for " +
                                             std::to_string(outputs.size()) + " graph outputs");
        for (std::size_t j = 0; j < out_files.size(); ++j) {
            Tensor expected;
            try {
                expected = load_tensor_proto(out_files[j]);
            } catch (const Error& e) {
                return finish(Outcome::unsupported, "output " + std::to_string(j) + ": " + e.what());
            }
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
        for (std::size_t j = out_files.size(); j < outputs.size(); ++j)
            unchecked += (unchecked.empty() ? "" : ", ") + outputs[j].name;
        if (opt.compare_levels) {
            set_inputs.push_back(std::move(inputs));
            set_outputs.push_back(std::move(outputs));
        }
    }
    if (opt.compare_levels) {
        std::optional<InferenceEngine> plain;
        try {
            EngineOptions eo;
            eo.backends = opt.backends;
            eo.device = opt.device;
            eo.precision = opt.precision;
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
                                                     sets[s].filename().string() + " output " +
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

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\', o += c;
        else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
        else o += c;
    }
    return o;
}

int usage() {
    std::cerr << "usage: ds-conformance --suite DIR [--filter REGEX] [--rtol X] [--atol Y]\n"
                 "                      [--json FILE] [--expect-pass FILE] [--timeout S]\n"
                 "                      [--no-fork] [--quiet] [--stats] [--backends LIST]\n"
                 "                      [--compare-levels] [--device cpu|cuda|cuda:N]\n"
                 "                      [--precision fp32|tf32|fp16|bf16]\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw std::runtime_error("missing value for " + a);
            return argv[++i];
        };
        try {
            if (a == "--suite") opt.suite = next();
            else if (a == "--filter") opt.filter = next();
            else if (a == "--rtol") opt.rtol = std::stod(next());
            else if (a == "--atol") opt.atol = std::stod(next());
            else if (a == "--json") opt.json = next();
            else if (a == "--expect-pass") opt.expect_pass = next();
            else if (a == "--timeout") opt.timeout_s = std::stoi(next());
            else if (a == "--no-fork") opt.fork = false;
            else if (a == "--quiet") opt.quiet = true;
            else if (a == "--stats") opt.stats = true;
            else if (a == "--compare-levels") opt.compare_levels = true;
            else if (a == "--device") opt.device = next();
            else if (a == "--precision") {
                const std::string p = next();
                if (p == "fp32") opt.precision = Precision::fp32;
                else if (p == "tf32") opt.precision = Precision::tf32;
                else if (p == "fp16") opt.precision = Precision::fp16;
                else if (p == "bf16") opt.precision = Precision::bf16;
                else throw std::runtime_error("--precision must be fp32, tf32, fp16 or bf16");
            }
            else if (a == "--backends") {
                std::stringstream list(next());
                for (std::string b; std::getline(list, b, ',');) opt.backends.push_back(b);
            }
            else if (a == "--help" || a == "-h") return usage();
            else {
                std::cerr << "unknown argument: " << a << "\n";
                return usage();
            }
        } catch (const std::exception& e) {
            std::cerr << e.what() << "\n";
            return usage();
        }
    }
    if (opt.suite.empty()) return usage();
    if (!fs::is_directory(opt.suite)) {
        std::cerr << "suite folder not found: " << opt.suite << "\n";
        return 2;
    }
    std::regex filter;
    try {
        filter = std::regex(opt.filter.empty() ? ".*" : opt.filter);
    } catch (const std::regex_error& e) {
        std::cerr << "bad --filter: " << e.what() << "\n";
        return 2;
    }
    std::vector<fs::path> tests;
    for (const auto& ent : fs::directory_iterator(opt.suite))
        if (ent.is_directory() && fs::exists(ent.path() / "model.onnx") &&
            std::regex_search(ent.path().filename().string(), filter))
            tests.push_back(ent.path());
    std::sort(tests.begin(), tests.end());

    std::vector<Result> results;
    int passed = 0, failed = 0, skipped = 0, crashed = 0;
    for (const auto& t : tests) {
        Result r = opt.fork ? run_isolated(t, opt) : run_test(t, opt);
        const char* tag = r.outcome == Outcome::pass ? "pass" : r.outcome == Outcome::fail ? "fail" : "unsupported";
        if (r.outcome == Outcome::pass) ++passed;
        else if (r.outcome == Outcome::fail) ++failed;
        else ++skipped;
        if (r.crashed) ++crashed;
        if (!opt.quiet || r.outcome == Outcome::fail) {
            std::cout << tag << " " << r.name;
            if (!r.detail.empty()) std::cout << ": " << r.detail;
            std::cout << "\n";
        }
        results.push_back(std::move(r));
    }
    int status = crashed > 0 ? 1 : 0;
    if (!opt.expect_pass.empty()) {
        std::ifstream in(opt.expect_pass);
        if (!in) {
            std::cerr << "cannot read " << opt.expect_pass << "\n";
            return 2;
        }
        std::set<std::string> must;
        std::string line;
        while (std::getline(in, line)) {
            if (line.empty() || line[0] == '#') continue;
            must.insert(line);
        }
        int regressions = 0;
        for (const auto& r : results)
            if (must.count(r.name) && r.outcome != Outcome::pass) {
                std::cout << "REGRESSION " << r.name << ": " << r.detail << "\n";
                ++regressions;
            }
        std::set<std::string> seen;
        for (const auto& r : results) seen.insert(r.name);
        for (const auto& m : must)
            if (std::regex_search(m, filter) && !seen.count(m)) {
                std::cout << "MISSING " << m << " (listed as must-pass, not found)\n";
                ++regressions;
            }
        if (regressions > 0) status = 1;
        std::cout << "must-pass list: " << must.size() << " tests, " << regressions
                  << " regressions\n";
    }
    if (!opt.json.empty()) {
        std::ofstream out(opt.json);
        out << "{\"suite\":\"" << json_escape(opt.suite.string()) << "\",\"passed\":" << passed
            << ",\"failed\":" << failed << ",\"skipped\":" << skipped << ",\"crashed\":" << crashed
            << ",\"tests\":[";
        for (std::size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            out << (i ? "," : "") << "{\"name\":\"" << r.name << "\",\"status\":\""
                << (r.outcome == Outcome::pass ? "pass" : r.outcome == Outcome::fail ? "fail" : "unsupported")
                << "\",\"ms\":" << r.ms << ",\"detail\":\"" << json_escape(r.detail) << "\"}";
        }
        out << "]}\n";
    }
    if (crashed > 0) std::cout << crashed << " tests crashed or hung\n";
    std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
    return status;
}
