// The CUDA device runtime (core/device_runtime.hpp) and the helpers of cuda_common.hpp.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_plugin.hpp"
#include "core/device_runtime.hpp"
#include "cublaslt_loader.hpp"
#include "cuda_common.hpp"
#include "dsinfer/backends/cuda.hpp"

namespace dsinfer::cuda {

namespace {
std::array<std::atomic<bool>, 64> g_lost{};

bool is_sticky(cudaError_t e) noexcept {
    switch (e) {
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorECCUncorrectable:
        case cudaErrorLaunchTimeout:
        case cudaErrorAssert:
        case cudaErrorContextIsDestroyed:
            return true;
        default:
            return false;
    }
}
}  // namespace

bool device_lost(int device) noexcept {
    return device >= 0 && device < static_cast<int>(g_lost.size()) &&
           g_lost[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

void mark_device_lost(int device) noexcept {
    if (device >= 0 && device < static_cast<int>(g_lost.size()))
        g_lost[static_cast<std::size_t>(device)].store(true, std::memory_order_release);
}

Status cuda_status(cudaError_t e, const char* what) noexcept {
    if (e == cudaSuccess) return Status::ok();
    try {
        std::string msg = std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();  // not sticky: clear it
            return Status(ErrorCode::resource_exhausted, "out of device memory: " + msg);
        }
        if (is_sticky(e)) {
            int dev = 0;
            (void)cudaGetDevice(&dev);
            mark_device_lost(dev);
            return Status(ErrorCode::device_lost,
                          "CUDA device " + std::to_string(dev) + " is lost (sticky error; restart "
                          "the process to use it again): " + msg);
        }
        if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice) {
            (void)cudaGetLastError();
            return Status(ErrorCode::unavailable, msg);
        }
        (void)cudaGetLastError();
        return Status(ErrorCode::internal, msg);
    } catch (...) {
        return Status(ErrorCode::internal, "CUDA error");
    }
}

StatusOr<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
    DeviceBuffer b;
    if (bytes == 0) return b;
    DS_CUDA_TRY(cudaMalloc(&b.p_, bytes), "cudaMalloc of a constant");
    b.n_ = bytes;
    return b;
}

StatusOr<DeviceBuffer> DeviceBuffer::upload(const void* host, std::size_t bytes) {
    DSINFER_ASSIGN_OR_RETURN(DeviceBuffer b, allocate(bytes));
    if (bytes > 0) {
        if (host == nullptr)
            return Status::error(ErrorCode::internal, "upload of a constant without data");
        DS_CUDA_TRY(cudaMemcpy(b.p_, host, bytes, cudaMemcpyHostToDevice), "uploading a constant");
    }
    return b;
}

void DeviceBuffer::reset() noexcept {
    if (p_ != nullptr) (void)cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
}

namespace {
/// The weight store's target of the engine's device (a CUDA kernel is made for device
/// ctx.device().index; outside an engine that is device 0).
std::string device_target(const KernelCreateContext& ctx) {
    return Device{DeviceKind::cuda, ctx.device().index}.to_string();
}
}  // namespace

StatusOr<DeviceConstant> device_constant(const KernelCreateContext& ctx, WeightStore& store,
                                         const Tensor& t) {
    if (t.num_bytes() == 0) return DeviceConstant{};
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<detail::DeviceRuntime> rt,
                             detail::cuda_runtime(ctx.device().index));
    DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> form,
                             detail::device_constant_form(store, store.source(t), t, *rt));
    return DeviceConstant(std::move(form));
}

StatusOr<DeviceConstant> device_form(const KernelCreateContext& ctx, WeightStore& store,
                                     const Tensor& t, WeightKind kind, std::string_view layout,
                                     const std::function<StatusOr<std::vector<unsigned char>>()>& host) {
    DSINFER_ASSIGN_OR_RETURN(
        std::shared_ptr<const DeviceBuffer> form,
        store.get<DeviceBuffer>(store.source(t), kind, layout, device_target(ctx),
                                [&]() -> StatusOr<WeightBuild<DeviceBuffer>> {
                                    // Under the store's lock: the host bytes, then a synchronous
                                    // upload (complete before any stream can read the form).
                                    DSINFER_ASSIGN_OR_RETURN(std::vector<unsigned char> bytes, host());
                                    DSINFER_ASSIGN_OR_RETURN(DeviceBuffer b,
                                                             DeviceBuffer::upload(bytes.data(), bytes.size()));
                                    const std::uint64_t n = b.bytes();
                                    return WeightBuild<DeviceBuffer>{
                                        std::make_shared<const DeviceBuffer>(std::move(b)), n};
                                }));
    return DeviceConstant(std::move(form));
}

}  // namespace dsinfer::cuda

namespace dsinfer::detail {
namespace {

using cuda::cuda_status;

/// Device memory straight from cudaMalloc (the pool's upstream).
class CudaDeviceAllocator final : public Allocator {
public:
    explicit CudaDeviceAllocator(int index) : index_(index) {}
    Device device() const noexcept override { return {DeviceKind::cuda, index_}; }
    void* allocate(std::size_t bytes, std::size_t /*alignment: cudaMalloc gives 256*/) noexcept override {
        int prev = 0;
        (void)cudaGetDevice(&prev);
        if (prev != index_) (void)cudaSetDevice(index_);
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();  // out of memory is not sticky
            p = nullptr;
        }
        if (prev != index_) (void)cudaSetDevice(prev);
        return p;
    }
    void deallocate(void* p, std::size_t) noexcept override {
        if (p != nullptr) (void)cudaFree(p);
    }

private:
    int index_;
};

/// Page-locked host memory for staging copies.
class PinnedAllocator final : public Allocator {
public:
    Device device() const noexcept override { return {}; }
    void* allocate(std::size_t bytes, std::size_t) noexcept override {
        void* p = nullptr;
        if (cudaHostAlloc(&p, bytes == 0 ? 64 : bytes, cudaHostAllocPortable) != cudaSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        return p;
    }
    void deallocate(void* p, std::size_t) noexcept override {
        if (p != nullptr) (void)cudaFreeHost(p);
    }
};

class CudaRuntime final : public DeviceRuntime {
public:
    CudaRuntime(int index, std::string description)
        : index_(index), description_(std::move(description)), device_alloc_(index) {
        MemoryPoolOptions o;
        o.max_cached_bytes = std::size_t{64} << 30;
        pool_ = MemoryPool::create(o, device_alloc_);
        MemoryPoolOptions po;
        po.max_cached_bytes = std::size_t{1} << 30;
        pinned_pool_ = MemoryPool::create(po, pinned_);
    }
    ~CudaRuntime() override {
        for (void* s : streams_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
    }

    Device device() const noexcept override { return {DeviceKind::cuda, index_}; }
    std::string description() const override { return description_; }
    const std::shared_ptr<MemoryPool>& pool() const noexcept override { return pool_; }
    const std::shared_ptr<MemoryPool>& pinned_pool() const noexcept override { return pinned_pool_; }
    Status activate() noexcept override {
        return cuda_status(cudaSetDevice(index_), "cudaSetDevice");
    }
    Status health() const noexcept override {
        if (cuda::device_lost(index_))
            return Status(ErrorCode::device_lost, "CUDA device " + std::to_string(index_) +
                                                      " was lost after a sticky error; restart the "
                                                      "process to use it again");
        return Status::ok();
    }

    StatusOr<void*> acquire_stream() noexcept override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!streams_.empty()) {
                void* s = streams_.back();
                streams_.pop_back();
                return s;
            }
        }
        cudaStream_t s = nullptr;
        DS_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream");
        return static_cast<void*>(s);
    }
    void release_stream(void* stream) noexcept override {
        if (stream == nullptr) return;
        try {
            std::lock_guard<std::mutex> lock(mu_);
            streams_.push_back(stream);
        } catch (...) {
            (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
        }
    }
    Status copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) noexcept override {
        if (bytes == 0) return Status::ok();
        return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                           static_cast<cudaStream_t>(stream)),
                           "copy to the device");
    }
    Status copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) noexcept override {
        if (bytes == 0) return Status::ok();
        return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                           static_cast<cudaStream_t>(stream)),
                           "copy to the host");
    }
    Status synchronize(void* stream) noexcept override {
        return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                           "synchronizing the run's stream");
    }
    Status memset_async(void* dst, int value, std::size_t bytes, void* stream) noexcept override {
        if (bytes == 0) return Status::ok();
        return cuda_status(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
                           "cudaMemsetAsync");
    }
    Status begin_capture(void* stream) noexcept override {
        return cuda_status(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                                  cudaStreamCaptureModeRelaxed),
                           "beginning CUDA graph capture");
    }
    StatusOr<std::shared_ptr<void>> end_capture(void* stream) noexcept override {
        cudaGraph_t graph = nullptr;
        DS_CUDA_TRY(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph),
                    "ending CUDA graph capture");
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        (void)cudaGraphDestroy(graph);
        DS_CUDA_TRY(e, "instantiating the captured CUDA graph");
        try {
            return std::shared_ptr<void>(exec, [](void* x) {
                (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(x));
            });
        } catch (...) {
            (void)cudaGraphExecDestroy(exec);
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
    }
    Status replay(void* graph_exec, void* stream) noexcept override {
        return cuda_status(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec),
                                           static_cast<cudaStream_t>(stream)),
                           "replaying the CUDA graph");
    }

private:
    int index_;
    std::string description_;
    CudaDeviceAllocator device_alloc_;
    PinnedAllocator pinned_;
    std::shared_ptr<MemoryPool> pool_;
    std::shared_ptr<MemoryPool> pinned_pool_;
    std::mutex mu_;
    std::vector<void*> streams_;
};

}  // namespace

StatusOr<std::shared_ptr<DeviceRuntime>> cuda_runtime(int index) {
    static std::mutex mu;
    static std::map<int, std::shared_ptr<DeviceRuntime>>* runtimes =
        new std::map<int, std::shared_ptr<DeviceRuntime>>();  // never destroyed (static order)
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = runtimes->find(index); it != runtimes->end()) return it->second;
    const int n = cuda_device_count();
    if (n == 0) return Status::error(ErrorCode::unavailable, ::dsinfer::cuda_status());
    if (index < 0 || index >= n)
        return Status::error(ErrorCode::unavailable, "no CUDA device ", index, ": this machine has ",
                             n, " device(s)");
    if (cuda::device_lost(index))
        return Status::error(ErrorCode::device_lost, "CUDA device ", index, " was lost");
    // cuBLASLt is opened here, with the first device (not linked: cublaslt_loader.hpp).
    DSINFER_RETURN_IF_ERROR(cuda::load_cublaslt());
    cudaDeviceProp p{};
    DS_CUDA_TRY(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
    DS_CUDA_TRY(cudaSetDevice(index), "cudaSetDevice");
    std::string desc = std::string(p.name) + " (sm_" + std::to_string(p.major) +
                       std::to_string(p.minor) + ", " +
                       std::to_string(p.totalGlobalMem >> 30) + " GiB)";
    auto rt = std::make_shared<CudaRuntime>(index, std::move(desc));
    runtimes->emplace(index, rt);
    return std::shared_ptr<DeviceRuntime>(rt);
}

}  // namespace dsinfer::detail

namespace dsinfer {

bool cuda_set_memory_limit(int device, std::size_t bytes) {
    auto rt = detail::cuda_runtime(device);
    if (!rt.is_ok()) return false;
    rt.value()->pool()->set_limit_bytes(bytes);
    return true;
}

MemoryPoolStats cuda_memory_stats(int device) {
    auto rt = detail::cuda_runtime(device);
    return rt.is_ok() ? rt.value()->pool()->stats() : MemoryPoolStats{};
}

std::size_t cuda_trim(int device) {
    auto rt = detail::cuda_runtime(device);
    return rt.is_ok() ? rt.value()->pool()->trim(0) : 0;
}

}  // namespace dsinfer

namespace dsinfer::detail {

void register_cuda_backend(KernelRegistry& r) {
    cuda::register_gemm_kernels(r);
    cuda::register_elementwise_kernels(r);
    cuda::register_norm_kernels(r);
    cuda::register_tensor_kernels(r);
    cuda::register_attention_kernels(r);
    cuda::register_conv_kernels(r);
}

}  // namespace dsinfer::detail
