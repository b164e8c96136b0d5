// Convolution attributes and geometry, one definition for every backend's Conv, ConvTranspose,
// FusedConv (com.dsinfer), ConvInteger and QLinearConv: the attributes read once from a node
// (ConvAttrs), their checks, the spatial rank a node lets us know at load, and the forward and
// transposed output geometry. Header-only, vocabulary headers only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"
#include "ops/window.hpp"

namespace dsinfer::detail {

/// kernel_shape, strides, dilations, pads and auto_pad (WindowAttrs), group, and ConvTranspose's
/// output_padding and output_shape (empty for the other ops).
struct ConvAttrs : WindowAttrs {
    std::vector<std::int64_t> output_padding, output_shape;
    std::int64_t group = 1;
};

/// Reads a convolution node's attributes, unchecked (output_padding and output_shape only when
/// `transpose`).
inline StatusOr<ConvAttrs> read_conv_attrs(const Node& n, bool transpose) {
    ConvAttrs a;
    DSINFER_RETURN_IF_ERROR(read_window_attrs(n, /*kernel_required=*/false, a));
    DSINFER_ASSIGN_OR_RETURN(a.group, n.attr_or<std::int64_t>("group", 1));
    if (transpose) {
        using Ints = std::vector<std::int64_t>;
        DSINFER_ASSIGN_OR_RETURN(a.output_padding, n.attr_or<Ints>("output_padding", {}));
        DSINFER_ASSIGN_OR_RETURN(a.output_shape, n.attr_or<Ints>("output_shape", {}));
    }
    return a;
}

/// Checks attribute lengths against the spatial rank `nsp` (-1: unknown yet) and values.
/// `code` is the code of a length mismatch (invalid_model at create, invalid_argument when a
/// kernel checks the actual inputs); bad values are always invalid_model.
inline Status check_conv_attrs(const ConvAttrs& a, int nsp, ErrorCode code) {
    auto check_len = [&](const std::vector<std::int64_t>& v, const char* name,
                         std::size_t mult) -> Status {
        if (nsp >= 0 && !v.empty() && v.size() != mult * static_cast<std::size_t>(nsp))
            return Status::error(code, "attribute '", name, "' has ", v.size(),
                                 " values, expected ", mult * static_cast<std::size_t>(nsp),
                                 " for ", nsp, " spatial dimensions");
        return Status::ok();
    };
    DSINFER_RETURN_IF_ERROR(check_len(a.kernel_shape, "kernel_shape", 1));
    DSINFER_RETURN_IF_ERROR(check_len(a.strides, "strides", 1));
    DSINFER_RETURN_IF_ERROR(check_len(a.dilations, "dilations", 1));
    DSINFER_RETURN_IF_ERROR(check_len(a.pads, "pads", 2));
    DSINFER_RETURN_IF_ERROR(check_len(a.output_padding, "output_padding", 1));
    for (auto v : a.kernel_shape)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "attribute 'kernel_shape' has value ", v,
                      "; kernel dimensions must be positive");
    for (auto v : a.strides)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "attribute 'strides' has value ", v,
                      "; strides must be positive");
    for (auto v : a.dilations)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "attribute 'dilations' has value ", v,
                      "; dilations must be positive");
    for (auto v : a.pads)
        DSINFER_CHECK(v >= 0, ErrorCode::invalid_model, "attribute 'pads' has value ", v,
                      "; pads must be non-negative");
    for (auto v : a.output_padding)
        DSINFER_CHECK(v >= 0, ErrorCode::invalid_model, "attribute 'output_padding' has value ", v,
                      "; it must be non-negative");
    DSINFER_CHECK(a.group > 0, ErrorCode::invalid_model, "attribute 'group' must be positive, got ",
                  a.group);
    return Status::ok();
}

/// The spatial rank a node lets us know at load (kernel_shape, else W's or X's declared rank
/// minus 2), or -1. W is input `w_input` (QLinearConv: 3), X input 0.
inline int conv_spatial_rank(const KernelCreateContext& ctx, const ConvAttrs& a,
                             int w_input = 1) {
    if (!a.kernel_shape.empty()) return static_cast<int>(a.kernel_shape.size());
    if (const Tensor* w = ctx.constant_input(w_input); w != nullptr) return w->shape().rank() - 2;
    if (const Value* v = ctx.input_value(w_input); v != nullptr && v->shape.known)
        return v->shape.rank() - 2;
    if (const Value* x = ctx.input_value(0); x != nullptr && x->shape.known)
        return x->shape.rank() - 2;
    return -1;
}

/// Reads and checks a convolution node's attributes at create (invalid_model): the checks of
/// check_conv_attrs against the spatial rank known at load, output_shape's length, and the
/// channel/group consistency of the declared X and W shapes. Uncached: parse_conv_attrs.
inline StatusOr<ConvAttrs> read_checked_conv_attrs(const KernelCreateContext& ctx, bool transpose,
                                                   int w_input) {
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, read_conv_attrs(ctx.node(), transpose));
    const int nsp = conv_spatial_rank(ctx, a, w_input);
    if (nsp == 0 || nsp > kMaxRank - 2)
        return Status::error(ErrorCode::invalid_model, "expected 1 to ", kMaxRank - 2,
                             " spatial dimensions, got ", nsp);
    DSINFER_RETURN_IF_ERROR(check_conv_attrs(a, nsp, ErrorCode::invalid_model));
    if (!a.output_shape.empty() && nsp >= 0 &&
        a.output_shape.size() != static_cast<std::size_t>(nsp) &&
        a.output_shape.size() != static_cast<std::size_t>(nsp + 2))
        return Status::error(ErrorCode::invalid_model, "attribute 'output_shape' has ",
                             a.output_shape.size(), " values, expected ", nsp);
    // Channel/group consistency when both shapes are declared.
    const Value* xv = ctx.input_value(0);
    const Value* wv = ctx.input_value(w_input);
    if (xv && wv && xv->shape.known && wv->shape.known && xv->shape.rank() >= 2 &&
        wv->shape.rank() >= 2) {
        const Dim& c = xv->shape.dims[1];
        const Dim& w0 = wv->shape.dims[0];
        const Dim& w1 = wv->shape.dims[1];
        if (!transpose && c.is_static() && w1.is_static() && c.value != w1.value * a.group)
            return Status::error(ErrorCode::invalid_model, "input X has ", c.value,
                                 " channels but W expects ", w1.value, " x group ", a.group);
        if (!transpose && w0.is_static() && w0.value % a.group != 0)
            return Status::error(ErrorCode::invalid_model, "group ", a.group,
                                 " does not divide the ", w0.value, " output channels of W");
        if (transpose && c.is_static() && c.value % a.group != 0)
            return Status::error(ErrorCode::invalid_model, "group ", a.group,
                                 " does not divide the ", c.value, " input channels");
    }
    return a;
}

/// read_checked_conv_attrs once per node: every kernel of the node's fallback chain (oneDNN,
/// cpu, reference, CUDA) gets the struct the first one parsed
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<ConvAttrs> parse_conv_attrs(const KernelCreateContext& ctx, bool transpose,
                                            int w_input = 1) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const ConvAttrs> a,
                             ctx.parsed_attributes<ConvAttrs>([&](const KernelCreateContext& c) {
                                 return read_checked_conv_attrs(c, transpose, w_input);
                             }));
    return *a;
}

using ConvGeom = WindowGeom;

/// Forward convolution geometry from X [N, C, in...] and W [M, C/group, k...] (ranks equal and
/// >= 3, attribute lengths checked).
inline Status conv_geometry(const ConvAttrs& a, const Shape& x, const Shape& w, ConvGeom& g) {
    return window_geometry(a, x, [&](int i) { return w[i + 2]; }, /*ceil_mode=*/false, g);
}

/// ConvTranspose geometry from X [N, C, in...] and W [C, M/group, k...]: output sizes from
/// output_shape, SAME auto_pad or the pads, with output_padding.
inline Status convt_geometry(const ConvAttrs& a, const Shape& x, const Shape& w, ConvGeom& g) {
    g = ConvGeom{};
    g.nsp = x.rank() - 2;
    const std::size_t skip = a.output_shape.size() == static_cast<std::size_t>(g.nsp + 2) ? 2 : 0;
    if (!a.output_shape.empty() && a.output_shape.size() != static_cast<std::size_t>(g.nsp) &&
        skip == 0)
        return Status::error(ErrorCode::invalid_argument, "attribute 'output_shape' has ",
                             a.output_shape.size(), " values, expected ", g.nsp);
    for (int i = 0; i < g.nsp; ++i) {
        const auto u = static_cast<std::size_t>(i);
        g.in[u] = x[i + 2];
        g.k[u] = w[i + 2];
        g.stride[u] = attr_at(a.strides, i, 1);
        g.dil[u] = attr_at(a.dilations, i, 1);
        const std::int64_t opad = attr_at(a.output_padding, i, 0);
        const std::int64_t ek = g.dil[u] * (g.k[u] - 1) + 1;
        const std::int64_t full = g.stride[u] * (g.in[u] - 1) + opad + ek;
        const bool same = a.auto_pad == AutoPad::same_upper || a.auto_pad == AutoPad::same_lower;
        if (!a.output_shape.empty() || same) {
            g.out[u] = !a.output_shape.empty() ? a.output_shape[skip + u] : g.in[u] * g.stride[u];
            const std::int64_t total = full - g.out[u];
            // Per the spec: SAME_UPPER puts the smaller half first, otherwise the larger.
            // Floor division: a negative total (output_shape larger than the natural size)
            // adds the extra row at the end, as the ONNX reference does.
            const std::int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            if (a.auto_pad == AutoPad::same_upper) {
                g.pb[u] = half;
                g.pe[u] = total - half;
            } else {
                g.pb[u] = total - half;
                g.pe[u] = half;
            }
        } else {
            g.pb[u] = a.auto_pad == AutoPad::valid ? 0 : attr_at(a.pads, i, 0);
            g.pe[u] = a.auto_pad == AutoPad::valid ? 0 : attr_at(a.pads, g.nsp + i, 0);
            g.out[u] = full - g.pb[u] - g.pe[u];
        }
        if (g.out[u] < 0)
            return Status::error(ErrorCode::invalid_argument, "spatial dimension ", i,
                                 ": computed output size ", g.out[u], " is negative");
        g.in_size *= g.in[u];
        g.k_size *= g.k[u];
        g.out_size *= g.out[u];
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
