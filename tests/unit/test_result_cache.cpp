// serving::ResultCache (dsinfer/result_cache.hpp): hits only for exactly the same inputs of the
// same model and version (names, element types, shapes, bytes; in any order), even when
// hashes collide; copies in and out so no caller can change what is cached; LRU eviction
// order under the entry and byte limits; time to live on an injected clock; invalidation;
// concurrent use.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "dsinfer/result_cache.hpp"

namespace {

using namespace dsinfer;
using namespace std::chrono_literals;
using serving::ResultCache;
using serving::ResultCacheOptions;

using Tensors = std::vector<NamedTensor>;

Tensors input(float v, std::int64_t n = 4) {
    return {{"x", Tensor::from_vector<float>({1, n},
                                             std::vector<float>(static_cast<std::size_t>(n), v))}};
}

Tensors output(float v) { return {{"y", Tensor::from_vector<float>({1, 2}, {v, v + 1.f})}}; }

/// The first output's first element, or -1 on a miss.
float value_of(const std::optional<Tensors>& hit) {
    if (!hit || hit->empty() || hit->front().tensor.num_elements() == 0) return -1.f;
    return hit->front().tensor.data<float>()[0];
}

ResultCacheOptions limits(std::size_t max_entries, std::size_t max_bytes = std::size_t{1} << 20) {
    ResultCacheOptions o;
    o.max_entries = max_entries;
    o.max_bytes = max_bytes;
    return o;
}

}  // namespace

TEST_CASE("result cache: a hit needs the same model, version and inputs", "[serving]") {
    ResultCache cache;
    CHECK_FALSE(cache.lookup("m", "1", input(1.f)).has_value());
    REQUIRE(cache.insert("m", "1", input(1.f), output(10.f)));
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 10.f);
    const auto hit = cache.lookup("m", "1", input(1.f));
    REQUIRE(hit.has_value());
    REQUIRE(hit->size() == 1);
    CHECK((*hit)[0].name == "y");
    CHECK((*hit)[0].tensor.shape() == Shape{1, 2});
    CHECK((*hit)[0].tensor.data<float>()[1] == 11.f);

    CHECK_FALSE(cache.lookup("m", "2", input(1.f)).has_value());     // another version
    CHECK_FALSE(cache.lookup("n", "1", input(1.f)).has_value());     // another model
    CHECK_FALSE(cache.lookup("m", "1", input(2.f)).has_value());     // other bytes
    CHECK_FALSE(cache.lookup("m", "1", input(1.f, 5)).has_value());  // other shape
    // Same bytes, other shape / element type / name.
    const Tensor x = input(1.f)[0].tensor;
    CHECK_FALSE(cache.lookup("m", "1", {{"x", x.reshaped({2, 2}).value()}}).has_value());
    CHECK_FALSE(cache.lookup("m", "1", {{"x", Tensor::wrap(x.raw_data(), DType::i32, {1, 4})}})
                    .has_value());
    CHECK_FALSE(cache.lookup("m", "1", {{"z", x}}).has_value());
    CHECK_FALSE(cache.lookup("m", "1", {}).has_value());

    // Inputs in another order are the same inputs.
    const Tensors ab{{"a", Tensor::from_vector<float>({1}, {1.f})},
                     {"b", Tensor::from_vector<std::int64_t>({2}, {7, 8})}};
    const Tensors ba{ab[1], ab[0]};
    REQUIRE(cache.insert("m", "1", ab, output(20.f)));
    CHECK(value_of(cache.lookup("m", "1", ba)) == 20.f);
    CHECK(ResultCache::hash_inputs(ab) == ResultCache::hash_inputs(ba));

    // String inputs compare by value.
    const Tensors words{{"w", Tensor::from_vector<std::string>({2}, {"ab", "c"})}};
    REQUIRE(cache.insert("m", "1", words, output(30.f)));
    CHECK(value_of(cache.lookup(
              "m", "1", {{"w", Tensor::from_vector<std::string>({2}, {"ab", "c"})}})) == 30.f);
    CHECK_FALSE(cache.lookup("m", "1", {{"w", Tensor::from_vector<std::string>({2}, {"a", "bc"})}})
                    .has_value());

    const serving::ResultCacheStats s = cache.stats();
    CHECK(s.hits == 4);
    CHECK(s.misses == 10);
    CHECK(s.insertions == 3);
    CHECK(s.entries == 3);
    CHECK(s.bytes == ResultCache::entry_bytes("m", "1", input(1.f), output(10.f)) +
                         ResultCache::entry_bytes("m", "1", ab, output(20.f)) +
                         ResultCache::entry_bytes("m", "1", words, output(30.f)));
    CHECK(s.hit_rate() == Approx(4.0 / 14.0));
}

TEST_CASE("result cache: callers cannot change what is cached", "[serving]") {
    ResultCache cache;
    Tensors in = input(1.f);
    Tensors out = output(10.f);
    REQUIRE(cache.insert("m", "1", in, out));
    // Writing into the tensors given to insert() changes nothing cached.
    out[0].tensor.data<float>()[0] = -5.f;
    Tensors same = input(1.f);
    in[0].tensor.data<float>()[0] = 3.f;
    CHECK_FALSE(cache.lookup("m", "1", in).has_value());
    auto hit = cache.lookup("m", "1", same);
    CHECK(value_of(hit) == 10.f);
    // Nor does writing into what lookup() returned.
    hit->front().tensor.data<float>()[0] = -7.f;
    CHECK(value_of(cache.lookup("m", "1", same)) == 10.f);
}

TEST_CASE("result cache: forced hash collisions never answer for other inputs", "[serving]") {
    ResultCacheOptions o;
    o.hash = [](const Tensors&) { return std::uint64_t{42}; };  // every input collides
    ResultCache cache(o);
    REQUIRE(cache.insert("m", "1", input(1.f), output(10.f)));
    REQUIRE(cache.insert("m", "1", input(2.f), output(20.f)));
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 10.f);
    CHECK(value_of(cache.lookup("m", "1", input(2.f))) == 20.f);
    CHECK_FALSE(cache.lookup("m", "1", input(3.f)).has_value());
    CHECK(cache.stats().collisions >= 3);  // each lookup passed over at least one other entry
    CHECK(cache.stats().entries == 2);

    // Inserting the same inputs again replaces their entry, not the colliding one.
    REQUIRE(cache.insert("m", "1", input(1.f), output(11.f)));
    CHECK(cache.stats().entries == 2);
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 11.f);
    CHECK(value_of(cache.lookup("m", "1", input(2.f))) == 20.f);
    CHECK(cache.stats().insertions == 3);
    CHECK(cache.stats().evictions == 0);
}

TEST_CASE("result cache: the least recently used entry is evicted first", "[serving]") {
    ResultCache cache(limits(3));
    for (float v : {1.f, 2.f, 3.f}) REQUIRE(cache.insert("m", "1", input(v), output(v * 10)));
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 10.f);  // 1 is now the newest
    REQUIRE(cache.insert("m", "1", input(4.f), output(40.f)));    // evicts 2
    CHECK_FALSE(cache.lookup("m", "1", input(2.f)).has_value());
    REQUIRE(cache.insert("m", "1", input(5.f), output(50.f)));  // evicts 3
    CHECK_FALSE(cache.lookup("m", "1", input(3.f)).has_value());
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 10.f);
    CHECK(value_of(cache.lookup("m", "1", input(4.f))) == 40.f);
    CHECK(value_of(cache.lookup("m", "1", input(5.f))) == 50.f);
    const serving::ResultCacheStats s = cache.stats();
    CHECK(s.evictions == 2);
    CHECK(s.entries == 3);
}

TEST_CASE("result cache: the byte limit counts inputs and outputs", "[serving]") {
    const std::size_t one = ResultCache::entry_bytes("m", "1", input(1.f), output(1.f));
    CHECK(one == 1 + 1 + (1 + 16) + (1 + 8));  // model, version, "x" + 4 floats, "y" + 2 floats
    ResultCache cache(limits(100, 2 * one + one / 2));
    REQUIRE(cache.insert("m", "1", input(1.f), output(10.f)));
    REQUIRE(cache.insert("m", "1", input(2.f), output(20.f)));
    CHECK(cache.stats().bytes == 2 * one);
    REQUIRE(cache.insert("m", "1", input(3.f), output(30.f)));  // evicts 1
    CHECK(cache.stats().bytes == 2 * one);
    CHECK(cache.stats().evictions == 1);
    CHECK_FALSE(cache.lookup("m", "1", input(1.f)).has_value());
    CHECK(value_of(cache.lookup("m", "1", input(2.f))) == 20.f);

    // An entry larger than the whole cache is not stored and evicts nothing.
    CHECK_FALSE(cache.insert("m", "1", input(9.f, 64), output(90.f)));
    CHECK(cache.stats().rejected == 1);
    CHECK(cache.stats().entries == 2);
    // Nor are device tensors or null tensors.
    float host[4] = {1, 2, 3, 4};
    const Tensors device{
        {"x", Tensor::wrap(host, DType::f32, {1, 4}, Device{DeviceKind::cuda, 0})}};
    CHECK_FALSE(cache.insert("m", "1", device, output(1.f)));
    CHECK_FALSE(cache.insert("m", "1", {{"x", Tensor()}}, output(1.f)));
    CHECK_FALSE(cache.lookup("m", "1", device).has_value());
    CHECK(cache.stats().rejected == 3);
}

TEST_CASE("result cache: entries expire after their time to live", "[serving]") {
    using Clock = std::chrono::steady_clock;
    auto now = std::make_shared<std::atomic<Clock::rep>>(0);
    const Clock::time_point t0 = Clock::now();
    ResultCacheOptions o;
    o.ttl = 10s;
    o.clock = [now, t0] { return t0 + Clock::duration(now->load()); };
    auto at = [&](std::chrono::seconds s) {
        now->store(std::chrono::duration_cast<Clock::duration>(s).count());
    };
    ResultCache cache(o);
    REQUIRE(cache.insert("m", "1", input(1.f), output(10.f)));
    at(5s);
    REQUIRE(cache.insert("m", "1", input(2.f), output(20.f)));
    at(9s);
    CHECK(value_of(cache.lookup("m", "1", input(1.f))) == 10.f);  // a hit does not extend it
    at(10s);
    CHECK_FALSE(cache.lookup("m", "1", input(1.f)).has_value());
    CHECK(cache.stats().expirations == 1);
    CHECK(cache.stats().entries == 1);
    CHECK(value_of(cache.lookup("m", "1", input(2.f))) == 20.f);
    // An insert drops what has expired, looked up or not.
    at(16s);
    REQUIRE(cache.insert("m", "1", input(3.f), output(30.f)));
    CHECK(cache.stats().expirations == 2);
    CHECK(cache.stats().entries == 1);
    CHECK(cache.stats().bytes == ResultCache::entry_bytes("m", "1", input(3.f), output(30.f)));
    CHECK(cache.stats().evictions == 0);
}

TEST_CASE("result cache: invalidation by model and version", "[serving]") {
    ResultCache cache;
    REQUIRE(cache.insert("a", "1", input(1.f), output(1.f)));
    REQUIRE(cache.insert("a", "1", input(2.f), output(2.f)));
    REQUIRE(cache.insert("a", "2", input(1.f), output(3.f)));
    REQUIRE(cache.insert("b", "1", input(1.f), output(4.f)));
    CHECK(cache.invalidate("a", "1") == 2);
    CHECK_FALSE(cache.lookup("a", "1", input(1.f)).has_value());
    CHECK(value_of(cache.lookup("a", "2", input(1.f))) == 3.f);
    CHECK(cache.invalidate("a") == 1);
    CHECK(cache.invalidate("a") == 0);
    CHECK(value_of(cache.lookup("b", "1", input(1.f))) == 4.f);
    CHECK(cache.stats().invalidations == 3);
    cache.clear();
    CHECK(cache.stats().entries == 0);
    CHECK(cache.stats().bytes == 0);
    CHECK(cache.stats().invalidations == 4);
    cache.clear(/*reset_counters=*/true);
    CHECK(cache.stats().hits == 0);
    CHECK(cache.stats().invalidations == 0);
}

TEST_CASE("result cache: options are checked; the hash sees every part of the key", "[serving]") {
    auto code = [](ResultCacheOptions o) { return ResultCache::validate(o); };
    ResultCacheOptions o;
    o.max_bytes = 0;
    CHECK_THAT(code(o).message(), Catch::Contains("max_bytes"));
    o = {};
    o.max_entries = 0;
    CHECK_THAT(code(o).message(), Catch::Contains("max_entries"));
    o = {};
    o.ttl = -1s;
    CHECK(code(o).code() == ErrorCode::invalid_argument);
    CHECK_THAT(code(o).message(), Catch::Contains("ttl"));
    CHECK_THROWS_AS(ResultCache(o), Error);
    CHECK(code({}).is_ok());

    const Tensors base = input(1.f);
    const std::uint64_t h = ResultCache::hash_inputs(base);
    CHECK(h == ResultCache::hash_inputs(input(1.f)));
    CHECK(h != ResultCache::hash_inputs(input(2.f)));
    CHECK(h != ResultCache::hash_inputs(input(1.f, 5)));
    CHECK(h != ResultCache::hash_inputs({{"z", base[0].tensor}}));
    CHECK(h != ResultCache::hash_inputs({{"x", base[0].tensor.reshaped({4, 1}).value()}}));
    CHECK(h != ResultCache::hash_inputs(
                   {{"x", Tensor::wrap(base[0].tensor.raw_data(), DType::i32, {1, 4})}}));
    // One bit anywhere in a longer buffer (lanes and tail alike).
    std::vector<float> big(301, 0.5f);
    const std::uint64_t hb =
        ResultCache::hash_inputs({{"x", Tensor::from_vector<float>({301}, big)}});
    for (const std::size_t i :
         {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{150}, std::size_t{300}}) {
        std::vector<float> flipped = big;
        std::uint32_t bits;
        std::memcpy(&bits, &flipped[i], 4);
        bits ^= 1u;
        std::memcpy(&flipped[i], &bits, 4);
        CHECK(hb != ResultCache::hash_inputs({{"x", Tensor::from_vector<float>({301}, flipped)}}));
    }
}

TEST_CASE("result cache: concurrent lookups and inserts stay consistent", "[serving]") {
    // 32 keys over 16 entries: hits, misses and evictions interleave across threads. Each
    // key's output is a function of it, so a hit that returned another key's result shows.
    // Each thread asks for every key twice in a row, so there are hits even when the
    // scheduler runs the threads one after another (a cycle of 32 keys alone always misses
    // an LRU of 16).
    ResultCache cache(limits(16));
    constexpr int kThreads = 4, kOps = 2000;
    std::atomic<int> lookups{0}, wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kOps; ++i) {
                const auto key = static_cast<float>(((i / 2) * 7 + t * 13) % 32);
                auto hit = cache.lookup("m", "1", input(key));
                ++lookups;
                if (hit) {
                    if (value_of(hit) != key * 10.f) ++wrong;
                } else {
                    (void)cache.insert("m", "1", input(key), output(key * 10.f));
                }
                if (i % 500 == 499 && t == 0) (void)cache.invalidate("m", "1");
            }
        });
    for (auto& th : threads) th.join();
    const serving::ResultCacheStats s = cache.stats();
    CHECK(wrong.load() == 0);
    CHECK(s.hits + s.misses == static_cast<std::uint64_t>(lookups.load()));
    CHECK(s.hits > 0);
    CHECK(s.entries <= 16);
    CHECK(s.bytes == s.entries * ResultCache::entry_bytes("m", "1", input(0.f), output(0.f)));
    // Every stored entry is still held or was dropped (an entry replaced by a racing insert
    // of the same key is the one way to leave uncounted).
    CHECK(s.insertions >= s.entries + s.evictions + s.invalidations);
    CHECK(s.evictions > 0);
}
