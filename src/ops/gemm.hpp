// Gemm's attributes, one definition for every backend's Gemm and FusedGemm (com.dsinfer, Gemm-13
// semantics): alpha, beta, transA, transB, read and checked once per node and shared by the
// node's fallback chain (the reference, the "cpu" packed GEMM, oneDNN and CUDA kernels).
// Header-only, vocabulary headers only.
#pragma once

#include <cstdint>
#include <memory>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

struct GemmAttrs {
    float alpha = 1.f;
    float beta = 1.f;
    bool trans_a = false;
    bool trans_b = false;
};

/// Reads a Gemm node's attributes (invalid_model on a wrong attribute type, and on an absent C,
/// `has_c` false, before opset 11, which made C optional). For a node outside a kernel factory
/// (the ops' shape rules and channel axes, src/ops/op_info.cpp). Uncached: parse_gemm_attrs.
inline StatusOr<GemmAttrs> read_gemm_attrs(const Node& n, std::int64_t opset, bool has_c) {
    GemmAttrs a;
    DSINFER_ASSIGN_OR_RETURN(a.alpha, n.attr_or<float>("alpha", 1.f));
    DSINFER_ASSIGN_OR_RETURN(a.beta, n.attr_or<float>("beta", 1.f));
    DSINFER_ASSIGN_OR_RETURN(const std::int64_t ta, n.attr_or<std::int64_t>("transA", 0));
    DSINFER_ASSIGN_OR_RETURN(const std::int64_t tb, n.attr_or<std::int64_t>("transB", 0));
    a.trans_a = ta != 0;
    a.trans_b = tb != 0;
    if (n.domain.empty() && opset < 11 && !has_c)
        return Status::error(ErrorCode::invalid_model, "Gemm before opset 11 requires input C");
    return a;
}

/// read_gemm_attrs once per node, shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<GemmAttrs> parse_gemm_attrs(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const GemmAttrs> a,
                             ctx.parsed_attributes<GemmAttrs>([](const KernelCreateContext& c) {
                                 return read_gemm_attrs(c.node(), c.opset(), c.has_input(2));
                             }));
    return *a;
}

}  // namespace dsinfer::detail
