// Reference pooling: MaxPool (with Indices), AveragePool, LpPool (1-D to 6-D spatial) and
// GlobalAveragePool / GlobalMaxPool / GlobalLpPool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"
#include "ops/window.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;
using Dims = std::array<int64_t, kMaxRank>;

enum class PoolKind { max, average, lp };

/// The shared pooling attributes (ops/window.hpp) with the kind and the op-specific ones.
struct PoolKindAttrs : PoolAttrs {
    PoolKind kind = PoolKind::max;
    int64_t storage_order = 0;
    double p = 2.0;
};

using PoolGeom = WindowGeom;

Status pool_geometry(const PoolKindAttrs& a, const Shape& x, PoolGeom& g) {
    const int nsp = x.rank() - 2;
    if (nsp != static_cast<int>(a.kernel_shape.size()))
        return Status::error(ErrorCode::invalid_argument, "input X of shape ", x.to_string(),
                             " has ", nsp, " spatial dimensions but kernel_shape has ",
                             a.kernel_shape.size());
    return window_geometry(
        a, x, [&](int i) { return a.kernel_shape[static_cast<std::size_t>(i)]; }, a.ceil_mode, g);
}

class PoolKernel final : public Kernel {
public:
    explicit PoolKernel(PoolKindAttrs a) : a_(std::move(a)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const DType dt = x.dtype();
        const bool ok = kFloatTypes.contains(dt) ||
                        (a_.kind == PoolKind::max && (dt == DType::i8 || dt == DType::u8));
        DSINFER_CHECK(ok, ErrorCode::unsupported, "element type ", dtype_name(dt),
                      " is not supported");
        DSINFER_CHECK(x.shape().rank() >= 3, ErrorCode::invalid_argument,
                      "input X must have rank >= 3 (N, C, spatial...), got ",
                      x.shape().to_string());
        PoolGeom g;
        DSINFER_RETURN_IF_ERROR(pool_geometry(a_, x.shape(), g));
        Shape out{x.shape()[0], x.shape()[1]};
        for (int i = 0; i < g.nsp; ++i) out.push_back(g.out[static_cast<std::size_t>(i)]);
        ctx.set_output(0, dt, out);
        if (ctx.has_output(1)) ctx.set_output(1, DType::i64, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        PoolGeom g;
        DSINFER_RETURN_IF_ERROR(pool_geometry(a_, x.shape, g));
        using Types = TypeList<float, double, float16, bfloat16, std::int8_t, std::uint8_t>;
        return dispatch_types(x.dtype, Types{}, [&]<class T>() -> Status {
            compute<T>(ctx, g);
            return Status::ok();
        });
    }

private:
    template <class T>
    void compute(RunContext& ctx, const PoolGeom& g) const noexcept {
        using F = std::conditional_t<std::is_same_v<T, double>, double,
                                     std::conditional_t<std::is_integral_v<T>, T, float>>;
        const TensorView& x = ctx.input(0);
        const T* px = x.data_unchecked<T>();
        T* py = ctx.output(0).data_unchecked<T>();
        int64_t* pi = ctx.has_output(1) ? ctx.output(1).data_unchecked<int64_t>() : nullptr;
        const int nsp = g.nsp;
        const int64_t planes = x.shape[0] * x.shape[1];
        // Row-major strides (and column-major ones for Indices with storage_order 1).
        Dims st{}, cst{};
        int64_t acc = 1;
        for (int d = nsp - 1; d >= 0; --d) {
            st[static_cast<std::size_t>(d)] = acc;
            acc *= g.in[static_cast<std::size_t>(d)];
        }
        acc = 1;
        for (int d = 0; d < nsp; ++d) {
            cst[static_cast<std::size_t>(d)] = acc;
            acc *= g.in[static_cast<std::size_t>(d)];
        }
        for (int64_t pl = 0; pl < planes; ++pl) {
            const T* xp = px + pl * g.in_size;
            Dims op{};
            for (int64_t o = 0; o < g.out_size; ++o) {
                F best = std::numeric_limits<F>::lowest();
                if constexpr (std::is_floating_point_v<F>)
                    best = -std::numeric_limits<F>::infinity();
                int64_t best_idx = -1;
                double sum = 0;
                int64_t count = 0, count_pad = 0;
                Dims kp{};
                for (int64_t k = 0; k < g.k_size; ++k) {
                    int64_t off = 0, coff = 0;
                    bool inside = true, in_pad = true;
                    for (int d = 0; d < nsp; ++d) {
                        const auto u = static_cast<std::size_t>(d);
                        const int64_t i = op[u] * g.stride[u] - g.pb[u] + kp[u] * g.dil[u];
                        if (i < -g.pb[u] || i >= g.in[u] + g.pe[u]) in_pad = false;
                        if (i < 0 || i >= g.in[u]) inside = false;
                        off += i * st[u];
                        coff += i * cst[u];
                    }
                    count_pad += in_pad;
                    if (inside) {
                        ++count;
                        const F v = static_cast<F>(load(xp[off]));
                        if (a_.kind == PoolKind::max) {
                            bool take = v > best || best_idx < 0;
                            if constexpr (std::is_floating_point_v<F>)
                                take = take || (std::isnan(v) && !std::isnan(best));
                            if (take) {
                                best = v;
                                best_idx = a_.storage_order == 0 ? off : coff;
                            }
                        } else if (a_.kind == PoolKind::average) {
                            sum += static_cast<double>(v);
                        } else {
                            sum += std::pow(std::abs(static_cast<double>(v)), a_.p);
                        }
                    }
                    for (int d = nsp - 1; d >= 0; --d) {
                        const auto u = static_cast<std::size_t>(d);
                        if (++kp[u] < g.k[u]) break;
                        kp[u] = 0;
                    }
                }
                T& out = py[pl * g.out_size + o];
                if (a_.kind == PoolKind::max) {
                    out = store<T>(best);
                    if (pi)
                        pi[pl * g.out_size + o] = pl * g.in_size + std::max<int64_t>(best_idx, 0);
                } else if (a_.kind == PoolKind::average) {
                    const int64_t div = a_.count_include_pad ? count_pad : count;
                    const double v = div > 0 ? sum / static_cast<double>(div)
                                             : std::numeric_limits<double>::quiet_NaN();
                    out = store<T>(static_cast<F>(v));
                } else {
                    out = store<T>(static_cast<F>(std::pow(sum, 1.0 / a_.p)));
                }
                for (int d = nsp - 1; d >= 0; --d) {
                    const auto u = static_cast<std::size_t>(d);
                    if (++op[u] < g.out[u]) break;
                    op[u] = 0;
                }
            }
        }
    }

    PoolKindAttrs a_;
};


template <PoolKind K>
StatusOr<std::unique_ptr<Kernel>> make_pool(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    PoolKindAttrs a;
    {
        DSINFER_ASSIGN_OR_RETURN(PoolAttrs window, parse_pool_attrs(ctx));
        static_cast<PoolAttrs&>(a) = std::move(window);
    }
    a.kind = K;
    if (K == PoolKind::max) {
        DSINFER_ASSIGN_OR_RETURN(a.storage_order, n.attr_or<int64_t>("storage_order", 0));
        if (a.storage_order != 0 && a.storage_order != 1)
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'storage_order' must be 0 or 1, got ", a.storage_order);
    }
    if (K == PoolKind::lp) {
        const Attribute* pa = n.find_attr("p");
        if (pa != nullptr && pa->kind == AttrKind::f) {
            a.p = pa->f;  // opset 1 declared p as a float
        } else {
            DSINFER_ASSIGN_OR_RETURN(int64_t p, n.attr_or<int64_t>("p", 2));
            a.p = static_cast<double>(p);
        }
        if (!(a.p > 0))
            return Status::error(ErrorCode::invalid_model, "attribute 'p' must be positive, got ",
                                 a.p);
    }
    const std::size_t nsp = a.kernel_shape.size();
    if (const Value* v = ctx.input_value(0);
        v != nullptr && v->shape.known && v->shape.rank() != static_cast<int>(nsp) + 2)
        return Status::error(ErrorCode::invalid_model, "input X has rank ", v->shape.rank(),
                             " but kernel_shape has ", nsp, " values");
    if (K != PoolKind::max && ctx.num_outputs() > 1)
        return Status::error(ErrorCode::invalid_model, "pooling has one output, got ",
                             ctx.num_outputs());
    return make_kernel<PoolKernel>(std::move(a));
}

// ---- Global pooling --------------------------------------------------------------------------

class GlobalPoolKernel final : public Kernel {
public:
    GlobalPoolKernel(PoolKind kind, double p) : kind_(kind), p_(p) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() >= 2, ErrorCode::invalid_argument,
                      "input X must have rank >= 2, got ", x.shape().to_string());
        Shape out = x.shape();
        for (int d = 2; d < out.rank(); ++d) out[d] = 1;
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int64_t planes = x.shape[0] * x.shape[1];
        const int64_t sp = x.shape.size_between(2, x.shape.rank());
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            using F = compute_t<T>;
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t pl = 0; pl < planes; ++pl) {
                const T* xp = px + pl * sp;
                double r;
                if (kind_ == PoolKind::max) {
                    F best = -std::numeric_limits<F>::infinity();
                    for (int64_t i = 0; i < sp; ++i) {
                        const F v = static_cast<F>(load(xp[i]));
                        if (v > best || std::isnan(v)) best = v;
                        if (std::isnan(v)) break;
                    }
                    r = static_cast<double>(best);
                } else if (kind_ == PoolKind::average) {
                    double s = 0;
                    for (int64_t i = 0; i < sp; ++i) s += static_cast<double>(load(xp[i]));
                    r = s / static_cast<double>(sp);
                } else {
                    double s = 0;
                    for (int64_t i = 0; i < sp; ++i)
                        s += std::pow(std::abs(static_cast<double>(load(xp[i]))), p_);
                    r = std::pow(s, 1.0 / p_);
                }
                py[pl] = store<T>(static_cast<F>(r));
            }
            return Status::ok();
        });
    }

private:
    PoolKind kind_;
    double p_;
};

template <PoolKind K>
StatusOr<std::unique_ptr<Kernel>> make_global_pool(const KernelCreateContext& ctx) {
    double p = 2.0;
    if (K == PoolKind::lp) {
        const Attribute* pa = ctx.node().find_attr("p");
        if (pa != nullptr && pa->kind == AttrKind::f) {
            p = pa->f;
        } else {
            DSINFER_ASSIGN_OR_RETURN(int64_t pi, ctx.node().attr_or<int64_t>("p", 2));
            p = static_cast<double>(pi);
        }
        if (!(p > 0))
            return Status::error(ErrorCode::invalid_model, "attribute 'p' must be positive, got ",
                                 p);
    }
    return make_kernel<GlobalPoolKernel>(K, p);
}

}  // namespace

void register_nn_pool_kernels(KernelRegistry& r) {
    r.add({"MaxPool", "", 1, kMaxOpset, DeviceKind::cpu}, &make_pool<PoolKind::max>);
    r.add({"AveragePool", "", 1, kMaxOpset, DeviceKind::cpu}, &make_pool<PoolKind::average>);
    r.add({"LpPool", "", 1, kMaxOpset, DeviceKind::cpu}, &make_pool<PoolKind::lp>);
    r.add({"GlobalMaxPool", "", 1, kMaxOpset, DeviceKind::cpu}, &make_global_pool<PoolKind::max>);
    r.add({"GlobalAveragePool", "", 1, kMaxOpset, DeviceKind::cpu},
          &make_global_pool<PoolKind::average>);
    r.add({"GlobalLpPool", "", 1, kMaxOpset, DeviceKind::cpu}, &make_global_pool<PoolKind::lp>);
}

}  // namespace dsinfer::detail
