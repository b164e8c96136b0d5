// Whole-model benchmarks (Step 2): BERT-base (batch 1 and 8, sequence 128), ResNet-50 (batch 1
// and 8) and the MLP (batch 64) from tools/make_models.py, each on the backends
// {"onednn", "cpu"} and {"cpu"}, reporting items_per_second (samples/s).
//
//   /usr/bin/python3 tools/make_models.py --out DIR --only bert_base resnet50 mlp
//   DSINFER_MODELS_DIR=DIR [DSINFER_BENCH_THREADS=2] build/benchmarks/bench_models
//
// Models missing from DSINFER_MODELS_DIR are skipped with a message. Inputs come from
// tools/bench_inputs.hpp, the generator ds-benchmark uses (the ONNX Runtime harness's values).
// DSINFER_BENCH_THREADS sets EngineOptions::num_threads (default 0: all processors).
//
// BM_SequenceSweep (Step 8, shape buckets): bert_tiny at batch 1 and every sequence length
// 1..512 in turn, as a decode loop sees them (each length once per sweep), against the same
// lengths run at a fixed shape (each length's time taken after two warm-up runs, so its plan
// and prepared state exist), on backends {onednn, cpu} with and without
// EngineOptions::transient_shapes and on {cpu}. Both report the sweep's total (manual time,
// warm-ups excluded), plans recorded per sweep and the plan cache's arena bytes; the ratio
// sweep / fixed is the steady-state per-step cost of a changing shape.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_inputs.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dsinfer;

struct ModelCase {
    const char* label;
    const char* file;
    std::int64_t batch;
    std::optional<std::int64_t> seq;
};

const ModelCase kCases[] = {
    {"bert_base/b1/s128", "bert_base.onnx", 1, 128},
    {"bert_base/b8/s128", "bert_base.onnx", 8, 128},
    {"resnet50/b1", "resnet50.onnx", 1, std::nullopt},
    {"resnet50/b8", "resnet50.onnx", 8, std::nullopt},
    {"mlp/b64", "mlp.onnx", 64, std::nullopt},
};

const std::vector<std::vector<std::string>> kBackendSets = {{"onednn", "cpu"}, {"cpu"}};

std::optional<fs::path> models_dir() {
    const char* dir = std::getenv("DSINFER_MODELS_DIR");
    if (dir == nullptr || *dir == '\0') return std::nullopt;
    return fs::path(dir);
}

int bench_threads() {
    const char* t = std::getenv("DSINFER_BENCH_THREADS");
    return t ? std::atoi(t) : 0;
}

/// One loaded model with its inputs. Benchmarks run in registration order, so one slot is
/// enough and keeps only one large model in memory at a time.
struct Loaded {
    std::string key;
    std::optional<InferenceEngine> engine;
    std::vector<NamedTensor> inputs;
    std::string error;
};

Loaded& load(const fs::path& model, const ModelCase& c, const std::vector<std::string>& backends) {
    static Loaded slot;
    std::string key =
        model.string() + "|" + std::to_string(c.batch) + "|" + std::to_string(c.seq.value_or(0));
    for (const auto& b : backends) {
        key += '|';
        key += b;
    }
    if (slot.key == key) return slot;
    slot = Loaded{};
    slot.key = key;
    try {
        EngineOptions options;
        options.backends = backends;
        options.num_threads = bench_threads();
        slot.engine = InferenceEngine::load(model, options);
        bench::ShapeRequest req;
        req.batch = c.batch;
        req.seq = c.seq;
        auto generated = bench::make_inputs(*slot.engine, req);
        if (!generated) throw Error(generated.status());
        slot.inputs = generated->tensors();
    } catch (const Error& e) {
        slot.engine.reset();
        slot.error = e.what();
    }
    return slot;
}

void BM_Model(benchmark::State& state, const ModelCase& c,
              const std::vector<std::string>& backends) {
    const auto dir = models_dir();
    if (!dir) {
        state.SkipWithError(
            "DSINFER_MODELS_DIR is not set (make the models with "
            "tools/make_models.py --out DIR)");
        return;
    }
    const fs::path model = *dir / c.file;
    if (!fs::exists(model)) {
        const std::string msg =
            model.string() + " not found (tools/make_models.py --out " + dir->string() + ")";
        state.SkipWithError(msg.c_str());
        return;
    }
    Loaded& loaded = load(model, c, backends);
    if (!loaded.engine) {
        state.SkipWithError(loaded.error.c_str());
        return;
    }
    std::vector<NamedTensor> outputs;
    for (auto _ : state) {
        const Status st = loaded.engine->try_run(loaded.inputs, outputs);
        if (!st) {
            state.SkipWithError(st.to_string().c_str());
            break;
        }
        benchmark::DoNotOptimize(outputs.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations() * c.batch);
}

/// bert_tiny's inputs for batch 1 at every sequence length 1..kSweepMax.
constexpr std::int64_t kSweepMax = 512;

struct Sweep {
    std::optional<InferenceEngine> engine;
    std::vector<std::vector<NamedTensor>> inputs;  // [seq - 1]
    std::string error;
};

/// The engines the sweep compares: backends, and EngineOptions::transient_shapes.
struct SweepConfig {
    const char* label;
    std::vector<std::string> backends;
    bool transient;
};
const SweepConfig kSweepConfigs[] = {{"onednn+cpu", {"onednn", "cpu"}, false},
                                     {"onednn+cpu/transient", {"onednn", "cpu"}, true},
                                     {"cpu", {"cpu"}, false}};

Sweep& sweep_model(const fs::path& model, const SweepConfig& config) {
    static Sweep slots[std::size(kSweepConfigs)];
    Sweep& s = slots[static_cast<std::size_t>(&config - kSweepConfigs)];
    if (s.engine || !s.error.empty()) return s;
    try {
        EngineOptions options;
        options.backends = config.backends;
        options.transient_shapes = config.transient;
        options.num_threads = bench_threads();
        s.engine = InferenceEngine::load(model, options);
        for (std::int64_t seq = 1; seq <= kSweepMax; ++seq) {
            bench::ShapeRequest req;
            req.batch = 1;
            req.seq = seq;
            auto generated = bench::make_inputs(*s.engine, req);
            if (!generated) throw Error(generated.status());
            s.inputs.push_back(generated->tensors());
        }
    } catch (const Error& e) {
        s.engine.reset();
        s.error = e.what();
    }
    return s;
}

/// fixed = false: one run per length, lengths in order (a decode loop). fixed = true: each
/// length's third run (two warm-ups untimed), lengths in order.
void BM_SequenceSweep(benchmark::State& state, bool fixed, const SweepConfig& config) {
    const auto dir = models_dir();
    if (!dir || !fs::exists(*dir / "bert_tiny.onnx")) {
        state.SkipWithError("bert_tiny.onnx not in DSINFER_MODELS_DIR (tools/make_models.py --only bert_tiny)");
        return;
    }
    Sweep& s = sweep_model(*dir / "bert_tiny.onnx", config);
    if (!s.engine) {
        state.SkipWithError(s.error.c_str());
        return;
    }
    std::vector<NamedTensor> outputs;
    auto run = [&](std::size_t i) {
        const Status st = s.engine->try_run(s.inputs[i], outputs);
        if (!st) state.SkipWithError(st.to_string().c_str());
        return st.is_ok();
    };
    std::uint64_t recorded = 0;
    for (auto _ : state) {
        double seconds = 0;
        const std::uint64_t before = s.engine->memory_plan_stats().plans_recorded;
        for (std::size_t i = 0; i < s.inputs.size(); ++i) {
            if (fixed && !(run(i) && run(i))) return;
            const auto t0 = std::chrono::steady_clock::now();
            if (!run(i)) return;
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            benchmark::DoNotOptimize(outputs.data());
        }
        recorded += s.engine->memory_plan_stats().plans_recorded - before;
        state.SetIterationTime(seconds);
    }
    const MemoryPlanStats ps = s.engine->memory_plan_stats();
    state.counters["plans_recorded_per_sweep"] =
        static_cast<double>(recorded) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
    state.counters["plans_cached"] = static_cast<double>(ps.shape_classes);
    state.counters["plan_cache_MiB"] = static_cast<double>(ps.cached_arena_bytes) / (1 << 20);
    state.SetItemsProcessed(state.iterations() * kSweepMax);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    if (const auto dir = models_dir(); !dir)
        std::fprintf(stderr,
                     "bench_models: DSINFER_MODELS_DIR is not set; every model is "
                     "skipped (tools/make_models.py --out DIR writes them)\n");
    for (const auto& c : kCases) {
        for (const auto& backends : kBackendSets) {
            std::string name = std::string("BM_Model/") + c.label + "/";
            for (std::size_t i = 0; i < backends.size(); ++i) {
                if (i) name += '+';
                name += backends[i];
            }
            benchmark::RegisterBenchmark(name.c_str(), BM_Model, c, backends)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
    for (const SweepConfig& config : kSweepConfigs)
        for (const bool fixed : {false, true}) {
            std::string name = std::string("BM_SequenceSweep/bert_tiny/b1/s1-512/") +
                               (fixed ? "fixed/" : "sweep/") + config.label;
            benchmark::RegisterBenchmark(name.c_str(), BM_SequenceSweep, fixed, std::cref(config))
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
        }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
