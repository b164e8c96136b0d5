// tools/tool_json.hpp — the JSON the command-line tools print and read: nlohmann::json
// (Debian's nlohmann-json3-dev, header-only; tools only, never in include/dsinfer).
//
// Purpose: one way to write a document (ds-benchmark, ds-loadgen and ds-conformance --json,
// make-bad-models' manifest.json): bench::Json keeps object keys in insertion order, so the
// output reads in the order the code builds it; json_text() dumps it with NaN and infinities as
// null and invalid UTF-8 (a model path, an engine message) replaced by U+FFFD instead of
// throwing. Strings are escaped by the library, never by hand.
//
// Usage:
//   bench::Json doc = {{"model", path}, {"seq", bench::json_or_null(seq)}};
//   std::cout << bench::json_text(doc) << "\n";   // one line
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dsinfer::bench {

/// A JSON document whose objects keep their keys in insertion order.
using Json = nlohmann::ordered_json;

/// `doc` as text: on one line (indent < 0) or indented by `indent` spaces; NaN and infinities
/// as null, invalid UTF-8 as U+FFFD.
inline std::string json_text(const Json& doc, int indent = -1) {
    return doc.dump(indent, ' ', false, Json::error_handler_t::replace);
}

/// `v`, or null when it has no value.
template <class T>
Json json_or_null(const std::optional<T>& v) {
    return v ? Json(*v) : Json(nullptr);
}

}  // namespace dsinfer::bench
