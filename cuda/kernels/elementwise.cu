// cuda/kernels/elementwise.cu — dsinfer's CUDA elementwise family.
//
// One generic, vectorized map kernel family, templated over the functor and the element types:
//   map1_kernel   y[i] = f(x[i])                      (unary math, Clip, Cast, Mean's 1/n)
//   map2_fast     y[i] = f(a[ia], b[ib])              operands full, scalar or a trailing row
//   map2_general  y[i] = f(a[offA(i)], b[offB(i)])    any numpy broadcast (rank <= 8)
//   where_*       o[i] = c[.] ? x[.] : y[.]           (by element size: every non-string type)
// 16-byte packs are used when every pointer is aligned (and a row's length is a multiple of
// the pack); otherwise the scalar/general paths run. Broadcast strides are computed and
// collapsed on the host (size-1 dims dropped, dims contiguous for every operand merged) and
// passed by value; the general path indexes in 32 bits when the output allows.
//
// Semantics are the reference kernels' (src/cpu/reference/elementwise*.cpp): 16-bit floats
// compute in float and round once to nearest-even; float math uses the accurate CUDA
// functions (expf, logf, erff, tanhf, powf; IEEE division and sqrt) so f32 results stay within
// a few ulp; NaN propagates like the reference (Relu(NaN) = NaN, Max/Min with a NaN operand =
// NaN, Clip and HardSigmoid leave NaN); integer Add/Sub/Mul/Neg/Abs
// wrap; Cast: float -> int truncates toward zero, saturates, NaN -> 0; x -> bool is x != 0
// (NaN -> true); double/int -> 16-bit floats round to odd through float first (one correct
// rounding, like the reference).
//
// Declined (unsupported: the node runs on the CPU): dtypes outside the registered sets, inputs
// whose dtype is unknown at load, Pow with an exponent type different from the base, opsets with
// legacy broadcast (Add/Sub/Mul/Div/Pow/Equal/Less/Greater < 7), Cast to/from types other than
// f32/f16/bf16/f64/i32/i64/i8/u8/bool (strings, u16, ...), Identity of strings or non-tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda_common.hpp"
#include "dsinfer/dtype.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::cuda {
namespace {

constexpr int kThreads = 256;

// Element functions are host-callable too (the same code can be checked on a CPU).
#define DS_HD __host__ __device__ __forceinline__

// ---- element types on the device --------------------------------------------------------------

/// A bool element as stored: one byte, 0 or 1 (read as != 0).
struct Bool8 {
    std::uint8_t v;
};

template <class T>
inline constexpr bool is_half16_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool is_floatish_v = is_half16_v<T> || std::is_floating_point_v<T>;

/// The type arithmetic on T is done in: float for 16-bit floats, T otherwise.
template <class T>
struct ComputeOf {
    using type = T;
};
template <>
struct ComputeOf<__half> {
    using type = float;
};
template <>
struct ComputeOf<__nv_bfloat16> {
    using type = float;
};
template <class T>
using compute_t = typename ComputeOf<T>::type;

template <class T>
DS_HD compute_t<T> ld(T v) {
    if constexpr (std::is_same_v<T, __half>) return __half2float(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
    else return v;
}

template <class T, class C>
DS_HD T st(C v) {
    if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
    else if constexpr (std::is_same_v<T, Bool8>) return Bool8{static_cast<std::uint8_t>(v ? 1 : 0)};
    else return static_cast<T>(v);
}

/// V elements loaded/stored as one access (16 bytes for the wider of the two types).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
    T v[V];
};

/// Elements per pack: 16 bytes of the wider of In and Out.
template <class In, class Out>
constexpr int vec_width() {
    constexpr std::size_t w = sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out);
    return static_cast<int>(16 / w);
}

inline bool aligned(const void* p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// ---- kernels ---------------------------------------------------------------------------------

/// y[i] = f(x[i]); in place (x == y) is allowed.
template <class In, class Out, class F, int V>
__global__ void map1_kernel(const In* x, Out* y, std::int64_t n, F f) {
    const std::int64_t nv = n / V;
    const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    const auto* xv = reinterpret_cast<const Pack<In, V>*>(x);
    auto* yv = reinterpret_cast<Pack<Out, V>*>(y);
    for (std::int64_t i = t; i < nv; i += stride) {
        const Pack<In, V> a = xv[i];
        Pack<Out, V> r;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = f(a.v[k]);
        yv[i] = r;
    }
    if constexpr (V > 1) {
        const std::int64_t rest = n - nv * V;  // < V elements, one per thread of the first block
        if (t < rest) y[nv * V + t] = f(x[nv * V + t]);
    }
}

/// How a binary operand is indexed on the fast path.
enum Mode : int { kFull = 0, kScalar = 1, kRow = 2 };

template <int M, class T, int V>
DS_HD Pack<T, V> load_pack(const T* p, std::int64_t i, std::int64_t row) {
    if constexpr (M == kFull) {
        return reinterpret_cast<const Pack<T, V>*>(p)[i];
    } else if constexpr (M == kScalar) {
        Pack<T, V> r;
        const T s = p[0];
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = s;
        return r;
    } else {  // row: row % V == 0, so a pack never straddles the end of the row
        return *reinterpret_cast<const Pack<T, V>*>(p + (i * V) % row);
    }
}

template <int M, class T>
DS_HD T load_one(const T* p, std::int64_t e, std::int64_t row) {
    if constexpr (M == kFull) return p[e];
    else if constexpr (M == kScalar) return p[0];
    else return p[e % row];
}

/// y[i] = f(a[.], b[.]) with each operand full, scalar or a trailing row of length `row`.
/// y may alias a full operand (the variadic ops fold into the output).
template <class In, class Out, class F, int MA, int MB, int V>
__global__ void map2_fast(const In* a, const In* b, Out* y, std::int64_t n, std::int64_t row, F f) {
    const std::int64_t nv = n / V;
    const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    auto* yv = reinterpret_cast<Pack<Out, V>*>(y);
    for (std::int64_t i = t; i < nv; i += stride) {
        const Pack<In, V> pa = load_pack<MA, In, V>(a, i, row);
        const Pack<In, V> pb = load_pack<MB, In, V>(b, i, row);
        Pack<Out, V> r;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = f(pa.v[k], pb.v[k]);
        yv[i] = r;
    }
    if constexpr (V > 1) {
        const std::int64_t rest = n - nv * V;
        if (t < rest) {
            const std::int64_t e = nv * V + t;
            y[e] = f(load_one<MA>(a, e, row), load_one<MB>(b, e, row));
        }
    }
}

/// Collapsed broadcast of N operands against a contiguous output: dims and element strides
/// (0 = broadcast). Passed by value.
template <int N>
struct Plan {
    int rank = 1;
    std::int64_t dims[kMaxRank] = {};
    std::int64_t st[N][kMaxRank] = {};
};

/// Element offsets of output element i in each operand.
template <int N, class I>
DS_HD void offsets_of(I i, const Plan<N>& p, I (&off)[N]) {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = p.rank - 1; d > 0; --d) {
        const I dim = static_cast<I>(p.dims[d]);
        const I q = i / dim;
        const I r = i - q * dim;
        for (int k = 0; k < N; ++k) off[k] += r * static_cast<I>(p.st[k][d]);
        i = q;
    }
    for (int k = 0; k < N; ++k) off[k] += i * static_cast<I>(p.st[k][0]);
}

template <class In, class Out, class F, class I>
__global__ void map2_general(const In* a, const In* b, Out* y, std::int64_t n, Plan<2> p, F f) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        I off[2];
        offsets_of<2, I>(static_cast<I>(i), p, off);
        y[i] = f(a[off[0]], b[off[1]]);
    }
}

template <class S>
__global__ void where_contig(const Bool8* c, const S* x, const S* y, S* o, std::int64_t n) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        o[i] = c[i].v != 0 ? x[i] : y[i];
}

template <class S, class I>
__global__ void where_general(const Bool8* c, const S* x, const S* y, S* o, std::int64_t n,
                              Plan<3> p) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        I off[3];
        offsets_of<3, I>(static_cast<I>(i), p, off);
        o[i] = c[off[0]].v != 0 ? x[off[1]] : y[off[2]];
    }
}

// ---- host: broadcast plans and launchers -------------------------------------------------------

/// Broadcast strides of `ins` against `out` (shapes already validated by prepare), with size-1
/// output dims dropped and dims merged where every operand (and the output) is contiguous
/// across them. A single-element output is one full dim.
template <int N>
Plan<N> make_plan(const Shape& out, const std::array<const Shape*, N>& ins) {
    const int R = out.rank();
    std::int64_t ost[kMaxRank] = {};
    std::int64_t ist[N][kMaxRank] = {};
    {
        std::int64_t s = 1;
        for (int d = R - 1; d >= 0; --d) {
            ost[d] = s;
            s *= out[d];
        }
    }
    for (int k = 0; k < N; ++k) {
        const Shape& sh = *ins[static_cast<std::size_t>(k)];
        const int shift = R - sh.rank();
        std::int64_t s = 1;
        for (int d = R - 1; d >= 0; --d) {
            const int sd = d - shift;
            if (sd < 0) {
                ist[k][d] = 0;
                continue;
            }
            const std::int64_t dim = sh[sd];
            ist[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    Plan<N> p;
    int r = 0;
    for (int d = 0; d < R; ++d) {
        if (out[d] == 1) continue;
        if (r > 0) {
            bool merge = true;
            for (int k = 0; k < N; ++k)
                if (p.st[k][r - 1] != ist[k][d] * out[d]) merge = false;
            if (merge) {
                p.dims[r - 1] *= out[d];
                for (int k = 0; k < N; ++k) p.st[k][r - 1] = ist[k][d];
                continue;
            }
        }
        p.dims[r] = out[d];
        for (int k = 0; k < N; ++k) p.st[k][r] = ist[k][d];
        ++r;
    }
    (void)ost;
    if (r == 0) {  // one element: every operand is "full"
        p.dims[0] = 1;
        for (int k = 0; k < N; ++k) p.st[k][0] = 1;
        r = 1;
    }
    p.rank = r;
    return p;
}

/// kFull, kScalar, kRow (row = its length) or -1 (general path only).
template <int N>
int mode_of(const Plan<N>& p, int k, std::int64_t& row) {
    bool full = true, zero = true;
    std::int64_t s = 1;
    for (int d = p.rank - 1; d >= 0; --d) {
        if (p.st[k][d] != s) full = false;
        if (p.st[k][d] != 0) zero = false;
        s *= p.dims[d];
    }
    if (full) return kFull;
    if (zero) return kScalar;
    if (p.rank >= 2 && p.st[k][p.rank - 1] == 1) {
        bool lead_zero = true;
        for (int d = 0; d < p.rank - 1; ++d)
            if (p.st[k][d] != 0) lead_zero = false;
        if (lead_zero) {
            row = p.dims[p.rank - 1];
            return kRow;
        }
    }
    return -1;
}

/// y[i] = f(x[i]) for n elements (n > 0 checked by the caller or here).
template <class In, class Out, class F>
Status launch_map1(const void* x, void* y, std::int64_t n, F f, cudaStream_t s, const char* what) {
    if (n <= 0) return Status::ok();
    constexpr int V = vec_width<In, Out>();
    const auto* px = static_cast<const In*>(x);
    auto* py = static_cast<Out*>(y);
    if (aligned(x, sizeof(In) * V) && aligned(y, sizeof(Out) * V)) {
        map1_kernel<In, Out, F, V><<<grid_for((n + V - 1) / V, kThreads), kThreads, 0, s>>>(px, py, n, f);
    } else {
        map1_kernel<In, Out, F, 1><<<grid_for(n, kThreads), kThreads, 0, s>>>(px, py, n, f);
    }
    return launch_status(what);
}

/// y = f(a, b) with numpy broadcasting; y is contiguous with shape sy.
template <class In, class Out, class F>
Status launch_map2(const void* va, const Shape& sa, const void* vb, const Shape& sb, void* vy,
                   const Shape& sy, F f, cudaStream_t s, const char* what) {
    const std::int64_t n = sy.num_elements();
    if (n <= 0) return Status::ok();
    const auto* a = static_cast<const In*>(va);
    const auto* b = static_cast<const In*>(vb);
    auto* y = static_cast<Out*>(vy);
    const Plan<2> p = make_plan<2>(sy, {&sa, &sb});
    constexpr int V = vec_width<In, Out>();
    std::int64_t row_a = 1, row_b = 1;
    const int ma = mode_of(p, 0, row_a);
    const int mb = mode_of(p, 1, row_b);
    auto packable = [&](const void* q, int m, std::int64_t row) {
        if (m == kScalar) return true;
        if (m < 0 || !aligned(q, sizeof(In) * V)) return false;
        return m != kRow || row % V == 0;
    };
    if (aligned(vy, sizeof(Out) * V) && packable(va, ma, row_a) && packable(vb, mb, row_b)) {
        const unsigned grid = grid_for((n + V - 1) / V, kThreads);
        if (ma == kFull && mb == kFull) {
            map2_fast<In, Out, F, kFull, kFull, V><<<grid, kThreads, 0, s>>>(a, b, y, n, 1, f);
            return launch_status(what);
        }
        if (ma == kFull && mb == kScalar) {
            map2_fast<In, Out, F, kFull, kScalar, V><<<grid, kThreads, 0, s>>>(a, b, y, n, 1, f);
            return launch_status(what);
        }
        if (ma == kScalar && mb == kFull) {
            map2_fast<In, Out, F, kScalar, kFull, V><<<grid, kThreads, 0, s>>>(a, b, y, n, 1, f);
            return launch_status(what);
        }
        if (ma == kFull && mb == kRow) {
            map2_fast<In, Out, F, kFull, kRow, V><<<grid, kThreads, 0, s>>>(a, b, y, n, row_b, f);
            return launch_status(what);
        }
        if (ma == kRow && mb == kFull) {
            map2_fast<In, Out, F, kRow, kFull, V><<<grid, kThreads, 0, s>>>(a, b, y, n, row_a, f);
            return launch_status(what);
        }
    }
    const unsigned grid = grid_for(n, kThreads);
    if (n <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()))
        map2_general<In, Out, F, std::uint32_t><<<grid, kThreads, 0, s>>>(a, b, y, n, p, f);
    else
        map2_general<In, Out, F, std::int64_t><<<grid, kThreads, 0, s>>>(a, b, y, n, p, f);
    return launch_status(what);
}

template <class S>
Status launch_where(const TensorView& c, const TensorView& x, const TensorView& y,
                    const TensorView& o, cudaStream_t s) {
    const std::int64_t n = o.num_elements();
    if (n <= 0) return Status::ok();
    const auto* pc = static_cast<const Bool8*>(c.raw);
    const auto* px = static_cast<const S*>(x.raw);
    const auto* py = static_cast<const S*>(y.raw);
    auto* po = static_cast<S*>(o.raw);
    const unsigned grid = grid_for(n, kThreads);
    if (c.shape == o.shape && x.shape == o.shape && y.shape == o.shape) {
        where_contig<S><<<grid, kThreads, 0, s>>>(pc, px, py, po, n);
        return launch_status("Where");
    }
    const Plan<3> p = make_plan<3>(o.shape, {&c.shape, &x.shape, &y.shape});
    if (n <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()))
        where_general<S, std::uint32_t><<<grid, kThreads, 0, s>>>(pc, px, py, po, n, p);
    else
        where_general<S, std::int64_t><<<grid, kThreads, 0, s>>>(pc, px, py, po, n, p);
    return launch_status("Where");
}

Status copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
    if (bytes == 0 || dst == src) return Status::ok();
    DS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "elementwise copy");
    return Status::ok();
}

// ---- dtype dispatch ---------------------------------------------------------------------------

inline constexpr DTypeSet kFloat{DType::f32, DType::f16, DType::bf16};
inline constexpr DTypeSet kFloatInt{DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
inline constexpr DTypeSet kCastTypes{DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32,
                                     DType::i64, DType::i8,  DType::u8,   DType::boolean};
inline constexpr DTypeSet kNonString{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                     DType::u8,  DType::i16, DType::u16, DType::i32,  DType::u32,
                                     DType::i64, DType::u64, DType::boolean};

Status unsupported_dtype(DType dt) {
    return Status::error(ErrorCode::unsupported, "element type ", dtype_name(dt),
                         " is not supported by the CUDA elementwise kernel");
}

/// f.template operator()<T>() for the device storage type of dt: f32/f16/bf16, plus i32/i64
/// when Ints.
template <bool Ints, class F>
Status dispatch_math(DType dt, F&& f) {
    switch (dt) {
        case DType::f32: return f.template operator()<float>();
        case DType::f16: return f.template operator()<__half>();
        case DType::bf16: return f.template operator()<__nv_bfloat16>();
        case DType::i32:
            if constexpr (Ints) return f.template operator()<std::int32_t>();
            break;
        case DType::i64:
            if constexpr (Ints) return f.template operator()<std::int64_t>();
            break;
        default: break;
    }
    return unsupported_dtype(dt);
}

template <class F>
Status dispatch_cast(DType dt, F&& f) {
    switch (dt) {
        case DType::f32: return f.template operator()<float>();
        case DType::f16: return f.template operator()<__half>();
        case DType::bf16: return f.template operator()<__nv_bfloat16>();
        case DType::f64: return f.template operator()<double>();
        case DType::i32: return f.template operator()<std::int32_t>();
        case DType::i64: return f.template operator()<std::int64_t>();
        case DType::i8: return f.template operator()<std::int8_t>();
        case DType::u8: return f.template operator()<std::uint8_t>();
        case DType::boolean: return f.template operator()<Bool8>();
        default: break;
    }
    return unsupported_dtype(dt);
}

// ---- functors (on compute values) ---------------------------------------------------------------

template <class C>
DS_HD C neg_wrap(C x) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(U(0) - static_cast<U>(x)));
}

#define DS_FLOAT_UNARY(Name, Op, expr)                                       \
    struct Name {                                                            \
        static constexpr bool kInts = false;                                 \
        static constexpr const char* kName = Op;                             \
        DS_HD float operator()(float x) const { return (expr); } \
    };

DS_FLOAT_UNARY(TanhF, "Tanh", tanhf(x))
DS_FLOAT_UNARY(ErfF, "Erf", erff(x))
DS_FLOAT_UNARY(ExpF, "Exp", expf(x))
DS_FLOAT_UNARY(LogF, "Log", logf(x))
DS_FLOAT_UNARY(SqrtF, "Sqrt", sqrtf(x))
DS_FLOAT_UNARY(ReciprocalF, "Reciprocal", 1.f / x)
DS_FLOAT_UNARY(FloorF, "Floor", floorf(x))
DS_FLOAT_UNARY(CeilF, "Ceil", ceilf(x))
DS_FLOAT_UNARY(HardSwishF, "HardSwish", x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f)))
DS_FLOAT_UNARY(SoftplusF, "Softplus", fmaxf(x, 0.f) + log1pf(expf(-fabsf(x))))
#undef DS_FLOAT_UNARY

struct SigmoidF {
    static constexpr bool kInts = false;
    static constexpr const char* kName = "Sigmoid";
    DS_HD float operator()(float x) const {
        if (x >= 0.f) return 1.f / (1.f + expf(-x));
        const float e = expf(x);  // NaN lands here and stays NaN
        return e / (1.f + e);
    }
};

struct ReluF {
    static constexpr bool kInts = true;
    static constexpr const char* kName = "Relu";
    template <class C>
    DS_HD C operator()(C x) const {
        return x > C(0) ? x : (x == x ? C(0) : x);  // NaN stays NaN
    }
};
struct NegF {
    static constexpr bool kInts = true;
    static constexpr const char* kName = "Neg";
    template <class C>
    DS_HD C operator()(C x) const {
        if constexpr (std::is_integral_v<C>) return neg_wrap(x);
        else return -x;
    }
};
struct AbsF {
    static constexpr bool kInts = true;
    static constexpr const char* kName = "Abs";
    template <class C>
    DS_HD C operator()(C x) const {
        if constexpr (std::is_integral_v<C>) return x < C(0) ? neg_wrap(x) : x;
        else return fabsf(x);
    }
};
struct LeakyReluF {
    static constexpr bool kInts = false;
    static constexpr const char* kName = "LeakyRelu";
    float alpha;
    DS_HD float operator()(float x) const { return x < 0.f ? alpha * x : x; }
};
struct EluF {
    static constexpr bool kInts = false;
    static constexpr const char* kName = "Elu";
    float alpha;
    DS_HD float operator()(float x) const {
        return x < 0.f ? alpha * expm1f(x) : x;
    }
};
struct HardSigmoidF {
    static constexpr bool kInts = false;
    static constexpr const char* kName = "HardSigmoid";
    float alpha;
    float beta;
    DS_HD float operator()(float x) const {
        const float v = alpha * x + beta;
        return v != v ? v : fmaxf(0.f, fminf(1.f, v));  // NaN stays NaN, like the reference
    }
};
struct GeluF {
    static constexpr bool kInts = false;
    static constexpr const char* kName = "Gelu";
    bool tanh_approx;
    DS_HD float operator()(float x) const {
        if (tanh_approx) {
            const float k = 0.7978845608028654f;  // sqrt(2/pi), as the reference rounds it
            return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
        }
        return 0.5f * x * (1.f + erff(x / 1.4142135623730951f));
    }
};
struct ClipF {
    float lo;
    float hi;
    DS_HD float operator()(float v) const {
        if (v < lo) v = lo;
        if (v > hi) v = hi;  // min > max gives max, like the reference (numpy.clip)
        return v;
    }
};
/// Mean's last step: y / n.
struct DivByF {
    std::int64_t n;
    template <class C>
    DS_HD C operator()(C x) const {
        return x / static_cast<C>(n);
    }
};

/// Storage-type wrapper: load, op in the compute type, store (rounded once).
template <class T, class Op>
struct Unary {
    Op op;
    DS_HD T operator()(T x) const { return st<T>(op(ld(x))); }
};

// Binary functors: kBool ops produce bool.
struct AddF {
    static constexpr bool kInts = true, kBool = false;
    static constexpr const char* kName = "Add";
    template <class C>
    DS_HD C operator()(C a, C b) const {
        if constexpr (std::is_integral_v<C>) {
            using U = std::make_unsigned_t<C>;
            return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
        } else {
            return a + b;
        }
    }
};
struct SubF {
    static constexpr bool kInts = true, kBool = false;
    static constexpr const char* kName = "Sub";
    template <class C>
    DS_HD C operator()(C a, C b) const {
        if constexpr (std::is_integral_v<C>) {
            using U = std::make_unsigned_t<C>;
            return static_cast<C>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
        } else {
            return a - b;
        }
    }
};
struct MulF {
    static constexpr bool kInts = true, kBool = false;
    static constexpr const char* kName = "Mul";
    template <class C>
    DS_HD C operator()(C a, C b) const {
        if constexpr (std::is_integral_v<C>) {
            using U = std::make_unsigned_t<C>;
            return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
        } else {
            return a * b;
        }
    }
};
struct DivF {
    static constexpr bool kInts = false, kBool = false;
    static constexpr const char* kName = "Div";
    DS_HD float operator()(float a, float b) const { return a / b; }
};
struct PowF {
    static constexpr bool kInts = false, kBool = false;
    static constexpr const char* kName = "Pow";
    DS_HD float operator()(float a, float b) const { return powf(a, b); }
};
struct MaxF {
    static constexpr bool kInts = true, kBool = false;
    static constexpr const char* kName = "Max";
    template <class C>
    DS_HD C operator()(C a, C b) const {
        if constexpr (!std::is_integral_v<C>) {
            if (a != a) return a;  // NaN in either operand gives NaN
            if (b != b) return b;
        }
        return a < b ? b : a;
    }
};
struct MinF {
    static constexpr bool kInts = true, kBool = false;
    static constexpr const char* kName = "Min";
    template <class C>
    DS_HD C operator()(C a, C b) const {
        if constexpr (!std::is_integral_v<C>) {
            if (a != a) return a;
            if (b != b) return b;
        }
        return b < a ? b : a;
    }
};
struct EqualF {
    static constexpr bool kInts = true, kBool = true;
    static constexpr const char* kName = "Equal";
    template <class C>
    DS_HD bool operator()(C a, C b) const { return a == b; }
};
struct LessF {
    static constexpr bool kInts = true, kBool = true;
    static constexpr const char* kName = "Less";
    template <class C>
    DS_HD bool operator()(C a, C b) const { return a < b; }
};
struct GreaterF {
    static constexpr bool kInts = true, kBool = true;
    static constexpr const char* kName = "Greater";
    template <class C>
    DS_HD bool operator()(C a, C b) const { return a > b; }
};

template <class T, class Op>
struct Binary {
    using Out = std::conditional_t<Op::kBool, Bool8, T>;
    Op op;
    DS_HD Out operator()(T a, T b) const { return st<Out>(op(ld(a), ld(b))); }
};

// ---- Cast --------------------------------------------------------------------------------------

/// Float -> integer without UB: NaN -> 0, out-of-range values saturate, else truncation.
template <class I>
DS_HD I float_to_int(double d) {
    if (d != d) return I(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<I>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
    if (d <= lo) return std::numeric_limits<I>::lowest();
    if (d >= hi) return std::numeric_limits<I>::max();
    return static_cast<I>(d);
}

/// double -> float rounded to odd (a following conversion to a 16-bit float then rounds like
/// one correctly rounded double -> 16-bit conversion). The reference's algorithm.
DS_HD float to_float_round_odd(double d) {
    const float f = static_cast<float>(d);
    if (d != d || static_cast<double>(f) == d) return f;
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (fabs(static_cast<double>(f)) > fabs(d)) --bits;  // truncate toward zero
    bits |= 1u;
    float r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
}

template <class To, class From>
DS_HD To convert(From v) {
    if constexpr (std::is_same_v<To, From>) {
        return v;
    } else if constexpr (std::is_same_v<To, Bool8>) {
        return Bool8{static_cast<std::uint8_t>(ld(v) != 0 ? 1 : 0)};  // NaN -> true
    } else if constexpr (std::is_same_v<From, Bool8>) {
        return st<To>(v.v != 0 ? 1 : 0);
    } else if constexpr (is_half16_v<To>) {
        if constexpr (is_half16_v<From> || std::is_same_v<From, float>)
            return st<To>(static_cast<float>(ld(v)));
        else
            return st<To>(to_float_round_odd(static_cast<double>(v)));
    } else if constexpr (std::is_floating_point_v<To>) {
        return static_cast<To>(ld(v));
    } else if constexpr (is_floatish_v<From>) {
        return float_to_int<To>(static_cast<double>(ld(v)));
    } else {  // integer -> integer: modular
        return static_cast<To>(v);
    }
}

template <class From, class To>
struct CastFn {
    DS_HD To operator()(From v) const { return convert<To, From>(v); }
};

// ---- kernels (the Kernel objects) ----------------------------------------------------------------

/// Declines (unsupported) unless input i is a tensor of a known dtype in `set`.
Status need_dtype(const KernelCreateContext& ctx, int i, DTypeSet set) {
    const Value* v = ctx.input_value(i);
    if (v == nullptr || v->kind != ValueKind::tensor || !v->dtype)
        return Status::error(ErrorCode::unsupported, "CUDA elementwise: input ", i,
                             " has no known tensor element type");
    if (!set.contains(*v->dtype)) return unsupported_dtype(*v->dtype);
    return Status::ok();
}

/// Declines unless every input 1..n-1 is present and has input 0's (known) dtype.
Status need_same_dtypes(const KernelCreateContext& ctx, int first) {
    const Value* v0 = ctx.input_value(0);
    if (v0 == nullptr || !v0->dtype)
        return Status(ErrorCode::unsupported, "CUDA elementwise: input 0 has no known element type");
    for (int i = first; i < ctx.num_inputs(); ++i) {
        const Value* v = ctx.input_value(i);
        if (v == nullptr || v->kind != ValueKind::tensor || !v->dtype || *v->dtype != *v0->dtype)
            return Status::error(ErrorCode::unsupported, "CUDA elementwise: input ", i,
                                 " is missing or its element type differs from input 0's");
    }
    return Status::ok();
}

template <class Op>
class UnaryKernel final : public CudaKernel {
public:
    UnaryKernel(std::unique_ptr<Kernel> ref, Op op) : CudaKernel(std::move(ref)), op_(op) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t n = y.num_elements();
        if (n == 0) return Status::ok();
        const cudaStream_t s = stream_of(ctx);
        const Op op = op_;
        return dispatch_math<Op::kInts>(x.dtype, [&]<class T>() {
            return launch_map1<T, T>(x.raw, y.raw, n, Unary<T, Op>{op}, s, Op::kName);
        });
    }

private:
    Op op_;
};

template <class Op>
StatusOr<std::unique_ptr<Kernel>> make_unary_op(const KernelCreateContext& ctx, Op op) {
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, Op::kInts ? kFloatInt : kFloat));
    return make_with_fallback<UnaryKernel<Op>>(ctx, op);
}

template <class Op>
StatusOr<std::unique_ptr<Kernel>> make_unary(const KernelCreateContext& ctx) {
    return make_unary_op(ctx, Op{});
}

StatusOr<std::unique_ptr<Kernel>> make_leaky_relu(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(float alpha, ctx.node().attr_or<float>("alpha", 0.01f));
    return make_unary_op(ctx, LeakyReluF{alpha});
}
StatusOr<std::unique_ptr<Kernel>> make_elu(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(float alpha, ctx.node().attr_or<float>("alpha", 1.f));
    return make_unary_op(ctx, EluF{alpha});
}
StatusOr<std::unique_ptr<Kernel>> make_hard_sigmoid(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(float alpha, ctx.node().attr_or<float>("alpha", 0.2f));
    DSINFER_ASSIGN_OR_RETURN(float beta, ctx.node().attr_or<float>("beta", 0.5f));
    return make_unary_op(ctx, HardSigmoidF{alpha, beta});
}
/// ai.onnx Gelu (opset 20) and com.dsinfer Gelu: attribute `approximate` "none" | "tanh".
StatusOr<std::unique_ptr<Kernel>> make_gelu(const KernelCreateContext& ctx) {
    const StatusOr<std::string> approx_or = ctx.node().attr_or<std::string>("approximate", "none");
    if (!approx_or.is_ok()) return approx_or.status();
    const std::string& approx = approx_or.value();
    if (approx != "none" && approx != "tanh")
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'approximate' must be \"none\" or \"tanh\", got \"", approx,
                             "\"");
    return make_unary_op(ctx, GeluF{approx == "tanh"});
}

/// Clip: opset < 11 bounds from attributes; opset 11+ from the optional scalar inputs min/max,
/// read on the host (host_inputs).
class ClipKernel final : public CudaKernel {
public:
    ClipKernel(std::unique_ptr<Kernel> ref, bool attrs, float lo, float hi, std::uint64_t host)
        : CudaKernel(std::move(ref)), attrs_(attrs), lo_(lo), hi_(hi), host_(host) {}

    std::uint64_t host_inputs() const noexcept override { return host_; }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t n = y.num_elements();
        if (n == 0) return Status::ok();
        float lo = -std::numeric_limits<float>::infinity();
        float hi = std::numeric_limits<float>::infinity();
        if (attrs_) {
            lo = lo_;
            hi = hi_;
        } else {
            for (int i = 1; i <= 2; ++i) {
                if (!ctx.has_input(i)) continue;
                const TensorView& b = ctx.input(i);
                if (b.num_elements() < 1 || b.raw == nullptr)
                    return Status(ErrorCode::invalid_argument, "Clip bound is empty");
                float v = 0.f;
                switch (b.dtype) {
                    case DType::f32: v = *b.data_unchecked<float>(); break;
                    case DType::f16: v = static_cast<float>(*b.data_unchecked<float16>()); break;
                    case DType::bf16: v = static_cast<float>(*b.data_unchecked<bfloat16>()); break;
                    default: return unsupported_dtype(b.dtype);
                }
                (i == 1 ? lo : hi) = v;
            }
        }
        const cudaStream_t s = stream_of(ctx);
        return dispatch_math<false>(x.dtype, [&]<class T>() {
            return launch_map1<T, T>(x.raw, y.raw, n, Unary<T, ClipF>{ClipF{lo, hi}}, s, "Clip");
        });
    }

private:
    bool attrs_;
    float lo_;
    float hi_;
    std::uint64_t host_;
};

StatusOr<std::unique_ptr<Kernel>> make_clip(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, kFloat));
    if (ctx.opset() < 11) {
        DSINFER_ASSIGN_OR_RETURN(float lo, ctx.node().attr_or<float>(
                                               "min", -std::numeric_limits<float>::infinity()));
        DSINFER_ASSIGN_OR_RETURN(float hi, ctx.node().attr_or<float>(
                                               "max", std::numeric_limits<float>::infinity()));
        return make_with_fallback<ClipKernel>(ctx, true, lo, hi, std::uint64_t{0});
    }
    std::uint64_t host = 0;
    for (int i = 1; i <= 2; ++i) {
        if (!ctx.has_input(i)) continue;
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, i, kFloat));
        host |= std::uint64_t{1} << i;
    }
    return make_with_fallback<ClipKernel>(ctx, false, 0.f, 0.f, host);
}

/// Identity: a device copy (any non-string tensor type).
class IdentityKernel final : public CudaKernel {
public:
    using CudaKernel::CudaKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        return copy_device(y.raw, x.raw, y.num_bytes(), stream_of(ctx));
    }
};

StatusOr<std::unique_ptr<Kernel>> make_identity(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, kNonString));
    return make_with_fallback<IdentityKernel>(ctx);
}

template <class Op>
class BinaryKernel final : public CudaKernel {
public:
    using CudaKernel::CudaKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        if (b.dtype != a.dtype) return unsupported_dtype(b.dtype);
        const cudaStream_t s = stream_of(ctx);
        return dispatch_math<Op::kInts>(a.dtype, [&]<class T>() {
            using F = Binary<T, Op>;
            return launch_map2<T, typename F::Out>(a.raw, a.shape, b.raw, b.shape, y.raw, y.shape,
                                                   F{Op{}}, s, Op::kName);
        });
    }
};

template <class Op>
StatusOr<std::unique_ptr<Kernel>> make_binary(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() == 2 && ctx.has_input(0) && ctx.has_input(1)) {
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, Op::kInts ? kFloatInt : kFloat));
        DSINFER_RETURN_IF_ERROR(need_same_dtypes(ctx, 1));  // Pow: mixed exponent -> CPU
    }
    return make_with_fallback<BinaryKernel<Op>>(ctx);
}

/// Max / Min / Sum / Mean over 1+ inputs with broadcasting: the first pair into the output,
/// then each further input folded into it in place (rounded to the element type at each step,
/// like the reference); Mean divides at the end.
template <class Op, bool kMean>
class VariadicKernel final : public CudaKernel {
public:
    VariadicKernel(std::unique_ptr<Kernel> ref, const char* name)
        : CudaKernel(std::move(ref)), name_(name) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        const std::int64_t n = y.num_elements();
        if (n == 0) return Status::ok();
        const int m = ctx.num_inputs();
        const cudaStream_t s = stream_of(ctx);
        const char* name = name_;
        for (int i = 0; i < m; ++i)
            if (ctx.input(i).dtype != y.dtype) return unsupported_dtype(ctx.input(i).dtype);
        return dispatch_math<Op::kInts>(y.dtype, [&]<class T>() -> Status {
            using F = Binary<T, Op>;
            const TensorView& x0 = ctx.input(0);
            if (m == 1) {
                DSINFER_RETURN_IF_ERROR(copy_device(y.raw, x0.raw, y.num_bytes(), s));
            } else {
                DSINFER_RETURN_IF_ERROR((launch_map2<T, T>(x0.raw, x0.shape, ctx.input(1).raw,
                                                           ctx.input(1).shape, y.raw, y.shape,
                                                           F{Op{}}, s, name)));
                for (int i = 2; i < m; ++i)
                    DSINFER_RETURN_IF_ERROR((launch_map2<T, T>(y.raw, y.shape, ctx.input(i).raw,
                                                               ctx.input(i).shape, y.raw, y.shape,
                                                               F{Op{}}, s, name)));
            }
            if constexpr (kMean) {
                if (m > 1)
                    return launch_map1<T, T>(y.raw, y.raw, n, Unary<T, DivByF>{DivByF{m}}, s, name);
            }
            return Status::ok();
        });
    }

private:
    const char* name_;
};

template <class Op, bool kMean>
StatusOr<std::unique_ptr<Kernel>> make_variadic(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() >= 1 && ctx.has_input(0)) {
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, kFloatInt));
        DSINFER_RETURN_IF_ERROR(need_same_dtypes(ctx, 1));
    }
    const char* name = kMean ? "Mean" : std::is_same_v<Op, AddF> ? "Sum" : Op::kName;
    return make_with_fallback<VariadicKernel<Op, kMean>>(ctx, name);
}

/// Where(cond, X, Y) with broadcasting; X/Y of any non-string type (moved by element size).
class WhereKernel final : public CudaKernel {
public:
    using CudaKernel::CudaKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& c = ctx.input(0);
        const TensorView& x = ctx.input(1);
        const TensorView& y = ctx.input(2);
        const TensorView& o = ctx.output(0);
        if (o.num_elements() == 0) return Status::ok();
        if (c.dtype != DType::boolean || x.dtype != y.dtype || x.dtype == DType::string)
            return unsupported_dtype(x.dtype);
        const cudaStream_t s = stream_of(ctx);
        switch (dtype_size(x.dtype)) {
            case 1: return launch_where<std::uint8_t>(c, x, y, o, s);
            case 2: return launch_where<std::uint16_t>(c, x, y, o, s);
            case 4: return launch_where<std::uint32_t>(c, x, y, o, s);
            case 8: return launch_where<std::uint64_t>(c, x, y, o, s);
            default: return unsupported_dtype(x.dtype);
        }
    }
};

StatusOr<std::unique_ptr<Kernel>> make_where(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() == 3 && ctx.has_input(0) && ctx.has_input(1) && ctx.has_input(2)) {
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, DTypeSet{DType::boolean}));
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 1, kNonString));
        DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 2, DTypeSet{*ctx.input_value(1)->dtype}));
    }
    return make_with_fallback<WhereKernel>(ctx);
}

/// Cast / CastLike between f32, f16, bf16, f64, i32, i64, i8, u8 and bool.
class CastKernel final : public CudaKernel {
public:
    using CudaKernel::CudaKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t n = y.num_elements();
        if (n == 0) return Status::ok();
        const cudaStream_t s = stream_of(ctx);
        if (x.dtype == y.dtype) return copy_device(y.raw, x.raw, y.num_bytes(), s);
        return dispatch_cast(x.dtype, [&]<class From>() {
            return dispatch_cast(y.dtype, [&]<class To>() {
                return launch_map1<From, To>(x.raw, y.raw, n, CastFn<From, To>{}, s, "Cast");
            });
        });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_cast(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, kCastTypes));
    const Attribute* a = ctx.node().find_attr("to");
    if (a == nullptr || a->kind != AttrKind::i)  // missing (invalid) or the opset-1 string form
        return Status(ErrorCode::unsupported, "CUDA Cast: attribute 'to' is not an integer");
    const auto to = from_onnx_dtype(static_cast<int>(a->i));
    if (!to || !kCastTypes.contains(*to))
        return Status::error(ErrorCode::unsupported, "CUDA Cast to ",
                             onnx_dtype_name(static_cast<int>(a->i)), " is not supported");
    return make_with_fallback<CastKernel>(ctx);
}

StatusOr<std::unique_ptr<Kernel>> make_cast_like(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 0, kCastTypes));
    DSINFER_RETURN_IF_ERROR(need_dtype(ctx, 1, kCastTypes));
    return make_with_fallback<CastKernel>(ctx);
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
    const auto dev = DeviceKind::cuda;
    auto add = [&](const char* op, std::int64_t from, DTypeSet types, KernelFactory f,
                   const char* domain = "", std::int64_t to = kMaxOpset) {
        r.add({op, domain, from, to, dev, types}, f, kPriorityCuda, kProvider);
    };
    // Unary (opset 6: the first without the legacy consumed_inputs attribute).
    add("Relu", 6, kFloatInt, &make_unary<ReluF>);
    add("Neg", 6, kFloatInt, &make_unary<NegF>);
    add("Abs", 6, kFloatInt, &make_unary<AbsF>);
    add("Sigmoid", 6, kFloat, &make_unary<SigmoidF>);
    add("Tanh", 6, kFloat, &make_unary<TanhF>);
    add("Erf", 9, kFloat, &make_unary<ErfF>);
    add("Exp", 6, kFloat, &make_unary<ExpF>);
    add("Log", 6, kFloat, &make_unary<LogF>);
    add("Sqrt", 6, kFloat, &make_unary<SqrtF>);
    add("Reciprocal", 6, kFloat, &make_unary<ReciprocalF>);
    add("Floor", 6, kFloat, &make_unary<FloorF>);
    add("Ceil", 6, kFloat, &make_unary<CeilF>);
    add("HardSwish", 14, kFloat, &make_unary<HardSwishF>);
    add("Softplus", 1, kFloat, &make_unary<SoftplusF>);
    add("LeakyRelu", 6, kFloat, &make_leaky_relu);
    add("Elu", 6, kFloat, &make_elu);
    add("HardSigmoid", 6, kFloat, &make_hard_sigmoid);
    add("Gelu", 20, kFloat, &make_gelu);
    add("Gelu", 1, kFloat, &make_gelu, kDsinferDomain, 1);
    add("Clip", 6, kFloat, &make_clip);
    add("Identity", 1, kNonString, &make_identity);
    // Binary with numpy broadcasting (opset 7: the first without legacy broadcast).
    add("Add", 7, kFloatInt, &make_binary<AddF>);
    add("Sub", 7, kFloatInt, &make_binary<SubF>);
    add("Mul", 7, kFloatInt, &make_binary<MulF>);
    add("Div", 7, kFloat, &make_binary<DivF>);
    add("Pow", 7, kFloat, &make_binary<PowF>);
    add("Equal", 7, kFloatInt, &make_binary<EqualF>);
    add("Less", 7, kFloatInt, &make_binary<LessF>);
    add("Greater", 7, kFloatInt, &make_binary<GreaterF>);
    add("Max", 6, kFloatInt, &make_variadic<MaxF, false>);
    add("Min", 6, kFloatInt, &make_variadic<MinF, false>);
    add("Sum", 6, kFloatInt, &make_variadic<AddF, false>);
    add("Mean", 6, kFloatInt, &make_variadic<AddF, true>);
    add("Where", 9, DTypeSet{DType::boolean}, &make_where);
    add("Cast", 6, kCastTypes, &make_cast);
    add("CastLike", 15, kCastTypes, &make_cast_like);
}

}  // namespace dsinfer::cuda

#undef DS_HD
