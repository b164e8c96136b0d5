// The malformed-model corpus (tests/unit/bad_models.hpp) and the truncation / bit-flip sweeps:
// every model is loaded in a forked child (a crash or hang is a failure of that case, not the
// end of the suite), which reports the ErrorCode it got, its load time and its peak memory
// growth. Corpus cases must give exactly their declared code within 1 s and 64 MiB; sweep
// inputs must end in a typed error (never `internal`, never a crash or hang) or a valid load
// that also survives one run.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "unit/bad_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // slower, and shadow memory/quarantine inflate the RSS
#else
constexpr bool kSanitized = false;
#endif
/// The corpus bounds: 1 s and 64 MiB per load (5 s and unchecked memory under a sanitizer).
constexpr double kMaxLoadMs = kSanitized ? 5000.0 : 1000.0;
constexpr double kMaxLoadMiB = 64.0;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- the child process ------------------------------------------------------------------------

/// Makes a forked child safe and bounded: one OpenMP thread (libgomp's pool does not survive
/// fork(); the engine's own runs use EngineOptions::num_threads = 1 too) and, outside sanitizer
/// builds, an address-space cap so a runaway allocation fails instead of exhausting the machine.
void child_setup() {
    // Catch2's fatal-signal handlers would report (and print the parent's results) from the
    // child: a crash must end the child with its signal, for the parent to see.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT}) ::signal(sig, SIG_DFL);
    using SetThreads = void (*)(int);
    if (auto f = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) f(1);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    long vm_kb = 0;
    std::ifstream st("/proc/self/status");
    for (std::string line; std::getline(st, line);)
        if (line.rfind("VmSize:", 0) == 0) vm_kb = std::atol(line.c_str() + 7);
    if (vm_kb > 0) {
        struct rlimit r {};
        r.rlim_cur = r.rlim_max = static_cast<rlim_t>(vm_kb) * 1024 + (rlim_t{4} << 30);
        ::setrlimit(RLIMIT_AS, &r);
    }
#endif
}

/// A value of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 when unavailable.
long status_kb(const char* key) {
    std::ifstream st("/proc/self/status");
    const std::string k = std::string(key) + ":";
    for (std::string line; std::getline(st, line);)
        if (line.rfind(k, 0) == 0) return std::atol(line.c_str() + k.size());
    return -1;
}

/// Peak resident-memory growth from construction to growth_kb(): resets the kernel's peak RSS
/// (VmHWM, via /proc/self/clear_refs) and compares the new peak with the RSS at the start;
/// falls back to getrusage's ru_maxrss when the reset is not available.
class PeakMemory {
public:
    PeakMemory() {
        const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            reset_ = ::write(fd, "5", 1) == 1;
            ::close(fd);
        }
        base_kb_ = reset_ ? status_kb("VmRSS") : maxrss_kb();
        if (base_kb_ < 0) reset_ = false, base_kb_ = maxrss_kb();
    }
    long growth_kb() const {
        const long peak = reset_ ? status_kb("VmHWM") : maxrss_kb();
        return std::max(0L, peak - base_kb_);
    }

private:
    static long maxrss_kb() {
        struct rusage ru {};
        ::getrusage(RUSAGE_SELF, &ru);
        return ru.ru_maxrss;
    }
    bool reset_ = false;
    long base_kb_ = 0;
};

void write_all(int fd, const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
        const ssize_t w = ::write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) ::_exit(3);
        c += w;
        n -= static_cast<std::size_t>(w);
    }
}

// ---- forked jobs --------------------------------------------------------------------------------

/// A job's end as the parent saw it.
struct JobResult {
    pid_t pid = 0;
    std::string data;        ///< everything the child wrote to its pipe
    bool timed_out = false;  ///< silent for longer than the idle timeout: killed
    int signal = 0;          ///< the signal that ended it (crash), 0 if it exited
    int exit_code = 0;
    bool clean() const { return !timed_out && signal == 0 && exit_code == 0; }
    std::string describe() const {
        if (timed_out) return "hung (killed after the timeout)";
        if (signal != 0) return std::string("crashed with signal ") + std::to_string(signal) + " (" +
                                ::strsignal(signal) + ")";
        if (exit_code != 0) return "exited with status " + std::to_string(exit_code);
        return "ok";
    }
};

/// Runs each job in a forked child (at most `parallel` at once); a job writes its results to
/// the fd it is given. A child silent for `idle_timeout_s` is killed.
std::vector<JobResult> run_jobs(const std::vector<std::function<void(int)>>& jobs, int parallel,
                                double idle_timeout_s) {
    struct Active {
        std::size_t job;
        pid_t pid;
        int fd;
        Clock::time_point last;
    };
    std::vector<JobResult> results(jobs.size());
    std::vector<Active> active;
    std::size_t next = 0;
    auto finish = [&](std::size_t i, bool kill_it) {
        Active a = active[i];
        if (kill_it) {
            ::kill(a.pid, SIGKILL);
            results[a.job].timed_out = true;
        }
        int status = 0;
        while (::waitpid(a.pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!kill_it) {
            if (WIFSIGNALED(status)) results[a.job].signal = WTERMSIG(status);
            else if (WIFEXITED(status)) results[a.job].exit_code = WEXITSTATUS(status);
        }
        ::close(a.fd);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    };
    while (next < jobs.size() || !active.empty()) {
        while (next < jobs.size() && static_cast<int>(active.size()) < parallel) {
            int p[2];
            REQUIRE(::pipe(p) == 0);
            std::fflush(stdout);
            std::fflush(stderr);
            const pid_t pid = ::fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {
                ::close(p[0]);
                for (const auto& a : active) ::close(a.fd);  // other children's pipes
                ::signal(SIGPIPE, SIG_DFL);
                child_setup();
                jobs[next](p[1]);
                ::close(p[1]);
                ::_exit(0);
            }
            ::close(p[1]);
            results[next].pid = pid;
            active.push_back({next, pid, p[0], Clock::now()});
            ++next;
        }
        std::vector<pollfd> fds;
        for (const auto& a : active) fds.push_back({a.fd, POLLIN, 0});
        const int n = ::poll(fds.data(), fds.size(), 100);
        if (n < 0 && errno != EINTR) FAIL("poll failed");
        for (std::size_t i = active.size(); i-- > 0;) {
            if (n > 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                char buf[1 << 16];
                const ssize_t r = ::read(active[i].fd, buf, sizeof buf);
                if (r > 0) {
                    results[active[i].job].data.append(buf, static_cast<std::size_t>(r));
                    active[i].last = Clock::now();
                    continue;
                }
                if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                    finish(i, false);
                    continue;
                }
            }
            if (seconds_since(active[i].last) > idle_timeout_s) finish(i, true);
        }
    }
    return results;
}

// ---- one model load in a child ------------------------------------------------------------------

struct LoadOutcome {
    JobResult job;
    bool reported = false;
    ErrorCode code = ErrorCode::internal;
    double ms = 0;
    double mem_mib = 0;
    std::string message;
};

struct LoadReport {
    std::uint8_t code;
    std::uint8_t untyped;  // a non-dsinfer exception escaped
    double ms;
    long mem_kb;
    std::uint32_t message_size;
};

EngineOptions child_options(const ModelLimits& limits) {
    EngineOptions o;
    o.num_threads = 1;
    o.limits = limits;
    return o;
}

/// Loads dir/model.onnx with InferenceEngine::load in a forked child (after loading a warm-up
/// model, so one-time initialization is not counted) within `timeout_s`.
LoadOutcome load_in_child(const fs::path& model, const fs::path& warmup, const ModelLimits& limits,
                          double timeout_s = kSanitized ? 20.0 : 5.0) {
    auto job = [&](int fd) {
        try {
            (void)InferenceEngine::load(warmup, child_options({}));
        } catch (...) {
        }
        LoadReport r{};
        std::string msg;
        PeakMemory mem;
        const auto t0 = Clock::now();
        try {
            auto e = InferenceEngine::load(model, child_options(limits));
            r.code = static_cast<std::uint8_t>(ErrorCode::ok);
            r.ms = seconds_since(t0) * 1e3;
            r.mem_kb = mem.growth_kb();
        } catch (const Error& e) {
            r.ms = seconds_since(t0) * 1e3;
            r.mem_kb = mem.growth_kb();
            r.code = static_cast<std::uint8_t>(e.code());
            msg = e.message();
        } catch (const std::exception& e) {
            r.ms = seconds_since(t0) * 1e3;
            r.code = static_cast<std::uint8_t>(ErrorCode::internal);
            r.untyped = 1;
            msg = std::string("untyped exception: ") + e.what();
        }
        if (msg.size() > 4000) msg.resize(4000);
        r.message_size = static_cast<std::uint32_t>(msg.size());
        write_all(fd, &r, sizeof r);
        write_all(fd, msg.data(), msg.size());
    };
    LoadOutcome out;
    out.job = run_jobs({job}, 1, timeout_s).front();
    if (out.job.data.size() >= sizeof(LoadReport)) {
        LoadReport r;
        std::memcpy(&r, out.job.data.data(), sizeof r);
        out.reported = true;
        out.code = static_cast<ErrorCode>(r.code);
        out.ms = r.ms;
        out.mem_mib = static_cast<double>(r.mem_kb) / 1024.0;
        out.message = out.job.data.substr(sizeof r, r.message_size);
    }
    return out;
}

struct TempDir {
    fs::path path;
    TempDir() {
        static int counter = 0;
        path = fs::temp_directory_path() /
               ("dsinfer_bad_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

/// A warm-up model (the valid Relu model) written once per process.
const fs::path& warmup_model() {
    static TempDir dir;
    static const fs::path p = [] {
        bad::write_model(dir.path, relu_model());
        return dir.path / kBadModelFile;
    }();
    return p;
}

}  // namespace

// ---- the corpus -----------------------------------------------------------------------------------

TEST_CASE("bad models: the corpus has >= 150 uniquely named cases over sections A-D",
          "[bad_models]") {
    const auto cases = bad_model_cases();
    CHECK(cases.size() >= 150);
    std::set<std::string> names;
    std::map<char, int> per_section;
    for (const auto& c : cases) {
        INFO(c.name);
        CHECK(names.insert(c.name).second);
        CHECK(!c.name.empty());
        CHECK(c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
        CHECK(!c.description.empty());
        CHECK(c.description.find('\n') == std::string::npos);
        CHECK(c.expected != ErrorCode::internal);
        CHECK(static_cast<bool>(c.write));
        per_section[c.section]++;
    }
    for (char s : {'A', 'B', 'C', 'D'}) {
        INFO("section " << s);
        CHECK(per_section[s] >= 10);
    }
    CHECK(per_section.size() == 4);
    for (const auto& b : valid_base_models()) CHECK(names.count(b.name) == 0);
}

TEST_CASE("bad models: the valid base models load", "[bad_models]") {
    for (const auto& c : valid_base_models()) {
        TempDir dir;
        c.write(dir.path);
        const LoadOutcome o = load_in_child(dir.path / kBadModelFile, warmup_model(), c.limits);
        INFO(c.name << ": " << c.description << " -> " << o.job.describe() << " " << o.message);
        REQUIRE(o.reported);
        CHECK(o.code == ErrorCode::ok);
    }
}

TEST_CASE("bad models: every case gives its declared code within 1 s and 64 MiB",
          "[bad_models]") {
    const auto cases = bad_model_cases();
    std::map<ErrorCode, int> by_code;
    std::vector<std::pair<double, std::string>> mem, time;
    for (const auto& c : cases) {
        TempDir dir;
        c.write(dir.path);
        const LoadOutcome o = load_in_child(dir.path / kBadModelFile, warmup_model(), c.limits);
        INFO(c.section << " " << c.name << ": " << c.description);
        INFO("child: " << o.job.describe() << "; got " << to_string(o.code) << " in " << o.ms
                       << " ms, +" << o.mem_mib << " MiB: " << o.message);
        CHECK(o.job.clean());
        REQUIRE(o.reported);
        CHECK(o.code == c.expected);
        CHECK(o.ms <= kMaxLoadMs);
        if (!kSanitized) CHECK(o.mem_mib <= kMaxLoadMiB);
        if (!c.mention.empty() && o.code != ErrorCode::ok) CHECK_THAT(o.message, Catch::Contains(c.mention));
        by_code[o.code]++;
        mem.emplace_back(o.mem_mib, c.name);
        time.emplace_back(o.ms, c.name);
    }
    std::sort(mem.rbegin(), mem.rend());
    std::sort(time.rbegin(), time.rend());
    std::ostringstream os;
    os << "bad models: " << cases.size() << " cases;";
    for (const auto& [code, n] : by_code) os << " " << to_string(code) << "=" << n;
    os << "\n  slowest loads (ms):";
    for (std::size_t i = 0; i < std::min<std::size_t>(5, time.size()); ++i)
        os << " " << time[i].second << " " << time[i].first << ";";
    os << "\n  most memory (MiB):";
    for (std::size_t i = 0; i < std::min<std::size_t>(5, mem.size()); ++i)
        os << " " << mem[i].second << " " << mem[i].first << ";";
    os << "\n";
    std::fputs(os.str().c_str(), stdout);
}

// ---- sweeps ---------------------------------------------------------------------------------------

namespace {

constexpr std::uint8_t kNotRun = 200;    // the load failed (as it may) or inputs were symbolic
constexpr std::uint8_t kUntyped = 201;   // a non-dsinfer exception escaped
constexpr std::uint8_t kSkipLarge = 202; // declared inputs too large to generate

#pragma pack(push, 1)
struct SweepRecord {
    std::uint32_t index;
    std::uint8_t load;  // ErrorCode, or kUntyped
    std::uint8_t run;   // ErrorCode of the run after a valid load, or kNotRun / kSkipLarge
};
#pragma pack(pop)

struct SweepFailure {
    std::uint32_t index;
    std::string what;
};

/// Where the file-reader variants write their scratch files: /dev/shm when available (a disk
/// file rewritten 20,000 times waits on the file system's writeback).
fs::path scratch_dir() {
    std::error_code ec;
    if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
    return fs::temp_directory_path();
}
fs::path scratch_file_of(pid_t pid) {
    return scratch_dir() / ("dsinfer_sweep_" + std::to_string(pid) + ".onnx");
}
/// This (child) process's scratch model file.
const fs::path& scratch_file() {
    static const fs::path p = scratch_file_of(::getpid());
    return p;
}

constexpr std::uint32_t kFlush = 64;

struct SweepResult {
    std::vector<SweepRecord> records;
    std::vector<SweepFailure> failures;  // crashes and hangs, at the index that caused them
};

/// Runs item(i) for i in [0, count) in forked children (chunks of `chunk`, `parallel` at a
/// time). A child that crashes or hangs is restarted after the offending index.
SweepResult sweep(std::uint32_t count, std::uint32_t chunk, int parallel, double idle_timeout_s,
                  const std::function<SweepRecord(std::uint32_t)>& item) {
    SweepResult out;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
    for (std::uint32_t a = 0; a < count; a += chunk) ranges.emplace_back(a, std::min(count, a + chunk));
    while (!ranges.empty()) {
        std::vector<std::function<void(int)>> jobs;
        for (const auto& [a, b] : ranges) {
            jobs.push_back([a = a, b = b, &item](int fd) {
                std::vector<SweepRecord> buf;
                for (std::uint32_t i = a; i < b; ++i) {
                    buf.push_back(item(i));
                    if (buf.size() == kFlush || i + 1 == b) {
                        write_all(fd, buf.data(), buf.size() * sizeof(SweepRecord));
                        buf.clear();
                    }
                }
            });
        }
        // Records are flushed in groups of kFlush: after a crash the offending index is found by
        // re-running the unreported ones one at a time.
        const auto results = run_jobs(jobs, parallel, idle_timeout_s);
        for (const auto& r : results) {  // scratch files of the file-reader variants
            std::error_code ec;
            fs::remove(scratch_file_of(r.pid), ec);
        }
        std::vector<std::pair<std::uint32_t, std::uint32_t>> again;
        for (std::size_t j = 0; j < results.size(); ++j) {
            const auto& r = results[j];
            const std::size_t n = r.data.size() / sizeof(SweepRecord);
            for (std::size_t k = 0; k < n; ++k) {
                SweepRecord rec;
                std::memcpy(&rec, r.data.data() + k * sizeof(SweepRecord), sizeof rec);
                out.records.push_back(rec);
            }
            const std::uint32_t a = ranges[j].first + static_cast<std::uint32_t>(n);
            const std::uint32_t b = ranges[j].second;
            if (r.clean() || a >= b) continue;
            if (b - a == 1 || ranges[j].second - ranges[j].first == 1) {
                out.failures.push_back({a, r.describe()});
                if (a + 1 < b) again.emplace_back(a + 1, b);
            } else {
                // The offending index is among the next kFlush (unreported) ones.
                const std::uint32_t end = std::min(b, a + kFlush);
                for (std::uint32_t i = a; i < end; ++i) again.emplace_back(i, i + 1);
                if (end < b) again.emplace_back(end, b);
            }
        }
        ranges = std::move(again);
    }
    return out;
}

/// Generated inputs of the declared shapes (deterministic values; symbolic dims bound to 1);
/// false when an input's dtype or rank is not declared or the inputs would exceed `max_bytes`.
bool make_inputs(const InferenceEngine& e, std::vector<NamedTensor>& inputs, bool& too_large,
                 std::size_t max_bytes = 16u << 20) {
    std::size_t total = 0;
    too_large = false;
    for (const auto& in : e.inputs()) {
        if (!in.dtype || !in.shape.known || *in.dtype == DType::string) return false;
        std::vector<std::int64_t> dims;
        std::uint64_t numel = 1;
        for (const auto& dim : in.shape.dims) {
            const Dim d = dim.is_static() ? dim : Dim::fixed(1);
            dims.push_back(d.value);
            if (d.value > 0 && numel > (std::uint64_t{1} << 40) / static_cast<std::uint64_t>(d.value)) {
                too_large = true;
                return false;
            }
            numel *= static_cast<std::uint64_t>(d.value);
        }
        total += static_cast<std::size_t>(numel) * dtype_size(*in.dtype);
        if (total > max_bytes) {
            too_large = true;
            return false;
        }
        auto shape = Shape::make(dims);
        if (!shape.is_ok()) return false;
        auto t = Tensor::allocate(*in.dtype, shape.value());
        if (!t.is_ok()) return false;
        Tensor x = std::move(t).value();
        auto* bytes = static_cast<std::uint8_t*>(x.raw_data());
        if (*in.dtype == DType::f32) {
            auto* f = static_cast<float*>(x.raw_data());
            for (std::uint64_t i = 0; i < numel; ++i) f[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
        } else if (*in.dtype == DType::boolean) {
            for (std::uint64_t i = 0; i < numel; ++i) bytes[i] = static_cast<std::uint8_t>(i % 2);
        } else {
            std::memset(bytes, 0, x.num_bytes());  // integers: index 0 is valid for any dim >= 1
        }
        inputs.push_back({in.name, std::move(x)});
    }
    return true;
}

/// Loads `size` bytes of `data` (load_onnx_from_bytes + compile, or, with `via_file`, written
/// to a file and loaded by InferenceEngine::load: the streaming file reader); after a valid
/// load, runs once with generated inputs of the declared shapes.
SweepRecord load_and_run(std::uint32_t index, const char* data, std::size_t size,
                         bool via_file = false) {
    SweepRecord r{index, static_cast<std::uint8_t>(ErrorCode::ok), kNotRun};
    std::optional<InferenceEngine> engine;
    // A mutated trip count makes a Loop run for ever: bound it (resource_exhausted).
    ModelLimits limits;
    limits.max_loop_iterations = 10000;
    try {
        if (via_file) {
            {
                std::error_code ec;
                fs::remove(scratch_file(), ec);  // a new file each time, never a truncation
                std::ofstream f(scratch_file(), std::ios::binary | std::ios::trunc);
                f.write(data, static_cast<std::streamsize>(size));
            }
            engine.emplace(InferenceEngine::load(scratch_file(), child_options(limits)));
        } else {
            Graph g = load_onnx_from_bytes(data, size, {}, limits);
            engine.emplace(InferenceEngine::compile(std::move(g), child_options(limits)));
        }
    } catch (const Error& e) {
        r.load = static_cast<std::uint8_t>(e.code());
        if (e.code() == ErrorCode::internal)
            std::fprintf(stderr, "sweep input %u: load internal: %s\n", index, e.what());
        return r;
    } catch (...) {
        r.load = kUntyped;
        return r;
    }
    std::vector<NamedTensor> inputs;
    bool too_large = false;
    try {
        if (!make_inputs(*engine, inputs, too_large)) {
            if (too_large) r.run = kSkipLarge;
            return r;
        }
        RunOptions ro;
        ro.deadline = Clock::now() + std::chrono::milliseconds(kSanitized ? 2000 : 500);
        std::vector<NamedTensor> outputs;
        const Status st = engine->try_run(inputs, outputs, ro);
        r.run = static_cast<std::uint8_t>(st.code());
        if (st.code() == ErrorCode::internal)  // a bug: say which, for the failure report
            std::fprintf(stderr, "sweep input %u: run internal: %s\n", index, st.message().c_str());
    } catch (...) {
        r.run = kUntyped;
    }
    return r;
}

std::string code_name(std::uint8_t c) {
    if (c == kNotRun) return "not_run";
    if (c == kUntyped) return "UNTYPED_EXCEPTION";
    if (c == kSkipLarge) return "skipped_large_inputs";
    return std::string(to_string(static_cast<ErrorCode>(c)));
}

struct SweepModel {
    std::string name;
    std::string bytes;
};

/// The builder models the sweeps use (valid; each loads).
std::vector<SweepModel> sweep_models() {
    return {{"mlp", bytes_of(bad::mlp_model())},
            {"if", bytes_of(bad::if_model())},
            {"many_initializers", bytes_of(bad::many_initializers_model())},
            {"loop", bytes_of(bad::loop_model())},
            {"scan", bytes_of(bad::scan_model())},
            {"conv", bytes_of(bad::conv_model())}};
}

/// models/digits/digits.onnx of the source tree, when this file is compiled from it.
std::string digits_model_bytes() {
    const fs::path p = fs::path(__FILE__).parent_path() / ".." / ".." / "models" / "digits" / "digits.onnx";
    std::ifstream f(p, std::ios::binary);
    if (!f) return {};
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
}

void report(const std::string& title, const SweepResult& r, double seconds) {
    std::map<std::string, std::size_t> load, run;
    for (const auto& rec : r.records) {
        load[code_name(rec.load)]++;
        if (rec.load == static_cast<std::uint8_t>(ErrorCode::ok)) run[code_name(rec.run)]++;
    }
    std::ostringstream os;
    os << title << ": " << r.records.size() << " loads in " << seconds << " s; load:";
    for (const auto& [k, n] : load) os << " " << k << "=" << n;
    os << "; run after a valid load:";
    for (const auto& [k, n] : run) os << " " << k << "=" << n;
    os << "; crashes/hangs: " << r.failures.size() << "\n";
    std::fputs(os.str().c_str(), stdout);
}

void check_sweep(const SweepResult& r, std::uint32_t expected_count) {
    CHECK(r.records.size() + r.failures.size() == expected_count);
    for (const auto& f : r.failures) {
        INFO("input " << f.index << ": " << f.what);
        CHECK(false);
    }
    std::size_t bad = 0;
    for (const auto& rec : r.records) {
        const bool load_bad = rec.load == kUntyped || rec.load == static_cast<std::uint8_t>(ErrorCode::internal);
        const bool run_bad = rec.run == kUntyped || rec.run == static_cast<std::uint8_t>(ErrorCode::internal);
        if ((load_bad || run_bad) && bad++ < 20) {
            INFO("input " << rec.index << ": load " << code_name(rec.load) << ", run " << code_name(rec.run));
            CHECK(false);
        }
    }
    CHECK(bad == 0);
}

}  // namespace

// Truncation: every prefix (0..N bytes) of valid models through load_onnx_from_bytes + compile,
// and again through the streaming file reader (InferenceEngine::load).
// A strict prefix must be a typed error; it may also be a valid load when the cut falls between
// top-level fields so that the prefix is itself a complete, smaller model (e.g. one that has lost
// trailing opset imports or metadata): then it must have compiled (the load includes compile) and
// is counted as "ok" in the report. The whole model must load.
TEST_CASE("sweep: every truncation of valid models is a typed error or a valid load",
          "[bad_models][sweep]") {
    std::vector<SweepModel> models = sweep_models();
    const std::string digits = digits_model_bytes();
    if (!digits.empty()) models.push_back({"digits", digits});
    else WARN("models/digits/digits.onnx not found next to the sources: builder models only");
    const auto t0 = Clock::now();
    std::size_t total = 0;
    for (const auto& m : models) {
        INFO("model " << m.name << " (" << m.bytes.size() << " bytes)");
        const auto n = static_cast<std::uint32_t>(m.bytes.size() + 1);
        for (const bool via_file : {false, true}) {
            INFO((via_file ? "file reader (InferenceEngine::load)" : "load_onnx_from_bytes + compile"));
            const auto t1 = Clock::now();
            SweepResult r = sweep(n, 2048, 2, 10.0, [&m, via_file](std::uint32_t len) {
                return load_and_run(len, m.bytes.data(), len, via_file);
            });
            const std::string title =
                std::string("truncation ") + (via_file ? "(file) " : "(bytes) ") + m.name;
            report(title, r, seconds_since(t1));
            check_sweep(r, n);
            total += n;
            std::size_t partial_ok = 0, full = 0;
            for (const auto& rec : r.records) {
                if (rec.index == m.bytes.size()) {
                    ++full;
                    CHECK(rec.load == static_cast<std::uint8_t>(ErrorCode::ok));
                } else if (rec.load == static_cast<std::uint8_t>(ErrorCode::ok)) {
                    ++partial_ok;
                }
            }
            CHECK(full == 1);
            if (partial_ok > 0)
                std::printf("%s: %zu strict prefixes are complete smaller models (compiled)\n",
                            title.c_str(), partial_ok);
        }
    }
    std::printf("truncation: %zu prefixes in %.1f s\n", total, seconds_since(t0));
}

namespace {

/// Mutation `i` of `bytes`: a single bit flip, or the byte replaced by 0x00, 0xFF or a random
/// value, at a random position (seeded by `seed` and i). Even mutations are loaded from memory,
/// odd ones from a file (the streaming reader).
std::string mutate(const std::string& bytes, std::uint64_t seed, std::uint32_t i) {
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + i);
    std::string m = bytes;
    const std::size_t pos = static_cast<std::size_t>(rng() % m.size());
    auto& b = reinterpret_cast<unsigned char&>(m[pos]);
    switch (rng() % 4) {
        case 0: b = static_cast<unsigned char>(b ^ (1u << (rng() % 8))); break;
        case 1: b = 0x00; break;
        case 2: b = 0xff; break;
        default: b = static_cast<unsigned char>(rng() & 0xff); break;
    }
    return m;
}

void bitflip_sweep(const std::vector<SweepModel>& models, std::uint32_t per_model, std::uint64_t seed) {
    for (const auto& m : models) {
        INFO("model " << m.name << " (" << m.bytes.size() << " bytes), seed " << seed);
        const auto t1 = Clock::now();
        SweepResult r = sweep(per_model, 1024, 2, 10.0, [&m, seed](std::uint32_t i) {
            const std::string x = mutate(m.bytes, seed, i);
            return load_and_run(i, x.data(), x.size(), /*via_file=*/i % 2 == 1);
        });
        report("bit flips " + m.name, r, seconds_since(t1));
        check_sweep(r, per_model);
    }
}

}  // namespace

// Bit flips: >= 100,000 seeded mutations over the builder models, in three test cases (each
// well under a minute on two cores).
TEST_CASE("sweep: bit flips in MLP and If models (34000 mutations)", "[bad_models][sweep]") {
    const auto all = sweep_models();
    bitflip_sweep({all[0], all[1]}, 17000, 1);
}

TEST_CASE("sweep: bit flips in many-initializer and Loop models (34000 mutations)",
          "[bad_models][sweep]") {
    const auto all = sweep_models();
    bitflip_sweep({all[2], all[3]}, 17000, 2);
}

TEST_CASE("sweep: bit flips in Scan and Conv models (34000 mutations)", "[bad_models][sweep]") {
    const auto all = sweep_models();
    bitflip_sweep({all[4], all[5]}, 17000, 3);
}
