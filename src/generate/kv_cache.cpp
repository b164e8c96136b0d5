// The Generator's paged KV cache (kv_cache.hpp).
#include "generate/kv_cache.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "runtime/fnv.hpp"

namespace dsinfer::detail {

namespace {
std::size_t elem_bytes(DType d) noexcept {
    switch (d) {
        case DType::f32: return 4;
        case DType::f16:
        case DType::bf16: return 2;
        case DType::i8: return 1;
        default: return 0;
    }
}
void* reserve_bytes(std::size_t n) {
    return ::operator new (std::max<std::size_t>(n, 64), std::align_val_t{64});
}
void free_bytes(void* p) noexcept {
    if (p != nullptr) ::operator delete (p, std::align_val_t{64});
}
}  // namespace

StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::create(const Config& c) {
    const std::size_t eb = elem_bytes(c.dtype);
    DSINFER_CHECK(eb != 0, ErrorCode::invalid_argument, "KV cache dtype ", dtype_name(c.dtype),
                  " is not supported (f32, f16, bf16 or i8)");
    DSINFER_CHECK(c.block_tokens >= 1 && c.block_tokens <= 1024, ErrorCode::invalid_argument,
                  "KV cache block_tokens must be in [1, 1024], got ", c.block_tokens);
    DSINFER_CHECK(c.layers > 0 && c.kv_heads > 0 && c.head_dim > 0, ErrorCode::invalid_argument,
                  "KV cache geometry must be positive");
    std::unique_ptr<PagedKvCache> k(new PagedKvCache(c));
    const std::size_t rows = static_cast<std::size_t>(c.kv_heads * c.block_tokens);
    const std::size_t per_layer = 2 * (rows * static_cast<std::size_t>(c.head_dim) * eb +
                                       (c.dtype == DType::i8 ? rows * 4 : 0));
    k->bytes_per_block_ = per_layer * static_cast<std::size_t>(c.layers);
    k->num_blocks_ = static_cast<std::int64_t>(
        std::min<std::size_t>(c.budget_bytes / k->bytes_per_block_, std::size_t{1} << 30));
    DSINFER_CHECK(k->num_blocks_ >= 1, ErrorCode::invalid_argument, "KV cache budget of ",
                  c.budget_bytes, " bytes is below one block (", k->bytes_per_block_,
                  " bytes: ", c.block_tokens, " positions of ", c.layers, " layers)");
    const std::size_t nb = static_cast<std::size_t>(k->num_blocks_);
    try {
        for (std::int64_t l = 0; l < c.layers; ++l) {
            k->key_pool_.push_back(
                reserve_bytes(nb * rows * static_cast<std::size_t>(c.head_dim) * eb));
            k->value_pool_.push_back(
                reserve_bytes(nb * rows * static_cast<std::size_t>(c.head_dim) * eb));
            if (c.dtype == DType::i8) {
                k->key_scale_.push_back(static_cast<float*>(reserve_bytes(nb * rows * 4)));
                k->value_scale_.push_back(static_cast<float*>(reserve_bytes(nb * rows * 4)));
            }
        }
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory reserving the KV cache (" +
                                                         std::to_string(k->bytes()) + " bytes)");
    }
    k->refs_.assign(nb, 0);
    k->cached_key_.assign(nb, 0);
    k->free_.reserve(nb);
    for (std::int64_t b = k->num_blocks_; b-- > 0;)
        k->free_.push_back(static_cast<std::int32_t>(b));
    return k;
}

PagedKvCache::~PagedKvCache() {
    for (void* p : key_pool_) free_bytes(p);
    for (void* p : value_pool_) free_bytes(p);
    for (float* p : key_scale_) free_bytes(p);
    for (float* p : value_scale_) free_bytes(p);
}

std::int64_t PagedKvCache::available_blocks() const noexcept {
    return static_cast<std::int64_t>(free_.size()) + evictable_;
}

bool PagedKvCache::evict_one() {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        auto e = prefix_.find(*it);
        if (e == prefix_.end()) continue;
        const std::int32_t b = e->second.block;
        if (refs_[static_cast<std::size_t>(b)] != 1) continue;
        cached_key_[static_cast<std::size_t>(b)] = 0;
        lru_.erase(it);
        prefix_.erase(e);
        refs_[static_cast<std::size_t>(b)] = 0;
        --evictable_;
        free_.push_back(b);
        return true;
    }
    return false;
}

bool PagedKvCache::reserve(std::vector<std::int32_t>& table, std::int64_t positions) {
    const std::int64_t need = blocks_for(positions) - static_cast<std::int64_t>(table.size());
    if (need <= 0) return true;
    if (available_blocks() < need) return false;
    for (std::int64_t i = 0; i < need; ++i) {
        if (free_.empty() && !evict_one()) return false;  // cannot happen: counted above
        const std::int32_t b = free_.back();
        free_.pop_back();
        refs_[static_cast<std::size_t>(b)] = 1;
        table.push_back(b);
    }
    return true;
}

void PagedKvCache::unref(std::int32_t b) {
    auto& r = refs_[static_cast<std::size_t>(b)];
    --r;
    if (r == 0)
        free_.push_back(b);
    else if (r == 1 && cached_key_[static_cast<std::size_t>(b)] != 0)
        ++evictable_;
}

void PagedKvCache::release(std::vector<std::int32_t>& table) {
    for (std::int32_t b : table) unref(b);
    table.clear();
}

std::uint64_t PagedKvCache::key_of(std::uint64_t parent_key,
                                   const std::int64_t* tokens) const noexcept {
    // FNV-1a over the parent key and the tokens, then a final mix; never 0 (0 means "none").
    std::uint64_t h = kFnvOffset ^ parent_key;
    fnv_mix(h, parent_key);
    for (std::int64_t i = 0; i < cfg_.block_tokens; ++i)
        fnv_mix(h, static_cast<std::uint64_t>(tokens[i]));
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h == 0 ? 1 : h;
}

const PagedKvCache::Entry* PagedKvCache::find(std::uint64_t parent_key, const std::int64_t* tokens,
                                              std::uint64_t* key) {
    *key = key_of(parent_key, tokens);
    const auto it = prefix_.find(*key);
    if (it == prefix_.end() || it->second.parent_key != parent_key ||
        !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens))
        return nullptr;
    return &it->second;
}

std::int64_t PagedKvCache::match_prefix(const std::int64_t* tokens, std::int64_t n,
                                        std::vector<std::int32_t>& table) {
    if (!cfg_.prefix_sharing || n < 1) return 0;
    const std::int64_t bt = cfg_.block_tokens;
    std::uint64_t parent = 0;
    for (std::int64_t i = 0; i < (n - 1) / bt; ++i) {
        std::uint64_t key = 0;
        const Entry* e = find(parent, tokens + i * bt, &key);
        if (e == nullptr) break;
        auto& r = refs_[static_cast<std::size_t>(e->block)];
        if (r == 1) --evictable_;
        ++r;
        table.push_back(e->block);
        lru_.splice(lru_.end(), lru_, e->lru);
        parent = key;
    }
    return static_cast<std::int64_t>(table.size()) * bt;
}

void PagedKvCache::register_prefix(const std::int64_t* tokens,
                                   const std::vector<std::int32_t>& table, std::int64_t to_block) {
    if (!cfg_.prefix_sharing) return;
    const std::int64_t bt = cfg_.block_tokens;
    std::uint64_t parent = 0;
    for (std::int64_t i = 0; i < to_block && i < static_cast<std::int64_t>(table.size()); ++i) {
        const std::int32_t b = table[static_cast<std::size_t>(i)];
        std::uint64_t key = 0;
        if (find(parent, tokens + i * bt, &key) == nullptr && !prefix_.contains(key) &&
            cached_key_[static_cast<std::size_t>(b)] == 0) {
            lru_.push_back(key);
            prefix_.emplace(
                key,
                Entry{parent, std::vector<std::int64_t>(tokens + i * bt, tokens + (i + 1) * bt), b,
                      std::prev(lru_.end())});
            cached_key_[static_cast<std::size_t>(b)] = key;
            ++refs_[static_cast<std::size_t>(b)];
        }
        parent = key;
    }
}

void PagedKvCache::fill(KvCacheStep& s) const noexcept {
    s.layers = cfg_.layers;
    s.kv_heads = cfg_.kv_heads;
    s.head_dim = cfg_.head_dim;
    s.block_tokens = cfg_.block_tokens;
    s.dtype = cfg_.dtype;
    s.key_pool = key_pool_.data();
    s.value_pool = value_pool_.data();
    s.key_scale = key_scale_.empty() ? nullptr : key_scale_.data();
    s.value_scale = value_scale_.empty() ? nullptr : value_scale_.data();
    s.num_blocks = num_blocks_;
}

}  // namespace dsinfer::detail
