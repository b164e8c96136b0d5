// Fast kernels of dsinfer's fused operators (docs/OPTIMIZER.md): SkipLayerNormalization and
// Gelu (ai.onnx-20 and com.dsinfer), float32. Other dtypes and forms run the reference kernel
// (fallback). The GEMM epilogues' activation is src/kernels/activation_f32.cpp.
#include <cmath>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::detail {

namespace fast {
namespace {

class GeluFast final : public FastKernel {
public:
    GeluFast(std::unique_ptr<Kernel> fb, Unary op) : FastKernel(std::move(fb)), op_(op) {}
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.dtype != DType::f32) return fallback_run(ctx);
        const float* px = x.data_unchecked<float>();
        float* py = ctx.output(0).data_unchecked<float>();
        const auto fn = simd().unary[static_cast<int>(op_)];
        parallel_for(x.num_elements(), kGrainHeavy,
                     [&](std::int64_t b, std::int64_t e) { fn(px + b, py + b, e - b); });
        return Status::ok();
    }
    std::string algorithm(const PrepareContext& ctx) const override {
        return ctx.input(0).dtype() == DType::f32 ? simd_algorithm("gelu") : fallback_algorithm(ctx);
    }

private:
    Unary op_;
};

Factory make_gelu(const KernelCreateContext& ctx) {
    auto approx = ctx.node().attr_or<std::string>("approximate", "none");
    if (!approx.is_ok()) return ctx.create_fallback();  // the reference reports the error
    return make_with_fallback<GeluFast>(ctx,
                                        approx.value() == "tanh" ? Unary::gelu_tanh : Unary::gelu);
}

/// SkipLayerNormalization over rows of the last dim: the sum is written to Y (and to the sum
/// output), statistics in double, then Y is normalized in place. Rows split across threads.
class SkipLayerNormFast final : public Kernel {
public:
    explicit SkipLayerNormFast(float eps) : eps_(eps) {}
    Status prepare(PrepareContext& ctx) const override { return prepare_skip_layer_norm(ctx); }
    std::string algorithm(const PrepareContext&) const override {
        return simd_algorithm("skip-layernorm");
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const std::int64_t h = x.shape[x.shape.rank() - 1];
        if (h == 0) return Status::ok();
        const std::int64_t rows = x.num_elements() / h;
        const float* px = x.data_unchecked<float>();
        const float* ps = ctx.input(1).data_unchecked<float>();
        const float* gamma = ctx.input(2).data_unchecked<float>();
        const float* beta = ctx.has_input(3) ? ctx.input(3).data_unchecked<float>() : nullptr;
        const float* bias = ctx.has_input(4) ? ctx.input(4).data_unchecked<float>() : nullptr;
        float* py = ctx.output(0).data_unchecked<float>();
        float* psum = ctx.has_output(1) ? ctx.output(1).data_unchecked<float>() : nullptr;
        const SimdOps& s = simd();
        const auto add = s.vv[static_cast<int>(Arith::add)];
        const auto mul = s.vv[static_cast<int>(Arith::mul)];
        const auto sub_s = s.vs[static_cast<int>(Arith::sub)];
        const auto mul_s = s.vs[static_cast<int>(Arith::mul)];
        const double eps = eps_;
        parallel_for(rows, std::max<std::int64_t>(1, kGrain / h), [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t r = b; r < e; ++r) {
                float* y = py + r * h;
                add(px + r * h, ps + r * h, y, h);
                if (bias != nullptr) add(y, bias, y, h);
                if (psum != nullptr) std::memcpy(psum + r * h, y, static_cast<std::size_t>(h) * 4);
                const double mean = s.sum(y, h) / static_cast<double>(h);
                const float fmean = static_cast<float>(mean);
                sub_s(y, fmean, y, h);
                // Variance of the centred row (sum of squares after centring: no cancellation).
                const double var = s.sum_sq(y, h) / static_cast<double>(h);
                mul_s(y, static_cast<float>(1.0 / std::sqrt(var + eps)), y, h);
                mul(y, gamma, y, h);
                if (beta != nullptr) add(y, beta, y, h);
            }
        });
        return Status::ok();
    }

private:
    float eps_;
};

Factory make_skip_layer_norm(const KernelCreateContext& ctx) {
    // The reference factory validates the node (arity, epsilon); this kernel shares its prepare.
    DSINFER_ASSIGN_OR_RETURN(auto fb, ctx.create_fallback());
    (void)fb;
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    return make_kernel<SkipLayerNormFast>(eps);
}

}  // namespace
}  // namespace fast

void register_fast_fused_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    const DTypeSet f32{DType::f32};
    r.add({"Gelu", "", 20, kMaxOpset, cpu, f32}, &fast::make_gelu, kPriorityCpu, "cpu");
    r.add({"Gelu", kDsinferDomain, 1, 1, cpu, f32}, &fast::make_gelu, kPriorityCpu, "cpu");
    r.add({"SkipLayerNormalization", kDsinferDomain, 1, 1, cpu, f32}, &fast::make_skip_layer_norm,
          kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail
