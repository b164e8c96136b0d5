// The ops' metadata table and shape/dtype rules (op_info.hpp), and annotate_graph_shapes(), the
// walk the optimizer's shape annotation runs (src/passes/shape_inference.cpp). Part of the
// dsinfer_passes target: vocabulary and ops-room headers only, no kernel.
#include "ops/op_info.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <new>
#include <set>
#include <span>

#include "dsinfer/ops.hpp"
#include "ops/concat.hpp"
#include "ops/conv.hpp"
#include "ops/gemm.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/pad.hpp"
#include "ops/reduce.hpp"
#include "ops/slice_ranges.hpp"
#include "ops/window.hpp"

namespace dsinfer::detail {

std::string_view channel_flow_name(ChannelFlow f) noexcept {
    switch (f) {
        case ChannelFlow::opaque: return "opaque";
        case ChannelFlow::produces: return "produces";
        case ChannelFlow::per_channel: return "per_channel";
        case ChannelFlow::passthrough: return "passthrough";
        case ChannelFlow::couples: return "couples";
        case ChannelFlow::concat: return "concat";
        case ChannelFlow::split: return "split";
        case ChannelFlow::keeps: return "keeps";
        case ChannelFlow::normalizes: return "normalizes";
        case ChannelFlow::reshapes: return "reshapes";
        case ChannelFlow::heads: return "heads";
    }
    return "?";
}

// ---- ShapeContext ------------------------------------------------------------------------------

ShapeContext::ShapeContext(const Graph& g, const Node& n, std::int64_t opset,
                           const ShapeValues* values)
    : graph_(g), node_(n), opset_(opset), values_(values), outputs_(n.outputs.size()) {}

const SymbolicShape& ShapeContext::shape(int i) const noexcept {
    static const SymbolicShape kUnknown{};
    const Value* v = input(i);
    return v != nullptr ? v->shape : kUnknown;
}

const Tensor* ShapeContext::constant(int i) const noexcept {
    const Value* v = input(i);
    if (v == nullptr || !v->initializer || v->initializer->is_null()) return nullptr;
    return &*v->initializer;
}

std::optional<std::vector<SymInt>> ShapeContext::int_values(int i) const {
    if (const Tensor* t = constant(i); t != nullptr) {
        if ((t->dtype() != DType::i64 && t->dtype() != DType::i32) || t->shape().rank() > 1 ||
            t->num_elements() > kMaxFollowed)
            return std::nullopt;
        auto ints = read_ints(*t, "value");
        if (!ints.is_ok()) return std::nullopt;
        std::vector<SymInt> out;
        for (std::int64_t v : ints.value()) out.push_back(SymInt::of(v));
        return out;
    }
    if (values_ == nullptr || !has_input(i)) return std::nullopt;
    auto it = values_->find(node_.inputs[static_cast<std::size_t>(i)]);
    if (it == values_->end()) return std::nullopt;
    return it->second;
}

std::optional<std::vector<std::int64_t>> ShapeContext::static_ints(int i) const {
    auto v = int_values(i);
    if (!v) return std::nullopt;
    std::vector<std::int64_t> out;
    for (const SymInt& s : *v) {
        if (!s.value) return std::nullopt;
        out.push_back(*s.value);
    }
    return out;
}

void ShapeContext::set_output(int i, std::optional<DType> dtype, SymbolicShape shape) {
    if (i < 0 || i >= num_outputs()) return;
    outputs_[static_cast<std::size_t>(i)].dtype = dtype;
    outputs_[static_cast<std::size_t>(i)].shape = std::move(shape);
}

void ShapeContext::set_output_value(int i, std::vector<SymInt> value) {
    if (i < 0 || i >= num_outputs()) return;
    outputs_[static_cast<std::size_t>(i)].value = std::move(value);
}

Status ShapeContext::named(const Status& st) const {
    return st.with_context(node_.describe() + ": ");
}

// ---- symbolic dims -----------------------------------------------------------------------------

std::optional<Dim> broadcast_dim(const Dim& a, const Dim& b) {
    if (a.is_static() && a.value == 1) return b;
    if (b.is_static() && b.value == 1) return a;
    if (a.is_static() && b.is_static())
        return a.value == b.value ? std::optional<Dim>(a) : std::nullopt;
    if (a.is_static()) return a;  // b is a or 1
    if (b.is_static()) return b;
    if (!a.symbol.empty() && a.symbol == b.symbol) return a;
    return Dim{};
}

namespace {

using Ints = std::vector<std::int64_t>;

SymbolicShape known_shape(std::vector<Dim> dims) {
    SymbolicShape s;
    s.known = true;
    s.dims = std::move(dims);
    return s;
}

SymbolicShape static_shape(std::span<const std::int64_t> dims) {
    SymbolicShape s;
    s.known = true;
    for (auto d : dims) s.dims.push_back(Dim::fixed(d));
    return s;
}

/// The product of dims [begin, end): static when all are (or one is 0), a symbol when exactly
/// one dim is symbolic and the others multiply to 1, else unknown.
Dim dim_product(const std::vector<Dim>& dims, int begin, int end) {
    std::int64_t p = 1;
    const Dim* sym = nullptr;
    bool unknown = false;
    for (int i = begin; i < end; ++i) {
        const Dim& d = dims[static_cast<std::size_t>(i)];
        if (d.is_static()) {
            if (d.value == 0) return Dim::fixed(0);
            p *= d.value;
        } else if (sym == nullptr && !d.symbol.empty()) {
            sym = &d;
        } else {
            unknown = true;
        }
    }
    if (unknown) return Dim{};
    if (sym == nullptr) return Dim::fixed(p);
    return p == 1 ? *sym : Dim{};
}

/// Two dims provably different (both static).
bool differ(const Dim& a, const Dim& b) {
    return a.is_static() && b.is_static() && a.value != b.value;
}

/// Numpy broadcasting of inputs [first, n) (omitted ones skipped); unknown if any is unknown.
StatusOr<SymbolicShape> broadcast_inputs(const ShapeContext& ctx, int first = 0) {
    SymbolicShape out = known_shape({});
    int ref = -1;
    for (int i = first; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) continue;
        const SymbolicShape& s = ctx.shape(i);
        if (!s.known) return SymbolicShape{};
        const int r = std::max(out.rank(), s.rank());
        std::vector<Dim> dims(static_cast<std::size_t>(r), Dim::fixed(1));
        for (int d = 0; d < r; ++d) {
            const int da = d - (r - out.rank()), db = d - (r - s.rank());
            const Dim a = da >= 0 ? out.dims[static_cast<std::size_t>(da)] : Dim::fixed(1);
            const Dim b = db >= 0 ? s.dims[static_cast<std::size_t>(db)] : Dim::fixed(1);
            auto m = broadcast_dim(a, b);
            if (!m)
                return ctx.input_error(i, "of shape ", s.to_string(), " does not broadcast with ",
                                       ref >= 0 ? "input " + std::to_string(ref) : "the others",
                                       " (", ctx.shape(ref).to_string(), "): dim ", db, " is ",
                                       b.value, ", the others' is ", a.value);
            dims[static_cast<std::size_t>(d)] = *m;
        }
        out.dims = std::move(dims);
        if (ref < 0) ref = i;
    }
    return out;
}

/// The first given input's dtype among [first, n).
std::optional<DType> first_dtype(const ShapeContext& ctx, int first = 0) {
    for (int i = first; i < ctx.num_inputs(); ++i)
        if (ctx.has_input(i)) return ctx.dtype(i);
    return std::nullopt;
}

StatusOr<int> axis_in(const ShapeContext& ctx, std::int64_t axis, int rank) {
    auto a = normalize_axis(axis, rank);
    if (!a.is_ok()) return ctx.named(a.status());
    return a.value();
}

// ---- rule families -----------------------------------------------------------------------------

/// Output 0: input 0's dtype and shape (unary elementwise, activations, normalizations).
Status infer_same(ShapeContext& ctx) {
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
    return Status::ok();
}

/// Output 0: bool of input 0's shape (IsNaN, IsInf, Not).
Status infer_same_bool(ShapeContext& ctx) {
    ctx.set_output(0, DType::boolean, ctx.shape(0));
    return Status::ok();
}

/// Identity and Dropout (mask: bool of the same shape); integer values pass through Identity.
Status infer_identity(ShapeContext& ctx) {
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
    if (ctx.has_output(1)) ctx.set_output(1, DType::boolean, ctx.shape(0));
    if (ctx.node().op_type == "Identity")
        if (auto v = ctx.int_values(0)) ctx.set_output_value(0, std::move(*v));
    return Status::ok();
}

/// Binary/variadic broadcast with the first input's dtype.
Status infer_broadcast(ShapeContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(SymbolicShape s, broadcast_inputs(ctx));
    ctx.set_output(0, first_dtype(ctx), std::move(s));
    return Status::ok();
}

/// Comparisons and logic: bool.
Status infer_compare(ShapeContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(SymbolicShape s, broadcast_inputs(ctx));
    ctx.set_output(0, DType::boolean, std::move(s));
    return Status::ok();
}

/// Where(cond, x, y): x's dtype.
Status infer_where(ShapeContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(SymbolicShape s, broadcast_inputs(ctx));
    ctx.set_output(0, ctx.dtype(1), std::move(s));
    return Status::ok();
}

/// PRelu: the slope broadcasts to X (unidirectionally).
Status infer_prelu(ShapeContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(SymbolicShape s, broadcast_inputs(ctx));
    (void)s;  // checks only: Y has X's shape
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
    return Status::ok();
}

std::optional<DType> dtype_attr(const Node& n, const char* name) {
    auto to = n.attr_or<std::int64_t>(name, 0);
    if (!to.is_ok() || to.value() == 0) return std::nullopt;
    return from_onnx_dtype(static_cast<int>(to.value()));
}

Status infer_cast(ShapeContext& ctx) {
    const std::optional<DType> to =
        ctx.node().op_type == "CastLike" ? ctx.dtype(1) : dtype_attr(ctx.node(), "to");
    ctx.set_output(0, to, ctx.shape(0));
    // Integer values stay what they are when cast to another integer type.
    if (to && is_integer(*to) && (*to == DType::i64 || *to == DType::i32))
        if (auto v = ctx.int_values(0)) ctx.set_output_value(0, std::move(*v));
    return Status::ok();
}

// ---- convolution and pooling
// ---------------------------------------------------------------------

/// Spatial output dims of a window over X's spatial dims `x` (kernel `k(i)`, 0 when unknown).
template <class KDim>
StatusOr<std::vector<Dim>> window_out(const ShapeContext& ctx, const WindowAttrs& a,
                                      const SymbolicShape& x, KDim&& k, bool ceil_mode) {
    const int nsp = x.rank() - 2;
    std::vector<Dim> out;
    for (int i = 0; i < nsp; ++i) {
        const Dim& in = x.dims[static_cast<std::size_t>(i + 2)];
        const std::int64_t kk = k(i);
        const std::int64_t stride = attr_at(a.strides, i, 1), dil = attr_at(a.dilations, i, 1);
        const bool same = a.auto_pad == AutoPad::same_upper || a.auto_pad == AutoPad::same_lower;
        if (in.is_static() && kk > 0) {
            auto wd = window_dim(i, nsp, in.value, kk, stride, dil, a.auto_pad, a.pads, ceil_mode);
            if (!wd.is_ok())
                return ctx.input_error(0, "of shape ", x.to_string(), ": ", wd.status().message());
            out.push_back(Dim::fixed(wd.value().out));
        } else if (same && stride == 1) {
            out.push_back(in);  // SAME with stride 1 keeps the size
        } else if (!same && kk > 0 && stride == 1 &&
                   dil * (kk - 1) + 1 == 1 + attr_at(a.pads, i, 0) + attr_at(a.pads, nsp + i, 0)) {
            out.push_back(in);  // explicit pads that keep the size (3x3 pad 1)
        } else {
            out.push_back(Dim{});
        }
    }
    return out;
}

/// Conv, FusedConv, ConvInteger, QLinearConv: X [N, C, in...] (input x_in), W [M, C/g, k...]
/// (input w_in).
Status infer_conv_impl(ShapeContext& ctx, int x_in, int w_in, std::optional<DType> dtype) {
    auto attrs = read_conv_attrs(ctx.node(), /*transpose=*/false);
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    const ConvAttrs& a = attrs.value();
    const SymbolicShape& x = ctx.shape(x_in);
    const SymbolicShape& w = ctx.shape(w_in);
    int rank = x.known ? x.rank() : (w.known ? w.rank() : -1);
    if (rank < 0 && !a.kernel_shape.empty()) rank = static_cast<int>(a.kernel_shape.size()) + 2;
    if (rank < 0 || !x.known) {
        ctx.set_output(0, dtype, {});
        return Status::ok();
    }
    if (rank < 3) return ctx.input_error(x_in, "of shape ", x.to_string(), " has rank < 3");
    if (w.known && w.rank() != rank)
        return ctx.input_error(w_in, "of shape ", w.to_string(), " has another rank than X ",
                               x.to_string());
    const Status chk = check_conv_attrs(a, rank - 2, ErrorCode::invalid_model);
    if (!chk.is_ok()) return ctx.named(chk);
    if (w.known && x.dims[1].is_static() && w.dims[1].is_static() &&
        x.dims[1].value != w.dims[1].value * a.group)
        return ctx.input_error(w_in, "of shape ", w.to_string(), " expects ",
                               w.dims[1].value * a.group, " input channels (group ", a.group,
                               "), X ", x.to_string(), " has ", x.dims[1].value);
    std::vector<Dim> dims{x.dims[0], w.known ? w.dims[0] : Dim{}};
    auto k = [&](int i) -> std::int64_t {
        if (!a.kernel_shape.empty()) return a.kernel_shape[static_cast<std::size_t>(i)];
        if (w.known && w.dims[static_cast<std::size_t>(i + 2)].is_static())
            return w.dims[static_cast<std::size_t>(i + 2)].value;
        return 0;
    };
    DSINFER_ASSIGN_OR_RETURN(std::vector<Dim> sp, window_out(ctx, a, x, k, false));
    dims.insert(dims.end(), sp.begin(), sp.end());
    ctx.set_output(0, dtype, known_shape(std::move(dims)));
    return Status::ok();
}

/// ConvTranspose: X [N, C, in...], W [C, M/g, k...]; spatial dims through convt_geometry when
/// static.
Status infer_conv_transpose(ShapeContext& ctx) {
    auto attrs = read_conv_attrs(ctx.node(), /*transpose=*/true);
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    const ConvAttrs& a = attrs.value();
    const SymbolicShape& x = ctx.shape(0);
    const SymbolicShape& w = ctx.shape(1);
    if (!x.known || !w.known || x.rank() != w.rank() || x.rank() < 3) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    const Status chk = check_conv_attrs(a, x.rank() - 2, ErrorCode::invalid_model);
    if (!chk.is_ok()) return ctx.named(chk);
    std::vector<Dim> dims{x.dims[0],
                          w.dims[1].is_static() ? Dim::fixed(w.dims[1].value * a.group) : Dim{}};
    bool spatial_static = true;
    for (int i = 2; i < x.rank(); ++i)
        spatial_static = spatial_static && x.dims[static_cast<std::size_t>(i)].is_static() &&
                         w.dims[static_cast<std::size_t>(i)].is_static();
    if (spatial_static) {
        Shape xs, ws;
        for (int i = 0; i < x.rank(); ++i) {
            xs.push_back(i < 2 ? 1 : x.dims[static_cast<std::size_t>(i)].value);
            ws.push_back(i < 2 ? 1 : w.dims[static_cast<std::size_t>(i)].value);
        }
        ConvGeom g;
        const Status st = convt_geometry(a, xs, ws, g);
        if (!st.is_ok()) return ctx.input_error(0, "of shape ", x.to_string(), ": ", st.message());
        for (int i = 0; i < g.nsp; ++i)
            dims.push_back(Dim::fixed(g.out[static_cast<std::size_t>(i)]));
    } else {
        for (int i = 2; i < x.rank(); ++i) dims.emplace_back();
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

/// MaxPool, AveragePool, LpPool (MaxPool's Indices: int64 of the same shape).
Status infer_pool(ShapeContext& ctx) {
    auto attrs = parse_pool_attrs(ctx.node());
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    const PoolAttrs& a = attrs.value();
    const SymbolicShape& x = ctx.shape(0);
    SymbolicShape out;
    if (x.known) {
        if (x.rank() != static_cast<int>(a.kernel_shape.size()) + 2)
            return ctx.input_error(0, "of shape ", x.to_string(), " has rank ", x.rank(),
                                   ", kernel_shape needs ", a.kernel_shape.size() + 2);
        DSINFER_ASSIGN_OR_RETURN(
            std::vector<Dim> sp,
            window_out(
                ctx, a, x, [&](int i) { return a.kernel_shape[static_cast<std::size_t>(i)]; },
                a.ceil_mode));
        std::vector<Dim> dims{x.dims[0], x.dims[1]};
        dims.insert(dims.end(), sp.begin(), sp.end());
        out = known_shape(std::move(dims));
    }
    ctx.set_output(0, ctx.dtype(0), out);
    if (ctx.has_output(1)) ctx.set_output(1, DType::i64, out);
    return Status::ok();
}

/// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: [N, C, 1, ...].
Status infer_global_pool(ShapeContext& ctx) {
    SymbolicShape out = ctx.shape(0);
    if (out.known) {
        if (out.rank() < 2)
            return ctx.input_error(0, "of shape ", out.to_string(), " has rank < 2");
        for (int i = 2; i < out.rank(); ++i) out.dims[static_cast<std::size_t>(i)] = Dim::fixed(1);
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

/// com.microsoft QLinearGlobalAveragePool: [N, C, 1, ...], or [N, 1, ..., C] (channels_last).
Status infer_qlinear_global_pool(ShapeContext& ctx) {
    auto last = ctx.node().attr_or<std::int64_t>("channels_last", 0);
    if (!last.is_ok()) return ctx.named(last.status());
    SymbolicShape out = ctx.shape(0);
    if (out.known) {
        if (out.rank() < 2)
            return ctx.input_error(0, "of shape ", out.to_string(), " has rank < 2");
        const int r = out.rank();
        for (int i = last.value() != 0 ? 1 : 2; i < (last.value() != 0 ? r - 1 : r); ++i)
            out.dims[static_cast<std::size_t>(i)] = Dim::fixed(1);
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

/// com.microsoft QLinearAdd / QLinearMul: A (input 0) and B (input 3) broadcast; A's dtype.
Status infer_qlinear_binary(ShapeContext& ctx) {
    const SymbolicShape& a = ctx.shape(0);
    const SymbolicShape& b = ctx.shape(3);
    SymbolicShape out;
    if (a.known && b.known) {
        const int r = std::max(a.rank(), b.rank());
        std::vector<Dim> dims(static_cast<std::size_t>(r));
        for (int d = 0; d < r; ++d) {
            const int da = d - (r - a.rank()), db = d - (r - b.rank());
            const Dim x = da >= 0 ? a.dims[static_cast<std::size_t>(da)] : Dim::fixed(1);
            const Dim y = db >= 0 ? b.dims[static_cast<std::size_t>(db)] : Dim::fixed(1);
            auto m = broadcast_dim(x, y);
            if (!m)
                return ctx.input_error(3, "of shape ", b.to_string(),
                                       " does not broadcast with input 0 (", a.to_string(), ")");
            dims[static_cast<std::size_t>(d)] = *m;
        }
        out = known_shape(std::move(dims));
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

/// BatchNormalization: Y of X; training's running mean/var of the inputs mean/var.
Status infer_batch_norm(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    if (x.known && x.rank() >= 2)
        for (int i = 1; i < 5 && i < ctx.num_inputs(); ++i) {
            const SymbolicShape& p = ctx.shape(i);
            if (p.known && p.rank() == 1 && differ(p.dims[0], x.dims[1]))
                return ctx.input_error(i, "of shape ", p.to_string(), " does not match the ",
                                       x.dims[1].value, " channels of X ", x.to_string());
        }
    ctx.set_output(0, ctx.dtype(0), x);
    for (int i = 1; i <= 2; ++i)
        if (ctx.has_output(i) && ctx.has_input(i + 2))
            ctx.set_output(i, ctx.dtype(i + 2), ctx.shape(i + 2));
    return Status::ok();
}

// ---- matrix products
// -----------------------------------------------------------------------------

Status check_inner(const ShapeContext& ctx, const Dim& ka, const Dim& kb, int b_input) {
    if (differ(ka, kb))
        return ctx.input_error(b_input, "of shape ", ctx.shape(b_input).to_string(), " has ",
                               kb.value, " rows, input 0 of shape ", ctx.shape(0).to_string(),
                               " has ", ka.value, " columns (inner dims differ)");
    return Status::ok();
}

/// Gemm, FusedGemm: [M, N] from A (transA) and B (transB); C broadcasts to it.
/// Gemm's [M, N] of A (input a_in) and B (b_in) under the transposes, C (c_in) broadcast to it.
Status infer_gemm_impl(ShapeContext& ctx, int a_in, int b_in, int c_in,
                       std::optional<DType> dtype) {
    // FusedGemm has Gemm-13 semantics; the rule needs only the transposes (C's presence is the
    // kernels' check).
    const auto attrs = read_gemm_attrs(ctx.node(), 13, true);
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    const bool ta = attrs.value().trans_a, tb = attrs.value().trans_b;
    const SymbolicShape& a = ctx.shape(a_in);
    const SymbolicShape& b = ctx.shape(b_in);
    Dim m, nn, ka, kb;
    if (a.known) {
        if (a.rank() != 2) return ctx.input_error(a_in, "of shape ", a.to_string(), " is not 2-D");
        m = a.dims[ta ? 1 : 0];
        ka = a.dims[ta ? 0 : 1];
    }
    if (b.known) {
        if (b.rank() != 2) return ctx.input_error(b_in, "of shape ", b.to_string(), " is not 2-D");
        nn = b.dims[tb ? 0 : 1];
        kb = b.dims[tb ? 1 : 0];
    }
    DSINFER_RETURN_IF_ERROR(check_inner(ctx, ka, kb, b_in));
    SymbolicShape out;
    if (a.known && b.known) out = known_shape({m, nn});
    if (out.known && ctx.has_input(c_in) && ctx.shape(c_in).known) {
        const SymbolicShape& c = ctx.shape(c_in);
        if (c.rank() > 2) return ctx.input_error(c_in, "of shape ", c.to_string(), " has rank > 2");
        for (int d = 0; d < c.rank(); ++d) {
            const Dim& cd = c.dims[static_cast<std::size_t>(d)];
            const Dim& od = out.dims[static_cast<std::size_t>(d + 2 - c.rank())];
            if (differ(cd, od) && cd.value != 1)
                return ctx.input_error(c_in, "of shape ", c.to_string(),
                                       " does not broadcast to the output ", out.to_string());
        }
    }
    ctx.set_output(0, dtype, std::move(out));
    return Status::ok();
}

Status infer_gemm(ShapeContext& ctx) { return infer_gemm_impl(ctx, 0, 1, 2, ctx.dtype(0)); }

/// com.microsoft QGemm (A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): [M, N] of the
/// y_zero_point's type, uint8 with y_scale alone, float32 without y_scale.
Status infer_qgemm(ShapeContext& ctx) {
    std::optional<DType> dt = DType::f32;
    if (ctx.has_input(7)) dt = ctx.has_input(8) ? ctx.dtype(8) : std::optional<DType>(DType::u8);
    return infer_gemm_impl(ctx, 0, 3, 6, dt);
}

/// numpy matmul of inputs a_in and b_in (1-D operands promoted and their dim dropped).
Status infer_matmul_impl(ShapeContext& ctx, int a_in, int b_in, std::optional<DType> dtype) {
    const SymbolicShape& a = ctx.shape(a_in);
    const SymbolicShape& b = ctx.shape(b_in);
    if (!a.known || !b.known) {
        ctx.set_output(0, dtype, {});
        return Status::ok();
    }
    if (a.rank() < 1 || b.rank() < 1)
        return ctx.input_error(a.rank() < 1 ? a_in : b_in, "is a scalar");
    std::vector<Dim> ad = a.dims, bd = b.dims;
    const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
    if (a1) ad.insert(ad.begin(), Dim::fixed(1));
    if (b1) bd.push_back(Dim::fixed(1));
    const Dim ka = ad.back(), kb = bd[bd.size() - 2];
    if (differ(ka, kb))
        return ctx.input_error(b_in, "of shape ", b.to_string(), " has ", kb.value, " rows, input ",
                               a_in, " of shape ", a.to_string(), " has ", ka.value,
                               " columns (inner dims differ)");
    const int ra = static_cast<int>(ad.size()) - 2, rb = static_cast<int>(bd.size()) - 2;
    const int r = std::max(ra, rb);
    std::vector<Dim> out;
    for (int d = 0; d < r; ++d) {
        const int ia = d - (r - ra), ib = d - (r - rb);
        const Dim x = ia >= 0 ? ad[static_cast<std::size_t>(ia)] : Dim::fixed(1);
        const Dim y = ib >= 0 ? bd[static_cast<std::size_t>(ib)] : Dim::fixed(1);
        auto m = broadcast_dim(x, y);
        if (!m)
            return ctx.input_error(b_in, "of shape ", b.to_string(),
                                   ": its batch dims do not broadcast with input ", a_in, " ",
                                   a.to_string());
        out.push_back(*m);
    }
    if (!a1) out.push_back(ad[ad.size() - 2]);
    if (!b1) out.push_back(bd.back());
    ctx.set_output(0, dtype, known_shape(std::move(out)));
    return Status::ok();
}

/// The output type of a product: input 0's, int32 (the *Integer ops), a QLinear op's
/// y_zero_point's (input 7; uint8 without it), or float32 (the dequantizing fused products).
enum class ProductType { input0, i32, qlinear, f32 };

/// A product rule (Conv-like or MatMul-like `Impl`) with X/A input 0, weight input `W`.
template <Status (*Impl)(ShapeContext&, int, int, std::optional<DType>), int W, ProductType T>
Status infer_product(ShapeContext& ctx) {
    std::optional<DType> dt = ctx.dtype(0);
    if (T == ProductType::i32) dt = DType::i32;
    if (T == ProductType::qlinear) dt = ctx.has_input(7) ? ctx.dtype(7) : DType::u8;
    if (T == ProductType::f32) dt = DType::f32;
    return Impl(ctx, 0, W, dt);
}
constexpr auto infer_conv = &infer_product<&infer_conv_impl, 1, ProductType::input0>;
constexpr auto infer_conv_integer = &infer_product<&infer_conv_impl, 1, ProductType::i32>;
constexpr auto infer_qlinear_conv = &infer_product<&infer_conv_impl, 3, ProductType::qlinear>;
constexpr auto infer_matmul = &infer_product<&infer_matmul_impl, 1, ProductType::input0>;
constexpr auto infer_matmul_integer = &infer_product<&infer_matmul_impl, 1, ProductType::i32>;
constexpr auto infer_qlinear_matmul = &infer_product<&infer_matmul_impl, 3, ProductType::qlinear>;
constexpr auto infer_dequantizing_matmul = &infer_product<&infer_matmul_impl, 1, ProductType::f32>;
constexpr auto infer_dequantizing_conv = &infer_product<&infer_conv_impl, 1, ProductType::f32>;

// ---- normalizations and attention
// ------------------------------------------------------------------

/// LayerNormalization (ai.onnx: Mean/InvStdDev of stash_type with the normalized dims 1),
/// com.dsinfer LayerNormalization, RMSNormalization.
Status infer_layer_norm(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    ctx.set_output(0, ctx.dtype(0), x);
    if (!ctx.has_output(1) && !ctx.has_output(2)) return Status::ok();
    auto axis = ctx.node().attr_or<std::int64_t>("axis", -1);
    if (!axis.is_ok()) return ctx.named(axis.status());
    const std::optional<DType> stash =
        ctx.node().has_attr("stash_type") ? dtype_attr(ctx.node(), "stash_type") : DType::f32;
    SymbolicShape stat = x;
    if (x.known) {
        DSINFER_ASSIGN_OR_RETURN(const int a, axis_in(ctx, axis.value(), x.rank()));
        for (int d = a; d < x.rank(); ++d) stat.dims[static_cast<std::size_t>(d)] = Dim::fixed(1);
    }
    for (int i = 1; i <= 2; ++i)
        if (ctx.has_output(i)) ctx.set_output(i, stash, stat);
    return Status::ok();
}

/// SkipLayerNormalization: Y and the sum S of X + Skip.
Status infer_skip_layer_norm(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    const SymbolicShape& skip = ctx.shape(1);
    if (x.known && skip.known && x.rank() == skip.rank())
        for (int d = 0; d < x.rank(); ++d)
            if (differ(x.dims[static_cast<std::size_t>(d)], skip.dims[static_cast<std::size_t>(d)]))
                return ctx.input_error(1, "of shape ", skip.to_string(), " differs from X ",
                                       x.to_string());
    ctx.set_output(0, ctx.dtype(0), x);
    if (ctx.has_output(1)) ctx.set_output(1, ctx.dtype(0), x);
    return Status::ok();
}

/// com.dsinfer MultiHeadAttention: Y [B, Sq, H·Dv], the widths products of dims 2.. .
Status infer_mha(ShapeContext& ctx) {
    const SymbolicShape& q = ctx.shape(0);
    const SymbolicShape& k = ctx.shape(1);
    const SymbolicShape& v = ctx.shape(2);
    auto heads = ctx.node().attr<std::int64_t>("num_heads");
    if (!heads.is_ok()) return ctx.named(heads.status());
    if (heads.value() <= 0)
        return ctx.node_error("num_heads must be positive, got ", heads.value());
    const SymbolicShape* in[3] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
        if (!in[i]->known) continue;
        if (in[i]->rank() < 3)
            return ctx.input_error(i, "of shape ", in[i]->to_string(),
                                   " must have rank >= 3 ([batch, sequence, heads * head_size])");
        const Dim w = dim_product(in[i]->dims, 2, in[i]->rank());
        if (w.is_static() && w.value % heads.value() != 0)
            return ctx.input_error(i, "of shape ", in[i]->to_string(), ": width ", w.value,
                                   " is not a multiple of num_heads ", heads.value());
    }
    if (k.known && v.known && differ(k.dims[1], v.dims[1]))
        return ctx.input_error(2, "of shape ", v.to_string(),
                               " has another sequence length than K ", k.to_string());
    SymbolicShape out;
    if (q.known && v.known)
        out = known_shape({q.dims[0], q.dims[1], dim_product(v.dims, 2, v.rank())});
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

/// com.dsinfer GatedActivation: X [..., 2F] -> Y [..., F] (an odd static last dim is an error).
Status infer_gated_activation(ShapeContext& ctx) {
    SymbolicShape y = ctx.shape(0);
    if (y.known) {
        if (y.rank() == 0) return ctx.input_error(0, "must have rank >= 1, got a scalar");
        Dim& last = y.dims.back();
        if (last.is_static() && last.value % 2 != 0)
            return ctx.input_error(0, "of shape ", y.to_string(), " has an odd last dim");
        last = last.is_static() ? Dim::fixed(last.value / 2) : Dim{};
    }
    ctx.set_output(0, ctx.dtype(0), std::move(y));
    return Status::ok();
}

// ---- reductions
// ------------------------------------------------------------------------------------

/// The dims kept by reducing `axes` of `x` (keepdims: as 1).
StatusOr<SymbolicShape> reduce_shape(const ShapeContext& ctx, const SymbolicShape& x,
                                     const Ints& axes, bool keepdims, bool noop) {
    if (!x.known) return SymbolicShape{};
    std::array<bool, kMaxRank> reduced{};
    if (x.rank() > kMaxRank) return SymbolicShape{};
    const Status st = mark_reduced_axes(x.rank(), axes.data(), static_cast<int>(axes.size()), noop,
                                        ErrorCode::invalid_model, reduced);
    if (!st.is_ok()) return ctx.named(st);
    std::vector<Dim> dims;
    for (int d = 0; d < x.rank(); ++d) {
        if (!reduced[static_cast<std::size_t>(d)])
            dims.push_back(x.dims[static_cast<std::size_t>(d)]);
        else if (keepdims)
            dims.push_back(Dim::fixed(1));
    }
    return known_shape(std::move(dims));
}

Status infer_reduce(ShapeContext& ctx) {
    const bool reduce_sum = ctx.node().op_type == "ReduceSum";
    auto attrs = parse_reduce_attrs(ctx.node(), ctx.opset(), ctx.has_input(1), reduce_sum);
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    Ints axes = attrs.value().axes;
    if (attrs.value().axes_from_input && ctx.has_input(1)) {
        auto v = ctx.static_ints(1);
        if (!v) {
            ctx.set_output(0, ctx.dtype(0), {});
            return Status::ok();
        }
        axes = *v;
    }
    DSINFER_ASSIGN_OR_RETURN(SymbolicShape s,
                             reduce_shape(ctx, ctx.shape(0), axes, attrs.value().keepdims,
                                          attrs.value().noop_with_empty_axes));
    ctx.set_output(0, ctx.dtype(0), std::move(s));
    return Status::ok();
}

/// ArgMax, ArgMin: int64, one axis.
Status infer_arg_reduce(ShapeContext& ctx) {
    auto axis = ctx.node().attr_or<std::int64_t>("axis", 0);
    auto keep = ctx.node().attr_or<std::int64_t>("keepdims", 1);
    if (!axis.is_ok()) return ctx.named(axis.status());
    if (!keep.is_ok()) return ctx.named(keep.status());
    const SymbolicShape& x = ctx.shape(0);
    SymbolicShape s;
    if (x.known) {
        DSINFER_ASSIGN_OR_RETURN(
            s, reduce_shape(ctx, x, Ints{axis.value()}, keep.value() != 0, false));
    }
    ctx.set_output(0, DType::i64, std::move(s));
    return Status::ok();
}

// ---- shape manipulation
// -----------------------------------------------------------------------------

Status infer_flatten(ShapeContext& ctx) {
    auto axis = ctx.node().attr_or<std::int64_t>("axis", 1);
    if (!axis.is_ok()) return ctx.named(axis.status());
    const SymbolicShape& x = ctx.shape(0);
    SymbolicShape out;
    if (x.known) {
        const int r = x.rank();
        if (axis.value() < -r || axis.value() > r)
            return ctx.node_error("axis ", axis.value(), " is outside [", -r, ", ", r, "]");
        const int a = static_cast<int>(axis.value() < 0 ? axis.value() + r : axis.value());
        out = known_shape({dim_product(x.dims, 0, a), dim_product(x.dims, a, r)});
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

/// The dims as a product: a static factor and the symbols (with multiplicity); false when a dim
/// is unknown.
bool factorize(const std::vector<Dim>& dims, std::int64_t& p, std::multiset<std::string>& syms) {
    p = 1;
    for (const Dim& d : dims) {
        if (d.is_static())
            p *= d.value;
        else if (!d.symbol.empty())
            syms.insert(d.symbol);
        else
            return false;
    }
    return true;
}

Status infer_reshape(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    auto target = ctx.int_values(1);
    if (!target) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    auto allowzero = ctx.node().attr_or<std::int64_t>("allowzero", 0);
    if (!allowzero.is_ok()) return ctx.named(allowzero.status());
    std::vector<Dim> dims;
    int infer_at = -1;
    for (std::size_t i = 0; i < target->size(); ++i) {
        const SymInt& t = (*target)[i];
        if (t.value && *t.value == -1) {
            if (infer_at >= 0) return ctx.input_error(1, "has more than one -1");
            infer_at = static_cast<int>(i);
            dims.emplace_back();
        } else if (t.value && *t.value == 0 && allowzero.value() == 0) {
            if (!x.known) {
                dims.emplace_back();
            } else if (static_cast<int>(i) >= x.rank()) {
                return ctx.input_error(1, "copies dim ", i, " (0) of input 0 of rank ", x.rank());
            } else {
                dims.push_back(x.dims[i]);
            }
        } else if (t.value && *t.value < -1) {
            return ctx.input_error(1, "has the negative dim ", *t.value);
        } else {
            dims.push_back(t.to_dim());
        }
    }
    if (x.known) {
        std::int64_t pin = 1, pout = 1;
        std::multiset<std::string> sin, sout;
        std::vector<Dim> others = dims;
        if (infer_at >= 0) others.erase(others.begin() + infer_at);
        const bool kin = factorize(x.dims, pin, sin), kout = factorize(others, pout, sout);
        if (kin && kout) {
            // Cancel the symbols both sides hold.
            for (auto it = sout.begin(); it != sout.end();) {
                auto f = sin.find(*it);
                if (f == sin.end()) {
                    ++it;
                    continue;
                }
                sin.erase(f);
                it = sout.erase(it);
            }
            if (infer_at >= 0 && sout.empty()) {
                Dim& d = dims[static_cast<std::size_t>(infer_at)];
                if (pout != 0 && pin % pout == 0) {
                    const std::int64_t q = pin / pout;
                    if (sin.empty())
                        d = Dim::fixed(q);
                    else if (sin.size() == 1 && q == 1)
                        d = Dim::named(*sin.begin());
                } else if (sin.empty()) {
                    return ctx.input_error(1, "cannot reshape ", x.to_string(), " to ",
                                           known_shape(dims).to_string(), " (", pin, " elements)");
                }
            } else if (infer_at < 0 && sin.empty() && sout.empty() && pin != pout) {
                return ctx.input_error(1, "cannot reshape ", x.to_string(), " (", pin,
                                       " elements) to ", known_shape(dims).to_string());
            }
        }
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

Status infer_transpose(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    if (!x.known) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    auto perm = ctx.node().attr_or<Ints>("perm", {});
    if (!perm.is_ok()) return ctx.named(perm.status());
    Ints p = perm.value();
    if (p.empty())
        for (int i = x.rank() - 1; i >= 0; --i) p.push_back(i);
    if (static_cast<int>(p.size()) != x.rank())
        return ctx.input_error(0, "of shape ", x.to_string(), " has rank ", x.rank(), ", perm has ",
                               p.size(), " entries");
    std::vector<Dim> dims;
    std::vector<bool> seen(p.size(), false);
    for (std::int64_t a : p) {
        if (a < 0 || a >= x.rank() || seen[static_cast<std::size_t>(a)])
            return ctx.node_error("perm is not a permutation of 0..", x.rank() - 1);
        seen[static_cast<std::size_t>(a)] = true;
        dims.push_back(x.dims[static_cast<std::size_t>(a)]);
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

Status infer_concat(ShapeContext& ctx) {
    auto axis = concat_axis(ctx.node(), static_cast<int>(ctx.opset()));
    if (!axis.is_ok()) return ctx.named(axis.status());
    SymbolicShape out;
    int first = -1;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) continue;
        const SymbolicShape& s = ctx.shape(i);
        if (!s.known) {
            ctx.set_output(0, first_dtype(ctx), {});
            return Status::ok();
        }
        if (first < 0) {
            if (s.rank() < 1) return ctx.input_error(i, "is a scalar");
            first = i;
            out = s;
            DSINFER_ASSIGN_OR_RETURN(const int a, axis_in(ctx, axis.value(), s.rank()));
            (void)a;
            continue;
        }
        if (s.rank() != out.rank())
            return ctx.input_error(i, "of shape ", s.to_string(), " has another rank than input ",
                                   first, " ", ctx.shape(first).to_string());
        const int a = static_cast<int>(axis.value() < 0 ? axis.value() + s.rank() : axis.value());
        for (int d = 0; d < s.rank(); ++d) {
            Dim& od = out.dims[static_cast<std::size_t>(d)];
            const Dim& sd = s.dims[static_cast<std::size_t>(d)];
            if (d == a) {
                od = od.is_static() && sd.is_static() ? Dim::fixed(od.value + sd.value) : Dim{};
            } else if (differ(od, sd)) {
                return ctx.input_error(i, "of shape ", s.to_string(), " differs from input ", first,
                                       " ", ctx.shape(first).to_string(), " in dim ", d);
            } else if (!od.is_static() && sd.is_static()) {
                od = sd;
            }
        }
    }
    ctx.set_output(0, first_dtype(ctx), out);
    // Shape-like values joined along axis 0.
    if (out.known && out.rank() == 1) {
        std::vector<SymInt> joined;
        for (int i = 0; i < ctx.num_inputs(); ++i) {
            if (!ctx.has_input(i)) continue;
            auto v = ctx.int_values(i);
            if (!v) return Status::ok();
            joined.insert(joined.end(), v->begin(), v->end());
        }
        ctx.set_output_value(0, std::move(joined));
    }
    return Status::ok();
}

/// Split: the sizes from the input (opset >= 13), the attribute, or equal parts (opset 18's
/// num_outputs: the last one smaller).
Status infer_split(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    const int n = ctx.num_outputs();
    auto axis = ctx.node().attr_or<std::int64_t>("axis", 0);
    if (!axis.is_ok()) return ctx.named(axis.status());
    for (int i = 0; i < n; ++i) ctx.set_output(i, ctx.dtype(0), {});
    if (!x.known) return Status::ok();
    DSINFER_ASSIGN_OR_RETURN(const int a, axis_in(ctx, axis.value(), x.rank()));
    const Dim& dim = x.dims[static_cast<std::size_t>(a)];
    std::optional<Ints> sizes;
    if (ctx.opset() >= 13 && ctx.has_input(1)) {
        sizes = ctx.static_ints(1);
        if (!sizes) {
            for (int i = 0; i < n; ++i) {
                SymbolicShape s = x;
                s.dims[static_cast<std::size_t>(a)] = Dim{};
                ctx.set_output(i, ctx.dtype(0), s);
            }
            return Status::ok();
        }
    } else if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
        auto v = ctx.node().attr<Ints>("split");
        if (!v.is_ok()) return ctx.named(v.status());
        sizes = v.value();
    }
    std::vector<Dim> parts;
    if (sizes) {
        if (static_cast<int>(sizes->size()) != n)
            return ctx.node_error("split has ", sizes->size(), " sizes for ", n, " outputs");
        std::int64_t total = 0;
        for (auto s : *sizes) {
            total += s;
            parts.push_back(Dim::fixed(s));
        }
        if (dim.is_static() && total != dim.value)
            return ctx.input_error(0, "of shape ", x.to_string(), ": the split sizes add up to ",
                                   total, ", not ", dim.value);
    } else if (dim.is_static() && n > 0) {
        const std::int64_t chunk = (dim.value + n - 1) / n;
        const bool uneven_ok = ctx.node().has_attr("num_outputs");
        if (dim.value % n != 0 && !uneven_ok)
            return ctx.input_error(0, "of shape ", x.to_string(), " does not split into ", n,
                                   " equal parts");
        for (int i = 0; i < n; ++i)
            parts.push_back(Dim::fixed(std::max<std::int64_t>(
                0, std::min(chunk, dim.value - chunk * static_cast<std::int64_t>(i)))));
    } else {
        parts.assign(static_cast<std::size_t>(n), n == 1 ? dim : Dim{});
    }
    for (int i = 0; i < n; ++i) {
        SymbolicShape s = x;
        s.dims[static_cast<std::size_t>(a)] = parts[static_cast<std::size_t>(i)];
        ctx.set_output(i, ctx.dtype(0), std::move(s));
    }
    return Status::ok();
}

/// Slice: starts/ends/axes/steps from constant (or followed) inputs, or the attributes before
/// opset 10. A symbolic dim: kept when the slice takes all of it; a slice [0, end) of a static
/// dim with a symbolic end (a length read from another tensor's shape) is that symbol, assumed
/// to fit in the dim.
Status infer_slice(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    std::optional<std::vector<SymInt>> starts, ends;
    std::optional<Ints> axes, steps;
    if (ctx.opset() < 10) {
        auto s = ctx.node().attr<Ints>("starts");
        auto e = ctx.node().attr<Ints>("ends");
        auto a = ctx.node().attr_or<Ints>("axes", {});
        if (!s.is_ok()) return ctx.named(s.status());
        if (!e.is_ok()) return ctx.named(e.status());
        if (!a.is_ok()) return ctx.named(a.status());
        starts.emplace();
        ends.emplace();
        for (auto v : s.value()) starts->push_back(SymInt::of(v));
        for (auto v : e.value()) ends->push_back(SymInt::of(v));
        if (!a.value().empty()) axes = a.value();
    } else {
        starts = ctx.int_values(1);
        ends = ctx.int_values(2);
        if (ctx.has_input(3)) axes = ctx.static_ints(3);
        if (ctx.has_input(4)) steps = ctx.static_ints(4);
        if ((ctx.has_input(3) && !axes) || (ctx.has_input(4) && !steps)) starts.reset();
    }
    if (!x.known || !starts || !ends) {
        // The rank is known; so are the dims no known axis touches.
        SymbolicShape out = x;
        const std::size_t n = starts ? starts->size() : ends ? ends->size() : kMaxRank;
        for (int d = 0; d < out.rank(); ++d) {
            bool touched = !axes && static_cast<std::size_t>(d) < n;
            if (axes)
                for (std::int64_t a : *axes) touched = touched || a == d || a + x.rank() == d;
            if (touched) out.dims[static_cast<std::size_t>(d)] = Dim{};
        }
        ctx.set_output(0, ctx.dtype(0), x.known ? out : SymbolicShape{});
        return Status::ok();
    }
    const std::int64_t n = static_cast<std::int64_t>(starts->size());
    if (static_cast<std::int64_t>(ends->size()) != n ||
        (axes && static_cast<std::int64_t>(axes->size()) != n) ||
        (steps && static_cast<std::int64_t>(steps->size()) != n))
        return ctx.node_error("starts, ends, axes and steps have different lengths");
    if (!axes) {
        axes.emplace();
        for (std::int64_t i = 0; i < n; ++i) axes->push_back(i);
    }
    if (!steps) steps = Ints(static_cast<std::size_t>(n), 1);
    const int rank = x.rank();
    if (rank > kMaxRank) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    // Two probes with distinct large placeholders for the symbolic dims (slice_ranges on each):
    // a length equal in both is static, one equal to the placeholder both times is the dim.
    constexpr std::int64_t kProbe[2] = {(std::int64_t{1} << 40) + 7, (std::int64_t{1} << 41) + 13};
    SliceRanges r[2];
    std::vector<bool> sym_end(static_cast<std::size_t>(rank), false);
    for (int p = 0; p < 2; ++p) {
        Shape in;
        for (const Dim& d : x.dims) in.push_back(d.is_static() ? d.value : kProbe[p]);
        bool unknown = false;
        auto bound = [&](const std::vector<SymInt>& v, std::int64_t i, bool is_end) {
            const SymInt& s = v[static_cast<std::size_t>(i)];
            if (s.value) return *s.value;
            if (s.symbol.empty()) unknown = true;
            if (is_end) {
                std::int64_t a = (*axes)[static_cast<std::size_t>(i)];
                if (a < 0) a += rank;
                if (a >= 0 && a < rank) sym_end[static_cast<std::size_t>(a)] = true;
            } else {
                unknown = true;
            }
            return std::int64_t{0};
        };
        const Status st = slice_ranges(
            in, n, [&](std::int64_t i) { return bound(*starts, i, false); },
            [&](std::int64_t i) { return bound(*ends, i, true); },
            [&](std::int64_t i) { return (*axes)[static_cast<std::size_t>(i)]; },
            [&](std::int64_t i) { return (*steps)[static_cast<std::size_t>(i)]; }, r[p]);
        if (!st.is_ok()) return ctx.input_error(0, "of shape ", x.to_string(), ": ", st.message());
        if (unknown) {
            std::fill(sym_end.begin(), sym_end.end(), false);
            ctx.set_output(0, ctx.dtype(0), {});
            return Status::ok();
        }
    }
    std::vector<Dim> dims;
    for (int d = 0; d < rank; ++d) {
        const auto u = static_cast<std::size_t>(d);
        const Dim& in = x.dims[u];
        if (sym_end[u]) {
            // The end is a symbol: [0, sym) with step 1 of a dim is that symbol.
            std::int64_t i = 0;
            while ((*axes)[static_cast<std::size_t>(i)] != d &&
                   (*axes)[static_cast<std::size_t>(i)] != d - rank)
                ++i;
            const SymInt& e = (*ends)[static_cast<std::size_t>(i)];
            const bool from0 = r[0].start[u] == 0 && r[0].step[u] == 1;
            dims.push_back(from0 && (in.is_static() || in.symbol == e.symbol) ? Dim::named(e.symbol)
                                                                              : Dim{});
            continue;
        }
        if (r[0].length[u] == r[1].length[u])
            dims.push_back(Dim::fixed(r[0].length[u]));
        else if (r[0].length[u] == kProbe[0] && r[1].length[u] == kProbe[1])
            dims.push_back(in);
        else
            dims.emplace_back();
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(dims));
    // A slice of a shape-like value.
    if (rank == 1 && dims[0].is_static())
        if (auto v = ctx.int_values(0);
            v && static_cast<std::int64_t>(v->size()) == x.dims[0].value) {
            std::vector<SymInt> out;
            for (std::int64_t k = 0; k < r[0].length[0]; ++k)
                out.push_back((*v)[static_cast<std::size_t>(r[0].start[0] + k * r[0].step[0])]);
            ctx.set_output_value(0, std::move(out));
        }
    return Status::ok();
}

/// The axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1 from it. nullopt:
/// given but not known.
StatusOr<std::optional<Ints>> squeeze_axes(const ShapeContext& ctx) {
    if (ctx.opset() < 13) {
        auto a = ctx.node().attr_or<Ints>("axes", {});
        if (!a.is_ok()) return ctx.named(a.status());
        return std::optional<Ints>(a.value());
    }
    if (!ctx.has_input(1)) return std::optional<Ints>(Ints{});
    return ctx.static_ints(1);
}

Status infer_squeeze(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    DSINFER_ASSIGN_OR_RETURN(std::optional<Ints> axes, squeeze_axes(ctx));
    SymbolicShape out;
    if (x.known && axes) {
        std::vector<bool> drop(static_cast<std::size_t>(x.rank()), false);
        bool known = true;
        if (axes->empty()) {
            for (int d = 0; d < x.rank(); ++d) {
                const Dim& dim = x.dims[static_cast<std::size_t>(d)];
                if (!dim.is_static()) known = false;  // a symbol may be 1
                drop[static_cast<std::size_t>(d)] = dim.is_static() && dim.value == 1;
            }
        }
        for (std::int64_t a : *axes) {
            DSINFER_ASSIGN_OR_RETURN(const int d, axis_in(ctx, a, x.rank()));
            const Dim& dim = x.dims[static_cast<std::size_t>(d)];
            if (dim.is_static() && dim.value != 1)
                return ctx.input_error(0, "of shape ", x.to_string(), ": dim ", d, " is ",
                                       dim.value, ", not 1");
            drop[static_cast<std::size_t>(d)] = true;
        }
        if (known) {
            out = known_shape({});
            for (int d = 0; d < x.rank(); ++d)
                if (!drop[static_cast<std::size_t>(d)])
                    out.dims.push_back(x.dims[static_cast<std::size_t>(d)]);
        }
    }
    ctx.set_output(0, ctx.dtype(0), out);
    if (out.known && out.rank() <= 1)
        if (auto v = ctx.int_values(0)) ctx.set_output_value(0, std::move(*v));
    return Status::ok();
}

Status infer_unsqueeze(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    DSINFER_ASSIGN_OR_RETURN(std::optional<Ints> axes, squeeze_axes(ctx));
    SymbolicShape out;
    if (x.known && axes) {
        const int r = x.rank() + static_cast<int>(axes->size());
        std::vector<bool> added(static_cast<std::size_t>(r), false);
        for (std::int64_t a : *axes) {
            DSINFER_ASSIGN_OR_RETURN(const int d, axis_in(ctx, a, r));
            if (added[static_cast<std::size_t>(d)])
                return ctx.node_error("axis ", a, " is given twice");
            added[static_cast<std::size_t>(d)] = true;
        }
        out = known_shape({});
        std::size_t k = 0;
        for (int d = 0; d < r; ++d)
            out.dims.push_back(added[static_cast<std::size_t>(d)] ? Dim::fixed(1) : x.dims[k++]);
    }
    ctx.set_output(0, ctx.dtype(0), out);
    if (out.known && out.rank() <= 1)
        if (auto v = ctx.int_values(0)) ctx.set_output_value(0, std::move(*v));
    return Status::ok();
}

Status infer_gather(ShapeContext& ctx) {
    const SymbolicShape& data = ctx.shape(0);
    const SymbolicShape& idx = ctx.shape(1);
    auto axis = ctx.node().attr_or<std::int64_t>("axis", 0);
    if (!axis.is_ok()) return ctx.named(axis.status());
    SymbolicShape out;
    if (data.known && idx.known) {
        if (data.rank() < 1) return ctx.input_error(0, "is a scalar");
        DSINFER_ASSIGN_OR_RETURN(const int a, axis_in(ctx, axis.value(), data.rank()));
        out = known_shape({});
        for (int d = 0; d < a; ++d) out.dims.push_back(data.dims[static_cast<std::size_t>(d)]);
        out.dims.insert(out.dims.end(), idx.dims.begin(), idx.dims.end());
        for (int d = a + 1; d < data.rank(); ++d)
            out.dims.push_back(data.dims[static_cast<std::size_t>(d)]);
        // Picks from a shape-like value.
        if (data.rank() == 1 && out.rank() <= 1) {
            auto v = ctx.int_values(0);
            auto i = ctx.static_ints(1);
            if (v && i) {
                std::vector<SymInt> picked;
                for (std::int64_t k : *i) {
                    const auto n = static_cast<std::int64_t>(v->size());
                    if (k < -n || k >= n)
                        return ctx.input_error(1, "index ", k, " is outside [", -n, ", ", n, ")");
                    picked.push_back((*v)[static_cast<std::size_t>(k < 0 ? k + n : k)]);
                }
                ctx.set_output_value(0, std::move(picked));
            }
        }
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
    return Status::ok();
}

Status infer_shape_op(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    if (!x.known) {
        ctx.set_output(0, DType::i64, known_shape({Dim{}}));
        return Status::ok();
    }
    const int r = x.rank();
    auto start = ctx.node().attr_or<std::int64_t>("start", 0);
    auto end = ctx.node().attr_or<std::int64_t>("end", r);
    if (!start.is_ok()) return ctx.named(start.status());
    if (!end.is_ok()) return ctx.named(end.status());
    auto clampr = [&](std::int64_t v) {
        if (v < 0) v += r;
        return static_cast<int>(std::clamp<std::int64_t>(v, 0, r));
    };
    const int b = clampr(start.value()), e = std::max(b, clampr(end.value()));
    std::vector<SymInt> v;
    for (int d = b; d < e; ++d) v.push_back(SymInt::of(x.dims[static_cast<std::size_t>(d)]));
    ctx.set_output(0, DType::i64, static_shape(Ints{e - b}));
    ctx.set_output_value(0, std::move(v));
    return Status::ok();
}

Status infer_size(ShapeContext& ctx) {
    ctx.set_output(0, DType::i64, known_shape({}));
    const SymbolicShape& x = ctx.shape(0);
    if (x.known) {
        const Dim p = dim_product(x.dims, 0, x.rank());
        if (p.is_static() || !p.symbol.empty()) ctx.set_output_value(0, {SymInt::of(p)});
    }
    return Status::ok();
}

Status infer_expand(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    auto target = ctx.int_values(1);
    if (!x.known || !target) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    const int r = std::max(x.rank(), static_cast<int>(target->size()));
    std::vector<Dim> dims;
    for (int d = 0; d < r; ++d) {
        const int dx = d - (r - x.rank());
        const int dt = d - (r - static_cast<int>(target->size()));
        const Dim a = dx >= 0 ? x.dims[static_cast<std::size_t>(dx)] : Dim::fixed(1);
        const Dim b = dt >= 0 ? (*target)[static_cast<std::size_t>(dt)].to_dim() : Dim::fixed(1);
        auto m = broadcast_dim(a, b);
        if (!m)
            return ctx.input_error(1, "asks for dim ", b.value, " where input 0 of shape ",
                                   x.to_string(), " has ", a.value);
        dims.push_back(*m);
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

Status infer_tile(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    auto reps = ctx.static_ints(1);
    if (!x.known || !reps) {
        ctx.set_output(0, ctx.dtype(0),
                       x.known ? known_shape(std::vector<Dim>(static_cast<std::size_t>(x.rank())))
                               : SymbolicShape{});
        return Status::ok();
    }
    if (static_cast<int>(reps->size()) != x.rank())
        return ctx.input_error(1, "has ", reps->size(), " repeats for input 0 of rank ", x.rank());
    std::vector<Dim> dims;
    for (int d = 0; d < x.rank(); ++d) {
        const Dim& in = x.dims[static_cast<std::size_t>(d)];
        const std::int64_t k = (*reps)[static_cast<std::size_t>(d)];
        if (k == 1)
            dims.push_back(in);
        else if (in.is_static() || k == 0)
            dims.push_back(Dim::fixed(in.is_static() ? in.value * k : 0));
        else
            dims.emplace_back();
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

Status infer_pad(ShapeContext& ctx) {
    auto attrs = read_pad_attrs(ctx.node(), ctx.opset());
    if (!attrs.is_ok()) return ctx.named(attrs.status());
    const SymbolicShape& x = ctx.shape(0);
    std::optional<Ints> pads = attrs.value().pads;
    std::optional<Ints> axes;
    if (ctx.opset() >= 11) {
        pads = ctx.static_ints(1);
        if (ctx.has_input(3)) {
            axes = ctx.static_ints(3);
            if (!axes) pads.reset();
        }
    }
    if (!x.known || !pads) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    const int r = x.rank();
    if (!axes) {
        axes.emplace();
        for (int i = 0; i < r; ++i) axes->push_back(i);
    }
    std::array<std::int64_t, kMaxRank> begin{}, end{};
    if (r > kMaxRank) {
        ctx.set_output(0, ctx.dtype(0), {});
        return Status::ok();
    }
    const Status st = pad_extents(
        r, static_cast<std::int64_t>(pads->size()),
        [&](std::int64_t i) { return (*pads)[static_cast<std::size_t>(i)]; },
        static_cast<std::int64_t>(axes->size()),
        [&](std::int64_t i) { return (*axes)[static_cast<std::size_t>(i)]; }, begin, end);
    if (!st.is_ok()) return ctx.input_error(1, st.message());
    std::vector<Dim> dims;
    for (int d = 0; d < r; ++d) {
        const Dim& in = x.dims[static_cast<std::size_t>(d)];
        const std::int64_t add =
            begin[static_cast<std::size_t>(d)] + end[static_cast<std::size_t>(d)];
        if (add == 0) {
            dims.push_back(in);
        } else if (in.is_static()) {
            if (in.value + add < 0)
                return ctx.input_error(0, "of shape ", x.to_string(), ": dim ", d, " would become ",
                                       in.value + add);
            dims.push_back(Dim::fixed(in.value + add));
        } else {
            dims.emplace_back();
        }
    }
    ctx.set_output(0, ctx.dtype(0), known_shape(std::move(dims)));
    return Status::ok();
}

// ---- sources
// -----------------------------------------------------------------------------------------

Status infer_constant(ShapeContext& ctx) {
    const Node& n = ctx.node();
    if (const Attribute* a = n.find_attr("value"); a != nullptr && a->kind == AttrKind::t) {
        const Tensor& t = a->t;
        ctx.set_output(0, t.dtype(), SymbolicShape::from(t.shape()));
        if ((t.dtype() == DType::i64 || t.dtype() == DType::i32) && t.shape().rank() <= 1 &&
            t.num_elements() <= ShapeContext::kMaxFollowed) {
            auto ints = read_ints(t, "value");
            if (ints.is_ok()) {
                std::vector<SymInt> v;
                for (auto x : ints.value()) v.push_back(SymInt::of(x));
                ctx.set_output_value(0, std::move(v));
            }
        }
    } else if (const Attribute* a = n.find_attr("value_int"); a != nullptr) {
        ctx.set_output(0, DType::i64, known_shape({}));
        ctx.set_output_value(0, {SymInt::of(a->i)});
    } else if (const Attribute* a = n.find_attr("value_ints"); a != nullptr) {
        ctx.set_output(0, DType::i64,
                       static_shape(Ints{static_cast<std::int64_t>(a->ints.size())}));
        std::vector<SymInt> v;
        for (auto x : a->ints) v.push_back(SymInt::of(x));
        ctx.set_output_value(0, std::move(v));
    } else if (n.has_attr("value_float")) {
        ctx.set_output(0, DType::f32, known_shape({}));
    } else if (const Attribute* a = n.find_attr("value_floats"); a != nullptr) {
        ctx.set_output(0, DType::f32,
                       static_shape(Ints{static_cast<std::int64_t>(a->floats.size())}));
    } else if (n.has_attr("value_string")) {
        ctx.set_output(0, DType::string, known_shape({}));
    } else if (const Attribute* a = n.find_attr("value_strings"); a != nullptr) {
        ctx.set_output(0, DType::string,
                       static_shape(Ints{static_cast<std::int64_t>(a->strings.size())}));
    }
    return Status::ok();
}

Status infer_constant_of_shape(ShapeContext& ctx) {
    std::optional<DType> dt = DType::f32;
    if (const Attribute* a = ctx.node().find_attr("value"); a != nullptr && a->kind == AttrKind::t)
        dt = a->t.dtype();
    auto dims = ctx.int_values(0);
    SymbolicShape out;
    if (dims) {
        out = known_shape({});
        for (const SymInt& s : *dims) {
            if (s.value && *s.value < 0)
                return ctx.input_error(0, "has the negative dim ", *s.value);
            out.dims.push_back(s.to_dim());
        }
    }
    ctx.set_output(0, dt, std::move(out));
    return Status::ok();
}

Status infer_range(ShapeContext& ctx) {
    const std::optional<DType> dt = ctx.dtype(0);
    Dim len;
    const Tensor* t[3] = {ctx.constant(0), ctx.constant(1), ctx.constant(2)};
    auto vs = ctx.int_values(0), ve = ctx.int_values(1), vd = ctx.int_values(2);
    if (vs && ve && vd && vs->size() == 1 && ve->size() == 1 && vd->size() == 1) {
        const SymInt &s = (*vs)[0], &e = (*ve)[0], &d = (*vd)[0];
        if (s.value && e.value && d.value) {
            if (*d.value == 0) return ctx.input_error(2, "is 0");
            const std::int64_t span = *e.value - *s.value;
            const std::int64_t q = span / *d.value + (span % *d.value != 0 ? 1 : 0);
            len = Dim::fixed(std::max<std::int64_t>(q, 0));
        } else if (s.value && *s.value == 0 && d.value && *d.value == 1 && !e.symbol.empty()) {
            len = Dim::named(e.symbol);  // Range(0, n, 1) of a size n
        }
    } else if (t[0] != nullptr && t[1] != nullptr && t[2] != nullptr) {
        auto s = read_scalar(*t[0], "start"), e = read_scalar(*t[1], "limit"),
             d = read_scalar(*t[2], "delta");
        if (s.is_ok() && e.is_ok() && d.is_ok()) {
            if (d.value() == 0) return ctx.input_error(2, "is 0");
            len = Dim::fixed(std::max<std::int64_t>(
                static_cast<std::int64_t>(std::ceil((e.value() - s.value()) / d.value())), 0));
        }
    }
    ctx.set_output(0, dt, known_shape({len}));
    return Status::ok();
}

// ---- quantization
// ------------------------------------------------------------------------------------

Status infer_dequantize(ShapeContext& ctx) {
    std::optional<DType> dt = ctx.dtype(1);
    if (auto od = dtype_attr(ctx.node(), "output_dtype")) dt = od;
    ctx.set_output(0, dt, ctx.shape(0));
    return Status::ok();
}

Status infer_quantize(ShapeContext& ctx) {
    std::optional<DType> dt = DType::u8;
    if (ctx.has_input(2))
        dt = ctx.dtype(2);
    else if (auto od = dtype_attr(ctx.node(), "output_dtype"))
        dt = od;
    ctx.set_output(0, dt, ctx.shape(0));
    return Status::ok();
}

Status infer_dynamic_quantize(ShapeContext& ctx) {
    ctx.set_output(0, DType::u8, ctx.shape(0));
    ctx.set_output(1, DType::f32, known_shape({}));
    ctx.set_output(2, DType::u8, known_shape({}));
    return Status::ok();
}

Status infer_topk(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    auto axis = ctx.node().attr_or<std::int64_t>("axis", -1);
    if (!axis.is_ok()) return ctx.named(axis.status());
    SymbolicShape out;
    if (x.known) {
        DSINFER_ASSIGN_OR_RETURN(const int a, axis_in(ctx, axis.value(), x.rank()));
        out = x;
        std::optional<std::int64_t> k;
        if (ctx.opset() < 10) {
            auto kk = ctx.node().attr<std::int64_t>("k");
            if (!kk.is_ok()) return ctx.named(kk.status());
            k = kk.value();
        } else if (auto v = ctx.static_ints(1); v && v->size() == 1) {
            k = (*v)[0];
        }
        out.dims[static_cast<std::size_t>(a)] = k ? Dim::fixed(*k) : Dim{};
    }
    ctx.set_output(0, ctx.dtype(0), out);
    ctx.set_output(1, DType::i64, out);
    return Status::ok();
}

Status infer_nonzero(ShapeContext& ctx) {
    const SymbolicShape& x = ctx.shape(0);
    ctx.set_output(0, DType::i64,
                   x.known ? known_shape({Dim::fixed(x.rank()), Dim{}}) : SymbolicShape{});
    return Status::ok();
}

// ---- weight axes
// --------------------------------------------------------------------------------------

WeightAxes conv_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{0, 1} : WeightAxes{0, kNoAxis};
}
WeightAxes conv_transpose_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{1, 0} : WeightAxes{0, kNoAxis};
}
WeightAxes gemm_axes(const Node& n, int input) {
    if (input == 2) return {-1, kNoAxis};
    const auto attrs = read_gemm_attrs(n, 13, true);
    const bool t = attrs.is_ok() && attrs.value().trans_b;
    return t ? WeightAxes{0, 1} : WeightAxes{1, 0};
}
WeightAxes matmul_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{-1, -2} : WeightAxes{-1, kNoAxis};
}
WeightAxes matmul_integer_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{-1, -2} : input == 3 ? WeightAxes{-1, kNoAxis} : WeightAxes{};
}
/// com.dsinfer DynamicQuantizeMatMul (A, B, b_scale, b_zero_point, bias) and
/// MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias): B [K, N];
/// the per-column scale, zero point and bias follow N.
WeightAxes dyn_quant_matmul_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{-1, -2} : input >= 2 ? WeightAxes{-1, kNoAxis} : WeightAxes{};
}
WeightAxes matmul_integer_to_float_axes(const Node&, int input) {
    if (input == 1) return {-1, -2};
    return input == 3 || input == 5 || input == 6 ? WeightAxes{-1, kNoAxis} : WeightAxes{};
}
/// com.microsoft QGemm: B at 3 ([K, N], or [N, K] with transB), its per-column b_scale and
/// b_zero_point and C along N.
WeightAxes qgemm_axes(const Node& n, int input) {
    if (input == 3) {
        const auto t = n.attr_or<std::int64_t>("transB", 0);
        return t.is_ok() && t.value() != 0 ? WeightAxes{0, 1} : WeightAxes{1, 0};
    }
    return input == 4 || input == 5 || input == 6 ? WeightAxes{-1, kNoAxis} : WeightAxes{};
}
WeightAxes qlinear_matmul_axes(const Node&, int input) {
    if (input == 3) return {-1, -2};
    return input == 4 || input == 5 ? WeightAxes{-1, kNoAxis} : WeightAxes{};
}
WeightAxes conv_integer_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{0, 1} : input == 3 ? WeightAxes{0, kNoAxis} : WeightAxes{};
}
/// com.dsinfer DynamicQuantizeConv (X, W, w_scale, w_zero_point, bias): W [M, C/g, k...]; the
/// per-channel scale, zero point and bias follow M.
WeightAxes dyn_quant_conv_axes(const Node&, int input) {
    return input == 1 ? WeightAxes{0, 1} : input >= 2 ? WeightAxes{0, kNoAxis} : WeightAxes{};
}
WeightAxes qlinear_conv_axes(const Node&, int input) {
    if (input == 3) return {0, 1};
    return input == 4 || input == 5 || input == 8 ? WeightAxes{0, kNoAxis} : WeightAxes{};
}
/// One value per channel along the weight's first axis (BatchNorm, PRelu [C,1,..], Q/DQ).
WeightAxes per_channel_axes(const Node&, int) { return {0, kNoAxis}; }
/// One value per element of the last axis (LayerNorm Scale/B).
WeightAxes last_axis_axes(const Node&, int) { return {-1, kNoAxis}; }
/// RNN weights W/R [dirs, gates·H, I|H] and B [dirs, 2·gates·H].
WeightAxes rnn_axes(const Node&, int input) {
    return input == 3 ? WeightAxes{1, kNoAxis} : WeightAxes{1, 2};
}

constexpr std::uint32_t bits(std::initializer_list<int> inputs) {
    std::uint32_t b = 0;
    for (int i : inputs) b |= 1u << i;
    return b;
}

using CF = ChannelFlow;
constexpr std::string_view kOnnx = "";
constexpr std::string_view kDs = kDsinferDomain;
constexpr std::string_view kMl = "ai.onnx.ml";
constexpr std::string_view kTraining = "ai.onnx.preview.training";
constexpr std::string_view kPreview = "ai.onnx.preview";
constexpr std::string_view kMs = "com.microsoft";
constexpr int kLast = -1;

// Unary elementwise ops with input 0's dtype and shape.
constexpr std::string_view kUnary[] = {
    "Abs",       "Acos",  "Acosh",      "Asin",        "Asinh",
    "Atan",      "Atanh", "BitwiseNot", "Ceil",        "Celu",
    "Clip",      "Cos",   "Cosh",       "Elu",         "Erf",
    "Exp",       "Floor", "Gelu",       "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log",   "Mish",       "Neg",         "Reciprocal",
    "Relu",      "Round", "Selu",       "Shrink",      "Sigmoid",
    "Sign",      "Sin",   "Sinh",       "Softplus",    "Softsign",
    "Sqrt",      "Swish", "Tan",        "Tanh",        "ThresholdedRelu",
};
// Binary/variadic broadcast ops with the first input's dtype.
constexpr std::string_view kBroadcast[] = {
    "Add", "Sub", "Mul",  "Div",      "Pow",        "Mod",       "Max",
    "Min", "Sum", "Mean", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"};
// Broadcast ops giving bool.
constexpr std::string_view kCompare[] = {"Equal",          "Less", "LessOrEqual", "Greater",
                                         "GreaterOrEqual", "And",  "Or",          "Xor"};
constexpr std::string_view kReduce[] = {
    "ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
    "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
// Ops the kernels implement that no rule covers and that mix channels (opaque).
constexpr std::string_view kOpaque[] = {
    "AffineGrid",
    "Attention",
    "BitCast",
    "BlackmanWindow",
    "CausalConvWithState",
    "CenterCropPad",
    "Col2Im",
    "Compress",
    "CumProd",
    "DFT",
    "DeformConv",
    "Det",
    "Einsum",
    "EyeLike",
    "GatherElements",
    "GatherND",
    "GridSample",
    "HammingWindow",
    "HannWindow",
    "If",
    "LinearAttention",
    "Loop",
    "MaxUnpool",
    "MelWeightMatrix",
    "NegativeLogLikelihoodLoss",
    "NonMaxSuppression",
    "OneHot",
    "OptionalGetElement",
    "OptionalHasElement",
    "RegexFullMatch",
    "ReverseSequence",
    "RoiAlign",
    "RotaryEmbedding",
    "STFT",
    "Scan",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "SoftmaxCrossEntropyLoss",
    "StringConcat",
    "StringNormalizer",
    "StringSplit",
    "SwiGLU",
    "TensorScatter",
    "TfIdfVectorizer",
    "Unique",
};

std::vector<OpInfo> build_table() {
    std::vector<OpInfo> t;
    auto add = [&](std::string_view domain, std::string_view op, CF flow, bool elementwise,
                   int axis, std::uint32_t weights, WeightAxesFn axes, ShapeFn fn) {
        t.push_back(OpInfo{domain, op, flow, elementwise, axis, weights, axes, fn});
    };
    // Not elementwise, no weights.
    auto plain = [&](std::string_view domain, std::string_view op, CF flow, int axis, ShapeFn fn) {
        add(domain, op, flow, false, axis, 0, nullptr, fn);
    };
    for (auto op : kUnary) add(kOnnx, op, CF::passthrough, true, kNoAxis, 0, nullptr, &infer_same);
    for (auto op : kBroadcast)
        add(kOnnx, op, CF::couples, true, kNoAxis, 0, nullptr, &infer_broadcast);
    for (auto op : kCompare) add(kOnnx, op, CF::couples, true, kNoAxis, 0, nullptr, &infer_compare);
    for (auto op : kReduce) plain(kOnnx, op, CF::keeps, kNoAxis, &infer_reduce);
    for (auto op : kOpaque) plain(kOnnx, op, CF::opaque, kNoAxis, nullptr);

    // Elementwise, other dtypes.
    add(kOnnx, "Not", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_same_bool);
    add(kOnnx, "IsNaN", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_same_bool);
    add(kOnnx, "IsInf", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_same_bool);
    add(kOnnx, "Cast", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_cast);
    add(kOnnx, "CastLike", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_cast);
    add(kOnnx, "Identity", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_identity);
    add(kOnnx, "Dropout", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_identity);
    add(kOnnx, "Where", CF::couples, true, kNoAxis, 0, nullptr, &infer_where);
    add(kOnnx, "PRelu", CF::per_channel, true, 1, bits({1}), &per_channel_axes, &infer_prelu);
    add(kDs, "Gelu", CF::passthrough, true, kNoAxis, 0, nullptr, &infer_same);

    // Weight-producing ops.
    add(kOnnx, "Conv", CF::produces, false, 1, bits({1, 2}), &conv_axes, infer_conv);
    add(kDs, "FusedConv", CF::produces, false, 1, bits({1, 2}), &conv_axes, infer_conv);
    add(kOnnx, "ConvTranspose", CF::produces, false, 1, bits({1, 2}), &conv_transpose_axes,
        &infer_conv_transpose);
    add(kOnnx, "ConvInteger", CF::produces, false, 1, bits({1, 2, 3}), &conv_integer_axes,
        infer_conv_integer);
    add(kOnnx, "QLinearConv", CF::produces, false, 1, bits({1, 2, 3, 4, 5, 6, 7, 8}),
        &qlinear_conv_axes, infer_qlinear_conv);
    // QLinearConv's inputs, then the residual Z (9, of Y's shape and type) and the
    // com.microsoft QLinearAdd parameters (10-13): QLinearConv's shape and type rule.
    add(kDs, "QLinearConvAdd", CF::produces, false, 1,
        bits({1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13}), &qlinear_conv_axes, infer_qlinear_conv);
    add(kDs, "DynamicQuantizeConv", CF::produces, false, 1, bits({1, 2, 3, 4}),
        &dyn_quant_conv_axes, infer_dequantizing_conv);
    add(kOnnx, "Gemm", CF::produces, false, kLast, bits({1, 2}), &gemm_axes, &infer_gemm);
    add(kDs, "FusedGemm", CF::produces, false, kLast, bits({1, 2}), &gemm_axes, &infer_gemm);
    add(kOnnx, "MatMul", CF::produces, false, kLast, bits({1}), &matmul_axes, infer_matmul);
    add(kDs, "FusedMatMul", CF::produces, false, kLast, bits({1, 2}), &matmul_axes, infer_matmul);
    add(kOnnx, "MatMulInteger", CF::produces, false, kLast, bits({1, 2, 3}), &matmul_integer_axes,
        infer_matmul_integer);
    add(kOnnx, "QLinearMatMul", CF::produces, false, kLast, bits({1, 2, 3, 4, 5, 6, 7}),
        &qlinear_matmul_axes, infer_qlinear_matmul);
    add(kDs, "DynamicQuantizeMatMul", CF::produces, false, kLast, bits({1, 2, 3, 4}),
        &dyn_quant_matmul_axes, infer_dequantizing_matmul);
    add(kDs, "MatMulIntegerToFloat", CF::produces, false, kLast, bits({1, 3, 5, 6}),
        &matmul_integer_to_float_axes, infer_dequantizing_matmul);
    // ONNX Runtime's contrib names of the same two ops, and its QGemm.
    add(kMs, "DynamicQuantizeMatMul", CF::produces, false, kLast, bits({1, 2, 3, 4}),
        &dyn_quant_matmul_axes, infer_dequantizing_matmul);
    add(kMs, "MatMulIntegerToFloat", CF::produces, false, kLast, bits({1, 3, 5, 6}),
        &matmul_integer_to_float_axes, infer_dequantizing_matmul);
    add(kMs, "QGemm", CF::produces, false, kLast, bits({1, 2, 3, 4, 5, 6, 7, 8}), &qgemm_axes,
        &infer_qgemm);

    // Per-channel parameters.
    add(kOnnx, "BatchNormalization", CF::per_channel, false, 1, bits({1, 2, 3, 4}),
        &per_channel_axes, &infer_batch_norm);
    add(kOnnx, "InstanceNormalization", CF::per_channel, false, 1, bits({1, 2}), &per_channel_axes,
        &infer_same);
    add(kOnnx, "DequantizeLinear", CF::per_channel, true, kNoAxis, bits({1, 2}), &per_channel_axes,
        &infer_dequantize);
    add(kOnnx, "QuantizeLinear", CF::per_channel, true, kNoAxis, bits({1, 2}), &per_channel_axes,
        &infer_quantize);
    plain(kOnnx, "DynamicQuantizeLinear", CF::opaque, kNoAxis, &infer_dynamic_quantize);

    // Normalizations over the channel axis.
    add(kOnnx, "LayerNormalization", CF::normalizes, false, kLast, bits({1, 2}), &last_axis_axes,
        &infer_layer_norm);
    add(kDs, "LayerNormalization", CF::normalizes, false, kLast, bits({1, 2}), &last_axis_axes,
        &infer_layer_norm);
    add(kOnnx, "RMSNormalization", CF::normalizes, false, kLast, bits({1}), &last_axis_axes,
        &infer_layer_norm);
    add(kDs, "SkipLayerNormalization", CF::normalizes, false, kLast, bits({2, 3, 4}),
        &last_axis_axes, &infer_skip_layer_norm);
    add(kOnnx, "GroupNormalization", CF::normalizes, false, 1, bits({1, 2}), &per_channel_axes,
        &infer_same);
    plain(kOnnx, "LRN", CF::normalizes, 1, &infer_same);
    plain(kOnnx, "MeanVarianceNormalization", CF::normalizes, 1, &infer_same);
    plain(kOnnx, "LpNormalization", CF::normalizes, kLast, &infer_same);
    plain(kOnnx, "Softmax", CF::normalizes, kLast, &infer_same);
    plain(kOnnx, "LogSoftmax", CF::normalizes, kLast, &infer_same);
    plain(kOnnx, "Hardmax", CF::normalizes, kLast, &infer_same);
    plain(kDs, "MultiHeadAttention", CF::heads, kLast, &infer_mha);
    // One generation step's attention over the paged cache: Y has Q's shape; its state lives
    // outside the graph, so a pruner leaves it alone.
    plain(kDs, "PagedAttention", CF::opaque, kLast, &infer_same);
    // Decoder fusions: RMSNorm as ONNX's; the rotary embedding mixes the two halves (or the
    // pairs) of the last axis and the gate halves it, so a pruner treats both as opaque.
    add(kDs, "RMSNormalization", CF::normalizes, false, kLast, bits({1}), &last_axis_axes,
        &infer_layer_norm);
    plain(kDs, "RotaryEmbedding", CF::opaque, kLast, &infer_broadcast);  // X, Cos, Sin
    plain(kDs, "GatedActivation", CF::opaque, kLast, &infer_gated_activation);

    // Pooling, reductions and friends keep channels.
    plain(kOnnx, "MaxPool", CF::keeps, 1, &infer_pool);
    plain(kOnnx, "AveragePool", CF::keeps, 1, &infer_pool);
    plain(kOnnx, "LpPool", CF::keeps, 1, &infer_pool);
    plain(kOnnx, "GlobalAveragePool", CF::keeps, 1, &infer_global_pool);
    plain(kOnnx, "GlobalMaxPool", CF::keeps, 1, &infer_global_pool);
    plain(kOnnx, "GlobalLpPool", CF::keeps, 1, &infer_global_pool);
    plain(kOnnx, "ArgMax", CF::keeps, kNoAxis, &infer_arg_reduce);
    plain(kOnnx, "ArgMin", CF::keeps, kNoAxis, &infer_arg_reduce);
    plain(kOnnx, "Pad", CF::keeps, kNoAxis, &infer_pad);
    plain(kOnnx, "Resize", CF::keeps, 1, nullptr);
    plain(kOnnx, "Upsample", CF::keeps, 1, nullptr);
    plain(kOnnx, "CumSum", CF::keeps, kNoAxis, &infer_same);
    plain(kOnnx, "Trilu", CF::keeps, kNoAxis, &infer_same);
    plain(kOnnx, "TopK", CF::keeps, kNoAxis, &infer_topk);

    // Joins and cuts.
    plain(kOnnx, "Concat", CF::concat, kNoAxis, &infer_concat);
    plain(kOnnx, "Split", CF::split, kNoAxis, &infer_split);
    plain(kOnnx, "Slice", CF::split, kNoAxis, &infer_slice);

    // Reshape-like.
    plain(kOnnx, "Reshape", CF::reshapes, kNoAxis, &infer_reshape);
    plain(kOnnx, "Flatten", CF::reshapes, kNoAxis, &infer_flatten);
    plain(kOnnx, "Transpose", CF::reshapes, kNoAxis, &infer_transpose);
    plain(kOnnx, "Squeeze", CF::reshapes, kNoAxis, &infer_squeeze);
    plain(kOnnx, "Unsqueeze", CF::reshapes, kNoAxis, &infer_unsqueeze);
    plain(kOnnx, "Expand", CF::reshapes, kNoAxis, &infer_expand);
    plain(kOnnx, "Tile", CF::reshapes, kNoAxis, &infer_tile);
    plain(kOnnx, "DepthToSpace", CF::reshapes, 1, nullptr);
    plain(kOnnx, "SpaceToDepth", CF::reshapes, 1, nullptr);

    // Shapes, indices and sources: not channels of an activation.
    plain(kOnnx, "Gather", CF::opaque, kNoAxis, &infer_gather);
    plain(kOnnx, "Shape", CF::opaque, kNoAxis, &infer_shape_op);
    plain(kOnnx, "Size", CF::opaque, kNoAxis, &infer_size);
    plain(kOnnx, "Constant", CF::opaque, kNoAxis, &infer_constant);
    plain(kOnnx, "ConstantOfShape", CF::opaque, kNoAxis, &infer_constant_of_shape);
    plain(kOnnx, "Range", CF::opaque, kNoAxis, &infer_range);
    plain(kOnnx, "NonZero", CF::opaque, kNoAxis, &infer_nonzero);

    // Recurrent layers: weights with gate-major axes, channels mixed.
    add(kOnnx, "LSTM", CF::opaque, false, kNoAxis, bits({1, 2, 3}), &rnn_axes, nullptr);
    add(kOnnx, "GRU", CF::opaque, false, kNoAxis, bits({1, 2, 3}), &rnn_axes, nullptr);
    add(kOnnx, "RNN", CF::opaque, false, kNoAxis, bits({1, 2, 3}), &rnn_axes, nullptr);

    // Other domains the kernels implement.
    for (auto op : {"ArrayFeatureExtractor", "Binarizer", "LabelEncoder", "TreeEnsemble"})
        add(kMl, op, CF::opaque, false, kNoAxis, 0, nullptr, nullptr);
    for (auto op : {"Adagrad", "Adam", "Momentum"})
        add(kTraining, op, CF::opaque, false, kNoAxis, 0, nullptr, nullptr);
    plain(kPreview, "FlexAttention", CF::opaque, kNoAxis, nullptr);
    // ONNX Runtime's com.microsoft quantized elementwise ops (scales and zero points: weights).
    add(kMs, "QLinearAdd", CF::couples, true, kNoAxis, bits({1, 2, 4, 5, 6, 7}), nullptr,
        &infer_qlinear_binary);
    add(kMs, "QLinearMul", CF::couples, true, kNoAxis, bits({1, 2, 4, 5, 6, 7}), nullptr,
        &infer_qlinear_binary);
    add(kMs, "QLinearSigmoid", CF::passthrough, true, kNoAxis, bits({1, 2, 3, 4}), nullptr,
        &infer_same);
    add(kMs, "QLinearLeakyRelu", CF::passthrough, true, kNoAxis, bits({1, 2, 3, 4}), nullptr,
        &infer_same);
    add(kMs, "QLinearGlobalAveragePool", CF::keeps, false, kNoAxis, bits({1, 2, 3, 4}), nullptr,
        &infer_qlinear_global_pool);
    return t;
}

const std::vector<OpInfo>& table() {
    static const std::vector<OpInfo> t = [] {
        std::vector<OpInfo> v = build_table();
        std::sort(v.begin(), v.end(), [](const OpInfo& a, const OpInfo& b) {
            return std::pair(a.domain, a.op_type) < std::pair(b.domain, b.op_type);
        });
        return v;
    }();
    return t;
}

bool is_constant(const Graph& g, ValueId id) {
    return id != kNoValue && g.value(id).initializer.has_value();
}

}  // namespace

const OpInfo* find_op_info(std::string_view domain, std::string_view op_type) noexcept {
    if (domain == "ai.onnx") domain = kOnnx;
    try {
        const std::vector<OpInfo>& t = table();
        auto it = std::lower_bound(
            t.begin(), t.end(), std::pair(domain, op_type),
            [](const OpInfo& a, const std::pair<std::string_view, std::string_view>& k) {
                return std::pair(a.domain, a.op_type) < k;
            });
        if (it != t.end() && it->domain == domain && it->op_type == op_type) return &*it;
    } catch (const std::bad_alloc&) {  // the table could not be built: nothing is known
    }
    return nullptr;
}

std::vector<const OpInfo*> all_op_infos() {
    std::vector<const OpInfo*> out;
    for (const OpInfo& i : table()) out.push_back(&i);
    return out;
}

ChannelFlow effective_channel_flow(const OpInfo* info, const Graph& g, const Node& n) {
    if (info == nullptr) return ChannelFlow::opaque;
    if (info->channels == ChannelFlow::couples && n.inputs.size() == 2) {
        const bool c0 = is_constant(g, n.inputs[0]), c1 = is_constant(g, n.inputs[1]);
        if (c0 != c1) return ChannelFlow::per_channel;
    }
    if (info->channels == ChannelFlow::produces) {
        // The weight that makes the output channels: W (Conv-like) or B (Gemm/MatMul-like).
        for (std::size_t i = 0; i < n.inputs.size(); ++i) {
            if (!info->is_weight(static_cast<int>(i))) continue;
            if (!is_constant(g, n.inputs[i])) return ChannelFlow::opaque;
            break;
        }
    }
    return info->channels;
}

Status infer_node_shapes(const Graph& g, const Node& n, std::int64_t opset,
                         const ShapeValues* values, std::vector<InferredOutput>& out) {
    const OpInfo* info = find_op_info(n);
    if (info == nullptr || info->infer == nullptr)
        return Status::error(ErrorCode::unsupported, n.describe(), ": no shape rule");
    ShapeContext ctx(g, n, opset, values);
    DSINFER_RETURN_IF_ERROR(info->infer(ctx));
    out = std::move(ctx.outputs());
    return Status::ok();
}

namespace {

/// Merges `inferred` into `have`: an unknown shape takes it whole, one of the same rank takes
/// each dim it does not know statically (static, or a symbol for an unknown dim).
void merge_shape(SymbolicShape& have, const SymbolicShape& inferred) {
    if (!inferred.known) return;
    if (!have.known) {
        have = inferred;
        return;
    }
    if (have.rank() != inferred.rank()) return;
    for (std::size_t d = 0; d < have.dims.size(); ++d) {
        Dim& h = have.dims[d];
        const Dim& i = inferred.dims[d];
        if (h.is_static()) continue;
        if (i.is_static() || (h.symbol.empty() && !i.symbol.empty())) h = i;
    }
}

bool resolved(const Value& v) {
    if (!v.dtype || !v.shape.known) return false;
    for (const Dim& d : v.shape.dims)
        if (!d.is_static() && d.symbol.empty()) return false;
    return true;
}

bool has_subgraph(const Node& n) {
    for (const auto& [name, a] : n.attributes) {
        (void)name;
        if (a.kind == AttrKind::g || a.kind == AttrKind::graphs) return true;
    }
    return false;
}

}  // namespace

ShapeAnnotation annotate_graph_shapes(Graph& g) {
    ShapeAnnotation report;
    ShapeValues values;
    std::vector<InferredOutput> out;
    for (const Node& n : g.nodes) {
        ++report.nodes;
        const OpInfo* info = find_op_info(n);
        if (info == nullptr || info->infer == nullptr || has_subgraph(n)) {
            ++report.without_rule;
            continue;
        }
        const Status st = infer_node_shapes(g, n, g.opset(n.domain), &values, out);
        if (!st.is_ok()) {
            if (report.first_error.is_ok()) report.first_error = st;
            ++report.unresolved;
            continue;
        }
        bool ok = true;
        for (std::size_t i = 0; i < n.outputs.size() && i < out.size(); ++i) {
            const ValueId id = n.outputs[i];
            if (id == kNoValue) continue;
            Value& v = g.value(id);
            if (!v.dtype && out[i].dtype) v.dtype = out[i].dtype;
            if (!v.shape.is_static()) merge_shape(v.shape, out[i].shape);
            if (out[i].value) values[id] = std::move(*out[i].value);
            ok = ok && resolved(v);
        }
        if (!ok) ++report.unresolved;
    }
    return report;
}

}  // namespace dsinfer::detail
