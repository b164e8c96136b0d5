// DynamicQuantizeLinear's vector loops per ISA (see dynamic_quant.hpp).
#include "cpu/fast/dynamic_quant.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail {
namespace {

using std::int64_t;

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_DQ_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))), apply_to = function)
#endif
namespace dq_w16 {
#define QD_W 16
#include "cpu/fast/dynamic_quant_loops.inc"
#undef QD_W
}  // namespace dq_w16
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
namespace dq_w8 {
#define QD_W 8
#include "cpu/fast/dynamic_quant_loops.inc"
#undef QD_W
}  // namespace dq_w8
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#else
#define DSINFER_DQ_X86 0
#endif

namespace dq_w4 {
#define QD_W 4
#include "cpu/fast/dynamic_quant_loops.inc"
#undef QD_W
}  // namespace dq_w4

using RangeFn = QuantRange (*)(const float*, int64_t) noexcept;

RangeFn range_loop() noexcept {
#if DSINFER_DQ_X86
    switch (fast::active_isa()) {
        case fast::Isa::avx512: return &dq_w16::range;
        case fast::Isa::avx2: return &dq_w8::range;
        case fast::Isa::baseline: break;
    }
#endif
    return &dq_w4::range;
}

}  // namespace

DynamicQuantizeFn dynamic_quantize_loop() noexcept {
#if DSINFER_DQ_X86
    switch (fast::active_isa()) {
        case fast::Isa::avx512: return &dq_w16::quantize;
        case fast::Isa::avx2: return &dq_w8::quantize;
        case fast::Isa::baseline: break;
    }
#endif
    return &dq_w4::quantize;
}

QuantRange dynamic_quant_range(const float* x, int64_t n) noexcept {
    // Chunks of 64 Ki values (exact whatever the split: min and max): BERT-base's [1024, 768]
    // activations are 12 chunks, which 2 or 3 threads share evenly (in chunks of 256 Ki they
    // were 3, two on one thread).
    constexpr int64_t kChunk = int64_t{1} << 16, kMaxChunks = 64;
    const RangeFn range = range_loop();
    QuantRange parts[kMaxChunks];
    const int64_t chunks = std::clamp<int64_t>((n + kChunk - 1) / kChunk, 1, kMaxChunks);
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
            parts[c] = range(x + b, e - b);
        }
    });
    QuantRange r;
    for (int64_t c = 0; c < chunks; ++c) r.merge(parts[c]);
    return r;
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
