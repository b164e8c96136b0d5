// [cuda] tests of the CUDA data-movement and reduction kernels (cuda/kernels/tensor_ops.cu):
// Gather, Transpose, Concat, Split, Slice, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Pad,
// ReduceSum, ReduceMean, ReduceMax. Every case runs one node on the CUDA engine and on the
// reference CPU kernels and compares (exactly for data movement). Without a GPU the cases WARN
// "SKIPPED" and return.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_op_tester.hpp"

namespace {

using namespace dsinfer;
using namespace dsinfer::test::cuda_ops;

constexpr Tolerance kExact{0.0, 0.0};
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

/// Data of any movable dtype: random floats, or distinct-ish integers / booleans.
Tensor make_data(DType dt, const std::vector<std::int64_t>& dims) {
    if (is_floating(dt)) return rand_tensor(dt, dims, -2.f, 2.f);
    auto t = Tensor::allocate(dt, Shape::make(dims).value()).value();
    std::uniform_int_distribution<int> u(-120, 120);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
        const int v = u(rng());
        switch (dt) {
            case DType::i64: t.data<std::int64_t>()[i] = std::int64_t{v} * 1000003 + i; break;
            case DType::i32: t.data<std::int32_t>()[i] = v * 1009 + static_cast<int>(i % 1000); break;
            case DType::i8: t.data<std::int8_t>()[i] = static_cast<std::int8_t>(v); break;
            case DType::u8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v + 120); break;
            case DType::boolean: t.data<bool>()[i] = v > 0; break;
            default: FAIL("make_data: unsupported dtype");
        }
    }
    return t;
}

Tensor i32_tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int32_t>& values) {
    return Tensor::from_vector<std::int32_t>(Shape::make(dims).value(), values);
}

std::string dname(DType dt) { return std::string(dtype_name(dt)); }

const DType kMoveTypes[] = {DType::f32, DType::f16, DType::i64};
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

std::string perm_str(const std::vector<std::int64_t>& p) {
    std::string s = "[";
    for (std::size_t i = 0; i < p.size(); ++i) s += (i ? "," : "") + std::to_string(p[i]);
    return s + "]";
}

}  // namespace

// ---- Gather ---------------------------------------------------------------------------------

TEST_CASE("cuda Gather: axes, negative indices, int32/int64 indices, dtypes", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("axis 0" + t, "Gather",
                 {{"x", make_data(dt, {5, 7})}, {"i", i64_tensor({4}, {0, 4, -1, 2})}},
                 {{"axis", attr_i(0)}}, kExact);
        check_op("axis 1, int32 2-D indices" + t, "Gather",
                 {{"x", make_data(dt, {5, 7})}, {"i", i32_tensor({2, 3}, {0, -7, 6, 3, 1, 2})}},
                 {{"axis", attr_i(1)}}, kExact);
        check_op("axis -1 rank 3" + t, "Gather",
                 {{"x", make_data(dt, {3, 4, 5})}, {"i", i64_tensor({2}, {4, -5})}},
                 {{"axis", attr_i(-1)}}, kExact);
        check_op("scalar index axis 1" + t, "Gather",
                 {{"x", make_data(dt, {3, 4, 5})}, {"i", i64_tensor({}, {-2})}},
                 {{"axis", attr_i(1)}}, kExact);
        check_op("odd rows (37 wide) with repeats" + t, "Gather",
                 {{"x", make_data(dt, {13, 37})}, {"i", i64_tensor({6}, {12, 0, 12, -13, 5, 5})}},
                 {}, kExact);
        check_op("empty indices" + t, "Gather",
                 {{"x", make_data(dt, {13, 37})}, {"i", i64_tensor({0}, {})}}, {}, kExact);
        check_op("empty data dim" + t, "Gather",
                 {{"x", make_data(dt, {4, 0})}, {"i", i64_tensor({2}, {3, -4})}}, {}, kExact);
        check_op("constant indices" + t, "Gather",
                 {{"x", make_data(dt, {10, 16})}, {"i", i64_tensor({3}, {1, 9, -10}), true}}, {},
                 kExact);
        check_op("constant int32 indices, axis 2" + t, "Gather",
                 {{"x", make_data(dt, {2, 3, 9, 4})}, {"i", i32_tensor({2, 2}, {8, -9, 0, 4}), true}},
                 {{"axis", attr_i(2)}}, kExact);
    }
    check_op("u8 axis 0", "Gather",
             {{"x", make_data(DType::u8, {9, 33})}, {"i", i64_tensor({3}, {8, 0, -1})}}, {}, kExact);
    check_op("bool axis 1", "Gather",
             {{"x", make_data(DType::boolean, {4, 6})}, {"i", i64_tensor({2}, {5, 0})}},
             {{"axis", attr_i(1)}}, kExact);
}

TEST_CASE("cuda Gather: embedding lookup 30522 x 768 with 8 x 128 indices", "[cuda]") {
    if (!cuda_ready()) return;
    std::uniform_int_distribution<std::int64_t> u(-30522, 30521);
    std::vector<std::int64_t> ids(8 * 128);
    for (auto& v : ids) v = u(rng());
    ids[0] = 0;
    ids[1] = 30521;
    ids[2] = -30522;
    const Tensor table = rand_tensor(DType::f32, {30522, 768});
    check_op("embedding f32, constant table", "Gather",
             {{"table", table, true}, {"ids", i64_tensor({8, 128}, ids)}}, {}, kExact);
    check_op("embedding f32, table as input", "Gather",
             {{"table", table}, {"ids", i64_tensor({8, 128}, ids)}}, {}, kExact);
    check_op("embedding f16 (rows of 768 halves)", "Gather",
             {{"table", rand_tensor(DType::f16, {4096, 768}), true},
              {"ids", i64_tensor({3, 5}, {0, 1, 2, 4095, -1, 17, 17, 100, 2000, 3000, 4000, -4096, 9, 8, 7})}},
             {}, kExact);
}

TEST_CASE("cuda Gather: out-of-range index is invalid_argument, never a wrong answer", "[cuda]") {
    if (!cuda_ready()) return;
    const std::vector<In> ins = {{"x", make_data(DType::f32, {5, 7})}, {"i", i64_tensor({2}, {1, 2})}};
    const Graph g = one_node("Gather", ins, 1, {{"axis", attr_i(0)}}, 17);
    EngineOptions o;
    o.device = "cuda";
    auto e = InferenceEngine::compile(g, o);
    REQUIRE(e.node_providers().size() == 1);
    CHECK(e.node_providers()[0] == "cuda");
    const Tensor x = ins[0].t;
    for (const std::vector<std::int64_t>& bad :
         {std::vector<std::int64_t>{1, 5}, std::vector<std::int64_t>{-6, 0},
          std::vector<std::int64_t>{kI64Max, 0}, std::vector<std::int64_t>{0, kI64Min}}) {
        INFO("indices " << bad[0] << ", " << bad[1]);
        bool threw = false;
        try {
            (void)e.run({{"x", x}, {"i", i64_tensor({2}, bad)}});
        } catch (const Error& err) {
            threw = true;
            CHECK(err.code() == ErrorCode::invalid_argument);
            const std::string msg = err.what();
            INFO("message: " << msg);
            CHECK(msg.find("index") != std::string::npos);
            CHECK(msg.find("[-5, 4]") != std::string::npos);
        }
        CHECK(threw);
    }
    // int32 indices too (a second engine: the graph declares the indices' dtype).
    {
        const std::vector<In> ins32 = {{"x", x}, {"i", i32_tensor({3}, {0, 1, 2})}};
        auto e32 = InferenceEngine::compile(one_node("Gather", ins32, 1, {{"axis", attr_i(1)}}, 17), o);
        bool threw = false;
        try {
            (void)e32.run({{"x", x}, {"i", i32_tensor({3}, {0, 7, 2})}});
        } catch (const Error& err) {
            threw = true;
            CHECK(err.code() == ErrorCode::invalid_argument);
        }
        CHECK(threw);
    }
    // The engine (and the device) still work after the errors.
    const auto got = e.run({{"x", x}, {"i", i64_tensor({2}, {4, -5})}});
    REQUIRE(got.size() == 1);
    REQUIRE(got[0].tensor.shape() == Shape{2, 7});
    for (int c = 0; c < 7; ++c) {
        CHECK(got[0].tensor.data<float>()[c] == x.data<float>()[4 * 7 + c]);
        CHECK(got[0].tensor.data<float>()[7 + c] == x.data<float>()[c]);
    }
}

// ---- Transpose ------------------------------------------------------------------------------

TEST_CASE("cuda Transpose: rank 2 and 3, every rank-3 permutation", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("2-D 37x53" + t, "Transpose", {{"x", make_data(dt, {37, 53})}},
                 {{"perm", attr_ints({1, 0})}}, kExact);
        check_op("2-D 1x1000" + t, "Transpose", {{"x", make_data(dt, {1, 1000})}},
                 {{"perm", attr_ints({1, 0})}}, kExact);
        check_op("default perm rank 3" + t, "Transpose", {{"x", make_data(dt, {3, 4, 5})}}, {},
                 kExact);
        const std::vector<std::vector<std::int64_t>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                                              {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        for (const auto& p : perms) {
            check_op("3-D 5x7x9 " + perm_str(p) + t, "Transpose", {{"x", make_data(dt, {5, 7, 9})}},
                     {{"perm", attr_ints(p)}}, kExact);
            check_op("3-D 3x40x33 " + perm_str(p) + t, "Transpose",
                     {{"x", make_data(dt, {3, 40, 33})}}, {{"perm", attr_ints(p)}}, kExact);
        }
    }
    check_op("2-D u8 17x19", "Transpose", {{"x", make_data(DType::u8, {17, 19})}},
             {{"perm", attr_ints({1, 0})}}, kExact);
    check_op("3-D bool", "Transpose", {{"x", make_data(DType::boolean, {4, 5, 6})}},
             {{"perm", attr_ints({2, 1, 0})}}, kExact);
    check_op("2-D bf16 64x48", "Transpose", {{"x", rand_tensor(DType::bf16, {64, 48})}},
             {{"perm", attr_ints({1, 0})}}, kExact);
    check_op("large 2-D 2048x1536 f32", "Transpose", {{"x", rand_tensor(DType::f32, {2048, 1536})}},
             {{"perm", attr_ints({1, 0})}}, kExact);
    check_op("large 3-D 64x129x33 [2,0,1] f32", "Transpose",
             {{"x", rand_tensor(DType::f32, {64, 129, 33})}}, {{"perm", attr_ints({2, 0, 1})}},
             kExact);
}

TEST_CASE("cuda Transpose: rank 4 and 6, head split/merge, empty", "[cuda]") {
    const std::vector<std::vector<std::int64_t>> perms4 = {
        {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}, {0, 1, 3, 2}, {1, 0, 2, 3}, {2, 3, 0, 1}};
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        for (const auto& p : perms4) {
            check_op("4-D 2x3x4x5 " + perm_str(p) + t, "Transpose",
                     {{"x", make_data(dt, {2, 3, 4, 5})}}, {{"perm", attr_ints(p)}}, kExact);
            check_op("4-D 3x17x9x40 " + perm_str(p) + t, "Transpose",
                     {{"x", make_data(dt, {3, 17, 9, 40})}}, {{"perm", attr_ints(p)}}, kExact);
        }
        const std::vector<std::vector<std::int64_t>> perms6 = {
            {5, 4, 3, 2, 1, 0}, {0, 2, 4, 1, 3, 5}, {1, 0, 3, 2, 5, 4}, {0, 1, 2, 3, 5, 4}};
        for (const auto& p : perms6)
            check_op("6-D 2x3x2x4x3x5 " + perm_str(p) + t, "Transpose",
                     {{"x", make_data(dt, {2, 3, 2, 4, 3, 5})}}, {{"perm", attr_ints(p)}}, kExact);
        check_op("empty [0,5]" + t, "Transpose", {{"x", make_data(dt, {0, 5})}},
                 {{"perm", attr_ints({1, 0})}}, kExact);
        check_op("empty [3,0,2]" + t, "Transpose", {{"x", make_data(dt, {3, 0, 2})}},
                 {{"perm", attr_ints({2, 0, 1})}}, kExact);
    }
    for (DType dt : {DType::f32, DType::f16}) {
        const std::string t = " " + dname(dt);
        check_op("BERT head split [8,128,12,64] -> [0,2,1,3]" + t, "Transpose",
                 {{"x", rand_tensor(dt, {8, 128, 12, 64})}}, {{"perm", attr_ints({0, 2, 1, 3})}},
                 kExact);
        check_op("BERT key transpose [8,12,128,64] -> [0,1,3,2]" + t, "Transpose",
                 {{"x", rand_tensor(dt, {8, 12, 128, 64})}}, {{"perm", attr_ints({0, 1, 3, 2})}},
                 kExact);
        check_op("NCHW -> NHWC [4,33,17,40]" + t, "Transpose",
                 {{"x", rand_tensor(dt, {4, 33, 17, 40})}}, {{"perm", attr_ints({0, 2, 3, 1})}},
                 kExact);
    }
}

// ---- Concat / Split -------------------------------------------------------------------------

TEST_CASE("cuda Concat: axes, odd sizes, empty inputs, many inputs", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("axis 0" + t, "Concat",
                 {{"a", make_data(dt, {2, 3})}, {"b", make_data(dt, {5, 3})}, {"c", make_data(dt, {1, 3})}},
                 {{"axis", attr_i(0)}}, kExact);
        check_op("axis 1 odd widths" + t, "Concat",
                 {{"a", make_data(dt, {4, 3})}, {"b", make_data(dt, {4, 1})}, {"c", make_data(dt, {4, 7})}},
                 {{"axis", attr_i(1)}}, kExact);
        check_op("axis -1 rank 3" + t, "Concat",
                 {{"a", make_data(dt, {2, 3, 5})}, {"b", make_data(dt, {2, 3, 1})}, {"c", make_data(dt, {2, 3, 8})}},
                 {{"axis", attr_i(-1)}}, kExact);
        check_op("axis 1 with an empty input" + t, "Concat",
                 {{"a", make_data(dt, {2, 0, 4, 4})}, {"b", make_data(dt, {2, 3, 4, 4})}, {"c", make_data(dt, {2, 1, 4, 4})}},
                 {{"axis", attr_i(1)}}, kExact);
        check_op("all empty" + t, "Concat",
                 {{"a", make_data(dt, {0, 3})}, {"b", make_data(dt, {0, 3})}}, {{"axis", attr_i(0)}},
                 kExact);
        std::vector<In> many;
        for (int i = 0; i < 10; ++i)
            many.push_back({"x" + std::to_string(i), make_data(dt, {3, 4, 1 + (i * 7) % 11})});
        check_op("10 inputs axis 2" + t, "Concat", many, {{"axis", attr_i(2)}}, kExact);
        check_op("constant input" + t, "Concat",
                 {{"a", make_data(dt, {3, 16})}, {"b", make_data(dt, {3, 8}), true}},
                 {{"axis", attr_i(1)}}, kExact);
    }
    check_op("u8 axis 1", "Concat",
             {{"a", make_data(DType::u8, {5, 3})}, {"b", make_data(DType::u8, {5, 13})}},
             {{"axis", attr_i(1)}}, kExact);
    check_op("large axis 1 f32 (3M elements)", "Concat",
             {{"a", rand_tensor(DType::f32, {1024, 1536})}, {"b", rand_tensor(DType::f32, {1024, 1537})}},
             {{"axis", attr_i(1)}}, kExact);
    check_op("large axis 0 f16", "Concat",
             {{"a", rand_tensor(DType::f16, {1024, 1536})}, {"b", rand_tensor(DType::f16, {999, 1536})}},
             {{"axis", attr_i(0)}}, kExact);
}

TEST_CASE("cuda Split: attribute, input, num_outputs, equal split", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("opset 11 attribute split axis 1" + t, "Split", {{"x", make_data(dt, {4, 10})}},
                 {{"axis", attr_i(1)}, {"split", attr_ints({2, 3, 5})}}, kExact, 11, 3);
        check_op("opset 13 constant split input axis -1" + t, "Split",
                 {{"x", make_data(dt, {3, 7})}, {"s", i64_tensor({2}, {1, 6}), true}},
                 {{"axis", attr_i(-1)}}, kExact, 13, 2);
        check_op("opset 13 split input (graph input) axis 0" + t, "Split",
                 {{"x", make_data(dt, {9, 5})}, {"s", i64_tensor({3}, {4, 0, 5})}},
                 {{"axis", attr_i(0)}}, kExact, 13, 3);
        check_op("opset 18 num_outputs uneven" + t, "Split", {{"x", make_data(dt, {2, 10})}},
                 {{"axis", attr_i(1)}, {"num_outputs", attr_i(3)}}, kExact, 18, 3);
        check_op("equal split axis 0" + t, "Split", {{"x", make_data(dt, {6, 4})}}, {}, kExact, 17, 3);
        check_op("rank 4 axis 2" + t, "Split", {{"x", make_data(dt, {2, 3, 9, 5})}},
                 {{"axis", attr_i(2)}, {"split", attr_ints({4, 5})}}, kExact, 11, 2);
    }
    check_op("large f32 QKV split [2048,2304] -> 3 x 768", "Split",
             {{"x", rand_tensor(DType::f32, {2048, 2304})}}, {{"axis", attr_i(1)}}, kExact, 17, 3);
}

// ---- Slice ----------------------------------------------------------------------------------

TEST_CASE("cuda Slice: steps (negative too), clamping, axes, opset 9 attributes", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        const Tensor x = make_data(dt, {10, 12, 7});
        auto slice = [&](const std::string& what, std::vector<std::int64_t> s, std::vector<std::int64_t> e,
                         std::vector<std::int64_t> a, std::vector<std::int64_t> st, bool constant) {
            const auto n = static_cast<std::int64_t>(s.size());
            std::vector<In> ins = {{"x", x},
                                   {"starts", i64_tensor({n}, s), constant},
                                   {"ends", i64_tensor({n}, e), constant},
                                   {"axes", a.empty() ? Tensor() : i64_tensor({n}, a), constant},
                                   {"steps", st.empty() ? Tensor() : i64_tensor({n}, st), constant}};
            if (st.empty()) ins.pop_back();
            check_op(what + t + (constant ? " (constant params)" : ""), "Slice", ins, {}, kExact, 13);
        };
        for (bool constant : {false, true}) {
            slice("step 2 axis 0", {1}, {8}, {0}, {2}, constant);
            slice("negative steps on two axes", {-1, 10}, {-1000, 0}, {2, 1}, {-1, -3}, constant);
            slice("clamped start/end on the last axis", {-100}, {kI64Max}, {-1}, {}, constant);
            slice("empty result", {5}, {2}, {0}, {1}, constant);
            slice("no axes or steps", {1, 2}, {3, 5}, {}, {}, constant);
            slice("inner cut 1..6 of 7", {1}, {6}, {2}, {1}, constant);
            slice("reverse everything", {kI64Max, kI64Max, kI64Max}, {kI64Min, kI64Min, kI64Min},
                  {0, 1, 2}, {-1, -1, -1}, constant);
            slice("step larger than the dim", {9}, {kI64Min}, {0}, {-1000}, constant);
            slice("step larger than the dim, positive", {-3}, {kI64Max}, {1}, {1000}, constant);
        }
        check_op("int32 params" + t, "Slice",
                 {{"x", x}, {"s", i32_tensor({2}, {2, -5})}, {"e", i32_tensor({2}, {9, 100})},
                  {"a", i32_tensor({2}, {0, 1})}, {"p", i32_tensor({2}, {3, 1})}},
                 {}, kExact, 13);
        check_op("opset 9 attributes" + t, "Slice", {{"x", x}},
                 {{"starts", attr_ints({0, 1})}, {"ends", attr_ints({2, -1})}, {"axes", attr_ints({0, 2})}},
                 kExact, 9);
        check_op("opset 9 no axes" + t, "Slice", {{"x", x}},
                 {{"starts", attr_ints({3})}, {"ends", attr_ints({kI64Max})}}, kExact, 9);
    }
    check_op("large f32 row slice with step", "Slice",
             {{"x", rand_tensor(DType::f32, {2048, 2048})}, {"s", i64_tensor({2}, {7, 3})},
              {"e", i64_tensor({2}, {2047, 2001})}, {"a", i64_tensor({2}, {0, 1})},
              {"p", i64_tensor({2}, {1, 2})}},
             {}, kExact, 13);
}

// ---- Reshape / Flatten / Squeeze / Unsqueeze / Expand ---------------------------------------

TEST_CASE("cuda Reshape, Flatten, Squeeze, Unsqueeze", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("Reshape {0,-1} constant shape" + t, "Reshape",
                 {{"x", make_data(dt, {2, 3, 4})}, {"s", i64_tensor({2}, {0, -1}), true}}, {}, kExact, 14);
        check_op("Reshape shape as input" + t, "Reshape",
                 {{"x", make_data(dt, {2, 3, 4})}, {"s", i64_tensor({3}, {4, 3, 2})}}, {}, kExact, 14);
        check_op("Reshape empty" + t, "Reshape",
                 {{"x", make_data(dt, {0, 6})}, {"s", i64_tensor({2}, {-1, 3})}}, {}, kExact, 14);
        for (std::int64_t axis : {0, 2, -1})
            check_op("Flatten axis " + std::to_string(axis) + t, "Flatten",
                     {{"x", make_data(dt, {2, 3, 4, 5})}}, {{"axis", attr_i(axis)}}, kExact);
        check_op("Squeeze opset 11 attribute" + t, "Squeeze", {{"x", make_data(dt, {2, 1, 3, 1})}},
                 {{"axes", attr_ints({1, 3})}}, kExact, 11);
        check_op("Squeeze opset 13 axes input" + t, "Squeeze",
                 {{"x", make_data(dt, {2, 1, 3, 1})}, {"a", i64_tensor({1}, {-1})}}, {}, kExact, 13);
        check_op("Squeeze no axes" + t, "Squeeze", {{"x", make_data(dt, {1, 3, 1})}}, {}, kExact, 13);
        check_op("Unsqueeze opset 11 attribute" + t, "Unsqueeze", {{"x", make_data(dt, {3, 4})}},
                 {{"axes", attr_ints({0, 3})}}, kExact, 11);
        check_op("Unsqueeze opset 13 axes input" + t, "Unsqueeze",
                 {{"x", make_data(dt, {3, 4})}, {"a", i64_tensor({2}, {1, -1}), true}}, {}, kExact, 13);
    }
}

TEST_CASE("cuda Expand: broadcast copies", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        check_op("[3,1] -> [2,3,4]" + t, "Expand",
                 {{"x", make_data(dt, {3, 1})}, {"s", i64_tensor({3}, {2, 3, 4})}}, {}, kExact);
        check_op("[1] -> [5,6]" + t, "Expand",
                 {{"x", make_data(dt, {1})}, {"s", i64_tensor({2}, {5, 6})}}, {}, kExact);
        check_op("[4,1,6] -> [4,5,6]" + t, "Expand",
                 {{"x", make_data(dt, {4, 1, 6})}, {"s", i64_tensor({3}, {4, 5, 6})}}, {}, kExact);
        check_op("[1,768] -> [64,768]" + t, "Expand",
                 {{"x", make_data(dt, {1, 768})}, {"s", i64_tensor({2}, {64, 768})}}, {}, kExact);
        check_op("shape of smaller rank (a copy)" + t, "Expand",
                 {{"x", make_data(dt, {2, 3, 4})}, {"s", i64_tensor({1}, {4})}}, {}, kExact);
        check_op("[2,1,1,33] -> [2,3,17,33]" + t, "Expand",
                 {{"x", make_data(dt, {2, 1, 1, 33})}, {"s", i64_tensor({4}, {2, 3, 17, 1}), true}}, {},
                 kExact);
        check_op("[1,3] -> [0,3]" + t, "Expand",
                 {{"x", make_data(dt, {1, 3})}, {"s", i64_tensor({2}, {0, 3})}}, {}, kExact);
        check_op("[40,1] -> [40,50] (tiled broadcast)" + t, "Expand",
                 {{"x", make_data(dt, {40, 1})}, {"s", i64_tensor({2}, {40, 50})}}, {}, kExact);
    }
    check_op("large [1,1024] -> [2048,1024] f32", "Expand",
             {{"x", rand_tensor(DType::f32, {1, 1024})}, {"s", i64_tensor({2}, {2048, 1024})}}, {},
             kExact);
}

// ---- Pad ------------------------------------------------------------------------------------

TEST_CASE("cuda Pad: constant mode (other modes fall back to the CPU)", "[cuda]") {
    for (DType dt : kMoveTypes) {
        const std::string t = " " + dname(dt);
        Tensor value;
        if (dt == DType::f32) value = Tensor::scalar(1.5f);
        if (dt == DType::f16) value = Tensor::scalar(float16(-2.25f));
        if (dt == DType::i64) value = Tensor::scalar(std::int64_t{-7});
        check_op("opset 11 with constant_value" + t, "Pad",
                 {{"x", make_data(dt, {3, 5})}, {"p", i64_tensor({4}, {1, 2, 0, 3}), true}, {"v", value, true}},
                 {}, kExact, 11);
        check_op("opset 11 pads as input, zero value" + t, "Pad",
                 {{"x", make_data(dt, {2, 3, 4})}, {"p", i64_tensor({6}, {0, 1, 2, 1, 0, 3})}}, {},
                 kExact, 11);
        check_op("negative pads (crop)" + t, "Pad",
                 {{"x", make_data(dt, {6, 7})}, {"p", i64_tensor({4}, {-1, 2, 0, -2})}, {"v", value}},
                 {}, kExact, 13);
        check_op("opset 18 axes input" + t, "Pad",
                 {{"x", make_data(dt, {3, 4, 5})}, {"p", i64_tensor({2}, {2, 2})}, {"v", Tensor()},
                  {"a", i64_tensor({1}, {-2})}},
                 {}, kExact, 18);
        check_op("opset 2 attributes" + t, "Pad", {{"x", make_data(dt, {3, 5})}},
                 {{"pads", attr_ints({0, 1, 2, 3})}, {"value", attr_f(3.0f)}}, kExact, 2);
        check_op("empty input dim, all padding" + t, "Pad",
                 {{"x", make_data(dt, {0, 3})}, {"p", i64_tensor({4}, {1, 0, 1, 0})}, {"v", value}},
                 {}, kExact, 13);
    }
    check_op("large NCHW f32 [1,64,112,112] pad 1", "Pad",
             {{"x", rand_tensor(DType::f32, {1, 64, 112, 112})},
              {"p", i64_tensor({8}, {0, 0, 1, 1, 0, 0, 1, 1}), true}},
             {}, kExact, 13);
    check_op("f32 last-dim pads of 4 (vectorized)", "Pad",
             {{"x", rand_tensor(DType::f32, {5, 32})}, {"p", i64_tensor({4}, {0, 4, 0, 8}), true}}, {},
             kExact, 13);
    check_op("reflect mode runs on the CPU", "Pad",
             {{"x", rand_tensor(DType::f32, {4, 5})}, {"p", i64_tensor({4}, {1, 1, 1, 1}), true}},
             {{"mode", attr_s("reflect")}}, kExact, 13, 1, "", /*expect_cuda=*/false);
}

// ---- Reductions -----------------------------------------------------------------------------

namespace {

/// Axes as the attribute (opset 13) and as an input (opset 18; ReduceSum from 13).
void check_reduce(const std::string& op, DType dt, const std::vector<std::int64_t>& dims,
                  const std::vector<std::int64_t>& axes, std::int64_t keepdims, Tolerance tol,
                  const std::string& what = "") {
    const std::string name = op + " " + dname(dt) + " " + perm_str(dims) + " axes " +
                             perm_str(axes) + " keepdims " + std::to_string(keepdims) + what;
    const Tensor x = rand_tensor(dt, dims);
    const auto n = static_cast<std::int64_t>(axes.size());
    if (op != "ReduceSum") {
        Attrs attrs = {{"keepdims", attr_i(keepdims)}};
        if (!axes.empty()) attrs.push_back({"axes", attr_ints(axes)});
        check_op(name + " (attribute)", op, {{"x", x}}, attrs, tol, 13);
    }
    std::vector<In> ins = {{"x", x}};
    if (!axes.empty()) ins.push_back({"axes", i64_tensor({n}, axes), true});
    check_op(name + " (input)", op, ins, {{"keepdims", attr_i(keepdims)}}, tol,
             op == "ReduceSum" ? 13 : 18);
}

}  // namespace

TEST_CASE("cuda ReduceSum/Mean/Max: each axis, axis sets, keepdims, dtypes", "[cuda]") {
    const std::vector<std::vector<std::int64_t>> axis_sets = {{0},    {1},    {2},    {-1},
                                                              {0, 2}, {0, 1}, {1, 2}, {}};
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
        for (DType dt : kFloatTypes) {
            for (const auto& axes : axis_sets)
                for (std::int64_t keep : {0, 1})
                    check_reduce(op, dt, {4, 5, 6}, axes, keep, tol_for(dt));
            check_reduce(op, dt, {3, 1, 7, 2}, {1, 3}, 1, tol_for(dt), " (size-1 dims)");
            check_reduce(op, dt, {2, 3, 4, 5}, {0, 2}, 0, tol_for(dt), " (general path)");
            check_reduce(op, dt, {2, 3, 4, 5}, {1, 3}, 1, tol_for(dt), " (general path)");
        }
        check_reduce(op, DType::f64, {4, 5, 6}, {1}, 1, {1e-12, 1e-12});
    }
}

TEST_CASE("cuda reductions: large rows and columns, empty, NaN, noop", "[cuda]") {
    const Tolerance big{1e-3, 1e-4};
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
        check_reduce(op, DType::f32, {2048, 768}, {-1}, 1, big, " (warp rows)");
        check_reduce(op, DType::f32, {512, 4097}, {1}, 0, big, " (block rows)");
        check_reduce(op, DType::f32, {3, 200000}, {1}, 1, big, " (few long rows)");
        check_reduce(op, DType::f32, {1000, 300}, {0}, 1, big, " (columns)");
        check_reduce(op, DType::f32, {64, 300, 33}, {1}, 0, big, " (columns with outer)");
        check_reduce(op, DType::f32, {8, 16, 32, 24}, {0, 2}, 1, big, " (general)");
        check_reduce(op, DType::f32, {4096, 1024}, {}, 0, {1e-2, 1e-4}, " (all, 4M elements)");
        check_reduce(op, DType::f16, {1024, 1023}, {1}, 1, tol_for(DType::f16), " (odd f16 rows)");
        check_reduce(op, DType::bf16, {333, 257}, {0}, 1, tol_for(DType::bf16), " (bf16 columns)");
        // Empty reduced dim: sum 0, mean NaN, max -inf; empty kept dim: empty output.
        check_op(std::string(op) + " empty reduced dim", op, {{"x", rand_tensor(DType::f32, {0, 5})}},
                 {{"axes", attr_ints({0})}}, kExact, 11);
        check_op(std::string(op) + " empty kept dim", op, {{"x", rand_tensor(DType::f32, {3, 0})}},
                 {{"axes", attr_ints({0})}}, kExact, 11);
    }
    // NaN propagates through max (and sums).
    Tensor x = rand_tensor(DType::f32, {4, 37});
    x.data<float>()[37 + 5] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[3 * 37 + 36] = std::numeric_limits<float>::quiet_NaN();
    check_op("ReduceMax NaN rows", "ReduceMax", {{"x", x}}, {{"axes", attr_ints({1})}}, kExact, 13);
    check_op("ReduceMax NaN columns", "ReduceMax", {{"x", x}}, {{"axes", attr_ints({0})}}, kExact, 13);
    // A sum's order differs between the device's tree and the reference's loop: f32 tolerance
    // for the finite rows, NaN where a row holds one (the tester requires NaN where the
    // reference has NaN).
    check_op("ReduceSum NaN", "ReduceSum", {{"x", x}, {"a", i64_tensor({1}, {1}), true}}, {},
             tol_for(DType::f32), 13);
    // noop_with_empty_axes: no axes -> identity.
    check_op("ReduceMean noop_with_empty_axes", "ReduceMean",
             {{"x", rand_tensor(DType::f16, {3, 5})}}, {{"noop_with_empty_axes", attr_i(1)}}, kExact, 18);
    check_op("ReduceSum noop_with_empty_axes, empty axes input", "ReduceSum",
             {{"x", rand_tensor(DType::f32, {3, 5})}, {"a", i64_tensor({0}, {})}},
             {{"noop_with_empty_axes", attr_i(1)}}, kExact, 13);
    check_op("ReduceSum axes as a graph input", "ReduceSum",
             {{"x", rand_tensor(DType::f32, {6, 7, 8})}, {"a", i64_tensor({2}, {0, -1})}}, {},
             tol_for(DType::f32), 13);
}
