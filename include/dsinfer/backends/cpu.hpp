// dsinfer/backends/cpu.hpp — dsinfer's own CPU backends (factory functions).
//
// "cpu": dsinfer's optimized kernels (src/cpu/fast: vectorized for the CPU's ISA level,
// multithreaded), priority kPriorityCpu, provider "cpu". "reference": the reference kernels
// (src/cpu/reference: plain, single-threaded, the numerical reference every other backend is
// checked against), priority kPriorityReference, provider "reference"; every engine registers
// them last, as the fall-through of every node. Both are always available.
//
// Usage:
//   dsinfer::KernelRegistry r;
//   dsinfer::throw_if_error(dsinfer::cpu_backend()->register_kernels(r));
//   dsinfer::throw_if_error(dsinfer::reference_backend()->register_kernels(r));
#pragma once

#include <memory>

#include "dsinfer/backend.hpp"
#include "dsinfer/export.hpp"

namespace dsinfer {

/// The "cpu" backend (one process-wide object).
DSINFER_API std::shared_ptr<const Backend> cpu_backend();
/// The "reference" backend (one process-wide object).
DSINFER_API std::shared_ptr<const Backend> reference_backend();

}  // namespace dsinfer
