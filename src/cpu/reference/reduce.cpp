// Reference reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare. ArgMax/ArgMin/TopK live in
// reduce_arg.cpp and NonMaxSuppression in reduce_nms.cpp; all are registered from here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/reference/groups.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/reduce.hpp"

namespace dsinfer::detail {

void register_reduce_arg_kernels(KernelRegistry& r);  // reduce_arg.cpp
void register_reduce_nms_kernels(KernelRegistry& r);  // reduce_nms.cpp

namespace {

enum class ReduceOp { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

/// Which axes a reduction folds, as a fixed-size plan (usable in run without allocating).
struct ReducePlan {
    std::array<bool, kMaxRank> reduced{};
    Shape out_shape;   // with or without the kept 1-dims, per keepdims
    Shape kept_shape;  // non-reduced dims of the input, in order
    Strides kept_strides{};
    Shape red_shape;  // reduced dims of the input, in order
    Strides red_strides{};
};

StatusOr<ReducePlan> make_plan(const Shape& in, const std::int64_t* axes, int num_axes,
                               bool keepdims, bool noop_with_empty_axes, ErrorCode bad_axis) {
    ReducePlan p;
    const int rank = in.rank();
    DSINFER_RETURN_IF_ERROR(
        mark_reduced_axes(rank, axes, num_axes, noop_with_empty_axes, bad_axis, p.reduced));
    const Strides st = contiguous_strides(in);
    for (int d = 0; d < rank; ++d) {
        const auto du = static_cast<std::size_t>(d);
        if (p.reduced[du]) {
            p.red_strides[static_cast<std::size_t>(p.red_shape.rank())] = st[du];
            p.red_shape.push_back(in[d]);
            if (keepdims) p.out_shape.push_back(1);
        } else {
            p.kept_strides[static_cast<std::size_t>(p.kept_shape.rank())] = st[du];
            p.kept_shape.push_back(in[d]);
            p.out_shape.push_back(in[d]);
        }
    }
    return p;
}

template <class T>
inline bool is_nan_value(T v) noexcept {
    if constexpr (std::is_floating_point_v<compute_t<T>>)
        return std::isnan(load(v));
    else
        return false;
}

/// Reduces each output element over the plan's reduced sub-space.
template <class T>
void reduce_loop(ReduceOp op, const ReducePlan& p, const T* x, T* y) {
    using C = compute_t<T>;
    constexpr bool kFloat = std::is_floating_point_v<C>;
    // Float sums accumulate in double; integer sums wrap in 64-bit unsigned arithmetic.
    using Acc = std::conditional_t<kFloat, double, std::uint64_t>;
    const std::int64_t count = p.red_shape.num_elements();
    std::int64_t out_index = 0;
    const std::array<Strides, 1> kept{p.kept_strides};
    const std::array<Strides, 1> red{p.red_strides};
    for_each_offset<1>(p.kept_shape, kept, [&](const std::array<std::int64_t, 1>& base) {
        const T* xb = x + base[0];
        T result{};
        switch (op) {
            case ReduceOp::max:
            case ReduceOp::min: {
                const bool is_max = op == ReduceOp::max;
                C best;
                if constexpr (std::is_same_v<C, bool>) {
                    best = !is_max;
                } else if constexpr (kFloat) {
                    best = is_max ? -std::numeric_limits<C>::infinity()
                                  : std::numeric_limits<C>::infinity();
                } else {
                    best =
                        is_max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
                }
                bool nan = false;
                for_each_offset<1>(p.red_shape, red, [&](const std::array<std::int64_t, 1>& o) {
                    const C v = load(xb[o[0]]);
                    if constexpr (kFloat) {
                        if (std::isnan(v)) nan = true;
                    }
                    if (is_max ? (v > best) : (v < best)) best = v;
                });
                if constexpr (kFloat) {
                    if (nan) best = std::numeric_limits<C>::quiet_NaN();
                }
                result = store<T>(best);
                break;
            }
            case ReduceOp::log_sum_exp: {
                if constexpr (std::is_same_v<C, bool>) {
                    break;
                } else {
                    double m = -std::numeric_limits<double>::infinity();
                    bool nan = false;
                    for_each_offset<1>(p.red_shape, red, [&](const std::array<std::int64_t, 1>& o) {
                        const double v = static_cast<double>(load(xb[o[0]]));
                        if (std::isnan(v))
                            nan = true;
                        else if (v > m)
                            m = v;
                    });
                    double r;
                    if (nan) {
                        r = std::numeric_limits<double>::quiet_NaN();
                    } else if (std::isinf(m)) {
                        r = m;  // all -inf (or empty) -> -inf; any +inf -> +inf
                    } else {
                        double s = 0;
                        for_each_offset<1>(
                            p.red_shape, red, [&](const std::array<std::int64_t, 1>& o) {
                                s += std::exp(static_cast<double>(load(xb[o[0]])) - m);
                            });
                        r = std::log(s) + m;
                    }
                    result = store<T>(static_cast<C>(r));
                }
                break;
            }
            default: {
                if constexpr (std::is_same_v<C, bool>) {
                    break;
                } else {
                    Acc acc = op == ReduceOp::prod ? Acc(1) : Acc(0);
                    for_each_offset<1>(p.red_shape, red, [&](const std::array<std::int64_t, 1>& o) {
                        const C v = load(xb[o[0]]);
                        Acc a;
                        if constexpr (kFloat) {
                            a = static_cast<double>(v);
                        } else if constexpr (std::is_signed_v<C>) {
                            a = static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
                        } else {
                            a = static_cast<std::uint64_t>(v);
                        }
                        switch (op) {
                            case ReduceOp::prod: acc *= a; break;
                            case ReduceOp::l1:
                                if constexpr (kFloat)
                                    acc += std::fabs(a);
                                else if constexpr (std::is_signed_v<C>)
                                    acc += v < 0 ? Acc(0) - a : a;
                                else
                                    acc += a;
                                break;
                            case ReduceOp::l2:
                            case ReduceOp::sum_square: acc += a * a; break;
                            default: acc += a; break;  // sum, mean, log_sum
                        }
                    });
                    if constexpr (kFloat) {
                        double r = acc;
                        if (op == ReduceOp::mean)
                            r = count > 0 ? acc / static_cast<double>(count)
                                          : std::numeric_limits<double>::quiet_NaN();
                        else if (op == ReduceOp::l2)
                            r = std::sqrt(acc);
                        else if (op == ReduceOp::log_sum)
                            r = std::log(acc);
                        result = store<T>(static_cast<C>(r));
                    } else {
                        const auto sacc = static_cast<std::int64_t>(acc);
                        if (op == ReduceOp::mean) {
                            if (count == 0)
                                result = T{0};
                            else if constexpr (std::is_signed_v<C>)
                                result = static_cast<T>(sacc / count);
                            else
                                result = static_cast<T>(acc / static_cast<std::uint64_t>(count));
                        } else if (op == ReduceOp::l2 || op == ReduceOp::log_sum) {
                            const double d = std::is_signed_v<C> ? static_cast<double>(sacc)
                                                                 : static_cast<double>(acc);
                            const double r = op == ReduceOp::l2 ? std::sqrt(d) : std::log(d);
                            // Guard the float->int conversion (log(0) = -inf).
                            result = std::isfinite(r) ? static_cast<T>(static_cast<std::int64_t>(r))
                                                      : T{0};
                        } else {
                            result = static_cast<T>(acc);
                        }
                    }
                }
                break;
            }
        }
        y[out_index++] = result;
    });
}

class ReduceKernel final : public Kernel {
public:
    ReduceKernel(ReduceOp op, bool keepdims, bool noop, bool axes_from_input,
                 std::vector<std::int64_t> axes)
        : op_(op),
          keepdims_(keepdims),
          noop_(noop),
          axes_from_input_(axes_from_input),
          axes_(std::move(axes)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const bool bool_ok = op_ == ReduceOp::max || op_ == ReduceOp::min;
        if (x.dtype() == DType::string || (x.dtype() == DType::boolean && !bool_ok))
            return Status::error(ErrorCode::unsupported, "element type ", dtype_name(x.dtype()),
                                 " is not supported");
        std::array<std::int64_t, kMaxRank> axes{};
        int n = 0;
        ErrorCode bad = ErrorCode::invalid_model;
        if (axes_from_input_) {
            if (ctx.has_input(1)) {
                if (!ctx.has_data(1)) return Status::ok();  // output shape unknown at load
                DSINFER_RETURN_IF_ERROR(read_axes_view(ctx.input(1).view(), axes, n));
                bad = ErrorCode::invalid_argument;
            }
        } else {
            if (axes_.size() > static_cast<std::size_t>(kMaxRank))
                return Status::error(ErrorCode::invalid_model, "attribute 'axes' has ",
                                     axes_.size(), " entries, more than the maximum rank");
            n = static_cast<int>(axes_.size());
            std::copy(axes_.begin(), axes_.end(), axes.begin());
        }
        DSINFER_ASSIGN_OR_RETURN(ReducePlan p,
                                 make_plan(x.shape(), axes.data(), n, keepdims_, noop_, bad));
        ctx.set_output(0, x.dtype(), p.out_shape);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        std::array<std::int64_t, kMaxRank> axes{};
        int n = 0;
        if (axes_from_input_) {
            if (ctx.has_input(1)) {
                Status st = read_axes_view(ctx.input(1), axes, n);
                if (!st.is_ok()) return st;
            }
        } else {
            n = static_cast<int>(axes_.size());
            std::copy(axes_.begin(), axes_.end(), axes.begin());
        }
        auto plan =
            make_plan(x.shape, axes.data(), n, keepdims_, noop_, ErrorCode::invalid_argument);
        if (!plan.is_ok()) return plan.status();
        const ReducePlan& p = plan.value();
        const TensorView& y = ctx.output(0);
        if (x.dtype == DType::boolean) {
            reduce_loop<bool>(op_, p, x.data_unchecked<bool>(), y.data_unchecked<bool>());
            return Status::ok();
        }
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() -> Status {
            reduce_loop<T>(op_, p, x.data_unchecked<T>(), y.data_unchecked<T>());
            return Status::ok();
        });
    }

private:
    ReduceOp op_;
    bool keepdims_;
    bool noop_;
    bool axes_from_input_;
    std::vector<std::int64_t> axes_;
};

template <ReduceOp Op>
StatusOr<std::unique_ptr<Kernel>> make_reduce(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(ReduceAttrs a, parse_reduce_attrs(ctx, Op == ReduceOp::sum));
    return make_kernel<ReduceKernel>(Op, a.keepdims, a.noop_with_empty_axes, a.axes_from_input,
                                     std::move(a.axes));
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
    r.add({"ReduceSum", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::sum>);
    r.add({"ReduceMean", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::mean>);
    r.add({"ReduceMax", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::max>);
    r.add({"ReduceMin", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::min>);
    r.add({"ReduceProd", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::prod>);
    r.add({"ReduceL1", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::l1>);
    r.add({"ReduceL2", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::l2>);
    r.add({"ReduceLogSum", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reduce<ReduceOp::log_sum>);
    r.add({"ReduceLogSumExp", "", 1, kMaxOpset, DeviceKind::cpu},
          &make_reduce<ReduceOp::log_sum_exp>);
    r.add({"ReduceSumSquare", "", 1, kMaxOpset, DeviceKind::cpu},
          &make_reduce<ReduceOp::sum_square>);
    register_reduce_arg_kernels(r);
    register_reduce_nms_kernels(r);
}

}  // namespace dsinfer::detail
