// nn group: MatMul/Gemm/Einsum (nn_matmul.cpp), Conv/ConvTranspose (nn_conv.cpp), pooling
// (nn_pool.cpp), normalizations (nn_norm.cpp), Softmax family (nn_softmax.cpp).
#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_nn_matmul_kernels(KernelRegistry& r);
void register_nn_conv_kernels(KernelRegistry& r);
void register_nn_pool_kernels(KernelRegistry& r);
void register_nn_norm_kernels(KernelRegistry& r);
void register_nn_softmax_kernels(KernelRegistry& r);

void register_nn_kernels(KernelRegistry& r) {
    register_nn_matmul_kernels(r);
    register_nn_conv_kernels(r);
    register_nn_pool_kernels(r);
    register_nn_norm_kernels(r);
    register_nn_softmax_kernels(r);
}

}  // namespace dsinfer::detail
