// dsinfer/cancellation.hpp — CancellationToken: a shared, thread-safe "please stop" flag with
// callbacks.
//
// Purpose: the caller of an asynchronous operation keeps a copy of the token and may cancel()
// it at any time; whoever runs the operation either polls cancelled() or registers a callback
// with on_cancel() to react at once (BatchScheduler answers a queued request `cancelled` from
// its callback). A default-constructed token is a fresh, un-cancelled one.
//
// Ownership/threading: a token is a cheap handle to shared state (one shared_ptr); copies refer
// to the same token, and the state lives as long as any copy. Every member is thread-safe.
// cancel() runs the callbacks registered at that moment, once each, on the thread that called
// cancel(), one after another, with no lock of the token held (a callback may take its own
// locks, register or remove callbacks, or cancel other tokens). Exceptions thrown by a callback
// are swallowed. remove_callback(id) guarantees that, once it returns, that callback is not
// running and will never run; called from inside the callback itself it does not wait.
//
// Usage:
//   dsinfer::CancellationToken token;
//   const auto id = token.on_cancel([&] { wake_up_worker(); });   // runs at once if cancelled
//   ... token.cancel();                                           // from any thread
//   token.remove_callback(id);                                    // before the captures die
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace dsinfer {

class CancellationToken {
public:
    /// A fresh, un-cancelled token.
    CancellationToken() : s_(std::make_shared<State>()) {}

    /// Cancels the token: idempotent; the first call runs the registered callbacks (see above).
    void cancel() noexcept {
        State& s = *s_;
        std::unique_lock<std::mutex> lock(s.m);
        if (s.cancelled.load(std::memory_order_relaxed)) return;
        s.cancelled.store(true, std::memory_order_release);
        s.runner = std::this_thread::get_id();
        while (!s.callbacks.empty()) {
            auto node = s.callbacks.extract(s.callbacks.begin());
            s.running = node.key();
            lock.unlock();
            try {
                node.mapped()();
            } catch (...) {  // a callback's failure must not stop the others
            }
            node = {};  // destroy the callback (and its captures) outside the lock
            lock.lock();
            s.running = 0;
            s.done.notify_all();
        }
        s.runner = std::thread::id();
    }

    bool cancelled() const noexcept { return s_->cancelled.load(std::memory_order_acquire); }

    /// Registers `fn` to run at cancel() and returns its id (never 0). If the token is already
    /// cancelled, `fn` runs at once on this thread and 0 is returned (nothing to remove).
    std::uint64_t on_cancel(std::function<void()> fn) {
        if (!fn) return 0;
        {
            std::lock_guard<std::mutex> lock(s_->m);
            if (!s_->cancelled.load(std::memory_order_relaxed)) {
                const std::uint64_t id = s_->next_id++;
                s_->callbacks.emplace(id, std::move(fn));
                return id;
            }
        }
        try {
            fn();
        } catch (...) {  // same contract as inside cancel()
        }
        return 0;
    }

    /// Unregisters a callback. After return it is not running (unless this thread is the one
    /// running it) and will not run. Unknown ids and 0 are ignored.
    void remove_callback(std::uint64_t id) noexcept {
        if (id == 0) return;
        std::function<void()> doomed;  // destroyed after the lock is released
        {
            std::unique_lock<std::mutex> lock(s_->m);
            const auto it = s_->callbacks.find(id);
            if (it != s_->callbacks.end()) {
                doomed = std::move(it->second);
                s_->callbacks.erase(it);
            } else if (s_->running == id && s_->runner != std::this_thread::get_id()) {
                s_->done.wait(lock, [&] { return s_->running != id; });
            }
        }
    }

    /// True when both handles refer to the same token.
    friend bool operator==(const CancellationToken& a, const CancellationToken& b) noexcept {
        return a.s_ == b.s_;
    }

private:
    struct State {
        std::mutex m;
        std::condition_variable done;  // signalled after each callback cancel() ran
        std::atomic<bool> cancelled{false};
        std::uint64_t next_id = 1;
        std::map<std::uint64_t, std::function<void()>> callbacks;
        std::uint64_t running = 0;    // id of the callback cancel() is running; 0 = none
        std::thread::id runner{};     // the thread inside cancel()
    };
    std::shared_ptr<State> s_;
};

}  // namespace dsinfer
