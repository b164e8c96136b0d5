// ds-benchmark: times one model at one shape with InferenceEngine.
//
//   ds-benchmark --model PATH [--device cpu|cuda|cuda:N] [--precision fp32|tf32|fp16|bf16|int8]
//                [--batch N] [--seq N] [--shape NAME=DxD...]... [--threads N] [--warmup N]
//                [--iterations N] [--backends onednn,cpu|cpu|reference] [--seed N]
//                [--wait-policy spin|yield|block] [--min-time SECONDS] [--timeout MS]
//                [--opt-level 0-3] [--algo-search rule|measure] [--profile]
//                [--profile-nodes N] [--json]
//
// Inputs are random and valid (tools/bench_inputs.hpp: the same shapes and values as the ONNX
// Runtime peer harness, ../shared/peers/common.mjs). Timing: the load, the first run alone,
// --warmup runs, then timed runs until both --iterations runs and --min-time seconds are
// reached. Reports latency p50/p90/p99/mean/min, throughput (batch x timed runs / timed
// seconds), the process's peak RSS and its resident memory by phase (before and after load, after
// the first run, and the peak over the later runs alone: VmHWM restarted through
// /proc/self/clear_refs), and GFLOP/s when a models.json beside the model (written by
// tools/make_models.py or the peers' make_models.py) gives the FLOPs per sample.
// --timeout puts a deadline on every warm-up and timed run (counted as timed out when it
// stops one). On a terminal a line on stderr says which phase is running (bench::PhaseTicker:
// a large model loads for seconds). --profile comes after the summary, with the run's shapes.
// --json prints one JSON object on one line (nlohmann::json). The command line is parsed with
// CLI11 (tools/bench_cli.hpp), every value checked before any work. Exit status: 0 ok, 1 engine
// error (no GPU for --device cuda, a precision the device does not run), 2 bad command line.
// --precision int8 runs a pre-quantized model as it is quantized and quantizes a float32 one
// dynamically at load (dsinfer/quantize.hpp quantize_dynamic: MatMul/Gemm weights s8, the
// activations per run, the form ONNX Runtime's quantize_dynamic writes), reporting which.
// --generate N is the decode mode (run_generate): the model loads into a dsinfer::Generator,
// and each run generates N tokens for --batch sequences of --seq random prompt tokens at once
// (the figures of tools/generate_run.hpp, as ds-generate reports them).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_cli.hpp"
#include "generate_run.hpp"
#include "node_profile.hpp"
#include "progress.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

using bench::available_processors;
using bench::Json;
using bench::load_average;
using bench::quantile;

const char* const kSynopsis =
    "usage: ds-benchmark --model PATH [--device cpu|cuda|cuda:N] [--precision fp32|tf32|fp16|bf16|int8]\n"
    "                    [--batch N] [--seq N] [--shape NAME=DxD...]... [--threads N]\n"
    "                    [--wait-policy spin|yield|block]\n"
    "                    [--warmup N] [--iterations N] [--backends onednn,cpu|cpu|reference]\n"
    "                    [--seed N] [--min-time SECONDS] [--timeout MS] [--opt-level 0-3]\n"
    "                    [--algo-search rule|measure] [--profile] [--profile-nodes N] [--json]\n"
    "       ds-benchmark --model DECODER --generate N [--batch SEQUENCES] [--seq PROMPT]\n"
    "                    [--precision fp32|bf16|int8] [--threads N] [--warmup N]\n"
    "                    [--iterations N] [--min-time SECONDS] [--seed N] [--json]\n"
    "       ds-benchmark --help | --version\n";

const char* const kDescription =
    "Times one model at one shape with InferenceEngine: latency percentiles (p50, p90, p99,\n"
    "mean, min), throughput, the process's memory by phase, the kernel provider of each node\n"
    "and the memory plan.\n"
    "\n"
    "Runs: the load, the first run alone, --warmup runs, then timed runs until both\n"
    "--iterations runs and --min-time seconds are reached. Inputs are random and valid (the\n"
    "shapes and values of the ONNX Runtime peer harness). GFLOP/s are reported when a\n"
    "models.json beside the model gives the FLOPs per sample.\n"
    "\n"
    "Decode mode (--generate N): a decoder-only model (the exports dsinfer::Generator reads)\n"
    "generates N tokens for each of --batch sequences (default 1) of --seq random prompt\n"
    "tokens (default 128), all at once, per run; --warmup and timed runs as above, each with\n"
    "new prompts. Reports prefill and decode tokens/s (median per sequence, then median over\n"
    "the timed runs), aggregate tokens/s, time to first token and inter-token latency\n"
    "percentiles. --precision int8 stores the MatMul weights as INT8 and quantizes their\n"
    "activations per step (GeneratorOptions::weights \"int8\"), bf16 the BF16 products.\n";

const char* const kExamples =
    "ds-benchmark --model models/digits/digits.onnx --batch 32\n"
    "    latency and throughput at batch 32 on every processor\n"
    "ds-benchmark --model bert.onnx --batch 1 --seq 128 --threads 4 --profile\n"
    "    a BERT at sequence length 128 on 4 threads, then the time per op type\n"
    "ds-benchmark --model resnet50.onnx --precision int8 --json\n"
    "    the model quantized to INT8 at load, the result as one JSON line\n"
    "ds-benchmark --model llama_100m.onnx --generate 128 --seq 512 --threads 2\n"
    "    prefill of a 512-token prompt, then 128 tokens decoded at batch 1\n";

const char* const kExitStatus =
    "0  ok\n"
    "1  engine error (the model does not load, no GPU for --device cuda, a precision the\n"
    "   device does not run)\n"
    "2  bad command line (nothing runs)\n";

struct Args : bench::CommonArgs {
    std::string device = "cpu";
    std::string precision = "fp32";
    int warmup = 3;
    std::int64_t iterations = 10;
    double min_time_s = 3.0;
    std::optional<double> timeout_ms;  // --timeout: a deadline per run
    int profile = 0;                   // top-N op types by time (0 = off)
    std::int64_t generate = 0;         // --generate: tokens per sequence (0 = not the decode mode)
};

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli({"ds-benchmark", "time one model at one shape", kSynopsis, kDescription,
                    kExamples, kExitStatus});
    cli.add_common(a);
    cli.text("--device", a.device, "D",
             "cpu (default), cuda or cuda:N (unsupported nodes fall\nback to the CPU)",
             [](const std::string& d) {
                 const bool cuda_n = d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                                     d.find_first_not_of("0123456789", 5) == std::string::npos;
                 return d == "cpu" || d == "cuda" || cuda_n
                            ? std::string()
                            : "must be cpu, cuda or cuda:N, got '" + d + "'";
             })
        ->group("Engine");
    cli.text("--precision", a.precision, "P",
             "fp32 (default); fp16, bf16 (half-width weights on\nthe CPU; tensors on a CUDA "
             "device); tf32 (CUDA);\nint8 (a pre-quantized model as it is, a float32 one\n"
             "quantized dynamically at load)",
             bench::check_precision)
        ->group("Engine");
    cli.integer("--warmup", a.warmup, 0, 1 << 20, "untimed runs after the first run (default 3)")
        ->group("Timing");
    cli.integer("--iterations", a.iterations, 1, 1 << 30, "at least N timed runs (default 10)")
        ->group("Timing");
    cli.number("--min-time", a.min_time_s, 0.0, false, "a number of seconds", "S",
               "and at least S seconds of timed runs (default 3)")
        ->group("Timing");
    cli.number("--timeout", a.timeout_ms, 0.0, true, "a number of milliseconds", "MS",
               "a deadline per warm-up and timed run\n(RunOptions::deadline): a run still going MS "
               "ms\nafter it started stops with deadline_exceeded and\nis counted as timed out "
               "(its time stays in the\nlatencies); the first run has none")
        ->group("Timing");
    bool profile = false;
    std::optional<int> profile_nodes;
    cli.flag("--profile", profile,
             "after timing, print time per op type and kernel\nprovider, and the 15 slowest "
             "nodes with their shapes\n(to stderr with --json)")
        ->group("Output");
    cli.integer("--profile-nodes", profile_nodes, 1, 1 << 20,
                "--profile, listing the N slowest op types and nodes")
        ->group("Output");
    cli.integer("--generate", a.generate, 1, 1 << 20,
                "decode mode: generate N tokens per sequence with\ndsinfer::Generator (--batch "
                "sequences of --seq\nprompt tokens)")
        ->group("Generation");
    cli.parse(argc, argv);
    a.profile = profile_nodes ? *profile_nodes : profile ? 15 : 0;
    if (a.generate > 0) {
        if (a.precision != "fp32" && a.precision != "bf16" && a.precision != "int8")
            a.usage.error("--generate runs --precision fp32, bf16 or int8, not " + a.precision);
        if (a.device != "cpu") a.usage.error("--generate runs on the CPU only");
        if (!a.shapes.overrides.empty()) a.usage.error("--generate takes --seq, not --shape");
        if (a.profile > 0) a.usage.error("--generate has no --profile (use ds-profiler)");
        if (a.timeout_ms) a.usage.error("--generate has no --timeout");
    }
    return a;
}

/// FLOPs per sample of `model` from models.json beside it, in either layout:
///   tools/make_models.py: {"models": {NAME: {"file": "x.onnx", "flops_per_sample": F,
///                          "flops_per_sample_by_sequence": {"128": F}}}}
///   ../shared/peers/make_models.py: {"x.onnx": {"flops_per_sample": F | {"128": {"total": F}}}}
/// For models with a sequence dim the entry for `seq` is used; nullopt when unknown.
std::optional<double> flops_per_sample(const fs::path& model, std::optional<std::int64_t> seq) {
    std::ifstream in(model.parent_path() / "models.json", std::ios::binary);
    if (!in) return std::nullopt;
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return std::nullopt;
    // The number at `key` of the object `j`; nullopt when there is none.
    auto number_at = [](const nlohmann::json& j, const std::string& key) -> std::optional<double> {
        const auto it = j.is_object() ? j.find(key) : j.end();
        if (it == j.end() || !it->is_number()) return std::nullopt;
        return it->get<double>();
    };
    const std::string file = model.filename().string();
    const std::string seq_key = seq ? std::to_string(*seq) : std::string();
    if (const auto models = doc.find("models"); models != doc.end() && models->is_object()) {
        for (const auto& [name, info] : models->items()) {
            if (!info.is_object()) continue;
            const auto f = info.find("file");
            if (!(f != info.end() ? *f == file : name + ".onnx" == file)) continue;
            if (const auto by_seq = info.find("flops_per_sample_by_sequence");
                by_seq != info.end() && seq)
                return number_at(*by_seq, seq_key);
            return number_at(info, "flops_per_sample");
        }
        return std::nullopt;
    }
    const auto info = doc.find(file);
    if (info == doc.end() || !info->is_object()) return std::nullopt;
    const auto f = info->find("flops_per_sample");
    if (f == info->end()) return std::nullopt;
    if (f->is_number()) return f->get<double>();
    if (!seq || !f->is_object() || !f->contains(seq_key)) return std::nullopt;
    return number_at((*f)[seq_key], "total");
}

// ---- the machine (bench_cli.hpp) ----

using bench::cpu_isa;
using bench::cpu_isa_extensions;
using bench::cpu_model_name;

std::int64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

/// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1 where there is none.
std::int64_t proc_status_bytes(const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    const std::string key = std::string(field) + ":";
    while (std::getline(status, line))
        if (line.rfind(key, 0) == 0) return std::strtoll(line.c_str() + key.size(), nullptr, 10) * 1024;
    return -1;
}

/// Restarts VmHWM at the current RSS (Linux: "5" into /proc/self/clear_refs); false if refused.
bool reset_peak_rss() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    return static_cast<bool>(clear);
}

/// Resident memory at the phases of a benchmark (bytes; -1 = not available).
struct RssPhases {
    std::int64_t before_load = -1, after_load = -1, after_first_run = -1;
    std::int64_t peak_load = -1;     ///< VmHWM after load (the parse peak)
    std::int64_t peak_runs = -1;     ///< VmHWM over warm-up and timed runs, reset after the first
};

// ---- statistics and output ----

/// True when every floating-point element of `outputs` is finite.
bool outputs_finite(const std::vector<NamedTensor>& outputs) {
    for (const auto& o : outputs) {
        const Tensor& t = o.tensor;
        if (t.dtype() == DType::f32) {
            for (float v : t.span<float>())
                if (!std::isfinite(v)) return false;
        } else if (t.dtype() == DType::f64) {
            for (double v : t.span<double>())
                if (!std::isfinite(v)) return false;
        }
    }
    return true;
}

struct Result {
    double load_ms = 0, engine_load_ms = 0, first_run_ms = 0, timed_s = 0;
    std::size_t timed_out = 0;  ///< timed runs stopped by --timeout
    std::vector<double> latencies_ms;  // sorted
    double throughput = 0;
    std::optional<double> flops;
    bool finite = true;
    std::int64_t peak_rss = 0;
    RssPhases rss;
    std::vector<double> loadavg;
    double others_cpus = -1;  ///< processors other processes took during the timed runs
    std::map<std::string, int> providers;  // nodes per kernel provider
    int blocked_nodes = 0;
    OptimizeReport optimization;
    std::optional<DynamicQuantizeReport> int8;  // --precision int8
    MemoryPlanStats plan;                // activation arena of the benchmarked shape class
    WeightMemoryStats weights;           // the constants as held after the timed runs
    std::uint64_t pool_peak_reserved = 0;  // default_memory_pool(): peak bytes held
    NodePlacement placement_load, placement;  // after load, after the timed runs
    std::size_t runs = 0;                     // every run (first, warm-up, timed)
    double per_run(std::uint64_t total) const {
        return runs == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(runs);
    }
};

Json int8_json(const Result& r) {
    if (!r.int8) return nullptr;
    const DynamicQuantizeReport& q = *r.int8;
    return {{"already_quantized", q.already_quantized},
            {"matmuls", q.matmuls},
            {"gemms", q.gemms},
            {"activations", q.activations},
            {"float_weight_bytes", q.float_weight_bytes},
            {"int8_weight_bytes", q.int8_weight_bytes},
            {"skipped", q.skipped}};
}

std::string int8_text(const DynamicQuantizeReport& q) {
    if (q.already_quantized) return "the model is quantized already: run as it is";
    return fmt::format("quantized dynamically at load: {} MatMul + {} Gemm ({:.1f} MiB float32 "
                       "-> {:.1f} MiB int8), {} activations quantized per run{}",
                       q.matmuls, q.gemms, static_cast<double>(q.float_weight_bytes) / 1048576.0,
                       static_cast<double>(q.int8_weight_bytes) / 1048576.0, q.activations,
                       q.skipped.empty() ? "" : fmt::format("; {} left float32", q.skipped.size()));
}

void print_json(const Args& a, const std::vector<std::string>& backends,
                const bench::GeneratedInputs& in, int threads, const Result& r) {
    const auto& lat = r.latencies_ms;
    double sum = 0;
    for (double v : lat) sum += v;
    const double gflops_sample = r.flops ? *r.flops / 1e9 : NAN;
    Json inputs = Json::array();
    for (const bench::GeneratedInput& g : in.inputs) {
        Json i = {{"name", g.input.name},
                  {"dtype", dtype_name(g.input.tensor.dtype())},
                  {"shape", g.input.tensor.shape().dims()},
                  {"fill", g.fill}};
        if (g.fill == "token ids") i["range"] = {g.low, g.high};
        inputs.push_back(std::move(i));
    }
    const OptimizeReport& o = r.optimization;
    const Json doc = {
        {"model", a.model.string()},
        {"device", a.device},
        {"precision", a.precision},
        {"batch", in.batch.value_or(a.shapes.batch)},
        {"seq", bench::json_or_null(in.seq)},
        {"threads", threads},
        {"wait_policy", wait_policy_name(a.wait_policy)},
        {"backends", backends},
        {"seed", a.shapes.seed},
        {"inputs", std::move(inputs)},
        {"load_ms", r.load_ms},
        {"engine_load_ms", r.engine_load_ms},
        {"first_run_ms", r.first_run_ms},
        {"warmup", a.warmup},
        {"timeout_ms", a.timeout_ms ? Json(*a.timeout_ms) : Json(nullptr)},
        {"timed_out", r.timed_out},
        {"iterations", lat.size()},
        {"timed_s", r.timed_s},
        {"latency_ms",
         {{"p50", quantile(lat, 0.5)},
          {"p90", quantile(lat, 0.9)},
          {"p99", quantile(lat, 0.99)},
          {"mean", sum / static_cast<double>(lat.size())},
          {"min", lat.front()},
          {"max", lat.back()}}},
        {"throughput", r.throughput},
        {"gflops_per_sample", gflops_sample},
        {"gflops_per_s", gflops_sample * r.throughput},
        {"peak_rss_bytes", r.peak_rss},
        {"rss_bytes",
         {{"before_load", r.rss.before_load},
          {"after_load", r.rss.after_load},
          {"peak_load", r.rss.peak_load},
          {"after_first_run", r.rss.after_first_run},
          {"peak_runs", r.rss.peak_runs}}},
        {"outputs_finite", r.finite},
        {"cpu", cpu_model_name()},
        {"isa", cpu_isa()},
        {"kernel_isa", cpu_kernel_isa()},
        {"isa_extensions", cpu_isa_extensions()},
        {"loadavg", r.loadavg},
        {"other_processes_cpus", r.others_cpus >= 0 ? Json(r.others_cpus) : Json(nullptr)},
        {"nodes_by_provider", r.providers},
        {"blocked_layout_nodes", r.blocked_nodes},
        {"optimization",
         {{"level", a.opt_level},
          {"nodes_before", o.nodes_before},
          {"nodes_after", o.nodes_after},
          {"ms", o.ms},
          {"fired", std::map<std::string, int>(o.fired.begin(), o.fired.end())}}},
        {"int8", int8_json(r)},
        {"memory_plan",
         {{"planned_peak_bytes", r.plan.planned_peak_bytes},
          {"lower_bound_bytes", r.plan.lower_bound_bytes},
          {"ratio", r.plan.ratio()},
          {"planned_values", r.plan.planned_values},
          {"shape_classes", r.plan.shape_classes},
          {"pool_peak_reserved_bytes", r.pool_peak_reserved}}},
        {"weights",
         {{"graph_bytes", r.weights.graph_bytes},
          {"released_bytes", r.weights.released_bytes},
          {"packed_bytes", r.weights.packed_bytes},
          {"derived_bytes", r.weights.derived_bytes},
          {"held_twice", r.weights.held_twice}}},
        {"placement",
         {{"device", r.placement.device},
          {"device_nodes", r.placement.device_nodes},
          {"fallback_nodes", r.placement.fallback_nodes},
          {"host_to_device_bytes_per_run", r.per_run(r.placement.host_to_device_bytes)},
          {"device_to_host_bytes_per_run", r.per_run(r.placement.device_to_host_bytes)},
          {"transfers_per_run", r.per_run(r.placement.transfers)}}}};
    fmt::print("{}\n", bench::json_text(doc));
}

void print_table(const Args& a, const std::vector<std::string>& backends,
                 const bench::GeneratedInputs& in, int threads, const Result& r) {
    const auto& lat = r.latencies_ms;
    double sum = 0;
    for (double v : lat) sum += v;
    std::string joined;
    for (const auto& b : backends) joined += (joined.empty() ? "" : ",") + b;
    fmt::print("ds-benchmark {}  ({} {}, batch {}{}, threads {}{}, backends {})\n", a.model.string(),
               a.device, a.precision, in.batch.value_or(a.shapes.batch),
               in.seq ? fmt::format(", seq {}", *in.seq) : "", threads,
               a.wait_policy == WaitPolicy::spin
                   ? std::string()
                   : fmt::format(" (wait {})", wait_policy_name(a.wait_policy)),
               joined);
    std::string ext;
    for (const auto& e : cpu_isa_extensions()) ext += " " + e;
    fmt::print("  {:<12}{} ({}{}; kernels: {})\n", "cpu", cpu_model_name(), cpu_isa(), ext,
               cpu_kernel_isa());
    for (const auto& g : in.inputs)
        fmt::print("  {:<12}{} {} {} {}{}\n", "input", g.input.name,
                   dtype_name(g.input.tensor.dtype()), g.input.tensor.shape().to_string(), g.fill,
                   g.fill == "token ids" ? fmt::format(" in [{}, {})", g.low, g.high) : "");
    fmt::print("  {:<12}{:.1f} ms (engine {:.1f} ms), first run {:.3f} ms\n", "load", r.load_ms,
               r.engine_load_ms, r.first_run_ms);
    fmt::print("  {:<12}p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  mean {:.3f}  min {:.3f}\n",
               "latency ms", quantile(lat, 0.5), quantile(lat, 0.9), quantile(lat, 0.99),
               sum / static_cast<double>(lat.size()), lat.front());
    fmt::print("  {:<12}{} timed runs in {:.2f} s after {} warm-up{}\n", "runs", lat.size(),
               r.timed_s, a.warmup,
               a.timeout_ms ? fmt::format("; {} timed out (--timeout {} ms)", r.timed_out,
                                          *a.timeout_ms)
                            : std::string());
    fmt::print("  {:<12}{:.2f} samples/s{}\n", "throughput", r.throughput,
               r.flops ? fmt::format(", {:.1f} GFLOP/s ({:.3f} GFLOP/sample)",
                                     *r.flops * r.throughput / 1e9, *r.flops / 1e9)
                       : "");
    std::string prov;
    for (const auto& [name, count] : r.providers) prov += fmt::format(" {} {}", name, count);
    fmt::print("  {:<12}{} (blocked layout: {})\n", "nodes", prov, r.blocked_nodes);
    if (r.placement.device != "cpu")
        fmt::print("  {:<12}{}: {} nodes on the device, {} on the CPU; per run {:.0f} B to the "
                   "device, {:.0f} B back, {:.1f} copies\n",
                   "placement", r.placement.device, r.placement.device_nodes,
                   r.placement.fallback_nodes, r.per_run(r.placement.host_to_device_bytes),
                   r.per_run(r.placement.device_to_host_bytes), r.per_run(r.placement.transfers));
    std::string fired;
    for (const auto& [name, count] : r.optimization.fired) fired += fmt::format(" {} {}", name, count);
    fmt::print("  {:<12}level {}: {} -> {} nodes in {:.1f} ms;{}\n", "optimizer", a.opt_level,
               r.optimization.nodes_before, r.optimization.nodes_after, r.optimization.ms, fired);
    if (r.int8) {
        fmt::print("  {:<12}{}\n", "int8", int8_text(*r.int8));
        for (const auto& why : r.int8->skipped) fmt::print("  {:<12}  {}\n", "", why);
    }
    const auto mib = [](std::int64_t b) { return static_cast<double>(b) / 1048576.0; };
    fmt::print("  {:<12}{:.1f} MiB{}\n", "peak RSS", mib(r.peak_rss),
               r.finite ? "" : "   WARNING: non-finite outputs");
    fmt::print("  {:<12}before load {:.1f}, after load {:.1f} (peak {:.1f}), after the first run "
               "{:.1f}, peak over the later runs {:.1f} MiB\n", "RSS", mib(r.rss.before_load),
               mib(r.rss.after_load), mib(r.rss.peak_load), mib(r.rss.after_first_run),
               mib(r.rss.peak_runs));
    fmt::print("  {:<12}arena {:.1f} MiB, lower bound {:.1f} MiB (x{:.3f}), {} tensors; pool peak "
               "{:.1f} MiB\n", "memory plan", static_cast<double>(r.plan.planned_peak_bytes) / 1048576.0,
               static_cast<double>(r.plan.lower_bound_bytes) / 1048576.0, r.plan.ratio(),
               r.plan.planned_values, static_cast<double>(r.pool_peak_reserved) / 1048576.0);
    fmt::print("  {:<12}in the graph {:.1f} MiB, kernels' packed copies {:.1f} MiB, transforms "
               "{:.1f} MiB; {} held twice\n",
               "weights", static_cast<double>(r.weights.graph_bytes) / 1048576.0,
               static_cast<double>(r.weights.packed_bytes) / 1048576.0,
               static_cast<double>(r.weights.derived_bytes) / 1048576.0, r.weights.held_twice.size());
}

/// Per op type and provider: each node's median ms over 3 profiled runs (after the timed
/// runs; tools/node_profile.hpp, as ds-profiler collects them), summed.
void print_profile(const InferenceEngine& engine, const std::vector<NamedTensor>& inputs, int top,
                   bool to_stderr) {
    constexpr int kRuns = 3;
    const std::vector<double> ms = bench::profile_runs(engine, inputs, kRuns).node_median();
    double total = 0;
    for (double t : ms) total += t;
    const std::vector<bench::OpGroup> rows = bench::group_by_op(engine, ms);
    std::FILE* out = to_stderr ? stderr : stdout;
    fmt::print(out, "  profile (ms per run by op, median of {} runs; total {:.2f} ms)\n", kRuns,
               total);
    for (std::size_t i = 0; i < static_cast<std::size_t>(top) && i < rows.size(); ++i)
        fmt::print(out, "    {:>9.3f} ms {:5.1f}%  {:4d} x  {} ({})\n", rows[i].ms,
                   100.0 * rows[i].ms / total, rows[i].nodes.size(), rows[i].op,
                   rows[i].provider);
    // The slowest nodes, with the shapes of their first two inputs and their first output.
    const std::vector<std::size_t> order = bench::slowest_nodes(ms);
    const Graph& g = engine.graph();
    const bench::ValueShapes shapes = bench::value_shapes(engine, inputs);  // the run's shapes
    auto shape_of = [&](const std::vector<ValueId>& ids, std::size_t k) -> std::string {
        if (k >= ids.size() || ids[k] == kNoValue) return "-";
        const auto v = static_cast<std::size_t>(ids[k]);
        if (v < shapes.dims.size() && shapes.dims[v]) return Shape::from(*shapes.dims[v]).to_string();
        return g.value(ids[k]).shape.to_string();
    };
    fmt::print(out, "  slowest nodes (ms per run; inputs 0 and 1 -> output 0)\n");
    for (std::size_t i = 0; i < static_cast<std::size_t>(top) && i < order.size(); ++i) {
        const Node& n = g.nodes[order[i]];
        const double t = ms[order[i]];
        fmt::print(out, "    {:>9.3f} ms {:5.1f}%  {} '{}'  {} {} -> {}\n", t, 100.0 * t / total,
                   n.op_type, n.name, shape_of(n.inputs, 0), shape_of(n.inputs, 1),
                   shape_of(n.outputs, 0));
    }
}

/// Processors' worth of other processes' time during the timed runs above which ds-benchmark
/// warns (a tenth of a core: a busy loop elsewhere shows as ~1).
constexpr double kSuspectOthers = 0.1;

/// --generate: the decode mode. Each run (warm-up or timed) generates a.generate tokens for
/// a.shapes.batch sequences of a.shapes.seq (default 128) random prompt tokens, all submitted
/// at once; every run draws new prompts (seeded), so no run finds another's prompt in the
/// prefix cache. Figures per run as tools/generate_run.hpp computes them (ds-generate's), then
/// the median over the timed runs; inter-token percentiles over every gap of the timed runs.
int run_generate(const Args& a) {
    using Clock = std::chrono::steady_clock;
    GeneratorOptions go;
    go.engine = a.engine_options();
    if (go.engine.backends.empty()) go.engine.backends = {"cpu"};
    if (a.precision == "bf16") go.engine.precision = Precision::bf16;
    if (a.precision == "int8") go.weights = "int8";
    const std::int64_t sequences = a.shapes.batch;
    const std::int64_t prompt_tokens = a.shapes.seq.value_or(128);
    go.max_sequences = std::max<std::int64_t>(go.max_sequences, sequences);
    const std::vector<double> loadavg = load_average();
    bench::PhaseTicker ticker("ds-benchmark");
    ticker.phase("loading " + a.model.filename().string());
    const std::int64_t rss_before = proc_status_bytes("VmRSS");
    auto t0 = Clock::now();
    auto loaded = Generator::try_load(a.model.string(), go);
    throw_if_error(loaded.status());
    Generator gen = std::move(loaded).value();
    const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const std::int64_t rss_loaded = proc_status_bytes("VmRSS");
    ticker.end();

    GenerateRequest request;
    request.max_tokens = a.generate;
    request.stop_at_eos = false;  // every run generates exactly N tokens per sequence
    std::uint64_t draw = 0;
    auto one_run = [&] {
        std::vector<std::vector<std::int64_t>> prompts;
        for (std::int64_t i = 0; i < sequences; ++i)
            prompts.push_back(bench::random_prompt(prompt_tokens, gen.config().vocab_size,
                                                   a.shapes.seed + 7919 * ++draw));
        bench::GenerationRun run = bench::run_generation(gen, prompts, request);
        if (const GenerateResult* bad = run.first_error()) throw_if_error(bad->status);
        return run;
    };
    ticker.phase("warm-up runs", static_cast<std::size_t>(a.warmup));
    for (int i = 0; i < a.warmup; ++i) {
        (void)one_run();
        ticker.step();
    }
    ticker.phase("timed runs", static_cast<std::size_t>(a.iterations));
    const bench::CpuSample cpu_start = bench::CpuSample::now();
    const auto start = Clock::now();
    std::vector<double> prefill, decode, aggregate, ttft, wall, gaps;
    while (true) {
        const bench::GenerationRun run = one_run();
        prefill.push_back(bench::median(run.prefill_tokens_per_s()));
        decode.push_back(bench::median(run.decode_tokens_per_s()));
        aggregate.push_back(run.aggregate_tokens_per_s());
        ttft.push_back(bench::median(run.ttft_ms()));
        wall.push_back(run.wall_s * 1e3);
        gaps.insert(gaps.end(), run.inter_token_ms.begin(), run.inter_token_ms.end());
        ticker.step();
        const double timed_s = std::chrono::duration<double>(Clock::now() - start).count();
        if (static_cast<std::int64_t>(wall.size()) >= a.iterations && timed_s >= a.min_time_s)
            break;
    }
    const double others = bench::CpuSample::now().others_since(cpu_start);
    ticker.end();
    const int threads = a.threads > 0 ? a.threads : available_processors();
    if (others > kSuspectOthers)
        fmt::print(stderr,
                   "ds-benchmark: warning: the machine was busy: other processes used {:.2f} of "
                   "the {} processors during the timed runs. Figures are suspect; compare "
                   "ratios against a peer timed in the same sitting, alternating.\n",
                   std::max(0.0, others), available_processors());
    const GeneratorMetrics m = gen.metrics();
    using bench::median;
    std::sort(gaps.begin(), gaps.end());
    // A quantile of the inter-token gaps (none when each sequence generated one token).
    auto gap = [&](double q) { return gaps.empty() ? 0.0 : quantile(gaps, q); };
    auto spread = [](const std::vector<double>& v) {
        return Json{{"median", median(v)},
                    {"min", *std::min_element(v.begin(), v.end())},
                    {"max", *std::max_element(v.begin(), v.end())}};
    };
    if (a.json) {
        const Json doc = {
            {"mode", "generate"},
            {"model", a.model.string()},
            {"form", gen.config().form},
            {"precision", a.precision},
            {"weights", go.weights},
            {"threads", threads},
            {"backends", go.engine.backends},
            {"seed", a.shapes.seed},
            {"sequences", sequences},
            {"prompt_tokens", prompt_tokens},
            {"generate_tokens", a.generate},
            {"load_ms", load_ms},
            {"warmup", a.warmup},
            {"iterations", wall.size()},
            {"run_ms", spread(wall)},
            {"prefill_tokens_per_s", spread(prefill)},
            {"decode_tokens_per_s", spread(decode)},
            {"aggregate_tokens_per_s", spread(aggregate)},
            {"ttft_ms", spread(ttft)},
            {"inter_token_ms", {{"p50", gap(0.5)}, {"p90", gap(0.9)}, {"p99", gap(0.99)}}},
            {"steps", m.steps},
            {"preempted", m.preempted},
            {"kv_cache_bytes", m.kv_bytes},
            {"peak_rss_bytes", peak_rss_bytes()},
            {"rss_bytes", {{"before_load", rss_before}, {"after_load", rss_loaded}}},
            {"cpu", cpu_model_name()},
            {"isa", cpu_isa()},
            {"kernel_isa", cpu_kernel_isa()},
            {"isa_extensions", cpu_isa_extensions()},
            {"loadavg", loadavg},
            {"other_processes_cpus", others},
        };
        fmt::print("{}\n", doc.dump());
        return 0;
    }
    fmt::print("ds-benchmark {} --generate {} ({}, {} threads, precision {})\n",
               a.model.filename().string(), a.generate, gen.config().form, threads, a.precision);
    fmt::print("  {:<12}{} ({}; kernels: {})\n", "cpu", cpu_model_name(), cpu_isa(),
               cpu_kernel_isa());
    fmt::print(
        "  {:<12}{} sequence(s) x {} prompt tokens, {} generated each; {} warm-up + {} "
        "timed runs\n",
        "runs", sequences, prompt_tokens, a.generate, a.warmup, wall.size());
    fmt::print("  {:<12}{:.1f} tokens/s (median per sequence; runs {:.1f}..{:.1f})\n", "prefill",
               median(prefill), *std::min_element(prefill.begin(), prefill.end()),
               *std::max_element(prefill.begin(), prefill.end()));
    fmt::print("  {:<12}{:.1f} tokens/s (median per sequence; runs {:.1f}..{:.1f})\n", "decode",
               median(decode), *std::min_element(decode.begin(), decode.end()),
               *std::max_element(decode.begin(), decode.end()));
    fmt::print("  {:<12}{:.1f} tokens/s over all sequences\n", "aggregate", median(aggregate));
    fmt::print("  {:<12}{:.2f} ms; inter-token p50 {:.2f} ms, p90 {:.2f} ms, p99 {:.2f} ms\n",
               "ttft", median(ttft), gap(0.5), gap(0.9), gap(0.99));
    fmt::print("  {:<12}load {:.1f} ms, peak RSS {:.1f} MiB (after load {:.1f} MiB)\n", "memory",
               load_ms, static_cast<double>(peak_rss_bytes()) / 1048576.0,
               static_cast<double>(rss_loaded) / 1048576.0);
    return 0;
}

int run(const Args& a) {
    if (a.generate > 0) return run_generate(a);
    using Clock = std::chrono::steady_clock;
    auto ms_since = [](Clock::time_point t0) {
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    Result r;
    r.loadavg = load_average();
    EngineOptions options = a.engine_options();
    options.device = a.device;
    const std::vector<std::string> backends = a.backends.empty() ? default_backends() : a.backends;

    // On a terminal, what is running while nothing else is printed (a large model loads for
    // seconds).
    bench::PhaseTicker ticker("ds-benchmark");
    ticker.phase("loading " + a.model.filename().string());
    r.rss.before_load = proc_status_bytes("VmRSS");
    auto t0 = Clock::now();
    InferenceEngine engine = bench::load_at_precision(a.model, options, a.precision, &r.int8);
    r.load_ms = ms_since(t0);
    r.rss.after_load = proc_status_bytes("VmRSS");
    r.rss.peak_load = proc_status_bytes("VmHWM");
    r.engine_load_ms = engine.load_ms();
    for (const auto& p : engine.node_providers()) ++r.providers[p];
    r.blocked_nodes = engine.blocked_layout_nodes();
    r.placement_load = engine.node_placement();
    r.optimization = engine.optimization_report();

    ticker.end();

    const bench::GeneratedInputs generated =
        bench::make_inputs_or_exit(a.usage, engine, a.shapes);
    const std::vector<NamedTensor> inputs = generated.tensors();

    // One run, with the --timeout deadline: true when it completed, false when the deadline
    // stopped it; any other error is thrown.
    std::vector<NamedTensor> outputs;
    auto run_once = [&](Clock::time_point started) {
        RunOptions ro;
        if (a.timeout_ms)
            ro.deadline = started + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::milli>(*a.timeout_ms));
        const Status st = engine.try_run(inputs, outputs, ro);
        if (st.code() == ErrorCode::deadline_exceeded && a.timeout_ms) return false;
        throw_if_error(st);
        return true;
    };

    ticker.phase("first run");
    t0 = Clock::now();
    throw_if_error(engine.try_run(inputs, outputs));  // no deadline: it also plans and prepares
    r.first_run_ms = ms_since(t0);
    r.finite = outputs_finite(outputs);
    r.rss.after_first_run = proc_status_bytes("VmRSS");
    const bool peak_reset = reset_peak_rss();
    ticker.phase("warm-up runs", static_cast<std::size_t>(a.warmup));
    for (int i = 0; i < a.warmup; ++i) {
        (void)run_once(Clock::now());
        ticker.step();
    }

    ticker.phase("timed runs", static_cast<std::size_t>(a.iterations));
    const bench::CpuSample cpu_start = bench::CpuSample::now();
    const auto start = Clock::now();
    while (true) {
        t0 = Clock::now();
        if (!run_once(t0)) ++r.timed_out;
        r.latencies_ms.push_back(ms_since(t0));
        ticker.step();
        r.timed_s = ms_since(start) / 1000.0;
        if (static_cast<std::int64_t>(r.latencies_ms.size()) >= a.iterations &&
            r.timed_s >= a.min_time_s)
            break;
    }
    r.others_cpus = bench::CpuSample::now().others_since(cpu_start);
    ticker.end();
    std::sort(r.latencies_ms.begin(), r.latencies_ms.end());
    r.placement = engine.node_placement();
    r.runs = 1 + static_cast<std::size_t>(a.warmup) + r.latencies_ms.size();
    r.throughput = static_cast<double>(generated.batch.value_or(a.shapes.batch)) *
                   static_cast<double>(r.latencies_ms.size()) / r.timed_s;
    r.flops = flops_per_sample(a.model, generated.seq);
    r.peak_rss = peak_rss_bytes();
    if (peak_reset) r.rss.peak_runs = proc_status_bytes("VmHWM");
    r.plan = engine.memory_plan_stats();
    r.weights = engine.weight_memory();
    r.pool_peak_reserved = default_memory_pool()->stats().peak_bytes_reserved;
    const int threads = a.threads > 0 ? a.threads : available_processors();
    // Figures taken while other processes used the processors are suspect: say so (stderr, so
    // JSON on stdout stays clean).
    if (r.others_cpus > kSuspectOthers)
        fmt::print(stderr,
                   "ds-benchmark: warning: the machine was busy: other processes used {:.2f} of "
                   "the {} processors during the timed runs (load average {:.2f} before the load). "
                   "Latencies are suspect; compare ratios against a peer timed in the same "
                   "sitting, alternating.\n",
                   std::max(0.0, r.others_cpus), available_processors(), r.loadavg.at(0));
    if (a.json)
        print_json(a, backends, generated, threads, r);
    else
        print_table(a, backends, generated, threads, r);
    // After the summary (it names the model and settings the profile is of); on stderr with
    // --json.
    if (a.profile > 0) {
        std::fflush(stdout);
        print_profile(engine, inputs, a.profile, a.json);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-benchmark", [&] { return run(a); });
}
