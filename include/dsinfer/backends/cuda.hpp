// dsinfer/backends/cuda.hpp — the CUDA backend: device discovery, device memory control, and
// the Backend object of each device.
//
// Purpose: lets applications and tests ask whether a usable NVIDIA GPU is present, and bound,
// inspect and trim each device's memory pool (the caching allocator every GPU engine on that
// device allocates from), without including any CUDA header. A GPU engine itself is chosen with
// EngineOptions::device (docs/CUDA.md); cuda_backend(N) is the backend that name means.
//
// Every build has these functions. The CUDA backend itself is the plugin libdsinfer_cuda.so
// (built with DSINFER_WITH_CUDA, opened on the first of these calls): a build without CUDA
// reports 0 devices and a cuda backend that is unsupported, naming the configure option; a
// build whose plugin cannot be loaded, or a machine without a driver or GPU, reports 0 devices
// and an unavailable backend with the reason (the files tried and dlerror(), or the CUDA error).
//
// Threading: all functions are thread-safe. They never abort; cuda_device_count never throws.
//
// Usage:
//   #include <dsinfer/backends/cuda.hpp>
//   if (dsinfer::cuda_device_count() == 0) std::puts(dsinfer::cuda_status().c_str());
//   if (dsinfer::Status s = dsinfer::cuda_backend(1)->availability(); !s.is_ok()) ...
#pragma once

#include <memory>
#include <string>

#include "dsinfer/backend.hpp"
#include "dsinfer/export.hpp"
#include "dsinfer/memory_pool.hpp"

namespace dsinfer {

/// Registration priority of the CUDA kernels (above every CPU backend).
inline constexpr int kPriorityCuda = 30;

/// Number of usable CUDA devices (0 when there is no driver or no GPU).
DSINFER_API int cuda_device_count() noexcept;
/// Human-readable state: "2 device(s): NVIDIA H200 (sm_90), ..." or why there are none.
DSINFER_API std::string cuda_status();

/// Hard limit on the device memory dsinfer holds on `device` (0 = none, the default): an
/// allocation beyond it fails its request with resource_exhausted after trimming the cache.
/// Returns false when the device does not exist.
DSINFER_API bool cuda_set_memory_limit(int device, std::size_t bytes);
/// The device pool's statistics (zeros when the device does not exist).
DSINFER_API MemoryPoolStats cuda_memory_stats(int device);
/// Returns the device pool's cached blocks to the driver; the bytes released.
DSINFER_API std::size_t cuda_trim(int device);

/// The backend of CUDA device `device` ("cuda:N", priority kPriorityCuda, provider "cuda"),
/// available when the plugin is loaded and the device exists. Its device_runtime() is the
/// runtime every GPU engine on that device shares. A negative `device` is never available.
DSINFER_API std::shared_ptr<const Backend> cuda_backend(int device);

}  // namespace dsinfer
