// The device runtime of a build without CUDA: every request for a GPU is unsupported.
#include "core/device_runtime.hpp"

#include "dsinfer/config.hpp"

#if !DSINFER_WITH_CUDA
namespace dsinfer::detail {

StatusOr<std::shared_ptr<DeviceRuntime>> cuda_runtime(int /*index*/) {
    return Status::error(ErrorCode::unsupported,
                         "this build has no CUDA backend (configure with -DDSINFER_WITH_CUDA=ON "
                         "where a CUDA toolkit is installed)");
}

void register_cuda_backend(KernelRegistry& /*registry*/) {}

}  // namespace dsinfer::detail
#endif
