// [cuda] tests of the cuDNN kernels (cuda/kernels/conv.cpp): Conv, com.dsinfer FusedConv,
// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, each against the reference kernels
// (tests/unit/cuda_op_tester.hpp). Without a GPU every case returns after a SKIPPED warning.
//
// Convolution tolerances (conv_tol): K = C/group * prod(kernel) products per output, inputs
// uniform in [-1, 1] (outputs of size ~sqrt(K)/3):
//   f32  atol 1e-4 * sqrt(K), rtol 1e-4  (FMA math, no tf32: cuDNN's float sums in another
//                                         order, and Winograd/FFT transforms)
//   f16  atol 1e-3 * sqrt(K), rtol 2e-3  (output rounding; with a bias the convolution is
//   bf16 atol 1e-2 * sqrt(K), rtol 1.6e-2 rounded to the type before the bias is added)
// Pooling uses tol_for(dtype).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_op_tester.hpp"

namespace {

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;

constexpr const char* kDsinfer = "com.dsinfer";
const DType kAllTypes[] = {DType::f32, DType::f16, DType::bf16};

std::string tname(DType dt) { return std::string(dtype_name(dt)); }

Tolerance conv_tol(DType dt, std::int64_t k) {
    const double s = std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
    switch (dt) {
        case DType::f16: return {1e-3 * s, 2e-3};
        case DType::bf16: return {1e-2 * s, 1.6e-2};
        default: return {1e-4 * s, 1e-4};
    }
}

/// Products per output element: C/group * prod(kernel dims) = W's dims after the first.
std::int64_t reduction(const std::vector<std::int64_t>& w) {
    std::int64_t k = 1;
    for (std::size_t i = 1; i < w.size(); ++i) k *= w[i];
    return k;
}

struct ConvCase {
    std::string name;
    std::vector<std::int64_t> x, w;
    bool bias = false;
    Attrs attrs;
};

void check_conv(const ConvCase& c, DType dt, bool constant_w = true, bool constant_b = true,
                bool expect_cuda = true) {
    std::vector<In> ins{{"x", rand_tensor(dt, c.x)}, {"w", rand_tensor(dt, c.w), constant_w}};
    if (c.bias) ins.push_back({"b", rand_tensor(dt, {c.w[0]}), constant_b});
    check_op("Conv " + c.name + " " + tname(dt), "Conv", ins, c.attrs, conv_tol(dt, reduction(c.w)),
             17, 1, "", expect_cuda);
}

const std::vector<ConvCase>& conv_cases() {
    static const std::vector<ConvCase> cases = {
        {"3x3 pad 1 stride 1, bias, odd sizes",
         {2, 5, 9, 11},
         {7, 5, 3, 3},
         true,
         {{"pads", attr_ints({1, 1, 1, 1})}}},
        {"3x3 pad 1 stride 2, no bias",
         {1, 3, 10, 13},
         {4, 3, 3, 3},
         false,
         {{"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}}},
        {"1x1, no bias", {2, 16, 7, 9}, {8, 16, 1, 1}, false, {}},
        {"1x1 stride 2, bias",
         {2, 12, 9, 7},
         {5, 12, 1, 1},
         true,
         {{"strides", attr_ints({2, 2})}}},
        {"7x7 stride 2 pad 3 (ResNet stem), bias",
         {1, 3, 37, 41},
         {16, 3, 7, 7},
         true,
         {{"pads", attr_ints({3, 3, 3, 3})},
          {"strides", attr_ints({2, 2})},
          {"kernel_shape", attr_ints({7, 7})}}},
        {"grouped (2 groups), bias",
         {2, 8, 9, 9},
         {12, 4, 3, 3},
         true,
         {{"group", attr_i(2)}, {"pads", attr_ints({1, 1, 1, 1})}}},
        {"depthwise 3x3, bias",
         {2, 16, 11, 13},
         {16, 1, 3, 3},
         true,
         {{"group", attr_i(16)}, {"pads", attr_ints({1, 1, 1, 1})}}},
        {"depthwise multiplier 2 stride 2",
         {1, 6, 13, 10},
         {12, 1, 3, 3},
         false,
         {{"group", attr_i(6)}, {"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}}},
        {"dilated 3x3 (dilation 2, pad 2)",
         {1, 4, 15, 17},
         {6, 4, 3, 3},
         true,
         {{"dilations", attr_ints({2, 2})}, {"pads", attr_ints({2, 2, 2, 2})}}},
        {"dilation (2, 3) stride (1, 2)",
         {2, 3, 14, 19},
         {5, 3, 3, 2},
         false,
         {{"dilations", attr_ints({2, 3})}, {"strides", attr_ints({1, 2})}}},
        {"asymmetric pads [0, 1, 2, 1]",
         {1, 3, 8, 9},
         {4, 3, 3, 3},
         true,
         {{"pads", attr_ints({0, 1, 2, 1})}}},
        {"SAME_UPPER stride 2, even input (pads 0/1)",
         {2, 3, 8, 10},
         {4, 3, 3, 3},
         true,
         {{"auto_pad", attr_s("SAME_UPPER")}, {"strides", attr_ints({2, 2})}}},
        {"SAME_LOWER 4x4 kernel",
         {1, 2, 9, 7},
         {3, 2, 4, 4},
         false,
         {{"auto_pad", attr_s("SAME_LOWER")}}},
        {"VALID 5x3", {1, 3, 12, 11}, {4, 3, 5, 3}, true, {{"auto_pad", attr_s("VALID")}}},
        {"1-D, pads [2, 1], stride 2",
         {2, 4, 17},
         {6, 4, 5},
         true,
         {{"pads", attr_ints({2, 1})}, {"strides", attr_ints({2})}}},
        {"1-D depthwise",
         {1, 5, 23},
         {5, 1, 3},
         false,
         {{"group", attr_i(5)}, {"pads", attr_ints({1, 1})}}},
        {"3-D 3x3x3 pad 1",
         {1, 3, 5, 6, 7},
         {4, 3, 3, 3, 3},
         true,
         {{"pads", attr_ints({1, 1, 1, 1, 1, 1})}}},
        {"3-D stride 2 asymmetric",
         {2, 2, 6, 5, 7},
         {3, 2, 2, 3, 3},
         false,
         {{"pads", attr_ints({0, 1, 1, 1, 0, 1})}, {"strides", attr_ints({2, 2, 2})}}},
    };
    return cases;
}

}  // namespace

TEST_CASE("cuda conv: Conv float32", "[cuda][conv]") {
    for (const auto& c : conv_cases()) check_conv(c, DType::f32);
}

TEST_CASE("cuda conv: Conv float16", "[cuda][conv]") {
    for (const auto& c : conv_cases()) check_conv(c, DType::f16);
}

TEST_CASE("cuda conv: Conv bfloat16", "[cuda][conv]") {
    for (const auto& c : conv_cases()) check_conv(c, DType::bf16);
}

TEST_CASE("cuda conv: Conv with W and B computed at run time", "[cuda][conv]") {
    const ConvCase c{"runtime W and B",
                     {2, 6, 10, 9},
                     {8, 3, 3, 3},
                     true,
                     {{"group", attr_i(2)}, {"pads", attr_ints({1, 1, 1, 1})}}};
    for (DType dt : kAllTypes) {
        check_conv(c, dt, /*constant_w=*/false, /*constant_b=*/false);
        check_conv(c, dt, /*constant_w=*/true, /*constant_b=*/false);
        check_conv(c, dt, /*constant_w=*/false, /*constant_b=*/true);
    }
}

TEST_CASE("cuda conv: Conv with an empty batch", "[cuda][conv]") {
    const ConvCase c{
        "N = 0", {0, 3, 8, 8}, {4, 3, 3, 3}, true, {{"pads", attr_ints({1, 1, 1, 1})}}};
    check_conv(c, DType::f32);
}

TEST_CASE("cuda conv: ResNet-50 bottleneck shapes (N=2, C=256, 56x56)", "[cuda][conv][large]") {
    // 1x1 256 -> 64, 3x3 64 -> 64, 1x1 64 -> 256, and the stride-2 3x3 of the next stage.
    const std::vector<ConvCase> cases = {
        {"resnet 1x1 256->64", {2, 256, 56, 56}, {64, 256, 1, 1}, true, {}},
        {"resnet 3x3 64->64",
         {2, 64, 56, 56},
         {64, 64, 3, 3},
         true,
         {{"pads", attr_ints({1, 1, 1, 1})}}},
        {"resnet 1x1 64->256", {2, 64, 56, 56}, {256, 64, 1, 1}, true, {}},
        {"resnet 3x3 128->128 stride 2",
         {2, 128, 56, 56},
         {128, 128, 3, 3},
         true,
         {{"pads", attr_ints({1, 1, 1, 1})}, {"strides", attr_ints({2, 2})}}},
    };
    for (const auto& c : cases)
        for (DType dt : kAllTypes) check_conv(c, dt);
}

// ---- FusedConv ---------------------------------------------------------------------------------

namespace {

void check_fused(const std::string& what, const std::vector<std::int64_t>& xs,
                 const std::vector<std::int64_t>& ws, bool bias, bool residual, Attrs attrs,
                 bool expect_cuda = true) {
    const DType dt = DType::f32;
    std::vector<In> ins{{"x", rand_tensor(dt, xs)}, {"w", rand_tensor(dt, ws), true}};
    ins.push_back({"b", bias ? rand_tensor(dt, {ws[0]}) : Tensor(), true});
    if (residual) {
        // Y's shape: the attrs of these cases keep the spatial size (pads 1 for 3x3, none for 1x1).
        std::vector<std::int64_t> ys = xs;
        ys[1] = ws[0];
        ins.push_back({"z", rand_tensor(dt, ys)});
    }
    check_op("FusedConv " + what, "FusedConv", ins, attrs, conv_tol(dt, reduction(ws)), 17, 1,
             kDsinfer, expect_cuda);
}

}  // namespace

TEST_CASE("cuda conv: FusedConv Relu with bias and residual", "[cuda][conv]") {
    const Attrs relu3{{"activation", attr_s("Relu")}, {"pads", attr_ints({1, 1, 1, 1})}};
    const Attrs relu1{{"activation", attr_s("Relu")}};
    check_fused("3x3 relu + B", {2, 8, 9, 11}, {6, 8, 3, 3}, true, false, relu3);
    check_fused("3x3 relu, no B", {2, 8, 9, 11}, {6, 8, 3, 3}, false, false, relu3);
    check_fused("3x3 relu + B + Z", {2, 8, 9, 11}, {6, 8, 3, 3}, true, true, relu3);
    check_fused("3x3 relu + Z, no B", {1, 5, 7, 6}, {5, 5, 3, 3}, false, true, relu3);
    check_fused("1x1 relu + B + Z", {2, 16, 7, 7}, {32, 16, 1, 1}, true, true, relu1);
    Attrs dw = relu3;
    dw.push_back({"group", attr_i(8)});
    check_fused("depthwise relu + B + Z", {2, 8, 9, 10}, {8, 1, 3, 3}, true, true, dw);
    check_fused("ResNet block 1x1 64->256 relu + B + Z", {2, 64, 56, 56}, {256, 64, 1, 1}, true,
                true, relu1);
}

TEST_CASE("cuda conv: FusedConv without activation and with cuDNN activations", "[cuda][conv]") {
    const Attrs pad{{"pads", attr_ints({1, 1, 1, 1})}};
    check_fused("no activation + B + Z", {2, 4, 8, 9}, {6, 4, 3, 3}, true, true, pad);
    check_fused("no activation, B only", {2, 4, 8, 9}, {6, 4, 3, 3}, true, false, pad);
    for (const char* act : {"Sigmoid", "Tanh"}) {
        Attrs a = pad;
        a.push_back({"activation", attr_s(act)});
        check_fused(std::string(act) + " + B + Z", {1, 4, 7, 9}, {5, 4, 3, 3}, true, true, a);
    }
    Attrs clip = pad;
    clip.push_back({"activation", attr_s("Clip")});
    clip.push_back({"activation_alpha", attr_f(0.f)});
    clip.push_back({"activation_beta", attr_f(0.5f)});
    check_fused("Clip(0, 0.5) + B", {1, 4, 7, 9}, {5, 4, 3, 3}, true, false, clip);
}

TEST_CASE("cuda conv: FusedConv activations cuDNN lacks run on the CPU", "[cuda][conv]") {
    Attrs leaky{{"activation", attr_s("LeakyRelu")},
                {"activation_alpha", attr_f(0.1f)},
                {"pads", attr_ints({1, 1, 1, 1})}};
    check_fused("LeakyRelu (declined)", {1, 3, 6, 7}, {4, 3, 3, 3}, true, true, leaky,
                /*expect_cuda=*/false);
    Attrs clip{{"activation", attr_s("Clip")},
               {"activation_alpha", attr_f(-0.5f)},
               {"activation_beta", attr_f(0.5f)}};
    check_fused("Clip(-0.5, 0.5) (declined)", {1, 3, 6, 7}, {4, 3, 1, 1}, true, false, clip,
                /*expect_cuda=*/false);
}

// ---- pooling -----------------------------------------------------------------------------------

namespace {

void check_pool(const std::string& op, const std::string& what, const std::vector<std::int64_t>& xs,
                const Attrs& attrs, DType dt, bool expect_cuda = true, float lo = -1.f,
                float hi = 1.f) {
    check_op(op + " " + what + " " + tname(dt), op, {{"x", rand_tensor(dt, xs, lo, hi)}}, attrs,
             tol_for(dt), 17, 1, "", expect_cuda);
}

}  // namespace

TEST_CASE("cuda conv: MaxPool", "[cuda][conv][pool]") {
    for (DType dt : kAllTypes) {
        check_pool("MaxPool", "3x3 s2 p1 (ResNet)", {2, 8, 17, 19},
                   {{"kernel_shape", attr_ints({3, 3})},
                    {"strides", attr_ints({2, 2})},
                    {"pads", attr_ints({1, 1, 1, 1})}},
                   dt);
        check_pool("MaxPool", "2x2 s2 no pads, odd input", {1, 5, 9, 7},
                   {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}, dt);
        // Inputs all negative: padding must never win.
        check_pool("MaxPool", "3x3 p1 negative input", {2, 3, 7, 8},
                   {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}}, dt,
                   true, -2.f, -1.f);
        check_pool("MaxPool", "ceil_mode k3 s2 (partial last window)", {1, 3, 10, 11},
                   {{"kernel_shape", attr_ints({3, 3})},
                    {"strides", attr_ints({2, 2})},
                    {"ceil_mode", attr_i(1)}},
                   dt, true, -2.f, -1.f);
        check_pool("MaxPool", "ceil_mode with pads", {2, 4, 9, 12},
                   {{"kernel_shape", attr_ints({3, 2})},
                    {"strides", attr_ints({2, 3})},
                    {"pads", attr_ints({1, 1, 1, 1})},
                    {"ceil_mode", attr_i(1)}},
                   dt);
        check_pool("MaxPool", "asymmetric pads [0, 1, 2, 0]", {1, 3, 8, 9},
                   {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({0, 1, 2, 0})}}, dt,
                   true, -2.f, -1.f);
        check_pool("MaxPool", "SAME_UPPER k2 s2 odd input", {2, 3, 9, 7},
                   {{"kernel_shape", attr_ints({2, 2})},
                    {"strides", attr_ints({2, 2})},
                    {"auto_pad", attr_s("SAME_UPPER")}},
                   dt);
        check_pool("MaxPool", "1-D k3 s2 p1", {2, 4, 21},
                   {{"kernel_shape", attr_ints({3})},
                    {"strides", attr_ints({2})},
                    {"pads", attr_ints({1, 1})}},
                   dt);
        check_pool("MaxPool", "3-D k2 s2", {1, 2, 6, 7, 5},
                   {{"kernel_shape", attr_ints({2, 2, 2})}, {"strides", attr_ints({2, 2, 2})}}, dt);
    }
    check_pool("MaxPool", "large 3x3 s2 p1", {8, 64, 112, 112},
               {{"kernel_shape", attr_ints({3, 3})},
                {"strides", attr_ints({2, 2})},
                {"pads", attr_ints({1, 1, 1, 1})}},
               DType::f32);
    check_pool("MaxPool", "empty batch", {0, 3, 8, 8}, {{"kernel_shape", attr_ints({2, 2})}},
               DType::f32);
}

TEST_CASE("cuda conv: MaxPool cases cuDNN cannot run fall back", "[cuda][conv][pool]") {
    check_pool("MaxPool", "dilations 2 (declined)", {1, 2, 9, 9},
               {{"kernel_shape", attr_ints({2, 2})}, {"dilations", attr_ints({2, 2})}}, DType::f32,
               /*expect_cuda=*/false);
}

TEST_CASE("cuda conv: AveragePool", "[cuda][conv][pool]") {
    for (DType dt : kAllTypes) {
        for (int cip = 0; cip < 2; ++cip) {
            const std::string c = cip ? " count_include_pad" : "";
            check_pool("AveragePool", "3x3 s1 p1" + c, {2, 5, 9, 11},
                       {{"kernel_shape", attr_ints({3, 3})},
                        {"pads", attr_ints({1, 1, 1, 1})},
                        {"count_include_pad", attr_i(cip)}},
                       dt);
            check_pool("AveragePool", "3x2 s2 p(1,1)" + c, {1, 3, 12, 9},
                       {{"kernel_shape", attr_ints({3, 2})},
                        {"strides", attr_ints({2, 2})},
                        {"pads", attr_ints({1, 1, 1, 1})},
                        {"count_include_pad", attr_i(cip)}},
                       dt);
        }
        check_pool("AveragePool", "2x2 s2 no pads", {2, 4, 10, 8},
                   {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}, dt);
        // ceil_mode that adds no partial window (9 - 3 divisible by 2) runs on cuDNN.
        check_pool("AveragePool", "ceil_mode without partial window", {1, 3, 9, 9},
                   {{"kernel_shape", attr_ints({3, 3})},
                    {"strides", attr_ints({2, 2})},
                    {"ceil_mode", attr_i(1)}},
                   dt);
        check_pool("AveragePool", "SAME_UPPER k3 (symmetric pads)", {1, 3, 7, 8},
                   {{"kernel_shape", attr_ints({3, 3})}, {"auto_pad", attr_s("SAME_UPPER")}}, dt);
        check_pool("AveragePool", "1-D k4 s3", {2, 3, 20},
                   {{"kernel_shape", attr_ints({4})}, {"strides", attr_ints({3})}}, dt);
        check_pool(
            "AveragePool", "3-D k3 p1", {1, 2, 5, 6, 7},
            {{"kernel_shape", attr_ints({3, 3, 3})}, {"pads", attr_ints({1, 1, 1, 1, 1, 1})}}, dt);
    }
}

TEST_CASE("cuda conv: AveragePool geometry cuDNN cannot express falls back", "[cuda][conv][pool]") {
    check_pool("AveragePool", "ceil_mode partial window (declined)", {1, 3, 10, 10},
               {{"kernel_shape", attr_ints({3, 3})},
                {"strides", attr_ints({2, 2})},
                {"ceil_mode", attr_i(1)}},
               DType::f32, /*expect_cuda=*/false);
    check_pool("AveragePool", "asymmetric pads (declined)", {1, 3, 8, 8},
               {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({0, 1, 1, 0})}}, DType::f32,
               /*expect_cuda=*/false);
    check_pool("AveragePool", "SAME_UPPER k2 (pads 0/1, declined)", {1, 3, 8, 8},
               {{"kernel_shape", attr_ints({2, 2})}, {"auto_pad", attr_s("SAME_UPPER")}},
               DType::f32, /*expect_cuda=*/false);
}

TEST_CASE("cuda conv: GlobalAveragePool and GlobalMaxPool", "[cuda][conv][pool]") {
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
        for (DType dt : kAllTypes) {
            check_pool(op, "2-D 7x7", {2, 64, 7, 7}, {}, dt);
            check_pool(op, "2-D odd 5x9", {3, 5, 5, 9}, {}, dt);
            check_pool(op, "1-D", {2, 3, 37}, {}, dt);
            check_pool(op, "3-D", {1, 2, 3, 4, 5}, {}, dt);
            check_pool(op, "4-D spatial (flattened)", {1, 2, 3, 2, 4, 3}, {}, dt);
        }
        check_pool(op, "large 56x56", {4, 256, 56, 56}, {}, DType::f32);
        check_pool(op, "large 1-D window", {2, 3, 40000}, {}, DType::f32);
    }
}
