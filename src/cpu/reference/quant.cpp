// Reference QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer-arithmetic
// ops MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
//
// Layouts of scale/zero point: per-tensor (one element), per-axis (1-D, one per slice of
// `axis`, opset 13+) and blocked (same rank as x, `block_size` consecutive elements along
// `axis` share one, opset 21+). Rounding is to nearest, ties to even; integer results saturate.
// NaN inputs quantize to the zero point (a deterministic choice; the spec leaves it open).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"
#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/qlinear.hpp"
#include "ops/quantize.hpp"

namespace dsinfer::detail {

namespace {

constexpr bool is_quant_type(DType t) noexcept {
    return t == DType::i8 || t == DType::u8 || t == DType::i16 || t == DType::u16 ||
           t == DType::i32;
}
constexpr bool is_half(DType t) noexcept { return t == DType::f16 || t == DType::bf16; }

/// Rounds f to the precision of `t` when t is a 16-bit float (emulates 16-bit arithmetic).
inline float round_to(DType t, float f) noexcept {
    if (t == DType::f16) return static_cast<float>(float16(f));
    if (t == DType::bf16) return static_cast<float>(bfloat16(f));
    return f;
}

/// Element i of a numeric buffer of type dt, as double (scales, zero points: tiny tensors).
inline double read_element_as_double(const void* p, DType dt, std::int64_t i) noexcept {
    double out = 0;
    (void)dispatch_types(dt, NumericTypes{}, [&]<class T>() -> Status {
        out = static_cast<double>(load(static_cast<const T*>(p)[i]));
        return Status::ok();
    });
    return out;
}

/// Element i of an integer buffer of a quantized type, as int64.
inline std::int64_t read_element_as_int(const void* p, DType dt, std::int64_t i) noexcept {
    switch (dt) {
        case DType::i8: return static_cast<const std::int8_t*>(p)[i];
        case DType::u8: return static_cast<const std::uint8_t*>(p)[i];
        case DType::i16: return static_cast<const std::int16_t*>(p)[i];
        case DType::u16: return static_cast<const std::uint16_t*>(p)[i];
        case DType::i32: return static_cast<const std::int32_t*>(p)[i];
        default: return 0;
    }
}

using QuantTypes = TypeList<std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t>;

enum class LayoutKind { tensor, axis, blocked };

/// How x's elements map onto scale/zero-point elements: x is walked as [outer, n, inner] around
/// `axis`.
struct QuantLayout {
    LayoutKind kind = LayoutKind::tensor;
    std::int64_t outer = 1, n = 1, inner = 1;
    std::int64_t block = 0;   // blocked: block size
    std::int64_t blocks = 0;  // blocked: scale dim along axis
};

StatusOr<QuantLayout> make_layout(const Shape& x, const Shape& scale, const Tensor* zp,
                                  std::int64_t axis_attr, std::int64_t block_size,
                                  std::int64_t opset, const char* scale_name) {
    QuantLayout l;
    const int rank = x.rank();
    if (zp != nullptr && !(zp->shape() == scale))
        return Status::error(ErrorCode::invalid_argument, "zero point shape ",
                             zp->shape().to_string(), " differs from the ", scale_name, " shape ",
                             scale.to_string());
    if (block_size > 0) {
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, rank));
        if (scale.rank() != rank)
            return Status::error(ErrorCode::invalid_argument, "blocked quantization needs a ",
                                 scale_name, " of rank ", rank, ", got shape ", scale.to_string());
        // ceil(x[axis] / block_size) without overflow (block_size may be as large as INT64_MAX).
        const std::int64_t blocks = x[axis] == 0 ? 0 : (x[axis] - 1) / block_size + 1;
        for (int d = 0; d < rank; ++d) {
            const std::int64_t want = d == axis ? blocks : x[d];
            if (scale[d] != want)
                return Status::error(ErrorCode::invalid_argument, scale_name, " shape ",
                                     scale.to_string(), " does not fit input shape ", x.to_string(),
                                     " with block_size ", block_size, " on axis ", axis);
        }
        l.kind = LayoutKind::blocked;
        l.outer = x.size_between(0, axis);
        l.n = x[axis];
        l.inner = x.size_between(axis + 1, rank);
        l.block = block_size;
        l.blocks = blocks;
        return l;
    }
    const std::int64_t count = scale.num_elements();
    if (scale.rank() == 0 || (scale.rank() == 1 && count == 1)) {
        l.n = x.num_elements();
        return l;
    }
    if (opset < 13 || scale.rank() != 1)
        return Status::error(ErrorCode::invalid_argument, scale_name,
                             " must be a scalar or a 1-D per-axis tensor, got shape ",
                             scale.to_string());
    DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, rank));
    if (count != x[axis])
        return Status::error(ErrorCode::invalid_argument, scale_name, " has ", count,
                             " elements but axis ", axis, " of input shape ", x.to_string(),
                             " has ", x[axis]);
    l.kind = LayoutKind::axis;
    l.outer = x.size_between(0, axis);
    l.n = x[axis];
    l.inner = x.size_between(axis + 1, rank);
    return l;
}

inline std::int64_t param_index(const QuantLayout& l, std::int64_t o, std::int64_t a,
                                std::int64_t i) noexcept {
    switch (l.kind) {
        case LayoutKind::tensor: return 0;
        case LayoutKind::axis: return a;
        case LayoutKind::blocked: return (o * l.blocks + a / l.block) * l.inner + i;
    }
    return 0;
}

/// Rejects scale constants that are zero, negative, NaN or infinite.
Status check_scale_constant(const KernelCreateContext& ctx, int input, const char* name) {
    const Tensor* s = ctx.constant_input(input);
    if (s == nullptr || !is_floating(s->dtype())) return Status::ok();
    for (std::int64_t i = 0; i < s->num_elements(); ++i) {
        const double v = read_element_as_double(s->raw_data(), s->dtype(), i);
        if (!(v > 0.0) || !std::isfinite(v))
            return Status::error(ErrorCode::invalid_model, "input '", name, "' element ", i, " is ",
                                 v, "; scales must be positive and finite");
    }
    return Status::ok();
}

/// Declared dtype of an optional input, if known.
std::optional<DType> declared_dtype(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    if (v == nullptr) return std::nullopt;
    return v->dtype;
}

// ---- QuantizeLinear --------------------------------------------------------------------------

class QuantizeKernel final : public Kernel {
public:
    QuantizeKernel(std::int64_t axis, std::int64_t block, std::int64_t opset,
                   std::optional<DType> out_dtype, std::optional<DType> precision)
        : axis_(axis), block_(block), opset_(opset), out_dtype_(out_dtype), precision_(precision) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& s = ctx.input(1);
        const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (!(is_floating(x.dtype()) || x.dtype() == DType::i32))
            return Status::error(ErrorCode::unsupported, "input 'x' of type ",
                                 dtype_name(x.dtype()), " is not supported");
        if (!is_floating(s.dtype()))
            return Status::error(ErrorCode::invalid_argument,
                                 "input 'y_scale' must be a float type, got ",
                                 dtype_name(s.dtype()));
        DType out = out_dtype_.value_or(DType::u8);
        if (zp != nullptr) {
            if (out_dtype_ && *out_dtype_ != zp->dtype())
                return Status::error(ErrorCode::invalid_model, "attribute 'output_dtype' (",
                                     dtype_name(*out_dtype_), ") differs from y_zero_point's ",
                                     dtype_name(zp->dtype()));
            out = zp->dtype();
        }
        if (!is_quant_type(out))
            return Status::error(ErrorCode::unsupported, "quantized type ", dtype_name(out),
                                 " is not supported");
        DSINFER_ASSIGN_OR_RETURN(
            QuantLayout l, make_layout(x.shape(), s.shape(), zp, axis_, block_, opset_, "y_scale"));
        (void)l;
        ctx.set_output(0, out, x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& s = ctx.input(1);
        const bool has_zp = ctx.has_input(2);
        const TensorView& y = ctx.output(0);
        // make_layout only allocates on error; prepare already validated the shapes.
        QuantLayout l;
        {
            auto st = layout_from_views(x.shape, s.shape);
            if (!st.is_ok()) return st.status();
            l = st.value();
        }
        const DType prec = precision_.value_or(s.dtype);
        const bool narrow = is_half(prec) && (precision_.has_value() || x.dtype == s.dtype);
        const bool dbl = prec == DType::f64;
        return dispatch_types(y.dtype, QuantTypes{}, [&]<class Q>() -> Status {
            Q* yp = y.data_unchecked<Q>();
            const void* zpp = has_zp ? ctx.input(2).raw : nullptr;
            std::int64_t e = 0;
            for (std::int64_t o = 0; o < l.outer; ++o)
                for (std::int64_t a = 0; a < l.n; ++a)
                    for (std::int64_t i = 0; i < l.inner; ++i, ++e) {
                        const std::int64_t pi = param_index(l, o, a, i);
                        const double xv = read_element_as_double(x.raw, x.dtype, e);
                        const double sv = read_element_as_double(s.raw, s.dtype, pi);
                        double q;
                        if (dbl) {
                            q = xv / sv;
                        } else if (narrow) {
                            const float xf = round_to(prec, static_cast<float>(xv));
                            const float sf = round_to(prec, static_cast<float>(sv));
                            q = round_to(prec, xf / sf);
                        } else {
                            q = static_cast<float>(xv) / static_cast<float>(sv);
                        }
                        const double zv =
                            zpp != nullptr ? read_element_as_double(zpp, y.dtype, pi) : 0.0;
                        yp[e] = saturate_round<Q>(q, zv);
                    }
            return Status::ok();
        });
    }

private:
    StatusOr<QuantLayout> layout_from_views(const Shape& x, const Shape& s) const {
        return make_layout(x, s, nullptr, axis_, block_, opset_, "y_scale");
    }

    std::int64_t axis_;
    std::int64_t block_;
    std::int64_t opset_;
    std::optional<DType> out_dtype_;
    std::optional<DType> precision_;
};

StatusOr<std::unique_ptr<Kernel>> make_quantize(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() >= 2 && ctx.num_inputs() <= 3, ErrorCode::invalid_model,
                  "QuantizeLinear takes 2 or 3 inputs, got ", ctx.num_inputs());
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, node.attr_or<std::int64_t>("axis", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t block, node.attr_or<std::int64_t>("block_size", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t saturate, node.attr_or<std::int64_t>("saturate", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t odt, node.attr_or<std::int64_t>("output_dtype", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t prec, node.attr_or<std::int64_t>("precision", 0));
    (void)saturate;  // only affects float8 outputs; integer outputs always saturate
    if (block < 0)
        return Status::error(ErrorCode::invalid_model, "attribute 'block_size' must be >= 0, got ",
                             block);
    std::optional<DType> out_dtype;
    if (odt != 0) {
        out_dtype = from_onnx_dtype(static_cast<int>(odt));
        if (!out_dtype || !is_quant_type(*out_dtype))
            return Status::error(ErrorCode::unsupported, "attribute 'output_dtype' ", odt, " (",
                                 onnx_dtype_name(static_cast<int>(odt)), ") is not supported");
        if (auto zt = declared_dtype(ctx, 2); zt && *zt != *out_dtype)
            return Status::error(ErrorCode::invalid_model, "attribute 'output_dtype' (",
                                 dtype_name(*out_dtype), ") differs from y_zero_point's type ",
                                 dtype_name(*zt));
    }
    std::optional<DType> precision;
    if (prec != 0) {
        precision = from_onnx_dtype(static_cast<int>(prec));
        if (!precision || !is_floating(*precision))
            return Status::error(ErrorCode::invalid_model, "attribute 'precision' ", prec,
                                 " is not a float type");
    }
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 1, "y_scale"));
    return make_kernel<QuantizeKernel>(axis, block, ctx.opset(), out_dtype, precision);
}

// ---- DequantizeLinear ------------------------------------------------------------------------

class DequantizeKernel final : public Kernel {
public:
    DequantizeKernel(std::int64_t axis, std::int64_t block, std::int64_t opset,
                     std::optional<DType> out_dtype)
        : axis_(axis), block_(block), opset_(opset), out_dtype_(out_dtype) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& s = ctx.input(1);
        const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (!is_quant_type(x.dtype()))
            return Status::error(ErrorCode::unsupported, "input 'x' of type ",
                                 dtype_name(x.dtype()), " is not supported");
        if (!is_floating(s.dtype()))
            return Status::error(ErrorCode::invalid_argument,
                                 "input 'x_scale' must be a float type, got ",
                                 dtype_name(s.dtype()));
        if (zp != nullptr && zp->dtype() != x.dtype())
            return Status::error(ErrorCode::invalid_argument, "x_zero_point has type ",
                                 dtype_name(zp->dtype()), " but x has ", dtype_name(x.dtype()));
        DSINFER_ASSIGN_OR_RETURN(
            QuantLayout l, make_layout(x.shape(), s.shape(), zp, axis_, block_, opset_, "x_scale"));
        (void)l;
        ctx.set_output(0, out_dtype_.value_or(s.dtype()), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& s = ctx.input(1);
        const void* zpp = ctx.has_input(2) ? ctx.input(2).raw : nullptr;
        const TensorView& y = ctx.output(0);
        auto lo = make_layout(x.shape, s.shape, nullptr, axis_, block_, opset_, "x_scale");
        if (!lo.is_ok()) return lo.status();
        const QuantLayout l = lo.value();
        return dispatch_types(y.dtype, FloatTypes{}, [&]<class F>() -> Status {
            F* yp = y.data_unchecked<F>();
            std::int64_t e = 0;
            for (std::int64_t o = 0; o < l.outer; ++o)
                for (std::int64_t a = 0; a < l.n; ++a)
                    for (std::int64_t i = 0; i < l.inner; ++i, ++e) {
                        const std::int64_t pi = param_index(l, o, a, i);
                        const auto xv = read_element_as_int(x.raw, x.dtype, e);
                        const auto zv = zpp != nullptr ? read_element_as_int(zpp, x.dtype, pi) : 0;
                        const double sv = read_element_as_double(s.raw, s.dtype, pi);
                        if constexpr (std::is_same_v<F, double>) {
                            yp[e] = static_cast<double>(xv - zv) * sv;
                        } else {
                            yp[e] = store<F>(static_cast<float>(xv - zv) * static_cast<float>(sv));
                        }
                    }
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
    std::int64_t block_;
    std::int64_t opset_;
    std::optional<DType> out_dtype_;
};

StatusOr<std::unique_ptr<Kernel>> make_dequantize(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, node.attr_or<std::int64_t>("axis", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t block, node.attr_or<std::int64_t>("block_size", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t odt, node.attr_or<std::int64_t>("output_dtype", 0));
    if (block < 0)
        return Status::error(ErrorCode::invalid_model, "attribute 'block_size' must be >= 0, got ",
                             block);
    std::optional<DType> out_dtype;
    if (odt != 0) {
        out_dtype = from_onnx_dtype(static_cast<int>(odt));
        if (!out_dtype || !is_floating(*out_dtype))
            return Status::error(ErrorCode::invalid_model, "attribute 'output_dtype' ", odt, " (",
                                 onnx_dtype_name(static_cast<int>(odt)), ") is not a float type");
    }
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 1, "x_scale"));
    // int32 data is dequantized without a zero point (the spec fixes it at 0).
    if (const Tensor* zp = ctx.constant_input(2); zp != nullptr && zp->dtype() == DType::i32) {
        for (std::int64_t i = 0; i < zp->num_elements(); ++i)
            if (zp->data_unchecked<std::int32_t>()[i] != 0)
                return Status::error(ErrorCode::invalid_model,
                                     "x_zero_point must be 0 for int32 input, got ",
                                     zp->data_unchecked<std::int32_t>()[i]);
    }
    return make_kernel<DequantizeKernel>(axis, block, ctx.opset(), out_dtype);
}

// ---- DynamicQuantizeLinear -------------------------------------------------------------------

/// DynamicQuantizeLinear of x[0, n) into y; returns the scale and zero point. The range always
/// includes 0 so that 0 is exactly representable; NaNs are skipped. The scale and zero point:
/// ops/quantize.hpp (shared with the fused and fast kernels).
DynamicQuantParams dynamic_quantize(const float* x, std::int64_t n, std::uint8_t* y) noexcept {
    QuantRange r;
    for (std::int64_t i = 0; i < n; ++i) r.add(x[i]);
    const DynamicQuantParams p = dynamic_quant_params(r);
    for (std::int64_t i = 0; i < n; ++i) y[i] = dynamic_quantize_value(x[i], p);
    return p;
}

class DynamicQuantizeKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.dtype() != DType::f32)
            return Status::error(ErrorCode::unsupported, "input 'x' must be float32, got ",
                                 dtype_name(x.dtype()));
        ctx.set_output(0, DType::u8, x.shape());
        ctx.set_output(1, DType::f32, Shape{});
        ctx.set_output(2, DType::u8, Shape{});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const float* xp = x.data_unchecked<float>();
        const std::int64_t n = x.num_elements();
        const DynamicQuantParams p = dynamic_quantize(xp, n, ctx.output(0).data_unchecked<std::uint8_t>());
        *ctx.output(1).data_unchecked<float>() = p.scale;
        *ctx.output(2).data_unchecked<std::uint8_t>() = p.zero_point;
        return Status::ok();
    }
};

StatusOr<std::unique_ptr<Kernel>> make_dynamic_quantize(const KernelCreateContext&) {
    return make_kernel<DynamicQuantizeKernel>();
}

// ---- integer matmul: MatMulInteger, QLinearMatMul --------------------------------------------

/// How a per-tensor / per-row (A) / per-column (B) scale or zero point maps onto the output.
struct ParamMap {
    enum Kind : std::uint8_t { tensor, vector, batched };
    Kind kind = tensor;
    std::int64_t len = 1;
    std::int64_t index(std::int64_t batch, std::int64_t j) const noexcept {
        return kind == tensor ? 0 : kind == vector ? j : batch * len + j;
    }
};

/// `rows`: the parameter belongs to A (one per row, length M); else to B (one per column).
StatusOr<ParamMap> make_param_map(const Shape& p, const Shape& operand, bool rows, std::int64_t len,
                                  const char* name) {
    ParamMap m;
    m.len = len;
    if (p.num_elements() == 1 && p.rank() <= 1) return m;
    if (p.rank() == 1 && p[0] == len && operand.rank() >= 2) {
        m.kind = ParamMap::vector;
        return m;
    }
    const int r = operand.rank();
    if (p.rank() == r && r >= 2) {
        bool ok = true;
        const int unit = rows ? r - 1 : r - 2;  // the K dim collapses to 1
        for (int d = 0; d < r; ++d) ok = ok && p[d] == (d == unit ? 1 : operand[d]);
        if (ok) {
            m.kind = ParamMap::batched;
            return m;
        }
    }
    return Status::error(ErrorCode::invalid_argument, "input '", name, "' of shape ", p.to_string(),
                         " is neither per-tensor nor per-", rows ? "row" : "column",
                         " for an operand of shape ", operand.to_string());
}

struct MatMulGeom {
    Shape out;
    Shape batch;
    Strides a_batch_stride{}, b_batch_stride{};  // in elements
    std::int64_t m = 1, k = 1, n = 1;
};

StatusOr<MatMulGeom> make_matmul_geom(const Shape& a, const Shape& b) {
    if (a.rank() == 0 || b.rank() == 0)
        return Status::error(ErrorCode::invalid_argument, "matmul inputs must have rank >= 1, got ",
                             a.to_string(), " and ", b.to_string());
    MatMulGeom g;
    Shape ab, bb;
    const std::int64_t ka = a[a.rank() - 1];
    g.m = a.rank() >= 2 ? a[a.rank() - 2] : 1;
    const std::int64_t kb = b.rank() >= 2 ? b[b.rank() - 2] : b[0];
    g.n = b.rank() >= 2 ? b[b.rank() - 1] : 1;
    if (ka != kb)
        return Status::error(ErrorCode::invalid_argument,
                             "matmul inner dimensions differ: ", a.to_string(), " x ",
                             b.to_string());
    g.k = ka;
    for (int d = 0; d + 2 < a.rank(); ++d) ab.push_back(a[d]);
    for (int d = 0; d + 2 < b.rank(); ++d) bb.push_back(b[d]);
    DSINFER_ASSIGN_OR_RETURN(g.batch, broadcast_shapes(ab, bb));
    g.a_batch_stride = broadcast_strides(ab, g.batch);
    g.b_batch_stride = broadcast_strides(bb, g.batch);
    for (int d = 0; d < g.batch.rank(); ++d) {
        g.a_batch_stride[static_cast<std::size_t>(d)] *= g.m * g.k;
        g.b_batch_stride[static_cast<std::size_t>(d)] *= g.k * g.n;
    }
    g.out = g.batch;
    if (a.rank() >= 2) g.out.push_back(g.m);
    if (b.rank() >= 2) g.out.push_back(g.n);
    if (g.out.rank() > kMaxRank)
        return Status::error(ErrorCode::unsupported, "matmul output rank exceeds ", kMaxRank);
    return g;
}

/// Integer matmul with zero points; calls emit(out_index, a_batch, b_batch, m, n, acc).
template <class A, class B, class Emit>
void matmul_int(const MatMulGeom& g, const A* a, const B* b, const void* azp, ParamMap am,
                const void* bzp, ParamMap bm, Emit&& emit) {
    std::int64_t out = 0;
    const std::array<Strides, 2> st{g.a_batch_stride, g.b_batch_stride};
    for_each_offset<2>(g.batch, st, [&](const std::array<std::int64_t, 2>& off) {
        const A* ab = a + off[0];
        const B* bb = b + off[1];
        const std::int64_t abatch = g.m * g.k > 0 ? off[0] / (g.m * g.k) : 0;
        const std::int64_t bbatch = g.k * g.n > 0 ? off[1] / (g.k * g.n) : 0;
        for (std::int64_t i = 0; i < g.m; ++i) {
            const std::int64_t za =
                azp != nullptr ? static_cast<const A*>(azp)[am.index(abatch, i)] : 0;
            for (std::int64_t j = 0; j < g.n; ++j) {
                const std::int64_t zb =
                    bzp != nullptr ? static_cast<const B*>(bzp)[bm.index(bbatch, j)] : 0;
                std::int64_t acc = 0;
                for (std::int64_t t = 0; t < g.k; ++t)
                    acc += (static_cast<std::int64_t>(ab[i * g.k + t]) - za) *
                           (static_cast<std::int64_t>(bb[t * g.n + j]) - zb);
                emit(out++, abatch, bbatch, i, j, acc);
            }
        }
    });
}

using Int8Types = TypeList<std::int8_t, std::uint8_t>;

Status check_int8(const Tensor& t, const char* name) {
    if (t.dtype() != DType::i8 && t.dtype() != DType::u8)
        return Status::error(ErrorCode::unsupported, "input '", name,
                             "' must be int8 or uint8, got ", dtype_name(t.dtype()));
    return Status::ok();
}

Status check_zero_point(const PrepareContext& ctx, int i, DType want, const char* name) {
    if (!ctx.has_input(i)) return Status::ok();
    if (ctx.input(i).dtype() != want)
        return Status::error(ErrorCode::invalid_argument, "input '", name, "' has type ",
                             dtype_name(ctx.input(i).dtype()), ", expected ", dtype_name(want));
    return Status::ok();
}

class MatMulIntegerKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(check_int8(a, "A"));
        DSINFER_RETURN_IF_ERROR(check_int8(b, "B"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 2, a.dtype(), "a_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 3, b.dtype(), "b_zero_point"));
        DSINFER_ASSIGN_OR_RETURN(MatMulGeom g, make_matmul_geom(a.shape(), b.shape()));
        if (ctx.has_input(2)) {
            DSINFER_ASSIGN_OR_RETURN(ParamMap m, make_param_map(ctx.input(2).shape(), a.shape(),
                                                                true, g.m, "a_zero_point"));
            (void)m;
        }
        if (ctx.has_input(3)) {
            DSINFER_ASSIGN_OR_RETURN(ParamMap m, make_param_map(ctx.input(3).shape(), b.shape(),
                                                                false, g.n, "b_zero_point"));
            (void)m;
        }
        ctx.set_output(0, DType::i32, g.out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        auto gs = make_matmul_geom(a.shape, b.shape);
        if (!gs.is_ok()) return gs.status();
        const MatMulGeom& g = gs.value();
        ParamMap am, bm;
        const void* azp = nullptr;
        const void* bzp = nullptr;
        if (ctx.has_input(2)) {
            auto m = make_param_map(ctx.input(2).shape, a.shape, true, g.m, "a_zero_point");
            if (!m.is_ok()) return m.status();
            am = m.value();
            azp = ctx.input(2).raw;
        }
        if (ctx.has_input(3)) {
            auto m = make_param_map(ctx.input(3).shape, b.shape, false, g.n, "b_zero_point");
            if (!m.is_ok()) return m.status();
            bm = m.value();
            bzp = ctx.input(3).raw;
        }
        auto* y = ctx.output(0).data_unchecked<std::int32_t>();
        return dispatch_types(a.dtype, Int8Types{}, [&]<class A>() -> Status {
            return dispatch_types(b.dtype, Int8Types{}, [&]<class B>() -> Status {
                matmul_int<A, B>(
                    g, a.data_unchecked<A>(), b.data_unchecked<B>(), azp, am, bzp, bm,
                    [&](std::int64_t o, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                        std::int64_t acc) { y[o] = static_cast<std::int32_t>(acc); });
                return Status::ok();
            });
        });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_matmul_integer(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_kernel<MatMulIntegerKernel>();
}

/// a_scale * b_scale / y_scale in the precision of the scales' type (16-bit and f64 scales;
/// float32 scales requantize as ops/quantize.hpp's requantize_product, which qgemm's fused
/// epilogue computes: float(acc) * requantize_multiplier, rounded to f32).
inline double requant_multiplier(DType t, double sa, double sb, double sy) noexcept {
    if (t == DType::f64) return sa * sb / sy;
    const float p = round_to(t, static_cast<float>(sa) * static_cast<float>(sb));
    return round_to(t, p / static_cast<float>(sy));
}

Status check_scale_input(const PrepareContext& ctx, int i, DType want, const char* name) {
    const Tensor& s = ctx.input(i);
    if (!is_floating(s.dtype()))
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must be a float type, got ", dtype_name(s.dtype()));
    if (s.dtype() != want)
        return Status::error(ErrorCode::invalid_argument, "input '", name, "' has type ",
                             dtype_name(s.dtype()), ", expected ", dtype_name(want));
    return Status::ok();
}

class QLinearMatMulKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(3);
        DSINFER_RETURN_IF_ERROR(check_int8(a, "a"));
        DSINFER_RETURN_IF_ERROR(check_int8(b, "b"));
        const DType st = ctx.input(1).dtype();
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 1, st, "a_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 4, st, "b_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 6, st, "y_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 2, a.dtype(), "a_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 5, b.dtype(), "b_zero_point"));
        const DType out = ctx.has_input(7) ? ctx.input(7).dtype() : a.dtype();
        if (out != DType::i8 && out != DType::u8)
            return Status::error(ErrorCode::unsupported, "y_zero_point type ", dtype_name(out),
                                 " is not supported");
        DSINFER_ASSIGN_OR_RETURN(MatMulGeom g, make_matmul_geom(a.shape(), b.shape()));
        DSINFER_ASSIGN_OR_RETURN(
            Maps m,
            maps(ctx.input(1).shape(), ctx.has_input(2), ctx.input(2).shape(), a.shape(),
                 ctx.input(4).shape(), ctx.has_input(5), ctx.input(5).shape(), b.shape(), g));
        (void)m;
        if (ctx.input(6).num_elements() != 1 ||
            (ctx.has_input(7) && ctx.input(7).num_elements() != 1))
            return Status::error(ErrorCode::invalid_argument,
                                 "y_scale and y_zero_point must have one element");
        ctx.set_output(0, out, g.out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(3);
        auto gs = make_matmul_geom(a.shape, b.shape);
        if (!gs.is_ok()) return gs.status();
        const MatMulGeom& g = gs.value();
        const bool has_az = ctx.has_input(2), has_bz = ctx.has_input(5);
        auto ms = maps(ctx.input(1).shape, has_az, ctx.input(2).shape, a.shape, ctx.input(4).shape,
                       has_bz, ctx.input(5).shape, b.shape, g);
        if (!ms.is_ok()) return ms.status();
        const Maps& mp = ms.value();
        const DType st = ctx.input(1).dtype;
        const void* as = ctx.input(1).raw;
        const void* bs = ctx.input(4).raw;
        const double ys = read_element_as_double(ctx.input(6).raw, st, 0);
        const TensorView& y = ctx.output(0);
        const double yz =
            ctx.has_input(7)
                ? static_cast<double>(read_element_as_int(ctx.input(7).raw, y.dtype, 0))
                : 0.0;
        return dispatch_types(a.dtype, Int8Types{}, [&]<class A>() -> Status {
            return dispatch_types(b.dtype, Int8Types{}, [&]<class B>() -> Status {
                return dispatch_types(y.dtype, Int8Types{}, [&]<class Q>() -> Status {
                    Q* yp = y.data_unchecked<Q>();
                    matmul_int<A, B>(
                        g, a.data_unchecked<A>(), b.data_unchecked<B>(), has_az ? ctx.input(2).raw : nullptr, mp.az,
                        has_bz ? ctx.input(5).raw : nullptr, mp.bz,
                        [&](std::int64_t o, std::int64_t ab, std::int64_t bb, std::int64_t i,
                            std::int64_t j, std::int64_t acc) {
                            const double sa = read_element_as_double(as, st, mp.as.index(ab, i));
                            const double sb = read_element_as_double(bs, st, mp.bs.index(bb, j));
                            if (st == DType::f32) {  // the fast kernels' order (ops/quantize.hpp)
                                yp[o] = requantize_product<Q>(
                                    static_cast<std::int32_t>(acc),
                                    requantize_multiplier(static_cast<float>(sa),
                                                          static_cast<float>(sb),
                                                          static_cast<float>(ys)),
                                    static_cast<std::int32_t>(yz));
                                return;
                            }
                            const double mult = requant_multiplier(st, sa, sb, ys);
                            yp[o] = saturate_round<Q>(static_cast<double>(acc) * mult, yz);
                        });
                    return Status::ok();
                });
            });
        });
    }

private:
    struct Maps {
        ParamMap as, az, bs, bz;
    };
    static StatusOr<Maps> maps(const Shape& as, bool has_az, const Shape& az, const Shape& a,
                               const Shape& bs, bool has_bz, const Shape& bz, const Shape& b,
                               const MatMulGeom& g) {
        Maps m;
        DSINFER_ASSIGN_OR_RETURN(m.as, make_param_map(as, a, true, g.m, "a_scale"));
        DSINFER_ASSIGN_OR_RETURN(m.bs, make_param_map(bs, b, false, g.n, "b_scale"));
        if (has_az) {
            if (!(az == as))
                return Status::error(ErrorCode::invalid_argument,
                                     "a_zero_point and a_scale shapes differ");
            m.az = m.as;
        }
        if (has_bz) {
            if (!(bz == bs))
                return Status::error(ErrorCode::invalid_argument,
                                     "b_zero_point and b_scale shapes differ");
            m.bz = m.bs;
        }
        return m;
    }
};

StatusOr<std::unique_ptr<Kernel>> make_qlinear_matmul(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 7));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 1, "a_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 4, "b_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 6, "y_scale"));
    return make_kernel<QLinearMatMulKernel>();
}

// ---- integer convolution: ConvInteger, QLinearConv -------------------------------------------

/// The shared spatial geometry (ops/conv.hpp) with the batch, channels, group and Y's shape.
struct QConvGeom : ConvGeom {
    std::int64_t batch = 0, c = 0, m = 0, group = 1;
    Shape out_shape;
};

StatusOr<QConvGeom> make_conv_geom(const ConvAttrs& a, const Shape& x, const Shape& w) {
    QConvGeom g;
    if (x.rank() < 3 || w.rank() != x.rank())
        return Status::error(ErrorCode::invalid_argument, "conv input shape ", x.to_string(),
                             " and weight shape ", w.to_string(), " must have the same rank >= 3");
    const int nsp = x.rank() - 2;
    DSINFER_RETURN_IF_ERROR(check_conv_attrs(a, nsp, ErrorCode::invalid_model));
    g.batch = x[0];
    g.c = x[1];
    g.m = w[0];
    g.group = a.group;
    if (g.c != w[1] * a.group || g.m % a.group != 0)
        return Status::error(ErrorCode::invalid_argument, "input channels ", g.c,
                             " and weight shape ", w.to_string(), " do not fit group ", a.group);
    for (int i = 0; i < static_cast<int>(a.kernel_shape.size()); ++i)
        if (a.kernel_shape[static_cast<std::size_t>(i)] != w[i + 2])
            return Status::error(ErrorCode::invalid_argument, "attribute 'kernel_shape' ",
                                 a.kernel_shape[static_cast<std::size_t>(i)],
                                 " differs from weight dim ", w[i + 2]);
    DSINFER_RETURN_IF_ERROR(conv_geometry(a, x, w, g));
    g.out_shape.push_back(g.batch);
    g.out_shape.push_back(g.m);
    for (int i = 0; i < nsp; ++i) g.out_shape.push_back(g.out[static_cast<std::size_t>(i)]);
    return g;
}

inline void next_index(std::array<std::int64_t, kMaxRank>& idx,
                       const std::array<std::int64_t, kMaxRank>& dims, int r) noexcept {
    for (int i = r - 1; i >= 0; --i) {
        const auto u = static_cast<std::size_t>(i);
        if (++idx[u] < dims[u]) return;
        idx[u] = 0;
    }
}

/// Direct integer convolution; calls emit(out_index, out_channel, acc). Padding contributes
/// zero after zero-point subtraction (it stands for the zero point).
template <class X, class W, class Emit>
void conv_int(const QConvGeom& g, const X* x, const W* w, std::int64_t xzp, const W* wzp,
              bool wzp_per_channel, Emit&& emit) {
    const std::int64_t cg = g.c / g.group;
    const std::int64_t mg = g.m / g.group;
    const int sr = g.nsp;
    std::int64_t out_index = 0;
    for (std::int64_t n = 0; n < g.batch; ++n) {
        for (std::int64_t m = 0; m < g.m; ++m) {
            const std::int64_t c0 = (m / mg) * cg;
            const std::int64_t wz =
                wzp == nullptr ? 0 : static_cast<std::int64_t>(wzp[wzp_per_channel ? m : 0]);
            std::array<std::int64_t, kMaxRank> opos{};
            for (std::int64_t o = 0; o < g.out_size; ++o, next_index(opos, g.out, sr)) {
                std::int64_t acc = 0;
                for (std::int64_t c = 0; c < cg; ++c) {
                    const X* xc = x + (n * g.c + c0 + c) * g.in_size;
                    const W* wc = w + (m * cg + c) * g.k_size;
                    std::array<std::int64_t, kMaxRank> kpos{};
                    for (std::int64_t kk = 0; kk < g.k_size; ++kk, next_index(kpos, g.k, sr)) {
                        std::int64_t off = 0;
                        bool inside = true;
                        for (int i = 0; i < sr && inside; ++i) {
                            const auto u = static_cast<std::size_t>(i);
                            const std::int64_t p =
                                opos[u] * g.stride[u] - g.pb[u] + kpos[u] * g.dil[u];
                            inside = p >= 0 && p < g.in[u];
                            off = off * g.in[u] + p;
                        }
                        if (!inside) continue;
                        acc += (static_cast<std::int64_t>(xc[off]) - xzp) *
                               (static_cast<std::int64_t>(wc[kk]) - wz);
                    }
                }
                emit(out_index++, m, acc);
            }
        }
    }
}

/// A weight zero point/scale: one element, or one per output channel.
Status check_per_channel(const Tensor& t, std::int64_t m, const char* name, bool& per_channel) {
    if (t.num_elements() == 1 && t.shape().rank() <= 1) {
        per_channel = false;
        return Status::ok();
    }
    if (t.shape().rank() == 1 && t.shape()[0] == m) {
        per_channel = true;
        return Status::ok();
    }
    return Status::error(ErrorCode::invalid_argument, "input '", name, "' of shape ",
                         t.shape().to_string(), " must have 1 or ", m,
                         " (output channels) elements");
}

Status check_one(const Tensor& t, const char* name) {
    if (t.num_elements() != 1)
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must have one element, got shape ", t.shape().to_string());
    return Status::ok();
}

class ConvIntegerKernel final : public Kernel {
public:
    explicit ConvIntegerKernel(ConvAttrs a) : a_(std::move(a)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(check_int8(x, "x"));
        DSINFER_RETURN_IF_ERROR(check_int8(w, "w"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 2, x.dtype(), "x_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 3, w.dtype(), "w_zero_point"));
        DSINFER_ASSIGN_OR_RETURN(QConvGeom g, make_conv_geom(a_, x.shape(), w.shape()));
        if (ctx.has_input(2)) DSINFER_RETURN_IF_ERROR(check_one(ctx.input(2), "x_zero_point"));
        bool pc = false;
        if (ctx.has_input(3))
            DSINFER_RETURN_IF_ERROR(check_per_channel(ctx.input(3), g.m, "w_zero_point", pc));
        ctx.set_output(0, DType::i32, g.out_shape);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& w = ctx.input(1);
        auto gs = make_conv_geom(a_, x.shape, w.shape);
        if (!gs.is_ok()) return gs.status();
        const QConvGeom& g = gs.value();
        const std::int64_t xz =
            ctx.has_input(2) ? read_element_as_int(ctx.input(2).raw, x.dtype, 0) : 0;
        const void* wz = ctx.has_input(3) ? ctx.input(3).raw : nullptr;
        const bool pc = wz != nullptr && ctx.input(3).num_elements() > 1;
        auto* y = ctx.output(0).data_unchecked<std::int32_t>();
        return dispatch_types(x.dtype, Int8Types{}, [&]<class X>() -> Status {
            return dispatch_types(w.dtype, Int8Types{}, [&]<class W>() -> Status {
                conv_int<X, W>(g, x.data_unchecked<X>(), w.data_unchecked<W>(), xz, static_cast<const W*>(wz), pc,
                               [&](std::int64_t o, std::int64_t, std::int64_t acc) {
                                   y[o] = static_cast<std::int32_t>(acc);
                               });
                return Status::ok();
            });
        });
    }

private:
    ConvAttrs a_;
};

StatusOr<std::unique_ptr<Kernel>> make_conv_integer(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false));
    return make_kernel<ConvIntegerKernel>(std::move(a));
}

// QLinearConv, and com.dsinfer QLinearConvAdd (add_ true): QLinearConv's inputs, then Z (9), its
// scale (10) and zero point (11, optional), the output's scale (12) and zero point (13,
// optional): com.microsoft QLinearAdd(y, Z) with y's scale and zero point as A's, computed per
// element from y's value as QLinearConv gives it (ops/qlinear.hpp, as the QLinearAdd kernels:
// bitwise the unfused pair). Z has y's shape and type; the output may take Z's block (each
// element of Z is read just before the same element of the output is written).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
class QLinearConvKernel final : public Kernel {
public:
    explicit QLinearConvKernel(ConvAttrs a, bool add = false) : a_(std::move(a)), add_(add) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(3);
        DSINFER_RETURN_IF_ERROR(check_int8(x, "x"));
        DSINFER_RETURN_IF_ERROR(check_int8(w, "w"));
        const DType st = ctx.input(1).dtype();
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 1, st, "x_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 4, st, "w_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, 6, st, "y_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 2, x.dtype(), "x_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 5, w.dtype(), "w_zero_point"));
        const DType out = ctx.has_input(7) ? ctx.input(7).dtype() : x.dtype();
        if (out != DType::i8 && out != DType::u8)
            return Status::error(ErrorCode::unsupported, "y_zero_point type ", dtype_name(out),
                                 " is not supported");
        DSINFER_ASSIGN_OR_RETURN(QConvGeom g, make_conv_geom(a_, x.shape(), w.shape()));
        DSINFER_RETURN_IF_ERROR(check_one(ctx.input(1), "x_scale"));
        DSINFER_RETURN_IF_ERROR(check_one(ctx.input(6), "y_scale"));
        if (ctx.has_input(2)) DSINFER_RETURN_IF_ERROR(check_one(ctx.input(2), "x_zero_point"));
        if (ctx.has_input(7)) DSINFER_RETURN_IF_ERROR(check_one(ctx.input(7), "y_zero_point"));
        bool pc = false;
        DSINFER_RETURN_IF_ERROR(check_per_channel(ctx.input(4), g.m, "w_scale", pc));
        if (ctx.has_input(5))
            DSINFER_RETURN_IF_ERROR(check_per_channel(ctx.input(5), g.m, "w_zero_point", pc));
        if (ctx.has_input(8)) {
            const Tensor& bias = ctx.input(8);
            if (bias.dtype() != DType::i32 || bias.shape().rank() != 1 || bias.shape()[0] != g.m)
                return Status::error(ErrorCode::invalid_argument, "input 'B' must be int32 [", g.m,
                                     "], got ", dtype_name(bias.dtype()), " ",
                                     bias.shape().to_string());
        }
        if (add_) {
            const Tensor& z = ctx.input(9);
            if (st != DType::f32)
                return Status::error(ErrorCode::invalid_argument,
                                     "QLinearConvAdd: scales must be float32, got ", dtype_name(st));
            if (z.dtype() != out || !(z.shape() == g.out_shape))
                return Status::error(ErrorCode::invalid_argument, "QLinearConvAdd: input 'Z' (",
                                     dtype_name(z.dtype()), " ", z.shape().to_string(),
                                     ") must have the output's type and shape (",
                                     dtype_name(out), " ", g.out_shape.to_string(), ")");
            for (const auto& [i, name] : {std::pair{10, "z_scale"}, std::pair{12, "c_scale"}}) {
                DSINFER_RETURN_IF_ERROR(check_scale_input(ctx, i, DType::f32, name));
                DSINFER_RETURN_IF_ERROR(check_one(ctx.input(i), name));
            }
            for (const auto& [i, name] :
                 {std::pair{11, "z_zero_point"}, std::pair{13, "c_zero_point"}}) {
                DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, i, out, name));
                if (ctx.has_input(i)) DSINFER_RETURN_IF_ERROR(check_one(ctx.input(i), name));
            }
        }
        ctx.set_output(0, out, g.out_shape);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& w = ctx.input(3);
        QLinearBinary addp;
        if (add_)  // A: y as QLinearConv writes it (y_scale, y_zero_point)
            addp = qlinear_add_params(qlinear_scale(ctx, 6), qlinear_scale(ctx, 10),
                                      qlinear_scale(ctx, 12), qlinear_zero(ctx, 7),
                                      qlinear_zero(ctx, 11), qlinear_zero(ctx, 13));
        auto gs = make_conv_geom(a_, x.shape, w.shape);
        if (!gs.is_ok()) return gs.status();
        const QConvGeom& g = gs.value();
        const DType st = ctx.input(1).dtype;
        const double xs = read_element_as_double(ctx.input(1).raw, st, 0);
        const double ys = read_element_as_double(ctx.input(6).raw, st, 0);
        const void* ws = ctx.input(4).raw;
        const bool ws_pc = ctx.input(4).num_elements() > 1;
        const std::int64_t xz =
            ctx.has_input(2) ? read_element_as_int(ctx.input(2).raw, x.dtype, 0) : 0;
        const void* wz = ctx.has_input(5) ? ctx.input(5).raw : nullptr;
        const bool wz_pc = wz != nullptr && ctx.input(5).num_elements() > 1;
        const std::int32_t* bias = ctx.has_input(8) ? ctx.input(8).data_unchecked<std::int32_t>() : nullptr;
        const TensorView& y = ctx.output(0);
        const double yz =
            ctx.has_input(7)
                ? static_cast<double>(read_element_as_int(ctx.input(7).raw, y.dtype, 0))
                : 0.0;
        return dispatch_types(x.dtype, Int8Types{}, [&]<class X>() -> Status {
            return dispatch_types(w.dtype, Int8Types{}, [&]<class W>() -> Status {
                return dispatch_types(y.dtype, Int8Types{}, [&]<class Q>() -> Status {
                    Q* yp = y.data_unchecked<Q>();
                    const Q* zp = add_ ? ctx.input(9).data_unchecked<Q>() : nullptr;
                    conv_int<X, W>(
                        g, x.data_unchecked<X>(), w.data_unchecked<W>(), xz, static_cast<const W*>(wz), wz_pc,
                        [&](std::int64_t o, std::int64_t m, std::int64_t acc) {
                            if (bias != nullptr) acc += bias[m];
                            const double sw = read_element_as_double(ws, st, ws_pc ? m : 0);
                            if (st == DType::f32) {  // the fast kernels' order (ops/quantize.hpp)
                                // The s32 sum with the bias (wrapping, as the INT8 GEMM's).
                                const Q q = requantize_product<Q>(
                                    static_cast<std::int32_t>(acc),
                                    requantize_multiplier(static_cast<float>(xs),
                                                          static_cast<float>(sw),
                                                          static_cast<float>(ys)),
                                    static_cast<std::int32_t>(yz));
                                if (zp == nullptr) {
                                    yp[o] = q;
                                    return;
                                }
                                // QLinearAdd(q, Z[o]), as the reference QLinearAdd.
                                const float v = qlinear_add_value(q, zp[o], addp);
                                yp[o] = qlinear_requantize<Q>(v, addp.zc);
                                return;
                            }
                            const double mult = requant_multiplier(st, xs, sw, ys);
                            yp[o] = saturate_round<Q>(static_cast<double>(acc) * mult, yz);
                        });
                    return Status::ok();
                });
            });
        });
    }

private:
    ConvAttrs a_;
    bool add_;
};
#pragma GCC pop_options

StatusOr<std::unique_ptr<Kernel>> make_qlinear_conv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 7));
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false, /*w_input=*/3));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 1, "x_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 4, "w_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 6, "y_scale"));
    return make_kernel<QLinearConvKernel>(std::move(a));
}

StatusOr<std::unique_ptr<Kernel>> make_qlinear_conv_add(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 7));
    DSINFER_CHECK(ctx.num_inputs() >= 13 && ctx.num_inputs() <= 14 && ctx.has_input(9) &&
                      ctx.has_input(10) && ctx.has_input(12),
                  ErrorCode::invalid_model,
                  "QLinearConvAdd takes QLinearConv's inputs, then Z, z_scale, z_zero_point?, "
                  "c_scale, c_zero_point? (13 or 14 inputs), got ", ctx.num_inputs());
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false, /*w_input=*/3));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 1, "x_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 4, "w_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 6, "y_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 10, "z_scale"));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 12, "c_scale"));
    return make_kernel<QLinearConvKernel>(std::move(a), true);
}

// ---- dequantizing integer matmul: DynamicQuantizeMatMul, MatMulIntegerToFloat (com.dsinfer) -

// The fused form of ONNX Runtime's dynamic quantization (docs/OPTIMIZER.md, "Fused operators"):
// each output element is dequantize_product (ops/quantize.hpp) of the exact s32 MatMulInteger
// result, then the fused activation, computed as the unfused graph computes it: bitwise equal
// to DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(Mul(a_scale, b_scale)) -> Add. No
// FMA may merge the product and the bias.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

/// What both ops check on B and its parameters: b_scale float32 per tensor or per column,
/// b_zero_point of B's type and the same layout rules, bias float32 [N]. Returns B's maps.
struct DequantMaps {
    ParamMap bs, bz;
};

StatusOr<DequantMaps> dequant_maps(const Shape& b, const MatMulGeom& g, const Shape& bs,
                                   const Shape* bz) {
    DequantMaps m;
    DSINFER_ASSIGN_OR_RETURN(m.bs, make_param_map(bs, b, false, g.n, "b_scale"));
    if (bz != nullptr) {
        DSINFER_ASSIGN_OR_RETURN(m.bz, make_param_map(*bz, b, false, g.n, "b_zero_point"));
    }
    return m;
}

Status check_dequant_inputs(const PrepareContext& ctx, const MatMulGeom& g, int bs, int bz,
                            int bias) {
    const Tensor& b = ctx.input(1);
    DSINFER_RETURN_IF_ERROR(check_int8(b, "B"));
    if (ctx.input(bs).dtype() != DType::f32)
        return Status::error(ErrorCode::invalid_argument, "input 'b_scale' must be float32, got ",
                             dtype_name(ctx.input(bs).dtype()));
    DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, bz, b.dtype(), "b_zero_point"));
    const Shape zs = ctx.has_input(bz) ? ctx.input(bz).shape() : Shape{};
    DSINFER_ASSIGN_OR_RETURN(DequantMaps m, dequant_maps(b.shape(), g, ctx.input(bs).shape(),
                                                         ctx.has_input(bz) ? &zs : nullptr));
    (void)m;
    if (ctx.has_input(bias)) {
        const Tensor& t = ctx.input(bias);
        if (t.dtype() != DType::f32 || t.shape().rank() != 1 || t.shape()[0] != g.n)
            return Status::error(ErrorCode::invalid_argument, "input 'bias' must be float32 [",
                                 g.n, "], got ", dtype_name(t.dtype()), " ",
                                 t.shape().to_string());
    }
    return Status::ok();
}

/// C = (A - za) x (B - zb) with A u8/s8 (`a`, zero point `az`), then each element dequantized
/// with a_scale * b_scale[j], bias[j] and `act` into y (float32).
template <class A>
Status run_dequant_matmul(RunContext& ctx, const MatMulGeom& g, const A* a, const void* az,
                          float a_scale, int bs, int bz, int bias, const ActivationSpec& act) {
    const TensorView& b = ctx.input(1);
    const Shape zs = ctx.has_input(bz) ? ctx.input(bz).shape : Shape{};
    auto ms = dequant_maps(b.shape, g, ctx.input(bs).shape, ctx.has_input(bz) ? &zs : nullptr);
    if (!ms.is_ok()) return ms.status();
    const DequantMaps& m = ms.value();
    const float* sp = ctx.input(bs).data_unchecked<float>();
    const void* zp = ctx.has_input(bz) ? ctx.input(bz).raw : nullptr;
    const float* bp = ctx.has_input(bias) ? ctx.input(bias).data_unchecked<float>() : nullptr;
    float* y = ctx.output(0).data_unchecked<float>();
    return dispatch_types(b.dtype, Int8Types{}, [&]<class B>() -> Status {
        matmul_int<A, B>(g, a, b.data_unchecked<B>(), az, ParamMap{}, zp, m.bz,
                         [&](std::int64_t o, std::int64_t, std::int64_t bb, std::int64_t,
                             std::int64_t j, std::int64_t acc) {
                             const float v = dequantize_product(
                                 static_cast<std::int32_t>(acc), a_scale, sp[m.bs.index(bb, j)],
                                 bp != nullptr ? bp + j : nullptr);
                             y[o] = apply_activation(v, act);
                         });
        return Status::ok();
    });
}

/// DynamicQuantizeMatMul(A f32, B, b_scale, b_zero_point?, bias?): A quantized as
/// DynamicQuantizeLinear does (into the workspace), then the dequantizing matmul.
class DynamicQuantizeMatMulKernel final : public Kernel {
public:
    explicit DynamicQuantizeMatMulKernel(ActivationSpec act) : act_(act) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        if (a.dtype() != DType::f32)
            return Status::error(ErrorCode::unsupported, "input 'A' must be float32, got ",
                                 dtype_name(a.dtype()));
        DSINFER_RETURN_IF_ERROR(check_int8(ctx.input(1), "B"));
        DSINFER_ASSIGN_OR_RETURN(MatMulGeom g, make_matmul_geom(a.shape(), ctx.input(1).shape()));
        DSINFER_RETURN_IF_ERROR(check_dequant_inputs(ctx, g, 2, 3, 4));
        ctx.set_output(0, DType::f32, g.out);
        ctx.set_workspace(static_cast<std::size_t>(a.num_elements()));  // quantized A
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        auto gs = make_matmul_geom(a.shape, ctx.input(1).shape);
        if (!gs.is_ok()) return gs.status();
        auto* aq = static_cast<std::uint8_t*>(ctx.workspace());
        const DynamicQuantParams p = dynamic_quantize(a.data_unchecked<float>(), a.num_elements(), aq);
        return run_dequant_matmul<std::uint8_t>(ctx, gs.value(), aq, &p.zero_point, p.scale, 2,
                                                3, 4, act_);
    }

private:
    ActivationSpec act_;
};

/// The factory of either op: `min`..`max` inputs, the constant scales (input, name) positive and
/// finite, the fused activation.
template <class K>
StatusOr<std::unique_ptr<Kernel>> make_dequant_matmul(
    const KernelCreateContext& ctx, int min, int max,
    std::initializer_list<std::pair<int, const char*>> scales) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, min));
    DSINFER_CHECK(ctx.num_inputs() <= max, ErrorCode::invalid_model, ctx.node().op_type,
                  " takes ", min, " to ", max, " inputs, got ", ctx.num_inputs());
    for (const auto& [i, name] : scales) DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, i, name));
    DSINFER_ASSIGN_OR_RETURN(ActivationSpec act, activation_from_attributes(ctx));
    return make_kernel<K>(act);
}

/// MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?): A already
/// quantized (u8 or s8; a_scale and a_zero_point per tensor).
class MatMulIntegerToFloatKernel final : public Kernel {
public:
    explicit MatMulIntegerToFloatKernel(ActivationSpec act) : act_(act) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_int8(a, "A"));
        DSINFER_RETURN_IF_ERROR(check_int8(ctx.input(1), "B"));
        DSINFER_ASSIGN_OR_RETURN(MatMulGeom g, make_matmul_geom(a.shape(), ctx.input(1).shape()));
        if (ctx.input(2).dtype() != DType::f32)
            return Status::error(ErrorCode::invalid_argument, "input 'a_scale' must be float32, got ",
                                 dtype_name(ctx.input(2).dtype()));
        DSINFER_RETURN_IF_ERROR(check_one(ctx.input(2), "a_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 4, a.dtype(), "a_zero_point"));
        if (ctx.has_input(4)) DSINFER_RETURN_IF_ERROR(check_one(ctx.input(4), "a_zero_point"));
        // b_scale is input 3 here, and B's zero point 5; check_dequant_inputs reads them there.
        DSINFER_RETURN_IF_ERROR(check_dequant_inputs(ctx, g, 3, 5, 6));
        ctx.set_output(0, DType::f32, g.out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        auto gs = make_matmul_geom(a.shape, ctx.input(1).shape);
        if (!gs.is_ok()) return gs.status();
        const float a_scale = *ctx.input(2).data_unchecked<float>();
        const void* az = ctx.has_input(4) ? ctx.input(4).raw : nullptr;
        return dispatch_types(a.dtype, Int8Types{}, [&]<class A>() -> Status {
            return run_dequant_matmul<A>(ctx, gs.value(), a.data_unchecked<A>(), az, a_scale, 3, 5, 6, act_);
        });
    }

private:
    ActivationSpec act_;
};

/// A per-output-channel parameter of DynamicQuantizeConv: 1 (when `one` is allowed) or M
/// elements, in any shape (the pass keeps the graph's [M, 1, 1] / [1, M, 1, 1] constants).
Status check_channel_count(const Tensor& t, std::int64_t m, bool one, const char* name) {
    if (t.dtype() != DType::f32)
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must be float32, got ", dtype_name(t.dtype()));
    if (t.num_elements() == m || (one && t.num_elements() == 1)) return Status::ok();
    return Status::error(ErrorCode::invalid_argument, "input '", name, "' of shape ",
                         t.shape().to_string(), " must have ", one ? "1 or " : "", m,
                         " (output channels) elements");
}

/// DynamicQuantizeConv(X f32, W, w_scale, w_zero_point?, bias?) (com.dsinfer): X quantized as
/// DynamicQuantizeLinear does (into the workspace), ConvInteger's exact sum, then each element
/// dequantize_product(sum, x_scale, w_scale[m], bias[m]) and the fused activation: bitwise the
/// unfused DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(Mul(x_scale, w_scale)) -> Add.
class DynamicQuantizeConvKernel final : public Kernel {
public:
    DynamicQuantizeConvKernel(ConvAttrs a, ActivationSpec act) : a_(std::move(a)), act_(act) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.dtype() != DType::f32)
            return Status::error(ErrorCode::unsupported, "input 'X' must be float32, got ",
                                 dtype_name(x.dtype()));
        const Tensor& w = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(check_int8(w, "W"));
        DSINFER_ASSIGN_OR_RETURN(QConvGeom g, make_conv_geom(a_, x.shape(), w.shape()));
        DSINFER_RETURN_IF_ERROR(check_channel_count(ctx.input(2), g.m, true, "w_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero_point(ctx, 3, w.dtype(), "w_zero_point"));
        bool pc = false;
        if (ctx.has_input(3))
            DSINFER_RETURN_IF_ERROR(check_per_channel(ctx.input(3), g.m, "w_zero_point", pc));
        if (ctx.has_input(4))
            DSINFER_RETURN_IF_ERROR(check_channel_count(ctx.input(4), g.m, false, "bias"));
        ctx.set_output(0, DType::f32, g.out_shape);
        ctx.set_workspace(static_cast<std::size_t>(x.num_elements()));  // quantized X
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& w = ctx.input(1);
        auto gs = make_conv_geom(a_, x.shape, w.shape);
        if (!gs.is_ok()) return gs.status();
        auto* xq = static_cast<std::uint8_t*>(ctx.workspace());
        const DynamicQuantParams q = dynamic_quantize(x.data_unchecked<float>(), x.num_elements(), xq);
        const TensorView& ws = ctx.input(2);
        const float* sp = ws.data_unchecked<float>();
        const bool s_pc = ws.num_elements() > 1;
        const void* wz = ctx.has_input(3) ? ctx.input(3).raw : nullptr;
        const bool z_pc = wz != nullptr && ctx.input(3).num_elements() > 1;
        const float* bias = ctx.has_input(4) ? ctx.input(4).data_unchecked<float>() : nullptr;
        float* y = ctx.output(0).data_unchecked<float>();
        return dispatch_types(w.dtype, Int8Types{}, [&]<class W>() -> Status {
            conv_int<std::uint8_t, W>(
                gs.value(), xq, w.data_unchecked<W>(), q.zero_point, static_cast<const W*>(wz), z_pc,
                [&](std::int64_t o, std::int64_t m, std::int64_t acc) {
                    const float v =
                        dequantize_product(static_cast<std::int32_t>(acc), q.scale,
                                           sp[s_pc ? m : 0], bias != nullptr ? bias + m : nullptr);
                    y[o] = apply_activation(v, act_);
                });
            return Status::ok();
        });
    }

private:
    ConvAttrs a_;
    ActivationSpec act_;
};

StatusOr<std::unique_ptr<Kernel>> make_dynamic_quantize_conv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    DSINFER_CHECK(ctx.num_inputs() <= 5, ErrorCode::invalid_model,
                  "DynamicQuantizeConv takes 3 to 5 inputs, got ", ctx.num_inputs());
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false));
    DSINFER_RETURN_IF_ERROR(check_scale_constant(ctx, 2, "w_scale"));
    DSINFER_ASSIGN_OR_RETURN(ActivationSpec act, activation_from_attributes(ctx));
    return make_kernel<DynamicQuantizeConvKernel>(std::move(a), act);
}

#pragma GCC pop_options

}  // namespace

void register_quant_ms_matmul_kernels(KernelRegistry& r);  // quant_ms_matmul.cpp: QGemm

void register_quant_kernels(KernelRegistry& r) {
    r.add({"QuantizeLinear", "", 10, kMaxOpset, DeviceKind::cpu}, &make_quantize);
    r.add({"DequantizeLinear", "", 10, kMaxOpset, DeviceKind::cpu}, &make_dequantize);
    r.add({"DynamicQuantizeLinear", "", 11, kMaxOpset, DeviceKind::cpu}, &make_dynamic_quantize);
    r.add({"MatMulInteger", "", 10, kMaxOpset, DeviceKind::cpu}, &make_matmul_integer);
    r.add({"QLinearMatMul", "", 10, kMaxOpset, DeviceKind::cpu}, &make_qlinear_matmul);
    r.add({"ConvInteger", "", 10, kMaxOpset, DeviceKind::cpu}, &make_conv_integer);
    r.add({"QLinearConv", "", 10, kMaxOpset, DeviceKind::cpu}, &make_qlinear_conv);
    r.add({"DynamicQuantizeConv", kDsinferDomain, 1, 1, DeviceKind::cpu},
          &make_dynamic_quantize_conv);
    r.add({"QLinearConvAdd", kDsinferDomain, 1, 1, DeviceKind::cpu}, &make_qlinear_conv_add);
    // com.microsoft (ONNX Runtime's contrib ops of the same inputs and semantics): one kernel.
    for (const char* domain : {kDsinferDomain, "com.microsoft"}) {
        r.add({"DynamicQuantizeMatMul", domain, 1, 1, DeviceKind::cpu},
              [](const KernelCreateContext& c) {
                  return make_dequant_matmul<DynamicQuantizeMatMulKernel>(c, 3, 5,
                                                                          {{2, "b_scale"}});
              });
        r.add({"MatMulIntegerToFloat", domain, 1, 1, DeviceKind::cpu},
              [](const KernelCreateContext& c) {
                  return make_dequant_matmul<MatMulIntegerToFloatKernel>(
                      c, 4, 7, {{2, "a_scale"}, {3, "b_scale"}});
              });
    }
    register_quant_ms_matmul_kernels(r);
}

}  // namespace dsinfer::detail
