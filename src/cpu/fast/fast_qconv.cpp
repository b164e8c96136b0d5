// The cpu backend's INT8 convolutions on dsinfer's INT8 GEMM (kernels/qconv.hpp, on qgemm):
//   ConvInteger    s32 output; x u8/s8 with one zero point, w u8/s8 with a zero point per
//                  tensor or per output channel;
//   QLinearConv    u8/s8 output requantized in qgemm's store: the int32 bias added to the
//                  exact sum, then float(sum) * ((x_scale * w_scale[m]) / y_scale) rounded half
//                  to even plus y_zero_point, saturated (ops/quantize.hpp requantize_product,
//                  which the reference kernel computes too);
//   QLinearConvAdd (com.dsinfer)  QLinearConv, then com.microsoft QLinearAdd with the 8-bit
//                  residual Z in the same store (ops/qlinear.hpp qlinear_add_value and
//                  qlinear_requantize, as the QLinearAdd kernels): a QDQ ResNet's block join;
//   DynamicQuantizeConv (com.dsinfer)  float32 x: DynamicQuantizeLinear's range and parameters,
//                  x quantized while it is transposed to NHWC, then the f32 epilogue (x_scale
//                  * w_scale[m], float bias[m], the fused activation: dequantize_product);
// 2-D convolutions (x [N, C, H, W]; QLinearConv's x and y channels last where the executor's
// layout negotiation agrees it with their other ends) with any pads, strides, dilations and
// groups, against a
// constant W packed once per (weights, ISA family) through the engine's WeightStore
// (packed_qconv_form) and then released; on the avx2 family 3x3 convolutions of stride 1,
// undilated, one group, u8 x, W's zero points constant, in the Winograd form (pack_qconv_weights:
// F(2x2, 3x3) in 16-bit integers, exact). Everything else the reference kernel
// (src/cpu/reference/quant.cpp) runs: it is every kernel's prepare (shapes, dtypes, errors)
// and the oracle; results are bitwise equal to it for any thread count.
//
// run() allocates nothing and throws nothing: the NHWC image, im2col rows, C and qgemm's
// buffers and the per-channel zero points are the node's workspace.
//
// Thread safety: kernels are immutable after creation; runs share the packed weights.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "cpu/fast/dynamic_quant.hpp"
#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "dsinfer/ops.hpp"
#include "kernels/qconv.hpp"
#include "kernels/weight_forms.hpp"
#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/qlinear.hpp"
#include "ops/quantize.hpp"
#include "runtime/parallel.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

enum class QConvKind { conv_integer, qlinear_conv, dynamic_quantize_conv, qlinear_conv_add };

/// com.dsinfer QLinearConvAdd's inputs after QLinearConv's nine: the residual Z, its scale and
/// zero point, the output's scale and zero point.
constexpr int kZ = 9, kZScale = 10, kZZero = 11, kCScale = 12, kCZero = 13;

/// Input positions of one op's operands (-1: none).
struct QConvInputs {
    int w = 1, x_zero = 2, w_zero = 3, x_scale = -1, w_scale = -1, y_scale = -1, y_zero = -1,
        bias = -1;
};

constexpr QConvInputs inputs_of(QConvKind k) noexcept {
    if (k == QConvKind::conv_integer) return {};
    if (k == QConvKind::dynamic_quantize_conv) return {1, -1, 3, -1, 2, -1, -1, 4};
    return {3, 2, 5, 1, 4, 6, 7, 8};  // QLinearConv, QLinearConvAdd
}

constexpr bool qlinear(QConvKind k) noexcept {
    return k == QConvKind::qlinear_conv || k == QConvKind::qlinear_conv_add;
}

constexpr std::size_t align64(std::size_t b) noexcept { return (b + 63) & ~std::size_t{63}; }

class QConvKernel final : public fast::FastKernel {
public:
    QConvKernel(std::unique_ptr<Kernel> fallback, QConvKind kind, ConvAttrs attrs,
                ActivationSpec act, QConvShape wshape, std::shared_ptr<const PackedQConvW> packed,
                bool release)
        : FastKernel(std::move(fallback)),
          kind_(kind),
          in_(inputs_of(kind)),
          attrs_(std::move(attrs)),
          act_(act),
          wshape_(wshape),
          packed_(std::move(packed)),
          release_(release) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        QConvShape s;
        if (!geometry(ctx.input(0).shape(), s)) return Status::ok();
        std::size_t own = channel_bytes() +
                          qconv_workspace_bytes(s, *packed_, out_bytes(), max_threads());
        if (kind_ == QConvKind::qlinear_conv_add && z_nhwc_ != y_nhwc_)  // a copy of Z (run)
            own += align64(static_cast<std::size_t>(ctx.input(kZ).num_bytes())) + 64;
        ctx.set_workspace(std::max(ctx.workspace_bytes(), own));
        return Status::ok();
    }

    /// QLinearConv whose fast path always runs (8-bit x and float32 scales declared): x and y
    /// channels last, each on its own (the first convolution of a net transposes its input);
    /// QLinearConvAdd's residual Z too (any of the orders of x, y and Z: Z is read at each
    /// element's place; in place, where y takes Z's block, a Z of another order than y is
    /// copied first).
    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        if (!qlinear(kind_) || !release_ || n.inputs.empty() || n.outputs.empty() ||
            n.inputs[0] == kNoValue || n.outputs[0] == kNoValue ||
            !fast::int8_rank4(g.value(n.inputs[0])) || !fast::int8_rank4(g.value(n.outputs[0])))
            return {};
        std::uint64_t ins = 1;
        if (kind_ == QConvKind::qlinear_conv_add && n.inputs.size() > kZ &&
            n.inputs[kZ] != kNoValue && fast::int8_rank4(g.value(n.inputs[kZ])))
            ins |= std::uint64_t{1} << kZ;
        return {fast::kChannelsLastLayout, ins, 1, false};
    }
    Status use_layouts(std::uint64_t in, std::uint64_t out) override {
        x_nhwc_ = (in & 1u) != 0;
        z_nhwc_ = ((in >> kZ) & 1u) != 0;
        y_nhwc_ = (out & 1u) != 0;
        return Status::ok();
    }

    std::uint64_t released_constant_inputs() const noexcept override {
        return release_ ? std::uint64_t{1} << in_.w : 0;
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        QConvShape s;
        if (!geometry(x.shape, s))  // prepare rejects these: W may be gone
            return Status::error(ErrorCode::internal, "INT8 convolution got x of shape ",
                                 x.shape.to_string());
        const bool dynamic = kind_ == QConvKind::dynamic_quantize_conv;
        if (dynamic ? x.dtype != DType::f32 : x.dtype != DType::u8 && x.dtype != DType::i8)
            return fallback_run(ctx);
        if (qlinear(kind_) &&
            (ctx.input(in_.x_scale).dtype != DType::f32 ||
             ctx.input(in_.w_scale).dtype != DType::f32 ||
             ctx.input(in_.y_scale).dtype != DType::f32))
            return fallback_run(ctx);  // W was kept (release_ is false unless declared f32)
        QGemmParams p;
        p.a_signed = x.dtype == DType::i8;
        if (!dynamic && ctx.has_input(in_.x_zero)) {
            const TensorView& z = ctx.input(in_.x_zero);
            p.a_zero = z.dtype == DType::i8 ? *z.data_unchecked<std::int8_t>() : *z.data_unchecked<std::uint8_t>();
        }
        auto* ws = reinterpret_cast<unsigned char*>(
            align64(reinterpret_cast<std::uintptr_t>(ctx.workspace())));
        const std::size_t used = static_cast<std::size_t>(
            ws - static_cast<unsigned char*>(ctx.workspace()));
        if (ctx.workspace() == nullptr || ctx.workspace_bytes() < used + channel_bytes())
            return Status::error(ErrorCode::internal, "INT8 convolution: workspace too small");
        auto* zeros = reinterpret_cast<std::int32_t*>(ws);
        if (ctx.has_input(in_.w_zero)) {
            const TensorView& z = ctx.input(in_.w_zero);
            const int64_t count = z.num_elements();
            for (int64_t j = 0; j < s.m; ++j) {
                const int64_t i = count == 1 ? 0 : j;
                zeros[j] = z.dtype == DType::i8 ? z.data_unchecked<std::int8_t>()[i] : z.data_unchecked<std::uint8_t>()[i];
            }
            p.b_zeros = zeros;
        }
        QConvFloatInput fx;
        if (kind_ == QConvKind::conv_integer) {
            p.out = QGemmOutput::s32;
        } else if (dynamic) {
            // DynamicQuantizeLinear of x (quantized while it is transposed), then the f32
            // epilogue: dequantize_product(c, x_scale, w_scale[m], bias[m]) and the activation.
            fx.x = x.data_unchecked<float>();
            fx.q = dynamic_quant_params(dynamic_quant_range(fx.x, x.num_elements()));
            fx.quantize = dynamic_quantize_loop();
            p.a_zero = fx.q.zero_point;
            p.out = QGemmOutput::f32;
            p.a_scale = fx.q.scale;
            const TensorView& wsc = ctx.input(in_.w_scale);
            if (wsc.num_elements() == 1) p.b_scale = *wsc.data_unchecked<float>();
            else p.b_scales = wsc.data_unchecked<float>();
            if (ctx.has_input(in_.bias)) p.bias = ctx.input(in_.bias).data_unchecked<float>();
            p.act = act_;
        } else {
            // ops/quantize.hpp's requantize_product: float(c) * ((x_scale * w_scale[m]) /
            // y_scale), rounded, + y_zero (qgemm's u8/s8 epilogue; the bias is in c).
            const TensorView& wsc = ctx.input(in_.w_scale);
            p.out = ctx.output(0).dtype == DType::i8 ? QGemmOutput::s8 : QGemmOutput::u8;
            p.a_scale = *ctx.input(in_.x_scale).data_unchecked<float>();
            if (wsc.num_elements() == 1) p.b_scale = *wsc.data_unchecked<float>();
            else p.b_scales = wsc.data_unchecked<float>();
            p.y_scale = *ctx.input(in_.y_scale).data_unchecked<float>();
            if (ctx.has_input(in_.y_zero)) {
                const TensorView& z = ctx.input(in_.y_zero);
                p.y_zero = z.dtype == DType::i8 ? *z.data_unchecked<std::int8_t>() : *z.data_unchecked<std::uint8_t>();
            }
            if (ctx.has_input(in_.bias)) p.bias_s32 = ctx.input(in_.bias).data_unchecked<std::int32_t>();
        }
        unsigned char* conv_ws = ws + channel_bytes();
        std::size_t conv_bytes = ctx.workspace_bytes() - used - channel_bytes();
        if (kind_ == QConvKind::qlinear_conv_add) {
            // QLinearAdd(y as QLinearConv gives it, Z) in qgemm's epilogue: A's scale and zero
            // point are y's (ops/qlinear.hpp's float32 order, as the QLinearAdd kernels).
            const TensorView& z = ctx.input(kZ);
            if (z.dtype != ctx.output(0).dtype || ctx.input(kZScale).dtype != DType::f32 ||
                ctx.input(kCScale).dtype != DType::f32)
                return fallback_run(ctx);
            p.add = qlinear_add_params(p.y_scale, qlinear_scale(ctx, kZScale),
                                       qlinear_scale(ctx, kCScale), p.y_zero,
                                       qlinear_zero(ctx, kZZero), qlinear_zero(ctx, kCZero));
            p.residual = z.raw;
            s.r_nhwc = z_nhwc_;
            if (z_nhwc_ != y_nhwc_ && z.raw == ctx.output(0).raw) {
                // y took Z's block in another element order: read Z from a copy.
                const std::size_t zb = align64(static_cast<std::size_t>(z.num_bytes()));
                if (conv_bytes < zb)
                    return Status::error(ErrorCode::internal, "QLinearConvAdd: workspace too small");
                std::memcpy(conv_ws, z.raw, static_cast<std::size_t>(z.num_bytes()));
                p.residual = conv_ws;
                conv_ws += zb;
                conv_bytes -= zb;
            }
        }
        if (packed_->winograd()) {
            if (p.a_signed)
                return Status::error(ErrorCode::internal,
                                     "INT8 convolution: W was packed in the Winograd form for u8 "
                                     "x, and this run's x is s8");
            for (int64_t o = 0; o < s.m; ++o)
                if ((p.b_zeros != nullptr ? p.b_zeros[o] : p.b_zero) !=
                    packed_->wino_zero[static_cast<std::size_t>(o)])
                    return Status::error(ErrorCode::internal,
                                         "INT8 convolution: W was packed in the Winograd form "
                                         "for other zero points of W than this run's");
        }
        if (packed_->a7() && !qgemm_rows_supported(packed_->groups.front(), p))
            return Status::error(ErrorCode::internal,
                                 "INT8 convolution: W was packed for u8 x without a zero-point "
                                 "term, and this run has one");
        if (!qconv(s, x.raw, dynamic ? &fx : nullptr, *packed_, ctx.output(0).raw, p,
                        conv_ws, conv_bytes))
            return Status(ErrorCode::resource_exhausted,
                          "out of memory for the INT8 convolution's buffers");
        return Status::ok();
    }

    /// run()'s path: dsinfer's INT8 convolution on qgemm at the ISA family W was packed for
    /// ("nhwc" when x arrives channels last; "1x1" when x is the GEMM's A as it is; "a7" for
    /// avx2's byte form for 7-bit A), else the fallback.
    std::string algorithm(const PrepareContext& ctx) const override {
        QConvShape s;
        if (!geometry(ctx.input(0).shape(), s)) return fallback_algorithm(ctx);
        const DType x = ctx.input(0).dtype();
        const bool dynamic = kind_ == QConvKind::dynamic_quantize_conv;
        if (dynamic ? x != DType::f32 : x != DType::u8 && x != DType::i8)
            return fallback_algorithm(ctx);
        if (qlinear(kind_))
            for (int i : {in_.x_scale, in_.w_scale, in_.y_scale})
                if (ctx.input(i).dtype() != DType::f32) return fallback_algorithm(ctx);
        std::string name = "dsinfer:qconv-";
        if (s.pointwise()) name += "1x1-";
        if (x_nhwc_) name += "nhwc-";
        name += qisa_name(packed_->winograd()       ? packed_->wino.front().isa
                          : packed_->groups.empty() ? qgemm_isa()
                                                    : packed_->groups.front().isa);
        if (packed_->winograd()) name += "-wino";  // F(2x2, 3x3) in 16-bit integers
        if (packed_->c > wshape_.c)                // x's channels padded (qconv_packed_shape)
            name += "-c" + std::to_string(packed_->c);
        if (packed_->kw > wshape_.kw)  // the kernel rows widened (qconv_packed_shape)
            name += "-kw" + std::to_string(packed_->kw);
        if (packed_->a7())  // a byte form for 7-bit A (pack_qconv_weights): "p" when paired
            name += packed_->groups.front().a7_pairs() ? "-a7p" : "-a7";
        return name;
    }

private:
    /// The per-channel zero points (s32) at the workspace's start.
    std::size_t channel_bytes() const noexcept {
        return align64(static_cast<std::size_t>(wshape_.m) * 4) + 64;
    }
    std::size_t out_bytes() const noexcept { return qlinear(kind_) ? 1 : 4; }

    /// The geometry for x's shape; false when x is not [N, C, H, W] of W's channels.
    bool geometry(const Shape& x, QConvShape& s) const noexcept {
        if (x.rank() != 4 || x[1] != wshape_.c) return false;
        Shape w{wshape_.m, wshape_.c / wshape_.group, wshape_.kh, wshape_.kw};
        ConvGeom g;
        if (!conv_geometry(attrs_, x, w, g).is_ok()) return false;
        s = wshape_;
        s.batch = x[0];
        s.h = x[2];
        s.w = x[3];
        s.sh = g.stride[0];
        s.sw = g.stride[1];
        s.dh = g.dil[0];
        s.dw = g.dil[1];
        s.pt = g.pb[0];
        s.pl = g.pb[1];
        s.oh = g.out[0];
        s.ow = g.out[1];
        s.x_nhwc = x_nhwc_;
        s.y_nhwc = y_nhwc_;
        return true;
    }

    QConvKind kind_;
    QConvInputs in_;
    ConvAttrs attrs_;
    ActivationSpec act_;  ///< DynamicQuantizeConv's fused activation
    QConvShape wshape_;  ///< m, c, group, kh, kw
    std::shared_ptr<const PackedQConvW> packed_;
    bool release_;
    bool x_nhwc_ = false, y_nhwc_ = false;  ///< negotiated at compile (use_layouts)
    bool z_nhwc_ = false;                   ///< QLinearConvAdd's residual, likewise
};

StatusOr<std::unique_ptr<Kernel>> make_qconv(const KernelCreateContext& ctx, QConvKind kind) {
    const QConvInputs in = inputs_of(kind);
    if (ctx.creating_fallback())
        return Status::error(ErrorCode::unsupported, "qconv: not as another kernel's fallback");
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs attrs, parse_conv_attrs(ctx, false, in.w));
    const Tensor* w = ctx.constant_input(in.w);
    if (w == nullptr || (w->dtype() != DType::i8 && w->dtype() != DType::u8) ||
        w->num_dims() != 4 || w->num_elements() == 0)
        return Status::error(ErrorCode::unsupported, "a constant 4-D int8/uint8 W only (2-D conv)");
    const Shape& ws = w->shape();
    if (attrs.group <= 0 || ws[0] % attrs.group != 0)
        return Status::error(ErrorCode::unsupported, "output channels not divisible by group");
    // The fallback validates the node (its errors are the reference kernel's) before W is packed.
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    QConvShape s;
    s.m = ws[0];
    s.group = attrs.group;
    s.c = ws[1] * attrs.group;
    s.kh = ws[2];
    s.kw = ws[3];
    // The scales' type decides at run whether the fast path runs; W is released only when it
    // always does (float32 declared).
    bool release = true;
    if (qlinear(kind))
        for (int i : {in.x_scale, in.w_scale, in.y_scale}) {
            const Value* v = ctx.input_value(i);
            release = release && v != nullptr && v->dtype == DType::f32;
        }
    if (kind == QConvKind::qlinear_conv_add)
        for (int i : {kZScale, kCScale}) {
            const Value* v = ctx.input_value(i);
            release = release && v != nullptr && v->dtype == DType::f32;
        }
    ActivationSpec act;
    if (kind == QConvKind::dynamic_quantize_conv) {
        DSINFER_ASSIGN_OR_RETURN(act, activation_from_attributes(ctx));
    }
    // W's zero points per output channel when they are constants of W's type (1 or M of them),
    // or absent (0).
    std::vector<std::int32_t> w_zeros(static_cast<std::size_t>(s.m), 0);
    bool w_zero_const = true;
    if (ctx.has_input(in.w_zero)) {
        const Tensor* z = ctx.constant_input(in.w_zero);
        w_zero_const = z != nullptr && z->dtype() == w->dtype() &&
                       (z->num_elements() == 1 || z->num_elements() == s.m);
        for (int64_t o = 0; w_zero_const && o < s.m; ++o) {
            const int64_t i = z->num_elements() == 1 ? 0 : o;
            w_zeros[static_cast<std::size_t>(o)] = w->dtype() == DType::u8
                                                       ? std::int32_t{z->data<std::uint8_t>()[i]}
                                                       : std::int32_t{z->data<std::int8_t>()[i]};
        }
    }
    // W's zero points constant and 0 as packed (s8 0, u8 128), or none of s8 W (u8 W without a
    // zero point has 0: a zero-point term as packed).
    const std::int32_t packed_zero = w->dtype() == DType::u8 ? 128 : 0;
    const bool w_zero_packed = w_zero_const &&
                               (w->dtype() == DType::i8 || ctx.has_input(in.w_zero)) &&
                               std::all_of(w_zeros.begin(), w_zeros.end(),
                                           [&](std::int32_t z) { return z == packed_zero; });
    const bool dynamic = kind == QConvKind::dynamic_quantize_conv;
    const Value* xv = ctx.input_value(0);
    const bool x_u8 = dynamic || (xv != nullptr && xv->dtype == DType::u8);
    // The avx2 byte form for 7-bit A (pack_qconv_weights) where qgemm_rows is sure to run: u8
    // x of a constant zero point below 128 (or none: a ReLU's output mostly has few values of
    // 128 and more), W's zero points as packed.
    bool a7 = !dynamic && x_u8 && w_zero_packed;
    if (a7 && ctx.has_input(in.x_zero)) {
        const Tensor* z = ctx.constant_input(in.x_zero);
        a7 = z != nullptr && z->dtype() == DType::u8 && z->num_elements() == 1 &&
             z->data<std::uint8_t>()[0] < 128;
    }
    // The Winograd form (pack_qconv_weights, qconv.cpp): 3x3, stride 1, no dilation, one group,
    // at least kWinogradMinChannels channels, u8 x (any zero point), W's zero points constant (any
    // value: the form holds w minus them; ONNX Runtime's dynamic quantization writes u8 W of zero
    // points like 119 or 131), on the avx2 family (the VNNI families' direct products do 64
    // multiply-adds an instruction where its 16-bit ones do 16 for 36).
    const auto all_one = [](const std::vector<int64_t>& v) {
        return std::all_of(v.begin(), v.end(), [](int64_t e) { return e == 1; });
    };
    const bool winograd = x_u8 && w_zero_const && s.kh == 3 && s.kw == 3 && s.group == 1 &&
                          s.c >= kWinogradMinChannels && all_one(attrs.strides) &&
                          all_one(attrs.dilations) && qgemm_isa() == QIsa::avx2;
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    DSINFER_ASSIGN_OR_RETURN(
        auto packed,
        packed_qconv_form(*store, store->source(*w), w->raw_data(), w->dtype() == DType::u8, s, a7,
                          winograd, winograd ? w_zeros.data() : nullptr));
    return make_kernel<QConvKernel>(std::move(fallback), kind, std::move(attrs), act, s,
                                    std::move(packed), release);
}

}  // namespace

void register_fast_qconv(KernelRegistry& r) {
    r.add({"ConvInteger", "", 10, kMaxOpset, DeviceKind::cpu},
          [](const KernelCreateContext& c) { return make_qconv(c, QConvKind::conv_integer); },
          kPriorityCpu, "cpu");
    r.add({"QLinearConv", "", 10, kMaxOpset, DeviceKind::cpu},
          [](const KernelCreateContext& c) { return make_qconv(c, QConvKind::qlinear_conv); },
          kPriorityCpu, "cpu");
    r.add({"QLinearConvAdd", kDsinferDomain, 1, 1, DeviceKind::cpu},
          [](const KernelCreateContext& c) { return make_qconv(c, QConvKind::qlinear_conv_add); },
          kPriorityCpu, "cpu");
    r.add({"DynamicQuantizeConv", kDsinferDomain, 1, 1, DeviceKind::cpu},
          [](const KernelCreateContext& c) {
              return make_qconv(c, QConvKind::dynamic_quantize_conv);
          },
          kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail
