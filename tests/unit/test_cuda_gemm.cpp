// [cuda] tests of the cuBLASLt GEMM kernels (cuda/kernels/gemm.cpp, gemm_epilogue.cu): MatMul
// (2-D, batched, broadcast batch dims, 1-D operands, empty dims), Gemm (every trans / alpha /
// beta / C form), com.dsinfer FusedMatMul and FusedGemm (every activation, with and without
// bias), MatMulInteger, in f32, f16 and bf16, against the reference CPU kernels.
//
// Tolerances (inputs uniform in [-1, 1], so a dot product of length K has magnitude ~sqrt(K)/3):
//  - f32: both sides accumulate in fp32 in different orders (Eigen's blocking vs cuBLASLt's
//    tiles / split-K); the difference is a random walk of roundings, ~sqrt(K) * 6e-8 * |y|.
//    rtol 1e-4 plus atol 1e-5 * sqrt(K) (for outputs near zero) leaves a wide margin.
//  - f16: the products of f16 inputs are exact in fp32 and both sides accumulate in fp32, so
//    the results differ only in the final rounding to f16 (at most 1 ulp = 2^-10 relative ->
//    rtol 2e-3). Gemm's reference rounds alpha*A*B to f16 before adding beta*C (the CUDA kernel
//    rounds once), which costs up to half an ulp of |alpha*A*B| ~ sqrt(K)/3 in absolute terms:
//    atol 1e-3 * sqrt(K).
//  - bf16: the same reasoning with an 8-bit significand (1 ulp = 2^-7 relative): rtol 1.6e-2,
//    atol 8e-3 * sqrt(K).
//  - int8 MatMulInteger: exact (int32 accumulation on both sides).
// The fused ops are float32 only (their reference kernels are).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_op_tester.hpp"

namespace {

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;
using std::int64_t;

const char* const kDs = "com.dsinfer";

Tolerance gemm_tol(DType dt, int64_t k) {
    const double sk = std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
    switch (dt) {
        case DType::f16: return {1e-3 * sk, 2e-3};
        case DType::bf16: return {8e-3 * sk, 1.6e-2};
        default: return {1e-5 * sk + 1e-6, 1e-4};
    }
}

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }

std::string dims_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

/// MatMul of A `a` x B `b` (B constant or a graph input); K from A's last dim.
void matmul_case(DType dt, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                 bool const_b) {
    const int64_t k = a.empty() ? 1 : a.back();
    const std::string what = "MatMul " + dt_name(dt) + " " + dims_str(a) + " x " + dims_str(b) +
                             (const_b ? " (constant B)" : " (B input)");
    check_op(what, "MatMul", {{"a", rand_tensor(dt, a)}, {"b", rand_tensor(dt, b), const_b}}, {},
             gemm_tol(dt, k));
}

const std::vector<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda gemm: MatMul 2-D, odd sizes", "[cuda]") {
    for (DType dt : kFloatTypes) {
        for (bool cb : {false, true}) {
            matmul_case(dt, {37, 29}, {29, 53}, cb);  // odd M, K, N (no vector alignment)
            matmul_case(dt, {1, 1}, {1, 1}, cb);
            matmul_case(dt, {64, 128}, {128, 32}, cb);
            matmul_case(dt, {3, 7}, {7, 1}, cb);     // N = 1
            matmul_case(dt, {1, 33}, {33, 65}, cb);  // M = 1
        }
    }
}

TEST_CASE("cuda gemm: MatMul batched and broadcast batch dims", "[cuda]") {
    for (DType dt : kFloatTypes) {
        for (bool cb : {false, true}) {
            matmul_case(dt, {3, 37, 29}, {29, 53}, cb);           // 3-D x 2-D: batch folded into M
            matmul_case(dt, {2, 5, 37, 29}, {29, 53}, cb);        // 4-D x 2-D
            matmul_case(dt, {3, 17, 24}, {3, 24, 19}, cb);        // equal batches: strided batched
            matmul_case(dt, {2, 3, 17, 24}, {2, 3, 24, 19}, cb);  // two batch dims merged
            matmul_case(dt, {7, 9}, {3, 9, 5}, cb);               // A broadcast (batch stride 0)
            matmul_case(dt, {1, 7, 9}, {4, 9, 5}, cb);            // A batch of size 1
            matmul_case(dt, {4, 7, 9}, {1, 9, 5}, cb);            // B batch of size 1
            matmul_case(dt, {4, 1, 7, 9}, {1, 3, 9, 5}, cb);      // both broadcast: outer loop
            matmul_case(dt, {2, 1, 6, 8}, {3, 8, 4}, cb);         // missing + size-1 dims
            matmul_case(dt, {2, 3, 6, 8}, {3, 8, 4}, cb);         // B batch broadcast over dim 0
        }
    }
}

TEST_CASE("cuda gemm: MatMul 1-D operands", "[cuda]") {
    for (DType dt : kFloatTypes) {
        for (bool cb : {false, true}) {
            matmul_case(dt, {29}, {29, 53}, cb);     // [K] x [K,N] -> [N]
            matmul_case(dt, {4, 37, 29}, {29}, cb);  // [.., M, K] x [K] -> [.., M]
            matmul_case(dt, {29}, {29}, cb);         // dot product -> scalar
            matmul_case(dt, {29}, {3, 29, 5}, cb);   // [K] x batched B -> [3, N]
            matmul_case(dt, {37, 29}, {29}, cb);     // matrix-vector
        }
    }
}

TEST_CASE("cuda gemm: MatMul empty dims", "[cuda]") {
    for (DType dt : kFloatTypes) {
        matmul_case(dt, {0, 29}, {29, 53}, false);  // M = 0
        matmul_case(dt, {37, 29}, {29, 0}, false);  // N = 0
        matmul_case(dt, {5, 0}, {0, 7}, false);     // K = 0: zeros
        matmul_case(dt, {2, 5, 0}, {0, 7}, true);   // K = 0, batched, constant (empty) B
        matmul_case(dt, {0, 5, 8}, {8, 7}, false);  // empty batch
    }
}

TEST_CASE("cuda gemm: Gemm trans / alpha / beta / C forms", "[cuda]") {
    const int64_t m = 37, n = 53, k = 29;
    struct CForm {
        const char* name;
        std::vector<int64_t> dims;  // empty + present = scalar
        bool present;
    };
    const std::vector<CForm> forms = {
        {"no C", {}, false},       {"scalar C", {}, true},    {"C [1]", {1}, true},
        {"C [N]", {n}, true},      {"C [1,N]", {1, n}, true}, {"C [M,1]", {m, 1}, true},
        {"C [M,N]", {m, n}, true}, {"C [1,1]", {1, 1}, true},
    };
    struct Scales {
        float alpha, beta;
    };
    const std::vector<Scales> scales = {{1.f, 1.f}, {0.5f, 2.f}, {1.5f, 0.f}, {-1.f, -0.5f}};
    for (DType dt : kFloatTypes) {
        for (int ta = 0; ta < 2; ++ta) {
            for (int tb = 0; tb < 2; ++tb) {
                for (const auto& f : forms) {
                    for (const auto& s : scales) {
                        // f16/bf16: every form once, with non-trivial scales.
                        if (dt != DType::f32 && !(s.alpha == 0.5f)) continue;
                        for (bool cb : {false, true}) {
                            // Constant B and C: f32 with one scale pair (upload path).
                            if (cb && (dt != DType::f32 || s.alpha != 0.5f)) continue;
                            const std::vector<int64_t> ad =
                                ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
                            const std::vector<int64_t> bd =
                                tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
                            std::vector<In> ins = {{"a", rand_tensor(dt, ad)},
                                                   {"b", rand_tensor(dt, bd), cb}};
                            if (f.present) ins.push_back({"c", rand_tensor(dt, f.dims), cb});
                            const std::string what = "Gemm " + dt_name(dt) +
                                                     " transA=" + std::to_string(ta) +
                                                     " transB=" + std::to_string(tb) + " " +
                                                     f.name + " alpha=" + std::to_string(s.alpha) +
                                                     " beta=" + std::to_string(s.beta) +
                                                     (cb ? " (constant B, C)" : " (inputs)");
                            check_op(what, "Gemm", ins,
                                     {{"alpha", attr_f(s.alpha)},
                                      {"beta", attr_f(s.beta)},
                                      {"transA", attr_i(ta)},
                                      {"transB", attr_i(tb)}},
                                     gemm_tol(dt, k), 13);
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("cuda gemm: Gemm opset 7 (C required) and K = 0", "[cuda]") {
    check_op("Gemm opset 7 C [N]", "Gemm",
             {{"a", rand_tensor(DType::f32, {9, 5})},
              {"b", rand_tensor(DType::f32, {5, 6}), true},
              {"c", rand_tensor(DType::f32, {6}), true}},
             {}, gemm_tol(DType::f32, 5), 7);
    for (DType dt : kFloatTypes) {
        check_op("Gemm K = 0 with C [M,1] beta 2 " + dt_name(dt), "Gemm",
                 {{"a", rand_tensor(dt, {4, 0})},
                  {"b", rand_tensor(dt, {0, 6})},
                  {"c", rand_tensor(dt, {4, 1})}},
                 {{"beta", attr_f(2.f)}}, gemm_tol(dt, 1), 13);
        check_op("Gemm K = 0 without C " + dt_name(dt), "Gemm",
                 {{"a", rand_tensor(dt, {4, 0})}, {"b", rand_tensor(dt, {0, 6})}}, {},
                 gemm_tol(dt, 1), 13);
        check_op("Gemm M = 0 " + dt_name(dt), "Gemm",
                 {{"a", rand_tensor(dt, {0, 5})},
                  {"b", rand_tensor(dt, {5, 6})},
                  {"c", rand_tensor(dt, {6})}},
                 {}, gemm_tol(dt, 5), 13);
    }
}

namespace {

struct ActCase {
    const char* name;
    Attrs attrs;
    bool lt_gelu = false;  ///< may run as cuBLASLt's GELU epilogue
};

/// cuBLASLt's GELU epilogue (GeluTanh) may evaluate tanh with the hardware approximation
/// (relative error <= 2^-11): |error| <= 0.5 * |x| * 2^-11 ~ 2.5e-4 * |x| with |x| up to ~5 at
/// K ~ 30. Other activations run in dsinfer's own pass with libdevice's expf/tanhf/erff (<= 2
/// ulp) and keep the GEMM tolerance.
Tolerance act_tol(const ActCase& act, Tolerance t) {
    if (act.lt_gelu) {
        t.atol = std::max(t.atol, 2e-3);
        t.rtol = std::max(t.rtol, 1e-3);
    }
    return t;
}

std::vector<ActCase> activations() {
    return {
        {"none", {}},
        {"Relu", {{"activation", attr_s("Relu")}}},
        {"LeakyRelu", {{"activation", attr_s("LeakyRelu")}, {"activation_alpha", attr_f(0.1f)}}},
        {"Sigmoid", {{"activation", attr_s("Sigmoid")}}},
        {"Tanh", {{"activation", attr_s("Tanh")}}},
        {"Clip",
         {{"activation", attr_s("Clip")},
          {"activation_alpha", attr_f(-0.5f)},
          {"activation_beta", attr_f(0.75f)}}},
        {"HardSwish", {{"activation", attr_s("HardSwish")}}},
        {"Gelu (erf)", {{"activation", attr_s("Gelu")}}},
        // cuBLASLt's GELU epilogue (tanh form; see act_tol). If only this case fails, set
        // kUseLtGeluEpilogue = false in cuda/kernels/gemm.cpp (the elementwise pass then runs it).
        {"GeluTanh", {{"activation", attr_s("GeluTanh")}}, true},
    };
}

}  // namespace

TEST_CASE("cuda gemm: FusedMatMul activations, bias, constant and input B", "[cuda]") {
    const DType dt = DType::f32;
    for (const auto& act : activations()) {
        for (bool bias : {false, true}) {
            for (bool cb : {false, true}) {
                struct Shp {
                    std::vector<int64_t> a, b;
                };
                const std::vector<Shp> shapes = {
                    Shp{{37, 29}, {29, 53}}, Shp{{2, 5, 37, 29}, {29, 53}},
                    Shp{{3, 17, 24}, {3, 24, 19}}, Shp{{4, 1, 7, 9}, {1, 3, 9, 5}},
                    Shp{{4, 37, 29}, {29}}};
                // Constants (uploaded B and Bias) with the first two shapes only.
                for (std::size_t si = 0; si < (cb ? 2 : shapes.size()); ++si) {
                    const Shp& s = shapes[si];
                    // Bias runs along the output's last dim (M when B is 1-D).
                    const int64_t last = s.b.size() >= 2 ? s.b.back() : s.a[s.a.size() - 2];
                    std::vector<In> ins = {{"a", rand_tensor(dt, s.a)},
                                           {"b", rand_tensor(dt, s.b), cb}};
                    if (bias) ins.push_back({"bias", rand_tensor(dt, {last}), cb});
                    const std::string what = std::string("FusedMatMul ") + act.name +
                                             (bias ? " +bias " : " ") + dims_str(s.a) + " x " +
                                             dims_str(s.b) + (cb ? " (constants)" : " (inputs)");
                    check_op(what, "FusedMatMul", ins, act.attrs,
                             act_tol(act, gemm_tol(dt, s.a.back())), 17, 1, kDs);
                }
            }
        }
    }
}

TEST_CASE("cuda gemm: FusedMatMul K = 0 and N = 3", "[cuda]") {
    check_op("FusedMatMul K = 0 + bias + Sigmoid", "FusedMatMul",
             {{"a", rand_tensor(DType::f32, {5, 0})},
              {"b", rand_tensor(DType::f32, {0, 7})},
              {"bias", rand_tensor(DType::f32, {7})}},
             {{"activation", attr_s("Sigmoid")}}, gemm_tol(DType::f32, 1), 17, 1, kDs);
    // N = 3 (bias of 12 bytes: the next GEMM's bias is not 16-byte aligned in an arena).
    check_op("FusedMatMul N = 3 + bias + Relu", "FusedMatMul",
             {{"a", rand_tensor(DType::f32, {11, 13})},
              {"b", rand_tensor(DType::f32, {13, 3})},
              {"bias", rand_tensor(DType::f32, {3})}},
             {{"activation", attr_s("Relu")}}, gemm_tol(DType::f32, 13), 17, 1, kDs);
}

TEST_CASE("cuda gemm: FusedGemm activations and C forms", "[cuda]") {
    const DType dt = DType::f32;
    const int64_t m = 37, n = 53, k = 29;
    for (const auto& act : activations()) {
        for (int form = 0; form < 3; ++form) {
            for (int tb = 0; tb < 2; ++tb) {
                const std::vector<int64_t> bd =
                    tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
                std::vector<In> ins = {{"a", rand_tensor(dt, {m, k})},
                                       {"b", rand_tensor(dt, bd), true}};
                const char* fname = "no C";
                if (form == 1) {
                    ins.push_back({"c", rand_tensor(dt, {n}), true});
                    fname = "C [N]";
                } else if (form == 2) {
                    ins.push_back({"c", rand_tensor(dt, {m, 1})});
                    fname = "C [M,1]";
                }
                Attrs attrs = act.attrs;
                attrs.push_back({"transB", attr_i(tb)});
                attrs.push_back({"alpha", attr_f(0.75f)});
                // beta = 1 with C [N] takes the bias epilogue; C [M,1] the broadcast path.
                attrs.push_back({"beta", attr_f(form == 2 ? 1.5f : 1.f)});
                const std::string what = std::string("FusedGemm ") + act.name + " " + fname +
                                         " transB=" + std::to_string(tb);
                check_op(what, "FusedGemm", ins, attrs, act_tol(act, gemm_tol(dt, k)), 17, 1, kDs);
            }
        }
    }
}

TEST_CASE("cuda gemm: large 512x768x3072", "[cuda]") {
    // M = 512, K = 768, N = 3072 (a BERT-base FFN up-projection) and the down-projection.
    for (DType dt : kFloatTypes)
        check_op("MatMul large " + dt_name(dt) + " [4,128,768] x [768,3072]", "MatMul",
                 {{"a", rand_tensor(dt, {4, 128, 768})}, {"b", rand_tensor(dt, {768, 3072}), true}},
                 {}, gemm_tol(dt, 768));
    check_op("MatMul large f16 [512,3072] x [3072,768]", "MatMul",
             {{"a", rand_tensor(DType::f16, {512, 3072})},
              {"b", rand_tensor(DType::f16, {3072, 768}), true}},
             {}, gemm_tol(DType::f16, 3072));
    check_op("FusedMatMul large +bias Gelu [512,768] x [768,3072]", "FusedMatMul",
             {{"a", rand_tensor(DType::f32, {512, 768})},
              {"b", rand_tensor(DType::f32, {768, 3072}), true},
              {"bias", rand_tensor(DType::f32, {3072}), true}},
             {{"activation", attr_s("Gelu")}}, gemm_tol(DType::f32, 768), 17, 1, kDs);
    check_op("Gemm large transB [512,3072] x [768,3072]^T + C [768]", "Gemm",
             {{"a", rand_tensor(DType::f32, {512, 3072})},
              {"b", rand_tensor(DType::f32, {768, 3072}), true},
              {"c", rand_tensor(DType::f32, {768}), true}},
             {{"transB", attr_i(1)}}, gemm_tol(DType::f32, 3072), 13);
    check_op("MatMul large batched [12,128,64] x [12,64,128]", "MatMul",
             {{"a", rand_tensor(DType::f32, {12, 128, 64})},
              {"b", rand_tensor(DType::f32, {12, 64, 128})}},
             {}, gemm_tol(DType::f32, 64));
}

namespace {

Tensor i8_tensor(const std::vector<int64_t>& dims, int lo = -128, int hi = 127) {
    auto t = Tensor::allocate(DType::i8, Shape::make(dims).value()).value();
    std::uniform_int_distribution<int> u(lo, hi);
    for (int64_t i = 0; i < t.num_elements(); ++i)
        t.data<std::int8_t>()[i] = static_cast<std::int8_t>(u(rng()));
    return t;
}

}  // namespace

TEST_CASE("cuda gemm: MatMulInteger int8", "[cuda]") {
    const Tolerance exact{0.0, 0.0};
    check_op("MatMulInteger [37,64] x [64,48]", "MatMulInteger",
             {{"a", i8_tensor({37, 64})}, {"b", i8_tensor({64, 48}), true}}, {}, exact);
    check_op("MatMulInteger [2,5,36] x [36,12] (batch folded)", "MatMulInteger",
             {{"a", i8_tensor({2, 5, 36})}, {"b", i8_tensor({36, 12}), true}}, {}, exact);
    check_op("MatMulInteger [64] x [64,8] (1-D A)", "MatMulInteger",
             {{"a", i8_tensor({64})}, {"b", i8_tensor({64, 8}), true}}, {}, exact);
    {
        auto zp = Tensor::allocate(DType::i8, Shape{}).value();
        zp.data<std::int8_t>()[0] = 0;
        check_op("MatMulInteger zero zero points", "MatMulInteger",
                 {{"a", i8_tensor({17, 32})},
                  {"b", i8_tensor({32, 16}), true},
                  {"azp", zp, true},
                  {"bzp", zp, true}},
                 {}, exact);
    }
    // Declined (run by the CPU fallback, still compared): K not a multiple of 4, B an input,
    // a non-zero zero point.
    check_op("MatMulInteger K = 30 (declined)", "MatMulInteger",
             {{"a", i8_tensor({7, 30})}, {"b", i8_tensor({30, 8}), true}}, {}, exact, 17, 1, "",
             false);
    check_op("MatMulInteger B input (declined)", "MatMulInteger",
             {{"a", i8_tensor({7, 32})}, {"b", i8_tensor({32, 8})}}, {}, exact, 17, 1, "", false);
    {
        auto zp = Tensor::allocate(DType::i8, Shape{}).value();
        zp.data<std::int8_t>()[0] = 3;
        check_op("MatMulInteger non-zero zero point (declined)", "MatMulInteger",
                 {{"a", i8_tensor({7, 32})}, {"b", i8_tensor({32, 8}), true}, {"azp", zp, true}},
                 {}, exact, 17, 1, "", false);
    }
}
