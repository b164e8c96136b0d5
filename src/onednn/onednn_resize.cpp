// oneDNN Resize (f32) on the resampling primitive, for the forms exporters emit for upsampling
// in detection and segmentation heads: spatial-only resizing (batch and channel dims kept) of a
// 3-D to 5-D tensor, with
//   - linear, half_pixel (or pytorch_half_pixel with outputs longer than 1), no antialias, where
//     the scale equals output/input length exactly (oneDNN interpolates at (o + 0.5) * in/out
//     - 0.5, clamped to the edges, which is ONNX's half_pixel with that scale);
//   - nearest with an integer upsampling factor and a rounding that picks floor(o / factor):
//     asymmetric with floor (also Resize-10), or half_pixel/pytorch_half_pixel with
//     round_prefer_floor/round_prefer_ceil (no ties occur with integer factors).
// Everything else (cubic, other coordinate modes, roi, axes, antialias, fractional nearest
// factors) runs on the fallback kernel, which also defines the output shape.
// Non-finite inputs: where an output falls on an input sample (odd integer factors, e.g. 3x),
// oneDNN still weighs the neighbour, by 0 (or by a rounding residue), so an infinity there
// gives NaN (0 * Inf) or spreads, while ONNX's definition (and the reference, which skips taps
// of weight 0) gives the sample; such shape classes scan the input and run the fallback when
// it holds a NaN or an infinity.
#include <cmath>

#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;

struct ResizeAttrs {
    bool linear = false;
    bool half_pixel = false;      // half_pixel or pytorch_half_pixel
    bool pytorch = false;         // pytorch_half_pixel: an output length of 1 samples index 0
    bool floor_nearest = false;   // nearest picks floor(o / factor) for integer factors
    int scales_input = 2;         // index of the scales input (1 for Resize-10)
};

class ResizeKernel final : public SimplePrimitiveKernel {
public:
    ResizeKernel(std::unique_ptr<Kernel> fallback, ResizeAttrs a)
        : SimplePrimitiveKernel(std::move(fallback)), a_(a) {}

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        return channel_layout(g, n, true);
    }

    Status prepare(PrepareContext& ctx) const override {
        return a_.linear ? prepare_allowing_fallback(ctx) : SimplePrimitiveKernel::prepare(ctx);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (a_.linear && on_samples(x.shape, ctx.output(0).shape) &&
            any_nonfinite(static_cast<const float*>(x.raw), x.num_elements()))
            return run_fallback(ctx, blocked_in_mask_, blocked_out_mask_);
        return SimplePrimitiveKernel::run(ctx);
    }

protected:
    bool needs_scalars() const override { return a_.linear; }

    /// True when some output of a spatial dim lands on an input sample (within oneDNN's float
    /// rounding): half_pixel's x = (o + 0.5) * in / out - 0.5 is an integer in [0, in - 1]
    /// (every output of a dim kept at its length does). Never for even integer factors (x
    /// ends in .25 or .75).
    static bool on_samples(const Shape& x, const Shape& y) noexcept {
        if (x.rank() != y.rank()) return true;
        for (int d = 2; d < x.rank(); ++d) {
            const double scale = static_cast<double>(x[d]) / static_cast<double>(y[d]);
            for (int64_t o = 0; o < y[d]; ++o) {
                const double pos = (static_cast<double>(o) + 0.5) * scale - 0.5;
                if (pos > -1e-3 && pos < static_cast<double>(x[d] - 1) + 1e-3 &&
                    std::fabs(pos - std::nearbyint(pos)) < 1e-3)
                    return true;
            }
        }
        return false;
    }

    // Linear needs the scales (when given) to check that they equal output/input exactly.
    StatusOr<Scalars> scalars(const std::vector<const void*>& data, const std::vector<Shape>& shapes,
                              const std::vector<DType>& types) const override {
        Scalars s;
        const auto i = static_cast<std::size_t>(a_.scales_input);
        if (!a_.linear || i >= data.size() || data[i] == nullptr || types[i] != DType::f32)
            return s;
        const float* p = static_cast<const float*>(data[i]);
        for (int64_t k = 0; k < shapes[i].num_elements(); ++k) s.push_back(p[k]);
        return s;
    }

    Status build(const std::vector<Shape>& in, const std::vector<Shape>& out, const Scalars& sc,
                 BoundPrimitive& p) const override {
        const Shape& x = in[0];
        const Shape& y = out[0];
        const int r = x.rank();
        if (r < 3 || r > 5 || y.rank() != r || x[0] != y[0] || x[1] != y[1])
            return Status(ErrorCode::unsupported, "spatial resize of rank 3-5 only");
        if (!sc.empty() && static_cast<int>(sc.size()) != r)
            return Status(ErrorCode::unsupported, "scales");
        for (int d = 2; d < r; ++d) {
            if (a_.pytorch && y[d] == 1) return Status(ErrorCode::unsupported, "length 1");
            if (a_.linear) {
                if (!sc.empty() && static_cast<float>(x[d]) * sc[static_cast<std::size_t>(d)] !=
                                       static_cast<float>(y[d]))
                    return Status(ErrorCode::unsupported, "scale is not out/in");
            } else if (y[d] % x[d] != 0) {
                return Status(ErrorCode::unsupported, "fractional nearest factor");
            }
        }
        const bool blocked = blocked_input0() && r == 4;
        const auto src = act_md(x, blocked);
        const auto dst = act_md(y, blocked);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference,
                                         a_.linear ? dnnl::algorithm::resampling_linear
                                                   : dnnl::algorithm::resampling_nearest,
                                         src, dst);
        dnnl::resampling_forward::primitive_desc pd(d, attr, cpu_engine());
        p.set(pd, dnnl::resampling_forward(pd));
        p.bind(DNNL_ARG_SRC, false, 0, src);
        p.bind(DNNL_ARG_DST, true, 0, dst);
        return Status::ok();
    }

private:
    ResizeAttrs a_;
};

StatusOr<std::unique_ptr<Kernel>> make_resize(const KernelCreateContext& ctx) {
    const Value* x = ctx.input_value(0);
    if (x == nullptr || !x->dtype || *x->dtype != DType::f32)
        return Status::error(ErrorCode::unsupported, "f32 only");
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    ResizeAttrs a;
    DSINFER_ASSIGN_OR_RETURN(std::string mode, n.attr_or<std::string>("mode", "nearest"));
    const bool v10 = ctx.opset() < 11;
    a.scales_input = v10 ? 1 : 2;
    std::string ctm = "asymmetric", nearest = "floor";
    int64_t antialias = 0, exclude = 0;
    if (!v10) {
        DSINFER_ASSIGN_OR_RETURN(ctm, n.attr_or<std::string>("coordinate_transformation_mode",
                                                             "half_pixel"));
        DSINFER_ASSIGN_OR_RETURN(nearest, n.attr_or<std::string>("nearest_mode",
                                                                 "round_prefer_floor"));
        DSINFER_ASSIGN_OR_RETURN(antialias, n.attr_or<int64_t>("antialias", 0));
        DSINFER_ASSIGN_OR_RETURN(exclude, n.attr_or<int64_t>("exclude_outside", 0));
    }
    if (antialias != 0 || exclude != 0 || n.has_attr("axes"))
        return Status::error(ErrorCode::unsupported, "antialias/exclude_outside/axes");
    a.half_pixel = ctm == "half_pixel" || ctm == "pytorch_half_pixel";
    a.pytorch = ctm == "pytorch_half_pixel";
    if (mode == "linear") {
        if (!a.half_pixel) return Status::error(ErrorCode::unsupported, "linear mode");
        a.linear = true;
    } else if (mode == "nearest") {
        a.floor_nearest = (ctm == "asymmetric" && nearest == "floor") ||
                          (a.half_pixel && (nearest == "round_prefer_floor" ||
                                            nearest == "round_prefer_ceil"));
        if (!a.floor_nearest) return Status::error(ErrorCode::unsupported, "nearest mode");
    } else {
        return Status::error(ErrorCode::unsupported, "cubic");
    }
    return make_onednn_kernel<ResizeKernel>(ctx, std::move(fallback), a);
}

}  // namespace

void register_resize(KernelRegistry& r) {
    r.add({"Resize", "", 10, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}}, &make_resize,
          kPriorityOnednn, "onednn");
}

}  // namespace dsinfer::detail::onednn
