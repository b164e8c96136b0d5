// dsinfer/threads.hpp — one budget of intra-op threads for every engine of the process.
//
// Each run() uses EngineOptions::num_threads threads: its calling thread and num_threads - 1
// helpers. Several engines (or one engine called from several threads, or a BatchingEngine's
// workers) each take their full count, so N concurrent runs of 2 threads on 2 cores use 2N.
// set_thread_budget(B) makes the helpers a shared pool of B - 1: a run takes what it wants of
// what is free when it starts (never waiting) and gives it back when it ends, so N concurrent
// runs use at most N + B - 1 threads (the callers' own threads are the application's). Results
// do not depend on how many threads a run got (dsinfer's kernels are bitwise identical for any
// thread count).
//
//   dsinfer::set_thread_budget(4);  // every engine of this process, together
#pragma once

#include <cstdint>

#include "dsinfer/export.hpp"

namespace dsinfer {

/// How a run's helper threads wait between parallel regions (EngineOptions::wait_policy).
///
/// dsinfer's own kernels run their regions on dsinfer's thread pool, where the calling thread
/// never waits for a helper that has not started: it takes the slots nobody has begun, so a
/// helper the OS has descheduled (another process holds its core) costs nothing. oneDNN's
/// primitives always run on libgomp's OpenMP team, whose idle threads spin for a few
/// milliseconds after each primitive unless the process was started with
/// OMP_WAIT_POLICY=passive (libgomp reads it once, at start-up). Two sets of threads spinning
/// on the same cores slow each other down (ResNet-50 at batch 1 on 2 threads took 2.3x as long
/// with dsinfer's pool spinning beside libgomp's team), so:
enum class WaitPolicy : std::uint8_t {
    /// The default: one set of threads, spinning briefly when idle. An engine with nodes on
    /// oneDNN primitives runs dsinfer's kernels on libgomp's team too (its idle wait is
    /// libgomp's); any other engine runs them on dsinfer's pool, whose idle helpers busy-wait
    /// (pause) for 50 us, then yield the core (sched_yield) up to 2 ms, then sleep: the gaps
    /// between a run's regions are mostly short, and a helper that kept the core longer would
    /// only take it from another process on a busy machine (ResNet-50 at batch 1 on the "cpu"
    /// backend, one of 2 cores held by a busy loop: p50 108-116 ms, against 149-152 ms when
    /// the helpers paused for the whole 2 ms).
    spin,
    /// dsinfer's pool; idle helpers call sched_yield() for up to 2 ms, then sleep.
    yield,
    /// dsinfer's pool; idle helpers sleep at once and are woken per region (a few microseconds
    /// more per region; no CPU used while idle).
    /// With yield and block, oneDNN's threads keep libgomp's wait: start the process with
    /// OMP_WAIT_POLICY=passive for them to sleep too (the engine warns at load otherwise).
    block,
};

/// "spin", "yield" or "block".
DSINFER_API const char* wait_policy_name(WaitPolicy policy) noexcept;

/// Sets the process-wide budget: at most `threads` intra-op threads across concurrent runs,
/// counting one caller (0 = no budget: each run takes its num_threads, the default).
/// invalid_argument (dsinfer::Error) for a negative value. Runs already started keep what
/// they took.
DSINFER_API void set_thread_budget(int threads);
/// The budget set_thread_budget() set (0 = none).
DSINFER_API int thread_budget() noexcept;
/// Helper threads lent to runs now (for tests and metrics).
DSINFER_API int thread_budget_in_use() noexcept;

}  // namespace dsinfer
