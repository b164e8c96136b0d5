// The Generator's rewrite of a decoder-only model (docs/GENERATE.md "The rewrite"): finds each
// layer's attention over past ++ new keys and values, replaces it with one com.dsinfer
// PagedAttention node, removes the past/present inputs and outputs and what only fed them (the
// attention mask, the concatenations, the repeat of KV heads), and adds the input
// `dsinfer_logits_rows` so that the logits are computed only for the rows a step samples.
//
// Internal (namespace dsinfer::detail) to the generate room (src/generate/).
#pragma once

#include <string>

#include "dsinfer/generate.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// The input added for the sampled rows: int64 [N], indices into the step's token rows.
inline constexpr const char* kLogitsRowsInput = "dsinfer_logits_rows";

struct DecoderGraphInfo {
    DecoderConfig config;
    std::string input_ids;     ///< the token input
    std::string position_ids;  ///< empty when the model takes none
    std::string logits;        ///< the logits output
    bool logits_rows = false;  ///< kLogitsRowsInput was added (else logits cover every row)
};

/// Rewrites `g` in place (see above). invalid_model naming what was not found when the graph is
/// not a decoder in a recognized form; the graph is then unchanged only in part (discard it).
StatusOr<DecoderGraphInfo> prepare_decoder_graph(Graph& g);

}  // namespace dsinfer::detail
