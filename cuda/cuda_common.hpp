// cuda/cuda_common.hpp — what every dsinfer CUDA kernel uses (internal; never installed).
//
// Purpose: error mapping (a CUDA error becomes a typed Status: out of memory ->
// resource_exhausted, sticky errors -> device_lost and the device is marked lost), the device
// forms of a kernel's constants (kept in the engine's weight store, shared with the executor
// and other kernels: device_constant, device_form), the run's stream, launch helpers and the
// CudaKernel base class (a FallbackKernelBase, src/ops/fallback_kernel.hpp), whose prepare() is
// the reference kernel's (one set of shape semantics for every backend).
//
// Threading: kernels are const after creation and run concurrently on different streams; a
// kernel's constants (DeviceConstant) are written once, complete before any kernel reads them. Library handles (cuBLASLt,
// cuDNN) are per thread and device (see the gemm/conv files).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsinfer/backends/cuda.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/weight_store.hpp"
#include "ops/fallback_kernel.hpp"

namespace dsinfer::cuda {

/// Registration priority of the CUDA kernels (above every CPU backend).
inline constexpr int kPriorityCuda = ::dsinfer::kPriorityCuda;  // dsinfer/backends/cuda.hpp
inline constexpr const char* kProvider = "cuda";

/// True once a sticky error (illegal address, launch failure, ...) was seen on `device`: the
/// context is unusable and every later request fails fast with device_lost.
bool device_lost(int device) noexcept;
void mark_device_lost(int device) noexcept;

/// Maps a CUDA error to a Status ("<what>: <cuda error name>: <string>"). cudaSuccess -> ok.
/// Out of memory -> resource_exhausted; sticky errors -> device_lost (and mark_device_lost).
Status cuda_status(cudaError_t e, const char* what) noexcept;

/// After a launch: the launch error (bad configuration, ...) as a Status.
inline Status launch_status(const char* kernel) noexcept {
    return cuda_status(cudaGetLastError(), kernel);
}

#define DS_CUDA_TRY(expr, what)                                                 \
    do {                                                                        \
        const cudaError_t ds_cuda_err_ = (expr);                                \
        if (ds_cuda_err_ != cudaSuccess) return ::dsinfer::cuda::cuda_status(ds_cuda_err_, what); \
    } while (0)

inline cudaStream_t stream_of(const RunContext& ctx) noexcept {
    return static_cast<cudaStream_t>(ctx.stream());
}

/// Blocks for n work items with `threads` per block, capped at 65535 * 32 (grid-stride loops
/// cover the rest).
inline unsigned grid_for(std::int64_t n, int threads) noexcept {
    std::int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535 * 32) b = 65535 * 32;
    return static_cast<unsigned>(b);
}

/// Device memory of a constant's form (device_form). Move-only; freed with cudaFree.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() { reset(); }

    /// `bytes` of device memory (uninitialized).
    static StatusOr<DeviceBuffer> allocate(std::size_t bytes);
    /// A device copy of `bytes` host bytes (synchronous).
    static StatusOr<DeviceBuffer> upload(const void* host, std::size_t bytes);

    void* get() const noexcept { return p_; }
    template <class T> T* as() const noexcept { return static_cast<T*>(p_); }
    std::size_t bytes() const noexcept { return n_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    void reset() noexcept;

private:
    void* p_ = nullptr;
    std::size_t n_ = 0;
};

/// A kernel's reference to a device form of a constant: keeps the weight store's form resident
/// (the store counts the kernel among its holders) and gives its device address; empty = none.
class DeviceConstant {
public:
    DeviceConstant() = default;
    explicit DeviceConstant(std::shared_ptr<const Tensor> t) noexcept
        : p_(t ? t->raw_data() : nullptr), form_(std::move(t)) {}
    explicit DeviceConstant(std::shared_ptr<const DeviceBuffer> b) noexcept
        : p_(b ? b->get() : nullptr), form_(std::move(b)) {}

    const void* get() const noexcept { return p_; }
    template <class T> const T* as() const noexcept { return static_cast<const T*>(p_); }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    const void* p_ = nullptr;
    std::shared_ptr<const void> form_;
};

/// The device copy of constant `t` (a constant input of the node being created) on the
/// engine's device: the weight store's stored form for that device ("onnx", target
/// ctx.device().to_string()), the same copy the executor makes of it
/// (detail::device_constant_form), so the executor and every kernel reading `t` share one.
/// Empty for a constant of no bytes.
StatusOr<DeviceConstant> device_constant(const KernelCreateContext& ctx, WeightStore& store,
                                         const Tensor& t);

/// A device form of constant `t` computed on the host: `host` returns its bytes (called only
/// when the store has no resident form (kind, layout) for the engine's device; it runs under
/// the store's lock and must not call the store). A form computed from several constants keys
/// on the first (`t`) and names the others in `layout`.
StatusOr<DeviceConstant> device_form(const KernelCreateContext& ctx, WeightStore& store,
                                     const Tensor& t, WeightKind kind, std::string_view layout,
                                     const std::function<StatusOr<std::vector<unsigned char>>()>& host);

/// Base of CUDA kernels: prepare() is the fallback's, which on a CUDA engine is the reference
/// CPU kernel (KernelCreateContext::create_fallback()): output dtypes/shapes and validation are
/// shared with the CPU; the CPU workspace it asks for is dropped (a CUDA kernel that needs
/// device scratch overrides prepare, calls CudaKernel::prepare, then set_workspace). Inputs
/// reach prepare as meta tensors (no data) unless host_inputs() names them: the reference
/// kernel's host_inputs() are not inherited, a CUDA kernel lists its own. Factories create them
/// with make_with_fallback<K>(ctx, args...) (the reference kernel first, then K(it, args...)).
class CudaKernel : public detail::FallbackKernelBase {
public:
    using FallbackKernelBase::FallbackKernelBase;
    Status prepare(PrepareContext& ctx) const override {
        Status st = prepare_fallback(ctx);
        ctx.set_workspace(0);
        return st;
    }
};

using detail::make_with_fallback;

// ---- per-group registration (one per source file family) ------------------------------------
void register_gemm_kernels(KernelRegistry& r);         // kernels/gemm.cpp (cuBLASLt)
void register_elementwise_kernels(KernelRegistry& r);  // kernels/elementwise.cu
void register_norm_kernels(KernelRegistry& r);         // kernels/norm.cu (LayerNorm, Softmax, ...)
void register_tensor_kernels(KernelRegistry& r);       // kernels/tensor_ops.cu (Gather, Transpose, ...)
void register_attention_kernels(KernelRegistry& r);    // kernels/attention.cu
void register_conv_kernels(KernelRegistry& r);         // kernels/conv.cpp (cuDNN), pooling

}  // namespace dsinfer::cuda
