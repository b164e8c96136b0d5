// dsinfer::Generator (dsinfer/generate.hpp, docs/GENERATE.md): the rewritten decoder, the paged
// KV cache and one scheduler thread that runs the steps.
//
// A step: admit queued requests while sequences and cache blocks allow (FIFO), then take every
// decoding sequence's next token and, within max_step_tokens, a chunk of each prompt being
// prefilled; reserve their cache positions (when blocks run out, the most recently admitted
// other sequence is preempted: its blocks freed, it goes back to the queue's front and is
// recomputed later; a sequence alone that still does not fit ends with resource_exhausted);
// run the engine once on the step's tokens with the step's KvCacheStep; sample the sequences
// whose last row was computed; stream, check stops, deadlines and cancellation; finish.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "dsinfer/generate.hpp"
#include "dsinfer/onnx.hpp"
#include "dsinfer/quantize.hpp"
#include "generate/decoder_graph.hpp"
#include "generate/kv_cache.hpp"
#include "generate/sampler.hpp"

namespace dsinfer {

using Clock = std::chrono::steady_clock;
using std::int64_t;

const char* finish_reason_name(FinishReason r) noexcept {
    switch (r) {
        case FinishReason::length: return "length";
        case FinishReason::stop_token: return "stop_token";
        case FinishReason::cancelled: return "cancelled";
        case FinishReason::deadline: return "deadline";
        case FinishReason::error: return "error";
    }
    return "?";
}

struct GenerateHandle::State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    GenerateResult result;
    std::atomic<bool> cancelled{false};
};

GenerateResult GenerateHandle::get() {
    if (!state_)
        return GenerateResult{
            {}, FinishReason::error, Status(ErrorCode::invalid_argument, "empty GenerateHandle")};
    std::unique_lock lk(state_->mu);
    state_->cv.wait(lk, [&] { return state_->done; });
    return state_->result;
}
bool GenerateHandle::ready() const {
    if (!state_) return false;
    std::lock_guard lk(state_->mu);
    return state_->done;
}
void GenerateHandle::cancel() {
    if (state_) state_->cancelled.store(true);
}

namespace {

struct Sequence {
    std::shared_ptr<GenerateHandle::State> state;
    GenerateRequest req;
    std::vector<int64_t> tokens;  // prompt ++ generated: what the cache must hold
    int64_t prompt_len = 0;       // of the original request
    int64_t cached = 0;           // positions in the cache
    int64_t prefix_hit = 0;
    std::vector<std::int32_t> table;
    int64_t registered = 0;  // prompt blocks in the prefix cache
    detail::Sampler sampler;
    Clock::time_point submitted, first_token, last_token;
    int64_t generated = 0;
    bool has_first = false;
    // this step
    int64_t step_n = 0;
    bool sample_now = false;
    explicit Sequence(const SamplingOptions& o) : sampler(o) {}
    int64_t remaining_prompt() const { return static_cast<int64_t>(tokens.size()) - cached; }
};

void finish(Sequence& s, FinishReason r, Status st = Status::ok()) {
    const auto now = Clock::now();
    GenerateResult res;
    res.tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    res.finish = r;
    res.status = std::move(st);
    res.prompt_tokens = s.prompt_len;
    res.prefix_cached_tokens = s.prefix_hit;
    res.total_ms = std::chrono::duration<double, std::milli>(now - s.submitted).count();
    if (s.has_first) {
        res.ttft_ms =
            std::chrono::duration<double, std::milli>(s.first_token - s.submitted).count();
        const double dt = std::chrono::duration<double>(s.last_token - s.first_token).count();
        if (s.generated > 1 && dt > 0)
            res.decode_tokens_per_s = static_cast<double>(s.generated - 1) / dt;
    }
    std::lock_guard lk(s.state->mu);
    s.state->result = std::move(res);
    s.state->done = true;
    s.state->cv.notify_all();
}

}  // namespace

struct Generator::Impl {
    GeneratorOptions opts;
    detail::DecoderGraphInfo info;
    std::unique_ptr<InferenceEngine> engine;
    std::unique_ptr<detail::PagedKvCache> cache;

    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<Sequence>> queue;
    bool stopping = false;
    std::thread thread;

    // scheduler-thread state
    std::vector<std::unique_ptr<Sequence>> running;

    // metrics
    std::atomic<std::uint64_t> requests{0}, finished{0}, cancelled{0}, errors{0}, preempted{0};
    std::atomic<std::uint64_t> steps{0}, prompt_tokens{0}, generated_tokens{0}, prefix_hits{0};
    std::atomic<std::uint64_t> step_sequences{0};
    std::atomic<int64_t> n_running{0}, blocks_used{0}, blocks_peak{0};
    LatencyHistogram ttft, itl, step_time;

    ~Impl() {
        {
            std::lock_guard lk(mu);
            stopping = true;
        }
        cv.notify_all();
        if (thread.joinable()) thread.join();
    }

    Status validate(const GenerateRequest& r) const {
        DSINFER_CHECK(!r.prompt.empty(), ErrorCode::invalid_argument, "the prompt is empty");
        DSINFER_CHECK(r.max_tokens >= 1, ErrorCode::invalid_argument,
                      "max_tokens must be >= 1, got ", r.max_tokens);
        const int64_t vocab = info.config.vocab_size;
        for (std::size_t i = 0; i < r.prompt.size(); ++i)
            DSINFER_CHECK(r.prompt[i] >= 0 && r.prompt[i] < vocab, ErrorCode::invalid_argument,
                          "prompt token ", i, " is ", r.prompt[i], ", outside the vocabulary [0, ",
                          vocab, ")");
        for (int64_t t : r.stop_tokens)
            DSINFER_CHECK(t >= 0 && t < vocab, ErrorCode::invalid_argument, "stop token ", t,
                          " is outside the vocabulary [0, ", vocab, ")");
        const int64_t limit = info.config.max_positions;
        DSINFER_CHECK(limit <= 0 || static_cast<int64_t>(r.prompt.size()) < limit,
                      ErrorCode::invalid_argument, "the prompt has ", r.prompt.size(),
                      " tokens; the model's position limit is ", limit);
        DSINFER_CHECK(
            cache->blocks_for(static_cast<int64_t>(r.prompt.size()) + 1) <= cache->num_blocks(),
            ErrorCode::resource_exhausted, "the prompt of ", r.prompt.size(), " tokens needs ",
            cache->blocks_for(static_cast<int64_t>(r.prompt.size()) + 1),
            " KV blocks; the cache holds ", cache->num_blocks(), " (", cache->bytes(), " bytes of ",
            cache->block_tokens(), "-token blocks)");
        return detail::check_sampling(r.sampling);
    }

    void loop();
    bool step();
    /// One step of T tokens of token id 0 through a throw-away sequence, so that the kernels of
    /// that step size are built at load rather than on a request's time.
    void warm(int64_t T) {
        std::vector<std::int32_t> table;
        if (!cache->reserve(table, T)) return;
        Tensor ids = Tensor::zeros(DType::i64, Shape{1, T});
        Tensor pos = Tensor::empty(DType::i64, Shape{1, T});
        for (int64_t i = 0; i < T; ++i) pos.data<int64_t>()[i] = i;
        const int64_t begin[2] = {0, T}, past[1] = {0},
                      len[1] = {static_cast<int64_t>(table.size())};
        const std::int32_t* tables[1] = {table.data()};
        KvCacheStep kv;
        cache->fill(kv);
        kv.num_seqs = 1;
        kv.token_begin = begin;
        kv.past = past;
        kv.block_table = tables;
        kv.table_len = len;
        std::vector<NamedTensor> inputs{{info.input_ids, ids}};
        if (!info.position_ids.empty()) inputs.push_back({info.position_ids, pos});
        if (info.logits_rows)
            inputs.push_back(
                {detail::kLogitsRowsInput, Tensor::from_vector<int64_t>(Shape{1}, {T - 1})});
        RunOptions ro;
        ro.kv_cache = &kv;
        std::vector<NamedTensor> outputs;
        (void)engine->try_run(inputs, outputs, ro);
        cache->release(table);
    }
    void record_blocks() {
        const int64_t used = cache->used_blocks();
        blocks_used.store(used);
        if (used > blocks_peak.load()) blocks_peak.store(used);
    }
};

void Generator::Impl::loop() {
    for (;;) {
        {
            std::unique_lock lk(mu);
            cv.wait(lk, [&] { return stopping || !queue.empty() || !running.empty(); });
            if (stopping) {
                for (auto& s : queue) finish(*s, FinishReason::cancelled);
                queue.clear();
                lk.unlock();
                for (auto& s : running) {
                    cache->release(s->table);
                    record_blocks();
                    finish(*s, FinishReason::cancelled);
                }
                running.clear();
                return;
            }
        }
        step();
    }
}

bool Generator::Impl::step() {
    const auto now = Clock::now();
    // Drop what was cancelled or ran out of time.
    auto ended = [&](Sequence& s) -> bool {
        if (s.state->cancelled.load()) {
            cancelled.fetch_add(1);
            finish(s, FinishReason::cancelled);
            return true;
        }
        if (s.req.deadline && now > *s.req.deadline) {
            finish(s, FinishReason::deadline,
                   Status(ErrorCode::deadline_exceeded, "generation deadline exceeded"));
            return true;
        }
        return false;
    };
    for (auto it = running.begin(); it != running.end();) {
        if (ended(**it)) {
            cache->release((*it)->table);
            record_blocks();
            it = running.erase(it);
        } else {
            ++it;
        }
    }
    // Admit: FIFO while a slot is free and the first chunk's blocks are available.
    {
        std::lock_guard lk(mu);
        while (!queue.empty() && static_cast<int64_t>(running.size()) < opts.max_sequences) {
            Sequence& s = *queue.front();
            if (ended(s)) {
                queue.pop_front();
                continue;
            }
            if (s.table.empty() && s.cached == 0) {
                s.cached = cache->match_prefix(s.tokens.data(),
                                               static_cast<int64_t>(s.tokens.size()), s.table);
                s.registered = static_cast<int64_t>(s.table.size());
                if (s.generated == 0) {
                    s.prefix_hit = s.cached;
                    prefix_hits.fetch_add(static_cast<std::uint64_t>(s.cached));
                }
            }
            const int64_t first = std::min(s.remaining_prompt(), opts.prefill_chunk);
            if (cache->blocks_for(s.cached + first) - static_cast<int64_t>(s.table.size()) >
                    cache->available_blocks() &&
                !running.empty())
                break;  // wait for blocks to come free
            running.push_back(std::move(queue.front()));
            queue.pop_front();
        }
    }
    n_running.store(static_cast<int64_t>(running.size()));
    if (running.empty()) return false;

    // Plan the step: decode tokens first, then prompt chunks within the token budget.
    int64_t budget = opts.max_step_tokens;
    for (auto& s : running) {
        s->step_n = 0;
        s->sample_now = false;
        if (s->remaining_prompt() == 1 && s->generated > 0) {  // decoding: the last token
            s->step_n = 1;
            --budget;
        }
    }
    for (auto& s : running) {
        if (s->step_n != 0 || budget <= 0) continue;
        s->step_n = std::min({s->remaining_prompt(), opts.prefill_chunk, budget});
        budget -= s->step_n;
    }
    // Reserve the positions; preempt the youngest other sequence when blocks run out.
    for (std::size_t i = 0; i < running.size(); ++i) {
        Sequence& s = *running[i];
        if (s.step_n == 0) continue;
        while (!cache->reserve(s.table, s.cached + s.step_n)) {
            // the youngest running sequence other than s
            std::size_t victim = running.size();
            for (std::size_t j = running.size(); j-- > 0;)
                if (j != i && !running[j]->table.empty()) {
                    victim = j;
                    break;
                }
            if (victim == running.size()) {
                errors.fetch_add(1);
                cache->release(s.table);
                record_blocks();
                finish(s, FinishReason::error,
                       Status(ErrorCode::resource_exhausted,
                              "the KV cache (" + std::to_string(cache->bytes()) + " bytes, " +
                                  std::to_string(cache->num_blocks()) + " blocks of " +
                                  std::to_string(cache->block_tokens()) +
                                  " positions) cannot hold this sequence's " +
                                  std::to_string(s.cached + s.step_n) + " positions"));
                s.step_n = -1;  // finished
                break;
            }
            Sequence& v = *running[victim];
            cache->release(v.table);
            record_blocks();
            v.cached = 0;
            v.registered = 0;
            v.step_n = 0;
            preempted.fetch_add(1);
            {
                std::lock_guard lk(mu);
                queue.push_front(std::move(running[victim]));
            }
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(victim));
            if (victim < i) --i;
        }
    }
    std::erase_if(running, [](const std::unique_ptr<Sequence>& s) { return s->step_n < 0; });
    record_blocks();

    // Inputs.
    std::vector<int64_t> token_begin{0}, past;
    std::vector<const std::int32_t*> tables;
    std::vector<int64_t> table_len;
    std::vector<Sequence*> in_step;
    for (auto& s : running)
        if (s->step_n > 0) {
            in_step.push_back(s.get());
            token_begin.push_back(token_begin.back() + s->step_n);
            past.push_back(s->cached);
            tables.push_back(s->table.data());
            table_len.push_back(static_cast<int64_t>(s->table.size()));
        }
    if (in_step.empty()) return false;
    const int64_t T = token_begin.back();
    Tensor ids = Tensor::empty(DType::i64, Shape{1, T});
    Tensor pos = Tensor::empty(DType::i64, Shape{1, T});
    std::vector<int64_t> rows;
    for (std::size_t k = 0; k < in_step.size(); ++k) {
        Sequence& s = *in_step[k];
        for (int64_t j = 0; j < s.step_n; ++j) {
            ids.data<int64_t>()[token_begin[k] + j] =
                s.tokens[static_cast<std::size_t>(s.cached + j)];
            pos.data<int64_t>()[token_begin[k] + j] = s.cached + j;
        }
        s.sample_now = s.cached + s.step_n == static_cast<int64_t>(s.tokens.size());
        if (s.sample_now) rows.push_back(token_begin[k + 1] - 1);
    }
    KvCacheStep kv;
    cache->fill(kv);
    kv.num_seqs = static_cast<int64_t>(in_step.size());
    kv.token_begin = token_begin.data();
    kv.past = past.data();
    kv.block_table = tables.data();
    kv.table_len = table_len.data();
    std::vector<NamedTensor> inputs;
    inputs.push_back({info.input_ids, std::move(ids)});
    if (!info.position_ids.empty()) inputs.push_back({info.position_ids, std::move(pos)});
    if (info.logits_rows) {
        Tensor r = Tensor::empty(DType::i64, Shape{static_cast<int64_t>(rows.size())});
        std::copy(rows.begin(), rows.end(), r.data<int64_t>());
        inputs.push_back({detail::kLogitsRowsInput, std::move(r)});
    }
    RunOptions ro;
    ro.kv_cache = &kv;
    std::vector<NamedTensor> outputs;
    const auto t0 = Clock::now();
    Status st = engine->try_run(inputs, outputs, ro);
    const auto t1 = Clock::now();
    step_time.record(t1 - t0);
    steps.fetch_add(1);
    step_sequences.fetch_add(in_step.size());
    if (!st.is_ok()) {
        for (Sequence* s : in_step) {
            errors.fetch_add(1);
            cache->release(s->table);
            record_blocks();
            finish(*s, FinishReason::error, st);
            s->step_n = -1;
        }
        std::erase_if(running, [](const std::unique_ptr<Sequence>& s) { return s->step_n < 0; });
        record_blocks();
        return true;
    }
    const Tensor* logits = nullptr;
    for (const auto& o : outputs)
        if (o.name == info.logits) logits = &o.tensor;
    const int64_t vocab = info.config.vocab_size;
    int64_t r = 0;
    for (std::size_t k = 0; k < in_step.size(); ++k) {
        Sequence& s = *in_step[k];
        const bool was_prompt = s.generated == 0;
        if (was_prompt) prompt_tokens.fetch_add(static_cast<std::uint64_t>(s.step_n));
        s.cached += s.step_n;
        // Full prompt blocks into the prefix cache once computed.
        const int64_t full = std::min<int64_t>(s.cached, s.prompt_len) / cache->block_tokens();
        if (full > s.registered) {
            cache->register_prefix(s.tokens.data(), s.table, full);
            s.registered = full;
        }
        if (!s.sample_now) continue;
        const int64_t row = info.logits_rows ? r++ : token_begin[k + 1] - 1;
        float* lrow = const_cast<float*>(logits->data<float>()) + row * vocab;
        const int64_t tok =
            s.sampler.sample(std::span<float>(lrow, static_cast<std::size_t>(vocab)),
                             std::span<const int64_t>(s.tokens));
        s.tokens.push_back(tok);
        ++s.generated;
        generated_tokens.fetch_add(1);
        const auto now2 = Clock::now();
        if (!s.has_first) {
            s.has_first = true;
            s.first_token = now2;
            ttft.record(now2 - s.submitted);
        } else {
            itl.record(now2 - s.last_token);
        }
        s.last_token = now2;
        bool stop = false;
        FinishReason why = FinishReason::length;
        if (s.req.on_token && !s.req.on_token(tok)) {
            stop = true;
            why = FinishReason::cancelled;
            cancelled.fetch_add(1);
        } else if (std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), tok) !=
                       s.req.stop_tokens.end() ||
                   (s.req.stop_at_eos && info.config.eos_token && tok == *info.config.eos_token)) {
            stop = true;
            why = FinishReason::stop_token;
        } else if (s.generated >= s.req.max_tokens) {
            stop = true;
        } else if (info.config.max_positions > 0 &&
                   static_cast<int64_t>(s.tokens.size()) >= info.config.max_positions) {
            stop = true;  // the position limit: a clean stop with what was generated
        }
        if (stop) {
            if (why != FinishReason::cancelled) finished.fetch_add(1);
            cache->release(s.table);
            record_blocks();
            // Counted out before the result is published: a caller that reads metrics() once
            // get() returns sees the sequence gone.
            n_running.fetch_sub(1);
            finish(s, why);
            s.step_n = -1;
        }
    }
    std::erase_if(running, [](const std::unique_ptr<Sequence>& s) { return s->step_n < 0; });
    n_running.store(static_cast<int64_t>(running.size()));
    record_blocks();
    return true;
}

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;
Generator::~Generator() = default;

StatusOr<Generator> Generator::try_load(const std::filesystem::path& model,
                                        GeneratorOptions options) noexcept {
    try {
        return load(model, std::move(options));
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory loading " + model.string());
    } catch (const std::exception& e) {
        return Status(ErrorCode::internal, e.what());
    }
}

Generator Generator::load(const std::filesystem::path& model, GeneratorOptions options) {
    if (options.max_sequences < 1 || options.prefill_chunk < 1 ||
        options.max_step_tokens < options.max_sequences)
        throw Error(ErrorCode::invalid_argument,
                    "GeneratorOptions: max_sequences and prefill_chunk must be >= 1 and "
                    "max_step_tokens >= max_sequences");
    if (options.weights != "none" && options.weights != "int8")
        throw Error(
            ErrorCode::invalid_argument,
            "GeneratorOptions::weights must be none or int8, got '" + options.weights + "'");
    auto impl = std::make_unique<Impl>();
    Graph g = load_onnx(model, options.engine.limits);
    impl->info = detail::prepare_decoder_graph(g).value_or_throw();
    if (options.weights == "int8") {
        // INT8 weights per output channel, activations quantized per step: the MatMuls run on
        // the INT8 GEMM (Step 9's DynamicQuantizeMatMul) and read a quarter of the bytes.
        DynamicQuantizeOptions q;
        q.per_channel = true;
        throw_if_error(quantize_dynamic(g, q).status());
    }
    EngineOptions eo = options.engine;
    // Step sizes vary (decodes of 1..max_sequences rows, prompt chunks of any length): sizes off
    // the power-of-two bucket edges run on kernels that compile nothing per shape.
    eo.transient_shapes = true;
    // Decode steps are MatMuls of a few rows against every weight: dsinfer's packed GEMM reads
    // them at the memory's bandwidth (its small-M path), where oneDNN took ~1.5x the time on
    // llama_100m; prompts run as fast on it. An application's own choice stays.
    if (eo.backends.empty()) eo.backends = {"cpu"};
    impl->engine = std::make_unique<InferenceEngine>(InferenceEngine::compile(std::move(g), eo));
    detail::PagedKvCache::Config kc;
    kc.layers = impl->info.config.layers;
    kc.kv_heads = impl->info.config.kv_heads;
    kc.head_dim = impl->info.config.head_dim;
    kc.block_tokens = options.block_tokens;
    kc.dtype = options.kv_dtype;
    kc.budget_bytes = options.kv_cache_bytes;
    kc.prefix_sharing = options.prefix_sharing;
    impl->cache = detail::PagedKvCache::create(kc).value_or_throw();
    impl->opts = std::move(options);
    if (impl->opts.warmup) {
        // Decode steps of 1, 2, 4, .. max_sequences rows and a full prompt chunk.
        for (int64_t t = 1; t < 2 * impl->opts.max_sequences; t *= 2)
            impl->warm(std::min(t, impl->opts.max_sequences));
        impl->warm(std::min(impl->opts.prefill_chunk, impl->opts.max_step_tokens));
    }
    Impl* p = impl.get();
    impl->thread = std::thread([p] { p->loop(); });
    return Generator(std::move(impl));
}

GenerateHandle Generator::submit(GenerateRequest request) {
    auto state = std::make_shared<GenerateHandle::State>();
    GenerateHandle h(state);
    Impl& m = *impl_;
    m.requests.fetch_add(1);
    auto seq = std::make_unique<Sequence>(request.sampling);
    seq->state = state;
    seq->submitted = Clock::now();
    seq->prompt_len = static_cast<int64_t>(request.prompt.size());
    seq->tokens = request.prompt;
    seq->req = std::move(request);
    Status st = m.validate(seq->req);
    if (st.is_ok()) {
        std::lock_guard lk(m.mu);
        if (m.queue.size() >= m.opts.max_queued)
            st = Status(ErrorCode::unavailable, "the generation queue is full (" +
                                                    std::to_string(m.opts.max_queued) +
                                                    " requests)");
        else if (m.stopping)
            st = Status(ErrorCode::unavailable, "the generator is shutting down");
        else
            m.queue.push_back(std::move(seq));
    }
    if (!st.is_ok()) {
        m.errors.fetch_add(1);
        finish(*seq, FinishReason::error, std::move(st));
        return h;
    }
    m.cv.notify_all();
    return h;
}

GenerateResult Generator::generate(GenerateRequest request) {
    return submit(std::move(request)).get();
}

const DecoderConfig& Generator::config() const noexcept { return impl_->info.config; }
const InferenceEngine& Generator::engine() const noexcept { return *impl_->engine; }

GeneratorMetrics Generator::metrics() const {
    const Impl& m = *impl_;
    GeneratorMetrics r;
    r.requests = m.requests.load();
    r.finished = m.finished.load();
    r.cancelled = m.cancelled.load();
    r.errors = m.errors.load();
    r.preempted = m.preempted.load();
    r.steps = m.steps.load();
    r.prompt_tokens = m.prompt_tokens.load();
    r.generated_tokens = m.generated_tokens.load();
    r.prefix_hit_tokens = m.prefix_hits.load();
    r.running = m.n_running.load();
    {
        std::lock_guard lk(const_cast<std::mutex&>(m.mu));
        r.queued = static_cast<int64_t>(m.queue.size());
    }
    r.kv_blocks_total = m.cache->num_blocks();
    r.kv_blocks_used = m.blocks_used.load();
    r.kv_blocks_peak = m.blocks_peak.load();
    r.kv_bytes = m.cache->bytes();
    r.ttft = m.ttft.snapshot();
    r.inter_token = m.itl.snapshot();
    r.step = m.step_time.snapshot();
    r.mean_step_sequences =
        r.steps ? static_cast<double>(m.step_sequences.load()) / static_cast<double>(r.steps) : 0;
    return r;
}

}  // namespace dsinfer
