// Reference Conv and ConvTranspose (1-D to 6-D spatial). Conv is im2col + Eigen GEMM per
// (image, group), with a direct loop for depthwise convolutions and no im2col for 1x1
// stride-1 unpadded kernels; ConvTranspose is GEMM + col2im. 16-bit floats compute in float.
#include <Eigen/Core>
#include <algorithm>
#include <string>
#include <vector>

#include "cpu/reference/eigen_gemm.hpp"
#include "cpu/reference/groups.hpp"
#include "ops/conv.hpp"
#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;
using Dims = std::array<int64_t, kMaxRank>;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapC = Eigen::Map<const RowMat<T>>;
template <class T>
using MapM = Eigen::Map<RowMat<T>>;

/// The optional bias B: a vector of `m` elements of X's type.
Status check_bias(const PrepareContext& ctx, int64_t m) {
    if (!ctx.has_input(2)) return Status::ok();
    const Tensor& b = ctx.input(2);
    DSINFER_CHECK(b.dtype() == ctx.input(0).dtype() && b.num_elements() == m,
                  ErrorCode::invalid_argument, "input B must be a ", dtype_name(ctx.input(0).dtype()),
                  " vector of ", m, " elements, got ", dtype_name(b.dtype()), " ",
                  b.shape().to_string());
    return Status::ok();
}

Status check_shapes_common(const PrepareContext& ctx, const ConvAttrs& a, const char* op) {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, op,
                  " does not support element type ", dtype_name(x.dtype()));
    DSINFER_CHECK(w.dtype() == x.dtype(), ErrorCode::invalid_argument, "input W has type ",
                  dtype_name(w.dtype()), ", expected ", dtype_name(x.dtype()));
    DSINFER_CHECK(x.shape().rank() >= 3, ErrorCode::invalid_argument,
                  "input X must have rank >= 3 (N, C, spatial...), got ", x.shape().to_string());
    DSINFER_CHECK(w.shape().rank() == x.shape().rank(), ErrorCode::invalid_argument,
                  "input W of shape ", w.shape().to_string(), " must have the rank of X ",
                  x.shape().to_string());
    const int nsp = x.shape().rank() - 2;
    DSINFER_RETURN_IF_ERROR(check_conv_attrs(a, nsp, ErrorCode::invalid_argument));
    for (int i = 0; i < static_cast<int>(a.kernel_shape.size()); ++i)
        DSINFER_CHECK(a.kernel_shape[static_cast<std::size_t>(i)] == w.shape()[i + 2],
                      ErrorCode::invalid_argument,
                      "attribute 'kernel_shape' does not match W of shape ", w.shape().to_string());
    return Status::ok();
}

template <class T>
void widen(const T* src, float* dst, int64_t n) noexcept {
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

/// The operands of one run: X, W, the optional B (null when absent), Y and the workspace.
struct ConvOperands {
    const TensorView* x = nullptr;
    const TensorView* w = nullptr;
    const TensorView* b = nullptr;
    const TensorView* y = nullptr;
    void* ws = nullptr;
    std::size_t ws_bytes = 0;
};

inline std::size_t align64(std::size_t n) noexcept { return (n + 63) / 64 * 64; }

ConvOperands conv_operands(const RunContext& ctx) noexcept {
    return {&ctx.input(0), &ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
            &ctx.output(0), ctx.workspace(), ctx.workspace_bytes()};
}

// ---- Conv ------------------------------------------------------------------------------------

class ConvKernel final : public DirectKernel {
public:
    explicit ConvKernel(ConvAttrs a) : a_(std::move(a)) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(check_shapes_common(ctx, a_, "Conv"));
        const Shape& xs = ctx.input(0).shape();
        const Shape& ws = ctx.input(1).shape();
        const int64_t c = xs[1], m = ws[0];
        DSINFER_CHECK(c == ws[1] * a_.group, ErrorCode::invalid_argument, "input X has ", c,
                      " channels but W ", ws.to_string(), " with group ", a_.group, " expects ",
                      ws[1] * a_.group);
        DSINFER_CHECK(m % a_.group == 0, ErrorCode::invalid_argument, "group ", a_.group,
                      " does not divide the ", m, " output channels of W");
        DSINFER_RETURN_IF_ERROR(check_bias(ctx, m));
        ConvGeom g;
        DSINFER_RETURN_IF_ERROR(conv_geometry(a_, xs, ws, g));
        Shape out{xs[0], m};
        for (int i = 0; i < g.nsp; ++i) out.push_back(g.out[static_cast<std::size_t>(i)]);
        ctx.set_output(0, ctx.input(0).dtype(), out);
        const bool half = is_half(ctx.input(0).dtype());
        const std::size_t fsz = ctx.input(0).dtype() == DType::f64 ? 8 : 4;
        std::size_t ws_elems = 0;
        if (!depthwise(c, m)) {
            const int64_t cg = c / a_.group, mg = m / a_.group;
            if (half_or_im2col(g, half))
                ws_elems += static_cast<std::size_t>(cg * g.k_size * g.out_size);
            if (half)
                ws_elems +=
                    static_cast<std::size_t>(ws.num_elements() + mg * g.out_size + cg * g.in_size);
        }
        // The GEMM's packed panels (eigen_gemm.hpp) after the buffers above.
        std::size_t scratch = 0;
        if (!depthwise(c, m)) {
            const int64_t cg = c / a_.group, mg = m / a_.group;
            scratch = ctx.input(0).dtype() == DType::f64
                          ? gemm_scratch_bytes<double>(mg, g.out_size, cg * g.k_size)
                          : gemm_scratch_bytes<float>(mg, g.out_size, cg * g.k_size);
        }
        ctx.set_workspace(scratch == 0 ? ws_elems * fsz : align64(ws_elems * fsz) + scratch);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override { return run_ops(conv_operands(ctx)); }

    Status run_direct(std::span<const TensorView* const> in, const TensorView& out, void* ws,
                      std::size_t ws_bytes) const noexcept override {
        if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr)
            return Status(ErrorCode::internal, "Conv needs inputs X and W");
        return run_ops({in[0], in[1], in.size() > 2 ? in[2] : nullptr, &out, ws, ws_bytes});
    }

private:
    Status run_ops(const ConvOperands& op) const noexcept {
        const TensorView& x = *op.x;
        const TensorView& w = *op.w;
        ConvGeom g;
        DSINFER_RETURN_IF_ERROR(conv_geometry(a_, x.shape, w.shape, g));
        try {
            return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
                if (depthwise(x.shape[1], w.shape[0]))
                    run_depthwise<T>(op, g);
                else
                    run_gemm<T>(op, g);
                return Status::ok();
            });
        } catch (const std::bad_alloc&) {
            // Only Eigen's own buffers, beyond what prepare planned (eigen_gemm.hpp).
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
    }

    static bool is_half(DType dt) { return dt == DType::f16 || dt == DType::bf16; }
    // Whether the workspace starts with the im2col buffer (sized even for half pointwise).
    static bool half_or_im2col(const ConvGeom& g, bool half) { return half || !pointwise(g); }
    bool depthwise(int64_t c, int64_t /*m*/) const { return a_.group == c && a_.group > 1; }
    static bool pointwise(const ConvGeom& g) {
        for (int i = 0; i < g.nsp; ++i) {
            const auto u = static_cast<std::size_t>(i);
            if (g.k[u] != 1 || g.stride[u] != 1 || g.pb[u] != 0 || g.pe[u] != 0) return false;
        }
        return true;
    }

    // col[(c * K + kidx), o] = x[c, o * stride - pad + kpos * dil] (0 outside).
    template <class T, class F>
    static void im2col(const T* x, F* col, int64_t channels, const ConvGeom& g) noexcept {
        const int nsp = g.nsp;
        const int last = nsp - 1;
        const auto ul = static_cast<std::size_t>(last);
        const Dims in_st = [&] {
            Dims s{};
            int64_t acc = 1;
            for (int i = nsp - 1; i >= 0; --i) {
                s[static_cast<std::size_t>(i)] = acc;
                acc *= g.in[static_cast<std::size_t>(i)];
            }
            return s;
        }();
        const int64_t out_last = g.out[ul];
        const int64_t outer_count = g.out_size / std::max<int64_t>(1, out_last);
        F* dst = col;
        for (int64_t c = 0; c < channels; ++c) {
            const T* xc = x + c * g.in_size;
            Dims kp{};
            for (int64_t kidx = 0; kidx < g.k_size; ++kidx) {
                Dims op{};
                for (int64_t oo = 0; oo < outer_count; ++oo) {
                    int64_t base = 0;
                    bool inside = true;
                    for (int d = 0; d < last; ++d) {
                        const auto u = static_cast<std::size_t>(d);
                        const int64_t i = op[u] * g.stride[u] - g.pb[u] + kp[u] * g.dil[u];
                        if (i < 0 || i >= g.in[u]) {
                            inside = false;
                            break;
                        }
                        base += i * in_st[u];
                    }
                    if (!inside) {
                        std::fill(dst, dst + out_last, F(0));
                    } else {
                        const int64_t s = g.stride[ul];
                        const int64_t off = kp[ul] * g.dil[ul] - g.pb[ul];
                        const T* row = xc + base;
                        for (int64_t o = 0; o < out_last; ++o) {
                            const int64_t i = o * s + off;
                            dst[o] = (i >= 0 && i < g.in[ul]) ? static_cast<F>(load(row[i])) : F(0);
                        }
                    }
                    dst += out_last;
                    for (int d = last - 1; d >= 0; --d) {
                        const auto u = static_cast<std::size_t>(d);
                        if (++op[u] < g.out[u]) break;
                        op[u] = 0;
                    }
                }
                for (int d = nsp - 1; d >= 0; --d) {
                    const auto u = static_cast<std::size_t>(d);
                    if (++kp[u] < g.k[u]) break;
                    kp[u] = 0;
                }
            }
        }
    }

    template <class T>
    void run_gemm(const ConvOperands& op, const ConvGeom& g) const {
        using F = compute_t<T>;
        const TensorView& x = *op.x;
        const TensorView& w = *op.w;
        const TensorView& y = *op.y;
        const int64_t n = x.shape[0], c = x.shape[1], m = w.shape[0];
        const int64_t cg = c / a_.group, mg = m / a_.group;
        const int64_t kk = cg * g.k_size;
        const bool pw = pointwise(g);
        F* col = static_cast<F*>(op.ws);
        // The GEMM's packed panels follow the buffers prepare sized (see prepare).
        std::size_t own = 0;
        if (half_or_im2col(g, is_half_v<T>)) own += static_cast<std::size_t>(kk * g.out_size);
        if constexpr (is_half_v<T>)
            own += static_cast<std::size_t>(w.num_elements() + mg * g.out_size + cg * g.in_size);
        own = align64(own * sizeof(F));
        void* scratch = static_cast<unsigned char*>(op.ws) + own;
        const std::size_t scratch_bytes = op.ws_bytes > own ? op.ws_bytes - own : 0;
        const F* wf;
        F* yf = nullptr;
        F* xf = nullptr;
        if constexpr (is_half_v<T>) {
            F* wbuf = col + kk * g.out_size;
            widen(w.data_unchecked<T>(), wbuf, w.num_elements());
            wf = wbuf;
            yf = wbuf + w.num_elements();
            xf = yf + mg * g.out_size;
        } else {
            wf = w.data_unchecked<T>();
        }
        const T* px = x.data_unchecked<T>();
        T* py = y.data_unchecked<T>();
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t gi = 0; gi < a_.group; ++gi) {
                const T* xg = px + (i * c + gi * cg) * g.in_size;
                const F* b;
                if constexpr (is_half_v<T>) {
                    if (pw) {
                        widen(xg, xf, cg * g.in_size);
                        b = xf;
                    } else {
                        im2col<T, F>(xg, col, cg, g);
                        b = col;
                    }
                } else {
                    if (pw) {
                        b = xg;
                    } else {
                        im2col<T, F>(xg, col, cg, g);
                        b = col;
                    }
                }
                F* out;
                if constexpr (is_half_v<T>)
                    out = yf;
                else
                    out = py + (i * m + gi * mg) * g.out_size;
                if (g.out_size > 0 && mg > 0) {
                    auto ym = MapM<F>(out, mg, g.out_size);
                    if (kk == 0)
                        ym.setZero();
                    else
                        product_into<false>(ym, MapC<F>(wf + gi * mg * kk, mg, kk),
                                            MapC<F>(b, kk, g.out_size), F(1), scratch,
                                            scratch_bytes);
                }
                T* dst = py + (i * m + gi * mg) * g.out_size;
                for (int64_t mm = 0; mm < mg; ++mm) {
                    const F bias = op.b != nullptr
                                       ? static_cast<F>(load(op.b->data_unchecked<T>()[gi * mg + mm]))
                                       : F(0);
                    F* orow = out + mm * g.out_size;
                    T* drow = dst + mm * g.out_size;
                    for (int64_t o = 0; o < g.out_size; ++o) drow[o] = store<T>(orow[o] + bias);
                }
            }
        }
    }

    // One input channel per group: out channel oc reads input channel oc / (M / C).
    template <class T>
    void run_depthwise(const ConvOperands& op, const ConvGeom& g) const noexcept {
        using F = compute_t<T>;
        const TensorView& x = *op.x;
        const TensorView& w = *op.w;
        const int64_t n = x.shape[0], c = x.shape[1], m = w.shape[0];
        const int64_t mult = m / c;
        const T* px = x.data_unchecked<T>();
        const T* pw = w.data_unchecked<T>();
        T* py = op.y->data_unchecked<T>();
        const int nsp = g.nsp;
        Dims in_st{};
        int64_t acc = 1;
        for (int i = nsp - 1; i >= 0; --i) {
            in_st[static_cast<std::size_t>(i)] = acc;
            acc *= g.in[static_cast<std::size_t>(i)];
        }
        for (int64_t i = 0; i < n; ++i)
            for (int64_t oc = 0; oc < m; ++oc) {
                const T* xc = px + (i * c + oc / mult) * g.in_size;
                const T* wk = pw + oc * g.k_size;
                T* yc = py + (i * m + oc) * g.out_size;
                const F bias = op.b != nullptr ? static_cast<F>(load(op.b->data_unchecked<T>()[oc])) : F(0);
                Dims opos{};
                for (int64_t o = 0; o < g.out_size; ++o) {
                    F sum = bias;
                    Dims kp{};
                    for (int64_t k = 0; k < g.k_size; ++k) {
                        int64_t off = 0;
                        bool inside = true;
                        for (int d = 0; d < nsp; ++d) {
                            const auto u = static_cast<std::size_t>(d);
                            const int64_t ii = opos[u] * g.stride[u] - g.pb[u] + kp[u] * g.dil[u];
                            if (ii < 0 || ii >= g.in[u]) {
                                inside = false;
                                break;
                            }
                            off += ii * in_st[u];
                        }
                        if (inside)
                            sum += static_cast<F>(load(xc[off])) * static_cast<F>(load(wk[k]));
                        for (int d = nsp - 1; d >= 0; --d) {
                            const auto u = static_cast<std::size_t>(d);
                            if (++kp[u] < g.k[u]) break;
                            kp[u] = 0;
                        }
                    }
                    yc[o] = store<T>(sum);
                    for (int d = nsp - 1; d >= 0; --d) {
                        const auto u = static_cast<std::size_t>(d);
                        if (++opos[u] < g.out[u]) break;
                        opos[u] = 0;
                    }
                }
            }
    }

    ConvAttrs a_;
};

StatusOr<std::unique_ptr<Kernel>> make_conv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false));
    return make_kernel<ConvKernel>(std::move(a));
}

// ---- ConvTranspose ---------------------------------------------------------------------------

class ConvTransposeKernel final : public Kernel {
public:
    explicit ConvTransposeKernel(ConvAttrs a) : a_(std::move(a)) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(check_shapes_common(ctx, a_, "ConvTranspose"));
        const Shape& xs = ctx.input(0).shape();
        const Shape& ws = ctx.input(1).shape();
        const int64_t c = xs[1];
        DSINFER_CHECK(c % a_.group == 0, ErrorCode::invalid_argument, "group ", a_.group,
                      " does not divide the ", c, " input channels");
        DSINFER_CHECK(ws[0] == c, ErrorCode::invalid_argument, "input W of shape ", ws.to_string(),
                      " must have ", c, " (input channels) as dimension 0");
        const int64_t m = ws[1] * a_.group;
        for (int i = 0; i < static_cast<int>(a_.output_padding.size()); ++i) {
            const auto u = static_cast<std::size_t>(i);
            DSINFER_CHECK(a_.output_padding[u] <
                              std::max(attr_at(a_.strides, i, 1), attr_at(a_.dilations, i, 1)),
                          ErrorCode::invalid_argument, "output_padding ", a_.output_padding[u],
                          " must be smaller than the stride or dilation");
        }
        DSINFER_RETURN_IF_ERROR(check_bias(ctx, m));
        ConvGeom g;
        DSINFER_RETURN_IF_ERROR(convt_geometry(a_, xs, ws, g));
        Shape out{xs[0], m};
        for (int i = 0; i < g.nsp; ++i) out.push_back(g.out[static_cast<std::size_t>(i)]);
        ctx.set_output(0, ctx.input(0).dtype(), out);
        const int64_t mg = m / a_.group;
        std::size_t elems = static_cast<std::size_t>(mg * g.k_size * g.in_size);
        const bool half = ctx.input(0).dtype() == DType::f16 || ctx.input(0).dtype() == DType::bf16;
        if (half)
            elems += static_cast<std::size_t>(ws.num_elements() + xs.num_elements() +
                                              out.num_elements());
        const bool f64 = ctx.input(0).dtype() == DType::f64;
        const int64_t cg = c / a_.group;
        // The GEMM's packed panels (eigen_gemm.hpp) after the buffers above.
        const std::size_t scratch =
            f64 ? gemm_scratch_bytes<double>(mg * g.k_size, g.in_size, cg)
                : gemm_scratch_bytes<float>(mg * g.k_size, g.in_size, cg);
        const std::size_t own = elems * (f64 ? 8 : 4);
        ctx.set_workspace(scratch == 0 ? own : align64(own) + scratch);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const ConvOperands op = conv_operands(ctx);
        ConvGeom g;
        DSINFER_RETURN_IF_ERROR(convt_geometry(a_, op.x->shape, op.w->shape, g));
        try {
            return dispatch_types(op.x->dtype, FloatTypes{}, [&]<class T>() -> Status {
                compute<T>(op, g);
                return Status::ok();
            });
        } catch (const std::bad_alloc&) {
            // Only Eigen's own buffers, beyond what prepare planned (eigen_gemm.hpp).
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
    }

private:
    template <class T>
    void compute(const ConvOperands& op, const ConvGeom& g) const {
        using F = compute_t<T>;
        const TensorView& x = *op.x;
        const TensorView& w = *op.w;
        const TensorView& y = *op.y;
        const int64_t n = x.shape[0], c = x.shape[1];
        const int64_t cg = c / a_.group, mg = w.shape[1], m = mg * a_.group;
        const int64_t rows = mg * g.k_size;
        F* col = static_cast<F*>(op.ws);
        std::size_t own = static_cast<std::size_t>(rows * g.in_size);
        if constexpr (is_half_v<T>)
            own += static_cast<std::size_t>(w.num_elements() + x.num_elements() + y.num_elements());
        own = align64(own * sizeof(F));
        void* scratch = static_cast<unsigned char*>(op.ws) + own;
        const std::size_t scratch_bytes = op.ws_bytes > own ? op.ws_bytes - own : 0;
        const F* wf;
        const F* xf;
        F* yf;
        if constexpr (is_half_v<T>) {
            F* wb = col + rows * g.in_size;
            F* xb = wb + w.num_elements();
            F* yb = xb + x.num_elements();
            widen(w.data_unchecked<T>(), wb, w.num_elements());
            widen(x.data_unchecked<T>(), xb, x.num_elements());
            wf = wb;
            xf = xb;
            yf = yb;
        } else {
            wf = w.data_unchecked<T>();
            xf = x.data_unchecked<T>();
            yf = y.data_unchecked<T>();
        }
        // Y starts as the bias.
        for (int64_t i = 0; i < n; ++i)
            for (int64_t oc = 0; oc < m; ++oc) {
                const F b = op.b != nullptr ? static_cast<F>(load(op.b->data_unchecked<T>()[oc])) : F(0);
                std::fill(yf + (i * m + oc) * g.out_size, yf + (i * m + oc + 1) * g.out_size, b);
            }
        const int nsp = g.nsp;
        Dims out_st{};
        int64_t acc = 1;
        for (int d = nsp - 1; d >= 0; --d) {
            out_st[static_cast<std::size_t>(d)] = acc;
            acc *= g.out[static_cast<std::size_t>(d)];
        }
        for (int64_t i = 0; i < n; ++i)
            for (int64_t gi = 0; gi < a_.group; ++gi) {
                if (rows == 0 || g.in_size == 0) continue;
                auto colm = MapM<F>(col, rows, g.in_size);
                if (cg == 0)
                    colm.setZero();
                else
                    product_into<false>(colm, MapC<F>(wf + gi * cg * rows, cg, rows).transpose(),
                                        MapC<F>(xf + (i * c + gi * cg) * g.in_size, cg, g.in_size),
                                        F(1), scratch, scratch_bytes);
                F* yg = yf + (i * m + gi * mg) * g.out_size;
                // col2im: scatter-add each column entry to its output position.
                for (int64_t mm = 0; mm < mg; ++mm) {
                    F* yc = yg + mm * g.out_size;
                    Dims kp{};
                    for (int64_t k = 0; k < g.k_size; ++k) {
                        const F* crow = col + (mm * g.k_size + k) * g.in_size;
                        Dims ip{};
                        for (int64_t p = 0; p < g.in_size; ++p) {
                            int64_t off = 0;
                            bool inside = true;
                            for (int d = 0; d < nsp; ++d) {
                                const auto u = static_cast<std::size_t>(d);
                                const int64_t o = ip[u] * g.stride[u] - g.pb[u] + kp[u] * g.dil[u];
                                if (o < 0 || o >= g.out[u]) {
                                    inside = false;
                                    break;
                                }
                                off += o * out_st[u];
                            }
                            if (inside) yc[off] += crow[p];
                            for (int d = nsp - 1; d >= 0; --d) {
                                const auto u = static_cast<std::size_t>(d);
                                if (++ip[u] < g.in[u]) break;
                                ip[u] = 0;
                            }
                        }
                        for (int d = nsp - 1; d >= 0; --d) {
                            const auto u = static_cast<std::size_t>(d);
                            if (++kp[u] < g.k[u]) break;
                            kp[u] = 0;
                        }
                    }
                }
            }
        if constexpr (is_half_v<T>) {
            T* py = y.data_unchecked<T>();
            for (int64_t e = 0; e < y.num_elements(); ++e) py[e] = store<T>(yf[e]);
        }
    }

    ConvAttrs a_;
};

StatusOr<std::unique_ptr<Kernel>> make_conv_transpose(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, true));
    return make_kernel<ConvTransposeKernel>(std::move(a));
}

}  // namespace

StatusOr<std::unique_ptr<DirectKernel>> make_reference_conv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, false));
    return std::unique_ptr<DirectKernel>(std::make_unique<ConvKernel>(std::move(a)));
}

void register_nn_conv_kernels(KernelRegistry& r) {
    r.add({"Conv", "", 1, kMaxOpset, DeviceKind::cpu}, &make_conv);
    r.add({"ConvTranspose", "", 1, kMaxOpset, DeviceKind::cpu}, &make_conv_transpose);
}

}  // namespace dsinfer::detail
