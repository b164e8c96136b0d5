// The CPU ISA cap as the engine sees it (implemented by the CPU room, src/cpu/cpu_isa.cpp, over
// the dispatch of src/kernels/simd.cpp, which it caps; docs/PLATFORM.md).
#pragma once

#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// ok when DSINFER_MAX_CPU_ISA is unset or names a level (baseline, avx2, avx512); otherwise
/// invalid_argument naming the variable and its value (a typo would otherwise run every kernel
/// at the CPU's best level without a word).
Status check_cpu_isa_cap() noexcept;

/// The best ISA level this CPU has, uncapped: "avx512", "avx2" or "baseline" (the kernels'
/// level, cpu_kernel_isa(), is this capped by DSINFER_MAX_CPU_ISA).
const char* host_cpu_isa() noexcept;

/// When DSINFER_MAX_CPU_ISA holds a value the kernels' dispatch ignores (it then runs at the
/// CPU's best level), logs a warning naming the accepted values through the process-wide sink
/// (dsinfer/log.hpp), once per distinct value. cpu_kernel_isa() calls it; an engine's load
/// fails instead (check_cpu_isa_cap).
void warn_unknown_cpu_isa_cap() noexcept;

}  // namespace dsinfer::detail
