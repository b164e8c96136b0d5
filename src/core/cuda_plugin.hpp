// The CUDA plugin's interface (internal): what libdsinfer_cuda.so hands the core library.
//
// Purpose: the CUDA backend (cuda/) is a plugin opened with dlopen on the first request for a
// CUDA device (src/core/cuda_plugin_loader.cpp), so that nothing that uses dsinfer for the CPU
// links or loads a CUDA library. The plugin exports one C symbol, kCudaPluginEntry, returning
// a CudaPluginTable; everything else in the plugin (including its private copy of the dsinfer
// code it needs when the core is a static library) is local to it (cuda/plugin.map).
//
// The table passes C++ types (Status, StatusOr, shared_ptr, KernelRegistry&), so the core and
// the plugin must come from the same build: the loader checks abi, dsinfer_version and
// layout before using any function pointer. Bump kCudaPluginAbi when the table or any type it
// passes changes.
//
// Threading: the table is immutable; the functions are thread-safe (device_runtime.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device_runtime.hpp"
#include "dsinfer/config.hpp"
#include "dsinfer/memory_pool.hpp"

namespace dsinfer::detail {

inline constexpr std::uint32_t kCudaPluginAbi = 3;  // 2: KernelKey::input_dtypes, transient_shape; 3: KernelCreateContext::weight_store
/// The plugin's one exported symbol: `extern "C" const CudaPluginTable* dsinfer_cuda_plugin_v1()`.
inline constexpr const char* kCudaPluginEntry = "dsinfer_cuda_plugin_v1";

/// A cheap guard against a plugin from another build of the same version: the sizes of the
/// types that cross the boundary.
inline constexpr std::uint64_t cuda_plugin_layout() noexcept {
    return (static_cast<std::uint64_t>(sizeof(Status)) << 48) ^
           (static_cast<std::uint64_t>(sizeof(StatusOr<std::shared_ptr<DeviceRuntime>>)) << 36) ^
           (static_cast<std::uint64_t>(sizeof(KernelRegistry)) << 20) ^
           (static_cast<std::uint64_t>(sizeof(KernelEntry)) << 28) ^
           (static_cast<std::uint64_t>(sizeof(PrepareContext)) << 14) ^
           (static_cast<std::uint64_t>(sizeof(RunContext)) << 24) ^
           (static_cast<std::uint64_t>(sizeof(MemoryPoolStats)) << 8) ^
           static_cast<std::uint64_t>(sizeof(std::string));
}

struct CudaPluginTable {
    std::uint32_t abi;            // kCudaPluginAbi
    std::uint32_t table_size;     // sizeof(CudaPluginTable)
    const char* dsinfer_version;  // DSINFER_VERSION_STRING of the plugin's build
    std::uint64_t layout;         // cuda_plugin_layout() of the plugin's build

    StatusOr<std::shared_ptr<DeviceRuntime>> (*cuda_runtime)(int index);
    void (*register_cuda_backend)(KernelRegistry& registry);
    // The public functions of dsinfer/backends/cuda.hpp.
    int (*device_count)();
    std::string (*status)();
    bool (*set_memory_limit)(int device, std::size_t bytes);
    MemoryPoolStats (*memory_stats)(int device);
    std::size_t (*trim)(int device);
};

using CudaPluginEntryFn = const CudaPluginTable* (*)();

// Defined inside the plugin (cuda/cuda_runtime.cpp) for its table; the core library never
// calls them directly: it reaches them through cuda_backend(N) (dsinfer/backends/cuda.hpp).
/// The process-wide runtime of CUDA device `index` (created on first use), or unavailable (no
/// such device) / device_lost.
StatusOr<std::shared_ptr<DeviceRuntime>> cuda_runtime(int index);
/// Registers the CUDA kernels.
void register_cuda_backend(KernelRegistry& registry);

}  // namespace dsinfer::detail
