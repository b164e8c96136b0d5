// Next-token choice for the Generator (docs/GENERATE.md "Sampling"): greedy, or repetition
// penalty -> temperature -> top-k -> top-p -> min-p -> a draw from the sequence's own random
// stream (std::mt19937_64 seeded by the request), so a seed gives the same tokens whatever else
// shares the step.
// Internal (namespace dsinfer::detail) to the generate room.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "dsinfer/generate.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// invalid_argument naming the option when out of range (temperature < 0 or not finite,
/// top_k < 0, top_p outside (0, 1], min_p outside [0, 1), repetition_penalty <= 0).
Status check_sampling(const SamplingOptions& o);

class Sampler {
public:
    explicit Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}
    /// The next token from `logits` (one row of vocabulary size; modified in place by the
    /// penalty); `history` is the prompt and the tokens generated so far. `scratch` is reused.
    std::int64_t sample(std::span<float> logits, std::span<const std::int64_t> history);

private:
    SamplingOptions o_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, std::int32_t>> cand_;
};

}  // namespace dsinfer::detail
