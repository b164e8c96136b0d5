// Backend-neutral op helpers shared by the kernels of every backend: dtype dispatch,
// float16/bfloat16 arithmetic through float, axis normalization, broadcasting, reading
// shape-like inputs.
// Not part of the public API (namespace dsinfer::detail).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"

namespace dsinfer::detail {

// ---- float16 / bfloat16 through float -------------------------------------------------------

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

/// The type arithmetic on T is done in: float for 16-bit floats, T otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
inline compute_t<T> load(T v) noexcept {
    if constexpr (is_half_v<T>) return static_cast<float>(v);
    else return v;
}
template <class T, class U>
inline T store(U v) noexcept {
    if constexpr (is_half_v<T>) return T(static_cast<float>(v));
    else return static_cast<T>(v);
}

// ---- dtype dispatch --------------------------------------------------------------------------

inline constexpr DTypeSet kFloatTypes{DType::f32, DType::f64, DType::f16, DType::bf16};
inline constexpr DTypeSet kIntTypes{DType::i8, DType::u8, DType::i16, DType::u16,
                                     DType::i32, DType::u32, DType::i64, DType::u64};
inline constexpr DTypeSet kNumericTypes{DType::f32, DType::f64, DType::f16, DType::bf16,
                                         DType::i8,  DType::u8,  DType::i16, DType::u16,
                                         DType::i32, DType::u32, DType::i64, DType::u64};
inline constexpr DTypeSet kAllTypes = DTypeSet::all();
inline constexpr DTypeSet kAllButStringTypes{
    DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i16,
    DType::u16, DType::i32, DType::u32, DType::i64, DType::u64, DType::boolean};

/// Calls `f.template operator()<T>()` with T the C++ type of `dt` if T is in the list; otherwise
/// returns unsupported naming the dtype. `f` must return Status. Only the listed types are
/// instantiated, so kernels never compile e.g. std::string arithmetic.
///   return dispatch_types(x.dtype(), FloatTypes{}, [&]<class T>() { ...; return Status::ok(); });
template <class... Ts>
struct TypeList {};

template <class... Ts, class F>
Status dispatch_types(DType dt, TypeList<Ts...>, F&& f) {
    // The error message is built only when no type matched: run() paths dispatch too, and
    // must not allocate on success.
    Status result;
    bool done = false;
    (void)((!done && dt == dtype_of<Ts>() ? (result = f.template operator()<Ts>(), done = true)
                                         : false) || ...);
    if (!done)
        return Status::error(ErrorCode::unsupported, "element type ", dtype_name(dt),
                             " is not supported");
    return result;
}

using FloatTypes = TypeList<float, double, float16, bfloat16>;
using IntTypes = TypeList<std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t,
                          std::uint32_t, std::int64_t, std::uint64_t>;
using NumericTypes = TypeList<float, double, float16, bfloat16, std::int8_t, std::uint8_t,
                              std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
                              std::int64_t, std::uint64_t>;
using PodTypes = TypeList<float, double, float16, bfloat16, std::int8_t, std::uint8_t,
                          std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,
                          std::uint64_t, bool>;
using AllTypes = TypeList<float, double, float16, bfloat16, std::int8_t, std::uint8_t,
                          std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,
                          std::uint64_t, bool, std::string>;

// ---- axes ------------------------------------------------------------------------------------

/// Maps axis in [-rank, rank) to [0, rank); invalid_model otherwise.
inline StatusOr<int> normalize_axis(std::int64_t axis, int rank, const char* what = "axis") {
    if (axis < -rank || axis >= rank)
        return Status::error(ErrorCode::invalid_model, what, " ", axis, " is outside [", -rank,
                             ", ", rank, ")");
    return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// ---- shapes and strides ----------------------------------------------------------------------

using Strides = std::array<std::int64_t, kMaxRank>;

/// Row-major element strides of a shape.
inline Strides contiguous_strides(const Shape& s) noexcept {
    Strides st{};
    std::int64_t acc = 1;
    for (int i = s.rank() - 1; i >= 0; --i) {
        st[static_cast<std::size_t>(i)] = acc;
        acc *= s[i];
    }
    return st;
}

/// Numpy-style multidirectional broadcast of two shapes.
inline StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
    const int rank = std::max(a.rank(), b.rank());
    Shape out;
    for (int i = 0; i < rank; ++i) {
        const int ia = i - (rank - a.rank());
        const int ib = i - (rank - b.rank());
        const std::int64_t da = ia >= 0 ? a[ia] : 1;
        const std::int64_t db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return Status::error(ErrorCode::invalid_argument, "shapes ", a.to_string(), " and ",
                                 b.to_string(), " cannot be broadcast (dim ", i, ": ", da,
                                 " vs ", db, ")");
        out.push_back(da == 1 ? db : da);
    }
    return out;
}

/// Strides (in elements) to read `in` while iterating over `out` (0 on broadcast dims).
/// `in` must be broadcastable to `out`.
inline Strides broadcast_strides(const Shape& in, const Shape& out) noexcept {
    Strides st{};
    const Strides cs = contiguous_strides(in);
    const int off = out.rank() - in.rank();
    for (int i = 0; i < out.rank(); ++i) {
        const int ii = i - off;
        st[static_cast<std::size_t>(i)] =
            (ii < 0 || in[ii] == 1) ? 0 : cs[static_cast<std::size_t>(ii)];
    }
    return st;
}

/// Iterates a multi-index over `shape` in row-major order, maintaining up to N linear offsets
/// (one per operand stride set). Call `f(offsets...)` once per element.
template <std::size_t N, class F>
void for_each_offset(const Shape& shape, const std::array<Strides, N>& strides, F&& f) {
    const std::int64_t total = shape.num_elements();
    if (total == 0) return;
    const int rank = shape.rank();
    std::array<std::int64_t, kMaxRank> idx{};
    std::array<std::int64_t, N> off{};
    for (std::int64_t e = 0; e < total; ++e) {
        f(off);
        for (int d = rank - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            ++idx[du];
            for (std::size_t k = 0; k < N; ++k) off[k] += strides[k][du];
            if (idx[du] < shape[d]) break;
            for (std::size_t k = 0; k < N; ++k) off[k] -= strides[k][du] * idx[du];
            idx[du] = 0;
        }
    }
}

/// Reads an integer tensor (int32 or int64, any shape) as int64 values.
inline StatusOr<std::vector<std::int64_t>> read_ints(const Tensor& t, const char* what) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(t.num_elements()));
    if (t.dtype() == DType::i64) {
        if (!v.empty()) std::memcpy(v.data(), t.raw_data(), v.size() * sizeof(std::int64_t));
    } else if (t.dtype() == DType::i32) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.data_unchecked<std::int32_t>()[i];
    } else {
        return Status::error(ErrorCode::invalid_model, what, " must be int32 or int64, got ",
                             dtype_name(t.dtype()));
    }
    return v;
}

/// Reads a scalar (or 1-element) numeric tensor as double.
inline StatusOr<double> read_scalar(const Tensor& t, const char* what) {
    if (t.num_elements() != 1)
        return Status::error(ErrorCode::invalid_argument, what, " must have exactly one element, got ",
                             t.num_elements());
    double out = 0;
    Status st = dispatch_types(t.dtype(), PodTypes{}, [&]<class T>() {
        out = static_cast<double>(load(*t.data_unchecked<T>()));
        return Status::ok();
    });
    if (!st.is_ok()) return st;
    return out;
}

/// The most elements a shape computed from tensor data (Reshape, Expand, Tile, ConstantOfShape,
/// Range, ...) may have: 2^40 (4 TiB of float) is beyond any real model, so larger outputs are
/// rejected when the shape is known (at load for constant inputs) instead of at allocation.
inline constexpr std::int64_t kMaxComputedElements = std::int64_t{1} << 40;

/// Builds a Shape from untrusted int64 dims: invalid_argument on negative dims, element-count
/// overflow, rank over kMaxRank or more than kMaxComputedElements elements (the executor reports
/// invalid_argument at load as invalid_model).
inline StatusOr<Shape> shape_from(std::span<const std::int64_t> dims) {
    auto s = Shape::make(dims);
    if (!s.is_ok()) return Status(ErrorCode::invalid_argument, s.status().message());
    if (s->num_elements() > kMaxComputedElements)
        return Status::error(ErrorCode::invalid_argument, "shape ", s->to_string(), " has ",
                             s->num_elements(), " elements, more than the limit of 2^40");
    return s;
}

/// For factories: inputs [0, n) are required (kernels read them by position): a node that
/// lacks one or omits it ("") is invalid_model.
inline Status require_inputs(const KernelCreateContext& ctx, int n) {
    for (int i = 0; i < n; ++i)
        DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_model, ctx.node().op_type,
                      " requires ", n, " inputs; input ", i, " is missing or omitted");
    return Status::ok();
}

/// Unique_ptr factory helper: `return make_kernel<MyKernel>(args...);`
template <class K, class... Args>
StatusOr<std::unique_ptr<Kernel>> make_kernel(Args&&... args) {
    return std::unique_ptr<Kernel>(std::make_unique<K>(std::forward<Args>(args)...));
}

}  // namespace dsinfer::detail
