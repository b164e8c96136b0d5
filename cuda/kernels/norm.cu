// cuda/kernels/norm.cu — CUDA normalization kernels: LayerNormalization (ai.onnx 17+ and
// com.dsinfer), SkipLayerNormalization (com.dsinfer, float32), Softmax / LogSoftmax (every
// opset: from 13 one axis, before 13 the input coerced to 2-D at `axis`) and
// BatchNormalization (inference, opset 9+).
//
// Semantics are the reference kernels' (src/cpu/reference/nn_norm.cpp, nn_softmax.cpp,
// fused.cpp); prepare() is theirs (CudaKernel). Everything is computed in float; storage is
// float32, float16 or bfloat16.
//
// Row kernels (LayerNorm, SkipLayerNorm, last-axis Softmax):
//   * rows of <= 1024 elements: one warp per row, the row held in registers (NPL elements per
//     lane, NPL a power of two picked from the row length), 16-byte (or narrower) vector
//     loads/stores when every row pointer is aligned and the length a multiple of the vector;
//   * longer rows: one block (512 threads) per row, three passes, the row cached as float in
//     dynamic shared memory when it fits (<= 12288 elements), else re-read (L2).
// LayerNorm statistics are two-pass (mean, then the mean of squared deviations), like the
// reference. Softmax over a non-last axis (or the strided case) uses one thread per column.
//
// Constants (initializers) for Scale/B/Bias/BatchNorm parameters are on the device as float
// from creation (the host copies are released), as forms in the engine's weight store: a
// float32 constant's plain copy ("onnx", shared with the executor and other kernels), a float
// copy of a float16/bfloat16 one ("cuda.float32"), BatchNorm's coefficients from its four
// parameters and epsilon ("cuda.batch_norm.ab(...)", derived). Non-constant parameters are read
// from the input tensors (any float storage type) at run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda_common.hpp"
#include "io_types.cuh"  // this directory (not src/kernels/)
#include "dsinfer/ops.hpp"

namespace dsinfer::cuda {
namespace {

using std::int64_t;

// ---- storage types ------------------------------------------------------------------------


// Device dtype codes for tensors read/written through a runtime switch (parameters, stats).
enum DtCode : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

int dt_code(DType dt) noexcept {
    switch (dt) {
        case DType::f16: return kF16;
        case DType::bf16: return kBF16;
        default: return kF32;
    }
}
bool is_storage_float(DType dt) noexcept {
    return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16;
}

__device__ __forceinline__ float load_any(const void* p, int dt, int64_t i) {
    switch (dt) {
        case kF16: return Io<__half>::ld(static_cast<const unsigned short*>(p)[i]);
        case kBF16: return Io<__nv_bfloat16>::ld(static_cast<const unsigned short*>(p)[i]);
        default: return static_cast<const float*>(p)[i];
    }
}
__device__ __forceinline__ void store_any(void* p, int dt, int64_t i, float v) {
    switch (dt) {
        case kF16: static_cast<unsigned short*>(p)[i] = Io<__half>::st(v); break;
        case kBF16: static_cast<unsigned short*>(p)[i] = Io<__nv_bfloat16>::st(v); break;
        default: static_cast<float*>(p)[i] = v; break;
    }
}

template <class T> struct Tag { using type = T; };

/// Calls f(Tag<S>{}) with S the device storage type of dt (f32/f16/bf16).
template <class F>
Status dispatch_storage(DType dt, F&& f) {
    switch (dt) {
        case DType::f32: return f(Tag<float>{});
        case DType::f16: return f(Tag<__half>{});
        case DType::bf16: return f(Tag<__nv_bfloat16>{});
        default:
            return Status::error(ErrorCode::unsupported, "element type ", dtype_name(dt),
                                 " is not supported by the CUDA kernel");
    }
}

/// Host: a float copy of a float-type host tensor (f32/f16/bf16/f64).
std::vector<float> to_float_vector(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.num_elements()));
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
        switch (t.dtype()) {
            case DType::f32: v[static_cast<std::size_t>(i)] = t.data_unchecked<float>()[i]; break;
            case DType::f16:
                v[static_cast<std::size_t>(i)] = static_cast<float>(t.data_unchecked<float16>()[i]);
                break;
            case DType::bf16:
                v[static_cast<std::size_t>(i)] = static_cast<float>(t.data_unchecked<bfloat16>()[i]);
                break;
            case DType::f64:
                v[static_cast<std::size_t>(i)] = static_cast<float>(t.data_unchecked<double>()[i]);
                break;
            default: v[static_cast<std::size_t>(i)] = 0.f; break;
        }
    }
    return v;
}

/// The bytes of float values (a device form's host side).
std::vector<unsigned char> float_bytes(const std::vector<float>& v) {
    std::vector<unsigned char> b(v.size() * sizeof(float));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

/// Host: the device copy of a constant as float (the weight store's: its plain copy when it is
/// float32, else a float32 conversion; empty for an empty tensor).
StatusOr<DeviceConstant> constant_as_float(const KernelCreateContext& ctx, WeightStore& store,
                                           const Tensor& t) {
    if (t.num_elements() == 0) return DeviceConstant{};
    if (t.dtype() == DType::f32) return device_constant(ctx, store, t);
    return device_form(ctx, store, t, WeightKind::packed, "cuda.float32",
                       [&]() -> StatusOr<std::vector<unsigned char>> {
                           return float_bytes(to_float_vector(t));
                       });
}

bool aligned(const void* p, std::size_t a) noexcept {
    return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

// ---- reductions ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {  // NaN-ignoring (fmaxf)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/// Sum over the block; every thread gets the total. `red` is __shared__ float[32]. Must be
/// called by every thread of the block.
__device__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    __syncthreads();  // red may still be read by a previous call
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    const int nw = static_cast<int>((blockDim.x + 31) >> 5);
    for (int w = 0; w < nw; ++w) t += red[w];
    return t;
}
__device__ float block_max(float v, float* red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    const int nw = static_cast<int>((blockDim.x + 31) >> 5);
    for (int w = 0; w < nw; ++w) t = fmaxf(t, red[w]);
    return t;
}

// ---- register rows (warp per row) ----------------------------------------------------------

template <class R, int N>
struct alignas(sizeof(R) * N) Vec {
    R v[N];
};

/// Vector width (elements) of a warp row with NPL elements per lane.
template <class S, int NPL>
constexpr int vec_width() {
    constexpr int w = static_cast<int>(16 / sizeof(typename Io<S>::raw));
    return w < NPL ? w : NPL;
}

/// Column of the k-th register element of `lane`: vectorized rows interleave chunks of VW
/// contiguous elements across lanes; scalar rows interleave single elements.
template <int VW>
__device__ __forceinline__ int64_t col_of(int k, int lane, bool vec) {
    return vec ? (static_cast<int64_t>(k / VW) * 32 + lane) * VW + (k % VW)
               : static_cast<int64_t>(k) * 32 + lane;
}

template <class S, int NPL>
__device__ __forceinline__ void load_row(const typename Io<S>::raw* row, int64_t cols, bool vec,
                                         int lane, float fill, float (&v)[NPL]) {
    using R = typename Io<S>::raw;
    constexpr int VW = vec_width<S, NPL>();
    if (vec) {
#pragma unroll
        for (int c = 0; c < NPL / VW; ++c) {
            const int64_t j0 = (static_cast<int64_t>(c) * 32 + lane) * VW;
            if (j0 < cols) {
                const Vec<R, VW> t = *reinterpret_cast<const Vec<R, VW>*>(row + j0);
#pragma unroll
                for (int w = 0; w < VW; ++w) v[c * VW + w] = Io<S>::ld(t.v[w]);
            } else {
#pragma unroll
                for (int w = 0; w < VW; ++w) v[c * VW + w] = fill;
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < NPL; ++k) {
            const int64_t j = static_cast<int64_t>(k) * 32 + lane;
            v[k] = j < cols ? Io<S>::ld(row[j]) : fill;
        }
    }
}

template <class S, int NPL>
__device__ __forceinline__ void store_row(typename Io<S>::raw* row, int64_t cols, bool vec,
                                          int lane, const float (&v)[NPL]) {
    using R = typename Io<S>::raw;
    constexpr int VW = vec_width<S, NPL>();
    if (vec) {
#pragma unroll
        for (int c = 0; c < NPL / VW; ++c) {
            const int64_t j0 = (static_cast<int64_t>(c) * 32 + lane) * VW;
            if (j0 < cols) {
                Vec<R, VW> t;
#pragma unroll
                for (int w = 0; w < VW; ++w) t.v[w] = Io<S>::st(v[c * VW + w]);
                *reinterpret_cast<Vec<R, VW>*>(row + j0) = t;
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < NPL; ++k) {
            const int64_t j = static_cast<int64_t>(k) * 32 + lane;
            if (j < cols) row[j] = Io<S>::st(v[k]);
        }
    }
}

/// Elements per lane for a warp row of n elements (n <= 1024).
int npl_for(int64_t n) noexcept {
    if (n <= 32) return 1;
    if (n <= 64) return 2;
    if (n <= 128) return 4;
    if (n <= 256) return 8;
    if (n <= 512) return 16;
    return 32;
}

/// Calls f(std::integral_constant<int, NPL>{}) for the NPL of a row length.
template <class F>
Status dispatch_npl(int64_t n, F&& f) {
    switch (npl_for(n)) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 4: return f(std::integral_constant<int, 4>{});
        case 8: return f(std::integral_constant<int, 8>{});
        case 16: return f(std::integral_constant<int, 16>{});
        default: return f(std::integral_constant<int, 32>{});
    }
}

constexpr int kWarpRowThreads = 128;   // 4 rows per block
constexpr int kBlockRowThreads = 512;  // one row per block
constexpr int64_t kMaxWarpRow = 1024;
constexpr int64_t kMaxCachedRow = 12288;  // 48 KiB of float

unsigned rows_grid(int64_t rows, int rows_per_block) noexcept {
    return grid_for(rows, rows_per_block);
}

// ---- LayerNorm / SkipLayerNorm ---------------------------------------------------------------

/// A parameter tensor (Scale, B, Bias) broadcast against the rows: how element (row, j) finds
/// its value. mode 0: absent; 1: offset j (the parameter spans exactly the normalized dims);
/// 2: a single value; 3: general broadcast (dims/strides over X's dims, 0 = broadcast).
struct ParamDesc {
    const void* p = nullptr;
    int dt = kF32;
    int mode = 0;
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    int64_t strides[kMaxRank] = {};
};

/// Modes 2 and 3 (rare: scalar or odd broadcast parameters), out of line to keep the
/// unrolled row loops small.
__device__ __noinline__ float param_slow(const ParamDesc& d, int64_t row, int64_t cols,
                                         int64_t j) {
    if (d.mode == 2) return load_any(d.p, d.dt, 0);
    int64_t e = row * cols + j, off = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
        const int64_t n = d.dims[k];
        const int64_t ix = n > 0 ? e % n : 0;
        e = n > 0 ? e / n : 0;
        off += ix * d.strides[k];
    }
    return load_any(d.p, d.dt, off);
}

__device__ __forceinline__ float param_at(const ParamDesc& d, int64_t row, int64_t cols,
                                          int64_t j, float dflt) {
    if (d.mode == 1) return load_any(d.p, d.dt, j);
    if (d.mode == 0) return dflt;
    return param_slow(d, row, cols, j);
}

/// Host: the ParamDesc of a parameter of shape `ps` broadcast to X of shape `xs`, normalized
/// from dim `a` on. The reference prepare has checked that ps broadcasts to xs.
ParamDesc make_param(const void* p, DType dt, const Shape& ps, const Shape& xs, int a) noexcept {
    ParamDesc d;
    d.p = p;
    d.dt = dt_code(dt);
    if (p == nullptr) return d;
    const int rank = xs.rank();
    const int off = rank - ps.rank();
    int64_t stride = 1;
    bool contiguous = true;
    for (int k = rank - 1; k >= 0; --k) {
        const int64_t pd = k >= off ? ps[k - off] : 1;
        const int64_t xd = xs[k];
        d.dims[k] = xd;
        d.strides[k] = (pd == 1) ? 0 : stride;
        stride *= pd;
        if (k >= a) {
            if (pd != xd) contiguous = false;
        } else if (pd != 1 && xd != 1) {
            contiguous = false;
        }
    }
    d.rank = rank;
    if (ps.num_elements() == 1)
        d.mode = 2;
    else if (contiguous)
        d.mode = 1;
    else
        d.mode = 3;
    return d;
}

struct LnArgs {
    const void* x = nullptr;
    const void* skip = nullptr;  // SkipLayerNorm: added to x (same storage type)
    void* y = nullptr;
    void* sum_out = nullptr;     // SkipLayerNorm output 1 (same storage type), or null
    void* mean_out = nullptr;    // LayerNorm output 1 (stat_dt), or null
    void* inv_out = nullptr;     // LayerNorm output 2 (stat_dt), or null
    int stat_dt = kF32;
    ParamDesc gamma, beta, bias;
    int64_t rows = 0, cols = 0;
    float eps = 1e-5f;
};

template <class S, int NPL>
__global__ void __launch_bounds__(kWarpRowThreads) ln_warp_kernel(const __grid_constant__ LnArgs a, bool vec) {
    using R = typename Io<S>::raw;
    constexpr int VW = vec_width<S, NPL>();
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int wpb = static_cast<int>(blockDim.x >> 5);
    const int64_t cols = a.cols;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5); row < a.rows;
         row += static_cast<int64_t>(gridDim.x) * wpb) {
        float v[NPL];
        load_row<S, NPL>(static_cast<const R*>(a.x) + row * cols, cols, vec, lane, 0.f, v);
        if (a.skip != nullptr) {
            float s[NPL];
            load_row<S, NPL>(static_cast<const R*>(a.skip) + row * cols, cols, vec, lane, 0.f, s);
#pragma unroll
            for (int k = 0; k < NPL; ++k) v[k] += s[k];
        }
        if (a.bias.mode != 0) {
#pragma unroll
            for (int k = 0; k < NPL; ++k) {
                const int64_t j = col_of<VW>(k, lane, vec);
                if (j < cols) v[k] += param_at(a.bias, row, cols, j, 0.f);
            }
        }
        float s1 = 0.f;
#pragma unroll
        for (int k = 0; k < NPL; ++k) s1 += v[k];  // padding is 0
        const float mean = cols > 0 ? warp_sum(s1) / static_cast<float>(cols) : 0.f;
        float s2 = 0.f;
#pragma unroll
        for (int k = 0; k < NPL; ++k) {
            const float dlt = v[k] - mean;
            if (col_of<VW>(k, lane, vec) < cols) s2 += dlt * dlt;
        }
        const float var = cols > 0 ? warp_sum(s2) / static_cast<float>(cols) : 0.f;
        const float inv = 1.f / sqrtf(var + a.eps);
        if (a.sum_out != nullptr)
            store_row<S, NPL>(static_cast<R*>(a.sum_out) + row * cols, cols, vec, lane, v);
        float o[NPL];
#pragma unroll
        for (int k = 0; k < NPL; ++k) {
            const int64_t j = col_of<VW>(k, lane, vec);
            float r = 0.f;
            if (j < cols) {
                r = (v[k] - mean) * inv * param_at(a.gamma, row, cols, j, 1.f);
                if (a.beta.mode != 0) r += param_at(a.beta, row, cols, j, 0.f);
            }
            o[k] = r;
        }
        store_row<S, NPL>(static_cast<R*>(a.y) + row * cols, cols, vec, lane, o);
        if (lane == 0) {
            if (a.mean_out != nullptr) store_any(a.mean_out, a.stat_dt, row, mean);
            if (a.inv_out != nullptr) store_any(a.inv_out, a.stat_dt, row, inv);
        }
    }
}

template <class S>
__device__ __forceinline__ float ln_input(const LnArgs& a, int64_t row, int64_t j) {
    using R = typename Io<S>::raw;
    const int64_t i = row * a.cols + j;
    float v = Io<S>::ld(static_cast<const R*>(a.x)[i]);
    if (a.skip != nullptr) v += Io<S>::ld(static_cast<const R*>(a.skip)[i]);
    if (a.bias.mode != 0) v += param_at(a.bias, row, a.cols, j, 0.f);
    return v;
}

/// One block per row (grid-stride over rows); `cache`: the row fits the dynamic shared memory.
/// Each thread only touches its own columns of the cache, so no barrier guards it.
template <class S>
__global__ void __launch_bounds__(kBlockRowThreads) ln_block_kernel(const __grid_constant__ LnArgs a, bool cache) {
    using R = typename Io<S>::raw;
    extern __shared__ float row_cache[];
    __shared__ float red[32];
    const int64_t cols = a.cols;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        float s1 = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float v = ln_input<S>(a, row, j);
            if (cache) row_cache[j] = v;
            s1 += v;
        }
        const float mean = cols > 0 ? block_sum(s1, red) / static_cast<float>(cols) : 0.f;
        float s2 = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float dlt = (cache ? row_cache[j] : ln_input<S>(a, row, j)) - mean;
            s2 += dlt * dlt;
        }
        const float var = cols > 0 ? block_sum(s2, red) / static_cast<float>(cols) : 0.f;
        const float inv = 1.f / sqrtf(var + a.eps);
        R* y = static_cast<R*>(a.y) + row * cols;
        R* so = a.sum_out != nullptr ? static_cast<R*>(a.sum_out) + row * cols : nullptr;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float v = cache ? row_cache[j] : ln_input<S>(a, row, j);
            if (so != nullptr) so[j] = Io<S>::st(v);
            float r = (v - mean) * inv * param_at(a.gamma, row, cols, j, 1.f);
            if (a.beta.mode != 0) r += param_at(a.beta, row, cols, j, 0.f);
            y[j] = Io<S>::st(r);
        }
        if (threadIdx.x == 0) {
            if (a.mean_out != nullptr) store_any(a.mean_out, a.stat_dt, row, mean);
            if (a.inv_out != nullptr) store_any(a.inv_out, a.stat_dt, row, inv);
        }
    }
}

template <class S>
Status launch_layer_norm(const LnArgs& a, cudaStream_t stream) {
    using R = typename Io<S>::raw;
    if (a.rows == 0) return Status::ok();
    if (a.cols <= kMaxWarpRow) {
        return dispatch_npl(a.cols, [&](auto npl) -> Status {
            constexpr int NPL = decltype(npl)::value;
            constexpr int VW = vec_width<S, NPL>();
            constexpr std::size_t vb = sizeof(R) * VW;
            const bool vec = VW > 1 && a.cols % VW == 0 && aligned(a.x, vb) &&
                             aligned(a.skip, vb) && aligned(a.y, vb) && aligned(a.sum_out, vb);
            ln_warp_kernel<S, NPL><<<rows_grid(a.rows, kWarpRowThreads / 32), kWarpRowThreads, 0,
                                     stream>>>(a, vec);
            return launch_status("LayerNorm (warp rows)");
        });
    }
    const bool cache = a.cols <= kMaxCachedRow;
    const std::size_t smem = cache ? static_cast<std::size_t>(a.cols) * sizeof(float) : 0;
    ln_block_kernel<S><<<rows_grid(a.rows, 1), kBlockRowThreads, smem, stream>>>(a, cache);
    return launch_status("LayerNorm (block rows)");
}

/// LayerNormalization (ai.onnx 17+, com.dsinfer): X normalized over dims [axis, rank).
class LayerNormCuda final : public CudaKernel {
public:
    LayerNormCuda(std::unique_ptr<Kernel> ref, int64_t axis, float eps, DType stash,
                  DeviceConstant scale, DeviceConstant bias, std::uint64_t released)
        : CudaKernel(std::move(ref)), axis_(axis), eps_(eps), stash_(stash),
          scale_(std::move(scale)), bias_(std::move(bias)), released_(released) {}

    std::uint64_t released_constant_inputs() const noexcept override { return released_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        const int a = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
        if (a < 0 || a >= rank)
            return Status(ErrorCode::invalid_argument, "LayerNormalization: axis out of range");
        LnArgs args;
        args.rows = x.shape.size_between(0, a);
        args.cols = x.shape.size_between(a, rank);
        args.eps = eps_;
        args.x = x.raw;
        args.y = ctx.output(0).raw;
        const bool stats = ctx.has_output(1) || ctx.has_output(2);
        if (args.rows == 0 || (args.cols == 0 && !stats)) return Status::ok();
        if (ctx.has_output(1)) args.mean_out = ctx.output(1).raw;
        if (ctx.has_output(2)) args.inv_out = ctx.output(2).raw;
        args.stat_dt = dt_code(stash_);
        args.gamma = param(ctx, 1, scale_, x.shape, a);
        if (ctx.has_input(2)) args.beta = param(ctx, 2, bias_, x.shape, a);
        return dispatch_storage(x.dtype, [&](auto tag) -> Status {
            using S = typename decltype(tag)::type;
            return launch_layer_norm<S>(args, stream_of(ctx));
        });
    }

private:
    ParamDesc param(const RunContext& ctx, int i, const DeviceConstant& uploaded, const Shape& xs,
                    int a) const noexcept {
        const TensorView& t = ctx.input(i);
        if ((released_ >> i) & 1u) return make_param(uploaded.get(), DType::f32, t.shape, xs, a);
        return make_param(t.raw, t.dtype, t.shape, xs, a);
    }

    int64_t axis_;
    float eps_;
    DType stash_;
    DeviceConstant scale_, bias_;
    std::uint64_t released_;
};

/// Declared dtype of input i when known.
std::optional<DType> input_dtype(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    if (v == nullptr) return std::nullopt;
    if (v->dtype) return v->dtype;
    if (const Tensor* c = ctx.constant_input(i)) return c->dtype();
    return std::nullopt;
}

StatusOr<std::unique_ptr<Kernel>> make_layer_norm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, n.attr_or<int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(float eps, n.attr_or<float>("epsilon", 1e-5f));
    DSINFER_ASSIGN_OR_RETURN(int64_t stash, n.attr_or<int64_t>("stash_type", 1));
    DType sd = DType::f32;
    if (ctx.has_output(1) || ctx.has_output(2)) {
        if (stash == 10) sd = DType::f16;
        else if (stash == 16) sd = DType::bf16;
        else if (stash != 1)
            return Status::error(ErrorCode::unsupported, "CUDA LayerNormalization: Mean/InvStdDev ",
                                 "outputs of stash_type ", stash, " are not supported");
    }
    for (int i = 1; i <= 2; ++i) {
        if (!ctx.has_input(i)) continue;
        const auto dt = input_dtype(ctx, i);
        if (!dt || !is_storage_float(*dt))
            return Status::error(ErrorCode::unsupported, "CUDA LayerNormalization: input ", i,
                                 " must be float32, float16 or bfloat16");
    }
    if (const auto dt = input_dtype(ctx, 0); !dt || !is_storage_float(*dt))
        return Status::error(ErrorCode::unsupported, "CUDA LayerNormalization: X type");
    DeviceConstant bufs[3];
    std::uint64_t released = 0;
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    for (int i = 1; i <= 2; ++i) {
        const Tensor* c = ctx.constant_input(i);
        if (c == nullptr || !ctx.has_input(i) || c->num_elements() == 0) continue;
        DSINFER_ASSIGN_OR_RETURN(bufs[i], constant_as_float(ctx, *store, *c));
        released |= std::uint64_t{1} << i;
    }
    return make_with_fallback<LayerNormCuda>(ctx, axis, eps, sd, std::move(bufs[1]),
                                             std::move(bufs[2]), released);
}

/// SkipLayerNormalization (com.dsinfer): float32, float16 and bfloat16 (all inputs of one type,
/// like the reference); sums and statistics in float.
class SkipLayerNormCuda final : public CudaKernel {
public:
    SkipLayerNormCuda(std::unique_ptr<Kernel> ref, float eps, DeviceConstant gamma,
                      DeviceConstant beta, DeviceConstant bias, std::uint64_t released)
        : CudaKernel(std::move(ref)), eps_(eps), gamma_(std::move(gamma)),
          beta_(std::move(beta)), bias_(std::move(bias)), released_(released) {}

    std::uint64_t released_constant_inputs() const noexcept override { return released_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        if (rank < 1)
            return Status(ErrorCode::invalid_argument, "SkipLayerNormalization: X has rank 0");
        LnArgs args;
        args.cols = x.shape[rank - 1];
        args.rows = args.cols == 0 ? 0 : x.num_elements() / args.cols;
        if (args.rows == 0) return Status::ok();
        args.eps = eps_;
        args.x = x.raw;
        args.skip = ctx.input(1).raw;
        args.y = ctx.output(0).raw;
        if (ctx.has_output(1)) args.sum_out = ctx.output(1).raw;
        args.gamma = param(ctx, 2, gamma_, x.shape);
        if (ctx.has_input(3)) args.beta = param(ctx, 3, beta_, x.shape);
        if (ctx.has_input(4)) args.bias = param(ctx, 4, bias_, x.shape);
        return dispatch_storage(x.dtype, [&](auto tag) -> Status {
            using S = typename decltype(tag)::type;
            return launch_layer_norm<S>(args, stream_of(ctx));
        });
    }

private:
    ParamDesc param(const RunContext& ctx, int i, const DeviceConstant& uploaded,
                    const Shape& xs) const noexcept {
        const TensorView& t = ctx.input(i);
        if ((released_ >> i) & 1u) return make_param(uploaded.get(), DType::f32, t.shape, xs, xs.rank() - 1);
        return make_param(t.raw, t.dtype, t.shape, xs, xs.rank() - 1);
    }

    float eps_;
    DeviceConstant gamma_, beta_, bias_;
    std::uint64_t released_;
};

StatusOr<std::unique_ptr<Kernel>> make_skip_layer_norm(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() < 3 || ctx.num_inputs() > 5 || ctx.num_outputs() < 1 ||
        ctx.num_outputs() > 2)
        return Status::error(ErrorCode::unsupported,  // the reference reports the error
                             "CUDA SkipLayerNormalization: unexpected input/output count");
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        if (!ctx.has_input(i)) continue;
        const auto dt = input_dtype(ctx, i);
        const auto dt0 = input_dtype(ctx, 0);
        if (!dt || !dt0 || *dt != *dt0 ||
            (*dt != DType::f32 && *dt != DType::f16 && *dt != DType::bf16))
            return Status::error(ErrorCode::unsupported,
                                 "CUDA SkipLayerNormalization takes float32, float16 or bfloat16 "
                                 "inputs of one type (input ", i, ")");
    }
    DeviceConstant bufs[5];
    std::uint64_t released = 0;
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    for (int i = 2; i < ctx.num_inputs() && i <= 4; ++i) {
        const Tensor* c = ctx.constant_input(i);
        if (c == nullptr || !ctx.has_input(i) || c->num_elements() == 0) continue;
        DSINFER_ASSIGN_OR_RETURN(bufs[i], constant_as_float(ctx, *store, *c));
        released |= std::uint64_t{1} << i;
    }
    return make_with_fallback<SkipLayerNormCuda>(ctx, eps, std::move(bufs[2]), std::move(bufs[3]),
                                                 std::move(bufs[4]), released);
}

// ---- Softmax / LogSoftmax ---------------------------------------------------------------------
//
// Per slice (the reference's run_slice): a NaN anywhere gives NaN everywhere; the shift is the
// maximum unless it is infinite (then 0, so an all -inf slice gives 0/0 = NaN like the
// reference); softmax = exp(x - shift) / sum, log-softmax = x - shift - log(sum).

struct SmArgs {
    const void* x = nullptr;
    void* y = nullptr;
    int64_t outer = 0, n = 0, inner = 0;
    bool log = false;
};

template <class S, int NPL>
__global__ void __launch_bounds__(kWarpRowThreads) softmax_warp_kernel(const SmArgs a, bool vec) {
    using R = typename Io<S>::raw;
    constexpr int VW = vec_width<S, NPL>();
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int wpb = static_cast<int>(blockDim.x >> 5);
    const int64_t n = a.n;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * wpb + (threadIdx.x >> 5);
         row < a.outer; row += static_cast<int64_t>(gridDim.x) * wpb) {
        float v[NPL];
        load_row<S, NPL>(static_cast<const R*>(a.x) + row * n, n, vec, lane, -INFINITY, v);
        bool nan = false;
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < NPL; ++k) {
            nan |= isnan(v[k]);
            mx = fmaxf(mx, v[k]);
        }
        nan = __any_sync(0xffffffffu, nan);
        mx = warp_max(mx);
        float o[NPL];
        if (nan) {
#pragma unroll
            for (int k = 0; k < NPL; ++k) o[k] = NAN;
        } else {
            const float shift = isinf(mx) ? 0.f : mx;
            float sum = 0.f;
#pragma unroll
            for (int k = 0; k < NPL; ++k)
                if (col_of<VW>(k, lane, vec) < n) sum += expf(v[k] - shift);
            sum = warp_sum(sum);
            const float lse = logf(sum);
#pragma unroll
            for (int k = 0; k < NPL; ++k)
                o[k] = a.log ? v[k] - shift - lse : expf(v[k] - shift) / sum;
        }
        store_row<S, NPL>(static_cast<R*>(a.y) + row * n, n, vec, lane, o);
    }
}

template <class S>
__global__ void __launch_bounds__(kBlockRowThreads) softmax_block_kernel(const SmArgs a,
                                                                         bool cache) {
    using R = typename Io<S>::raw;
    extern __shared__ float row_cache[];
    __shared__ float red[32];
    const int64_t n = a.n;
    for (int64_t row = blockIdx.x; row < a.outer; row += gridDim.x) {
        const R* x = static_cast<const R*>(a.x) + row * n;
        R* y = static_cast<R*>(a.y) + row * n;
        float mx = -INFINITY;
        int nan = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const float v = Io<S>::ld(x[j]);
            if (cache) row_cache[j] = v;
            nan |= isnan(v) ? 1 : 0;
            mx = fmaxf(mx, v);
        }
        nan = __syncthreads_or(nan);
        mx = block_max(mx, red);
        if (nan) {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = Io<S>::st(NAN);
            continue;
        }
        const float shift = isinf(mx) ? 0.f : mx;
        float sum = 0.f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            sum += expf((cache ? row_cache[j] : Io<S>::ld(x[j])) - shift);
        sum = block_sum(sum, red);
        const float lse = logf(sum);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const float v = cache ? row_cache[j] : Io<S>::ld(x[j]);
            y[j] = Io<S>::st(a.log ? v - shift - lse : expf(v - shift) / sum);
        }
    }
}

/// inner > 1: one thread per (outer, inner) column, the slice strided by `inner`.
template <class S>
__global__ void softmax_strided_kernel(const SmArgs a) {
    using R = typename Io<S>::raw;
    const int64_t cols = a.outer * a.inner;
    const int64_t n = a.n, s = a.inner;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t o = c / s, i = c % s;
        const R* x = static_cast<const R*>(a.x) + o * n * s + i;
        R* y = static_cast<R*>(a.y) + o * n * s + i;
        float mx = -INFINITY;
        bool nan = false;
        for (int64_t j = 0; j < n; ++j) {
            const float v = Io<S>::ld(x[j * s]);
            nan |= isnan(v);
            mx = fmaxf(mx, v);
        }
        if (nan) {
            for (int64_t j = 0; j < n; ++j) y[j * s] = Io<S>::st(NAN);
            continue;
        }
        const float shift = isinf(mx) ? 0.f : mx;
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += expf(Io<S>::ld(x[j * s]) - shift);
        const float lse = logf(sum);
        for (int64_t j = 0; j < n; ++j) {
            const float v = Io<S>::ld(x[j * s]);
            y[j * s] = Io<S>::st(a.log ? v - shift - lse : expf(v - shift) / sum);
        }
    }
}

template <class S>
Status launch_softmax(const SmArgs& a, cudaStream_t stream) {
    using R = typename Io<S>::raw;
    if (a.outer == 0 || a.n == 0 || a.inner == 0) return Status::ok();
    if (a.inner > 1) {
        softmax_strided_kernel<S><<<grid_for(a.outer * a.inner, 256), 256, 0, stream>>>(a);
        return launch_status("Softmax (strided)");
    }
    if (a.n <= kMaxWarpRow) {
        return dispatch_npl(a.n, [&](auto npl) -> Status {
            constexpr int NPL = decltype(npl)::value;
            constexpr int VW = vec_width<S, NPL>();
            constexpr std::size_t vb = sizeof(R) * VW;
            const bool vec = VW > 1 && a.n % VW == 0 && aligned(a.x, vb) && aligned(a.y, vb);
            softmax_warp_kernel<S, NPL><<<rows_grid(a.outer, kWarpRowThreads / 32),
                                          kWarpRowThreads, 0, stream>>>(a, vec);
            return launch_status("Softmax (warp rows)");
        });
    }
    const bool cache = a.n <= kMaxCachedRow;
    const std::size_t smem = cache ? static_cast<std::size_t>(a.n) * sizeof(float) : 0;
    softmax_block_kernel<S><<<rows_grid(a.outer, 1), kBlockRowThreads, smem, stream>>>(a, cache);
    return launch_status("Softmax (block rows)");
}

class SoftmaxCuda final : public CudaKernel {
public:
    SoftmaxCuda(std::unique_ptr<Kernel> ref, bool log, int64_t axis, bool coerce_2d)
        : CudaKernel(std::move(ref)), log_(log), axis_(axis), coerce_2d_(coerce_2d) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int rank = x.shape.rank();
        SmArgs a;
        a.x = x.raw;
        a.y = ctx.output(0).raw;
        a.log = log_;
        if (rank == 0) {
            a.outer = a.n = a.inner = 1;
        } else {
            const int ax = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
            if (ax < 0 || ax > rank || (!coerce_2d_ && ax == rank))
                return Status(ErrorCode::invalid_argument, "Softmax: axis out of range");
            a.outer = x.shape.size_between(0, ax);
            if (coerce_2d_) {
                a.n = x.shape.size_between(ax, rank);
                a.inner = 1;
            } else {
                a.n = x.shape[ax];
                a.inner = x.shape.size_between(ax + 1, rank);
            }
        }
        if (x.num_elements() == 0) return Status::ok();
        return dispatch_storage(x.dtype, [&](auto tag) -> Status {
            using S = typename decltype(tag)::type;
            return launch_softmax<S>(a, stream_of(ctx));
        });
    }

private:
    bool log_;
    int64_t axis_;
    bool coerce_2d_;
};

template <bool Log>
StatusOr<std::unique_ptr<Kernel>> make_softmax(const KernelCreateContext& ctx) {
    const bool coerce = ctx.opset() < 13;
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", coerce ? 1 : -1));
    return make_with_fallback<SoftmaxCuda>(ctx, Log, axis, coerce);
}

// ---- BatchNormalization (inference) ----------------------------------------------------------

struct BnParam {
    const void* p = nullptr;
    int dt = kF32;
};

/// a[c] = scale / sqrt(var + eps), b[c] = B - mean * a[c].
__global__ void bn_coeff_kernel(BnParam scale, BnParam bias, BnParam mean, BnParam var,
                                float eps, int64_t c, float* a, float* b) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float ai = load_any(scale.p, scale.dt, i) / sqrtf(load_any(var.p, var.dt, i) + eps);
        a[i] = ai;
        b[i] = load_any(bias.p, bias.dt, i) - load_any(mean.p, mean.dt, i) * ai;
    }
}

/// y = x * a[c] + b[c] over planes (n, c) of `inner` elements.
template <class S>
__global__ void bn_apply_kernel(const typename Io<S>::raw* x, typename Io<S>::raw* y,
                                const float* a, const float* b, int64_t planes, int64_t c,
                                int64_t inner) {
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const int64_t ch = pl % c;
        const float ac = a[ch], bc = b[ch];
        const int64_t base = pl * inner;
        for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < inner;
             j += static_cast<int64_t>(gridDim.x) * blockDim.x)
            y[base + j] = Io<S>::st(Io<S>::ld(x[base + j]) * ac + bc);
    }
}

class BatchNormCuda final : public CudaKernel {
public:
    /// `coeffs`: 2*C floats (a then b) precomputed from constant parameters, or empty.
    BatchNormCuda(std::unique_ptr<Kernel> ref, float eps, DeviceConstant coeffs, int64_t channels)
        : CudaKernel(std::move(ref)), eps_(eps), coeffs_(std::move(coeffs)),
          channels_(channels) {}

    std::uint64_t released_constant_inputs() const noexcept override {
        return coeffs_ ? 0x1eu : 0u;  // inputs 1..4
    }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(CudaKernel::prepare(ctx));
        if (!coeffs_ && ctx.input(0).shape().rank() >= 2) {
            const int64_t c = ctx.input(0).shape()[1];
            ctx.set_workspace(static_cast<std::size_t>(2 * c) * sizeof(float));
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.shape.rank() < 2)
            return Status(ErrorCode::invalid_argument, "BatchNormalization: X rank < 2");
        const int64_t n = x.shape[0], c = x.shape[1];
        const int64_t inner = x.shape.size_between(2, x.shape.rank());
        if (x.num_elements() == 0 || c == 0) return Status::ok();
        cudaStream_t stream = stream_of(ctx);
        const float* a;
        const float* b;
        if (coeffs_) {
            if (channels_ != c)
                return Status(ErrorCode::invalid_argument,
                              "BatchNormalization: channel count differs from the parameters");
            a = coeffs_.as<float>();
            b = a + c;
        } else {
            if (ctx.workspace_bytes() < static_cast<std::size_t>(2 * c) * sizeof(float))
                return Status(ErrorCode::internal, "BatchNormalization: workspace too small");
            float* ws = static_cast<float*>(ctx.workspace());
            auto par = [&](int i) {
                return BnParam{ctx.input(i).raw, dt_code(ctx.input(i).dtype)};
            };
            bn_coeff_kernel<<<grid_for(c, 256), 256, 0, stream>>>(par(1), par(2), par(3), par(4),
                                                                 eps_, c, ws, ws + c);
            DSINFER_RETURN_IF_ERROR(launch_status("BatchNormalization coefficients"));
            a = ws;
            b = ws + c;
        }
        const int64_t planes = n * c;
        const int threads = inner >= 256 ? 256 : (inner >= 64 ? 128 : 32);
        dim3 grid(std::min<unsigned>(grid_for(inner, threads), 1024u),
                  static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
        return dispatch_storage(x.dtype, [&](auto tag) -> Status {
            using S = typename decltype(tag)::type;
            using R = typename Io<S>::raw;
            bn_apply_kernel<S><<<grid, threads, 0, stream>>>(
                static_cast<const R*>(x.raw), static_cast<R*>(ctx.output(0).raw), a, b, planes,
                c, inner);
            return launch_status("BatchNormalization");
        });
    }

private:
    float eps_;
    DeviceConstant coeffs_;
    int64_t channels_;
};

StatusOr<std::unique_ptr<Kernel>> make_batch_norm(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(float eps, n.attr_or<float>("epsilon", 1e-5f));
    if (ctx.opset() >= 14) {
        DSINFER_ASSIGN_OR_RETURN(int64_t training, n.attr_or<int64_t>("training_mode", 0));
        if (training != 0)
            return Status::error(ErrorCode::unsupported,
                                 "CUDA BatchNormalization: training_mode is not supported");
    }
    for (int i = 1; i < ctx.num_outputs(); ++i)
        if (ctx.has_output(i))
            return Status::error(ErrorCode::unsupported,
                                 "CUDA BatchNormalization: training outputs are not supported");
    if (ctx.num_inputs() != 5)
        return Status::error(ErrorCode::unsupported, "CUDA BatchNormalization: expects 5 inputs");
    bool all_const = true;
    for (int i = 1; i <= 4; ++i) {
        if (!ctx.has_input(i))
            return Status::error(ErrorCode::unsupported, "CUDA BatchNormalization: input ", i,
                                 " missing");
        const auto dt = input_dtype(ctx, i);
        if (!dt || !is_storage_float(*dt))
            return Status::error(ErrorCode::unsupported, "CUDA BatchNormalization: input ", i,
                                 " must be float32, float16 or bfloat16");
        if (ctx.constant_input(i) == nullptr) all_const = false;
    }
    DeviceConstant coeffs;
    int64_t channels = 0;
    if (all_const) {
        const int64_t c = ctx.constant_input(1)->num_elements();
        bool same = c > 0;
        for (int i = 2; i <= 4; ++i) same = same && ctx.constant_input(i)->num_elements() == c;
        if (same) {
            // One form of all four parameters and epsilon: keyed by the scale, the others and
            // epsilon's bits named in the layout (nodes sharing only some of them differ).
            const std::shared_ptr<WeightStore> store = ctx.weight_store();
            std::uint32_t eps_bits = 0;
            std::memcpy(&eps_bits, &eps, sizeof eps_bits);
            std::string layout = "cuda.batch_norm.ab(";
            for (int i = 2; i <= 4; ++i)
                layout += std::to_string(store->source(*ctx.constant_input(i)).id) + ",";
            layout += "eps=" + std::to_string(eps_bits) + ")";
            DSINFER_ASSIGN_OR_RETURN(
                coeffs,
                device_form(ctx, *store, *ctx.constant_input(1), WeightKind::derived, layout,
                            [&]() -> StatusOr<std::vector<unsigned char>> {
                                const std::vector<float> sc = to_float_vector(*ctx.constant_input(1));
                                const std::vector<float> bi = to_float_vector(*ctx.constant_input(2));
                                const std::vector<float> me = to_float_vector(*ctx.constant_input(3));
                                const std::vector<float> va = to_float_vector(*ctx.constant_input(4));
                                std::vector<float> ab(static_cast<std::size_t>(2 * c));
                                for (std::size_t i = 0; i < static_cast<std::size_t>(c); ++i) {
                                    const double ai = double(sc[i]) / std::sqrt(double(va[i]) + double(eps));
                                    ab[i] = static_cast<float>(ai);
                                    ab[i + static_cast<std::size_t>(c)] =
                                        static_cast<float>(double(bi[i]) - double(me[i]) * ai);
                                }
                                return float_bytes(ab);
                            }));
            channels = c;
        }
    }
    return make_with_fallback<BatchNormCuda>(ctx, eps, std::move(coeffs), channels);
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
    const DTypeSet floats{DType::f32, DType::f16, DType::bf16};
    r.add({"LayerNormalization", "", 17, kMaxOpset, DeviceKind::cuda, floats}, &make_layer_norm,
          kPriorityCuda, kProvider);
    r.add({"LayerNormalization", kDsinferDomain, 1, 1, DeviceKind::cuda, floats},
          &make_layer_norm, kPriorityCuda, kProvider);
    r.add({"SkipLayerNormalization", kDsinferDomain, 1, 1, DeviceKind::cuda, floats},
          &make_skip_layer_norm, kPriorityCuda, kProvider);
    r.add({"Softmax", "", 1, kMaxOpset, DeviceKind::cuda, floats}, &make_softmax<false>,
          kPriorityCuda, kProvider);
    r.add({"LogSoftmax", "", 1, kMaxOpset, DeviceKind::cuda, floats}, &make_softmax<true>,
          kPriorityCuda, kProvider);
    r.add({"BatchNormalization", "", 9, kMaxOpset, DeviceKind::cuda, floats}, &make_batch_norm,
          kPriorityCuda, kProvider);
}

}  // namespace dsinfer::cuda
