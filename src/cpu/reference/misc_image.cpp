// Reference kernels for Col2Im, MaxUnpool, RoiAlign, DeformConv (2-D), Det and BitCast.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

StatusOr<std::vector<int64_t>> ints_attr(const Node& node, const char* name, std::size_t n,
                                         int64_t fallback) {
    DSINFER_ASSIGN_OR_RETURN(auto v, node.attr_or<std::vector<int64_t>>(name, {}));
    if (v.empty()) v.assign(n, fallback);
    if (v.size() != n)
        return Status::error(ErrorCode::invalid_model, "attribute '", name, "' must have ", n,
                             " values, got ", v.size());
    return v;
}

// Multi-index increment over `dims` (row-major); returns false after the last index.
bool next_index(std::span<int64_t> idx, std::span<const int64_t> dims) noexcept {
    for (std::size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < dims[d]) return true;
        idx[d] = 0;
    }
    return false;
}

// ---- Col2Im -----------------------------------------------------------------------------------

class Col2ImKernel final : public Kernel {
public:
    Col2ImKernel(std::vector<int64_t> dil, std::vector<int64_t> pads, std::vector<int64_t> strides)
        : dil_(std::move(dil)), pads_(std::move(pads)), strides_(std::move(strides)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() == 3, ErrorCode::invalid_argument,
                      "input must be [N, C*prod(block_shape), L], got ", x.shape().to_string());
        if (!ctx.has_data(1) || !ctx.has_data(2)) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(auto img, read_ints(ctx.input(1), "image_shape"));
        DSINFER_ASSIGN_OR_RETURN(auto blk, read_ints(ctx.input(2), "block_shape"));
        const std::size_t nd = img.size();
        DSINFER_CHECK(nd > 0 && blk.size() == nd && nd + 2 <= kMaxRank,
                      ErrorCode::invalid_argument, "image_shape and block_shape must have the ",
                      "same positive length");
        DSINFER_CHECK(dil_.empty() || dil_.size() == nd, ErrorCode::invalid_argument,
                      "dilations must have ", nd, " values");
        DSINFER_CHECK(strides_.empty() || strides_.size() == nd, ErrorCode::invalid_argument,
                      "strides must have ", nd, " values");
        DSINFER_CHECK(pads_.empty() || pads_.size() == 2 * nd, ErrorCode::invalid_argument,
                      "pads must have ", 2 * nd, " values");
        int64_t kprod = 1, lprod = 1;
        for (std::size_t d = 0; d < nd; ++d) {
            DSINFER_CHECK(blk[d] > 0 && img[d] >= 0, ErrorCode::invalid_argument,
                          "block_shape must be positive and image_shape non-negative");
            kprod *= blk[d];
            const int64_t span = dil(d) * (blk[d] - 1) + 1;
            const int64_t n = (img[d] + pad_b(d, nd) + pad_e(d, nd) - span) / stride(d) + 1;
            DSINFER_CHECK(n > 0, ErrorCode::invalid_argument, "block does not fit the image");
            lprod *= n;
        }
        DSINFER_CHECK(x.shape()[1] % kprod == 0 && x.shape()[2] == lprod,
                      ErrorCode::invalid_argument, "input shape ", x.shape().to_string(),
                      " does not match block_shape/image_shape (", kprod, " x ", lprod, ")");
        std::vector<int64_t> out{x.shape()[0], x.shape()[1] / kprod};
        out.insert(out.end(), img.begin(), img.end());
        DSINFER_ASSIGN_OR_RETURN(const Shape s, shape_from(out));
        ctx.set_output(0, x.dtype(), s);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const TensorView& bt = ctx.input(2);
        const std::size_t nd = static_cast<std::size_t>(y.shape.rank() - 2);
        std::array<int64_t, kMaxRank> img{}, blk{}, nblk{};
        for (std::size_t d = 0; d < nd; ++d) {
            img[d] = y.shape[static_cast<int>(d) + 2];
            blk[d] = bt.dtype == DType::i64 ? bt.data_unchecked<int64_t>()[d] : bt.data_unchecked<std::int32_t>()[d];
            nblk[d] = (img[d] + pad_b(d, nd) + pad_e(d, nd) - (dil(d) * (blk[d] - 1) + 1)) /
                          stride(d) + 1;
        }
        const int64_t n = y.shape[0], c = y.shape[1];
        const int64_t kprod = x.shape[1] / c, lprod = x.shape[2];
        const int64_t isz = y.shape.size_between(2, y.shape.rank());
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = y.data_unchecked<T>();
            for (int64_t i = 0; i < y.num_elements(); ++i) py[i] = store<T>(0.0f);
            for (int64_t b = 0; b < n * c; ++b) {
                std::array<int64_t, kMaxRank> k{};
                for (int64_t ki = 0; ki < kprod; ++ki) {
                    std::array<int64_t, kMaxRank> l{};
                    for (int64_t li = 0; li < lprod; ++li) {
                        int64_t off = 0;
                        bool inside = true;
                        for (std::size_t d = 0; d < nd; ++d) {
                            const int64_t p = l[d] * stride(d) - pad_b(d, nd) + k[d] * dil(d);
                            if (p < 0 || p >= img[d]) { inside = false; break; }
                            off = off * img[d] + p;
                        }
                        if (inside) {
                            const T v = px[(b * kprod + ki) * lprod + li];
                            py[b * isz + off] = store<T>(load(py[b * isz + off]) + load(v));
                        }
                        next_index(std::span(l.data(), nd), std::span(nblk.data(), nd));
                    }
                    next_index(std::span(k.data(), nd), std::span(blk.data(), nd));
                }
            }
            return Status::ok();
        });
    }

private:
    int64_t dil(std::size_t d) const noexcept { return dil_.empty() ? 1 : dil_[d]; }
    int64_t stride(std::size_t d) const noexcept { return strides_.empty() ? 1 : strides_[d]; }
    int64_t pad_b(std::size_t d, std::size_t) const noexcept {
        return pads_.empty() ? 0 : pads_[d];
    }
    int64_t pad_e(std::size_t d, std::size_t nd) const noexcept {
        return pads_.empty() ? 0 : pads_[d + nd];
    }

    std::vector<int64_t> dil_, pads_, strides_;
};

StatusOr<std::unique_ptr<Kernel>> make_col2im(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto dil, node.attr_or<std::vector<int64_t>>("dilations", {}));
    DSINFER_ASSIGN_OR_RETURN(auto pads, node.attr_or<std::vector<int64_t>>("pads", {}));
    DSINFER_ASSIGN_OR_RETURN(auto strides, node.attr_or<std::vector<int64_t>>("strides", {}));
    for (auto v : dil)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "dilations must be > 0, got ", v);
    for (auto v : strides)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "strides must be > 0, got ", v);
    for (auto v : pads)
        DSINFER_CHECK(v >= 0, ErrorCode::invalid_model, "pads must be >= 0, got ", v);
    return make_kernel<Col2ImKernel>(std::move(dil), std::move(pads), std::move(strides));
}

// ---- MaxUnpool --------------------------------------------------------------------------------

class MaxUnpoolKernel final : public Kernel {
public:
    MaxUnpoolKernel(std::vector<int64_t> kernel, std::vector<int64_t> pads,
                    std::vector<int64_t> strides)
        : kernel_(std::move(kernel)), pads_(std::move(pads)), strides_(std::move(strides)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& ind = ctx.input(1);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(ind.dtype() == DType::i64, ErrorCode::unsupported,
                      "indices must be int64, got ", dtype_name(ind.dtype()));
        DSINFER_CHECK(ind.shape() == x.shape(), ErrorCode::invalid_argument, "indices shape ",
                      ind.shape().to_string(), " differs from X ", x.shape().to_string());
        const std::size_t nd = kernel_.size();
        DSINFER_CHECK(static_cast<std::size_t>(x.shape().rank()) == nd + 2,
                      ErrorCode::invalid_argument, "X must have rank ", nd + 2, ", got ",
                      x.shape().to_string());
        if (ctx.has_input(2)) {
            if (!ctx.has_data(2)) return Status::ok();
            DSINFER_ASSIGN_OR_RETURN(auto os, read_ints(ctx.input(2), "output_shape"));
            DSINFER_CHECK(os.size() == nd + 2 && os[0] == x.shape()[0] && os[1] == x.shape()[1],
                          ErrorCode::invalid_argument, "output_shape does not match X ",
                          x.shape().to_string());
            DSINFER_ASSIGN_OR_RETURN(const Shape s, shape_from(os));
            ctx.set_output(0, x.dtype(), s);
            return Status::ok();
        }
        Shape out = x.shape();
        for (std::size_t d = 0; d < nd; ++d) {
            const int64_t v = (x.shape()[static_cast<int>(d) + 2] - 1) * strides_[d] +
                              kernel_[d] - pads_[d] - pads_[d + nd];
            DSINFER_CHECK(v >= 0, ErrorCode::invalid_argument, "negative output dimension");
            out[static_cast<int>(d) + 2] = v;
        }
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const int64_t total = y.num_elements();
        // Indices address the default (inferred) output shape; an explicit output_shape
        // places the same coordinates into a larger tensor.
        const int rank = x.shape.rank();
        const std::size_t nd = kernel_.size();
        Shape def = x.shape;
        for (std::size_t d = 0; d < nd; ++d)
            def[static_cast<int>(d) + 2] = (x.shape[static_cast<int>(d) + 2] - 1) * strides_[d] +
                                           kernel_[d] - pads_[d] - pads_[d + nd];
        const int64_t def_total = def.num_elements();
        const bool same = def == y.shape;
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            const int64_t* pi = ind.data_unchecked<int64_t>();
            T* py = y.data_unchecked<T>();
            for (int64_t i = 0; i < total; ++i) py[i] = store<T>(0.0f);
            for (int64_t i = 0; i < x.num_elements(); ++i) {
                if (pi[i] < 0 || pi[i] >= def_total)
                    return Status::error(ErrorCode::invalid_argument, "index ", pi[i],
                                         " is outside the unpooled output of ", def_total,
                                         " elements");
                int64_t dst = pi[i];
                if (!same) {
                    int64_t rem = pi[i], mul = 1;
                    dst = 0;
                    for (int d = rank - 1; d >= 0; --d) {
                        const int64_t c = rem % def[d];
                        rem /= def[d];
                        if (c >= y.shape[d])
                            return Status::error(ErrorCode::invalid_argument, "index ", pi[i],
                                                 " does not fit output_shape ",
                                                 y.shape.to_string());
                        dst += c * mul;
                        mul *= y.shape[d];
                    }
                }
                py[dst] = px[i];
            }
            return Status::ok();
        });
    }

private:
    std::vector<int64_t> kernel_, pads_, strides_;
};

StatusOr<std::unique_ptr<Kernel>> make_maxunpool(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto kernel, node.attr<std::vector<int64_t>>("kernel_shape"));
    const std::size_t nd = kernel.size();
    DSINFER_CHECK(nd > 0, ErrorCode::invalid_model, "kernel_shape must not be empty");
    DSINFER_ASSIGN_OR_RETURN(auto pads, ints_attr(node, "pads", 2 * nd, 0));
    DSINFER_ASSIGN_OR_RETURN(auto strides, ints_attr(node, "strides", nd, 1));
    for (auto v : strides)
        DSINFER_CHECK(v > 0, ErrorCode::invalid_model, "strides must be > 0, got ", v);
    return make_kernel<MaxUnpoolKernel>(std::move(kernel), std::move(pads), std::move(strides));
}

// ---- RoiAlign ---------------------------------------------------------------------------------

class RoiAlignKernel final : public Kernel {
public:
    RoiAlignKernel(bool max_mode, int64_t oh, int64_t ow, int64_t ratio, float scale,
                   bool half_pixel)
        : max_mode_(max_mode), oh_(oh), ow_(ow), ratio_(ratio), scale_(scale),
          half_pixel_(half_pixel) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& rois = ctx.input(1);
        const Tensor& bi = ctx.input(2);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() == 4, ErrorCode::invalid_argument,
                      "X must be [N, C, H, W], got ", x.shape().to_string());
        DSINFER_CHECK(rois.dtype() == x.dtype(), ErrorCode::invalid_argument,
                      "rois dtype differs from X");
        DSINFER_CHECK(rois.shape().rank() == 2 && rois.shape()[1] == 4,
                      ErrorCode::invalid_argument, "rois must be [R, 4], got ",
                      rois.shape().to_string());
        DSINFER_CHECK(bi.dtype() == DType::i64 || bi.dtype() == DType::i32,
                      ErrorCode::unsupported, "batch_indices must be int64");
        DSINFER_CHECK(bi.shape().rank() == 1 && bi.shape()[0] == rois.shape()[0],
                      ErrorCode::invalid_argument, "batch_indices must be [",
                      rois.shape()[0], "], got ", bi.shape().to_string());
        ctx.set_output(0, x.dtype(), Shape{rois.shape()[0], x.shape()[1], oh_, ow_});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& rois = ctx.input(1);
        const TensorView& bi = ctx.input(2);
        const int64_t nb = x.shape[0], ch = x.shape[1], h = x.shape[2], w = x.shape[3];
        const int64_t nr = rois.shape[0];
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            const T* pr = rois.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            const double off = half_pixel_ ? 0.5 : 0.0;
            for (int64_t r = 0; r < nr; ++r) {
                const int64_t b = bi.dtype == DType::i64 ? bi.data_unchecked<int64_t>()[r]
                                                         : bi.data_unchecked<std::int32_t>()[r];
                if (b < 0 || b >= nb)
                    return Status::error(ErrorCode::invalid_argument, "batch index ", b,
                                         " is outside [0, ", nb, ")");
                const double x1 = static_cast<double>(load(pr[r * 4 + 0])) * scale_ - off;
                const double y1 = static_cast<double>(load(pr[r * 4 + 1])) * scale_ - off;
                const double x2 = static_cast<double>(load(pr[r * 4 + 2])) * scale_ - off;
                const double y2 = static_cast<double>(load(pr[r * 4 + 3])) * scale_ - off;
                double rw = x2 - x1, rh = y2 - y1;
                if (!half_pixel_) {
                    rw = std::max(rw, 1.0);
                    rh = std::max(rh, 1.0);
                }
                const double bh = rh / static_cast<double>(oh_);
                const double bw = rw / static_cast<double>(ow_);
                // Adaptive sampling grid: ceil(roi / output) points per bin, computed in double;
                // a NaN ROI must not reach the integer conversion (undefined behaviour): it
                // samples nothing (as an empty ROI does), and +Inf is capped at 2^16 points.
                auto grid = [](double roi, std::int64_t out) -> int64_t {
                    const double v = std::ceil(roi / static_cast<double>(out));
                    if (!(v >= 0.0)) return 0;  // negative or NaN
                    return static_cast<int64_t>(std::min(v, 65536.0));
                };
                const int64_t gh = ratio_ > 0 ? ratio_ : grid(rh, oh_);
                const int64_t gw = ratio_ > 0 ? ratio_ : grid(rw, ow_);
                const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
                for (int64_t c = 0; c < ch; ++c) {
                    const T* img = px + (b * ch + c) * h * w;
                    auto at = [&](int64_t yy, int64_t xx) {
                        return static_cast<double>(load(img[yy * w + xx]));
                    };
                    for (int64_t ph = 0; ph < oh_; ++ph) {
                        for (int64_t pw = 0; pw < ow_; ++pw) {
                            double acc = 0.0;
                            bool first = true;
                            for (int64_t iy = 0; iy < gh; ++iy) {
                                const double yy0 = y1 + ph * bh + (iy + 0.5) * bh / gh;
                                for (int64_t ix = 0; ix < gw; ++ix) {
                                    const double xx0 = x1 + pw * bw + (ix + 0.5) * bw / gw;
                                    double vals[4] = {0, 0, 0, 0};
                                    // NaN sampling points (NaN ROIs) are outside too.
                                    if (std::isfinite(yy0) && std::isfinite(xx0) &&
                                        !(yy0 < -1.0 || yy0 > h || xx0 < -1.0 || xx0 > w)) {
                                        double yy = std::max(yy0, 0.0);
                                        double xx = std::max(xx0, 0.0);
                                        int64_t yl = static_cast<int64_t>(yy);
                                        int64_t xl = static_cast<int64_t>(xx);
                                        int64_t yh = yl + 1, xh = xl + 1;
                                        if (yl >= h - 1) {
                                            yh = yl = h - 1;
                                            yy = static_cast<double>(yl);
                                        }
                                        if (xl >= w - 1) {
                                            xh = xl = w - 1;
                                            xx = static_cast<double>(xl);
                                        }
                                        const double ly = yy - yl, lx = xx - xl;
                                        const double hy = 1.0 - ly, hx = 1.0 - lx;
                                        vals[0] = hy * hx * at(yl, xl);
                                        vals[1] = hy * lx * at(yl, xh);
                                        vals[2] = ly * hx * at(yh, xl);
                                        vals[3] = ly * lx * at(yh, xh);
                                    }
                                    if (max_mode_) {
                                        const double v = std::max(std::max(vals[0], vals[1]),
                                                                  std::max(vals[2], vals[3]));
                                        acc = first ? v : std::max(acc, v);
                                        first = false;
                                    } else {
                                        acc += vals[0] + vals[1] + vals[2] + vals[3];
                                    }
                                }
                            }
                            if (!max_mode_) acc /= count;
                            py[((r * ch + c) * oh_ + ph) * ow_ + pw] = store<T>(acc);
                        }
                    }
                }
            }
            return Status::ok();
        });
    }

private:
    bool max_mode_;
    int64_t oh_, ow_, ratio_;
    float scale_;
    bool half_pixel_;
};

StatusOr<std::unique_ptr<Kernel>> make_roialign(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto mode, node.attr_or<std::string>("mode", "avg"));
    DSINFER_CHECK(mode == "avg" || mode == "max", ErrorCode::invalid_model,
                  "mode must be avg or max, got '", mode, "'");
    DSINFER_ASSIGN_OR_RETURN(const int64_t oh, node.attr_or<int64_t>("output_height", 1));
    DSINFER_ASSIGN_OR_RETURN(const int64_t ow, node.attr_or<int64_t>("output_width", 1));
    DSINFER_ASSIGN_OR_RETURN(const int64_t ratio, node.attr_or<int64_t>("sampling_ratio", 0));
    DSINFER_ASSIGN_OR_RETURN(const float scale, node.attr_or<float>("spatial_scale", 1.0f));
    const std::string fallback = ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel";
    DSINFER_ASSIGN_OR_RETURN(auto ctm,
                             node.attr_or<std::string>("coordinate_transformation_mode",
                                                       fallback));
    DSINFER_CHECK(ctm == "half_pixel" || ctm == "output_half_pixel", ErrorCode::invalid_model,
                  "coordinate_transformation_mode must be half_pixel or output_half_pixel");
    DSINFER_CHECK(oh > 0 && ow > 0 && ratio >= 0, ErrorCode::invalid_model,
                  "output_height/output_width must be > 0 and sampling_ratio >= 0");
    return make_kernel<RoiAlignKernel>(mode == "max", oh, ow, ratio, scale, ctm == "half_pixel");
}

// ---- DeformConv (2-D) -------------------------------------------------------------------------

class DeformConvKernel final : public Kernel {
public:
    DeformConvKernel(std::vector<int64_t> dil, int64_t group, std::vector<int64_t> kshape,
                     int64_t offset_group, std::vector<int64_t> pads,
                     std::vector<int64_t> strides)
        : dil_(std::move(dil)), group_(group), kshape_(std::move(kshape)),
          og_(offset_group), pads_(std::move(pads)), strides_(std::move(strides)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& wt = ctx.input(1);
        const Tensor& off = ctx.input(2);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() == 4 && wt.shape().rank() == 4,
                      ErrorCode::unsupported, "only 2-D DeformConv is supported");
        DSINFER_CHECK(wt.dtype() == x.dtype() && off.dtype() == x.dtype(),
                      ErrorCode::invalid_argument, "W and offset must have X's dtype");
        const int64_t c = x.shape()[1], oc = wt.shape()[0];
        DSINFER_CHECK(c % group_ == 0 && oc % group_ == 0 && wt.shape()[1] * group_ == c,
                      ErrorCode::invalid_argument, "W shape ", wt.shape().to_string(),
                      " does not match X ", x.shape().to_string(), " with group ", group_);
        DSINFER_CHECK(c % og_ == 0, ErrorCode::invalid_argument, "channels ", c,
                      " not divisible by offset_group ", og_);
        const int64_t kh = kshape_.empty() ? wt.shape()[2] : kshape_[0];
        const int64_t kw = kshape_.empty() ? wt.shape()[3] : kshape_[1];
        DSINFER_CHECK(kh == wt.shape()[2] && kw == wt.shape()[3], ErrorCode::invalid_argument,
                      "kernel_shape does not match W");
        const int64_t oh = (x.shape()[2] + pads_[0] + pads_[2] - (dil_[0] * (kh - 1) + 1)) /
                               strides_[0] + 1;
        const int64_t ow = (x.shape()[3] + pads_[1] + pads_[3] - (dil_[1] * (kw - 1) + 1)) /
                               strides_[1] + 1;
        DSINFER_CHECK(oh > 0 && ow > 0, ErrorCode::invalid_argument,
                      "kernel does not fit the padded input");
        const Shape want_off{x.shape()[0], og_ * 2 * kh * kw, oh, ow};
        DSINFER_CHECK(off.shape() == want_off, ErrorCode::invalid_argument, "offset must be ",
                      want_off.to_string(), ", got ", off.shape().to_string());
        if (ctx.has_input(3))
            DSINFER_CHECK(ctx.input(3).dtype() == x.dtype() &&
                              ctx.input(3).shape() == Shape{oc},
                          ErrorCode::invalid_argument, "B must be [", oc, "] of X's dtype");
        if (ctx.has_input(4)) {
            const Shape want_mask{x.shape()[0], og_ * kh * kw, oh, ow};
            DSINFER_CHECK(ctx.input(4).dtype() == x.dtype() &&
                              ctx.input(4).shape() == want_mask,
                          ErrorCode::invalid_argument, "mask must be ", want_mask.to_string());
        }
        ctx.set_output(0, x.dtype(), Shape{x.shape()[0], oc, oh, ow});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& wt = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
        const int64_t oc = wt.shape[0], cpg = wt.shape[1], kh = wt.shape[2], kw = wt.shape[3];
        const int64_t oh = y.shape[2], ow = y.shape[3];
        const int64_t ocpg = oc / group_, cpog = c / og_, kk = kh * kw;
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            const T* pw = wt.data_unchecked<T>();
            const T* po = ctx.input(2).data_unchecked<T>();
            const T* pb = ctx.has_input(3) ? ctx.input(3).data_unchecked<T>() : nullptr;
            const T* pm = ctx.has_input(4) ? ctx.input(4).data_unchecked<T>() : nullptr;
            T* py = y.data_unchecked<T>();
            auto f = [](T v) { return static_cast<double>(load(v)); };
            for (int64_t b = 0; b < n; ++b) {
                for (int64_t o = 0; o < oc; ++o) {
                    const int64_t g = o / ocpg;
                    for (int64_t yh = 0; yh < oh; ++yh) {
                        for (int64_t yw = 0; yw < ow; ++yw) {
                            double acc = pb != nullptr ? f(pb[o]) : 0.0;
                            for (int64_t ci = 0; ci < cpg; ++ci) {
                                const int64_t cin = g * cpg + ci;
                                const int64_t og = cin / cpog;
                                const T* img = px + (b * c + cin) * h * w;
                                for (int64_t i = 0; i < kh; ++i) {
                                    for (int64_t j = 0; j < kw; ++j) {
                                        const int64_t k = i * kw + j;
                                        const int64_t ob =
                                            ((b * og_ + og) * 2 * kk + 2 * k) * oh * ow +
                                            yh * ow + yw;
                                        const double dy = f(po[ob]);
                                        const double dx = f(po[ob + oh * ow]);
                                        const double sy = static_cast<double>(
                                            yh * strides_[0] - pads_[0] + i * dil_[0]) + dy;
                                        const double sx = static_cast<double>(
                                            yw * strides_[1] - pads_[1] + j * dil_[1]) + dx;
                                        double v = sample(img, h, w, sy, sx, f);
                                        if (pm != nullptr)
                                            v *= f(pm[((b * og_ + og) * kk + k) * oh * ow +
                                                      yh * ow + yw]);
                                        acc += v * f(pw[((o * cpg + ci) * kh + i) * kw + j]);
                                    }
                                }
                            }
                            py[((b * oc + o) * oh + yh) * ow + yw] = store<T>(acc);
                        }
                    }
                }
            }
            return Status::ok();
        });
    }

private:
    // Bilinear sample with zeros outside the image.
    template <class T, class F>
    static double sample(const T* img, int64_t h, int64_t w, double y, double x, F f) noexcept {
        if (!(y > -1.0 && y < static_cast<double>(h) && x > -1.0 &&
              x < static_cast<double>(w)))
            return 0.0;
        const double yf = std::floor(y), xf = std::floor(x);
        const int64_t y0 = static_cast<int64_t>(yf), x0 = static_cast<int64_t>(xf);
        const double ly = y - yf, lx = x - xf;
        auto at = [&](int64_t yy, int64_t xx) -> double {
            if (yy < 0 || yy >= h || xx < 0 || xx >= w) return 0.0;
            return f(img[yy * w + xx]);
        };
        return (1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x0 + 1) +
               ly * (1 - lx) * at(y0 + 1, x0) + ly * lx * at(y0 + 1, x0 + 1);
    }

    std::vector<int64_t> dil_;
    int64_t group_;
    std::vector<int64_t> kshape_;
    int64_t og_;
    std::vector<int64_t> pads_, strides_;
};

StatusOr<std::unique_ptr<Kernel>> make_deformconv(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 3));
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto dil, ints_attr(node, "dilations", 2, 1));
    DSINFER_ASSIGN_OR_RETURN(auto pads, ints_attr(node, "pads", 4, 0));
    DSINFER_ASSIGN_OR_RETURN(auto strides, ints_attr(node, "strides", 2, 1));
    DSINFER_ASSIGN_OR_RETURN(auto kshape, node.attr_or<std::vector<int64_t>>("kernel_shape", {}));
    DSINFER_ASSIGN_OR_RETURN(const int64_t group, node.attr_or<int64_t>("group", 1));
    DSINFER_ASSIGN_OR_RETURN(const int64_t og, node.attr_or<int64_t>("offset_group", 1));
    DSINFER_CHECK(group > 0 && og > 0, ErrorCode::invalid_model,
                  "group and offset_group must be > 0");
    DSINFER_CHECK(kshape.empty() || kshape.size() == 2, ErrorCode::unsupported,
                  "only 2-D DeformConv is supported");
    for (std::size_t i = 0; i < 2; ++i)
        DSINFER_CHECK(dil[i] > 0 && strides[i] > 0, ErrorCode::invalid_model,
                      "dilations and strides must be > 0");
    return make_kernel<DeformConvKernel>(std::move(dil), group, std::move(kshape), og,
                                         std::move(pads), std::move(strides));
}

// ---- Det --------------------------------------------------------------------------------------

class DetKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        const int r = x.shape().rank();
        DSINFER_CHECK(r >= 2 && x.shape()[r - 1] == x.shape()[r - 2],
                      ErrorCode::invalid_argument, "input must be [..., M, M], got ",
                      x.shape().to_string());
        Shape out;
        for (int i = 0; i < r - 2; ++i) out.push_back(x.shape()[i]);
        ctx.set_output(0, x.dtype(), out);
        const auto m = static_cast<std::size_t>(x.shape()[r - 1]);
        ctx.set_workspace(m * m * sizeof(double));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int r = x.shape.rank();
        const int64_t m = x.shape[r - 1];
        const int64_t batch = x.shape.size_between(0, r - 2);
        auto* a = static_cast<double*>(ctx.workspace());
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t b = 0; b < batch; ++b) {
                for (int64_t i = 0; i < m * m; ++i)
                    a[i] = static_cast<double>(load(px[b * m * m + i]));
                double det = 1.0;
                // Gaussian elimination with partial pivoting.
                for (int64_t k = 0; k < m; ++k) {
                    int64_t piv = k;
                    for (int64_t i = k + 1; i < m; ++i)
                        if (std::abs(a[i * m + k]) > std::abs(a[piv * m + k])) piv = i;
                    if (a[piv * m + k] == 0.0) { det = 0.0; break; }
                    if (piv != k) {
                        for (int64_t j = 0; j < m; ++j) std::swap(a[k * m + j], a[piv * m + j]);
                        det = -det;
                    }
                    det *= a[k * m + k];
                    for (int64_t i = k + 1; i < m; ++i) {
                        const double fct = a[i * m + k] / a[k * m + k];
                        for (int64_t j = k; j < m; ++j) a[i * m + j] -= fct * a[k * m + j];
                    }
                }
                py[b] = store<T>(det);
            }
            return Status::ok();
        });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_det(const KernelCreateContext&) {
    return make_kernel<DetKernel>();
}

// ---- BitCast ----------------------------------------------------------------------------------

class BitCastKernel final : public Kernel {
public:
    explicit BitCastKernel(DType to) : to_(to) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.dtype() != DType::string, ErrorCode::invalid_argument,
                      "BitCast does not accept string tensors");
        DSINFER_CHECK(dtype_size(x.dtype()) == dtype_size(to_), ErrorCode::invalid_argument,
                      "BitCast needs types of equal size: ", dtype_name(x.dtype()), " (",
                      dtype_size(x.dtype()), " bytes) vs ", dtype_name(to_), " (",
                      dtype_size(to_), " bytes)");
        ctx.set_output(0, to_, x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (x.num_bytes() > 0) std::memmove(y.raw, x.raw, x.num_bytes());
        if (to_ == DType::boolean) {
            // Only 0/1 are valid bool representations in C++.
            auto* p = static_cast<unsigned char*>(y.raw);
            for (std::size_t i = 0; i < y.num_bytes(); ++i) p[i] = p[i] != 0 ? 1 : 0;
        }
        return Status::ok();
    }

private:
    DType to_;
};

StatusOr<std::unique_ptr<Kernel>> make_bitcast(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const int64_t to, ctx.node().attr<int64_t>("to"));
    const auto dt = from_onnx_dtype(static_cast<int>(to));
    DSINFER_CHECK(dt.has_value(), ErrorCode::unsupported, "BitCast to ONNX type ", to,
                  " is not supported");
    DSINFER_CHECK(*dt != DType::string, ErrorCode::invalid_model,
                  "BitCast cannot produce strings");
    return make_kernel<BitCastKernel>(*dt);
}

}  // namespace

void register_misc_image_kernels(KernelRegistry& r) {
    constexpr auto cpu = DeviceKind::cpu;
    r.add({"Col2Im", "", 18, kMaxOpset, cpu}, &make_col2im);
    r.add({"MaxUnpool", "", 9, kMaxOpset, cpu}, &make_maxunpool);
    r.add({"RoiAlign", "", 10, kMaxOpset, cpu}, &make_roialign);
    r.add({"DeformConv", "", 19, kMaxOpset, cpu}, &make_deformconv);
    r.add({"Det", "", 11, kMaxOpset, cpu}, &make_det);
    r.add({"BitCast", "", 26, kMaxOpset, cpu}, &make_bitcast);
}

}  // namespace dsinfer::detail
