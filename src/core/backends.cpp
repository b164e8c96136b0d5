// The backends by name (dsinfer/backend.hpp) and the "onednn" backend object: the one place
// that maps EngineOptions' strings to Backend objects. The CPU room defines "cpu" and
// "reference" (src/cpu/cpu_kernels.cpp), the CUDA plugin loader "cuda:N"
// (src/core/cuda_plugin_loader.cpp).
#include "dsinfer/backend.hpp"

#include "core/device_runtime.hpp"
#include "dsinfer/backends/cpu.hpp"
#include "dsinfer/backends/cuda.hpp"
#include "dsinfer/backends/onednn.hpp"

namespace dsinfer {

namespace {

/// "onednn": compiled into libdsinfer or not (onednn_available()).
class OnednnBackend final : public Backend {
public:
    OnednnBackend() : Backend("onednn", Device{}, kPriorityOnednn, "onednn") {}
    Status availability() const override {
        if (onednn_available()) return Status::ok();
        return Status(ErrorCode::unsupported,
                      "backend 'onednn' is not available in this build (configure with "
                      "-DDSINFER_WITH_ONEDNN=ON)");
    }
    Status register_kernels(KernelRegistry& registry) const override {
        DSINFER_RETURN_IF_ERROR(availability());
        register_onednn_kernels(registry);
        return Status::ok();
    }
};

/// "cuda" -> 0, "cuda:N" (one to three digits) -> N, anything else -> -1.
int cuda_index(std::string_view name) {
    if (name == "cuda") return 0;
    constexpr std::string_view prefix = "cuda:";
    if (name.substr(0, prefix.size()) != prefix) return -1;
    const std::string_view digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 3) return -1;
    int n = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') return -1;
        n = n * 10 + (c - '0');
    }
    return n;
}

/// The host backends, fastest first.
std::vector<std::shared_ptr<const Backend>> host_backends() {
    return {onednn_backend(), cpu_backend(), reference_backend()};
}

}  // namespace

StatusOr<std::shared_ptr<detail::DeviceRuntime>> Backend::device_runtime() const {
    return std::shared_ptr<detail::DeviceRuntime>();
}

std::shared_ptr<const Backend> onednn_backend() {
    static const auto b = std::make_shared<const OnednnBackend>();
    return b;
}

std::shared_ptr<const Backend> find_backend(std::string_view name) {
    for (auto& b : host_backends())
        if (b->name() == name) return b;
    if (const int index = cuda_index(name); index >= 0) return cuda_backend(index);
    return nullptr;
}

std::vector<std::string> host_backend_names() {
    std::vector<std::string> names;
    for (const auto& b : host_backends()) names.push_back(b->name());
    return names;
}

std::vector<std::string> available_backends() {
    std::vector<std::string> names;
    for (const auto& b : host_backends())
        if (b->available()) names.push_back(b->name());
    for (int i = 0, n = cuda_device_count(); i < n; ++i) names.push_back("cuda:" + std::to_string(i));
    return names;
}

}  // namespace dsinfer
