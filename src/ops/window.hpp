// Sliding-window attributes and geometry shared by Conv (ops/conv.hpp) and the pooling
// kernels of every backend: the window attributes (kernel_shape, strides, dilations, pads,
// auto_pad) read in one place, pooling's checked attributes (PoolAttrs), and one spatial
// dimension's output size and begin/end padding.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

enum class AutoPad { notset, same_upper, same_lower, valid };

inline StatusOr<AutoPad> parse_auto_pad(const Node& n) {
    DSINFER_ASSIGN_OR_RETURN(std::string s, n.attr_or<std::string>("auto_pad", "NOTSET"));
    if (s == "NOTSET" || s.empty()) return AutoPad::notset;
    if (s == "SAME_UPPER") return AutoPad::same_upper;
    if (s == "SAME_LOWER") return AutoPad::same_lower;
    if (s == "VALID") return AutoPad::valid;
    return Status::error(ErrorCode::invalid_model, "attribute 'auto_pad' has invalid value '", s,
                         "' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)");
}

/// The attributes every sliding window has (Conv, ConvTranspose, ConvInteger, QLinearConv,
/// MaxPool, AveragePool, LpPool).
struct WindowAttrs {
    std::vector<std::int64_t> kernel_shape, strides, dilations, pads;
    AutoPad auto_pad = AutoPad::notset;
};

/// Reads the window attributes of `n` into `a`, unchecked. `kernel_shape` is required when
/// `kernel_required` (pooling), optional otherwise (convolutions take it from W).
inline Status read_window_attrs(const Node& n, bool kernel_required, WindowAttrs& a) {
    using Ints = std::vector<std::int64_t>;
    if (kernel_required) {
        DSINFER_ASSIGN_OR_RETURN(a.kernel_shape, n.attr<Ints>("kernel_shape"));
    } else {
        DSINFER_ASSIGN_OR_RETURN(a.kernel_shape, n.attr_or<Ints>("kernel_shape", {}));
    }
    DSINFER_ASSIGN_OR_RETURN(a.strides, n.attr_or<Ints>("strides", {}));
    DSINFER_ASSIGN_OR_RETURN(a.dilations, n.attr_or<Ints>("dilations", {}));
    DSINFER_ASSIGN_OR_RETURN(a.pads, n.attr_or<Ints>("pads", {}));
    DSINFER_ASSIGN_OR_RETURN(a.auto_pad, parse_auto_pad(n));
    return Status::ok();
}

/// MaxPool, AveragePool and LpPool: the window plus ceil_mode and (AveragePool)
/// count_include_pad. The op-specific ones (MaxPool's storage_order, LpPool's p) stay with the
/// kernels that use them.
struct PoolAttrs : WindowAttrs {
    bool ceil_mode = false;
    bool count_include_pad = false;
};

/// Reads and checks a pooling node's attributes: kernel_shape has 1 to kMaxRank - 2 values,
/// strides/dilations (>= 1) and pads (>= 0, two per spatial dim) match it; invalid_model
/// otherwise.
inline StatusOr<PoolAttrs> parse_pool_attrs(const Node& n) {
    PoolAttrs a;
    DSINFER_RETURN_IF_ERROR(read_window_attrs(n, /*kernel_required=*/true, a));
    DSINFER_ASSIGN_OR_RETURN(const std::int64_t ceil_mode, n.attr_or<std::int64_t>("ceil_mode", 0));
    a.ceil_mode = ceil_mode != 0;
    if (n.op_type == "AveragePool") {
        DSINFER_ASSIGN_OR_RETURN(const std::int64_t cip,
                                 n.attr_or<std::int64_t>("count_include_pad", 0));
        a.count_include_pad = cip != 0;
    }
    const std::size_t nsp = a.kernel_shape.size();
    if (nsp == 0 || nsp > static_cast<std::size_t>(kMaxRank - 2))
        return Status::error(ErrorCode::invalid_model, "attribute 'kernel_shape' has ", nsp,
                             " values, expected 1 to ", kMaxRank - 2);
    auto check = [&](const std::vector<std::int64_t>& v, const char* name, std::size_t len,
                     std::int64_t min) -> Status {
        if (!v.empty() && v.size() != len)
            return Status::error(ErrorCode::invalid_model, "attribute '", name, "' has ", v.size(),
                                 " values, expected ", len);
        for (auto e : v)
            if (e < min)
                return Status::error(ErrorCode::invalid_model, "attribute '", name, "' has value ",
                                     e, ", expected >= ", min);
        return Status::ok();
    };
    DSINFER_RETURN_IF_ERROR(check(a.kernel_shape, "kernel_shape", nsp, 1));
    DSINFER_RETURN_IF_ERROR(check(a.strides, "strides", nsp, 1));
    DSINFER_RETURN_IF_ERROR(check(a.dilations, "dilations", nsp, 1));
    DSINFER_RETURN_IF_ERROR(check(a.pads, "pads", 2 * nsp, 0));
    return a;
}

/// parse_pool_attrs(node) once per node, shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<PoolAttrs> parse_pool_attrs(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const PoolAttrs> a,
                             ctx.parsed_attributes<PoolAttrs>([](const KernelCreateContext& c) {
                                 return parse_pool_attrs(c.node());
                             }));
    return *a;
}

/// v[i], or `dflt` when the attribute list is empty.
inline std::int64_t attr_at(const std::vector<std::int64_t>& v, int i, std::int64_t dflt) {
    return v.empty() ? dflt : v[static_cast<std::size_t>(i)];
}

struct WindowDim {
    std::int64_t out = 0, pb = 0, pe = 0;
};

/// Spatial dim i (of nsp) of a window of size k over `in` elements: output size and begin/end
/// pads from auto_pad or the explicit `pads` ([b0.., e0..]). With ceil_mode the last window
/// must still start inside the input or its leading padding.
inline StatusOr<WindowDim> window_dim(int i, int nsp, std::int64_t in, std::int64_t k,
                                      std::int64_t stride, std::int64_t dil, AutoPad auto_pad,
                                      const std::vector<std::int64_t>& pads, bool ceil_mode) {
    WindowDim d;
    const std::int64_t ek = dil * (k - 1) + 1;
    if (auto_pad == AutoPad::same_upper || auto_pad == AutoPad::same_lower) {
        d.out = (in + stride - 1) / stride;
        const std::int64_t total = std::max<std::int64_t>(0, (d.out - 1) * stride + ek - in);
        const std::int64_t small = total / 2;
        d.pb = auto_pad == AutoPad::same_upper ? small : total - small;
        d.pe = total - d.pb;
        return d;
    }
    d.pb = auto_pad == AutoPad::valid ? 0 : attr_at(pads, i, 0);
    d.pe = auto_pad == AutoPad::valid ? 0 : attr_at(pads, nsp + i, 0);
    const std::int64_t padded = in + d.pb + d.pe;
    if (padded < ek)
        return Status::error(ErrorCode::invalid_argument, "spatial dimension ", i,
                             ": padded input size ", padded,
                             " is smaller than the dilated kernel size ", ek);
    if (ceil_mode && auto_pad != AutoPad::valid) {
        d.out = (padded - ek + stride - 1) / stride + 1;
        if ((d.out - 1) * stride >= in + d.pb) --d.out;
    } else {
        d.out = (padded - ek) / stride + 1;
    }
    return d;
}

/// The spatial geometry of one window operation (Conv, pooling): per spatial dim the input,
/// kernel and output sizes, stride, dilation and begin/end pads, and the products of the sizes.
struct WindowGeom {
    using Dims = std::array<std::int64_t, kMaxRank>;
    int nsp = 0;
    Dims in{}, k{}, out{}, stride{}, dil{}, pb{}, pe{};
    std::int64_t in_size = 1, k_size = 1, out_size = 1;
};

/// Fills `g` for X [N, C, in...] (rank >= 3, attribute lengths checked against it) with the
/// window's size along spatial dim i given by `kdim(i)`.
template <class KDim>
Status window_geometry(const WindowAttrs& a, const Shape& x, KDim&& kdim, bool ceil_mode,
                       WindowGeom& g) {
    g = WindowGeom{};
    g.nsp = x.rank() - 2;
    for (int i = 0; i < g.nsp; ++i) {
        const auto u = static_cast<std::size_t>(i);
        g.in[u] = x[i + 2];
        g.k[u] = kdim(i);
        g.stride[u] = attr_at(a.strides, i, 1);
        g.dil[u] = attr_at(a.dilations, i, 1);
        DSINFER_ASSIGN_OR_RETURN(const WindowDim wd,
                                 window_dim(i, g.nsp, g.in[u], g.k[u], g.stride[u], g.dil[u],
                                            a.auto_pad, a.pads, ceil_mode));
        g.out[u] = wd.out;
        g.pb[u] = wd.pb;
        g.pe[u] = wd.pe;
        g.in_size *= g.in[u];
        g.k_size *= g.k[u];
        g.out_size *= g.out[u];
    }
    return Status::ok();
}

}  // namespace dsinfer::detail
