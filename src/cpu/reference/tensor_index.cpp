// Reference CPU kernels for indexing ops (ai.onnx): Gather, GatherElements, GatherND,
// ScatterElements, Scatter (deprecated alias), ScatterND, OneHot, Compress, NonZero,
// ReverseSequence, TensorScatter, Trilu, EyeLike. Registered from tensor_ops.cpp.
//
// Index values come from run-time data: each one is range-checked (negative values wrap once
// per the spec) before it is used, and an out-of-range index is an invalid_argument naming
// the input, never an out-of-bounds access.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"
#include "cpu/reference/tensor_common.hpp"

namespace dsinfer::detail {

void register_tensor_index_kernels(KernelRegistry& r);

namespace {

using Factory = StatusOr<std::unique_ptr<Kernel>>;

/// Wraps a negative index once and checks it against [0, dim).
inline bool wrap_index(std::int64_t& idx, std::int64_t dim) noexcept {
    if (idx < 0) idx += dim;
    return idx >= 0 && idx < dim;
}

Status index_error(const char* input, std::int64_t value, std::int64_t dim) {
    return Status::error(ErrorCode::invalid_argument, "input '", input, "' holds index ", value,
                         ", outside [", -dim, ", ", dim - 1, "]");
}

/// Checks constant indices once at load (run() checks data-dependent ones): element j must lie
/// in [-dim(j), dim(j)).
template <class DimOf>
Status check_constant_indices(const PrepareContext& ctx, int input, const char* name,
                              DimOf&& dim_of) {
    if (!ctx.inferring() || !ctx.has_data(input)) return Status::ok();
    const TensorView iv = ctx.input(input).view();
    for (std::int64_t j = 0; j < iv.num_elements(); ++j) {
        std::int64_t idx = int_at(iv, j);
        const std::int64_t dim = dim_of(j);
        if (!wrap_index(idx, dim)) return index_error(name, int_at(iv, j), dim);
    }
    return Status::ok();
}

/// Calls f(idx, linear) for every multi-index of `s` in row-major order.
template <class F>
void for_each_index(const Shape& s, F&& f) {
    const std::int64_t total = s.num_elements();
    std::array<std::int64_t, kMaxRank> idx{};
    for (std::int64_t e = 0; e < total; ++e) {
        f(idx, e);
        for (int d = s.rank() - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            if (++idx[du] < s[d]) break;
            idx[du] = 0;
        }
    }
}


enum class Reduction { none, add, mul, max, min };

StatusOr<Reduction> read_reduction(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::string s,
                             ctx.node().attr_or<std::string>("reduction", std::string("none")));
    if (s == "none") return Reduction::none;
    if (s == "add" && ctx.opset() >= 16) return Reduction::add;
    if (s == "mul" && ctx.opset() >= 16) return Reduction::mul;
    if (s == "max" && ctx.opset() >= 18) return Reduction::max;
    if (s == "min" && ctx.opset() >= 18) return Reduction::min;
    return Status::error(ErrorCode::invalid_model, "attribute 'reduction' '", s,
                         "' is not valid at opset ", ctx.opset());
}

/// a+b / a*b; integers wrap modulo 2^bits instead of overflowing (signed overflow is UB).
template <class T>
inline T wrapping_add(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    else return store<T>(load(a) + load(b));
}
template <class T>
inline T wrapping_mul(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
    else return store<T>(load(a) * load(b));
}

template <class T>
inline void reduce_into(T& dst, const T& src, Reduction red) noexcept {
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
        dst = src;
        (void)red;
    } else {
        switch (red) {
            case Reduction::none: dst = src; break;
            case Reduction::add: dst = wrapping_add(dst, src); break;
            case Reduction::mul: dst = wrapping_mul(dst, src); break;
            case Reduction::max: dst = load(src) > load(dst) ? src : dst; break;
            case Reduction::min: dst = load(src) < load(dst) ? src : dst; break;
        }
    }
}

/// Dispatch for scatter: storage types without reduction, numeric types with one.
template <class F>
Status dispatch_scatter(DType dt, Reduction red, F&& f) {
    if (red == Reduction::none) return dispatch_storage(dt, f);
    return dispatch_types(dt, NumericTypes{}, f);
}

// ---- Gather ---------------------------------------------------------------------------------

class GatherKernel final : public Kernel {
public:
    explicit GatherKernel(std::int64_t axis) : axis_(axis) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& ind = ctx.input(1);
        DSINFER_CHECK(x.num_dims() >= 1, ErrorCode::invalid_argument,
                      "input 'data' must have rank >= 1");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, x.num_dims()));
        DSINFER_RETURN_IF_ERROR(check_int_input(ind, "indices"));
        const int out_rank = x.num_dims() - 1 + ind.num_dims();
        DSINFER_CHECK(out_rank <= kMaxRank, ErrorCode::unsupported, "output rank ", out_rank,
                      " exceeds the maximum rank ", kMaxRank);
        Shape out;
        for (int d = 0; d < axis; ++d) out.push_back(x.shape()[d]);
        for (int d = 0; d < ind.num_dims(); ++d) out.push_back(ind.shape()[d]);
        for (int d = axis + 1; d < x.num_dims(); ++d) out.push_back(x.shape()[d]);
        // Constant indices are checked once at load (run() checks data-dependent ones).
        if (ctx.inferring() && ctx.has_data(1)) {
            const TensorView iv = ind.view();
            const std::int64_t dim = x.shape()[axis];
            for (std::int64_t j = 0; j < iv.num_elements(); ++j) {
                std::int64_t idx = int_at(iv, j);
                if (!wrap_index(idx, dim)) return index_error("indices", int_at(iv, j), dim);
            }
        }
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const int r = x.shape.rank();
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t dim = x.shape[axis];
        const std::int64_t inner = x.shape.size_between(axis + 1, r);
        const std::int64_t n = ind.num_elements();
        for (std::int64_t j = 0; j < n; ++j) {
            std::int64_t idx = int_at(ind, j);
            if (!wrap_index(idx, dim)) return index_error("indices", int_at(ind, j), dim);
        }
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for (std::int64_t o = 0; o < outer; ++o)
                for (std::int64_t j = 0; j < n; ++j) {
                    std::int64_t idx = int_at(ind, j);
                    wrap_index(idx, dim);
                    copy_elems(in + (o * dim + idx) * inner, inner, out + (o * n + j) * inner);
                }
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
};

Factory make_gather(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    return make_kernel<GatherKernel>(axis);
}

// ---- GatherElements / ScatterElements -------------------------------------------------------

/// Checks data/indices(/updates) shapes for the *Elements ops.
Status check_elements_shapes(const Tensor& x, const Tensor& ind, int axis) {
    DSINFER_RETURN_IF_ERROR(check_int_input(ind, "indices"));
    DSINFER_CHECK(ind.num_dims() == x.num_dims(), ErrorCode::invalid_argument,
                  "input 'indices' has shape ", ind.shape().to_string(), " but 'data' has ",
                  x.shape().to_string(), " (ranks must match)");
    for (int d = 0; d < x.num_dims(); ++d)
        DSINFER_CHECK(d == axis || ind.shape()[d] <= x.shape()[d], ErrorCode::invalid_argument,
                      "input 'indices' has shape ", ind.shape().to_string(),
                      ", larger than 'data' ", x.shape().to_string(), " at dim ", d);
    return Status::ok();
}

class GatherElementsKernel final : public Kernel {
public:
    explicit GatherElementsKernel(std::int64_t axis) : axis_(axis) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() >= 1, ErrorCode::invalid_argument,
                      "input 'data' must have rank >= 1");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, x.num_dims()));
        DSINFER_RETURN_IF_ERROR(check_elements_shapes(x, ctx.input(1), axis));
        DSINFER_RETURN_IF_ERROR(check_constant_indices(
            ctx, 1, "indices", [&](std::int64_t) { return x.shape()[axis]; }));
        ctx.set_output(0, x.dtype(), ctx.input(1).shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const int r = x.shape.rank();
        const auto axis = static_cast<std::size_t>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t dim = x.shape[static_cast<int>(axis)];
        const Strides cs = contiguous_strides(x.shape);
        for (std::int64_t j = 0; j < ind.num_elements(); ++j) {
            std::int64_t idx = int_at(ind, j);
            if (!wrap_index(idx, dim)) return index_error("indices", int_at(ind, j), dim);
        }
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for_each_index(ind.shape, [&](const auto& idx, std::int64_t e) {
                std::int64_t off = 0;
                for (std::size_t d = 0; d < static_cast<std::size_t>(r); ++d)
                    if (d != axis) off += idx[d] * cs[d];
                std::int64_t k = int_at(ind, e);
                wrap_index(k, dim);
                out[e] = in[off + k * cs[axis]];
            });
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
};

Factory make_gather_elements(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    return make_kernel<GatherElementsKernel>(axis);
}

class ScatterElementsKernel final : public Kernel {
public:
    ScatterElementsKernel(std::int64_t axis, Reduction red) : axis_(axis), red_(red) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() >= 1, ErrorCode::invalid_argument,
                      "input 'data' must have rank >= 1");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, x.num_dims()));
        DSINFER_RETURN_IF_ERROR(check_elements_shapes(x, ctx.input(1), axis));
        const Tensor& upd = ctx.input(2);
        DSINFER_CHECK(upd.shape() == ctx.input(1).shape(), ErrorCode::invalid_argument,
                      "input 'updates' has shape ", upd.shape().to_string(), ", 'indices' has ",
                      ctx.input(1).shape().to_string(), " (must match)");
        DSINFER_CHECK(upd.dtype() == x.dtype(), ErrorCode::invalid_argument,
                      "input 'updates' has dtype ", dtype_name(upd.dtype()), ", 'data' has ",
                      dtype_name(x.dtype()));
        DSINFER_RETURN_IF_ERROR(check_constant_indices(
            ctx, 1, "indices", [&](std::int64_t) { return x.shape()[axis]; }));
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const TensorView& upd = ctx.input(2);
        const int r = x.shape.rank();
        const auto axis = static_cast<std::size_t>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t dim = x.shape[static_cast<int>(axis)];
        const Strides cs = contiguous_strides(x.shape);
        for (std::int64_t j = 0; j < ind.num_elements(); ++j) {
            std::int64_t idx = int_at(ind, j);
            if (!wrap_index(idx, dim)) return index_error("indices", int_at(ind, j), dim);
        }
        DSINFER_RETURN_IF_ERROR(copy_all(x, ctx.output(0)));
        return dispatch_scatter(x.dtype, red_, [&]<class T>() {
            T* out = ctx.output(0).data_unchecked<T>();
            const T* u = upd.data_unchecked<T>();
            for_each_index(ind.shape, [&](const auto& idx, std::int64_t e) {
                std::int64_t off = 0;
                for (std::size_t d = 0; d < static_cast<std::size_t>(r); ++d)
                    if (d != axis) off += idx[d] * cs[d];
                std::int64_t k = int_at(ind, e);
                wrap_index(k, dim);
                reduce_into(out[off + k * cs[axis]], u[e], red_);
            });
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
    Reduction red_;
};

Factory make_scatter_elements(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    DSINFER_ASSIGN_OR_RETURN(Reduction red, read_reduction(ctx));
    return make_kernel<ScatterElementsKernel>(axis, red);
}

// ---- GatherND / ScatterND -------------------------------------------------------------------

class GatherNDKernel final : public Kernel {
public:
    explicit GatherNDKernel(std::int64_t batch_dims) : b_(batch_dims) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& ind = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(check_int_input(ind, "indices"));
        const int r = x.num_dims(), q = ind.num_dims();
        const int b = static_cast<int>(b_);
        DSINFER_CHECK(r >= 1 && q >= 1, ErrorCode::invalid_argument,
                      "inputs 'data' and 'indices' must have rank >= 1");
        DSINFER_CHECK(b < std::min(r, q), ErrorCode::invalid_model, "attribute 'batch_dims' ", b,
                      " must be less than both input ranks (", r, ", ", q, ")");
        const std::int64_t m = ind.shape()[q - 1];
        DSINFER_CHECK(m >= 1 && m <= r - b, ErrorCode::invalid_argument,
                      "the last dim of 'indices' is ", m, "; expected 1..", r - b);
        for (int d = 0; d < b; ++d)
            DSINFER_CHECK(ind.shape()[d] == x.shape()[d], ErrorCode::invalid_argument,
                          "batch dim ", d, " differs: 'indices' ", ind.shape().to_string(),
                          ", 'data' ", x.shape().to_string());
        DSINFER_RETURN_IF_ERROR(check_constant_indices(ctx, 1, "indices", [&](std::int64_t j) {
            return x.shape()[b + static_cast<int>(j % m)];
        }));
        Shape out;
        for (int d = 0; d < q - 1; ++d) out.push_back(ind.shape()[d]);
        for (int d = b + static_cast<int>(m); d < r; ++d) out.push_back(x.shape()[d]);
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const int r = x.shape.rank(), q = ind.shape.rank();
        const int b = static_cast<int>(b_);
        const int m = static_cast<int>(ind.shape[q - 1]);
        const std::int64_t batches = x.shape.size_between(0, b);
        const std::int64_t batch_stride = x.shape.size_between(b, r);
        const std::int64_t per_batch = ind.shape.size_between(b, q - 1);
        const std::int64_t slice = x.shape.size_between(b + m, r);
        const Strides cs = contiguous_strides(x.shape);
        for (std::int64_t j = 0; j < ind.num_elements(); ++j) {
            const std::int64_t dim = x.shape[b + static_cast<int>(j % m)];
            std::int64_t idx = int_at(ind, j);
            if (!wrap_index(idx, dim)) return index_error("indices", int_at(ind, j), dim);
        }
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for (std::int64_t bt = 0; bt < batches; ++bt)
                for (std::int64_t t = 0; t < per_batch; ++t) {
                    const std::int64_t tuple = bt * per_batch + t;
                    std::int64_t off = bt * batch_stride;
                    for (int k = 0; k < m; ++k) {
                        std::int64_t idx = int_at(ind, tuple * m + k);
                        wrap_index(idx, x.shape[b + k]);
                        off += idx * cs[static_cast<std::size_t>(b + k)];
                    }
                    copy_elems(in + off, slice, out + tuple * slice);
                }
            return Status::ok();
        });
    }

private:
    std::int64_t b_;
};

Factory make_gather_nd(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 2, ErrorCode::invalid_model, "GatherND takes 2 inputs, got ",
                  ctx.num_inputs());
    DSINFER_ASSIGN_OR_RETURN(std::int64_t b, ctx.node().attr_or<std::int64_t>("batch_dims", 0));
    if (b < 0)
        return Status::error(ErrorCode::invalid_model, "attribute 'batch_dims' is negative (", b,
                             ")");
    return make_kernel<GatherNDKernel>(b);
}

class ScatterNDKernel final : public Kernel {
public:
    explicit ScatterNDKernel(Reduction red) : red_(red) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& ind = ctx.input(1);
        const Tensor& upd = ctx.input(2);
        DSINFER_RETURN_IF_ERROR(check_int_input(ind, "indices"));
        const int r = x.num_dims(), q = ind.num_dims();
        DSINFER_CHECK(r >= 1 && q >= 1, ErrorCode::invalid_argument,
                      "inputs 'data' and 'indices' must have rank >= 1");
        const std::int64_t k = ind.shape()[q - 1];
        DSINFER_CHECK(k >= 1 && k <= r, ErrorCode::invalid_argument,
                      "the last dim of 'indices' is ", k, "; expected 1..", r);
        Shape expect;
        for (int d = 0; d < q - 1; ++d) expect.push_back(ind.shape()[d]);
        for (int d = static_cast<int>(k); d < r; ++d) expect.push_back(x.shape()[d]);
        DSINFER_CHECK(upd.shape() == expect, ErrorCode::invalid_argument,
                      "input 'updates' has shape ", upd.shape().to_string(), "; expected ",
                      expect.to_string());
        DSINFER_CHECK(upd.dtype() == x.dtype(), ErrorCode::invalid_argument,
                      "input 'updates' has dtype ", dtype_name(upd.dtype()), ", 'data' has ",
                      dtype_name(x.dtype()));
        DSINFER_RETURN_IF_ERROR(check_constant_indices(ctx, 1, "indices", [&](std::int64_t j) {
            return x.shape()[static_cast<int>(j % k)];
        }));
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const TensorView& upd = ctx.input(2);
        const int r = x.shape.rank(), q = ind.shape.rank();
        const int k = static_cast<int>(ind.shape[q - 1]);
        const std::int64_t tuples = ind.shape.size_between(0, q - 1);
        const std::int64_t slice = x.shape.size_between(k, r);
        const Strides cs = contiguous_strides(x.shape);
        for (std::int64_t j = 0; j < ind.num_elements(); ++j) {
            const std::int64_t dim = x.shape[static_cast<int>(j % k)];
            std::int64_t idx = int_at(ind, j);
            if (!wrap_index(idx, dim)) return index_error("indices", int_at(ind, j), dim);
        }
        DSINFER_RETURN_IF_ERROR(copy_all(x, ctx.output(0)));
        return dispatch_scatter(x.dtype, red_, [&]<class T>() {
            T* out = ctx.output(0).data_unchecked<T>();
            const T* u = upd.data_unchecked<T>();
            for (std::int64_t t = 0; t < tuples; ++t) {
                std::int64_t off = 0;
                for (int d = 0; d < k; ++d) {
                    std::int64_t idx = int_at(ind, t * k + d);
                    wrap_index(idx, x.shape[d]);
                    off += idx * cs[static_cast<std::size_t>(d)];
                }
                for (std::int64_t e = 0; e < slice; ++e)
                    reduce_into(out[off + e], u[t * slice + e], red_);
            }
            return Status::ok();
        });
    }

private:
    Reduction red_;
};

Factory make_scatter_nd(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    DSINFER_ASSIGN_OR_RETURN(Reduction red, read_reduction(ctx));
    return make_kernel<ScatterNDKernel>(red);
}

// ---- OneHot ---------------------------------------------------------------------------------

/// Depth as a non-negative integer (invalid_argument for NaN, negative or huge values).
StatusOr<std::int64_t> onehot_depth(double d) {
    if (!(d >= 0) || d > 1e15)
        return Status::error(ErrorCode::invalid_argument, "input 'depth' is ", d,
                             "; expected a non-negative integer");
    return static_cast<std::int64_t>(d);
}

class OneHotKernel final : public Kernel {
public:
    explicit OneHotKernel(std::int64_t axis) : axis_(axis) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& ind = ctx.input(0);
        const Tensor& vals = ctx.input(2);
        DSINFER_CHECK(vals.num_elements() == 2, ErrorCode::invalid_argument,
                      "input 'values' must have 2 elements [off, on], got shape ",
                      vals.shape().to_string());
        DSINFER_CHECK(ind.dtype() != DType::string, ErrorCode::invalid_argument,
                      "input 'indices' must be numeric");
        const int r = ind.num_dims() + 1;
        DSINFER_CHECK(r <= kMaxRank, ErrorCode::unsupported, "output rank ", r,
                      " exceeds the maximum rank ", kMaxRank);
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, r));
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(double dv, read_scalar(ctx.input(1), "depth"));
        DSINFER_ASSIGN_OR_RETURN(std::int64_t depth, onehot_depth(dv));
        Shape out;
        for (int d = 0, k = 0; d < r; ++d) out.push_back(d == axis ? depth : ind.shape()[k++]);
        DSINFER_ASSIGN_OR_RETURN(out, shape_from(out.dims()));
        ctx.set_output(0, vals.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& ind = ctx.input(0);
        const TensorView& vals = ctx.input(2);
        const TensorView& y = ctx.output(0);
        const int r = y.shape.rank();
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t depth = y.shape[axis];
        const std::int64_t outer = ind.shape.size_between(0, axis);
        const std::int64_t inner = ind.shape.size_between(axis, ind.shape.rank());
        return dispatch_storage(y.dtype, [&]<class T>() {
            T* out = y.data_unchecked<T>();
            const T* v = vals.data_unchecked<T>();
            for (std::int64_t i = 0; i < y.num_elements(); ++i) out[i] = v[0];
            return dispatch_types(ind.dtype, PodTypes{}, [&]<class I>() {
                const I* id = ind.data_unchecked<I>();
                for (std::int64_t o = 0; o < outer; ++o)
                    for (std::int64_t i = 0; i < inner; ++i) {
                        const double dv = static_cast<double>(load(id[o * inner + i]));
                        // Out-of-range (and NaN) indices give an all-'off' row, per the spec.
                        if (!(dv > -1e15 && dv < 1e15)) continue;
                        std::int64_t k = static_cast<std::int64_t>(dv);
                        if (!wrap_index(k, depth)) continue;
                        out[(o * depth + k) * inner + i] = v[1];
                    }
                return Status::ok();
            });
        });
    }

private:
    std::int64_t axis_;
};

Factory make_onehot(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 3, ErrorCode::invalid_model, "OneHot takes 3 inputs, got ",
                  ctx.num_inputs());
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", -1));
    return make_kernel<OneHotKernel>(axis);
}

// ---- Compress -------------------------------------------------------------------------------

class CompressKernel final : public Kernel {
public:
    explicit CompressKernel(std::optional<std::int64_t> axis) : axis_(axis) {}

    /// (outer, dim, inner) of the compressed view.
    void geometry(const Shape& s, std::int64_t& outer, std::int64_t& dim,
                  std::int64_t& inner) const noexcept {
        if (!axis_) {
            outer = 1;
            dim = s.num_elements();
            inner = 1;
            return;
        }
        const int axis = static_cast<int>(*axis_ < 0 ? *axis_ + s.rank() : *axis_);
        outer = s.size_between(0, axis);
        dim = s[axis];
        inner = s.size_between(axis + 1, s.rank());
    }
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& c = ctx.input(1);
        if (axis_) DSINFER_RETURN_IF_ERROR(normalize_axis(*axis_, x.num_dims()).status());
        DSINFER_CHECK(c.dtype() == DType::boolean && c.num_dims() == 1,
                      ErrorCode::invalid_argument, "input 'condition' must be a 1-D bool tensor, got ",
                      dtype_name(c.dtype()), " ", c.shape().to_string());
        if (!ctx.has_data(1)) return Status::ok();
        std::int64_t outer = 0, dim = 0, inner = 0;
        geometry(x.shape(), outer, dim, inner);
        std::int64_t count = 0;
        for (std::int64_t j = 0; j < c.num_elements(); ++j) {
            if (!c.data_unchecked<bool>()[j]) continue;
            DSINFER_CHECK(j < dim, ErrorCode::invalid_argument, "input 'condition' selects entry ",
                          j, " but the compressed axis has size ", dim);
            ++count;
        }
        Shape out;
        if (!axis_) {
            out.push_back(count);
        } else {
            out = x.shape();
            out[static_cast<int>(*axis_ < 0 ? *axis_ + x.num_dims() : *axis_)] = count;
        }
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& c = ctx.input(1);
        std::int64_t outer = 0, dim = 0, inner = 0;
        geometry(x.shape, outer, dim, inner);
        const std::int64_t n = std::min(dim, c.num_elements());
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            std::int64_t k = 0;
            for (std::int64_t o = 0; o < outer; ++o)
                for (std::int64_t j = 0; j < n; ++j)
                    if (c.data_unchecked<bool>()[j]) {
                        copy_elems(in + (o * dim + j) * inner, inner, out + k * inner);
                        ++k;
                    }
            return Status::ok();
        });
    }

private:
    std::optional<std::int64_t> axis_;
};

Factory make_compress(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 2, ErrorCode::invalid_model, "Compress takes 2 inputs, got ",
                  ctx.num_inputs());
    std::optional<std::int64_t> axis;
    if (ctx.node().has_attr("axis")) {
        DSINFER_ASSIGN_OR_RETURN(std::int64_t a, ctx.node().attr<std::int64_t>("axis"));
        axis = a;
    }
    return make_kernel<CompressKernel>(axis);
}

// ---- NonZero --------------------------------------------------------------------------------

template <class T>
inline bool is_nonzero(const T& v) noexcept {
    if constexpr (std::is_same_v<T, bool>) return v;
    else return load(v) != 0;
}

class NonZeroKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (!ctx.has_data(0)) return Status::ok();
        std::int64_t count = 0;
        DSINFER_RETURN_IF_ERROR(dispatch_types(x.dtype(), PodTypes{}, [&]<class T>() {
            for (std::int64_t i = 0; i < x.num_elements(); ++i)
                count += is_nonzero(x.data_unchecked<T>()[i]) ? 1 : 0;
            return Status::ok();
        }));
        ctx.set_output(0, DType::i64, Shape{x.num_dims(), count});
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t nnz = y.shape[1];
        const int r = x.shape.rank();
        std::int64_t* out = y.data_unchecked<std::int64_t>();
        return dispatch_types(x.dtype, PodTypes{}, [&]<class T>() {
            std::int64_t c = 0;
            for_each_index(x.shape, [&](const auto& idx, std::int64_t e) {
                if (!is_nonzero(x.data_unchecked<T>()[e]) || c >= nnz) return;
                for (int d = 0; d < r; ++d) out[d * nnz + c] = idx[static_cast<std::size_t>(d)];
                ++c;
            });
            return Status::ok();
        });
    }
};

Factory make_nonzero(const KernelCreateContext&) { return make_kernel<NonZeroKernel>(); }

// ---- ReverseSequence ------------------------------------------------------------------------

class ReverseSequenceKernel final : public Kernel {
public:
    ReverseSequenceKernel(int batch_axis, int time_axis)
        : batch_axis_(batch_axis), time_axis_(time_axis) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& lens = ctx.input(1);
        DSINFER_CHECK(x.num_dims() >= 2, ErrorCode::invalid_argument,
                      "input must have rank >= 2, got shape ", x.shape().to_string());
        DSINFER_RETURN_IF_ERROR(check_int_input(lens, "sequence_lens"));
        DSINFER_CHECK(lens.num_dims() == 1 && lens.shape()[0] == x.shape()[batch_axis_],
                      ErrorCode::invalid_argument, "input 'sequence_lens' has shape ",
                      lens.shape().to_string(), "; expected [", x.shape()[batch_axis_], "]");
        if (ctx.has_data(1)) {
            const std::int64_t t = x.shape()[time_axis_];
            for (std::int64_t b = 0; b < lens.num_elements(); ++b) {
                const std::int64_t l = int_at(lens.view(), b);
                DSINFER_CHECK(l >= 0 && l <= t, ErrorCode::invalid_argument,
                              "input 'sequence_lens' holds ", l, ", outside [0, ", t, "]");
            }
        }
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& lens = ctx.input(1);
        DSINFER_RETURN_IF_ERROR(copy_all(x, ctx.output(0)));
        const Strides cs = contiguous_strides(x.shape);
        const std::int64_t bs = cs[static_cast<std::size_t>(batch_axis_)];
        const std::int64_t ts = cs[static_cast<std::size_t>(time_axis_)];
        const std::int64_t inner = x.shape.size_between(2, x.shape.rank());
        const std::int64_t tmax = x.shape[time_axis_];
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for (std::int64_t b = 0; b < x.shape[batch_axis_]; ++b) {
                const std::int64_t l = int_at(lens, b);
                if (l < 0 || l > tmax)
                    return Status::error(ErrorCode::invalid_argument,
                                         "input 'sequence_lens' holds ", l, ", outside [0, ",
                                         tmax, "]");
                for (std::int64_t t = 0; t < l; ++t)
                    copy_elems(in + b * bs + (l - 1 - t) * ts, inner, out + b * bs + t * ts);
            }
            return Status::ok();
        });
    }

private:
    int batch_axis_, time_axis_;
};

Factory make_reverse_sequence(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 2, ErrorCode::invalid_model,
                  "ReverseSequence takes 2 inputs, got ", ctx.num_inputs());
    DSINFER_ASSIGN_OR_RETURN(std::int64_t b, ctx.node().attr_or<std::int64_t>("batch_axis", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t t, ctx.node().attr_or<std::int64_t>("time_axis", 0));
    if (!((b == 0 && t == 1) || (b == 1 && t == 0)))
        return Status::error(ErrorCode::invalid_model,
                             "attributes 'batch_axis' and 'time_axis' must be 0 and 1 in some "
                             "order, got ", b, " and ", t);
    return make_kernel<ReverseSequenceKernel>(static_cast<int>(b), static_cast<int>(t));
}

// ---- TensorScatter (KV-cache update) --------------------------------------------------------
// present = past with update[..., s, ...] written at sequence index write_indices[batch] + s
// along `axis` (modulo the cache length in circular mode) for every prefix index.

class TensorScatterKernel final : public Kernel {
public:
    TensorScatterKernel(std::int64_t axis, bool circular) : axis_(axis), circular_(circular) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& past = ctx.input(0);
        const Tensor& upd = ctx.input(1);
        DSINFER_CHECK(past.dtype() == upd.dtype(), ErrorCode::invalid_argument,
                      "inputs past_cache and update differ in element type (",
                      dtype_name(past.dtype()), " vs ", dtype_name(upd.dtype()), ")");
        DSINFER_ASSIGN_OR_RETURN(int axis, seq_axis(past.shape(), upd.shape()));
        if (ctx.has_input(2)) {
            const Tensor& wi = ctx.input(2);
            DSINFER_RETURN_IF_ERROR(check_int_input(wi, "write_indices"));
            DSINFER_CHECK(wi.num_dims() == 1 && wi.shape()[0] == past.shape()[0],
                          ErrorCode::invalid_argument, "input 'write_indices' has shape ",
                          wi.shape().to_string(), "; expected [", past.shape()[0], "]");
            if (ctx.has_data(2))
                for (std::int64_t b = 0; b < wi.num_elements(); ++b)
                    DSINFER_RETURN_IF_ERROR(
                        check_index(int_at(wi.view(), b), past.shape()[axis], upd.shape()[axis]));
        }
        ctx.set_output(0, past.dtype(), past.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& past = ctx.input(0);
        const TensorView& upd = ctx.input(1);
        const TensorView& out = ctx.output(0);
        DSINFER_RETURN_IF_ERROR(copy_all(past, out));
        auto axis_or = seq_axis(past.shape, upd.shape);
        if (!axis_or.is_ok()) return axis_or.status();
        const int axis = *axis_or;
        const std::int64_t max_len = past.shape[axis];
        const std::int64_t len = upd.shape[axis];
        const std::int64_t prefix = past.shape.size_between(0, axis);
        const std::int64_t per_batch = past.shape.size_between(1, axis);
        const std::int64_t inner = past.shape.size_between(axis + 1, past.shape.rank());
        const bool has_idx = ctx.has_input(2);
        return dispatch_storage(past.dtype, [&]<class T>() {
            const T* u = upd.data_unchecked<T>();
            T* y = out.data_unchecked<T>();
            for (std::int64_t p = 0; p < prefix; ++p) {
                const std::int64_t start = has_idx ? int_at(ctx.input(2), p / per_batch) : 0;
                DSINFER_RETURN_IF_ERROR(check_index(start, max_len, len));
                for (std::int64_t s = 0; s < len; ++s) {
                    std::int64_t dst = start + s;
                    if (circular_) dst %= max_len;
                    copy_elems(u + (p * len + s) * inner, inner, y + (p * max_len + dst) * inner);
                }
            }
            return Status::ok();
        });
    }

private:
    StatusOr<int> seq_axis(const Shape& past, const Shape& upd) const {
        DSINFER_CHECK(past.rank() >= 2 && upd.rank() == past.rank(), ErrorCode::invalid_argument,
                      "past_cache ", past.to_string(), " and update ", upd.to_string(),
                      " must have the same rank, at least 2");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, past.rank()));
        DSINFER_CHECK(axis > 0, ErrorCode::invalid_model,
                      "attribute 'axis' must not be the batch axis 0");
        for (int d = 0; d < past.rank(); ++d)
            DSINFER_CHECK(d == axis ? upd[d] <= past[d] : upd[d] == past[d],
                          ErrorCode::invalid_argument, "update ", upd.to_string(),
                          " does not fit past_cache ", past.to_string(), " (axis ", axis, ")");
        return axis;
    }

    Status check_index(std::int64_t start, std::int64_t max_len, std::int64_t len) const {
        if (start < 0 || (!circular_ && start > max_len - len))
            return Status::error(ErrorCode::invalid_argument, "write index ", start, " with ", len,
                                 " updates does not fit the cache length ", max_len);
        return Status::ok();
    }

    std::int64_t axis_;
    bool circular_;
};

Factory make_tensor_scatter(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", -2));
    DSINFER_ASSIGN_OR_RETURN(std::string mode,
                             ctx.node().attr_or<std::string>("mode", std::string("linear")));
    DSINFER_CHECK(mode == "linear" || mode == "circular", ErrorCode::invalid_model,
                  "attribute 'mode' must be linear or circular, got '", mode, "'");
    return make_kernel<TensorScatterKernel>(axis, mode == "circular");
}

// ---- Trilu ----------------------------------------------------------------------------------

class TriluKernel final : public Kernel {
public:
    explicit TriluKernel(bool upper) : upper_(upper) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() >= 2, ErrorCode::invalid_argument,
                      "input must have rank >= 2, got shape ", x.shape().to_string());
        if (ctx.has_input(1)) {
            DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "k"));
            DSINFER_CHECK(ctx.input(1).num_elements() == 1, ErrorCode::invalid_argument,
                          "input 'k' must be a scalar, got shape ",
                          ctx.input(1).shape().to_string());
        }
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const std::int64_t k = ctx.has_input(1) ? int_at(ctx.input(1), 0) : 0;
        const int r = x.shape.rank();
        const std::int64_t rows = x.shape[r - 2], cols = x.shape[r - 1];
        const std::int64_t mats = x.shape.size_between(0, r - 2);
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = ctx.output(0).data_unchecked<T>();
            for (std::int64_t m = 0; m < mats; ++m)
                for (std::int64_t i = 0; i < rows; ++i)
                    for (std::int64_t j = 0; j < cols; ++j) {
                        const std::int64_t e = (m * rows + i) * cols + j;
                        const bool keep = upper_ ? (j - i >= k) : (j - i <= k);
                        out[e] = keep ? in[e] : T{};
                    }
            return Status::ok();
        });
    }

private:
    bool upper_;
};

Factory make_trilu(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t upper, ctx.node().attr_or<std::int64_t>("upper", 1));
    return make_kernel<TriluKernel>(upper != 0);
}

// ---- EyeLike --------------------------------------------------------------------------------

class EyeLikeKernel final : public Kernel {
public:
    EyeLikeKernel(std::optional<DType> dtype, std::int64_t k) : dtype_(dtype), k_(k) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() == 2, ErrorCode::invalid_argument,
                      "input must be 2-D, got shape ", x.shape().to_string());
        const DType dt = dtype_.value_or(x.dtype());
        DSINFER_CHECK(dt != DType::string, ErrorCode::unsupported,
                      "EyeLike output type string is not supported");
        ctx.set_output(0, dt, x.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        const std::int64_t rows = y.shape[0], cols = y.shape[1];
        return dispatch_types(y.dtype, PodTypes{}, [&]<class T>() {
            T* out = y.data_unchecked<T>();
            for (std::int64_t i = 0; i < y.num_elements(); ++i) out[i] = store<T>(0.0f);
            // The k_ bounds keep i + k_ from overflowing.
            if (k_ < cols && k_ > -rows)
                for (std::int64_t i = 0; i < rows; ++i) {
                    const std::int64_t j = i + k_;
                    if (j >= 0 && j < cols) out[i * cols + j] = store<T>(1.0f);
                }
            return Status::ok();
        });
    }

private:
    std::optional<DType> dtype_;
    std::int64_t k_;
};

Factory make_eyelike(const KernelCreateContext& ctx) {
    std::optional<DType> dt;
    if (ctx.node().has_attr("dtype")) {
        DSINFER_ASSIGN_OR_RETURN(std::int64_t v, ctx.node().attr<std::int64_t>("dtype"));
        dt = from_onnx_dtype(static_cast<int>(v));
        if (!dt)
            return Status::error(ErrorCode::unsupported, "attribute 'dtype' ", v, " (",
                                 onnx_dtype_name(static_cast<int>(v)), ") is not supported");
    }
    DSINFER_ASSIGN_OR_RETURN(std::int64_t k, ctx.node().attr_or<std::int64_t>("k", 0));
    return make_kernel<EyeLikeKernel>(dt, k);
}

}  // namespace

void register_tensor_index_kernels(KernelRegistry& r) {
    r.add({"Gather", "", 1, kMaxOpset, DeviceKind::cpu}, &make_gather);
    r.add({"GatherElements", "", 11, kMaxOpset, DeviceKind::cpu}, &make_gather_elements);
    r.add({"GatherND", "", 11, kMaxOpset, DeviceKind::cpu}, &make_gather_nd);
    r.add({"ScatterElements", "", 11, kMaxOpset, DeviceKind::cpu}, &make_scatter_elements);
    r.add({"Scatter", "", 9, 10, DeviceKind::cpu}, &make_scatter_elements);
    r.add({"ScatterND", "", 11, kMaxOpset, DeviceKind::cpu}, &make_scatter_nd);
    r.add({"OneHot", "", 9, kMaxOpset, DeviceKind::cpu}, &make_onehot);
    r.add({"Compress", "", 9, kMaxOpset, DeviceKind::cpu}, &make_compress);
    r.add({"NonZero", "", 9, kMaxOpset, DeviceKind::cpu}, &make_nonzero);
    r.add({"ReverseSequence", "", 10, kMaxOpset, DeviceKind::cpu}, &make_reverse_sequence);
    r.add({"TensorScatter", "", 24, kMaxOpset, DeviceKind::cpu}, &make_tensor_scatter);
    r.add({"Trilu", "", 14, kMaxOpset, DeviceKind::cpu}, &make_trilu);
    r.add({"EyeLike", "", 9, kMaxOpset, DeviceKind::cpu}, &make_eyelike);
}

}  // namespace dsinfer::detail
