// Reference NonMaxSuppression (opset 10+).
//
// Per (batch, class): boxes whose score is > score_threshold (when given; NaN scores never
// qualify) are visited by decreasing score (ties: lower box index first); a box is kept unless
// its IoU with an already kept box is > iou_threshold; at most max_output_boxes_per_class are
// kept. The output [num_selected, 3] lists (batch, class, box) in that order, so its size is
// known only in run.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_reduce_nms_kernels(KernelRegistry& r);

namespace {

struct Box {
    float y1, x1, y2, x2;
};

inline Box box_at(const float* b, bool center) noexcept {
    if (center) {
        const float xc = b[0], yc = b[1], w = b[2], h = b[3];
        return {yc - h / 2.f, xc - w / 2.f, yc + h / 2.f, xc + w / 2.f};
    }
    // Corners may come in either order.
    return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

/// True when IoU(a, b) > threshold.
inline bool suppresses(const Box& a, const Box& b, float threshold) noexcept {
    const float area_a = (a.y2 - a.y1) * (a.x2 - a.x1);
    const float area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
    if (!(area_a > 0.f) || !(area_b > 0.f)) return false;
    const float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
    const float iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
    if (!(ih > 0.f) || !(iw > 0.f)) return false;
    const float inter = ih * iw;
    const float uni = area_a + area_b - inter;
    if (!(uni > 0.f)) return false;
    return inter / uni > threshold;
}

class NmsKernel final : public Kernel {
public:
    explicit NmsKernel(bool center) : center_(center) {}

    struct Params {
        std::int64_t max_out = 0;
        float iou = 0.f;
        bool has_score = false;
        float score = 0.f;
    };

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& boxes = ctx.input(0);
        const Tensor& scores = ctx.input(1);
        if (boxes.dtype() != DType::f32 || scores.dtype() != DType::f32)
            return Status::error(ErrorCode::unsupported, "boxes and scores must be float32, got ",
                                 dtype_name(boxes.dtype()), " and ", dtype_name(scores.dtype()));
        const Shape& bs = boxes.shape();
        const Shape& ss = scores.shape();
        if (bs.rank() != 3 || bs[2] != 4)
            return Status::error(ErrorCode::invalid_argument,
                                 "input 'boxes' must have shape [batches, boxes, 4], got ",
                                 bs.to_string());
        if (ss.rank() != 3 || ss[0] != bs[0] || ss[2] != bs[1])
            return Status::error(ErrorCode::invalid_argument, "input 'scores' must have shape [",
                                 bs[0], ", classes, ", bs[1], "], got ", ss.to_string());
        for (int i = 2; i <= 4; ++i) {
            if (!ctx.has_input(i)) continue;
            const Tensor& t = ctx.input(i);
            const DType want = i == 2 ? DType::i64 : DType::f32;
            if (t.dtype() != want || t.num_elements() != 1)
                return Status::error(ErrorCode::invalid_argument, "input ", i,
                                     " must be a 1-element ", dtype_name(want), " tensor, got ",
                                     dtype_name(t.dtype()), " ", t.shape().to_string());
        }
        ctx.set_output_dynamic(0, DType::i64);
        if (!ctx.has_input(2) || !ctx.has_data(2)) return Status::ok();
        const std::int64_t max_out =
            std::clamp<std::int64_t>(*ctx.input(2).data_unchecked<std::int64_t>(), 0, bs[1]);
        // Scratch: the sorted candidate order and kept boxes of one class, then every
        // selected triple (staged before the output can be allocated).
        const auto per_class = static_cast<std::size_t>(bs[1]);
        const auto total = static_cast<std::size_t>(bs[0] * ss[1] * max_out);
        ctx.set_workspace((2 * per_class + 3 * total) * sizeof(std::int64_t));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& boxes = ctx.input(0);
        const TensorView& scores = ctx.input(1);
        const std::int64_t batches = boxes.shape[0];
        const std::int64_t nboxes = boxes.shape[1];
        const std::int64_t classes = scores.shape[1];
        Params p;
        if (ctx.has_input(2))
            p.max_out = std::clamp<std::int64_t>(*ctx.input(2).data_unchecked<std::int64_t>(), 0, nboxes);
        if (ctx.has_input(3)) p.iou = *ctx.input(3).data_unchecked<float>();
        if (ctx.has_input(4)) {
            p.has_score = true;
            p.score = *ctx.input(4).data_unchecked<float>();
        }
        const auto per_class = static_cast<std::size_t>(nboxes);
        const auto total = static_cast<std::size_t>(batches * classes * p.max_out);
        if (p.max_out > 0 &&
            ctx.workspace_bytes() < (2 * per_class + 3 * total) * sizeof(std::int64_t))
            return Status(ErrorCode::internal, "NonMaxSuppression workspace too small");
        auto* ws = static_cast<std::int64_t*>(ctx.workspace());
        std::int64_t* order = ws;
        std::int64_t* kept = ws + per_class;
        std::int64_t* triples = ws + 2 * per_class;
        std::int64_t num_selected = 0;
        const float* bp = boxes.data_unchecked<float>();
        const float* sp = scores.data_unchecked<float>();
        for (std::int64_t b = 0; b < batches && p.max_out > 0; ++b) {
            const float* bb = bp + b * nboxes * 4;
            for (std::int64_t c = 0; c < classes; ++c) {
                const float* sc = sp + (b * classes + c) * nboxes;
                std::int64_t n = 0;
                for (std::int64_t i = 0; i < nboxes; ++i)
                    if (!std::isnan(sc[i]) && (!p.has_score || sc[i] > p.score)) order[n++] = i;
                std::sort(order, order + n, [&](std::int64_t x, std::int64_t y) {
                    return sc[x] > sc[y] || (sc[x] == sc[y] && x < y);
                });
                std::int64_t nkept = 0;
                for (std::int64_t j = 0; j < n && nkept < p.max_out; ++j) {
                    const Box cand = box_at(bb + order[j] * 4, center_);
                    bool keep = true;
                    for (std::int64_t q = 0; q < nkept && keep; ++q)
                        if (suppresses(box_at(bb + kept[q] * 4, center_), cand, p.iou))
                            keep = false;
                    if (!keep) continue;
                    kept[nkept++] = order[j];
                    triples[3 * num_selected] = b;
                    triples[3 * num_selected + 1] = c;
                    triples[3 * num_selected + 2] = order[j];
                    ++num_selected;
                }
            }
        }
        Status st = ctx.allocate_output(0, DType::i64, Shape{num_selected, 3});
        if (!st.is_ok()) return st;
        if (num_selected > 0)
            std::copy(triples, triples + 3 * num_selected, ctx.output(0).data_unchecked<std::int64_t>());
        return Status::ok();
    }

private:
    bool center_;
};

StatusOr<std::unique_ptr<Kernel>> make_nms(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t center,
                             ctx.node().attr_or<std::int64_t>("center_point_box", 0));
    if (center != 0 && center != 1)
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'center_point_box' must be 0 or 1, got ", center);
    return make_kernel<NmsKernel>(center != 0);
}

}  // namespace

void register_reduce_nms_kernels(KernelRegistry& r) {
    r.add({"NonMaxSuppression", "", 10, kMaxOpset, DeviceKind::cpu}, &make_nms);
}

}  // namespace dsinfer::detail
