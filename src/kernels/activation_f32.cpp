// apply_activation_f32 (see activation_f32.hpp): the vector loops of simd.hpp where they exist,
// the ops room's scalar apply_activation otherwise.
#include "kernels/activation_f32.hpp"

#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"

namespace dsinfer::detail {

ActivationLoop activation_loop_f32(const ActivationSpec& act) noexcept {
    using fast::Unary;
    Unary u = Unary::count;
    switch (act.kind) {
        case Activation::relu: u = Unary::relu; break;
        case Activation::sigmoid: u = Unary::sigmoid; break;
        case Activation::tanh: u = Unary::tanh; break;
        case Activation::gelu: u = Unary::gelu; break;
        case Activation::gelu_tanh: u = Unary::gelu_tanh; break;
        default: return nullptr;
    }
    return fast::simd().unary[static_cast<int>(u)];
}

void apply_activation_f32(float* y, std::int64_t n, const ActivationSpec& act) noexcept {
    if (act.kind == Activation::none) return;
    if (const ActivationLoop fn = activation_loop_f32(act)) {
        parallel_for(n, fast::kGrainHeavy, [&](std::int64_t b, std::int64_t e) {
            fn(y + b, y + b, e - b);
        });
        return;
    }
    parallel_for(n, fast::kGrainHeavy, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) y[i] = apply_activation(y[i], act);
    });
}

}  // namespace dsinfer::detail
