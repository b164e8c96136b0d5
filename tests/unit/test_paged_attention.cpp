// com.dsinfer PagedAttention (src/ops/paged_attention.hpp) and the Generator's paged KV cache
// (src/generate/kv_cache.hpp): two steps (a prefill of each sequence's first positions, then
// the rest) against dense causal attention computed here in double, and the fast kernel against
// the reference kernel at each ISA level ([attention] runs once per level).
// Tolerances: f32 cache, reference vs dense 1e-5 and fast vs reference 2e-5 (float sums in
// another order); f16/bf16/i8 caches: fast vs reference 2e-5 (both read the same stored values),
// reference vs dense 4e-3 (f16), 3e-2 (bf16), 3e-2 (i8, max|x|/127 per row).
#include <catch2/catch.hpp>
#include <cmath>
#include <dsinfer/dsinfer.hpp>
#include <dsinfer/kv_cache.hpp>
#include <random>
#include <string>
#include <vector>

#include "generate/kv_cache.hpp"

using namespace dsinfer;

namespace {

Attribute attr_i(std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    return a;
}

struct Case {
    std::int64_t q_heads, kv_heads, head, block;
    DType dtype;
    std::int64_t window;
};

Graph paged_graph(std::int64_t layer, std::int64_t window = 0) {
    Graph g;
    g.opset_imports = {{"", 17}, {"com.dsinfer", 1}};
    const ValueId q = g.add_value("Q", DType::f32), k = g.add_value("K", DType::f32),
                  v = g.add_value("V", DType::f32), y = g.add_value("Y");
    g.inputs = {q, k, v};
    g.outputs = {y};
    Node& n = g.add_node("PagedAttention", {q, k, v}, {y}, "pa");
    n.domain = "com.dsinfer";
    n.attributes.emplace_back("layer", attr_i(layer));
    if (window > 0) n.attributes.emplace_back("sliding_window", attr_i(window));
    return g;
}

/// Dense per-sequence data: q/k/v [L][H][D].
struct Seq {
    std::int64_t len, prefill;  // positions in all, positions in step 1
    std::vector<float> q, k, v;
};

/// One step's [1, H, T, D] tensor of `field` for positions [from, to) of each sequence.
Tensor gather(const std::vector<Seq>& seqs, std::vector<float> Seq::*field, std::int64_t heads,
              std::int64_t D, bool step2) {
    std::int64_t T = 0;
    for (const auto& s : seqs) T += step2 ? s.len - s.prefill : s.prefill;
    Tensor t = Tensor::empty(DType::f32, Shape{1, heads, T, D});
    std::int64_t row = 0;
    for (const auto& s : seqs) {
        const std::int64_t a = step2 ? s.prefill : 0, b = step2 ? s.len : s.prefill;
        for (std::int64_t p = a; p < b; ++p, ++row)
            for (std::int64_t h = 0; h < heads; ++h)
                for (std::int64_t e = 0; e < D; ++e)
                    t.data<float>()[(h * T + row) * D + e] = (s.*field)[(p * heads + h) * D + e];
    }
    return t;
}

/// Runs both steps on one engine and cache; returns the two outputs.
std::pair<Tensor, Tensor> run_steps(const Case& c, std::vector<Seq>& seqs,
                                    const std::string& backend) {
    EngineOptions o;
    o.backends = {backend};
    o.num_threads = 2;
    o.optimization_level = 0;
    auto e = InferenceEngine::compile(paged_graph(1, c.window), o);
    detail::PagedKvCache::Config kc;
    kc.layers = 2;
    kc.kv_heads = c.kv_heads;
    kc.head_dim = c.head;
    kc.block_tokens = c.block;
    kc.dtype = c.dtype;
    kc.budget_bytes = std::size_t{64} << 20;
    auto cache = detail::PagedKvCache::create(kc).value_or_throw();
    std::vector<std::vector<std::int32_t>> tables(seqs.size());
    std::pair<Tensor, Tensor> out;
    for (int step = 0; step < 2; ++step) {
        std::vector<std::int64_t> begin{0}, past;
        std::vector<const std::int32_t*> tp;
        std::vector<std::int64_t> tl;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            const std::int64_t n = step ? seqs[i].len - seqs[i].prefill : seqs[i].prefill;
            const std::int64_t p = step ? seqs[i].prefill : 0;
            REQUIRE(cache->reserve(tables[i], p + n));
            begin.push_back(begin.back() + n);
            past.push_back(p);
            tp.push_back(tables[i].data());
            tl.push_back(static_cast<std::int64_t>(tables[i].size()));
        }
        KvCacheStep kv;
        cache->fill(kv);
        kv.num_seqs = static_cast<std::int64_t>(seqs.size());
        kv.token_begin = begin.data();
        kv.past = past.data();
        kv.block_table = tp.data();
        kv.table_len = tl.data();
        RunOptions ro;
        ro.kv_cache = &kv;
        const std::vector<NamedTensor> feeds{
            {"Q", gather(seqs, &Seq::q, c.q_heads, c.head, step == 1)},
            {"K", gather(seqs, &Seq::k, c.kv_heads, c.head, step == 1)},
            {"V", gather(seqs, &Seq::v, c.kv_heads, c.head, step == 1)}};
        Tensor y = e.run(feeds, ro).at(0).tensor;
        (step ? out.second : out.first) = std::move(y);
    }
    return out;
}

/// Dense causal attention in double for the step's rows, same layout as the kernel's output.
Tensor dense(const Case& c, const std::vector<Seq>& seqs, bool step2) {
    std::int64_t T = 0;
    for (const auto& s : seqs) T += step2 ? s.len - s.prefill : s.prefill;
    const std::int64_t D = c.head, rep = c.q_heads / c.kv_heads;
    Tensor t = Tensor::empty(DType::f32, Shape{1, c.q_heads, T, D});
    std::int64_t row = 0;
    for (const auto& s : seqs) {
        const std::int64_t a = step2 ? s.prefill : 0, b = step2 ? s.len : s.prefill;
        for (std::int64_t p = a; p < b; ++p, ++row)
            for (std::int64_t h = 0; h < c.q_heads; ++h) {
                const std::int64_t g = h / rep;
                const std::int64_t lo =
                    c.window > 0 ? std::max<std::int64_t>(0, p - c.window + 1) : 0;
                std::vector<double> w;
                double mx = -1e300;
                for (std::int64_t j = lo; j <= p; ++j) {
                    double d = 0;
                    for (std::int64_t e = 0; e < D; ++e)
                        d += double(s.q[(p * c.q_heads + h) * D + e]) *
                             s.k[(j * c.kv_heads + g) * D + e];
                    w.push_back(d / std::sqrt(double(D)));
                    mx = std::max(mx, w.back());
                }
                double sum = 0;
                for (auto& x : w) sum += (x = std::exp(x - mx));
                for (std::int64_t e = 0; e < D; ++e) {
                    double acc = 0;
                    for (std::int64_t j = lo; j <= p; ++j)
                        acc +=
                            w[static_cast<std::size_t>(j - lo)] * s.v[(j * c.kv_heads + g) * D + e];
                    t.data<float>()[(h * T + row) * D + e] = static_cast<float>(acc / sum);
                }
            }
    }
    return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    double m = 0;
    for (std::int64_t i = 0; i < a.shape().num_elements(); ++i)
        m = std::max(m, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
    return m;
}

std::vector<Seq> make_seqs(const Case& c, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    // lengths: a one-token sequence with no prefill, short, across several blocks
    std::vector<Seq> seqs = {{1, 0, {}, {}, {}}, {7, 6, {}, {}, {}}, {41, 37, {}, {}, {}}};
    for (auto& s : seqs) {
        s.q.resize(static_cast<std::size_t>(s.len * c.q_heads * c.head));
        s.k.resize(static_cast<std::size_t>(s.len * c.kv_heads * c.head));
        s.v.resize(s.k.size());
        for (auto& x : s.q) x = n(rng);
        for (auto& x : s.k) x = n(rng);
        for (auto& x : s.v) x = n(rng);
    }
    return seqs;
}

}  // namespace

TEST_CASE("paged attention: two steps over the cache against dense causal attention",
          "[attention][generate]") {
    const Case cases[] = {
        {4, 2, 16, 4, DType::f32, 0}, {4, 4, 16, 16, DType::f32, 0}, {8, 2, 64, 16, DType::f32, 0},
        {4, 2, 16, 4, DType::f32, 5}, {4, 2, 16, 4, DType::f16, 0},  {4, 2, 16, 4, DType::bf16, 0},
        {4, 2, 64, 16, DType::i8, 0}, {6, 2, 24, 8, DType::f32, 0},  {4, 1, 16, 16, DType::i8, 9},
    };
    std::uint32_t seed = 1;
    for (const Case& c : cases) {
        CAPTURE(c.q_heads, c.kv_heads, c.head, c.block, dtype_name(c.dtype), c.window);
        auto seqs = make_seqs(c, seed++);
        const auto ref = run_steps(c, seqs, "reference");
        const auto fast = run_steps(c, seqs, "cpu");
        const double tol_dense = c.dtype == DType::f32 ? 1e-5 : c.dtype == DType::f16 ? 4e-3 : 3e-2;
        CHECK(max_diff(ref.first, dense(c, seqs, false)) < tol_dense);
        CHECK(max_diff(ref.second, dense(c, seqs, true)) < tol_dense);
        CHECK(max_diff(fast.first, ref.first) < 2e-5);
        CHECK(max_diff(fast.second, ref.second) < 2e-5);
    }
}

TEST_CASE("paged attention: outside a Generator step the run fails with a clear error",
          "[generate]") {
    EngineOptions o;
    o.optimization_level = 0;
    auto e = InferenceEngine::compile(paged_graph(0), o);
    std::vector<NamedTensor> out;
    const Tensor x = Tensor::zeros(DType::f32, Shape{1, 2, 3, 4});
    const Status st = e.try_run({{"Q", x}, {"K", x}, {"V", x}}, out);
    CHECK(st.code() == ErrorCode::invalid_argument);
    CHECK_THAT(st.message(), Catch::Contains("Generator step"));
}

TEST_CASE("kv cache: blocks, budget, prefix sharing and eviction", "[generate]") {
    detail::PagedKvCache::Config kc;
    kc.layers = 2;
    kc.kv_heads = 2;
    kc.head_dim = 8;
    kc.block_tokens = 4;
    kc.dtype = DType::f32;
    const std::size_t block_bytes = 2 * 2 * (2 * 4 * 8 * 4);
    kc.budget_bytes = block_bytes * 10;
    auto c = detail::PagedKvCache::create(kc).value_or_throw();
    REQUIRE(c->num_blocks() == 10);
    REQUIRE(c->bytes_per_block() == block_bytes);
    std::vector<std::int32_t> a, b;
    REQUIRE(c->reserve(a, 9));  // 3 blocks
    CHECK(a.size() == 3);
    CHECK(c->available_blocks() == 7);
    CHECK_FALSE(c->reserve(b, 33));  // 9 blocks: more than the 7 left, nothing taken
    CHECK(b.empty());
    CHECK(c->available_blocks() == 7);
    // Prefix: register a's first two full blocks for tokens 0..7; a sequence with the same first
    // 9 tokens shares them (never the block of its last token).
    std::vector<std::int64_t> toks = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    c->register_prefix(toks.data(), a, 2);
    std::vector<std::int32_t> s;
    CHECK(c->match_prefix(toks.data(), 9, s) == 8);
    CHECK(s == std::vector<std::int32_t>{a[0], a[1]});
    std::vector<std::int32_t> s2;
    CHECK(c->match_prefix(toks.data(), 8, s2) == 4);  // the last token's block is computed
    std::vector<std::int64_t> other = toks;
    other[5] = 99;  // second block differs
    std::vector<std::int32_t> s3;
    CHECK(c->match_prefix(other.data(), 10, s3) == 4);
    c->release(s);
    c->release(s2);
    c->release(s3);
    c->release(a);
    // a's cached blocks stay (evictable), its third block is free.
    CHECK(c->available_blocks() == 10);
    CHECK(c->used_blocks() == 0);
    std::vector<std::int32_t> big;
    REQUIRE(c->reserve(big, 40));  // every block: evicts the cached ones
    CHECK(big.size() == 10);
    std::vector<std::int32_t> s4;
    CHECK(c->match_prefix(toks.data(), 9, s4) == 0);  // evicted
    c->release(big);
    CHECK(c->available_blocks() == 10);
    // Bad configurations.
    kc.budget_bytes = block_bytes - 1;
    CHECK(detail::PagedKvCache::create(kc).status().code() == ErrorCode::invalid_argument);
    kc.budget_bytes = block_bytes;
    kc.dtype = DType::i32;
    CHECK(detail::PagedKvCache::create(kc).status().code() == ErrorCode::invalid_argument);
}
