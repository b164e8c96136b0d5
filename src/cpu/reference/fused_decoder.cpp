// Reference kernels of dsinfer's decoder-block operators (domain com.dsinfer; semantics in
// docs/OPTIMIZER.md): RotaryEmbedding (X, full-width Cos and Sin broadcast together, the half
// or interleaved rotation along X's last axis) and GatedActivation (act(X[..., :F]) *
// X[..., F:]). com.dsinfer RMSNormalization is the ONNX-23 kernel registered under the second
// domain (nn_norm.cpp). These define the semantics the fast kernels
// (src/cpu/fast/fast_decoder.cpp) fall through to. Both compute in the element type's compute
// type (float for the 16-bit types) with the unfused graph's rounding steps: x·cos and
// rotate(x)·sin rounded, then their sum; act(a) rounded, then the product with b (SiLU:
// a·sigmoid(a) rounded first, as Mul(g, Sigmoid(g)) does).
#include <cmath>
#include <string>

#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"
#include "ops/gated_activation.hpp"
#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// X's last dim, after checking X: a float type, rank >= 1, an even last dim.
StatusOr<int64_t> even_last_dim(const Tensor& x, const char* op) {
    const DType dt = x.dtype();
    DSINFER_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16 || dt == DType::f64,
                  ErrorCode::unsupported, op, " input X has element type ", dtype_name(dt),
                  ", which is not supported");
    DSINFER_CHECK(x.shape().rank() >= 1, ErrorCode::invalid_argument,
                  "input X must have rank >= 1, got a scalar");
    const int64_t d = x.shape()[x.shape().rank() - 1];
    DSINFER_CHECK(d % 2 == 0, ErrorCode::invalid_argument, "input X of shape ",
                  x.shape().to_string(), " must have an even last dim");
    return d;
}

// ---- RotaryEmbedding -------------------------------------------------------------------------

/// Y = X·Cos + rotate(X)·Sin with numpy broadcasting of the three (as the unfused Mul, Mul,
/// Add broadcast them); the rotation pairs elements along X's last axis, which the broadcast
/// must not enlarge (Cos/Sin's last dim is X's or 1).
class RotaryKernel final : public Kernel {
public:
    explicit RotaryKernel(bool interleaved) : interleaved_(interleaved) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_ASSIGN_OR_RETURN(const int64_t d, even_last_dim(x, "RotaryEmbedding"));
        static const char* names[] = {"X", "Cos", "Sin"};
        Shape y = x.shape();
        for (int i = 1; i < 3; ++i) {
            DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_argument, "input ", names[i],
                          " is required");
            const Tensor& p = ctx.input(i);
            DSINFER_CHECK(p.dtype() == x.dtype(), ErrorCode::invalid_argument, "input ",
                          names[i], " has element type ", dtype_name(p.dtype()), " but X has ",
                          dtype_name(x.dtype()));
            auto b = broadcast_shapes(y, p.shape());
            DSINFER_CHECK(b.is_ok(), ErrorCode::invalid_argument, "input ", names[i],
                          " of shape ", p.shape().to_string(), " does not broadcast with X ",
                          x.shape().to_string());
            y = b.value();
        }
        DSINFER_CHECK(y[y.rank() - 1] == d, ErrorCode::invalid_argument,
                      "Cos and Sin must not enlarge X's last dim ", d, ", got ",
                      ctx.input(1).shape().to_string(), " and ", ctx.input(2).shape().to_string());
        ctx.set_output(0, x.dtype(), y);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& xv = ctx.input(0);
        const Shape& ys = ctx.output(0).shape;
        const int64_t d = ys[ys.rank() - 1];
        const int64_t half = d / 2;
        const std::array<Strides, 4> st{contiguous_strides(ys), broadcast_strides(xv.shape, ys),
                                        broadcast_strides(ctx.input(1).shape, ys),
                                        broadcast_strides(ctx.input(2).shape, ys)};
        return dispatch_types(xv.dtype, FloatTypes{}, [&]<class T>() -> Status {
            using C = compute_t<T>;
            const T* x = xv.data_unchecked<T>();
            const T* cs = ctx.input(1).data_unchecked<T>();
            const T* sn = ctx.input(2).data_unchecked<T>();
            T* y = ctx.output(0).data_unchecked<T>();
            for_each_offset<4>(ys, st, [&](const std::array<int64_t, 4>& off) {
                const int64_t i = off[0] % d;
                const int64_t e = off[1];  // X's last axis has step 1 (never broadcast)
                // rotate(x)[i]: the other element of i's pair, negated in the first place.
                C r;
                if (interleaved_)
                    r = i % 2 == 0 ? -load(x[e + 1]) : load(x[e - 1]);
                else
                    r = i < half ? -load(x[e + half]) : load(x[e - half]);
                const C a = static_cast<C>(load(x[e]) * load(cs[off[2]]));
                const C b = static_cast<C>(r * load(sn[off[3]]));
                y[off[0]] = store<T>(static_cast<C>(a + b));
            });
            return Status::ok();
        });
    }

private:
    bool interleaved_;
};

StatusOr<std::unique_ptr<Kernel>> make_rotary(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 3 && ctx.num_outputs() == 1, ErrorCode::invalid_model,
                  "RotaryEmbedding takes 3 inputs (X, Cos, Sin) and 1 output, got ",
                  ctx.num_inputs(), " and ", ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(int64_t inter, ctx.node().attr_or<int64_t>("interleaved", 0));
    DSINFER_CHECK(inter == 0 || inter == 1, ErrorCode::invalid_model,
                  "attribute 'interleaved' must be 0 or 1, got ", inter);
    return make_kernel<RotaryKernel>(inter == 1);
}

// ---- GatedActivation -------------------------------------------------------------------------

class GatedActivationKernel final : public Kernel {
public:
    explicit GatedActivationKernel(GatedAct act) : act_(act) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_ASSIGN_OR_RETURN(const int64_t w, even_last_dim(x, "GatedActivation"));
        Shape y = x.shape();
        y[y.rank() - 1] = w / 2;
        ctx.set_output(0, x.dtype(), y);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& xv = ctx.input(0);
        const int64_t w = xv.shape[xv.shape.rank() - 1];
        const int64_t f = w / 2;
        const int64_t rows = f == 0 ? 0 : xv.num_elements() / w;
        return dispatch_types(xv.dtype, FloatTypes{}, [&]<class T>() -> Status {
            using C = compute_t<T>;
            const T* x = xv.data_unchecked<T>();
            T* y = ctx.output(0).data_unchecked<T>();
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < f; ++j) {
                    const C a = load(x[r * w + j]);
                    const C b = load(x[r * w + f + j]);
                    y[r * f + j] = store<T>(static_cast<C>(gated_activation(act_, a) * b));
                }
            return Status::ok();
        });
    }

private:
    GatedAct act_;
};

StatusOr<std::unique_ptr<Kernel>> make_gated_activation(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 1 && ctx.num_outputs() == 1, ErrorCode::invalid_model,
                  "GatedActivation takes 1 input and 1 output, got ", ctx.num_inputs(), " and ",
                  ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(GatedAct act, gated_activation_from_attributes(ctx.node()));
    return make_kernel<GatedActivationKernel>(act);
}

}  // namespace

void register_decoder_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    r.add({"RotaryEmbedding", kDsinferDomain, 1, 1, cpu}, &make_rotary);
    r.add({"GatedActivation", kDsinferDomain, 1, 1, cpu}, &make_gated_activation);
}

}  // namespace dsinfer::detail
