#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {

void register_resize(KernelRegistry& /*r*/) {}

}  // namespace dsinfer::detail::onednn
