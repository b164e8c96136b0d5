// ds-generate: token generation with a decoder-only ONNX model on dsinfer::Generator (prompt
// token ids in, token ids out), with its speeds, time to first token and memory.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dsinfer/generate.hpp"
#include "generate_run.hpp"
#include "tool_cli.hpp"

namespace {

const char* const kProgram = "ds-generate";

const char* const kSynopsis =
    "ds-generate --model FILE (--prompt-ids IDS | --random-prompt N) [options]\n"
    "       ds-generate --help | --version\n";

const char* const kDescription =
    "Loads a decoder-only ONNX model (the Hugging Face past/present export, or the ONNX\n"
    "Attention op with past inputs) into a dsinfer::Generator: the attention over the cache\n"
    "becomes PagedAttention over an engine-held paged KV cache, and every prompt is prefilled\n"
    "in chunks and decoded token by token, all prompts together (continuous batching).\n"
    "Prints the generated token ids of each prompt, then prefill and decode speeds, time to\n"
    "first token, inter-token latency and peak RSS; --json prints one JSON object instead\n"
    "(tokens, prefill_tokens_per_s, decode_tokens_per_s, ttft_ms, peak_rss_bytes, ...).\n"
    "Several prompts: separate them with ';' in --prompt-ids, or --copies N runs N copies.\n";

const char* const kExamples =
    "  ds-generate --model llama_tiny.onnx --prompt-ids 1,2,3 --max-tokens 32\n"
    "    greedy continuation of one prompt\n"
    "  ds-generate --model llama_100m.onnx --random-prompt 512 --max-tokens 128 --json\n"
    "    prefill and decode speed on a 512-token prompt\n"
    "  ds-generate --model llama_100m.onnx --random-prompt 64 --copies 16 --max-tokens 128\n"
    "    16 sequences decoded together\n"
    "  ds-generate --model m.onnx --prompt-ids 5,6 --temperature 0.8 --top-p 0.9 --seed 7\n"
    "    sampled, reproducibly\n";

const char* const kExitStatus =
    "0  every sequence finished (length, stop token)\n"
    "1  the model could not be loaded or a sequence ended with an error\n"
    "2  bad command line (nothing runs)\n";

const dsinfer::bench::ManPage kManPage{kProgram,  "generate tokens with a decoder-only model",
                                       kSynopsis, kDescription,
                                       kExamples, kExitStatus};

std::vector<std::vector<std::int64_t>> parse_prompts(const std::string& s) {
    std::vector<std::vector<std::int64_t>> out;
    std::stringstream all(s);
    std::string one;
    while (std::getline(all, one, ';')) {
        std::vector<std::int64_t> ids;
        std::stringstream ss(one);
        std::string tok;
        while (std::getline(ss, tok, ',')) {
            if (tok.find_first_not_of(" \t") == std::string::npos) continue;
            std::size_t used = 0;
            const long long v = std::stoll(tok, &used);
            if (tok.find_first_not_of(" \t", used) != std::string::npos)
                throw std::invalid_argument(tok);
            ids.push_back(v);
        }
        out.push_back(std::move(ids));
    }
    return out;
}

std::int64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

/// VmRSS of /proc/self/status in bytes, or -1.
std::int64_t current_rss_bytes() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (f == nullptr) return -1;
    char line[256];
    std::int64_t kb = -1;
    while (std::fgets(line, sizeof line, f) != nullptr)
        if (std::sscanf(line, "VmRSS: %lld", reinterpret_cast<long long*>(&kb)) == 1) break;
    std::fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app(kManPage.summary, kProgram);
    dsinfer::bench::use_man_page(app, kManPage, 28);
    app.allow_extras();
    std::string model, prompt_ids, stop_ids, kv_dtype = "f32", weights = "none", precision = "fp32";
    std::int64_t random_prompt = 0, copies = 1, threads = 2, kv_mb = 256;
    dsinfer::GenerateRequest req;
    dsinfer::GeneratorOptions go;
    bool json = false, stream = false;
    app.add_option("--model", model, "the decoder ONNX file");
    app.add_option("--prompt-ids", prompt_ids, "prompt token ids: 1,2,3 (several: 1,2;3,4)");
    app.add_option("--random-prompt", random_prompt, "a prompt of N random ids (seeded)");
    app.add_option("--copies", copies, "run each prompt N times, all at once (default 1)");
    app.add_option("--max-tokens", req.max_tokens, "tokens to generate per prompt (default 128)");
    app.add_option("--temperature", req.sampling.temperature, "0 (default): greedy");
    app.add_option("--top-k", req.sampling.top_k, "keep the k most likely (0: off)");
    app.add_option("--top-p", req.sampling.top_p, "nucleus mass (1: off)");
    app.add_option("--min-p", req.sampling.min_p, "drop below min-p x the top probability");
    app.add_option("--repetition-penalty", req.sampling.repetition_penalty, "1: off");
    app.add_option("--seed", req.sampling.seed, "sampling seed (default 0)");
    app.add_option("--stop-ids", stop_ids, "token ids that end a sequence: 2,13");
    bool ignore_eos = false;
    app.add_flag("--ignore-eos", ignore_eos, "do not stop at the model's end-of-sequence token");
    app.add_option("--threads", threads, "engine threads (default 2)");
    app.add_option("--kv-cache-mb", kv_mb, "KV cache budget in MiB (default 256)");
    app.add_option("--kv-dtype", kv_dtype, "cache storage: f32 (default), f16, bf16, i8");
    app.add_option("--block-tokens", go.block_tokens, "positions per cache block (default 16)");
    app.add_option("--max-sequences", go.max_sequences, "sequences per step (default 16)");
    app.add_option("--prefill-chunk", go.prefill_chunk, "prompt tokens per step (default 512)");
    app.add_option("--weights", weights, "none (default) or int8 (weight-only INT8)");
    app.add_option("--precision", precision, "fp32 (default) or bf16 products");
    std::vector<std::string> backends;
    app.add_option("--backends", backends, "CPU backends in order (default: cpu)")->delimiter(',');
    app.add_flag("--stream", stream, "print each token as it comes (one prompt)");
    app.add_flag("--json", json, "print one JSON object");
    dsinfer::bench::add_version_flag(app, kProgram);
    if (auto stop = dsinfer::bench::parse_command_line(app, kManPage, argc, argv)) return *stop;
    if (model.empty()) return dsinfer::bench::command_line_error(kManPage, "--model is required");
    if (prompt_ids.empty() == (random_prompt == 0))
        return dsinfer::bench::command_line_error(kManPage,
                                                  "give one of --prompt-ids and --random-prompt");
    if (copies < 1 || threads < 1 || kv_mb < 1)
        return dsinfer::bench::command_line_error(
            kManPage, "--copies, --threads and --kv-cache-mb must be >= 1");
    std::vector<std::vector<std::int64_t>> prompts;
    try {
        if (!prompt_ids.empty()) prompts = parse_prompts(prompt_ids);
        if (!stop_ids.empty()) {
            const auto s = parse_prompts(stop_ids);
            if (!s.empty()) req.stop_tokens = s[0];
        }
    } catch (const std::exception&) {
        return dsinfer::bench::command_line_error(
            kManPage, "--prompt-ids/--stop-ids: expected integers like 1,2,3");
    }
    const std::map<std::string, dsinfer::DType> dtypes = {{"f32", dsinfer::DType::f32},
                                                          {"f16", dsinfer::DType::f16},
                                                          {"bf16", dsinfer::DType::bf16},
                                                          {"i8", dsinfer::DType::i8}};
    if (!dtypes.contains(kv_dtype))
        return dsinfer::bench::command_line_error(kManPage,
                                                  "--kv-dtype: expected f32, f16, bf16 or i8");
    if (precision != "fp32" && precision != "bf16")
        return dsinfer::bench::command_line_error(kManPage, "--precision: expected fp32 or bf16");
    go.kv_dtype = dtypes.at(kv_dtype);
    req.stop_at_eos = !ignore_eos;
    go.kv_cache_bytes = static_cast<std::size_t>(kv_mb) << 20;
    go.weights = weights;
    go.engine.num_threads = static_cast<int>(threads);
    if (!backends.empty()) go.engine.backends = backends;
    if (precision == "bf16") go.engine.precision = dsinfer::Precision::bf16;

    auto loaded = dsinfer::Generator::try_load(model, go);
    if (!loaded.is_ok()) {
        std::cerr << kProgram << ": " << loaded.status().to_string() << "\n";
        return 1;
    }
    dsinfer::Generator gen = std::move(loaded).value();
    const std::int64_t rss_loaded = current_rss_bytes();
    if (random_prompt > 0)
        prompts.push_back(dsinfer::bench::random_prompt(random_prompt, gen.config().vocab_size,
                                                        req.sampling.seed + 12345));
    if (stream && prompts.size() * static_cast<std::size_t>(copies) == 1)
        req.on_token = [](std::int64_t t) {
            std::printf("%lld ", static_cast<long long>(t));
            std::fflush(stdout);
            return true;
        };
    std::vector<std::vector<std::int64_t>> submitted;
    for (const auto& p : prompts)
        for (std::int64_t c = 0; c < copies; ++c) submitted.push_back(p);
    const dsinfer::bench::GenerationRun run = dsinfer::bench::run_generation(gen, submitted, req);
    const std::vector<dsinfer::GenerateResult>& results = run.results;
    if (stream) std::printf("\n");

    int rc = 0;
    nlohmann::json tokens = nlohmann::json::array(), finish = nlohmann::json::array();
    for (const auto& r : results) {
        if (r.finish == dsinfer::FinishReason::error) {
            std::cerr << kProgram << ": " << r.status.to_string() << "\n";
            rc = 1;
        }
        tokens.push_back(r.tokens);
        finish.push_back(dsinfer::finish_reason_name(r.finish));
    }
    using dsinfer::bench::median;
    const double prefill = median(run.prefill_tokens_per_s());
    const double decode = median(run.decode_tokens_per_s());
    const double ttft = median(run.ttft_ms());
    const double wall = run.wall_s;
    const dsinfer::GeneratorMetrics m = gen.metrics();
    const auto ms = [](double ns) { return ns / 1e6; };
    nlohmann::json out = {
        {"model", model},
        {"form", gen.config().form},
        {"sequences", results.size()},
        {"tokens", results.size() == 1 ? tokens[0] : tokens},
        {"finish", results.size() == 1 ? finish[0] : finish},
        {"prefill_tokens_per_s", prefill},
        {"decode_tokens_per_s", decode},
        {"aggregate_tokens_per_s", run.aggregate_tokens_per_s()},
        {"ttft_ms", ttft},
        {"inter_token_ms",
         {{"p50", ms(m.inter_token.quantile_ns(0.5))},
          {"p99", ms(m.inter_token.quantile_ns(0.99))}}},
        {"steps", m.steps},
        {"mean_step_sequences", m.mean_step_sequences},
        {"preempted", m.preempted},
        {"prefix_hit_tokens", m.prefix_hit_tokens},
        {"kv_cache_bytes", m.kv_bytes},
        {"kv_blocks_peak", m.kv_blocks_peak},
        {"kv_dtype", kv_dtype},
        {"weights", weights},
        {"threads", threads},
        {"wall_s", wall},
        {"peak_rss_bytes", peak_rss_bytes()},
        {"rss_after_load_bytes", rss_loaded},
        {"rss_end_bytes", current_rss_bytes()},
        {"kv_bytes_used_peak",
         static_cast<std::int64_t>(m.kv_blocks_peak) *
             static_cast<std::int64_t>(m.kv_bytes / std::max<std::int64_t>(m.kv_blocks_total, 1))},
    };
    if (json) {
        std::cout << out.dump() << "\n";
        return rc;
    }
    if (!stream)
        for (std::size_t i = 0; i < results.size(); ++i) {
            std::cout << "sequence " << i << " (" << finish[i].get<std::string>() << "):";
            for (auto t : results[i].tokens) std::cout << " " << t;
            std::cout << "\n";
        }
    std::printf(
        "prefill %.1f tokens/s, decode %.1f tokens/s (median per sequence), aggregate %.1f "
        "tokens/s\nttft %.2f ms, inter-token p50 %.2f ms p99 %.2f ms, %llu steps, peak RSS "
        "%.1f MiB\n",
        prefill, decode, out["aggregate_tokens_per_s"].get<double>(), ttft,
        ms(m.inter_token.quantile_ns(0.5)), ms(m.inter_token.quantile_ns(0.99)),
        static_cast<unsigned long long>(m.steps),
        static_cast<double>(peak_rss_bytes()) / (1 << 20));
    return rc;
}
