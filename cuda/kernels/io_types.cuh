// cuda/kernels/io_types.cuh — storage <-> float conversions shared by the CUDA kernel families:
// Io<S>::raw is the stored bits (float, or the 16 bits of __half/__nv_bfloat16), ld widens to
// float, st rounds to nearest even.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace dsinfer::cuda {

template <class S> struct Io;
template <> struct Io<float> {
    using raw = float;
    static __device__ __forceinline__ float ld(raw r) { return r; }
    static __device__ __forceinline__ raw st(float f) { return f; }
};
template <> struct Io<__half> {
    using raw = unsigned short;
    static __device__ __forceinline__ float ld(raw r) { return __half2float(__ushort_as_half(r)); }
    static __device__ __forceinline__ raw st(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <> struct Io<__nv_bfloat16> {
    using raw = unsigned short;
    static __device__ __forceinline__ float ld(raw r) {
        return __bfloat162float(__ushort_as_bfloat16(r));
    }
    static __device__ __forceinline__ raw st(float f) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

}  // namespace dsinfer::cuda
