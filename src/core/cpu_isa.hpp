// The CPU ISA cap as the engine sees it (implemented by the CPU room, src/cpu/cpu_isa.cpp, over
// the dispatch of src/kernels/simd.cpp, which it caps; docs/PLATFORM.md).
#pragma once

#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// ok when DSINFER_MAX_CPU_ISA is unset or names a level (baseline, avx2, avx512); otherwise
/// invalid_argument naming the variable and its value (a typo would otherwise run every kernel
/// at the CPU's best level without a word).
Status check_cpu_isa_cap() noexcept;

}  // namespace dsinfer::detail
