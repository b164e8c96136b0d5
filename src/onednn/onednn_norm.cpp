// oneDNN normalization and softmax (f32): BatchNormalization (inference), LayerNormalization
// (over the trailing axes, without the optional Mean/InvStdDev outputs), Softmax and
// LogSoftmax (opset >= 13 over one axis; earlier opsets over the coerced 2-D trailing block).
// oneDNN's Softmax/LogSoftmax of a row with a NaN keep the NaN (or lose it, at some lanes) and
// give 0 / -Inf for the rest, where the reference gives a NaN row; on a row with +Inf, or of
// -Inf only, they differ too. So they scan the input and run the fallback kernel when it
// holds a NaN or an infinity. BatchNormalization and LayerNormalization follow IEEE as the
// reference does for any X; BatchNormalization computes (x - mean) * a + B where the
// reference folds x * a + (B - mean * a), which differ when a statistic is not finite (Inf
// scale: Inf vs Inf - Inf = NaN), so a NaN or an infinity among scale, B, mean and var (C
// values each, scanned every run) runs the fallback (tests/unit/test_nonfinite_backends.cpp).

#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;
using F = dnnl::normalization_flags;

bool f32_input(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    return v != nullptr && v->dtype && *v->dtype == DType::f32;
}

/// A kernel that works on input 0's trailing block from block_axis() (row by row, output 0 of
/// input 0's shape, the other inputs read whole): its transient shapes run rows of that block.
class TrailingBlockKernel : public SimplePrimitiveKernel {
public:
    using SimplePrimitiveKernel::SimplePrimitiveKernel;

protected:
    /// The first axis of the block for input 0 of shape x, or -1 (no row split).
    virtual int block_axis(const Shape& x) const = 0;

    bool row_split(const std::vector<Shape>& in, const std::vector<Shape>& out,
                   RowSplit& s) const override {
        const Shape& x = in[0];
        const int axis = block_axis(x);
        if (axis < 1 || x.num_elements() == 0 || out.empty() || !(out[0] == x)) return false;
        const int64_t inner = x.size_between(axis, x.rank());
        s.rows = x.num_elements() / inner;
        s.in_width.assign(in.size(), 0);
        s.out_width.assign(out.size(), 0);
        s.in_width[0] = inner;
        s.out_width[0] = inner;
        return true;
    }
    void piece_shapes(const std::vector<Shape>& in, const std::vector<Shape>& out,
                      const RowSplit&, int64_t rows, std::vector<Shape>& piece_in,
                      std::vector<Shape>& piece_out) const override {
        const int axis = block_axis(in[0]);
        piece_in = in;
        piece_out = out;
        piece_in[0] = rows_before(in[0], axis, rows);
        piece_out[0] = rows_before(out[0], axis, rows);
    }
    /// Never run in place (not in the executor's in-place list).
    bool pieces_may_overlap() const override { return true; }
};

// ---- BatchNormalization ------------------------------------------------------------------

class BatchNormKernel final : public SimplePrimitiveKernel {
public:
    BatchNormKernel(std::unique_ptr<Kernel> fallback, float eps)
        : SimplePrimitiveKernel(std::move(fallback)), eps_(eps) {}

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        return channel_layout(g, n, true);
    }

    Status prepare(PrepareContext& ctx) const override { return prepare_allowing_fallback(ctx); }

    Status run(RunContext& ctx) const noexcept override {
        for (int i = 1; i <= 4; ++i) {
            const TensorView& v = ctx.input(i);
            if (any_nonfinite(static_cast<const float*>(v.raw), v.num_elements()))
                return run_fallback(ctx, blocked_in_mask_, blocked_out_mask_);
        }
        return SimplePrimitiveKernel::run(ctx);
    }

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>&, const Scalars&,
                 BoundPrimitive& p) const override {
        const Shape& x = in[0];
        if (x.rank() < 2 || x.rank() > 5) return Status(ErrorCode::unsupported, "rank");
        const int64_t c = x[1];
        for (int i = 1; i <= 4; ++i)
            if (in[static_cast<std::size_t>(i)].num_elements() != c)
                return Status(ErrorCode::unsupported, "parameter shape");
        const auto md = act_md(x, blocked_input0() && x.rank() == 4);
        const auto vec = dnnl::memory::desc({c}, dt::f32, tag::a);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps_,
                                                  F::use_global_stats | F::use_scale |
                                                      F::use_shift);
        dnnl::batch_normalization_forward::primitive_desc pd(d, attr, cpu_engine());
        p.set(pd, dnnl::batch_normalization_forward(pd));
        p.bind(DNNL_ARG_SRC, false, 0, md);
        p.bind(DNNL_ARG_SCALE, false, 1, vec);
        p.bind(DNNL_ARG_SHIFT, false, 2, vec);
        p.bind(DNNL_ARG_MEAN, false, 3, vec);
        p.bind(DNNL_ARG_VARIANCE, false, 4, vec);
        p.bind(DNNL_ARG_DST, true, 0, md);
        return Status::ok();
    }

private:
    float eps_;
};

StatusOr<std::unique_ptr<Kernel>> make_batchnorm(const KernelCreateContext& ctx) {
    if (ctx.opset() < 9 || ctx.num_inputs() != 5 || ctx.num_outputs() > 1)
        return Status::error(ErrorCode::unsupported, "inference form of opset >= 9 only");
    for (int i = 0; i < 5; ++i)
        if (!f32_input(ctx, i)) return Status::error(ErrorCode::unsupported, "f32 only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(int64_t training, ctx.node().attr_or<int64_t>("training_mode", 0));
    if (training != 0) return Status::error(ErrorCode::unsupported, "training_mode");
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    return make_onednn_kernel<BatchNormKernel>(ctx, std::move(fallback), eps);
}

// ---- LayerNormalization ------------------------------------------------------------------

class LayerNormKernel final : public TrailingBlockKernel {
public:
    LayerNormKernel(std::unique_ptr<Kernel> fallback, int64_t axis, float eps)
        : TrailingBlockKernel(std::move(fallback)), axis_(axis), eps_(eps) {}

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>&, const Scalars&,
                 BoundPrimitive& p) const override {
        const Shape& x = in[0];
        const int r = x.rank();
        if (r < 1) return Status(ErrorCode::unsupported, "rank");
        const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
        if (axis < 0 || axis >= r) return Status(ErrorCode::unsupported, "axis");
        const int64_t inner = x.size_between(static_cast<int>(axis), r);
        const int64_t outer = x.num_elements() / inner;
        if (in[1].num_elements() != inner) return Status(ErrorCode::unsupported, "scale shape");
        const bool bias = in.size() > 2 && in[2].rank() > 0 && in[2].num_elements() == inner;
        if (in.size() > 2 && in[2].num_elements() > 0 && !bias)
            return Status(ErrorCode::unsupported, "bias shape");
        const auto md = dnnl::memory::desc({outer, inner}, dt::f32, tag::ab);
        const auto vec = dnnl::memory::desc({inner}, dt::f32, tag::a);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        auto flags = F::use_scale;
        if (bias) flags = flags | F::use_shift;
        dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps_,
                                                  flags);
        dnnl::layer_normalization_forward::primitive_desc pd(d, attr, cpu_engine());
        p.set(pd, dnnl::layer_normalization_forward(pd));
        p.bind(DNNL_ARG_SRC, false, 0, md);
        p.bind(DNNL_ARG_SCALE, false, 1, vec);
        if (bias) p.bind(DNNL_ARG_SHIFT, false, 2, vec);
        p.bind(DNNL_ARG_DST, true, 0, md);
        return Status::ok();
    }

    /// Transient shapes: rows of the normalized trailing block.
    int block_axis(const Shape& x) const override {
        const int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
        return a >= 0 && a < x.rank() ? static_cast<int>(a) : -1;
    }

private:
    int64_t axis_;
    float eps_;
};

StatusOr<std::unique_ptr<Kernel>> make_layernorm(const KernelCreateContext& ctx) {
    if (!f32_input(ctx, 0) || !f32_input(ctx, 1) || (ctx.has_input(2) && !f32_input(ctx, 2)) ||
        ctx.has_output(1) || ctx.has_output(2))
        return Status::error(ErrorCode::unsupported, "f32 without Mean/InvStdDev only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    return make_onednn_kernel<LayerNormKernel>(ctx, std::move(fallback), axis, eps);
}

// ---- Softmax / LogSoftmax ----------------------------------------------------------------

class SoftmaxKernel final : public TrailingBlockKernel {
public:
    SoftmaxKernel(std::unique_ptr<Kernel> fallback, bool log, int64_t axis, bool coerce)
        : TrailingBlockKernel(std::move(fallback)), log_(log), axis_(axis), coerce_(coerce) {}

    // Row-major only (no layout offer), so the fallback runs on the node's own tensors; the
    // workspace prepare sets covers the fallback's.
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (any_nonfinite(static_cast<const float*>(x.raw), x.num_elements()))
            return run_fallback(ctx);
        return SimplePrimitiveKernel::run(ctx);
    }

protected:
    Status build(const std::vector<Shape>& in, const std::vector<Shape>&, const Scalars&,
                 BoundPrimitive& p) const override {
        const Shape& x = in[0];
        const int r = x.rank();
        if (r < 1) return Status(ErrorCode::unsupported, "rank");
        const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
        if (axis < 0 || axis >= r) return Status(ErrorCode::unsupported, "axis");
        dnnl::memory::desc md;
        int dnnl_axis = static_cast<int>(axis);
        if (coerce_) {
            const int64_t inner = x.size_between(static_cast<int>(axis), r);
            md = dnnl::memory::desc({x.num_elements() / inner, inner}, dt::f32, tag::ab);
            dnnl_axis = 1;
        } else {
            md = plain_md(x);
        }
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (log_) {
            dnnl::logsoftmax_forward::desc d(dnnl::prop_kind::forward_inference, md, dnnl_axis);
            dnnl::logsoftmax_forward::primitive_desc pd(d, attr, cpu_engine());
            p.set(pd, dnnl::logsoftmax_forward(pd));
        } else {
            dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, dnnl_axis);
            dnnl::softmax_forward::primitive_desc pd(d, attr, cpu_engine());
            p.set(pd, dnnl::softmax_forward(pd));
        }
        p.bind(DNNL_ARG_SRC, false, 0, md);
        p.bind(DNNL_ARG_DST, true, 0, md);
        return Status::ok();
    }

    /// Transient shapes: rows of the trailing block (opset < 13) or of the last axis.
    int block_axis(const Shape& x) const override {
        const int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
        if (a < 0 || a >= x.rank() || (!coerce_ && a != x.rank() - 1)) return -1;
        return static_cast<int>(a);
    }

private:
    bool log_;
    int64_t axis_;
    bool coerce_;
};

template <bool Log>
StatusOr<std::unique_ptr<Kernel>> make_softmax(const KernelCreateContext& ctx) {
    if (!f32_input(ctx, 0)) return Status::error(ErrorCode::unsupported, "f32 only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    const bool coerce = ctx.opset() < 13;
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", coerce ? 1 : -1));
    return make_onednn_kernel<SoftmaxKernel>(ctx, std::move(fallback), Log, axis, coerce);
}

}  // namespace

void register_norm(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    auto add = [&](const char* op, int64_t since, KernelFactory f) {
        r.add({op, "", since, kMaxOpset, DeviceKind::cpu, f32}, f, kPriorityOnednn, "onednn");
    };
    add("BatchNormalization", 9, &make_batchnorm);
    add("LayerNormalization", 17, &make_layernorm);
    r.add({"LayerNormalization", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_layernorm,
          kPriorityOnednn, "onednn");
    add("Softmax", 1, &make_softmax<false>);
    add("LogSoftmax", 1, &make_softmax<true>);
}

}  // namespace dsinfer::detail::onednn
