// Explicit registration of the CPU kernels (no static self-registration), and the CPU room's
// backends: "cpu" (the fast kernels) and "reference" (dsinfer/backends/cpu.hpp).
#include "cpu/fast/groups.hpp"
#include "cpu/reference/groups.hpp"
#include "dsinfer/backends/cpu.hpp"

namespace dsinfer {

namespace {

/// A CPU backend that is always available: its kernels are a registration function.
class CpuRoomBackend final : public Backend {
public:
    CpuRoomBackend(std::string name, int priority, void (*add)(KernelRegistry&))
        : Backend(name, Device{}, priority, name), add_(add) {}
    Status availability() const override { return Status::ok(); }
    Status register_kernels(KernelRegistry& registry) const override {
        add_(registry);
        return Status::ok();
    }

private:
    void (*add_)(KernelRegistry&);
};

void register_fast_cpu_kernels(KernelRegistry& registry) {
    detail::register_fast_kernels(registry);
    detail::register_fast_matmul(registry);
    detail::register_fast_fused_kernels(registry);
    detail::register_fast_attention(registry);
    detail::register_fast_paged_attention(registry);
    detail::register_fast_decoder_kernels(registry);
    detail::register_fast_qmatmul(registry);
    detail::register_fast_qlinear(registry);
    detail::register_fast_qconv(registry);
}

}  // namespace

void register_reference_kernels(KernelRegistry& registry) {
    detail::register_elementwise_kernels(registry);
    detail::register_tensor_kernels(registry);
    detail::register_nn_kernels(registry);
    detail::register_reduce_kernels(registry);
    detail::register_quant_kernels(registry);
    detail::register_quant_ms_kernels(registry);
    detail::register_sequence_model_kernels(registry);
    detail::register_misc_kernels(registry);
    detail::register_control_flow_kernels(registry);
    detail::register_fused_kernels(registry);
    detail::register_attention_kernels(registry);
    detail::register_paged_attention_kernels(registry);
    detail::register_decoder_kernels(registry);
}

void register_cpu_kernels(KernelRegistry& registry) {
    register_fast_cpu_kernels(registry);
    register_reference_kernels(registry);
}

std::shared_ptr<const Backend> cpu_backend() {
    static const auto b =
        std::make_shared<const CpuRoomBackend>("cpu", kPriorityCpu, &register_fast_cpu_kernels);
    return b;
}

std::shared_ptr<const Backend> reference_backend() {
    static const auto b = std::make_shared<const CpuRoomBackend>("reference", kPriorityReference,
                                                                 &register_reference_kernels);
    return b;
}

}  // namespace dsinfer
