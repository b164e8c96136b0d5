// ds-convert: converts an ONNX model into a smaller or faster ONNX model, the conversions as
// stages of one pipeline: load -> optimize -> prune -> quantize -> write, then a summary and a
// measurement of both models.
//
//   ds-convert INPUT.onnx -o OUT.onnx [--quantize none|int8-dynamic|int8-static|int8-weight|bf16|fp16|auto]
//              [--calibration PATH] [--calibration-method minmax|percentile|entropy|mse]
//              [--percentile P] [--calibration-batches N] [--calibration-scale S]
//              [--batch-size N] [--per-tensor] [--symmetric-activations] [--exclude NODE]...
//              [--optimize-level 0|1] [--report FILE.json] [--bench-runs N] [--batch N]
//              [--seq N] [--shape NAME=DxD]... [--threads N] [--quiet] [--version]
//
// Stages (each one function below, recording what it did in a Conversion):
//   load      load_onnx(INPUT);
//   optimize  dsinfer::optimize at --optimize-level (0 or 1, default 1: levels 2 and 3 write
//             dsinfer's fused com.dsinfer operators, which ONNX Runtime cannot run);
//   prune     dsinfer::Pruner at --prune RATIO or --prune-target flops:X|params:X
//             (--prune-criterion, --prune-global, --prune-multiple; none without either):
//             whole channels, neurons and attention heads removed, a smaller dense graph, its
//             groups and per-layer FLOPs and parameters in the summary and report; with
//             --calibration also the target's sensitivity allocation, recovery
//             (--prune-recovery, least squares by default) and the outputs' fidelity against
//             the unpruned model before and after recovery, with progress bars;
//   quantize  dsinfer::Quantizer with the --quantize mode (default none); int8-static
//             calibrates on --calibration: a folder (calibration_folder: one subfolder of
//             .pb/.npy inputs per batch, or one file per batch) or a .csv file
//             (calibration_csv: --batch-size rows per batch, each value times
//             --calibration-scale), with a progress bar (tools/progress.hpp) on stderr;
//   write     save_onnx(OUT).
// Then it prints the file sizes, the per-layer table of the quantizer (30 rows at most: every
// row in --report), the calibration and the speed of both models: INPUT and OUT loaded into
// InferenceEngine (--threads; OUT at EngineOptions::precision bf16/fp16 for those modes), run
// --bench-runs times each (after one untimed run each), alternating run by run, on the same
// inputs (tools/bench_inputs.hpp, as ds-benchmark makes them with --batch/--seq), and the
// ratio of the medians. --report writes all of it, every run and calibrated range included, as
// JSON (nlohmann::json).
//
// Exit status: 0 ok; 1 the conversion failed (the dsinfer::Error message names the node, input
// or file); 2 bad command line (one line "ds-convert: <problem>" and the help; nothing runs).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <dsinfer/prune.hpp>

#include "bench_cli.hpp"
#include "output_fidelity.hpp"
#include "progress.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

using bench::Json;

const char* const kSynopsis =
    "usage: ds-convert INPUT.onnx -o OUT.onnx\n"
    "                  [--quantize none|int8-dynamic|int8-static|int8-weight|bf16|fp16|auto]\n"
    "                  [--min-cosine X | --min-top1 X | --max-relative-l2 X |\n"
    "                   --max-accuracy-drop X [--accuracy-data FILE.csv]] [--eval-batches N]\n"
    "                  [--calibration PATH] [--calibration-method minmax|percentile|entropy|mse]\n"
    "                  [--percentile P] [--calibration-batches N] [--calibration-scale S]\n"
    "                  [--batch-size N] [--per-tensor] [--symmetric-activations]\n"
    "                  [--exclude NODE]... [--optimize-level 0|1] [--report FILE.json]\n"
    "                  [--prune RATIO [--prune-criterion l1|l2|bn] [--prune-global]\n"
    "                   [--prune-multiple N] [--prune-first] [--prune-protect NODE]...\n"
    "                   [--prune-target flops:X|params:X] [--prune-recovery none|bias|lsq]]\n"
    "                  [--bench-runs N] [--batch N] [--seq N] [--shape NAME=DxD]...\n"
    "                  [--threads N] [--quiet]\n"
    "       ds-convert --help | --version\n";

const char* const kDescription =
    "Converts an ONNX model into a smaller or faster ONNX model, in stages: load -> optimize\n"
    "(--optimize-level) -> prune (--prune: whole channels and neurons removed) -> quantize\n"
    "(--quantize: INT8 dynamic, static with calibration or weight-only; bfloat16 or float16\n"
    "weights; auto within an accuracy budget) -> write OUT.\n"
    "\n"
    "Then it prints the file sizes, the quantizer's per-layer table, the calibration, and the\n"
    "speed and output fidelity of INPUT and OUT: --bench-runs runs of each, alternating, on the\n"
    "same generated inputs. --report writes all of it as JSON.\n";

const char* const kExamples =
    "ds-convert models/digits/digits.onnx -o digits_int8.onnx --quantize int8-dynamic\n"
    "    INT8 weights, activations quantized per run\n"
    "ds-convert models/digits/digits.onnx -o digits_s8.onnx --quantize int8-static \\\n"
    "        --calibration models/digits/digits_train.csv --calibration-scale 0.0625\n"
    "    static INT8, calibrated on CSV rows scaled by 1/16\n"
    "ds-convert bert.onnx -o bert_auto.onnx --quantize auto --calibration calib/ \\\n"
    "        --min-cosine 0.999 --report bert_auto.json\n"
    "    INT8 where the outputs' cosine to float32 stays >= 0.999, the rest float\n"
    "ds-convert resnet50.onnx -o resnet50_p40.onnx --prune 0.4\n"
    "    40% of the channels of every prunable group removed (widths multiples of 16)\n";

const char* const kExitStatus =
    "0  ok\n"
    "1  the conversion failed (the error names the node, input or file)\n"
    "2  bad command line (nothing runs)\n";

constexpr std::size_t kTableRows = 30;  // layers printed; --report has them all

// ---- the command line ----

struct Args {
    fs::path input, output;
    QuantizeMode mode = QuantizeMode::none;
    int optimize_level = 1;
    // Quantization
    bool per_tensor = false;
    bool symmetric_activations = false;
    std::vector<std::string> exclude;
    // Accuracy budget (auto)
    AccuracyBudget budget;
    std::optional<double> max_accuracy_drop;
    fs::path accuracy_data;  ///< labelled CSV for --max-accuracy-drop
    std::int64_t eval_batches = 4;
    // Calibration (int8-static, auto)
    fs::path calibration;
    bool calibration_csv = false;  ///< --calibration is a .csv file (else a folder)
    CalibrationMethod method = CalibrationMethod::minmax;
    std::optional<double> percentile;
    std::optional<std::int64_t> calibration_batches;
    std::optional<double> calibration_scale;
    std::optional<std::int64_t> batch_size;
    // Pruning
    PruneOptions prune;
    bool pruning = false;  ///< --prune or --prune-target given
    PruneTargetKind prune_target = PruneTargetKind::none;
    double prune_target_fraction = 0.0;
    PruneRecovery prune_recovery = PruneRecovery::least_squares;
    std::optional<double> prune_ridge;
    // Measurement
    std::int64_t bench_runs = 10;
    bench::ShapeRequest shapes;  ///< --batch, --seq
    int threads = 0;
    // Output
    fs::path report;
    bool quiet = false;
    bench::Usage usage;

    std::int64_t csv_batch_size() const { return batch_size.value_or(32); }
    float csv_scale() const { return static_cast<float>(calibration_scale.value_or(1.0)); }
};

/// "none, int8-dynamic, ..." or "... or fp16": the names the library's to_string gives.
template <class Enum>
std::string names_of(int count, const char* last_joiner) {
    std::string s;
    for (int i = 0; i < count; ++i) {
        if (i > 0) s += i + 1 == count ? last_joiner : ", ";
        s += std::string(to_string(static_cast<Enum>(i)));
    }
    return s;
}

bool is_int8(QuantizeMode m) {
    return m == QuantizeMode::int8_dynamic || m == QuantizeMode::int8_static ||
           m == QuantizeMode::int8_weight || m == QuantizeMode::automatic;
}

/// The modes that read --calibration.
bool calibrates(QuantizeMode m) {
    return m == QuantizeMode::int8_static || m == QuantizeMode::automatic;
}

/// The two paths name the same file (the same path, or links to one file).
bool same_file(const fs::path& a, const fs::path& b) {
    std::error_code e1, e2;
    const fs::path ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
    if (!e1 && !e2 && ca == cb) return true;
    std::error_code e3;
    return fs::exists(a, e3) && fs::exists(b, e3) && fs::equivalent(a, b, e3) && !e3;
}

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli({"ds-convert", "optimize, prune and quantize an ONNX model", kSynopsis,
                    kDescription, kExamples, kExitStatus});
    // Quantization (the help lists the groups in the order of their first option)
    constexpr int kModes = 7, kMethods = 4;
    cli.option("--quantize", "MODE",
               "none (default: optimize and write), int8-dynamic,\nint8-static (needs "
               "--calibration), int8-weight,\nbf16, fp16, or auto (INT8 where the accuracy "
               "budget\nallows; needs --calibration and a budget)",
               [&a](const std::string& s) {
                   auto m = parse_quantize_mode(s);
                   if (!m)
                       return fmt::format("must be {}, got '{}'",
                                          names_of<QuantizeMode>(kModes, " or "), s);
                   a.mode = *m;
                   return std::string();
               })
        ->group("Quantization");
    cli.option("--optimize-level", "0|1",
               "graph clean-up before quantizing: 0 none, 1 constant\nfolding and dead-code "
               "removal (default 1)",
               [&a](const std::string& s) {
                   std::int64_t v = 0;
                   std::string problem = bench::parse_integer(s, 0, 3, v);
                   if (!problem.empty()) return problem;
                   if (v > 1)
                       return fmt::format(
                           "level {} writes dsinfer's fused operators (domain com.dsinfer), "
                           "which ONNX Runtime cannot run: use 0 or 1 (the engine fuses at load)",
                           v);
                   a.optimize_level = static_cast<int>(v);
                   return std::string();
               })
        ->group("Quantization");
    cli.flag("--per-tensor", a.per_tensor,
             "int8 modes: one weight scale per tensor instead of\none per output channel")
        ->group("Quantization");
    cli.flag("--symmetric-activations", a.symmetric_activations,
             "int8-static: activations s8 symmetric (zero point 0)\ninstead of u8 asymmetric")
        ->group("Quantization");
    cli.option("--exclude", "NODE",
               "int8 modes: a node (by name or output name) that\nstays float32 (repeatable)",
               [&a](const std::string& s) {
                   if (s.empty()) return std::string("expects a node name, got ''");
                   a.exclude.push_back(s);
                   return std::string();
               })
        ->group("Quantization");

    // Pruning
    std::optional<double> prune_ratio;
    cli.option("--prune", "RATIO",
               "remove this fraction of the channels of every\nprunable group (Conv filters, "
               "Linear neurons,\nattention heads), in [0, 1)",
               [&prune_ratio](const std::string& s) {
                   double v = 0;
                   std::string problem = bench::parse_number(s, 0, false, "a ratio", v);
                   if (problem.empty() && v >= 1)
                       problem = fmt::format("expects a ratio in [0, 1) (1 would remove every "
                                             "channel), got '{}'",
                                             s);
                   if (problem.empty()) prune_ratio = v;
                   return problem;
               })
        ->group("Pruning");
    cli.option("--prune-criterion", "l1|l2|bn",
               "channel importance: filter L1 (default) or L2\nnorm, or BatchNorm |gamma|",
               [&a](const std::string& s) {
                   const auto c = parse_prune_criterion(s);
                   if (!c.is_ok()) return "must be l1, l2 or bn, got '" + s + "'";
                   a.prune.criterion = c.value();
                   return std::string();
               })
        ->group("Pruning");
    cli.flag("--prune-global", a.prune.global,
             "one threshold over every group's normalized scores\ninstead of RATIO of each group")
        ->group("Pruning");
    cli.integer("--prune-multiple", a.prune.channel_multiple, 1, 1 << 16,
                "round kept channels to a multiple of N (default\n16: widths oneDNN's blocked "
                "convolutions and\nAVX-512 take whole; 1: exactly RATIO)")
        ->group("Pruning");
    bool prune_first = false;
    cli.flag("--prune-first", prune_first,
             "also prune the first convolution's outputs (a\nCNN's stem, kept by default; a "
             "first Linear\nlayer is pruned either way)")
        ->group("Pruning");
    cli.option("--prune-target", "flops:X|params:X",
               "remove at least the fraction X (in (0, 1)) of the\nweight layers' FLOPs or of the "
               "parameters; each\ngroup's ratio from its measured sensitivity on\n--calibration "
               "(without: one global threshold);\ninstead of --prune RATIO",
               [&a](const std::string& s) {
                   const std::size_t colon = s.find(':');
                   const std::string kind = s.substr(0, colon);
                   if (colon == std::string::npos || (kind != "flops" && kind != "params"))
                       return fmt::format("expects flops:X or params:X, got '{}'", s);
                   double v = 0;
                   std::string problem =
                       bench::parse_number(s.substr(colon + 1), 0, true, "a fraction", v);
                   if (problem.empty() && v >= 1)
                       problem = fmt::format("expects a fraction in (0, 1), got '{}'", s);
                   if (!problem.empty()) return problem;
                   a.prune_target = kind == "flops" ? PruneTargetKind::flops : PruneTargetKind::params;
                   a.prune_target_fraction = v;
                   return std::string();
               })
        ->group("Pruning");
    cli.option("--prune-recovery", "none|bias|lsq",
               "with --calibration: refit the layers after the\nremoved channels by least squares "
               "(lsq, default),\nonly compensate their biases, or none",
               [&a](const std::string& s) {
                   const auto r = parse_prune_recovery(s);
                   if (!r.is_ok()) return "must be none, bias or lsq, got '" + s + "'";
                   a.prune_recovery = r.value();
                   return std::string();
               })
        ->group("Pruning");
    cli.number("--prune-ridge", a.prune_ridge, 0.0, false, "a number", "R",
               "least-squares recovery's ridge (default 0.1;\nlarger stays closer to the pruned "
               "weights; scaled\nby inputs / rows, so it fades as data grows)")
        ->group("Pruning");
    cli.option("--prune-protect", "NODE",
               "a node whose output channels are kept (repeatable;\nthe last weight layer's always "
               "are, a first\nconvolution's unless --prune-first)",
               [&a](const std::string& s) {
                   if (s.empty()) return std::string("expects a node name, got ''");
                   a.prune.protect.push_back(s);
                   return std::string();
               })
        ->group("Pruning");

    // Calibration
    std::string calibration;
    cli.text("--calibration", calibration, "PATH",
             "int8-static's, auto's and the pruner's data: a\nfolder (one subfolder of .pb/.npy "
             "inputs per\nbatch, or one file per batch) or a .csv file (one\nsample per line)")
        ->group("Calibration");
    cli.option("--calibration-method", "M",
               "minmax (default), percentile, entropy or mse",
               [&a](const std::string& s) {
                   auto m = parse_calibration_method(s);
                   if (!m)
                       return fmt::format("must be {}, got '{}'",
                                          names_of<CalibrationMethod>(kMethods, " or "), s);
                   a.method = *m;
                   return std::string();
               })
        ->group("Calibration");
    cli.option("--percentile", "P",
               "the percentile method's level, in (50, 100]\n(default 99.999)",
               [&a](const std::string& s) {
                   double v = 0;
                   std::string problem = bench::parse_number(s, 50, true, "a percentile", v);
                   if (problem.empty() && v > 100)
                       problem = fmt::format("expects a percentile in (50, 100], got '{}'", s);
                   if (problem.empty()) a.percentile = v;
                   return problem;
               })
        ->group("Calibration");
    cli.integer("--calibration-batches", a.calibration_batches, 1, 1ll << 30,
                "calibrate on the first N batches (default: all)")
        ->group("Calibration");
    cli.number("--calibration-scale", a.calibration_scale, 0.0, true, "a number", "S",
               "a .csv file's values are multiplied by S\n(default 1; the digits model: 0.0625)")
        ->group("Calibration");
    cli.integer("--batch-size", a.batch_size, 1, 1 << 20,
                "rows of a .csv file per calibration batch\n(default 32)")
        ->group("Calibration");

    // Accuracy budget (auto)
    std::optional<double> min_cosine, min_top1, max_l2;
    cli.number("--min-cosine", min_cosine, -1.0, false, "a cosine", "X",
               "auto: keep the outputs' cosine similarity to\nfloat32 >= X on the calibration "
               "data (default\n0.999)")
        ->group("Accuracy budget");
    cli.number("--min-top1", min_top1, 0.0, false, "a fraction", "X",
               "auto: keep the fraction of rows whose argmax\nagrees with float32 >= X")
        ->group("Accuracy budget");
    cli.number("--max-relative-l2", max_l2, 0.0, false, "a number", "X",
               "auto: keep ||y - y_fp32|| / ||y_fp32|| <= X")
        ->group("Accuracy budget");
    cli.number("--max-accuracy-drop", a.max_accuracy_drop, 0.0, false, "a fraction", "X",
               "auto: the task metric, top-1 accuracy on labelled\ndata (a .csv whose lines "
               "start with the label),\nmay drop at most X (0.005 = half a point) below\n"
               "float32's")
        ->group("Accuracy budget");
    std::string accuracy_data;
    cli.text("--accuracy-data", accuracy_data, "FILE.csv",
             "the labelled data of --max-accuracy-drop (default:\nthe --calibration .csv)")
        ->group("Accuracy budget");
    cli.integer("--eval-batches", a.eval_batches, 1, 1 << 20,
                "auto: calibration batches the fidelity budget is\nmeasured on (the first N; "
                "default 4)")
        ->group("Accuracy budget");

    // Measurement
    cli.integer("--bench-runs", a.bench_runs, 0, 1 << 20,
                "timed runs of each model (default 10; 0: no\nmeasurement)")
        ->group("Measurement");
    cli.integer("--batch", a.shapes.batch, 1, 1 << 24,
                "first symbolic dim of every input (default 1)")
        ->group("Measurement");
    cli.integer("--seq", a.shapes.seq, 1, 1 << 24,
                "every later symbolic dim (required when the model\nhas one)")
        ->group("Measurement");
    cli.option("--shape", "NAME=DxD",
               "the whole shape of input NAME (repeatable; for\ninputs without a declared shape)",
               [&a](const std::string& s) { return bench::Cli::parse_shape(s, a.shapes); })
        ->group("Measurement");
    cli.integer("--threads", a.threads, 0, 4096,
                "threads of the calibration and the measurement;\n0 = the processors available "
                "(default 0)")
        ->group("Measurement");

    // Output
    std::string input;
    cli.app().add_option("INPUT", input, "the float32 ONNX model")->type_name("");
    std::string output;
    cli.option("-o,--output", "OUT.onnx", "the converted model (required; not INPUT)",
               [&output](const std::string& s) {
                   if (!s.empty() && s[0] == '-')
                       return "expects a path, got the option '" + s + "'";
                   output = s;
                   return std::string();
               })
        ->group("Output");
    std::string report;
    cli.text("--report", report, "FILE.json",
             "write everything (options, sizes, layers, ranges,\nevery run) as JSON")
        ->group("Output");
    cli.flag("--quiet", a.quiet, "no progress and no summary (errors and notes only)")
        ->group("Output");

    cli.parse(argc, argv);
    a.usage = cli.usage();

    // What the options say of each other.
    if (input.empty()) cli.error("INPUT.onnx is required");
    if (output.empty()) cli.error("-o OUT.onnx is required");
    a.input = input;
    a.output = output;
    a.report = report;
    if (same_file(a.input, a.output))
        cli.error(fmt::format("-o: '{}' is the input model itself: write the converted model "
                              "to another file",
                              output));
    if (!a.report.empty() && (same_file(a.report, a.input) || same_file(a.report, a.output)))
        cli.error("--report: must not be INPUT or OUT");
    for (const auto& [flag, file] : {std::pair<const char*, const fs::path*>{"-o", &a.output},
                                     {"--report", &a.report}}) {
        std::error_code ec;
        const fs::path folder = file->parent_path();
        if (!file->empty() && !folder.empty() && !fs::is_directory(folder, ec))
            cli.error(fmt::format("{}: the folder '{}' does not exist", flag, folder.string()));
    }
    if (a.output.extension() == ".ds")
        cli.error("-o: the .ds format is not written yet: write an .onnx file");
    const std::string mode(to_string(a.mode));
    // The accuracy budget: one of four, for auto only.
    const int budgets = static_cast<int>(min_cosine.has_value()) + min_top1.has_value() +
                        max_l2.has_value() + a.max_accuracy_drop.has_value();
    if (a.mode == QuantizeMode::automatic) {
        if (budgets > 1)
            cli.error("--min-cosine, --min-top1, --max-relative-l2 and --max-accuracy-drop: "
                      "give one budget");
        if (min_cosine && *min_cosine > 1.0)
            cli.error(fmt::format("--min-cosine: a cosine is at most 1, got {}", *min_cosine));
        if (min_top1 && *min_top1 > 1.0)
            cli.error(fmt::format("--min-top1: a fraction is at most 1, got {}", *min_top1));
        if (min_top1) a.budget.metric = FidelityMetric::top1, a.budget.threshold = *min_top1;
        if (max_l2) a.budget.metric = FidelityMetric::relative_l2, a.budget.threshold = *max_l2;
        if (min_cosine) a.budget.threshold = *min_cosine;
        if (a.max_accuracy_drop) {
            a.budget.max_drop = *a.max_accuracy_drop;
            a.accuracy_data = accuracy_data.empty() ? fs::path(calibration) : fs::path(accuracy_data);
            if (a.accuracy_data.extension() != ".csv")
                cli.error("--max-accuracy-drop: needs labelled data: a .csv --calibration file or "
                          "--accuracy-data FILE.csv");
        } else if (!accuracy_data.empty()) {
            cli.error("--accuracy-data: applies to --max-accuracy-drop");
        }
    } else {
        for (const char* auto_only : {"--min-cosine", "--min-top1", "--max-relative-l2",
                                      "--max-accuracy-drop", "--accuracy-data", "--eval-batches"})
            if (cli.given(auto_only))
                cli.error(fmt::format("{}: only --quantize auto uses it (--quantize is {})",
                                      auto_only, mode));
    }
    const bool prune_asked = prune_ratio.has_value() || a.prune_target != PruneTargetKind::none;
    if (calibrates(a.mode) || (prune_asked && !calibration.empty())) {
        if (calibration.empty())
            cli.error(fmt::format("--quantize {} needs --calibration PATH (a folder of inputs or a "
                                  ".csv file)",
                                  mode));
        a.calibration = calibration;
        std::error_code ec;
        if (fs::is_directory(a.calibration, ec)) {
            a.calibration_csv = false;
        } else if (a.calibration.extension() == ".csv") {
            a.calibration_csv = true;
        } else if (!fs::exists(a.calibration, ec)) {
            cli.error(fmt::format("--calibration: '{}' does not exist", calibration));
        } else {
            cli.error(fmt::format("--calibration: '{}' is neither a folder nor a .csv file",
                                  calibration));
        }
        if (!a.calibration_csv)
            for (const char* csv_only : {"--batch-size", "--calibration-scale"})
                if (cli.given(csv_only))
                    cli.error(fmt::format("{}: applies to a .csv --calibration file, not to a "
                                          "folder",
                                          csv_only));
        if (!calibrates(a.mode))
            for (const char* quantize_only : {"--calibration-method", "--percentile",
                                              "--symmetric-activations"})
                if (cli.given(quantize_only))
                    cli.error(fmt::format("{}: only --quantize int8-static and auto use it "
                                          "(--quantize is {})",
                                          quantize_only, mode));
        if (a.percentile && !cli.given("--calibration-method")) a.method = CalibrationMethod::percentile;
        if (a.percentile && a.method != CalibrationMethod::percentile)
            cli.error(fmt::format("--percentile: applies to --calibration-method percentile, "
                                  "not {}",
                                  to_string(a.method)));
    } else {
        for (const char* static_only :
             {"--calibration", "--calibration-method", "--percentile", "--calibration-batches",
              "--calibration-scale", "--batch-size", "--symmetric-activations"})
            if (cli.given(static_only))
                cli.error(fmt::format("{}: only --quantize int8-static and auto, and the pruner "
                                      "(--prune, --prune-target), use it (--quantize is {})",
                                      static_only, mode));
    }
    if (prune_ratio && a.prune_target != PruneTargetKind::none)
        cli.error("--prune and --prune-target: give one (a ratio, or a target the pruner "
                  "allocates)");
    if (prune_asked) {
        a.pruning = true;
        a.prune.ratio = prune_ratio.value_or(0.0);
        a.prune.protect_first = !prune_first;
        if (a.prune_target != PruneTargetKind::none && a.prune.global)
            cli.error("--prune-global: applies to --prune RATIO (a target allocates per group)");
        if (cli.given("--prune-ridge") && a.prune_recovery != PruneRecovery::least_squares)
            cli.error("--prune-ridge: applies to --prune-recovery lsq");
        if (cli.given("--prune-recovery") && calibration.empty() &&
            a.prune_recovery != PruneRecovery::none)
            cli.error("--prune-recovery: needs --calibration PATH (the activations to refit on)");
        if (calibration.empty()) a.prune_recovery = PruneRecovery::none;
    } else {
        for (const char* prune_only : {"--prune-criterion", "--prune-global", "--prune-multiple",
                                       "--prune-first", "--prune-protect", "--prune-recovery",
                                       "--prune-ridge"})
            if (cli.given(prune_only))
                cli.error(fmt::format("{}: applies with --prune RATIO or --prune-target",
                                      prune_only));
    }
    if (!is_int8(a.mode))
        for (const char* int8_only : {"--per-tensor", "--exclude"})
            if (cli.given(int8_only))
                cli.error(fmt::format("{}: only the int8 modes use it (--quantize is {})",
                                      int8_only, mode));
    return a;
}

// ---- the machine (bench_cli.hpp) ----

using bench::cpu_isa;
using bench::cpu_isa_extensions;
using bench::cpu_model_name;

// ---- the pipeline ----

/// The speed of INPUT and OUT on the same inputs.
struct Measurement {
    std::vector<double> input_ms, output_ms;  ///< in run order
    /// OUT's outputs against INPUT's on the measurement's inputs: the metrics against the
    /// float32 model.
    std::vector<bench::OutputFidelity> fidelity;
    std::string fidelity_inputs;  ///< what they were compared on
    std::optional<std::int64_t> batch, seq;
    int threads = 0;  ///< the engines' (0 resolved to the processors available)
    static double median(std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return bench::quantile(v, 0.5);
    }
    /// INPUT's median over OUT's: above 1, OUT is faster.
    double ratio() const { return median(input_ms) / median(output_ms); }
};

/// What each stage did.
struct Conversion {
    std::uint64_t input_bytes = 0, output_bytes = 0;
    std::optional<OptimizeReport> optimized;  ///< absent at --optimize-level 0
    std::optional<PrunerReport> pruned;       ///< absent without --prune / --prune-target
    QuantizeReport quantized;
    std::optional<Measurement> measured;
    double ratio() const {
        return input_bytes > 0 ? static_cast<double>(output_bytes) / static_cast<double>(input_bytes)
                               : 0.0;
    }
};

/// load: INPUT as a graph, and the checks that need it (--exclude names, the measurement's
/// shapes) before any work.
Graph load_stage(const Args& a, Conversion& c) {
    Graph g = load_onnx(a.input);
    std::error_code ec;
    c.input_bytes = fs::file_size(a.input, ec);
    for (const std::string& name : a.exclude) {
        const bool node = std::any_of(g.nodes.begin(), g.nodes.end(),
                                      [&](const Node& n) { return n.name == name; });
        const auto value = g.find_value(name);
        if (!node && !(value && g.value(*value).producer >= 0))
            a.usage.error(fmt::format("--exclude: '{}' names no node (nor node output) of {}",
                                      name, a.input.string()));
    }
    if (a.bench_runs > 0) {
        // The shapes the measurement will generate: a missing --seq is a usage error now, not
        // after the conversion.
        for (const auto& [name, dims] : a.shapes.overrides)
            if (std::none_of(g.inputs.begin(), g.inputs.end(),
                             [&](ValueId id) { return g.value(id).name == name; }))
                a.usage.error(fmt::format("--shape: '{}' is not an input of {}", name,
                                          a.input.string()));
        std::optional<std::int64_t> batch, seq;
        for (ValueId id : g.inputs) {
            const Value& v = g.value(id);
            auto shape = bench::resolve_shape(IOInfo{v.name, v.dtype, v.shape}, a.shapes, batch, seq);
            if (!shape) a.usage.error(shape.status().message());
        }
    }
    return g;
}

/// optimize: the optimizer's clean-up (level 1) or nothing (0).
void optimize_stage(Graph& g, const Args& a, Conversion& c) {
    if (a.optimize_level == 0) return;
    OptimizeOptions o;
    o.level = a.optimize_level;
    c.optimized = optimize(g, o);
}

/// The Quantizer's options from the command line.
QuantizerOptions quantizer_options(const Args& a) {
    QuantizerOptions o;
    o.mode = a.mode;
    o.int8.per_channel = !a.per_tensor;
    o.int8.symmetric_activations = a.symmetric_activations;
    o.int8.exclude = a.exclude;
    o.int8.calibration.method = a.method;
    if (a.percentile) o.int8.calibration.percentile = *a.percentile;
    if (a.calibration_batches)
        o.int8.calibration.max_batches = static_cast<std::size_t>(*a.calibration_batches);
    o.int8.calibration.num_threads = a.threads;
    o.dynamic.per_channel = false;  // the library's default; --per-tensor keeps it
    o.dynamic.exclude = a.exclude;
    o.automatic.budget = a.budget;
    o.automatic.eval_batches = static_cast<std::size_t>(a.eval_batches);
    return o;
}

/// --max-accuracy-drop's task metric: top-1 accuracy of the model's first output on a CSV whose
/// lines are "label,v1,...,vN" (the digits CSV), values scaled by --calibration-scale, for a
/// model with one float32 input [batch, N].
std::function<StatusOr<double>(const InferenceEngine&)> accuracy_metric(const Args& a) {
    struct Data {
        std::vector<int> labels;
        std::vector<float> values;
        std::int64_t width = 0;
    };
    auto d = std::make_shared<Data>();
    std::ifstream in(a.accuracy_data);
    if (!in)
        throw Error(ErrorCode::io_error,
                    fmt::format("--accuracy-data: cannot read '{}'", a.accuracy_data.string()));
    std::size_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::vector<double> cells;
        std::size_t at = 0;
        while (at <= line.size()) {
            const std::size_t comma = std::min(line.find(',', at), line.size());
            double v = 0;
            const std::string cell = line.substr(at, comma - at);
            if (!bench::parse_number(cell, -1e300, false, "a number", v).empty())
                throw Error(ErrorCode::invalid_argument,
                            fmt::format("--accuracy-data '{}', line {}: '{}' is not a number",
                                        a.accuracy_data.string(), line_no, cell));
            cells.push_back(v);
            at = comma + 1;
        }
        if (cells.size() < 2 || (d->width != 0 && static_cast<std::int64_t>(cells.size()) - 1 != d->width))
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("--accuracy-data '{}', line {}: expected a label and {} values",
                                    a.accuracy_data.string(), line_no, d->width));
        d->width = static_cast<std::int64_t>(cells.size()) - 1;
        d->labels.push_back(static_cast<int>(cells[0]));
        for (std::size_t k = 1; k < cells.size(); ++k)
            d->values.push_back(static_cast<float>(cells[k]) * a.csv_scale());
    }
    if (d->labels.empty())
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("--accuracy-data '{}' holds no sample", a.accuracy_data.string()));
    return [d](const InferenceEngine& e) -> StatusOr<double> {
        const auto rows = static_cast<std::int64_t>(d->labels.size());
        if (e.inputs().size() != 1)
            return Status(ErrorCode::invalid_argument,
                          "--max-accuracy-drop: the model must have one input");
        DSINFER_ASSIGN_OR_RETURN(Tensor x, Tensor::allocate(DType::f32, Shape{rows, d->width}));
        std::copy(d->values.begin(), d->values.end(), x.data<float>());
        std::vector<NamedTensor> outs;
        DSINFER_RETURN_IF_ERROR(e.try_run({{e.inputs()[0].name, x}}, outs));
        const Tensor& y = outs.at(0).tensor;
        if (y.dtype() != DType::f32 || y.num_dims() != 2 || y.shape()[0] != rows)
            return Status(ErrorCode::invalid_argument,
                          "--max-accuracy-drop: the first output must be float32 [rows, classes]");
        const std::int64_t classes = y.shape()[1];
        std::int64_t right = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* row = y.data<float>() + r * classes;
            right += std::max_element(row, row + classes) - row == d->labels[static_cast<std::size_t>(r)];
        }
        return static_cast<double>(right) / static_cast<double>(rows);
    };
}

/// quantize: the Quantizer of --quantize; int8-static calibrates on --calibration.
void quantize_stage(Graph& g, const Args& a, Conversion& c) {
    QuantizerOptions o = quantizer_options(a);
    bench::ProgressBar progress(a.quiet);
    o.int8.calibration.progress = progress.callback();
    if (a.max_accuracy_drop) o.automatic.budget.task_metric = accuracy_metric(a);
    std::unique_ptr<CalibrationSource> data;
    if (calibrates(a.mode))
        data = (a.calibration_csv
                    ? calibration_csv(a.calibration, g, a.csv_batch_size(), a.csv_scale())
                    : calibration_folder(a.calibration, g))
                   .value_or_throw();
    const Quantizer quantizer(std::move(o));
    progress.start();
    c.quantized = quantizer.run(g, data.get()).value_or_throw();
    progress.finish();
    if (c.quantized.already_quantized)
        fmt::print(stderr,
                   "ds-convert: note: {} already holds quantized operators: nothing was "
                   "quantized, the model is written as it is\n",
                   a.input.string());
}

/// prune: dsinfer::Pruner with the --prune options; with --calibration, the target's
/// sensitivity, recovery and fidelity on it.
void prune_stage(Graph& g, const Args& a, Conversion& c) {
    if (!a.pruning) return;
    PrunerOptions o;
    o.prune = a.prune;
    o.target = a.prune_target;
    o.target_fraction = a.prune_target_fraction;
    o.recovery = a.prune_recovery;
    if (a.prune_ridge) o.ridge = *a.prune_ridge;
    o.max_batches = static_cast<std::size_t>(a.calibration_batches.value_or(0));
    o.num_threads = a.threads;
    bench::ProgressBar progress(a.quiet);
    o.progress = progress.callback();
    std::unique_ptr<CalibrationSource> data;
    if (!a.calibration.empty())
        data = (a.calibration_csv
                    ? calibration_csv(a.calibration, g, a.csv_batch_size(), a.csv_scale())
                    : calibration_folder(a.calibration, g))
                   .value_or_throw();
    progress.start();
    c.pruned = Pruner(std::move(o)).run(g, data.get()).value_or_throw();
    progress.finish();
}


/// write: OUT as ONNX.
void write_stage(const Graph& g, const Args& a, Conversion& c) {
    save_onnx(g, a.output);
    std::error_code ec;
    c.output_bytes = fs::file_size(a.output, ec);
}

/// The most calibration batches the fidelity of OUT is measured on.
constexpr std::int64_t kFidelityBatches = 32;

/// measure: --bench-runs runs of INPUT and OUT each, alternating, on the same inputs, and OUT's
/// outputs against INPUT's.
Measurement measure_stage(const Args& a, bool auto_bf16) {
    EngineOptions o;
    o.num_threads = a.threads;
    const InferenceEngine before = InferenceEngine::load(a.input, o);
    if (a.mode == QuantizeMode::bf16) o.precision = Precision::bf16;
    if (a.mode == QuantizeMode::fp16) o.precision = Precision::fp16;
    if (auto_bf16) o.precision = Precision::bf16;
    const InferenceEngine after = InferenceEngine::load(a.output, o);
    const bench::GeneratedInputs in = bench::make_inputs_or_exit(a.usage, before, a.shapes);
    const std::vector<NamedTensor> feeds = in.tensors();
    Measurement m;
    m.batch = in.batch;
    m.seq = in.seq;
    m.threads = a.threads > 0 ? a.threads : bench::available_processors();
    // One untimed run each: the first run plans memory and packs weights.
    (void)before.run(feeds);
    (void)after.run(feeds);
    // The metrics against INPUT: on the calibration data where there is some (the inputs the
    // user calls representative; the ranges came from them), else on the generated inputs.
    std::int64_t sets = 0;
    if (calibrates(a.mode)) {
        std::unique_ptr<CalibrationSource> data =
            (a.calibration_csv
                 ? calibration_csv(a.calibration, before.graph(), a.csv_batch_size(), a.csv_scale())
                 : calibration_folder(a.calibration, before.graph()))
                .value_or_throw();
        std::vector<NamedTensor> batch;
        for (; sets < kFidelityBatches && data->next(batch).value_or_throw(); ++sets)
            bench::accumulate_outputs(m.fidelity, after.run(bench::as_inputs_of(after, batch)),
                                      before.run(batch));
        m.fidelity_inputs = fmt::format("{} batch{} of {}", sets, sets == 1 ? "" : "es",
                                        a.calibration.string());
    }
    if (sets == 0) {
        bench::accumulate_outputs(m.fidelity, after.run(bench::as_inputs_of(after, feeds)),
                                  before.run(feeds));
        m.fidelity_inputs = fmt::format("the generated inputs (seed {})", a.shapes.seed);
    }
    using Clock = std::chrono::steady_clock;
    const auto timed = [&feeds](const InferenceEngine& e) {
        const auto t0 = Clock::now();
        (void)e.run(feeds);
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    for (std::int64_t i = 0; i < a.bench_runs; ++i) {
        m.input_ms.push_back(timed(before));
        m.output_ms.push_back(timed(after));
    }
    return m;
}

// ---- the summary and the report ----

std::string bytes_text(std::uint64_t b) {
    const auto d = static_cast<double>(b);
    if (b < 1024) return fmt::format("{} B", b);
    if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", d / 1024);
    if (b < 1024ull * 1024 * 1024) return fmt::format("{:.1f} MiB", d / 1048576);
    return fmt::format("{:.2f} GiB", d / 1073741824);
}

std::string ms_text(double ms) {
    return ms >= 100 ? fmt::format("{:.1f} ms", ms)
           : ms >= 1 ? fmt::format("{:.2f} ms", ms)
                     : fmt::format("{:.1f} us", ms * 1000);
}

/// `s` cut to `width` characters, keeping its end (node names differ at the end).
std::string fit(const std::string& s, std::size_t width) {
    return s.size() <= width ? s : "..." + s.substr(s.size() - (width - 3));
}

/// A layer's weight bytes, "before -> after" ("-" when the quantizer did not count them).
std::string weights_text(const LayerRecord& l) {
    if (l.weight_bytes_before == 0 && l.weight_bytes_after == 0) return "-";
    return fmt::format("{} -> {}", l.weight_bytes_before, l.weight_bytes_after);
}

void print_layers(const std::vector<LayerRecord>& layers) {
    if (layers.empty()) return;
    const std::size_t shown = std::min(layers.size(), kTableRows);
    constexpr std::size_t kNodeWidth = 48;
    std::size_t node_w = 4, op_w = 2, weights_w = 12;
    for (std::size_t i = 0; i < shown; ++i) {
        node_w = std::max(node_w, std::min(layers[i].node.size(), kNodeWidth));
        op_w = std::max(op_w, layers[i].op_type.size());
        weights_w = std::max(weights_w, weights_text(layers[i]).size());
    }
    // auto: the sensitivity (the metric with the layer alone in INT8) and float32 time.
    const bool measured = std::any_of(layers.begin(), layers.end(),
                                      [](const LayerRecord& l) { return std::isfinite(l.sensitivity); });
    const std::string head = measured ? fmt::format("  {:>12}  {:>9}", "alone INT8", "fp32 ms") : "";
    fmt::print("\n  {:<{}}  {:<{}}  {:<9}  {:>{}}{}  {}\n", "node", node_w, "op", op_w, "precision",
               "weight bytes", weights_w, head, "reason");
    for (std::size_t i = 0; i < shown; ++i) {
        const LayerRecord& l = layers[i];
        const std::string cols =
            measured ? fmt::format("  {:>12.8f}  {:>9.3f}", l.sensitivity, l.float_ms) : "";
        const std::string line =
            fmt::format("  {:<{}}  {:<{}}  {:<9}  {:>{}}{}  {}", fit(l.node, kNodeWidth), node_w,
                        l.op_type, op_w, l.precision, weights_text(l), weights_w, cols, l.reason);
        fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
    }
    if (layers.size() > shown)
        fmt::print("  ... and {} more layers (all of them in --report)\n", layers.size() - shown);
}

/// --report's "prune": null without --prune.
Json prune_json(const Args& a, const Conversion& c) {
    if (!c.pruned) return nullptr;
    const PrunerReport& pr = *c.pruned;
    const PruneReport& r = pr.prune;
    Json groups = Json::array(), layers = Json::array();
    for (const PruneGroup& g : r.groups)
        groups.push_back({{"producers", g.producers},
                          {"consumers", g.consumers},
                          {"channels", g.channels},
                          {"kept", g.kept},
                          {"unit", g.unit},
                          {"intact_reason", g.intact_reason}});
    const auto fidelity = [](const PruneFidelity& f) -> Json {
        if (!f.measured) return nullptr;
        return {{"cosine", f.cosine}, {"relative_l2", f.relative_l2}, {"top1", f.top1}};
    };
    Json recovered = Json::array(), sensitivity = Json::array();
    for (const RecoveredLayer& l : pr.recovered)
        recovered.push_back({{"node", l.node},
                             {"op", l.op},
                             {"inputs", l.inputs},
                             {"rows", l.rows},
                             {"error_before", l.error_before},
                             {"error_after", l.error_after},
                             {"bias", l.bias},
                             {"skipped", l.skipped}});
    for (const PruneSensitivity& s : pr.sensitivity)
        sensitivity.push_back({{"group", s.group},
                               {"levels", s.levels},
                               {"loss", s.loss},
                               {"saved", s.saved},
                               {"chosen", s.chosen}});
    for (const PruneLayer& l : r.layers)
        layers.push_back({{"node", l.node},
                          {"op", l.op},
                          {"params_before", l.params_before},
                          {"params_after", l.params_after},
                          {"flops_before", l.flops_before},
                          {"flops_after", l.flops_after}});
    return {{"ratio", a.prune.ratio},
            {"criterion", std::string(to_string(a.prune.criterion))},
            {"global", a.prune.global},
            {"channel_multiple", a.prune.channel_multiple},
            {"protect", a.prune.protect},
            {"params_before", r.params_before},
            {"params_after", r.params_after},
            {"flops_before", r.flops_before},
            {"flops_after", r.flops_after},
            {"prunable_channels", r.prunable_channels},
            {"removed_channels", r.removed_channels},
            {"target", pr.target == PruneTargetKind::none
                           ? Json(nullptr)
                           : Json{{"kind", pr.target == PruneTargetKind::flops ? "flops" : "params"},
                                  {"fraction", pr.target_fraction},
                                  {"achieved", pr.achieved_fraction},
                                  {"allocation", pr.allocation},
                                  {"sensitivity", std::move(sensitivity)}}},
            {"recovery", std::string(to_string(pr.recovery))},
            {"fidelity_before_recovery", fidelity(pr.before_recovery)},
            {"fidelity_after_recovery", fidelity(pr.after_recovery)},
            {"recovered_layers", std::move(recovered)},
            {"evaluations", pr.evaluations},
            {"seconds", pr.seconds},
            {"groups", std::move(groups)},
            {"layers", std::move(layers)}};
}

/// The prune stage: groups, channels, parameters, FLOPs, and why groups stayed intact.
void print_prune(const Args& a, const PrunerReport& pr) {
    const PruneReport& r = pr.prune;
    std::size_t pruned = 0;
    std::map<std::string, std::size_t> intact;
    for (const PruneGroup& g : r.groups) {
        if (g.kept < g.channels) ++pruned;
        if (!g.intact_reason.empty()) ++intact[g.intact_reason];
    }
    auto ratio = [](double after, double before) { return before > 0 ? after / before : 1.0; };
    const std::string how =
        pr.target == PruneTargetKind::none
            ? fmt::format("ratio {}", a.prune.ratio)
            : fmt::format("target {}:{} (achieved {:.3f}, {})",
                          pr.target == PruneTargetKind::flops ? "flops" : "params",
                          pr.target_fraction, pr.achieved_fraction, pr.allocation);
    fmt::print("  prune        {} ({}, {}{}): {} of {} groups pruned, {} of {} channels "
               "removed; parameters {} -> {} ({:.3f}x), weight-layer FLOPs per sample "
               "{:.4g} G -> {:.4g} G ({:.3f}x)\n",
               how, to_string(a.prune.criterion),
               pr.target != PruneTargetKind::none ? "per group" : a.prune.global ? "global" : "uniform",
               fmt::format(", multiple {}", a.prune.channel_multiple),
               pruned, r.groups.size(), r.removed_channels, r.prunable_channels, r.params_before,
               r.params_after, ratio(static_cast<double>(r.params_after), static_cast<double>(r.params_before)),
               r.flops_before / 1e9, r.flops_after / 1e9, ratio(r.flops_after, r.flops_before));
    for (const auto& [why, count] : intact)
        fmt::print("               intact: {} group{}: {}\n", count, count == 1 ? "" : "s", why);
    for (const PruneSensitivity& s : pr.sensitivity)
        if (s.chosen > 0)
            fmt::print("               allocated: {} ratio {} (1 - cosine alone there {:.3g})\n",
                       s.group, s.chosen,
                       s.loss[static_cast<std::size_t>(std::find(s.levels.begin(), s.levels.end(), s.chosen) -
                                                       s.levels.begin())]);
    const auto fid = [](const PruneFidelity& f) {
        return fmt::format("cosine {:.6f}, relative L2 {:.3e}, top-1 agreement {:.4f}", f.cosine,
                           f.relative_l2, f.top1);
    };
    if (!pr.before_recovery.measured) {
        fmt::print("               recovery: none (no --calibration data)\n");
        return;
    }
    fmt::print("               pruned against unpruned, on --calibration: {}\n",
               fid(pr.before_recovery));
    if (pr.recovery == PruneRecovery::none) return;
    std::size_t refit = 0;
    double before = 0, after = 0;
    for (const RecoveredLayer& l : pr.recovered) {
        if (!l.skipped.empty()) continue;
        ++refit;
        before = std::max(before, l.error_before);
        after = std::max(after, l.error_after);
    }
    fmt::print("               recovery {} of {} layer{} (worst layer error {:.3g} -> {:.3g}): {}\n",
               to_string(pr.recovery), refit, refit == 1 ? "" : "s", before, after,
               fid(pr.after_recovery));
    for (const RecoveredLayer& l : pr.recovered)
        if (!l.skipped.empty())
            fmt::print("               not recovered: {}: {}\n", l.node, l.skipped);
}

void print_summary(const Args& a, const Conversion& c) {
    const QuantizeReport& q = c.quantized;
    fmt::print("ds-convert {} -> {}\n", a.input.string(), a.output.string());
    if (c.optimized)
        fmt::print("  optimize     level {}: {} -> {} nodes\n", a.optimize_level,
                   c.optimized->nodes_before, c.optimized->nodes_after);
    else
        fmt::print("  optimize     level 0: not optimized\n");
    // The table's layers at a lower precision than float32 (the quantizer's own count,
    // quantized_nodes, counts what its mode rewrites: nodes, or fp16's tensors).
    const auto converted = static_cast<std::size_t>(
        std::count_if(q.layers.begin(), q.layers.end(),
                      [](const LayerRecord& l) { return l.precision != "fp32"; }));
    if (c.pruned) print_prune(a, *c.pruned);
    fmt::print("  quantize     {}", to_string(a.mode));
    if (q.already_quantized)
        fmt::print(": already quantized, written as it is\n");
    else if (a.mode == QuantizeMode::none)
        fmt::print("\n");
    else
        fmt::print(": {} of {} layers converted; weights {} -> {}\n", converted, q.layers.size(),
                   bytes_text(q.float_weight_bytes), bytes_text(q.quantized_weight_bytes));
    fmt::print("  size         {} -> {} ({} -> {} bytes, {:.3f}x)\n", bytes_text(c.input_bytes),
               bytes_text(c.output_bytes), c.input_bytes, c.output_bytes, c.ratio());
    if (q.calibration) {
        const CalibrationTable& t = *q.calibration;
        fmt::print("  calibration  {} over {} batches in {:.2f} s: {} tensors ({})\n",
                   to_string(t.method), t.batches, t.seconds, t.ranges.size(),
                   a.calibration.string());
    }
    if (q.automatic) {
        const AutoQuantizeReport& r = *q.automatic;
        const std::string what = r.task_metric ? std::string("accuracy drop") : std::string(to_string(r.metric));
        const auto shown = [&](double v) { return r.task_metric ? r.float32_value - v : v; };
        fmt::print("  auto         {} budget {} {}: all INT8 {:.6f}, chosen {:.6f} ({}); {} INT8 "
                   "layers ({}), {} float ({}); {} evaluations\n",
                   what,
                   r.task_metric || r.metric == FidelityMetric::relative_l2 ? "<=" : ">=", r.budget,
                   shown(r.all_int8_value), shown(r.achieved), r.met ? "met" : "NOT met: the best found",
                   r.int8_layers, r.int8_form, r.float_layers, r.float_precision, r.evaluations);
        if (r.float_precision == "bf16")
            fmt::print("  {:<12} run OUT with precision bf16 (ds-benchmark --precision bf16; "
                       "EngineOptions::precision)\n", "");
    }
    if (c.measured) {
        const Measurement& m = *c.measured;
        const double ratio = m.ratio();
        fmt::print("  speed        {} -> {} (median of {} runs each; batch {}{}, {} threads): "
                   "{:.2f}x {}\n",
                   ms_text(Measurement::median(m.input_ms)),
                   ms_text(Measurement::median(m.output_ms)), m.input_ms.size(),
                   m.batch.value_or(a.shapes.batch), m.seq ? fmt::format(", seq {}", *m.seq) : "",
                   m.threads, ratio >= 1 ? ratio : 1 / ratio, ratio >= 1 ? "faster" : "slower");
    }
    if (c.measured) {
        fmt::print("  fidelity     OUT against INPUT on {}:\n", c.measured->fidelity_inputs);
        for (const bench::OutputFidelity& f : c.measured->fidelity)
            fmt::print("  {:<12} {}\n", "", f.text());
    }
    print_layers(q.layers);
}

Json layer_json(const LayerRecord& l) {
    return {{"node", l.node},
            {"op_type", l.op_type},
            {"precision", l.precision},
            {"reason", l.reason},
            {"weight_bytes_before", l.weight_bytes_before},
            {"weight_bytes_after", l.weight_bytes_after},
            {"sensitivity", std::isfinite(l.sensitivity) ? Json(l.sensitivity) : Json(nullptr)},
            {"float_ms", l.float_ms}};
}

Json auto_json(const std::optional<AutoQuantizeReport>& r) {
    if (!r) return nullptr;
    return {{"metric", r->task_metric ? std::string("accuracy_drop") : std::string(to_string(r->metric))},
            {"budget", r->budget},
            {"float32_value", r->float32_value},
            {"all_int8_value", r->all_int8_value},
            {"achieved", r->achieved},
            {"met", r->met},
            {"int8_form", r->int8_form},
            {"float_precision", r->float_precision},
            {"int8_layers", r->int8_layers},
            {"float_layers", r->float_layers},
            {"evaluations", r->evaluations}};
}

Json calibration_json(const CalibrationTable& t) {
    Json ranges = Json::array();
    for (const TensorRange& r : t.ranges)
        ranges.push_back({{"name", r.name},
                          {"min", r.min},
                          {"max", r.max},
                          {"lo", r.lo},
                          {"hi", r.hi},
                          {"count", r.count},
                          {"nonfinite", r.nonfinite}});
    return {{"method", std::string(to_string(t.method))},
            {"batches", t.batches},
            {"seconds", t.seconds},
            {"tensors", std::move(ranges)}};
}

Json report_json(const Args& a, const Conversion& c) {
    const QuantizeReport& q = c.quantized;
    Json calibration_options = nullptr;
    if (a.mode == QuantizeMode::int8_static) {
        calibration_options = {{"path", a.calibration.string()},
                               {"kind", a.calibration_csv ? "csv" : "folder"},
                               {"method", std::string(to_string(a.method))},
                               {"percentile", bench::json_or_null(a.percentile)},
                               {"max_batches", bench::json_or_null(a.calibration_batches)}};
        if (a.calibration_csv) {
            calibration_options["batch_size"] = a.csv_batch_size();
            calibration_options["scale"] = a.csv_scale();
        }
    }
    Json optimize = nullptr;
    if (c.optimized)
        optimize = {{"nodes_before", c.optimized->nodes_before},
                    {"nodes_after", c.optimized->nodes_after},
                    {"ms", c.optimized->ms},
                    {"fired", c.optimized->fired}};
    Json layers = Json::array();
    for (const LayerRecord& l : q.layers) layers.push_back(layer_json(l));
    Json timings = nullptr, fidelity = nullptr;
    if (c.measured) {
        const Measurement& m = *c.measured;
        timings = {{"runs", m.input_ms.size()},
                   {"batch", m.batch.value_or(a.shapes.batch)},
                   {"seq", bench::json_or_null(m.seq)},
                   {"threads", m.threads},
                   {"input_ms", m.input_ms},
                   {"output_ms", m.output_ms},
                   {"input_median_ms", Measurement::median(m.input_ms)},
                   {"output_median_ms", Measurement::median(m.output_ms)},
                   {"speed_ratio", m.ratio()}};
        Json outputs = Json::array();
        for (const bench::OutputFidelity& f : m.fidelity) outputs.push_back(f.json());
        fidelity = {{"inputs", m.fidelity_inputs}, {"outputs", std::move(outputs)}};
    }
    return {
        {"tool", "ds-convert"},
        {"version", dsinfer::version()},
        {"input", a.input.string()},
        {"output", a.output.string()},
        {"mode", std::string(to_string(a.mode))},
        {"options",
         {{"optimize_level", a.optimize_level},
          {"per_channel", !a.per_tensor},
          {"symmetric_activations", a.symmetric_activations},
          {"exclude", a.exclude},
          {"calibration", std::move(calibration_options)},
          {"bench_runs", a.bench_runs},
          {"batch", a.shapes.batch},
          {"seq", bench::json_or_null(a.shapes.seq)},
          {"threads", a.threads}}},
        {"optimize", std::move(optimize)},
        {"prune", prune_json(a, c)},
        {"already_quantized", q.already_quantized},
        {"sizes",
         {{"input_bytes", c.input_bytes},
          {"output_bytes", c.output_bytes},
          {"ratio", c.ratio()}}},
        {"quantized_nodes", q.quantized_nodes},
        {"float_weight_bytes", q.float_weight_bytes},
        {"quantized_weight_bytes", q.quantized_weight_bytes},
        {"layers", std::move(layers)},
        {"calibration", q.calibration ? calibration_json(*q.calibration) : Json(nullptr)},
        {"automatic", auto_json(q.automatic)},
        {"timings", std::move(timings)},
        {"fidelity", std::move(fidelity)},
        {"machine",
         {{"cpu", cpu_model_name()},
          {"isa", cpu_isa()},
          {"kernel_isa", cpu_kernel_isa()},
          {"isa_extensions", cpu_isa_extensions()},
          {"processors", bench::available_processors()}}},
    };
}

void write_report(const Args& a, const Conversion& c) {
    std::ofstream out(a.report, std::ios::binary | std::ios::trunc);
    if (out) out << bench::json_text(report_json(a, c), 2) << "\n";
    out.flush();
    if (!out)
        throw Error(ErrorCode::io_error,
                    fmt::format("cannot write the report '{}'", a.report.string()));
}

int run(const Args& a) {
    Conversion c;
    Graph g = load_stage(a, c);
    optimize_stage(g, a, c);
    prune_stage(g, a, c);
    quantize_stage(g, a, c);
    write_stage(g, a, c);
    if (a.bench_runs > 0) {
        try {
            c.measured = measure_stage(a, c.quantized.automatic &&
                                              c.quantized.automatic->float_precision == "bf16");
        } catch (const Error& e) {
            throw Error(e.code(), fmt::format("{} is written, but measuring it failed: {}",
                                              a.output.string(), e.message()));
        }
    }
    if (!a.quiet) print_summary(a, c);
    if (!a.report.empty()) write_report(a, c);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-convert", [&] { return run(a); });
}
