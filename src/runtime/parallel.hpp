// The runtime room: intra-op parallelism shared by the engine (ThreadBudget per run), dsinfer's
// CPU kernels and the oneDNN backend. dsinfer's own kernels run on the same OpenMP runtime
// (libgomp) that Debian's oneDNN uses, so that our kernels and oneDNN's primitives share one
// thread pool and one thread budget: the engine sets the budget for the calling thread
// (ThreadBudget) and both read it through omp_get_max_threads(). No second pool exists, so
// there is no oversubscription inside one run.
//
// Determinism: parallel_for splits [0, n) into contiguous chunks that depend only on n, grain
// and the thread count, and every chunk is computed by one thread in a fixed order. Kernels
// that reduce across chunks must combine partial results in chunk order (never atomically), so
// results are bitwise identical run to run for the same thread count.
//
// Internal (namespace dsinfer::detail); never included by public headers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dsinfer::detail {

/// Threads a parallel region started now on this thread may use.
inline int max_threads() noexcept {
#if defined(_OPENMP)
    return omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
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
#if defined(_OPENMP)
#pragma omp parallel num_threads(static_cast<int>(chunks))
    {
        const std::int64_t t = omp_get_thread_num();
        const std::int64_t nt = omp_get_num_threads();
        const std::int64_t begin = n * t / nt;
        const std::int64_t end = n * (t + 1) / nt;
        if (begin < end) f(begin, end);
    }
#else
    f(std::int64_t{0}, n);
#endif
}

/// The number of chunks parallel_for(n, grain, ...) would use now (for per-chunk partials).
inline std::int64_t parallel_chunks(std::int64_t n, std::int64_t grain) noexcept {
    if (n <= 0) return 0;
    grain = std::max<std::int64_t>(grain, 1);
    return std::max<std::int64_t>(1, std::min<std::int64_t>(max_threads(), (n + grain - 1) / grain));
}

}  // namespace dsinfer::detail
