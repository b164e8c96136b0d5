// dsinfer's own intra-op thread pool: where dsinfer's CPU kernels run their parallel regions
// when a run asks for a wait policy (EngineOptions::wait_policy) other than libgomp's.
//
// Why a pool of our own: libgomp reads its idle-wait policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT)
// once, when the process starts, and its team's end-of-region barrier waits for every team
// thread, including one the OS has descheduled because another process holds its core (a
// scheduler time slice, milliseconds, on a region worth microseconds). This pool differs in
// two ways:
//   - a region is a fixed set of slots (run_slots); any thread of the team may take any slot
//     that nobody has started, and the calling thread takes every slot left when it is done
//     with its own, so it waits only for slots a helper has started, never for a helper that
//     has not been scheduled yet;
//   - idle helpers wait as the run asks: spin (pause, then sleep), yield (sched_yield, then
//     sleep) or block (sleep at once), per region.
// Which slot ran on which thread never changes a result: kernels key their per-slot buffers
// and partial results by slot, and slots are fixed by the region's size.
//
// One team per calling thread (as libgomp keeps one per master thread): its helpers are
// created on first use, as many as the widest region asked for minus one, and joined when the
// calling thread exits. A region started inside a region runs its slots on the current thread.
//
// Internal (namespace dsinfer::detail); never included by public headers.
#pragma once

#include <cstdint>

namespace dsinfer::detail {

/// How idle helpers wait for the next region of their team.
enum class PoolWait : std::uint8_t {
    spin,   ///< busy-wait (pause) kPoolPauseWindowUs, yield up to kPoolSpinWindowUs, sleep
    yield,  ///< sched_yield() up to kPoolSpinWindowUs, then sleep
    block,  ///< sleep at once (a futex wake per region)
};

/// How long spin and yield keep an idle helper awake before it sleeps (microseconds).
inline constexpr std::int64_t kPoolSpinWindowUs = 2000;
/// How long of that spin busy-waits with pause before it yields the core instead: the gaps
/// between a run's regions are mostly shorter; a helper that keeps the core for longer only
/// takes it from another process on a busy machine (and the scheduler then makes it wait).
inline constexpr std::int64_t kPoolPauseWindowUs = 50;

/// Where this thread's parallel regions of dsinfer's kernels run: libgomp's team (shared with
/// oneDNN's primitives; the default) or this pool with a wait policy.
struct ParallelMode {
    bool own_pool = false;
    PoolWait wait = PoolWait::spin;
};

/// This thread's mode (set per run by ParallelModeScope).
ParallelMode parallel_mode() noexcept;
/// True on a pool helper, and on a calling thread while it runs slots of its region.
bool in_pool_region() noexcept;

/// Sets this thread's mode for its lifetime and restores the previous one.
class ParallelModeScope {
public:
    explicit ParallelModeScope(ParallelMode mode) noexcept;
    ~ParallelModeScope();
    ParallelModeScope(const ParallelModeScope&) = delete;
    ParallelModeScope& operator=(const ParallelModeScope&) = delete;

private:
    ParallelMode previous_;
};

using SlotFn = void (*)(void* context, std::int64_t slot) noexcept;

/// Calls fn(context, s) once for every s in [0, slots), on this thread and up to slots - 1
/// helpers of this thread's team, and returns when all have returned. Never throws: a helper
/// that cannot be created leaves its slots to the others (the calling thread at the least).
void run_slots(std::int64_t slots, SlotFn fn, void* context, PoolWait wait) noexcept;

/// Helpers this thread's team holds now (for tests).
int pool_helpers() noexcept;

/// For tests: while set, helpers of every team wake but take no slot (as if the OS had not
/// scheduled them), so a region must complete on its calling thread.
void pool_hold_helpers_for_test(bool hold) noexcept;

/// For tests: helpers of every team sleep `microseconds` each time they wake, between reading
/// what woke them and checking for the team's end (0: no delay, the default), so a test can
/// make a helper late for a region whose calling thread then exits.
void pool_delay_helpers_for_test(int microseconds) noexcept;

}  // namespace dsinfer::detail
