// Reference CPU kernels (ai.onnx): Pad, CenterCropPad, ConstantOfShape, Range, CumSum,
// CumProd, Unique. Registered from tensor_ops.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <numeric>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"
#include "ops/pad.hpp"
#include "cpu/reference/groups.hpp"
#include "cpu/reference/tensor_common.hpp"

namespace dsinfer::detail {

void register_tensor_misc_kernels(KernelRegistry& r);

namespace {

using Factory = StatusOr<std::unique_ptr<Kernel>>;

// ---- Pad / CenterCropPad --------------------------------------------------------------------


/// Source coordinate for output coordinate `c` (already shifted by the begin pad) along a dim of
/// size n; -1 means "padding value".
inline std::int64_t pad_source(std::int64_t c, std::int64_t n, PadMode mode) noexcept {
    if (c >= 0 && c < n) return c;
    switch (mode) {
        case PadMode::constant: return -1;
        case PadMode::edge: return c < 0 ? 0 : n - 1;
        case PadMode::wrap: {
            const std::int64_t m = c % n;
            return m < 0 ? m + n : m;
        }
        case PadMode::reflect: {
            if (n == 1) return 0;
            const std::int64_t p = 2 * (n - 1);
            std::int64_t m = c % p;
            if (m < 0) m += p;
            return m >= n ? p - m : m;
        }
    }
    return -1;
}

/// out[idx] = in[idx - begin] (mapped per mode) or `value` where the source is padding.
template <class T>
void pad_copy(const TensorView& x, const TensorView& y, const std::array<std::int64_t, kMaxRank>& begin,
              PadMode mode, const T& value) noexcept {
    const int r = y.shape.rank();
    const Strides cs = contiguous_strides(x.shape);
    const T* in = x.data_unchecked<T>();
    T* out = y.data_unchecked<T>();
    const std::int64_t total = y.num_elements();
    std::array<std::int64_t, kMaxRank> idx{};
    for (std::int64_t e = 0; e < total; ++e) {
        std::int64_t off = 0;
        bool pad = false;
        for (int d = 0; d < r && !pad; ++d) {
            const auto du = static_cast<std::size_t>(d);
            const std::int64_t s = pad_source(idx[du] - begin[du], x.shape[d], mode);
            if (s < 0) pad = true;
            else off += s * cs[du];
        }
        out[e] = pad ? value : in[off];
        for (int d = r - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            if (++idx[du] < y.shape[d]) break;
            idx[du] = 0;
        }
    }
}

/// Writes `v` converted to `dt` into `bits` (numeric/bool types).
void scalar_bits(DType dt, double v, std::array<unsigned char, 8>& bits) noexcept {
    bits.fill(0);
    (void)dispatch_types(dt, PodTypes{}, [&]<class T>() {
        T t{};
        if constexpr (std::is_integral_v<T>) {
            if (std::isfinite(v)) t = static_cast<T>(v);
        } else {
            t = store<T>(v);
        }
        std::memcpy(bits.data(), &t, sizeof(T));
        return Status::ok();
    });
}

class PadKernel final : public Kernel {
public:
    PadKernel(std::int64_t opset, PadMode mode, std::vector<std::int64_t> attr_pads, float value)
        : opset_(opset), mode_(mode), attr_pads_(std::move(attr_pads)), value_(value) {}

    /// Begin pads and output shape from pads (and axes) given as views (opset >= 11) or
    /// the attribute.
    Status geometry(const Shape& in, const TensorView* pads, const TensorView* axes,
                    std::array<std::int64_t, kMaxRank>& begin, Shape& out) const {
        const int r = in.rank();
        std::array<std::int64_t, kMaxRank> end{};
        const std::int64_t np = pads ? pads->num_elements()
                                     : static_cast<std::int64_t>(attr_pads_.size());
        DSINFER_RETURN_IF_ERROR(pad_extents(
            r, np,
            [&](std::int64_t i) {
                return pads ? int_at(*pads, i) : attr_pads_[static_cast<std::size_t>(i)];
            },
            axes ? axes->num_elements() : r,
            [&](std::int64_t i) { return axes ? int_at(*axes, i) : i; }, begin, end));
        out = Shape{};
        for (int d = 0; d < r; ++d) {
            const auto du = static_cast<std::size_t>(d);
            const std::int64_t o = in[d] + begin[du] + end[du];
            if (o < 0)
                return Status::error(ErrorCode::invalid_argument, "pads ", begin[du], " and ",
                                     end[du], " on dim ", d, " of input shape ", in.to_string(),
                                     " give a negative size");
            if (in[d] == 0 && o > 0 && mode_ != PadMode::constant)
                return Status::error(ErrorCode::invalid_argument,
                                     "cannot pad an empty dim ", d,
                                     " in a non-constant mode");
            out.push_back(o);
        }
        return Status::ok();
    }

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (opset_ < 11) {
            std::array<std::int64_t, kMaxRank> begin{};
            Shape out;
            DSINFER_RETURN_IF_ERROR(geometry(x.shape(), nullptr, nullptr, begin, out));
            ctx.set_output(0, x.dtype(), out);
            return Status::ok();
        }
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "pads"));
        if (ctx.has_input(2)) {
            DSINFER_CHECK(ctx.input(2).dtype() == x.dtype() && ctx.input(2).num_elements() <= 1,
                          ErrorCode::invalid_argument,
                          "input 'constant_value' must be a scalar of the data type, got ",
                          dtype_name(ctx.input(2).dtype()), " ",
                          ctx.input(2).shape().to_string());
        }
        TensorView axes;
        const bool has_axes = ctx.has_input(3);
        if (has_axes) {
            if (!ctx.has_data(3)) return Status::ok();
            DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(3), "axes"));
            axes = ctx.input(3).view();
        }
        const TensorView pads = ctx.input(1).view();
        std::array<std::int64_t, kMaxRank> begin{};
        Shape out;
        DSINFER_RETURN_IF_ERROR(
            geometry(x.shape(), &pads, has_axes ? &axes : nullptr, begin, out));
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        std::array<std::int64_t, kMaxRank> begin{};
        Shape out;
        const bool v11 = opset_ >= 11;
        DSINFER_RETURN_IF_ERROR(geometry(x.shape, v11 ? &ctx.input(1) : nullptr,
                                         v11 && ctx.has_input(3) ? &ctx.input(3) : nullptr, begin,
                                         out));
        const bool has_value = v11 && ctx.has_input(2) && ctx.input(2).num_elements() == 1;
        std::array<unsigned char, 8> bits{};
        if (!v11 && x.dtype != DType::string) scalar_bits(x.dtype, value_, bits);
        return dispatch_storage(x.dtype, [&]<class T>() {
            T value{};
            if (has_value) {
                value = ctx.input(2).data_unchecked<T>()[0];
            } else if constexpr (!std::is_same_v<T, std::string>) {
                std::memcpy(&value, bits.data(), sizeof(T));
            }
            pad_copy<T>(x, y, begin, mode_, value);
            return Status::ok();
        });
    }

private:
    std::int64_t opset_;
    PadMode mode_;
    std::vector<std::int64_t> attr_pads_;
    float value_;
};

Factory make_pad(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(PadAttrs a, parse_pad_attrs(ctx));
    return make_kernel<PadKernel>(ctx.opset(), a.mode, std::move(a.pads), a.value);
}

class CenterCropPadKernel final : public Kernel {
public:
    explicit CenterCropPadKernel(std::vector<std::int64_t> axes) : axes_(std::move(axes)) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int r = x.num_dims();
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "shape"));
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(auto shape, read_ints(ctx.input(1), "shape"));
        std::vector<std::int64_t> axes = axes_;
        if (axes.empty())
            for (int d = 0; d < r; ++d) axes.push_back(d);
        DSINFER_CHECK(shape.size() == axes.size(), ErrorCode::invalid_argument,
                      "input 'shape' has ", shape.size(), " entries; expected ", axes.size());
        std::vector<std::int64_t> dims = x.shape().to_vector();
        std::vector<bool> seen(static_cast<std::size_t>(r), false);
        for (std::size_t i = 0; i < axes.size(); ++i) {
            DSINFER_ASSIGN_OR_RETURN(int a, normalize_axis(axes[i], r, "axes entry"));
            DSINFER_CHECK(!seen[static_cast<std::size_t>(a)], ErrorCode::invalid_model,
                          "axes contains axis ", axes[i], " twice");
            seen[static_cast<std::size_t>(a)] = true;
            DSINFER_CHECK(shape[i] >= 0, ErrorCode::invalid_argument, "input 'shape' holds ",
                          shape[i]);
            dims[static_cast<std::size_t>(a)] = shape[i];
        }
        DSINFER_ASSIGN_OR_RETURN(Shape out, shape_from(dims));
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        std::array<std::int64_t, kMaxRank> begin{};
        for (int d = 0; d < x.shape.rank(); ++d) {
            const std::int64_t in = x.shape[d], out = y.shape[d];
            begin[static_cast<std::size_t>(d)] = out >= in ? (out - in) / 2 : -((in - out) / 2);
        }
        return dispatch_storage(x.dtype, [&]<class T>() {
            pad_copy<T>(x, y, begin, PadMode::constant, T{});
            return Status::ok();
        });
    }

private:
    std::vector<std::int64_t> axes_;
};

Factory make_center_crop_pad(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(auto axes, ctx.node().attr_or<std::vector<std::int64_t>>(
                                            "axes", std::vector<std::int64_t>{}));
    return make_kernel<CenterCropPadKernel>(std::move(axes));
}

// ---- ConstantOfShape ------------------------------------------------------------------------

class ConstantOfShapeKernel final : public Kernel {
public:
    explicit ConstantOfShapeKernel(Tensor value) : value_(std::move(value)) {}
    Status prepare(PrepareContext& ctx) const override {
        if (!ctx.has_data(0)) return Status::ok();
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(0), "input"));
        DSINFER_CHECK(ctx.input(0).num_dims() == 1, ErrorCode::invalid_argument,
                      "input must be 1-D, got shape ", ctx.input(0).shape().to_string());
        DSINFER_ASSIGN_OR_RETURN(auto dims, read_ints(ctx.input(0), "input"));
        DSINFER_ASSIGN_OR_RETURN(Shape out, shape_from(dims));
        ctx.set_output(0, value_.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        return dispatch_storage(y.dtype, [&]<class T>() {
            // Storage type T may differ from the dtype: read through the raw pointer.
            const T v = static_cast<const T*>(value_.raw_data())[0];
            T* out = y.data_unchecked<T>();
            for (std::int64_t i = 0; i < y.num_elements(); ++i) out[i] = v;
            return Status::ok();
        });
    }

private:
    Tensor value_;
};

Factory make_constant_of_shape(const KernelCreateContext& ctx) {
    Tensor value;
    if (ctx.node().has_attr("value")) {
        DSINFER_ASSIGN_OR_RETURN(value, ctx.node().attr<Tensor>("value"));
        if (value.is_null() || value.num_elements() != 1)
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'value' must hold exactly one element");
    } else {
        value = Tensor::scalar(0.0f);
    }
    return make_kernel<ConstantOfShapeKernel>(std::move(value));
}

// ---- Range ----------------------------------------------------------------------------------

using RangeTypes = TypeList<float, double, float16, bfloat16, std::int16_t, std::int32_t,
                            std::int64_t>;

/// Number of Range elements, computed in T's arithmetic (exactly for integers).
template <class T>
StatusOr<std::int64_t> range_count(T start, T limit, T delta) {
    if constexpr (std::is_integral_v<T>) {
        const auto s = static_cast<std::int64_t>(start), l = static_cast<std::int64_t>(limit),
                   d = static_cast<std::int64_t>(delta);
        if (d == 0) return Status::error(ErrorCode::invalid_argument, "input 'delta' is 0");
        if ((d > 0 && l <= s) || (d < 0 && l >= s)) return std::int64_t{0};
        // Unsigned: the distance and |delta| always fit in uint64.
        const std::uint64_t dist = d > 0 ? static_cast<std::uint64_t>(l) - static_cast<std::uint64_t>(s)
                                         : static_cast<std::uint64_t>(s) - static_cast<std::uint64_t>(l);
        const std::uint64_t step = d > 0 ? static_cast<std::uint64_t>(d)
                                         : std::uint64_t{0} - static_cast<std::uint64_t>(d);
        const std::uint64_t n = dist / step + (dist % step != 0 ? 1 : 0);
        if (n > (std::uint64_t{1} << 40))
            return Status::error(ErrorCode::invalid_argument, "Range of start ", s, ", limit ", l,
                                 ", delta ", d, " has too many elements");
        return static_cast<std::int64_t>(n);
    } else {
        const double s = load(start), l = load(limit), d = load(delta);
        if (d == 0) return Status::error(ErrorCode::invalid_argument, "input 'delta' is 0");
        const double n = std::ceil((l - s) / d);
        if (std::isnan(n))
            return Status::error(ErrorCode::invalid_argument,
                                 "Range of start ", s, ", limit ", l, ", delta ", d,
                                 " is undefined (NaN)");
        if (n <= 0) return std::int64_t{0};
        if (n > 1e12)
            return Status::error(ErrorCode::invalid_argument, "Range of start ", s, ", limit ", l,
                                 ", delta ", d, " has too many elements");
        return static_cast<std::int64_t>(n);
    }
}

class RangeKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const DType dt = ctx.input(0).dtype();
        for (int i = 0; i < 3; ++i) {
            DSINFER_CHECK(ctx.input(i).dtype() == dt && ctx.input(i).num_elements() == 1,
                          ErrorCode::invalid_argument, "input ", i,
                          " must be a scalar of the same type as 'start'");
        }
        for (int i = 0; i < 3; ++i)
            if (!ctx.has_data(i)) return Status::ok();
        return dispatch_types(dt, RangeTypes{}, [&]<class T>() -> Status {
            DSINFER_ASSIGN_OR_RETURN(
                std::int64_t n, range_count<T>(ctx.input(0).data_unchecked<T>()[0],
                                               ctx.input(1).data_unchecked<T>()[0],
                                               ctx.input(2).data_unchecked<T>()[0]));
            ctx.set_output(0, dt, Shape{n});
            return Status::ok();
        });
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        return dispatch_types(y.dtype, RangeTypes{}, [&]<class T>() {
            const T start = ctx.input(0).data_unchecked<T>()[0];
            const T delta = ctx.input(2).data_unchecked<T>()[0];
            T* out = y.data_unchecked<T>();
            for (std::int64_t i = 0; i < y.num_elements(); ++i) {
                if constexpr (std::is_integral_v<T>)
                    out[i] = static_cast<T>(static_cast<std::uint64_t>(start) +
                                            static_cast<std::uint64_t>(i) *
                                                static_cast<std::uint64_t>(delta));
                else
                    out[i] = store<T>(static_cast<double>(load(start)) +
                                      static_cast<double>(i) * static_cast<double>(load(delta)));
            }
            return Status::ok();
        });
    }
};

Factory make_range(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    return make_kernel<RangeKernel>();
}

// ---- CumSum / CumProd -----------------------------------------------------------------------

class CumKernel final : public Kernel {
public:
    CumKernel(bool product, bool exclusive, bool reverse)
        : product_(product), exclusive_(exclusive), reverse_(reverse) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "axis"));
        DSINFER_CHECK(ctx.input(1).num_elements() == 1, ErrorCode::invalid_argument,
                      "input 'axis' must be a scalar, got shape ",
                      ctx.input(1).shape().to_string());
        DSINFER_CHECK(x.num_dims() >= 1, ErrorCode::invalid_argument,
                      "input 'x' must have rank >= 1");
        if (ctx.has_data(1)) {
            const std::int64_t a = int_at(ctx.input(1).view(), 0);
            DSINFER_CHECK(a >= -x.num_dims() && a < x.num_dims(), ErrorCode::invalid_argument,
                          "input 'axis' is ", a, ", outside [", -x.num_dims(), ", ",
                          x.num_dims(), ")");
        }
        DSINFER_RETURN_IF_ERROR(dispatch_types(x.dtype(), NumericTypes{},
                                               [&]<class T>() { return Status::ok(); }));
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int r = x.shape.rank();
        std::int64_t a = int_at(ctx.input(1), 0);
        if (a < -r || a >= r)
            return Status::error(ErrorCode::invalid_argument, "input 'axis' is ", a,
                                 ", outside [", -r, ", ", r, ")");
        if (a < 0) a += r;
        const int axis = static_cast<int>(a);
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t dim = x.shape[axis];
        const std::int64_t inner = x.shape.size_between(axis + 1, r);
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() {
            using C = compute_t<T>;
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for (std::int64_t o = 0; o < outer; ++o)
                for (std::int64_t i = 0; i < inner; ++i) {
                    C acc = product_ ? C(1) : C(0);
                    for (std::int64_t s = 0; s < dim; ++s) {
                        const std::int64_t j = reverse_ ? dim - 1 - s : s;
                        const std::int64_t e = (o * dim + j) * inner + i;
                        const C v = load(in[e]);
                        if (exclusive_) out[e] = store<T>(acc);
                        if constexpr (std::is_integral_v<C>) {
                            // Integers wrap instead of overflowing (signed overflow is UB).
                            const auto ua = static_cast<std::uint64_t>(acc);
                            const auto uv = static_cast<std::uint64_t>(v);
                            acc = static_cast<C>(product_ ? ua * uv : ua + uv);
                        } else {
                            acc = product_ ? static_cast<C>(acc * v) : static_cast<C>(acc + v);
                        }
                        if (!exclusive_) out[e] = store<T>(acc);
                    }
                }
            return Status::ok();
        });
    }

private:
    bool product_, exclusive_, reverse_;
};

template <bool Product>
Factory make_cum(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t ex, ctx.node().attr_or<std::int64_t>("exclusive", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t rev, ctx.node().attr_or<std::int64_t>("reverse", 0));
    return make_kernel<CumKernel>(Product, ex != 0, rev != 0);
}

// ---- Unique ---------------------------------------------------------------------------------

/// Total order on values: NaNs sort last and compare equal to each other.
template <class T>
inline int compare_values(const T& a, const T& b) noexcept {
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> ||
                  std::is_integral_v<T>) {
        return a < b ? -1 : (b < a ? 1 : 0);
    } else {
        const double x = static_cast<double>(load(a)), y = static_cast<double>(load(b));
        const bool nx = std::isnan(x), ny = std::isnan(y);
        if (nx || ny) return nx == ny ? 0 : (nx ? 1 : -1);
        return x < y ? -1 : (y < x ? 1 : 0);
    }
}

/// Groups the n slices of x (viewed as [outer, n, inner]) into distinct values. `ws` holds
/// 6n int64: perm, group-of-slice, group-first, group-count, output-order, group-position.
/// Returns the number of groups G; the first G entries of order give the group at each output
/// position, pos[g] the output position of group g.
template <class T>
std::int64_t unique_core(const T* x, std::int64_t outer, std::int64_t n, std::int64_t inner,
                         bool sorted, std::int64_t* ws) noexcept {
    std::int64_t* perm = ws;
    std::int64_t* grp = ws + n;
    std::int64_t* first = ws + 2 * n;
    std::int64_t* cnt = ws + 3 * n;
    std::int64_t* order = ws + 4 * n;
    std::int64_t* pos = ws + 5 * n;
    auto cmp = [&](std::int64_t a, std::int64_t b) {
        for (std::int64_t o = 0; o < outer; ++o)
            for (std::int64_t i = 0; i < inner; ++i) {
                const int c = compare_values(x[(o * n + a) * inner + i], x[(o * n + b) * inner + i]);
                if (c != 0) return c;
            }
        return 0;
    };
    for (std::int64_t i = 0; i < n; ++i) perm[i] = i;
    // Ties broken by index: a strict total order, so std::sort is deterministic and puts each
    // group's first occurrence first.
    std::sort(perm, perm + n, [&](std::int64_t a, std::int64_t b) {
        const int c = cmp(a, b);
        return c < 0 || (c == 0 && a < b);
    });
    std::int64_t g = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        if (i == 0 || cmp(perm[i - 1], perm[i]) != 0) {
            first[g] = perm[i];
            cnt[g] = 0;
            ++g;
        }
        grp[perm[i]] = g - 1;
        ++cnt[g - 1];
    }
    for (std::int64_t j = 0; j < g; ++j) order[j] = j;
    if (!sorted)
        std::sort(order, order + g, [&](std::int64_t a, std::int64_t b) {
            return first[a] < first[b];
        });
    for (std::int64_t j = 0; j < g; ++j) pos[order[j]] = j;
    return g;
}

class UniqueKernel final : public Kernel {
public:
    UniqueKernel(bool sorted, std::optional<std::int64_t> axis) : sorted_(sorted), axis_(axis) {}

    void geometry(const Shape& s, std::int64_t& outer, std::int64_t& n, std::int64_t& inner,
                  int& axis) const noexcept {
        if (!axis_) {
            outer = 1;
            n = s.num_elements();
            inner = 1;
            axis = -1;
            return;
        }
        axis = static_cast<int>(*axis_ < 0 ? *axis_ + s.rank() : *axis_);
        outer = s.size_between(0, axis);
        n = s[axis];
        inner = s.size_between(axis + 1, s.rank());
    }

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (axis_) DSINFER_RETURN_IF_ERROR(normalize_axis(*axis_, x.num_dims()).status());
        std::int64_t outer = 0, n = 0, inner = 0;
        int axis = -1;
        geometry(x.shape(), outer, n, inner, axis);
        if (!ctx.has_data(0)) return Status::ok();
        std::vector<std::int64_t> ws(static_cast<std::size_t>(6 * n));
        std::int64_t g = 0;
        DSINFER_RETURN_IF_ERROR(dispatch_types(x.dtype(), AllTypes{}, [&]<class T>() {
            g = unique_core(x.data_unchecked<T>(), outer, n, inner, sorted_, ws.data());
            return Status::ok();
        }));
        Shape y;
        if (axis < 0) {
            y.push_back(g);
        } else {
            y = x.shape();
            y[axis] = g;
        }
        ctx.set_output(0, x.dtype(), y);
        ctx.set_output(1, DType::i64, Shape{g});
        ctx.set_output(2, DType::i64, Shape{n});
        ctx.set_output(3, DType::i64, Shape{g});
        ctx.set_workspace(static_cast<std::size_t>(6 * n) * sizeof(std::int64_t));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        std::int64_t outer = 0, n = 0, inner = 0;
        int axis = -1;
        geometry(x.shape, outer, n, inner, axis);
        if (ctx.workspace_bytes() < static_cast<std::size_t>(6 * n) * sizeof(std::int64_t))
            return Status(ErrorCode::internal, "Unique: workspace too small");
        auto* ws = static_cast<std::int64_t*>(ctx.workspace());
        return dispatch_types(x.dtype, AllTypes{}, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            const std::int64_t g = unique_core(in, outer, n, inner, sorted_, ws);
            const std::int64_t* grp = ws + n;
            const std::int64_t* first = ws + 2 * n;
            const std::int64_t* cnt = ws + 3 * n;
            const std::int64_t* order = ws + 4 * n;
            const std::int64_t* pos = ws + 5 * n;
            const TensorView& y = ctx.output(0);
            if (y.shape.rank() != (axis < 0 ? 1 : x.shape.rank()) ||
                y.shape[axis < 0 ? 0 : axis] != g)
                return Status(ErrorCode::internal, "Unique: output shape changed since prepare");
            T* out = y.data_unchecked<T>();
            for (std::int64_t o = 0; o < outer; ++o)
                for (std::int64_t j = 0; j < g; ++j)
                    for (std::int64_t i = 0; i < inner; ++i)
                        out[(o * g + j) * inner + i] = in[(o * n + first[order[j]]) * inner + i];
            if (ctx.has_output(1))
                for (std::int64_t j = 0; j < g; ++j)
                    ctx.output(1).data_unchecked<std::int64_t>()[j] = first[order[j]];
            if (ctx.has_output(2))
                for (std::int64_t i = 0; i < n; ++i)
                    ctx.output(2).data_unchecked<std::int64_t>()[i] = pos[grp[i]];
            if (ctx.has_output(3))
                for (std::int64_t j = 0; j < g; ++j)
                    ctx.output(3).data_unchecked<std::int64_t>()[j] = cnt[order[j]];
            return Status::ok();
        });
    }

private:
    bool sorted_;
    std::optional<std::int64_t> axis_;
};

Factory make_unique_op(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t sorted, ctx.node().attr_or<std::int64_t>("sorted", 1));
    std::optional<std::int64_t> axis;
    if (ctx.node().has_attr("axis")) {
        DSINFER_ASSIGN_OR_RETURN(std::int64_t a, ctx.node().attr<std::int64_t>("axis"));
        axis = a;
    }
    return make_kernel<UniqueKernel>(sorted != 0, axis);
}

}  // namespace

void register_tensor_misc_kernels(KernelRegistry& r) {
    r.add({"Pad", "", 1, kMaxOpset, DeviceKind::cpu}, &make_pad);
    r.add({"CenterCropPad", "", 18, kMaxOpset, DeviceKind::cpu}, &make_center_crop_pad);
    r.add({"ConstantOfShape", "", 9, kMaxOpset, DeviceKind::cpu}, &make_constant_of_shape);
    r.add({"Range", "", 11, kMaxOpset, DeviceKind::cpu}, &make_range);
    r.add({"CumSum", "", 11, kMaxOpset, DeviceKind::cpu}, &make_cum<false>);
    r.add({"CumProd", "", 26, kMaxOpset, DeviceKind::cpu}, &make_cum<true>);
    r.add({"Unique", "", 11, kMaxOpset, DeviceKind::cpu}, &make_unique_op);
}

}  // namespace dsinfer::detail
