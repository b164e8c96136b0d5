// dsinfer/allocator.hpp — the memory interface every buffer comes from.
//
// Purpose: Device (where memory lives) and Allocator (two methods, like
// std::pmr::memory_resource). Pools (Step 3) and device allocators (CUDA) are Allocators too,
// so they compose as decorators.
//
// Ownership/threading: an Allocator must be thread-safe; it must outlive every buffer it
// allocated (Tensors keep a shared_ptr to their buffer, not to the allocator, so the engine
// keeps its allocators alive for as long as any tensor it returned may exist — the default
// CPU allocator is a process-lifetime singleton).
//
// Usage:
//   dsinfer::Allocator& a = dsinfer::cpu_allocator();
//   void* p = a.allocate(1024, 64);      // nullptr on failure
//   a.deallocate(p, 1024);
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

namespace dsinfer {

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
    DeviceKind kind = DeviceKind::cpu;
    int index = 0;
    friend constexpr bool operator==(Device a, Device b) noexcept {
        return a.kind == b.kind && a.index == b.index;
    }
    std::string to_string() const {
        return kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
    }
};

/// Alignment of every tensor buffer dsinfer allocates (one cache line / one AVX-512 vector).
inline constexpr std::size_t kTensorAlignment = 64;

class Allocator {
public:
    virtual ~Allocator() = default;
    virtual Device device() const noexcept = 0;
    /// Returns `bytes` bytes aligned to `alignment` (a power of two), or nullptr on failure.
    /// Never throws. allocate(0, a) returns a valid unique pointer or nullptr.
    virtual void* allocate(std::size_t bytes, std::size_t alignment) noexcept = 0;
    /// Releases memory from allocate(); `bytes` is the size that was requested.
    virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
};

namespace testing {

/// TESTING HOOK (fault injection, tests/fault/): while this is positive, every
/// CpuAllocator::allocate call (and, in the fault-test executable, every operator new) takes
/// one from it, and the call that takes the last one fails as if the system were out of memory
/// (nullptr here; std::bad_alloc from operator new). 0 (the default) disables it; then the
/// cost is one relaxed atomic load per CpuAllocator allocation. Never set it in production.
inline std::atomic<std::int64_t> allocation_fault_countdown{0};

/// True when the calling allocation is the one the countdown picked to fail.
inline bool allocation_fault_injected() noexcept {
    return allocation_fault_countdown.load(std::memory_order_relaxed) > 0 &&
           allocation_fault_countdown.fetch_sub(1, std::memory_order_relaxed) == 1;
}

}  // namespace testing

/// Aligned host memory from the C runtime.
class CpuAllocator final : public Allocator {
public:
    Device device() const noexcept override { return {}; }
    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        if (testing::allocation_fault_injected()) return nullptr;
        if (alignment < sizeof(void*)) alignment = sizeof(void*);
        std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
        if (rounded < bytes) return nullptr;  // overflow
        if (rounded == 0) rounded = alignment;
        return std::aligned_alloc(alignment, rounded);
    }
    void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
};

/// The process-wide default host allocator (never destroyed before static destructors).
inline Allocator& cpu_allocator() noexcept {
    static CpuAllocator instance;
    return instance;
}

}  // namespace dsinfer
