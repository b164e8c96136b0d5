// Compiles simd_ops.inc once per ISA level and picks the table for this CPU at run time (the
// public dsinfer::cpu_kernel_isa() and the cap's check are the CPU room's: src/cpu/cpu_isa.cpp).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/simd.hpp"
#include "dsinfer/dtype.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_FAST_X86 1
#include <immintrin.h>
#else
#define DSINFER_FAST_X86 0
#endif

// The lambdas' function-pointer thunks (never used) and GCC 12's own _mm512_undefined_ps trip
// these two warnings; neither says anything about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dsinfer::detail::fast {

#if DSINFER_FAST_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))), apply_to = function)
#endif
namespace avx512 {
#define DSINFER_SIMD_W 64
#define DSINFER_SIMD_LEVEL 2
#include "kernels/simd_ops.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif
namespace avx2 {
#define DSINFER_SIMD_W 32
#define DSINFER_SIMD_LEVEL 1
#include "kernels/simd_ops.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#endif

namespace baseline {
#define DSINFER_SIMD_W 16
#define DSINFER_SIMD_LEVEL 0
#include "kernels/simd_ops.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace baseline

namespace {

Isa detect_host_isa() noexcept {
    Isa best = Isa::baseline;
#if DSINFER_FAST_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::avx2;
    if (best == Isa::avx2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        best = Isa::avx512;
#endif
    return best;
}

Isa detect_isa() noexcept {
    Isa best = host_isa();
    Isa limit = best;
    if (parse_isa(std::getenv("DSINFER_MAX_CPU_ISA"), limit) &&
        static_cast<int>(limit) < static_cast<int>(best))
        best = limit;
    return best;
}

struct Tables {
    Isa isa;
    SimdOps ops;
};

const Tables& tables() noexcept {
    static const Tables t = [] {
        const Isa isa = detect_isa();
#if DSINFER_FAST_X86
        if (isa == Isa::avx512) return Tables{isa, avx512::make_ops(isa)};
        if (isa == Isa::avx2) return Tables{isa, avx2::make_ops(isa)};
#endif
        return Tables{isa, baseline::make_ops(isa)};
    }();
    return t;
}

}  // namespace

const char* isa_name(Isa isa) noexcept {
    switch (isa) {
        case Isa::avx512: return "avx512";
        case Isa::avx2: return "avx2";
        case Isa::baseline: return "baseline";
    }
    return "?";
}

Isa host_isa() noexcept {
    static const Isa isa = detect_host_isa();
    return isa;
}

bool parse_isa(const char* name, Isa& out) noexcept {
    if (name == nullptr) return false;
    const std::string_view n(name);
    if (n == "baseline") out = Isa::baseline;
    else if (n == "avx2") out = Isa::avx2;
    else if (n == "avx512") out = Isa::avx512;
    else return false;
    return true;
}

Isa active_isa() noexcept { return tables().isa; }
const SimdOps& simd() noexcept { return tables().ops; }

}  // namespace dsinfer::detail::fast

#pragma GCC diagnostic pop
