// oneDNN elementwise kernels (f32): unary activations on the eltwise primitive and two-input
// arithmetic with numpy broadcasting on the binary primitive. Unary ops and same-shape binary
// ops work on the flat buffer, so they take either layout and pass it on (uniform layout).
// Relu runs dsinfer's vector loop instead of the primitive (oneDNN's is vmaxps(x, 0), which
// returns 0 for NaN), still in this kernel so that it keeps the blocked layout of CNN chains.
// Also here: the checks for NaN and infinities (any_nonfinite, any_nan; onednn_common.hpp) that
// the kernels whose primitives drop a NaN run on their input first, on dsinfer's vector sums.
#include <atomic>
#include <cmath>

#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"
#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;
using A = dnnl::algorithm;

// ---- scans for NaN and infinities ----------------------------------------------------------

/// Reduces x[0, n) with dsinfer's vector loops (fast::simd(), at the active ISA), split across
/// the thread budget in chunks of 128 KiB.
template <class Chunk>
bool any_chunk(const float* x, int64_t n, Chunk&& chunk) noexcept {
    constexpr int64_t kGrain = int64_t{1} << 15;
    if (n < 2 * kGrain) return chunk(x, n);
    std::atomic<bool> found{false};
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
        if (chunk(x + b, e - b)) found.store(true, std::memory_order_relaxed);
    });
    return found.load(std::memory_order_relaxed);
}

}  // namespace

// A float sum in double cannot overflow: it is finite exactly when every value is (a NaN or an
// infinity makes it NaN or infinite). The max is NaN exactly when a value is.
bool any_nonfinite(const float* x, int64_t n) noexcept {
    return any_chunk(x, n, [](const float* p, int64_t m) { return !std::isfinite(fast::simd().sum(p, m)); });
}

bool any_nan(const float* x, int64_t n) noexcept {
    return any_chunk(x, n, [](const float* p, int64_t m) { return std::isnan(fast::simd().max(p, m)); });
}

namespace {

// ---- unary -----------------------------------------------------------------------------------

struct UnaryOp {
    A alg = A::undef;
    float alpha = 0.f, beta = 0.f;
};

class UnaryKernel final : public SimplePrimitiveKernel {
public:
    UnaryKernel(std::unique_ptr<Kernel> fallback, UnaryOp op)
        : SimplePrimitiveKernel(std::move(fallback)), op_(op) {}

    LayoutSupport layout_support(const Graph&, const Node&) const override {
        return {kBlockedLayout, 1, 1, true};
    }

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>&, const Scalars&,
                 BoundPrimitive& p) const override {
        const auto md = flat_md(in[0].num_elements());
        A alg = op_.alg;
        float alpha = op_.alpha, beta = op_.beta;
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, alpha, beta);
        dnnl::eltwise_forward::primitive_desc pd(d, attr, cpu_engine());
        p.set(pd, dnnl::eltwise_forward(pd));
        p.bind(DNNL_ARG_SRC, false, 0, md);
        p.bind(DNNL_ARG_DST, true, 0, md);
        return Status::ok();
    }

    /// Transient shapes: rows of the last dim (the flat primitive computes each element alone).
    bool row_split(const std::vector<Shape>& in, const std::vector<Shape>&,
                   RowSplit& s) const override {
        const Shape& x = in[0];
        if (x.rank() < 1 || x.num_elements() == 0) return false;
        const int64_t w = x[x.rank() - 1];
        s.rows = x.num_elements() / w;
        s.in_width = {w};
        s.out_width = {w};
        return true;
    }

private:
    UnaryOp op_;
};

/// Relu by dsinfer's vector loop (x > 0 ? x : 0, NaN kept), bitwise the reference's Relu, on
/// the flat buffer of either layout. oneDNN's eltwise_relu is vmaxps(x, 0), which gives 0 for
/// NaN, and none of its algorithms computes Relu and keeps NaN; the loop is as fast (both are
/// memory-bound: docs/OPS.md).
class ReluKernel final : public FallbackKernel {
public:
    using FallbackKernel::FallbackKernel;

    LayoutSupport layout_support(const Graph&, const Node&) const override {
        return {kBlockedLayout, 1, 1, true};
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const auto* px = static_cast<const float*>(x.raw);
        auto* py = static_cast<float*>(ctx.output(0).raw);
        const auto relu = fast::simd().unary[static_cast<int>(fast::Unary::relu)];
        parallel_for(x.num_elements(), int64_t{32768},
                     [&](int64_t b, int64_t e) { relu(px + b, py + b, e - b); });
        return Status::ok();
    }
    std::string algorithm(const PrepareContext&) const override {
        return std::string("dsinfer:relu-") + fast::isa_name(fast::active_isa());
    }
};

StatusOr<std::unique_ptr<Kernel>> make_relu(const KernelCreateContext& ctx) {
    const Value* x = ctx.input_value(0);
    if (x == nullptr || !x->dtype || *x->dtype != DType::f32)
        return Status::error(ErrorCode::unsupported, "f32 only");
    return make_with_fallback<ReluKernel>(ctx);
}

template <class F>
StatusOr<std::unique_ptr<Kernel>> make_unary_with(const KernelCreateContext& ctx, F&& op_of) {
    const Value* x = ctx.input_value(0);
    if (x == nullptr || !x->dtype || *x->dtype != DType::f32)
        return Status::error(ErrorCode::unsupported, "f32 only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(UnaryOp op, op_of(ctx.node(), ctx.opset()));
    return make_onednn_kernel<UnaryKernel>(ctx, std::move(fallback), op);
}

template <A Alg, int AlphaX1000 = 0, int BetaX1000 = 0>
StatusOr<std::unique_ptr<Kernel>> make_fixed(const KernelCreateContext& ctx) {
    return make_unary_with(ctx, [](const Node&, int64_t) -> StatusOr<UnaryOp> {
        return UnaryOp{Alg, AlphaX1000 / 1000.f, BetaX1000 / 1000.f};
    });
}

/// Sigmoid: below AVX2 (SSE4.1, DSINFER_MAX_CPU_ISA=baseline) oneDNN 2.6's logistic loses
/// relative accuracy where it is small (inputs below about -10: hundreds of outputs of 4096
/// beyond 4 ulp of the reference in test_onednn.cpp); dsinfer's loop (<= 2 ulp) runs it there.
StatusOr<std::unique_ptr<Kernel>> make_sigmoid(const KernelCreateContext& ctx) {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
    if ((isa & avx2) != avx2)
        return Status::error(ErrorCode::unsupported, "Sigmoid below AVX2: dsinfer's loop");
    return make_fixed<A::eltwise_logistic>(ctx);
}

StatusOr<std::unique_ptr<Kernel>> make_leaky_relu(const KernelCreateContext& ctx) {
    return make_unary_with(ctx, [](const Node& n, int64_t) -> StatusOr<UnaryOp> {
        DSINFER_ASSIGN_OR_RETURN(float a, n.attr_or<float>("alpha", 0.01f));
        // alpha 0 is oneDNN's Relu (vmaxps: NaN -> 0, -Inf -> 0 where the reference's 0 * -Inf
        // is NaN): the next backend runs it.
        if (a == 0.f) return Status::error(ErrorCode::unsupported, "LeakyRelu with alpha 0");
        return UnaryOp{A::eltwise_relu, a, 0.f};
    });
}

StatusOr<std::unique_ptr<Kernel>> make_elu(const KernelCreateContext& ctx) {
    return make_unary_with(ctx, [](const Node& n, int64_t) -> StatusOr<UnaryOp> {
        DSINFER_ASSIGN_OR_RETURN(float a, n.attr_or<float>("alpha", 1.f));
        return UnaryOp{A::eltwise_elu, a, 0.f};
    });
}

StatusOr<std::unique_ptr<Kernel>> make_gelu(const KernelCreateContext& ctx) {
    return make_unary_with(ctx, [](const Node& n, int64_t) -> StatusOr<UnaryOp> {
        DSINFER_ASSIGN_OR_RETURN(std::string approx, n.attr_or<std::string>("approximate", "none"));
        if (approx == "tanh") return UnaryOp{A::eltwise_gelu_tanh, 0.f, 0.f};
        if (approx == "none") return UnaryOp{A::eltwise_gelu_erf, 0.f, 0.f};
        return Status::error(ErrorCode::unsupported, "approximate");
    });
}

// ---- binary ----------------------------------------------------------------------------------

class BinaryKernel final : public SimplePrimitiveKernel {
public:
    BinaryKernel(std::unique_ptr<Kernel> fallback, A alg, bool commutative)
        : SimplePrimitiveKernel(std::move(fallback)), alg_(alg), commutative_(commutative) {}

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        const Value& a = g.value(n.inputs[0]);
        const Value& b = g.value(n.inputs[1]);
        // Same rank-4 shape (symbolic dims by name) with static, blockable channels.
        if (!a.shape.known || !b.shape.known || a.shape.rank() != 4 || b.shape.rank() != 4 ||
            a.shape.to_string() != b.shape.to_string() || a.shape.to_string().find('?') != std::string::npos ||
            !a.shape.dims[1].is_static() || !blockable_channels(a.shape.dims[1].value))
            return {};
        return {kBlockedLayout, 3, 1, true};
    }

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>& out, const Scalars&,
                 BoundPrimitive& p) const override {
        const Shape& y = out[0];
        int src0 = 0;
        if (!(in[0] == y)) {
            if (!(commutative_ && in[1] == y)) return Status(ErrorCode::unsupported, "broadcast");
            src0 = 1;
        }
        const int src1 = 1 - src0;
        dnnl::memory::desc md0, md1, mdy;
        if (in[src1] == y) {  // same shape: flat
            md0 = md1 = mdy = flat_md(y.num_elements());
        } else {
            Shape b;
            for (int i = 0; i < y.rank() - in[src1].rank(); ++i) b.push_back(1);
            for (int i = 0; i < in[src1].rank(); ++i) b.push_back(in[src1][i]);
            md0 = mdy = plain_md(y);
            md1 = plain_md(b);
        }
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::binary::desc d(alg_, md0, md1, mdy);
        dnnl::binary::primitive_desc pd(d, attr, cpu_engine());
        p.set(pd, dnnl::binary(pd));
        p.bind(DNNL_ARG_SRC_0, false, src0, md0);
        p.bind(DNNL_ARG_SRC_1, false, src1, md1);
        p.bind(DNNL_ARG_DST, true, 0, mdy);
        return Status::ok();
    }

    /// One IEEE operation per element: the fallback gives the same bits (transient shapes).
    bool fallback_bitwise() const override { return true; }

private:
    A alg_;
    bool commutative_;
};

template <A Alg, bool Commutative>
StatusOr<std::unique_ptr<Kernel>> make_binary(const KernelCreateContext& ctx) {
    const Value* a = ctx.input_value(0);
    const Value* b = ctx.input_value(1);
    if (ctx.num_inputs() != 2 || a == nullptr || b == nullptr || !a->dtype || !b->dtype ||
        *a->dtype != DType::f32 || *b->dtype != DType::f32)
        return Status::error(ErrorCode::unsupported, "two f32 inputs only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    return make_onednn_kernel<BinaryKernel>(ctx, std::move(fallback), Alg, Commutative);
}

}  // namespace

// Not registered, because oneDNN 2.6 does not propagate NaN or signed zeros as ONNX does (tests in
// test_onednn.cpp): Exp(NaN) = +inf, Clip(NaN) = the lower bound, Neg(+0) = +0, Max/Min(NaN, y)
// = y. dsinfer's fast kernels run those. Relu stays here (it sits in blocked CNN chains) but
// computes with dsinfer's loop (ReluKernel); LeakyRelu with alpha 0 is declined.
void register_eltwise(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    auto add = [&](const char* op, int64_t since, KernelFactory f) {
        r.add({op, "", since, kMaxOpset, DeviceKind::cpu, f32}, f, kPriorityOnednn, "onednn");
    };
    add("Relu", 6, &make_relu);
    add("LeakyRelu", 6, &make_leaky_relu);
    add("Elu", 6, &make_elu);
    add("Tanh", 6, &make_fixed<A::eltwise_tanh>);
    add("Sigmoid", 6, &make_sigmoid);
    add("HardSwish", 14, &make_fixed<A::eltwise_hardswish>);
    add("Sqrt", 6, &make_fixed<A::eltwise_sqrt>);
    add("Abs", 6, &make_fixed<A::eltwise_abs>);
    add("Mish", 18, &make_fixed<A::eltwise_mish>);
    add("Gelu", 20, &make_gelu);
    add("Add", 7, &make_binary<A::binary_add, true>);
    add("Sub", 7, &make_binary<A::binary_sub, false>);
    add("Mul", 7, &make_binary<A::binary_mul, true>);
    add("Div", 7, &make_binary<A::binary_div, false>);
}

}  // namespace dsinfer::detail::onednn
