// Reference CPU kernels for GridSample (opset 16, N-D from opset 20) and AffineGrid (opset 20).
//
// GridSample: grid holds normalized coordinates in [-1, 1], innermost component first (x = last
// spatial axis). Coordinates are denormalized (align_corners picks the pixel-center or corner
// convention), out-of-range positions are handled per padding_mode, and every spatial axis
// contributes 1 (nearest), 2 (linear) or 4 (cubic, Keys a = -0.75) taps; the result is the sum
// over the taps' tensor product.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_grid_kernels(KernelRegistry& r);

namespace {

enum class GsMode { nearest, linear, cubic };
enum class GsPadding { zeros, border, reflection };

double gs_reflect(double x, double lo, double hi) noexcept {
    const double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        const double dx = lo - x;
        const double n = std::trunc(dx / range);
        const double r = dx - n * range;
        return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        const double dx = x - hi;
        const double n = std::trunc(dx / range);
        const double r = dx - n * range;
        return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
    }
    return x;
}

constexpr int kMaxSpatial = kMaxRank - 2;

class GridSampleKernel final : public Kernel {
public:
    GridSampleKernel(GsMode mode, GsPadding padding, bool align_corners, bool only_2d)
        : mode_(mode), padding_(padding), align_(align_corners), only_2d_(only_2d) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& g = ctx.input(1);
        const int r = x.num_dims() - 2;
        DSINFER_CHECK(r >= 1 && r <= kMaxSpatial, ErrorCode::invalid_argument,
                      "input X must have rank 3 to ", kMaxRank, ", got shape ",
                      x.shape().to_string());
        DSINFER_CHECK(!only_2d_ || r == 2, ErrorCode::unsupported,
                      "GridSample before opset 20 supports only 4-D input, got ",
                      x.shape().to_string());
        DSINFER_CHECK(
            g.num_dims() == r + 2 && g.shape()[0] == x.shape()[0] && g.shape()[r + 1] == r,
            ErrorCode::invalid_argument, "input grid must have shape [", x.shape()[0], ",...,", r,
            "] with rank ", r + 2, ", got ", g.shape().to_string());
        const bool float_x = x.dtype() == DType::f32 || x.dtype() == DType::f64 ||
                             x.dtype() == DType::f16 || x.dtype() == DType::bf16;
        const bool float_g = g.dtype() == DType::f32 || g.dtype() == DType::f64 ||
                             g.dtype() == DType::f16 || g.dtype() == DType::bf16;
        DSINFER_CHECK(float_x && float_g, ErrorCode::unsupported,
                      "GridSample supports floating-point X and grid, got ", dtype_name(x.dtype()),
                      " and ", dtype_name(g.dtype()));
        Shape out{x.shape()[0], x.shape()[1]};
        for (int d = 0; d < r; ++d) out.push_back(g.shape()[d + 1]);
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& xv = ctx.input(0);
        const TensorView& gv = ctx.input(1);
        return dispatch_types(xv.dtype, FloatTypes{}, [&]<class T>() {
            return dispatch_types(gv.dtype, FloatTypes{}, [&]<class G>() {
                compute<T, G>(xv, gv, ctx.output(0));
                return Status::ok();
            });
        });
    }

private:
    template <class T, class G>
    void compute(const TensorView& xv, const TensorView& gv, const TensorView& yv) const noexcept {
        const int r = xv.shape.rank() - 2;
        const std::int64_t n_batch = xv.shape[0];
        const std::int64_t channels = xv.shape[1];
        std::array<std::int64_t, kMaxSpatial> dims{};
        std::array<std::int64_t, kMaxSpatial> strides{};
        std::int64_t in_plane = 1;
        for (int d = r - 1; d >= 0; --d) {
            dims[static_cast<std::size_t>(d)] = xv.shape[d + 2];
            strides[static_cast<std::size_t>(d)] = in_plane;
            in_plane *= xv.shape[d + 2];
        }
        std::int64_t out_plane = 1;
        for (int d = 0; d < r; ++d) out_plane *= gv.shape[d + 1];
        const T* x = xv.data_unchecked<T>();
        const G* grid = gv.data_unchecked<G>();
        T* y = yv.data_unchecked<T>();
        const int ntaps = mode_ == GsMode::nearest ? 1 : (mode_ == GsMode::linear ? 2 : 4);
        // Per spatial axis: tap offsets (-1 = zero padding) and weights.
        std::array<std::array<std::int64_t, 4>, kMaxSpatial> toff{};
        std::array<std::array<double, 4>, kMaxSpatial> tw{};
        for (std::int64_t n = 0; n < n_batch; ++n) {
            for (std::int64_t p = 0; p < out_plane; ++p) {
                const G* gp = grid + (n * out_plane + p) * r;
                for (int d = 0; d < r; ++d) {
                    const auto du = static_cast<std::size_t>(d);
                    const double len = static_cast<double>(dims[du]);
                    const double nc = static_cast<double>(load(gp[r - 1 - d]));
                    double xc =
                        align_ ? (nc + 1.0) / 2.0 * (len - 1.0) : ((nc + 1.0) * len - 1.0) / 2.0;
                    const double lo = align_ ? 0.0 : -0.5;
                    const double hi = align_ ? len - 1.0 : len - 0.5;
                    if (mode_ == GsMode::nearest) {
                        // Round half to even (what the ONNX test data uses in 2-D and 3-D).
                        xc = std::nearbyint(xc);
                    }
                    if (xc < lo || xc > hi) {
                        if (padding_ == GsPadding::border)
                            xc = std::clamp(xc, 0.0, len - 1.0);
                        else if (padding_ == GsPadding::reflection)
                            xc = gs_reflect(xc, lo, hi);
                    }
                    auto tap_offset = [&](double i) -> std::int64_t {
                        if (!std::isfinite(i)) return -1;
                        if (padding_ == GsPadding::zeros) {
                            if (i < 0 || i >= len) return -1;
                        } else if (padding_ == GsPadding::border) {
                            i = std::clamp(i, 0.0, len - 1.0);
                        } else {
                            i = std::trunc(gs_reflect(i, lo, hi));
                            i = std::clamp(i, 0.0, len - 1.0);
                        }
                        return static_cast<std::int64_t>(i) * strides[du];
                    };
                    if (mode_ == GsMode::nearest) {
                        toff[du][0] = tap_offset(std::isfinite(xc) ? std::trunc(xc) : xc);
                        tw[du][0] = 1.0;
                        continue;
                    }
                    const double x0 = std::floor(xc);
                    const double t = xc - x0;
                    if (mode_ == GsMode::linear) {
                        toff[du][0] = tap_offset(x0);
                        toff[du][1] = tap_offset(x0 + 1);
                        tw[du][0] = 1.0 - t;
                        tw[du][1] = t;
                    } else {
                        const double a = -0.75;
                        const double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
                        tw[du][0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
                        tw[du][1] = ((a + 2) * t - (a + 3)) * t * t + 1;
                        tw[du][2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
                        tw[du][3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
                        for (int k = 0; k < 4; ++k)
                            toff[du][static_cast<std::size_t>(k)] = tap_offset(x0 - 1 + k);
                    }
                }
                for (std::int64_t c = 0; c < channels; ++c) {
                    const T* plane = x + (n * channels + c) * in_plane;
                    // Odometer over the taps' tensor product.
                    std::array<int, kMaxSpatial> k{};
                    double acc = 0.0;
                    while (true) {
                        double w = 1.0;
                        std::int64_t off = 0;
                        bool zero = false;
                        for (int d = 0; d < r; ++d) {
                            const auto du = static_cast<std::size_t>(d);
                            const auto kd = static_cast<std::size_t>(k[du]);
                            if (toff[du][kd] < 0) zero = true;
                            off += toff[du][kd];
                            w *= tw[du][kd];
                        }
                        if (!zero && w != 0.0) acc += w * static_cast<double>(load(plane[off]));
                        int d = r - 1;
                        for (; d >= 0; --d) {
                            const auto du = static_cast<std::size_t>(d);
                            if (++k[du] < ntaps) break;
                            k[du] = 0;
                        }
                        if (d < 0) break;
                    }
                    y[(n * channels + c) * out_plane + p] = store<T>(acc);
                }
            }
        }
    }

    GsMode mode_;
    GsPadding padding_;
    bool align_;
    bool only_2d_;
};

StatusOr<std::unique_ptr<Kernel>> make_grid_sample(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    const Node& n = ctx.node();
    const bool old = ctx.opset() < 20;
    DSINFER_ASSIGN_OR_RETURN(
        auto mode, n.attr_or<std::string>("mode", std::string(old ? "bilinear" : "linear")));
    DSINFER_ASSIGN_OR_RETURN(auto pad,
                             n.attr_or<std::string>("padding_mode", std::string("zeros")));
    DSINFER_ASSIGN_OR_RETURN(auto align, n.attr_or<std::int64_t>("align_corners", 0));
    GsMode m;
    if (mode == "nearest")
        m = GsMode::nearest;
    else if (mode == "linear" || mode == "bilinear")
        m = GsMode::linear;
    else if (mode == "cubic" || mode == "bicubic")
        m = GsMode::cubic;
    else
        return Status::error(ErrorCode::invalid_model, "unknown mode '", mode, "'");
    GsPadding p;
    if (pad == "zeros")
        p = GsPadding::zeros;
    else if (pad == "border")
        p = GsPadding::border;
    else if (pad == "reflection")
        p = GsPadding::reflection;
    else
        return Status::error(ErrorCode::invalid_model, "unknown padding_mode '", pad, "'");
    return make_kernel<GridSampleKernel>(m, p, align != 0, old);
}

// ---- AffineGrid ------------------------------------------------------------------------------

class AffineGridKernel final : public Kernel {
public:
    explicit AffineGridKernel(bool align_corners) : align_(align_corners) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& theta = ctx.input(0);
        const Tensor& size = ctx.input(1);
        const DType dt = theta.dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, "element type ", dtype_name(dt), " is not supported");
        DSINFER_CHECK(
            size.num_dims() == 1 && (size.num_elements() == 4 || size.num_elements() == 5),
            ErrorCode::invalid_argument,
            "input size must be a 1-D tensor of 4 or 5 elements, got shape ",
            size.shape().to_string());
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(auto sz, read_ints(size, "input size"));
        const bool two_d = sz.size() == 4;
        const std::int64_t nd = two_d ? 2 : 3;
        DSINFER_CHECK(theta.shape() == (Shape{sz[0], nd, nd + 1}), ErrorCode::invalid_argument,
                      "input theta must have shape [", sz[0], ",", nd, ",", nd + 1, "], got ",
                      theta.shape().to_string());
        for (auto v : sz)
            DSINFER_CHECK(v >= 0, ErrorCode::invalid_argument,
                          "input size must not be negative, got ", v);
        Shape out{sz[0]};
        for (std::size_t i = 2; i < sz.size(); ++i) out.push_back(sz[i]);
        out.push_back(nd);
        ctx.set_output(0, dt, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& tv = ctx.input(0);
        const TensorView& yv = ctx.output(0);
        return dispatch_types(tv.dtype, FloatTypes{}, [&]<class T>() {
            const int nd = yv.shape.rank() - 2;  // 2 or 3 spatial dims
            const std::int64_t n_batch = yv.shape[0];
            // Spatial sizes in output order (D,) H, W.
            std::array<std::int64_t, 3> sz{};
            for (int d = 0; d < nd; ++d) sz[static_cast<std::size_t>(d)] = yv.shape[d + 1];
            auto coord = [&](std::int64_t i, std::int64_t s) -> double {
                if (align_)
                    return s <= 1
                               ? -1.0
                               : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(s - 1);
                return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(s);
            };
            const T* theta = tv.data_unchecked<T>();
            T* y = yv.data_unchecked<T>();
            std::int64_t plane = 1;
            for (int d = 0; d < nd; ++d) plane *= sz[static_cast<std::size_t>(d)];
            for (std::int64_t n = 0; n < n_batch; ++n) {
                const T* th = theta + n * nd * (nd + 1);
                for (std::int64_t p = 0; p < plane; ++p) {
                    // Homogeneous point (x, y[, z], 1): x from the last axis.
                    std::array<double, 4> h{};
                    std::int64_t rem = p;
                    for (int d = nd - 1; d >= 0; --d) {
                        const std::int64_t s = sz[static_cast<std::size_t>(d)];
                        h[static_cast<std::size_t>(nd - 1 - d)] = coord(rem % s, s);
                        rem /= s;
                    }
                    h[static_cast<std::size_t>(nd)] = 1.0;
                    T* out = y + (n * plane + p) * nd;
                    for (int row = 0; row < nd; ++row) {
                        double acc = 0.0;
                        for (int col = 0; col <= nd; ++col)
                            acc += static_cast<double>(load(th[row * (nd + 1) + col])) *
                                   h[static_cast<std::size_t>(col)];
                        out[row] = store<T>(acc);
                    }
                }
            }
            return Status::ok();
        });
    }

private:
    bool align_;
};

StatusOr<std::unique_ptr<Kernel>> make_affine_grid(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(auto align, ctx.node().attr_or<std::int64_t>("align_corners", 0));
    return make_kernel<AffineGridKernel>(align != 0);
}

}  // namespace

void register_grid_kernels(KernelRegistry& r) {
    r.add({"GridSample", "", 16, kMaxOpset, DeviceKind::cpu}, &make_grid_sample);
    r.add({"AffineGrid", "", 20, kMaxOpset, DeviceKind::cpu}, &make_affine_grid);
}

}  // namespace dsinfer::detail
