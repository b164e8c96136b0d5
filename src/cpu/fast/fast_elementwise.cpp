// Fast elementwise kernels: float32 unary math (float16/bfloat16 through float32 in blocks),
// broadcasting binary arithmetic (float32 vectorized; int32/int64 wrapping), Pow with the
// common constant exponents, comparisons, logical ops, Not, two-input Max/Min and Where.
// Everything else these ops accept (other dtypes, legacy opset < 7 broadcasting, Pow with a
// mixed exponent type, integer division) runs the reference kernel's code.
#include <cmath>
#include <type_traits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"

namespace dsinfer::detail::fast {
namespace {

// ---- unary --------------------------------------------------------------------------------

bool is_heavy(Unary op) noexcept {
    return op == Unary::exp || op == Unary::tanh || op == Unary::sigmoid || op == Unary::erf ||
           op == Unary::gelu || op == Unary::gelu_tanh;
}

/// y = fn(x) for 16-bit float storage: blocks widened to float32, mapped, rounded back (the
/// reference's load -> float op -> round-to-nearest-even store).
void half_map(DType dt, const std::uint16_t* x, std::uint16_t* y, std::int64_t n,
              SimdOps::UnaryFn fn) noexcept {
    const SimdOps& s = simd();
    const auto widen = dt == DType::f16 ? s.f16_to_f32 : s.bf16_to_f32;
    const auto narrow = dt == DType::f16 ? s.f32_to_f16 : s.f32_to_bf16;
    constexpr std::int64_t kBlock = 1024;
    float buf[kBlock];
    for (std::int64_t i = 0; i < n; i += kBlock) {
        const std::int64_t m = std::min(kBlock, n - i);
        widen(x + i, buf, m);
        fn(buf, buf, m);
        narrow(buf, y + i, m);
    }
}

class UnaryFast final : public FastKernel {
public:
    UnaryFast(std::unique_ptr<Kernel> fb, Unary op) : FastKernel(std::move(fb)), op_(op) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t n = x.num_elements();
        const SimdOps::UnaryFn fn = simd().unary[static_cast<int>(op_)];
        const std::int64_t grain = is_heavy(op_) ? kGrainHeavy : kGrain;
        if (x.dtype == DType::f32) {
            const float* px = x.data_unchecked<float>();
            float* py = y.data_unchecked<float>();
            parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) { fn(px + b, py + b, e - b); });
            return Status::ok();
        }
        if (x.dtype == DType::f16 || x.dtype == DType::bf16) {
            const auto* px = static_cast<const std::uint16_t*>(x.raw);
            auto* py = static_cast<std::uint16_t*>(y.raw);
            parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
                half_map(x.dtype, px + b, py + b, e - b, fn);
            });
            return Status::ok();
        }
        return fallback_run(ctx);
    }

    std::string algorithm(const PrepareContext& ctx) const override {
        const DType t = ctx.input(0).dtype();
        if (t == DType::f32 || t == DType::f16 || t == DType::bf16) return simd_algorithm("eltwise");
        return fallback_algorithm(ctx);
    }

private:
    Unary op_;
};

template <Unary Op>
Factory make_unary(const KernelCreateContext& ctx) {
    return make_with_fallback<UnaryFast>(ctx, Op);
}

class NotFast final : public FastKernel {
public:
    using FastKernel::FastKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.dtype != DType::boolean) return fallback_run(ctx);
        const bool* px = x.data_unchecked<bool>();
        bool* py = ctx.output(0).data_unchecked<bool>();
        parallel_for(x.num_elements(), kGrain, [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t i = b; i < e; ++i) py[i] = !px[i];
        });
        return Status::ok();
    }
};

// ---- binary -------------------------------------------------------------------------------

enum class Bin { add, sub, mul, div, max, min, pow, eq, lt, le, gt, ge, land, lor, lxor };

bool is_compare(Bin op) noexcept {
    return op == Bin::eq || op == Bin::lt || op == Bin::le || op == Bin::gt || op == Bin::ge;
}
bool is_logical(Bin op) noexcept { return op == Bin::land || op == Bin::lor || op == Bin::lxor; }

/// Runs a binary op over the plan's pieces: both operands contiguous through
/// vv(a, b, out, n), one broadcast through vs(a, b[0], out, n) or sv(a[0], b, out, n).
template <class A, class B, class O, class VV, class VS, class SV>
void binary_pieces(const LoopPlan<3>& p, const A* pa, const B* pb, O* po, VV vv, VS vs, SV sv) {
    const std::int64_t sa = p.step(1), sb = p.step(2);
    parallel_pieces(p, kGrain, [&](const std::array<std::int64_t, 3>& off, std::int64_t n) {
        O* o = po + off[0];
        const A* x = pa + off[1];
        const B* z = pb + off[2];
        if (sa == 1 && sb == 1) vv(x, z, o, n);
        else if (sa == 1) vs(x, *z, o, n);
        else if (sb == 1) sv(*x, z, o, n);
        else for (std::int64_t i = 0; i < n; ++i) vv(x, z, o + i, 1);  // both broadcast
    });
}

/// o = op(a, b) with scalar code (any element types).
template <class A, class B, class O, class Op>
void scalar_binary(const LoopPlan<3>& p, const A* pa, const B* pb, O* po, Op op) {
    binary_pieces(
        p, pa, pb, po,
        [op](const A* x, const B* z, O* o, std::int64_t n) {
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x[i], z[i]);
        },
        [op](const A* x, B z, O* o, std::int64_t n) {
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x[i], z);
        },
        [op](A x, const B* z, O* o, std::int64_t n) {
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x, z[i]);
        });
}

/// float32 arithmetic through the vector loops.
void float_arith(Arith op, const LoopPlan<3>& p, const float* pa, const float* pb,
                 float* po) noexcept {
    const SimdOps& s = simd();
    const int k = static_cast<int>(op);
    binary_pieces(p, pa, pb, po, s.vv[k], s.vs[k], s.sv[k]);
}

/// Integer arithmetic wraps modulo 2^bits (the reference's unsigned arithmetic).
template <class T>
Status int_arith(Bin op, const LoopPlan<3>& p, const T* pa, const T* pb, T* po) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
        case Bin::add:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return static_cast<T>(U(U(x) + U(z))); });
            return Status::ok();
        case Bin::sub:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return static_cast<T>(U(U(x) - U(z))); });
            return Status::ok();
        case Bin::mul:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return static_cast<T>(U(U(x) * U(z))); });
            return Status::ok();
        case Bin::max:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return x < z ? z : x; });
            return Status::ok();
        case Bin::min:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return z < x ? z : x; });
            return Status::ok();
        default: break;
    }
    return Status(ErrorCode::internal, "int_arith: not an integer fast op");
}

template <class T>
void compare(Bin op, const LoopPlan<3>& p, const T* pa, const T* pb, bool* po) {
    switch (op) {
        case Bin::eq:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return load(x) == load(z); });
            break;
        case Bin::lt:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return load(x) < load(z); });
            break;
        case Bin::le:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return load(x) <= load(z); });
            break;
        case Bin::gt:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return load(x) > load(z); });
            break;
        default:
            scalar_binary(p, pa, pb, po, [](T x, T z) { return load(x) >= load(z); });
            break;
    }
}

/// float32 Pow: the constant exponents BERT-style graphs use map to exact or near-exact
/// loops; anything else is std::pow(float, float) per element like the reference.
void float_pow(const LoopPlan<3>& p, const TensorView& a, const TensorView& b,
               const TensorView& y) noexcept {
    const float* pa = a.data_unchecked<float>();
    const float* pb = b.data_unchecked<float>();
    float* py = y.data_unchecked<float>();
    if (b.num_elements() == 1) {
        const float e = *pb;
        const std::int64_t n = y.num_elements();
        if (e == 1.0f) {
            parallel_copy(py, pa, static_cast<std::size_t>(n) * sizeof(float));
            return;
        }
        Unary u = Unary::count;
        if (e == 2.0f) u = Unary::square;
        else if (e == 3.0f) u = Unary::cube;
        else if (e == 0.5f) u = Unary::pow_half;
        if (u != Unary::count) {
            const SimdOps::UnaryFn fn = simd().unary[static_cast<int>(u)];
            parallel_for(n, kGrain, [&](std::int64_t s, std::int64_t t) { fn(pa + s, py + s, t - s); });
            return;
        }
    }
    const std::int64_t sa = p.step(1), sb = p.step(2);
    parallel_pieces(p, kGrainHeavy, [&](const std::array<std::int64_t, 3>& off, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i)
            py[off[0] + i] = std::pow(pa[off[1] + i * sa], pb[off[2] + i * sb]);
    });
}

class BinaryFast final : public FastKernel {
public:
    BinaryFast(std::unique_ptr<Kernel> fb, Bin op) : FastKernel(std::move(fb)), op_(op) {}

    Status run(RunContext& ctx) const noexcept override {
        if (ctx.num_inputs() != 2) return fallback_run(ctx);  // variadic Max/Min
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        const TensorView& y = ctx.output(0);
        if (a.dtype != b.dtype) return fallback_run(ctx);
        if (y.num_elements() == 0) return Status::ok();
        const LoopPlan<3> p = plan_broadcast<3>(y.shape, {a.shape, b.shape});
        const DType dt = a.dtype;
        if (is_logical(op_)) {
            if (dt != DType::boolean) return fallback_run(ctx);
            const bool* pa = a.data_unchecked<bool>();
            const bool* pb = b.data_unchecked<bool>();
            bool* po = y.data_unchecked<bool>();
            if (op_ == Bin::land) scalar_binary(p, pa, pb, po, [](bool x, bool z) { return x && z; });
            else if (op_ == Bin::lor) scalar_binary(p, pa, pb, po, [](bool x, bool z) { return x || z; });
            else scalar_binary(p, pa, pb, po, [](bool x, bool z) { return x != z; });
            return Status::ok();
        }
        if (is_compare(op_)) {
            if (!kCompareDTypes.contains(dt)) return fallback_run(ctx);
            return dispatch_types(dt, CompareTypes{}, [&]<class T>() {
                compare<T>(op_, p, a.data_unchecked<T>(), b.data_unchecked<T>(), y.data_unchecked<bool>());
                return Status::ok();
            });
        }
        if (op_ == Bin::pow) {
            if (dt != DType::f32) return fallback_run(ctx);
            float_pow(p, a, b, y);
            return Status::ok();
        }
        if (dt == DType::f32) {
            float_arith(arith(), p, a.data_unchecked<float>(), b.data_unchecked<float>(), y.data_unchecked<float>());
            return Status::ok();
        }
        if (op_ == Bin::div) return fallback_run(ctx);  // integer division checks for zero
        if (dt == DType::i64)
            return int_arith(op_, p, a.data_unchecked<std::int64_t>(), b.data_unchecked<std::int64_t>(),
                             y.data_unchecked<std::int64_t>());
        if (dt == DType::i32)
            return int_arith(op_, p, a.data_unchecked<std::int32_t>(), b.data_unchecked<std::int32_t>(),
                             y.data_unchecked<std::int32_t>());
        return fallback_run(ctx);
    }

    /// run()'s choice: the vector loops for float32 arithmetic, scalar loops for the other
    /// types it takes, else the fallback.
    std::string algorithm(const PrepareContext& ctx) const override {
        if (ctx.num_inputs() != 2 || ctx.input(0).dtype() != ctx.input(1).dtype())
            return fallback_algorithm(ctx);
        const DType dt = ctx.input(0).dtype();
        if (is_logical(op_))
            return dt == DType::boolean ? "dsinfer:eltwise-scalar" : fallback_algorithm(ctx);
        if (is_compare(op_))
            return kCompareDTypes.contains(dt) ? "dsinfer:eltwise-scalar" : fallback_algorithm(ctx);
        if (op_ == Bin::pow) return dt == DType::f32 ? "dsinfer:pow-scalar" : fallback_algorithm(ctx);
        if (dt == DType::f32) return simd_algorithm("eltwise");
        if (op_ != Bin::div && (dt == DType::i64 || dt == DType::i32)) return "dsinfer:eltwise-scalar";
        return fallback_algorithm(ctx);
    }

private:
    using CompareTypes = TypeList<float, double, float16, bfloat16, std::int32_t, std::int64_t,
                                  bool>;
    static constexpr DTypeSet kCompareDTypes{DType::f32,  DType::f64, DType::f16, DType::bf16,
                                             DType::i32,  DType::i64, DType::boolean};

    Arith arith() const noexcept {
        switch (op_) {
            case Bin::add: return Arith::add;
            case Bin::sub: return Arith::sub;
            case Bin::mul: return Arith::mul;
            case Bin::div: return Arith::div;
            case Bin::max: return Arith::max;
            default: return Arith::min;
        }
    }

    Bin op_;
};

template <Bin Op>
Factory make_binary(const KernelCreateContext& ctx) {
    // Opset < 7 broadcasting (the 'broadcast'/'axis' attributes) stays with the reference.
    if (ctx.opset() < 7 && Op != Bin::max && Op != Bin::min)
        return Status::error(ErrorCode::unsupported, "legacy broadcasting is not accelerated");
    return make_with_fallback<BinaryFast>(ctx, Op);
}

// ---- Where --------------------------------------------------------------------------------

template <class T, bool C, bool X, bool Y>
void where_piece(const bool* c, const T* x, const T* y, T* o, std::int64_t n) noexcept {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[C ? i : 0] ? x[X ? i : 0] : y[Y ? i : 0];
}

template <class T>
void where_typed(const LoopPlan<4>& p, const bool* pc, const T* px, const T* py, T* po) {
    using Fn = void (*)(const bool*, const T*, const T*, T*, std::int64_t) noexcept;
    static constexpr Fn kFns[8] = {
        where_piece<T, false, false, false>, where_piece<T, false, false, true>,
        where_piece<T, false, true, false>,  where_piece<T, false, true, true>,
        where_piece<T, true, false, false>,  where_piece<T, true, false, true>,
        where_piece<T, true, true, false>,   where_piece<T, true, true, true>,
    };
    const Fn fn = kFns[(p.step(1) != 0) * 4 + (p.step(2) != 0) * 2 + (p.step(3) != 0)];
    parallel_pieces(p, kGrain, [&](const std::array<std::int64_t, 4>& off, std::int64_t n) {
        fn(pc + off[1], px + off[2], py + off[3], po + off[0], n);
    });
}

class WhereFast final : public FastKernel {
public:
    using FastKernel::FastKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& c = ctx.input(0);
        const TensorView& x = ctx.input(1);
        const TensorView& y = ctx.input(2);
        const TensorView& o = ctx.output(0);
        if (x.dtype == DType::string || c.dtype != DType::boolean) return fallback_run(ctx);
        if (o.num_elements() == 0) return Status::ok();
        const LoopPlan<4> p = plan_broadcast<4>(o.shape, {c.shape, x.shape, y.shape});
        const bool* pc = c.data_unchecked<bool>();
        switch (dtype_size(x.dtype)) {
            case 1: where_typed(p, pc, x.data_unchecked<std::uint8_t>(), y.data_unchecked<std::uint8_t>(), o.data_unchecked<std::uint8_t>()); break;
            case 2: where_typed(p, pc, x.data_unchecked<std::uint16_t>(), y.data_unchecked<std::uint16_t>(), o.data_unchecked<std::uint16_t>()); break;
            case 4: where_typed(p, pc, x.data_unchecked<std::uint32_t>(), y.data_unchecked<std::uint32_t>(), o.data_unchecked<std::uint32_t>()); break;
            case 8: where_typed(p, pc, x.data_unchecked<std::uint64_t>(), y.data_unchecked<std::uint64_t>(), o.data_unchecked<std::uint64_t>()); break;
            default: return fallback_run(ctx);
        }
        return Status::ok();
    }
};

}  // namespace

void register_fast_elementwise_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    const DTypeSet floats{DType::f32, DType::f16, DType::bf16};
    auto add = [&](const char* op, std::int64_t from, DTypeSet types, KernelFactory f) {
        r.add({op, "", from, kMaxOpset, cpu, types}, f, kPriorityCpu, "cpu");
    };
    add("Neg", 1, floats, &make_unary<Unary::neg>);
    add("Abs", 1, floats, &make_unary<Unary::abs>);
    add("Relu", 1, floats, &make_unary<Unary::relu>);
    add("Sqrt", 1, floats, &make_unary<Unary::sqrt>);
    add("Reciprocal", 1, floats, &make_unary<Unary::reciprocal>);
    add("Floor", 1, floats, &make_unary<Unary::floor>);
    add("Ceil", 1, floats, &make_unary<Unary::ceil>);
    add("Exp", 1, floats, &make_unary<Unary::exp>);
    add("Tanh", 1, floats, &make_unary<Unary::tanh>);
    add("Sigmoid", 1, floats, &make_unary<Unary::sigmoid>);
    add("Erf", 9, floats, &make_unary<Unary::erf>);
    add("Not", 1, DTypeSet{DType::boolean}, &make_with_fallback<NotFast>);

    const DTypeSet arith{DType::f32, DType::i32, DType::i64};
    add("Add", 1, arith, &make_binary<Bin::add>);
    add("Sub", 1, arith, &make_binary<Bin::sub>);
    add("Mul", 1, arith, &make_binary<Bin::mul>);
    add("Div", 1, DTypeSet{DType::f32}, &make_binary<Bin::div>);
    add("Pow", 1, DTypeSet{DType::f32}, &make_binary<Bin::pow>);
    add("Max", 1, arith, &make_binary<Bin::max>);
    add("Min", 1, arith, &make_binary<Bin::min>);
    const DTypeSet cmp{DType::f32, DType::f64, DType::f16, DType::bf16,
                       DType::i32, DType::i64, DType::boolean};  // BinaryFast::kCompareDTypes
    add("Equal", 1, cmp, &make_binary<Bin::eq>);
    add("Less", 1, cmp, &make_binary<Bin::lt>);
    add("LessOrEqual", 12, cmp, &make_binary<Bin::le>);
    add("Greater", 1, cmp, &make_binary<Bin::gt>);
    add("GreaterOrEqual", 12, cmp, &make_binary<Bin::ge>);
    const DTypeSet boolean{DType::boolean};
    add("And", 1, boolean, &make_binary<Bin::land>);
    add("Or", 1, boolean, &make_binary<Bin::lor>);
    add("Xor", 1, boolean, &make_binary<Bin::lxor>);
    add("Where", 9, DTypeSet::all(), &make_with_fallback<WhereFast>);
}

}  // namespace dsinfer::detail::fast
