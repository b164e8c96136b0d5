// tools/model_cost.hpp — what a node of a graph costs: its FLOPs and the bytes it moves, from
// the shapes of its values. The one definition ds-inspect (estimated FLOPs of a model as
// written) and ds-profiler (achieved GFLOP/s and GB/s of each node of a compiled graph) share.
//
// Purpose:
//   * node_flops(): 2 x the multiply-adds of a contraction node: MatMul, Gemm, Conv,
//     ConvTranspose, their quantized and fused forms, and attention (Q·Kᵀ and P·V of
//     com.dsinfer MultiHeadAttention, com.microsoft MultiHeadAttention and ONNX Attention);
//     nullopt for every other op (elementwise, normalization, data movement: counted as 0
//     FLOPs), -1 when the node is one of these but a shape it needs is unknown;
//   * node_bytes(): the bytes a node reads and writes at least once: each distinct input value
//     (activations and weights alike, a weight read once even when it is listed twice) and each
//     output, at their element types (a gather or slice reads only its output's worth of its
//     data, Shape and Size none of it); nullopt when a shape is unknown;
//   * shapes come from a ValueDims callback, so the caller chooses where they come from: the
//     graph's own static shapes (static_dims(), after shape inference: ds-inspect) or the
//     shapes one run actually had (ds-profiler's ValueObserver).
//
// Ownership/threading: plain functions over const graphs; thread-safe.
//
// Usage:
//   const bench::ValueDims dims = [&g](ValueId id) { return bench::static_dims(g, id); };
//   for (const Node& n : g.nodes)
//       if (auto f = bench::node_flops(n, dims); f && *f >= 0) total += *f;
#pragma once

#include <algorithm>
#include <cstdint>
#include <dsinfer/dtype.hpp>
#include <dsinfer/graph.hpp>
#include <dsinfer/ops.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer::bench {

/// The dims of a value.
using Dims = std::vector<std::int64_t>;
/// The dims of value `id` of the graph a node belongs to (nullopt: unknown).
using ValueDims = std::function<std::optional<Dims>(ValueId id)>;

/// What the FLOP counts count, for reports.
inline constexpr const char* kFlopsCounted =
    "2 x multiply-adds of MatMul, Gemm, Conv, ConvTranspose, their quantized and fused forms, "
    "and attention (Q·Kᵀ and P·V); other ops count 0";

/// The static shape of value `id` of `g`, or nullopt (no such value, or a symbolic dim).
inline std::optional<Dims> static_dims(const Graph& g, ValueId id) {
    if (id == kNoValue || id < 0 || static_cast<std::size_t>(id) >= g.num_values())
        return std::nullopt;
    const SymbolicShape& s = g.value(id).shape;
    if (!s.is_static()) return std::nullopt;
    Dims dims;
    for (const Dim& d : s.dims) dims.push_back(d.value);
    return dims;
}

/// The product of `dims` (1 for a scalar), as a double (no overflow).
inline double elements(const Dims& dims) {
    double n = 1;
    for (std::int64_t d : dims) n *= static_cast<double>(d);
    return n;
}

/// Input `i` of `n`, or kNoValue when the node has fewer.
inline ValueId input_at(const Node& n, std::size_t i) {
    return i < n.inputs.size() ? n.inputs[i] : kNoValue;
}

/// 2 x the multiply-adds of `n` when it is a contraction (see the file comment) whose shapes
/// `dims` knows; nullopt for other ops, -1 when a shape it needs is unknown.
inline std::optional<double> node_flops(const Node& n, const ValueDims& dims) {
    struct Rule {
        std::string_view op;
        enum { matmul, gemm, conv, conv_transpose, attention } kind;
        std::size_t a, w;  ///< input positions of A (X, Q) and B (W, K)
    };
    static constexpr Rule kRules[] = {
        {"MatMul", Rule::matmul, 0, 1},
        {"MatMulInteger", Rule::matmul, 0, 1},
        {"QLinearMatMul", Rule::matmul, 0, 3},
        {"FusedMatMul", Rule::matmul, 0, 1},
        {"DynamicQuantizeMatMul", Rule::matmul, 0, 1},
        {"MatMulIntegerToFloat", Rule::matmul, 0, 1},
        {"Gemm", Rule::gemm, 0, 1},
        {"FusedGemm", Rule::gemm, 0, 1},
        {"Conv", Rule::conv, 0, 1},
        {"FusedConv", Rule::conv, 0, 1},
        {"ConvInteger", Rule::conv, 0, 1},
        {"QLinearConv", Rule::conv, 0, 3},
        {"DynamicQuantizeConv", Rule::conv, 0, 1},
        {"QLinearConvAdd", Rule::conv, 0, 3},
        {"ConvTranspose", Rule::conv_transpose, 0, 1},
        {"MultiHeadAttention", Rule::attention, 0, 1},
        {"Attention", Rule::attention, 0, 1},
    };
    const Rule* rule = nullptr;
    for (const Rule& r : kRules)
        if (r.op == n.op_type) rule = &r;
    if (rule == nullptr) return std::nullopt;
    const auto a = dims(input_at(n, rule->a));
    const auto w = dims(input_at(n, rule->w));
    const auto y = dims(n.outputs.empty() ? kNoValue : n.outputs[0]);
    switch (rule->kind) {
        case Rule::matmul:
            // Y [..., M, N] = A [..., M, K] x B [..., K, N]: K multiply-adds per element of Y.
            if (!a || !y || a->empty()) return -1.0;
            return 2 * elements(*y) * static_cast<double>(a->back());
        case Rule::gemm: {
            if (!a || !y || a->size() != 2) return -1.0;
            const auto trans_a = n.attr_or<std::int64_t>("transA", 0);
            const std::int64_t k = trans_a.is_ok() && *trans_a != 0 ? (*a)[0] : (*a)[1];
            return 2 * elements(*y) * static_cast<double>(k);
        }
        case Rule::conv:
            // W [M, C / group, k...]: each element of Y is C / group x k... multiply-adds.
            if (!w || !y || w->empty() || (*w)[0] == 0) return -1.0;
            return 2 * elements(*y) * elements(*w) / static_cast<double>((*w)[0]);
        case Rule::conv_transpose:
            // W [C, M / group, k...]: each element of X scatters M / group x k... of them.
            if (!a || !w || w->empty() || (*w)[0] == 0) return -1.0;
            return 2 * elements(*a) * elements(*w) / static_cast<double>((*w)[0]);
        case Rule::attention: {
            // Q·Kᵀ: each of Q's elements (B·H·Sq·Dh) meets Sk keys; P·V: each of Y's elements
            // (B·H·Sq·Dv) sums Sk values. Sk is K's dim 1 ([B, Sk, H·Dh]), or dim 2 of a 4-D K
            // ([B, H, Sk, Dh]) outside com.dsinfer, whose MultiHeadAttention reads any rank > 3
            // as [B, Sk, rest].
            if (!a || !w || !y || w->size() < 2) return -1.0;
            const bool heads_first = w->size() == 4 && n.domain != kDsinferDomain;
            const double sk = static_cast<double>((*w)[heads_first ? 2 : 1]);
            return 2 * sk * (elements(*a) + elements(*y));
        }
    }
    return std::nullopt;
}

/// The bytes node `n` moves at least once: each distinct input value and each output, at
/// `dtype_of(id)`'s element size, except for ops that read part of their input 0: a gather or
/// slice reads as many of its elements as its output has, Shape and Size none. Nullopt when a
/// shape or an element type is unknown.
inline std::optional<double> node_bytes(
    const Node& n, const ValueDims& dims,
    const std::function<std::optional<DType>(ValueId id)>& dtype_of) {
    const std::string& op = n.op_type;
    const bool reads_output_size =
        op == "Gather" || op == "GatherElements" || op == "GatherND" || op == "Slice";
    const bool reads_shape_only = op == "Shape" || op == "Size";
    std::vector<ValueId> seen;
    double bytes = 0;
    const auto size_of = [&](ValueId id) -> std::optional<double> {
        const auto d = dims(id);
        const auto t = dtype_of(id);
        if (!d || !t) return std::nullopt;
        return elements(*d) * static_cast<double>(dtype_size(*t));
    };
    const auto add = [&](ValueId id, ValueId sized_as) {
        if (id == kNoValue || std::find(seen.begin(), seen.end(), id) != seen.end()) return true;
        seen.push_back(id);
        const auto b = size_of(sized_as);
        if (!b) return false;
        bytes += *b;
        return true;
    };
    const ValueId out0 = n.outputs.empty() ? kNoValue : n.outputs[0];
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const ValueId id = n.inputs[i];
        if (i == 0 && reads_shape_only) {
            seen.push_back(id);
            continue;
        }
        if (!add(id, i == 0 && reads_output_size && out0 != kNoValue ? out0 : id))
            return std::nullopt;
    }
    for (ValueId id : n.outputs)
        if (!add(id, id)) return std::nullopt;
    return bytes;
}

}  // namespace dsinfer::bench
