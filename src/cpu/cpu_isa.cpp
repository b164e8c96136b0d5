// The CPU room's side of the ISA cap: the public dsinfer::cpu_kernel_isa() (engine.hpp) and the
// engine's check of DSINFER_MAX_CPU_ISA (core/cpu_isa.hpp), both over the dispatch of dsinfer's
// vector loops (src/kernels/simd.hpp), which the cap limits.
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/cpu_isa.hpp"
#include "core/log.hpp"
#include "dsinfer/engine.hpp"
#include "kernels/simd.hpp"

const char* dsinfer::cpu_kernel_isa() noexcept {
    detail::warn_unknown_cpu_isa_cap();
    return detail::fast::isa_name(detail::fast::active_isa());
}

const char* dsinfer::detail::host_cpu_isa() noexcept { return fast::isa_name(fast::host_isa()); }

void dsinfer::detail::warn_unknown_cpu_isa_cap() noexcept {
    const char* cap = std::getenv("DSINFER_MAX_CPU_ISA");
    fast::Isa isa{};
    if (cap == nullptr || fast::parse_isa(cap, isa)) return;
    try {
        static std::mutex mu;
        static std::string warned;  // the last value warned about
        {
            std::lock_guard<std::mutex> lock(mu);
            if (warned == cap) return;
            warned = cap;
        }
        process_logger().logf(LogLevel::warning,
                              "environment variable DSINFER_MAX_CPU_ISA='{}' is not a level "
                              "(baseline, avx2 or avx512): ignored, the kernels run at {}; an "
                              "engine refuses to load until it is fixed or unset",
                              cap, fast::isa_name(fast::active_isa()));
    } catch (...) {
    }
}

dsinfer::Status dsinfer::detail::check_cpu_isa_cap() noexcept {
    const char* cap = std::getenv("DSINFER_MAX_CPU_ISA");
    fast::Isa isa{};
    if (cap == nullptr || fast::parse_isa(cap, isa)) return Status::ok();
    return Status::error(ErrorCode::invalid_argument, "environment variable DSINFER_MAX_CPU_ISA='",
                         cap, "': want baseline, avx2 or avx512 (or unset it)");
}
