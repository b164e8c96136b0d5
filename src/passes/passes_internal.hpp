// The passes optimize() knows, one factory per pass (each defined in its own src/passes/*.cpp).
// default_passes() (optimizer.cpp) lists them in run order.
#pragma once

#include <memory>

#include "dsinfer/passes.hpp"

namespace dsinfer::passes {

// Level 1: clean-up.
std::unique_ptr<GraphPass> make_eliminate_identity();     // eliminate_identity.cpp
std::unique_ptr<GraphPass> make_constant_folding();       // constant_folding.cpp
std::unique_ptr<GraphPass> make_eliminate_common_subexpressions();  // cse.cpp
std::unique_ptr<GraphPass> make_eliminate_dead_code();    // dead_code.cpp

// Level 2: fusions.
std::unique_ptr<GraphPass> make_fuse_conv_batchnorm();    // fuse_conv.cpp
std::unique_ptr<GraphPass> make_fuse_dynamic_quant_matmul();  // fuse_quant.cpp
std::unique_ptr<GraphPass> make_fuse_qdq();               // fuse_qdq.cpp
std::unique_ptr<GraphPass> make_fuse_qlinear_conv_add();  // fuse_qlinear_conv_add.cpp
std::unique_ptr<GraphPass> make_fold_weight_dequantize(); // constant_folding.cpp
std::unique_ptr<GraphPass> make_fuse_layer_norm();        // fuse_norm.cpp
std::unique_ptr<GraphPass> make_fuse_rms_norm();          // fuse_norm.cpp
std::unique_ptr<GraphPass> make_fuse_gelu();              // fuse_gelu.cpp
std::unique_ptr<GraphPass> make_fuse_gated_mlp();         // fuse_decoder.cpp
std::unique_ptr<GraphPass> make_fuse_rotary_embedding();  // fuse_decoder.cpp
std::unique_ptr<GraphPass> make_fuse_attention();         // fuse_attention.cpp
std::unique_ptr<GraphPass> make_fuse_skip_layer_norm();   // fuse_norm.cpp
std::unique_ptr<GraphPass> make_fuse_matmul_bias_activation();  // fuse_matmul.cpp
std::unique_ptr<GraphPass> make_fuse_conv_add_activation();     // fuse_conv.cpp
std::unique_ptr<GraphPass> make_fuse_layer_norm_linear();       // fuse_norm.cpp

}  // namespace dsinfer::passes
