#include "passes/quantize_common.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

namespace dsinfer::passes {

bool is_quantized_op(const Node& n) {
    static const std::unordered_set<std::string> kOps{
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
        "ConvInteger",    "QLinearConv",      "QLinearMatMul",         "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat", "QGemm",      "QLinearAdd",            "QLinearMul",
        "QLinearGlobalAveragePool", "QLinearSigmoid", "QAttention",    "DynamicQuantizeConv"};
    return kOps.count(n.op_type) != 0;
}

bool has_quantized_op(const Graph& g) {
    return std::any_of(g.nodes.begin(), g.nodes.end(),
                       [](const Node& n) { return is_quantized_op(n); });
}

bool all_finite_f32(const Tensor& t) {
    const float* p = t.data_unchecked<float>();
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        if (!std::isfinite(p[i])) return false;
    return true;
}

StatusOr<SymmetricWeight> quantize_symmetric_s8(const Tensor& w, int axis) {
    DSINFER_CHECK(w.dtype() == DType::f32 && w.num_elements() > 0, ErrorCode::invalid_argument,
                  "quantize_symmetric_s8: the weight must be a non-empty float32 tensor");
    DSINFER_CHECK(axis < w.num_dims(), ErrorCode::invalid_argument,
                  "quantize_symmetric_s8: axis ", axis, " of a rank-", w.num_dims(), " weight");
    DSINFER_CHECK(all_finite_f32(w), ErrorCode::invalid_argument,
                  "quantize_symmetric_s8: the weight holds NaN or infinity");
    // Element i lies in channel (i / inner) % channels.
    std::int64_t channels = 1, inner = 1;
    if (axis >= 0) {
        channels = w.shape()[axis];
        for (int d = axis + 1; d < w.num_dims(); ++d) inner *= w.shape()[d];
    }
    const std::int64_t count = w.num_elements();
    const float* src = w.data_unchecked<float>();
    std::vector<float> amax(static_cast<std::size_t>(channels), 0.f);
    const auto channel = [&](std::int64_t i) {
        return axis < 0 ? std::int64_t{0} : (i / inner) % channels;
    };
    for (std::int64_t i = 0; i < count; ++i) {
        float& m = amax[static_cast<std::size_t>(channel(i))];
        m = std::max(m, std::fabs(src[i]));
    }
    SymmetricWeight out;
    DSINFER_ASSIGN_OR_RETURN(out.q, Tensor::allocate(DType::i8, w.shape()));
    DSINFER_ASSIGN_OR_RETURN(out.scale,
                             Tensor::allocate(DType::f32, axis < 0 ? Shape{} : Shape{channels}));
    float* scale = out.scale.data_unchecked<float>();
    for (std::int64_t c = 0; c < channels; ++c) {
        const float m = amax[static_cast<std::size_t>(c)];
        // Positive and normal: a slice of subnormal weights keeps a usable scale.
        scale[c] = m > 0.f ? std::max(m / 127.f, std::numeric_limits<float>::min()) : 1.f;
    }
    auto* q = out.q.data_unchecked<std::int8_t>();
    for (std::int64_t i = 0; i < count; ++i) {
        const float r = std::nearbyint(src[i] / scale[channel(i)]);
        q[i] = static_cast<std::int8_t>(std::clamp(r, -127.f, 127.f));
    }
    return out;
}

}  // namespace dsinfer::passes
