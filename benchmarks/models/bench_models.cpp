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
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
