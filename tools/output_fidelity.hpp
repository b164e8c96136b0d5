// How close one model's outputs are to a reference model's on the same inputs: cosine
// similarity of the whole tensors (float64 sums), relative L2 error, the largest absolute
// difference, NaN mismatches, and the top-1 agreement of the last axis (rows whose argmax is the
// same: a classifier's prediction). Shared by ds-compare (a candidate against a reference) and
// ds-convert (OUT against INPUT on the measurement's inputs).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_cli.hpp"

namespace dsinfer::bench {

/// One output's agreement, summed over any number of input sets (accumulate()).
struct OutputFidelity {
    std::string name;
    double dot = 0, nc = 0, nr = 0, diff2 = 0, max_abs = 0;
    std::int64_t elements = 0, nan_mismatch = 0, rows = 0, top1_same = 0;

    double cosine() const { return nc > 0 && nr > 0 ? dot / std::sqrt(nc * nr) : 1.0; }
    double relative_l2() const { return nr > 0 ? std::sqrt(diff2 / nr) : 0.0; }
    Json json() const {
        return {{"name", name},
                {"elements", elements},
                {"cosine", cosine()},
                {"relative_l2", relative_l2()},
                {"max_abs_diff", max_abs},
                {"nan_mismatches", nan_mismatch},
                {"rows", rows},
                {"top1_agree", top1_same}};
    }
    /// One line: "NAME  cosine ...  relative L2 ...  max |diff| ...  NaN mismatches N[  top-1 a of b]".
    std::string text() const {
        std::string s = fmt::format("{:<24} cosine {:.6f}  relative L2 {:.3e}  max |diff| {:.3e}  "
                                    "NaN mismatches {}",
                                    name, cosine(), relative_l2(), max_abs, nan_mismatch);
        if (rows > 0) s += fmt::format("  top-1 {} of {}", top1_same, rows);
        return s;
    }
};

/// The tensor as float64 values (float types only; others are not compared).
inline bool as_doubles(const dsinfer::Tensor& t, std::vector<double>& out) {
    using dsinfer::DType;
    out.resize(static_cast<std::size_t>(t.num_elements()));
    switch (t.dtype()) {
        case DType::f32:
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.data<float>()[i];
            return true;
        case DType::f16:
            for (std::size_t i = 0; i < out.size(); ++i)
                out[i] = static_cast<float>(t.data<dsinfer::float16>()[i]);
            return true;
        case DType::bf16:
            for (std::size_t i = 0; i < out.size(); ++i)
                out[i] = static_cast<float>(t.data<dsinfer::bfloat16>()[i]);
            return true;
        case DType::f64:
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.data<double>()[i];
            return true;
        default: return false;
    }
}

/// Adds one input set's `cand` against `ref` to `s` (same shapes, float element types; else a
/// typed error naming the output).
inline void accumulate(OutputFidelity& s, const dsinfer::Tensor& cand, const dsinfer::Tensor& ref) {
    using dsinfer::Error;
    using dsinfer::ErrorCode;
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
    const auto w = static_cast<std::size_t>(width);
    for (std::size_t row = 0; row + w <= c.size(); row += w) {
        std::size_t bc = row, br = row;
        for (std::size_t k = row; k < row + w; ++k) {
            if (c[k] > c[bc]) bc = k;
            if (r[k] > r[br]) br = k;
        }
        ++s.rows;
        s.top1_same += bc == br;
    }
}

/// `feeds` with float inputs converted to the element type `engine` declares for them (a
/// float16 model against its float32 original gets the same values, widened).
inline std::vector<dsinfer::NamedTensor> as_inputs_of(const dsinfer::InferenceEngine& engine,
                                                      const std::vector<dsinfer::NamedTensor>& feeds) {
    using namespace dsinfer;
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

/// Matches `cand`'s outputs to `ref`'s by name (else in order) and adds each to `stats` (one
/// entry per candidate output, made on the first call).
inline void accumulate_outputs(std::vector<OutputFidelity>& stats,
                               const std::vector<dsinfer::NamedTensor>& cand,
                               const std::vector<dsinfer::NamedTensor>& ref) {
    for (std::size_t i = 0; i < cand.size(); ++i) {
        const dsinfer::Tensor* r = nullptr;
        for (const auto& o : ref)
            if (o.name == cand[i].name) r = &o.tensor;
        if (r == nullptr && i < ref.size()) r = &ref[i].tensor;
        if (r == nullptr) continue;
        if (stats.size() <= i) stats.push_back(OutputFidelity{cand[i].name});
        accumulate(stats[i], cand[i].tensor, *r);
    }
}

}  // namespace dsinfer::bench
