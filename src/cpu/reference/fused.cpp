// Reference kernels of dsinfer's fused operators (domain com.dsinfer; semantics in
// docs/OPTIMIZER.md): FusedConv, FusedMatMul and SkipLayerNormalization. LayerNormalization and
// Gelu of com.dsinfer are the ONNX kernels registered under the second domain (nn_norm.cpp,
// elementwise.cpp). These kernels define the semantics the faster backends fall through to;
// they are plain loops over the reference Conv/MatMul kernels.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "ops/activation.hpp"
#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// A plain kernel (Conv, MatMul) on the first `inner_inputs` inputs, then Y += Bias (over the
/// last dim), Y += Z (same shape), Y = act(Y). float32, float16 and bfloat16 (the epilogue
/// computes in float32 from the stored Y and rounds once).
class EpilogueKernel final : public Kernel {
public:
    EpilogueKernel(std::unique_ptr<DirectKernel> inner, int inner_inputs, int bias_input,
                   int residual_input, ActivationSpec act, const char* op)
        : inner_(std::move(inner)), inner_inputs_(inner_inputs), bias_(bias_input),
          residual_(residual_input), act_(act), op_(op) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_CHECK(ctx.num_inputs() > 0 && ctx.has_input(0), ErrorCode::invalid_argument,
                      op_, " needs its first input");
        const DType dt = ctx.input(0).dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, op_,
                      " supports float32, float16 and bfloat16, got ", dtype_name(dt));
        std::vector<Tensor> in(detail::ContextAccess::inputs(ctx).begin(),
                               detail::ContextAccess::inputs(ctx).begin() +
                                   std::min(inner_inputs_, ctx.num_inputs()));
        PrepareContext ic(ctx.node(), std::move(in), ctx.inferring() && !ctx.probing(),
                          ctx.probing());
        DSINFER_RETURN_IF_ERROR(inner_->prepare(ic));
        const auto& spec = ic.output_spec(0);
        // The residual may share Y's block (the memory planner puts Y in place of a dying Z):
        // the workspace then holds a copy of Z, taken before the inner kernel writes Y.
        const std::size_t inner_ws = (ic.workspace_bytes() + 63) / 64 * 64;
        ctx.set_workspace(residual_ >= 0 && ctx.has_input(residual_)
                              ? inner_ws + ctx.input(residual_).num_bytes()
                              : ic.workspace_bytes());
        if (!spec.set) {
            ctx.set_output_dynamic(0, spec.dtype_known ? std::optional<DType>(spec.dtype)
                                                       : std::nullopt);
            return Status::ok();
        }
        const Shape& y = spec.shape;
        ctx.set_output(0, spec.dtype, y);
        if (bias_ >= 0 && ctx.has_input(bias_)) {
            const Tensor& b = ctx.input(bias_);
            DSINFER_CHECK(b.dtype() == dt, ErrorCode::invalid_argument, "input Bias has type ",
                          dtype_name(b.dtype()), ", expected ", dtype_name(dt));
            const int64_t n = y.rank() > 0 ? y[y.rank() - 1] : 1;
            DSINFER_CHECK(b.num_dims() == 1 && b.shape()[0] == n, ErrorCode::invalid_argument,
                          "input Bias of shape ", b.shape().to_string(), " must be [", n,
                          "] (the last dim of the output ", y.to_string(), ")");
        }
        if (residual_ >= 0 && ctx.has_input(residual_)) {
            const Tensor& z = ctx.input(residual_);
            DSINFER_CHECK(z.dtype() == dt, ErrorCode::invalid_argument,
                          "input Z has type ", dtype_name(z.dtype()), ", expected ", dtype_name(dt));
            DSINFER_CHECK(z.shape() == y, ErrorCode::invalid_argument, "input Z of shape ",
                          z.shape().to_string(), " must have the output's shape ", y.to_string());
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        switch (ctx.output(0).dtype) {
            case DType::f16: return run_as<float16>(ctx);
            case DType::bf16: return run_as<bfloat16>(ctx);
            default: return run_as<float>(ctx);
        }
    }

private:
    template <class T>
    Status run_as(RunContext& ctx) const noexcept {
        const T* z = nullptr;
        std::size_t inner_ws = ctx.workspace_bytes();
        if (residual_ >= 0 && ctx.has_input(residual_)) {
            const TensorView& zv = ctx.input(residual_);
            z = zv.data_unchecked<T>();
            if (zv.raw == ctx.output(0).raw && zv.num_bytes() > 0) {
                inner_ws = ctx.workspace_bytes() - zv.num_bytes();
                auto* saved = static_cast<unsigned char*>(ctx.workspace()) + inner_ws;
                std::memcpy(saved, zv.raw, zv.num_bytes());
                z = reinterpret_cast<const T*>(saved);
            }
        }
        // The inner kernel runs on the operands directly (a RunContext would allocate).
        std::array<const TensorView*, kMaxInnerInputs> in{};
        const int num_in = std::min({inner_inputs_, ctx.num_inputs(), kMaxInnerInputs});
        for (int i = 0; i < num_in; ++i)
            in[static_cast<std::size_t>(i)] = ctx.has_input(i) ? &ctx.input(i) : nullptr;
        DSINFER_RETURN_IF_ERROR(inner_->run_direct(
            std::span<const TensorView* const>(in.data(), static_cast<std::size_t>(num_in)),
            ctx.output(0), ctx.workspace(), inner_ws));
        const TensorView& yv = ctx.output(0);
        T* y = yv.data_unchecked<T>();
        const int64_t total = yv.num_elements();
        const T* b = bias_ >= 0 && ctx.has_input(bias_) ? ctx.input(bias_).data_unchecked<T>() : nullptr;
        const int64_t n = b != nullptr ? ctx.input(bias_).num_elements() : 1;
        if (z == nullptr && b == nullptr && act_.empty()) return Status::ok();
        for (int64_t i = 0; i < total; ++i) {
            float v = static_cast<float>(y[i]);
            if (z != nullptr) v += static_cast<float>(z[i]);
            if (b != nullptr) v += static_cast<float>(b[i % n]);
            if (!act_.empty()) v = apply_activation(v, act_);
            y[i] = T(v);
        }
        return Status::ok();
    }

    static constexpr int kMaxInnerInputs = 3;  // Conv and Gemm: 3, MatMul: 2

    std::unique_ptr<DirectKernel> inner_;
    int inner_inputs_, bias_, residual_;
    ActivationSpec act_;
    const char* op_;
};

StatusOr<std::unique_ptr<Kernel>> make_fused_conv(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 2 || ctx.num_inputs() > 4 || ctx.num_outputs() != 1)
        return Status::error(ErrorCode::invalid_model,
                             "FusedConv takes 2 to 4 inputs (X, W, B, Z) and one output, got ",
                             ctx.num_inputs(), " and ", ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(ActivationSpec act, activation_from_attributes(ctx));
    DSINFER_ASSIGN_OR_RETURN(auto inner, make_reference_conv(ctx));
    return make_kernel<EpilogueKernel>(std::move(inner), 3, -1, 3, act, "FusedConv");
}

StatusOr<std::unique_ptr<Kernel>> make_fused_matmul(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 2 || ctx.num_inputs() > 3 || ctx.num_outputs() != 1)
        return Status::error(ErrorCode::invalid_model,
                             "FusedMatMul takes 2 or 3 inputs (A, B, Bias) and one output, got ",
                             ctx.num_inputs(), " and ", ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(ActivationSpec act, activation_from_attributes(ctx));
    DSINFER_ASSIGN_OR_RETURN(auto inner, make_reference_matmul(ctx));
    return make_kernel<EpilogueKernel>(std::move(inner), 2, 2, -1, act, "FusedMatMul");
}

StatusOr<std::unique_ptr<Kernel>> make_fused_gemm(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 2 || ctx.num_inputs() > 3 || ctx.num_outputs() != 1)
        return Status::error(ErrorCode::invalid_model,
                             "FusedGemm takes 2 or 3 inputs (A, B, C) and one output, got ",
                             ctx.num_inputs(), " and ", ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(ActivationSpec act, activation_from_attributes(ctx));
    // FusedGemm has Gemm-13 semantics whatever the model's opset (the pass fuses Gemm of
    // opset >= 11 only; read_gemm_attrs applies the opset rules to ONNX's Gemm alone).
    DSINFER_ASSIGN_OR_RETURN(auto inner, make_reference_gemm(ctx));
    return make_kernel<EpilogueKernel>(std::move(inner), 3, -1, -1, act, "FusedGemm");
}

// ---- SkipLayerNormalization ---------------------------------------------------------------

class SkipLayerNormKernel final : public Kernel {
public:
    explicit SkipLayerNormKernel(float eps) : eps_(eps) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_skip_layer_norm(ctx));
        // One row of sums (float) in the workspace.
        const Shape& x = ctx.input(0).shape();
        ctx.set_workspace(static_cast<std::size_t>(x[x.rank() - 1]) * sizeof(float));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        switch (ctx.input(0).dtype) {
            case DType::f16: return run_as<float16>(ctx);
            case DType::bf16: return run_as<bfloat16>(ctx);
            default: return run_as<float>(ctx);
        }
    }

private:
    /// Sums, statistics and the normalization in float32 (double for the moments); the
    /// stored types round once at the end.
    template <class T>
    Status run_as(RunContext& ctx) const noexcept {
        const TensorView& x = ctx.input(0);
        const int64_t h = x.shape[x.shape.rank() - 1];
        const int64_t rows = h == 0 ? 0 : x.num_elements() / h;
        const T* px = x.data_unchecked<T>();
        const T* ps = ctx.input(1).data_unchecked<T>();
        const T* gamma = ctx.input(2).data_unchecked<T>();
        const T* beta = ctx.has_input(3) ? ctx.input(3).data_unchecked<T>() : nullptr;
        const T* bias = ctx.has_input(4) ? ctx.input(4).data_unchecked<T>() : nullptr;
        T* y = ctx.output(0).data_unchecked<T>();
        T* sum_out = ctx.has_output(1) ? ctx.output(1).data_unchecked<T>() : nullptr;
        auto f = [](T v) { return static_cast<float>(v); };
        float* s = static_cast<float*>(ctx.workspace());
        if (rows > 0 && h > 0 && (s == nullptr || ctx.workspace_bytes() < static_cast<std::size_t>(h) * sizeof(float)))
            return Status(ErrorCode::internal, "SkipLayerNormalization: workspace too small");
        for (int64_t r = 0; r < rows; ++r) {
            double mean = 0.0;
            for (int64_t c = 0; c < h; ++c) {
                float v = f(px[r * h + c]) + f(ps[r * h + c]);
                if (bias != nullptr) v += f(bias[c]);
                s[static_cast<std::size_t>(c)] = v;
                mean += v;
            }
            mean /= static_cast<double>(h);
            double var = 0.0;
            for (int64_t c = 0; c < h; ++c) {
                const double d = s[static_cast<std::size_t>(c)] - mean;
                var += d * d;
            }
            var /= static_cast<double>(h);
            const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps_));
            for (int64_t c = 0; c < h; ++c) {
                const float v = s[static_cast<std::size_t>(c)];
                float o = static_cast<float>((v - mean) * inv) * f(gamma[c]);
                if (beta != nullptr) o += f(beta[c]);
                y[r * h + c] = T(o);
                if (sum_out != nullptr) sum_out[r * h + c] = T(v);
            }
        }
        return Status::ok();
    }

    float eps_;
};

StatusOr<std::unique_ptr<Kernel>> make_skip_layer_norm(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 3 || ctx.num_inputs() > 5 || ctx.num_outputs() < 1 ||
        ctx.num_outputs() > 2)
        return Status::error(ErrorCode::invalid_model,
                             "SkipLayerNormalization takes 3 to 5 inputs (X, Skip, Scale, B, "
                             "Bias) and 1 or 2 outputs, got ",
                             ctx.num_inputs(), " and ", ctx.num_outputs());
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    if (!(eps >= 0.f))
        return Status::error(ErrorCode::invalid_model, "epsilon must be >= 0, got ", eps);
    return make_kernel<SkipLayerNormKernel>(eps);
}

}  // namespace

Status prepare_skip_layer_norm(PrepareContext& ctx) {
    static const char* names[] = {"X", "Skip", "Scale", "B", "Bias"};
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) {
            DSINFER_CHECK(i > 2, ErrorCode::invalid_argument, "input ", names[i], " is required");
            continue;
        }
        const DType dt = ctx.input(i).dtype();
        DSINFER_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
                      ErrorCode::unsupported, "input ", names[i], " has type ", dtype_name(dt),
                      "; SkipLayerNormalization supports float32, float16 and bfloat16");
        DSINFER_CHECK(dt == ctx.input(0).dtype(), ErrorCode::invalid_argument, "input ", names[i],
                      " has type ", dtype_name(dt), " but X has ", dtype_name(ctx.input(0).dtype()));
    }
    const Shape& x = ctx.input(0).shape();
    DSINFER_CHECK(x.rank() >= 1, ErrorCode::invalid_argument, "input X must have rank >= 1");
    DSINFER_CHECK(ctx.input(1).shape() == x, ErrorCode::invalid_argument, "input Skip of shape ",
                  ctx.input(1).shape().to_string(), " must have X's shape ", x.to_string());
    const int64_t h = x[x.rank() - 1];
    for (int i = 2; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) continue;
        const Shape& p = ctx.input(i).shape();
        DSINFER_CHECK(p.rank() == 1 && p[0] == h, ErrorCode::invalid_argument, "input ",
                      names[i], " of shape ", p.to_string(), " must be [", h,
                      "] (the last dim of X ", x.to_string(), ")");
    }
    ctx.set_output(0, ctx.input(0).dtype(), x);
    if (ctx.has_output(1)) ctx.set_output(1, ctx.input(0).dtype(), x);
    return Status::ok();
}

void register_fused_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    r.add({"FusedConv", kDsinferDomain, 1, 1, cpu}, &make_fused_conv);
    r.add({"FusedMatMul", kDsinferDomain, 1, 1, cpu}, &make_fused_matmul);
    r.add({"FusedGemm", kDsinferDomain, 1, 1, cpu}, &make_fused_gemm);
    r.add({"SkipLayerNormalization", kDsinferDomain, 1, 1, cpu}, &make_skip_layer_norm);
}

}  // namespace dsinfer::detail
