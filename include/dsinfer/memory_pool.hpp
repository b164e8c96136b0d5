// dsinfer/memory_pool.hpp — MemoryPool: a caching Allocator with a hard limit and statistics.
//
// Purpose: an Allocator decorator over any upstream Allocator (cpu_allocator() by default).
// Freed blocks are kept per size class (eight classes per power of two, all multiples of 64
// bytes) and handed out again, so repeated runs do not return their activations to the
// system and fault them in again. It enforces a hard limit on the bytes it holds from the
// upstream (an allocation that would pass it first trims cached blocks, then fails with
// nullptr, which Tensor::allocate reports as resource_exhausted), caps the bytes it keeps
// cached, returns cached memory on trim(), and keeps statistics. The engine's activations,
// workspaces and outputs come from one (EngineOptions::memory_pool; null = default_memory_pool()).
//
// Ownership/threading: thread-safe (one mutex; the hit path is a lookup and a pop). A pool
// must outlive the buffers it handed out: allocate_tensor() binds each tensor to the pool (the
// buffer holds a shared_ptr to it), and the engine does the same for the outputs it returns,
// so those may outlive both the engine and the application's own shared_ptr. Blocks the pool
// holds go back to the upstream on trim() and when the pool is destroyed. The process-wide
// default_memory_pool() is never destroyed.
//
// Pass-through mode (MemoryPoolOptions::pass_through, forced when DSINFER_PASS_THROUGH_ALLOCATOR
// is defined, as the sanitizer builds do): every allocate/deallocate goes to the upstream with
// the requested size so sanitizers see each allocation; statistics and the limit still apply.
//
// Usage:
//   auto pool = dsinfer::MemoryPool::create({.limit_bytes = 2ull << 30});
//   dsinfer::EngineOptions o;
//   o.memory_pool = pool;                         // the engine allocates from it
//   auto t = pool->allocate_tensor(dsinfer::DType::f32, {8, 1024});  // StatusOr<Tensor>
//   dsinfer::MemoryPoolStats s = pool->stats();   // bytes_in_use, hit_rate(), ...
//   pool->trim();                                 // return cached blocks to the upstream
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/allocator.hpp"
#include "dsinfer/dtype.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer {

struct MemoryPoolOptions {
    /// Hard limit on bytes held from the upstream (in use + cached, class-rounded); 0 = none.
    std::size_t limit_bytes = 0;
    /// Freed blocks are cached while the cache stays at or below this; beyond, they go back.
    std::size_t max_cached_bytes = std::size_t{1} << 30;
    /// Every call goes to the upstream (no caching); forced by DSINFER_PASS_THROUGH_ALLOCATOR.
    bool pass_through = false;
};

/// A snapshot of a pool's counters. Byte counts: "requested" is what callers asked for;
/// "reserved" is what the pool holds from its upstream (the size classes of the blocks in use
/// and of the cached blocks).
struct MemoryPoolStats {
    std::uint64_t bytes_in_use = 0;         ///< requested bytes of live allocations
    std::uint64_t peak_bytes_in_use = 0;    ///< since creation or reset_peak()
    std::uint64_t bytes_cached = 0;         ///< free blocks kept for reuse (class sizes)
    std::uint64_t bytes_reserved = 0;       ///< held from the upstream: in use + cached, rounded
    std::uint64_t peak_bytes_reserved = 0;  ///< since creation or reset_peak()
    std::uint64_t allocations = 0;          ///< successful allocate() calls
    std::uint64_t hits = 0;                 ///< served from the cache
    std::uint64_t misses = 0;               ///< served by the upstream
    std::uint64_t failed = 0;               ///< refused: over the limit or upstream failure
    std::uint64_t trimmed_bytes = 0;        ///< cached bytes given back (trim, limit, cap)
    /// Share of the reserved memory that serves no live request: 1 - bytes_in_use /
    /// bytes_reserved (cached blocks plus size-class rounding); 0 when nothing is reserved.
    double fragmentation = 0.0;

    double hit_rate() const noexcept {
        const std::uint64_t n = hits + misses;
        return n == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(n);
    }
};

class MemoryPool final : public Allocator, public std::enable_shared_from_this<MemoryPool> {
public:
    /// A pool owned by a shared_ptr (needed by allocate_tensor). `upstream` must outlive it.
    static std::shared_ptr<MemoryPool> create(MemoryPoolOptions options = {},
                                              Allocator& upstream = cpu_allocator()) {
        return std::make_shared<MemoryPool>(options, upstream);
    }

    explicit MemoryPool(MemoryPoolOptions options = {}, Allocator& upstream = cpu_allocator())
        : options_(options), upstream_(&upstream) {
#if defined(DSINFER_PASS_THROUGH_ALLOCATOR)
        options_.pass_through = true;
#endif
    }
    MemoryPool(const MemoryPool&) = delete;
    MemoryPool& operator=(const MemoryPool&) = delete;
    /// Returns the cached blocks to the upstream. Blocks still in use are the caller's error
    /// (they would be returned to a dead pool); allocate_tensor() and the engine prevent it.
    ~MemoryPool() override { trim(0); }

    const MemoryPoolOptions& options() const noexcept { return options_; }
    bool pass_through() const noexcept { return options_.pass_through; }
    Device device() const noexcept override { return upstream_->device(); }

    /// The size class of a request: multiples of 64 up to 512 bytes, then eight classes per
    /// power of two (at most 12.5 % above the request).
    static std::size_t size_class(std::size_t bytes) noexcept {
        constexpr std::size_t kQuantum = kTensorAlignment;
        if (bytes <= 8 * kQuantum) return bytes == 0 ? kQuantum : (bytes + kQuantum - 1) / kQuantum * kQuantum;
        std::size_t p = 8 * kQuantum;
        while (p <= (SIZE_MAX >> 1) && p * 2 <= bytes) p *= 2;
        const std::size_t step = p / 8;
        if (bytes > SIZE_MAX - step) return 0;  // overflow: never satisfiable
        return (bytes + step - 1) / step * step;
    }

    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        return allocate_impl(bytes, alignment, false);
    }

    /// Like allocate(), but on a miss cached blocks of at least the same total size go back to
    /// the upstream first: a large, long-lived block (the executor's activation arena) takes
    /// the place of idle cached memory instead of adding to it.
    void* allocate_replacing_cache(std::size_t bytes, std::size_t alignment) noexcept {
        return allocate_impl(bytes, alignment, true);
    }

    void deallocate(void* p, std::size_t bytes) noexcept override {
        if (p == nullptr) return;
        const std::size_t block = options_.pass_through ? bytes : size_class(bytes);
        {
            std::lock_guard<std::mutex> lock(mu_);
            in_use_ -= bytes;
            if (!options_.pass_through && cached_ + block <= options_.max_cached_bytes) {
                try {
                    free_[block].push_back(p);
                    cached_ += block;
                    return;
                } catch (...) {  // bookkeeping failed: give the block back instead
                }
            }
            reserved_ -= block;
            if (!options_.pass_through) trimmed_ += block;
        }
        upstream_->deallocate(p, block);
    }

    /// Changes the hard limit (0 = none). Blocks already held beyond a lower limit stay until
    /// they are freed; later allocations see the new limit.
    void set_limit_bytes(std::size_t limit) noexcept {
        std::lock_guard<std::mutex> lock(mu_);
        options_.limit_bytes = limit;
    }

    /// Returns cached blocks to the upstream, largest first, until at most `keep_bytes` stay
    /// cached. Returns the bytes released.
    std::size_t trim(std::size_t keep_bytes = 0) noexcept {
        Released release;
        std::size_t before = 0, after = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            before = reserved_;
            while (cached_ > keep_bytes && evict_largest(release)) {
            }
            after = reserved_;
        }
        give_back(release);
        return before - after;
    }

    /// " (memory pool limit N bytes, R reserved, U in use)" when the pool has a limit, else "":
    /// what an allocation failure adds to its message so that the reader knows which limit
    /// refused it.
    std::string limit_note() const {
        if (options_.limit_bytes == 0) return {};
        const MemoryPoolStats s = stats();
        return " (memory pool limit " + std::to_string(options_.limit_bytes) + " bytes, " +
               std::to_string(s.bytes_reserved) + " reserved, " + std::to_string(s.bytes_in_use) +
               " in use)";
    }

    /// A tensor whose buffer comes from this pool and keeps the pool alive (the pool must be
    /// owned by a shared_ptr: create()). resource_exhausted over the limit or on overflow.
    StatusOr<Tensor> allocate_tensor(DType dtype, const Shape& shape) {
        std::shared_ptr<MemoryPool> self = weak_from_this().lock();
        if (!self)
            return Status::error(ErrorCode::internal,
                                 "MemoryPool::allocate_tensor needs a pool owned by a shared_ptr "
                                 "(MemoryPool::create)");
        auto t = Tensor::allocate(dtype, shape, *this);
        if (!t.is_ok()) return Status(t.status().code(), t.status().message() + limit_note());
        return bind(std::move(self), std::move(t).value());
    }

    /// `t` (the same buffer) holding `pool` too: the pool lives at least as long as the result.
    static Tensor bind(std::shared_ptr<MemoryPool> pool, Tensor t) {
        struct Bound {
            std::shared_ptr<MemoryPool> pool;  // destroyed last: after the buffer went back
            Tensor tensor;
        };
        void* data = t.raw_data();
        const DType dtype = t.dtype();
        const Shape shape = t.shape();
        const Device device = t.device();
        return Tensor::wrap(data, dtype, shape, device,
                            std::make_shared<Bound>(Bound{std::move(pool), std::move(t)}));
    }

    MemoryPoolStats stats() const {
        std::lock_guard<std::mutex> lock(mu_);
        MemoryPoolStats s;
        s.bytes_in_use = in_use_;
        s.peak_bytes_in_use = peak_in_use_;
        s.bytes_cached = cached_;
        s.bytes_reserved = reserved_;
        s.peak_bytes_reserved = peak_reserved_;
        s.allocations = allocations_;
        s.hits = hits_;
        s.misses = misses_;
        s.failed = failed_;
        s.trimmed_bytes = trimmed_;
        s.fragmentation = reserved_ == 0 ? 0.0
                                         : 1.0 - static_cast<double>(in_use_) /
                                                     static_cast<double>(reserved_);
        return s;
    }

    /// Restarts the peaks from the current values.
    void reset_peak() noexcept {
        std::lock_guard<std::mutex> lock(mu_);
        peak_in_use_ = in_use_;
        peak_reserved_ = reserved_;
    }

private:
    using Released = std::vector<std::pair<void*, std::size_t>>;

    void* allocate_impl(std::size_t bytes, std::size_t alignment, bool replace_cache) noexcept {
        if (alignment < kTensorAlignment) alignment = kTensorAlignment;
        const std::size_t block = options_.pass_through ? bytes : size_class(bytes);
        if (block == 0 && !options_.pass_through) return refuse();
        Released release;
        bool refused = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!options_.pass_through) {
                if (void* p = take_cached(block, alignment)) {
                    ++hits_;
                    note_allocation(bytes);
                    return p;
                }
            }
            // A miss: reserve the block against the limit (trimming the cache if that makes it
            // fit), then ask the upstream outside the lock.
            if (replace_cache) {
                std::size_t freed = 0;
                while (freed < block) {
                    const std::size_t cached = cached_;
                    if (!evict_largest(release)) break;
                    freed += cached - cached_;
                }
            }
            if (options_.limit_bytes != 0 && (block > options_.limit_bytes ||
                                              reserved_ - cached_ > options_.limit_bytes - block)) {
                ++failed_;
                refused = true;
            } else {
                while (options_.limit_bytes != 0 && reserved_ > options_.limit_bytes - block &&
                       evict_largest(release)) {
                }
                reserved_ += block;
                peak_reserved_ = std::max(peak_reserved_, reserved_);
            }
        }
        give_back(release);
        if (refused) return nullptr;
        void* p = upstream_->allocate(block, alignment);
        if (p == nullptr && trim(0) > 0) p = upstream_->allocate(block, alignment);
        std::lock_guard<std::mutex> lock(mu_);
        if (p == nullptr) {
            reserved_ -= block;
            ++failed_;
            return nullptr;
        }
        ++misses_;
        note_allocation(bytes);
        return p;
    }

    void* refuse() noexcept {
        std::lock_guard<std::mutex> lock(mu_);
        ++failed_;
        return nullptr;
    }
    // Under mu_.
    void note_allocation(std::size_t bytes) noexcept {
        ++allocations_;
        in_use_ += bytes;
        peak_in_use_ = std::max(peak_in_use_, in_use_);
    }
    void* take_cached(std::size_t block, std::size_t alignment) noexcept {
        auto it = free_.find(block);
        if (it == free_.end()) return nullptr;
        auto& list = it->second;
        for (std::size_t i = list.size(); i-- > 0;) {
            void* p = list[i];
            if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) continue;
            list[i] = list.back();
            list.pop_back();
            cached_ -= block;
            return p;
        }
        return nullptr;
    }
    /// Moves one cached block of the largest class to `release` (given back outside the lock).
    /// False when nothing is cached.
    bool evict_largest(Released& release) noexcept {
        while (!free_.empty() && free_.rbegin()->second.empty()) free_.erase(std::prev(free_.end()));
        if (free_.empty()) return false;
        auto& [block, list] = *free_.rbegin();
        try {
            release.emplace_back(list.back(), block);
        } catch (...) {
            upstream_->deallocate(list.back(), block);  // no room to defer: free it here
        }
        list.pop_back();
        cached_ -= block;
        reserved_ -= block;
        trimmed_ += block;
        return true;
    }
    void give_back(const Released& release) noexcept {
        for (const auto& [p, block] : release) upstream_->deallocate(p, block);
    }

    MemoryPoolOptions options_;
    Allocator* upstream_;
    mutable std::mutex mu_;
    std::map<std::size_t, std::vector<void*>> free_;  // class size -> cached blocks
    std::size_t in_use_ = 0, peak_in_use_ = 0, cached_ = 0, reserved_ = 0, peak_reserved_ = 0;
    std::uint64_t allocations_ = 0, hits_ = 0, misses_ = 0, failed_ = 0, trimmed_ = 0;
};

/// The process-wide pool the engine uses when EngineOptions::memory_pool is null (no limit,
/// up to 1 GiB cached). Never destroyed: outputs may outlive every engine.
inline std::shared_ptr<MemoryPool> default_memory_pool() {
    static const auto* pool = new std::shared_ptr<MemoryPool>(MemoryPool::create());
    return *pool;
}

}  // namespace dsinfer
