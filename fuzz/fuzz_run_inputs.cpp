// Fuzz target: run-time input validation (InferenceEngine::try_run).
//
// Five small models are built and compiled once:
//   0 matmul   x f32 [batch,4] -> MatMul(W[4,3]) -> Add(B[3]) -> y [batch,3]
//   1 gather   indices i64 [n] -> Gather(table f32 [5,3], axis 0) -> y [n,3]
//   2 reshape  x f32 [a,b], shape i64 [2] -> Reshape -> y
//   3 strbool  b bool [k] -> Not -> nb; s string [k] -> Identity -> s_out
//   4 fill     shape i64 [r] -> ConstantOfShape (default value 0.0f) -> y
// The input bytes choose the model, the number and names of the inputs (valid, unknown, empty,
// duplicate, missing), their dtypes, ranks and dims (0, symbolic bindings that agree or not,
// huge dims next to a 0), and their data (indices in and out of range, reshape targets,
// shapes whose byte size overflows).
//
// Invariants: the result is ok, invalid_argument or resource_exhausted (unsupported only for a
// ConstantOfShape rank above kMaxRank) — never internal, never a crash or OOB access (ASan).
// The harness predicts the outcome: a binding that breaks the declared signature (names, dtype,
// rank, static dims, inconsistent symbols) must fail with invalid_argument; a valid binding must
// succeed exactly when the data is valid (indices in range, a reshape target that matches, a
// ConstantOfShape within the pool). On success the outputs must have the shapes (and, for
// matmul, gather, strbool, the values) the model implies.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsinfer/memory_pool.hpp"
#include "fuzz_common.hpp"

namespace {

using namespace dsinfer;

constexpr std::size_t kPoolLimit = 16u << 20;
constexpr std::int64_t kMaxElements = 1 << 14;  // per harness-built input tensor

struct InSpec {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> dims;  // -1: symbolic
    std::vector<std::string> symbols;
};

struct ModelSpec {
    std::string name;
    std::vector<InSpec> inputs;
    std::unique_ptr<InferenceEngine> engine;
};

const float kW[4][3] = {{1, 2, 3}, {-1, 0.5f, 2}, {0.25f, -2, 1}, {3, 1, -1}};
const float kB[3] = {0.5f, -1, 2};
const float kTable[5][3] = {{0, 1, 2}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}, {40, 41, 42}};

std::vector<ModelSpec> build_models() {
    std::vector<ModelSpec> specs;
    auto compile = [&](ModelSpec spec, const onnx::ModelProto& m) {
        const std::string bytes = fuzz::serialize(m);
        EngineOptions o;
        o.num_threads = 1;
        o.memory_pool = MemoryPool::create({.limit_bytes = kPoolLimit});
        try {
            Graph g = load_onnx_from_bytes(bytes.data(), bytes.size());
            spec.engine = std::make_unique<InferenceEngine>(InferenceEngine::compile(std::move(g), o));
        } catch (const std::exception& e) {
            fuzz::fail("harness model '" + spec.name + "' does not load: " + e.what());
        }
        specs.push_back(std::move(spec));
    };
    {
        auto m = fuzz::new_model(13, "matmul");
        auto& g = *m.mutable_graph();
        *g.add_input() = fuzz::tensor_info("x", 1, {-1, 4}, {"batch"});
        *g.add_initializer() = fuzz::raw_tensor("W", 1, {4, 3}, kW, sizeof kW);
        *g.add_initializer() = fuzz::raw_tensor("B", 1, {3}, kB, sizeof kB);
        fuzz::add_node(g, "MatMul", {"x", "W"}, {"xw"});
        fuzz::add_node(g, "Add", {"xw", "B"}, {"y"});
        *g.add_output() = fuzz::tensor_info("y", 1, {-1, 3}, {"batch"});
        compile({"matmul", {{"x", DType::f32, {-1, 4}, {"batch", ""}}}, nullptr}, m);
    }
    {
        auto m = fuzz::new_model(13, "gather");
        auto& g = *m.mutable_graph();
        *g.add_input() = fuzz::tensor_info("indices", 7, {-1}, {"n"});
        *g.add_initializer() = fuzz::raw_tensor("table", 1, {5, 3}, kTable, sizeof kTable);
        fuzz::add_int_attr(fuzz::add_node(g, "Gather", {"table", "indices"}, {"y"}), "axis", 0);
        *g.add_output() = fuzz::tensor_info("y", 1, {-1, 3}, {"n"});
        compile({"gather", {{"indices", DType::i64, {-1}, {"n"}}}, nullptr}, m);
    }
    {
        auto m = fuzz::new_model(14, "reshape");
        auto& g = *m.mutable_graph();
        *g.add_input() = fuzz::tensor_info("x", 1, {-1, -1}, {"a", "b"});
        *g.add_input() = fuzz::tensor_info("shape", 7, {2});
        fuzz::add_node(g, "Reshape", {"x", "shape"}, {"y"});
        *g.add_output() = fuzz::untyped_shape_info("y", 1);
        compile({"reshape",
                 {{"x", DType::f32, {-1, -1}, {"a", "b"}}, {"shape", DType::i64, {2}, {""}}},
                 nullptr},
                m);
    }
    {
        auto m = fuzz::new_model(13, "strbool");
        auto& g = *m.mutable_graph();
        *g.add_input() = fuzz::tensor_info("b", 9, {-1}, {"k"});
        *g.add_input() = fuzz::tensor_info("s", 8, {-1}, {"k"});
        fuzz::add_node(g, "Not", {"b"}, {"nb"});
        fuzz::add_node(g, "Identity", {"s"}, {"s_out"});
        *g.add_output() = fuzz::tensor_info("nb", 9, {-1}, {"k"});
        *g.add_output() = fuzz::tensor_info("s_out", 8, {-1}, {"k"});
        compile({"strbool",
                 {{"b", DType::boolean, {-1}, {"k"}}, {"s", DType::string, {-1}, {"k"}}},
                 nullptr},
                m);
    }
    {
        auto m = fuzz::new_model(13, "fill");
        auto& g = *m.mutable_graph();
        *g.add_input() = fuzz::tensor_info("shape", 7, {-1}, {"r"});
        fuzz::add_node(g, "ConstantOfShape", {"shape"}, {"y"});
        *g.add_output() = fuzz::untyped_shape_info("y", 1);
        compile({"fill", {{"shape", DType::i64, {-1}, {"r"}}}, nullptr}, m);
    }
    return specs;
}

constexpr std::array<DType, 14> kAllTypes = {
    DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8,  DType::u8,      DType::i16,
    DType::u16, DType::i32, DType::u32,  DType::i64, DType::u64, DType::boolean, DType::string};

std::int64_t choose_dim(fuzz::ByteReader& in) {
    switch (in.pick(10)) {
        case 0: return 0;
        case 1: return std::int64_t{1} << 31;
        case 2: return std::int64_t{1} << (32 + in.pick(31));
        case 3: return std::numeric_limits<std::int64_t>::max();
        default: return in.pick(6);
    }
}

std::int64_t choose_index(fuzz::ByteReader& in) {
    switch (in.pick(16)) {
        case 0: return std::numeric_limits<std::int64_t>::min();
        case 1: return std::numeric_limits<std::int64_t>::max();
        case 2: return static_cast<std::int64_t>(in.u64());
        case 3: return 5;
        case 4: return -6;
        default: return static_cast<std::int64_t>(in.pick(10)) - 5;  // -5..4: in range
    }
}

std::int64_t choose_shape_value(fuzz::ByteReader& in) {
    static const std::array<std::int64_t, 16> v = {
        -1, 0, 1, 2, 3, 4, 6, 12, -2, 1 << 20, std::int64_t{1} << 31, std::int64_t{1} << 40,
        std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), 5, 8};
    return in.pick(8) == 0 ? static_cast<std::int64_t>(in.u64()) : v[in.pick(v.size())];
}

float choose_float(fuzz::ByteReader& in) {
    switch (in.pick(8)) {
        case 0: return in.f32();
        case 1: return std::numeric_limits<float>::quiet_NaN();
        case 2: return std::numeric_limits<float>::infinity();
        default: return static_cast<float>(static_cast<int>(in.pick(17)) - 8) * 0.25f;
    }
}

/// Fills t: semantic values for the declared roles, raw bytes otherwise.
void fill(Tensor& t, fuzz::ByteReader& in, const std::string& role) {
    const auto n = static_cast<std::size_t>(t.num_elements());
    if (t.dtype() == DType::string) {
        for (std::size_t i = 0; i < n; ++i) t.data<std::string>()[i] = in.bytes(6);
        return;
    }
    if (t.dtype() == DType::boolean) {
        for (std::size_t i = 0; i < n; ++i) t.data<bool>()[i] = in.flag();
        return;
    }
    if (t.dtype() == DType::f32) {
        for (std::size_t i = 0; i < n; ++i) t.data<float>()[i] = choose_float(in);
        return;
    }
    if (t.dtype() == DType::i64) {
        for (std::size_t i = 0; i < n; ++i)
            t.data<std::int64_t>()[i] = role == "indices" ? choose_index(in) : choose_shape_value(in);
        return;
    }
    auto* p = static_cast<std::uint8_t*>(t.raw_data());
    for (std::size_t i = 0; i < t.num_bytes(); ++i) p[i] = in.u8();
}

bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) {
    return __builtin_mul_overflow(a, b, &out);
}

struct Given {
    std::string name;
    Tensor tensor;
    std::string role;  // the declared input it was generated for ("" for junk names)
};

[[noreturn]] void mismatch(const ModelSpec& m, const std::string& what, const Status& st) {
    fuzz::fail("model '" + m.name + "': " + what + " (got " + st.to_string() + ")");
}

/// `got` (a float32 result of a short sum) against the double reference `ref`: the float32
/// rounding of the terms and partial sums is bounded by a few ulps of `magnitude` (the sum of
/// the terms' absolute values), which can exceed |ref| by far when large terms cancel.
bool floats_close(float got, double ref, double magnitude) {
    if (std::isnan(ref)) return std::isnan(got);
    return std::fabs(static_cast<double>(got) - ref) <=
           1e-3 * (1.0 + std::fabs(ref)) + 8 * 0x1p-24 * magnitude;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static std::vector<ModelSpec> models = build_models();
    fuzz::ByteReader in(data, size);
    const ModelSpec& m = models[in.pick(static_cast<std::uint32_t>(models.size()))];

    // Which entries: the declared inputs in order (mostly), with perturbations.
    std::vector<std::string> names;
    const std::uint32_t mode = in.pick(4);
    if (mode < 3) {
        for (const auto& s : m.inputs) names.push_back(s.name);
        if (mode == 1 && names.size() > 1) std::swap(names[0], names[1]);
    }
    const std::uint32_t extra = mode == 3 ? in.pick(5) : (in.pick(8) == 0 ? 1 : 0);
    for (std::uint32_t i = 0; i < extra; ++i) {
        switch (in.pick(4)) {
            case 0: names.push_back("bogus"); break;
            case 1: names.push_back(""); break;
            default:
                names.push_back(m.inputs[in.pick(static_cast<std::uint32_t>(m.inputs.size()))].name);
        }
    }
    if (!names.empty() && in.pick(10) == 0) names.erase(names.begin() + in.pick(static_cast<std::uint32_t>(names.size())));

    // One value per symbol (occasionally a conflicting one per entry).
    std::map<std::string, std::int64_t> symbol_value;
    auto symbol = [&](const std::string& s) {
        auto it = symbol_value.find(s);
        if (it == symbol_value.end()) it = symbol_value.emplace(s, choose_dim(in)).first;
        return it->second;
    };

    std::vector<Given> given;
    bool binding_valid = true;
    std::map<std::string, int> seen;
    std::map<std::string, std::int64_t> bound_symbols;
    for (const auto& name : names) {
        const InSpec* spec = nullptr;
        for (const auto& s : m.inputs)
            if (s.name == name) spec = &s;
        DType dtype = spec ? spec->dtype : DType::f32;
        if (in.pick(10) == 0) dtype = kAllTypes[in.pick(kAllTypes.size())];
        std::vector<std::int64_t> dims;
        const bool odd_rank = in.pick(10) == 0;
        if (spec && !odd_rank) {
            for (std::size_t d = 0; d < spec->dims.size(); ++d) {
                if (spec->dims[d] >= 0)
                    dims.push_back(in.pick(12) == 0 ? choose_dim(in) : spec->dims[d]);
                else
                    dims.push_back(in.pick(12) == 0 ? choose_dim(in) : symbol(spec->symbols[d]));
            }
        } else {
            const std::uint32_t rank = in.pick(kMaxRank + 1);
            for (std::uint32_t d = 0; d < rank; ++d) dims.push_back(in.pick(4) == 0 ? choose_dim(in) : in.pick(4));
        }
        // Build a tensor we can honestly back: huge dims only next to a 0.
        auto shape = Shape::make(dims);
        if (!shape.is_ok() || shape.value().num_elements() > kMaxElements) {
            for (auto& d : dims) d = std::min<std::int64_t>(d, 3);
            shape = Shape::make(dims);
            if (!shape.is_ok()) fuzz::fail("harness shape rejected");
        }
        auto t = Tensor::allocate(dtype, shape.value());
        if (!t.is_ok()) fuzz::fail("harness tensor of " + shape.value().to_string() + " not allocated");
        Tensor tensor = std::move(t).value();
        fill(tensor, in, spec ? spec->name : "");

        // Does this entry fit the declared signature?
        if (!spec || seen[name]++ > 0) binding_valid = false;
        if (spec) {
            if (dtype != spec->dtype || dims.size() != spec->dims.size()) {
                binding_valid = false;
            } else {
                for (std::size_t d = 0; d < dims.size(); ++d) {
                    if (spec->dims[d] >= 0) {
                        if (dims[d] != spec->dims[d]) binding_valid = false;
                    } else {
                        auto [it, fresh] = bound_symbols.emplace(spec->symbols[d], dims[d]);
                        if (!fresh && it->second != dims[d]) binding_valid = false;
                    }
                }
            }
        }
        given.push_back(Given{name, std::move(tensor), spec ? spec->name : ""});
    }
    for (const auto& s : m.inputs)
        if (seen[s.name] == 0) binding_valid = false;

    std::vector<NamedTensor> inputs;
    for (const auto& g : given) inputs.push_back(NamedTensor{g.name, g.tensor});
    std::vector<NamedTensor> outputs;
    const Status st = m.engine->try_run(inputs, outputs);
    fuzz::check_status(st, "try_run on model '" + m.name + "'");

    if (!binding_valid) {
        if (st.code() != ErrorCode::invalid_argument)
            mismatch(m, "inputs that break the declared signature must give invalid_argument", st);
        return 0;
    }
    auto input = [&](const std::string& n) -> const Tensor& {
        for (const auto& g : given)
            if (g.name == n) return g.tensor;
        fuzz::fail("missing input " + n);
    };
    auto expect_ok = [&](const char* why) {
        if (!st.is_ok()) mismatch(m, why, st);
        if (outputs.size() != m.engine->outputs().size()) mismatch(m, "output count", st);
    };
    auto expect_error = [&](const char* why, bool allow_unsupported = false) {
        const ErrorCode c = st.code();
        if (!(c == ErrorCode::invalid_argument || c == ErrorCode::resource_exhausted ||
              (allow_unsupported && c == ErrorCode::unsupported)))
            mismatch(m, why, st);
    };

    if (m.name == "matmul") {
        expect_ok("a valid binding must run");
        const Tensor& x = input("x");
        const Tensor& y = outputs[0].tensor;
        const std::int64_t batch = x.shape()[0];
        if (y.shape().to_vector() != std::vector<std::int64_t>{batch, 3})
            mismatch(m, "y shape " + y.shape().to_string(), st);
        for (std::int64_t r = 0; r < batch; ++r)
            for (int c = 0; c < 3; ++c) {
                double ref = kB[c], magnitude = std::fabs(kB[c]);
                bool finite = true;
                for (int k = 0; k < 4; ++k) {
                    const float xv = x.data<float>()[r * 4 + k];
                    if (!std::isfinite(xv) || std::fabs(xv) > 1e6f) finite = false;
                    ref += static_cast<double>(xv) * kW[k][c];
                    magnitude += std::fabs(static_cast<double>(xv) * kW[k][c]);
                }
                if (finite && !floats_close(y.data<float>()[r * 3 + c], ref, magnitude)) {
                    std::string row;
                    for (int k = 0; k < 4; ++k) row += " " + std::to_string(x.data<float>()[r * 4 + k]);
                    mismatch(m, "y value at [" + std::to_string(r) + "," + std::to_string(c) +
                                    "]: got " + std::to_string(y.data<float>()[r * 3 + c]) +
                                    ", expected " + std::to_string(ref) + " (x row" + row + ")",
                             st);
                }
            }
    } else if (m.name == "gather") {
        const Tensor& idx = input("indices");
        bool in_range = true;
        for (std::int64_t i = 0; i < idx.num_elements(); ++i) {
            const std::int64_t v = idx.data<std::int64_t>()[i];
            if (v < -5 || v > 4) in_range = false;
        }
        if (!in_range) {
            expect_error("out-of-range indices must give invalid_argument");
            return 0;
        }
        expect_ok("in-range indices must run");
        const Tensor& y = outputs[0].tensor;
        if (y.shape().to_vector() != std::vector<std::int64_t>{idx.num_elements(), 3})
            mismatch(m, "y shape " + y.shape().to_string(), st);
        for (std::int64_t i = 0; i < idx.num_elements(); ++i) {
            std::int64_t v = idx.data<std::int64_t>()[i];
            if (v < 0) v += 5;
            for (int c = 0; c < 3; ++c)
                if (y.data<float>()[i * 3 + c] != kTable[v][c]) mismatch(m, "gathered value", st);
        }
    } else if (m.name == "reshape") {
        const Tensor& x = input("x");
        const Tensor& shape = input("shape");
        const std::int64_t total = x.num_elements();
        std::vector<std::int64_t> out;
        int infer_at = -1;
        bool valid = true, ambiguous = false;
        std::int64_t known = 1;
        for (int i = 0; i < 2; ++i) {
            std::int64_t v = shape.data<std::int64_t>()[i];
            if (v == 0) v = x.shape()[i];
            if (v == -1) {
                if (infer_at >= 0) valid = false;
                infer_at = i;
                out.push_back(-1);
                continue;
            }
            if (v < 0) valid = false;
            out.push_back(v);
            if (v >= 0 && mul_overflows(known, v, known)) valid = false;
        }
        if (valid) {
            if (infer_at >= 0) {
                if (known == 0) ambiguous = true;
                else if (total % known != 0) valid = false;
                else out[static_cast<std::size_t>(infer_at)] = total / known;
            } else if (known != total) {
                valid = false;
            }
        }
        if (!valid) {
            expect_error("an impossible reshape target must give invalid_argument");
            return 0;
        }
        if (ambiguous && !st.is_ok()) {
            expect_error("a reshape with -1 and a zero dim may fail only as invalid_argument");
            return 0;
        }
        expect_ok("a valid reshape must run");
        const Tensor& y = outputs[0].tensor;
        if (y.num_elements() != total || y.num_dims() != 2)
            mismatch(m, "y shape " + y.shape().to_string() + " for " + std::to_string(total) + " elements", st);
        for (int i = 0; i < 2; ++i)
            if (out[static_cast<std::size_t>(i)] >= 0 && y.shape()[i] != out[static_cast<std::size_t>(i)])
                mismatch(m, "y shape " + y.shape().to_string() + " is not the target", st);
    } else if (m.name == "strbool") {
        expect_ok("a valid binding must run");
        const Tensor& b = input("b");
        const Tensor& s = input("s");
        const Tensor& nb = outputs[0].tensor;
        const Tensor& so = outputs[1].tensor;
        if (nb.shape() != b.shape() || so.shape() != s.shape()) mismatch(m, "output shapes", st);
        for (std::int64_t i = 0; i < b.num_elements(); ++i)
            if (nb.data<bool>()[i] == b.data<bool>()[i]) mismatch(m, "Not value", st);
        for (std::int64_t i = 0; i < s.num_elements(); ++i)
            if (so.data<std::string>()[i] != s.data<std::string>()[i]) mismatch(m, "string value", st);
    } else if (m.name == "fill") {
        const Tensor& shape = input("shape");
        const std::int64_t r = shape.num_elements();
        std::int64_t n = 1;
        bool negative = false, overflow = false;
        std::vector<std::int64_t> dims;
        for (std::int64_t i = 0; i < r; ++i) {
            const std::int64_t v = shape.data<std::int64_t>()[i];
            dims.push_back(v);
            if (v < 0) negative = true;
            else if (mul_overflows(n, v, n)) overflow = true;
        }
        if (r > kMaxRank) {
            expect_error("ConstantOfShape above the maximum rank", true);
            return 0;
        }
        if (negative || overflow || n > static_cast<std::int64_t>(kPoolLimit / sizeof(float))) {
            expect_error("a negative, overflowing or over-budget ConstantOfShape must fail");
            return 0;
        }
        if (!st.is_ok() && n > static_cast<std::int64_t>(kPoolLimit / sizeof(float) / 4)) {
            expect_error("a ConstantOfShape near the pool limit may fail as resource_exhausted");
            return 0;
        }
        expect_ok("a small ConstantOfShape must run");
        const Tensor& y = outputs[0].tensor;
        if (y.shape().to_vector() != dims) mismatch(m, "y shape " + y.shape().to_string(), st);
        for (std::int64_t i = 0; i < y.num_elements(); ++i)
            if (y.data<float>()[i] != 0.0f) mismatch(m, "ConstantOfShape default value is not 0", st);
    }
    return 0;
}
