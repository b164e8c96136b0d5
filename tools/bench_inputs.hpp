// tools/bench_inputs.hpp — random, valid inputs for benchmarking a loaded model.
//
// Purpose: the one input generator of ds-benchmark and benchmarks/models/bench_models.cpp. It
// follows the convention of the ONNX Runtime peer harness (../shared/peers/common.mjs) so that
// both time the same shapes and the same values:
//   * shapes: per input, the first symbolic dim is the batch, every later one the sequence
//     length; ShapeRequest::overrides (ds-benchmark --shape NAME=DxD) replaces a whole shape;
//   * values: one mulberry32 stream (seed 12345 by default) across the inputs in graph-input
//     order; floats uniform(-1, 1); bools coin flips; integers named *mask* ones, *type* zeros,
//     *position* 0..n-1 along the last axis, anything else token ids uniform in [100, 30100).
// One difference makes the ids always valid: when an integer input reaches, through
// value-preserving ops (Cast, Unsqueeze, Reshape, ...), the indices of Gather nodes whose table
// is an initializer, and the smallest table has fewer than 30100 rows, the ids are drawn
// uniformly from [0, rows) instead (e.g. a tiny BERT with a vocabulary of 1000).
//
// Ownership/threading: plain functions over a const engine; thread-safe.
//
// Usage:
//   dsinfer::bench::ShapeRequest req;
//   req.batch = 8; req.seq = 128;
//   auto gen = dsinfer::bench::make_inputs(engine, req);   // StatusOr<GeneratedInputs>
//   if (!gen) { report(gen.status()); }
//   engine.run(gen->tensors());
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <dsinfer/dsinfer.hpp>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dsinfer::bench {

inline constexpr std::uint32_t kDefaultSeed = 12345;  // common.mjs DEFAULT_SEED
inline constexpr std::int64_t kTokenLow = 100;        // common.mjs token ids: [100, 30100)
inline constexpr std::int64_t kTokenHigh = 30100;

/// What shapes and values to generate.
struct ShapeRequest {
    std::int64_t batch = 1;
    std::optional<std::int64_t> seq;                             ///< later symbolic dims
    std::map<std::string, std::vector<std::int64_t>> overrides;  ///< whole shape by input name
    std::uint32_t seed = kDefaultSeed;
};

/// One generated input and how its values were made (for reports).
struct GeneratedInput {
    NamedTensor input;
    std::string fill;                ///< "uniform(-1,1)", "ones", "token ids", ...
    std::int64_t low = 0, high = 0;  ///< integer range [low, high) for "token ids"
};

struct GeneratedInputs {
    std::vector<GeneratedInput> inputs;
    /// The batch and sequence length the inputs have: the first and a later symbolic dim of
    /// the first input that has one (so --shape overrides count); nullopt when no input has such
    /// a dim.
    std::optional<std::int64_t> batch, seq;
    std::vector<NamedTensor> tensors() const {
        std::vector<NamedTensor> r;
        r.reserve(inputs.size());
        for (const auto& g : inputs) r.push_back(g.input);
        return r;
    }
};

/// mulberry32, bit for bit as in common.mjs: returns uniform doubles in [0, 1).
class Mulberry32 {
public:
    explicit Mulberry32(std::uint32_t seed) noexcept : s_(seed) {}
    double operator()() noexcept {
        s_ += 0x6D2B79F5u;
        std::uint32_t t = s_;
        t = (t ^ (t >> 15)) * (t | 1u);
        t ^= t + (t ^ (t >> 7)) * (t | 61u);
        return static_cast<double>(t ^ (t >> 14)) / 4294967296.0;
    }

private:
    std::uint32_t s_;
};

/// The concrete shape of one input: the override, else the declared shape with symbolic dims
/// resolved by the batch/sequence convention. invalid_argument names what is missing. Sets
/// `batch`/`seq`, when still unset, to the values its first and second symbolic dims got.
inline StatusOr<Shape> resolve_shape(const IOInfo& info, const ShapeRequest& req,
                                     std::optional<std::int64_t>& batch,
                                     std::optional<std::int64_t>& seq) {
    const SymbolicShape& decl = info.shape;
    auto note = [&](int symbolic_index, std::int64_t value) {
        std::optional<std::int64_t>& slot = symbolic_index == 0 ? batch : seq;
        if (!slot) slot = value;
    };
    if (auto it = req.overrides.find(info.name); it != req.overrides.end()) {
        const auto& dims = it->second;
        if (decl.known) {
            DSINFER_CHECK(static_cast<int>(dims.size()) == decl.rank(), ErrorCode::invalid_argument,
                          "--shape ", info.name, " has rank ", dims.size(),
                          " but the model declares ", decl.to_string());
            for (std::size_t i = 0; i < dims.size(); ++i)
                DSINFER_CHECK(!decl.dims[i].is_static() || decl.dims[i].value == dims[i],
                              ErrorCode::invalid_argument, "--shape ", info.name, ": dim ", i,
                              " is ", dims[i], " but the model fixes it to ", decl.dims[i].value,
                              " (declared ", decl.to_string(), ")");
            int symbolic = 0;
            for (std::size_t i = 0; i < dims.size(); ++i)
                if (!decl.dims[i].is_static()) note(std::min(symbolic++, 1), dims[i]);
        }
        return Shape::make(std::span<const std::int64_t>(dims.data(), dims.size()));
    }
    DSINFER_CHECK(decl.known, ErrorCode::invalid_argument, "input '", info.name,
                  "' has no declared shape: give it with --shape ", info.name, "=DxD...");
    std::vector<std::int64_t> dims;
    int symbolic = 0;
    for (const auto& d : decl.dims) {
        if (d.is_static()) {
            dims.push_back(d.value);
            continue;
        }
        if (symbolic++ == 0) {
            dims.push_back(req.batch);
            note(0, req.batch);
        } else {
            DSINFER_CHECK(req.seq.has_value(), ErrorCode::invalid_argument, "input '", info.name,
                          "' ", decl.to_string(), ": symbolic dim '",
                          d.symbol.empty() ? std::string("?") : d.symbol,
                          "' is a sequence dim: give --seq N or --shape ", info.name, "=DxD...");
            dims.push_back(*req.seq);
            note(1, *req.seq);
        }
    }
    return Shape::make(std::span<const std::int64_t>(dims.data(), dims.size()));
}

/// The fewest rows among the constant Gather tables that `input`'s values index, following
/// the value through ops that pass values on unchanged; nullopt when it indexes none.
inline std::optional<std::int64_t> gather_table_rows(const Graph& g, ValueId input) {
    static const char* const kPassThrough[] = {"Cast",    "Unsqueeze", "Squeeze", "Reshape",
                                               "Flatten", "Identity",  "Expand",  "Transpose",
                                               "Tile",    "Slice"};
    std::vector<std::vector<std::pair<std::size_t, std::size_t>>> uses(g.num_values());
    for (std::size_t n = 0; n < g.nodes.size(); ++n)
        for (std::size_t k = 0; k < g.nodes[n].inputs.size(); ++k)
            if (ValueId v = g.nodes[n].inputs[k]; v != kNoValue)
                uses[static_cast<std::size_t>(v)].emplace_back(n, k);
    std::optional<std::int64_t> rows;
    std::vector<bool> seen(g.num_values(), false);
    std::vector<ValueId> todo{input};
    seen[static_cast<std::size_t>(input)] = true;
    while (!todo.empty()) {
        const ValueId v = todo.back();
        todo.pop_back();
        for (auto [n, k] : uses[static_cast<std::size_t>(v)]) {
            const Node& node = g.nodes[n];
            if (!node.domain.empty() && node.domain != "ai.onnx") continue;
            if (node.op_type == "Gather" && k == 1) {
                const Value& table = g.value(node.inputs[0]);
                if (!table.initializer || table.initializer->shape().num_dims() == 0) continue;
                const Shape& ts = table.initializer->shape();
                auto axis = node.attr_or<std::int64_t>("axis", 0);
                if (!axis) continue;
                std::int64_t a = *axis < 0 ? *axis + ts.num_dims() : *axis;
                if (a < 0 || a >= ts.num_dims()) continue;
                rows = rows ? std::min(*rows, ts[static_cast<int>(a)]) : ts[static_cast<int>(a)];
                continue;
            }
            if (k != 0 || node.outputs.empty() || node.outputs[0] == kNoValue) continue;
            if (std::find(std::begin(kPassThrough), std::end(kPassThrough), node.op_type) ==
                std::end(kPassThrough))
                continue;
            const ValueId out = node.outputs[0];
            if (!seen[static_cast<std::size_t>(out)]) {
                seen[static_cast<std::size_t>(out)] = true;
                todo.push_back(out);
            }
        }
    }
    return rows;
}

namespace detail {

inline bool name_has(const std::string& name, std::string_view word) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower.find(word) != std::string::npos;
}

template <class T>
void fill_integers(GeneratedInput& gi, Mulberry32& rand, std::int64_t table_rows) {
    Tensor& t = gi.input.tensor;
    T* p = t.data<T>();
    const std::int64_t n = t.num_elements();
    const std::string& name = gi.input.name;
    if (name_has(name, "mask")) {
        gi.fill = "ones";
        std::fill(p, p + n, T(1));
        return;
    }
    if (name_has(name, "type")) {
        gi.fill = "zeros";
        std::fill(p, p + n, T(0));
        return;
    }
    if (name_has(name, "position")) {
        gi.fill = "positions";
        const int r = t.shape().num_dims();
        const std::int64_t last = r ? std::max<std::int64_t>(t.shape()[r - 1], 1) : 1;
        for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(i % last);
        return;
    }
    // Token ids: [100, 30100) like common.mjs, unless the model's tables or the type are
    // smaller, then [0, that bound).
    std::int64_t low = kTokenLow, high = kTokenHigh;
    const auto type_high = static_cast<std::int64_t>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(std::numeric_limits<T>::max()),
                                static_cast<std::uint64_t>(kTokenHigh)));
    if (table_rows > 0 && table_rows < high) low = 0, high = table_rows;
    if (type_high < high) low = 0, high = type_high;
    gi.fill = "token ids";
    gi.low = low;
    gi.high = high;
    const double span = static_cast<double>(high - low);
    for (std::int64_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(static_cast<std::int64_t>(std::floor(rand() * span)) + low);
}

template <class T>
void fill_floats(GeneratedInput& gi, Mulberry32& rand) {
    gi.fill = "uniform(-1,1)";
    T* p = gi.input.tensor.data<T>();
    const std::int64_t n = gi.input.tensor.num_elements();
    for (std::int64_t i = 0; i < n; ++i) {
        const double x = rand() * 2 - 1;
        if constexpr (std::is_same_v<T, double>)
            p[i] = x;
        else
            p[i] = T(static_cast<float>(x));
    }
}

}  // namespace detail

/// Generates every graph input of `engine`. invalid_argument for unresolvable shapes and for
/// --shape names that are not inputs; unsupported for input types it cannot make (strings).
inline StatusOr<GeneratedInputs> make_inputs(const InferenceEngine& engine,
                                             const ShapeRequest& req) {
    for (const auto& [name, dims] : req.overrides) {
        const auto& ins = engine.inputs();
        const bool known =
            std::any_of(ins.begin(), ins.end(), [&](const IOInfo& i) { return i.name == name; });
        if (!known) {
            std::string names;
            for (const auto& i : ins) names += (names.empty() ? "" : ", ") + i.name;
            return Status::error(ErrorCode::invalid_argument, "--shape names '", name,
                                 "', which is not an input of the model (inputs: ", names, ")");
        }
    }
    const Graph& g = engine.graph();
    GeneratedInputs out;
    Mulberry32 rand(req.seed);
    for (std::size_t i = 0; i < engine.inputs().size(); ++i) {
        const IOInfo& info = engine.inputs()[i];
        DSINFER_CHECK(info.dtype.has_value(), ErrorCode::unsupported, "input '", info.name,
                      "' does not declare its element type");
        DSINFER_ASSIGN_OR_RETURN(Shape shape, resolve_shape(info, req, out.batch, out.seq));
        DSINFER_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(*info.dtype, shape));
        GeneratedInput gi{{info.name, std::move(t)}, {}, 0, 0};
        const ValueId id = i < g.inputs.size() ? g.inputs[i] : kNoValue;
        // 0: the values index no constant table.
        const std::int64_t rows =
            (is_integer(*info.dtype) && id != kNoValue) ? gather_table_rows(g, id).value_or(0) : 0;
        switch (*info.dtype) {
            case DType::f32: detail::fill_floats<float>(gi, rand); break;
            case DType::f64: detail::fill_floats<double>(gi, rand); break;
            case DType::f16: detail::fill_floats<float16>(gi, rand); break;
            case DType::bf16: detail::fill_floats<bfloat16>(gi, rand); break;
            case DType::i8: detail::fill_integers<std::int8_t>(gi, rand, rows); break;
            case DType::u8: detail::fill_integers<std::uint8_t>(gi, rand, rows); break;
            case DType::i16: detail::fill_integers<std::int16_t>(gi, rand, rows); break;
            case DType::u16: detail::fill_integers<std::uint16_t>(gi, rand, rows); break;
            case DType::i32: detail::fill_integers<std::int32_t>(gi, rand, rows); break;
            case DType::u32: detail::fill_integers<std::uint32_t>(gi, rand, rows); break;
            case DType::i64: detail::fill_integers<std::int64_t>(gi, rand, rows); break;
            case DType::u64: detail::fill_integers<std::uint64_t>(gi, rand, rows); break;
            case DType::boolean: {
                gi.fill = "coin flips";
                bool* p = gi.input.tensor.data<bool>();
                for (std::int64_t k = 0; k < gi.input.tensor.num_elements(); ++k)
                    p[k] = rand() < 0.5;
                break;
            }
            case DType::string:
                return Status::error(ErrorCode::unsupported, "input '", info.name,
                                     "' is a string tensor: no random generator for it");
        }
        out.inputs.push_back(std::move(gi));
    }
    return out;
}

}  // namespace dsinfer::bench
