// Reference kernels for the broadcasting elementwise ops: binary arithmetic, comparison,
// logical and bitwise ops, PRelu, SwiGLU, the variadic Max/Min/Sum/Mean, Where and Clip.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_elementwise_binary_kernels(KernelRegistry& r);

namespace {

// ---- broadcast iteration ---------------------------------------------------------------------

/// Walks the (contiguous) output `out` in row-major order as runs along the innermost dim,
/// after dropping size-1 dims and merging dims that are contiguous for every operand. For
/// each run calls f(offsets, steps, count): offsets[0] is the output's start element,
/// offsets[k + 1] input k's, steps[] the element strides along the run (0 = broadcast).
template <std::size_t M, class F>
void broadcast_runs(const Shape& out, const std::array<Shape, M>& ins, F&& f) {
    constexpr std::size_t N = M + 1;
    const std::int64_t total = out.num_elements();
    if (total == 0) return;
    std::array<Strides, N> st{};
    st[0] = contiguous_strides(out);
    for (std::size_t k = 0; k < M; ++k) st[k + 1] = broadcast_strides(ins[k], out);

    std::array<std::int64_t, kMaxRank> dims{};
    std::array<Strides, N> cs{};
    int r = 0;
    for (int d = 0; d < out.rank(); ++d) {
        const auto du = static_cast<std::size_t>(d);
        if (out[d] == 1) continue;
        if (r > 0) {
            const auto pu = static_cast<std::size_t>(r - 1);
            bool merge = true;
            for (std::size_t k = 0; k < N; ++k)
                if (cs[k][pu] != st[k][du] * out[d]) merge = false;
            if (merge) {
                dims[pu] *= out[d];
                for (std::size_t k = 0; k < N; ++k) cs[k][pu] = st[k][du];
                continue;
            }
        }
        dims[static_cast<std::size_t>(r)] = out[d];
        for (std::size_t k = 0; k < N; ++k) cs[k][static_cast<std::size_t>(r)] = st[k][du];
        ++r;
    }
    std::array<std::int64_t, N> off{};
    std::array<std::int64_t, N> step{};
    if (r == 0) {  // a single element
        f(off, step, std::int64_t{1});
        return;
    }
    const auto inner = static_cast<std::size_t>(r - 1);
    for (std::size_t k = 0; k < N; ++k) step[k] = cs[k][inner];
    const std::int64_t n = dims[inner];
    const std::int64_t outer = total / n;
    std::array<std::int64_t, kMaxRank> idx{};
    for (std::int64_t o = 0; o < outer; ++o) {
        f(off, step, n);
        for (int d = r - 2; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            ++idx[du];
            for (std::size_t k = 0; k < N; ++k) off[k] += cs[k][du];
            if (idx[du] < dims[du]) break;
            for (std::size_t k = 0; k < N; ++k) off[k] -= cs[k][du] * dims[du];
            idx[du] = 0;
        }
    }
}

/// y = op(a, b) with broadcasting; op maps (A, B) -> O on the stored types.
template <class A, class B, class O, class Op>
void binary_apply(const A* pa, const Shape& sa, const B* pb, const Shape& sb, O* py,
                  const Shape& sy, Op&& op) {
    if (sa == sy && sb == sy) {
        const std::int64_t n = sy.num_elements();
        for (std::int64_t i = 0; i < n; ++i) py[i] = op(pa[i], pb[i]);
        return;
    }
    broadcast_runs<2>(sy, {sa, sb}, [&](const auto& off, const auto& step, std::int64_t n) {
        O* o = py + off[0];
        const A* x = pa + off[1];
        const B* z = pb + off[2];
        if (step[1] == 1 && step[2] == 1) {
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x[i], z[i]);
        } else if (step[1] == 1 && step[2] == 0) {
            const B zv = *z;
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x[i], zv);
        } else if (step[1] == 0 && step[2] == 1) {
            const A xv = *x;
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(xv, z[i]);
        } else {
            for (std::int64_t i = 0; i < n; ++i) o[i] = op(x[i * step[1]], z[i * step[2]]);
        }
    });
}

// ---- integer helpers (no signed overflow UB) -------------------------------------------------

template <class T>
T wrap_add(T a, T b) noexcept {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class T>
T wrap_sub(T a, T b) noexcept {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <class T>
T wrap_mul(T a, T b) noexcept {
    using U = std::make_unsigned_t<T>;
    // Promote narrow unsigned types to unsigned int so the product cannot overflow int.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) *
                                         static_cast<W>(static_cast<U>(b))));
}

/// Truncating division; b != 0 checked by the caller. MIN / -1 wraps to MIN.
template <class T>
T int_div(T a, T b) noexcept {
    if constexpr (std::is_signed_v<T>) {
        if (b == -1) return wrap_sub(T(0), a);
    }
    return static_cast<T>(a / b);
}
/// Truncated remainder (sign of the dividend); b != 0 checked by the caller.
template <class T>
T int_rem(T a, T b) noexcept {
    if constexpr (std::is_signed_v<T>) {
        if (b == -1) return T(0);
    }
    return static_cast<T>(a % b);
}

/// Float -> integer with NaN and range guarded (no UB): NaN -> 0, saturating.
template <class I>
I float_to_int(double d) noexcept {
    if (std::isnan(d)) return I(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<I>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
    if (d <= lo) return std::numeric_limits<I>::lowest();
    if (d >= hi) return std::numeric_limits<I>::max();
    return static_cast<I>(d);
}

/// Integer power by squaring with wrap-around; negative exponents truncate like 1 / a^|b|.
template <class T, class E>
T int_pow(T base, E e) noexcept {
    if constexpr (std::is_signed_v<E>) {
        if (e < 0) {
            if (base == 1) return T(1);
            if constexpr (std::is_signed_v<T>) {
                if (base == -1) return (e % 2 == 0) ? T(1) : T(-1);
            }
            return T(0);  // includes 0^negative (no integer infinity)
        }
    }
    T result = 1;
    T b = base;
    auto ue = static_cast<std::make_unsigned_t<E>>(e);
    while (ue != 0) {
        if (ue & 1u) result = wrap_mul(result, b);
        b = wrap_mul(b, b);
        ue >>= 1;
    }
    return result;
}

// ---- op codes --------------------------------------------------------------------------------

enum class BinOp {
    add, sub, mul, div, pow, mod, fmod, shl, shr, bit_and, bit_or, bit_xor, log_and, log_or,
    log_xor, eq, lt, le, gt, ge, prelu, swiglu,
};

bool is_compare(BinOp op) noexcept {
    return op == BinOp::eq || op == BinOp::lt || op == BinOp::le || op == BinOp::gt ||
           op == BinOp::ge;
}
bool is_logical(BinOp op) noexcept {
    return op == BinOp::log_and || op == BinOp::log_or || op == BinOp::log_xor;
}

// Floating arithmetic of op on compute values (float for 16-bit types).
template <class C>
C float_arith(BinOp op, C a, C b) noexcept {
    switch (op) {
        case BinOp::add: return a + b;
        case BinOp::sub: return a - b;
        case BinOp::mul: return a * b;
        case BinOp::div: return a / b;
        case BinOp::fmod: return std::fmod(a, b);
        case BinOp::mod: {
            // Python/numpy: the result takes the divisor's sign.
            C r = std::fmod(a, b);
            if (r != 0 && ((r < 0) != (b < 0))) r += b;
            return r;
        }
        case BinOp::prelu: return a < 0 ? a * b : a;
        default: return C(0);
    }
}

class BinaryKernel final : public Kernel {
public:
    BinaryKernel(BinOp op, std::int64_t legacy_axis, bool legacy_broadcast, float alpha = 1.f)
        : op_(op), legacy_axis_(legacy_axis), legacy_broadcast_(legacy_broadcast), alpha_(alpha) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        if (op_ != BinOp::pow && a.dtype() != b.dtype())
            return Status::error(ErrorCode::invalid_argument, "inputs A and B must have the same ",
                                 "element type, got ", dtype_name(a.dtype()), " and ",
                                 dtype_name(b.dtype()));
        DSINFER_RETURN_IF_ERROR(check_dtype(a.dtype(), b.dtype()));
        DSINFER_CHECK(op_ != BinOp::swiglu || a.shape() == b.shape(), ErrorCode::invalid_argument,
                      "SwiGLU inputs A and B must have the same shape (no broadcasting), got ",
                      a.shape().to_string(), " and ", b.shape().to_string());
        DSINFER_ASSIGN_OR_RETURN(Shape sb, b_shape(a.shape(), b.shape()));
        DSINFER_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(a.shape(), sb));
        const DType odt = (is_compare(op_) || is_logical(op_)) ? DType::boolean : a.dtype();
        ctx.set_output(0, odt, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        const TensorView& y = ctx.output(0);
        auto sbs = b_shape(a.shape, b.shape);
        if (!sbs.is_ok()) return sbs.status();
        const Shape sb = *sbs;
        switch (op_) {
            case BinOp::add: case BinOp::sub: case BinOp::mul: case BinOp::div:
            case BinOp::mod: case BinOp::fmod: case BinOp::prelu:
                return dispatch_types(a.dtype, NumericTypes{}, [&]<class T>() {
                    return arith<T>(a, sb, b, y);
                });
            case BinOp::swiglu:
                // swish(a) * b = a * sigmoid(alpha * a) * b, computed in float for 16-bit types.
                return dispatch_types(a.dtype, FloatTypes{}, [&]<class T>() {
                    using C = compute_t<T>;
                    const C alpha = static_cast<C>(alpha_);
                    binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<T>(), y.shape,
                                 [alpha](T x, T z) {
                                     const C v = load(x);
                                     return store<T>(v / (C(1) + std::exp(-alpha * v)) * load(z));
                                 });
                    return Status::ok();
                });
            case BinOp::pow:
                return dispatch_types(a.dtype, PowBaseTypes{}, [&]<class T>() -> Status {
                    if (b.dtype == a.dtype) {
                        binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<T>(),
                                     y.shape, [](T x, T e) { return pow_one(x, e); });
                        return Status::ok();
                    }
                    // Mixed exponent type (rare): read the exponent through a loader instead
                    // of instantiating every base x exponent pair.
                    ExpLoader ld = nullptr;
                    DSINFER_RETURN_IF_ERROR(dispatch_types(b.dtype, PowExpTypes{}, [&]<class E>() {
                        ld = &load_exp<E>;
                        return Status::ok();
                    }));
                    const T* pa = a.data_unchecked<T>();
                    T* py = y.data_unchecked<T>();
                    const void* pb = b.raw;
                    broadcast_runs<2>(y.shape, {a.shape, sb},
                                      [&](const auto& off, const auto& st, std::int64_t n) {
                                          for (std::int64_t i = 0; i < n; ++i)
                                              py[off[0] + i] = pow_mixed(
                                                  pa[off[1] + i * st[1]], ld(pb, off[2] + i * st[2]));
                                      });
                    return Status::ok();
                });
            case BinOp::shl: case BinOp::shr:
                return dispatch_types(a.dtype, UnsignedTypes{}, [&]<class T>() {
                    constexpr T bits = static_cast<T>(sizeof(T) * 8);
                    if (op_ == BinOp::shl) {
                        binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<T>(), y.shape,
                                     [](T x, T s) { return s >= bits ? T(0) : T(x << s); });
                    } else {
                        binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<T>(), y.shape,
                                     [](T x, T s) { return s >= bits ? T(0) : T(x >> s); });
                    }
                    return Status::ok();
                });
            case BinOp::bit_and: case BinOp::bit_or: case BinOp::bit_xor:
                return dispatch_types(a.dtype, IntTypes{}, [&]<class T>() {
                    const BinOp op = op_;
                    binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<T>(), y.shape,
                                 [op](T x, T z) {
                                     if (op == BinOp::bit_and) return T(x & z);
                                     if (op == BinOp::bit_or) return T(x | z);
                                     return T(x ^ z);
                                 });
                    return Status::ok();
                });
            case BinOp::log_and: case BinOp::log_or: case BinOp::log_xor:
                return dispatch_types(a.dtype, TypeList<bool>{}, [&]<class T>() {
                    const bool* pa = a.data_unchecked<bool>();
                    const bool* pb = b.data_unchecked<bool>();
                    bool* py = y.data_unchecked<bool>();
                    if (op_ == BinOp::log_and)
                        binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                     [](bool x, bool z) { return x && z; });
                    else if (op_ == BinOp::log_or)
                        binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                     [](bool x, bool z) { return x || z; });
                    else
                        binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                     [](bool x, bool z) { return x != z; });
                    return Status::ok();
                });
            case BinOp::eq:
                return dispatch_types(a.dtype, AllTypes{}, [&]<class T>() {
                    binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<bool>(), y.shape,
                                 [](const T& x, const T& z) {
                                     if constexpr (std::is_same_v<T, std::string>) return x == z;
                                     else return load(x) == load(z);
                                 });
                    return Status::ok();
                });
            case BinOp::lt: case BinOp::le: case BinOp::gt: case BinOp::ge:
                return dispatch_types(a.dtype, CompareTypes{}, [&]<class T>() {
                    const BinOp op = op_;
                    binary_apply(a.data_unchecked<T>(), a.shape, b.data_unchecked<T>(), sb, y.data_unchecked<bool>(), y.shape,
                                 [op](T x, T z) {
                                     const auto p = load(x);
                                     const auto q = load(z);
                                     if (op == BinOp::lt) return p < q;
                                     if (op == BinOp::le) return p <= q;
                                     if (op == BinOp::gt) return p > q;
                                     return p >= q;
                                 });
                    return Status::ok();
                });
        }
        return Status(ErrorCode::internal, "unknown binary op");
    }

private:
    using PowBaseTypes = TypeList<float, double, float16, bfloat16, std::int32_t, std::int64_t>;
    using PowExpTypes = NumericTypes;
    using UnsignedTypes = TypeList<std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t>;
    using CompareTypes = PodTypes;

    Status check_dtype(DType a, DType b) const {
        auto ok_in = [&](auto list, DType t) {
            return dispatch_types(t, list, []<class T>() { return Status::ok(); });
        };
        switch (op_) {
            case BinOp::pow:
                DSINFER_RETURN_IF_ERROR(ok_in(PowBaseTypes{}, a));
                return ok_in(PowExpTypes{}, b);
            case BinOp::shl: case BinOp::shr: return ok_in(UnsignedTypes{}, a);
            case BinOp::bit_and: case BinOp::bit_or: case BinOp::bit_xor:
                return ok_in(IntTypes{}, a);
            case BinOp::log_and: case BinOp::log_or: case BinOp::log_xor:
                return ok_in(TypeList<bool>{}, a);
            case BinOp::eq: return ok_in(AllTypes{}, a);
            case BinOp::swiglu: return ok_in(FloatTypes{}, a);
            case BinOp::lt: case BinOp::le: case BinOp::gt: case BinOp::ge:
                return ok_in(CompareTypes{}, a);
            default: return ok_in(NumericTypes{}, a);
        }
    }

    /// B's shape as broadcast against A: numpy-style, except legacy (opset < 7) broadcast
    /// with an axis, and the old PRelu per-channel slope of shape [C].
    StatusOr<Shape> b_shape(const Shape& a, const Shape& b) const {
        if (legacy_broadcast_ && legacy_axis_ != kNoAxis) {
            std::int64_t axis = legacy_axis_;
            if (axis < 0) axis += a.rank();
            const std::int64_t trailing = a.rank() - axis - b.rank();
            if (axis < 0 || trailing < 0)
                return Status::error(ErrorCode::invalid_argument, "legacy broadcast axis ",
                                     legacy_axis_, " does not fit B ", b.to_string(),
                                     " into A ", a.to_string());
            Shape s = b;
            for (std::int64_t i = 0; i < trailing; ++i) s.push_back(1);
            return s;
        }
        if (op_ == BinOp::prelu && legacy_broadcast_ && b.rank() == 1 && a.rank() >= 2 &&
            b[0] == a[1] && b[0] != 1) {
            Shape s = b;
            for (int i = 2; i < a.rank(); ++i) s.push_back(1);
            return s;
        }
        return b;
    }

    template <class T>
    Status arith(const TensorView& a, const Shape& sb, const TensorView& b,
                 const TensorView& y) const noexcept {
        const T* pa = a.data_unchecked<T>();
        const T* pb = b.data_unchecked<T>();
        T* py = y.data_unchecked<T>();
        if constexpr (std::is_integral_v<T>) {
            switch (op_) {
                case BinOp::add:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape, wrap_add<T>);
                    return Status::ok();
                case BinOp::sub:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape, wrap_sub<T>);
                    return Status::ok();
                case BinOp::mul:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape, wrap_mul<T>);
                    return Status::ok();
                case BinOp::prelu:
                    if constexpr (std::is_signed_v<T>)
                        binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                     [](T x, T s) { return x < T(0) ? wrap_mul(x, s) : x; });
                    else
                        binary_apply(pa, a.shape, pb, sb, py, y.shape, [](T x, T) { return x; });
                    return Status::ok();
                default: break;
            }
            // div / mod / fmod: reject a zero divisor instead of invoking UB.
            bool zero = false;
            if (op_ == BinOp::div) {
                binary_apply(pa, a.shape, pb, sb, py, y.shape, [&zero](T x, T z) {
                    if (z == T(0)) { zero = true; return T(0); }
                    return int_div(x, z);
                });
            } else if (op_ == BinOp::fmod || std::is_unsigned_v<T>) {
                binary_apply(pa, a.shape, pb, sb, py, y.shape, [&zero](T x, T z) {
                    if (z == T(0)) { zero = true; return T(0); }
                    return int_rem(x, z);
                });
            } else {
                binary_apply(pa, a.shape, pb, sb, py, y.shape, [&zero](T x, T z) {
                    if (z == T(0)) { zero = true; return T(0); }
                    T r = int_rem(x, z);
                    if (r != T(0) && ((r < T(0)) != (z < T(0)))) r = wrap_add(r, z);
                    return r;
                });
            }
            if (zero)
                return Status::error(ErrorCode::invalid_argument, "integer ",
                                     op_ == BinOp::div ? "division" : "modulo", " by zero");
            return Status::ok();
        } else {
            using C = compute_t<T>;
            switch (op_) {
                case BinOp::add:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                 [](T x, T z) { return store<T>(load(x) + load(z)); });
                    break;
                case BinOp::sub:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                 [](T x, T z) { return store<T>(load(x) - load(z)); });
                    break;
                case BinOp::mul:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                 [](T x, T z) { return store<T>(load(x) * load(z)); });
                    break;
                case BinOp::div:
                    binary_apply(pa, a.shape, pb, sb, py, y.shape,
                                 [](T x, T z) { return store<T>(load(x) / load(z)); });
                    break;
                default: {
                    const BinOp op = op_;
                    binary_apply(pa, a.shape, pb, sb, py, y.shape, [op](T x, T z) {
                        return store<T>(float_arith<C>(op, load(x), load(z)));
                    });
                    break;
                }
            }
            return Status::ok();
        }
    }

    struct ExpVal {
        double d;
        std::int64_t i;
        bool is_int;
    };
    using ExpLoader = ExpVal (*)(const void*, std::int64_t) noexcept;

    template <class E>
    static ExpVal load_exp(const void* p, std::int64_t idx) noexcept {
        const E v = static_cast<const E*>(p)[idx];
        if constexpr (std::is_integral_v<E>) {
            std::int64_t i = 0;
            if constexpr (std::is_same_v<E, std::uint64_t>)
                i = v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                        ? std::numeric_limits<std::int64_t>::max()
                        : static_cast<std::int64_t>(v);
            else
                i = static_cast<std::int64_t>(v);
            return {static_cast<double>(v), i, true};
        } else {
            return {static_cast<double>(load(v)), 0, false};
        }
    }

    template <class T>
    static T pow_mixed(T x, ExpVal e) noexcept {
        if constexpr (std::is_integral_v<T>) {
            if (e.is_int) return int_pow(x, e.i);
            return float_to_int<T>(std::pow(static_cast<double>(x), e.d));
        } else if constexpr (std::is_same_v<T, double>) {
            return std::pow(x, e.d);
        } else {
            return store<T>(std::pow(static_cast<float>(load(x)), static_cast<float>(e.d)));
        }
    }

    template <class T, class E>
    static T pow_one(T x, E e) noexcept {
        if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) {
            return int_pow(x, e);
        } else if constexpr (std::is_integral_v<T>) {
            return float_to_int<T>(std::pow(static_cast<double>(x), static_cast<double>(load(e))));
        } else if constexpr (std::is_same_v<T, double>) {
            return std::pow(x, static_cast<double>(load(e)));
        } else {
            return store<T>(std::pow(static_cast<float>(load(x)), static_cast<float>(load(e))));
        }
    }

public:
    static constexpr std::int64_t kNoAxis = std::numeric_limits<std::int64_t>::min();

private:
    BinOp op_;
    std::int64_t legacy_axis_;
    bool legacy_broadcast_;
    float alpha_;  // SwiGLU
};

template <BinOp Op>
StatusOr<std::unique_ptr<Kernel>> make_binary(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1))
        return Status::error(ErrorCode::invalid_model, "expected 2 inputs, got ",
                             ctx.num_inputs());
    BinOp op = Op;
    if (op == BinOp::mod) {
        DSINFER_ASSIGN_OR_RETURN(std::int64_t fmod, ctx.node().attr_or<std::int64_t>("fmod", 0));
        if (fmod != 0 && fmod != 1)
            return Status::error(ErrorCode::invalid_model, "attribute 'fmod' must be 0 or 1, got ",
                                 fmod);
        if (fmod == 1) op = BinOp::fmod;
    }
    if (op == BinOp::shl) {
        DSINFER_ASSIGN_OR_RETURN(std::string dir, ctx.node().attr<std::string>("direction"));
        if (dir == "RIGHT") op = BinOp::shr;
        else if (dir != "LEFT")
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"",
                                 dir, "\"");
    }
    if (op == BinOp::div || op == BinOp::mod || op == BinOp::fmod) {
        // A constant integer divisor holding 0 can never run: reject it at load.
        if (const Tensor* d = ctx.constant_input(1); d != nullptr && is_integer(d->dtype())) {
            bool zero = false;
            (void)dispatch_types(d->dtype(), IntTypes{}, [&]<class T>() {
                for (std::int64_t i = 0; i < d->num_elements(); ++i)
                    if (d->data_unchecked<T>()[i] == T(0)) zero = true;
                return Status::ok();
            });
            if (zero)
                return Status::error(ErrorCode::invalid_model, "constant integer divisor B ",
                                     "contains 0");
        }
    }
    if (op == BinOp::div) {
        // Constant signed MIN / -1 overflows (the run-time kernel wraps it to MIN): when both
        // inputs are constants, A holding MIN and B holding -1, reject it at load.
        const Tensor* a = ctx.constant_input(0);
        const Tensor* d = ctx.constant_input(1);
        if (a != nullptr && d != nullptr && a->dtype() == d->dtype() && is_integer(d->dtype())) {
            bool min_a = false, minus_one_d = false;
            (void)dispatch_types(d->dtype(), IntTypes{}, [&]<class T>() {
                if constexpr (std::is_signed_v<T>) {
                    for (std::int64_t i = 0; i < a->num_elements(); ++i)
                        if (a->data_unchecked<T>()[i] == std::numeric_limits<T>::min()) min_a = true;
                    for (std::int64_t i = 0; i < d->num_elements(); ++i)
                        if (d->data_unchecked<T>()[i] == T(-1)) minus_one_d = true;
                }
                return Status::ok();
            });
            if (min_a && minus_one_d)
                return Status::error(ErrorCode::invalid_model, "constant integer division of the ",
                                     "type's minimum by -1 overflows ", dtype_name(d->dtype()));
        }
    }
    std::int64_t axis = BinaryKernel::kNoAxis;
    bool legacy = false;
    if (ctx.opset() < 7) {
        if (op == BinOp::prelu) {
            legacy = true;
        } else {
            DSINFER_ASSIGN_OR_RETURN(std::int64_t bc,
                                     ctx.node().attr_or<std::int64_t>("broadcast", 0));
            legacy = bc != 0;
            if (legacy && ctx.node().has_attr("axis")) {
                DSINFER_ASSIGN_OR_RETURN(axis, ctx.node().attr<std::int64_t>("axis"));
            }
        }
    }
    float alpha = 1.f;
    if (op == BinOp::swiglu) {
        DSINFER_ASSIGN_OR_RETURN(alpha, ctx.node().attr_or<float>("alpha", 1.f));
    }
    return make_kernel<BinaryKernel>(op, axis, legacy, alpha);
}

// ---- variadic Max / Min / Sum / Mean ---------------------------------------------------------

enum class VarOp { max, min, sum, mean };

template <class C>
C var_combine(VarOp op, C a, C b) noexcept {
    switch (op) {
        case VarOp::max:
            if constexpr (std::is_floating_point_v<C>) {
                if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
            }
            return a < b ? b : a;
        case VarOp::min:
            if constexpr (std::is_floating_point_v<C>) {
                if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
            }
            return b < a ? b : a;
        case VarOp::sum:
        case VarOp::mean:
            if constexpr (std::is_integral_v<C>) return wrap_add(a, b);
            else return a + b;
    }
    return a;
}

class VariadicKernel final : public Kernel {
public:
    explicit VariadicKernel(VarOp op) : op_(op) {}

    Status prepare(PrepareContext& ctx) const override {
        if (ctx.num_inputs() < 1)
            return Status::error(ErrorCode::invalid_model, "expected at least one input");
        const DType dt = ctx.input(0).dtype();
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(dt, NumericTypes{}, []<class T>() { return Status::ok(); }));
        Shape out = ctx.input(0).shape();
        for (int i = 1; i < ctx.num_inputs(); ++i) {
            if (!ctx.has_input(i))
                return Status::error(ErrorCode::invalid_model, "input ", i, " is omitted");
            if (ctx.input(i).dtype() != dt)
                return Status::error(ErrorCode::invalid_argument, "input ", i, " has type ",
                                     dtype_name(ctx.input(i).dtype()), ", expected ",
                                     dtype_name(dt));
            DSINFER_ASSIGN_OR_RETURN(out, broadcast_shapes(out, ctx.input(i).shape()));
        }
        ctx.set_output(0, dt, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        return dispatch_types(y.dtype, NumericTypes{}, [&]<class T>() {
            using C = compute_t<T>;
            T* py = y.data_unchecked<T>();
            const int n = ctx.num_inputs();
            const TensorView& x0 = ctx.input(0);
            if (n == 1) {
                const std::int64_t cnt = y.num_elements();
                for (std::int64_t i = 0; i < cnt; ++i) py[i] = x0.data_unchecked<T>()[i];
            } else {
                // The output is also the left operand after the first step; each element only
                // reads its own position, so updating in place is safe.
                const VarOp op = op_;
                auto f = [op](T p, T q) { return store<T>(var_combine<C>(op, load(p), load(q))); };
                binary_apply(x0.data_unchecked<T>(), x0.shape, ctx.input(1).data_unchecked<T>(), ctx.input(1).shape,
                             py, y.shape, f);
                for (int i = 2; i < n; ++i)
                    binary_apply(static_cast<const T*>(py), y.shape, ctx.input(i).data_unchecked<T>(),
                                 ctx.input(i).shape, py, y.shape, f);
            }
            if (op_ == VarOp::mean) {
                const std::int64_t cnt = y.num_elements();
                for (std::int64_t i = 0; i < cnt; ++i)
                    py[i] = store<T>(load(py[i]) / static_cast<C>(n));
            }
            return Status::ok();
        });
    }

private:
    VarOp op_;
};

template <VarOp Op>
StatusOr<std::unique_ptr<Kernel>> make_variadic(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 1 || !ctx.has_input(0))
        return Status::error(ErrorCode::invalid_model, "expected at least one input");
    return make_kernel<VariadicKernel>(Op);
}

// ---- Where -----------------------------------------------------------------------------------

class WhereKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& c = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& y = ctx.input(2);
        if (c.dtype() != DType::boolean)
            return Status::error(ErrorCode::invalid_argument, "condition must be bool, got ",
                                 dtype_name(c.dtype()));
        if (x.dtype() != y.dtype())
            return Status::error(ErrorCode::invalid_argument, "X and Y must have the same type, ",
                                 "got ", dtype_name(x.dtype()), " and ", dtype_name(y.dtype()));
        DSINFER_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(c.shape(), x.shape()));
        DSINFER_ASSIGN_OR_RETURN(s, broadcast_shapes(s, y.shape()));
        ctx.set_output(0, x.dtype(), s);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& c = ctx.input(0);
        const TensorView& x = ctx.input(1);
        const TensorView& y = ctx.input(2);
        const TensorView& o = ctx.output(0);
        return dispatch_types(x.dtype, AllTypes{}, [&]<class T>() -> Status {
            const bool* pc = c.data_unchecked<bool>();
            const T* px = x.data_unchecked<T>();
            const T* py = y.data_unchecked<T>();
            T* po = o.data_unchecked<T>();
            try {
                broadcast_runs<3>(o.shape, {c.shape, x.shape, y.shape},
                                  [&](const auto& off, const auto& st, std::int64_t n) {
                                      T* out = po + off[0];
                                      const bool* cc = pc + off[1];
                                      const T* xx = px + off[2];
                                      const T* yy = py + off[3];
                                      for (std::int64_t i = 0; i < n; ++i)
                                          out[i] = cc[i * st[1]] ? xx[i * st[2]] : yy[i * st[3]];
                                  });
            } catch (const std::bad_alloc&) {  // only string copies allocate
                return Status(ErrorCode::resource_exhausted, "out of memory copying strings");
            }
            return Status::ok();
        });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_where(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() != 3 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
        return Status::error(ErrorCode::invalid_model, "expected 3 inputs, got ",
                             ctx.num_inputs());
    return make_kernel<WhereKernel>();
}

// ---- Clip ------------------------------------------------------------------------------------

class ClipKernel final : public Kernel {
public:
    /// attrs: opset < 11 bounds from attributes (as float); otherwise from optional inputs.
    ClipKernel(bool attrs, float lo, float hi) : attrs_(attrs), lo_(lo), hi_(hi) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(x.dtype(), NumericTypes{}, []<class T>() { return Status::ok(); }));
        if (!attrs_) {
            for (int i = 1; i <= 2; ++i) {
                if (!ctx.has_input(i)) continue;
                const Tensor& b = ctx.input(i);
                if (b.dtype() != x.dtype())
                    return Status::error(ErrorCode::invalid_argument, i == 1 ? "min" : "max",
                                         " has type ", dtype_name(b.dtype()), ", expected ",
                                         dtype_name(x.dtype()));
                if (b.num_elements() != 1)
                    return Status::error(ErrorCode::invalid_argument, i == 1 ? "min" : "max",
                                         " must be a scalar, got shape ", b.shape().to_string());
            }
        }
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() {
            using C = compute_t<T>;
            C lo = std::numeric_limits<C>::lowest();
            C hi = std::numeric_limits<C>::max();
            if constexpr (std::is_floating_point_v<C>) {
                lo = -std::numeric_limits<C>::infinity();
                hi = std::numeric_limits<C>::infinity();
            }
            if (attrs_) {
                if constexpr (std::is_floating_point_v<C>) {
                    lo = static_cast<C>(lo_);
                    hi = static_cast<C>(hi_);
                } else {
                    lo = float_to_int<C>(lo_);
                    hi = float_to_int<C>(hi_);
                }
            } else {
                if (ctx.has_input(1)) lo = load(*ctx.input(1).data_unchecked<T>());
                if (ctx.has_input(2)) hi = load(*ctx.input(2).data_unchecked<T>());
            }
            const T* px = x.data_unchecked<T>();
            T* py = y.data_unchecked<T>();
            const std::int64_t n = x.num_elements();
            for (std::int64_t i = 0; i < n; ++i) {
                C v = load(px[i]);
                if (v < lo) v = lo;
                if (v > hi) v = hi;  // min > max gives max, like numpy.clip
                py[i] = store<T>(v);
            }
            return Status::ok();
        });
    }

private:
    bool attrs_;
    float lo_;
    float hi_;
};

StatusOr<std::unique_ptr<Kernel>> make_clip(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 1 || !ctx.has_input(0))
        return Status::error(ErrorCode::invalid_model, "input 'input' is missing");
    if (ctx.opset() < 11) {
        DSINFER_ASSIGN_OR_RETURN(float lo, ctx.node().attr_or<float>(
                                               "min", -std::numeric_limits<float>::infinity()));
        DSINFER_ASSIGN_OR_RETURN(float hi, ctx.node().attr_or<float>(
                                               "max", std::numeric_limits<float>::infinity()));
        return make_kernel<ClipKernel>(true, lo, hi);
    }
    if (ctx.num_inputs() < 1 || ctx.num_inputs() > 3)
        return Status::error(ErrorCode::invalid_model, "expected 1 to 3 inputs, got ",
                             ctx.num_inputs());
    return make_kernel<ClipKernel>(false, 0.f, 0.f);
}

}  // namespace

void register_elementwise_binary_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    r.add({"Add", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::add>);
    r.add({"Sub", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::sub>);
    r.add({"Mul", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::mul>);
    r.add({"Div", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::div>);
    r.add({"Pow", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::pow>);
    r.add({"Mod", "", 10, kMaxOpset, cpu}, &make_binary<BinOp::mod>);
    r.add({"BitShift", "", 11, kMaxOpset, cpu}, &make_binary<BinOp::shl>);
    r.add({"BitwiseAnd", "", 18, kMaxOpset, cpu}, &make_binary<BinOp::bit_and>);
    r.add({"BitwiseOr", "", 18, kMaxOpset, cpu}, &make_binary<BinOp::bit_or>);
    r.add({"BitwiseXor", "", 18, kMaxOpset, cpu}, &make_binary<BinOp::bit_xor>);
    r.add({"And", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::log_and>);
    r.add({"Or", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::log_or>);
    r.add({"Xor", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::log_xor>);
    r.add({"Equal", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::eq>);
    r.add({"Less", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::lt>);
    r.add({"LessOrEqual", "", 12, kMaxOpset, cpu}, &make_binary<BinOp::le>);
    r.add({"Greater", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::gt>);
    r.add({"GreaterOrEqual", "", 12, kMaxOpset, cpu}, &make_binary<BinOp::ge>);
    r.add({"PRelu", "", 1, kMaxOpset, cpu}, &make_binary<BinOp::prelu>);
    r.add({"SwiGLU", "", 28, kMaxOpset, cpu}, &make_binary<BinOp::swiglu>);
    r.add({"Max", "", 1, kMaxOpset, cpu}, &make_variadic<VarOp::max>);
    r.add({"Min", "", 1, kMaxOpset, cpu}, &make_variadic<VarOp::min>);
    r.add({"Sum", "", 1, kMaxOpset, cpu}, &make_variadic<VarOp::sum>);
    r.add({"Mean", "", 1, kMaxOpset, cpu}, &make_variadic<VarOp::mean>);
    r.add({"Where", "", 9, kMaxOpset, cpu}, &make_where);
    r.add({"Clip", "", 1, kMaxOpset, cpu}, &make_clip);
}

}  // namespace dsinfer::detail
