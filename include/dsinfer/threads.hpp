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

#include "dsinfer/export.hpp"

namespace dsinfer {

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
