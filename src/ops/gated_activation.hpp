// The activations of com.dsinfer GatedActivation (docs/OPTIMIZER.md): Y[..., j] =
// act(X[..., j]) * X[..., F + j] for X [..., 2F], act one of "silu" (x * sigmoid(x)), "gelu"
// (erf form) or "gelu_tanh" (tanh approximation). One reading of the `activation` attribute and
// one scalar definition, shared by the reference kernel, the fast kernel's fallback and the
// fuse_gated_mlp pass (which writes the names).
//
// Internal (namespace dsinfer::detail); includes only the vocabulary.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>

#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

enum class GatedAct : std::uint8_t { silu, gelu, gelu_tanh };

/// The attribute value naming `a`.
inline const char* gated_activation_name(GatedAct a) noexcept {
    switch (a) {
        case GatedAct::silu: return "silu";
        case GatedAct::gelu: return "gelu";
        case GatedAct::gelu_tanh: return "gelu_tanh";
    }
    return "";
}

/// Reads the required `activation` attribute; invalid_model when absent or unknown.
inline StatusOr<GatedAct> gated_activation_from_attributes(const Node& n) {
    StatusOr<std::string> name = n.attr<std::string>("activation");
    if (!name.is_ok()) return name.status();
    const std::string_view v = name.value();
    if (v == "silu") return GatedAct::silu;
    if (v == "gelu") return GatedAct::gelu;
    if (v == "gelu_tanh") return GatedAct::gelu_tanh;
    return Status::error(ErrorCode::invalid_model, "unknown gated activation '", v,
                         "' (known: silu, gelu, gelu_tanh)");
}

/// act(x) with the reference kernels' semantics: the Sigmoid, Mul and Gelu ops' formulas in
/// the compute type C (SiLU is x * sigmoid(x), rounded as Mul(x, Sigmoid(x)) rounds).
template <class C>
C gated_activation(GatedAct a, C x) noexcept {
    switch (a) {
        case GatedAct::silu: {
            C s;
            if (x >= C(0)) {
                s = C(1) / (C(1) + std::exp(-x));
            } else {
                const C e = std::exp(x);
                s = e / (C(1) + e);
            }
            return x * s;
        }
        case GatedAct::gelu:
            return C(0.5) * x * (C(1) + std::erf(x / static_cast<C>(std::numbers::sqrt2)));
        case GatedAct::gelu_tanh: {
            const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
            return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
        }
    }
    return x;
}

}  // namespace dsinfer::detail
