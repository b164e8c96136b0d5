// Reference ArgMax, ArgMin and TopK.
//
// NaN rule (deterministic, as numpy/PyTorch): a NaN counts as larger than every number, so
// ArgMax and TopK(largest) pick NaNs first; ArgMin also returns a NaN's index (the result of
// min over data with a NaN is NaN), and TopK(smallest) puts NaNs last. Ties go to the lower
// index (ArgMax/ArgMin with select_last_index=1: the higher one).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_reduce_arg_kernels(KernelRegistry& r);

namespace {

template <class C>
inline bool nan_of(C v) noexcept {
    if constexpr (std::is_floating_point_v<C>)
        return std::isnan(v);
    else
        return false;
}

/// Strict "a ranks above b" with NaN above everything.
template <class C>
inline bool greater_nan_high(C a, C b) noexcept {
    if (nan_of(a)) return !nan_of(b);
    if (nan_of(b)) return false;
    return a > b;
}

// ---- ArgMax / ArgMin -------------------------------------------------------------------------

class ArgKernel final : public Kernel {
public:
    ArgKernel(bool is_max, std::int64_t axis, bool keepdims, bool last)
        : is_max_(is_max), axis_(axis), keepdims_(keepdims), last_(last) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (!kNumericTypes.contains(x.dtype()))
            return Status::error(ErrorCode::unsupported, "element type ", dtype_name(x.dtype()),
                                 " is not supported");
        const int rank = x.shape().rank();
        if (rank == 0)
            return Status::error(ErrorCode::invalid_argument, "input must have rank >= 1");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, rank));
        if (x.shape()[axis] == 0 && x.num_elements() == 0) {
            bool other_nonzero = true;
            for (int d = 0; d < rank; ++d)
                if (d != axis && x.shape()[d] == 0) other_nonzero = false;
            if (other_nonzero)
                return Status::error(ErrorCode::invalid_argument, "cannot take ",
                                     is_max_ ? "ArgMax" : "ArgMin", " over an empty axis ", axis);
        }
        Shape out;
        for (int d = 0; d < rank; ++d) {
            if (d == axis) {
                if (keepdims_) out.push_back(1);
            } else {
                out.push_back(x.shape()[d]);
            }
        }
        ctx.set_output(0, DType::i64, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t n = x.shape[axis];
        const std::int64_t inner = x.shape.size_between(axis + 1, rank);
        auto* y = ctx.output(0).data_unchecked<std::int64_t>();
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() -> Status {
            const T* xp = x.data_unchecked<T>();
            for (std::int64_t o = 0; o < outer; ++o) {
                for (std::int64_t i = 0; i < inner; ++i) {
                    const T* base = xp + o * n * inner + i;
                    std::int64_t best_i = 0;
                    auto best = load(base[0]);
                    for (std::int64_t k = 1; k < n; ++k) {
                        const auto v = load(base[k * inner]);
                        bool take;
                        if (is_max_) {
                            take = greater_nan_high(v, best);
                        } else {
                            // NaN wins for ArgMin too; otherwise the smaller value.
                            if (nan_of(v))
                                take = !nan_of(best);
                            else
                                take = !nan_of(best) && v < best;
                        }
                        // Equal (or both NaN): the later index only with select_last_index.
                        if (!take && last_) {
                            const bool eq = (nan_of(v) && nan_of(best)) || v == best;
                            take = eq;
                        }
                        if (take) {
                            best = v;
                            best_i = k;
                        }
                    }
                    y[o * inner + i] = best_i;
                }
            }
            return Status::ok();
        });
    }

private:
    bool is_max_;
    std::int64_t axis_;
    bool keepdims_;
    bool last_;
};

template <bool IsMax>
StatusOr<std::unique_ptr<Kernel>> make_arg(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, node.attr_or<std::int64_t>("axis", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t keepdims, node.attr_or<std::int64_t>("keepdims", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t last, node.attr_or<std::int64_t>("select_last_index", 0));
    if (keepdims != 0 && keepdims != 1)
        return Status::error(ErrorCode::invalid_model, "attribute 'keepdims' must be 0 or 1, got ",
                             keepdims);
    if (last != 0 && last != 1)
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'select_last_index' must be 0 or 1, got ", last);
    if (ctx.opset() < 11 && axis < 0)
        return Status::error(ErrorCode::invalid_model, "attribute 'axis' ", axis,
                             " must be non-negative before opset 11");
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known) {
        DSINFER_ASSIGN_OR_RETURN(int a, normalize_axis(axis, v->shape.rank()));
        (void)a;
    }
    return make_kernel<ArgKernel>(IsMax, axis, keepdims != 0, last != 0);
}

// ---- TopK ------------------------------------------------------------------------------------

class TopKKernel final : public Kernel {
public:
    TopKKernel(std::int64_t axis, bool largest, std::int64_t k_attr)
        : axis_(axis), largest_(largest), k_attr_(k_attr) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (!kNumericTypes.contains(x.dtype()))
            return Status::error(ErrorCode::unsupported, "element type ", dtype_name(x.dtype()),
                                 " is not supported");
        const int rank = x.shape().rank();
        if (rank == 0)
            return Status::error(ErrorCode::invalid_argument, "input 'X' must have rank >= 1");
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, rank));
        std::int64_t k = k_attr_;
        if (k_attr_ < 0) {
            if (!ctx.has_input(1))
                return Status::error(ErrorCode::invalid_model, "input 'K' is required");
            if (!ctx.has_data(1)) return Status::ok();
            const Tensor& kt = ctx.input(1);
            if (kt.num_elements() != 1 || kt.dtype() != DType::i64)
                return Status::error(ErrorCode::invalid_argument,
                                     "input 'K' must be a 1-element int64 tensor, got ",
                                     dtype_name(kt.dtype()), " ", kt.shape().to_string());
            k = *kt.data_unchecked<std::int64_t>();
        }
        if (k < 0 || k > x.shape()[axis])
            return Status::error(ErrorCode::invalid_argument, "K = ", k, " is outside [0, ",
                                 x.shape()[axis], "] (the size of axis ", axis, ")");
        Shape out = x.shape();
        out[axis] = k;
        ctx.set_output(0, x.dtype(), out);
        ctx.set_output(1, DType::i64, out);
        ctx.set_workspace(static_cast<std::size_t>(x.shape()[axis]) * sizeof(std::int64_t));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
        const std::int64_t k = ctx.output(0).shape[axis];
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t n = x.shape[axis];
        const std::int64_t inner = x.shape.size_between(axis + 1, rank);
        if (k == 0 || outer * inner == 0) return Status::ok();
        if (ctx.workspace_bytes() < static_cast<std::size_t>(n) * sizeof(std::int64_t))
            return Status(ErrorCode::internal, "TopK workspace too small");
        auto* idx = static_cast<std::int64_t*>(ctx.workspace());
        auto* yi = ctx.output(1).data_unchecked<std::int64_t>();
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() -> Status {
            const T* xp = x.data_unchecked<T>();
            T* yv = ctx.output(0).data_unchecked<T>();
            for (std::int64_t o = 0; o < outer; ++o) {
                for (std::int64_t i = 0; i < inner; ++i) {
                    const T* base = xp + o * n * inner + i;
                    for (std::int64_t j = 0; j < n; ++j) idx[j] = j;
                    // A strict total order (ties by index), so the result is deterministic.
                    auto before = [&](std::int64_t a, std::int64_t b) {
                        const auto va = load(base[a * inner]);
                        const auto vb = load(base[b * inner]);
                        if (largest_) {
                            if (greater_nan_high(va, vb)) return true;
                            if (greater_nan_high(vb, va)) return false;
                        } else {
                            if (greater_nan_high(vb, va)) return true;
                            if (greater_nan_high(va, vb)) return false;
                        }
                        return a < b;
                    };
                    std::partial_sort(idx, idx + k, idx + n, before);
                    for (std::int64_t j = 0; j < k; ++j) {
                        const std::int64_t off = o * k * inner + j * inner + i;
                        yv[off] = base[idx[j] * inner];
                        yi[off] = idx[j];
                    }
                }
            }
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
    bool largest_;
    std::int64_t k_attr_;  // >= 0 at opset 1 (attribute), -1 when K is an input
};

StatusOr<std::unique_ptr<Kernel>> make_topk(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, node.attr_or<std::int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t largest, node.attr_or<std::int64_t>("largest", 1));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t sorted, node.attr_or<std::int64_t>("sorted", 1));
    if (largest != 0 && largest != 1)
        return Status::error(ErrorCode::invalid_model, "attribute 'largest' must be 0 or 1, got ",
                             largest);
    if (sorted != 0 && sorted != 1)
        return Status::error(ErrorCode::invalid_model, "attribute 'sorted' must be 0 or 1, got ",
                             sorted);
    std::int64_t k_attr = -1;
    if (ctx.opset() < 10) {
        DSINFER_ASSIGN_OR_RETURN(k_attr, node.attr<std::int64_t>("k"));
        if (k_attr < 0)
            return Status::error(ErrorCode::invalid_model, "attribute 'k' must be >= 0, got ",
                                 k_attr);
    } else if (!ctx.has_input(1)) {
        return Status::error(ErrorCode::invalid_model, "input 'K' is required");
    }
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known) {
        DSINFER_ASSIGN_OR_RETURN(int a, normalize_axis(axis, v->shape.rank()));
        (void)a;
    }
    // sorted=0 allows any order; the sorted order is one of them.
    return make_kernel<TopKKernel>(axis, largest != 0, k_attr);
}

}  // namespace

void register_reduce_arg_kernels(KernelRegistry& r) {
    r.add({"ArgMax", "", 1, kMaxOpset, DeviceKind::cpu}, &make_arg<true>);
    r.add({"ArgMin", "", 1, kMaxOpset, DeviceKind::cpu}, &make_arg<false>);
    r.add({"TopK", "", 1, kMaxOpset, DeviceKind::cpu}, &make_topk);
}

}  // namespace dsinfer::detail
