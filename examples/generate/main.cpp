// dsinfer-generate-example: streams tokens from a decoder-only model with dsinfer::Generator,
// two requests at once (continuous batching), one greedy and one sampled with a seed.
//   dsinfer-generate-example MODEL.onnx
// (a model from `tools/make_models.py --only llama_tiny`, or any Hugging Face decoder export
// with past_key_values inputs). Token ids in, token ids out: tokenization is the application's.
#include <cstdio>
#include <mutex>

#include <dsinfer/generate.hpp>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
        return 2;
    }
    try {
        dsinfer::GeneratorOptions options;
        options.engine.num_threads = 2;
        options.kv_cache_bytes = std::size_t{64} << 20;  // the KV cache's whole budget
        dsinfer::Generator gen = dsinfer::Generator::load(argv[1], options);
        std::printf("%s decoder: %lld layers, %lld KV heads of %lld, vocabulary %lld\n",
                    gen.config().form.c_str(), static_cast<long long>(gen.config().layers),
                    static_cast<long long>(gen.config().kv_heads),
                    static_cast<long long>(gen.config().head_dim),
                    static_cast<long long>(gen.config().vocab_size));
        std::mutex print;
        auto request = [&](int id, std::vector<std::int64_t> prompt, float temperature) {
            dsinfer::GenerateRequest r;
            r.prompt = std::move(prompt);
            r.max_tokens = 24;
            r.sampling.temperature = temperature;
            r.sampling.top_p = 0.9f;
            r.sampling.seed = 7;
            r.on_token = [&print, id](std::int64_t token) {  // on the scheduler thread
                std::lock_guard lock(print);
                std::printf("[%d] %lld\n", id, static_cast<long long>(token));
                return true;
            };
            return gen.submit(std::move(r));
        };
        dsinfer::GenerateHandle greedy = request(0, {1, 17, 42, 99}, 0.f);
        dsinfer::GenerateHandle sampled = request(1, {5, 6, 7}, 0.8f);
        for (auto* h : {&greedy, &sampled}) {
            const dsinfer::GenerateResult r = h->get();
            if (r.finish == dsinfer::FinishReason::error) {
                std::fprintf(stderr, "error: %s\n", r.status.to_string().c_str());
                return 1;
            }
            std::printf("%zu tokens (%s), time to first token %.2f ms, %.1f tokens/s\n",
                        r.tokens.size(), dsinfer::finish_reason_name(r.finish), r.ttft_ms,
                        r.decode_tokens_per_s);
        }
        const dsinfer::GeneratorMetrics m = gen.metrics();
        std::printf("%llu steps, %.2f sequences per step, KV blocks peak %lld of %lld\n",
                    static_cast<unsigned long long>(m.steps), m.mean_step_sequences,
                    static_cast<long long>(m.kv_blocks_peak), static_cast<long long>(m.kv_blocks_total));
    } catch (const dsinfer::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
