// serving::ResultCache (dsinfer/result_cache.hpp): outputs by (model, version, exact inputs);
// one mutex over an LRU list, a hash index and (with a time to live) an expiry index.
#include "dsinfer/result_cache.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dsinfer::serving {

namespace {

using Clock = ResultCacheOptions::Clock;

// ---- the key hash ----
// Four independent lanes take 8-byte words (xor, multiply by an odd constant, fold the high
// half down: each step is a bijection of the lane, so two different words never leave a lane
// in the same state); the lanes, the tail and the length are then combined and avalanched.

constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ull;   // odd: 2^64 / golden ratio
constexpr std::uint64_t kMix1 = 0x7002ec529ebd57b9ull;  // odd, random
constexpr std::uint64_t kMix2 = 0xe79e8ba4d482b757ull;  // odd, random
constexpr std::uint64_t kSeed = 0x2e895c60eb84c985ull;  // random

inline std::uint64_t load64(const unsigned char* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline std::uint64_t absorb(std::uint64_t lane, std::uint64_t word) noexcept {
    lane = (lane ^ word) * kMul;
    return lane ^ (lane >> 32);
}

inline std::uint64_t avalanche(std::uint64_t x) noexcept {
    x ^= x >> 31;
    x *= kMix1;
    x ^= x >> 29;
    x *= kMix2;
    return x ^ (x >> 32);
}

std::uint64_t hash_bytes(const void* data, std::size_t n, std::uint64_t seed) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t a = seed, b = seed ^ kMix1, c = seed + kMix2, d = ~seed;
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = absorb(a, load64(p + i));
        b = absorb(b, load64(p + i + 8));
        c = absorb(c, load64(p + i + 16));
        d = absorb(d, load64(p + i + 24));
    }
    std::uint64_t h =
        absorb(absorb(absorb(avalanche(a), avalanche(b)), avalanche(c)), avalanche(d));
    for (; i + 8 <= n; i += 8) h = absorb(h, load64(p + i));
    if (i < n) {
        std::uint64_t tail = 0;
        std::memcpy(&tail, p + i, n - i);
        h = absorb(h, tail);
    }
    return avalanche(h ^ n);
}

inline std::uint64_t hash_string(std::string_view s, std::uint64_t seed) noexcept {
    return hash_bytes(s.data(), s.size(), seed);
}

std::vector<const NamedTensor*> sorted_by_name(const std::vector<NamedTensor>& inputs) {
    std::vector<const NamedTensor*> v;
    v.reserve(inputs.size());
    for (const NamedTensor& t : inputs) v.push_back(&t);
    std::stable_sort(v.begin(), v.end(),
                     [](const NamedTensor* x, const NamedTensor* y) { return x->name < y->name; });
    return v;
}

/// Host tensors with a buffer (null tensors and device tensors are not cacheable).
bool cacheable(const std::vector<NamedTensor>& ts) noexcept {
    return std::all_of(ts.begin(), ts.end(), [](const NamedTensor& t) {
        return !t.tensor.is_null() && t.tensor.device().kind == DeviceKind::cpu;
    });
}

std::size_t tensor_bytes(const Tensor& t) noexcept {
    if (t.dtype() != DType::string || t.is_null()) return t.num_bytes();
    std::size_t n = t.num_bytes();  // sizeof(std::string) per element
    for (const std::string& s : t.span_unchecked<std::string>()) n += s.size();
    return n;
}

bool same_tensor(const Tensor& a, const Tensor& b) noexcept {
    if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
    if (a.dtype() == DType::string) {
        const auto x = a.span_unchecked<std::string>();
        const auto y = b.span_unchecked<std::string>();
        return std::equal(x.begin(), x.end(), y.begin());
    }
    return a.num_bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

/// One cached result; immutable once stored.
struct Entry {
    std::string model, version;
    std::uint64_t input_hash = 0;
    std::vector<NamedTensor> inputs;   ///< deep copies, sorted by name
    std::vector<NamedTensor> outputs;  ///< deep copies
    std::size_t bytes = 0;
    Clock::time_point expires = Clock::time_point::max();

    bool same_inputs(const std::vector<const NamedTensor*>& sorted) const noexcept {
        if (sorted.size() != inputs.size()) return false;
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i].name != sorted[i]->name ||
                !same_tensor(inputs[i].tensor, sorted[i]->tensor))
                return false;
        return true;
    }
};

std::uint64_t key_of(std::string_view model, std::string_view version,
                     std::uint64_t input_hash) noexcept {
    return avalanche(
        absorb(absorb(input_hash ^ kSeed, hash_string(model, kMix1)), hash_string(version, kMix2)));
}

std::vector<NamedTensor> deep_copy(const std::vector<NamedTensor>& ts) {
    std::vector<NamedTensor> out;
    out.reserve(ts.size());
    for (const NamedTensor& t : ts) out.push_back(NamedTensor{t.name, t.tensor.clone()});
    return out;
}

struct Node;
using Lru = std::list<Node>;
using ExpiryIndex = std::multimap<Clock::time_point, Lru::iterator>;
struct Node {
    std::shared_ptr<const Entry> entry;
    std::uint64_t key = 0;
    ExpiryIndex::iterator expiry{};  ///< valid only with a time to live
};

}  // namespace

struct ResultCache::Impl {
    ResultCacheOptions options;

    mutable std::mutex mu;
    Lru lru;  ///< front: most recently used
    std::unordered_multimap<std::uint64_t, Lru::iterator> index;
    ExpiryIndex expiry;  ///< by expiry time (ttl only)
    std::size_t bytes = 0;

    std::atomic<std::uint64_t> hits{0}, misses{0}, insertions{0}, evictions{0}, expirations{0},
        invalidations{0}, collisions{0}, rejected{0};

    Clock::time_point now() const { return options.clock ? options.clock() : Clock::now(); }
    std::uint64_t hash(const std::vector<NamedTensor>& inputs) const {
        return options.hash ? options.hash(inputs) : ResultCache::hash_inputs(inputs);
    }
    bool has_ttl() const noexcept { return options.ttl.count() > 0; }

    /// The index slot of `node` (under mu).
    decltype(index)::iterator slot_of(Lru::iterator node) {
        auto [b, e] = index.equal_range(node->key);
        for (auto it = b; it != e; ++it)
            if (it->second == node) return it;
        return index.end();
    }
    /// Removes `node` from every structure (under mu).
    void erase(Lru::iterator node) noexcept {
        if (auto s = slot_of(node); s != index.end()) index.erase(s);
        if (has_ttl()) expiry.erase(node->expiry);
        bytes -= node->entry->bytes;
        lru.erase(node);
    }
    /// Drops the entries whose time to live has passed (under mu).
    void purge_expired(Clock::time_point t) noexcept {
        if (!has_ttl()) return;
        while (!expiry.empty() && expiry.begin()->first <= t) {
            erase(expiry.begin()->second);
            expirations.fetch_add(1, std::memory_order_relaxed);
        }
    }
    template <class Match>
    std::size_t erase_if(Match match) noexcept {
        std::size_t n = 0;
        std::lock_guard lock(mu);
        for (auto it = lru.begin(); it != lru.end();) {
            auto next = std::next(it);
            if (match(*it->entry)) {
                erase(it);
                ++n;
            }
            it = next;
        }
        invalidations.fetch_add(n, std::memory_order_relaxed);
        return n;
    }
};

Status ResultCache::validate(const ResultCacheOptions& o) {
    DSINFER_CHECK(o.max_bytes > 0, ErrorCode::invalid_argument,
                  "ResultCacheOptions::max_bytes must be > 0");
    DSINFER_CHECK(o.max_entries > 0, ErrorCode::invalid_argument,
                  "ResultCacheOptions::max_entries must be > 0");
    DSINFER_CHECK(o.ttl.count() >= 0, ErrorCode::invalid_argument,
                  "ResultCacheOptions::ttl must not be negative, got ", o.ttl.count(), " ns");
    return Status::ok();
}

ResultCache::ResultCache(ResultCacheOptions options) : impl_(std::make_unique<Impl>()) {
    throw_if_error(validate(options));
    impl_->options = std::move(options);
}

ResultCache::~ResultCache() = default;

std::uint64_t ResultCache::hash_inputs(const std::vector<NamedTensor>& inputs) noexcept {
    std::uint64_t h = kSeed;
    std::vector<const NamedTensor*> sorted;
    try {
        sorted = sorted_by_name(inputs);
    } catch (...) {  // no memory for the order: hash in the given order
        for (const NamedTensor& t : inputs) sorted.push_back(&t);
    }
    for (const NamedTensor* in : sorted) {
        const Tensor& t = in->tensor;
        h = absorb(h, hash_string(in->name, kMix1));
        h = absorb(h, static_cast<std::uint64_t>(t.dtype()) << 8 |
                          static_cast<std::uint64_t>(t.num_dims()));
        for (const std::int64_t d : t.shape().dims()) h = absorb(h, static_cast<std::uint64_t>(d));
        if (t.is_null()) continue;
        if (t.dtype() == DType::string) {
            for (const std::string& s : t.span_unchecked<std::string>())
                h = absorb(h, hash_string(s, s.size()));
        } else {
            h = absorb(h, hash_bytes(t.raw_data(), t.num_bytes(), h));
        }
    }
    return avalanche(h ^ inputs.size());
}

std::size_t ResultCache::entry_bytes(std::string_view model, std::string_view version,
                                     const std::vector<NamedTensor>& inputs,
                                     const Outputs& outputs) noexcept {
    std::size_t n = model.size() + version.size();
    for (const auto* ts : {&inputs, &outputs})
        for (const NamedTensor& t : *ts) n += t.name.size() + tensor_bytes(t.tensor);
    return n;
}

std::optional<ResultCache::Outputs> ResultCache::lookup(
    std::string_view model, std::string_view version,
    const std::vector<NamedTensor>& inputs) noexcept {
    Impl& im = *impl_;
    try {
        if (!cacheable(inputs)) {
            im.misses.fetch_add(1, std::memory_order_relaxed);
            return std::nullopt;
        }
        const std::uint64_t ih = im.hash(inputs);
        const std::uint64_t key = key_of(model, version, ih);
        const Clock::time_point now = im.now();
        // The live entries under this key (usually one); compared outside the lock.
        std::vector<std::shared_ptr<const Entry>> candidates;
        {
            std::lock_guard lock(im.mu);
            auto [b, e] = im.index.equal_range(key);
            std::vector<Lru::iterator> expired;
            for (auto it = b; it != e; ++it) {
                const Entry& en = *it->second->entry;
                if (en.input_hash != ih || en.model != model || en.version != version) continue;
                if (en.expires <= now)
                    expired.push_back(it->second);
                else
                    candidates.push_back(it->second->entry);
            }
            for (Lru::iterator node : expired) {
                im.erase(node);
                im.expirations.fetch_add(1, std::memory_order_relaxed);
            }
        }
        const std::vector<const NamedTensor*> sorted =
            candidates.empty() ? std::vector<const NamedTensor*>() : sorted_by_name(inputs);
        for (const auto& c : candidates) {
            if (!c->same_inputs(sorted)) {
                im.collisions.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            Outputs out = deep_copy(c->outputs);
            {
                std::lock_guard lock(im.mu);
                auto [b, e] = im.index.equal_range(key);
                for (auto it = b; it != e; ++it)
                    if (it->second->entry == c) {  // still held: now the most recently used
                        im.lru.splice(im.lru.begin(), im.lru, it->second);
                        break;
                    }
            }
            im.hits.fetch_add(1, std::memory_order_relaxed);
            return out;
        }
    } catch (...) {  // no memory for the copies: a miss
    }
    im.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
}

bool ResultCache::insert(std::string_view model, std::string_view version,
                         const std::vector<NamedTensor>& inputs, const Outputs& outputs) noexcept {
    Impl& im = *impl_;
    try {
        const std::size_t bytes = entry_bytes(model, version, inputs, outputs);
        if (!cacheable(inputs) || !cacheable(outputs) || bytes > im.options.max_bytes) {
            im.rejected.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
        auto entry = std::make_shared<Entry>();
        entry->model = model;
        entry->version = version;
        entry->input_hash = im.hash(inputs);
        std::vector<NamedTensor> sorted;
        sorted.reserve(inputs.size());
        for (const NamedTensor* in : sorted_by_name(inputs))
            sorted.push_back(NamedTensor{in->name, in->tensor.clone()});
        entry->inputs = std::move(sorted);
        entry->outputs = deep_copy(outputs);
        entry->bytes = bytes;
        const Clock::time_point now = im.now();
        if (im.has_ttl())
            entry->expires = im.options.ttl < Clock::time_point::max() - now
                                 ? now + std::chrono::duration_cast<Clock::duration>(im.options.ttl)
                                 : Clock::time_point::max();
        const std::uint64_t key = key_of(model, version, entry->input_hash);
        std::vector<const NamedTensor*> view;
        view.reserve(entry->inputs.size());
        for (const NamedTensor& t : entry->inputs) view.push_back(&t);

        std::lock_guard lock(im.mu);
        // The entry of equal inputs, if any, is replaced.
        auto [b, e] = im.index.equal_range(key);
        for (auto it = b; it != e; ++it) {
            const Entry& old = *it->second->entry;
            if (old.input_hash == entry->input_hash && old.model == model &&
                old.version == version && old.same_inputs(view)) {
                im.erase(it->second);
                break;
            }
        }
        im.purge_expired(now);
        while (!im.lru.empty() && (im.bytes + bytes > im.options.max_bytes ||
                                   im.lru.size() >= im.options.max_entries)) {
            im.erase(std::prev(im.lru.end()));
            im.evictions.fetch_add(1, std::memory_order_relaxed);
        }
        im.lru.push_front(Node{entry, key, {}});
        const Lru::iterator node = im.lru.begin();
        try {
            im.index.emplace(key, node);
            try {
                if (im.has_ttl()) node->expiry = im.expiry.emplace(entry->expires, node);
            } catch (...) {
                im.index.erase(im.slot_of(node));
                throw;
            }
        } catch (...) {
            im.lru.erase(node);
            throw;
        }
        im.bytes += bytes;
        im.insertions.fetch_add(1, std::memory_order_relaxed);
        return true;
    } catch (...) {  // no memory: nothing stored
        im.rejected.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
}

std::size_t ResultCache::invalidate(std::string_view model) noexcept {
    return impl_->erase_if([&](const Entry& e) { return e.model == model; });
}

std::size_t ResultCache::invalidate(std::string_view model, std::string_view version) noexcept {
    return impl_->erase_if(
        [&](const Entry& e) { return e.model == model && e.version == version; });
}

void ResultCache::clear(bool reset_counters) noexcept {
    Impl& im = *impl_;
    (void)im.erase_if([](const Entry&) { return true; });
    if (!reset_counters) return;
    for (auto* c : {&im.hits, &im.misses, &im.insertions, &im.evictions, &im.expirations,
                    &im.invalidations, &im.collisions, &im.rejected})
        c->store(0, std::memory_order_relaxed);
}

ResultCacheStats ResultCache::stats() const {
    const Impl& im = *impl_;
    ResultCacheStats s;
    {
        std::lock_guard lock(im.mu);
        s.bytes = im.bytes;
        s.entries = im.lru.size();
    }
    s.hits = im.hits.load(std::memory_order_relaxed);
    s.misses = im.misses.load(std::memory_order_relaxed);
    s.insertions = im.insertions.load(std::memory_order_relaxed);
    s.evictions = im.evictions.load(std::memory_order_relaxed);
    s.expirations = im.expirations.load(std::memory_order_relaxed);
    s.invalidations = im.invalidations.load(std::memory_order_relaxed);
    s.collisions = im.collisions.load(std::memory_order_relaxed);
    s.rejected = im.rejected.load(std::memory_order_relaxed);
    return s;
}

const ResultCacheOptions& ResultCache::options() const noexcept { return impl_->options; }

}  // namespace dsinfer::serving
