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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_cli.hpp"

using namespace dsinfer;

namespace {

using bench::Json;
using bench::kExitError;

struct Args : bench::CommonArgs {
    std::filesystem::path reference;
    std::string precision = "fp32", reference_precision = "fp32";
    std::int64_t seeds = 1;
    std::filesystem::path inputs;  ///< --inputs DIR: batches from files instead of generated
};

Args parse_args(int argc, char** argv) {
    Args a;
    bench::Cli cli("ds-compare",
                   "usage: ds-compare --model CANDIDATE --reference REFERENCE [--precision P] [options]",
                   "Compares a model's outputs with a reference model's on the same generated "
                   "inputs:\ncosine, relative L2, max difference and top-1 agreement per output.",
                   "Exit status: 0 ok; 1 engine error; 2 bad command line (nothing runs).");
    cli.add_common(a);
    std::string reference;
    cli.text("--reference", reference, "PATH", "the reference ONNX model (required)")
        ->group("Model and inputs");
    cli.integer("--seeds", a.seeds, 1, 100000,
                "input sets: --seed, --seed + 1, ... (default 1)")
        ->group("Model and inputs");
    std::string inputs;
    cli.text("--inputs", inputs, "DIR",
             "compare on the batches in DIR (.npy / .pb files, one per batch, or a folder per "
             "batch) instead of generated inputs")
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

struct Stats {
    std::string name;
    double dot = 0, nc = 0, nr = 0, diff2 = 0, max_abs = 0;
    std::int64_t elements = 0, nan_mismatch = 0, rows = 0, top1_same = 0;
    Json json() const {
        return {{"name", name},
                {"elements", elements},
                {"cosine", cosine()},
                {"relative_l2", nr > 0 ? std::sqrt(diff2 / nr) : 0.0},
                {"max_abs_diff", max_abs},
                {"nan_mismatches", nan_mismatch},
                {"rows", rows},
                {"top1_agree", top1_same}};
    }
    double cosine() const { return nc > 0 && nr > 0 ? dot / std::sqrt(nc * nr) : 1.0; }
};

/// The tensor as float64 values (float types only; others are not compared).
bool as_doubles(const Tensor& t, std::vector<double>& out) {
    out.resize(static_cast<std::size_t>(t.num_elements()));
    switch (t.dtype()) {
        case DType::f32:
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.data<float>()[i];
            return true;
        case DType::f16:
            for (std::size_t i = 0; i < out.size(); ++i)
                out[i] = static_cast<float>(t.data<float16>()[i]);
            return true;
        case DType::bf16:
            for (std::size_t i = 0; i < out.size(); ++i)
                out[i] = static_cast<float>(t.data<bfloat16>()[i]);
            return true;
        case DType::f64:
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.data<double>()[i];
            return true;
        default: return false;
    }
}

void accumulate(Stats& s, const Tensor& cand, const Tensor& ref) {
    if (cand.shape() != ref.shape())
        throw Error(ErrorCode::invalid_argument,
                    "output '" + s.name + "' has shape " + cand.shape().to_string() +
                        " in the candidate and " + ref.shape().to_string() + " in the reference");
    std::vector<double> c, r;
    if (!as_doubles(cand, c) || !as_doubles(ref, r))
        throw Error(ErrorCode::unsupported, "output '" + s.name + "' is not a float tensor");
    for (std::size_t i = 0; i < c.size(); ++i) {
        if (std::isnan(c[i]) != std::isnan(r[i])) ++s.nan_mismatch;
        if (std::isnan(c[i]) || std::isnan(r[i])) continue;
        s.dot += c[i] * r[i];
        s.nc += c[i] * c[i];
        s.nr += r[i] * r[i];
        s.diff2 += (c[i] - r[i]) * (c[i] - r[i]);
        s.max_abs = std::max(s.max_abs, std::fabs(c[i] - r[i]));
    }
    s.elements += static_cast<std::int64_t>(c.size());
    const std::int64_t width = cand.shape().rank() > 0 ? cand.shape()[cand.shape().rank() - 1] : 1;
    if (width <= 1) return;
    for (std::size_t row = 0; row + static_cast<std::size_t>(width) <= c.size();
         row += static_cast<std::size_t>(width)) {
        std::size_t bc = row, br = row;
        for (std::size_t k = row; k < row + static_cast<std::size_t>(width); ++k) {
            if (c[k] > c[bc]) bc = k;
            if (r[k] > r[br]) br = k;
        }
        ++s.rows;
        s.top1_same += bc == br;
    }
}

/// `feeds` with float inputs converted to the element type `engine` declares for them (a
/// float16 model against its float32 original gets the same values, widened).
std::vector<NamedTensor> as_inputs_of(const InferenceEngine& engine,
                                      const std::vector<NamedTensor>& feeds) {
    std::vector<NamedTensor> out = feeds;
    for (NamedTensor& f : out) {
        for (const IOInfo& info : engine.inputs()) {
            if (info.name != f.name || !info.dtype || *info.dtype == f.tensor.dtype()) continue;
            std::vector<double> v;
            if (!as_doubles(f.tensor, v)) continue;
            Tensor t = Tensor::allocate(*info.dtype, f.tensor.shape()).value_or_throw();
            for (std::size_t i = 0; i < v.size(); ++i) {
                const auto x = static_cast<float>(v[i]);
                switch (*info.dtype) {
                    case DType::f32: t.data<float>()[i] = x; break;
                    case DType::f16: t.data<float16>()[i] = float16(x); break;
                    case DType::bf16: t.data<bfloat16>()[i] = bfloat16(x); break;
                    case DType::f64: t.data<double>()[i] = v[i]; break;
                    default: break;
                }
            }
            f.tensor = std::move(t);
        }
    }
    return out;
}

int run(const Args& a) {
    const EngineOptions options = a.engine_options();
    std::optional<DynamicQuantizeReport> int8;
    const InferenceEngine cand = bench::load_at_precision(a.model, options, a.precision, &int8);
    const InferenceEngine ref = bench::load_at_precision(a.reference, options, a.reference_precision);
    std::vector<Stats> stats;
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
        const std::vector<NamedTensor> ro = ref.run(as_inputs_of(ref, feeds));
        std::map<std::string, const Tensor*> by_name;
        for (const auto& o : ro) by_name[o.name] = &o.tensor;
        for (std::size_t i = 0; i < co.size(); ++i) {
            const auto it = by_name.find(co[i].name);
            const Tensor* r = it != by_name.end() ? it->second : (i < ro.size() ? &ro[i].tensor : nullptr);
            if (r == nullptr) continue;
            if (stats.size() <= i) stats.push_back(Stats{co[i].name});
            accumulate(stats[i], co[i].tensor, *r);
        }
    }
    if (a.json) {
        Json outs = Json::array();
        for (const Stats& s : stats) outs.push_back(s.json());
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
    for (const Stats& s : stats) {
        fmt::print("  {:<24} cosine {:.6f}  relative L2 {:.3e}  max |diff| {:.3e}  NaN "
                   "mismatches {}",
                   s.name, s.cosine(), s.nr > 0 ? std::sqrt(s.diff2 / s.nr) : 0.0, s.max_abs,
                   s.nan_mismatch);
        if (s.rows > 0) fmt::print("  top-1 {} of {}", s.top1_same, s.rows);
        fmt::print("\n");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    try {
        return run(a);
    } catch (const Error& e) {
        fmt::print(stderr, "ds-compare: error [{}]: {}\n", to_string(e.code()), e.message());
    } catch (const std::exception& e) {
        fmt::print(stderr, "ds-compare: error: {}\n", e.what());
    }
    return kExitError;
}
