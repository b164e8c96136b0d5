// src/server/protocol.hpp — the Open Inference Protocol's (KServe v2) request and response
// forms, decoded into and encoded from dsinfer tensors. Shared by the REST front end (JSON with
// the binary-tensor extension) and the gRPC one (ModelInferRequest/Response), and the unit of
// the request-decoder fuzz target (fuzz/fuzz_serve_request.cpp).
//
// Decoding never trusts a size: shapes are checked (rank, non-negative dims, element count
// against RequestLimits before anything is allocated, overflow-safe), JSON nesting is bounded
// before the parser sees it, byte counts must match exactly, and every failure is an ApiError
// naming the input and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/dtype.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/generate.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace inference {
class ModelInferRequest;
class ModelInferResponse;
}  // namespace inference

namespace dsinfer::server {

/// The protocol's error classes; each front end maps them to its status codes
/// (http_status(), and grpc_frontend.cpp for gRPC).
enum class ApiCode : std::uint8_t {
    ok,
    bad_request,       ///< malformed or inconsistent request (HTTP 400, INVALID_ARGUMENT)
    not_found,         ///< unknown model, version or route (404, NOT_FOUND)
    unauthenticated,   ///< missing or wrong bearer token (401, UNAUTHENTICATED)
    too_large,         ///< body, tensor or header over a limit (413, RESOURCE_EXHAUSTED)
    unavailable,       ///< queue full, model loading or server draining (503, UNAVAILABLE)
    deadline_exceeded, ///< the request's timeout passed before it ran (504, DEADLINE_EXCEEDED)
    cancelled,         ///< the client went away (499, CANCELLED)
    unsupported,       ///< a datatype or feature ds-serve does not serve (400, UNIMPLEMENTED)
    internal,          ///< a bug or an unexpected failure (500, INTERNAL)
};

struct ApiError {
    ApiCode code = ApiCode::ok;
    std::string message;
    bool ok() const noexcept { return code == ApiCode::ok; }
    static ApiError none() { return {}; }
};

/// An ApiError for a dsinfer Status (invalid_argument: bad_request, unavailable: unavailable...).
ApiError api_error(const Status& status);
/// The converse, for the C++ API: not_found and bad_request are invalid_argument.
Status status_of(const ApiError& e);
int http_status(ApiCode code) noexcept;
std::string_view api_code_name(ApiCode code) noexcept;

/// What one request may ask of the server (ServerOptions fills it).
struct RequestLimits {
    std::int64_t max_tensor_elements = std::int64_t{1} << 26;  ///< per input tensor
    std::size_t max_total_input_bytes = std::size_t{256} << 20; ///< all inputs together
    std::size_t max_inputs = 64;
    std::size_t max_outputs = 64;
    std::size_t max_name_bytes = 256;
    int max_json_depth = 64;  ///< nesting of the JSON header (the data arrays included)
};

/// The protocol's datatype names ("FP32", "INT64", ... "BF16"); BYTES is parsed but refused as
/// unsupported (dsinfer models take numeric tensors).
std::optional<DType> dtype_from_protocol(std::string_view name) noexcept;
std::string_view protocol_dtype(DType dtype) noexcept;

struct RequestedOutput {
    std::string name;
    bool binary = false;  ///< JSON front end: send as raw bytes after the JSON header
};

/// A decoded inference request.
struct InferRequest {
    std::string id;
    std::vector<NamedTensor> inputs;        ///< host tensors the request owns
    std::vector<RequestedOutput> outputs;   ///< empty: every output of the model
    bool binary_outputs = false;            ///< request parameter binary_data_output
    std::optional<int> priority;            ///< request parameter "priority" (0 = most urgent)
    std::optional<std::int64_t> timeout_us; ///< request parameter "timeout" (microseconds)
};

/// REST: `header` is the JSON part of the body (the whole body without the binary extension),
/// `binary` what follows it (the inputs whose parameters give binary_data_size, in order).
ApiError decode_json_request(std::string_view header, std::string_view binary,
                             const RequestLimits& limits, InferRequest& out);

/// REST: the response body. Outputs the client asked for as binary (or all, with
/// binary_data_output) follow the JSON header; `header_bytes` is then the JSON part's length
/// (the Inference-Header-Content-Length response header), 0 when the body is JSON alone.
struct EncodedResponse {
    std::string body;
    std::size_t header_bytes = 0;
};
ApiError encode_json_response(std::string_view model, std::string_view version,
                              const InferRequest& request,
                              const std::vector<NamedTensor>& outputs, EncodedResponse& out);

/// The protocol's error body: {"error": "message"}.
std::string json_error_body(std::string_view message);

/// gRPC: ModelInferRequest's inputs (raw_input_contents or typed contents) and parameters.
ApiError decode_grpc_request(const inference::ModelInferRequest& request,
                             const RequestLimits& limits, InferRequest& out);
/// gRPC: outputs as raw_output_contents.
ApiError encode_grpc_response(std::string_view model, std::string_view version,
                              const InferRequest& request,
                              const std::vector<NamedTensor>& outputs,
                              inference::ModelInferResponse& out);

/// The outputs the request asked for, in the order it asked (all of them, in the model's
/// order, when it named none); an unknown name is bad_request.
ApiError select_outputs(const InferRequest& request, const std::vector<NamedTensor>& all,
                        std::vector<NamedTensor>& selected);

// ---- the generate extension (decoder-only models served by dsinfer::Generator) ----

/// The most stop_token_ids one generate request may name (each generated token is compared
/// with all of them).
inline constexpr std::size_t kMaxStopTokens = 1024;
/// The largest "timeout" parameter of a generate request: a day, in microseconds (as
/// --request-timeout-ms).
inline constexpr std::int64_t kMaxGenerateTimeoutUs = std::int64_t{86400} * 1000000;

/// A decoded generate request (POST .../generate and .../generate_stream):
/// {"id"?, "input_ids": [...], "parameters": {...}} (docs/SERVING.md "Generation").
struct GenerateCall {
    std::string id;
    std::vector<std::int64_t> input_ids;  ///< the prompt's token ids
    std::int64_t max_tokens = GenerateRequest{}.max_tokens;
    SamplingOptions sampling;
    std::vector<std::int64_t> stop_token_ids;
    bool ignore_eos = false;
    std::optional<std::int64_t> timeout_us;  ///< parameter "timeout" (microseconds; 0: none)
};

/// Checks the body's fields, types and ranges before anything runs: a text_input (the models
/// have no tokenizer), an unknown field or parameter, a wrong type or a value out of range is
/// bad_request naming the field. The ids against the model are check_generate_call's.
ApiError decode_generate_request(std::string_view body, const RequestLimits& limits,
                                 GenerateCall& out);
/// The checks that need the model: every id of input_ids and stop_token_ids inside the
/// vocabulary, the prompt shorter than the model's position limit (bad_request naming the
/// field).
ApiError check_generate_call(const GenerateCall& call, const DecoderConfig& model);

/// What a finished generation answers: ok for finish reasons length and stop_token, else the
/// error, its message counting the tokens generated: deadline_exceeded; cancelled (the client
/// went away), or unavailable when `drained` (a drain of the server or of the model, for an
/// unload or a reload, ran out of time and cancelled it); for finish error, the Generator's
/// status.
ApiError generation_outcome(const GenerateResult& result, bool drained);

/// The generate response: {"model_name", "model_version", "id"?, "output_ids",
/// "finish_reason"}.
std::string encode_generate_response(std::string_view model, std::string_view version,
                                     const GenerateCall& call, const GenerateResult& result);
/// generate_stream's Server-Sent Events ("data: {json}\n\n"): one per generated token, with
/// its index among the generated tokens ...
std::string generate_token_event(std::string_view model, std::string_view version,
                                 const GenerateCall& call, std::size_t index, std::int64_t token);
/// ... then the last one, with the finish reason and the number of tokens generated (and
/// "error" when the outcome is not ok).
std::string generate_final_event(std::string_view model, std::string_view version,
                                 const GenerateCall& call, const GenerateResult& result,
                                 const ApiError& outcome);

/// Model names and versions on routes and in the repository: 1-128 bytes of [A-Za-z0-9_.-],
/// not "." or "..", not starting with '.': never a path escape.
bool valid_model_name(std::string_view name) noexcept;
/// A version string: 1-18 decimal digits, value > 0.
std::optional<std::int64_t> parse_version(std::string_view version) noexcept;

}  // namespace dsinfer::server
