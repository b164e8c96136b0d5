// DynamicQuantizeLinear's vector loops (range, quantize) compiled per ISA and picked at run time
// (fast::active_isa()), for the cpu kernels that quantize a float32 activation themselves
// (fast_qmatmul.cpp, fast_qconv.cpp's DynamicQuantizeConv). Bitwise the scalar forms of ops/quantize.hpp: the
// loops are src/cpu/fast/dynamic_quant_loops.inc (min/max exact; one IEEE division, rounding half
// to even by 1.5 * 2^23).
//
// Internal (namespace dsinfer::detail). Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "ops/quantize.hpp"

namespace dsinfer::detail {

/// y[i] = dynamic_quantize_value(x[i], p) for i in [0, n); p.usable. One thread.
using DynamicQuantizeFn = void (*)(const float* x, std::int64_t n, const DynamicQuantParams& p,
                                   std::uint8_t* y) noexcept;

/// The quantize loop of the active ISA.
DynamicQuantizeFn dynamic_quantize_loop() noexcept;

/// DynamicQuantizeLinear's range of x[0, n) (QuantRange's rules), over the calling thread's
/// budget in fixed chunks (min/max are exact: the split changes nothing).
QuantRange dynamic_quant_range(const float* x, std::int64_t n) noexcept;

}  // namespace dsinfer::detail
