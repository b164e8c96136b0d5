// dsinfer/ops.hpp — dsinfer's own operator set: the "com.dsinfer" domain and the schemas of its
// fused operators (what the optimizer writes and every backend runs).
//
// Purpose: one public statement of the operators a graph optimized by dsinfer may contain besides
// ONNX's, so that tools reading such a graph (ds-convert, a deploy format, an application's own
// passes) and kernels agree on inputs, outputs and attributes. Semantics: docs/OPTIMIZER.md
// ("Fused operators"). The set is versioned: kDsinferOpsetVersion is the opset version passes
// import for the domain; an operator's schema never changes within a version, a change of
// inputs or attributes bumps it.
//
// Ownership/threading: constant data only.
//
// Usage:
//   if (node.domain == dsinfer::kDsinferDomain)
//       if (const dsinfer::OpSchema* s = dsinfer::find_dsinfer_op(node.op_type)) ...
#pragma once

#include <array>
#include <span>
#include <string_view>

namespace dsinfer {

/// The domain of dsinfer's fused operators.
inline constexpr const char* kDsinferDomain = "com.dsinfer";
/// The opset version of kDsinferDomain this library writes and runs.
inline constexpr int kDsinferOpsetVersion = 1;

/// One formal input or output of an operator.
struct OpFormal {
    std::string_view name;
    bool optional = false;
};

/// One attribute of an operator (`kind` as ONNX names it: "INT", "FLOAT", "STRING", "INTS").
struct OpAttribute {
    std::string_view name;
    std::string_view kind;
    bool required = false;
};

/// The schema of one operator of kDsinferDomain.
struct OpSchema {
    std::string_view name;
    int since_version = 1;
    std::span<const OpFormal> inputs;
    std::span<const OpFormal> outputs;
    std::span<const OpAttribute> attributes;
    /// The ONNX operator whose attributes and semantics it extends ("" when none).
    std::string_view extends;
};

namespace ops_detail {
// The fused activation every Fused* operator carries (docs/OPTIMIZER.md): `activation` is one
// of "", Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSwish, Gelu, GeluTanh.
inline constexpr OpAttribute kActivation[] = {
    {"activation", "STRING"}, {"activation_alpha", "FLOAT"}, {"activation_beta", "FLOAT"}};
inline constexpr OpAttribute kConvAttrs[] = {{"auto_pad", "STRING"},
                                             {"dilations", "INTS"},
                                             {"group", "INT"},
                                             {"kernel_shape", "INTS"},
                                             {"pads", "INTS"},
                                             {"strides", "INTS"},
                                             {"activation", "STRING"},
                                             {"activation_alpha", "FLOAT"},
                                             {"activation_beta", "FLOAT"}};
inline constexpr OpAttribute kGemmAttrs[] = {
    {"alpha", "FLOAT"},          {"beta", "FLOAT"},        {"transA", "INT"},
    {"transB", "INT"},           {"activation", "STRING"}, {"activation_alpha", "FLOAT"},
    {"activation_beta", "FLOAT"}};
inline constexpr OpAttribute kLayerNormAttrs[] = {{"axis", "INT"}, {"epsilon", "FLOAT"}};
inline constexpr OpAttribute kSkipLayerNormAttrs[] = {{"epsilon", "FLOAT"}};
inline constexpr OpAttribute kGeluAttrs[] = {{"approximate", "STRING"}};
inline constexpr OpAttribute kAttentionAttrs[] = {{"num_heads", "INT", true}, {"scale", "FLOAT"}};
inline constexpr OpAttribute kRmsNormAttrs[] = {
    {"axis", "INT"}, {"epsilon", "FLOAT"}, {"stash_type", "INT"}};
inline constexpr OpAttribute kRotaryAttrs[] = {{"interleaved", "INT"}};
inline constexpr OpAttribute kGatedActivationAttrs[] = {{"activation", "STRING", true}};

inline constexpr OpFormal kConvIn[] = {{"X"}, {"W"}, {"B", true}, {"Z", true}};
inline constexpr OpFormal kGemmIn[] = {{"A"}, {"B"}, {"C", true}};
inline constexpr OpFormal kMatMulIn[] = {{"A"}, {"B"}, {"Bias", true}};
inline constexpr OpFormal kLayerNormIn[] = {{"X"}, {"Scale"}, {"B", true}};
inline constexpr OpFormal kGeluIn[] = {{"X"}};
inline constexpr OpFormal kSkipLayerNormIn[] = {
    {"X"}, {"Skip"}, {"Scale"}, {"B", true}, {"Bias", true}};
inline constexpr OpFormal kAttentionIn[] = {{"Q"}, {"K"}, {"V"}, {"Mask", true}};
inline constexpr OpFormal kRmsNormIn[] = {{"X"}, {"Scale"}};
inline constexpr OpFormal kRotaryIn[] = {{"X"}, {"Cos"}, {"Sin"}};
inline constexpr OpFormal kGatedActivationIn[] = {{"X"}};
inline constexpr OpFormal kDynQuantMatMulIn[] = {
    {"A"}, {"B"}, {"b_scale"}, {"b_zero_point", true}, {"bias", true}};
inline constexpr OpFormal kMatMulIntToFloatIn[] = {
    {"A"}, {"B"}, {"a_scale"}, {"b_scale"}, {"a_zero_point", true}, {"b_zero_point", true},
    {"bias", true}};
inline constexpr OpFormal kDynQuantConvIn[] = {
    {"X"}, {"W"}, {"w_scale"}, {"w_zero_point", true}, {"bias", true}};
inline constexpr OpFormal kQLinearConvAddIn[] = {
    {"x"},       {"x_scale"}, {"x_zero_point", true}, {"w"},       {"w_scale"},
    {"w_zero_point", true},   {"y_scale"},            {"y_zero_point", true},
    {"B", true}, {"Z"},       {"z_scale"},            {"z_zero_point", true},
    {"c_scale"}, {"c_zero_point", true}};
inline constexpr OpAttribute kQLinearConvAttrs[] = {{"auto_pad", "STRING"}, {"dilations", "INTS"},
                                                    {"group", "INT"},       {"kernel_shape", "INTS"},
                                                    {"pads", "INTS"},       {"strides", "INTS"}};
inline constexpr OpFormal kPagedAttentionIn[] = {{"Q"}, {"K"}, {"V"}};
inline constexpr OpAttribute kPagedAttentionAttrs[] = {{"layer", "INT", true},
                                                       {"scale", "FLOAT"},
                                                       {"num_heads", "INT"},
                                                       {"kv_num_heads", "INT"},
                                                       {"sliding_window", "INT"}};
inline constexpr OpFormal kY[] = {{"Y"}};
inline constexpr OpFormal kYS[] = {{"Y"}, {"S", true}};
}  // namespace ops_detail

/// Every operator of kDsinferDomain at kDsinferOpsetVersion.
inline constexpr std::array<OpSchema, 15> kDsinferOps{{
    {"FusedConv", 1, ops_detail::kConvIn, ops_detail::kY, ops_detail::kConvAttrs, "Conv"},
    {"FusedGemm", 1, ops_detail::kGemmIn, ops_detail::kY, ops_detail::kGemmAttrs, "Gemm"},
    {"FusedMatMul", 1, ops_detail::kMatMulIn, ops_detail::kY, ops_detail::kActivation, "MatMul"},
    {"LayerNormalization", 1, ops_detail::kLayerNormIn, ops_detail::kY, ops_detail::kLayerNormAttrs,
     "LayerNormalization"},
    {"Gelu", 1, ops_detail::kGeluIn, ops_detail::kY, ops_detail::kGeluAttrs, "Gelu"},
    {"SkipLayerNormalization", 1, ops_detail::kSkipLayerNormIn, ops_detail::kYS,
     ops_detail::kSkipLayerNormAttrs, ""},
    {"MultiHeadAttention", 1, ops_detail::kAttentionIn, ops_detail::kY, ops_detail::kAttentionAttrs,
     ""},
    // Dynamically quantized Linear layers (ONNX Runtime's quantize_dynamic form, fused):
    // DynamicQuantizeLinear(A) -> MatMulInteger(.., B) -> Cast -> Mul(a_scale * b_scale) [-> Add].
    {"DynamicQuantizeMatMul", 1, ops_detail::kDynQuantMatMulIn, ops_detail::kY,
     ops_detail::kActivation, ""},
    {"MatMulIntegerToFloat", 1, ops_detail::kMatMulIntToFloatIn, ops_detail::kY,
     ops_detail::kActivation, ""},
    // Dynamically quantized convolutions (the same form): DynamicQuantizeLinear(X) ->
    // ConvInteger(.., W) -> Cast -> Mul(x_scale * w_scale) [-> Add(bias)]; w_scale,
    // w_zero_point: 1 or M (output channels) elements, bias M; Conv's attributes.
    {"DynamicQuantizeConv", 1, ops_detail::kDynQuantConvIn, ops_detail::kY, ops_detail::kConvAttrs,
     ""},
    // A QDQ ResNet's block join (ONNX Runtime's static QDQ form after fuse_qdq):
    // QLinearConv(x, .., y_scale, y_zero_point, B) -> com.microsoft QLinearAdd(y, Z) in one op.
    // QLinearConv's inputs and attributes, then Z (Y's shape and 8-bit type), its scale and zero
    // point, and the output's: QLinearAdd's A is the convolution's y (y_scale, y_zero_point),
    // computed exactly as QLinearConv computes it; then QLinearAdd's float32 order.
    {"QLinearConvAdd", 1, ops_detail::kQLinearConvAddIn, ops_detail::kY,
     ops_detail::kQLinearConvAttrs, "QLinearConv"},
    // Decoder blocks (torch's Llama-style exports, fused by fuse_rms_norm,
    // fuse_rotary_embedding and fuse_gated_mlp): ONNX-23 RMSNormalization at any model opset;
    // rotary embedding of X [..., D] (D even) with full-width Cos/Sin (last dim D or 1), the
    // three broadcast together as numpy does: Y = X * Cos + rotate(X) * Sin, rotate along X's
    // last axis: [-X[D/2:], X[:D/2]] (interleaved = 0) or the pairs (x[2i], x[2i+1]) ->
    // (-x[2i+1], x[2i]) (interleaved = 1); the gate of a gated MLP,
    // X [..., 2F] -> Y [..., F] = act(X[..., :F]) * X[..., F:], activation "silu" | "gelu" |
    // "gelu_tanh".
    {"RMSNormalization", 1, ops_detail::kRmsNormIn, ops_detail::kY, ops_detail::kRmsNormAttrs,
     "RMSNormalization"},
    {"RotaryEmbedding", 1, ops_detail::kRotaryIn, ops_detail::kY, ops_detail::kRotaryAttrs, ""},
    {"GatedActivation", 1, ops_detail::kGatedActivationIn, ops_detail::kY,
     ops_detail::kGatedActivationAttrs, ""},
    // Grouped-query attention of one generation step over the Generator's paged KV cache
    // (written by prepare_decoder_graph, src/generate/; src/ops/paged_attention.hpp): Q
    // [1, Hq, T, D] or [1, T, Hq*D], K and V likewise with Hkv heads; writes the step's keys and
    // values into the cache blocks of `layer`, then attends each token causally (optionally
    // within a sliding window) to its sequence's cached positions. Runs only with
    // RunOptions::kv_cache.
    {"PagedAttention", 1, ops_detail::kPagedAttentionIn, ops_detail::kY,
     ops_detail::kPagedAttentionAttrs, ""},
}};

/// The schema of `op_type` in kDsinferDomain, or nullptr.
constexpr const OpSchema* find_dsinfer_op(std::string_view op_type) noexcept {
    for (const OpSchema& s : kDsinferOps)
        if (s.name == op_type) return &s;
    return nullptr;
}

}  // namespace dsinfer
