// Reference CPU kernels for Resize (opset 10+) and Upsample (opset 7, 9).
//
// Each resized axis gets a table of (input offset, weight) taps per output index; an output
// element is the sum over the tensor product of its axes' taps. The tables follow the ONNX
// definition: coordinate transform, then nearest rounding or linear/cubic coefficients
// (optionally stretched for antialiasing), edge padding or exclude_outside renormalization.
//
// Coordinates from a float32 scales input are computed in float32 arithmetic, as ONNX Runtime
// and the ONNX reference (numpy 2) do: with floor/ceil rounding a float64 coordinate can land on
// the other side of an integer ((1 + 0.5) / 0.6f - 0.5 is 2 in float32, 1.9999999 in float64).
// Scales derived from sizes are size / input_size in float64, as in the ONNX reference.
// Where the two reference implementations disagree we follow the ONNX reference (the
// specification): align_corners, pytorch_half_pixel and tf_crop_and_resize use the real-valued
// output length scale * input length, not the rounded one. Like both, axes with scale 1 map
// one-to-one in nearest mode (tf_half_pixel_for_nn would otherwise shift them), Resize-10 and
// Upsample round nearest down when upsampling and up when downsampling, and integer outputs of
// linear/cubic are truncated toward zero (numpy astype) after saturation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_resize_kernels(KernelRegistry& r);

namespace {

enum class ResizeMode { nearest, linear, cubic };
enum class CoordMode {
    half_pixel,
    half_pixel_symmetric,
    pytorch_half_pixel,
    align_corners,
    asymmetric,
    tf_crop_and_resize,
    tf_half_pixel_for_nn,
};
// simple: Resize-10/Upsample (floor when upsampling, ceil when downsampling).
enum class NearestMode { round_prefer_floor, round_prefer_ceil, floor, ceil, simple };
enum class AspectPolicy { stretch, not_larger, not_smaller };

struct ResizeConfig {
    ResizeMode mode = ResizeMode::nearest;
    CoordMode coord = CoordMode::half_pixel;
    NearestMode nearest = NearestMode::round_prefer_floor;
    double cubic_a = -0.75;
    bool exclude_outside = false;
    double extrapolation = 0.0;
    bool antialias = false;
    AspectPolicy policy = AspectPolicy::stretch;
    std::vector<std::int64_t> axes;  // as given (may be negative); empty = all
    int roi_input = -1;
    int scales_input = -1;
    int sizes_input = -1;
    std::vector<float> attr_scales;  // Upsample-7
};

struct Tap {
    std::int64_t offset;  // element offset along the axis (index * stride); -1 = extrapolate
    double weight;
};

struct ResizePlan {
    int rank = 0;
    std::array<double, kMaxRank> scale{};
    std::array<float, kMaxRank> scale_f{};  // float32 scales (coordinates from input scales)
    bool float64_coords = false;            // sizes given: scale = size / in, in float64
    std::array<std::int64_t, kMaxRank> out{};
    std::array<double, kMaxRank> roi_start{};
    std::array<double, kMaxRank> roi_end{};
    std::array<int, kMaxRank> taps{};  // taps per output index per axis
};

// Reads element i of a float/int tensor as double.
inline double read_as_double(const TensorView& t, std::int64_t i) noexcept {
    double v = 0;
    (void)dispatch_types(t.dtype, NumericTypes{}, [&]<class T>() {
        v = static_cast<double>(load(t.data_unchecked<T>()[i]));
        return Status::ok();
    });
    return v;
}

// The float32 value of element i (exact for float32/float16/bfloat16 tensors).
inline float read_as_float(const TensorView& t, std::int64_t i) noexcept {
    return t.dtype == DType::f32 ? t.data_unchecked<float>()[i] : static_cast<float>(read_as_double(t, i));
}

inline bool present(const TensorView* t) noexcept { return t != nullptr && t->num_elements() > 0; }

// Taps per output index: 1 (nearest), 2 (linear), 4 (cubic); antialiased downsampling
// stretches the filter by 1 / scale.
double taps_for(const ResizeConfig& cfg, double scale) {
    if (cfg.mode == ResizeMode::nearest) return 1;
    const double s = cfg.antialias ? std::min(scale, 1.0) : 1.0;
    const double start = std::floor((cfg.mode == ResizeMode::linear ? -1.0 : -2.0) / s) + 1;
    return 2 - 2 * start;
}

// Output sizes, scales and roi for input shape `in`. roi/scales/sizes may be null (omitted).
StatusOr<ResizePlan> make_plan(const ResizeConfig& cfg, const Shape& in, const TensorView* roi,
                               const TensorView* scales, const TensorView* sizes) {
    ResizePlan p;
    p.rank = in.rank();
    const int r = in.rank();
    std::array<int, kMaxRank> axes{};
    int n_axes = 0;
    if (cfg.axes.empty()) {
        for (int i = 0; i < r; ++i) axes[static_cast<std::size_t>(n_axes++)] = i;
    } else {
        for (auto a : cfg.axes) {
            DSINFER_ASSIGN_OR_RETURN(int ax, normalize_axis(a, r, "axes entry"));
            for (int j = 0; j < n_axes; ++j)
                DSINFER_CHECK(axes[static_cast<std::size_t>(j)] != ax, ErrorCode::invalid_model,
                              "attribute 'axes' repeats axis ", a);
            axes[static_cast<std::size_t>(n_axes++)] = ax;
        }
    }
    for (int d = 0; d < r; ++d) {
        const auto du = static_cast<std::size_t>(d);
        p.scale[du] = 1.0;
        p.scale_f[du] = 1.0f;
        p.float64_coords = present(sizes) || (present(scales) && scales->dtype == DType::f64);
        p.out[du] = in[d];
        p.roi_start[du] = 0.0;
        p.roi_end[du] = 1.0;
    }
    if (present(roi)) {
        if (roi->num_elements() == 2 * n_axes) {
            for (int i = 0; i < n_axes; ++i) {
                const auto d = static_cast<std::size_t>(axes[static_cast<std::size_t>(i)]);
                p.roi_start[d] = read_as_double(*roi, i);
                p.roi_end[d] = read_as_double(*roi, n_axes + i);
            }
        } else if (cfg.coord == CoordMode::tf_crop_and_resize) {
            return Status::error(ErrorCode::invalid_argument, "input roi must have ", 2 * n_axes,
                                 " elements, got ", roi->num_elements());
        }
    }
    if (present(sizes)) {
        DSINFER_CHECK(sizes->num_elements() == n_axes, ErrorCode::invalid_argument,
                      "input sizes must have ", n_axes, " elements, got ", sizes->num_elements());
        DSINFER_CHECK(sizes->dtype == DType::i64, ErrorCode::invalid_argument,
                      "input sizes must be int64, got ", dtype_name(sizes->dtype));
        for (int i = 0; i < n_axes; ++i) {
            const int d = axes[static_cast<std::size_t>(i)];
            const std::int64_t s = sizes->data_unchecked<std::int64_t>()[i];
            DSINFER_CHECK(s >= 0, ErrorCode::invalid_argument, "input sizes[", i,
                          "] must not be negative, got ", s);
            DSINFER_CHECK(in[d] > 0 || s == 0, ErrorCode::invalid_argument,
                          "cannot resize an empty axis ", d, " to ", s);
            p.out[static_cast<std::size_t>(d)] = s;
            p.scale[static_cast<std::size_t>(d)] =
                in[d] > 0 ? static_cast<double>(s) / static_cast<double>(in[d]) : 1.0;
        }
        if (cfg.policy != AspectPolicy::stretch && n_axes > 0) {
            double s = p.scale[static_cast<std::size_t>(axes[0])];
            for (int i = 1; i < n_axes; ++i) {
                const double v =
                    p.scale[static_cast<std::size_t>(axes[static_cast<std::size_t>(i)])];
                s = cfg.policy == AspectPolicy::not_larger ? std::min(s, v) : std::max(s, v);
            }
            for (int i = 0; i < n_axes; ++i) {
                const auto d = static_cast<std::size_t>(axes[static_cast<std::size_t>(i)]);
                p.scale[d] = s;
                p.out[d] = static_cast<std::int64_t>(
                    s * static_cast<double>(in[static_cast<int>(d)]) + 0.5);
            }
        }
    } else if (present(scales) || !cfg.attr_scales.empty()) {
        const std::int64_t n = present(scales) ? scales->num_elements()
                                               : static_cast<std::int64_t>(cfg.attr_scales.size());
        DSINFER_CHECK(n == n_axes, ErrorCode::invalid_argument, "scales must have ", n_axes,
                      " elements, got ", n);
        for (int i = 0; i < n_axes; ++i) {
            const int d = axes[static_cast<std::size_t>(i)];
            const float sf = present(scales) ? read_as_float(*scales, i)
                                             : cfg.attr_scales[static_cast<std::size_t>(i)];
            const double s = present(scales) && scales->dtype == DType::f64
                                 ? read_as_double(*scales, i)
                                 : static_cast<double>(sf);
            DSINFER_CHECK(s > 0 && std::isfinite(s), ErrorCode::invalid_argument, "scales[", i,
                          "] must be positive, got ", s);
            const double o = std::floor(s * static_cast<double>(in[d]));
            DSINFER_CHECK(o < 9.0e15, ErrorCode::invalid_argument, "scales[", i, "] = ", s,
                          " gives an output dimension that is too large");
            p.scale[static_cast<std::size_t>(d)] = s;
            p.scale_f[static_cast<std::size_t>(d)] = sf;
            p.out[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(o);
        }
    } else {
        return Status::error(ErrorCode::invalid_argument,
                             "one of the inputs scales or sizes must be given");
    }
    for (int d = 0; d < r; ++d) {
        const double taps = taps_for(cfg, p.scale[static_cast<std::size_t>(d)]);
        DSINFER_CHECK(taps <= 65536.0, ErrorCode::unsupported, "antialiased downsampling of axis ",
                      d, " by scale ", p.scale[static_cast<std::size_t>(d)],
                      " needs too wide a filter");
        p.taps[static_cast<std::size_t>(d)] = static_cast<int>(taps);
    }
    return p;
}

double cubic_kernel(double x, double a) noexcept {
    x = std::abs(x);
    if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

// The input coordinate of output index `o` along axis d (R: float or double arithmetic, see the
// file comment). Sets `extrapolate` when tf_crop_and_resize maps outside the input.
template <class R>
R input_coordinate(const ResizeConfig& cfg, const ResizePlan& p, int d, std::int64_t in_len,
                   std::int64_t o, bool& extrapolate) noexcept {
    const auto du = static_cast<std::size_t>(d);
    const R s =
        std::is_same_v<R, float> ? static_cast<R>(p.scale_f[du]) : static_cast<R>(p.scale[du]);
    const R in_f = static_cast<R>(in_len);
    const R ow = s * in_f;  // the real-valued output length
    const R of = static_cast<R>(o);
    const R half = R(0.5), one = R(1);
    extrapolate = false;
    switch (cfg.coord) {
        case CoordMode::half_pixel: return (of + half) / s - half;
        case CoordMode::half_pixel_symmetric: {
            const R adjustment = static_cast<R>(p.out[du]) / ow;
            const R offset = in_f / R(2) * (one - adjustment);
            return offset + (of + half) / s - half;
        }
        case CoordMode::pytorch_half_pixel: return ow == one ? -half : (of + half) / s - half;
        case CoordMode::align_corners: return ow == one ? R(0) : of * (in_f - one) / (ow - one);
        case CoordMode::asymmetric: return of / s;
        case CoordMode::tf_half_pixel_for_nn: return (of + half) / s;
        case CoordMode::tf_crop_and_resize: {
            const R st = static_cast<R>(p.roi_start[du]);
            const R en = static_cast<R>(p.roi_end[du]);
            R x = ow == one ? (en - st) * (in_f - one) / R(2)
                            : of * (en - st) * (in_f - one) / (ow - one);
            x += st * (in_f - one);
            extrapolate = x < R(0) || x > in_f - one;
            return x;
        }
    }
    return R(0);
}

// Fills `taps` (out * n entries) for one axis.
void fill_axis_taps(const ResizeConfig& cfg, const ResizePlan& p, int d, std::int64_t in_len,
                    std::int64_t stride, Tap* taps) noexcept {
    const auto du = static_cast<std::size_t>(d);
    const std::int64_t out_len = p.out[du];
    const int n = p.taps[du];
    const bool identity = cfg.mode == ResizeMode::nearest && p.scale[du] == 1.0 &&
                          out_len == in_len && cfg.coord != CoordMode::tf_crop_and_resize;
    for (std::int64_t o = 0; o < out_len; ++o) {
        Tap* t = taps + o * n;
        if (identity) {
            t[0] = Tap{o * stride, 1.0};
            continue;
        }
        bool extrapolate = false;
        const double x =
            p.float64_coords
                ? input_coordinate<double>(cfg, p, d, in_len, o, extrapolate)
                : static_cast<double>(input_coordinate<float>(cfg, p, d, in_len, o, extrapolate));
        if (extrapolate || !std::isfinite(x)) {
            for (int i = 0; i < n; ++i) t[i] = Tap{-1, 0.0};
            continue;
        }
        const double in_d = static_cast<double>(in_len);
        double base = std::floor(x);
        double ratio = x - base;
        auto clamp_idx = [&](double v) {
            return v < 0 ? std::int64_t{0}
                         : (v > in_d - 1.0 ? in_len - 1 : static_cast<std::int64_t>(v));
        };
        if (cfg.mode == ResizeMode::nearest) {
            double idx = base;
            if (ratio != 0.0) {
                switch (cfg.nearest) {
                    case NearestMode::round_prefer_floor:
                        idx = ratio <= 0.5 ? base : base + 1;
                        break;
                    case NearestMode::round_prefer_ceil: idx = ratio < 0.5 ? base : base + 1; break;
                    case NearestMode::floor: idx = base; break;
                    case NearestMode::ceil: idx = base + 1; break;
                    case NearestMode::simple: idx = p.scale[du] < 1.0 ? base + 1 : base; break;
                }
            }
            t[0] = Tap{clamp_idx(idx) * stride, 1.0};
            continue;
        }
        // Prefer the left neighbour: ratio lies in (0, 1].
        if (ratio == 0.0) {
            base -= 1.0;
            ratio = 1.0;
        }
        const int start = 1 - n / 2;
        const double se = cfg.antialias ? std::min(p.scale[du], 1.0) : 1.0;
        double sum = 0.0;
        for (int i = 0; i < n; ++i) {
            const double arg = (static_cast<double>(start + i) - ratio) * se;
            double w = cfg.mode == ResizeMode::linear ? std::clamp(1.0 - std::abs(arg), 0.0, 1.0)
                                                      : cubic_kernel(arg, cfg.cubic_a);
            const double idx = base + static_cast<double>(start + i);
            if (cfg.exclude_outside && (idx < 0.0 || idx > in_d - 1.0)) w = 0.0;
            sum += w;
            t[i] = Tap{clamp_idx(idx) * stride, w};
        }
        if ((cfg.antialias || cfg.exclude_outside) && sum != 0.0)
            for (int i = 0; i < n; ++i) t[i].weight /= sum;
    }
}

template <class T>
T store_truncated(double v) noexcept {
    if constexpr (std::is_integral_v<T>) {
        if (!(v == v)) return T(0);
        v = std::trunc(v);
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<T>::max());
        if (v <= lo) return std::numeric_limits<T>::lowest();
        if (v >= hi) return std::numeric_limits<T>::max();
        return static_cast<T>(v);
    } else {
        return store<T>(v);
    }
}

using ResizeTypes = TypeList<float, double, float16, bfloat16, std::int8_t, std::uint8_t,
                             std::int16_t, std::uint16_t, std::int32_t, std::int64_t>;

class ResizeKernel final : public Kernel {
public:
    explicit ResizeKernel(ResizeConfig cfg) : cfg_(std::move(cfg)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(x.dtype(), ResizeTypes{}, []<class T>() { return Status::ok(); }));
        TensorView views[3];
        const TensorView* ptrs[3] = {nullptr, nullptr, nullptr};
        const int idx[3] = {cfg_.roi_input, cfg_.scales_input, cfg_.sizes_input};
        for (int k = 0; k < 3; ++k) {
            if (idx[k] < 0 || !ctx.has_input(idx[k])) continue;
            // roi only matters for tf_crop_and_resize and never changes the output shape.
            if (k == 0 && cfg_.coord != CoordMode::tf_crop_and_resize && !ctx.has_data(idx[k]))
                continue;
            // A shape-defining input without data: the output shape is unknown at load.
            if (!ctx.has_data(idx[k])) return Status::ok();
            views[k] = ctx.input(idx[k]).view();
            ptrs[k] = &views[k];
        }
        DSINFER_ASSIGN_OR_RETURN(auto plan, make_plan(cfg_, x.shape(), ptrs[0], ptrs[1], ptrs[2]));
        Shape out;
        std::size_t taps = 0;
        for (int d = 0; d < plan.rank; ++d) {
            const auto du = static_cast<std::size_t>(d);
            out.push_back(plan.out[du]);
            taps +=
                static_cast<std::size_t>(plan.out[du]) * static_cast<std::size_t>(plan.taps[du]);
        }
        ctx.set_output(0, x.dtype(), out);
        ctx.set_workspace(taps * sizeof(Tap));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView* ptrs[3] = {nullptr, nullptr, nullptr};
        const int idx[3] = {cfg_.roi_input, cfg_.scales_input, cfg_.sizes_input};
        for (int k = 0; k < 3; ++k)
            if (idx[k] >= 0 && ctx.has_input(idx[k])) ptrs[k] = &ctx.input(idx[k]);
        // make_plan allocates nothing but may build an error message.
        ResizePlan plan;
        try {
            auto p = make_plan(cfg_, x.shape, ptrs[0], ptrs[1], ptrs[2]);
            if (!p.is_ok()) return p.status();
            plan = *p;
        } catch (...) {
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        const int r = plan.rank;
        std::array<Tap*, kMaxRank> tables{};
        Tap* cursor = static_cast<Tap*>(ctx.workspace());
        const Strides in_strides = contiguous_strides(x.shape);
        for (int d = 0; d < r; ++d) {
            const auto du = static_cast<std::size_t>(d);
            tables[du] = cursor;
            fill_axis_taps(cfg_, plan, d, x.shape[d], in_strides[du], cursor);
            cursor += plan.out[du] * plan.taps[du];
        }
        return dispatch_types(x.dtype, ResizeTypes{}, [&]<class T>() {
            compute<T>(x.data_unchecked<T>(), y.data_unchecked<T>(), y.shape, plan, tables);
            return Status::ok();
        });
    }

private:
    template <class T>
    void compute(const T* in, T* out, const Shape& out_shape, const ResizePlan& plan,
                 const std::array<Tap*, kMaxRank>& tables) const noexcept {
        const int r = plan.rank;
        const std::int64_t total = out_shape.num_elements();
        std::array<std::int64_t, kMaxRank> o{};
        std::array<const Tap*, kMaxRank> cur{};
        for (std::int64_t e = 0; e < total; ++e) {
            bool extrapolate = false;
            for (int d = 0; d < r; ++d) {
                const auto du = static_cast<std::size_t>(d);
                cur[du] = tables[du] + o[du] * plan.taps[du];
                if (cur[du][0].offset < 0) extrapolate = true;
            }
            if (r == 0) {
                out[e] = in[0];
            } else if (extrapolate) {
                out[e] = store_truncated<T>(cfg_.extrapolation);
            } else if (cfg_.mode == ResizeMode::nearest) {
                std::int64_t off = 0;
                for (int d = 0; d < r; ++d) off += cur[static_cast<std::size_t>(d)][0].offset;
                out[e] = in[off];
            } else {
                out[e] = store_truncated<T>(accumulate<T>(in, plan, cur, 0, 0));
            }
            for (int d = r - 1; d >= 0; --d) {
                const auto du = static_cast<std::size_t>(d);
                if (++o[du] < out_shape[d]) break;
                o[du] = 0;
            }
        }
    }

    template <class T>
    double accumulate(const T* in, const ResizePlan& plan,
                      const std::array<const Tap*, kMaxRank>& cur, int d,
                      std::int64_t offset) const noexcept {
        if (d == plan.rank) return static_cast<double>(load(in[offset]));
        const auto du = static_cast<std::size_t>(d);
        double acc = 0.0;
        for (int i = 0; i < plan.taps[du]; ++i) {
            const Tap& t = cur[du][i];
            if (t.weight == 0.0) continue;
            acc += t.weight * accumulate<T>(in, plan, cur, d + 1, offset + t.offset);
        }
        return acc;
    }

    ResizeConfig cfg_;
};

StatusOr<ResizeMode> parse_mode(const std::string& m) {
    if (m == "nearest") return ResizeMode::nearest;
    if (m == "linear" || m == "bilinear" || m == "trilinear") return ResizeMode::linear;
    if (m == "cubic" || m == "bicubic") return ResizeMode::cubic;
    return Status::error(ErrorCode::invalid_model,
                         "attribute 'mode' must be nearest, linear or cubic, got '", m, "'");
}

StatusOr<std::unique_ptr<Kernel>> make_resize(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    const std::int64_t opset = ctx.opset();
    ResizeConfig cfg;
    DSINFER_ASSIGN_OR_RETURN(auto mode, n.attr_or<std::string>("mode", std::string("nearest")));
    DSINFER_ASSIGN_OR_RETURN(cfg.mode, parse_mode(mode));
    if (opset < 11) {
        // Resize-10: X, scales; asymmetric coordinates, nearest mode "simple".
        cfg.coord = CoordMode::asymmetric;
        cfg.nearest = NearestMode::simple;
        cfg.scales_input = 1;
        if (cfg.mode == ResizeMode::cubic)
            return Status::error(ErrorCode::invalid_model,
                                 "mode 'cubic' needs Resize opset 11 or later");
        return make_kernel<ResizeKernel>(std::move(cfg));
    }
    cfg.roi_input = 1;
    cfg.scales_input = 2;
    cfg.sizes_input = 3;
    DSINFER_ASSIGN_OR_RETURN(auto coord, n.attr_or<std::string>("coordinate_transformation_mode",
                                                                std::string("half_pixel")));
    if (coord == "half_pixel")
        cfg.coord = CoordMode::half_pixel;
    else if (coord == "half_pixel_symmetric")
        cfg.coord = CoordMode::half_pixel_symmetric;
    else if (coord == "pytorch_half_pixel")
        cfg.coord = CoordMode::pytorch_half_pixel;
    else if (coord == "align_corners")
        cfg.coord = CoordMode::align_corners;
    else if (coord == "asymmetric")
        cfg.coord = CoordMode::asymmetric;
    else if (coord == "tf_crop_and_resize")
        cfg.coord = CoordMode::tf_crop_and_resize;
    else if (coord == "tf_half_pixel_for_nn" && opset < 13)
        cfg.coord = CoordMode::tf_half_pixel_for_nn;  // opset 11 only: (x + 0.5) / scale
    else
        return Status::error(ErrorCode::invalid_model, "unknown coordinate_transformation_mode '",
                             coord, "'");
    DSINFER_ASSIGN_OR_RETURN(
        auto nearest, n.attr_or<std::string>("nearest_mode", std::string("round_prefer_floor")));
    if (nearest == "round_prefer_floor")
        cfg.nearest = NearestMode::round_prefer_floor;
    else if (nearest == "round_prefer_ceil")
        cfg.nearest = NearestMode::round_prefer_ceil;
    else if (nearest == "floor")
        cfg.nearest = NearestMode::floor;
    else if (nearest == "ceil")
        cfg.nearest = NearestMode::ceil;
    else
        return Status::error(ErrorCode::invalid_model, "unknown nearest_mode '", nearest, "'");
    DSINFER_ASSIGN_OR_RETURN(auto a, n.attr_or<float>("cubic_coeff_a", -0.75f));
    cfg.cubic_a = a;
    DSINFER_ASSIGN_OR_RETURN(auto excl, n.attr_or<std::int64_t>("exclude_outside", 0));
    cfg.exclude_outside = excl != 0;
    DSINFER_ASSIGN_OR_RETURN(auto extra, n.attr_or<float>("extrapolation_value", 0.0f));
    cfg.extrapolation = extra;
    if (opset >= 18) {
        DSINFER_ASSIGN_OR_RETURN(auto aa, n.attr_or<std::int64_t>("antialias", 0));
        cfg.antialias = aa != 0 && cfg.mode != ResizeMode::nearest;
        DSINFER_ASSIGN_OR_RETURN(
            cfg.axes, n.attr_or<std::vector<std::int64_t>>("axes", std::vector<std::int64_t>{}));
        DSINFER_ASSIGN_OR_RETURN(
            auto pol, n.attr_or<std::string>("keep_aspect_ratio_policy", std::string("stretch")));
        if (pol == "stretch")
            cfg.policy = AspectPolicy::stretch;
        else if (pol == "not_larger")
            cfg.policy = AspectPolicy::not_larger;
        else if (pol == "not_smaller")
            cfg.policy = AspectPolicy::not_smaller;
        else
            return Status::error(ErrorCode::invalid_model, "unknown keep_aspect_ratio_policy '",
                                 pol, "'");
    }
    return make_kernel<ResizeKernel>(std::move(cfg));
}

StatusOr<std::unique_ptr<Kernel>> make_upsample(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    ResizeConfig cfg;
    DSINFER_ASSIGN_OR_RETURN(auto mode, n.attr_or<std::string>("mode", std::string("nearest")));
    DSINFER_ASSIGN_OR_RETURN(cfg.mode, parse_mode(mode));
    DSINFER_CHECK(cfg.mode != ResizeMode::cubic, ErrorCode::invalid_model,
                  "Upsample supports modes nearest and linear, got '", mode, "'");
    cfg.coord = CoordMode::asymmetric;
    cfg.nearest = NearestMode::simple;
    if (ctx.opset() < 9) {
        DSINFER_ASSIGN_OR_RETURN(cfg.attr_scales, n.attr<std::vector<float>>("scales"));
        for (float s : cfg.attr_scales)
            DSINFER_CHECK(s >= 1.0f, ErrorCode::invalid_model,
                          "attribute 'scales' entries must be >= 1, got ", s);
    } else {
        cfg.scales_input = 1;
    }
    return make_kernel<ResizeKernel>(std::move(cfg));
}

}  // namespace

void register_resize_kernels(KernelRegistry& r) {
    r.add({"Resize", "", 10, kMaxOpset, DeviceKind::cpu}, &make_resize);
    r.add({"Upsample", "", 7, kMaxOpset, DeviceKind::cpu}, &make_upsample);
}

}  // namespace dsinfer::detail
