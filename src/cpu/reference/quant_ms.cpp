// Reference kernels of ONNX Runtime's com.microsoft elementwise quantized ops (opset 1):
//   QLinearAdd, QLinearMul (A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale,
//       C_zero_point?): numpy broadcasting of A and B; T = u8 or s8 for A, B and C;
//   QLinearGlobalAveragePool (X, x_scale, x_zero_point?, y_scale, y_zero_point?), attribute
//       channels_last (0: [N, C, D...] -> [N, C, 1...]; 1: [N, D..., C] -> [N, 1..., C]);
//   QLinearSigmoid, QLinearLeakyRelu (alpha, default 0.01) (X, X_scale, X_zero_point?, Y_scale,
//       Y_zero_point?).
// The arithmetic (f32 order, rounding half to even, saturation) is ops/qlinear.hpp's, shared
// with the fast kernels (src/cpu/fast/fast_qlinear.cpp). Scales must be float32 scalars (one
// element) and zero points scalars of the data's type: anything else is invalid_argument
// naming the input; constant scales that are zero, negative, NaN or infinite are invalid_model
// at load; an operand or output type other than u8/s8 is unsupported.
//
// Thread safety: kernels are immutable after creation.
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "cpu/reference/groups.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/qlinear.hpp"

#pragma GCC optimize("fp-contract=off")

namespace dsinfer::detail {

namespace {

using std::int64_t;
using Int8Types = TypeList<std::int8_t, std::uint8_t>;

constexpr const char* kMsDomain = "com.microsoft";

Status check_data(const Tensor& t, const char* name) {
    if (t.dtype() != DType::i8 && t.dtype() != DType::u8)
        return Status::error(ErrorCode::unsupported, "input '", name,
                             "' must be int8 or uint8, got ", dtype_name(t.dtype()));
    return Status::ok();
}

/// A scale input: float32 with one element.
Status check_scale(const PrepareContext& ctx, int i, const char* name) {
    const Tensor& s = ctx.input(i);
    if (s.dtype() != DType::f32)
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must be float32, got ", dtype_name(s.dtype()));
    if (s.num_elements() != 1)
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must be a scalar (one element), got shape ", s.shape().to_string());
    return Status::ok();
}

/// An optional zero point input: of type `want` with one element.
Status check_zero(const PrepareContext& ctx, int i, DType want, const char* name) {
    if (!ctx.has_input(i)) return Status::ok();
    const Tensor& z = ctx.input(i);
    if (z.dtype() != want)
        return Status::error(ErrorCode::invalid_argument, "input '", name, "' has type ",
                             dtype_name(z.dtype()), ", expected ", dtype_name(want),
                             " (the data's type)");
    if (z.num_elements() != 1)
        return Status::error(ErrorCode::invalid_argument, "input '", name,
                             "' must be a scalar (one element), got shape ", z.shape().to_string());
    return Status::ok();
}

/// Factories: the required inputs are present, constant scales are positive and finite.
Status check_node(const KernelCreateContext& ctx, std::initializer_list<int> required,
                  std::initializer_list<std::pair<int, const char*>> scales) {
    for (int i : required)
        DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_model, ctx.node().op_type,
                      ": input ", i, " is required (missing or omitted)");
    for (const auto& [i, name] : scales) {
        const Tensor* s = ctx.constant_input(i);
        if (s == nullptr || s->dtype() != DType::f32) continue;  // prepare checks the type
        for (int64_t e = 0; e < s->num_elements(); ++e) {
            const float v = s->data_unchecked<float>()[e];
            if (!(v > 0.f) || !std::isfinite(v))
                return Status::error(ErrorCode::invalid_model, "input '", name, "' element ", e,
                                     " is ", v, "; scales must be positive and finite");
        }
    }
    return Status::ok();
}

// ---- QLinearAdd, QLinearMul ------------------------------------------------------------------

template <bool Mul>
class QLinearBinaryKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(3);
        DSINFER_RETURN_IF_ERROR(check_data(a, "A"));
        DSINFER_RETURN_IF_ERROR(check_data(b, "B"));
        if (a.dtype() != b.dtype())
            return Status::error(ErrorCode::invalid_argument, "inputs 'A' (",
                                 dtype_name(a.dtype()), ") and 'B' (", dtype_name(b.dtype()),
                                 ") must have the same type");
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 1, "A_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 4, "B_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 6, "C_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 2, a.dtype(), "A_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 5, a.dtype(), "B_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 7, a.dtype(), "C_zero_point"));
        DSINFER_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(a.shape(), b.shape()));
        ctx.set_output(0, a.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(3);
        const TensorView& c = ctx.output(0);
        const QLinearBinary p = qlinear_binary_params(ctx, Mul);
        const std::array<Strides, 2> st{broadcast_strides(a.shape, c.shape),
                                        broadcast_strides(b.shape, c.shape)};
        return dispatch_types(a.dtype, Int8Types{}, [&]<class Q>() -> Status {
            const Q* ap = a.data_unchecked<Q>();
            const Q* bp = b.data_unchecked<Q>();
            Q* cp = c.data_unchecked<Q>();
            int64_t e = 0;
            for_each_offset<2>(c.shape, st, [&](const std::array<int64_t, 2>& off) {
                const std::int32_t x = ap[off[0]], y = bp[off[1]];
                const float v = Mul ? qlinear_mul_value(x, y, p) : qlinear_add_value(x, y, p);
                cp[e++] = qlinear_requantize<Q>(v, p.zc);
            });
            return Status::ok();
        });
    }
};

template <bool Mul>
StatusOr<std::unique_ptr<Kernel>> make_qlinear_binary(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(
        check_node(ctx, {0, 1, 3, 4, 6}, {{1, "A_scale"}, {4, "B_scale"}, {6, "C_scale"}}));
    return make_kernel<QLinearBinaryKernel<Mul>>();
}

// ---- QLinearGlobalAveragePool -----------------------------------------------------------------

/// X as [N, C, count] (channels first) or [N, count, C] (channels last).
struct PoolGeom {
    int64_t n = 0, c = 0, count = 0;
};

StatusOr<PoolGeom> pool_geom(const Shape& x, bool channels_last) {
    if (x.rank() < 2)
        return Status::error(ErrorCode::invalid_argument, "input 'X' of shape ", x.to_string(),
                             " has rank < 2");
    PoolGeom g;
    g.n = x[0];
    g.c = channels_last ? x[x.rank() - 1] : x[1];
    g.count = channels_last ? x.size_between(1, x.rank() - 1) : x.size_between(2, x.rank());
    return g;
}

class QLinearGlobalAveragePoolKernel final : public Kernel {
public:
    explicit QLinearGlobalAveragePoolKernel(bool channels_last) : last_(channels_last) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_data(x, "X"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 1, "x_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 3, "y_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 2, x.dtype(), "x_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 4, x.dtype(), "y_zero_point"));
        DSINFER_ASSIGN_OR_RETURN(PoolGeom g, pool_geom(x.shape(), last_));
        if (g.count == 0 && g.n * g.c > 0)
            return Status::error(ErrorCode::invalid_argument, "input 'X' of shape ",
                                 x.shape().to_string(),
                                 " has no spatial elements to average");
        Shape out = x.shape();
        const int r = out.rank();
        for (int d = last_ ? 1 : 2; d < (last_ ? r - 1 : r); ++d) out[d] = 1;
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        auto gs = pool_geom(x.shape, last_);
        if (!gs.is_ok()) return gs.status();
        const PoolGeom g = gs.value();
        const float m =
            qlinear_pool_multiplier(qlinear_scale(ctx, 1), qlinear_scale(ctx, 3), g.count);
        const std::int32_t zx = qlinear_zero(ctx, 2), zy = qlinear_zero(ctx, 4);
        return dispatch_types(x.dtype, Int8Types{}, [&]<class Q>() -> Status {
            const Q* xp = x.data_unchecked<Q>();
            Q* yp = ctx.output(0).data_unchecked<Q>();
            for (int64_t n = 0; n < g.n; ++n)
                for (int64_t c = 0; c < g.c; ++c) {
                    int64_t sum = 0;
                    for (int64_t i = 0; i < g.count; ++i) {
                        const int64_t at = last_ ? (n * g.count + i) * g.c + c
                                                 : (n * g.c + c) * g.count + i;
                        sum += static_cast<std::int32_t>(xp[at]) - zx;
                    }
                    yp[n * g.c + c] = qlinear_pool_value<Q>(sum, m, zy);
                }
            return Status::ok();
        });
    }

private:
    bool last_;
};

StatusOr<std::unique_ptr<Kernel>> make_qlinear_global_average_pool(
    const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_node(ctx, {0, 1, 3}, {{1, "x_scale"}, {3, "y_scale"}}));
    DSINFER_ASSIGN_OR_RETURN(int64_t last, ctx.node().attr_or<int64_t>("channels_last", 0));
    return make_kernel<QLinearGlobalAveragePoolKernel>(last != 0);
}

// ---- QLinearSigmoid, QLinearLeakyRelu --------------------------------------------------------

class QLinearLutKernel final : public Kernel {
public:
    QLinearLutKernel(QLinearLut kind, float alpha) : kind_(kind), alpha_(alpha) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_data(x, "X"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 1, "X_scale"));
        DSINFER_RETURN_IF_ERROR(check_scale(ctx, 3, "Y_scale"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 2, x.dtype(), "X_zero_point"));
        DSINFER_RETURN_IF_ERROR(check_zero(ctx, 4, x.dtype(), "Y_zero_point"));
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        QLinearLutParams p;
        p.kind = kind_;
        p.alpha = alpha_;
        p.xs = qlinear_scale(ctx, 1);
        p.ys = qlinear_scale(ctx, 3);
        p.zx = qlinear_zero(ctx, 2);
        p.zy = qlinear_zero(ctx, 4);
        return dispatch_types(x.dtype, Int8Types{}, [&]<class Q>() -> Status {
            const Q* xp = x.data_unchecked<Q>();
            Q* yp = ctx.output(0).data_unchecked<Q>();
            const int64_t n = x.num_elements();
            for (int64_t i = 0; i < n; ++i) yp[i] = qlinear_lut_value<Q>(xp[i], p);
            return Status::ok();
        });
    }

private:
    QLinearLut kind_;
    float alpha_;
};

template <QLinearLut Kind>
StatusOr<std::unique_ptr<Kernel>> make_qlinear_lut(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_node(ctx, {0, 1, 3}, {{1, "X_scale"}, {3, "Y_scale"}}));
    float alpha = 0.01f;
    if constexpr (Kind == QLinearLut::leaky_relu) {
        DSINFER_ASSIGN_OR_RETURN(alpha, ctx.node().attr_or<float>("alpha", 0.01f));
        if (!std::isfinite(alpha))
            return Status::error(ErrorCode::invalid_model, "attribute 'alpha' is ", alpha,
                                 "; it must be finite");
    }
    return make_kernel<QLinearLutKernel>(Kind, alpha);
}

}  // namespace

void register_quant_ms_kernels(KernelRegistry& r) {
    r.add({"QLinearAdd", kMsDomain, 1, 1, DeviceKind::cpu}, &make_qlinear_binary<false>);
    r.add({"QLinearMul", kMsDomain, 1, 1, DeviceKind::cpu}, &make_qlinear_binary<true>);
    r.add({"QLinearGlobalAveragePool", kMsDomain, 1, 1, DeviceKind::cpu},
          &make_qlinear_global_average_pool);
    r.add({"QLinearSigmoid", kMsDomain, 1, 1, DeviceKind::cpu},
          &make_qlinear_lut<QLinearLut::sigmoid>);
    r.add({"QLinearLeakyRelu", kMsDomain, 1, 1, DeviceKind::cpu},
          &make_qlinear_lut<QLinearLut::leaky_relu>);
}

}  // namespace dsinfer::detail
