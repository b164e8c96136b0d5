// ds-compare: how far a model's outputs are from a reference model's on the same inputs, e.g. a
// quantized or half-precision form against its float32 original.
//
//   ds-compare --model CANDIDATE --reference REFERENCE [--precision P] [--reference-precision P]
//              [--batch N] [--seq N] [--shape NAME=DxD]... [--seed N] [--seeds K]
//              [--inputs DIR] [--threads N] [--backends LIST] [--opt-level N] [--json]
//
// Both models are loaded with the same engine options (each at its own --precision, as
// ds-benchmark takes it: int8 quantizes a float32 model dynamically at load). For K seeds
// (--seed, --seed + 1, ...) the inputs of the candidate are generated as ds-benchmark and the
// ONNX Runtime harness make them (tools/bench_inputs.hpp) and both models run on them; the
// outputs are matched by name (the reference's outputs the candidate lacks are reported, and
// the candidate's outputs are compared in order when no name matches); float inputs are
// converted to the reference's declared element type (a float16 model against its float32
// original sees the same values). Per output, over all
// seeds: cosine similarity of the whole tensors (float64 sums), relative L2 error, the largest
// absolute difference, NaN mismatches, and the top-1 agreement of the last axis (rows whose
// argmax is the same: a classifier's prediction). With --inputs DIR the inputs are read from
// files instead (dsinfer::calibration_folder: one .npy / .pb per batch, or a folder per batch;
// e.g. held-out images from tools/make_images.py) and every batch is compared. Exit status: 0
// ok, 1 engine error, 2 bad command line.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_cli.hpp"
#include "output_fidelity.hpp"
#include "progress.hpp"

using namespace dsinfer;

namespace {

using bench::Json;

struct Args : bench::CommonArgs {
    std::filesystem::path reference;
    std::string precision = "fp32", reference_precision = "fp32";
    std::int64_t seeds = 1;
    std::filesystem::path inputs;  ///< --inputs DIR: batches from files instead of generated
};

const char* const kSynopsis =
    "usage: ds-compare --model CANDIDATE --reference REFERENCE [--precision P]\n"
    "                  [--reference-precision P] [--batch N] [--seq N] [--shape NAME=DxD]...\n"
    "                  [--seed N] [--seeds K] [--inputs DIR] [--threads N] [--backends LIST]\n"
    "                  [--opt-level N] [--json]\n"
    "       ds-compare --help | --version\n";

const char* const kDescription =
    "Compares a model's outputs with a reference model's on the same inputs, e.g. a quantized\n"
    "or half-precision form against its float32 original: per output, the cosine similarity,\n"
    "the relative L2 error, the largest absolute difference, NaN mismatches and the top-1\n"
    "agreement of the last axis.\n"
    "\n"
    "Both models load with the same engine options, each at its own precision. The inputs are\n"
    "generated as ds-benchmark makes them, once per seed (--seed, --seed + 1, ...), or read\n"
    "from --inputs DIR (one .npy / .pb file per batch, or a folder per batch). Outputs are\n"
    "matched by name, else in order.\n";

const char* const kExamples =
    "ds-compare --model digits_int8.onnx --reference models/digits/digits.onnx --seeds 8\n"
    "    an INT8 model against its float32 original on 8 generated input sets\n"
    "ds-compare --model m.onnx --reference m.onnx --precision bf16 --json\n"
    "    the model at bfloat16 against itself at float32, as one JSON line\n";

const char* const kExitStatus =
    "0  ok\n"
    "1  engine error (a model does not load or run)\n"
    "2  bad command line (nothing runs)\n";

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli({"ds-compare", "compare a model's outputs with a reference model's",
                    kSynopsis, kDescription, kExamples, kExitStatus});
    cli.add_common(a);
    std::string reference;
    cli.text("--reference", reference, "PATH", "the reference ONNX model (required)")
        ->group("Model and inputs");
    cli.integer("--seeds", a.seeds, 1, 100000,
                "input sets: --seed, --seed + 1, ... (default 1)")
        ->group("Model and inputs");
    std::string inputs;
    cli.text("--inputs", inputs, "DIR",
             "compare on the batches in DIR (.npy / .pb files,\none per batch, or a folder per "
             "batch) instead\nof generated inputs")
        ->group("Model and inputs");
    cli.text("--precision", a.precision, "P",
             "the candidate's precision as in ds-benchmark (default fp32)",
             bench::check_precision)
        ->group("Engine");
    cli.text("--reference-precision", a.reference_precision, "P",
             "the reference's precision (default fp32)", bench::check_precision)
        ->group("Engine");
    cli.parse(argc, argv);
    if (reference.empty()) cli.error("--reference PATH is required");
    a.reference = reference;
    a.inputs = inputs;
    return a;
}

/// Input sets to compare when known: the seeds (0 for a folder, read until it ends).
std::size_t files_or_seeds(const Args& a) {
    return a.inputs.empty() ? static_cast<std::size_t>(a.seeds) : 0;
}

int run(const Args& a) {
    const EngineOptions options = a.engine_options();
    std::optional<DynamicQuantizeReport> int8;
    bench::PhaseTicker ticker("ds-compare");  // on a terminal: what runs while nothing prints
    ticker.phase("loading " + a.model.filename().string());
    const InferenceEngine cand = bench::load_at_precision(a.model, options, a.precision, &int8);
    ticker.phase("loading " + a.reference.filename().string());
    const InferenceEngine ref = bench::load_at_precision(a.reference, options, a.reference_precision);
    ticker.phase("comparing input sets", files_or_seeds(a));
    std::vector<bench::OutputFidelity> stats;
    // Batches from files (--inputs), else generated per seed.
    std::unique_ptr<CalibrationSource> files;
    if (!a.inputs.empty()) {
        const Graph g = load_onnx(a.model);
        files = calibration_folder(a.inputs, g).value_or_throw();
    }
    std::int64_t sets = 0;
    for (std::int64_t k = 0; files != nullptr || k < a.seeds; ++k) {
        std::vector<NamedTensor> feeds;
        if (files != nullptr) {
            if (!files->next(feeds).value_or_throw()) break;
        } else {
            bench::ShapeRequest req = a.shapes;
            req.seed = a.shapes.seed + static_cast<std::uint32_t>(k);
            feeds = bench::make_inputs_or_exit(a.usage, cand, req).tensors();
        }
        ++sets;
        const std::vector<NamedTensor> co = cand.run(feeds);
        const std::vector<NamedTensor> ro = ref.run(bench::as_inputs_of(ref, feeds));
        bench::accumulate_outputs(stats, co, ro);
        ticker.step();
    }
    ticker.end();
    if (a.json) {
        Json outs = Json::array();
        for (const bench::OutputFidelity& s : stats) outs.push_back(s.json());
        Json doc = {{"model", a.model.string()},
                    {"reference", a.reference.string()},
                    {"precision", a.precision},
                    {"reference_precision", a.reference_precision},
                    {"seeds", files != nullptr ? 0 : a.seeds},
                    {"inputs", a.inputs.string()},
                    {"input_sets", sets},
                    {"outputs", outs}};
        if (int8) doc["int8_quantized_layers"] = int8->matmuls + int8->gemms;
        fmt::print("{}\n", bench::json_text(doc));
        return 0;
    }
    fmt::print("ds-compare {} ({}) vs {} ({}), {} input set(s){}\n", a.model.string(), a.precision,
               a.reference.string(), a.reference_precision, sets,
               files != nullptr ? " from " + a.inputs.string() : std::string());
    for (const bench::OutputFidelity& s : stats) fmt::print("  {}\n", s.text());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-compare", [&] { return run(a); });
}
