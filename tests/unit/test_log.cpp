// dsinfer/log.hpp: the process-wide sink and level, EngineOptions::log (per engine, over them),
// the start-up summary at info level, warnings for what the engine tolerates, and the errors
// that replaced silent acceptance (an unknown disabled_passes name). Every case restores the
// process-wide sink and level it changed (LogGuard).
#include <catch2/catch.hpp>

#include <dsinfer/dsinfer.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

/// Messages a callback received, thread-safe.
struct Captured {
    std::mutex mu;
    std::vector<std::pair<LogLevel, std::string>> lines;

    LogCallback callback() {
        return [this](LogLevel level, std::string_view m) {
            std::lock_guard<std::mutex> lock(mu);
            lines.emplace_back(level, std::string(m));
        };
    }
    /// Messages at `level` containing `text`.
    int count(LogLevel level, const std::string& text) {
        std::lock_guard<std::mutex> lock(mu);
        int n = 0;
        for (const auto& [l, m] : lines) n += l == level && m.find(text) != std::string::npos;
        return n;
    }
    std::size_t size() {
        std::lock_guard<std::mutex> lock(mu);
        return lines.size();
    }
    std::string all() {
        std::lock_guard<std::mutex> lock(mu);
        std::string s;
        for (const auto& [l, m] : lines) s += std::string(log_level_name(l)) + ": " + m + "\n";
        return s;
    }
};

/// Restores the default process-wide sink and level when the case ends.
struct LogGuard {
    LogLevel level = log_level();
    ~LogGuard() {
        set_log_callback({});
        set_log_level(level);
    }
};

const std::string kSummary = std::string("dsinfer ") + version() + ": loaded ";

}  // namespace

TEST_CASE("log: an engine's callback receives the start-up summary at info", "[log]") {
    LogGuard guard;
    Captured engine_lines, global_lines;
    set_log_callback(global_lines.callback());
    EngineOptions o;
    o.num_threads = 1;
    o.log.level = LogLevel::info;
    o.log.callback = engine_lines.callback();

    SECTION("compiled from a graph") {
        const InferenceEngine e = InferenceEngine::compile(mini_mlp(), o);
        INFO(engine_lines.all());
        CHECK(engine_lines.count(LogLevel::info, kSummary + "graph 'mini_mlp' in ") == 1);
    }
    SECTION("loaded from a file: one line, naming the file") {
        const auto path = std::filesystem::temp_directory_path() /
                          ("dsinfer_log_" + std::to_string(::getpid()) + ".onnx");
        save_onnx(mini_mlp(), path);
        const InferenceEngine e = InferenceEngine::load(path, o);
        std::filesystem::remove(path);
        INFO(engine_lines.all());
        CHECK(engine_lines.count(LogLevel::info, kSummary) == 1);
        CHECK(engine_lines.count(LogLevel::info, kSummary + path.filename().string() + " in ") == 1);
    }
    INFO(engine_lines.all());
    // What load knows: nodes per provider, ISA, threads, backends, weights.
    for (const char* part : {" nodes (", ", ISA ", "(kernels ", ", threads 1 (wait spin: ",
                             "), backends ", ", precision fp32", ", weights "})
        CHECK(engine_lines.count(LogLevel::info, part) == 1);
    CHECK(engine_lines.count(LogLevel::info, std::string("(kernels ") + cpu_kernel_isa() + ")") == 1);
    // The engine's own callback took them: none reached the process-wide one.
    CHECK(global_lines.size() == 0);
}

TEST_CASE("log: levels filter, per engine and process-wide", "[log]") {
    LogGuard guard;
    Captured global_lines;
    set_log_callback(global_lines.callback());
    // An option that has no effect as given: a warning.
    EngineOptions noisy;
    noisy.shape_buckets = false;
    noisy.shape_bucket_edges = {8, 16};

    SECTION("the default level (warning) passes warnings, not the info summary") {
        CHECK(log_level() == LogLevel::warning);
        (void)InferenceEngine::compile(mini_mlp(), noisy);
        CHECK(global_lines.count(LogLevel::warning, "shape_bucket_edges are ignored") == 1);
        CHECK(global_lines.count(LogLevel::info, kSummary) == 0);
    }
    SECTION("the process-wide level at info passes the summary too") {
        set_log_level(LogLevel::info);
        (void)InferenceEngine::compile(mini_mlp(), noisy);
        CHECK(global_lines.count(LogLevel::warning, "shape_bucket_edges are ignored") == 1);
        CHECK(global_lines.count(LogLevel::info, kSummary) == 1);
    }
    SECTION("the process-wide level at error passes neither") {
        set_log_level(LogLevel::error);
        (void)InferenceEngine::compile(mini_mlp(), noisy);
        CHECK(global_lines.size() == 0);
    }
    SECTION("an engine's level beats the process-wide one, both ways") {
        set_log_level(LogLevel::error);
        EngineOptions o = noisy;
        o.log.level = LogLevel::info;  // to the process-wide sink, at the engine's level
        (void)InferenceEngine::compile(mini_mlp(), o);
        CHECK(global_lines.count(LogLevel::warning, "shape_bucket_edges are ignored") == 1);
        CHECK(global_lines.count(LogLevel::info, kSummary) == 1);
        set_log_level(LogLevel::trace);
        o.log.level = LogLevel::off;  // this engine says nothing
        (void)InferenceEngine::compile(mini_mlp(), o);
        CHECK(global_lines.size() == 2);
    }
    SECTION("debug passes the optimizer's account") {
        set_log_level(LogLevel::debug);
        (void)InferenceEngine::compile(mini_mlp());
        CHECK(global_lines.count(LogLevel::debug, "optimizer (level 3): 3 -> ") == 1);
    }
}

TEST_CASE("log: an engine's callback beats the process-wide sink", "[log]") {
    LogGuard guard;
    Captured global_lines, engine_lines;
    set_log_callback(global_lines.callback());
    set_log_level(LogLevel::info);
    EngineOptions own;
    own.log.callback = engine_lines.callback();  // level: the process-wide one (info)
    (void)InferenceEngine::compile(mini_mlp(), own);
    CHECK(engine_lines.count(LogLevel::info, kSummary) == 1);
    CHECK(global_lines.size() == 0);
    (void)InferenceEngine::compile(mini_mlp());  // no callback of its own
    CHECK(global_lines.count(LogLevel::info, kSummary) == 1);
    CHECK(engine_lines.count(LogLevel::info, kSummary) == 1);
    // The sink is read per message: a later set_log_callback applies to engines loaded before.
    set_log_callback({});
    set_log_level(LogLevel::off);
    (void)InferenceEngine::compile(mini_mlp());
    CHECK(global_lines.count(LogLevel::info, kSummary) == 1);
}

TEST_CASE("log: a callback that throws loses its message and nothing else", "[log]") {
    LogGuard guard;
    EngineOptions o;
    o.log.level = LogLevel::info;
    o.log.callback = [](LogLevel, std::string_view) { throw std::runtime_error("host logger down"); };
    const InferenceEngine e = InferenceEngine::compile(mini_mlp(), o);
    CHECK(e.run({{"x", random_f32({2, 8}, 1)}}).size() == 1);
}

TEST_CASE("log: callbacks and levels change safely while engines load on other threads", "[log]") {
    LogGuard guard;
    Captured a, b;
    std::atomic<bool> stop{false};
    std::thread flipper([&] {
        for (int i = 0; !stop.load(); ++i) {
            set_log_callback(i % 2 == 0 ? a.callback() : b.callback());
            set_log_level(i % 3 == 0 ? LogLevel::info : LogLevel::warning);
        }
    });
    std::vector<std::thread> loaders;
    for (int t = 0; t < 3; ++t)
        loaders.emplace_back([] {
            for (int i = 0; i < 5; ++i) {
                EngineOptions o;
                o.num_threads = 1;
                (void)InferenceEngine::compile(mini_mlp(), o);
            }
        });
    for (auto& t : loaders) t.join();
    stop = true;
    flipper.join();
    CHECK(a.size() + b.size() <= 15);  // at most one summary per load, each to one sink
}

TEST_CASE("log: an unknown EngineOptions::disabled_passes name is invalid_argument naming the "
          "passes",
          "[log][engine][bad]") {
    EngineOptions o;
    o.disabled_passes = {"fuse_attention", "fuse_atention"};
    try {
        (void)InferenceEngine::compile(mini_mlp(), o);
        FAIL("a misspelt pass name was accepted");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        const std::string m = e.what();
        INFO(m);
        CHECK(m.find("'fuse_atention'") != std::string::npos);
        CHECK(m.find("fuse_attention") != std::string::npos);
        CHECK(m.find("constant_folding") != std::string::npos);
    }
    // Every default pass name is accepted.
    EngineOptions all;
    for (const auto& pass : default_passes()) all.disabled_passes.emplace_back(pass->name());
    CHECK_NOTHROW(InferenceEngine::compile(mini_mlp(), all));
}

TEST_CASE("log: an unknown DSINFER_MAX_CPU_ISA warns through the process-wide sink, naming the "
          "levels",
          "[log]") {
    LogGuard guard;
    Captured lines;
    set_log_callback(lines.callback());
    const char* before = std::getenv("DSINFER_MAX_CPU_ISA");
    const std::string saved = before != nullptr ? before : "";
    const std::string bogus = "avx1024-" + std::to_string(::getpid());
    setenv("DSINFER_MAX_CPU_ISA", bogus.c_str(), 1);
    const std::string level = cpu_kernel_isa();
    const std::string again = cpu_kernel_isa();  // once per distinct value
    // An engine refuses to load with it (invalid_argument naming the variable).
    ErrorCode load = ErrorCode::ok;
    try {
        (void)InferenceEngine::compile(mini_mlp());
    } catch (const Error& e) {
        load = e.code();
    }
    if (before != nullptr) setenv("DSINFER_MAX_CPU_ISA", saved.c_str(), 1);
    else unsetenv("DSINFER_MAX_CPU_ISA");
    INFO(lines.all());
    CHECK(level == again);
    CHECK(lines.count(LogLevel::warning, "DSINFER_MAX_CPU_ISA='" + bogus + "'") == 1);
    CHECK(lines.count(LogLevel::warning, "(baseline, avx2 or avx512)") == 1);
    CHECK(load == ErrorCode::invalid_argument);
    // A valid (or absent) value says nothing.
    const std::size_t n = lines.size();
    (void)cpu_kernel_isa();
    CHECK(lines.size() == n);
}

TEST_CASE("log: level names", "[log]") {
    CHECK(std::string(log_level_name(LogLevel::trace)) == "trace");
    CHECK(std::string(log_level_name(LogLevel::debug)) == "debug");
    CHECK(std::string(log_level_name(LogLevel::info)) == "info");
    CHECK(std::string(log_level_name(LogLevel::warning)) == "warning");
    CHECK(std::string(log_level_name(LogLevel::error)) == "error");
    CHECK(std::string(log_level_name(LogLevel::off)) == "off");
}
