// Explicit registration of the CPU kernels (no static self-registration).
#include "cpu/fast/groups.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer {

void register_reference_kernels(KernelRegistry& registry) {
    detail::register_elementwise_kernels(registry);
    detail::register_tensor_kernels(registry);
    detail::register_nn_kernels(registry);
    detail::register_reduce_kernels(registry);
    detail::register_quant_kernels(registry);
    detail::register_sequence_model_kernels(registry);
    detail::register_misc_kernels(registry);
    detail::register_control_flow_kernels(registry);
    detail::register_fused_kernels(registry);
    detail::register_attention_kernels(registry);
}

void register_cpu_kernels(KernelRegistry& registry) {
    detail::register_fast_kernels(registry);
    detail::register_fast_matmul(registry);
    detail::register_fast_fused_kernels(registry);
    detail::register_fast_attention(registry);
    register_reference_kernels(registry);
}

}  // namespace dsinfer
