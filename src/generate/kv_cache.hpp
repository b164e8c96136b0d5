// The Generator's paged KV cache (docs/GENERATE.md "The cache"): one memory budget cut into
// fixed-size blocks of `block_tokens` positions (all layers' keys and values of those positions),
// a block table per sequence, reference counts, and a prefix cache of full prompt blocks keyed
// by (the previous block, the block's tokens) so sequences that start with the same tokens share
// the blocks already computed. Memory is reserved once and touched only as blocks fill.
//
// Not thread-safe: the Generator's scheduler thread owns it.
// Internal (namespace dsinfer::detail) to the generate room.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dsinfer/kv_cache.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

class PagedKvCache {
public:
    struct Config {
        std::int64_t layers = 0, kv_heads = 0, head_dim = 0, block_tokens = 16;
        DType dtype = DType::f32;
        std::size_t budget_bytes = 0;
        bool prefix_sharing = true;
    };

    /// invalid_argument for a dtype other than f32/f16/bf16/i8, a block size outside [1, 1024],
    /// or a budget below one block (naming the bytes one block takes).
    static StatusOr<std::unique_ptr<PagedKvCache>> create(const Config& c);
    ~PagedKvCache();
    PagedKvCache(const PagedKvCache&) = delete;
    PagedKvCache& operator=(const PagedKvCache&) = delete;

    std::int64_t num_blocks() const noexcept { return num_blocks_; }
    std::int64_t block_tokens() const noexcept { return cfg_.block_tokens; }
    std::size_t bytes_per_block() const noexcept { return bytes_per_block_; }
    std::size_t bytes() const noexcept {
        return bytes_per_block_ * static_cast<std::size_t>(num_blocks_);
    }
    /// Blocks held by no sequence (including those only the prefix cache keeps, which are
    /// evicted when needed).
    std::int64_t available_blocks() const noexcept;
    std::int64_t used_blocks() const noexcept { return num_blocks_ - available_blocks(); }
    std::int64_t blocks_for(std::int64_t positions) const noexcept {
        return (positions + cfg_.block_tokens - 1) / cfg_.block_tokens;
    }

    /// Grows `table` to cover `positions` positions; false (and `table` unchanged) when the
    /// free blocks do not suffice even after evicting the prefix cache.
    bool reserve(std::vector<std::int32_t>& table, std::int64_t positions);
    /// Lets go of every block of `table` (and clears it).
    void release(std::vector<std::int32_t>& table);

    /// Prefix sharing: appends to `table` (empty) the cached blocks whose tokens equal the
    /// first full blocks of `tokens[0, n)`, at most (n - 1) / block_tokens of them (the last
    /// prompt token is always computed), and returns the positions they cover.
    std::int64_t match_prefix(const std::int64_t* tokens, std::int64_t n,
                              std::vector<std::int32_t>& table);
    /// Records the full blocks [0, to_block) of `table`, computed for `tokens`, in the prefix
    /// cache (blocks already there are skipped).
    void register_prefix(const std::int64_t* tokens, const std::vector<std::int32_t>& table,
                         std::int64_t to_block);

    /// The pools for a step's KvCacheStep (the per-step fields are the caller's).
    void fill(KvCacheStep& s) const noexcept;

private:
    explicit PagedKvCache(const Config& c) : cfg_(c) {}
    void unref(std::int32_t b);
    bool evict_one();

    // A block's key hashes the previous block's key and its own tokens, so it names the whole
    // prefix; an entry keeps its tokens and the previous key, both compared on a hit.
    struct Entry {
        std::uint64_t parent_key;
        std::vector<std::int64_t> tokens;
        std::int32_t block;
        std::list<std::uint64_t>::iterator lru;
    };
    std::uint64_t key_of(std::uint64_t parent_key, const std::int64_t* tokens) const noexcept;
    const Entry* find(std::uint64_t parent_key, const std::int64_t* tokens, std::uint64_t* key);

    Config cfg_;
    std::int64_t num_blocks_ = 0;
    std::size_t bytes_per_block_ = 0;
    std::vector<void*> key_pool_, value_pool_;
    std::vector<float*> key_scale_, value_scale_;
    std::vector<std::int32_t> free_;         // free block ids
    std::vector<std::int32_t> refs_;         // per block: holders (sequences + the prefix cache)
    std::vector<std::uint64_t> cached_key_;  // per block: its prefix-cache key, or 0
    std::unordered_map<std::uint64_t, Entry> prefix_;
    std::list<std::uint64_t> lru_;  // prefix keys, least recently used first
    std::int64_t evictable_ = 0;    // cached blocks only the prefix cache holds
};

}  // namespace dsinfer::detail
