// DeviceRuntime: what the executor needs from a device backend (CUDA), without CUDA headers.
//
// Purpose: the executor places nodes on the device or the CPU (kernel_registry.hpp, the node's
// KernelEntry device) and moves tensors between the two; it allocates device tensors from the
// runtime's stream-ordered caching pool, runs each run on a stream of its own, and replays
// captured graphs. Implemented by cuda/cuda_runtime.cpp inside the CUDA plugin
// libdsinfer_cuda.so; the engine gets it from a device Backend's device_runtime()
// (dsinfer/backend.hpp): cuda_backend(N), src/core/cuda_plugin_loader.cpp, opens the plugin on
// the first request for a CUDA device and forwards to it (src/core/cuda_plugin.hpp). A build
// without CUDA reports unsupported.
//
// Stream-ordered memory: device blocks are handed out by a MemoryPool over the device's
// cudaMalloc. Within one run every kernel is on the run's stream, so a block freed during the
// run may be reused by a later kernel of the same run (stream order makes that safe); blocks go
// back to the shared pool only after the run's stream has been synchronized (RunScope), so
// concurrent runs on other streams never receive memory that pending work still uses.
//
// Constants on the device: one copy per constant and device, a form in the engine's WeightStore
// (device_constant_form below) that the executor and the device kernels share.
//
// Threading: all methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dsinfer/allocator.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/memory_pool.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/weight_store.hpp"

namespace dsinfer::detail {

class DeviceRuntime {
public:
    virtual ~DeviceRuntime() = default;
    virtual Device device() const noexcept = 0;
    /// "NVIDIA H200 (sm_90, 139 GiB)".
    virtual std::string description() const = 0;
    /// The device's caching pool (cudaMalloc upstream): constants uploaded at compile, outputs.
    virtual const std::shared_ptr<MemoryPool>& pool() const noexcept = 0;
    /// A caching pool of pinned host memory (cudaHostAlloc) for staging copies: a copy from
    /// or to pinned memory is truly asynchronous (DMA), so a run's transfers overlap the host's
    /// work and other runs' kernels.
    virtual const std::shared_ptr<MemoryPool>& pinned_pool() const noexcept = 0;
    /// Makes this device current on the calling thread.
    virtual Status activate() noexcept = 0;
    /// device_lost when a sticky error was seen on this device (fail fast).
    virtual Status health() const noexcept = 0;

    /// A stream for one run (pooled), and its return.
    virtual StatusOr<void*> acquire_stream() noexcept = 0;
    virtual void release_stream(void* stream) noexcept = 0;
    /// Asynchronous copies on `stream` (host memory is pageable or pinned).
    virtual Status copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) noexcept = 0;
    virtual Status copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) noexcept = 0;
    virtual Status synchronize(void* stream) noexcept = 0;
    virtual Status memset_async(void* dst, int value, std::size_t bytes, void* stream) noexcept = 0;

    /// CUDA graphs: capture the work enqueued on `stream` between begin and end into an
    /// executable graph (relaxed mode: allocations may happen meanwhile); replay it on a
    /// stream.
    virtual Status begin_capture(void* stream) noexcept = 0;
    virtual StatusOr<std::shared_ptr<void>> end_capture(void* stream) noexcept = 0;
    virtual Status replay(void* graph_exec, void* stream) noexcept = 0;
};

/// The device copy of constant `source` (whose stored form is `host`, with data) on `rt`'s
/// device: the store's form (stored, layout "onnx", target the device's string, "cuda:0"), made
/// once from the device pool and shared by every graph and kernel that asks for it. The copy
/// is complete when this returns (synchronized on a stream of its own), so any stream may read
/// it at once. Out of device memory is resource_exhausted.
inline StatusOr<std::shared_ptr<const Tensor>> device_constant_form(WeightStore& store,
                                                                    WeightStore::Source source,
                                                                    const Tensor& host,
                                                                    DeviceRuntime& rt) {
    // The builder runs under the store's lock: it uses the device only, never the store.
    return store.get<Tensor>(
        source, WeightKind::stored, "onnx", rt.device().to_string(),
        [&]() -> StatusOr<WeightBuild<Tensor>> {
            const std::size_t bytes = host.num_bytes();
            if (bytes > 0 && host.raw_data() == nullptr)
                return Status(ErrorCode::internal, "device copy of a constant without data");
            DSINFER_RETURN_IF_ERROR(rt.activate());
            DSINFER_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(host.dtype(), host.shape(), *rt.pool()));
            if (bytes > 0) {
                DSINFER_ASSIGN_OR_RETURN(void* stream, rt.acquire_stream());
                Status st = rt.copy_to_device(t.raw_data(), host.raw_data(), bytes, stream);
                if (st.is_ok()) st = rt.synchronize(stream);
                rt.release_stream(stream);
                DSINFER_RETURN_IF_ERROR(st);
            }
            return WeightBuild<Tensor>{std::make_shared<const Tensor>(std::move(t)), bytes};
        });
}

}  // namespace dsinfer::detail
