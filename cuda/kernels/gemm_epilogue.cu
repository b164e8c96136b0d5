// The elementwise passes around the cuBLASLt GEMMs (see gemm_epilogue.hpp): bias + activation
// with the reference kernels' formulas (src/ops/activation.hpp), and Gemm's C broadcast.
// Grid-stride loops over 64-bit indices; no vectorized access (any size and alignment).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.hpp"
#include "gemm_epilogue.hpp"  // this directory (not src/kernels/)

namespace dsinfer::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// The reference formulas (NaN propagates through every branch).
__device__ __forceinline__ float activate(float x, EpilogueActParams a) {
    switch (a.kind) {
        case EpilogueAct::none: return x;
        case EpilogueAct::relu: return x < 0.f ? 0.f : x;
        case EpilogueAct::leaky_relu: return x < 0.f ? a.alpha * x : x;
        case EpilogueAct::sigmoid:
            return x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x));
        case EpilogueAct::tanh: return tanhf(x);
        case EpilogueAct::clip: return isnan(x) ? x : fminf(fmaxf(x, a.alpha), a.beta);
        case EpilogueAct::hard_swish:
            return isnan(x) ? x : x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
        case EpilogueAct::gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));
        case EpilogueAct::gelu_tanh: {
            const float k = 0.79788456080286535588f;  // sqrt(2 / pi)
            return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
        }
    }
    return x;
}

template <class T>
__global__ void bias_act_kernel(T* __restrict__ y, std::int64_t total, const T* __restrict__ bias,
                                std::int64_t bias_len, EpilogueActParams act) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < total; i += stride) {
        float v = to_f(y[i]);
        if (bias != nullptr) v += to_f(bias[i % bias_len]);
        y[i] = from_f<T>(activate(v, act));
    }
}

template <class T>
__global__ void fill_broadcast_kernel(T* __restrict__ y, std::int64_t m, std::int64_t n,
                                      const T* __restrict__ c, std::int64_t cm, std::int64_t cn,
                                      float scale) {
    const std::int64_t total = m * n;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < total; i += stride) {
        if (c == nullptr) {
            y[i] = from_f<T>(0.f);
            continue;
        }
        const std::int64_t r = i / n, col = i - r * n;
        const std::int64_t ci = (cm == 1 ? 0 : r) * cn + (cn == 1 ? 0 : col);
        y[i] = from_f<T>(scale * to_f(c[ci]));
    }
}

template <class T>
Status launch_bias_act(void* y, std::int64_t total, const void* bias, std::int64_t bias_len,
                       EpilogueActParams act, cudaStream_t stream) noexcept {
    bias_act_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(y), total, static_cast<const T*>(bias), bias_len, act);
    return launch_status("gemm bias/activation epilogue");
}

template <class T>
Status launch_fill(void* y, std::int64_t m, std::int64_t n, const void* c, std::int64_t cm,
                   std::int64_t cn, float scale, cudaStream_t stream) noexcept {
    fill_broadcast_kernel<T><<<grid_for(m * n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(y), m, n, static_cast<const T*>(c), cm, cn, scale);
    return launch_status("gemm C broadcast");
}

}  // namespace

Status apply_activation(void* y, DType dtype, std::int64_t total, const void* bias,
                        std::int64_t bias_len, EpilogueActParams act,
                        cudaStream_t stream) noexcept {
    if (total <= 0) return Status::ok();
    if (bias != nullptr && bias_len <= 0)
        return Status(ErrorCode::internal,
                      "gemm epilogue: bias of length 0 for a non-empty output");
    if (bias == nullptr && act.kind == EpilogueAct::none) return Status::ok();
    switch (dtype) {
        case DType::f32: return launch_bias_act<float>(y, total, bias, bias_len, act, stream);
        case DType::f16: return launch_bias_act<__half>(y, total, bias, bias_len, act, stream);
        case DType::bf16:
            return launch_bias_act<__nv_bfloat16>(y, total, bias, bias_len, act, stream);
        default: break;
    }
    return Status(ErrorCode::internal,
                  "gemm epilogue: unsupported element type " + std::string(dtype_name(dtype)));
}

Status fill_broadcast(void* y, DType dtype, std::int64_t m, std::int64_t n, const void* c,
                      std::int64_t cm, std::int64_t cn, float scale, cudaStream_t stream) noexcept {
    if (m <= 0 || n <= 0) return Status::ok();
    if (c != nullptr && !((cm == 1 || cm == m) && (cn == 1 || cn == n)))
        return Status(ErrorCode::internal, "gemm C broadcast: C [" + std::to_string(cm) + "," +
                                               std::to_string(cn) + "] does not broadcast to [" +
                                               std::to_string(m) + "," + std::to_string(n) + "]");
    switch (dtype) {
        case DType::f32: return launch_fill<float>(y, m, n, c, cm, cn, scale, stream);
        case DType::f16: return launch_fill<__half>(y, m, n, c, cm, cn, scale, stream);
        case DType::bf16: return launch_fill<__nv_bfloat16>(y, m, n, c, cm, cn, scale, stream);
        default: break;
    }
    return Status(ErrorCode::internal,
                  "gemm C broadcast: unsupported element type " + std::string(dtype_name(dtype)));
}

}  // namespace dsinfer::cuda
