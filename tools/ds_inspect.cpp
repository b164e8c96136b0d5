// ds-inspect: describes an ONNX model without running it: what a user asks of a model before
// loading it into an engine.
//
//   ds-inspect MODEL [--batch N] [--seq N] [--shape NAME=DxD]... [--backends LIST] [--json]
//   ds-inspect --help | --version
//
// Reads MODEL with load_onnx (dsinfer/onnx.hpp: the importer's validation and ModelLimits; no
// kernel is created, no weight packed, nothing runs) and prints:
//   * the file, its ONNX IR version, producer and opset imports;
//   * the graph inputs and outputs with their element types and declared (symbolic) shapes;
//   * the node count and the op histogram by domain (subgraph nodes included and counted apart);
//   * the parameters: the elements and bytes of every initializer (subgraphs' included);
//   * estimated FLOPs: 2 x the multiply-adds of MatMul, Gemm, Conv, ConvTranspose, their
//     quantized and fused forms and attention (the top-level graph; tools/model_cost.hpp, the
//     count ds-profiler shares), at the shapes the inputs get by the
//     tools' convention (tools/bench_inputs.hpp: the first symbolic dim of each input is
//     --batch, every later one --seq, both 1 unless given; --shape sets a whole input), the
//     other values' shapes inferred from them by kernel_evaluator() (dsinfer/passes.hpp, the
//     optimizer's load-time shape inference: reference kernels created, none run);
//   * kernel support: each node looked up in a KernelRegistry filled by the backends the engine
//     would use (--backends, default default_backends(), and the reference kernels as every
//     engine's fall-through), as the executor looks nodes up (same op, domain, opset and known
//     input types): the nodes no backend registers (the engine would fail to load with
//     `unsupported`), the compute nodes only the reference kernels take (slow; constants,
//     shape queries and control flow run there by design and are not listed), and the
//     provider of the best registered kernel per node. This is the model as written: the engine's
//     optimizer fuses nodes first, and a kernel may still decline a node's attributes or shapes
//     at load (the next backend's then runs it), so it is an estimate; ds-benchmark reports the
//     providers the engine chose.
// --json prints the same as one JSON object on one line (nlohmann::json, tools/tool_json.hpp).
// Exit status: 0 the model was read (whatever its support); 1 it could not be read (a
// dsinfer::Error: "ds-inspect: error [invalid_model]: ..." on stderr, nothing on stdout); 2 bad
// command line (tools/bench_cli.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <dsinfer/backend.hpp>
#include <dsinfer/backends/cpu.hpp>
#include <dsinfer/onnx.hpp>
#include <dsinfer/passes.hpp>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bench_cli.hpp"
#include "model_cost.hpp"

namespace fs = std::filesystem;
using namespace dsinfer;

namespace {

using bench::Json;

const char* const kSynopsis =
    "usage: ds-inspect MODEL [--batch N] [--seq N] [--shape NAME=DxD]... [--backends LIST]\n"
    "                  [--json]\n"
    "       ds-inspect --help | --version\n";

const char* const kDescription =
    "Describes an ONNX model without running it: the file, its IR version, producer and\n"
    "opsets; the inputs and outputs with their element types and symbolic dims; the op\n"
    "histogram by domain; the parameter count and initializer bytes; estimated FLOPs; and\n"
    "which nodes no backend of this build supports and which would run only on the reference\n"
    "kernels.\n"
    "\n"
    "FLOPs are 2 x the multiply-adds of MatMul, Gemm, Conv, ConvTranspose, their quantized\n"
    "and fused forms and attention (Q.K^T and P.V), at the shapes the inputs get as in\n"
    "ds-benchmark: the first symbolic dim of each input is --batch, every later one --seq\n"
    "(both 1 unless given), the rest inferred.\n"
    "\n"
    "Kernel support is looked up in the kernel registry of the backends an engine would use,\n"
    "for the model as written: the engine fuses nodes first, and a kernel may still decline a\n"
    "node at load (the next backend then runs it). Constants, shape queries and control flow\n"
    "run on the reference kernels by design and are not listed as reference-only. Nothing is\n"
    "compiled, packed or run.\n";

const char* const kExamples =
    "ds-inspect models/digits/digits.onnx\n"
    "    the summary as text\n"
    "ds-inspect bert.onnx --batch 8 --seq 128 --json\n"
    "    as one JSON line, FLOPs at batch 8 and sequence length 128\n"
    "ds-inspect model.onnx --backends cpu\n"
    "    kernel support without oneDNN\n";

const char* const kExitStatus =
    "0  the model was read (whatever its kernel support)\n"
    "1  the model could not be read: the typed error (invalid_model, unsupported, io_error,\n"
    "   resource_exhausted) on stderr\n"
    "2  bad command line (nothing runs)\n";

struct Args {
    fs::path model;
    bench::ShapeRequest shapes;         ///< --batch, --seq (1 unless given), --shape
    std::vector<std::string> backends;  ///< --backends (empty = default_backends())
    bool json = false;
    bench::Usage usage;
};

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli({"ds-inspect", "describe an ONNX model without running it", kSynopsis,
                    kDescription, kExamples, kExitStatus});
    std::string model;
    cli.app().add_option("MODEL", model, "the ONNX model")->type_name("");
    std::optional<std::int64_t> seq;
    cli.integer("--batch", a.shapes.batch, 1, 1 << 24,
                "first symbolic dim of every input, for FLOPs\n(default 1)")
        ->group("Shapes");
    cli.integer("--seq", seq, 1, 1 << 24, "every later symbolic dim, for FLOPs (default 1)")
        ->group("Shapes");
    cli.option("--shape", "NAME=DxD",
               "the whole shape of input NAME (repeatable; e.g.\ninput_ids=2x128)",
               [&a](const std::string& s) { return bench::Cli::parse_shape(s, a.shapes); })
        ->group("Shapes");
    cli.option("--backends", "LIST",
               "the backends whose kernels count: onednn, cpu,\nreference (default: the build's "
               "default)",
               [&a](const std::string& s) { return bench::Cli::parse_backends(s, a.backends); })
        ->group("Kernels");
    cli.flag("--json", a.json, "print one JSON object on one line")->group("Output");
    cli.parse(argc, argv);
    if (model.empty()) cli.error("MODEL is required");
    a.model = model;
    a.shapes.seq = seq.value_or(1);
    a.usage = cli.usage();
    return a;
}

// ---- what the model holds ----

std::string domain_name(const std::string& domain) { return domain.empty() ? "ai.onnx" : domain; }

/// A declared shape as JSON: null when unknown, else dims (numbers, symbols, null for "?").
Json shape_json(const SymbolicShape& s) {
    if (!s.known) return nullptr;
    Json dims = Json::array();
    for (const Dim& d : s.dims) {
        if (d.is_static())
            dims.push_back(d.value);
        else if (!d.symbol.empty())
            dims.push_back(d.symbol);
        else
            dims.push_back(nullptr);
    }
    return dims;
}

std::string dtype_text(const std::optional<DType>& t) {
    return t ? std::string(dtype_name(*t)) : "?";
}

/// A graph input or output.
struct Port {
    std::string name;
    std::optional<DType> dtype;
    SymbolicShape shape;
    Json json() const {
        return {{"name", name}, {"dtype", dtype_text(dtype)}, {"shape", shape_json(shape)}};
    }
};

/// One node the kernel lookup flagged.
struct NodeNote {
    std::string node, op, domain, reason;
    Json json() const {
        Json j = {{"node", node}, {"op", op}, {"domain", domain_name(domain)}};
        if (!reason.empty()) j["reason"] = reason;
        return j;
    }
};

struct Initializer {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
    std::int64_t elements = 0;
    std::uint64_t bytes = 0;
};

struct Report {
    fs::path model;
    std::uintmax_t file_bytes = 0;
    ModelInfo info;
    std::string graph_name;
    std::vector<OpsetImport> opsets;
    std::vector<Port> inputs, outputs;
    std::int64_t nodes = 0, subgraph_nodes = 0;
    std::map<std::string, std::map<std::string, std::int64_t>> ops;  ///< domain -> op -> count
    std::vector<Initializer> initializers;
    std::int64_t parameters = 0;
    std::uint64_t initializer_bytes = 0;
    // FLOPs
    std::map<std::string, std::vector<std::int64_t>> flop_shapes;  ///< input -> shape used
    std::vector<std::string> bound_inputs;  ///< the inputs that had symbolic or unknown dims
    std::vector<std::string> flop_notes;    ///< inputs left without a shape, and why
    double flops = 0;
    std::map<std::string, double> flops_by_op;
    std::int64_t flop_nodes = 0, flop_nodes_unknown = 0;
    // Kernels
    std::vector<std::string> backends;
    std::map<std::string, std::int64_t> providers;  ///< best registered provider -> nodes
    std::vector<NodeNote> unsupported;
    std::vector<NodeNote> reference_only;  ///< compute ops (not reference_by_design())
};

/// Every node and initializer of `g` and, recursively, of its subgraphs.
void walk(const Graph& g, int depth, Report& r) {
    for (const Value& v : g.values) {
        if (!v.initializer) continue;
        const Tensor& t = *v.initializer;
        r.initializers.push_back({v.name, t.dtype(), t.shape(), t.num_elements(),
                                  static_cast<std::uint64_t>(t.num_bytes())});
        r.parameters += t.num_elements();
        r.initializer_bytes += t.num_bytes();
    }
    for (const Node& n : g.nodes) {
        (depth == 0 ? r.nodes : r.subgraph_nodes) += 1;
        ++r.ops[domain_name(n.domain)][n.op_type];
        for (const auto& [name, attr] : n.attributes) {
            (void)name;
            if (attr.kind == AttrKind::g && attr.g) walk(*attr.g, depth + 1, r);
            if (attr.kind == AttrKind::graphs)
                for (const auto& sg : attr.graphs)
                    if (sg) walk(*sg, depth + 1, r);
        }
    }
}

// ---- FLOPs ----

/// Binds the inputs of `g` to concrete shapes (the tools' convention), infers every other shape
/// and sums the FLOPs of the top-level nodes into `r`.
void estimate_flops(Graph g, const Args& a, Report& r) {
    std::optional<std::int64_t> batch, seq;
    for (const auto& [name, dims] : a.shapes.overrides) {
        bool found = false;
        for (ValueId in : g.inputs) found = found || g.value(in).name == name;
        if (!found) a.usage.error(fmt::format("--shape: '{}' is not an input of the model", name));
    }
    for (ValueId in : g.inputs) {
        Value& v = g.value(in);
        const IOInfo info{v.name, v.dtype, v.shape};
        auto shape = bench::resolve_shape(info, a.shapes, batch, seq);
        if (!shape) {
            if (a.shapes.overrides.count(v.name)) a.usage.error(shape.status().message());
            r.flop_notes.push_back(shape.status().message());
            continue;
        }
        if (!v.shape.is_static()) r.bound_inputs.push_back(v.name);
        v.shape = SymbolicShape::from(*shape);
        const auto dims = shape->dims();
        r.flop_shapes[v.name] = std::vector<std::int64_t>(dims.begin(), dims.end());
    }
    // Best effort: what cannot be inferred stays unknown, and its nodes are not counted.
    throw_if_error(kernel_evaluator().infer_shapes(g));
    const bench::ValueDims dims = [&g](ValueId id) { return bench::static_dims(g, id); };
    for (const Node& n : g.nodes) {
        const auto f = bench::node_flops(n, dims);
        if (!f) continue;
        if (*f < 0) {
            ++r.flop_nodes_unknown;
            continue;
        }
        ++r.flop_nodes;
        r.flops += *f;
        r.flops_by_op[n.op_type] += *f;
    }
}

// ---- kernel support ----

/// Ops whose reference kernel is the only one by design: constants, shape queries and control
/// flow (whose bodies' nodes are looked up themselves). They are not listed as reference-only.
bool reference_by_design(const Node& n) {
    static const char* const kOps[] = {"Constant",
                                       "ConstantOfShape",
                                       "Shape",
                                       "Size",
                                       "Range",
                                       "If",
                                       "Loop",
                                       "Scan",
                                       "Dropout",
                                       "OptionalHasElement",
                                       "OptionalGetElement"};
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    return std::any_of(std::begin(kOps), std::end(kOps),
                       [&n](const char* op) { return n.op_type == op; });
}

/// Looks every node of `g` (and its subgraphs) up in `registry` as the executor does.
void check_kernels(const Graph& g, const std::vector<OpsetImport>& opsets,
                   const KernelRegistry& registry, Report& r) {
    for (const Node& n : g.nodes) {
        std::int64_t opset = 0;
        for (const OpsetImport& o : opsets)
            if (domain_name(o.domain) == domain_name(n.domain)) opset = o.version;
        NodeNote note{n.name.empty() ? "<unnamed>" : n.name, n.op_type, n.domain, {}};
        if (opset == 0) {
            note.reason = "domain '" + domain_name(n.domain) + "' is not imported by the model";
            r.unsupported.push_back(std::move(note));
        } else if (const auto found = registry.find_all(g, n, opset, DeviceKind::cpu);
                   found.empty()) {
            note.reason = registry.knows(n.op_type, n.domain)
                              ? fmt::format("opset {} of {} is not supported for this op", opset,
                                            domain_name(n.domain))
                              : "no backend has this op";
            r.unsupported.push_back(std::move(note));
        } else {
            ++r.providers[found.front()->provider];
            if (found.front()->priority == kPriorityReference && !reference_by_design(n))
                r.reference_only.push_back(std::move(note));
        }
        for (const auto& [name, attr] : n.attributes) {
            (void)name;
            if (attr.kind == AttrKind::g && attr.g) check_kernels(*attr.g, opsets, registry, r);
            if (attr.kind == AttrKind::graphs)
                for (const auto& sg : attr.graphs)
                    if (sg) check_kernels(*sg, opsets, registry, r);
        }
    }
}

/// The registry an engine with `backends` would build: theirs, then the reference kernels.
KernelRegistry engine_registry(const Args& a, Report& r) {
    r.backends = a.backends.empty() ? default_backends() : a.backends;
    KernelRegistry registry;
    for (const std::string& name : r.backends) {
        const auto backend = find_backend(name);
        if (backend == nullptr) a.usage.error("--backends: unknown backend '" + name + "'");
        if (Status why = backend->availability(); !why.is_ok())
            a.usage.error("--backends: " + why.message());
        if (name != "reference") throw_if_error(backend->register_kernels(registry));
    }
    throw_if_error(reference_backend()->register_kernels(registry));
    if (std::find(r.backends.begin(), r.backends.end(), "reference") == r.backends.end())
        r.backends.push_back("reference");
    return registry;
}

Report inspect(const Args& a) {
    Report r;
    r.model = a.model;
    const Graph g = load_onnx(a.model);
    std::error_code ec;
    r.file_bytes = fs::file_size(a.model, ec);
    if (ec) r.file_bytes = 0;
    r.info = g.model_info;
    r.graph_name = g.name;
    r.opsets = g.opset_imports;
    for (ValueId id : g.inputs)
        r.inputs.push_back({g.value(id).name, g.value(id).dtype, g.value(id).shape});
    for (ValueId id : g.outputs)
        r.outputs.push_back({g.value(id).name, g.value(id).dtype, g.value(id).shape});
    walk(g, 0, r);
    const KernelRegistry registry = engine_registry(a, r);
    estimate_flops(g, a, r);
    check_kernels(g, g.opset_imports, registry, r);
    return r;
}

// ---- output ----

/// "1.23 K", "4.50 M", "110 G": three significant digits.
std::string human(double v) {
    static const char* const kUnits[] = {"", " K", " M", " G", " T", " P"};
    int u = 0;
    while (std::fabs(v) >= 1000 && u < 5) {
        v /= 1000;
        ++u;
    }
    if (u == 0) return fmt::format("{:.0f}", v);
    return fmt::format("{:.{}f}{}", v, v >= 100 ? 0 : v >= 10 ? 1 : 2, kUnits[u]);
}

std::string bytes_text(std::uint64_t b) {
    static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

/// "1x64" as --shape writes it; "scalar" for rank 0.
std::string dims_text(const std::vector<std::int64_t>& dims) {
    return dims.empty() ? "scalar" : fmt::format("{}", fmt::join(dims, "x"));
}

Json flops_number(double f) {
    return f < 9e18 ? Json(static_cast<std::int64_t>(std::llround(f))) : Json(f);
}

Json report_json(const Report& r) {
    Json opsets = Json::array();
    for (const OpsetImport& o : r.opsets)
        opsets.push_back({{"domain", domain_name(o.domain)}, {"version", o.version}});
    Json inputs = Json::array(), outputs = Json::array();
    for (const Port& p : r.inputs) inputs.push_back(p.json());
    for (const Port& p : r.outputs) outputs.push_back(p.json());
    Json ops = Json::object();
    for (const auto& [domain, counts] : r.ops) ops[domain] = counts;
    Json inits = Json::array();
    for (const Initializer& i : r.initializers) {
        const auto dims = i.shape.dims();
        inits.push_back({{"name", i.name},
                         {"dtype", std::string(dtype_name(i.dtype))},
                         {"shape", std::vector<std::int64_t>(dims.begin(), dims.end())},
                         {"elements", i.elements},
                         {"bytes", i.bytes}});
    }
    Json by_op = Json::object();
    for (const auto& [op, f] : r.flops_by_op) by_op[op] = flops_number(f);
    Json shapes = Json::object();
    for (const auto& [name, dims] : r.flop_shapes) shapes[name] = dims;
    Json unsupported = Json::array(), reference_only = Json::array();
    for (const NodeNote& n : r.unsupported) unsupported.push_back(n.json());
    for (const NodeNote& n : r.reference_only) reference_only.push_back(n.json());
    return {
        {"tool", "ds-inspect"},
        {"version", dsinfer::version()},
        {"model", r.model.string()},
        {"file_bytes", r.file_bytes},
        {"ir_version", r.info.ir_version},
        {"producer", {{"name", r.info.producer_name}, {"version", r.info.producer_version}}},
        {"model_domain", r.info.domain},
        {"model_version", r.info.model_version},
        {"graph", r.graph_name},
        {"opsets", std::move(opsets)},
        {"inputs", std::move(inputs)},
        {"outputs", std::move(outputs)},
        {"nodes", r.nodes},
        {"subgraph_nodes", r.subgraph_nodes},
        {"ops", std::move(ops)},
        {"parameters", r.parameters},
        {"initializer_bytes", r.initializer_bytes},
        {"initializers", std::move(inits)},
        {"flops",
         {{"total", flops_number(r.flops)},
          {"by_op", std::move(by_op)},
          {"input_shapes", std::move(shapes)},
          {"notes", r.flop_notes},
          {"counted_nodes", r.flop_nodes},
          {"nodes_without_shapes", r.flop_nodes_unknown},
          {"counts", std::string(bench::kFlopsCounted) + "; top-level graph"}}},
        {"kernels",
         {{"backends", r.backends},
          {"providers", r.providers},
          {"unsupported", std::move(unsupported)},
          {"reference_only", std::move(reference_only)}}},
    };
}

/// "Gemm 2, Relu 1" for `counts`, most frequent first.
std::string histogram_text(const std::map<std::string, std::int64_t>& counts) {
    std::vector<std::pair<std::string, std::int64_t>> v(counts.begin(), counts.end());
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    std::vector<std::string> parts;
    for (const auto& [name, n] : v) parts.push_back(fmt::format("{} {}", name, n));
    return fmt::format("{}", fmt::join(parts, ", "));
}

/// Flagged nodes by op type, then the first few node names.
void print_nodes(const char* label, const std::vector<NodeNote>& notes) {
    if (notes.empty()) {
        fmt::print("{:<13}none\n", label);
        return;
    }
    std::map<std::string, std::int64_t> by_op;
    for (const NodeNote& n : notes) ++by_op[(n.domain.empty() ? "" : n.domain + ":") + n.op];
    fmt::print("{:<13}{} node(s): {}\n", label, notes.size(), histogram_text(by_op));
    constexpr std::size_t kListed = 10;
    for (std::size_t i = 0; i < notes.size() && i < kListed; ++i)
        fmt::print("{:<13}  {} ({}){}\n", "", notes[i].node, notes[i].op,
                   notes[i].reason.empty() ? "" : ": " + notes[i].reason);
    if (notes.size() > kListed)
        fmt::print("{:<13}  ... and {} more (--json lists them all)\n", "", notes.size() - kListed);
}

void print_text(const Report& r) {
    fmt::print("{:<13}{} ({})\n", "model", r.model.string(), bytes_text(r.file_bytes));
    std::string producer =
        r.info.producer_name.empty() ? "none" : "\"" + r.info.producer_name + "\"";
    if (!r.info.producer_version.empty()) producer += " " + r.info.producer_version;
    fmt::print("{:<13}ONNX IR version {}, producer {}, graph \"{}\"\n", "format", r.info.ir_version,
               producer, r.graph_name);
    std::vector<std::string> opsets;
    for (const OpsetImport& o : r.opsets)
        opsets.push_back(fmt::format("{}:{}", domain_name(o.domain), o.version));
    fmt::print("{:<13}{}\n", "opsets", fmt::join(opsets, ", "));
    std::size_t width = 4;
    for (const Port& p : r.inputs) width = std::max(width, p.name.size());
    for (const Port& p : r.outputs) width = std::max(width, p.name.size());
    const auto ports = [width](const char* label, const std::vector<Port>& list) {
        for (std::size_t i = 0; i < list.size(); ++i)
            fmt::print("{:<13}{:<{}}  {:<8} {}\n", i == 0 ? label : "", list[i].name, width,
                       dtype_text(list[i].dtype), list[i].shape.to_string());
        if (list.empty()) fmt::print("{:<13}none\n", label);
    };
    ports("inputs", r.inputs);
    ports("outputs", r.outputs);
    fmt::print("{:<13}{}{}\n", "nodes", r.nodes,
               r.subgraph_nodes > 0 ? fmt::format(" (and {} in subgraphs)", r.subgraph_nodes) : "");
    for (const auto& [domain, counts] : r.ops)
        fmt::print("{:<13}{}: {}\n", domain == r.ops.begin()->first ? "ops" : "", domain,
                   histogram_text(counts));
    fmt::print("{:<13}{} ({}): the elements of {} initializers, {}\n", "parameters", r.parameters,
               human(static_cast<double>(r.parameters)), r.initializers.size(),
               bytes_text(r.initializer_bytes));
    // The shapes the binding chose (the others are the model's own).
    std::vector<std::string> shapes;
    for (const std::string& name : r.bound_inputs)
        shapes.push_back(name + "=" + dims_text(r.flop_shapes.at(name)));
    std::vector<std::string> parts;
    for (const auto& [op, f] : r.flops_by_op) parts.push_back(op + " " + human(f));
    fmt::print(
        "{:<13}{} per run ({}) at {}{}\n", "FLOPs", human(r.flops),
        parts.empty() ? "no MatMul, Gemm or Conv" : fmt::format("{}", fmt::join(parts, ", ")),
        shapes.empty() ? "the model's static shapes" : fmt::format("{}", fmt::join(shapes, ", ")),
        r.flop_nodes_unknown > 0
            ? fmt::format("; {} node(s) without inferred shapes not counted", r.flop_nodes_unknown)
            : "");
    for (const std::string& note : r.flop_notes) fmt::print("{:<13}  {}\n", "", note);
    fmt::print("{:<13}{}: best registered kernel per node: {}\n", "kernels",
               fmt::join(r.backends, ", "),
               r.providers.empty() ? "none" : histogram_text(r.providers));
    print_nodes("unsupported", r.unsupported);
    print_nodes("reference", r.reference_only);
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    return bench::run_reporting_errors("ds-inspect", [&] {
        const Report r = inspect(a);
        if (a.json)
            fmt::print("{}\n", bench::json_text(report_json(r)));
        else
            print_text(r);
        return 0;
    });
}
