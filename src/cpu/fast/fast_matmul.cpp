// Fast MatMul, Gemm, FusedMatMul and FusedGemm for f32 against a constant right-hand side (the
// weights of Linear and Gemm layers), on dsinfer's packed-B GEMM (sgemm.hpp), with the bias,
// alpha and activation applied as C is stored. Other forms (run-time B, transA, a C that is not a
// constant row vector, other dtypes) go to the next kernel.
//
// Weights: when this kernel is the node's own kernel it asks the engine's weight store for B
// packed (built at creation, once per weights, orientation and ISA: nodes sharing a weight
// share the copy) and declares input 1 released (Kernel::released_constant_inputs), so the
// executor frees the original and the weights are held once, packed. As another kernel's
// fallback (oneDNN's, which holds the weights packed its own way) it declines, so the reference kernel is the fallback: it reads B
// from the run's input (the owner restores it there for the rare shape classes it cannot
// take), where a copy here, eager or packed on the first run, would hold every weight matrix
// twice, and packing in run() would allocate there.
// The GEMM packs A in the node's workspace (from the activation plan).
//
// CPU precision fp16 / bf16 (KernelCreateContext::weight_precision): B is packed at half width
// (rounded to nearest even; "sgemm.packed_b*.f16" / ".bf16" forms), A and C stay float32 and
// the products accumulate in float32 (on AVX512_BF16 CPUs bf16 runs on vdpbf16ps, which rounds
// A to bf16 as well; sgemm.hpp).
#include <algorithm>

#include "ops/activation.hpp"
#include "ops/fallback_kernel.hpp"
#include "ops/gemm.hpp"
#include "kernels/activation_f32.hpp"
#include "cpu/fast/groups.hpp"
#include "kernels/sgemm.hpp"
#include "ops/kernel_utils.hpp"
#include "kernels/weight_forms.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

struct PackedGemmConfig {
    int64_t k = 0, n = 0;
    bool transposed = false;     ///< B stored [N, K] (Gemm transB = 1)
    bool gemm = false;           ///< Gemm semantics: A must be 2-D
    std::optional<Tensor> bias;  ///< constant [N], prescaled by beta
    float alpha = 1.f;
    ActivationSpec act;
};

class PackedMatMulKernel final : public FallbackKernelBase {
public:
    PackedMatMulKernel(std::unique_ptr<Kernel> fallback, std::shared_ptr<const PackedB> packed,
                       PackedGemmConfig cfg)
        : FallbackKernelBase(std::move(fallback)),
          cfg_(std::move(cfg)),
          packed_(std::move(packed)) {}

    /// The fallback's checks and workspace, and room for the GEMM's packed A (the larger of the
    /// two: only one of them runs).
    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        const Shape& a = ctx.input(0).shape();
        if (ctx.input(0).dtype() != DType::f32 || a.rank() < 1 || a[a.rank() - 1] != cfg_.k)
            return Status::ok();
        const int64_t m = a.num_elements() / std::max<int64_t>(cfg_.k, 1);
        ctx.set_workspace(
            std::max(ctx.workspace_bytes(), sgemm_workspace_bytes(m, *packed_, max_threads())));
        return Status::ok();
    }

    std::uint64_t released_constant_inputs() const noexcept override {
        return std::uint64_t{1} << 1;
    }

    /// The packed GEMM at the ISA its B was packed for; half-width B says so ("bf16" on
    /// vdpbf16ps, "f16w"/"bf16w" widened to float32 as loaded).
    std::string algorithm(const PrepareContext&) const override {
        const PackedB& b = *packed_;
        std::string name = "dsinfer:sgemm-";
        if (b.dtype == DType::f16) name += "f16w-";
        else if (b.dtype == DType::bf16) name += b.pairs ? "bf16-" : "bf16w-";
        name += b.pairs ? packed_b_target(b) : fast::isa_name(b.isa);
        return name;
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const int rank = a.shape.rank();
        const bool ok = a.dtype == DType::f32 && rank >= 1 && (!cfg_.gemm || rank == 2) &&
                        a.shape[rank - 1] == cfg_.k;
        if (!ok) {
            // prepare (the fallback's shape checks) rejects every other shape: B is gone.
            return Status::error(ErrorCode::internal, "packed MatMul got A of shape ",
                                 a.shape.to_string(), " for K = ", cfg_.k);
        }
        const PackedB* b = packed_.get();
        // Rows of C: A's leading dims folded (rank-1 A is one row).
        const int64_t m = a.num_elements() / cfg_.k;
        if (m == 0) return Status::ok();
        float* y = ctx.output(0).data_unchecked<float>();
        const bool relu = cfg_.act.kind == Activation::relu;
        if (!sgemm_packed(m, a.data_unchecked<float>(), cfg_.k, *b, y, cfg_.n,
                          cfg_.bias ? cfg_.bias->data_unchecked<float>() : nullptr, cfg_.alpha,
                          relu ? GemmActivation::relu : GemmActivation::none, ctx.workspace(),
                          ctx.workspace_bytes()))
            return Status(ErrorCode::resource_exhausted,
                          "out of memory for the GEMM's A-packing buffer");
        if (!relu && !cfg_.act.empty()) apply_activation_f32(y, m * cfg_.n, cfg_.act);
        return Status::ok();
    }

private:
    PackedGemmConfig cfg_;
    std::shared_ptr<const PackedB> packed_;  ///< the weight store's form (shared by readers)
};

bool f32_value(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    return v != nullptr && v->dtype && *v->dtype == DType::f32;
}

const Tensor* constant_matrix(const KernelCreateContext& ctx, int i) {
    const Tensor* b = ctx.constant_input(i);
    if (b == nullptr || b->dtype() != DType::f32 || b->num_dims() != 2 || b->num_elements() == 0)
        return nullptr;
    return b;
}

StatusOr<std::unique_ptr<Kernel>> finish(const KernelCreateContext& ctx, const Tensor& b,
                                         PackedGemmConfig cfg) {
    if (ctx.creating_fallback())
        return Status::error(ErrorCode::unsupported, "packed GEMM: not as another kernel's fallback");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    // B packed for this ISA's micro-kernels, once per (weights, orientation, ISA) in the
    // engine's weight store: nodes reading the same weights share one copy.
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    const DType width = ctx.weight_precision() == DType::f16 || ctx.weight_precision() == DType::bf16
                            ? ctx.weight_precision()
                            : DType::f32;
    DSINFER_ASSIGN_OR_RETURN(auto packed, packed_b_form(*store, store->source(b), b.data_unchecked<float>(),
                                                        cfg.k, cfg.n, cfg.transposed, width));
    return make_kernel<PackedMatMulKernel>(std::move(fallback), std::move(packed), std::move(cfg));
}

/// MatMul, and FusedMatMul (com.dsinfer: a constant bias [N] and an activation).
StatusOr<std::unique_ptr<Kernel>> make_matmul(const KernelCreateContext& ctx) {
    const Tensor* b = constant_matrix(ctx, 1);
    if (!f32_value(ctx, 0) || b == nullptr)
        return Status::error(ErrorCode::unsupported, "f32 with a constant 2-D B only");
    PackedGemmConfig cfg;
    cfg.k = b->shape()[0];
    cfg.n = b->shape()[1];
    if (ctx.node().domain == kDsinferDomain) {
        DSINFER_ASSIGN_OR_RETURN(cfg.act, activation_from_attributes(ctx));
        if (ctx.has_input(2)) {
            const Tensor* bias = ctx.constant_input(2);
            if (bias == nullptr || bias->dtype() != DType::f32 || bias->num_dims() != 1 ||
                bias->shape()[0] != cfg.n)
                return Status::error(ErrorCode::unsupported, "constant bias [N] only");
            cfg.bias = *bias;
        }
    }
    return finish(ctx, *b, std::move(cfg));
}

/// Gemm (opset >= 7), and FusedGemm (com.dsinfer: Gemm-13 semantics and an activation).
StatusOr<std::unique_ptr<Kernel>> make_gemm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    const bool fused = n.domain == kDsinferDomain;
    const Tensor* b = constant_matrix(ctx, 1);
    DSINFER_ASSIGN_OR_RETURN(const GemmAttrs ga, parse_gemm_attrs(ctx));
    const float alpha = ga.alpha, beta = ga.beta;
    const int64_t tb = ga.trans_b ? 1 : 0;
    if (!f32_value(ctx, 0) || b == nullptr || ga.trans_a || (!fused && ctx.opset() < 7))
        return Status::error(ErrorCode::unsupported, "f32, constant B, transA=0 only");
    PackedGemmConfig cfg;
    cfg.gemm = true;
    cfg.transposed = tb != 0;
    cfg.k = tb != 0 ? b->shape()[1] : b->shape()[0];
    cfg.n = tb != 0 ? b->shape()[0] : b->shape()[1];
    cfg.alpha = alpha;
    if (fused) {
        DSINFER_ASSIGN_OR_RETURN(cfg.act, activation_from_attributes(ctx));
    }
    if (ctx.has_input(2) && beta != 0.f) {
        const Tensor* c = ctx.constant_input(2);
        const bool row = c != nullptr && c->dtype() == DType::f32 && c->num_elements() == cfg.n &&
                         (c->num_dims() == 1 || (c->num_dims() == 2 && c->shape()[0] == 1));
        if (!row) return Status::error(ErrorCode::unsupported, "C must be a constant row vector");
        Tensor scaled = c->clone();
        for (int64_t i = 0; i < cfg.n; ++i) scaled.data_unchecked<float>()[i] *= beta;
        cfg.bias = std::move(scaled);
    }
    return finish(ctx, *b, std::move(cfg));
}

}  // namespace

void register_fast_matmul(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    r.add({"MatMul", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_matmul, kPriorityCpu, "cpu");
    r.add({"Gemm", "", 7, kMaxOpset, DeviceKind::cpu, f32}, &make_gemm, kPriorityCpu, "cpu");
    r.add({"FusedMatMul", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_matmul, kPriorityCpu,
          "cpu");
    r.add({"FusedGemm", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_gemm, kPriorityCpu,
          "cpu");
}

}  // namespace dsinfer::detail
