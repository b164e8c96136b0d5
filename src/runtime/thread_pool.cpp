// dsinfer's intra-op thread pool (thread_pool.hpp).
#include "runtime/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dsinfer::detail {
namespace {

inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

thread_local ParallelMode t_mode{};
thread_local bool t_in_region = false;
// Set when this thread's team has been destroyed (thread exit): later regions run serially.
// Trivially destructible, so it stays readable after the team's destructor ran.
thread_local bool t_team_gone = false;

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_hold_helpers{false};  // pool_hold_helpers_for_test
std::atomic<int> g_delay_helpers_us{0};   // pool_delay_helpers_for_test

/// One calling thread's helpers and the region they share.
///
/// The region's state is one 64-bit word: epoch (32) | slots (16) | next slot (16). A slot is
/// taken by a compare-exchange that keeps the epoch, so a helper that wakes late can never take
/// a slot of a newer region by mistake; the function and context it reads after a successful
/// take belong to that region, because the caller does not return (and publish another) before
/// every slot of it is done.
class Team {
public:
    Team() = default;
    Team(const Team&) = delete;
    Team& operator=(const Team&) = delete;
    ~Team() {
        stop_.store(true, std::memory_order_seq_cst);
        wake_.fetch_add(1, std::memory_order_seq_cst);
        wake_.notify_all();
        for (auto& w : workers_)
            if (w.joinable()) w.join();
    }

    int helpers() const noexcept { return static_cast<int>(workers_.size()); }

    void run(std::int64_t slots, SlotFn fn, void* context, PoolWait wait) noexcept {
        grow(static_cast<std::size_t>(slots - 1));
        fn_ = fn;
        context_ = context;
        done_.store(0, std::memory_order_relaxed);
        wait_.store(wait, std::memory_order_relaxed);
        const std::uint32_t epoch = ++epoch_;
        state_.store((std::uint64_t{epoch} << 32) | (static_cast<std::uint64_t>(slots) << 16),
                     std::memory_order_release);
        // Publish to the helpers: those awake see wake_ change, sleepers are woken.
        wake_.store(epoch, std::memory_order_seq_cst);
        if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_.notify_all();

        // This thread takes slots like any helper, then every slot nobody has started.
        const bool outer = t_in_region;
        t_in_region = true;
        std::int64_t slot = 0;
        while (take(epoch, slot)) {
            fn(context, slot);
            done_.fetch_add(1, std::memory_order_release);
        }
        t_in_region = outer;
        // Wait only for slots helpers have started.
        int spins = 0;
        while (done_.load(std::memory_order_acquire) < slots) {
            if (++spins < 4096) {
                relax();
            } else {
                sched_yield();
            }
        }
    }

private:
    bool take(std::uint32_t epoch, std::int64_t& slot) noexcept {
        std::uint64_t s = state_.load(std::memory_order_acquire);
        for (;;) {
            if (static_cast<std::uint32_t>(s >> 32) != epoch) return false;
            const std::uint64_t slots = (s >> 16) & 0xFFFFu, next = s & 0xFFFFu;
            if (next >= slots) return false;
            if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
                slot = static_cast<std::int64_t>(next);
                return true;
            }
        }
    }

    void grow(std::size_t wanted) noexcept {
        while (workers_.size() < wanted) {
            try {
                workers_.emplace_back([this, start = wake_.load()] { work(start); });
            } catch (...) {
                return;  // no thread: the slots it would have taken run on the others
            }
        }
    }

    // Waits until wake_ differs from `seen` (or stop), as the current region's policy says.
    void idle(std::uint32_t seen) noexcept {
        const PoolWait wait = wait_.load(std::memory_order_relaxed);
        if (wait != PoolWait::block) {
            const auto start = Clock::now();
            const auto pause_until = start + std::chrono::microseconds(kPoolPauseWindowUs);
            const auto until = start + std::chrono::microseconds(kPoolSpinWindowUs);
            bool pausing = wait == PoolWait::spin;
            for (unsigned i = 1;; ++i) {
                if (wake_.load(std::memory_order_acquire) != seen) return;
                if (pausing) {
                    relax();
                } else {
                    sched_yield();
                }
                if ((i & 63u) == 0) {
                    const auto now = Clock::now();
                    if (now >= until) break;
                    pausing = pausing && now < pause_until;
                }
            }
        }
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_seq_cst) == seen) wake_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }

    void work(std::uint32_t seen) noexcept {
        (void)pthread_setname_np(pthread_self(), "dsinfer-pool");  // for top, gdb, perf
        t_in_region = true;  // a helper's nested regions run on itself
#if defined(_OPENMP)
        omp_set_num_threads(1);  // and so do OpenMP regions a slot might start
#endif
        for (;;) {
            idle(seen);
            // What woke us first, then the team's end: the other order let a helper that woke
            // for a region, found no stop, and was descheduled while its caller finished the
            // region alone and exited (~Team: stop_, then wake_ + 1) read that last wake_ as
            // `seen` and sleep on it for good, the caller's thread hanging in join (seen in a
            // test run). wake_'s last value is stored after stop_, so reading it shows stop_.
            seen = wake_.load(std::memory_order_acquire);
            if (const int us = g_delay_helpers_us.load(std::memory_order_relaxed); us > 0)
                std::this_thread::sleep_for(std::chrono::microseconds(us));
            if (stop_.load(std::memory_order_acquire)) return;
            if (g_hold_helpers.load(std::memory_order_relaxed)) continue;
            std::int64_t slot = 0;
            while (take(seen, slot)) {
                const SlotFn fn = fn_;
                void* const context = context_;
                fn(context, slot);
                done_.fetch_add(1, std::memory_order_release);
            }
        }
    }

    std::vector<std::thread> workers_;
    std::uint32_t epoch_ = 0;  // the calling thread's only
    std::atomic<std::uint64_t> state_{0};
    std::atomic<std::uint32_t> wake_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<std::int64_t> done_{0};
    std::atomic<PoolWait> wait_{PoolWait::spin};
    std::atomic<bool> stop_{false};
    SlotFn fn_ = nullptr;
    void* context_ = nullptr;
};

struct TeamHolder {
    std::unique_ptr<Team> team;
    ~TeamHolder() {
        team.reset();
        t_team_gone = true;
    }
};
thread_local TeamHolder t_team;

// A child of fork() has none of its parent's helpers: the forking thread's team is let go
// without joining (its threads do not exist here) and a new one is made on first use.
void forget_team_in_child() noexcept {
    (void)t_team.team.release();  // leaked on purpose: destroying it would join absent threads
}

void register_fork_handler() noexcept {
    static std::once_flag once;
    try {
        std::call_once(once, [] { (void)pthread_atfork(nullptr, nullptr, forget_team_in_child); });
    } catch (...) {  // no handler: a forked child that uses a pool inherits a stale team
    }
}

}  // namespace

ParallelMode parallel_mode() noexcept { return t_mode; }

bool in_pool_region() noexcept { return t_in_region; }

ParallelModeScope::ParallelModeScope(ParallelMode mode) noexcept : previous_(t_mode) { t_mode = mode; }

ParallelModeScope::~ParallelModeScope() { t_mode = previous_; }

void run_slots(std::int64_t slots, SlotFn fn, void* context, PoolWait wait) noexcept {
    if (slots <= 0) return;
    Team* team = nullptr;
    if (slots > 1 && slots <= 0xFFFF && !t_in_region && !t_team_gone) {
        if (!t_team.team) {
            register_fork_handler();
            try {
                t_team.team = std::make_unique<Team>();
            } catch (...) {
            }
        }
        team = t_team.team.get();
    }
    if (team == nullptr) {
        const bool outer = t_in_region;
        t_in_region = true;
        for (std::int64_t s = 0; s < slots; ++s) fn(context, s);
        t_in_region = outer;
        return;
    }
    team->run(slots, fn, context, wait);
}

void pool_hold_helpers_for_test(bool hold) noexcept {
    g_hold_helpers.store(hold, std::memory_order_relaxed);
}

void pool_delay_helpers_for_test(int microseconds) noexcept {
    g_delay_helpers_us.store(microseconds, std::memory_order_relaxed);
}

int pool_helpers() noexcept { return t_team.team ? t_team.team->helpers() : 0; }

}  // namespace dsinfer::detail
