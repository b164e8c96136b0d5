// One generation run on a dsinfer::Generator and its figures, for the tools that measure one
// (ds-generate, and ds-benchmark --generate): every prompt submitted at once (continuous
// batching), the results awaited, each token's arrival timed, then per-sequence prefill and
// decode speeds, time to first token and inter-token gaps. Header-only, tools only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "dsinfer/generate.hpp"
#include "stats.hpp"

namespace dsinfer::bench {

/// n token ids drawn uniformly from [0, vocab) with `seed` (reproducible prompts).
inline std::vector<std::int64_t> random_prompt(std::int64_t n, std::int64_t vocab,
                                               std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> d(0, std::max<std::int64_t>(vocab, 1) - 1);
    std::vector<std::int64_t> p(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
    for (auto& t : p) t = d(rng);
    return p;
}

/// What one run gave: the results in submission order, its wall time, and the gaps between
/// consecutive tokens of each sequence (every sequence's, in milliseconds).
struct GenerationRun {
    std::vector<GenerateResult> results;
    double wall_s = 0;
    std::vector<double> inter_token_ms;

    /// Per sequence, prompt tokens / time to first token (sequences with a first token).
    std::vector<double> prefill_tokens_per_s() const {
        std::vector<double> v;
        for (const auto& r : results)
            if (r.ttft_ms > 0)
                v.push_back(static_cast<double>(r.prompt_tokens) / (r.ttft_ms / 1e3));
        return v;
    }
    /// Per sequence, tokens after the first / the time they took.
    std::vector<double> decode_tokens_per_s() const {
        std::vector<double> v;
        for (const auto& r : results)
            if (r.decode_tokens_per_s > 0) v.push_back(r.decode_tokens_per_s);
        return v;
    }
    std::vector<double> ttft_ms() const {
        std::vector<double> v;
        for (const auto& r : results)
            if (r.ttft_ms > 0) v.push_back(r.ttft_ms);
        return v;
    }
    std::int64_t generated() const {
        std::int64_t n = 0;
        for (const auto& r : results) n += static_cast<std::int64_t>(r.tokens.size());
        return n;
    }
    /// Every sequence's tokens over the wall time.
    double aggregate_tokens_per_s() const {
        return wall_s > 0 ? static_cast<double>(generated()) / wall_s : 0.0;
    }
    /// The first result that ended with an error, or null.
    const GenerateResult* first_error() const {
        for (const auto& r : results)
            if (r.finish == FinishReason::error) return &r;
        return nullptr;
    }
};

/// Submits `request` once per prompt (its prompt replaced), all at once, and waits for every
/// result. Each token's arrival is timed in the request's streaming callback, which then calls
/// the request's own on_token (if any).
inline GenerationRun run_generation(Generator& gen,
                                    const std::vector<std::vector<std::int64_t>>& prompts,
                                    const GenerateRequest& request) {
    using Clock = std::chrono::steady_clock;
    // One arrival log per sequence; the callback of a sequence runs on the generator's step
    // thread, one call at a time per sequence.
    struct Log {
        Clock::time_point last{};
        bool any = false;
        std::vector<double> gaps;
    };
    std::vector<std::shared_ptr<Log>> logs;
    std::vector<GenerateHandle> handles;
    const auto t0 = Clock::now();
    for (const auto& p : prompts) {
        auto log = std::make_shared<Log>();
        logs.push_back(log);
        GenerateRequest r = request;
        r.prompt = p;
        const std::function<bool(std::int64_t)> inner = request.on_token;
        r.on_token = [log, inner](std::int64_t token) {
            const auto now = Clock::now();
            if (log->any)
                log->gaps.push_back(
                    std::chrono::duration<double, std::milli>(now - log->last).count());
            log->last = now;
            log->any = true;
            return inner ? inner(token) : true;
        };
        handles.push_back(gen.submit(std::move(r)));
    }
    GenerationRun run;
    for (auto& h : handles) run.results.push_back(h.get());
    run.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const auto& log : logs)
        run.inter_token_ms.insert(run.inter_token_ms.end(), log->gaps.begin(), log->gaps.end());
    return run;
}

}  // namespace dsinfer::bench
