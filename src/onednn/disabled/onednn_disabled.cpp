// The oneDNN backend's entry points in a build without oneDNN (DSINFER_WITH_ONEDNN=OFF).
#include "dsinfer/backends/onednn.hpp"

namespace dsinfer {

bool onednn_available() noexcept { return false; }
std::string onednn_version() { return {}; }
void register_onednn_kernels(KernelRegistry& /*registry*/) {}

}  // namespace dsinfer
