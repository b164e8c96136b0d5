// Reference CPU kernels for the optimizer update ops of ai.onnx.preview.training (opset 1):
// Adagrad, Momentum (standard and Nesterov) and Adam. Inputs are R (learning rate), T (update
// count), then the n tensors X, their gradients G and the optimizer states (Adagrad: H;
// Momentum: V; Adam: V, H); outputs are the new X, then the new states. Each update is
// elementwise with the regularized gradient g = norm_coefficient * x + g, in double.
#include <cmath>
#include <optional>
#include <string>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_misc_training_kernels(KernelRegistry& r);

namespace {

enum class Optimizer { adagrad, momentum, nesterov, adam };

struct OptimizerConfig {
    Optimizer kind = Optimizer::adagrad;
    double alpha = 0, beta = 0, epsilon = 0, norm = 0, norm_post = 0, decay = 0;
};

/// Tensors per updated X: X, G and the states.
constexpr int group_size(Optimizer k) noexcept { return k == Optimizer::adam ? 4 : 3; }

class OptimizerKernel final : public Kernel {
public:
    OptimizerKernel(OptimizerConfig c, int n) : c_(c), n_(n) {}

    Status prepare(PrepareContext& ctx) const override {
        const DType rt = ctx.input(0).dtype();
        DSINFER_CHECK(ctx.input(0).num_elements() == 1 && ctx.input(1).num_elements() == 1 &&
                          (rt == DType::f32 || rt == DType::f64) &&
                          ctx.input(1).dtype() == DType::i64,
                      ErrorCode::invalid_argument,
                      "inputs R and T must be scalars (R float or double, T int64)");
        for (int i = 0; i < n_; ++i) {
            const Tensor& x = ctx.input(2 + i);
            DSINFER_RETURN_IF_ERROR(dispatch_types(x.dtype(), TypeList<float, double>{},
                                                   []<class T>() { return Status::ok(); }));
            for (int s = 1; s < group_size(c_.kind); ++s) {
                const Tensor& t = ctx.input(2 + s * n_ + i);
                DSINFER_CHECK(t.dtype() == x.dtype() && t.shape() == x.shape(),
                              ErrorCode::invalid_argument, "input ", 2 + s * n_ + i,
                              " must match X ", i, " (", x.shape().to_string(), ")");
            }
            for (int s = 0; s < group_size(c_.kind) - 1; ++s)
                ctx.set_output(s * n_ + i, x.dtype(), x.shape());
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& rv = ctx.input(0);
        const double r = rv.dtype == DType::f64 ? *rv.data_unchecked<double>() : *rv.data_unchecked<float>();
        const std::int64_t t = *ctx.input(1).data_unchecked<std::int64_t>();
        for (int i = 0; i < n_; ++i) {
            DSINFER_RETURN_IF_ERROR(
                dispatch_types(ctx.input(2 + i).dtype, TypeList<float, double>{}, [&]<class T>() {
                    update<T>(ctx, i, r, t);
                    return Status::ok();
                }));
        }
        return Status::ok();
    }

private:
    template <class T>
    void update(RunContext& ctx, int i, double r, std::int64_t t) const noexcept {
        const T* x = ctx.input(2 + i).data_unchecked<T>();
        const T* g = ctx.input(2 + n_ + i).data_unchecked<T>();
        const T* s1 = ctx.input(2 + 2 * n_ + i).data_unchecked<T>();
        const T* s2 = c_.kind == Optimizer::adam ? ctx.input(2 + 3 * n_ + i).data_unchecked<T>() : nullptr;
        T* xo = ctx.has_output(i) ? ctx.output(i).data_unchecked<T>() : nullptr;
        T* s1o = ctx.has_output(n_ + i) ? ctx.output(n_ + i).data_unchecked<T>() : nullptr;
        T* s2o = s2 != nullptr && ctx.has_output(2 * n_ + i) ? ctx.output(2 * n_ + i).data_unchecked<T>()
                                                             : nullptr;
        const std::int64_t count = ctx.input(2 + i).num_elements();
        const double td = static_cast<double>(t);
        // Momentum: the gradient's coefficient is 1 on the first update (t == 0).
        const double beta_t = t > 0 ? c_.beta : 1.0;
        // Adam: bias correction when t > 0.
        const double r_adam =
            t > 0 ? r * std::sqrt(1 - std::pow(c_.beta, td)) / (1 - std::pow(c_.alpha, td)) : r;
        for (std::int64_t e = 0; e < count; ++e) {
            const double xv = x[e];
            const double gr = c_.norm * xv + static_cast<double>(g[e]);
            double xn = 0, a = 0, b = 0;
            switch (c_.kind) {
                case Optimizer::adagrad:
                    a = static_cast<double>(s1[e]) + gr * gr;
                    xn = xv - r / (1 + td * c_.decay) * gr / (std::sqrt(a) + c_.epsilon);
                    break;
                case Optimizer::momentum:
                case Optimizer::nesterov:
                    a = c_.alpha * static_cast<double>(s1[e]) + beta_t * gr;
                    xn = xv - r * (c_.kind == Optimizer::momentum ? a : gr + c_.alpha * a);
                    break;
                case Optimizer::adam:
                    a = c_.alpha * static_cast<double>(s1[e]) + (1 - c_.alpha) * gr;
                    b = c_.beta * static_cast<double>(s2[e]) + (1 - c_.beta) * gr * gr;
                    xn = (1 - c_.norm_post) * (xv - r_adam * a / (std::sqrt(b) + c_.epsilon));
                    break;
            }
            if (xo != nullptr) xo[e] = static_cast<T>(xn);
            if (s1o != nullptr) s1o[e] = static_cast<T>(a);
            if (s2o != nullptr) s2o[e] = static_cast<T>(b);
        }
    }

    OptimizerConfig c_;
    int n_;
};

StatusOr<std::unique_ptr<Kernel>> make_optimizer(const KernelCreateContext& ctx, Optimizer kind) {
    const Node& n = ctx.node();
    OptimizerConfig c;
    c.kind = kind;
    auto get = [&](const char* name, double& out, std::optional<float> fallback) -> Status {
        if (fallback) {
            DSINFER_ASSIGN_OR_RETURN(float v, n.attr_or<float>(name, *fallback));
            out = v;
        } else {
            DSINFER_ASSIGN_OR_RETURN(float v, n.attr<float>(name));
            out = v;
        }
        return Status::ok();
    };
    switch (kind) {
        case Optimizer::adagrad:
            DSINFER_RETURN_IF_ERROR(get("decay_factor", c.decay, 0.f));
            DSINFER_RETURN_IF_ERROR(get("epsilon", c.epsilon, 0.f));
            DSINFER_RETURN_IF_ERROR(get("norm_coefficient", c.norm, 0.f));
            break;
        case Optimizer::momentum:
        case Optimizer::nesterov: {
            DSINFER_RETURN_IF_ERROR(get("alpha", c.alpha, std::nullopt));
            DSINFER_RETURN_IF_ERROR(get("beta", c.beta, std::nullopt));
            DSINFER_RETURN_IF_ERROR(get("norm_coefficient", c.norm, std::nullopt));
            DSINFER_ASSIGN_OR_RETURN(std::string mode, n.attr<std::string>("mode"));
            DSINFER_CHECK(mode == "standard" || mode == "nesterov", ErrorCode::invalid_model,
                          "attribute 'mode' must be standard or nesterov, got '", mode, "'");
            c.kind = mode == "standard" ? Optimizer::momentum : Optimizer::nesterov;
            break;
        }
        case Optimizer::adam:
            DSINFER_RETURN_IF_ERROR(get("alpha", c.alpha, 0.9f));
            DSINFER_RETURN_IF_ERROR(get("beta", c.beta, 0.999f));
            DSINFER_RETURN_IF_ERROR(get("epsilon", c.epsilon, 0.f));
            DSINFER_RETURN_IF_ERROR(get("norm_coefficient", c.norm, 0.f));
            DSINFER_RETURN_IF_ERROR(get("norm_coefficient_post", c.norm_post, 0.f));
            break;
    }
    const int k = group_size(kind);
    const int tensors = ctx.num_inputs() - 2;
    DSINFER_CHECK(tensors > 0 && tensors % k == 0, ErrorCode::invalid_model, "expected R, T and ",
                  k, " inputs per optimized tensor, got ", ctx.num_inputs(), " inputs");
    for (int i = 0; i < ctx.num_inputs(); ++i)
        DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_model, "input ", i, " is missing");
    const int count = tensors / k;
    DSINFER_CHECK(ctx.num_outputs() <= (k - 1) * count, ErrorCode::invalid_model, "node has ",
                  ctx.num_outputs(), " outputs, expected at most ", (k - 1) * count);
    return make_kernel<OptimizerKernel>(c, count);
}

StatusOr<std::unique_ptr<Kernel>> make_adagrad(const KernelCreateContext& ctx) {
    return make_optimizer(ctx, Optimizer::adagrad);
}
StatusOr<std::unique_ptr<Kernel>> make_momentum(const KernelCreateContext& ctx) {
    return make_optimizer(ctx, Optimizer::momentum);
}
StatusOr<std::unique_ptr<Kernel>> make_adam(const KernelCreateContext& ctx) {
    return make_optimizer(ctx, Optimizer::adam);
}

}  // namespace

void register_misc_training_kernels(KernelRegistry& r) {
    const char* domain = "ai.onnx.preview.training";
    r.add({"Adagrad", domain, 1, kMaxOpset, DeviceKind::cpu}, &make_adagrad);
    r.add({"Momentum", domain, 1, kMaxOpset, DeviceKind::cpu}, &make_momentum);
    r.add({"Adam", domain, 1, kMaxOpset, DeviceKind::cpu}, &make_adam);
}

}  // namespace dsinfer::detail
