// Global operator new/delete replacements for dsinfer_fault_tests: plain malloc/aligned_alloc
// plus a live-block counter (leak checks) and the shared fault countdown
// (dsinfer::testing::allocation_fault_countdown, dsinfer/allocator.hpp).
#include "fault/fault_alloc.hpp"

#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dsinfer/allocator.hpp>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DSINFER_FAULT_INTERPOSE_MALLOC 0  // the sanitizers' runtimes own malloc
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DSINFER_FAULT_INTERPOSE_MALLOC 0
#endif
#endif
#ifndef DSINFER_FAULT_INTERPOSE_MALLOC
#define DSINFER_FAULT_INTERPOSE_MALLOC 1
#endif

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

std::atomic<bool> g_watch{false};
// The three counts change together, under one lock, once an allocation is classified: a
// snapshot taken while another thread is still walking its stack must not see the total
// without the library it is in (that read as an allocation by dsinfer, intermittently, when
// oneDNN's or OpenMP's threads allocated as a kernel's run() ended).
std::int64_t g_watch_total = 0, g_watch_onednn = 0, g_watch_openmp = 0;
std::atomic_flag g_watch_lock = ATOMIC_FLAG_INIT;
thread_local bool t_noting = false;  // backtrace() may allocate (once, loading libgcc_s)

struct WatchLock {
    WatchLock() noexcept {
        while (g_watch_lock.test_and_set(std::memory_order_acquire)) {
        }
    }
    ~WatchLock() { g_watch_lock.clear(std::memory_order_release); }
};

/// Counts one allocation call while watching, by the libraries on its call stack.
void note_allocation() noexcept {
    if (!g_watch.load(std::memory_order_relaxed) || t_noting) return;
    t_noting = true;
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    bool third_party = false, onednn = false;
    for (int i = 0; i < n && !third_party; ++i) {
        Dl_info info{};
        if (::dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
        if (std::strstr(info.dli_fname, "libdnnl") != nullptr) {
            onednn = third_party = true;
        } else if (std::strstr(info.dli_fname, "libgomp") != nullptr) {
            third_party = true;
        }
    }
    {
        const WatchLock lock;
        ++g_watch_total;
        if (onednn) ++g_watch_onednn;
        else if (third_party) ++g_watch_openmp;
    }
    // Debugging: DSINFER_WATCH_TRACE=1 prints the stack of every other watched allocation.
    static const bool trace = std::getenv("DSINFER_WATCH_TRACE") != nullptr;
    if (trace && !third_party) ::backtrace_symbols_fd(frames, n, 2);
    t_noting = false;
}

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
        if (std::strstr(name, "6Status3set") != nullptr ||
            std::strstr(name, "build_status_message") != nullptr)
            return FaultSite::status_message;
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
#if !DSINFER_FAULT_INTERPOSE_MALLOC
    note_allocation();  // under a sanitizer only operator new is watched
#endif
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
void watch_allocations(bool on) noexcept { g_watch.store(on); }
WatchedAllocations watched_allocations() noexcept {
    const WatchLock lock;
    return {g_watch_total, g_watch_onednn, g_watch_openmp};
}
const char* site_name(FaultSite s) noexcept {
    switch (s) {
        case FaultSite::nothrow_new: return "nothrow new";
        case FaultSite::stream_insertion: return "ostream insertion";
        case FaultSite::pool_bookkeeping: return "MemoryPool bookkeeping";
        case FaultSite::status_message: return "Status message";
        case FaultSite::inside_onednn: return "inside oneDNN";
        default: return "other";
    }
}
}  // namespace dsinfer::fault

#if DSINFER_FAULT_INTERPOSE_MALLOC
// The C heap's allocation functions, interposed (the executable exports its symbols, so libdnnl
// and the C++ runtime resolve to these too) only to count calls while watching; the blocks
// come from glibc's own implementation, which free() releases as usual.
extern "C" {
void* __libc_malloc(std::size_t n);
void* __libc_calloc(std::size_t n, std::size_t size);
void* __libc_realloc(void* p, std::size_t n);
void* __libc_memalign(std::size_t align, std::size_t n);

void* malloc(std::size_t n) {
    note_allocation();
    return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
    note_allocation();
    return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
    note_allocation();
    return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
    note_allocation();
    return __libc_memalign(align, n);
}
void* memalign(std::size_t align, std::size_t n) {
    note_allocation();
    return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
    note_allocation();
    if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
    void* p = __libc_memalign(align, n);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif

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
