// Reference Softmax, LogSoftmax and Hardmax. Before opset 13 the input is coerced to 2-D at
// `axis` (default 1) and the op runs over the flattened trailing block; from 13 on it runs
// over the single `axis` (default -1).
#include <algorithm>
#include <cmath>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

enum class SoftmaxKind { softmax, log_softmax, hardmax };

class SoftmaxKernel final : public Kernel {
public:
    SoftmaxKernel(SoftmaxKind kind, int64_t axis, bool coerce_2d)
        : kind_(kind), axis_(axis), coerce_2d_(coerce_2d) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        const int rank = x.shape().rank();
        // Opset < 13 allows axis == rank (an empty trailing block); ranks 0 are treated as 1-D.
        const int r = std::max(rank, 1);
        if (coerce_2d_) {
            DSINFER_CHECK(axis_ >= -r && axis_ <= r, ErrorCode::invalid_argument, "axis ", axis_,
                          " is outside [", -r, ", ", r, "] for input of rank ", rank);
        } else {
            DSINFER_CHECK(axis_ >= -r && axis_ < r, ErrorCode::invalid_argument, "axis ", axis_,
                          " is outside [", -r, ", ", r, ") for input of rank ", rank);
        }
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int rank = x.shape.rank();
        int64_t outer, n, inner;
        if (rank == 0) {
            outer = 1;
            n = 1;
            inner = 1;
        } else {
            const int a = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
            if (coerce_2d_) {
                outer = x.shape.size_between(0, a);
                n = x.shape.size_between(a, rank);
                inner = 1;
            } else {
                outer = x.shape.size_between(0, a);
                n = x.shape[a];
                inner = x.shape.size_between(a + 1, rank);
            }
        }
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
            const T* px = x.data_unchecked<T>();
            T* py = y.data_unchecked<T>();
            for (int64_t o = 0; o < outer; ++o) {
                for (int64_t i = 0; i < inner; ++i) {
                    const T* xs = px + o * n * inner + i;
                    T* ys = py + o * n * inner + i;
                    run_slice<T, F>(xs, ys, n, inner);
                }
            }
            return Status::ok();
        });
    }

private:
    template <class T, class F>
    void run_slice(const T* x, T* y, int64_t n, int64_t s) const noexcept {
        if (n == 0) return;
        if (kind_ == SoftmaxKind::hardmax) {
            int64_t best = 0;
            F bv = static_cast<F>(load(x[0]));
            for (int64_t j = 1; j < n; ++j) {
                const F v = static_cast<F>(load(x[j * s]));
                if (v > bv) {
                    bv = v;
                    best = j;
                }
            }
            for (int64_t j = 0; j < n; ++j) y[j * s] = store<T>(F(j == best ? 1 : 0));
            return;
        }
        F mx = -std::numeric_limits<F>::infinity();
        bool has_nan = false;
        for (int64_t j = 0; j < n; ++j) {
            const F v = static_cast<F>(load(x[j * s]));
            if (std::isnan(v))
                has_nan = true;
            else
                mx = std::max(mx, v);
        }
        if (has_nan) {
            for (int64_t j = 0; j < n; ++j)
                y[j * s] = store<T>(std::numeric_limits<F>::quiet_NaN());
            return;
        }
        // All -inf: subtracting mx would give NaN; keep the shift finite so exp() sees -inf.
        const F shift = std::isinf(mx) ? F(0) : mx;
        F sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<F>(load(x[j * s])) - shift);
        if (kind_ == SoftmaxKind::softmax) {
            for (int64_t j = 0; j < n; ++j)
                y[j * s] = store<T>(std::exp(static_cast<F>(load(x[j * s])) - shift) / sum);
        } else {
            const F lse = std::log(sum);
            for (int64_t j = 0; j < n; ++j)
                y[j * s] = store<T>(static_cast<F>(load(x[j * s])) - shift - lse);
        }
    }

    SoftmaxKind kind_;
    int64_t axis_;
    bool coerce_2d_;
};

template <SoftmaxKind K>
StatusOr<std::unique_ptr<Kernel>> make_softmax(const KernelCreateContext& ctx) {
    const bool coerce = ctx.opset() < 13;
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", coerce ? 1 : -1));
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known) {
        const int r = std::max(v->shape.rank(), 1);
        if (axis < -r || axis > r || (!coerce && axis == r))
            return Status::error(ErrorCode::invalid_model, "axis ", axis,
                                 " is out of range for input of rank ", v->shape.rank());
    }
    return make_kernel<SoftmaxKernel>(K, axis, coerce);
}

}  // namespace

void register_nn_softmax_kernels(KernelRegistry& r) {
    r.add({"Softmax", "", 1, kMaxOpset, DeviceKind::cpu}, &make_softmax<SoftmaxKind::softmax>);
    r.add({"LogSoftmax", "", 1, kMaxOpset, DeviceKind::cpu},
          &make_softmax<SoftmaxKind::log_softmax>);
    r.add({"Hardmax", "", 1, kMaxOpset, DeviceKind::cpu}, &make_softmax<SoftmaxKind::hardmax>);
}

}  // namespace dsinfer::detail
