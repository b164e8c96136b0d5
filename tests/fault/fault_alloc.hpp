// Allocation bookkeeping of the fault-injection test executable (dsinfer_fault_tests):
// fault_alloc.cpp replaces the global operator new/delete (every variant) with counting
// versions that also obey dsinfer::testing::allocation_fault_countdown, so that one countdown
// picks the N-th allocation of operator new and CpuAllocator::allocate together.
#pragma once

#include <cstdint>

namespace dsinfer::fault {

/// Blocks currently allocated by operator new and not yet deleted (the whole process).
std::int64_t live_allocations() noexcept;
/// Successful operator new calls since the start of the process.
std::int64_t total_allocations() noexcept;

/// Where an injected operator new failure happened, for the failures whose callers recover by
/// design (see test_fault_injection.cpp). Classified from the call stack at the failure
/// (the executable is linked with exported symbols so that dladdr names its functions).
enum class FaultSite : int {
    other = 0,         ///< must surface as resource_exhausted
    nothrow_new,       ///< a nothrow operator new (its caller sees nullptr)
    stream_insertion,  ///< inside std::ostream insertion (catches it, sets badbit)
    pool_bookkeeping,  ///< MemoryPool's lists: deallocate's cache list (the block goes back
                       ///< instead), eviction's release list (the block is freed at once)
    status_message,    ///< a Status's message (Status::set keeps the code and says that the
                       ///< message was lost: a Status never throws)
    inside_onednn,     ///< inside libdnnl: the error is typed, but oneDNN leaks (third party)
    count
};
const char* site_name(FaultSite s) noexcept;

/// Allocation calls seen while watching (tests/fault/test_fault_injection.cpp: allocations on
/// the run path). Every C heap allocation of the process (malloc, calloc, realloc,
/// aligned_alloc, posix_memalign, memalign: fault_alloc.cpp interposes them, and operator new
/// and CpuAllocator go through them) is counted, by where its call stack says it came from.
struct WatchedAllocations {
    std::int64_t total = 0;
    std::int64_t inside_onednn = 0;  ///< a frame in libdnnl (oneDNN's own bookkeeping)
    std::int64_t inside_openmp = 0;  ///< a frame in libgomp (the OpenMP runtime's team set-up)
};
void watch_allocations(bool on) noexcept;
WatchedAllocations watched_allocations() noexcept;
/// Injected operator new failures at `s` since the start of the process.
std::int64_t faults_at(FaultSite s) noexcept;

}  // namespace dsinfer::fault
