// Registration of the fast CPU kernels (see groups.hpp and fast_common.hpp).
#include "cpu/fast/groups.hpp"

namespace dsinfer::detail {

void register_fast_kernels(KernelRegistry& r) {
    fast::register_fast_elementwise_kernels(r);
    fast::register_fast_movement_kernels(r);
    fast::register_fast_reduce_kernels(r);
    fast::register_fast_cast_kernels(r);
    register_fast_conv(r);
}

}  // namespace dsinfer::detail
