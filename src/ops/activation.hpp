// The activations dsinfer's fused operators apply after their main computation (the
// `activation`, `activation_alpha`, `activation_beta` attributes; docs/OPTIMIZER.md), shared by
// the reference kernels (scalar form below), the vectorized form (apply_activation_f32 in
// src/kernels/activation_f32.cpp) and the oneDNN epilogue (src/onednn/onednn_backend.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <string>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

enum class Activation : std::uint8_t {
    none, relu, leaky_relu, sigmoid, tanh, clip, hard_swish, gelu, gelu_tanh,
};

struct ActivationSpec {
    Activation kind = Activation::none;
    float alpha = 0.f;  ///< LeakyRelu slope; Clip min
    float beta = 0.f;   ///< Clip max
    bool empty() const noexcept { return kind == Activation::none; }
};

/// The attribute value naming `a` ("" for none).
inline const char* activation_name(Activation a) noexcept {
    switch (a) {
        case Activation::none: return "";
        case Activation::relu: return "Relu";
        case Activation::leaky_relu: return "LeakyRelu";
        case Activation::sigmoid: return "Sigmoid";
        case Activation::tanh: return "Tanh";
        case Activation::clip: return "Clip";
        case Activation::hard_swish: return "HardSwish";
        case Activation::gelu: return "Gelu";
        case Activation::gelu_tanh: return "GeluTanh";
    }
    return "";
}

/// Reads a fused node's activation attributes; invalid_model for unknown names or a Clip with
/// min > max.
inline StatusOr<ActivationSpec> activation_from_attributes(const Node& node) {
    ActivationSpec s;
    DSINFER_ASSIGN_OR_RETURN(const std::string name,
                             node.attr_or<std::string>("activation", std::string()));
    DSINFER_ASSIGN_OR_RETURN(s.alpha, node.attr_or<float>("activation_alpha", 0.f));
    DSINFER_ASSIGN_OR_RETURN(s.beta, node.attr_or<float>("activation_beta", 0.f));
    if (name.empty()) return s;
    for (int k = 1; k <= static_cast<int>(Activation::gelu_tanh); ++k) {
        if (name == activation_name(static_cast<Activation>(k))) {
            s.kind = static_cast<Activation>(k);
            if (s.kind == Activation::clip && !(s.alpha <= s.beta))
                return Status::error(ErrorCode::invalid_model, "Clip activation min ", s.alpha,
                                     " is greater than max ", s.beta);
            return s;
        }
    }
    return Status::error(ErrorCode::invalid_model, "unknown fused activation '", name,
                         "' (known: Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSwish, Gelu, "
                         "GeluTanh)");
}

/// activation_from_attributes once per node, shared by its fallback chain
/// (KernelCreateContext::parsed_attributes).
inline StatusOr<ActivationSpec> activation_from_attributes(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const ActivationSpec> a,
                             ctx.parsed_attributes<ActivationSpec>([](const KernelCreateContext& c) {
                                 return activation_from_attributes(c.node());
                             }));
    return *a;
}

/// The activation of one value, with the reference kernels' semantics (NaN propagates).
inline float apply_activation(float x, const ActivationSpec& s) noexcept {
    switch (s.kind) {
        case Activation::none: return x;
        case Activation::relu: return x < 0.f ? 0.f : x;
        case Activation::leaky_relu: return x < 0.f ? s.alpha * x : x;
        case Activation::sigmoid:
            return x >= 0.f ? 1.f / (1.f + std::exp(-x)) : std::exp(x) / (1.f + std::exp(x));
        case Activation::tanh: return std::tanh(x);
        case Activation::clip: return std::isnan(x) ? x : std::min(std::max(x, s.alpha), s.beta);
        case Activation::hard_swish:
            return std::isnan(x) ? x : x * std::max(0.f, std::min(1.f, x / 6.f + 0.5f));
        case Activation::gelu:  // as the reference Gelu op computes it (x / sqrt 2)
            return 0.5f * x * (1.f + std::erf(x / static_cast<float>(std::numbers::sqrt2)));
        case Activation::gelu_tanh: {
            const float k = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
            return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
        }
    }
    return x;
}

}  // namespace dsinfer::detail
