// src/server/protocol.cpp — decoding and encoding of the Open Inference Protocol's inference
// requests and responses (see protocol.hpp).
#include "server/protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <utility>

#include <nlohmann/json.hpp>

#include "open_inference.pb.h"

namespace dsinfer::server {

using json = nlohmann::json;

namespace {

ApiError bad(std::string message) { return ApiError{ApiCode::bad_request, std::move(message)}; }

std::string quote_name(std::string_view s) {
    // Names come from clients: keep messages printable and bounded.
    std::string r = "'";
    for (char c : s.substr(0, 128)) r += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (s.size() > 128) r += "...";
    r += "'";
    return r;
}

const char* json_kind(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::object: return "an object";
        case json::value_t::array: return "an array";
        case json::value_t::string: return "a string";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float: return "a number";
        default: return "not a value";
    }
}

// Deepest nesting of objects and arrays in `text`, found without parsing (strings skipped), so
// a hostile "[[[[..." never reaches a parser or a recursive destructor.
int json_depth(std::string_view text) noexcept {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
        else if (c == ']' || c == '}') --depth;
    }
    return deepest;
}

// Element count of `dims` (checked: non-negative, no overflow, within the limit).
ApiError checked_shape(std::string_view input, std::span<const std::int64_t> dims,
                       const RequestLimits& limits, Shape& shape) {
    if (dims.size() > static_cast<std::size_t>(kMaxRank))
        return bad("input " + quote_name(input) + ": rank " + std::to_string(dims.size()) +
                   " exceeds the maximum rank " + std::to_string(kMaxRank));
    std::int64_t n = 1;
    for (std::size_t i = 0; i < dims.size(); ++i) {
        const std::int64_t d = dims[i];
        if (d < 0)
            return bad("input " + quote_name(input) + ": negative dimension " + std::to_string(d) +
                       " at axis " + std::to_string(i));
        if (d != 0 && n > limits.max_tensor_elements / d)
            return ApiError{ApiCode::too_large,
                            "input " + quote_name(input) + ": shape holds more than " +
                                std::to_string(limits.max_tensor_elements) +
                                " elements (the server's limit)"};
        n *= d;
    }
    if (n > limits.max_tensor_elements)
        return ApiError{ApiCode::too_large, "input " + quote_name(input) + ": " + std::to_string(n) +
                                                " elements exceed the server's limit of " +
                                                std::to_string(limits.max_tensor_elements)};
    auto s = Shape::make(dims);
    if (!s) return bad("input " + quote_name(input) + ": " + s.status().message());
    shape = *s;
    return {};
}

// Writes one JSON leaf into element `i` of a tensor of `dtype`.
template <class T>
bool put_integer(const json& v, void* base, std::int64_t i) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
        static_cast<T*>(base)[i] = static_cast<T>(u);
        return true;
    }
    if (v.is_number_integer()) {
        const auto s = v.get<std::int64_t>();
        if constexpr (std::is_unsigned_v<T>) {
            if (s < 0 || static_cast<std::uint64_t>(s) > std::numeric_limits<T>::max())
                return false;
        } else {
            if (s < std::numeric_limits<T>::min() || s > std::numeric_limits<T>::max())
                return false;
        }
        static_cast<T*>(base)[i] = static_cast<T>(s);
        return true;
    }
    return false;
}

std::string leaf_error(std::string_view input, std::int64_t i, const json& v, DType dtype) {
    std::string expected;
    if (is_floating(dtype)) expected = "a number";
    else if (dtype == DType::boolean) expected = "a boolean";
    else expected = "an integer in the range of " + std::string(protocol_dtype(dtype));
    return "input " + quote_name(input) + ": element " + std::to_string(i) + " is " +
           (v.is_number() ? "out of range or not integral" : json_kind(v)) + ", expected " +
           expected;
}

bool put_leaf(const json& v, DType dtype, void* base, std::int64_t i) {
    switch (dtype) {
        case DType::f32:
        case DType::f64:
        case DType::f16:
        case DType::bf16: {
            if (!v.is_number()) return false;
            const double d = v.get<double>();
            if (dtype == DType::f64) static_cast<double*>(base)[i] = d;
            else if (dtype == DType::f32) static_cast<float*>(base)[i] = static_cast<float>(d);
            else if (dtype == DType::f16)
                static_cast<float16*>(base)[i] = float16(static_cast<float>(d));
            else static_cast<bfloat16*>(base)[i] = bfloat16(static_cast<float>(d));
            return true;
        }
        case DType::boolean:
            if (!v.is_boolean()) return false;
            static_cast<bool*>(base)[i] = v.get<bool>();
            return true;
        case DType::i8: return put_integer<std::int8_t>(v, base, i);
        case DType::u8: return put_integer<std::uint8_t>(v, base, i);
        case DType::i16: return put_integer<std::int16_t>(v, base, i);
        case DType::u16: return put_integer<std::uint16_t>(v, base, i);
        case DType::i32: return put_integer<std::int32_t>(v, base, i);
        case DType::u32: return put_integer<std::uint32_t>(v, base, i);
        case DType::i64: return put_integer<std::int64_t>(v, base, i);
        case DType::u64: return put_integer<std::uint64_t>(v, base, i);
        case DType::string: return false;
    }
    return false;
}

// Fills `t` from "data": a flat or nested array in row-major order (nesting is not required to
// follow the shape; the element count must equal it). Iterative: no recursion on client data.
ApiError fill_from_json(std::string_view input, const json& data, Tensor& t) {
    const std::int64_t n = t.num_elements();
    void* base = t.raw_data();
    std::int64_t i = 0;
    auto put = [&](const json& v) -> ApiError {
        if (i >= n)
            return bad("input " + quote_name(input) + ": 'data' holds more than the " +
                       std::to_string(n) + " elements its shape " + t.shape().to_string() +
                       " declares");
        if (!put_leaf(v, t.dtype(), base, i)) return bad(leaf_error(input, i, v, t.dtype()));
        ++i;
        return {};
    };
    if (!data.is_array()) {
        if (ApiError e = put(data); !e.ok()) return e;
    } else {
        std::vector<std::pair<const json*, std::size_t>> stack{{&data, 0}};
        while (!stack.empty()) {
            auto& [arr, pos] = stack.back();
            if (pos == arr->size()) {
                stack.pop_back();
                continue;
            }
            const json& v = (*arr)[pos++];
            if (v.is_array()) {
                stack.emplace_back(&v, 0);
                continue;
            }
            if (ApiError e = put(v); !e.ok()) return e;
        }
    }
    if (i != n)
        return bad("input " + quote_name(input) + ": 'data' holds " + std::to_string(i) +
                   " elements, its shape " + t.shape().to_string() + " declares " +
                   std::to_string(n));
    return {};
}

ApiError read_request_parameters(const json& params, InferRequest& out) {
    if (!params.is_object()) return bad("'parameters' must be an object");
    for (auto it = params.begin(); it != params.end(); ++it) {
        const json& v = it.value();
        if (it.key() == "priority") {
            if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
                v.get<std::int64_t>() > 1000000)
                return bad("parameter 'priority' must be a non-negative integer");
            out.priority = static_cast<int>(v.get<std::int64_t>());
        } else if (it.key() == "timeout") {
            if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
                return bad("parameter 'timeout' must be a non-negative integer (microseconds)");
            out.timeout_us = v.get<std::int64_t>();
        } else if (it.key() == "binary_data_output") {
            if (!v.is_boolean()) return bad("parameter 'binary_data_output' must be a boolean");
            out.binary_outputs = v.get<bool>();
        }
        // Other parameters are the client's own: the protocol lets them pass.
    }
    return {};
}

ApiError check_name(std::string_view what, std::string_view name, const RequestLimits& limits) {
    if (name.empty()) return bad(std::string(what) + " has an empty name");
    if (name.size() > limits.max_name_bytes)
        return bad(std::string(what) + " name is longer than " +
                   std::to_string(limits.max_name_bytes) + " bytes");
    return {};
}

}  // namespace

// ---- errors ----

ApiError api_error(const Status& status) {
    ApiCode code = ApiCode::internal;
    switch (status.code()) {
        case ErrorCode::ok: return {};
        case ErrorCode::invalid_argument:
        case ErrorCode::invalid_model: code = ApiCode::bad_request; break;
        case ErrorCode::unsupported: code = ApiCode::unsupported; break;
        case ErrorCode::resource_exhausted: code = ApiCode::too_large; break;
        case ErrorCode::unavailable: code = ApiCode::unavailable; break;
        case ErrorCode::cancelled: code = ApiCode::cancelled; break;
        case ErrorCode::deadline_exceeded: code = ApiCode::deadline_exceeded; break;
        case ErrorCode::device_lost:
        case ErrorCode::io_error:
        case ErrorCode::internal: code = ApiCode::internal; break;
    }
    return ApiError{code, status.message().empty() ? std::string(to_string(status.code()))
                                                   : status.message()};
}

Status status_of(const ApiError& e) {
    ErrorCode code = ErrorCode::internal;
    switch (e.code) {
        case ApiCode::ok: return Status::ok();
        case ApiCode::bad_request:
        case ApiCode::not_found:
        case ApiCode::unauthenticated: code = ErrorCode::invalid_argument; break;
        case ApiCode::too_large: code = ErrorCode::resource_exhausted; break;
        case ApiCode::unavailable: code = ErrorCode::unavailable; break;
        case ApiCode::deadline_exceeded: code = ErrorCode::deadline_exceeded; break;
        case ApiCode::cancelled: code = ErrorCode::cancelled; break;
        case ApiCode::unsupported: code = ErrorCode::unsupported; break;
        case ApiCode::internal: code = ErrorCode::internal; break;
    }
    return Status::error(code, e.message);
}

int http_status(ApiCode code) noexcept {
    switch (code) {
        case ApiCode::ok: return 200;
        case ApiCode::bad_request: return 400;
        case ApiCode::not_found: return 404;
        case ApiCode::unauthenticated: return 401;
        case ApiCode::too_large: return 413;
        case ApiCode::unavailable: return 503;
        case ApiCode::deadline_exceeded: return 504;
        case ApiCode::cancelled: return 499;
        case ApiCode::unsupported: return 400;
        case ApiCode::internal: return 500;
    }
    return 500;
}

std::string_view api_code_name(ApiCode code) noexcept {
    switch (code) {
        case ApiCode::ok: return "ok";
        case ApiCode::bad_request: return "bad_request";
        case ApiCode::not_found: return "not_found";
        case ApiCode::unauthenticated: return "unauthenticated";
        case ApiCode::too_large: return "too_large";
        case ApiCode::unavailable: return "unavailable";
        case ApiCode::deadline_exceeded: return "deadline_exceeded";
        case ApiCode::cancelled: return "cancelled";
        case ApiCode::unsupported: return "unsupported";
        case ApiCode::internal: return "internal";
    }
    return "internal";
}

std::string json_error_body(std::string_view message) {
    return json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                      json::error_handler_t::replace);
}

// ---- datatypes and names ----

std::optional<DType> dtype_from_protocol(std::string_view name) noexcept {
    static constexpr std::pair<std::string_view, DType> kTable[] = {
        {"BOOL", DType::boolean}, {"UINT8", DType::u8},   {"UINT16", DType::u16},
        {"UINT32", DType::u32},   {"UINT64", DType::u64}, {"INT8", DType::i8},
        {"INT16", DType::i16},    {"INT32", DType::i32},  {"INT64", DType::i64},
        {"FP16", DType::f16},     {"BF16", DType::bf16},  {"FP32", DType::f32},
        {"FP64", DType::f64},     {"BYTES", DType::string}};
    for (const auto& [n, d] : kTable)
        if (n == name) return d;
    return std::nullopt;
}

std::string_view protocol_dtype(DType dtype) noexcept {
    switch (dtype) {
        case DType::boolean: return "BOOL";
        case DType::u8: return "UINT8";
        case DType::u16: return "UINT16";
        case DType::u32: return "UINT32";
        case DType::u64: return "UINT64";
        case DType::i8: return "INT8";
        case DType::i16: return "INT16";
        case DType::i32: return "INT32";
        case DType::i64: return "INT64";
        case DType::f16: return "FP16";
        case DType::bf16: return "BF16";
        case DType::f32: return "FP32";
        case DType::f64: return "FP64";
        case DType::string: return "BYTES";
    }
    return "BYTES";
}

bool valid_model_name(std::string_view name) noexcept {
    if (name.empty() || name.size() > 128 || name.front() == '.') return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

std::optional<std::int64_t> parse_version(std::string_view version) noexcept {
    if (version.empty() || version.size() > 18) return std::nullopt;
    std::int64_t v = 0;
    for (char c : version) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + (c - '0');
    }
    if (v <= 0) return std::nullopt;
    return v;
}

// ---- shared by both front ends ----

namespace {

// Validates name, datatype and shape of one input and allocates its tensor.
ApiError start_input(std::string_view name, std::string_view datatype,
                     std::span<const std::int64_t> dims, const RequestLimits& limits,
                     std::size_t& total_bytes, Tensor& t) {
    if (ApiError e = check_name("an input", name, limits); !e.ok()) return e;
    const auto dtype = dtype_from_protocol(datatype);
    if (!dtype)
        return bad("input " + quote_name(name) + ": unknown datatype " + quote_name(datatype) +
                   " (the protocol's are BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, "
                   "FP64, BYTES)");
    if (*dtype == DType::string)
        return ApiError{ApiCode::unsupported,
                        "input " + quote_name(name) + ": datatype BYTES is not served (dsinfer "
                                                  "models take numeric tensors)"};
    Shape shape;
    if (ApiError e = checked_shape(name, dims, limits, shape); !e.ok()) return e;
    const std::size_t bytes =
        static_cast<std::size_t>(shape.num_elements()) * dtype_size(*dtype);
    if (bytes > limits.max_total_input_bytes - std::min(total_bytes, limits.max_total_input_bytes))
        return ApiError{ApiCode::too_large, "inputs exceed the server's limit of " +
                                                std::to_string(limits.max_total_input_bytes) +
                                                " bytes per request"};
    total_bytes += bytes;
    auto allocated = Tensor::allocate(*dtype, shape);
    if (!allocated) return ApiError{ApiCode::too_large, allocated.status().message()};
    t = std::move(*allocated);
    return {};
}

ApiError check_unique_input(std::set<std::string, std::less<>>& seen, const std::string& name) {
    if (!seen.insert(name).second) return bad("input " + quote_name(name) + " appears twice");
    return {};
}

}  // namespace

ApiError select_outputs(const InferRequest& request, const std::vector<NamedTensor>& all,
                        std::vector<NamedTensor>& selected) {
    selected.clear();
    if (request.outputs.empty()) {
        selected = all;
        return {};
    }
    for (const auto& want : request.outputs) {
        auto it = std::find_if(all.begin(), all.end(),
                               [&](const NamedTensor& t) { return t.name == want.name; });
        if (it == all.end()) {
            std::string names;
            for (const auto& t : all) names += (names.empty() ? "" : ", ") + t.name;
            return bad("requested output " + quote_name(want.name) +
                       " is not an output of the model (its outputs: " + names + ")");
        }
        selected.push_back(*it);
    }
    return {};
}

// ---- REST / JSON ----

ApiError decode_json_request(std::string_view header, std::string_view binary,
                             const RequestLimits& limits, InferRequest& out) {
    out = InferRequest{};
    if (json_depth(header) > limits.max_json_depth)
        return bad("the JSON body nests deeper than " + std::to_string(limits.max_json_depth) +
                   " levels");
    json doc;
    try {
        doc = json::parse(header.begin(), header.end());
    } catch (const json::exception& e) {
        return bad(std::string("malformed JSON: ") + e.what());
    }
    if (!doc.is_object()) return bad("the request must be a JSON object");
    if (auto it = doc.find("id"); it != doc.end()) {
        if (!it->is_string()) return bad("'id' must be a string");
        out.id = it->get<std::string>();
        if (out.id.size() > limits.max_name_bytes)
            return bad("'id' is longer than " + std::to_string(limits.max_name_bytes) + " bytes");
    }
    if (auto it = doc.find("parameters"); it != doc.end())
        if (ApiError e = read_request_parameters(*it, out); !e.ok()) return e;

    auto inputs = doc.find("inputs");
    if (inputs == doc.end() || !inputs->is_array())
        return bad("the request needs an 'inputs' array");
    if (inputs->size() > limits.max_inputs)
        return bad("the request has " + std::to_string(inputs->size()) +
                   " inputs, more than the server's limit of " +
                   std::to_string(limits.max_inputs));
    std::set<std::string, std::less<>> seen;
    std::size_t total_bytes = 0, offset = 0;
    for (std::size_t k = 0; k < inputs->size(); ++k) {
        const json& in = (*inputs)[k];
        const std::string where = "inputs[" + std::to_string(k) + "]";
        if (!in.is_object()) return bad(where + " must be an object");
        auto name = in.find("name");
        auto datatype = in.find("datatype");
        auto shape = in.find("shape");
        if (name == in.end() || !name->is_string()) return bad(where + " needs a string 'name'");
        const std::string input_name = name->get<std::string>();
        if (datatype == in.end() || !datatype->is_string())
            return bad("input " + quote_name(input_name) + " needs a string 'datatype'");
        if (shape == in.end() || !shape->is_array())
            return bad("input " + quote_name(input_name) + " needs a 'shape' array");
        if (shape->size() > static_cast<std::size_t>(kMaxRank))
            return bad("input " + quote_name(input_name) + ": rank " +
                       std::to_string(shape->size()) + " exceeds the maximum rank " +
                       std::to_string(kMaxRank));
        std::vector<std::int64_t> dims;
        for (const json& d : *shape) {
            if (!d.is_number_integer())
                return bad("input " + quote_name(input_name) + ": 'shape' must hold integers");
            if (d.is_number_unsigned() &&
                d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
                return ApiError{ApiCode::too_large,
                                "input " + quote_name(input_name) + ": dimension too large"};
            dims.push_back(d.get<std::int64_t>());
        }
        if (ApiError e = check_unique_input(seen, input_name); !e.ok()) return e;
        Tensor t;
        if (ApiError e = start_input(input_name, datatype->get<std::string>(), dims, limits,
                                     total_bytes, t);
            !e.ok())
            return e;

        std::optional<std::uint64_t> binary_size;
        if (auto p = in.find("parameters"); p != in.end()) {
            if (!p->is_object()) return bad("input " + quote_name(input_name) + ": 'parameters' must be an object");
            if (auto b = p->find("binary_data_size"); b != p->end()) {
                if (!b->is_number_integer() || b->get<std::int64_t>() < 0)
                    return bad("input " + quote_name(input_name) +
                               ": 'binary_data_size' must be a non-negative integer");
                binary_size = b->get<std::uint64_t>();
            }
        }
        auto data = in.find("data");
        if (binary_size) {
            if (data != in.end())
                return bad("input " + quote_name(input_name) +
                           " has both 'data' and 'binary_data_size'");
            if (*binary_size != t.num_bytes())
                return bad("input " + quote_name(input_name) + ": binary_data_size " +
                           std::to_string(*binary_size) + " does not match its shape " +
                           t.shape().to_string() + " of " +
                           std::string(protocol_dtype(t.dtype())) + " (" +
                           std::to_string(t.num_bytes()) + " bytes)");
            if (*binary_size > binary.size() - offset)
                return bad("input " + quote_name(input_name) + ": the binary section ends after " +
                           std::to_string(binary.size() - offset) + " of its " +
                           std::to_string(*binary_size) + " bytes (truncated body)");
            if (t.num_bytes() != 0)
                std::memcpy(t.raw_data(), binary.data() + offset, t.num_bytes());
            offset += t.num_bytes();
        } else {
            if (data == in.end())
                return bad("input " + quote_name(input_name) +
                           " has neither 'data' nor a 'binary_data_size' parameter");
            if (ApiError e = fill_from_json(input_name, *data, t); !e.ok()) return e;
        }
        out.inputs.push_back(NamedTensor{input_name, std::move(t)});
    }
    if (offset != binary.size())
        return bad("the binary section holds " + std::to_string(binary.size()) +
                   " bytes but the inputs' binary_data_size add up to " + std::to_string(offset));

    if (auto outputs = doc.find("outputs"); outputs != doc.end()) {
        if (!outputs->is_array()) return bad("'outputs' must be an array");
        if (outputs->size() > limits.max_outputs)
            return bad("the request asks for more than " + std::to_string(limits.max_outputs) +
                       " outputs");
        std::set<std::string, std::less<>> asked;
        for (const json& o : *outputs) {
            if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
                return bad("each of 'outputs' needs a string 'name'");
            RequestedOutput r{o["name"].get<std::string>(), out.binary_outputs};
            if (ApiError e = check_name("an output", r.name, limits); !e.ok()) return e;
            if (!asked.insert(r.name).second)
                return bad("output " + quote_name(r.name) + " is requested twice");
            if (auto p = o.find("parameters"); p != o.end()) {
                if (!p->is_object()) return bad("output " + quote_name(r.name) + ": 'parameters' must be an object");
                if (auto b = p->find("binary_data"); b != p->end()) {
                    if (!b->is_boolean())
                        return bad("output " + quote_name(r.name) + ": 'binary_data' must be a boolean");
                    r.binary = b->get<bool>();
                }
            }
            out.outputs.push_back(std::move(r));
        }
    }
    return {};
}

namespace {

json json_data(const Tensor& t) {
    const std::int64_t n = t.num_elements();
    json data = json::array();
    data.get_ref<json::array_t&>().reserve(static_cast<std::size_t>(n));
    const void* p = t.raw_data();
    for (std::int64_t i = 0; i < n; ++i) {
        switch (t.dtype()) {
            case DType::f32: data.push_back(static_cast<const float*>(p)[i]); break;
            case DType::f64: data.push_back(static_cast<const double*>(p)[i]); break;
            case DType::f16:
                data.push_back(static_cast<float>(static_cast<const float16*>(p)[i]));
                break;
            case DType::bf16:
                data.push_back(static_cast<float>(static_cast<const bfloat16*>(p)[i]));
                break;
            case DType::boolean: data.push_back(static_cast<const bool*>(p)[i]); break;
            case DType::i8: data.push_back(static_cast<const std::int8_t*>(p)[i]); break;
            case DType::u8: data.push_back(static_cast<const std::uint8_t*>(p)[i]); break;
            case DType::i16: data.push_back(static_cast<const std::int16_t*>(p)[i]); break;
            case DType::u16: data.push_back(static_cast<const std::uint16_t*>(p)[i]); break;
            case DType::i32: data.push_back(static_cast<const std::int32_t*>(p)[i]); break;
            case DType::u32: data.push_back(static_cast<const std::uint32_t*>(p)[i]); break;
            case DType::i64: data.push_back(static_cast<const std::int64_t*>(p)[i]); break;
            case DType::u64: data.push_back(static_cast<const std::uint64_t*>(p)[i]); break;
            case DType::string: data.push_back(static_cast<const std::string*>(p)[i]); break;
        }
    }
    return data;
}

json json_shape(const Shape& s) {
    json shape = json::array();
    for (int i = 0; i < s.num_dims(); ++i) shape.push_back(s[i]);
    return shape;
}

}  // namespace

ApiError encode_json_response(std::string_view model, std::string_view version,
                              const InferRequest& request,
                              const std::vector<NamedTensor>& outputs, EncodedResponse& out) {
    std::vector<NamedTensor> selected;
    if (ApiError e = select_outputs(request, outputs, selected); !e.ok()) return e;
    json doc = {{"model_name", std::string(model)}, {"model_version", std::string(version)}};
    if (!request.id.empty()) doc["id"] = request.id;
    json outs = json::array();
    std::vector<const Tensor*> binary;
    for (std::size_t k = 0; k < selected.size(); ++k) {
        const Tensor& t = selected[k].tensor;
        if (t.dtype() == DType::string)
            return ApiError{ApiCode::unsupported,
                            "output " + quote_name(selected[k].name) + " is a string tensor"};
        const bool as_binary =
            request.outputs.empty() ? request.binary_outputs : request.outputs[k].binary;
        json o = {{"name", selected[k].name},
                  {"datatype", std::string(protocol_dtype(t.dtype()))},
                  {"shape", json_shape(t.shape())}};
        if (as_binary) {
            o["parameters"] = {{"binary_data_size", t.num_bytes()}};
            binary.push_back(&t);
        } else {
            o["data"] = json_data(t);
        }
        outs.push_back(std::move(o));
    }
    doc["outputs"] = std::move(outs);
    // NaN and infinities have no JSON spelling: they are written as null (use binary outputs
    // to receive them exactly).
    out.body = doc.dump(-1, ' ', false, json::error_handler_t::replace);
    out.header_bytes = 0;
    if (!binary.empty()) {
        out.header_bytes = out.body.size();
        std::size_t total = 0;
        for (const Tensor* t : binary) total += t->num_bytes();
        out.body.reserve(out.body.size() + total);
        for (const Tensor* t : binary)
            out.body.append(static_cast<const char*>(t->raw_data()), t->num_bytes());
    }
    return {};
}

// ---- the generate extension ----

namespace {

// A value from a client, shown in a message: its JSON text, bounded.
std::string shown(const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 40) s = s.substr(0, 40) + "...";
    return s;
}

// An integer parameter in [lo, hi]; `what` says the range in words ("an integer >= 1").
ApiError int_parameter(const std::string& key, const json& v, std::int64_t lo, std::int64_t hi,
                       const char* what, std::int64_t& out) {
    const bool integral =
        v.is_number_integer() &&
        !(v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
    if (!integral || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
        return bad("parameter '" + key + "' must be " + what + ", got " + shown(v));
    out = v.get<std::int64_t>();
    return {};
}

// A number parameter that `ok` accepts (after conversion to float, as the Generator holds it).
template <class Ok>
ApiError float_parameter(const std::string& key, const json& v, Ok ok, const char* what,
                         float& out) {
    const double d = v.is_number() ? v.get<double>() : std::nan("");
    const auto f = static_cast<float>(d);
    if (!std::isfinite(d) || !std::isfinite(f) || !ok(f))
        return bad("parameter '" + key + "' must be " + what + ", got " + shown(v));
    out = f;
    return {};
}

// A JSON array of token ids (integers >= 0; their vocabulary is check_generate_call's).
ApiError token_ids(const std::string& field, const json& v, std::size_t max_count,
                   std::vector<std::int64_t>& out) {
    if (!v.is_array())
        return bad("'" + field + "' must be an array of token ids (integers), not " +
                   std::string(json_kind(v)));
    if (v.size() > max_count)
        return ApiError{ApiCode::too_large, "'" + field + "' holds " + std::to_string(v.size()) +
                                                " ids, more than the limit of " +
                                                std::to_string(max_count)};
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        const json& e = v[i];
        const bool integral = e.is_number_integer() &&
                              !(e.is_number_unsigned() &&
                                e.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
        if (!integral || e.get<std::int64_t>() < 0)
            return bad("'" + field + "'[" + std::to_string(i) + "] is " + shown(e) +
                       ", not a token id (an integer >= 0)");
        out.push_back(e.get<std::int64_t>());
    }
    return {};
}

ApiError read_generate_parameters(const json& params, GenerateCall& out) {
    if (!params.is_object())
        return bad(std::string("'parameters' must be an object, not ") + json_kind(params));
    for (auto it = params.begin(); it != params.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        ApiError e;
        if (k == "max_tokens") {
            e = int_parameter(k, v, 1, INT64_MAX, "an integer >= 1", out.max_tokens);
        } else if (k == "temperature") {
            e = float_parameter(
                k, v, [](float x) { return x >= 0.f; }, "a number >= 0 (0: greedy)",
                out.sampling.temperature);
        } else if (k == "top_k") {
            e = int_parameter(k, v, 0, INT64_MAX, "an integer >= 0 (0: off)", out.sampling.top_k);
        } else if (k == "top_p") {
            e = float_parameter(
                k, v, [](float x) { return x > 0.f && x <= 1.f; }, "a number in (0, 1]",
                out.sampling.top_p);
        } else if (k == "min_p") {
            e = float_parameter(
                k, v, [](float x) { return x >= 0.f && x < 1.f; }, "a number in [0, 1)",
                out.sampling.min_p);
        } else if (k == "repetition_penalty") {
            e = float_parameter(
                k, v, [](float x) { return x > 0.f; }, "a number > 0 (1: off)",
                out.sampling.repetition_penalty);
        } else if (k == "seed") {
            if (v.is_number_unsigned())
                out.sampling.seed = v.get<std::uint64_t>();
            else if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
                out.sampling.seed = static_cast<std::uint64_t>(v.get<std::int64_t>());
            else
                e = bad("parameter 'seed' must be an integer >= 0, got " + shown(v));
        } else if (k == "ignore_eos") {
            if (!v.is_boolean())
                e = bad("parameter 'ignore_eos' must be a boolean, got " + shown(v));
            else
                out.ignore_eos = v.get<bool>();
        } else if (k == "stop_token_ids") {
            e = token_ids("parameters.stop_token_ids", v, kMaxStopTokens, out.stop_token_ids);
        } else if (k == "timeout") {
            std::int64_t us = 0;
            e = int_parameter(k, v, 0, kMaxGenerateTimeoutUs,
                              "an integer in [0, 86400000000] (microseconds)", us);
            if (e.ok()) out.timeout_us = us;
        } else if (k == "priority") {
            // The Generator admits requests first come, first served.
            e =
                bad("parameter 'priority' is not supported by generation (requests are admitted "
                    "in arrival order)");
        } else {
            e = bad("unknown parameter " + quote_name(k) +
                    " (generation takes max_tokens, temperature, top_k, top_p, min_p, "
                    "repetition_penalty, seed, ignore_eos, stop_token_ids, timeout)");
        }
        if (!e.ok()) return e;
    }
    return {};
}

std::string dump(const json& doc) {
    return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

json generate_header(std::string_view model, std::string_view version, const GenerateCall& call) {
    json doc = {{"model_name", std::string(model)}, {"model_version", std::string(version)}};
    if (!call.id.empty()) doc["id"] = call.id;
    return doc;
}

}  // namespace

ApiError decode_generate_request(std::string_view body, const RequestLimits& limits,
                                 GenerateCall& out) {
    out = GenerateCall{};
    if (json_depth(body) > limits.max_json_depth)
        return bad("the JSON body nests deeper than " + std::to_string(limits.max_json_depth) +
                   " levels");
    json doc;
    try {
        doc = json::parse(body.begin(), body.end());
    } catch (const json::exception& e) {
        return bad(std::string("malformed JSON: ") + e.what());
    }
    if (!doc.is_object()) return bad("the request must be a JSON object");
    // Said first, whatever else the body holds: it is what a client of a text model sends.
    if (doc.contains("text_input"))
        return bad(
            "'text_input': tokenization is not supported (the served models have no "
            "tokenizer); send the prompt's token ids as 'input_ids'");
    bool have_ids = false;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "id") {
            if (!v.is_string()) return bad("'id' must be a string");
            out.id = v.get<std::string>();
            if (out.id.size() > limits.max_name_bytes)
                return bad("'id' is longer than " + std::to_string(limits.max_name_bytes) +
                           " bytes");
        } else if (k == "input_ids") {
            const auto max_ids =
                static_cast<std::size_t>(std::max<std::int64_t>(limits.max_tensor_elements, 1));
            if (ApiError e = token_ids(k, v, max_ids, out.input_ids); !e.ok()) return e;
            if (out.input_ids.empty())
                return bad("'input_ids' is empty: the prompt needs at least one token");
            have_ids = true;
        } else if (k == "parameters") {
            if (ApiError e = read_generate_parameters(v, out); !e.ok()) return e;
        } else {
            return bad("unknown field " + quote_name(k) +
                       " (a generate request has input_ids, parameters and id)");
        }
    }
    if (!have_ids) return bad("'input_ids' is missing: the prompt's token ids");
    return {};
}

ApiError check_generate_call(const GenerateCall& call, const DecoderConfig& model) {
    const std::int64_t vocab = model.vocab_size;
    auto check = [vocab](const std::string& field, const std::vector<std::int64_t>& ids) {
        for (std::size_t i = 0; i < ids.size(); ++i)
            if (ids[i] >= vocab)
                return bad("'" + field + "'[" + std::to_string(i) + "] is " +
                           std::to_string(ids[i]) + ", outside the model's vocabulary [0, " +
                           std::to_string(vocab) + ")");
        return ApiError{};
    };
    if (ApiError e = check("input_ids", call.input_ids); !e.ok()) return e;
    if (ApiError e = check("parameters.stop_token_ids", call.stop_token_ids); !e.ok()) return e;
    if (model.max_positions > 0 &&
        static_cast<std::int64_t>(call.input_ids.size()) >= model.max_positions)
        return bad("'input_ids' holds " + std::to_string(call.input_ids.size()) +
                   " tokens; the model's position limit is " + std::to_string(model.max_positions) +
                   " (prompt and generated tokens together)");
    return {};
}

ApiError generation_outcome(const GenerateResult& result, bool drained) {
    const std::string after =
        " after " + std::to_string(result.tokens.size()) + " generated tokens";
    switch (result.finish) {
        case FinishReason::length:
        case FinishReason::stop_token: return {};
        case FinishReason::deadline:
            return ApiError{ApiCode::deadline_exceeded, "the request's deadline passed" + after};
        case FinishReason::cancelled:
            if (drained)
                return ApiError{ApiCode::unavailable,
                                "the model stopped serving (server shutdown, unload or reload) "
                                "and its drain timeout passed" +
                                    after};
            return ApiError{ApiCode::cancelled, "the generation was cancelled" + after};
        case FinishReason::error: break;
    }
    ApiError e = api_error(result.status);
    if (e.ok()) e = ApiError{ApiCode::internal, "the generation failed"};
    if (!result.tokens.empty()) e.message += " (" + after.substr(1) + ")";
    return e;
}

std::string encode_generate_response(std::string_view model, std::string_view version,
                                     const GenerateCall& call, const GenerateResult& result) {
    json doc = generate_header(model, version, call);
    doc["output_ids"] = result.tokens;
    doc["finish_reason"] = finish_reason_name(result.finish);
    return dump(doc);
}

std::string generate_token_event(std::string_view model, std::string_view version,
                                 const GenerateCall& call, std::size_t index, std::int64_t token) {
    json doc = generate_header(model, version, call);
    doc["index"] = index;
    doc["token_id"] = token;
    return "data: " + dump(doc) + "\n\n";
}

std::string generate_final_event(std::string_view model, std::string_view version,
                                 const GenerateCall& call, const GenerateResult& result,
                                 const ApiError& outcome) {
    json doc = generate_header(model, version, call);
    doc["finish_reason"] = finish_reason_name(result.finish);
    doc["generated_tokens"] = result.tokens.size();
    if (!outcome.ok()) doc["error"] = outcome.message;
    return "data: " + dump(doc) + "\n\n";
}

// ---- gRPC ----

namespace {

ApiError read_grpc_parameters(
    const google::protobuf::Map<std::string, inference::InferParameter>& params,
    InferRequest& out) {
    for (const auto& [key, p] : params) {
        if (key != "priority" && key != "timeout") continue;
        std::int64_t v = -1;
        if (p.parameter_choice_case() == inference::InferParameter::kInt64Param)
            v = p.int64_param();
        else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param &&
                 p.uint64_param() <= static_cast<std::uint64_t>(INT64_MAX))
            v = static_cast<std::int64_t>(p.uint64_param());
        if (v < 0)
            return bad("parameter '" + key + "' must be a non-negative integer" +
                       (key == "timeout" ? " (microseconds)" : ""));
        if (key == "priority") {
            if (v > 1000000) return bad("parameter 'priority' is out of range");
            out.priority = static_cast<int>(v);
        } else {
            out.timeout_us = v;
        }
    }
    return {};
}

// Typed contents: the member the datatype uses, its count checked against the shape.
template <class Src, class Dst>
ApiError copy_contents(std::string_view input, const google::protobuf::RepeatedField<Src>& src,
                       Tensor& t) {
    if (static_cast<std::int64_t>(src.size()) != t.num_elements())
        return bad("input " + quote_name(input) + ": contents hold " + std::to_string(src.size()) +
                   " elements, its shape " + t.shape().to_string() + " declares " +
                   std::to_string(t.num_elements()));
    auto* dst = static_cast<Dst*>(t.raw_data());
    for (int i = 0; i < src.size(); ++i) {
        const Src v = src[i];
        if constexpr (std::is_integral_v<Dst> && !std::is_same_v<Dst, bool>) {
            if (v < static_cast<Src>(std::numeric_limits<Dst>::min()) ||
                v > static_cast<Src>(std::numeric_limits<Dst>::max()))
                return bad("input " + quote_name(input) + ": element " + std::to_string(i) +
                           " is out of the range of " + std::string(protocol_dtype(t.dtype())));
        }
        if constexpr (std::is_same_v<Dst, float16> || std::is_same_v<Dst, bfloat16>)
            dst[i] = Dst(static_cast<float>(v));
        else
            dst[i] = static_cast<Dst>(v);
    }
    return {};
}

ApiError fill_from_contents(std::string_view input, const inference::InferTensorContents& c,
                            Tensor& t) {
    switch (t.dtype()) {
        case DType::boolean: return copy_contents<bool, bool>(input, c.bool_contents(), t);
        case DType::i8: return copy_contents<std::int32_t, std::int8_t>(input, c.int_contents(), t);
        case DType::i16:
            return copy_contents<std::int32_t, std::int16_t>(input, c.int_contents(), t);
        case DType::i32:
            return copy_contents<std::int32_t, std::int32_t>(input, c.int_contents(), t);
        case DType::i64:
            return copy_contents<std::int64_t, std::int64_t>(input, c.int64_contents(), t);
        case DType::u8:
            return copy_contents<std::uint32_t, std::uint8_t>(input, c.uint_contents(), t);
        case DType::u16:
            return copy_contents<std::uint32_t, std::uint16_t>(input, c.uint_contents(), t);
        case DType::u32:
            return copy_contents<std::uint32_t, std::uint32_t>(input, c.uint_contents(), t);
        case DType::u64:
            return copy_contents<std::uint64_t, std::uint64_t>(input, c.uint64_contents(), t);
        case DType::f32: return copy_contents<float, float>(input, c.fp32_contents(), t);
        case DType::f64: return copy_contents<double, double>(input, c.fp64_contents(), t);
        case DType::f16: return copy_contents<float, float16>(input, c.fp32_contents(), t);
        case DType::bf16: return copy_contents<float, bfloat16>(input, c.fp32_contents(), t);
        case DType::string: break;
    }
    return ApiError{ApiCode::unsupported, "input " + quote_name(input) + ": datatype not served"};
}

}  // namespace

ApiError decode_grpc_request(const inference::ModelInferRequest& request,
                             const RequestLimits& limits, InferRequest& out) {
    out = InferRequest{};
    out.id = request.id();
    if (out.id.size() > limits.max_name_bytes)
        return bad("'id' is longer than " + std::to_string(limits.max_name_bytes) + " bytes");
    if (ApiError e = read_grpc_parameters(request.parameters(), out); !e.ok()) return e;
    if (static_cast<std::size_t>(request.inputs_size()) > limits.max_inputs)
        return bad("the request has " + std::to_string(request.inputs_size()) +
                   " inputs, more than the server's limit of " +
                   std::to_string(limits.max_inputs));
    const bool raw = request.raw_input_contents_size() > 0;
    if (raw && request.raw_input_contents_size() != request.inputs_size())
        return bad("raw_input_contents has " + std::to_string(request.raw_input_contents_size()) +
                   " entries for " + std::to_string(request.inputs_size()) +
                   " inputs (one per input, in order)");
    std::set<std::string, std::less<>> seen;
    std::size_t total_bytes = 0;
    for (int k = 0; k < request.inputs_size(); ++k) {
        const auto& in = request.inputs(k);
        if (ApiError e = check_unique_input(seen, in.name()); !e.ok()) return e;
        Tensor t;
        std::vector<std::int64_t> dims(in.shape().begin(), in.shape().end());
        if (ApiError e = start_input(in.name(), in.datatype(), dims, limits, total_bytes, t);
            !e.ok())
            return e;
        if (raw) {
            if (in.has_contents())
                return bad("input " + quote_name(in.name()) +
                           " has typed contents while the request uses raw_input_contents");
            const std::string& bytes = request.raw_input_contents(k);
            if (bytes.size() != t.num_bytes())
                return bad("input " + quote_name(in.name()) + ": raw_input_contents holds " +
                           std::to_string(bytes.size()) + " bytes, its shape " +
                           t.shape().to_string() + " of " +
                           std::string(protocol_dtype(t.dtype())) + " needs " +
                           std::to_string(t.num_bytes()));
            if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
        } else {
            if (ApiError e = fill_from_contents(in.name(), in.contents(), t); !e.ok()) return e;
        }
        out.inputs.push_back(NamedTensor{in.name(), std::move(t)});
    }
    if (static_cast<std::size_t>(request.outputs_size()) > limits.max_outputs)
        return bad("the request asks for more than " + std::to_string(limits.max_outputs) +
                   " outputs");
    std::set<std::string, std::less<>> asked;
    for (const auto& o : request.outputs()) {
        if (ApiError e = check_name("an output", o.name(), limits); !e.ok()) return e;
        if (!asked.insert(o.name()).second)
            return bad("output " + quote_name(o.name()) + " is requested twice");
        out.outputs.push_back(RequestedOutput{o.name(), true});
    }
    return {};
}

ApiError encode_grpc_response(std::string_view model, std::string_view version,
                              const InferRequest& request,
                              const std::vector<NamedTensor>& outputs,
                              inference::ModelInferResponse& out) {
    std::vector<NamedTensor> selected;
    if (ApiError e = select_outputs(request, outputs, selected); !e.ok()) return e;
    out.set_model_name(std::string(model));
    out.set_model_version(std::string(version));
    out.set_id(request.id);
    for (const auto& nt : selected) {
        const Tensor& t = nt.tensor;
        if (t.dtype() == DType::string)
            return ApiError{ApiCode::unsupported, "output " + quote_name(nt.name) +
                                                      " is a string tensor"};
        auto* o = out.add_outputs();
        o->set_name(nt.name);
        o->set_datatype(std::string(protocol_dtype(t.dtype())));
        for (int i = 0; i < t.shape().num_dims(); ++i) o->add_shape(t.shape()[i]);
        out.add_raw_output_contents(static_cast<const char*>(t.raw_data()), t.num_bytes());
    }
    return {};
}

}  // namespace dsinfer::server
