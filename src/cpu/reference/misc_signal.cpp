// Reference signal-processing kernels: HannWindow, HammingWindow, BlackmanWindow, DFT, STFT and
// MelWeightMatrix. Transforms are naive O(n^2) DFTs in double precision; complex values are a
// trailing dimension of size 2 (real, imaginary).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

constexpr double kTwoPi = 2.0 * std::numbers::pi;

StatusOr<DType> output_datatype(const Node& node, int64_t fallback) {
    auto v = node.attr_or<int64_t>("output_datatype", fallback);
    if (!v.is_ok()) return v.status();
    const auto dt = from_onnx_dtype(static_cast<int>(v.value()));
    if (!dt.has_value() || !kNumericTypes.contains(*dt))
        return Status::error(ErrorCode::unsupported, "output_datatype ", v.value(),
                             " is not supported");
    return *dt;
}

StatusOr<int64_t> read_int_scalar(const Tensor& t, const char* what) {
    DSINFER_CHECK(t.num_elements() == 1, ErrorCode::invalid_argument, what,
                  " must be a scalar, got shape ", t.shape().to_string());
    auto v = read_ints(t, what);
    if (!v.is_ok()) {
        return Status::error(ErrorCode::invalid_argument, what, " must be int32 or int64, got ",
                             dtype_name(t.dtype()));
    }
    return v.value()[0];
}

// ---- window functions -------------------------------------------------------------------------

enum class WindowKind { hann, hamming, blackman };

class WindowKernel final : public Kernel {
public:
    WindowKernel(WindowKind kind, bool periodic, DType out)
        : kind_(kind), periodic_(periodic), out_(out) {}

    Status prepare(PrepareContext& ctx) const override {
        if (!ctx.has_data(0)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(const int64_t n, read_int_scalar(ctx.input(0), "size"));
        DSINFER_CHECK(n >= 0, ErrorCode::invalid_argument, "size must be >= 0, got ", n);
        ctx.set_output(0, out_, Shape{n});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        const int64_t n = y.shape[0];
        const double denom = static_cast<double>(periodic_ ? n : n - 1);
        return dispatch_types(y.dtype, NumericTypes{}, [&]<class T>() -> Status {
            T* py = y.data_unchecked<T>();
            for (int64_t i = 0; i < n; ++i) {
                const double a = denom > 0 ? kTwoPi * static_cast<double>(i) / denom : 0.0;
                double v = 0.0;
                switch (kind_) {
                    case WindowKind::hann: v = 0.5 - 0.5 * std::cos(a); break;
                    case WindowKind::hamming:
                        v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(a);
                        break;
                    case WindowKind::blackman:
                        v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2.0 * a);
                        break;
                }
                py[i] = store<T>(v);
            }
            return Status::ok();
        });
    }

private:
    WindowKind kind_;
    bool periodic_;
    DType out_;
};

template <WindowKind K>
StatusOr<std::unique_ptr<Kernel>> make_window(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const int64_t periodic, ctx.node().attr_or<int64_t>("periodic", 1));
    DSINFER_ASSIGN_OR_RETURN(const DType out, output_datatype(ctx.node(), 1));
    return make_kernel<WindowKernel>(K, periodic != 0, out);
}

// ---- DFT --------------------------------------------------------------------------------------

class DftKernel final : public Kernel {
public:
    DftKernel(bool axis_input, int64_t axis, bool inverse, bool onesided)
        : axis_input_(axis_input), axis_(axis), inverse_(inverse), onesided_(onesided) {}

    struct Plan {
        int axis = 0;
        int64_t n_in = 0;   // input length along axis
        int64_t len = 0;    // transform length
        int64_t n_out = 0;  // output length along axis
        int64_t cin = 1;
        int64_t cout = 2;
        int64_t outer = 1;
        int64_t inner = 1;
    };

    StatusOr<std::optional<Plan>> plan(const PrepareContext& ctx) const {
        const Tensor& x = ctx.input(0);
        const int r = x.shape().rank();
        DSINFER_CHECK(r >= 2, ErrorCode::invalid_argument,
                      "input must have rank >= 2 ([..., 1 or 2]), got ", x.shape().to_string());
        Plan p;
        p.cin = x.shape()[r - 1];
        DSINFER_CHECK(p.cin == 1 || p.cin == 2, ErrorCode::invalid_argument,
                      "the last input dimension must be 1 (real) or 2 (complex), got ", p.cin);
        int64_t axis = axis_;
        if (axis_input_ && ctx.has_input(2)) {
            if (!ctx.has_data(2)) return std::optional<Plan>{};
            DSINFER_ASSIGN_OR_RETURN(axis, read_int_scalar(ctx.input(2), "axis"));
        }
        if (axis < 0) axis += r;
        DSINFER_CHECK(axis >= 0 && axis <= r - 2, ErrorCode::invalid_argument, "axis ", axis,
                      " is outside the signal dimensions of input ", x.shape().to_string());
        p.axis = static_cast<int>(axis);
        p.n_in = x.shape()[p.axis];
        std::optional<int64_t> dft_length;
        if (ctx.has_input(1)) {
            if (!ctx.has_data(1)) return std::optional<Plan>{};
            DSINFER_ASSIGN_OR_RETURN(const int64_t l, read_int_scalar(ctx.input(1), "dft_length"));
            DSINFER_CHECK(l > 0, ErrorCode::invalid_argument, "dft_length must be > 0, got ", l);
            dft_length = l;
        }
        if (inverse_ && onesided_) {
            // Inverse of a one-sided spectrum: real output of length 2 * (bins - 1) by default.
            p.len = dft_length.value_or(2 * (p.n_in - 1));
            DSINFER_CHECK(p.len > 0, ErrorCode::invalid_argument,
                          "inverse one-sided DFT needs a positive length");
            p.n_out = p.len;
            p.cout = 1;
        } else {
            p.len = dft_length.value_or(p.n_in);
            p.n_out = onesided_ ? p.len / 2 + 1 : p.len;
            p.cout = 2;
        }
        p.outer = x.shape().size_between(0, p.axis);
        p.inner = x.shape().size_between(p.axis + 1, r - 1);
        return std::optional<Plan>{p};
    }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_CHECK(kFloatTypes.contains(ctx.input(0).dtype()), ErrorCode::unsupported,
                      "element type ", dtype_name(ctx.input(0).dtype()), " is not supported");
        DSINFER_ASSIGN_OR_RETURN(const auto p, plan(ctx));
        if (!p.has_value()) return Status::ok();
        Shape out = ctx.input(0).shape();
        out[p->axis] = p->n_out;
        out[out.rank() - 1] = p->cout;
        ctx.set_output(0, ctx.input(0).dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        // Recover the plan from the inputs and the shapes fixed in prepare.
        Plan p;
        int64_t axis = axis_;
        if (axis_input_ && ctx.has_input(2)) {
            const TensorView& t = ctx.input(2);
            axis = t.dtype == DType::i64 ? t.data_unchecked<int64_t>()[0] : t.data_unchecked<std::int32_t>()[0];
        }
        if (axis < 0) axis += r;
        p.axis = static_cast<int>(axis);
        p.n_in = x.shape[p.axis];
        p.n_out = y.shape[p.axis];
        p.cin = x.shape[r - 1];
        p.cout = y.shape[r - 1];
        if (ctx.has_input(1)) {
            const TensorView& t = ctx.input(1);
            p.len = t.dtype == DType::i64 ? t.data_unchecked<int64_t>()[0] : t.data_unchecked<std::int32_t>()[0];
        } else {
            p.len = (inverse_ && onesided_) ? p.n_out : p.n_in;
        }
        p.outer = x.shape.size_between(0, p.axis);
        p.inner = x.shape.size_between(p.axis + 1, r - 1);
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            transform<T>(x.data_unchecked<T>(), y.data_unchecked<T>(), p);
            return Status::ok();
        });
    }

private:
    template <class T>
    void transform(const T* px, T* py, const Plan& p) const noexcept {
        const double sign = inverse_ ? 1.0 : -1.0;
        const double scale = inverse_ ? 1.0 / static_cast<double>(p.len) : 1.0;
        const int64_t avail = std::min(p.n_in, p.len);
        for (int64_t o = 0; o < p.outer; ++o) {
            for (int64_t i = 0; i < p.inner; ++i) {
                auto in = [&](int64_t j, int64_t comp) -> double {
                    if (comp >= p.cin) return 0.0;
                    return static_cast<double>(
                        load(px[((o * p.n_in + j) * p.inner + i) * p.cin + comp]));
                };
                for (int64_t k = 0; k < p.n_out; ++k) {
                    double re = 0.0, im = 0.0;
                    if (inverse_ && onesided_) {
                        // Hermitian extension of the one-sided spectrum.
                        for (int64_t j = 0; j < p.len; ++j) {
                            double xr, xi;
                            if (j < p.n_in && j <= p.len / 2) {
                                xr = in(j, 0);
                                xi = in(j, 1);
                            } else if (p.len - j < p.n_in) {
                                xr = in(p.len - j, 0);
                                xi = -in(p.len - j, 1);
                            } else {
                                continue;
                            }
                            const double a =
                                kTwoPi * static_cast<double>((j * k) % p.len) / p.len;
                            re += xr * std::cos(a) - xi * std::sin(a);
                        }
                    } else {
                        for (int64_t j = 0; j < avail; ++j) {
                            const double xr = in(j, 0), xi = in(j, 1);
                            const double a = sign * kTwoPi *
                                             static_cast<double>((j * k) % p.len) / p.len;
                            const double c = std::cos(a), s = std::sin(a);
                            re += xr * c - xi * s;
                            im += xr * s + xi * c;
                        }
                    }
                    T* dst = py + ((o * p.n_out + k) * p.inner + i) * p.cout;
                    dst[0] = store<T>(re * scale);
                    if (p.cout == 2) dst[1] = store<T>(im * scale);
                }
            }
        }
    }

    bool axis_input_;
    int64_t axis_;
    bool inverse_;
    bool onesided_;
};

StatusOr<std::unique_ptr<Kernel>> make_dft(const KernelCreateContext& ctx) {
    const bool axis_input = ctx.opset() >= 20;
    int64_t axis = -2;
    if (!axis_input) {
        DSINFER_ASSIGN_OR_RETURN(axis, ctx.node().attr_or<int64_t>("axis", 1));
    }
    DSINFER_ASSIGN_OR_RETURN(const int64_t inverse, ctx.node().attr_or<int64_t>("inverse", 0));
    DSINFER_ASSIGN_OR_RETURN(const int64_t onesided, ctx.node().attr_or<int64_t>("onesided", 0));
    return make_kernel<DftKernel>(axis_input, axis, inverse != 0, onesided != 0);
}

// ---- STFT -------------------------------------------------------------------------------------

class StftKernel final : public Kernel {
public:
    explicit StftKernel(bool onesided) : onesided_(onesided) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() == 3 && (x.shape()[2] == 1 || x.shape()[2] == 2),
                      ErrorCode::invalid_argument,
                      "signal must be [batch, length, 1 or 2], got ", x.shape().to_string());
        if (ctx.has_input(2)) {
            const Tensor& w = ctx.input(2);
            DSINFER_CHECK(w.shape().rank() == 1, ErrorCode::invalid_argument,
                          "window must be 1-D, got ", w.shape().to_string());
            DSINFER_CHECK(w.dtype() == x.dtype(), ErrorCode::invalid_argument,
                          "window dtype differs from signal");
        }
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(const int64_t step, read_int_scalar(ctx.input(1), "frame_step"));
        DSINFER_CHECK(step > 0, ErrorCode::invalid_argument, "frame_step must be > 0, got ",
                      step);
        int64_t fl = -1;
        if (ctx.has_input(2)) fl = ctx.input(2).shape()[0];
        if (ctx.has_input(3)) {
            if (!ctx.has_data(3)) return Status::ok();
            DSINFER_ASSIGN_OR_RETURN(const int64_t l,
                                     read_int_scalar(ctx.input(3), "frame_length"));
            DSINFER_CHECK(fl < 0 || fl == l, ErrorCode::invalid_argument, "frame_length ", l,
                          " differs from the window length ", fl);
            fl = l;
        }
        DSINFER_CHECK(fl > 0, ErrorCode::invalid_argument,
                      "STFT needs a window or a positive frame_length");
        const int64_t len = x.shape()[1];
        DSINFER_CHECK(fl <= len, ErrorCode::invalid_argument, "frame_length ", fl,
                      " exceeds the signal length ", len);
        DSINFER_CHECK(!onesided_ || x.shape()[2] == 1, ErrorCode::invalid_argument,
                      "onesided STFT needs a real signal");
        const int64_t frames = (len - fl) / step + 1;
        const int64_t bins = onesided_ ? fl / 2 + 1 : fl;
        ctx.set_output(0, x.dtype(), Shape{x.shape()[0], frames, bins, 2});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const TensorView& st = ctx.input(1);
        const int64_t step =
            st.dtype == DType::i64 ? st.data_unchecked<int64_t>()[0] : st.data_unchecked<std::int32_t>()[0];
        const int64_t batch = x.shape[0], len = x.shape[1], cin = x.shape[2];
        const int64_t frames = y.shape[1], bins = y.shape[2];
        int64_t fl;
        if (ctx.has_input(2)) {
            fl = ctx.input(2).shape[0];
        } else {
            const TensorView& t = ctx.input(3);
            fl = t.dtype == DType::i64 ? t.data_unchecked<int64_t>()[0] : t.data_unchecked<std::int32_t>()[0];
        }
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            const T* pw = ctx.has_input(2) ? ctx.input(2).data_unchecked<T>() : nullptr;
            T* py = y.data_unchecked<T>();
            for (int64_t b = 0; b < batch; ++b) {
                for (int64_t f = 0; f < frames; ++f) {
                    for (int64_t k = 0; k < bins; ++k) {
                        double re = 0.0, im = 0.0;
                        for (int64_t t = 0; t < fl; ++t) {
                            const int64_t idx = (b * len + f * step + t) * cin;
                            const double w = pw != nullptr ? static_cast<double>(load(pw[t]))
                                                           : 1.0;
                            const double xr = static_cast<double>(load(px[idx])) * w;
                            const double xi =
                                cin == 2 ? static_cast<double>(load(px[idx + 1])) * w : 0.0;
                            const double a = -kTwoPi * static_cast<double>((t * k) % fl) / fl;
                            const double c = std::cos(a), s = std::sin(a);
                            re += xr * c - xi * s;
                            im += xr * s + xi * c;
                        }
                        T* dst = py + ((b * frames + f) * bins + k) * 2;
                        dst[0] = store<T>(re);
                        dst[1] = store<T>(im);
                    }
                }
            }
            return Status::ok();
        });
    }

private:
    bool onesided_;
};

StatusOr<std::unique_ptr<Kernel>> make_stft(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const int64_t onesided, ctx.node().attr_or<int64_t>("onesided", 1));
    return make_kernel<StftKernel>(onesided != 0);
}

// ---- MelWeightMatrix --------------------------------------------------------------------------

class MelKernel final : public Kernel {
public:
    explicit MelKernel(DType out) : out_(out) {}

    Status prepare(PrepareContext& ctx) const override {
        for (int i = 0; i < 5; ++i)
            if (!ctx.has_data(i)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(const int64_t bins, read_int_scalar(ctx.input(0), "num_mel_bins"));
        DSINFER_ASSIGN_OR_RETURN(const int64_t dft, read_int_scalar(ctx.input(1), "dft_length"));
        DSINFER_ASSIGN_OR_RETURN(const int64_t rate, read_int_scalar(ctx.input(2), "sample_rate"));
        DSINFER_CHECK(bins > 0 && dft > 0 && rate > 0, ErrorCode::invalid_argument,
                      "num_mel_bins, dft_length and sample_rate must be > 0");
        ctx.set_output(0, out_, Shape{dft / 2 + 1, bins});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        auto int_at = [&](int i) -> int64_t {
            const TensorView& t = ctx.input(i);
            return t.dtype == DType::i64 ? t.data_unchecked<int64_t>()[0] : t.data_unchecked<std::int32_t>()[0];
        };
        auto float_at = [&](int i) -> float {
            const TensorView& t = ctx.input(i);
            float v = 0.0f;
            (void)dispatch_types(t.dtype, NumericTypes{}, [&]<class T>() -> Status {
                v = static_cast<float>(load(t.data_unchecked<T>()[0]));
                return Status::ok();
            });
            return v;
        };
        const int64_t bins = int_at(0), dft = int_at(1), rate = int_at(2);
        const float lo = float_at(3), hi = float_at(4);
        const TensorView& y = ctx.output(0);
        const int64_t spec = dft / 2 + 1;
        // Mel edges in float (like the reference), bin positions in double.
        const float lo_mel = 2595.0f * std::log10(1.0f + lo / 700.0f);
        const float hi_mel = 2595.0f * std::log10(1.0f + hi / 700.0f);
        // The ONNX reference divides the mel range by bins + 2 (not bins + 1); match it.
        const float step = (hi_mel - lo_mel) / static_cast<float>(bins + 2);
        auto edge = [&](int64_t i) -> int64_t {
            const double mel = static_cast<double>(i) * static_cast<double>(step) +
                               static_cast<double>(lo_mel);
            const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
            const double b = std::floor(static_cast<double>(dft + 1) * hz /
                                        static_cast<double>(rate));
            if (!(b >= 0.0 && b < 1e15)) return -1;
            return static_cast<int64_t>(b);
        };
        return dispatch_types(y.dtype, NumericTypes{}, [&]<class T>() -> Status {
            T* py = y.data_unchecked<T>();
            for (int64_t i = 0; i < spec * bins; ++i) py[i] = store<T>(0.0);
            for (int64_t m = 0; m < bins; ++m) {
                const int64_t l = edge(m), c = edge(m + 1), h = edge(m + 2);
                if (l < 0 || c < 0 || h < 0 || l >= spec || c >= spec || h > spec)
                    return Status::error(ErrorCode::invalid_argument, "mel bin ", m,
                                         " falls outside the ", spec, " spectrogram bins");
                if (c == l) {
                    py[c * bins + m] = store<T>(1.0);
                } else {
                    for (int64_t j = l; j <= c; ++j)
                        py[j * bins + m] = store<T>(static_cast<double>(j - l) /
                                                    static_cast<double>(c - l));
                }
                for (int64_t j = c; j < h; ++j)
                    py[j * bins + m] =
                        store<T>(static_cast<double>(h - j) / static_cast<double>(h - c));
            }
            return Status::ok();
        });
    }

private:
    DType out_;
};

StatusOr<std::unique_ptr<Kernel>> make_mel(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const DType out, output_datatype(ctx.node(), 1));
    return make_kernel<MelKernel>(out);
}

}  // namespace

void register_misc_signal_kernels(KernelRegistry& r) {
    constexpr auto cpu = DeviceKind::cpu;
    r.add({"HannWindow", "", 17, kMaxOpset, cpu}, &make_window<WindowKind::hann>);
    r.add({"HammingWindow", "", 17, kMaxOpset, cpu}, &make_window<WindowKind::hamming>);
    r.add({"BlackmanWindow", "", 17, kMaxOpset, cpu}, &make_window<WindowKind::blackman>);
    r.add({"DFT", "", 17, kMaxOpset, cpu}, &make_dft);
    r.add({"STFT", "", 17, kMaxOpset, cpu}, &make_stft);
    r.add({"MelWeightMatrix", "", 17, kMaxOpset, cpu}, &make_mel);
}

}  // namespace dsinfer::detail
