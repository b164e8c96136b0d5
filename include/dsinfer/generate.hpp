// dsinfer/generate.hpp — token-by-token generation with decoder-only models (target
// dsinfer::serving): dsinfer::Generator loads a decoder exported with past/present key-value
// tensors, owns a paged KV cache, and advances many sequences together (continuous batching).
//
// Purpose: a decoder run as a plain InferenceEngine copies its whole cache in and out on every
// token. A Generator rewrites the model once (src/generate/decoder_graph.cpp): each layer's
// attention over past ++ new keys becomes one com.dsinfer PagedAttention node that writes the
// new keys and values into the Generator's cache blocks in place (dsinfer/kv_cache.hpp), the
// past/present inputs and outputs and the attention mask disappear, and the logits are computed
// only for the rows that are sampled. Each step then runs that graph once on the step's tokens
// (every running sequence's next token, and chunks of the prompts being prefilled), samples the
// next tokens and lets sequences join and leave at step boundaries (docs/GENERATE.md).
//
// Forms recognized: the Hugging Face export (inputs input_ids, attention_mask, position_ids,
// past_key_values.N.key/value; outputs logits, present.N.key/value; attention decomposed
// into MatMul/Softmax/MatMul) and the ONNX Attention op (opset 23) with past_key/past_value.
//
// Ownership/threading: a Generator is move-only; submit() and every other member are
// thread-safe. One scheduler thread runs the steps; streaming callbacks run on it (keep them
// short; a callback must not call back into the same Generator's wait()). The destructor
// cancels what is still running and waits for the thread.
//
// Usage:
//   auto gen = dsinfer::Generator::load("decoder.onnx", {.kv_cache_bytes = 256 << 20});
//   dsinfer::GenerateRequest req;
//   req.prompt = {1, 15043, 29892};
//   req.max_tokens = 64;
//   req.sampling.temperature = 0.8f; req.sampling.top_p = 0.95f; req.sampling.seed = 7;
//   req.on_token = [](std::int64_t token) { std::printf("%lld ", (long long)token); return true; };
//   dsinfer::GenerateResult r = gen.generate(req);         // or submit(req).get()
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/metrics.hpp"
#include "dsinfer/serving.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

/// The shape of a decoder, as detected from its graph (and its dsinfer.decoder metadata).
struct DecoderConfig {
    std::string form;  ///< "hf-past-present" or "onnx-attention"
    std::int64_t layers = 0;
    std::int64_t num_heads = 0;
    std::int64_t kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t vocab_size = 0;
    /// The model's position limit (max_position_embeddings from its metadata; 0: none stated,
    /// the KV budget is the limit).
    std::int64_t max_positions = 0;
    std::optional<std::int64_t> eos_token;
};

/// How each next token is chosen. temperature 0 is greedy (argmax, lowest id on ties); the
/// filters apply in this order: repetition penalty, temperature, top-k, top-p, min-p.
struct SamplingOptions {
    float temperature = 0.f;
    std::int64_t top_k = 0;          ///< 0: off
    float top_p = 1.f;               ///< nucleus mass kept, (0, 1]
    float min_p = 0.f;               ///< drop tokens below min_p * max probability, [0, 1)
    float repetition_penalty = 1.f;  ///< > 1 discourages tokens already in prompt or output
    std::uint64_t seed = 0;          ///< per request: the same seed gives the same tokens
};

enum class FinishReason { length, stop_token, cancelled, deadline, error };
const char* finish_reason_name(FinishReason r) noexcept;

struct GenerateRequest {
    std::vector<std::int64_t> prompt;  ///< token ids, at least one
    std::int64_t max_tokens = 128;     ///< generated tokens at most (>= 1)
    SamplingOptions sampling;
    std::vector<std::int64_t> stop_tokens;  ///< ends the sequence (the token is kept)
    bool stop_at_eos = true;  ///< also stop at the model's eos token when it states one
    std::optional<std::chrono::steady_clock::time_point> deadline;
    /// Called on the scheduler thread with each new token; return false to stop the sequence
    /// (finish reason cancelled).
    std::function<bool(std::int64_t token)> on_token;
};

struct GenerateResult {
    std::vector<std::int64_t> tokens;  ///< generated tokens (the prompt not included)
    FinishReason finish = FinishReason::length;
    Status status;  ///< ok unless finish is error (or the request was refused)
    std::int64_t prompt_tokens = 0;
    std::int64_t prefix_cached_tokens = 0;  ///< prompt tokens found in the shared prefix cache
    double ttft_ms = 0;                     ///< submit to first token
    double total_ms = 0;                    ///< submit to finish
    double decode_tokens_per_s = 0;         ///< after the first token
};

/// A submitted request: get() waits for the result; cancel() stops it at the next step
/// boundary (its tokens so far are kept, finish reason cancelled).
class DSINFER_SERVING_API GenerateHandle {
public:
    GenerateHandle() = default;
    GenerateResult get();
    bool ready() const;
    void cancel();
    bool valid() const noexcept { return state_ != nullptr; }

    struct State;  ///< the request's shared state (src/generate/generator.cpp)

private:
    friend class Generator;
    explicit GenerateHandle(std::shared_ptr<State> s) : state_(std::move(s)) {}
    std::shared_ptr<State> state_;
};

struct GeneratorOptions {
    /// Engine options of the rewritten decoder (threads, precision bf16 for BF16 products,
    /// optimization level...). The Generator sets transient_shapes (step sizes vary, and a
    /// size off a bucket edge must not compile kernels for itself) and, when `backends` is
    /// empty, runs on the "cpu" backend (dsinfer's packed GEMM reads the weights of a few-row
    /// step at the memory's bandwidth).
    EngineOptions engine;
    /// Memory of the KV cache (keys and values of every layer); the number of blocks is
    /// kv_cache_bytes / bytes per block.
    std::size_t kv_cache_bytes = std::size_t{256} << 20;
    DType kv_dtype = DType::f32;  ///< f32, f16, bf16 or i8 (per-token-head scales)
    std::int64_t block_tokens = 16;
    std::int64_t max_sequences = 16;      ///< running together in one step
    std::int64_t prefill_chunk = 512;     ///< prompt tokens of one sequence per step
    std::int64_t max_step_tokens = 1024;  ///< tokens of one step over all sequences
    bool prefix_sharing = true;           ///< reuse cached blocks of identical prompt prefixes
    /// "none" or "int8": INT8 MatMul weights (symmetric per output channel) with activations
    /// quantized per step (quantize_dynamic), run on the INT8 GEMM: decode is bound by
    /// reading weights, and they take a quarter of the bytes.
    std::string weights = "none";
    std::size_t max_queued = 1024;  ///< submit() beyond this: unavailable
    /// Run one step of each decode size (1, 2, 4, .. max_sequences rows) and one full prompt
    /// chunk at load, so that no request pays for building those kernels.
    bool warmup = true;
};

struct GeneratorMetrics {
    std::uint64_t requests = 0, finished = 0, cancelled = 0, errors = 0, preempted = 0;
    std::uint64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, prefix_hit_tokens = 0;
    std::int64_t running = 0, queued = 0;
    std::int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_peak = 0;
    std::size_t kv_bytes = 0;
    HistogramSnapshot ttft;          ///< submit to first token
    HistogramSnapshot inter_token;   ///< between a sequence's consecutive tokens
    HistogramSnapshot step;          ///< one engine step
    double mean_step_sequences = 0;  ///< sequences per step
};

class DSINFER_SERVING_API Generator {
public:
    /// Loads a decoder and prepares it (throws dsinfer::Error: invalid_model when the form is
    /// not recognized, naming what is missing).
    static Generator load(const std::filesystem::path& model, GeneratorOptions options = {});
    static StatusOr<Generator> try_load(const std::filesystem::path& model,
                                        GeneratorOptions options = {}) noexcept;

    Generator(Generator&&) noexcept;
    Generator& operator=(Generator&&) noexcept;
    ~Generator();

    /// Queues a request; it joins the running batch at the next step boundary. Invalid
    /// requests (empty prompt, max_tokens < 1, ids outside the vocabulary, a prompt past the
    /// position limit or larger than the whole KV budget, bad sampling options) come back at
    /// once with finish error and an invalid_argument status naming the problem.
    GenerateHandle submit(GenerateRequest request);
    /// submit(request).get().
    GenerateResult generate(GenerateRequest request);

    const DecoderConfig& config() const noexcept;
    GeneratorMetrics metrics() const;
    /// The rewritten decoder's engine (node descriptions, weight memory).
    const InferenceEngine& engine() const noexcept;

private:
    struct Impl;
    explicit Generator(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
