#include "cpu/kernel_utils.hpp"

namespace dsinfer::detail {

void register_misc_string_kernels(KernelRegistry& r) { (void)r; }

}  // namespace dsinfer::detail
