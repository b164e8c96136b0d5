// The CUDA plugin's one exported symbol (src/core/cuda_plugin.hpp): the table of what the core
// library calls once it has opened libdsinfer_cuda.so. Everything else in the plugin is local
// (plugin.map), so its private copy of dsinfer's code never interposes on the host's.
#include "core/cuda_plugin.hpp"

#include "dsinfer/backends/cuda.hpp"
#include "dsinfer/config.hpp"

namespace {

const dsinfer::detail::CudaPluginTable kTable{
    dsinfer::detail::kCudaPluginAbi,
    static_cast<std::uint32_t>(sizeof(dsinfer::detail::CudaPluginTable)),
    DSINFER_VERSION_STRING,
    dsinfer::detail::cuda_plugin_layout(),
    &dsinfer::detail::cuda_runtime,
    &dsinfer::detail::register_cuda_backend,
    &dsinfer::cuda_device_count,
    &dsinfer::cuda_status,
    &dsinfer::cuda_set_memory_limit,
    &dsinfer::cuda_memory_stats,
    &dsinfer::cuda_trim,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const dsinfer::detail::CudaPluginTable*
dsinfer_cuda_plugin_v1() {
    return &kTable;
}
