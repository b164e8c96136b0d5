// The runtime room: intra-op parallelism shared by the engine (ThreadBudget per run), dsinfer's
// CPU kernels and the oneDNN backend. The engine sets the budget for the calling thread
// (ThreadBudget) and both read it through omp_get_max_threads(). dsinfer's kernels start their
// regions with run_team / parallel_for, which run them on the same OpenMP runtime (libgomp)
// that Debian's oneDNN uses (one team, so no oversubscription inside one run; the default), or
// on dsinfer's own pool with a wait policy when the run asks for one (ParallelModeScope,
// thread_pool.hpp: EngineOptions::wait_policy).
//
// Determinism: a region is a fixed number of slots (run_team) and parallel_for splits [0, n)
// into contiguous chunks that depend only on n, grain and the thread count; every slot is
// computed by one thread. Kernels key per-slot buffers by slot and combine partial results in
// slot order (never atomically), so results are bitwise identical run to run for the same
// thread count, whichever thread took which slot.
//
// Internal (namespace dsinfer::detail); never included by public headers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <type_traits>

#include "runtime/thread_pool.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dsinfer::detail {

/// True inside a parallel region (OpenMP's or dsinfer's pool): a region started here runs on
/// this thread alone.
inline bool in_parallel_region() noexcept {
#if defined(_OPENMP)
    if (omp_in_parallel()) return true;
#endif
    return in_pool_region();
}

/// Threads a parallel region started now on this thread may use.
inline int max_threads() noexcept {
    if (in_parallel_region()) return 1;
#if defined(_OPENMP)
    return std::max(1, omp_get_max_threads());
#else
    return 1;
#endif
}

/// The default budget for num_threads == 0: the processors this process may run on.
inline int default_thread_count() noexcept {
#if defined(_OPENMP)
    return std::max(1, omp_get_num_procs());
#else
    return std::max(1u, std::thread::hardware_concurrency());
#endif
}

/// Sets this thread's intra-op thread budget for its lifetime and restores the previous one.
/// OpenMP keeps the budget per thread (the nthreads-var ICV), so concurrent runs on different
/// application threads each keep their own.
class ThreadBudget {
public:
    explicit ThreadBudget(int threads) noexcept {
#if defined(_OPENMP)
        previous_ = omp_get_max_threads();
        // Never above OMP_THREAD_LIMIT: oneDNN sizes a primitive's work split for
        // omp_get_max_threads() threads, and a team the limit cuts short left part of a MatMul's
        // output unwritten (AVX-512, OMP_THREAD_LIMIT=1 with a budget of 2: wrong results).
        const int wanted = threads > 0 ? threads : default_thread_count();
        omp_set_num_threads(std::max(1, std::min(wanted, omp_get_thread_limit())));
#else
        (void)threads;
#endif
    }
    ~ThreadBudget() {
#if defined(_OPENMP)
        omp_set_num_threads(previous_);
#endif
    }
    ThreadBudget(const ThreadBudget&) = delete;
    ThreadBudget& operator=(const ThreadBudget&) = delete;

private:
    int previous_ = 1;
};

/// Calls work(slot) once for every slot in [0, team), in parallel (this thread and team - 1
/// others at most), and returns when all are done. A slot may run on any thread of the team and
/// two slots may run one after the other on one thread, so slots must not wait for each other
/// (no barriers; a slot may wait for work another slot has already taken, see sgemm.cpp).
/// work must not throw.
template <class F>
void run_team(std::int64_t team, F&& work) {
    if (team <= 0) return;
    if (team == 1 || in_parallel_region()) {  // nested: this thread takes every slot
        for (std::int64_t s = 0; s < team; ++s) work(s);
        return;
    }
    const ParallelMode mode = parallel_mode();
    if (mode.own_pool) {
        using W = std::remove_reference_t<F>;
        run_slots(
            team,
            [](void* context, std::int64_t slot) noexcept { (*static_cast<W*>(context))(slot); },
            const_cast<void*>(static_cast<const void*>(&work)), mode.wait);
        return;
    }
#if defined(_OPENMP)
#pragma omp parallel num_threads(static_cast<int>(team))
    {
        // OpenMP may give fewer threads than asked (OMP_THREAD_LIMIT): they share the slots.
        const std::int64_t nt = omp_get_num_threads();
        for (std::int64_t s = omp_get_thread_num(); s < team; s += nt) work(s);
    }
#else
    for (std::int64_t s = 0; s < team; ++s) work(s);
#endif
}

/// Calls f(begin, end) over contiguous chunks covering [0, n), in parallel when n > grain and
/// threads are available. `grain` is the smallest chunk worth a thread (in units of n).
/// f must not throw.
template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, F&& f) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t chunks = std::min<std::int64_t>(max_threads(), (n + grain - 1) / grain);
    if (chunks <= 1) {
        f(std::int64_t{0}, n);
        return;
    }
    run_team(chunks, [&](std::int64_t t) {
        const std::int64_t begin = n * t / chunks;
        const std::int64_t end = n * (t + 1) / chunks;
        if (begin < end) f(begin, end);
    });
}

/// The number of chunks parallel_for(n, grain, ...) would use now (for per-chunk partials).
inline std::int64_t parallel_chunks(std::int64_t n, std::int64_t grain) noexcept {
    if (n <= 0) return 0;
    grain = std::max<std::int64_t>(grain, 1);
    return std::max<std::int64_t>(1, std::min<std::int64_t>(max_threads(), (n + grain - 1) / grain));
}

}  // namespace dsinfer::detail
