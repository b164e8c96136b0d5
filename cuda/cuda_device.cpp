// CUDA device discovery. A missing driver (cudaErrorInsufficientDriver / cudaErrorNoDevice) is
// the normal state of build machines and means "no GPU", never an error that aborts.
#include <cuda_runtime_api.h>

#include <string>

#include "dsinfer/backends/cuda.hpp"

namespace dsinfer {

int cuda_device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the (non-sticky) error
        return 0;
    }
    return n;
}

std::string cuda_status() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return std::string("no CUDA device: ") + cudaGetErrorString(err);
    }
    if (n == 0) return "no CUDA device: the driver reports 0 devices";
    std::string s = std::to_string(n) + " device(s):";
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        s += std::string(i ? ", " : " ") + p.name + " (sm_" + std::to_string(p.major) +
             std::to_string(p.minor) + ")";
    }
    return s;
}

}  // namespace dsinfer
