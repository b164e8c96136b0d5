// Global operator new/delete replacements for dsinfer_fault_tests: plain malloc/aligned_alloc
// plus a live-block counter (leak checks) and the shared fault countdown
// (dsinfer::testing::allocation_fault_countdown, dsinfer/allocator.hpp).
#include "fault/fault_alloc.hpp"

#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <dsinfer/allocator.hpp>
#include <new>

// LeakSanitizer (address-sanitizer builds): oneDNN's own leaks after an injected failure inside
// it are the known third-party limitation test_fault_injection.cpp describes.
extern "C" const char* __lsan_default_suppressions() { return "leak:libdnnl.so\n"; }

// A place for a debugger breakpoint: called when operator new is the injected failure
// (gdb -ex 'break dsinfer_fault_fired', with DSINFER_FAULT_ONLY_N=<N> to pick one N).
extern "C" __attribute__((noinline)) void dsinfer_fault_fired() noexcept { asm volatile(""); }

namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_total{0};
std::atomic<std::int64_t> g_site_faults[static_cast<int>(dsinfer::fault::FaultSite::count)];

/// The recovering call site of an injected failure, from the function names on the stack.
/// Uses no operator new (backtrace() may malloc once, when it loads libgcc_s).
dsinfer::fault::FaultSite classify(bool nothrow) noexcept {
    using dsinfer::fault::FaultSite;
    if (nothrow) return FaultSite::nothrow_new;
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    for (int i = 0; i < n; ++i) {
        Dl_info info{};
        if (::dladdr(frames[i], &info) == 0) continue;
        if (info.dli_fname != nullptr && std::strstr(info.dli_fname, "libdnnl") != nullptr)
            return FaultSite::inside_onednn;
        if (info.dli_sname == nullptr) continue;
        const char* name = info.dli_sname;
        if (std::strstr(name, "__ostream_insert") != nullptr ||
            std::strstr(name, "basic_ostream") != nullptr ||
            std::strstr(name, "basic_streambuf") != nullptr)
            return FaultSite::stream_insertion;
        // deallocate's cache list; eviction's release list (evict_largest, inlined into trim
        // and allocate_impl in optimized builds): their only operator new calls.
        if (std::strstr(name, "MemoryPool10deallocate") != nullptr ||
            std::strstr(name, "MemoryPool13evict_largest") != nullptr ||
            std::strstr(name, "MemoryPool4trim") != nullptr ||
            std::strstr(name, "MemoryPool13allocate_impl") != nullptr)
            return FaultSite::pool_bookkeeping;
        if (std::strstr(name, "main") == name) break;
    }
    return FaultSite::other;
}

void* raw_alloc(std::size_t size, std::size_t align, bool nothrow) noexcept {
    if (dsinfer::testing::allocation_fault_injected()) {
        g_site_faults[static_cast<int>(classify(nothrow))].fetch_add(1, std::memory_order_relaxed);
        dsinfer_fault_fired();
        return nullptr;
    }
    if (size == 0) size = 1;
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
        p = std::malloc(size);
    } else {
        const std::size_t rounded = (size + align - 1) / align * align;
        if (rounded < size) return nullptr;
        p = std::aligned_alloc(align, rounded);
    }
    if (p != nullptr) {
        g_live.fetch_add(1, std::memory_order_relaxed);
        g_total.fetch_add(1, std::memory_order_relaxed);
    }
    return p;
}

void* throwing_alloc(std::size_t size, std::size_t align) {
    void* p = raw_alloc(size, align, false);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void raw_free(void* p) noexcept {
    if (p == nullptr) return;
    g_live.fetch_sub(1, std::memory_order_relaxed);
    std::free(p);
}

constexpr std::size_t kDefault = alignof(std::max_align_t);

}  // namespace

namespace dsinfer::fault {
std::int64_t live_allocations() noexcept { return g_live.load(std::memory_order_relaxed); }
std::int64_t total_allocations() noexcept { return g_total.load(std::memory_order_relaxed); }
std::int64_t faults_at(FaultSite s) noexcept {
    return g_site_faults[static_cast<int>(s)].load(std::memory_order_relaxed);
}
const char* site_name(FaultSite s) noexcept {
    switch (s) {
        case FaultSite::nothrow_new: return "nothrow new";
        case FaultSite::stream_insertion: return "ostream insertion";
        case FaultSite::pool_bookkeeping: return "MemoryPool bookkeeping";
        case FaultSite::inside_onednn: return "inside oneDNN";
        default: return "other";
    }
}
}  // namespace dsinfer::fault

// NOLINTBEGIN(misc-new-delete-overloads)
void* operator new(std::size_t n) { return throwing_alloc(n, kDefault); }
void* operator new[](std::size_t n) { return throwing_alloc(n, kDefault); }
void* operator new(std::size_t n, std::align_val_t a) {
    return throwing_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return throwing_alloc(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return raw_alloc(n, kDefault, true);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return raw_alloc(n, kDefault, true);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return raw_alloc(n, static_cast<std::size_t>(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return raw_alloc(n, static_cast<std::size_t>(a), true);
}

void operator delete(void* p) noexcept { raw_free(p); }
void operator delete[](void* p) noexcept { raw_free(p); }
void operator delete(void* p, std::size_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::size_t) noexcept { raw_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { raw_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { raw_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { raw_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { raw_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { raw_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { raw_free(p); }
// NOLINTEND(misc-new-delete-overloads)
