// The process-wide thread budget (dsinfer/threads.hpp) and its leases (runtime/thread_lease.hpp).
#include "dsinfer/threads.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "dsinfer/status.hpp"
#include "runtime/thread_lease.hpp"

namespace dsinfer {
namespace {

std::atomic<int> g_budget{0};  ///< 0: none
std::atomic<int> g_lent{0};    ///< helper threads lent to runs now

}  // namespace

void set_thread_budget(int threads) {
    if (threads < 0)
        throw Error(ErrorCode::invalid_argument,
                    "set_thread_budget: a budget is >= 0 (0 = none), got " + std::to_string(threads));
    g_budget.store(threads, std::memory_order_relaxed);
}

int thread_budget() noexcept { return g_budget.load(std::memory_order_relaxed); }

int thread_budget_in_use() noexcept { return g_lent.load(std::memory_order_relaxed); }

const char* wait_policy_name(WaitPolicy policy) noexcept {
    switch (policy) {
        case WaitPolicy::spin: return "spin";
        case WaitPolicy::yield: return "yield";
        case WaitPolicy::block: return "block";
    }
    return "unknown";
}

namespace detail {

ThreadLease::ThreadLease(int wanted) noexcept {
    const int want = std::max(0, wanted - 1);
    const int budget = g_budget.load(std::memory_order_relaxed);
    if (budget <= 0) {
        helpers_ = want;
        return;
    }
    // Take min(want, free) helpers of the pool of budget - 1; never wait.
    int lent = g_lent.load(std::memory_order_relaxed);
    int take = 0;
    do {
        take = std::clamp(budget - 1 - lent, 0, want);
        if (take == 0) break;
    } while (!g_lent.compare_exchange_weak(lent, lent + take, std::memory_order_relaxed));
    helpers_ = take;
    counted_ = take > 0;
}

ThreadLease::~ThreadLease() {
    if (counted_) g_lent.fetch_sub(helpers_, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace dsinfer
