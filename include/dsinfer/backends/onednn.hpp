// dsinfer/backends/onednn.hpp — the oneDNN CPU backend.
//
// Built into dsinfer when configured with DSINFER_WITH_ONEDNN (the default when Debian's
// libdnnl-dev is installed). Its kernels (MatMul/Gemm, Conv/ConvTranspose, pooling,
// normalization, softmax, eltwise, binary, Resize) register above dsinfer's own CPU kernels;
// a node or shape they cannot handle falls through to the next backend. onednn_backend() is
// the backend named "onednn" (dsinfer/backend.hpp); in a build without oneDNN it reports
// unsupported.
//
// Usage:
//   dsinfer::EngineOptions o;
//   o.backends = {"onednn", "cpu"};     // the default when available
//   if (!dsinfer::onednn_available()) o.backends = {"cpu"};
#pragma once

#include <memory>
#include <string>

#include "dsinfer/backend.hpp"
#include "dsinfer/export.hpp"
#include "dsinfer/kernel_registry.hpp"

namespace dsinfer {

/// True when this build contains the oneDNN backend.
DSINFER_API bool onednn_available() noexcept;
/// "oneDNN 2.6.3 (cpu runtime: OpenMP, isa: ...)" or "" when not built.
DSINFER_API std::string onednn_version();
/// Registers the oneDNN kernels (priority kPriorityOnednn). No-op when not built.
DSINFER_API void register_onednn_kernels(KernelRegistry& registry);
/// The "onednn" backend (one process-wide object): available when onednn_available().
DSINFER_API std::shared_ptr<const Backend> onednn_backend();

}  // namespace dsinfer
