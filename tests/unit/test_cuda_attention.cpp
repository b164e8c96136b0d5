// [cuda] com.dsinfer MultiHeadAttention (cuda/kernels/attention.cu) against the reference
// kernel (src/cpu/reference/fused_attention.cpp). Q/K/V uniform in [-1, 1]; tolerances
// float32 2e-5, float16 2e-3, bfloat16 1.6e-2 (absolute + relative per element). float16 and
// bfloat16 with Dh = Dv = 64 take the tensor-core kernel, everything else the FMA kernel.
// Covered: odd sizes (Sq, Sk not multiples of the tiles, Dh = 8), Sq != Sk, Dv != Dh, masks of
// every broadcast form, BERT's [B, 1, 1, S] mask of 0 / -10000, fully -inf masked rows (zeros),
// NaN scores (NaN rows), no keys (zeros), an explicit scale, head size 128 and a large case.
#include "cuda_op_tester.hpp"

#include <limits>

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const DType kFloatTypes3[] = {DType::f32, DType::f16, DType::bf16};

std::string dims_str(const std::vector<std::int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
}

void set_value(Tensor& t, std::int64_t i, float v) {
    switch (t.dtype()) {
        case DType::f32: t.data<float>()[i] = v; break;
        case DType::f16: t.data<float16>()[i] = float16(v); break;
        case DType::bf16: t.data<bfloat16>()[i] = bfloat16(v); break;
        default: FAIL("set_value: float types only");
    }
}

Tolerance mha_tol(DType dt) {
    switch (dt) {
        case DType::f16: return {2e-3, 2e-3};
        case DType::bf16: return {1.6e-2, 1.6e-2};
        default: return {2e-5, 2e-5};
    }
}

struct Mha {
    std::int64_t b = 1, heads = 1, sq = 1, sk = 1, dh = 8, dv = 8;
    std::vector<std::int64_t> mask;  // mask shape; empty = no mask
    enum class MaskKind { random, bert, fully_masked_row } kind = MaskKind::random;
    bool nan_query = false;          // a NaN in one query (its row of that head is NaN)
    bool scale = false;              // explicit scale attribute 0.3
};

void mha_case(DType dt, const Mha& c, const std::string& note = "") {
    const std::string what = "MultiHeadAttention " + std::string(dtype_name(dt)) + " B=" +
                             std::to_string(c.b) + " H=" + std::to_string(c.heads) +
                             " Sq=" + std::to_string(c.sq) + " Sk=" + std::to_string(c.sk) +
                             " Dh=" + std::to_string(c.dh) + " Dv=" + std::to_string(c.dv) +
                             " mask" + dims_str(c.mask) + " " + note;
    Tensor q = rand_tensor(dt, {c.b, c.sq, c.heads * c.dh});
    Tensor k = rand_tensor(dt, {c.b, c.sk, c.heads * c.dh});
    Tensor v = rand_tensor(dt, {c.b, c.sk, c.heads * c.dv});
    if (c.nan_query && q.num_elements() > 0) set_value(q, q.num_elements() / 2, std::nanf(""));
    std::vector<In> ins{{"q", q}, {"k", k}, {"v", v}};
    if (!c.mask.empty()) {
        Tensor m = rand_tensor(dt, c.mask, -2.f, 2.f);
        const std::int64_t n = m.num_elements();
        const std::int64_t last = c.mask.back();
        switch (c.kind) {
            case Mha::MaskKind::random: break;
            case Mha::MaskKind::bert:  // (1 - attention_mask) * -10000: the tail of each row padded
                for (std::int64_t i = 0; i < n; ++i) {
                    const std::int64_t j = i % last;
                    const std::int64_t row = i / last;
                    const std::int64_t valid = last - (row % 3) * (last / 4);  // 100%, 75%, 50%
                    set_value(m, i, j < valid ? 0.f : -10000.f);
                }
                break;
            case Mha::MaskKind::fully_masked_row:  // row 0 of the mask all -inf, others partly
                for (std::int64_t j = 0; j < last; ++j) set_value(m, j, -kInf);
                for (std::int64_t i = last; i < n; i += 3) set_value(m, i, -kInf);
                break;
        }
        ins.push_back({"mask", m});
    }
    Attrs attrs{{"num_heads", attr_i(c.heads)}};
    if (c.scale) attrs.push_back({"scale", attr_f(0.3f)});
    check_op(what, "MultiHeadAttention", ins, attrs, mha_tol(dt), 17, 1, "com.dsinfer");
}

}  // namespace

TEST_CASE("cuda MultiHeadAttention: small odd shapes", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        Mha c;
        c.b = 2; c.heads = 3; c.sq = 5; c.sk = 7; c.dh = 8; c.dv = 8;
        mha_case(dt, c, "no mask");
        c.mask = {2, 1, 1, 7};
        mha_case(dt, c, "key mask");
        c.mask = {2, 3, 5, 7};
        mha_case(dt, c, "full mask");
        c.mask = {5, 7};
        mha_case(dt, c, "[Sq, Sk] mask");
        c.mask = {1, 3, 1, 7};
        mha_case(dt, c, "per-head mask");
        c.mask = {};
        c.dv = 12;
        mha_case(dt, c, "Dv != Dh");
        c.sq = 9; c.sk = 3; c.dh = 5; c.dv = 3;
        mha_case(dt, c, "Sq > Sk, Dh 5");
        c.sq = 1; c.sk = 70; c.dh = 16; c.dv = 40;  // several key tiles, Dv not a multiple of 32
        mha_case(dt, c, "one query");
        c.scale = true;
        mha_case(dt, c, "explicit scale");
    }
}

TEST_CASE("cuda MultiHeadAttention: BERT shape with a 0/-10000 key mask", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        Mha c;
        c.b = 2; c.heads = 12; c.sq = 128; c.sk = 128; c.dh = 64; c.dv = 64;
        c.mask = {2, 1, 1, 128};
        c.kind = Mha::MaskKind::bert;
        mha_case(dt, c, "bert");
        c.mask = {};
        mha_case(dt, c, "bert, no mask");
    }
}

TEST_CASE("cuda MultiHeadAttention: head size 64 with ragged tiles", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        Mha c;
        c.b = 1; c.heads = 2; c.sq = 77; c.sk = 150; c.dh = 64; c.dv = 64;
        mha_case(dt, c, "ragged");
        c.mask = {1, 2, 77, 150};
        mha_case(dt, c, "ragged, full mask");
        c.sq = 130; c.sk = 1;
        c.mask = {1, 1, 130, 1};
        mha_case(dt, c, "one key");
        c.mask = {};
        c.dv = 32;  // Dh 64 but Dv 32: not the tensor-core kernel
        mha_case(dt, c, "Dv 32");
    }
}

TEST_CASE("cuda MultiHeadAttention: fully masked rows give zeros, NaN scores NaN", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        for (std::int64_t d : {8, 64}) {
            Mha c;
            c.b = 2; c.heads = 3; c.sq = 5; c.sk = 7; c.dh = d; c.dv = d;
            c.mask = {2, 1, 5, 7};
            c.kind = Mha::MaskKind::fully_masked_row;
            mha_case(dt, c, "fully masked row");
            c.mask = {};
            c.nan_query = true;
            mha_case(dt, c, "NaN query");
        }
    }
}

TEST_CASE("cuda MultiHeadAttention: no keys", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        Mha c;
        c.b = 2; c.heads = 2; c.sq = 3; c.sk = 0; c.dh = 8; c.dv = 8;
        mha_case(dt, c, "Sk = 0");
    }
}

TEST_CASE("cuda MultiHeadAttention: head size 128", "[cuda]") {
    for (DType dt : kFloatTypes3) {
        Mha c;
        c.b = 1; c.heads = 2; c.sq = 33; c.sk = 65; c.dh = 128; c.dv = 128;
        c.mask = {1, 1, 1, 65};
        mha_case(dt, c, "Dh 128");
        c.dh = 100; c.dv = 128;
        mha_case(dt, c, "Dh 100, Dv 128");
    }
}

TEST_CASE("cuda MultiHeadAttention: large case", "[cuda]") {
    for (DType dt : {DType::f16, DType::f32}) {
        Mha c;
        c.b = 4; c.heads = 12; c.sq = 384; c.sk = 384; c.dh = 64; c.dv = 64;
        c.mask = {4, 1, 1, 384};
        c.kind = Mha::MaskKind::bert;
        mha_case(dt, c, "large");
    }
}
