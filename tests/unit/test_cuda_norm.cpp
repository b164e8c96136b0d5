// [cuda] normalization kernels (cuda/kernels/norm.cu) against the reference kernels:
// LayerNormalization (ai.onnx 17 and com.dsinfer), SkipLayerNormalization, Softmax/LogSoftmax
// (opset 13 any axis, opset 11 coerced to 2-D), BatchNormalization (inference).
// Each case runs the one-node graph on the CUDA engine and on the reference kernels
// (cuda_op_tester.hpp); without a GPU the cases are skipped with a message.
#include "cuda_op_tester.hpp"

#include <limits>

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const DType kFloatTypes3[] = {DType::f32, DType::f16, DType::bf16};

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }

/// Sets element i of a float-type tensor.
void set_value(Tensor& t, std::int64_t i, float v) {
    switch (t.dtype()) {
        case DType::f32: t.data<float>()[i] = v; break;
        case DType::f16: t.data<float16>()[i] = float16(v); break;
        case DType::bf16: t.data<bfloat16>()[i] = bfloat16(v); break;
        default: FAIL("set_value: float types only");
    }
}

std::string dims_str(const std::vector<std::int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

/// LayerNormalization of X `xd` normalized from `axis`, Scale/B of shape `pd` (B omitted when
/// !with_bias), constants or graph inputs.
void layer_norm_case(DType dt, const std::vector<std::int64_t>& xd, std::int64_t axis,
                     const std::vector<std::int64_t>& pd, bool with_bias, bool constant,
                     float eps = 1e-5f, int num_outputs = 1, const std::string& domain = "",
                     std::int64_t opset = 17, DType param_dt = DType::f32) {
    const std::string what = "LayerNormalization " + dt_name(dt) + " X" + dims_str(xd) +
                             " axis " + std::to_string(axis) + " params" + dims_str(pd) +
                             (with_bias ? " +B" : "") + (constant ? " const" : " input") +
                             " outputs " + std::to_string(num_outputs) + " " + domain;
    std::vector<In> ins{{"x", rand_tensor(dt, xd, -2.f, 3.f)},
                        {"scale", rand_tensor(param_dt, pd, 0.5f, 1.5f), constant}};
    if (with_bias) ins.push_back({"bias", rand_tensor(param_dt, pd), constant});
    check_op(what, "LayerNormalization", ins, {{"axis", attr_i(axis)}, {"epsilon", attr_f(eps)}},
             tol_for(dt), opset, num_outputs, domain);
}

}  // namespace

// ---- LayerNormalization ------------------------------------------------------------------------

TEST_CASE("cuda LayerNormalization: last axis, odd widths, every dtype", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        for (std::int64_t w : {1, 7, 33, 64, 100, 768, 1000, 1024}) {
            layer_norm_case(dt, {5, w}, -1, {w}, true, true);
        }
        layer_norm_case(dt, {2, 3, 33}, -1, {33}, false, true);   // no B
        layer_norm_case(dt, {2, 3, 768}, 2, {768}, true, false);  // params as graph inputs
        layer_norm_case(dt, {4, 1000}, -1, {1000}, true, true, 1e-3f);
    }
}

TEST_CASE("cuda LayerNormalization: last two axes and broadcast parameters", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        layer_norm_case(dt, {3, 7, 33}, -2, {7, 33}, true, true);
        layer_norm_case(dt, {2, 5, 12, 16}, 1, {5, 12, 16}, true, false);
        layer_norm_case(dt, {3, 7, 33}, -2, {33}, true, true);      // broadcast over dim 1
        layer_norm_case(dt, {3, 7, 33}, -2, {7, 1}, true, false);   // broadcast over dim 2
        layer_norm_case(dt, {4, 9}, -1, {1}, true, true);           // scalar parameters
        layer_norm_case(dt, {4, 9}, 0, {4, 9}, true, true);         // one row
    }
}

TEST_CASE("cuda LayerNormalization: long rows (block per row)", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        layer_norm_case(dt, {3, 1025}, -1, {1025}, true, true);
        layer_norm_case(dt, {3, 5000}, -1, {5000}, true, true);
        layer_norm_case(dt, {2, 20001}, -1, {20001}, false, false);  // beyond the smem cache
        layer_norm_case(dt, {2, 3, 40, 50}, 1, {3, 40, 50}, true, true);
    }
}

TEST_CASE("cuda LayerNormalization: Mean and InvStdDev outputs", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        layer_norm_case(dt, {4, 6, 33}, -1, {33}, true, true, 1e-5f, 3);
        layer_norm_case(dt, {4, 6, 33}, 1, {6, 33}, true, true, 1e-5f, 3);
        layer_norm_case(dt, {3, 3000}, -1, {3000}, true, true, 1e-5f, 3);
    }
}

TEST_CASE("cuda LayerNormalization: mixed parameter dtypes and com.dsinfer", "[cuda]") {
    layer_norm_case(DType::f16, {6, 768}, -1, {768}, true, true, 1e-5f, 1, "", 17, DType::f32);
    layer_norm_case(DType::f32, {6, 768}, -1, {768}, true, true, 1e-5f, 1, "", 17, DType::f16);
    layer_norm_case(DType::bf16, {6, 100}, -1, {100}, true, false, 1e-5f, 1, "", 17, DType::bf16);
    for (DType dt : kFloatTypes3)
        layer_norm_case(dt, {2, 7, 768}, -1, {768}, true, true, 1e-12f, 1, "com.dsinfer", 13);
}

TEST_CASE("cuda LayerNormalization: large input (grid-stride rows)", "[cuda]") {
    layer_norm_case(DType::f32, {4096, 768}, -1, {768}, true, true);
    layer_norm_case(DType::f16, {8192, 384}, -1, {384}, true, true);
}

// ---- SkipLayerNormalization --------------------------------------------------------------------

namespace {

void skip_ln_case(const std::vector<std::int64_t>& xd, bool beta, bool bias, int outputs,
                  bool constant = true) {
    const std::int64_t h = xd.back();
    const std::string what = "SkipLayerNormalization X" + dims_str(xd) + (beta ? " +B" : "") +
                             (bias ? " +Bias" : "") + " outputs " + std::to_string(outputs) +
                             (constant ? " const" : " input");
    std::vector<In> ins{{"x", rand_tensor(DType::f32, xd)},
                        {"skip", rand_tensor(DType::f32, xd)},
                        {"gamma", rand_tensor(DType::f32, {h}, 0.5f, 1.5f), constant}};
    if (beta || bias) ins.push_back({"beta", beta ? rand_tensor(DType::f32, {h}) : Tensor{}, constant});
    if (bias) ins.push_back({"bias", rand_tensor(DType::f32, {h}), constant});
    check_op(what, "SkipLayerNormalization", ins, {{"epsilon", attr_f(1e-12f)}},
             {2e-5, 2e-5}, 17, outputs, "com.dsinfer");
}

}  // namespace

TEST_CASE("cuda SkipLayerNormalization: bias, beta, sum output", "[cuda]") {
    skip_ln_case({2, 5, 768}, true, true, 2);
    skip_ln_case({2, 5, 768}, true, true, 1);
    skip_ln_case({3, 33}, true, false, 2);
    skip_ln_case({3, 33}, false, true, 2);   // Bias without B (B omitted)
    skip_ln_case({3, 33}, false, false, 1);
    skip_ln_case({4, 1000}, true, true, 2, false);  // parameters as graph inputs
    skip_ln_case({2, 3000}, true, true, 2);         // block per row
    skip_ln_case({2048, 768}, true, true, 2);       // large
}

// ---- Softmax / LogSoftmax ----------------------------------------------------------------------

namespace {

void softmax_case(const std::string& op, DType dt, const Tensor& x, std::int64_t axis,
                  std::int64_t opset = 13, const std::string& note = "") {
    const std::string what = op + " " + dt_name(dt) + " X" + x.shape().to_string() + " axis " +
                             std::to_string(axis) + " opset " + std::to_string(opset) + " " + note;
    Tolerance tol = tol_for(dt);
    if (dt == DType::f32) tol = {2e-5, 2e-5};
    check_op(what, op, {{"x", x}}, {{"axis", attr_i(axis)}}, tol, opset);
}

}  // namespace

TEST_CASE("cuda Softmax/LogSoftmax: axes, widths and dtypes", "[cuda]") {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        for (DType dt : kFloatTypes3) {
            const Tensor x = rand_tensor(dt, {3, 5, 7}, -4.f, 4.f);
            for (std::int64_t axis : {-1, 0, 1, 2}) softmax_case(op, dt, x, axis);
            for (std::int64_t w : {1, 2, 31, 33, 64, 100, 257, 1000, 1024})
                softmax_case(op, dt, rand_tensor(dt, {6, w}, -4.f, 4.f), -1);
            softmax_case(op, dt, rand_tensor(dt, {3, 1025}, -4.f, 4.f), -1);
            softmax_case(op, dt, rand_tensor(dt, {3, 5000}, -4.f, 4.f), -1);
            softmax_case(op, dt, rand_tensor(dt, {2, 30001}, -4.f, 4.f), -1);  // beyond the cache
            softmax_case(op, dt, rand_tensor(dt, {2, 3000, 3}, -4.f, 4.f), 1);  // long strided
        }
    }
}

TEST_CASE("cuda Softmax/LogSoftmax: -inf, NaN and large values", "[cuda]") {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        for (DType dt : kFloatTypes3) {
            for (std::int64_t w : {7, 300, 2000}) {
                Tensor x = rand_tensor(dt, {5, w}, -1000.f, 1000.f);  // stability
                set_value(x, 0, -kInf);                // a -inf entry
                for (std::int64_t j = 0; j < w; ++j) set_value(x, w + j, -kInf);  // all -inf row
                set_value(x, 2 * w + w / 2, std::nanf(""));  // a NaN row
                // A +inf row: its other values stay where exp() is finite (both sides then
                // agree exactly: 0 for finite entries, NaN for the +inf one).
                for (std::int64_t j = 0; j < w; ++j)
                    set_value(x, 3 * w + j, static_cast<float>(j % 101 - 50));
                set_value(x, 3 * w + 1, kInf);
                softmax_case(op, dt, x, -1, 13, "special values");
            }
            Tensor y = rand_tensor(dt, {4, 6, 5}, -1000.f, 1000.f);
            set_value(y, 3, -kInf);
            set_value(y, 40, std::nanf(""));
            softmax_case(op, dt, y, 1, 13, "special values strided");
        }
    }
}

TEST_CASE("cuda Softmax/LogSoftmax: opset < 13 coerces to 2-D", "[cuda]") {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        for (DType dt : kFloatTypes3) {
            const Tensor x = rand_tensor(dt, {2, 3, 4, 5}, -3.f, 3.f);
            for (std::int64_t axis : {0, 1, 2, 3, -1}) softmax_case(op, dt, x, axis, 11);
            softmax_case(op, dt, rand_tensor(dt, {2, 30, 50}, -3.f, 3.f), 1, 11);  // 1500-wide
        }
    }
}

TEST_CASE("cuda Softmax: large input (grid-stride rows)", "[cuda]") {
    softmax_case("Softmax", DType::f32, rand_tensor(DType::f32, {4096, 512}, -5.f, 5.f), -1);
    softmax_case("Softmax", DType::f16, rand_tensor(DType::f16, {2, 12, 128, 128}, -5.f, 5.f), -1);
    softmax_case("LogSoftmax", DType::f32, rand_tensor(DType::f32, {64, 1000, 40}, -5.f, 5.f), 1);
}

// ---- BatchNormalization ------------------------------------------------------------------------

namespace {

void batch_norm_case(DType dt, const std::vector<std::int64_t>& xd, bool constant,
                     std::int64_t opset = 15, DType param_dt = DType::f32) {
    const std::int64_t c = xd[1];
    const std::string what = "BatchNormalization " + dt_name(dt) + " X" + dims_str(xd) +
                             (constant ? " const" : " input") + " opset " + std::to_string(opset);
    std::vector<In> ins{{"x", rand_tensor(dt, xd, -3.f, 3.f)},
                        {"scale", rand_tensor(param_dt, {c}, 0.5f, 1.5f), constant},
                        {"b", rand_tensor(param_dt, {c}), constant},
                        {"mean", rand_tensor(param_dt, {c}, -0.5f, 0.5f), constant},
                        {"var", rand_tensor(param_dt, {c}, 0.5f, 2.f), constant}};
    Attrs attrs{{"epsilon", attr_f(1e-3f)}};
    if (opset >= 14) attrs.push_back({"training_mode", attr_i(0)});
    Tolerance tol = tol_for(dt);
    if (dt == DType::f32) tol = {2e-5, 2e-5};
    check_op(what, "BatchNormalization", ins, attrs, tol, opset);
}

}  // namespace

TEST_CASE("cuda BatchNormalization: NCHW inference", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        batch_norm_case(dt, {2, 3, 5, 7}, true);
        batch_norm_case(dt, {2, 3, 5, 7}, false);
        batch_norm_case(dt, {4, 6}, true);            // rank 2
        batch_norm_case(dt, {2, 5, 9}, true, 9);      // rank 3, opset 9
        batch_norm_case(dt, {1, 3, 2, 3, 4}, false);  // rank 5
    }
    batch_norm_case(DType::f16, {2, 3, 5, 7}, false, 15, DType::f16);
    batch_norm_case(DType::f32, {2, 3, 5, 7}, true, 15, DType::bf16);
}

TEST_CASE("cuda BatchNormalization: large input", "[cuda]") {
    batch_norm_case(DType::f32, {8, 64, 56, 56}, true);
    batch_norm_case(DType::f16, {2, 70000, 3, 1}, true);  // more planes than grid.y
}
