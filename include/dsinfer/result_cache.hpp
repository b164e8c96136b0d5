// dsinfer/result_cache.hpp — an opt-in LRU cache of model outputs keyed by the exact inputs
// (target dsinfer::serving).
//
// Purpose: a server that sees the same request again (a retried call, a popular query) can
// answer it without running the model. ResultCache maps (model name, model version, inputs)
// to the outputs a run returned. The inputs are hashed (ResultCache::hash_inputs: a 64-bit
// hash of each input's name, element type, shape and bytes; the order of the inputs does not
// matter) to find the entry, and a hit is confirmed against a copy of the inputs kept with it:
// same names, element types, shapes and bytes. Two inputs with the same hash are two entries,
// and neither ever answers for the other. Limits: max_bytes (the bytes of the inputs and
// outputs held, entry_bytes()), max_entries, and a time to live after which an entry is a miss
// and is dropped; past a limit the least recently used entries are evicted. invalidate() drops
// a model's entries (all versions, or one) for a hot reload; putting the version in the key
// already keeps a new version from seeing the old one's results.
// Nothing is cached unless the caller inserts it: the server decides which models are
// deterministic enough to cache (a model with random ops, or one whose outputs depend on
// anything but its inputs, must not be).
//
// Contract on the tensors: insert() stores deep copies of the inputs and outputs (a caller may
// reuse its buffers afterwards), and lookup() returns deep copies of the stored outputs (a
// caller may write into them): no caller can change what the cache holds. Host tensors only:
// an insert with a device tensor stores nothing, a lookup with one is a miss.
//
// Ownership/threading: every member is thread-safe (one mutex; hashing, copying and the byte
// comparison of a hit run outside it). ResultCache is neither copyable nor movable; share it
// by reference or shared_ptr. A failure inside the cache (out of memory) is a miss or an
// insert that stores nothing, never an exception. Hash values are for this process only (they
// depend on the platform's byte order).
//
// Usage:
//   dsinfer::serving::ResultCache cache({.max_bytes = 256 << 20, .ttl = std::chrono::minutes(5)});
//   if (auto hit = cache.lookup("resnet", "3", inputs)) return *hit;
//   auto outputs = engine.run(inputs);
//   cache.insert("resnet", "3", inputs, outputs);
//   ...
//   cache.invalidate("resnet", "3");             // after swapping version 3 out
//   dsinfer::serving::ResultCacheStats s = cache.stats();   // hits, misses, evictions, bytes
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "dsinfer/serving.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::serving {

/// ResultCache limits (checked when it is created: invalid_argument naming the field) and
/// test hooks.
struct ResultCacheOptions {
    using Clock = std::chrono::steady_clock;

    /// Bytes of inputs and outputs held (ResultCache::entry_bytes), > 0. An entry larger than
    /// this alone is not stored.
    std::size_t max_bytes = std::size_t{64} << 20;
    /// Entries held, > 0.
    std::size_t max_entries = 4096;
    /// How long after its insertion an entry answers; 0 = until evicted. Not negative.
    std::chrono::nanoseconds ttl{0};
    /// Test hooks. `hash` replaces ResultCache::hash_inputs (e.g. a constant, to force
    /// collisions); `clock` replaces steady_clock::now() for the time to live. Empty: the
    /// defaults. Both must be thread-safe and must not throw.
    std::function<std::uint64_t(const std::vector<NamedTensor>&)> hash{};
    std::function<Clock::time_point()> clock{};
};

/// Counters since the cache was created (or clear(true)), and what it holds now.
struct ResultCacheStats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;         ///< lookups without a live entry (expired ones included)
    std::uint64_t insertions = 0;     ///< entries stored (a replaced entry counts again)
    std::uint64_t evictions = 0;      ///< entries dropped for room (max_bytes, max_entries)
    std::uint64_t expirations = 0;    ///< entries dropped because their time to live passed
    std::uint64_t invalidations = 0;  ///< entries dropped by invalidate() and clear()
    /// Entries whose hash matched a lookup's but whose inputs did not (the full-key check
    /// saved a wrong answer).
    std::uint64_t collisions = 0;
    /// insert() calls that stored nothing (an entry over max_bytes, a device tensor, no
    /// memory).
    std::uint64_t rejected = 0;
    std::size_t bytes = 0;    ///< entry_bytes() of the entries held now
    std::size_t entries = 0;  ///< entries held now

    /// hits / (hits + misses); 0 before any lookup.
    double hit_rate() const noexcept {
        const std::uint64_t n = hits + misses;
        return n == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(n);
    }
};

/// Model outputs by exact inputs, LRU with byte, count and age limits. See the top of this
/// header.
class DSINFER_SERVING_API ResultCache {
public:
    using Outputs = std::vector<NamedTensor>;

    /// Throws dsinfer::Error invalid_argument when `options` are out of range (naming the
    /// field).
    explicit ResultCache(ResultCacheOptions options = {});
    ResultCache(const ResultCache&) = delete;
    ResultCache& operator=(const ResultCache&) = delete;
    ~ResultCache();

    /// `options`' checks alone: invalid_argument naming the field, else ok.
    static Status validate(const ResultCacheOptions& options);

    /// The outputs stored for exactly these inputs of (model, version), as deep copies, and
    /// the entry becomes the most recently used; nullopt on a miss (none stored, expired, a
    /// device tensor among the inputs, or no memory for the copies).
    std::optional<Outputs> lookup(std::string_view model, std::string_view version,
                                  const std::vector<NamedTensor>& inputs) noexcept;
    /// Stores deep copies of `inputs` and `outputs` for (model, version), replacing the entry
    /// of equal inputs if there is one, and evicting the least recently used entries (expired
    /// ones first) until the limits hold. False when nothing was stored (see
    /// ResultCacheStats::rejected).
    bool insert(std::string_view model, std::string_view version,
                const std::vector<NamedTensor>& inputs, const Outputs& outputs) noexcept;
    /// Drops every entry of `model` (every version); returns how many. An insert racing with
    /// it (a result the old model computed) may survive: key versions apart to rule that out.
    std::size_t invalidate(std::string_view model) noexcept;
    /// Drops the entries of one version of `model`; returns how many.
    std::size_t invalidate(std::string_view model, std::string_view version) noexcept;
    /// Drops every entry (counted as invalidations); with `reset_counters`, also zeroes the
    /// counters.
    void clear(bool reset_counters = false) noexcept;

    ResultCacheStats stats() const;
    const ResultCacheOptions& options() const noexcept;

    /// The default key hash of `inputs`: every input's name, element type, shape and bytes
    /// (strings: each element's length and bytes), independent of the inputs' order. For this
    /// process only.
    static std::uint64_t hash_inputs(const std::vector<NamedTensor>& inputs) noexcept;
    /// What an entry counts against max_bytes: the tensors' bytes (a string element: its
    /// characters plus sizeof(std::string)) of the inputs and outputs, their names, and the
    /// model and version strings. The per-entry bookkeeping (a few hundred bytes) is not
    /// counted: max_entries bounds it.
    static std::size_t entry_bytes(std::string_view model, std::string_view version,
                                   const std::vector<NamedTensor>& inputs,
                                   const Outputs& outputs) noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::serving
