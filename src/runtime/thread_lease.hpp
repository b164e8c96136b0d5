// The process-wide thread budget's lease (dsinfer/threads.hpp): what one run may use.
// Internal (namespace dsinfer::detail).
#pragma once

namespace dsinfer::detail {

/// Takes up to `wanted - 1` helper threads from the process budget, without waiting (none set:
/// all of them), and gives them back on destruction. threads() = 1 + the helpers taken.
class ThreadLease {
public:
    explicit ThreadLease(int wanted) noexcept;
    ~ThreadLease();
    ThreadLease(const ThreadLease&) = delete;
    ThreadLease& operator=(const ThreadLease&) = delete;
    int threads() const noexcept { return 1 + helpers_; }

private:
    int helpers_ = 0;
    bool counted_ = false;  ///< taken from the pool (to give back)
};

}  // namespace dsinfer::detail
