// Reference normalizations: BatchNormalization (inference and training_mode),
// InstanceNormalization, LayerNormalization, GroupNormalization, RMSNormalization, LRN,
// MeanVarianceNormalization, LpNormalization. Statistics are accumulated in double; 16-bit floats
// are read through float.
#include <algorithm>
#include <cmath>
#include <vector>

#include "dsinfer/ops.hpp"
#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// Element i of a floating-point tensor as double (no dispatch_types: used in hot loops).
inline double elem(const TensorView& t, int64_t i) noexcept {
    switch (t.dtype) {
        case DType::f32: return t.data_unchecked<float>()[i];
        case DType::f64: return t.data_unchecked<double>()[i];
        case DType::f16: return static_cast<float>(t.data_unchecked<float16>()[i]);
        case DType::bf16: return static_cast<float>(t.data_unchecked<bfloat16>()[i]);
        default: return 0.0;
    }
}

Status check_float(const Tensor& t, const char* what) {
    DSINFER_CHECK(kFloatTypes.contains(t.dtype()), ErrorCode::unsupported, what,
                  " has element type ", dtype_name(t.dtype()), ", which is not supported");
    return Status::ok();
}

/// Output dtype for a stash_type attribute (a TensorProto data type number).
StatusOr<DType> stash_dtype(int64_t stash_type) {
    switch (stash_type) {
        case 1: return DType::f32;
        case 10: return DType::f16;
        case 11: return DType::f64;
        case 16: return DType::bf16;
        default:
            return Status::error(ErrorCode::invalid_model, "stash_type ", stash_type,
                                 " is not a floating-point type");
    }
}

template <class F>
Status dispatch_float(DType dt, F&& f) {
    return dispatch_types(dt, FloatTypes{}, std::forward<F>(f));
}

// ---- BatchNormalization ----------------------------------------------------------------------

// training_mode (opset 14+): normalizes with the batch statistics (mean and biased variance over
// every axis but the channel) and outputs running_mean/var = input * momentum + batch * (1 -
// momentum), as the ONNX reference does.
class BatchNormKernel final : public Kernel {
public:
    BatchNormKernel(float eps, bool spatial, bool training = false, float momentum = 0.9f)
        : eps_(eps), spatial_(spatial), training_(training), momentum_(momentum) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_float(x, "input X"));
        DSINFER_CHECK(x.shape().rank() >= 2, ErrorCode::invalid_argument,
                      "input X must have rank >= 2, got ", x.shape().to_string());
        const int64_t p = params(x.shape());
        static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
        for (int i = 1; i < 5; ++i) {
            DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_argument, "input ", names[i],
                          " is required");
            DSINFER_RETURN_IF_ERROR(check_float(ctx.input(i), names[i]));
            DSINFER_CHECK(ctx.input(i).num_elements() == p, ErrorCode::invalid_argument, "input ",
                          names[i], " has shape ", ctx.input(i).shape().to_string(), ", expected ",
                          p, " elements for X of shape ", x.shape().to_string());
        }
        ctx.set_output(0, x.dtype(), x.shape());
        for (int i = 1; i <= 2; ++i)
            if (training_) ctx.set_output(i, ctx.input(i + 2).dtype(), ctx.input(i + 2).shape());
        ctx.set_workspace(static_cast<std::size_t>(4 * p) * sizeof(double));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int64_t p = params(x.shape);
        const int64_t n = x.shape[0];
        const int64_t inner = x.num_elements() / std::max<int64_t>(1, n * p);
        double* a = static_cast<double*>(ctx.workspace());
        double* b = a + p;
        double* mean = b + p;
        double* var = mean + p;
        for (int64_t c = 0; c < p; ++c) {
            mean[c] = elem(ctx.input(3), c);
            var[c] = elem(ctx.input(4), c);
        }
        if (training_) batch_statistics(x, n, p, inner, mean, var, ctx);
        for (int64_t c = 0; c < p; ++c) {
            a[c] = elem(ctx.input(1), c) / std::sqrt(var[c] + double(eps_));
            b[c] = elem(ctx.input(2), c) - mean[c] * a[c];
        }
        return dispatch_float(x.dtype, [&]<class T>() -> Status {
            using F = compute_t<T>;
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t i = 0; i < n; ++i)
                for (int64_t c = 0; c < p; ++c) {
                    const F ac = static_cast<F>(a[c]), bc = static_cast<F>(b[c]);
                    const int64_t base = (i * p + c) * inner;
                    for (int64_t j = 0; j < inner; ++j)
                        py[base + j] = store<T>(load(px[base + j]) * ac + bc);
                }
            return Status::ok();
        });
    }

private:
    int64_t params(const Shape& s) const noexcept {
        return spatial_ ? s[1] : s.size_between(1, s.rank());
    }

    // Replaces mean/var by the batch statistics and writes the running outputs (if present).
    void batch_statistics(const TensorView& x, int64_t n, int64_t p, int64_t inner, double* mean,
                          double* var, RunContext& ctx) const noexcept {
        const double count = static_cast<double>(n * inner);
        for (int64_t c = 0; c < p; ++c) {
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < inner; ++j) sum += elem(x, (i * p + c) * inner + j);
            const double m = count > 0 ? sum / count : 0.0;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < inner; ++j) {
                    const double d = elem(x, (i * p + c) * inner + j) - m;
                    sq += d * d;
                }
            const double v = count > 0 ? sq / count : 0.0;
            const double mo = momentum_;
            for (int k = 1; k <= 2; ++k) {
                if (!ctx.has_output(k)) continue;
                const double run = (k == 1 ? mean[c] : var[c]) * mo + (k == 1 ? m : v) * (1 - mo);
                (void)dispatch_float(ctx.output(k).dtype, [&]<class T>() {
                    ctx.output(k).data_unchecked<T>()[c] = store<T>(run);
                    return Status::ok();
                });
            }
            mean[c] = m;
            var[c] = v;
        }
    }

    float eps_;
    bool spatial_;
    bool training_;
    float momentum_;
};

StatusOr<std::unique_ptr<Kernel>> make_batchnorm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(float eps, n.attr_or<float>("epsilon", 1e-5f));
    int64_t spatial = 1;
    if (ctx.opset() < 9) {
        DSINFER_ASSIGN_OR_RETURN(spatial, n.attr_or<int64_t>("spatial", 1));
    }
    if (ctx.opset() >= 14) {
        DSINFER_ASSIGN_OR_RETURN(int64_t training, n.attr_or<int64_t>("training_mode", 0));
        DSINFER_ASSIGN_OR_RETURN(float momentum, n.attr_or<float>("momentum", 0.9f));
        if (training != 0) return make_kernel<BatchNormKernel>(eps, true, true, momentum);
    }
    for (int i = 1; i < ctx.num_outputs(); ++i)
        if (ctx.has_output(i))
            return Status::error(ErrorCode::unsupported,
                                 "BatchNormalization training outputs (output ", i,
                                 ") are not supported");
    return make_kernel<BatchNormKernel>(eps, spatial != 0);
}

// ---- InstanceNormalization / GroupNormalization -----------------------------------------------

// Normalizes x over blocks of `block` contiguous elements; block b uses channel range
// [c0, c0 + cpb) where each channel spans `spatial` elements. scale/bias are indexed per channel
// (per_group=false) or per block-group (per_group=true).
class GroupNormKernel final : public Kernel {
public:
    // groups == 0: instance norm (one group per channel, scale/bias per channel).
    GroupNormKernel(int64_t groups, float eps, bool per_group_params)
        : groups_(groups), eps_(eps), per_group_(per_group_params) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_float(x, "input X"));
        DSINFER_CHECK(x.shape().rank() >= 2, ErrorCode::invalid_argument,
                      "input X must have rank >= 2, got ", x.shape().to_string());
        const int64_t c = x.shape()[1];
        const int64_t g = groups_ == 0 ? c : groups_;
        DSINFER_CHECK(c % g == 0, ErrorCode::invalid_argument, "num_groups ", g,
                      " does not divide the channel count ", c);
        const int64_t np = per_group_ ? g : c;
        static const char* names[] = {"X", "scale", "B"};
        for (int i = 1; i < 3; ++i) {
            DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_argument, "input ", names[i],
                          " is required");
            DSINFER_RETURN_IF_ERROR(check_float(ctx.input(i), names[i]));
            DSINFER_CHECK(ctx.input(i).num_elements() == np, ErrorCode::invalid_argument, "input ",
                          names[i], " has shape ", ctx.input(i).shape().to_string(), ", expected ",
                          np, " elements");
        }
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& sc = ctx.input(1);
        const TensorView& bi = ctx.input(2);
        const int64_t n = x.shape[0], c = x.shape[1];
        const int64_t g = groups_ == 0 ? c : groups_;
        const int64_t cpg = c / g;
        const int64_t spatial = x.shape.size_between(2, x.shape.rank());
        const int64_t block = cpg * spatial;
        return dispatch_float(x.dtype, [&]<class T>() -> Status {
            using F = compute_t<T>;
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t i = 0; i < n; ++i)
                for (int64_t gi = 0; gi < g; ++gi) {
                    const int64_t base = (i * g + gi) * block;
                    double sum = 0, sq = 0;
                    for (int64_t j = 0; j < block; ++j)
                        sum += static_cast<double>(load(px[base + j]));
                    const double mean = block > 0 ? sum / static_cast<double>(block) : 0.0;
                    for (int64_t j = 0; j < block; ++j) {
                        const double d = static_cast<double>(load(px[base + j])) - mean;
                        sq += d * d;
                    }
                    const double var = block > 0 ? sq / static_cast<double>(block) : 0.0;
                    const double inv = 1.0 / std::sqrt(var + double(eps_));
                    for (int64_t ch = 0; ch < cpg; ++ch) {
                        const int64_t pidx = per_group_ ? gi : gi * cpg + ch;
                        const double s = elem(sc, pidx) * inv;
                        const F a = static_cast<F>(s);
                        const F b = static_cast<F>(elem(bi, pidx) - mean * s);
                        const int64_t cb = base + ch * spatial;
                        for (int64_t j = 0; j < spatial; ++j)
                            py[cb + j] = store<T>(load(px[cb + j]) * a + b);
                    }
                }
            return Status::ok();
        });
    }

private:
    int64_t groups_;
    float eps_;
    bool per_group_;
};

StatusOr<std::unique_ptr<Kernel>> make_instancenorm(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    return make_kernel<GroupNormKernel>(0, eps, false);
}

StatusOr<std::unique_ptr<Kernel>> make_groupnorm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(float eps, n.attr_or<float>("epsilon", 1e-5f));
    DSINFER_ASSIGN_OR_RETURN(int64_t groups, n.attr<int64_t>("num_groups"));
    if (groups <= 0)
        return Status::error(ErrorCode::invalid_model, "num_groups must be positive, got ", groups);
    return make_kernel<GroupNormKernel>(groups, eps, ctx.opset() < 21);
}

// ---- LayerNormalization / RMSNormalization ----------------------------------------------------

class LayerNormKernel final : public Kernel {
public:
    LayerNormKernel(int64_t axis, float eps, DType stash, bool rms)
        : axis_(axis), eps_(eps), stash_(stash), rms_(rms) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_float(x, "input X"));
        const int rank = x.shape().rank();
        DSINFER_CHECK(axis_ >= -rank && axis_ < rank, ErrorCode::invalid_argument, "axis ", axis_,
                      " is outside [", -rank, ", ", rank, ") for X of shape ",
                      x.shape().to_string());
        const int a = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
        static const char* names[] = {"X", "Scale", "B"};
        for (int i = 1; i < 3; ++i) {
            if (!ctx.has_input(i)) {
                DSINFER_CHECK(i != 1, ErrorCode::invalid_argument, "input Scale is required");
                continue;
            }
            const Tensor& p = ctx.input(i);
            DSINFER_RETURN_IF_ERROR(check_float(p, names[i]));
            auto b = broadcast_shapes(x.shape(), p.shape());
            DSINFER_CHECK(b.is_ok() && b.value() == x.shape(), ErrorCode::invalid_argument,
                          "input ", names[i], " of shape ", p.shape().to_string(),
                          " cannot be broadcast to X of shape ", x.shape().to_string());
        }
        ctx.set_output(0, x.dtype(), x.shape());
        Shape stat = x.shape();
        for (int d = a; d < rank; ++d) stat[d] = 1;
        if (ctx.has_output(1)) ctx.set_output(1, stash_, stat);
        if (ctx.has_output(2)) ctx.set_output(2, stash_, stat);
        const int64_t outer = x.shape().size_between(0, a);
        ctx.set_workspace(static_cast<std::size_t>(2 * outer) * sizeof(double));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        const int a = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
        const int64_t outer = x.shape.size_between(0, a);
        const int64_t norm = x.shape.size_between(a, rank);
        double* mean = static_cast<double*>(ctx.workspace());
        double* inv = mean + outer;
        const bool has_b = !rms_ && ctx.has_input(2);
        return dispatch_float(x.dtype, [&]<class T>() -> Status {
            using F = compute_t<T>;
            const T* px = x.data_unchecked<T>();
            for (int64_t o = 0; o < outer; ++o) {
                const T* row = px + o * norm;
                double m = 0;
                if (!rms_) {
                    for (int64_t j = 0; j < norm; ++j) m += static_cast<double>(load(row[j]));
                    m = norm > 0 ? m / static_cast<double>(norm) : 0.0;
                }
                double sq = 0;
                for (int64_t j = 0; j < norm; ++j) {
                    const double d = static_cast<double>(load(row[j])) - m;
                    sq += d * d;
                }
                const double var = norm > 0 ? sq / static_cast<double>(norm) : 0.0;
                mean[o] = m;
                inv[o] = 1.0 / std::sqrt(var + double(eps_));
            }
            T* py = ctx.output(0).data_unchecked<T>();
            const Shape& xs = x.shape;
            const std::array<Strides, 3> st{
                contiguous_strides(xs), broadcast_strides(ctx.input(1).shape, xs),
                has_b ? broadcast_strides(ctx.input(2).shape, xs) : Strides{}};
            const TensorView& sc = ctx.input(1);
            int64_t e = 0;
            for_each_offset<3>(xs, st, [&](const std::array<int64_t, 3>& off) {
                const int64_t o = norm > 0 ? e / norm : 0;
                double v = (static_cast<double>(load(px[off[0]])) - mean[o]) * inv[o];
                v *= elem(sc, off[1]);
                if (has_b) v += elem(ctx.input(2), off[2]);
                py[off[0]] = store<T>(static_cast<F>(v));
                ++e;
            });
            for (int k = 1; k <= 2; ++k) {
                if (!ctx.has_output(k)) continue;
                const double* src = k == 1 ? mean : inv;
                DSINFER_RETURN_IF_ERROR(dispatch_float(stash_, [&]<class U>() -> Status {
                    U* out = ctx.output(k).data_unchecked<U>();
                    for (int64_t o = 0; o < outer; ++o)
                        out[o] = store<U>(static_cast<compute_t<U>>(src[o]));
                    return Status::ok();
                }));
            }
            return Status::ok();
        });
    }

private:
    int64_t axis_;
    float eps_;
    DType stash_;
    bool rms_;
};

template <bool Rms>
StatusOr<std::unique_ptr<Kernel>> make_layernorm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, n.attr_or<int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(float eps, n.attr_or<float>("epsilon", 1e-5f));
    DSINFER_ASSIGN_OR_RETURN(int64_t stash, n.attr_or<int64_t>("stash_type", 1));
    DSINFER_ASSIGN_OR_RETURN(DType sd, stash_dtype(stash));
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known) {
        DSINFER_RETURN_IF_ERROR(normalize_axis(axis, v->shape.rank()).status());
    }
    if (Rms && ctx.num_outputs() > 1)
        return Status::error(ErrorCode::invalid_model, "RMSNormalization has one output, got ",
                             ctx.num_outputs());
    return make_kernel<LayerNormKernel>(axis, eps, sd, Rms);
}

// ---- LRN -------------------------------------------------------------------------------------

class LrnKernel final : public Kernel {
public:
    LrnKernel(int64_t size, float alpha, float beta, float bias)
        : size_(size), alpha_(alpha), beta_(beta), bias_(bias) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_float(x, "input X"));
        DSINFER_CHECK(x.shape().rank() >= 2, ErrorCode::invalid_argument,
                      "input X must have rank >= 2, got ", x.shape().to_string());
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int64_t n = x.shape[0], c = x.shape[1];
        const int64_t sp = x.shape.size_between(2, x.shape.rank());
        const int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
        const double scale = double(alpha_) / static_cast<double>(size_);
        return dispatch_float(x.dtype, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t i = 0; i < n; ++i)
                for (int64_t ch = 0; ch < c; ++ch) {
                    const int64_t c0 = std::max<int64_t>(0, ch - lo);
                    const int64_t c1 = std::min<int64_t>(c - 1, ch + hi);
                    for (int64_t s = 0; s < sp; ++s) {
                        double sum = 0;
                        for (int64_t k = c0; k <= c1; ++k) {
                            const double v = static_cast<double>(load(px[(i * c + k) * sp + s]));
                            sum += v * v;
                        }
                        const int64_t idx = (i * c + ch) * sp + s;
                        const double y = static_cast<double>(load(px[idx])) /
                                         std::pow(double(bias_) + scale * sum, double(beta_));
                        py[idx] = store<T>(static_cast<compute_t<T>>(y));
                    }
                }
            return Status::ok();
        });
    }

private:
    int64_t size_;
    float alpha_, beta_, bias_;
};

StatusOr<std::unique_ptr<Kernel>> make_lrn(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(int64_t size, n.attr<int64_t>("size"));
    DSINFER_ASSIGN_OR_RETURN(float alpha, n.attr_or<float>("alpha", 1e-4f));
    DSINFER_ASSIGN_OR_RETURN(float beta, n.attr_or<float>("beta", 0.75f));
    DSINFER_ASSIGN_OR_RETURN(float bias, n.attr_or<float>("bias", 1.0f));
    if (size <= 0)
        return Status::error(ErrorCode::invalid_model, "attribute 'size' must be positive, got ",
                             size);
    return make_kernel<LrnKernel>(size, alpha, beta, bias);
}

// ---- MeanVarianceNormalization / LpNormalization ----------------------------------------------

// Both reduce over a set of axes and rescale; `lp` = 0 selects MVN, 1 or 2 selects Lp norm.
class AxesNormKernel final : public Kernel {
public:
    AxesNormKernel(std::vector<int64_t> axes, int64_t lp) : axes_(std::move(axes)), lp_(lp) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_float(x, "input X"));
        const int rank = x.shape().rank();
        std::array<bool, kMaxRank> red{};
        for (auto a : axes_) {
            DSINFER_CHECK(a >= -rank && a < rank, ErrorCode::invalid_argument, "axis ", a,
                          " is outside [", -rank, ", ", rank, ") for X of shape ",
                          x.shape().to_string());
            red[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
        }
        int64_t kept = 1;
        for (int d = 0; d < rank; ++d)
            if (!red[static_cast<std::size_t>(d)]) kept *= x.shape()[d];
        ctx.set_output(0, x.dtype(), x.shape());
        ctx.set_workspace(static_cast<std::size_t>(2 * kept) * sizeof(double));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const Shape& xs = x.shape;
        const int rank = xs.rank();
        std::array<bool, kMaxRank> red{};
        for (auto a : axes_) red[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
        // Strides into the statistics array (kept dims only, row-major).
        Strides ss{};
        int64_t kept = 1, count = 1;
        for (int d = rank - 1; d >= 0; --d) {
            if (red[static_cast<std::size_t>(d)]) {
                count *= xs[d];
            } else {
                ss[static_cast<std::size_t>(d)] = kept;
                kept *= xs[d];
            }
        }
        double* s1 = static_cast<double*>(ctx.workspace());
        double* s2 = s1 + kept;
        std::fill(s1, s1 + 2 * kept, 0.0);
        const std::array<Strides, 2> st{contiguous_strides(xs), ss};
        return dispatch_float(x.dtype, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for_each_offset<2>(xs, st, [&](const std::array<int64_t, 2>& off) {
                const double v = static_cast<double>(load(px[off[0]]));
                if (lp_ == 0) {
                    s1[off[1]] += v;
                    s2[off[1]] += v * v;
                } else {
                    s1[off[1]] += lp_ == 1 ? std::abs(v) : v * v;
                }
            });
            for (int64_t k = 0; k < kept; ++k) {
                if (lp_ == 0) {
                    const double m = count > 0 ? s1[k] / static_cast<double>(count) : 0.0;
                    const double var = count > 0 ? s2[k] / static_cast<double>(count) - m * m : 0.0;
                    s1[k] = m;
                    s2[k] = std::sqrt(std::max(var, 0.0)) + 1e-9;
                } else if (lp_ == 2) {
                    s1[k] = std::sqrt(s1[k]);
                }
            }
            for_each_offset<2>(xs, st, [&](const std::array<int64_t, 2>& off) {
                const double v = static_cast<double>(load(px[off[0]]));
                // A zero Lp norm gives 0 (as the ONNX reference does), not 0/0.
                const double y = lp_ == 0            ? (v - s1[off[1]]) / s2[off[1]]
                                 : s1[off[1]] == 0.0 ? 0.0
                                                     : v / s1[off[1]];
                py[off[0]] = store<T>(static_cast<compute_t<T>>(y));
            });
            return Status::ok();
        });
    }

private:
    std::vector<int64_t> axes_;
    int64_t lp_;
};

StatusOr<std::unique_ptr<Kernel>> make_mvn(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto axes,
                             ctx.node().attr_or<std::vector<int64_t>>("axes", {0, 2, 3}));
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known)
        for (auto a : axes) DSINFER_RETURN_IF_ERROR(normalize_axis(a, v->shape.rank()).status());
    return make_kernel<AxesNormKernel>(std::move(axes), 0);
}

StatusOr<std::unique_ptr<Kernel>> make_lpnorm(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(int64_t p, ctx.node().attr_or<int64_t>("p", 2));
    if (p != 1 && p != 2)
        return Status::error(ErrorCode::invalid_model, "attribute 'p' must be 1 or 2, got ", p);
    if (const Value* v = ctx.input_value(0); v != nullptr && v->shape.known)
        DSINFER_RETURN_IF_ERROR(normalize_axis(axis, v->shape.rank()).status());
    return make_kernel<AxesNormKernel>(std::vector<int64_t>{axis}, p);
}

}  // namespace

void register_nn_norm_kernels(KernelRegistry& r) {
    r.add({"BatchNormalization", "", 1, kMaxOpset, DeviceKind::cpu}, &make_batchnorm);
    r.add({"InstanceNormalization", "", 1, kMaxOpset, DeviceKind::cpu}, &make_instancenorm);
    r.add({"GroupNormalization", "", 18, kMaxOpset, DeviceKind::cpu}, &make_groupnorm);
    r.add({"LayerNormalization", "", 17, kMaxOpset, DeviceKind::cpu}, &make_layernorm<false>);
    // dsinfer's fused LayerNormalization (docs/OPTIMIZER.md): ONNX-17's, at any model opset.
    r.add({"LayerNormalization", kDsinferDomain, 1, 1, DeviceKind::cpu}, &make_layernorm<false>);
    r.add({"RMSNormalization", "", 23, kMaxOpset, DeviceKind::cpu}, &make_layernorm<true>);
    // dsinfer's fused RMSNormalization (fuse_rms_norm below opset 23): ONNX-23's, one kernel.
    r.add({"RMSNormalization", kDsinferDomain, 1, 1, DeviceKind::cpu}, &make_layernorm<true>);
    r.add({"LRN", "", 1, kMaxOpset, DeviceKind::cpu}, &make_lrn);
    r.add({"MeanVarianceNormalization", "", 1, kMaxOpset, DeviceKind::cpu}, &make_mvn);
    r.add({"LpNormalization", "", 1, kMaxOpset, DeviceKind::cpu}, &make_lpnorm);
}

}  // namespace dsinfer::detail
