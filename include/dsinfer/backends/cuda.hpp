// dsinfer/backends/cuda.hpp — CUDA device discovery and device memory control.
//
// Purpose: lets applications and tests ask whether a usable NVIDIA GPU is present, and bound,
// inspect and trim each device's memory pool (the caching allocator every GPU engine on that
// device allocates from), without including any CUDA header. A GPU engine itself is chosen with
// EngineOptions::device (docs/CUDA.md). Compiled into dsinfer::cuda only when
// DSINFER_WITH_CUDA is on.
//
// Threading: both functions are thread-safe. They never throw and never abort: a machine with
// the toolkit but no driver or GPU reports 0 devices with the CUDA error as the reason.
//
// Usage:
//   #include <dsinfer/backends/cuda.hpp>
//   if (dsinfer::cuda_device_count() == 0) std::puts(dsinfer::cuda_status().c_str());
#pragma once

#include <string>

#include "dsinfer/export.hpp"
#include "dsinfer/memory_pool.hpp"

namespace dsinfer {

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

}  // namespace dsinfer
