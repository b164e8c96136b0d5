// cuda/kernels/tensor_ops.cu — CUDA data-movement and reduction kernels: Gather, Transpose,
// Concat, Split, Slice, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Pad (constant mode),
// ReduceSum, ReduceMean, ReduceMax.
//
// Data movement is dtype-agnostic: elements are moved as 1/2/4/8-byte units, and wider units
// (up to 16 bytes) when the innermost contiguous run, every stride and both pointers allow it.
// Every strided op is described as a Layout (out[i] = in[base + sum idx_d * stride_d] over the
// contiguous output), coalesced on the host (size-1 dims dropped, mergeable dims merged), then
// run by one of: a plain cudaMemcpyAsync (contiguous), a tiled shared-memory transpose (the
// output's fastest dim is not the input's), or a grid-stride strided copy (32-bit index math
// with multiply-shift division when the sizes allow it, 64-bit otherwise).
//
// Shapes and validation come from the reference kernel's prepare (CudaKernel); run only
// computes. Inputs whose values are read on the host (shapes, axes, starts/ends, pads, split,
// ...) are declared in host_inputs().
//
// Gather indices: constant indices are checked once per run against their min/max computed at
// creation; indices computed at run time arrive on the device and are checked by the gather
// kernels, which skip an index outside the axis (no path reads out of bounds) and report it
// through the node's device error slots, so the run fails with invalid_argument naming the
// node, the index and the axis range. Indices that are host tensors (outside the executor)
// are checked on the host and copied into the workspace.
//
// Reductions (f32/f16/bf16 accumulate in float, f64 in double): the input dims are grouped
// (size-1 dims dropped, neighbours with the same reduced flag merged) and run as rows (warp per
// row up to 1024 columns, block per row beyond), columns [outer, red, inner] (32x8 blocks), or
// one thread per output with an odometer over the reduced dims. Empty reductions give 0 / NaN /
// -inf like the reference; ReduceMax propagates NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/concat.hpp"
#include "ops/pad.hpp"
#include "ops/reduce.hpp"
#include "ops/slice_ranges.hpp"
#include "cuda_common.hpp"

namespace dsinfer::cuda {
namespace {

using Factory = StatusOr<std::unique_ptr<Kernel>>;

// `#pragma unroll` in device code only (host passes of __host__ __device__ helpers warn).
#ifdef __CUDA_ARCH__
#define DS_UNROLL _Pragma("unroll")
#else
#define DS_UNROLL
#endif

constexpr int kR = kMaxRank;
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

// =================================================================================================
// Host helpers
// =================================================================================================

/// Element i of a host int32/int64 tensor (callers check the dtype first).
inline std::int64_t host_int(const TensorView& v, std::int64_t i) noexcept {
    return v.dtype == DType::i32 ? static_cast<std::int64_t>(v.data_unchecked<std::int32_t>()[i])
                                 : v.data_unchecked<std::int64_t>()[i];
}

inline bool is_index_type(DType t) noexcept { return t == DType::i32 || t == DType::i64; }

inline Status check_host_ints(const TensorView& v, const char* what) noexcept {
    if (!is_index_type(v.dtype))
        return Status::error(ErrorCode::invalid_argument, "input '", what,
                             "' must be int32 or int64, got ", dtype_name(v.dtype));
    if (v.num_elements() > 0 && v.raw == nullptr)
        return Status::error(ErrorCode::internal, "input '", what, "' has no host data");
    return Status::ok();
}

inline std::array<std::int64_t, kR> contiguous(const Shape& s) noexcept {
    std::array<std::int64_t, kR> st{};
    std::int64_t acc = 1;
    for (int i = s.rank() - 1; i >= 0; --i) {
        st[static_cast<std::size_t>(i)] = acc;
        acc *= s[i];
    }
    return st;
}

inline std::uint64_t addr(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
inline std::uint64_t uabs(std::int64_t v) noexcept {
    return v < 0 ? static_cast<std::uint64_t>(-(v + 1)) + 1u : static_cast<std::uint64_t>(v);
}

/// Runs FN<U>(args...) with U an unsigned type of `bytes` bytes (uint4 for 16).
#define DS_UNIT_DISPATCH(bytes, FN, ...)                                          \
    do {                                                                          \
        switch (bytes) {                                                          \
            case 1: return FN<std::uint8_t>(__VA_ARGS__);                         \
            case 2: return FN<std::uint16_t>(__VA_ARGS__);                        \
            case 4: return FN<std::uint32_t>(__VA_ARGS__);                        \
            case 8: return FN<unsigned long long>(__VA_ARGS__);                   \
            case 16: return FN<uint4>(__VA_ARGS__);                               \
            default: break;                                                       \
        }                                                                         \
        return Status(ErrorCode::unsupported, "element size not supported");      \
    } while (0)

// =================================================================================================
// Index division: multiply-shift for 32-bit indices (dividends < 2^31), plain for 64-bit
// =================================================================================================

struct FastDiv {
    std::uint32_t d = 1, m = 1, s = 0;
    FastDiv() = default;
    explicit FastDiv(std::uint32_t divisor) {
        d = divisor < 1 ? 1 : divisor;
        s = 0;
        while (s < 32 && (std::uint64_t{1} << s) < d) ++s;
        const std::uint64_t one = 1;
        m = static_cast<std::uint32_t>(((one << 32) * ((one << s) - d)) / d + 1);
    }
    /// n / d for n < 2^31.
    __host__ __device__ __forceinline__ std::uint32_t div(std::uint32_t n) const {
#ifdef __CUDA_ARCH__
        const std::uint32_t t = __umulhi(n, m);
#else
        const auto t = static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * m) >> 32);
#endif
        return (t + n) >> s;
    }
};

struct SlowDiv {
    std::uint64_t d = 1;
    SlowDiv() = default;
    explicit SlowDiv(std::uint64_t divisor) : d(divisor < 1 ? 1 : divisor) {}
    __host__ __device__ __forceinline__ std::uint64_t div(std::uint64_t n) const { return n / d; }
};

template <class Idx> struct IdxTraits;
template <> struct IdxTraits<std::uint32_t> {
    using Div = FastDiv;
    using S = std::int32_t;
};
template <> struct IdxTraits<std::uint64_t> {
    using Div = SlowDiv;
    using S = std::int64_t;
};

inline int threads_for_row(std::int64_t width) {
    std::int64_t t = (width + 31) / 32 * 32;
    return static_cast<int>(std::clamp<std::int64_t>(t, 32, 256));
}

inline unsigned blocks_for(std::int64_t n) {
    return static_cast<unsigned>(std::clamp<std::int64_t>(n, 1, 65535LL * 32));
}

// =================================================================================================
// Strided copy (Transpose, Slice, Expand)
// =================================================================================================

/// out[i] = in[base + sum idx_d * stride_d] with out contiguous over `shape` (row-major).
struct Layout {
    int rank = 0;
    std::array<std::int64_t, kR> shape{};
    std::array<std::int64_t, kR> stride{};
    std::int64_t base = 0;
    std::int64_t total() const noexcept {
        std::int64_t n = 1;
        for (int d = 0; d < rank; ++d) n *= shape[static_cast<std::size_t>(d)];
        return n;
    }
};

/// Drops size-1 dims and merges out dims d, d+1 when in-stride[d] == in-stride[d+1]*shape[d+1].
/// Precondition: no zero dims.
Layout coalesce(const Layout& l) noexcept {
    Layout o;
    o.base = l.base;
    for (int d = 0; d < l.rank; ++d) {
        const auto du = static_cast<std::size_t>(d);
        if (l.shape[du] == 1) continue;
        if (o.rank > 0) {
            const auto pu = static_cast<std::size_t>(o.rank - 1);
            if (o.stride[pu] == l.stride[du] * l.shape[du]) {
                o.shape[pu] *= l.shape[du];
                o.stride[pu] = l.stride[du];
                continue;
            }
        }
        o.shape[static_cast<std::size_t>(o.rank)] = l.shape[du];
        o.stride[static_cast<std::size_t>(o.rank)] = l.stride[du];
        ++o.rank;
    }
    if (o.rank == 0) {
        o.rank = 1;
        o.shape[0] = 1;
        o.stride[0] = 1;
    }
    return o;
}

/// Widest unit (bytes, >= es) the layout can move: the innermost dim has stride 1 and its byte
/// length, the base, every other stride and both pointers are multiples of the unit.
std::size_t layout_unit(const Layout& l, std::size_t es, const void* in, const void* out) noexcept {
    const auto last = static_cast<std::size_t>(l.rank - 1);
    if (l.stride[last] != 1) return es;
    for (std::size_t u = 16; u > es; u /= 2) {
        bool ok = (static_cast<std::uint64_t>(l.shape[last]) * es) % u == 0 &&
                  (uabs(l.base) * es) % u == 0 && addr(in) % u == 0 && addr(out) % u == 0;
        for (std::size_t d = 0; d < last && ok; ++d) ok = (uabs(l.stride[d]) * es) % u == 0;
        if (ok) return u;
    }
    return es;
}

Layout scale_layout(const Layout& l, std::size_t es, std::size_t u) noexcept {
    if (u == es) return l;
    const auto k = static_cast<std::int64_t>(u / es);
    Layout o = l;
    const auto last = static_cast<std::size_t>(l.rank - 1);
    o.shape[last] /= k;
    for (std::size_t d = 0; d < last; ++d) o.stride[d] /= k;
    o.base /= k;
    return o;
}

template <class Idx>
struct StridedParams {
    int rank;
    typename IdxTraits<Idx>::Div div[kR];     // output dims, innermost first
    typename IdxTraits<Idx>::S stride[kR];    // input strides, innermost first
    typename IdxTraits<Idx>::S base;
};

/// Input offset of output element i.
template <class Idx>
__host__ __device__ __forceinline__ typename IdxTraits<Idx>::S strided_offset(
    const StridedParams<Idx>& p, Idx i) {
    using S = typename IdxTraits<Idx>::S;
    Idx rem = i;
    S off = p.base;
DS_UNROLL
    for (int k = 0; k < kR; ++k) {
        if (k >= p.rank) break;
        const Idx q = p.div[k].div(rem);
        off += static_cast<S>(rem - q * p.div[k].d) * p.stride[k];
        rem = q;
    }
    return off;
}

template <class U, class Idx>
__global__ void strided_copy_kernel(const U* __restrict__ in, U* __restrict__ out,
                                    StridedParams<Idx> p, Idx total) {
    const Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
    for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step)
        out[i] = in[strided_offset(p, i)];
}

template <class Idx>
StridedParams<Idx> make_strided_params(const Layout& l) noexcept {
    using Div = typename IdxTraits<Idx>::Div;
    using S = typename IdxTraits<Idx>::S;
    StridedParams<Idx> p{};
    p.rank = l.rank;
    for (int k = 0; k < l.rank; ++k) {
        const auto d = static_cast<std::size_t>(l.rank - 1 - k);
        p.div[k] = Div(static_cast<Idx>(l.shape[d]));
        p.stride[k] = static_cast<S>(l.stride[d]);
    }
    p.base = static_cast<S>(l.base);
    return p;
}

/// True when the layout's offsets and indices all fit the 32-bit kernel.
bool layout_fits_32(const Layout& l) noexcept {
    std::uint64_t reach = uabs(l.base);
    bool small = l.total() < kI32Max;
    for (int d = 0; d < l.rank; ++d) {
        const auto du = static_cast<std::size_t>(d);
        small = small && l.shape[du] < kI32Max && uabs(l.stride[du]) < kI32Max;
        if (small) reach += static_cast<std::uint64_t>(l.shape[du] - 1) * uabs(l.stride[du]);
    }
    return small && reach < static_cast<std::uint64_t>(kI32Max);
}

template <class U, class Idx>
Status launch_strided_idx(const void* in, void* out, const Layout& l, cudaStream_t stream) {
    const StridedParams<Idx> p = make_strided_params<Idx>(l);
    const std::int64_t total = l.total();
    strided_copy_kernel<U, Idx><<<grid_for(total, 256), 256, 0, stream>>>(
        static_cast<const U*>(in), static_cast<U*>(out), p, static_cast<Idx>(total));
    return launch_status("strided_copy");
}

template <class U>
Status launch_strided(const void* in, void* out, const Layout& l, cudaStream_t stream) {
    // 32-bit index math when every offset and index fits in int32.
    if (layout_fits_32(l)) return launch_strided_idx<U, std::uint32_t>(in, out, l, stream);
    return launch_strided_idx<U, std::uint64_t>(in, out, l, stream);
}

// ---- tiled transpose: the output's fastest dim (A) is not the input's fastest dim (L) ---------

struct TileParams {
    std::int64_t nA, sA;   // output-innermost dim: size, input stride
    std::int64_t nL, oL;   // input-contiguous dim: size, output stride
    std::int64_t tilesA, tilesL, nblocks;
    std::int64_t base;
    int nb;                // batch dims, innermost first
    std::int64_t bshape[kR], bin[kR], bout[kR];
};

/// Block b's input/output base offsets and tile origin (A, L).
__host__ __device__ __forceinline__ void tile_origin(const TileParams& p, std::int64_t b,
                                                     std::int64_t& ib, std::int64_t& ob,
                                                     std::int64_t& a0, std::int64_t& l0) {
    std::int64_t t = b;
    const std::int64_t tl = t % p.tilesL;
    t /= p.tilesL;
    const std::int64_t ta = t % p.tilesA;
    t /= p.tilesA;
    ib = p.base;
    ob = 0;
DS_UNROLL
    for (int k = 0; k < kR; ++k) {
        if (k >= p.nb) break;
        const std::int64_t q = t / p.bshape[k];
        const std::int64_t r = t - q * p.bshape[k];
        ib += r * p.bin[k];
        ob += r * p.bout[k];
        t = q;
    }
    a0 = ta * 32;
    l0 = tl * 32;
}

template <class T>
__global__ void tiled_transpose_kernel(const T* __restrict__ in, T* __restrict__ out, TileParams p) {
    __shared__ T tile[32][33];
    for (std::int64_t b = blockIdx.x; b < p.nblocks; b += gridDim.x) {
        std::int64_t ib, ob, a0, l0;
        tile_origin(p, b, ib, ob, a0, l0);
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {
            const std::int64_t a = a0 + y, l = l0 + threadIdx.x;
            if (a < p.nA && l < p.nL) tile[y][threadIdx.x] = in[ib + a * p.sA + l];
        }
        __syncthreads();
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {
            const std::int64_t l = l0 + y, a = a0 + threadIdx.x;
            if (a < p.nA && l < p.nL) out[ob + l * p.oL + a] = tile[threadIdx.x][y];
        }
        __syncthreads();
    }
}

template <class T>
Status launch_tiled(const void* in, void* out, const TileParams& p, cudaStream_t stream) {
    tiled_transpose_kernel<T><<<blocks_for(p.nblocks), dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), p);
    return launch_status("tiled_transpose");
}

/// Tile parameters when the coalesced layout is a transpose worth tiling (both fast dims >= 8).
std::optional<TileParams> tile_params(const Layout& l) noexcept {
    if (l.rank < 2) return std::nullopt;
    const int last = l.rank - 1;
    if (l.stride[static_cast<std::size_t>(last)] == 1) return std::nullopt;
    int j = -1;
    for (int d = 0; d < last; ++d)
        if (l.stride[static_cast<std::size_t>(d)] == 1) j = d;
    if (j < 0) return std::nullopt;
    TileParams p{};
    p.nA = l.shape[static_cast<std::size_t>(last)];
    p.sA = l.stride[static_cast<std::size_t>(last)];
    p.nL = l.shape[static_cast<std::size_t>(j)];
    if (p.nA < 8 || p.nL < 8) return std::nullopt;
    std::array<std::int64_t, kR> ostride{};
    std::int64_t acc = 1;
    for (int d = last; d >= 0; --d) {
        ostride[static_cast<std::size_t>(d)] = acc;
        acc *= l.shape[static_cast<std::size_t>(d)];
    }
    p.oL = ostride[static_cast<std::size_t>(j)];
    p.base = l.base;
    p.nb = 0;
    std::int64_t batches = 1;
    for (int d = last - 1; d >= 0; --d) {  // innermost first
        if (d == j) continue;
        const auto du = static_cast<std::size_t>(d);
        p.bshape[p.nb] = l.shape[du];
        p.bin[p.nb] = l.stride[du];
        p.bout[p.nb] = ostride[du];
        batches *= l.shape[du];
        ++p.nb;
    }
    p.tilesA = (p.nA + 31) / 32;
    p.tilesL = (p.nL + 31) / 32;
    p.nblocks = p.tilesA * p.tilesL * batches;
    return p;
}

/// Runs a layout copy (in and out device pointers, es-byte elements). Empty -> nothing.
Status run_layout(const void* in, void* out, const Layout& raw, std::size_t es,
                  cudaStream_t stream) noexcept {
    if (raw.total() == 0) return Status::ok();
    const Layout l = coalesce(raw);
    if (l.rank == 1 && l.stride[0] == 1) {
        DS_CUDA_TRY(cudaMemcpyAsync(out, static_cast<const unsigned char*>(in) + l.base * static_cast<std::int64_t>(es),
                                    static_cast<std::size_t>(l.shape[0]) * es,
                                    cudaMemcpyDeviceToDevice, stream),
                    "strided copy (contiguous)");
        return Status::ok();
    }
    if (auto tp = tile_params(l)) DS_UNIT_DISPATCH(es, launch_tiled, in, out, *tp, stream);
    const std::size_t u = layout_unit(l, es, in, out);
    const Layout s = scale_layout(l, es, u);
    DS_UNIT_DISPATCH(u, launch_strided, in, out, s, stream);
}

// =================================================================================================
// 2-D copy: rows of `width` elements with pitches (Concat, Split)
// =================================================================================================

template <class U>
__global__ void copy2d_rows_kernel(const U* __restrict__ src, std::int64_t sp, U* __restrict__ dst,
                                   std::int64_t dp, std::int64_t rows, std::int64_t width) {
    for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const U* s = src + r * sp;
        U* d = dst + r * dp;
        for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) d[c] = s[c];
    }
}

template <class U>
__global__ void copy2d_flat_kernel(const U* __restrict__ src, std::uint32_t sp, U* __restrict__ dst,
                                   std::uint32_t dp, FastDiv w, std::uint32_t total) {
    const std::uint32_t step = gridDim.x * blockDim.x;
    for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const std::uint32_t r = w.div(i);
        const std::uint32_t c = i - r * w.d;
        dst[static_cast<std::uint64_t>(r) * dp + c] = src[static_cast<std::uint64_t>(r) * sp + c];
    }
}

template <class U>
Status launch_copy2d(const void* src, std::int64_t sp, void* dst, std::int64_t dp,
                     std::int64_t rows, std::int64_t width, cudaStream_t stream) {
    const std::int64_t total = rows * width;
    const bool small = total < kI32Max && rows * std::max(sp, dp) < kI32Max;
    if (width < 32 && small) {
        copy2d_flat_kernel<U><<<grid_for(total, 256), 256, 0, stream>>>(
            static_cast<const U*>(src), static_cast<std::uint32_t>(sp), static_cast<U*>(dst),
            static_cast<std::uint32_t>(dp), FastDiv(static_cast<std::uint32_t>(width)),
            static_cast<std::uint32_t>(total));
    } else {
        copy2d_rows_kernel<U><<<blocks_for(rows), threads_for_row(width), 0, stream>>>(
            static_cast<const U*>(src), sp, static_cast<U*>(dst), dp, rows, width);
    }
    return launch_status("copy2d");
}

/// dst[r*dp + c] = src[r*sp + c] for r < rows, c < width (elements of es bytes).
Status copy2d(const void* src, std::int64_t sp, void* dst, std::int64_t dp, std::int64_t rows,
              std::int64_t width, std::size_t es, cudaStream_t stream) noexcept {
    if (rows <= 0 || width <= 0) return Status::ok();
    if (rows == 1 || (sp == width && dp == width)) {
        DS_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(rows * width) * es,
                                    cudaMemcpyDeviceToDevice, stream),
                    "copy2d (contiguous)");
        return Status::ok();
    }
    std::size_t u = es;
    for (std::size_t c = 16; c > es; c /= 2) {
        if ((static_cast<std::uint64_t>(width) * es) % c == 0 &&
            (static_cast<std::uint64_t>(sp) * es) % c == 0 &&
            (static_cast<std::uint64_t>(dp) * es) % c == 0 && addr(src) % c == 0 &&
            addr(dst) % c == 0) {
            u = c;
            break;
        }
    }
    const auto k = static_cast<std::int64_t>(u / es);
    DS_UNIT_DISPATCH(u, launch_copy2d, src, sp / k, dst, dp / k, rows, width / k, stream);
}

// =================================================================================================
// Gather
// =================================================================================================

/// An index outside [-dim, dim): never read, and reported once through the node's device error
/// slots (RunContext::device_error_slots) when it has them.
__device__ __forceinline__ void report_bad_index(long long* err, std::int64_t value, std::int64_t dim) {
    if (err == nullptr) return;
    if (atomicCAS(reinterpret_cast<unsigned long long*>(err), 0ull, 1ull) == 0ull) {
        err[1] = static_cast<long long>(value);
        err[2] = static_cast<long long>(dim);
    }
}

template <class U, class I>
__global__ void gather_rows_kernel(const U* __restrict__ in, U* __restrict__ out,
                                   const I* __restrict__ idx, std::int64_t rows, std::int64_t n,
                                   std::int64_t dim, std::int64_t inner, long long* err) {
    for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const std::int64_t o = r / n, j = r - o * n;
        std::int64_t k = static_cast<std::int64_t>(idx[j]);
        if (k < 0) k += dim;
        if (k < 0 || k >= dim) {  // never read out of bounds
            if (threadIdx.x == 0) report_bad_index(err, static_cast<std::int64_t>(idx[j]), dim);
            continue;
        }
        const U* s = in + (o * dim + k) * inner;
        U* d = out + r * inner;
        for (std::int64_t c = threadIdx.x; c < inner; c += blockDim.x) d[c] = s[c];
    }
}

template <class U, class I>
__global__ void gather_flat_kernel(const U* __restrict__ in, U* __restrict__ out,
                                   const I* __restrict__ idx, std::uint32_t total, FastDiv inner,
                                   FastDiv n, std::int64_t dim, long long* err) {
    const std::uint32_t step = gridDim.x * blockDim.x;
    for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const std::uint32_t r = inner.div(i);
        const std::uint32_t c = i - r * inner.d;
        const std::uint32_t o = n.div(r);
        const std::uint32_t j = r - o * n.d;
        std::int64_t k = static_cast<std::int64_t>(idx[j]);
        if (k < 0) k += dim;
        if (k < 0 || k >= dim) {  // never read out of bounds
            report_bad_index(err, static_cast<std::int64_t>(idx[j]), dim);
            continue;
        }
        out[i] = in[(static_cast<std::int64_t>(o) * dim + k) * inner.d + c];
    }
}

struct GatherGeom {
    std::int64_t outer, n, dim, inner;  // inner in units
    long long* err = nullptr;           // device error slots (indices checked on the device)
};

template <class U, class I>
Status launch_gather_typed(const void* in, void* out, const void* idx, const GatherGeom& g,
                           cudaStream_t stream) {
    const std::int64_t rows = g.outer * g.n;
    const std::int64_t total = rows * g.inner;
    if (g.inner < 32 && total < kI32Max && rows < kI32Max) {
        gather_flat_kernel<U, I><<<grid_for(total, 256), 256, 0, stream>>>(
            static_cast<const U*>(in), static_cast<U*>(out), static_cast<const I*>(idx),
            static_cast<std::uint32_t>(total), FastDiv(static_cast<std::uint32_t>(g.inner)),
            FastDiv(static_cast<std::uint32_t>(g.n)), g.dim, g.err);
    } else {
        gather_rows_kernel<U, I><<<blocks_for(rows), threads_for_row(g.inner), 0, stream>>>(
            static_cast<const U*>(in), static_cast<U*>(out), static_cast<const I*>(idx), rows,
            g.n, g.dim, g.inner, g.err);
    }
    return launch_status("gather");
}

template <class U>
Status launch_gather_i32(const void* in, void* out, const void* idx, const GatherGeom& g,
                         cudaStream_t stream) {
    return launch_gather_typed<U, std::int32_t>(in, out, idx, g, stream);
}
template <class U>
Status launch_gather_i64(const void* in, void* out, const void* idx, const GatherGeom& g,
                         cudaStream_t stream) {
    return launch_gather_typed<U, std::int64_t>(in, out, idx, g, stream);
}

Status index_error(std::int64_t value, std::int64_t dim) {
    return Status::error(ErrorCode::invalid_argument, "input 'indices' holds index ", value,
                         ", outside [", -dim, ", ", dim - 1, "]");
}

class GatherKernel final : public CudaKernel {
public:
    struct ConstIndices {
        std::int64_t min = 0, max = 0;  // over all values (meaningful when count > 0)
        std::int64_t count = 0;
    };
    GatherKernel(std::unique_ptr<Kernel> ref, std::int64_t axis, std::optional<ConstIndices> c)
        : CudaKernel(std::move(ref)), axis_(axis), const_(c) {}

    // Indices stay on the device (so a whole run can be one CUDA graph): constant ones are
    // checked at creation, the others by the gather kernels themselves, which skip an
    // out-of-range index and report it (device_error_slots): the run then fails with
    // invalid_argument.
    std::uint64_t host_inputs() const noexcept override { return 0; }
    bool reports_device_errors() const noexcept override { return !const_.has_value(); }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(CudaKernel::prepare(ctx));
        // Room for a device copy of the indices (used whenever they arrive on the host).
        if (ctx.has_input(1)) ctx.set_workspace(ctx.input(1).num_bytes());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        if (r < 1) return Status(ErrorCode::invalid_argument, "input 'data' must have rank >= 1");
        const std::int64_t a = axis_ < 0 ? axis_ + r : axis_;
        if (a < 0 || a >= r)
            return Status::error(ErrorCode::invalid_argument, "axis ", axis_,
                                 " is outside the rank ", r);
        if (!is_index_type(ind.dtype))
            return Status::error(ErrorCode::invalid_argument,
                                 "input 'indices' must be int32 or int64, got ",
                                 dtype_name(ind.dtype));
        const int ai = static_cast<int>(a);
        const std::int64_t dim = x.shape[ai];
        const std::int64_t n = ind.num_elements();
        // Validate every index before anything is enqueued.
        if (const_) {
            if (const_->count > 0) {
                if (const_->min < -dim || const_->min >= dim) return index_error(const_->min, dim);
                if (const_->max < -dim || const_->max >= dim) return index_error(const_->max, dim);
            }
        } else if (ind.device.kind == DeviceKind::cpu) {
            for (std::int64_t j = 0; j < n; ++j) {
                const std::int64_t v = host_int(ind, j);
                if (v < -dim || v >= dim) return index_error(v, dim);
            }
        } else if (n > 0 && ctx.device_error_slots() == nullptr) {
            return Status(ErrorCode::internal,
                          "Gather: device indices need the executor's device error slots");
        }
        if (y.num_elements() == 0 || n == 0) return Status::ok();
        cudaStream_t stream = stream_of(ctx);
        const void* dev_idx = ind.raw;  // constant indices: the executor's device copy
        if (ind.device.kind == DeviceKind::cpu) {
            const std::size_t bytes = ind.num_bytes();
            if (ctx.workspace() == nullptr || ctx.workspace_bytes() < bytes)
                return Status::error(ErrorCode::internal, "Gather: workspace of ",
                                     ctx.workspace_bytes(), " bytes, need ", bytes);
            // cudaMemcpyDefault: correct whichever side the pointer is really on (UVA).
            DS_CUDA_TRY(cudaMemcpyAsync(ctx.workspace(), ind.raw, bytes, cudaMemcpyDefault, stream),
                        "Gather: copying indices to the device");
            dev_idx = ctx.workspace();
        }
        const std::size_t es = dtype_size(x.dtype);
        GatherGeom g{x.shape.size_between(0, ai), n, dim, x.shape.size_between(ai + 1, r)};
        if (!const_ && ind.device.kind != DeviceKind::cpu)
            g.err = reinterpret_cast<long long*>(ctx.device_error_slots());
        std::size_t u = es;
        for (std::size_t c = 16; c > es; c /= 2) {
            if ((static_cast<std::uint64_t>(g.inner) * es) % c == 0 && addr(x.raw) % c == 0 &&
                addr(y.raw) % c == 0) {
                u = c;
                break;
            }
        }
        g.inner = g.inner * static_cast<std::int64_t>(es) / static_cast<std::int64_t>(u);
        if (ind.dtype == DType::i32) DS_UNIT_DISPATCH(u, launch_gather_i32, x.raw, y.raw, dev_idx, g, stream);
        DS_UNIT_DISPATCH(u, launch_gather_i64, x.raw, y.raw, dev_idx, g, stream);
    }

private:
    std::int64_t axis_;
    std::optional<ConstIndices> const_;
};

Factory make_gather(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    std::optional<GatherKernel::ConstIndices> c;
    const Tensor* t = ctx.constant_input(1);
    if (t != nullptr && is_index_type(t->dtype()) &&
        (t->raw_data() != nullptr || t->num_elements() == 0)) {
        GatherKernel::ConstIndices ci;
        const TensorView v = t->view();
        ci.count = v.num_elements();
        for (std::int64_t j = 0; j < ci.count; ++j) {
            const std::int64_t x = host_int(v, j);
            if (j == 0 || x < ci.min) ci.min = x;
            if (j == 0 || x > ci.max) ci.max = x;
        }
        c = ci;
    }
    return make_with_fallback<GatherKernel>(ctx, axis, c);
}

// =================================================================================================
// Transpose
// =================================================================================================

class TransposeKernel final : public CudaKernel {
public:
    TransposeKernel(std::unique_ptr<Kernel> ref, std::vector<std::int64_t> perm)
        : CudaKernel(std::move(ref)), perm_(std::move(perm)) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        const int r = x.shape.rank();
        if (!perm_.empty() && static_cast<int>(perm_.size()) != r)
            return Status::error(ErrorCode::invalid_argument, "attribute 'perm' has ",
                                 perm_.size(), " entries but the input has rank ", r);
        const auto cs = contiguous(x.shape);
        Layout l;
        l.rank = r;
        for (int i = 0; i < r; ++i) {
            const int p = perm_.empty() ? r - 1 - i : static_cast<int>(perm_[static_cast<std::size_t>(i)]);
            l.shape[static_cast<std::size_t>(i)] = x.shape[p];
            l.stride[static_cast<std::size_t>(i)] = cs[static_cast<std::size_t>(p)];
        }
        return run_layout(x.raw, y.raw, l, dtype_size(x.dtype), stream_of(ctx));
    }

private:
    std::vector<std::int64_t> perm_;
};

Factory make_transpose(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto perm, ctx.node().attr_or<std::vector<std::int64_t>>(
                                            "perm", std::vector<std::int64_t>{}));
    std::vector<bool> seen(perm.size(), false);
    for (auto p : perm) {
        if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) ||
            seen[static_cast<std::size_t>(p)])
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'perm' is not a permutation of 0..", perm.size() - 1);
        seen[static_cast<std::size_t>(p)] = true;
    }
    if (perm.size() > static_cast<std::size_t>(kR))
        return Status::error(ErrorCode::unsupported, "Transpose of rank ", perm.size());
    return make_with_fallback<TransposeKernel>(ctx, std::move(perm));
}

// =================================================================================================
// Concat / Split
// =================================================================================================

class ConcatKernel final : public CudaKernel {
public:
    ConcatKernel(std::unique_ptr<Kernel> ref, std::int64_t axis)
        : CudaKernel(std::move(ref)), axis_(axis) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        const int r = y.shape.rank();
        const int ai = detail::concat_run_axis(axis_, r);
        if (ai < 0)
            return Status::error(ErrorCode::invalid_argument, "axis ", axis_,
                                 " is outside the rank ", r);
        const std::size_t es = dtype_size(y.dtype);
        const std::int64_t outer = y.shape.size_between(0, ai);
        const std::int64_t out_inner = y.shape.size_between(ai, r);
        cudaStream_t stream = stream_of(ctx);
        std::int64_t off = 0;
        for (int i = 0; i < ctx.num_inputs(); ++i) {
            if (!ctx.has_input(i)) continue;
            const TensorView& x = ctx.input(i);
            if (x.shape.rank() != r)
                return Status::error(ErrorCode::invalid_argument, "input ", i, " has rank ",
                                     x.shape.rank(), ", the output ", r);
            const std::int64_t inner = x.shape.size_between(ai, r);
            if (off + inner > out_inner)
                return Status(ErrorCode::internal, "Concat: inputs exceed the output");
            if (inner > 0 && x.num_elements() > 0) {
                DSINFER_RETURN_IF_ERROR(copy2d(x.raw, inner,
                                               static_cast<unsigned char*>(y.raw) +
                                                   static_cast<std::size_t>(off) * es,
                                               out_inner, outer, inner, es, stream));
            }
            off += inner;
        }
        return Status::ok();
    }

private:
    std::int64_t axis_;
};

Factory make_concat(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const detail::ConcatAttrs a, detail::parse_concat_attrs(ctx));
    return make_with_fallback<ConcatKernel>(ctx, a.axis);
}

class SplitKernel final : public CudaKernel {
public:
    SplitKernel(std::unique_ptr<Kernel> ref, std::int64_t axis, std::uint64_t host)
        : CudaKernel(std::move(ref)), axis_(axis), host_(host) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int r = x.shape.rank();
        const std::int64_t a = axis_ < 0 ? axis_ + r : axis_;
        if (a < 0 || a >= r)
            return Status::error(ErrorCode::invalid_argument, "axis ", axis_,
                                 " is outside the rank ", r);
        const int ai = static_cast<int>(a);
        const std::size_t es = dtype_size(x.dtype);
        const std::int64_t outer = x.shape.size_between(0, ai);
        const std::int64_t in_inner = x.shape.size_between(ai, r);
        cudaStream_t stream = stream_of(ctx);
        std::int64_t off = 0;
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (!ctx.has_output(i)) continue;
            const TensorView& y = ctx.output(i);
            const std::int64_t inner = y.shape.size_between(ai, r);
            if (off + inner > in_inner)
                return Status(ErrorCode::internal, "Split: outputs exceed the input");
            if (y.num_elements() > 0) {
                DSINFER_RETURN_IF_ERROR(copy2d(static_cast<const unsigned char*>(x.raw) +
                                                   static_cast<std::size_t>(off) * es,
                                               in_inner, y.raw, inner, outer, inner, es, stream));
            }
            off += inner;
        }
        return Status::ok();
    }

private:
    std::int64_t axis_;
    std::uint64_t host_;
};

Factory make_split(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    for (int i = 0; i < ctx.num_outputs(); ++i)
        if (!ctx.has_output(i))
            return Status::error(ErrorCode::invalid_model, "Split output ", i, " is omitted");
    // Opset 1 and 13+: optional 'split' input, read by the reference prepare on the host.
    const std::uint64_t host = ctx.has_input(1) ? 2u : 0u;
    return make_with_fallback<SplitKernel>(ctx, axis, host);
}

// =================================================================================================
// Slice
// =================================================================================================

/// The reference's slice geometry (clamping, negative steps) as a Layout.
template <class FS, class FE, class FA, class FP>
Status slice_layout(const Shape& in, std::int64_t n, FS&& starts, FE&& ends, FA&& axes,
                    FP&& steps, Layout& l) noexcept {
    const int r = in.rank();
    detail::SliceRanges sr;
    DSINFER_RETURN_IF_ERROR(detail::slice_ranges(in, n, starts, ends, axes, steps, sr));
    const auto cs = contiguous(in);
    l = Layout{};
    l.rank = r;
    for (int d = 0; d < r; ++d) {
        const auto du = static_cast<std::size_t>(d);
        const std::int64_t len = sr.length[du];
        l.shape[du] = len;
        l.stride[du] = len > 1 ? cs[du] * sr.step[du] : 0;
        l.base += sr.start[du] * cs[du];
    }
    if (l.total() == 0) l.base = 0;
    return Status::ok();
}

class SliceKernel final : public CudaKernel {
public:
    SliceKernel(std::unique_ptr<Kernel> ref, bool from_inputs, std::uint64_t host,
                std::vector<std::int64_t> starts, std::vector<std::int64_t> ends,
                std::vector<std::int64_t> axes)
        : CudaKernel(std::move(ref)), from_inputs_(from_inputs), host_(host),
          starts_(std::move(starts)), ends_(std::move(ends)), axes_(std::move(axes)) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        Layout l;
        if (!from_inputs_) {
            const bool has_axes = !axes_.empty();
            DSINFER_RETURN_IF_ERROR(slice_layout(
                x.shape, static_cast<std::int64_t>(starts_.size()),
                [&](std::int64_t i) { return starts_[static_cast<std::size_t>(i)]; },
                [&](std::int64_t i) { return ends_[static_cast<std::size_t>(i)]; },
                [&](std::int64_t i) { return has_axes ? axes_[static_cast<std::size_t>(i)] : i; },
                [](std::int64_t) { return std::int64_t{1}; }, l));
        } else {
            static constexpr const char* kNames[] = {"", "starts", "ends", "axes", "steps"};
            std::array<TensorView, 5> v{};
            std::array<bool, 5> has{};
            for (int i = 1; i < 5; ++i) {
                has[static_cast<std::size_t>(i)] = ctx.has_input(i);
                if (!ctx.has_input(i)) {
                    if (i <= 2)
                        return Status::error(ErrorCode::invalid_model, "input '", kNames[i],
                                             "' is required");
                    continue;
                }
                v[static_cast<std::size_t>(i)] = ctx.input(i);
                DSINFER_RETURN_IF_ERROR(check_host_ints(v[static_cast<std::size_t>(i)], kNames[i]));
            }
            const std::int64_t n = v[1].num_elements();
            for (int i = 2; i < 5; ++i)
                if (has[static_cast<std::size_t>(i)] && v[static_cast<std::size_t>(i)].num_elements() != n)
                    return Status::error(ErrorCode::invalid_argument, "input '", kNames[i],
                                         "' has ", v[static_cast<std::size_t>(i)].num_elements(),
                                         " entries; 'starts' has ", n);
            const bool has_axes = has[3] && v[3].shape.rank() == 1;
            const bool has_steps = has[4] && v[4].shape.rank() == 1;
            DSINFER_RETURN_IF_ERROR(slice_layout(
                x.shape, n, [&](std::int64_t i) { return host_int(v[1], i); },
                [&](std::int64_t i) { return host_int(v[2], i); },
                [&](std::int64_t i) { return has_axes ? host_int(v[3], i) : i; },
                [&](std::int64_t i) { return has_steps ? host_int(v[4], i) : std::int64_t{1}; },
                l));
        }
        if (l.total() != y.num_elements())
            return Status(ErrorCode::internal, "Slice: output size differs from the geometry");
        return run_layout(x.raw, y.raw, l, dtype_size(x.dtype), stream_of(ctx));
    }

private:
    bool from_inputs_;
    std::uint64_t host_;
    std::vector<std::int64_t> starts_, ends_, axes_;
};

Factory make_slice(const KernelCreateContext& ctx) {
    if (ctx.opset() >= 10) {
        std::uint64_t host = 0;
        for (int i = 1; i < 5; ++i)
            if (ctx.has_input(i)) host |= std::uint64_t{1} << i;
        return make_with_fallback<SliceKernel>(ctx, true, host, std::vector<std::int64_t>{},
                                               std::vector<std::int64_t>{},
                                               std::vector<std::int64_t>{});
    }
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto starts, n.attr<std::vector<std::int64_t>>("starts"));
    DSINFER_ASSIGN_OR_RETURN(auto ends, n.attr<std::vector<std::int64_t>>("ends"));
    DSINFER_ASSIGN_OR_RETURN(auto axes, n.attr_or<std::vector<std::int64_t>>(
                                            "axes", std::vector<std::int64_t>{}));
    if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()))
        return Status::error(ErrorCode::invalid_model,
                             "attributes 'starts', 'ends' and 'axes' differ in length");
    return make_with_fallback<SliceKernel>(ctx, false, std::uint64_t{0}, std::move(starts),
                                           std::move(ends), std::move(axes));
}

// =================================================================================================
// Reshape / Flatten / Squeeze / Unsqueeze (device copies) and Expand (broadcast copy)
// =================================================================================================

class CopyKernel final : public CudaKernel {
public:
    CopyKernel(std::unique_ptr<Kernel> ref, std::uint64_t host)
        : CudaKernel(std::move(ref)), host_(host) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (x.num_bytes() != y.num_bytes() || x.dtype != y.dtype)
            return Status(ErrorCode::internal, "copy: input and output sizes differ");
        if (y.num_bytes() == 0 || x.raw == y.raw) return Status::ok();
        DS_CUDA_TRY(cudaMemcpyAsync(y.raw, x.raw, y.num_bytes(), cudaMemcpyDeviceToDevice,
                                    stream_of(ctx)),
                    "device copy");
        return Status::ok();
    }

private:
    std::uint64_t host_;
};

Factory make_reshape(const KernelCreateContext& ctx) {
    // Opset 5+: the shape is input 1 (read by the reference prepare on the host).
    const std::uint64_t host = ctx.opset() >= 5 && ctx.has_input(1) ? 2u : 0u;
    return make_with_fallback<CopyKernel>(ctx, host);
}
Factory make_flatten(const KernelCreateContext& ctx) {
    return make_with_fallback<CopyKernel>(ctx, std::uint64_t{0});
}
Factory make_squeeze_like(const KernelCreateContext& ctx) {
    // Opset 13+: axes are input 1.
    const std::uint64_t host = ctx.opset() >= 13 && ctx.has_input(1) ? 2u : 0u;
    return make_with_fallback<CopyKernel>(ctx, host);
}

class ExpandKernel final : public CudaKernel {
public:
    explicit ExpandKernel(std::unique_ptr<Kernel> ref) : CudaKernel(std::move(ref)) {}

    std::uint64_t host_inputs() const noexcept override { return 2u; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        const int ro = y.shape.rank(), ri = x.shape.rank();
        if (ri > ro) return Status(ErrorCode::internal, "Expand: input rank exceeds the output's");
        const auto cs = contiguous(x.shape);
        Layout l;
        l.rank = ro;
        for (int i = 0; i < ro; ++i) {
            const int ii = i - (ro - ri);
            const auto iu = static_cast<std::size_t>(i);
            l.shape[iu] = y.shape[i];
            if (ii < 0 || x.shape[ii] == 1) {
                l.stride[iu] = 0;
            } else {
                if (x.shape[ii] != y.shape[i])
                    return Status(ErrorCode::internal, "Expand: shapes do not broadcast");
                l.stride[iu] = cs[static_cast<std::size_t>(ii)];
            }
        }
        return run_layout(x.raw, y.raw, l, dtype_size(x.dtype), stream_of(ctx));
    }
};

Factory make_expand(const KernelCreateContext& ctx) {
    return make_with_fallback<ExpandKernel>(ctx);
}

// =================================================================================================
// Pad (constant mode)
// =================================================================================================

template <class Idx>
struct PadParams {
    int rank;
    typename IdxTraits<Idx>::Div div[kR];  // output dims, innermost first
    typename IdxTraits<Idx>::S in_dim[kR], in_stride[kR], begin[kR];
};

/// Input offset of output element i, or -1 where it is padding.
template <class Idx>
__host__ __device__ __forceinline__ typename IdxTraits<Idx>::S pad_offset(const PadParams<Idx>& p,
                                                                            Idx i) {
    using S = typename IdxTraits<Idx>::S;
    Idx rem = i;
    S off = 0;
    bool pad = false;
DS_UNROLL
    for (int k = 0; k < kR; ++k) {
        if (k >= p.rank) break;
        const Idx q = p.div[k].div(rem);
        const S c = static_cast<S>(rem - q * p.div[k].d) - p.begin[k];
        rem = q;
        if (c < 0 || c >= p.in_dim[k]) pad = true;
        else off += c * p.in_stride[k];
    }
    return pad ? S(-1) : off;
}

template <class U, class Idx>
__global__ void pad_kernel(const U* __restrict__ in, U* __restrict__ out, PadParams<Idx> p,
                           Idx total, U value) {
    using S = typename IdxTraits<Idx>::S;
    const Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
    for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
        const S off = pad_offset(p, i);
        out[i] = off < 0 ? value : in[off];
    }
}

struct PadGeom {
    int rank = 0;
    std::array<std::int64_t, kR> in{}, out{}, begin{};  // row-major
};

template <class Idx>
PadParams<Idx> make_pad_params(const PadGeom& g, std::int64_t& total) noexcept {
    using Div = typename IdxTraits<Idx>::Div;
    using S = typename IdxTraits<Idx>::S;
    PadParams<Idx> p{};
    p.rank = g.rank;
    std::int64_t acc = 1;
    total = 1;
    for (int k = 0; k < g.rank; ++k) {
        const auto d = static_cast<std::size_t>(g.rank - 1 - k);
        p.div[k] = Div(static_cast<Idx>(g.out[d]));
        p.in_dim[k] = static_cast<S>(g.in[d]);
        p.in_stride[k] = static_cast<S>(acc);
        p.begin[k] = static_cast<S>(g.begin[d]);
        acc *= g.in[d];
        total *= g.out[d];
    }
    return p;
}

/// True when the pad geometry fits the 32-bit kernel.
bool pad_fits_32(const PadGeom& g) noexcept {
    std::int64_t tin = 1, tout = 1;
    bool small = true;
    for (int d = 0; d < g.rank; ++d) {
        const auto du = static_cast<std::size_t>(d);
        tin *= g.in[du];
        tout *= g.out[du];
        small = small && uabs(g.begin[du]) < (std::uint64_t{1} << 30);
    }
    return small && tin < kI32Max && tout < kI32Max;
}

/// Pad geometry from input/output shapes and begin pads: each unpadded dim is merged into the
/// dim outside it; the innermost dim is widened to `unit`-byte units where possible (u set).
PadGeom pad_geometry(const Shape& in, const Shape& out, const std::array<std::int64_t, kR>& begin,
                     std::size_t es, const void* x, const void* y, std::size_t& u) noexcept {
    PadGeom g;
    for (int d = 0; d < in.rank(); ++d) {
        const auto du = static_cast<std::size_t>(d);
        const std::int64_t in_d = in[d], out_d = out[d], b = begin[du];
        if (g.rank > 0 && b == 0 && in_d == out_d) {
            const auto pu = static_cast<std::size_t>(g.rank - 1);
            g.in[pu] *= in_d;
            g.out[pu] *= out_d;
            g.begin[pu] *= in_d;
            continue;
        }
        const auto gu = static_cast<std::size_t>(g.rank);
        g.in[gu] = in_d;
        g.out[gu] = out_d;
        g.begin[gu] = b;
        ++g.rank;
    }
    if (g.rank == 0) {  // rank-0 input: a plain copy
        g.rank = 1;
        g.in[0] = g.out[0] = 1;
        g.begin[0] = 0;
    }
    const auto last = static_cast<std::size_t>(g.rank - 1);
    u = es;
    for (std::size_t c = 16; c > es; c /= 2) {
        if ((static_cast<std::uint64_t>(g.in[last]) * es) % c == 0 &&
            (static_cast<std::uint64_t>(g.out[last]) * es) % c == 0 &&
            (uabs(g.begin[last]) * es) % c == 0 && addr(x) % c == 0 && addr(y) % c == 0) {
            u = c;
            break;
        }
    }
    if (u != es) {
        const auto k = static_cast<std::int64_t>(u / es);
        g.in[last] /= k;
        g.out[last] /= k;
        g.begin[last] /= k;
    }
    return g;
}

template <class U, class Idx>
Status launch_pad_idx(const void* in, void* out, const PadGeom& g, const unsigned char* value,
                      std::size_t es, cudaStream_t stream) {
    std::int64_t total = 0;
    const PadParams<Idx> p = make_pad_params<Idx>(g, total);
    unsigned char buf[sizeof(U)];
    for (std::size_t i = 0; i < sizeof(U); ++i) buf[i] = value[i % es];
    U v;
    std::memcpy(&v, buf, sizeof(U));
    pad_kernel<U, Idx><<<grid_for(total, 256), 256, 0, stream>>>(
        static_cast<const U*>(in), static_cast<U*>(out), p, static_cast<Idx>(total), v);
    return launch_status("pad");
}

template <class U>
Status launch_pad(const void* in, void* out, const PadGeom& g, const unsigned char* value,
                  std::size_t es, cudaStream_t stream) {
    if (pad_fits_32(g)) return launch_pad_idx<U, std::uint32_t>(in, out, g, value, es, stream);
    return launch_pad_idx<U, std::uint64_t>(in, out, g, value, es, stream);
}

class PadKernel final : public CudaKernel {
public:
    PadKernel(std::unique_ptr<Kernel> ref, std::int64_t opset, std::uint64_t host,
              std::vector<std::int64_t> attr_pads, float value)
        : CudaKernel(std::move(ref)), opset_(opset), host_(host),
          attr_pads_(std::move(attr_pads)), value_(value) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        const bool v11 = opset_ >= 11;
        // Begin pads per dim (the same rules as the reference geometry).
        std::array<std::int64_t, kR> begin{};
        const TensorView* pads = nullptr;
        const TensorView* axes = nullptr;
        if (v11) {
            if (!ctx.has_input(1))
                return Status(ErrorCode::invalid_model, "input 'pads' is required");
            pads = &ctx.input(1);
            DSINFER_RETURN_IF_ERROR(check_host_ints(*pads, "pads"));
            if (ctx.has_input(3)) {
                axes = &ctx.input(3);
                DSINFER_RETURN_IF_ERROR(check_host_ints(*axes, "axes"));
            }
        }
        std::array<std::int64_t, kR> end{};
        DSINFER_RETURN_IF_ERROR(detail::pad_extents(
            r, pads ? pads->num_elements() : static_cast<std::int64_t>(attr_pads_.size()),
            [&](std::int64_t i) {
                return pads ? host_int(*pads, i) : attr_pads_[static_cast<std::size_t>(i)];
            },
            axes ? axes->num_elements() : r,
            [&](std::int64_t i) { return axes ? host_int(*axes, i) : i; }, begin, end));
        if (y.num_elements() == 0) return Status::ok();
        if (y.shape.rank() != r) return Status(ErrorCode::internal, "Pad: output rank differs");
        // The padding value as es bytes.
        const std::size_t es = dtype_size(x.dtype);
        unsigned char value[8] = {};
        if (v11) {
            if (ctx.has_input(2) && ctx.input(2).num_elements() == 1) {
                if (ctx.input(2).dtype != x.dtype || ctx.input(2).raw == nullptr)
                    return Status(ErrorCode::invalid_argument,
                                  "input 'constant_value' must be a scalar of the data type");
                std::memcpy(value, ctx.input(2).raw, es);
            }
        } else {
            value_bits(x.dtype, value_, value);
        }
        std::size_t u = es;
        const PadGeom g = pad_geometry(x.shape, y.shape, begin, es, x.raw, y.raw, u);
        DS_UNIT_DISPATCH(u, launch_pad, x.raw, y.raw, g, value, es, stream_of(ctx));
    }

private:
    /// The opset < 11 'value' attribute converted to the element type (like the reference).
    static void value_bits(DType dt, float v, unsigned char* out) noexcept {
        auto put = [&](const auto& t) { std::memcpy(out, &t, sizeof(t)); };
        const bool fin = std::isfinite(v);
        switch (dt) {
            case DType::f32: put(v); break;
            case DType::f64: put(static_cast<double>(v)); break;
            case DType::f16: put(float16(v)); break;
            case DType::bf16: put(bfloat16(v)); break;
            case DType::i8: put(fin ? static_cast<std::int8_t>(v) : std::int8_t{0}); break;
            case DType::u8: put(fin ? static_cast<std::uint8_t>(v) : std::uint8_t{0}); break;
            case DType::i32: put(fin ? static_cast<std::int32_t>(v) : std::int32_t{0}); break;
            case DType::i64: put(fin ? static_cast<std::int64_t>(v) : std::int64_t{0}); break;
            case DType::boolean: put(static_cast<std::uint8_t>(fin && v != 0.0f)); break;
            default: break;
        }
    }

    std::int64_t opset_;
    std::uint64_t host_;
    std::vector<std::int64_t> attr_pads_;
    float value_;
};

Factory make_pad(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(detail::PadAttrs a, detail::parse_pad_attrs(ctx));
    if (a.mode != detail::PadMode::constant)
        return Status::error(ErrorCode::unsupported,
                             "Pad modes other than 'constant' are not supported on CUDA");
    std::uint64_t host = 0;
    if (ctx.opset() >= 11)
        for (int i = 1; i < 4; ++i)
            if (ctx.has_input(i)) host |= std::uint64_t{1} << i;
    return make_with_fallback<PadKernel>(ctx, ctx.opset(), host, std::move(a.pads), a.value);
}

// =================================================================================================
// Reductions: ReduceSum, ReduceMean, ReduceMax (float types)
// =================================================================================================

enum class RedOp { sum, mean, max };

template <class T> struct Conv;
template <> struct Conv<float> {
    using Acc = float;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct Conv<double> {
    using Acc = double;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double v) { return v; }
};
template <> struct Conv<__half> {
    using Acc = float;
    static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <> struct Conv<__nv_bfloat16> {
    using Acc = float;
    static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

/// Running state: the sum or the max, and whether a NaN was seen (max only).
template <RedOp OP, class Acc>
struct RedState {
    Acc v;
    int nan;
    __device__ __forceinline__ static RedState init() {
        if constexpr (OP == RedOp::max) return {-std::numeric_limits<Acc>::infinity(), 0};
        else return {Acc(0), 0};
    }
    __device__ __forceinline__ void add(Acc x) {
        if constexpr (OP == RedOp::max) {
            if (x != x) nan = 1;
            else if (x > v) v = x;
        } else {
            v += x;
        }
    }
    __device__ __forceinline__ void merge(const RedState& o) {
        if constexpr (OP == RedOp::max) {
            v = o.v > v ? o.v : v;
            nan |= o.nan;
        } else {
            v += o.v;
        }
    }
    __device__ __forceinline__ void warp_merge() {
DS_UNROLL
        for (int off = 16; off > 0; off >>= 1) {
            RedState o;
            o.v = __shfl_xor_sync(0xffffffffu, v, off);
            o.nan = __shfl_xor_sync(0xffffffffu, nan, off);
            merge(o);
        }
    }
    __device__ __forceinline__ Acc result(std::int64_t count) const {
        if constexpr (OP == RedOp::mean)
            return count > 0 ? v / static_cast<Acc>(count) : std::numeric_limits<Acc>::quiet_NaN();
        else if constexpr (OP == RedOp::max)
            return nan ? std::numeric_limits<Acc>::quiet_NaN() : v;
        else
            return v;
    }
};

/// [rows, cols] -> [rows], one warp per row (cols small).
template <class T, RedOp OP>
__global__ void reduce_rows_warp_kernel(const T* __restrict__ x, T* __restrict__ y,
                                        std::int64_t rows, std::int64_t cols) {
    using C = Conv<T>;
    using St = RedState<OP, typename C::Acc>;
    const int lane = threadIdx.x & 31;
    const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
    for (std::int64_t r = warp; r < rows; r += nwarps) {
        St s = St::init();
        const T* row = x + r * cols;
        for (std::int64_t c = lane; c < cols; c += 32) s.add(C::load(row[c]));
        s.warp_merge();
        if (lane == 0) y[r] = C::store(s.result(cols));
    }
}

/// [rows, cols] -> [rows], one block per row (cols large).
template <class T, RedOp OP>
__global__ void reduce_rows_block_kernel(const T* __restrict__ x, T* __restrict__ y,
                                         std::int64_t rows, std::int64_t cols) {
    using C = Conv<T>;
    using Acc = typename C::Acc;
    using St = RedState<OP, Acc>;
    __shared__ Acc sv[32];
    __shared__ int sn[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int nw = (blockDim.x + 31) >> 5;
    for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        St s = St::init();
        const T* row = x + r * cols;
        for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s.add(C::load(row[c]));
        s.warp_merge();
        if (lane == 0) {
            sv[wid] = s.v;
            sn[wid] = s.nan;
        }
        __syncthreads();
        if (wid == 0) {
            St t = St::init();
            if (lane < nw) {
                t.v = sv[lane];
                t.nan = sn[lane];
            }
            t.warp_merge();
            if (lane == 0) y[r] = C::store(t.result(cols));
        }
        __syncthreads();
    }
}

/// [outer, red, inner] -> [outer, inner]; block (32, 8): x over inner, y splits red.
template <class T, RedOp OP>
__global__ void reduce_cols_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t outer,
                                   std::int64_t red, std::int64_t inner) {
    using C = Conv<T>;
    using Acc = typename C::Acc;
    using St = RedState<OP, Acc>;
    __shared__ Acc sv[8][33];
    __shared__ int sn[8][33];
    const std::int64_t tiles = (inner + 31) / 32;
    for (std::int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
        const std::int64_t o = b / tiles;
        const std::int64_t i = (b - o * tiles) * 32 + threadIdx.x;
        St s = St::init();
        if (i < inner) {
            const T* base = x + o * red * inner + i;
            for (std::int64_t k = threadIdx.y; k < red; k += blockDim.y) s.add(C::load(base[k * inner]));
        }
        sv[threadIdx.y][threadIdx.x] = s.v;
        sn[threadIdx.y][threadIdx.x] = s.nan;
        __syncthreads();
        if (threadIdx.y == 0 && i < inner) {
            St t = St::init();
            for (int k = 0; k < static_cast<int>(blockDim.y); ++k) {
                St u;
                u.v = sv[k][threadIdx.x];
                u.nan = sn[k][threadIdx.x];
                t.merge(u);
            }
            y[o * inner + i] = C::store(t.result(red));
        }
        __syncthreads();
    }
}

/// Any pattern: one thread per output; kept and reduced dims innermost first.
struct RedGeneral {
    int nk, nr;
    std::int64_t kshape[kR], kstride[kR];
    std::int64_t rshape[kR], rstride[kR];
    std::int64_t count;
};

/// Calls f(offset) for each input element folded into output o (odometer, no divisions).
template <class F>
__host__ __device__ __forceinline__ void reduce_general_visit(const RedGeneral& p, std::int64_t o,
                                                              F&& f) {
    std::int64_t rem = o, off = 0;
DS_UNROLL
    for (int k = 0; k < kR; ++k) {
        if (k >= p.nk) break;
        const std::int64_t q = rem / p.kshape[k];
        off += (rem - q * p.kshape[k]) * p.kstride[k];
        rem = q;
    }
    std::int64_t idx[kR] = {};
    for (std::int64_t j = 0; j < p.count; ++j) {
        f(off);
DS_UNROLL
        for (int k = 0; k < kR; ++k) {
            if (k >= p.nr) break;
            if (++idx[k] < p.rshape[k]) {
                off += p.rstride[k];
                break;
            }
            off -= p.rstride[k] * (p.rshape[k] - 1);
            idx[k] = 0;
        }
    }
}

template <class T, RedOp OP>
__global__ void reduce_general_kernel(const T* __restrict__ x, T* __restrict__ y, RedGeneral p,
                                      std::int64_t nout) {
    using C = Conv<T>;
    using St = RedState<OP, typename C::Acc>;
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < nout;
         o += step) {
        St s = St::init();
        reduce_general_visit(p, o, [&](std::int64_t off) { s.add(C::load(x[off])); });
        y[o] = C::store(s.result(p.count));
    }
}

template <class T, RedOp OP>
__global__ void reduce_fill_kernel(T* __restrict__ y, std::int64_t n) {
    using C = Conv<T>;
    using St = RedState<OP, typename C::Acc>;
    const T v = C::store(St::init().result(0));
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = v;
}

/// Input dims grouped: size-1 dims dropped, neighbours with the same reduced flag merged.
struct RedPlan {
    int n = 0;
    std::array<std::int64_t, kR> size{};
    std::array<bool, kR> reduced{};
    std::int64_t count = 1;  // reduced elements per output
};

/// How a plan runs: fill (nothing to fold), rows [rows, cols], columns [outer, red, inner], or
/// general (one thread per output with an odometer over the reduced dims).
struct RedDispatch {
    enum Kind { fill, rows, cols, general } kind = general;
    std::int64_t outer = 1, red = 1, inner = 1;  // rows: outer = rows, red = cols
    RedGeneral g{};
};

RedDispatch classify(const RedPlan& p) noexcept {
    RedDispatch r;
    if (p.count == 0) {
        r.kind = RedDispatch::fill;
        return r;
    }
    const bool last_red = p.n > 0 && p.reduced[static_cast<std::size_t>(p.n - 1)];
    if (last_red && p.n <= 2) {  // [K?, R]
        r.kind = RedDispatch::rows;
        r.red = p.size[static_cast<std::size_t>(p.n - 1)];
        r.outer = p.n == 2 ? p.size[0] : 1;
        return r;
    }
    if (!last_red && (p.n == 2 || p.n == 3) && p.reduced[static_cast<std::size_t>(p.n - 2)]) {
        r.kind = RedDispatch::cols;  // [K?, R, K]
        r.inner = p.size[static_cast<std::size_t>(p.n - 1)];
        r.red = p.size[static_cast<std::size_t>(p.n - 2)];
        r.outer = p.n == 3 ? p.size[0] : 1;
        return r;
    }
    r.kind = RedDispatch::general;
    std::int64_t stride = 1;
    for (int d = p.n - 1; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        if (p.reduced[du]) {
            r.g.rshape[r.g.nr] = p.size[du];
            r.g.rstride[r.g.nr] = stride;
            ++r.g.nr;
        } else {
            r.g.kshape[r.g.nk] = p.size[du];
            r.g.kstride[r.g.nk] = stride;
            ++r.g.nk;
        }
        stride *= p.size[du];
    }
    r.g.count = p.count;
    return r;
}

/// Groups the input dims: size-1 dims dropped, neighbours with the same reduced flag merged.
RedPlan make_red_plan(const Shape& in, const std::array<bool, kR>& red) noexcept {
    RedPlan p;
    for (int d = 0; d < in.rank(); ++d) {
        const auto du = static_cast<std::size_t>(d);
        const std::int64_t s = in[d];
        if (red[du]) p.count *= s;
        if (s == 1) continue;
        if (p.n > 0 && p.reduced[static_cast<std::size_t>(p.n - 1)] == red[du]) {
            p.size[static_cast<std::size_t>(p.n - 1)] *= s;
            continue;
        }
        p.size[static_cast<std::size_t>(p.n)] = s;
        p.reduced[static_cast<std::size_t>(p.n)] = red[du];
        ++p.n;
    }
    return p;
}

template <class T, RedOp OP>
Status launch_reduce(const void* xin, void* yout, const RedPlan& p, std::int64_t nout,
                     cudaStream_t stream) {
    const T* x = static_cast<const T*>(xin);
    T* y = static_cast<T*>(yout);
    const RedDispatch d = classify(p);
    switch (d.kind) {
        case RedDispatch::fill:
            reduce_fill_kernel<T, OP><<<grid_for(nout, 256), 256, 0, stream>>>(y, nout);
            return launch_status("reduce_fill");
        case RedDispatch::rows:
            if (d.red <= 1024) {
                reduce_rows_warp_kernel<T, OP><<<blocks_for((d.outer + 7) / 8), 256, 0, stream>>>(
                    x, y, d.outer, d.red);
            } else {
                const int threads = d.outer < 512 ? 1024 : 256;
                reduce_rows_block_kernel<T, OP><<<blocks_for(d.outer), threads, 0, stream>>>(
                    x, y, d.outer, d.red);
            }
            return launch_status("reduce_rows");
        case RedDispatch::cols:
            reduce_cols_kernel<T, OP>
                <<<blocks_for(d.outer * ((d.inner + 31) / 32)), dim3(32, 8), 0, stream>>>(
                    x, y, d.outer, d.red, d.inner);
            return launch_status("reduce_cols");
        case RedDispatch::general: break;
    }
    reduce_general_kernel<T, OP><<<grid_for(nout, 256), 256, 0, stream>>>(x, y, d.g, nout);
    return launch_status("reduce_general");
}

template <RedOp OP>
class ReduceKernel final : public CudaKernel {
public:
    ReduceKernel(std::unique_ptr<Kernel> ref, bool noop, bool from_input, std::uint64_t host,
                 std::vector<std::int64_t> axes)
        : CudaKernel(std::move(ref)), noop_(noop), from_input_(from_input), host_(host),
          axes_(std::move(axes)) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        std::array<std::int64_t, kMaxRank> axes{};
        int na = 0;
        if (from_input_) {
            if (ctx.has_input(1))
                DSINFER_RETURN_IF_ERROR(detail::read_axes_view(ctx.input(1), axes, na));
        } else {
            if (axes_.size() > static_cast<std::size_t>(kMaxRank))
                return Status(ErrorCode::internal, "Reduce: more axes than the maximum rank");
            na = static_cast<int>(axes_.size());
            std::copy(axes_.begin(), axes_.end(), axes.begin());
        }
        std::array<bool, kMaxRank> red{};
        DSINFER_RETURN_IF_ERROR(detail::mark_reduced_axes(r, axes.data(), na, noop_,
                                                          ErrorCode::invalid_argument, red));
        if (na == 0 && noop_) {  // identity
            if (x.num_bytes() != y.num_bytes())
                return Status(ErrorCode::internal, "Reduce: noop output size differs");
            if (y.num_bytes() > 0 && x.raw != y.raw)
                DS_CUDA_TRY(cudaMemcpyAsync(y.raw, x.raw, y.num_bytes(), cudaMemcpyDeviceToDevice,
                                            stream_of(ctx)),
                            "reduce (identity copy)");
            return Status::ok();
        }
        const std::int64_t nout = y.num_elements();
        if (nout == 0) return Status::ok();
        const RedPlan p = make_red_plan(x.shape, red);
        if (p.count != 0 && x.num_elements() / p.count != nout)
            return Status(ErrorCode::internal, "Reduce: output size differs from the plan");
        cudaStream_t stream = stream_of(ctx);
        if (p.count == 1) {  // nothing folds: every output is its one input element
            DS_CUDA_TRY(cudaMemcpyAsync(y.raw, x.raw, y.num_bytes(), cudaMemcpyDeviceToDevice,
                                        stream),
                        "reduce (single-element copy)");
            return Status::ok();
        }
        switch (x.dtype) {
            case DType::f32: return launch_reduce<float, OP>(x.raw, y.raw, p, nout, stream);
            case DType::f64: return launch_reduce<double, OP>(x.raw, y.raw, p, nout, stream);
            case DType::f16: return launch_reduce<__half, OP>(x.raw, y.raw, p, nout, stream);
            case DType::bf16: return launch_reduce<__nv_bfloat16, OP>(x.raw, y.raw, p, nout, stream);
            default: break;
        }
        return Status::error(ErrorCode::unsupported, "element type ", dtype_name(x.dtype),
                             " is not supported");
    }

private:
    bool noop_;
    bool from_input_;
    std::uint64_t host_;
    std::vector<std::int64_t> axes_;
};

template <RedOp OP>
Factory make_reduce(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(detail::ReduceAttrs a,
                             detail::parse_reduce_attrs(ctx, OP == RedOp::sum));
    const std::uint64_t host = a.axes_from_input && ctx.has_input(1) ? 2u : 0u;
    return make_with_fallback<ReduceKernel<OP>>(ctx, a.noop_with_empty_axes, a.axes_from_input,
                                                host, std::move(a.axes));
}

}  // namespace

void register_tensor_kernels(KernelRegistry& r) {
    const DTypeSet kMove{DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32,
                         DType::i64, DType::i8,  DType::u8,   DType::boolean};
    const DTypeSet kFloat{DType::f32, DType::f16, DType::bf16, DType::f64};
    auto add = [&](const char* op, std::int64_t opset_min, DTypeSet types, KernelFactory f) {
        r.add({op, "", opset_min, kMaxOpset, DeviceKind::cuda, types}, f, kPriorityCuda, kProvider);
    };
    add("Gather", 1, kMove, &make_gather);
    add("Transpose", 1, kMove, &make_transpose);
    add("Concat", 1, kMove, &make_concat);
    add("Split", 1, kMove, &make_split);
    add("Slice", 1, kMove, &make_slice);
    add("Reshape", 1, kMove, &make_reshape);
    add("Flatten", 1, kMove, &make_flatten);
    add("Squeeze", 1, kMove, &make_squeeze_like);
    add("Unsqueeze", 1, kMove, &make_squeeze_like);
    add("Expand", 8, kMove, &make_expand);
    add("Pad", 1, kMove, &make_pad);
    add("ReduceSum", 1, kFloat, &make_reduce<RedOp::sum>);
    add("ReduceMean", 1, kFloat, &make_reduce<RedOp::mean>);
    add("ReduceMax", 1, kFloat, &make_reduce<RedOp::max>);
}

}  // namespace dsinfer::cuda
