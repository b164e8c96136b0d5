// dsinfer/backends/cuda.hpp — CUDA device discovery (the CUDA backend's kernels arrive in Step 5).
//
// Purpose: lets applications and tests ask whether a usable NVIDIA GPU is present without
// including any CUDA header. Compiled into dsinfer::cuda only when DSINFER_WITH_CUDA is on.
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

namespace dsinfer {

/// Number of usable CUDA devices (0 when there is no driver or no GPU).
DSINFER_API int cuda_device_count() noexcept;
/// Human-readable state: "2 device(s): NVIDIA H200 (sm_90), ..." or why there are none.
DSINFER_API std::string cuda_status();

}  // namespace dsinfer
