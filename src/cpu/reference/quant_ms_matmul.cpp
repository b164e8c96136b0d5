// Reference com.microsoft QGemm (ONNX Runtime's contrib op), the oracle of the cpu backend's
// qgemm kernel (src/cpu/fast/fast_qmatmul.cpp) and of the QDQ fusion's Gemm form
// (src/passes/fuse_qdq.cpp):
//   QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?, y_zero_point?)
//   acc[m, n] = sum_k (A[m, k] - a_zp) (B[k, n] - b_zp[n])   (exact, wrapping int32)
//             + C[m, n]                                      (int32, broadcast to [M, N])
//   Y = float(acc) * ((alpha * a_scale) * b_scale[n])        (f32, ops/quantize.hpp)
//   quantized when y_scale is given: QuantizeLinear(Y) with y_scale, y_zero_point (type of
//   y_zero_point, uint8 when absent); float32 otherwise.
// A u8/s8 [M, K] ([K, M] with transA), B u8/s8 [K, N] ([N, K] with transB); a_scale, a_zero_point,
// y_scale, y_zero_point one element; b_scale/b_zero_point one element or N. Scales float32,
// positive and finite (constants are checked when the node is created).
//
// The com.microsoft names of DynamicQuantizeMatMul and MatMulIntegerToFloat run the com.dsinfer
// kernels of the same semantics (quant.cpp registers them under both domains).
#include <cmath>
#include <cstdint>

#include "dsinfer/ops.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/quantize.hpp"

namespace dsinfer::detail {

namespace {

constexpr const char* kMsDomain = "com.microsoft";

bool is_int8(DType t) noexcept { return t == DType::i8 || t == DType::u8; }

template <class... Args>
Status bad(const Args&... args) {
    return Status::error(ErrorCode::invalid_argument, "QGemm: ", args...);
}

/// A scale constant's elements must be positive and finite.
Status check_scale_values(const KernelCreateContext& ctx, int i, const char* name) {
    const Tensor* s = ctx.constant_input(i);
    if (s == nullptr || s->dtype() != DType::f32) return Status::ok();
    for (std::int64_t e = 0; e < s->num_elements(); ++e) {
        const float v = s->data_unchecked<float>()[e];
        if (!(v > 0.f) || !std::isfinite(v))
            return Status::error(ErrorCode::invalid_model, "input '", name, "' element ", e,
                                 " is ", v, "; scales must be positive and finite");
    }
    return Status::ok();
}

class QGemmKernel final : public Kernel {
public:
    QGemmKernel(float alpha, bool trans_a, bool trans_b)
        : alpha_(alpha), trans_a_(trans_a), trans_b_(trans_b) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(3);
        if (!is_int8(a.dtype()) || !is_int8(b.dtype()))
            return Status::error(ErrorCode::unsupported, "QGemm: A and B must be int8 or uint8, got ",
                                 dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
        if (a.shape().rank() != 2 || b.shape().rank() != 2)
            return bad("A and B must be 2-D, got ", a.shape().to_string(), " and ",
                       b.shape().to_string());
        const std::int64_t m = a.shape()[trans_a_ ? 1 : 0], k = a.shape()[trans_a_ ? 0 : 1];
        const std::int64_t kb = b.shape()[trans_b_ ? 1 : 0], n = b.shape()[trans_b_ ? 0 : 1];
        if (k != kb)
            return bad("inner dimensions differ: ", a.shape().to_string(), " x ",
                       b.shape().to_string());
        DSINFER_RETURN_IF_ERROR(check_param(ctx, 1, "a_scale", DType::f32, 1));
        DSINFER_RETURN_IF_ERROR(check_param(ctx, 2, "a_zero_point", a.dtype(), 1));
        DSINFER_RETURN_IF_ERROR(check_param(ctx, 4, "b_scale", DType::f32, n));
        DSINFER_RETURN_IF_ERROR(check_param(ctx, 5, "b_zero_point", b.dtype(), n));
        if (ctx.has_input(6)) {
            const Tensor& c = ctx.input(6);
            const Shape& cs = c.shape();
            const bool fits = cs.rank() <= 2 &&
                              (cs.rank() < 1 || cs[cs.rank() - 1] == n || cs[cs.rank() - 1] == 1) &&
                              (cs.rank() < 2 || cs[0] == m || cs[0] == 1);
            if (c.dtype() != DType::i32 || !fits)
                return bad("input 'C' must be int32 broadcastable to ", Shape{m, n}.to_string(),
                           ", got ", dtype_name(c.dtype()), " ", cs.to_string());
        }
        DType out = DType::f32;
        if (ctx.has_input(7)) {
            DSINFER_RETURN_IF_ERROR(check_param(ctx, 7, "y_scale", DType::f32, 1));
            out = DType::u8;
            if (ctx.has_input(8)) {
                out = ctx.input(8).dtype();
                if (!is_int8(out))
                    return bad("input 'y_zero_point' must be int8 or uint8, got ", dtype_name(out));
                DSINFER_RETURN_IF_ERROR(check_param(ctx, 8, "y_zero_point", out, 1));
            }
        } else if (ctx.has_input(8)) {
            return bad("y_zero_point given without y_scale");
        }
        ctx.set_output(0, out, Shape{m, n});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(3);
        const std::int64_t m = a.shape[trans_a_ ? 1 : 0], k = a.shape[trans_a_ ? 0 : 1];
        const std::int64_t n = b.shape[trans_b_ ? 0 : 1];
        const float a_scale = alpha_ * *ctx.input(1).data_unchecked<float>();
        const std::int64_t za = ctx.has_input(2) ? element(ctx.input(2), 0) : 0;
        const TensorView& bs = ctx.input(4);
        const bool has_bz = ctx.has_input(5);
        const bool has_c = ctx.has_input(6);
        std::int64_t c_rows = 1, c_cols = 1;
        if (has_c) {
            const Shape& cs = ctx.input(6).shape;
            if (cs.rank() >= 1) c_cols = cs[cs.rank() - 1];
            if (cs.rank() == 2) c_rows = cs[0];
        }
        const TensorView& y = ctx.output(0);
        const bool quantized = ctx.has_input(7);
        const float y_scale = quantized ? *ctx.input(7).data_unchecked<float>() : 1.f;
        const auto y_zero =
            static_cast<std::int32_t>(quantized && ctx.has_input(8) ? element(ctx.input(8), 0) : 0);
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                const std::int64_t zb = has_bz ? element(ctx.input(5), per(ctx.input(5), j)) : 0;
                std::int64_t acc = 0;
                for (std::int64_t t = 0; t < k; ++t) {
                    const std::int64_t av = element(a, trans_a_ ? t * m + i : i * k + t);
                    const std::int64_t bv = element(b, trans_b_ ? j * k + t : t * n + j);
                    acc += (av - za) * (bv - zb);
                }
                std::int32_t c = static_cast<std::int32_t>(acc);
                if (has_c)
                    c = add_wrapping(c, ctx.input(6).data_unchecked<std::int32_t>()
                                            [(c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j)]);
                const float sb = bs.data_unchecked<float>()[per(bs, j)];
                const std::int64_t o = i * n + j;
                if (!quantized)
                    y.data_unchecked<float>()[o] = dequantize_product(c, a_scale, sb, nullptr);
                else if (y.dtype == DType::u8)
                    y.data_unchecked<std::uint8_t>()[o] = requantize_product<std::uint8_t>(
                        c, requantize_multiplier(a_scale, sb, y_scale), y_zero);
                else
                    y.data_unchecked<std::int8_t>()[o] = requantize_product<std::int8_t>(
                        c, requantize_multiplier(a_scale, sb, y_scale), y_zero);
            }
        return Status::ok();
    }

private:
    /// Input i: of dtype `want`, 1 or `count` elements, rank <= 1.
    static Status check_param(const PrepareContext& ctx, int i, const char* name, DType want,
                              std::int64_t count) {
        if (!ctx.has_input(i)) return Status::ok();
        const Tensor& t = ctx.input(i);
        if (t.dtype() != want)
            return Status::error(ErrorCode::invalid_argument, "QGemm: input '", name,
                                 "' has type ", dtype_name(t.dtype()), ", expected ",
                                 dtype_name(want));
        const std::int64_t e = t.num_elements();
        if (t.shape().rank() > 1 || (e != 1 && e != count))
            return Status::error(ErrorCode::invalid_argument, "QGemm: input '", name,
                                 "' of shape ", t.shape().to_string(), " must have 1",
                                 count != 1 ? " or " + std::to_string(count) : std::string(),
                                 " elements");
        if (want == DType::f32)
            for (std::int64_t j = 0; j < e; ++j) {
                const float v = t.data_unchecked<float>()[j];
                if (!(v > 0.f) || !std::isfinite(v))
                    return Status::error(ErrorCode::invalid_argument, "QGemm: input '", name,
                                         "' element ", j, " is ", v,
                                         "; scales must be positive and finite");
            }
        return Status::ok();
    }
    static std::int64_t per(const TensorView& t, std::int64_t j) noexcept {
        return t.num_elements() == 1 ? 0 : j;
    }
    static std::int64_t element(const TensorView& t, std::int64_t i) noexcept {
        return t.dtype == DType::i8 ? std::int64_t{t.data_unchecked<std::int8_t>()[i]}
                                    : std::int64_t{t.data_unchecked<std::uint8_t>()[i]};
    }

    float alpha_;
    bool trans_a_, trans_b_;
};

StatusOr<std::unique_ptr<Kernel>> make_qgemm(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_CHECK(ctx.has_input(3) && ctx.has_input(4), ErrorCode::invalid_model,
                  "QGemm requires inputs B (3) and b_scale (4)");
    DSINFER_CHECK(ctx.num_inputs() <= 9, ErrorCode::invalid_model,
                  "QGemm takes 6 to 9 inputs, got ", ctx.num_inputs());
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(float alpha, node.attr_or<float>("alpha", 1.f));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t ta, node.attr_or<std::int64_t>("transA", 0));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t tb, node.attr_or<std::int64_t>("transB", 0));
    if (!std::isfinite(alpha))
        return Status::error(ErrorCode::invalid_model, "QGemm: attribute 'alpha' is ", alpha);
    for (const auto& [i, name] : {std::pair{1, "a_scale"}, {4, "b_scale"}, {7, "y_scale"}})
        if (ctx.has_input(i)) DSINFER_RETURN_IF_ERROR(check_scale_values(ctx, i, name));
    return make_kernel<QGemmKernel>(alpha, ta != 0, tb != 0);
}

}  // namespace

void register_quant_ms_matmul_kernels(KernelRegistry& r) {
    r.add({"QGemm", kMsDomain, 1, 1, DeviceKind::cpu}, &make_qgemm);
}

}  // namespace dsinfer::detail
