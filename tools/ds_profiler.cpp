// ds-profiler: where a model's time goes, node by node, against this machine's peaks.
//
//   ds-profiler --model PATH [--precision P] [--batch N] [--seq N] [--shape NAME=DxD]...
//               [--seed N] [--threads N] [--backends LIST] [--opt-level 0-3]
//               [--algo-search rule|measure] [--warmup N] [--runs N] [--top N]
//               [--peaks GFLOPS,GBPS] [--trace FILE.json] [--json]
//   ds-profiler --help | --version
//
// Loads the model as ds-benchmark does (tools/bench_cli.hpp: the same options, inputs from
// tools/bench_inputs.hpp), measures the machine's peaks (or takes --peaks), then runs it: one
// shape run with a ValueObserver (RunOptions::observer, any_layout: every top-level node's
// outputs, blocked ones included, with the shapes this run actually had), --warmup runs, and
// --runs profiled runs with RunOptions::node_ms (tools/node_profile.hpp, shared with
// ds-benchmark --profile), each timed end to end as well.
//
// Per node (the compiled graph, InferenceEngine::graph(), in execution order) and per op type
// and provider: the kernel's algorithm for a node (what really runs in the run's shape class,
// InferenceEngine::node_descriptions(): e.g. "dsinfer:qconv-nhwc-avx2-a7"), the median time over
// the profiled runs, its FLOPs and bytes moved at the shape run's shapes (tools/model_cost.hpp, the
// count ds-inspect shares: 2 x the multiply-adds of the contraction ops, 0 for the rest; each
// distinct input, weights included, and output once), the GFLOP/s and GB/s achieved, and a roofline
// verdict: compute-bound when the node's FLOPs per byte exceed the ridge (peak FLOP/s / peak
// bytes/s), else memory-bound, with its achieved rate as a share of the roof at its intensity.
//
// Peaks (well under a second): FLOP/s, the best of a few runs of a 1024x1024x1024 float32
// MatMul built with the public Graph API and compiled with the model's engine options
// (backends, threads, precision); bandwidth, the best of a few memcpy's of a buffer twice the
// last-level cache (64-128 MiB) split over the engine's thread count, counting bytes read and
// written (STREAM's copy).
//
// Output: a header (model, inputs, threads, ISA, the peaks), the --top slowest nodes, the op
// types, and the sum of the node times against the end-to-end latency of the same runs (the
// rest is the engine's work outside nodes: input checks, plan lookup, output hand-over).
// --json prints everything as one JSON object on one line; --trace FILE writes a Chrome
// trace-event JSON (Perfetto, chrome://tracing): a complete event per node per profiled run
// (the engine reports durations, not start times, so a run's nodes are laid end to end from
// the run's start; the run itself is an event on a second track), process and thread names,
// and a counter track of activation bytes: the live bytes derived from the graph's value
// lifetimes (each intermediate from its producer to its last reader, at the shape run's sizes;
// the engine reports only the plan's totals, InferenceEngine::memory_plan_stats(), shown
// beside it). Exit status: 0 ok, 1 engine error or the trace file cannot be written, 2 bad
// command line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench_cli.hpp"
#include "model_cost.hpp"
#include "node_profile.hpp"
#include "progress.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

using bench::Dims;
using bench::Json;
using bench::ValueShapes;
using bench::value_shapes;
using Clock = std::chrono::steady_clock;

const char* const kSynopsis =
    "usage: ds-profiler --model PATH [--precision fp32|fp16|bf16|int8] [--batch N] [--seq N]\n"
    "                   [--shape NAME=DxD]... [--seed N] [--threads N] [--backends LIST]\n"
    "                   [--opt-level 0-3] [--algo-search rule|measure] [--warmup N]\n"
    "                   [--runs N] [--top N] [--peaks GFLOPS,GBPS] [--trace FILE.json]\n"
    "                   [--json]\n"
    "       ds-profiler --help | --version\n";

const char* const kDescription =
    "Profiles one model at one shape node by node: each node's median wall time over the\n"
    "profiled runs, its FLOPs and bytes moved at the run's shapes, the GFLOP/s and GB/s it\n"
    "achieved, whether it is compute- or memory-bound against this machine's peaks (a\n"
    "roofline), and the algorithm its kernel ran (e.g. dsinfer:qconv-nhwc-avx2-a7, a oneDNN\n"
    "primitive's implementation, reference); the same per op type; and the sum of the node\n"
    "times against the end-to-end latency of the same runs (the rest is the engine's own work\n"
    "between and around nodes).\n"
    "\n"
    "Runs: the load; the peaks; one run that records the shape of every value (a value\n"
    "observer: the shapes the run had); --warmup runs; --runs profiled runs. Inputs are\n"
    "generated as ds-benchmark makes them; the nodes are those of the optimized graph.\n"
    "\n"
    "FLOPs are 2 x the multiply-adds of MatMul, Gemm, Conv, ConvTranspose, their quantized\n"
    "and fused forms and attention (as ds-inspect counts them); other ops count 0 FLOPs and\n"
    "are memory-bound. Bytes are each distinct input (weights included, once) and each output\n"
    "of the node: the least traffic it needs.\n"
    "\n"
    "Peaks, measured at startup in under a second unless --peaks gives them: FLOP/s, the best\n"
    "of a few runs of a 1024x1024x1024 float32 MatMul compiled with the model's engine options\n"
    "(backends, threads, precision); memory bandwidth, the best of a few memcpy's of a buffer\n"
    "twice the last-level cache (64-128 MiB) on the engine's threads, bytes read + written.\n"
    "A node above the ridge (peak FLOP/s over peak bytes/s) in FLOPs per byte is compute-bound;\n"
    "roof% is its rate against the roof at its intensity (above 100 for a memory-bound node\n"
    "whose data stayed in the caches, faster than the memory the peak measures).\n"
    "\n"
    "--trace writes a Chrome trace-event JSON for Perfetto or chrome://tracing: one event per\n"
    "node per profiled run (the engine reports node durations, not start times: a run's nodes\n"
    "are laid end to end from its start, and the run's own event on a second track shows the\n"
    "time outside them), and a counter track of activation bytes: the live bytes derived from\n"
    "the graph's value lifetimes (each intermediate value from its producer to its last\n"
    "reader, at the shape run's sizes; no in-place sharing, no workspaces), beside the planned\n"
    "arena's size (the engine reports the plan's totals only).\n";

const char* const kExamples =
    "ds-profiler --model models/digits/digits.onnx --batch 64\n"
    "    the digits model's nodes at batch 64 on every processor\n"
    "ds-profiler --model bert.onnx --seq 128 --threads 2 --top 10 --trace bert.json\n"
    "    a BERT's 10 slowest nodes, and a trace to open in Perfetto\n"
    "ds-profiler --model resnet50.onnx --batch 8 --peaks 200,20 --json\n"
    "    against given peaks instead of measured ones, as one JSON line\n";

const char* const kExitStatus =
    "0  ok\n"
    "1  engine error (the model does not load or run), or the trace cannot be written\n"
    "2  bad command line (nothing runs)\n";

struct Peaks {
    double gflops = 0, gbps = 0;
};

struct Args : bench::CommonArgs {
    std::string precision = "fp32";
    int warmup = 2;
    int runs = 10;
    int top = 20;
    std::optional<Peaks> peaks;  ///< --peaks
    fs::path trace;              ///< --trace
};

/// "GFLOPS,GBPS" -> two positive numbers into `out`.
std::string parse_peaks(const std::string& text, std::optional<Peaks>& out) {
    const auto comma = text.find(',');
    const std::string want = "expects GFLOPS,GBPS (two numbers > 0), got '" + text + "'";
    if (comma == std::string::npos) return want;
    Peaks p;
    if (!bench::parse_number(text.substr(0, comma), 0, true, "", p.gflops).empty() ||
        !bench::parse_number(text.substr(comma + 1), 0, true, "", p.gbps).empty())
        return want;
    out = p;
    return {};
}

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli({"ds-profiler", "where a model's time goes, node by node", kSynopsis,
                    kDescription, kExamples, kExitStatus});
    cli.add_common(a);
    cli.text("--precision", a.precision, "P",
             "fp32 (default); fp16, bf16 (half-width weights);\nint8 (a pre-quantized model as "
             "it is, a float32 one\nquantized dynamically at load)",
             bench::check_precision)
        ->group("Engine");
    cli.integer("--warmup", a.warmup, 0, 1 << 20,
                "runs after the shape run, before profiling\n(default 2)")
        ->group("Runs");
    cli.integer("--runs", a.runs, 1, 1 << 20, "profiled runs (default 10); times are medians")
        ->group("Runs");
    cli.option("--peaks", "GFLOPS,GBPS",
               "the machine's peak GFLOP/s and GB/s instead of\nmeasuring them (e.g. 200,20)",
               [&a](const std::string& s) { return parse_peaks(s, a.peaks); })
        ->group("Runs");
    cli.integer("--top", a.top, 1, 1 << 20, "list the N slowest nodes (default 20)")
        ->group("Output");
    std::string trace;
    cli.text("--trace", trace, "FILE",
             "write a Chrome trace-event JSON (Perfetto,\nchrome://tracing)",
             [](const std::string& s) {
                 return s.empty() ? std::string("expects a file name") : std::string();
             })
        ->group("Output");
    cli.parse(argc, argv);
    a.trace = trace;
    return a;
}

// ---- the machine's peaks ----

/// What the peaks are and how they were found.
struct MachinePeaks {
    double gflops = 0, gbps = 0;
    bool measured = false;
    double measure_ms = 0;
    std::string flops_probe, bandwidth_probe;
    double ridge() const { return gbps > 0 ? gflops / gbps : 0; }  ///< FLOPs per byte
};

/// Peak FLOP/s: the best of a few runs of a 1024^3 float32 MatMul (its B a weight, as a
/// model's) compiled with `options`.
double measure_peak_gflops(EngineOptions options) {
    constexpr std::int64_t n = 1024;
    Graph g;
    g.opset_imports = {{"", 17}};
    const ValueId a = g.add_value("a", DType::f32, SymbolicShape::from(Shape{n, n}));
    g.inputs = {a};
    Tensor w = Tensor::empty(DType::f32, Shape{n, n});
    float* wp = w.data<float>();
    for (std::int64_t i = 0; i < n * n; ++i) wp[i] = static_cast<float>(i % 7 - 3) * 0.125f;
    const ValueId b = g.add_initializer("b", std::move(w));
    const ValueId y = g.add_value("y", DType::f32);
    g.add_node("MatMul", {a, b}, {y}, "peak_matmul");
    g.outputs = {y};
    options.dump_optimized_graph.clear();
    options.observed_values.clear();
    const InferenceEngine engine = InferenceEngine::compile(std::move(g), options);
    Tensor x = Tensor::empty(DType::f32, Shape{n, n});
    float* xp = x.data<float>();
    for (std::int64_t i = 0; i < n * n; ++i) xp[i] = static_cast<float>(i % 5 - 2) * 0.25f;
    const std::vector<NamedTensor> inputs{{"a", x}};
    (void)engine.run(inputs);
    double best = 1e300;
    const auto start = Clock::now();
    for (int r = 0; r < 50; ++r) {
        const auto t0 = Clock::now();
        (void)engine.run(inputs);
        const auto t1 = Clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
        if (r >= 2 && t1 - start > std::chrono::milliseconds(120)) break;
    }
    return 2.0 * static_cast<double>(n * n * n) / best / 1e9;
}

/// The buffer the bandwidth probe copies (twice: source and destination): twice the
/// last-level cache, 64-128 MiB (a virtual machine may report its host's whole L3).
std::size_t bandwidth_buffer_bytes() {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const std::size_t twice = llc > 0 ? 2 * static_cast<std::size_t>(llc) : 0;
    return std::clamp<std::size_t>(twice, std::size_t{64} << 20, std::size_t{128} << 20);
}

/// Peak memory bandwidth (GB/s, read + write): the best of a few memcpy's of `bytes` split
/// over `threads` threads (each touches its own slice first).
double measure_peak_gbps(int threads, std::size_t bytes) {
    const auto t = static_cast<std::size_t>(std::max(1, threads));
    const std::size_t slice = (bytes / t) & ~std::size_t{4095};
    bytes = slice * t;
    std::unique_ptr<unsigned char[]> src(new unsigned char[bytes]);
    std::unique_ptr<unsigned char[]> dst(new unsigned char[bytes]);
    const auto on_threads = [&](auto&& work) {
        std::vector<std::thread> team;
        for (std::size_t i = 1; i < t; ++i) team.emplace_back(work, i * slice);
        work(std::size_t{0});
        for (auto& th : team) th.join();
    };
    on_threads([&](std::size_t at) {
        std::memset(src.get() + at, 1, slice);
        std::memset(dst.get() + at, 0, slice);
    });
    double best = 1e300;
    const auto start = Clock::now();
    for (int r = 0; r < 20; ++r) {
        const auto t0 = Clock::now();
        on_threads([&](std::size_t at) { std::memcpy(dst.get() + at, src.get() + at, slice); });
        const auto t1 = Clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
        if (r >= 2 && t1 - start > std::chrono::milliseconds(120)) break;
    }
    return 2.0 * static_cast<double>(bytes) / best / 1e9;
}

MachinePeaks machine_peaks(const Args& a, int threads) {
    MachinePeaks p;
    const std::size_t buffer = bandwidth_buffer_bytes();
    p.flops_probe = fmt::format("1024^3 MatMul at {}", a.precision);
    p.bandwidth_probe = fmt::format("memcpy {} MiB on {} thread{}, read + write", buffer >> 20,
                                    threads, threads == 1 ? "" : "s");
    if (a.peaks) {
        p.gflops = a.peaks->gflops;
        p.gbps = a.peaks->gbps;
        p.flops_probe = p.bandwidth_probe = "given (--peaks)";
        return p;
    }
    const auto t0 = Clock::now();
    EngineOptions o = a.engine_options();
    o.precision = bench::precision_of(a.precision);
    p.gflops = measure_peak_gflops(o);
    p.gbps = measure_peak_gbps(threads, buffer);
    p.measured = true;
    p.measure_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return p;
}

// ---- activation bytes over the node sequence ----

/// The names a subgraph (recursively) reads from enclosing graphs.
void captured_names(const Graph& g, std::vector<std::string>& out) {
    for (const Value& v : g.values)
        if (v.is_capture) out.push_back(v.name);
    for (const Node& n : g.nodes)
        for (const auto& [name, attr] : n.attributes) {
            (void)name;
            if (attr.kind == AttrKind::g && attr.g) captured_names(*attr.g, out);
            if (attr.kind == AttrKind::graphs)
                for (const auto& sg : attr.graphs)
                    if (sg) captured_names(*sg, out);
        }
}

/// Bytes of the intermediate values (not graph inputs, outputs or constants) live at each
/// node: each from its producer to its last reader (a subgraph's reads count at its node).
std::vector<double> live_bytes(const Graph& g, const ValueShapes& s) {
    const std::size_t nn = g.nodes.size(), nv = g.num_values();
    std::vector<std::int64_t> produced(nv, -1), last(nv, -1);
    std::unordered_map<std::string, std::size_t> by_name;
    for (std::size_t v = 0; v < nv; ++v) by_name.emplace(g.values[v].name, v);
    for (std::size_t ni = 0; ni < nn; ++ni) {
        const Node& n = g.nodes[ni];
        const auto at = static_cast<std::int64_t>(ni);
        for (ValueId id : n.inputs)
            if (id != kNoValue) last[static_cast<std::size_t>(id)] = at;
        for (ValueId id : n.outputs)
            if (id != kNoValue) produced[static_cast<std::size_t>(id)] = at;
        std::vector<std::string> captures;
        for (const auto& [name, attr] : n.attributes) {
            (void)name;
            if (attr.kind == AttrKind::g && attr.g) captured_names(*attr.g, captures);
            if (attr.kind == AttrKind::graphs)
                for (const auto& sg : attr.graphs)
                    if (sg) captured_names(*sg, captures);
        }
        for (const std::string& c : captures)
            if (const auto it = by_name.find(c); it != by_name.end()) last[it->second] = at;
    }
    std::vector<char> is_output(nv, 0);
    for (ValueId id : g.outputs) is_output[static_cast<std::size_t>(id)] = 1;
    std::vector<double> delta(nn + 1, 0.0);
    for (std::size_t v = 0; v < nv; ++v) {
        if (produced[v] < 0 || is_output[v] != 0 || !s.dims[v] || !s.dtype[v]) continue;
        const double bytes =
            bench::elements(*s.dims[v]) * static_cast<double>(dtype_size(*s.dtype[v]));
        const auto from = static_cast<std::size_t>(produced[v]);
        const auto to = static_cast<std::size_t>(std::max(produced[v], last[v]));
        delta[from] += bytes;
        delta[to + 1] -= bytes;
    }
    std::vector<double> live(nn);
    double now = 0;
    for (std::size_t i = 0; i < nn; ++i) live[i] = now += delta[i];
    return live;
}

// ---- the report ----

/// One node of the compiled graph, profiled.
struct NodeRow {
    std::size_t index = 0;
    std::string name, op, domain, provider;
    std::string algorithm;                     ///< what really runs (NodeDescription::algorithm)
    std::vector<std::string> inputs, outputs;  ///< "[1,128,768]" ("-" omitted, "?" unknown)
    double ms = 0, ms_min = 0, ms_max = 0;
    std::optional<double> flops;  ///< nullopt: a shape it needs is unknown
    std::optional<double> bytes;
};

/// Achieved rates and the roofline verdict of `flops` and `bytes` in `ms`.
struct Rates {
    double gflops = NAN, gbps = NAN, intensity = NAN, roof_pct = NAN;
    std::string bound = "-";
};

Rates rates(std::optional<double> flops, std::optional<double> bytes, double ms,
            const MachinePeaks& p) {
    Rates r;
    const double s = ms / 1000.0;
    if (flops && s > 0) r.gflops = *flops / s / 1e9;
    if (bytes && s > 0) r.gbps = *bytes / s / 1e9;
    if (!flops || !bytes || *bytes <= 0) return r;
    r.intensity = *flops / *bytes;
    r.bound = r.intensity > p.ridge() ? "compute" : "memory";
    const double roof = std::min(p.gflops, r.intensity * p.gbps);  // GFLOP/s at this intensity
    if (s > 0) r.roof_pct = *flops > 0 ? 100.0 * r.gflops / roof : 100.0 * r.gbps / p.gbps;
    return r;
}

std::string dims_text(const std::optional<Dims>& d) {
    if (!d) return "?";
    return fmt::format("[{}]", fmt::join(*d, ","));
}

struct Report {
    int threads = 0;
    std::vector<std::string> backends;
    MachinePeaks peaks;
    bench::NodeProfile profile;
    std::vector<NodeRow> nodes;
    std::vector<bench::OpGroup> ops;
    double total_ms = 0;       ///< the sum of the nodes' medians
    double node_sum_ms = 0;    ///< the median over runs of each run's node sum
    double e2e_ms = 0;         ///< the median end-to-end latency
    std::vector<double> live;  ///< activation bytes live at each node
    MemoryPlanStats plan;
    std::map<std::string, int> providers;
};

std::vector<NodeRow> node_rows(const InferenceEngine& engine, const ValueShapes& s,
                               const bench::NodeProfile& p) {
    const Graph& g = engine.graph();
    const bench::ValueDims dims = [&s](ValueId id) -> std::optional<Dims> {
        if (id == kNoValue || static_cast<std::size_t>(id) >= s.dims.size()) return std::nullopt;
        return s.dims[static_cast<std::size_t>(id)];
    };
    const auto dtype_of = [&s](ValueId id) -> std::optional<DType> {
        if (id == kNoValue || static_cast<std::size_t>(id) >= s.dtype.size()) return std::nullopt;
        return s.dtype[static_cast<std::size_t>(id)];
    };
    const std::vector<double> med = p.node_median();
    const std::vector<NodeDescription> described = engine.node_descriptions();
    std::vector<NodeRow> rows;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        NodeRow r;
        r.index = i;
        r.name = n.name.empty() ? "<unnamed>" : n.name;
        r.op = n.op_type;
        r.domain = n.domain.empty() ? "ai.onnx" : n.domain;
        r.provider = i < engine.node_providers().size() ? engine.node_providers()[i] : "?";
        r.algorithm = i < described.size() ? described[i].algorithm : "?";
        for (ValueId id : n.inputs) r.inputs.push_back(id == kNoValue ? "-" : dims_text(dims(id)));
        for (ValueId id : n.outputs)
            r.outputs.push_back(id == kNoValue ? "-" : dims_text(dims(id)));
        const std::vector<double> samples = p.node_samples(i);
        r.ms = i < med.size() ? med[i] : 0;
        r.ms_min = samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end());
        r.ms_max = samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end());
        const auto f = bench::node_flops(n, dims);
        r.flops = !f ? std::optional<double>(0.0) : *f < 0 ? std::nullopt : f;
        r.bytes = bench::node_bytes(n, dims, dtype_of);
        rows.push_back(std::move(r));
    }
    return rows;
}

/// The sums of a group's FLOPs and bytes (nullopt when a node's is unknown).
std::pair<std::optional<double>, std::optional<double>> group_cost(const bench::OpGroup& grp,
                                                                   const Report& r) {
    std::optional<double> flops = 0.0, bytes = 0.0;
    for (std::size_t i : grp.nodes) {
        const NodeRow& n = r.nodes[i];
        flops = flops && n.flops ? std::optional<double>(*flops + *n.flops) : std::nullopt;
        bytes = bytes && n.bytes ? std::optional<double>(*bytes + *n.bytes) : std::nullopt;
    }
    return {flops, bytes};
}

// ---- output ----

Json number_or_null(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

Json rates_json(const Rates& x) {
    return {{"gflops_per_s", x.gflops},
            {"gb_per_s", x.gbps},
            {"flops_per_byte", x.intensity},
            {"bound", x.bound},
            {"roof_pct", x.roof_pct}};
}

Json peaks_json(const MachinePeaks& p) {
    return {{"gflops_per_s", p.gflops},          {"gb_per_s", p.gbps},
            {"ridge_flops_per_byte", p.ridge()}, {"source", p.measured ? "measured" : "given"},
            {"flops_probe", p.flops_probe},      {"bandwidth_probe", p.bandwidth_probe},
            {"measure_ms", p.measure_ms}};
}

Json report_json(const Args& a, const bench::GeneratedInputs& in, const Report& r) {
    Json inputs = Json::array();
    for (const bench::GeneratedInput& g : in.inputs)
        inputs.push_back({{"name", g.input.name},
                          {"dtype", dtype_name(g.input.tensor.dtype())},
                          {"shape", g.input.tensor.shape().to_vector()},
                          {"fill", g.fill}});
    Json nodes = Json::array();
    for (const NodeRow& n : r.nodes) {
        Json j = {{"index", n.index},
                  {"name", n.name},
                  {"op", n.op},
                  {"domain", n.domain},
                  {"provider", n.provider},
                  {"algorithm", n.algorithm},
                  {"inputs", n.inputs},
                  {"outputs", n.outputs},
                  {"ms", n.ms},
                  {"ms_min", n.ms_min},
                  {"ms_max", n.ms_max},
                  {"pct", r.total_ms > 0 ? 100.0 * n.ms / r.total_ms : 0.0},
                  {"flops", number_or_null(n.flops)},
                  {"bytes", number_or_null(n.bytes)}};
        j.update(rates_json(rates(n.flops, n.bytes, n.ms, r.peaks)));
        j["live_bytes"] = n.index < r.live.size() ? r.live[n.index] : 0.0;
        nodes.push_back(std::move(j));
    }
    Json ops = Json::array();
    for (const bench::OpGroup& g : r.ops) {
        const auto [flops, bytes] = group_cost(g, r);
        Json j = {{"op", g.op},
                  {"provider", g.provider},
                  {"nodes", g.nodes.size()},
                  {"ms", g.ms},
                  {"pct", r.total_ms > 0 ? 100.0 * g.ms / r.total_ms : 0.0},
                  {"flops", number_or_null(flops)},
                  {"bytes", number_or_null(bytes)}};
        j.update(rates_json(rates(flops, bytes, g.ms, r.peaks)));
        ops.push_back(std::move(j));
    }
    const double live_peak = r.live.empty() ? 0.0 : *std::max_element(r.live.begin(), r.live.end());
    return {
        {"tool", "ds-profiler"},
        {"version", dsinfer::version()},
        {"model", a.model.string()},
        {"precision", a.precision},
        {"batch", in.batch.value_or(a.shapes.batch)},
        {"seq", bench::json_or_null(in.seq)},
        {"threads", r.threads},
        {"backends", r.backends},
        {"seed", a.shapes.seed},
        {"inputs", std::move(inputs)},
        {"cpu", bench::cpu_model_name()},
        {"isa", bench::cpu_isa()},
        {"kernel_isa", cpu_kernel_isa()},
        {"isa_extensions", bench::cpu_isa_extensions()},
        {"peaks", peaks_json(r.peaks)},
        {"runs", {{"shape_runs", 1}, {"warmup", a.warmup}, {"profiled", r.profile.runs()}}},
        {"nodes_by_provider", r.providers},
        {"flops_counted", bench::kFlopsCounted},
        {"nodes", std::move(nodes)},
        {"ops", std::move(ops)},
        {"summary",
         {{"node_ms_total", r.total_ms},
          {"node_sum_ms", r.node_sum_ms},
          {"end_to_end_ms", r.e2e_ms},
          {"node_sum_pct_of_end_to_end", r.e2e_ms > 0 ? 100.0 * r.node_sum_ms / r.e2e_ms : 0.0},
          {"node_sum_ms_runs", r.profile.run_node_sums()},
          {"end_to_end_ms_runs", r.profile.run_ms}}},
        {"memory",
         {{"planned_peak_bytes", r.plan.planned_peak_bytes},
          {"lower_bound_bytes", r.plan.lower_bound_bytes},
          {"planned_values", r.plan.planned_values},
          {"derived_live_peak_bytes", live_peak},
          {"derived_from",
           "value lifetimes: each intermediate from its producer to its last reader"}}},
        {"trace", a.trace.empty() ? Json(nullptr) : Json(a.trace.string())},
    };
}

/// "12.3" or "-" for NaN, in `width` columns.
std::string num(double v, int width, int precision) {
    if (!std::isfinite(v)) return fmt::format("{:>{}}", "-", width);
    return fmt::format("{:>{}.{}f}", v, width, precision);
}

/// "512 B", "16.0 KiB", "2.3 MiB", "1.1 GiB".
std::string bytes_text(double b) {
    static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, kUnits[u]);
}

/// "[1,128,768] [768,3072] -> [1,128,3072]": the first two inputs and the first output.
std::string shapes_text(const NodeRow& n) {
    std::string s;
    for (std::size_t k = 0; k < n.inputs.size() && k < 2; ++k) s += (k ? " " : "") + n.inputs[k];
    if (n.inputs.size() > 2) s += " ...";
    return s + " -> " + (n.outputs.empty() ? "-" : n.outputs.front());
}

void print_text(const Args& a, const bench::GeneratedInputs& in, const Report& r) {
    const MachinePeaks& p = r.peaks;
    fmt::print("ds-profiler {}  ({}, batch {}{}, threads {}, backends {})\n", a.model.string(),
               a.precision, in.batch.value_or(a.shapes.batch),
               in.seq ? fmt::format(", seq {}", *in.seq) : "", r.threads,
               fmt::join(r.backends, ","));
    std::string ext;
    for (const auto& e : bench::cpu_isa_extensions()) ext += " " + e;
    fmt::print("  {:<10}{} ({}{}; kernels: {})\n", "cpu", bench::cpu_model_name(), bench::cpu_isa(),
               ext, cpu_kernel_isa());
    for (const auto& g : in.inputs)
        fmt::print("  {:<10}{} {} {} {}{}\n", "input", g.input.name,
                   dtype_name(g.input.tensor.dtype()), g.input.tensor.shape().to_string(), g.fill,
                   g.fill == "token ids" ? fmt::format(" in [{}, {})", g.low, g.high) : "");
    if (p.measured)
        fmt::print(
            "  {:<10}{:.1f} GFLOP/s ({}), {:.1f} GB/s ({}); ridge {:.1f} FLOP/B; measured "
            "in {:.0f} ms\n",
            "peaks", p.gflops, p.flops_probe, p.gbps, p.bandwidth_probe, p.ridge(), p.measure_ms);
    else
        fmt::print("  {:<10}{:.1f} GFLOP/s, {:.1f} GB/s (--peaks); ridge {:.1f} FLOP/B\n", "peaks",
                   p.gflops, p.gbps, p.ridge());
    std::string prov;
    for (const auto& [name, count] : r.providers)
        prov += fmt::format("{}{} {}", prov.empty() ? "" : ", ", name, count);
    fmt::print("  {:<10}{} profiled after a shape run and {} warm-up; {} nodes ({})\n", "runs",
               r.profile.runs(), a.warmup, r.nodes.size(), prov);
    const double live_peak = r.live.empty() ? 0.0 : *std::max_element(r.live.begin(), r.live.end());
    fmt::print(
        "  {:<10}planned arena {} (lower bound {}); live intermediates peak {} (from value "
        "lifetimes)\n",
        "memory", bytes_text(static_cast<double>(r.plan.planned_peak_bytes)),
        bytes_text(static_cast<double>(r.plan.lower_bound_bytes)), bytes_text(live_peak));

    const std::vector<double> med = [&] {
        std::vector<double> m;
        for (const NodeRow& n : r.nodes) m.push_back(n.ms);
        return m;
    }();
    const std::vector<std::size_t> order = bench::slowest_nodes(med);
    const std::size_t top = std::min(order.size(), static_cast<std::size_t>(a.top));
    std::size_t op_w = 2, prov_w = 8, shape_w = 6, node_w = 4;
    for (std::size_t k = 0; k < top; ++k) {
        const NodeRow& n = r.nodes[order[k]];
        op_w = std::max(op_w, n.op.size());
        prov_w = std::max(prov_w, n.provider.size());
        shape_w = std::max(shape_w, shapes_text(n).size());
        node_w = std::max(node_w, n.name.size());
    }
    fmt::print("\ntop {} of {} nodes by median time\n", top, r.nodes.size());
    fmt::print("  {:>9} {:>6} {:>9} {:>8}  {:<7} {:>6}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", "ms",
               "%", "GFLOP/s", "GB/s", "bound", "roof%", "op", op_w, "provider", prov_w, "shapes",
               shape_w, "node", node_w, "algorithm");
    for (std::size_t k = 0; k < top; ++k) {
        const NodeRow& n = r.nodes[order[k]];
        const Rates x = rates(n.flops, n.bytes, n.ms, p);
        fmt::print("  {:>9.3f} {} {} {}  {:<7} {}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", n.ms,
                   num(r.total_ms > 0 ? 100.0 * n.ms / r.total_ms : NAN, 6, 1),
                   num(n.flops && *n.flops > 0 ? x.gflops : NAN, 9, 1), num(x.gbps, 8, 2), x.bound,
                   num(x.roof_pct, 6, 1), n.op, op_w, n.provider, prov_w, shapes_text(n), shape_w,
                   n.name, node_w, n.algorithm);
    }
    std::size_t gop_w = 2;
    for (const auto& g : r.ops) gop_w = std::max(gop_w, g.op.size());
    fmt::print("\nby op type (node medians summed)\n");
    fmt::print("  {:>9} {:>6} {:>5} {:>10} {:>10} {:>9} {:>8}  {:<7} {:>6}  {:<{}}  {}\n", "ms",
               "%", "nodes", "GFLOP", "MB", "GFLOP/s", "GB/s", "bound", "roof%", "op", gop_w,
               "provider");
    for (const auto& g : r.ops) {
        const auto [flops, bytes] = group_cost(g, r);
        const Rates x = rates(flops, bytes, g.ms, p);
        fmt::print("  {:>9.3f} {} {:>5} {} {} {} {}  {:<7} {}  {:<{}}  {}\n", g.ms,
                   num(r.total_ms > 0 ? 100.0 * g.ms / r.total_ms : NAN, 6, 1), g.nodes.size(),
                   num(flops ? *flops / 1e9 : NAN, 10, 3), num(bytes ? *bytes / 1e6 : NAN, 10, 2),
                   num(flops && *flops > 0 ? x.gflops : NAN, 9, 1), num(x.gbps, 8, 2), x.bound,
                   num(x.roof_pct, 6, 1), g.op, gop_w, g.provider);
    }
    const double pct = r.e2e_ms > 0 ? 100.0 * r.node_sum_ms / r.e2e_ms : 0.0;
    fmt::print(
        "\nsum of node times {:.3f} ms vs end-to-end {:.3f} ms ({:.1f}%), medians over {} "
        "runs{}\n",
        r.node_sum_ms, r.e2e_ms, pct, r.profile.runs(),
        pct < 90 ? fmt::format("; {:.3f} ms of each run is the engine's work outside "
                               "nodes (input checks, plan lookup, outputs)",
                               r.e2e_ms - r.node_sum_ms)
                 : "");
}

/// The Chrome trace-event document (see the file comment).
Json trace_json(const Args& a, const Report& r) {
    constexpr int kPid = 1, kNodesTid = 1, kRunsTid = 2;
    Json events = Json::array();
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", 0},
                      {"args", {{"name", "ds-profiler " + a.model.filename().string()}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", kNodesTid},
                      {"args", {{"name", "nodes (laid end to end)"}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", kRunsTid},
                      {"args", {{"name", "runs (end to end)"}}}});
    for (const int tid : {kNodesTid, kRunsTid})
        events.push_back({{"name", "thread_sort_index"},
                          {"ph", "M"},
                          {"pid", kPid},
                          {"tid", tid},
                          {"args", {{"sort_index", tid}}}});
    const double arena = static_cast<double>(r.plan.planned_peak_bytes);
    const std::vector<double> sums = r.profile.run_node_sums();
    for (std::size_t run = 0; run < r.profile.runs(); ++run) {
        const double start_us = r.profile.run_start_ms[run] * 1000.0;
        events.push_back({{"name", fmt::format("run {}", run + 1)},
                          {"cat", "run"},
                          {"ph", "X"},
                          {"ts", start_us},
                          {"dur", r.profile.run_ms[run] * 1000.0},
                          {"pid", kPid},
                          {"tid", kRunsTid},
                          {"args", {{"run", run + 1}, {"node_sum_ms", sums[run]}}}});
        double at = start_us;
        const std::vector<double>& ms = r.profile.node_ms[run];
        for (const NodeRow& n : r.nodes) {
            const double dur = (n.index < ms.size() ? ms[n.index] : 0.0) * 1000.0;
            events.push_back({{"name", "activation bytes"},
                              {"ph", "C"},
                              {"ts", at},
                              {"pid", kPid},
                              {"tid", 0},
                              {"args",
                               {{"live", n.index < r.live.size() ? r.live[n.index] : 0.0},
                                {"planned arena", arena}}}});
            events.push_back({{"name", n.name},
                              {"cat", n.op},
                              {"ph", "X"},
                              {"ts", at},
                              {"dur", dur},
                              {"pid", kPid},
                              {"tid", kNodesTid},
                              {"args",
                               {{"op", n.op},
                                {"provider", n.provider},
                                {"algorithm", n.algorithm},
                                {"inputs", n.inputs},
                                {"outputs", n.outputs},
                                {"flops", number_or_null(n.flops)},
                                {"bytes", number_or_null(n.bytes)},
                                {"run", run + 1}}}});
            at += dur;
        }
    }
    return {{"traceEvents", std::move(events)},
            {"displayTimeUnit", "ms"},
            {"otherData",
             {{"tool", "ds-profiler"},
              {"version", dsinfer::version()},
              {"model", a.model.string()},
              {"live_bytes",
               "derived from value lifetimes: each intermediate value from its producer to its "
               "last reader"}}}};
}

int run(const Args& a) {
    Report r;
    r.threads = a.threads > 0 ? a.threads : bench::available_processors();
    r.backends = a.backends.empty() ? default_backends() : a.backends;
    bench::PhaseTicker ticker("ds-profiler");  // on a terminal: what runs while nothing prints
    ticker.phase("loading " + a.model.filename().string());
    const InferenceEngine engine =
        bench::load_at_precision(a.model, a.engine_options(), a.precision);
    ticker.end();
    for (const auto& p : engine.node_providers()) ++r.providers[p];
    const bench::GeneratedInputs generated = bench::make_inputs_or_exit(a.usage, engine, a.shapes);
    const std::vector<NamedTensor> inputs = generated.tensors();
    std::ofstream trace;
    if (!a.trace.empty()) {
        trace.open(a.trace, std::ios::binary | std::ios::trunc);
        if (!trace)
            throw Error(ErrorCode::io_error, "--trace: cannot write '" + a.trace.string() +
                                                 "': " + std::strerror(errno));
    }
    ticker.phase("measuring this machine's peaks");
    r.peaks = machine_peaks(a, r.threads);
    ticker.phase("first run and warm-up runs");
    const ValueShapes shapes = value_shapes(engine, inputs);
    for (int i = 0; i < a.warmup; ++i) (void)engine.run(inputs);
    ticker.phase("profiled runs");
    r.profile = bench::profile_runs(engine, inputs, a.runs);
    ticker.end();
    r.plan = engine.memory_plan_stats();
    r.nodes = node_rows(engine, shapes, r.profile);
    for (const NodeRow& n : r.nodes) r.total_ms += n.ms;
    r.ops = bench::group_by_op(engine, r.profile.node_median());
    r.node_sum_ms = bench::median(r.profile.run_node_sums());
    r.e2e_ms = bench::median(r.profile.run_ms);
    r.live = live_bytes(engine.graph(), shapes);
    if (trace.is_open()) {
        trace << bench::json_text(trace_json(a, r)) << "\n";
        trace.close();
        if (!trace)
            throw Error(ErrorCode::io_error, "--trace: writing '" + a.trace.string() + "' failed");
    }
    if (a.json)
        fmt::print("{}\n", bench::json_text(report_json(a, generated, r)));
    else
        print_text(a, generated, r);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-profiler", [&] { return run(a); });
}
