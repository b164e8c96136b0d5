// The Tensor / Shape / outputs API against misuse (Step 11 item 2): element types checked at
// compile time (long long is int64; char, long double, structs do not compile:
// tests/compile_fail/), typed access checked in every build with unchecked accessors beside
// it, negative and oversized dims named, Shape{...} past rank 8 refused, Shape::from any range
// of integers, inputs from vectors, arrays and spans (copied or wrapped), outputs by name.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

/// The dsinfer::Error that `f` throws (code and message); fails the test if it throws none.
template <class F>
Error error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    FAIL("no dsinfer::Error thrown");
    return Error(ErrorCode::ok, "");
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

// Compile-time: every spelling of the element types maps to its DType.
static_assert(dtype_of<long long>() == DType::i64);
static_assert(dtype_of<std::int64_t>() == DType::i64);
static_assert(dtype_of<long>() == (sizeof(long) == 8 ? DType::i64 : DType::i32));
static_assert(dtype_of<unsigned long long>() == DType::u64);
static_assert(dtype_of<signed char>() == DType::i8 && dtype_of<unsigned char>() == DType::u8);
static_assert(dtype_of<const float>() == DType::f32);
static_assert(dtype_of<float16>() == DType::f16 && dtype_of<bfloat16>() == DType::bf16);
static_assert(is_tensor_element_v<std::string> && is_tensor_element_v<bool>);
static_assert(!is_tensor_element_v<char> && !is_tensor_element_v<long double>);
static_assert(!is_tensor_element_v<float*> && !is_tensor_element_v<wchar_t>);
struct NotAnElement {
    int x;
};
static_assert(!is_tensor_element_v<NotAnElement>);

/// x float[batch,4] -> Relu -> "relu", Neg -> "neg": two outputs to look up by name.
InferenceEngine two_output_engine() {
    onnx::ModelProto m = new_model(13, "two_outputs");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", 1, {-1, 4});
    *g->add_output() = tensor_info("relu", 1, {-1, 4});
    *g->add_output() = tensor_info("neg", 1, {-1, 4});
    add_node(*g, "Relu", {"x"}, {"relu"});
    add_node(*g, "Neg", {"x"}, {"neg"});
    const std::string b = bytes_of(m);
    return InferenceEngine::compile(load_onnx_from_bytes(b.data(), b.size()));
}

}  // namespace

TEST_CASE("tensor api: long long and unsigned long long are int64 / uint64 elements",
          "[tensor_api]") {
    const std::vector<long long> ids{1, -2, 3000000000LL};
    const Tensor t = Tensor::from_vector(Shape{3}, ids);
    CHECK(t.dtype() == DType::i64);
    CHECK(t.data<long long>()[2] == 3000000000LL);
    CHECK(t.data<std::int64_t>()[1] == -2);  // the same dtype under its other spelling
    const Tensor u = Tensor::from_vector(Shape{1}, std::vector<unsigned long long>{7});
    CHECK(u.dtype() == DType::u64);
    CHECK(u.data<std::uint64_t>()[0] == 7);
    CHECK(Tensor::scalar(5LL).dtype() == DType::i64);
}

TEST_CASE("tensor api: data<T>() and span<T>() check the element type in every build",
          "[tensor_api]") {
    Tensor t = Tensor::from_vector<float>({2, 2}, {1.f, 2.f, 3.f, 4.f});
    CHECK(t.data<float>()[3] == 4.f);
    CHECK(t.data<const float>()[0] == 1.f);
    CHECK(t.span<float>().size() == 4);

    const Error e = error_of([&] { (void)t.data<std::int64_t>(); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(e.message() == "tensor holds float32, read as int64");
    const Error s = error_of([&] { (void)t.span<double>(); });
    CHECK(s.code() == ErrorCode::invalid_argument);
    CHECK(s.message() == "tensor holds float32, read as float64");
    // Same size, other type: still refused.
    CHECK(error_of([&] { (void)t.data<std::int32_t>(); }).message() ==
          "tensor holds float32, read as int32");
    const Tensor i = Tensor::zeros(DType::i64, {2});
    CHECK(error_of([&] { (void)i.data<float>(); }).message() ==
          "tensor holds int64, read as float32");
    const Tensor b = Tensor::zeros(DType::boolean, {1});
    CHECK(error_of([&] { (void)b.data<std::uint8_t>(); }).message() ==
          "tensor holds bool, read as uint8");
}

TEST_CASE("tensor api: data_unchecked / span_unchecked read without the check",
          "[tensor_api]") {
    Tensor t = Tensor::from_vector<float>({2}, {1.f, -2.f});
    static_assert(noexcept(t.data_unchecked<float>()));
    static_assert(noexcept(t.span_unchecked<float>()));
    CHECK(t.data_unchecked<float>()[1] == -2.f);
    // The bits of 1.0f, read as the same-size unsigned integer.
    CHECK(t.data_unchecked<std::uint32_t>()[0] == 0x3f800000u);
    CHECK(t.span_unchecked<std::uint32_t>().size() == 2);
    // TensorView (what kernels read) stays unchecked and noexcept.
    const TensorView v = t.view();
    static_assert(noexcept(v.data<float>()));
    CHECK(v.data<float>()[1] == -2.f);
    CHECK(v.data_unchecked<std::uint32_t>()[0] == 0x3f800000u);
}

TEST_CASE("tensor api: negative and oversized dims are invalid_argument naming the reason",
          "[tensor_api]") {
    const Error e = error_of([] { (void)Tensor::empty(DType::f32, Shape{-1, 64}); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(contains(e.message(), "negative dimension -1 at axis 0"));
    const Error e2 = error_of([] { (void)Tensor::zeros(DType::i64, Shape{3, 4, -7}); });
    CHECK(contains(e2.message(), "negative dimension -7 at axis 2"));
    auto st = Tensor::allocate(DType::f32, Shape{2, -3});
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.status().code() == ErrorCode::invalid_argument);

    const std::int64_t big = std::int64_t{1} << 40;
    const Error o = error_of([&] { (void)Tensor::empty(DType::f32, Shape{big, big}); });
    CHECK(o.code() == ErrorCode::invalid_argument);
    CHECK(contains(o.message(), "too large"));
    CHECK(contains(o.message(), "[1099511627776,1099511627776]"));
    // A zero dim makes any other dim fine: no elements.
    CHECK(Tensor::empty(DType::f32, Shape{big, 0, big}).num_elements() == 0);
    // wrap_checked names the negative dim too.
    float one = 0.f;
    auto w = Tensor::wrap_checked(&one, 4, DType::f32, Shape{-1});
    REQUIRE_FALSE(w.is_ok());
    CHECK(w.status().code() == ErrorCode::invalid_argument);
    CHECK(contains(w.status().message(), "negative dimension -1 at axis 0"));
}

TEST_CASE("tensor api: Shape{...} past rank 8 throws instead of truncating", "[tensor_api]") {
    const Shape eight{1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(eight.rank() == 8);
    CHECK(eight[7] == 8);
    const Error e = error_of([] { (void)Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}; });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(e.message() == "rank 9 exceeds the maximum rank 8");
    // Shape::make stays the StatusOr path (rank past the maximum: unsupported).
    auto m = Shape::make({1, 2, 3, 4, 5, 6, 7, 8, 9});
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().code() == ErrorCode::unsupported);
    auto neg = Shape::make({2, -5});
    REQUIRE_FALSE(neg.is_ok());
    CHECK(contains(neg.status().message(), "negative dimension -5 at axis 1"));
}

TEST_CASE("tensor api: Shape::from any range of integers, checked", "[tensor_api]") {
    CHECK(Shape::from(std::vector<int>{1, 64}) == Shape{1, 64});
    CHECK(Shape::from(std::vector<std::int64_t>{2, 3, 4}) == Shape{2, 3, 4});
    const std::array<std::size_t, 2> a{5, 6};
    CHECK(Shape::from(a) == Shape{5, 6});
    const std::array<short, 3> s{7, 8, 9};
    CHECK(Shape::from(std::span<const short>(s)) == Shape{7, 8, 9});
    CHECK(Shape::from(std::vector<int>{}).rank() == 0);
    CHECK(Shape::from(std::vector<int>{3, 0}).num_elements() == 0);

    const Error neg = error_of([] { (void)Shape::from(std::vector<int>{4, -1}); });
    CHECK(neg.code() == ErrorCode::invalid_argument);
    CHECK(neg.message() == "negative dimension -1 at axis 1");
    const Error rank = error_of([] { (void)Shape::from(std::vector<int>(9, 1)); });
    CHECK(rank.code() == ErrorCode::invalid_argument);
    CHECK(rank.message() == "rank 9 exceeds the maximum rank 8");
    const Error huge = error_of([] {
        (void)Shape::from(std::vector<std::uint64_t>{1, 0xffffffffffffffffULL});
    });
    CHECK(huge.code() == ErrorCode::invalid_argument);
    CHECK(contains(huge.message(), "at axis 1 does not fit int64"));
    const Error over = error_of([] {
        (void)Shape::from(std::vector<std::int64_t>{std::int64_t{1} << 40, std::int64_t{1} << 40});
    });
    CHECK(over.code() == ErrorCode::invalid_argument);
    CHECK(contains(over.message(), "overflows int64"));
}

TEST_CASE("tensor api: inputs copied from vectors, arrays and spans", "[tensor_api]") {
    const std::array<float, 6> a{1, 2, 3, 4, 5, 6};
    const std::vector<float> v(a.begin(), a.end());
    for (const Tensor& t :
         {Tensor::from_span<float>({2, 3}, a), Tensor::from_span<float>({2, 3}, v),
          Tensor::from_span({2, 3}, std::span<const float>(v)), Tensor::from_span({2, 3}, a),
          Tensor::from_vector({2, 3}, a), Tensor::from_vector({2, 3}, v)}) {
        CHECK(t.dtype() == DType::f32);
        CHECK(t.shape() == Shape{2, 3});
        CHECK(t.data<float>()[5] == 6.f);
        CHECK(t.raw_data() != static_cast<const void*>(v.data()));  // copies
    }
    std::vector<std::int32_t> mutable_ids{4, 5};
    const Tensor ids = Tensor::from_span({2}, std::span<std::int32_t>(mutable_ids));
    CHECK(ids.dtype() == DType::i32);
    CHECK(ids.data<std::int32_t>()[1] == 5);

    const Error e = error_of([&] { (void)Tensor::from_span<float>({4}, a); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(e.message() == "from_span: shape [4] does not match 6 values");
    CHECK(error_of([&] { (void)Tensor::from_vector({7}, v); }).code() ==
          ErrorCode::invalid_argument);
}

TEST_CASE("tensor api: wrap<T>(span, shape) wraps without copying and checks the count",
          "[tensor_api]") {
    std::vector<float> mine{1, 2, 3, 4, 5, 6};
    Tensor w = Tensor::wrap<float>(mine, {2, 3});
    CHECK(w.dtype() == DType::f32);
    CHECK(w.raw_data() == static_cast<void*>(mine.data()));
    mine[4] = 50.f;
    CHECK(w.data<float>()[4] == 50.f);
    std::array<std::int64_t, 4> ids{1, 2, 3, 4};
    const Tensor wi = Tensor::wrap(std::span<std::int64_t>(ids), {4});
    CHECK(wi.dtype() == DType::i64);
    CHECK(wi.raw_data() == static_cast<void*>(ids.data()));

    const Error e = error_of([&] { (void)Tensor::wrap<float>(mine, {2, 2}); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(e.message() == "wrap: 6 float32 values do not match shape [2,2] (4 elements)");
    const Error n = error_of([&] { (void)Tensor::wrap<float>(mine, {-6}); });
    CHECK(n.code() == ErrorCode::invalid_argument);
    CHECK(contains(n.message(), "negative dimension -6 at axis 0"));
}

TEST_CASE("tensor api: NamedTensors finds outputs by name", "[tensor_api]") {
    const Tensor a = Tensor::scalar(1.f);
    const Tensor b = Tensor::scalar(std::int64_t{2});
    const NamedTensors out{{"logits", a}, {"label", b}};
    CHECK(out.size() == 2);
    CHECK(out[1].name == "label");
    CHECK(out.get("label").data<std::int64_t>()[0] == 2);
    CHECK(out.find("logits") == &out[0].tensor);
    CHECK(out.find("nope") == nullptr);
    CHECK(out.contains("logits"));
    CHECK_FALSE(out.contains("nope"));
    const Error e = error_of([&] { (void)out.get("probs"); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(e.message() == "no output named 'probs'; the outputs are: logits, label");
    CHECK(error_of([] { (void)NamedTensors{}.get("x"); }).message() ==
          "no output named 'x'; the outputs are: (none)");
    // A std::vector<NamedTensor> in every other respect.
    std::vector<NamedTensor> plain = out;
    CHECK(plain.size() == 2);
    const NamedTensors back(std::move(plain));
    CHECK(back.get("logits").data<float>()[0] == 1.f);
}

TEST_CASE("tensor api: engine.run returns outputs addressable by name", "[tensor_api]") {
    const InferenceEngine e = two_output_engine();
    const Tensor x = Tensor::from_vector<float>({1, 4}, {-1.f, 2.f, -3.f, 4.f});
    const NamedTensors out = e.run({{"x", x}});
    REQUIRE(out.size() == 2);
    CHECK(out[0].name == "relu");
    const Tensor& neg = out.get("neg");
    CHECK(neg.shape() == Shape{1, 4});
    CHECK(neg.data<float>()[0] == 1.f);
    CHECK(out.get("relu").data<float>()[2] == 0.f);
    const Error missing = error_of([&] { (void)out.get("sigmoid"); });
    CHECK(missing.message() == "no output named 'sigmoid'; the outputs are: relu, neg");
    const Error wrong = error_of([&] { (void)out.get("relu").data<std::int64_t>(); });
    CHECK(wrong.message() == "tensor holds float32, read as int64");
    // Existing code that keeps a plain vector still compiles and works.
    std::vector<NamedTensor> plain = e.run({{"x", x}});
    CHECK(plain.size() == 2);
    auto deduced = e.run({{"x", x}});
    CHECK(deduced.get("relu").data<float>()[3] == 4.f);
    // try_run keeps its vector out-parameter; a NamedTensors binds to it too.
    NamedTensors filled;
    REQUIRE(e.try_run({{"x", x}}, filled).is_ok());
    CHECK(filled.get("neg").data<float>()[3] == -4.f);
}

TEST_CASE("tensor api: the digits model's outputs by name", "[tensor_api]") {
    const std::filesystem::path model = std::filesystem::path(__FILE__).parent_path() / ".." /
                                        ".." / "models" / "digits" / "digits.onnx";
    if (!std::filesystem::exists(model)) {
        WARN("SKIPPED: " << model << " not found");
        return;
    }
    EngineOptions o;
    o.num_threads = 2;
    const InferenceEngine e = InferenceEngine::load(model, o);
    REQUIRE(e.inputs().size() == 1);
    CHECK(e.inputs()[0].name == "pixels");  // engine.hpp's usage comment binds this name
    std::vector<float> pixels(64);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 17) / 16.f;
    const NamedTensors out =
        e.run({{"pixels", Tensor::from_vector<float>({1, 64}, pixels)}});
    const Tensor& probs = out.get("probabilities");
    REQUIRE(probs.num_elements() == 10);
    float sum = 0.f;
    for (float p : probs.span<float>()) sum += p;
    CHECK(std::fabs(sum - 1.f) < 1e-4f);
    CHECK(out.find("logits") != nullptr);
    CHECK(error_of([&] { (void)out.get("logits").span<std::int64_t>(); }).message() ==
          "tensor holds float32, read as int64");
}
