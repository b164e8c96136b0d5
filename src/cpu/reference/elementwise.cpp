// Reference kernels for the unary elementwise ops (math functions and activations), and the
// registration of the whole elementwise group (binary ops: elementwise_binary.cpp, Cast:
// elementwise_cast.cpp).
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "dsinfer/ops.hpp"
#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_elementwise_binary_kernels(KernelRegistry& r);
void register_elementwise_cast_kernels(KernelRegistry& r);

namespace {

using SignedTypes = TypeList<float, double, float16, bfloat16, std::int8_t, std::int16_t,
                             std::int32_t, std::int64_t>;
using BoolTypes = TypeList<bool>;

/// y = op(x) elementwise. Op is a functor with `template <class C> R operator()(C) const` on
/// compute values (float for 16-bit floats); kBoolOut ops produce bool, the rest keep the
/// input type.
template <class Op, class Types>
class UnaryKernel final : public Kernel {
public:
    explicit UnaryKernel(Op op) : op_(op) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(x.dtype(), Types{}, []<class T>() { return Status::ok(); }));
        ctx.set_output(0, Op::kBoolOut ? DType::boolean : x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        return dispatch_types(x.dtype, Types{}, [&]<class T>() {
            const T* px = x.data_unchecked<T>();
            const std::int64_t n = x.num_elements();
            if constexpr (Op::kBoolOut) {
                bool* py = y.data_unchecked<bool>();
                for (std::int64_t i = 0; i < n; ++i) py[i] = op_(load(px[i]));
            } else {
                T* py = y.data_unchecked<T>();
                for (std::int64_t i = 0; i < n; ++i) py[i] = store<T>(op_(load(px[i])));
            }
            return Status::ok();
        });
    }

private:
    Op op_;
};

template <class T>
T neg_wrap(T x) noexcept {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
}

// ---- functors --------------------------------------------------------------------------------

struct FloatOp {
    static constexpr bool kBoolOut = false;
};

#define DSINFER_SIMPLE_UNARY(Name, expr)            \
    struct Name : FloatOp {                         \
        template <class C>                          \
        C operator()(C x) const noexcept {          \
            return static_cast<C>(expr);            \
        }                                           \
    };

DSINFER_SIMPLE_UNARY(ExpOp, std::exp(x))
DSINFER_SIMPLE_UNARY(LogOp, std::log(x))
DSINFER_SIMPLE_UNARY(SqrtOp, std::sqrt(x))
DSINFER_SIMPLE_UNARY(ReciprocalOp, C(1) / x)
DSINFER_SIMPLE_UNARY(FloorOp, std::floor(x))
DSINFER_SIMPLE_UNARY(CeilOp, std::ceil(x))
DSINFER_SIMPLE_UNARY(RoundOp, std::nearbyint(x))  // default rounding mode: half to even
DSINFER_SIMPLE_UNARY(SinOp, std::sin(x))
DSINFER_SIMPLE_UNARY(CosOp, std::cos(x))
DSINFER_SIMPLE_UNARY(TanOp, std::tan(x))
DSINFER_SIMPLE_UNARY(AsinOp, std::asin(x))
DSINFER_SIMPLE_UNARY(AcosOp, std::acos(x))
DSINFER_SIMPLE_UNARY(AtanOp, std::atan(x))
DSINFER_SIMPLE_UNARY(SinhOp, std::sinh(x))
DSINFER_SIMPLE_UNARY(CoshOp, std::cosh(x))
DSINFER_SIMPLE_UNARY(AsinhOp, std::asinh(x))
DSINFER_SIMPLE_UNARY(AcoshOp, std::acosh(x))
DSINFER_SIMPLE_UNARY(AtanhOp, std::atanh(x))
DSINFER_SIMPLE_UNARY(ErfOp, std::erf(x))
DSINFER_SIMPLE_UNARY(TanhOp, std::tanh(x))
DSINFER_SIMPLE_UNARY(SoftsignOp, x / (C(1) + std::abs(x)))
DSINFER_SIMPLE_UNARY(HardSwishOp, x * std::fmax(C(0), std::fmin(C(1), x / C(6) + C(0.5))))
#undef DSINFER_SIMPLE_UNARY

/// log(1 + exp(x)) without overflow.
template <class C>
C softplus(C x) noexcept {
    return std::fmax(x, C(0)) + std::log1p(std::exp(-std::abs(x)));
}
/// 1 / (1 + exp(-x)) without overflow.
template <class C>
C sigmoid(C x) noexcept {
    if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
    const C e = std::exp(x);
    return e / (C(1) + e);
}

struct SoftplusOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept { return softplus(x); }
};
struct SigmoidOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept { return sigmoid(x); }
};
struct MishOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept { return x * std::tanh(softplus(x)); }
};

struct AbsOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept {
        if constexpr (std::is_unsigned_v<C>) return x;
        else if constexpr (std::is_integral_v<C>) return x < 0 ? neg_wrap(x) : x;
        else return std::abs(x);
    }
};
struct NegOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept {
        if constexpr (std::is_integral_v<C>) return neg_wrap(x);
        else return -x;
    }
};
struct SignOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept {
        if (x > C(0)) return C(1);
        if constexpr (std::is_signed_v<C>) {
            if (x < C(0)) return C(-1);
        }
        return x;  // 0 stays 0, NaN stays NaN
    }
};
struct ReluOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept { return x > C(0) ? x : (x == x ? C(0) : x); }
};
struct NotOp : FloatOp {
    bool operator()(bool x) const noexcept { return !x; }
};
struct BitwiseNotOp : FloatOp {
    template <class C>
    C operator()(C x) const noexcept { return static_cast<C>(~x); }
};

struct IsNaNOp {
    static constexpr bool kBoolOut = true;
    template <class C>
    bool operator()(C x) const noexcept { return std::isnan(x); }
};
struct IsInfOp {
    static constexpr bool kBoolOut = true;
    bool neg = true;
    bool pos = true;
    template <class C>
    bool operator()(C x) const noexcept {
        return std::isinf(x) && ((x > 0) ? pos : neg);
    }
};

struct LeakyReluOp : FloatOp {
    float alpha = 0.01f;
    template <class C>
    C operator()(C x) const noexcept { return x < C(0) ? static_cast<C>(alpha) * x : x; }
};
struct EluOp : FloatOp {
    float alpha = 1.f;
    template <class C>
    C operator()(C x) const noexcept {
        return x < C(0) ? static_cast<C>(alpha) * std::expm1(x) : x;
    }
};
struct SeluOp : FloatOp {
    float alpha = 1.67326319217681884765625f;
    float gamma = 1.05070102214813232421875f;
    template <class C>
    C operator()(C x) const noexcept {
        const C g = static_cast<C>(gamma);
        return x <= C(0) ? g * static_cast<C>(alpha) * std::expm1(x) : g * x;
    }
};
struct CeluOp : FloatOp {
    float alpha = 1.f;
    template <class C>
    C operator()(C x) const noexcept {
        const C a = static_cast<C>(alpha);
        return x > C(0) ? x : a * std::expm1(x / a);
    }
};
struct HardSigmoidOp : FloatOp {
    float alpha = 0.2f;
    float beta = 0.5f;
    template <class C>
    C operator()(C x) const noexcept {
        const C v = static_cast<C>(alpha) * x + static_cast<C>(beta);
        return v != v ? v : std::fmax(C(0), std::fmin(C(1), v));  // NaN stays NaN (np.clip)
    }
};
struct ThresholdedReluOp : FloatOp {
    float alpha = 1.f;
    template <class C>
    C operator()(C x) const noexcept { return x > static_cast<C>(alpha) ? x : C(0); }
};
struct ShrinkOp : FloatOp {
    float lambd = 0.5f;
    float bias = 0.f;
    template <class C>
    C operator()(C x) const noexcept {
        const double v = static_cast<double>(x);
        double r = 0;
        if (v < -lambd) r = v + bias;
        else if (v > lambd) r = v - bias;
        if constexpr (std::is_integral_v<C>) {  // keep the float -> int conversion defined
            constexpr double lo = static_cast<double>(std::numeric_limits<C>::lowest());
            constexpr double hi = static_cast<double>(std::numeric_limits<C>::max());
            if (std::isnan(r)) return C(0);
            if (r <= lo) return std::numeric_limits<C>::lowest();
            if (r >= hi) return std::numeric_limits<C>::max();
        }
        return static_cast<C>(r);
    }
};
struct SwishOp : FloatOp {
    float alpha = 1.f;
    template <class C>
    C operator()(C x) const noexcept { return x * sigmoid(static_cast<C>(alpha) * x); }
};
struct GeluOp : FloatOp {
    bool tanh_approx = false;
    template <class C>
    C operator()(C x) const noexcept {
        if (tanh_approx) {
            const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
            return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
        }
        return C(0.5) * x * (C(1) + std::erf(x / static_cast<C>(std::numbers::sqrt2)));
    }
};

// ---- factories -------------------------------------------------------------------------------

/// Unary ops take exactly one (present) input.
Status check_one_input(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() != 1 || !ctx.has_input(0))
        return Status::error(ErrorCode::invalid_model, "expected exactly 1 input, got ",
                             ctx.num_inputs());
    return Status::ok();
}

template <class Op, class Types>
StatusOr<std::unique_ptr<Kernel>> make_unary(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    return make_kernel<UnaryKernel<Op, Types>>(Op{});
}

#define DSINFER_FLOAT_ATTR(var, name, field)                                             \
    DSINFER_ASSIGN_OR_RETURN(var.field, ctx.node().attr_or<float>(name, var.field))

StatusOr<std::unique_ptr<Kernel>> make_leaky_relu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    LeakyReluOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    return make_kernel<UnaryKernel<LeakyReluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_elu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    EluOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    return make_kernel<UnaryKernel<EluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_selu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    SeluOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    DSINFER_FLOAT_ATTR(op, "gamma", gamma);
    return make_kernel<UnaryKernel<SeluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_celu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    CeluOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    if (op.alpha == 0.f)
        return Status::error(ErrorCode::invalid_model, "attribute 'alpha' must not be 0");
    return make_kernel<UnaryKernel<CeluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_hard_sigmoid(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    HardSigmoidOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    DSINFER_FLOAT_ATTR(op, "beta", beta);
    return make_kernel<UnaryKernel<HardSigmoidOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_thresholded_relu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    ThresholdedReluOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    return make_kernel<UnaryKernel<ThresholdedReluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_shrink(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    ShrinkOp op;
    DSINFER_FLOAT_ATTR(op, "lambd", lambd);
    DSINFER_FLOAT_ATTR(op, "bias", bias);
    return make_kernel<UnaryKernel<ShrinkOp, NumericTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_swish(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    SwishOp op;
    DSINFER_FLOAT_ATTR(op, "alpha", alpha);
    return make_kernel<UnaryKernel<SwishOp, FloatTypes>>(op);
}
#undef DSINFER_FLOAT_ATTR

StatusOr<std::unique_ptr<Kernel>> make_gelu(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    GeluOp op;
    DSINFER_ASSIGN_OR_RETURN(std::string approx,
                             ctx.node().attr_or<std::string>("approximate", "none"));
    if (approx == "tanh") op.tanh_approx = true;
    else if (approx != "none")
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'approximate' must be \"none\" or \"tanh\", got \"",
                             approx, "\"");
    return make_kernel<UnaryKernel<GeluOp, FloatTypes>>(op);
}
StatusOr<std::unique_ptr<Kernel>> make_isinf(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(check_one_input(ctx));
    IsInfOp op;
    DSINFER_ASSIGN_OR_RETURN(std::int64_t neg,
                             ctx.node().attr_or<std::int64_t>("detect_negative", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t pos,
                             ctx.node().attr_or<std::int64_t>("detect_positive", 1));
    op.neg = neg != 0;
    op.pos = pos != 0;
    return make_kernel<UnaryKernel<IsInfOp, FloatTypes>>(op);
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    r.add({"Abs", "", 1, kMaxOpset, cpu}, &make_unary<AbsOp, NumericTypes>);
    r.add({"Neg", "", 1, kMaxOpset, cpu}, &make_unary<NegOp, SignedTypes>);
    r.add({"Sign", "", 9, kMaxOpset, cpu}, &make_unary<SignOp, NumericTypes>);
    r.add({"Exp", "", 1, kMaxOpset, cpu}, &make_unary<ExpOp, FloatTypes>);
    r.add({"Log", "", 1, kMaxOpset, cpu}, &make_unary<LogOp, FloatTypes>);
    r.add({"Sqrt", "", 1, kMaxOpset, cpu}, &make_unary<SqrtOp, FloatTypes>);
    r.add({"Reciprocal", "", 1, kMaxOpset, cpu}, &make_unary<ReciprocalOp, FloatTypes>);
    r.add({"Floor", "", 1, kMaxOpset, cpu}, &make_unary<FloorOp, FloatTypes>);
    r.add({"Ceil", "", 1, kMaxOpset, cpu}, &make_unary<CeilOp, FloatTypes>);
    r.add({"Round", "", 11, kMaxOpset, cpu}, &make_unary<RoundOp, FloatTypes>);
    r.add({"Sin", "", 7, kMaxOpset, cpu}, &make_unary<SinOp, FloatTypes>);
    r.add({"Cos", "", 7, kMaxOpset, cpu}, &make_unary<CosOp, FloatTypes>);
    r.add({"Tan", "", 7, kMaxOpset, cpu}, &make_unary<TanOp, FloatTypes>);
    r.add({"Asin", "", 7, kMaxOpset, cpu}, &make_unary<AsinOp, FloatTypes>);
    r.add({"Acos", "", 7, kMaxOpset, cpu}, &make_unary<AcosOp, FloatTypes>);
    r.add({"Atan", "", 7, kMaxOpset, cpu}, &make_unary<AtanOp, FloatTypes>);
    r.add({"Sinh", "", 9, kMaxOpset, cpu}, &make_unary<SinhOp, FloatTypes>);
    r.add({"Cosh", "", 9, kMaxOpset, cpu}, &make_unary<CoshOp, FloatTypes>);
    r.add({"Asinh", "", 9, kMaxOpset, cpu}, &make_unary<AsinhOp, FloatTypes>);
    r.add({"Acosh", "", 9, kMaxOpset, cpu}, &make_unary<AcoshOp, FloatTypes>);
    r.add({"Atanh", "", 9, kMaxOpset, cpu}, &make_unary<AtanhOp, FloatTypes>);
    r.add({"Erf", "", 9, kMaxOpset, cpu}, &make_unary<ErfOp, FloatTypes>);
    r.add({"IsNaN", "", 9, kMaxOpset, cpu}, &make_unary<IsNaNOp, FloatTypes>);
    r.add({"IsInf", "", 10, kMaxOpset, cpu}, &make_isinf);
    r.add({"Not", "", 1, kMaxOpset, cpu}, &make_unary<NotOp, BoolTypes>);
    r.add({"BitwiseNot", "", 18, kMaxOpset, cpu}, &make_unary<BitwiseNotOp, IntTypes>);

    r.add({"Relu", "", 1, kMaxOpset, cpu}, &make_unary<ReluOp, SignedTypes>);
    r.add({"LeakyRelu", "", 1, kMaxOpset, cpu}, &make_leaky_relu);
    r.add({"Elu", "", 1, kMaxOpset, cpu}, &make_elu);
    r.add({"Selu", "", 1, kMaxOpset, cpu}, &make_selu);
    r.add({"Celu", "", 12, kMaxOpset, cpu}, &make_celu);
    r.add({"Sigmoid", "", 1, kMaxOpset, cpu}, &make_unary<SigmoidOp, FloatTypes>);
    r.add({"HardSigmoid", "", 1, kMaxOpset, cpu}, &make_hard_sigmoid);
    r.add({"HardSwish", "", 14, kMaxOpset, cpu}, &make_unary<HardSwishOp, FloatTypes>);
    r.add({"Tanh", "", 1, kMaxOpset, cpu}, &make_unary<TanhOp, FloatTypes>);
    r.add({"Softplus", "", 1, kMaxOpset, cpu}, &make_unary<SoftplusOp, FloatTypes>);
    r.add({"Softsign", "", 1, kMaxOpset, cpu}, &make_unary<SoftsignOp, FloatTypes>);
    r.add({"Gelu", "", 20, kMaxOpset, cpu}, &make_gelu);
    r.add({"Gelu", kDsinferDomain, 1, 1, cpu}, &make_gelu);  // fused GELU (docs/OPTIMIZER.md)
    r.add({"Mish", "", 18, kMaxOpset, cpu}, &make_unary<MishOp, FloatTypes>);
    r.add({"ThresholdedRelu", "", 10, kMaxOpset, cpu}, &make_thresholded_relu);
    r.add({"Shrink", "", 9, kMaxOpset, cpu}, &make_shrink);
    r.add({"Swish", "", 24, kMaxOpset, cpu}, &make_swish);

    register_elementwise_binary_kernels(r);
    register_elementwise_cast_kernels(r);
}

}  // namespace dsinfer::detail
