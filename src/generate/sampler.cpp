// Next-token choice (sampler.hpp).
#include "generate/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::detail {

Status check_sampling(const SamplingOptions& o) {
    DSINFER_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.f, ErrorCode::invalid_argument,
                  "sampling temperature must be finite and >= 0, got ", o.temperature);
    DSINFER_CHECK(o.top_k >= 0, ErrorCode::invalid_argument, "sampling top_k must be >= 0, got ",
                  o.top_k);
    DSINFER_CHECK(o.top_p > 0.f && o.top_p <= 1.f, ErrorCode::invalid_argument,
                  "sampling top_p must be in (0, 1], got ", o.top_p);
    DSINFER_CHECK(o.min_p >= 0.f && o.min_p < 1.f, ErrorCode::invalid_argument,
                  "sampling min_p must be in [0, 1), got ", o.min_p);
    DSINFER_CHECK(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0.f,
                  ErrorCode::invalid_argument, "sampling repetition_penalty must be > 0, got ",
                  o.repetition_penalty);
    return Status::ok();
}

std::int64_t Sampler::sample(std::span<float> logits, std::span<const std::int64_t> history) {
    const auto n = static_cast<std::int64_t>(logits.size());
    if (o_.repetition_penalty != 1.f)
        for (std::int64_t t : history)
            if (t >= 0 && t < n) {
                float& l = logits[static_cast<std::size_t>(t)];
                l = l > 0.f ? l / o_.repetition_penalty : l * o_.repetition_penalty;
            }
    // NaN logits never win (a NaN row gives token 0 rather than an out-of-range id).
    if (o_.temperature == 0.f) {
        std::int64_t best = 0;
        float bv = -std::numeric_limits<float>::infinity();
        for (std::int64_t i = 0; i < n; ++i)
            if (logits[static_cast<std::size_t>(i)] > bv) {
                bv = logits[static_cast<std::size_t>(i)];
                best = i;
            }
        return best;
    }
    cand_.clear();
    for (std::int64_t i = 0; i < n; ++i) {
        const float l = logits[static_cast<std::size_t>(i)];
        if (!std::isnan(l)) cand_.emplace_back(l / o_.temperature, static_cast<std::int32_t>(i));
    }
    if (cand_.empty()) return 0;
    // Highest first, lower id first among equals.
    auto by_logit = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::size_t keep = cand_.size();
    if (o_.top_k > 0 && static_cast<std::size_t>(o_.top_k) < keep) {
        keep = static_cast<std::size_t>(o_.top_k);
        std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep),
                          cand_.end(), by_logit);
    } else {
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    cand_.resize(keep);
    // Softmax over what is kept (in place: first = probability).
    const float mx = cand_[0].first;
    double sum = 0;
    for (auto& c : cand_) {
        c.first = std::exp(c.first - mx);
        sum += c.first;
    }
    for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
    if (o_.top_p < 1.f) {
        double mass = 0;
        std::size_t k = 0;
        while (k < cand_.size()) {
            mass += cand_[k].first;
            ++k;
            if (mass >= o_.top_p) break;
        }
        cand_.resize(std::max<std::size_t>(k, 1));
    }
    if (o_.min_p > 0.f) {
        const float floor = o_.min_p * cand_[0].first;
        std::size_t k = 1;
        while (k < cand_.size() && cand_[k].first >= floor) ++k;
        cand_.resize(k);
    }
    double total = 0;
    for (const auto& c : cand_) total += c.first;
    // A uniform draw in [0, total) from the sequence's own stream.
    const double u = std::generate_canonical<double, 53>(rng_) * total;
    double acc = 0;
    for (const auto& c : cand_) {
        acc += c.first;
        if (u < acc) return c.second;
    }
    return cand_.back().second;
}

}  // namespace dsinfer::detail
