// The executor's default allocator for intermediate and output tensors: a thread-safe cache of
// large host buffers over cpu_allocator(). Freed blocks of 64 KiB and more are kept per size
// class and handed out again, so that repeated runs do not return their activations to the
// kernel and fault them in again (measured: ResNet-50 batch 8 took ~80 K page faults per run,
// about a third of its time, without it). Small blocks go straight to malloc, which already
// recycles them. The cache keeps at most kMaxCachedBytes; blocks beyond that are freed.
//
// Process-wide and never destroyed: output tensors handed to the application hold a pointer to
// it and may outlive every engine. Step 3's MemoryPool (limits, statistics, trim) replaces it.
// With DSINFER_SANITIZE builds (DSINFER_PASS_THROUGH_ALLOCATOR) every block goes to malloc so the
// sanitizers see each allocation.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "dsinfer/allocator.hpp"

namespace dsinfer::detail {

class BufferCache final : public Allocator {
public:
    static constexpr std::size_t kMinCached = std::size_t{64} << 10;
    static constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;

    Device device() const noexcept override { return {}; }

    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        if (!cacheable(bytes, alignment)) return cpu_allocator().allocate(bytes, alignment);
        const std::size_t cls = size_class(bytes);
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = free_.find(cls);
            if (it != free_.end() && !it->second.empty()) {
                void* p = it->second.back();
                it->second.pop_back();
                cached_ -= cls;
                return p;
            }
        }
        return cpu_allocator().allocate(cls, kTensorAlignment);
    }

    void deallocate(void* p, std::size_t bytes) noexcept override {
        if (p == nullptr) return;
        // Same test as allocate: `bytes` is the requested size, so the class matches.
        if (!cacheable(bytes, kTensorAlignment)) return cpu_allocator().deallocate(p, bytes);
        const std::size_t cls = size_class(bytes);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (cached_ + cls <= kMaxCachedBytes) {
                try {
                    free_[cls].push_back(p);
                    cached_ += cls;
                    return;
                } catch (...) {  // bookkeeping allocation failed: just free the block
                }
            }
        }
        cpu_allocator().deallocate(p, cls);
    }

private:
    static bool cacheable(std::size_t bytes, std::size_t alignment) noexcept {
#if defined(DSINFER_PASS_THROUGH_ALLOCATOR)
        (void)bytes;
        (void)alignment;
        return false;
#else
        return bytes >= kMinCached && alignment <= kTensorAlignment;
#endif
    }
    /// Eight classes per power of two (at most 12.5 % slack).
    static std::size_t size_class(std::size_t bytes) noexcept {
        std::size_t p = kMinCached;
        while (p * 2 <= bytes) p *= 2;
        const std::size_t step = p / 8;
        return (bytes + step - 1) / step * step;
    }

    std::mutex mu_;
    std::map<std::size_t, std::vector<void*>> free_;
    std::size_t cached_ = 0;
};

/// The process-wide instance (intentionally leaked; see above).
inline BufferCache& buffer_cache() noexcept {
    static BufferCache* cache = new BufferCache();
    return *cache;
}

}  // namespace dsinfer::detail
