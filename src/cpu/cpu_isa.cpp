// The CPU room's side of the ISA cap: the public dsinfer::cpu_kernel_isa() (engine.hpp) and the
// engine's check of DSINFER_MAX_CPU_ISA (core/cpu_isa.hpp), both over the dispatch of dsinfer's
// vector loops (src/kernels/simd.hpp), which the cap limits.
#include <cstdlib>

#include "core/cpu_isa.hpp"
#include "dsinfer/engine.hpp"
#include "kernels/simd.hpp"

const char* dsinfer::cpu_kernel_isa() noexcept {
    return detail::fast::isa_name(detail::fast::active_isa());
}

dsinfer::Status dsinfer::detail::check_cpu_isa_cap() noexcept {
    const char* cap = std::getenv("DSINFER_MAX_CPU_ISA");
    fast::Isa isa{};
    if (cap == nullptr || fast::parse_isa(cap, isa)) return Status::ok();
    return Status::error(ErrorCode::invalid_argument, "environment variable DSINFER_MAX_CPU_ISA='",
                         cap, "': want baseline, avx2 or avx512 (or unset it)");
}
