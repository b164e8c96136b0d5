// oneDNN pooling (f32): MaxPool (without the Indices output), AveragePool, GlobalMaxPool and
// GlobalAveragePool, 1-D to 3-D, with pads, auto_pad, strides, dilations and ceil_mode.
// Rank-4 pooling keeps the backend's blocked layout between oneDNN kernels (uniform layout);
// global pooling reads it and writes [N, C, 1, 1], which is the same bytes in either layout.
// oneDNN's max pooling drops NaN (vmaxps keeps the other operand: a window [NaN, 0] gives 0),
// where ONNX and the reference give NaN: max pooling scans its input for NaN first and runs
// the fallback kernel on an input that holds one. Average pooling already follows IEEE.
#include "ops/window.hpp"

#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;

/// The shared pooling attributes (ops/window.hpp; empty for global pooling) and the kind.
struct PoolSpec : PoolAttrs {
    bool max = true, global = false;
};

class PoolKernel final : public SimplePrimitiveKernel {
public:
    PoolKernel(std::unique_ptr<Kernel> fallback, PoolSpec a)
        : SimplePrimitiveKernel(std::move(fallback)), a_(std::move(a)) {}

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        return channel_layout(g, n, !a_.global);
    }

    Status prepare(PrepareContext& ctx) const override {
        return a_.max ? prepare_allowing_fallback(ctx) : SimplePrimitiveKernel::prepare(ctx);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        // Decided here, not in build(): primitives are cached by shape, not by layout.
        if (row_major_to_fallback() && x.shape.rank() == 4) return run_fallback(ctx);
        if (a_.max && any_nan(static_cast<const float*>(x.raw), x.num_elements()))
            return run_fallback(ctx, blocked_in_mask_, blocked_out_mask_);
        return SimplePrimitiveKernel::run(ctx);
    }

    std::string algorithm(const PrepareContext& ctx) const override {
        if (row_major_to_fallback() && ctx.input(0).shape().rank() == 4)
            return fallback_algorithm(ctx);
        return SimplePrimitiveKernel::algorithm(ctx);
    }

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>& out, const Scalars&,
                 BoundPrimitive& p) const override {
        const Shape& x = in[0];
        const Shape& y = out[0];
        const int nsp = x.rank() - 2;
        if (nsp < 1 || nsp > 3) return Status(ErrorCode::unsupported, "rank");
        dims k, s, d, pl, pr;
        for (int i = 0; i < nsp; ++i) {
            const int64_t kk = a_.global ? x[2 + i] : a_.kernel_shape[static_cast<std::size_t>(i)];
            const int64_t ss = a_.global ? 1 : attr_at(a_.strides, i, 1);
            const int64_t dd = a_.global ? 1 : attr_at(a_.dilations, i, 1);
            int64_t pb = 0, pe = 0;
            if (!a_.global) {
                DSINFER_ASSIGN_OR_RETURN(WindowDim w, window_dim(i, nsp, x[2 + i], kk, ss, dd,
                                                                 a_.auto_pad, a_.pads,
                                                                 a_.ceil_mode));
                if (w.out != y[2 + i]) return Status(ErrorCode::unsupported, "geometry");
                pb = w.pb;
                // oneDNN wants the end padding that makes floor() give this output size.
                pe = (w.out - 1) * ss + dd * (kk - 1) + 1 - x[2 + i] - pb;
                if (pe < 0) return Status(ErrorCode::unsupported, "padding");
                // Averages that count padding differ from ONNX on the ceil_mode overhang.
                if (!a_.max && a_.count_include_pad && pe != w.pe)
                    return Status(ErrorCode::unsupported, "ceil overhang");
                // A window entirely in padding has no defined value in oneDNN.
                if (pb >= dd * (kk - 1) + 1 || pe >= dd * (kk - 1) + 1)
                    return Status(ErrorCode::unsupported, "window in padding");
            }
            k.push_back(kk);
            s.push_back(ss);
            d.push_back(dd - 1);
            pl.push_back(pb);
            pr.push_back(pe);
        }
        const bool blocked = blocked_input0() && nsp == 2;
        const auto src = act_md(x, blocked);
        const auto dst = act_md(y, blocked);  // global: [N,C,1,1] is identical in both layouts
        const auto alg = a_.max ? dnnl::algorithm::pooling_max
                         : a_.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                : dnnl::algorithm::pooling_avg_exclude_padding;
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src, dst, s,
                                            k, d, pl, pr);
        dnnl::pooling_v2_forward::primitive_desc pd(desc, attr, cpu_engine());
        p.set(pd, dnnl::pooling_v2_forward(pd));
        p.bind(DNNL_ARG_SRC, false, 0, src);
        p.bind(DNNL_ARG_DST, true, 0, dst);
        return Status::ok();
    }

private:
    /// Row-major 2-D max pooling runs the cpu backend's kernel (fast_qlinear.cpp): oneDNN 2.6's
    /// row-major (nchw) pooling is its slow generic one (150 ms where the cpu loop takes a few
    /// on a 2x2 pool of 16 x 1024 x 1024; blocked tensors keep oneDNN's JIT pooling).
    bool row_major_to_fallback() const noexcept {
        return a_.max && !a_.global && !blocked_input0() && fast_fallback();
    }

    PoolSpec a_;
};

template <bool Max, bool Global>
StatusOr<std::unique_ptr<Kernel>> make_pool(const KernelCreateContext& ctx) {
    const Value* x = ctx.input_value(0);
    if (x == nullptr || !x->dtype || *x->dtype != DType::f32 || ctx.has_output(1))
        return Status::error(ErrorCode::unsupported, "f32 without Indices only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    [[maybe_unused]] const Node& n = ctx.node();
    PoolSpec a;
    if (!Global) {  // the fallback has checked them
        DSINFER_ASSIGN_OR_RETURN(PoolAttrs window, parse_pool_attrs(ctx));
        static_cast<PoolAttrs&>(a) = std::move(window);
    }
    a.max = Max;
    a.global = Global;
    return make_onednn_kernel<PoolKernel>(ctx, std::move(fallback), std::move(a));
}

}  // namespace

void register_pool(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    auto add = [&](const char* op, KernelFactory f) {
        r.add({op, "", 1, kMaxOpset, DeviceKind::cpu, f32}, f, kPriorityOnednn, "onednn");
    };
    add("MaxPool", &make_pool<true, false>);
    add("AveragePool", &make_pool<false, false>);
    add("GlobalMaxPool", &make_pool<true, true>);
    add("GlobalAveragePool", &make_pool<false, true>);
}

}  // namespace dsinfer::detail::onednn
