// cuda/kernels/conv.cpp — cuDNN kernels (legacy cuDNN 9 API): Conv (opset 1+), com.dsinfer
// FusedConv, MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool. NCHW, 1 to 3 spatial
// dims (1-D runs as 2-D with a unit height), f32 / f16 / bf16 (FusedConv too: bias, residual and activation in float; reference
// kernel). Semantics are the reference kernels' (src/cpu/reference/nn_conv.cpp, nn_pool.cpp,
// fused.cpp); CudaKernel::prepare is theirs, so shapes and validation are shared.
//
// Convolution: descriptors are built per call (host-only, microseconds) and destroyed by RAII.
// Compute type is float; math is FMA-only for f32 (tf32 tensor cores only with
// EngineOptions::precision tf32) and tensor ops for f16/bf16. Padding cuDNN cannot express
// (begin != end pads: auto_pad SAME_* with an odd total, asymmetric `pads`) is handled by
// copying X into a zero-padded buffer in the workspace (only the asymmetric part; the symmetric
// part stays cuDNN padding). Algorithms: cudnnGetConvolutionForwardAlgorithm_v7 (heuristics, no
// allocation or benchmarking), the first candidates whose workspace fits 256 MiB, cached per
// (dtype, X shape, W shape) behind a mutex; prepare sizes the workspace, run tries candidates
// in order when cuDNN refuses one (NOT_SUPPORTED), ending with IMPLICIT_GEMM (no workspace).
// Bias: cudnnAddTensor after the convolution; FusedConv with Relu uses
// cudnnConvolutionBiasActivationForward (Y = relu(conv + Z + B)) and falls back to the unfused
// sequence (Y = Z; conv with beta = 1; AddTensor; ActivationForward) when cuDNN declines it.
// Z may share Y's buffer (the memory planner's in-place residual): both sequences allow it
// (cuDNN reads z before writing y; checked on an H200, as is that alpha2 = 0 never reads z).
// FusedConv activations: Relu, Sigmoid, Tanh and Clip with min 0 (clipped ReLU); the others
// (LeakyRelu, HardSwish, Gelu, GeluTanh, general Clip) are declined at creation.
//
// Pooling: cudnnPoolingForward. MaxPool without the Indices output and with dilations 1;
// geometry cuDNN cannot express (asymmetric pads, ceil_mode adding a partial window) runs on an
// -inf padded copy of X in the workspace. AveragePool needs cuDNN's own geometry (symmetric
// pads, ceil_mode adding no window, dilations 1): decided at creation from the attributes and,
// where they depend on it, the declared static spatial dims; otherwise declined. Global pools
// reduce all spatial dims (any rank >= 3; rank 2 is a copy).
//
// Handles: one cudnnHandle_t per (thread, device), created on first use, bound to the run's
// stream before each call, destroyed at thread exit. cudnnStatus_t maps to Status: allocation
// failures -> resource_exhausted, NOT_INITIALIZED -> unavailable, execution failures with a
// CUDA error -> that error's mapping (device_lost for sticky ones), others -> internal; messages
// carry cudnnGetErrorString and the node's shapes.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/window.hpp"
#include "cuda_common.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::cuda {
namespace {

using detail::Activation;
using detail::ActivationSpec;
using detail::AutoPad;
using std::int64_t;

constexpr std::size_t kConvWorkspaceCap = std::size_t{256} << 20;  // per convolution
constexpr std::size_t kAlign = 256;                                // workspace sub-buffers
constexpr int kMaxSpatial = 3;
constexpr int kMaxDims = kMaxSpatial + 2;
constexpr int kMaxAlgos = 6;

std::size_t align_up(std::size_t n) noexcept { return (n + kAlign - 1) / kAlign * kAlign; }

/// The workspace from its first kAlign-aligned byte (prepare asks for kAlign bytes of slack);
/// `left` gets the bytes from there on.
unsigned char* aligned_workspace(void* base, std::size_t bytes, std::size_t& left) noexcept {
    left = 0;
    if (base == nullptr) return nullptr;
    const auto a = reinterpret_cast<std::uintptr_t>(base);
    const std::uintptr_t b = (a + kAlign - 1) & ~static_cast<std::uintptr_t>(kAlign - 1);
    const std::size_t skip = static_cast<std::size_t>(b - a);
    left = bytes > skip ? bytes - skip : 0;
    return reinterpret_cast<unsigned char*>(b);
}

// ---- errors ----------------------------------------------------------------------------------

Status cudnn_status(cudnnStatus_t st, const char* what, const std::string& where) {
    if (st == CUDNN_STATUS_SUCCESS) return Status::ok();
    const int category = CUDNN_STATUS_CATEGORY(st);
    if (category == static_cast<int>(CUDNN_STATUS_EXECUTION_FAILED)) {
        // A kernel cuDNN launched failed: the CUDA error says whether the context is gone.
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            Status cs = cuda_status(e, what);
            return Status(cs.code(), cs.message() + " (cuDNN: " + cudnnGetErrorString(st) +
                                         (where.empty() ? "" : "; " + where) + ")");
        }
    }
    ErrorCode code = ErrorCode::internal;
    if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = ErrorCode::resource_exhausted;
    else if (category == static_cast<int>(CUDNN_STATUS_NOT_INITIALIZED))
        code = ErrorCode::unavailable;
    return Status::error(code, what, ": ", cudnnGetErrorString(st), " (", static_cast<int>(st), ")",
                         where.empty() ? "" : "; ", where);
}

/// Statuses after which the next algorithm (or the unfused sequence) is worth a try.
bool retryable(cudnnStatus_t st) noexcept {
    const int category = CUDNN_STATUS_CATEGORY(st);
    return category == static_cast<int>(CUDNN_STATUS_NOT_SUPPORTED) ||
           category == static_cast<int>(CUDNN_STATUS_BAD_PARAM);
}

// Needs a callable `where()` returning the std::string context in scope.
#define DS_CUDNN_TRY(expr, what)                              \
    do {                                                      \
        const cudnnStatus_t ds_cudnn_st_ = (expr);            \
        if (ds_cudnn_st_ != CUDNN_STATUS_SUCCESS)             \
            return cudnn_status(ds_cudnn_st_, what, where()); \
    } while (0)

#define DS_CUDA_TRY_AT(expr, what)                                           \
    do {                                                                     \
        const cudaError_t ds_cuda_e_ = (expr);                               \
        if (ds_cuda_e_ != cudaSuccess) {                                     \
            const Status ds_cs_ = cuda_status(ds_cuda_e_, what);             \
            return Status(ds_cs_.code(), ds_cs_.message() + "; " + where()); \
        }                                                                    \
    } while (0)

// ---- handles ---------------------------------------------------------------------------------

struct ThreadHandles {
    struct Slot {
        int device;
        cudnnHandle_t handle;
    };
    std::vector<Slot> slots;
    ThreadHandles() = default;
    ThreadHandles(const ThreadHandles&) = delete;
    ThreadHandles& operator=(const ThreadHandles&) = delete;
    ~ThreadHandles() {
        for (const Slot& s : slots) {
            if (s.handle == nullptr || device_lost(s.device)) continue;
            if (cudaSetDevice(s.device) == cudaSuccess) (void)cudnnDestroy(s.handle);
        }
    }
};

ThreadHandles& thread_handles() {
    thread_local ThreadHandles th;
    return th;
}

/// This thread's handle for `device` (the current device), bound to `stream`.
template <class Where>
Status get_handle(int device, cudaStream_t stream, cudnnHandle_t& out, const Where& where) {
    ThreadHandles& th = thread_handles();
    out = nullptr;
    for (const auto& s : th.slots)
        if (s.device == device) out = s.handle;
    if (out == nullptr) {
        cudnnHandle_t h = nullptr;
        DS_CUDNN_TRY(cudnnCreate(&h), "cudnnCreate");
        try {
            th.slots.push_back({device, h});
        } catch (...) {
            (void)cudnnDestroy(h);
            return Status(ErrorCode::resource_exhausted, "out of host memory");
        }
        out = h;
    }
    DS_CUDNN_TRY(cudnnSetStream(out, stream), "cudnnSetStream");
    return Status::ok();
}

// ---- descriptors (RAII) ----------------------------------------------------------------------

template <class H, cudnnStatus_t (*Create)(H*), cudnnStatus_t (*Destroy)(H)>
class Owned {
public:
    Owned() = default;
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned() {
        if (h_ != nullptr) (void)Destroy(h_);
    }
    cudnnStatus_t create() { return h_ != nullptr ? CUDNN_STATUS_SUCCESS : Create(&h_); }
    H get() const noexcept { return h_; }

private:
    H h_ = nullptr;
};

using TensorDesc =
    Owned<cudnnTensorDescriptor_t, &cudnnCreateTensorDescriptor, &cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Owned<cudnnFilterDescriptor_t, &cudnnCreateFilterDescriptor, &cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, &cudnnCreateConvolutionDescriptor,
                       &cudnnDestroyConvolutionDescriptor>;
using PoolDesc =
    Owned<cudnnPoolingDescriptor_t, &cudnnCreatePoolingDescriptor, &cudnnDestroyPoolingDescriptor>;
using ActDesc = Owned<cudnnActivationDescriptor_t, &cudnnCreateActivationDescriptor,
                      &cudnnDestroyActivationDescriptor>;

/// Packed (row-major) strides of `nd` dims.
void packed_strides(int nd, const int* dims, int* strides) noexcept {
    long long acc = 1;
    for (int i = nd - 1; i >= 0; --i) {
        strides[i] = static_cast<int>(std::min<long long>(acc, INT_MAX));
        acc *= std::max(dims[i], 1);
    }
}

/// Sets `d` to `nd` dims with `strides` (packed when null).
cudnnStatus_t set_tensor(TensorDesc& d, cudnnDataType_t dt, int nd, const int* dims,
                         const int* strides = nullptr) {
    const cudnnStatus_t st = d.create();
    if (st != CUDNN_STATUS_SUCCESS) return st;
    int packed[kMaxDims];
    if (strides == nullptr) {
        packed_strides(nd, dims, packed);
        strides = packed;
    }
    return cudnnSetTensorNdDescriptor(d.get(), dt, nd, dims, strides);
}

bool to_int(int64_t v, int& out) noexcept {
    if (v < 0 || v > INT_MAX) return false;
    out = static_cast<int>(v);
    return true;
}

cudnnDataType_t cudnn_type(DType dt) noexcept {
    switch (dt) {
        case DType::f16: return CUDNN_DATA_HALF;
        case DType::bf16: return CUDNN_DATA_BFLOAT16;
        default: return CUDNN_DATA_FLOAT;
    }
}

bool supported_type(DType dt) noexcept {
    return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16;
}

std::string dims_string(int nd, const int* d) {
    std::string s = "[";
    for (int i = 0; i < nd; ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

// cudnnSetTensor reads its value as a float for f32, f16 and bf16 tensors alike (checked on
// an H200 with cuDNN 9: a 16-bit pattern is misread), and converts it to the tensor's type.
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Copies X (packed, `nd` dims `xdims`) into the interior of a packed buffer of dims `pdims`
/// at offsets `off` (the buffer's border must already be filled).
template <class Where>
Status copy_into_padded(cudnnHandle_t h, cudnnDataType_t dt, std::size_t es, int nd,
                        const int* xdims, const void* x, const int* pdims, const int* off,
                        void* buf, const Where& where) {
    int pstrides[kMaxDims];
    packed_strides(nd, pdims, pstrides);
    std::size_t offset = 0;
    for (int i = 0; i < nd; ++i)
        offset += static_cast<std::size_t>(off[i]) * static_cast<std::size_t>(pstrides[i]);
    TensorDesc src, dst;
    DS_CUDNN_TRY(set_tensor(src, dt, nd, xdims), "cudnnSetTensorNdDescriptor (X)");
    DS_CUDNN_TRY(set_tensor(dst, dt, nd, xdims, pstrides), "cudnnSetTensorNdDescriptor (padded X)");
    const float one = 1.f, zero = 0.f;
    DS_CUDNN_TRY(cudnnTransformTensor(h, &one, src.get(), x, &zero, dst.get(),
                                      static_cast<unsigned char*>(buf) + offset * es),
                 "cudnnTransformTensor (padding X)");
    return Status::ok();
}

// ---- convolution -----------------------------------------------------------------------------

/// The shared convolution attributes (ops/conv.hpp) and FusedConv's activation.
struct CudaConvAttrs : detail::ConvAttrs {
    bool fused = false;
    ActivationSpec act;
};

/// Everything a convolution call needs that follows from the shapes.
struct ConvPlan {
    DType dtype = DType::f32;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    std::size_t es = 4;
    int nd = 4;  // descriptor rank: 4 (1-D, 2-D) or 5 (3-D)
    int x[kMaxDims] = {}, w[kMaxDims] = {}, y[kMaxDims] = {};
    int pad[kMaxSpatial] = {}, stride[kMaxSpatial] = {}, dil[kMaxSpatial] = {};
    int group = 1;
    bool explicit_pad = false;                   // X goes through a zero-padded copy
    int xp[kMaxDims] = {}, xoff[kMaxDims] = {};  // that copy's dims and X's offset in it
    std::size_t xpad_bytes = 0;
    bool no_reduce = false;  // C == 0 or an empty kernel: Y = B (+ Z)
    int64_t out_elems = 0;

    /// The dims cuDNN convolves (the padded copy when explicit_pad).
    const int* conv_in() const noexcept { return explicit_pad ? xp : x; }
};

Status conv_plan(const CudaConvAttrs& a, const Shape& xs, const Shape& ws, DType dtype, ConvPlan& p) {
    const int nsp = xs.rank() - 2;
    if (nsp < 1 || nsp > kMaxSpatial || ws.rank() != xs.rank())
        return Status::error(ErrorCode::unsupported, "cuDNN Conv supports 1 to ", kMaxSpatial,
                             " spatial dims, got X ", xs.to_string(), " W ", ws.to_string());
    if (!supported_type(dtype))
        return Status::error(ErrorCode::unsupported, "cuDNN Conv does not support ",
                             dtype_name(dtype));
    p.dtype = dtype;
    p.dt = cudnn_type(dtype);
    p.es = dtype_size(dtype);
    p.nd = nsp == 1 ? 4 : nsp + 2;
    const int lead = p.nd - 2 - nsp;  // 1 for 1-D (a unit height), else 0
    auto bad = [&]() {
        return Status::error(ErrorCode::unsupported, "X ", xs.to_string(), " / W ", ws.to_string(),
                             " exceed cuDNN's 32-bit dims");
    };
    if (!to_int(xs[0], p.x[0]) || !to_int(xs[1], p.x[1]) || !to_int(ws[0], p.w[0]) ||
        !to_int(ws[1], p.w[1]) || !to_int(a.group, p.group))
        return bad();
    p.y[0] = p.x[0];
    p.y[1] = p.w[0];
    p.no_reduce = xs[1] == 0 || ws[1] == 0;
    for (int j = 0; j < lead; ++j) {
        p.x[2 + j] = p.w[2 + j] = p.y[2 + j] = 1;
        p.pad[j] = 0;
        p.stride[j] = p.dil[j] = 1;
    }
    bool asym = false;
    int qb[kMaxDims] = {}, qe[kMaxDims] = {};
    for (int i = 0; i < nsp; ++i) {
        const int d = 2 + lead + i;  // descriptor dim
        const int64_t in = xs[2 + i], k = ws[2 + i];
        const int64_t s = detail::attr_at(a.strides, i, 1), dl = detail::attr_at(a.dilations, i, 1);
        DSINFER_ASSIGN_OR_RETURN(
            const detail::WindowDim wd,
            detail::window_dim(i, nsp, in, k, s, dl, a.auto_pad, a.pads, false));
        const int64_t pm = std::min(wd.pb, wd.pe);
        if (!to_int(in, p.x[d]) || !to_int(k, p.w[d]) || !to_int(wd.out, p.y[d]) ||
            !to_int(pm, p.pad[d - 2]) || !to_int(s, p.stride[d - 2]) || !to_int(dl, p.dil[d - 2]) ||
            !to_int(wd.pb - pm, qb[d]) || !to_int(wd.pe - pm, qe[d]))
            return bad();
        if (k == 0) p.no_reduce = true;
        if (qb[d] != 0 || qe[d] != 0) asym = true;
    }
    p.out_elems = 1;
    for (int d = 0; d < p.nd; ++d) p.out_elems *= p.y[d];
    p.explicit_pad = asym && !p.no_reduce;
    if (p.explicit_pad) {
        std::size_t n = 1;
        for (int d = 0; d < p.nd; ++d) {
            const int64_t v = static_cast<int64_t>(p.x[d]) + qb[d] + qe[d];
            if (!to_int(v, p.xp[d])) return bad();
            p.xoff[d] = qb[d];
            n *= static_cast<std::size_t>(p.xp[d]);
        }
        p.xpad_bytes = n * p.es;
    }
    return Status::ok();
}

struct AlgoList {
    int count = 0;
    cudnnConvolutionFwdAlgo_t algo[kMaxAlgos] = {};
    std::size_t ws[kMaxAlgos] = {};
    std::size_t need = 0;  // workspace of the first (preferred) candidate
};

/// The descriptors of one convolution call.
struct ConvDescs {
    TensorDesc x, y, b;
    FilterDesc w;
    ConvDesc conv;
};

template <class Where>
Status make_conv_descs(const ConvPlan& p, cudnnMathType_t math, ConvDescs& d, const Where& where) {
    DS_CUDNN_TRY(set_tensor(d.y, p.dt, p.nd, p.y), "cudnnSetTensorNdDescriptor (Y)");
    int bdims[kMaxDims];
    for (int i = 0; i < p.nd; ++i) bdims[i] = i == 1 ? p.y[1] : 1;
    DS_CUDNN_TRY(set_tensor(d.b, p.dt, p.nd, bdims), "cudnnSetTensorNdDescriptor (B)");
    if (p.no_reduce) return Status::ok();  // X may have a 0 dim: no X, W or conv descriptors
    DS_CUDNN_TRY(set_tensor(d.x, p.dt, p.nd, p.conv_in()), "cudnnSetTensorNdDescriptor (X)");
    DS_CUDNN_TRY(d.w.create(), "cudnnCreateFilterDescriptor");
    DS_CUDNN_TRY(cudnnSetFilterNdDescriptor(d.w.get(), p.dt, CUDNN_TENSOR_NCHW, p.nd, p.w),
                 "cudnnSetFilterNdDescriptor");
    DS_CUDNN_TRY(d.conv.create(), "cudnnCreateConvolutionDescriptor");
    DS_CUDNN_TRY(cudnnSetConvolutionNdDescriptor(d.conv.get(), p.nd - 2, p.pad, p.stride, p.dil,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                 "cudnnSetConvolutionNdDescriptor");
    DS_CUDNN_TRY(cudnnSetConvolutionGroupCount(d.conv.get(), p.group),
                 "cudnnSetConvolutionGroupCount");
    DS_CUDNN_TRY(cudnnSetConvolutionMathType(d.conv.get(), math), "cudnnSetConvolutionMathType");
    // cuDNN's output dims must be the reference's (a mismatch is a bug in the plan).
    int out[kMaxDims] = {};
    DS_CUDNN_TRY(
        cudnnGetConvolutionNdForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), p.nd, out),
        "cudnnGetConvolutionNdForwardOutputDim");
    for (int i = 0; i < p.nd; ++i)
        if (out[i] != p.y[i])
            return Status::error(ErrorCode::internal, "cuDNN computes output dims ",
                                 dims_string(p.nd, out), ", expected ", dims_string(p.nd, p.y),
                                 "; ", where());
    return Status::ok();
}

/// Heuristic candidates whose workspace fits `cap`: up to 4 from cuDNN (each no larger than the
/// first), then IMPLICIT_PRECOMP_GEMM and IMPLICIT_GEMM when they fit.
template <class Where>
Status select_algos(cudnnHandle_t h, const ConvDescs& d, std::size_t cap, AlgoList& out,
                    const Where& where) {
    out = AlgoList{};
    int max_count = 0;
    DS_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                 "cudnnGetConvolutionForwardAlgorithmMaxCount");
    max_count = std::clamp(max_count, 1, 16);
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int returned = 0;
    DS_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(),
                                                        d.y.get(), max_count, &returned, perf),
                 "cudnnGetConvolutionForwardAlgorithm_v7");
    auto add = [&](cudnnConvolutionFwdAlgo_t algo, bool heuristic) {
        if (out.count >= kMaxAlgos) return;
        for (int i = 0; i < out.count; ++i)
            if (out.algo[i] == algo) return;
        std::size_t ws = 0;
        if (cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(),
                                                    d.y.get(), algo, &ws) != CUDNN_STATUS_SUCCESS)
            return;
        if (ws > cap) return;
        if (heuristic && out.count > 0 && ws > out.need) return;
        if (out.count == 0) out.need = ws;
        out.algo[out.count] = algo;
        out.ws[out.count] = ws;
        ++out.count;
    };
    for (int i = 0; i < returned && out.count < kMaxAlgos - 2; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS) add(perf[i].algo, true);
    add(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, false);
    add(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, false);
    if (out.count == 0)
        return Status::error(ErrorCode::internal,
                             "cuDNN offers no convolution algorithm within a workspace of ", cap,
                             " bytes; ", where());
    for (int i = 0; i < out.count; ++i) out.need = std::max(out.need, out.ws[i]);
    return Status::ok();
}

class ConvKernel final : public CudaKernel {
public:
    ConvKernel(std::unique_ptr<Kernel> reference, CudaConvAttrs a, int device, bool allow_tf32,
               DeviceConstant w, DeviceConstant b, std::uint64_t released)
        : CudaKernel(std::move(reference)),
          a_(std::move(a)),
          device_(device),
          allow_tf32_(allow_tf32),
          w_(std::move(w)),
          b_(std::move(b)),
          released_(released) {}

    std::uint64_t released_constant_inputs() const noexcept override { return released_; }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(CudaKernel::prepare(ctx));
        if (ctx.inferring()) return Status::ok();  // load time: no device work
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        ConvPlan p;
        DSINFER_RETURN_IF_ERROR(conv_plan(a_, x.shape(), w.shape(), x.dtype(), p));
        if (p.out_elems == 0) return Status::ok();
        std::size_t bytes = p.explicit_pad ? align_up(p.xpad_bytes) : 0;
        if (needs_zero_bias(ctx.has_input(2)))
            bytes += align_up(static_cast<std::size_t>(p.y[1]) * p.es);
        if (!p.no_reduce) {
            auto where = [&] { return shapes(x.shape(), w.shape()); };
            AlgoList algos;
            DSINFER_RETURN_IF_ERROR(algos_for(p, kConvWorkspaceCap, algos, where));
            bytes += algos.need;
        }
        ctx.set_workspace(bytes > 0 ? bytes + kAlign : 0);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        try {
            return run_impl(ctx);
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of host memory");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "Conv: ", e.what());
        }
    }

private:
    static std::string shapes(const Shape& x, const Shape& w) {
        return "X " + x.to_string() + ", W " + w.to_string();
    }
    bool fused_relu() const noexcept { return a_.fused && a_.act.kind == Activation::relu; }
    bool needs_zero_bias(bool has_bias) const noexcept { return fused_relu() && !has_bias; }
    cudnnMathType_t math(DType dt) const noexcept {
        if (dt == DType::f32) return allow_tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    }

    /// The cached candidates for this plan's shapes (selected on first use, within `cap`).
    template <class Where>
    Status algos_for(const ConvPlan& p, std::size_t cap, AlgoList& out, const Where& where) const {
        // Kept per thread (run() calls this): after a thread's first call a cache hit
        // allocates nothing.
        thread_local std::vector<int64_t> key;
        key.clear();
        try {
            key.reserve(2 * kMaxDims + 2);
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory for the conv algorithm key");
        }
        key.push_back(static_cast<int64_t>(p.dtype));
        key.push_back(p.nd);
        for (int i = 0; i < p.nd; ++i) key.push_back(p.conv_in()[i]);
        for (int i = 0; i < p.nd; ++i) key.push_back(p.w[i]);
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = cache_.find(key);
            if (it != cache_.end() && it->second.need <= cap) {
                out = it->second;
                return Status::ok();
            }
        }
        cudnnHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(get_handle(device_, nullptr, h, where));
        ConvDescs d;
        DSINFER_RETURN_IF_ERROR(make_conv_descs(p, math(p.dtype), d, where));
        DSINFER_RETURN_IF_ERROR(select_algos(h, d, cap, out, where));
        if (cap == kConvWorkspaceCap) {
            std::lock_guard<std::mutex> lock(mu_);
            try {
                cache_.emplace(key, out);
            } catch (const std::bad_alloc&) {
                // Not cached: the candidates are selected again next time.
            }
        }
        return Status::ok();
    }

    Status run_impl(RunContext& ctx) const {
        const TensorView& xv = ctx.input(0);
        const TensorView& wv = ctx.input(1);
        const TensorView& yv = ctx.output(0);
        if (yv.num_elements() == 0) return Status::ok();
        auto where = [&] { return shapes(xv.shape, wv.shape); };
        ConvPlan p;
        DSINFER_RETURN_IF_ERROR(conv_plan(a_, xv.shape, wv.shape, xv.dtype, p));
        const cudaStream_t stream = stream_of(ctx);
        cudnnHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(get_handle(device_, stream, h, where));

        const void* wptr = w_ ? w_.get() : wv.raw;
        const bool has_b = ctx.has_input(2);
        const void* bptr = has_b ? (b_ ? b_.get() : ctx.input(2).raw) : nullptr;
        const void* zptr = a_.fused && ctx.has_input(3) ? ctx.input(3).raw : nullptr;
        void* y = yv.raw;

        // Workspace: [padded X][zero bias][cuDNN workspace], from an aligned start.
        std::size_t ws_bytes = 0;
        unsigned char* base = aligned_workspace(ctx.workspace(), ctx.workspace_bytes(), ws_bytes);
        std::size_t off = 0;
        void* xpad = nullptr;
        if (p.explicit_pad) {
            xpad = base + off;
            off += align_up(p.xpad_bytes);
        }
        void* zero_bias = nullptr;
        if (needs_zero_bias(has_b)) {
            zero_bias = base + off;
            off += align_up(static_cast<std::size_t>(p.y[1]) * p.es);
        }
        if (off > ws_bytes)
            return Status::error(ErrorCode::internal, "Conv workspace of ", ctx.workspace_bytes(),
                                 " bytes is smaller than the ", off + kAlign,
                                 " bytes prepare asked for; ", where());
        void* conv_ws = ws_bytes > off ? base + off : nullptr;
        const std::size_t conv_ws_bytes = ws_bytes - off;

        ConvDescs d;
        DSINFER_RETURN_IF_ERROR(make_conv_descs(p, math(p.dtype), d, where));
        const float one = 1.f, zero = 0.f;

        const void* xin = xv.raw;
        if (p.explicit_pad) {
            DS_CUDA_TRY_AT(cudaMemsetAsync(xpad, 0, p.xpad_bytes, stream),
                           "cudaMemsetAsync (padded X)");
            DSINFER_RETURN_IF_ERROR(
                copy_into_padded(h, p.dt, p.es, p.nd, p.x, xv.raw, p.xp, p.xoff, xpad, where));
            xin = xpad;
        }
        AlgoList algos;
        if (!p.no_reduce) DSINFER_RETURN_IF_ERROR(algos_for(p, conv_ws_bytes, algos, where));

        // Fused: Y = relu(conv(X, W) + Z + B) in one call.
        if (fused_relu() && !p.no_reduce) {
            if (zero_bias != nullptr) {
                DS_CUDA_TRY_AT(
                    cudaMemsetAsync(zero_bias, 0, static_cast<std::size_t>(p.y[1]) * p.es, stream),
                    "cudaMemsetAsync (zero bias)");
            }
            ActDesc act;
            DS_CUDNN_TRY(act.create(), "cudnnCreateActivationDescriptor");
            DS_CUDNN_TRY(cudnnSetActivationDescriptor(act.get(), CUDNN_ACTIVATION_RELU,
                                                      CUDNN_NOT_PROPAGATE_NAN, 0.0),
                         "cudnnSetActivationDescriptor");
            const float alpha2 = zptr != nullptr ? 1.f : 0.f;
            const void* z = zptr != nullptr ? zptr : y;
            cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
            for (int i = 0; i < algos.count; ++i) {
                if (algos.ws[i] > conv_ws_bytes) continue;
                st = cudnnConvolutionBiasActivationForward(
                    h, &one, d.x.get(), xin, d.w.get(), wptr, d.conv.get(), algos.algo[i], conv_ws,
                    conv_ws_bytes, &alpha2, d.y.get(), z, d.b.get(),
                    bptr != nullptr ? bptr : zero_bias, act.get(), d.y.get(), y);
                if (st == CUDNN_STATUS_SUCCESS)
                    return launch_status("cudnnConvolutionBiasActivationForward");
                if (!retryable(st)) break;
            }
            if (!retryable(st))
                return cudnn_status(st, "cudnnConvolutionBiasActivationForward", where());
            // cuDNN declined every algorithm: the unfused sequence below.
        }

        // Unfused: Y = Z (or 0); Y = conv(X, W) + beta * Y; Y += B; Y = act(Y).
        float beta = 0.f;
        if (zptr != nullptr) {
            if (zptr != y)
                DS_CUDA_TRY_AT(
                    cudaMemcpyAsync(y, zptr, yv.num_bytes(), cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync (Z)");
            beta = 1.f;
        } else if (p.no_reduce) {
            DS_CUDA_TRY_AT(cudaMemsetAsync(y, 0, yv.num_bytes(), stream), "cudaMemsetAsync (Y)");
        }
        if (!p.no_reduce) {
            cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
            for (int i = 0; i < algos.count; ++i) {
                if (algos.ws[i] > conv_ws_bytes) continue;
                st = cudnnConvolutionForward(h, &one, d.x.get(), xin, d.w.get(), wptr, d.conv.get(),
                                             algos.algo[i], conv_ws, conv_ws_bytes, &beta,
                                             d.y.get(), y);
                if (st == CUDNN_STATUS_SUCCESS || !retryable(st)) break;
            }
            DS_CUDNN_TRY(st, "cudnnConvolutionForward");
        }
        if (bptr != nullptr)
            DS_CUDNN_TRY(cudnnAddTensor(h, &one, d.b.get(), bptr, &one, d.y.get(), y),
                         "cudnnAddTensor (B)");
        if (a_.act.kind != Activation::none) {
            ActDesc act;
            DS_CUDNN_TRY(act.create(), "cudnnCreateActivationDescriptor");
            cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
            double coef = 0.0;
            switch (a_.act.kind) {
                case Activation::sigmoid: mode = CUDNN_ACTIVATION_SIGMOID; break;
                case Activation::tanh: mode = CUDNN_ACTIVATION_TANH; break;
                case Activation::clip:
                    mode = CUDNN_ACTIVATION_CLIPPED_RELU;
                    coef = a_.act.beta;
                    break;
                default: mode = CUDNN_ACTIVATION_RELU; break;
            }
            DS_CUDNN_TRY(cudnnSetActivationDescriptor(act.get(), mode, CUDNN_PROPAGATE_NAN, coef),
                         "cudnnSetActivationDescriptor");
            DS_CUDNN_TRY(
                cudnnActivationForward(h, act.get(), &one, d.y.get(), y, &zero, d.y.get(), y),
                "cudnnActivationForward");
        }
        return launch_status("cudnn convolution");
    }

    CudaConvAttrs a_;
    int device_;
    bool allow_tf32_;
    DeviceConstant w_, b_;  // the weight store's device copies (shared with the executor)
    std::uint64_t released_;
    mutable std::mutex mu_;
    mutable std::map<std::vector<int64_t>, AlgoList> cache_;
};

/// Activations FusedConv runs through cuDNN (fused Relu or cudnnActivationForward).
bool cudnn_activation(const ActivationSpec& s) noexcept {
    switch (s.kind) {
        case Activation::none:
        case Activation::relu:
        case Activation::sigmoid:
        case Activation::tanh: return true;
        case Activation::clip: return s.alpha == 0.f && s.beta > 0.f;
        default: return false;
    }
}

StatusOr<std::unique_ptr<Kernel>> make_conv_common(const KernelCreateContext& ctx, bool fused) {
    const Node& n = ctx.node();
    CudaConvAttrs a;
    {
        DSINFER_ASSIGN_OR_RETURN(detail::ConvAttrs conv, detail::parse_conv_attrs(ctx, false));
        static_cast<detail::ConvAttrs&>(a) = std::move(conv);
    }
    a.fused = fused;
    if (fused) {
        if (ctx.num_inputs() < 2 || ctx.num_inputs() > 4 || ctx.num_outputs() != 1)
            return Status::error(ErrorCode::unsupported, "FusedConv takes 2 to 4 inputs");
        DSINFER_ASSIGN_OR_RETURN(a.act, detail::activation_from_attributes(ctx));
        if (!cudnn_activation(a.act))
            return Status::error(ErrorCode::unsupported,
                                 "the CUDA FusedConv does not fuse activation '",
                                 detail::activation_name(a.act.kind), "' with these parameters");
    } else if (ctx.num_inputs() < 2 || ctx.num_inputs() > 3) {
        return Status::error(ErrorCode::unsupported, "Conv takes 2 or 3 inputs");
    }
    if (a.group < 1 || a.group > INT_MAX)
        return Status::error(ErrorCode::unsupported, "group ", a.group, " is out of cuDNN's range");
    // Spatial rank, when known now: 1 to 3 (cuDNN's Nd convolutions).
    const int nsp = detail::conv_spatial_rank(ctx, a);
    if (nsp < 1 || nsp > kMaxSpatial)
        return Status::error(ErrorCode::unsupported, "the CUDA Conv needs 1 to ", kMaxSpatial,
                             " spatial dims known at load, got ", nsp);
    for (const auto* v : {&a.strides, &a.dilations})
        for (int64_t e : *v)
            if (e < 1 || e > INT_MAX)
                return Status::error(ErrorCode::unsupported,
                                     "strides/dilations out of cuDNN's range");
    for (int64_t e : a.pads)
        if (e < 0 || e > INT_MAX)
            return Status::error(ErrorCode::unsupported, "pads out of cuDNN's range");

    // Constant weights and bias live on the device from now on: the weight store's copies.
    DeviceConstant w, b;
    std::uint64_t released = 0;
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    if (const Tensor* wt = ctx.constant_input(1); wt != nullptr && supported_type(wt->dtype())) {
        DSINFER_ASSIGN_OR_RETURN(w, device_constant(ctx, *store, *wt));
        released |= std::uint64_t{1} << 1;
    }
    if (const Tensor* bt = ctx.constant_input(2);
        bt != nullptr && ctx.has_input(2) && supported_type(bt->dtype())) {
        DSINFER_ASSIGN_OR_RETURN(b, device_constant(ctx, *store, *bt));
        released |= std::uint64_t{1} << 2;
    }
    return make_with_fallback<ConvKernel>(ctx, std::move(a), ctx.device().index, ctx.allow_tf32(),
                                          std::move(w), std::move(b), released);
}

StatusOr<std::unique_ptr<Kernel>> make_conv(const KernelCreateContext& ctx) {
    return make_conv_common(ctx, false);
}
StatusOr<std::unique_ptr<Kernel>> make_fused_conv(const KernelCreateContext& ctx) {
    return make_conv_common(ctx, true);
}

// ---- pooling ---------------------------------------------------------------------------------

enum class PoolKind { max, average, global_max, global_average };

/// The shared pooling attributes (ops/window.hpp; empty for global pooling) and the kind.
struct CudaPoolAttrs : detail::PoolAttrs {
    PoolKind kind = PoolKind::max;
};

struct PoolPlan {
    DType dtype = DType::f32;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    std::size_t es = 4;
    int nd = 4;
    int x[kMaxDims] = {}, y[kMaxDims] = {};
    int win[kMaxSpatial] = {}, pad[kMaxSpatial] = {}, stride[kMaxSpatial] = {};
    bool explicit_pad = false;  // max pooling over a -inf padded copy of X
    int xp[kMaxDims] = {}, xoff[kMaxDims] = {};
    std::size_t xpad_bytes = 0;
    bool copy = false;  // global pooling without spatial dims: Y = X
    bool fill = false;  // global pooling over 0 elements: Y = NaN (avg) / -inf (max)
    const int* pool_in() const noexcept { return explicit_pad ? xp : x; }
};

/// One spatial dim of a window pooling: cuDNN can run it natively (symmetric pads and the
/// floor formula's output size).
bool native_window(const detail::WindowDim& wd, int64_t in, int64_t k, int64_t s) noexcept {
    return wd.pb == wd.pe && in + 2 * wd.pb >= k && wd.out == (in + 2 * wd.pb - k) / s + 1;
}

Status pool_plan(const CudaPoolAttrs& a, const Shape& xs, DType dtype, PoolPlan& p) {
    if (!supported_type(dtype))
        return Status::error(ErrorCode::unsupported, "cuDNN pooling does not support ",
                             dtype_name(dtype));
    p.dtype = dtype;
    p.dt = cudnn_type(dtype);
    p.es = dtype_size(dtype);
    auto bad = [&]() {
        return Status::error(ErrorCode::unsupported, "X ", xs.to_string(),
                             " exceeds cuDNN's 32-bit dims");
    };
    if (xs.rank() < 2 || !to_int(xs[0], p.x[0]) || !to_int(xs[1], p.x[1])) return bad();
    p.y[0] = p.x[0];
    p.y[1] = p.x[1];
    const int nsp = xs.rank() - 2;
    if (a.kind == PoolKind::global_max || a.kind == PoolKind::global_average) {
        if (nsp == 0) {
            p.copy = true;
            return Status::ok();
        }
        const int64_t total = xs.size_between(2, xs.rank());
        if (total == 0) {
            p.fill = true;
            return Status::ok();
        }
        if (nsp == 2 || nsp == 3) {
            p.nd = nsp + 2;
            for (int i = 0; i < nsp; ++i) {
                if (!to_int(xs[2 + i], p.x[2 + i])) return bad();
                p.win[i] = p.x[2 + i];
                p.y[2 + i] = 1;
                p.stride[i] = 1;
            }
        } else {  // [N, C, 1, prod(spatial)]
            p.nd = 4;
            p.x[2] = 1;
            if (!to_int(total, p.x[3])) return bad();
            p.win[0] = 1;
            p.win[1] = p.x[3];
            p.y[2] = p.y[3] = 1;
            p.stride[0] = p.stride[1] = 1;
        }
        return Status::ok();
    }
    if (nsp < 1 || nsp > kMaxSpatial || static_cast<int>(a.kernel_shape.size()) != nsp)
        return Status::error(ErrorCode::unsupported, "cuDNN pooling supports 1 to ", kMaxSpatial,
                             " spatial dims, got X ", xs.to_string());
    p.nd = nsp == 1 ? 4 : nsp + 2;
    const int lead = p.nd - 2 - nsp;
    for (int j = 0; j < lead; ++j) {
        p.x[2 + j] = p.y[2 + j] = 1;
        p.win[j] = p.stride[j] = 1;
        p.pad[j] = 0;
    }
    bool native = true;
    int64_t pdim[kMaxDims] = {}, poff[kMaxDims] = {};
    for (int d = 0; d < p.nd; ++d) pdim[d] = p.x[d];
    for (int i = 0; i < nsp; ++i) {
        const int d = 2 + lead + i;
        const int64_t in = xs[2 + i], k = a.kernel_shape[static_cast<std::size_t>(i)];
        const int64_t s = detail::attr_at(a.strides, i, 1);
        DSINFER_ASSIGN_OR_RETURN(
            const detail::WindowDim wd,
            detail::window_dim(i, nsp, in, k, s, 1, a.auto_pad, a.pads, a.ceil_mode));
        if (!to_int(in, p.x[d]) || !to_int(wd.out, p.y[d]) || !to_int(k, p.win[d - 2]) ||
            !to_int(s, p.stride[d - 2]) || !to_int(wd.pb, p.pad[d - 2]))
            return bad();
        if (!native_window(wd, in, k, s)) native = false;
        // The padded extent whose floor-formula output is wd.out, holding X at offset pb.
        pdim[d] = std::max((wd.out - 1) * s + k, wd.pb + in);
        poff[d] = wd.pb;
    }
    if (native) return Status::ok();
    if (a.kind != PoolKind::max)
        return Status::error(ErrorCode::unsupported, "AveragePool over X ", xs.to_string(),
                             " needs padding cuDNN cannot express (asymmetric pads or a ceil_mode "
                             "partial window)");
    p.explicit_pad = true;
    std::size_t n = 1;
    for (int d = 0; d < p.nd; ++d) {
        if (!to_int(pdim[d], p.xp[d]) || !to_int(poff[d], p.xoff[d])) return bad();
        n *= static_cast<std::size_t>(p.xp[d]);
    }
    for (int j = 0; j < p.nd - 2; ++j) p.pad[j] = 0;
    p.xpad_bytes = n * p.es;
    return Status::ok();
}

class PoolKernel final : public CudaKernel {
public:
    PoolKernel(std::unique_ptr<Kernel> reference, CudaPoolAttrs a, int device)
        : CudaKernel(std::move(reference)), a_(std::move(a)), device_(device) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(CudaKernel::prepare(ctx));
        if (ctx.inferring()) return Status::ok();
        PoolPlan p;
        DSINFER_RETURN_IF_ERROR(pool_plan(a_, ctx.input(0).shape(), ctx.input(0).dtype(), p));
        ctx.set_workspace(p.explicit_pad ? align_up(p.xpad_bytes) + kAlign : 0);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        try {
            return run_impl(ctx);
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of host memory");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "pooling: ", e.what());
        }
    }

private:
    Status run_impl(RunContext& ctx) const {
        const TensorView& xv = ctx.input(0);
        const TensorView& yv = ctx.output(0);
        if (yv.num_elements() == 0) return Status::ok();
        auto where = [&] { return "X " + xv.shape.to_string() + ", Y " + yv.shape.to_string(); };
        PoolPlan p;
        DSINFER_RETURN_IF_ERROR(pool_plan(a_, xv.shape, xv.dtype, p));
        const cudaStream_t stream = stream_of(ctx);
        if (p.copy) {
            DS_CUDA_TRY_AT(
                cudaMemcpyAsync(yv.raw, xv.raw, yv.num_bytes(), cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync (global pool)");
            return Status::ok();
        }
        cudnnHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(get_handle(device_, stream, h, where));
        if (p.fill) {
            TensorDesc yd;
            const int ydims[4] = {p.y[0], p.y[1], 1, 1};
            DS_CUDNN_TRY(set_tensor(yd, p.dt, 4, ydims), "cudnnSetTensorNdDescriptor (Y)");
            const float v = a_.kind == PoolKind::global_max ? kNegInf : kNaN;
            DS_CUDNN_TRY(cudnnSetTensor(h, yd.get(), yv.raw, &v), "cudnnSetTensor (Y)");
            return launch_status("cudnnSetTensor");
        }
        const void* xin = xv.raw;
        if (p.explicit_pad) {
            std::size_t left = 0;
            unsigned char* xpad = aligned_workspace(ctx.workspace(), ctx.workspace_bytes(), left);
            if (xpad == nullptr || left < p.xpad_bytes)
                return Status::error(ErrorCode::internal, "pooling workspace of ",
                                     ctx.workspace_bytes(), " bytes is smaller than ",
                                     p.xpad_bytes + kAlign, "; ", where());
            TensorDesc pd;
            DS_CUDNN_TRY(set_tensor(pd, p.dt, p.nd, p.xp), "cudnnSetTensorNdDescriptor (padded X)");
            const float v = kNegInf;
            DS_CUDNN_TRY(cudnnSetTensor(h, pd.get(), xpad, &v), "cudnnSetTensor (padded X)");
            DSINFER_RETURN_IF_ERROR(
                copy_into_padded(h, p.dt, p.es, p.nd, p.x, xv.raw, p.xp, p.xoff, xpad, where));
            xin = xpad;
        }
        TensorDesc xd, yd;
        DS_CUDNN_TRY(set_tensor(xd, p.dt, p.nd, p.pool_in()), "cudnnSetTensorNdDescriptor (X)");
        DS_CUDNN_TRY(set_tensor(yd, p.dt, p.nd, p.y), "cudnnSetTensorNdDescriptor (Y)");
        PoolDesc pool;
        DS_CUDNN_TRY(pool.create(), "cudnnCreatePoolingDescriptor");
        cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
        if (a_.kind == PoolKind::average)
            mode = a_.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
        else if (a_.kind == PoolKind::global_average)
            mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
        DS_CUDNN_TRY(cudnnSetPoolingNdDescriptor(pool.get(), mode, CUDNN_PROPAGATE_NAN, p.nd - 2,
                                                 p.win, p.pad, p.stride),
                     "cudnnSetPoolingNdDescriptor");
        int out[kMaxDims] = {};
        DS_CUDNN_TRY(cudnnGetPoolingNdForwardOutputDim(pool.get(), xd.get(), p.nd, out),
                     "cudnnGetPoolingNdForwardOutputDim");
        for (int i = 0; i < p.nd; ++i)
            if (out[i] != p.y[i])
                return Status::error(ErrorCode::internal, "cuDNN pools to dims ",
                                     dims_string(p.nd, out), ", expected ", dims_string(p.nd, p.y),
                                     "; ", where());
        const float one = 1.f, zero = 0.f;
        DS_CUDNN_TRY(
            cudnnPoolingForward(h, pool.get(), &one, xd.get(), xin, &zero, yd.get(), yv.raw),
            "cudnnPoolingForward");
        return launch_status("cudnnPoolingForward");
    }

    CudaPoolAttrs a_;
    int device_;
};

/// True when every input X with the declared shape runs natively in cuDNN (AveragePool).
bool average_pool_native(const KernelCreateContext& ctx, const CudaPoolAttrs& a) {
    const int nsp = static_cast<int>(a.kernel_shape.size());
    bool shape_free =
        a.auto_pad == AutoPad::valid || (a.auto_pad == AutoPad::notset && !a.ceil_mode);
    if (a.auto_pad == AutoPad::notset)
        for (int i = 0; i < nsp; ++i)
            if (detail::attr_at(a.pads, i, 0) != detail::attr_at(a.pads, nsp + i, 0)) return false;
    if (shape_free) return true;
    const Value* v = ctx.input_value(0);
    if (v == nullptr || !v->shape.known || v->shape.rank() != nsp + 2) return false;
    for (int i = 0; i < nsp; ++i) {
        const Dim& dim = v->shape.dims[static_cast<std::size_t>(2 + i)];
        if (!dim.is_static()) return false;
        const int64_t k = a.kernel_shape[static_cast<std::size_t>(i)];
        const int64_t s = detail::attr_at(a.strides, i, 1);
        auto wd = detail::window_dim(i, nsp, dim.value, k, s, 1, a.auto_pad, a.pads, a.ceil_mode);
        if (!wd.is_ok() || !native_window(wd.value(), dim.value, k, s)) return false;
    }
    return true;
}

template <PoolKind K>
StatusOr<std::unique_ptr<Kernel>> make_pool(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    CudaPoolAttrs a;
    a.kind = K;
    if constexpr (K == PoolKind::max || K == PoolKind::average) {
        // Checked as the reference checks them (invalid_model); what cuDNN cannot take below.
        DSINFER_ASSIGN_OR_RETURN(detail::PoolAttrs window, detail::parse_pool_attrs(ctx));
        static_cast<detail::PoolAttrs&>(a) = std::move(window);
        const std::size_t nsp = a.kernel_shape.size();
        if (nsp < 1 || nsp > static_cast<std::size_t>(kMaxSpatial))
            return Status::error(ErrorCode::unsupported, "cuDNN pooling needs 1 to ", kMaxSpatial,
                                 " spatial dims, kernel_shape has ", nsp);
        for (int64_t d : a.dilations)
            if (d != 1)
                return Status::error(ErrorCode::unsupported, "cuDNN pooling has no dilations");
        for (int64_t v : a.kernel_shape)
            if (v < 1 || v > INT_MAX)
                return Status::error(ErrorCode::unsupported, "kernel_shape out of range");
        for (int64_t v : a.strides)
            if (v < 1 || v > INT_MAX)
                return Status::error(ErrorCode::unsupported, "strides out of range");
        for (int64_t v : a.pads)
            if (v < 0 || v > INT_MAX)
                return Status::error(ErrorCode::unsupported, "pads out of range");
        if (K == PoolKind::max && ctx.has_output(1))
            return Status::error(ErrorCode::unsupported, "the CUDA MaxPool has no Indices output");
        if (K == PoolKind::average && !average_pool_native(ctx, a))
            return Status::error(ErrorCode::unsupported,
                                 "AveragePool geometry cuDNN cannot express (asymmetric pads or a "
                                 "ceil_mode partial window, or shapes unknown at load)");
    }
    if (ctx.num_outputs() < 1 || !ctx.has_output(0))
        return Status::error(ErrorCode::unsupported, "pooling without output Y");
    return make_with_fallback<PoolKernel>(ctx, std::move(a), ctx.device().index);
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
    const DTypeSet floats{DType::f32, DType::f16, DType::bf16};
    r.add({"Conv", "", 1, kMaxOpset, DeviceKind::cuda, floats}, &make_conv, kPriorityCuda,
          kProvider);
    r.add({"FusedConv", kDsinferDomain, 1, 1, DeviceKind::cuda, floats},
          &make_fused_conv, kPriorityCuda, kProvider);
    r.add({"MaxPool", "", 1, kMaxOpset, DeviceKind::cuda, floats}, &make_pool<PoolKind::max>,
          kPriorityCuda, kProvider);
    r.add({"AveragePool", "", 1, kMaxOpset, DeviceKind::cuda, floats},
          &make_pool<PoolKind::average>, kPriorityCuda, kProvider);
    r.add({"GlobalMaxPool", "", 1, kMaxOpset, DeviceKind::cuda, floats},
          &make_pool<PoolKind::global_max>, kPriorityCuda, kProvider);
    r.add({"GlobalAveragePool", "", 1, kMaxOpset, DeviceKind::cuda, floats},
          &make_pool<PoolKind::global_average>, kPriorityCuda, kProvider);
}

}  // namespace dsinfer::cuda
