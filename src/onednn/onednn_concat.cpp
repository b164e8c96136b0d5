// Concat (f32) of rank-4 tensors along the channels in the oneDNN backend's blocked layout: it
// lets a U-Net's skip connections (Conv -> Concat -> Conv) stay blocked, where a row-major
// Concat between blocked kernels would make every tensor around it row-major (negotiation is
// all or nothing per value, and the kernels around it are uniform). Offered only when every
// input's channel count fits the block: then image n of the blocked output is the images n of
// the inputs one after the other ([C/b][H][W][b] each), so the join is one contiguous copy per
// (image, input), done here (oneDNN 2.6's concat primitive measured 3x slower on U-Net's
// 1024x1024 joins). Row-major joins run the fallback (the cpu backend's Concat): the same bits.
#include <cstring>

#include "ops/concat.hpp"
#include "runtime/parallel.hpp"

#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;

class ConcatKernel final : public FallbackKernel {
public:
    ConcatKernel(std::unique_ptr<Kernel> fallback, int64_t axis)
        : FallbackKernel(std::move(fallback)), axis_(axis) {}

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        LayoutSupport s;
        if (n.inputs.empty() || n.inputs.size() > 63 || concat_run_axis(axis_, 4) != 1) return s;
        for (ValueId id : n.inputs) {
            if (id == kNoValue) return s;
            const Value& x = g.value(id);
            if (!x.shape.known || x.shape.rank() != 4 || !x.shape.dims[1].is_static() ||
                !blockable_channels(x.shape.dims[1].value))
                return s;
        }
        s.layout = kBlockedLayout;
        s.inputs = (std::uint64_t{1} << n.inputs.size()) - 1;
        s.outputs = 1;
        s.uniform = true;
        return s;
    }
    Status use_layouts(std::uint64_t in, std::uint64_t out) override {
        blocked_ = in != 0 || out != 0;
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        if (!blocked_) return fallback_run(ctx);
        // Uniform: every input and the output are blocked, with whole blocks (layout_support).
        const int inputs = ctx.num_inputs();
        const TensorView& y = ctx.output(0);
        const int64_t images = y.shape[0];
        const int64_t out_image = y.num_elements() / std::max<int64_t>(images, 1);
        auto* dst = static_cast<char*>(y.raw);
        // One task per (image, input), each a contiguous copy.
        parallel_for(images * inputs, 1, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                const int64_t n = t / inputs;
                const int i = static_cast<int>(t % inputs);
                int64_t offset = 0;
                for (int j = 0; j < i; ++j)
                    offset += ctx.input(j).num_elements() / std::max<int64_t>(images, 1);
                const TensorView& x = ctx.input(i);
                const int64_t per_image = x.num_elements() / std::max<int64_t>(images, 1);
                std::memcpy(dst + (n * out_image + offset) * 4,
                            static_cast<const char*>(x.raw) + n * per_image * 4,
                            static_cast<std::size_t>(per_image) * 4);
            }
        });
        return Status::ok();
    }

    std::string algorithm(const PrepareContext& ctx) const override {
        return blocked_ ? std::string("dsinfer:blocked-concat") : fallback_algorithm(ctx);
    }

private:
    int64_t axis_;
    bool blocked_ = false;
};

StatusOr<std::unique_ptr<Kernel>> make_concat(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(const ConcatAttrs a, parse_concat_attrs(ctx));
    // Only joins that could be blocked: the rest is the cpu Concat's, and says so.
    for (std::size_t i = 0; i < ctx.node().inputs.size(); ++i) {
        const Value* x = ctx.input_value(static_cast<int>(i));
        if (x == nullptr || !x->shape.known || x->shape.rank() != 4 ||
            !x->shape.dims[1].is_static() || !blockable_channels(x->shape.dims[1].value) ||
            concat_run_axis(a.axis, 4) != 1)
            return Status::error(ErrorCode::unsupported, "rank-4 joins of blockable channels only");
    }
    return make_onednn_kernel<ConcatKernel>(ctx, std::move(fallback), a.axis);
}

}  // namespace

void register_concat(KernelRegistry& r) {
    r.add({"Concat", "", 4, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}}, &make_concat,
          kPriorityOnednn, "onednn");
}

}  // namespace dsinfer::detail::onednn
