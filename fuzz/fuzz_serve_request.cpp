// Fuzz target: ds-serve's request decoders (src/server/protocol.hpp), the code that reads
// every byte a network client sends before any model sees it.
//
// The first byte picks the form:
//   2 mod 4: a generate body (the rest; decode_generate_request): a failure is a client-class
//         error with a message; a success holds 1..max_tensor_elements non-negative input_ids,
//         max_tokens >= 1, at most 1,024 non-negative stop ids and an id within the name limit,
//         and its answer and stream events encode as JSON objects carrying it back.
//   other even: a REST body — the next two bytes give the JSON header's length (the
//         Inference-Header-Content-Length), the rest is split there into the JSON header and the
//         binary section; decoded by decode_json_request.
//   odd:  a gRPC ModelInferRequest in protobuf wire form (decode_grpc_request).
// Limits are small (4,096 elements per tensor, 64 KiB per request, 8 inputs, depth 16), so
// huge declared shapes must be refused before anything is allocated.
//
// Invariants: no crash, hang or sanitizer report; a failure is an ApiError of a client class
// (bad_request, too_large, unsupported), never internal, with a message; a success holds at most
// 8 inputs of distinct non-empty names, each within the element limit and the total within the
// byte limit; and encoding the decoded inputs back as binary outputs (encode_json_response) and
// decoding that JSON header and binary section again gives the same names, dtypes, shapes and
// bytes.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "open_inference.pb.h"
#include "server/protocol.hpp"

namespace {

using namespace dsinfer;
using namespace dsinfer::server;

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "*** fuzz invariant violated: %s\n", what);
    std::abort();
}

RequestLimits small_limits() {
    RequestLimits l;
    l.max_tensor_elements = 4096;
    l.max_total_input_bytes = 64 * 1024;
    l.max_inputs = 8;
    l.max_outputs = 8;
    l.max_json_depth = 16;
    return l;
}

void check_outcome(const ApiError& e, const InferRequest& r, const RequestLimits& limits) {
    if (!e.ok()) {
        if (e.code != ApiCode::bad_request && e.code != ApiCode::too_large &&
            e.code != ApiCode::unsupported)
            violated("a decoder failed with a class other than bad_request/too_large/unsupported");
        if (e.message.empty()) violated("an error without a message");
        return;
    }
    if (r.inputs.size() > limits.max_inputs) violated("more inputs than the limit");
    std::set<std::string> names;
    std::size_t total = 0;
    for (const auto& in : r.inputs) {
        if (in.name.empty() || !names.insert(in.name).second) violated("empty or repeated name");
        if (in.tensor.num_elements() > limits.max_tensor_elements)
            violated("a tensor over the element limit");
        total += in.tensor.num_bytes();
    }
    if (total > limits.max_total_input_bytes) violated("inputs over the byte limit");

    // Round trip through the response encoder (binary outputs: exact bytes).
    InferRequest echo;
    for (const auto& in : r.inputs) echo.outputs.push_back({in.name, true});
    EncodedResponse enc;
    if (!encode_json_response("m", "1", echo, r.inputs, enc).ok())
        violated("the encoder refused decoded inputs");
    if (r.inputs.empty()) return;
    // The response's header lists outputs, not inputs: rewrite it as a request by decoding the
    // same tensors from the binary section with their metadata.
    std::string request = "{\"inputs\":[";
    for (std::size_t i = 0; i < r.inputs.size(); ++i) {
        const Tensor& t = r.inputs[i].tensor;
        request += (i ? ",{" : "{");
        request += "\"name\":\"in" + std::to_string(i) + "\",\"datatype\":\"" +
                   std::string(protocol_dtype(t.dtype())) + "\",\"shape\":[";
        for (int d = 0; d < t.shape().num_dims(); ++d)
            request += (d ? "," : "") + std::to_string(t.shape()[d]);
        request += "],\"parameters\":{\"binary_data_size\":" + std::to_string(t.num_bytes()) + "}}";
    }
    request += "]}";
    InferRequest again;
    ApiError e2 = decode_json_request(request, std::string_view(enc.body).substr(enc.header_bytes),
                                      small_limits(), again);
    if (!e2.ok()) violated("the encoded outputs do not decode again");
    for (std::size_t i = 0; i < r.inputs.size(); ++i) {
        const Tensor& a = r.inputs[i].tensor;
        const Tensor& b = again.inputs[i].tensor;
        if (a.dtype() != b.dtype() || !(a.shape() == b.shape()) ||
            (a.num_bytes() && std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) != 0))
            violated("the round trip changed a tensor");
    }
}

void check_generate(std::string_view body, const RequestLimits& limits) {
    GenerateCall call;
    const ApiError e = decode_generate_request(body, limits, call);
    if (!e.ok()) {
        if (e.code != ApiCode::bad_request && e.code != ApiCode::too_large &&
            e.code != ApiCode::unsupported)
            violated("the generate decoder failed with a class other than a client error's");
        if (e.message.empty()) violated("a generate error without a message");
        return;
    }
    if (call.input_ids.empty() ||
        call.input_ids.size() > static_cast<std::size_t>(limits.max_tensor_elements))
        violated("input_ids empty or over the element limit");
    for (std::int64_t t : call.input_ids)
        if (t < 0) violated("a negative input id");
    if (call.max_tokens < 1) violated("max_tokens below 1");
    if (call.stop_token_ids.size() > 1024) violated("more than 1,024 stop ids");
    for (std::int64_t t : call.stop_token_ids)
        if (t < 0) violated("a negative stop id");
    if (call.id.size() > limits.max_name_bytes) violated("an id over the name limit");
    // The answers carry the call back: the id (when given) and the tokens.
    GenerateResult result;
    result.tokens = call.input_ids;
    result.prompt_tokens = static_cast<std::int64_t>(call.input_ids.size());
    const std::string answer = encode_generate_response("m", "1", call, result);
    const nlohmann::json doc = nlohmann::json::parse(answer, nullptr, false);
    if (!doc.is_object() ||
        doc.value("output_ids", nlohmann::json()) != nlohmann::json(call.input_ids) ||
        (!call.id.empty() && doc.value("id", std::string()) != call.id))
        violated("the generate answer does not carry the call back");
    const std::string event = generate_token_event("m", "1", call, 0, call.input_ids[0]);
    if (event.rfind("data: ", 0) != 0 || event.size() < 8 ||
        event.compare(event.size() - 2, 2, "\n\n") != 0 ||
        !nlohmann::json::parse(event.substr(6), nullptr, false).is_object())
        violated("a stream event is not one data: line of a JSON object");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // Invalid UTF-8 in string fields is a parse failure, not news: keep protobuf quiet.
    static const bool quiet = [] {
        google::protobuf::SetLogHandler(nullptr);
        return true;
    }();
    (void)quiet;
    if (size < 1) return 0;
    const RequestLimits limits = small_limits();
    InferRequest r;
    if ((data[0] & 3) == 2) {
        check_generate(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), limits);
    } else if ((data[0] & 1) == 0) {
        if (size < 3) return 0;
        std::size_t header =
            static_cast<std::size_t>(data[1]) | (static_cast<std::size_t>(data[2]) << 8);
        std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
        if (header > body.size()) header = body.size();
        check_outcome(decode_json_request(body.substr(0, header), body.substr(header), limits, r),
                      r, limits);
    } else {
        inference::ModelInferRequest req;
        if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
        check_outcome(decode_grpc_request(req, limits, r), r, limits);
    }
    return 0;
}
