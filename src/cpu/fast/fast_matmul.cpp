// Fast MatMul and Gemm for f32 against a constant right-hand side (the weights of Linear and
// Gemm layers), on dsinfer's packed-B GEMM (sgemm.hpp). B is packed once at creation. Other forms
// (run-time B, transA, a C that is not a row vector, other dtypes) go to the next kernel.
// B is packed on the first run, not at creation: this kernel is often only the oneDNN kernel's
// fallback, and an eager pack would hold a second copy of every weight matrix for nothing.
#include <mutex>

#include "cpu/fast/groups.hpp"
#include "cpu/fast/sgemm.hpp"
#include "cpu/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

class PackedMatMulKernel final : public Kernel {
public:
    PackedMatMulKernel(std::unique_ptr<Kernel> fallback, Tensor b, int64_t k, int64_t n,
                       bool transposed, std::optional<Tensor> bias, float alpha, bool gemm)
        : fallback_(std::move(fallback)), w_(std::move(b)), k_(k), n_(n),
          transposed_(transposed), bias_(std::move(bias)), alpha_(alpha), gemm_(gemm) {}

    Status prepare(PrepareContext& ctx) const override { return fallback_->prepare(ctx); }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const bool ok = a.dtype == DType::f32 && a.shape.rank() >= 2 &&
                        (!gemm_ || a.shape.rank() == 2) && a.shape[a.shape.rank() - 1] == k_;
        if (!ok) return fallback_->run(ctx);
        try {
            std::call_once(once_, [&] {
                b_ = pack_b(w_.data<float>(), k_, n_, transposed_);
            });
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory packing MatMul weights");
        }
        // Rows of C: A's leading dims folded (with K = 0, A is empty: count them from C).
        const int64_t m = b_.k > 0 ? a.num_elements() / b_.k
                                   : ctx.output(0).num_elements() / std::max<int64_t>(b_.n, 1);
        if (!sgemm_packed(m, a.data<float>(), b_.k, b_, ctx.output(0).data<float>(), b_.n,
                          bias_ ? bias_->data<float>() : nullptr, alpha_))
            return Status(ErrorCode::resource_exhausted,
                          "out of memory for the GEMM's A-packing buffer");
        return Status::ok();
    }

private:
    std::unique_ptr<Kernel> fallback_;
    Tensor w_;
    int64_t k_, n_;
    bool transposed_;
    mutable std::once_flag once_;
    mutable PackedB b_;
    std::optional<Tensor> bias_;
    float alpha_;
    bool gemm_;
};

bool f32_value(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    return v != nullptr && v->dtype && *v->dtype == DType::f32;
}

const Tensor* constant_matrix(const KernelCreateContext& ctx, int i) {
    const Tensor* b = ctx.constant_input(i);
    if (b == nullptr || b->dtype() != DType::f32 || b->num_dims() != 2) return nullptr;
    return b;
}

StatusOr<std::unique_ptr<Kernel>> make_matmul(const KernelCreateContext& ctx) {
    const Tensor* b = constant_matrix(ctx, 1);
    if (!f32_value(ctx, 0) || b == nullptr)
        return Status::error(ErrorCode::unsupported, "f32 with a constant 2-D B only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    return make_kernel<PackedMatMulKernel>(std::move(fallback), *b, b->shape()[0], b->shape()[1],
                                           false, std::nullopt, 1.f, false);
}

StatusOr<std::unique_ptr<Kernel>> make_gemm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    const Tensor* b = constant_matrix(ctx, 1);
    DSINFER_ASSIGN_OR_RETURN(const float alpha, n.attr_or<float>("alpha", 1.f));
    DSINFER_ASSIGN_OR_RETURN(const float beta, n.attr_or<float>("beta", 1.f));
    DSINFER_ASSIGN_OR_RETURN(const int64_t ta, n.attr_or<int64_t>("transA", 0));
    DSINFER_ASSIGN_OR_RETURN(const int64_t tb, n.attr_or<int64_t>("transB", 0));
    if (!f32_value(ctx, 0) || b == nullptr || ta != 0 || ctx.opset() < 7)
        return Status::error(ErrorCode::unsupported, "f32, constant B, transA=0 only");
    const int64_t k = tb != 0 ? b->shape()[1] : b->shape()[0];
    const int64_t nn = tb != 0 ? b->shape()[0] : b->shape()[1];
    std::optional<Tensor> bias;
    if (ctx.has_input(2) && beta != 0.f) {
        const Tensor* c = ctx.constant_input(2);
        const bool row = c != nullptr && c->dtype() == DType::f32 && c->num_elements() == nn &&
                         (c->num_dims() == 1 || (c->num_dims() == 2 && c->shape()[0] == 1));
        if (!row) return Status::error(ErrorCode::unsupported, "C must be a constant row vector");
        Tensor scaled = c->clone();
        for (int64_t i = 0; i < nn; ++i) scaled.data<float>()[i] *= beta;
        bias = std::move(scaled);
    }
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    return make_kernel<PackedMatMulKernel>(std::move(fallback), *b, k, nn, tb != 0,
                                           std::move(bias), alpha, true);
}

}  // namespace

void register_fast_matmul(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    r.add({"MatMul", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_matmul, kPriorityCpu, "cpu");
    r.add({"Gemm", "", 7, kMaxOpset, DeviceKind::cpu, f32}, &make_gemm, kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail
