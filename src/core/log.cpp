// dsinfer/log.hpp: the process-wide sink and level, and the Logger every engine sends through
// (src/core/log.hpp).
#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace dsinfer {

namespace {

struct Sink {
    std::mutex mu;
    /// The host's callback, or null (the default: stderr). Copied under the lock before a call,
    /// so a callback that replaces the sink (or a concurrent set_log_callback) is safe.
    std::shared_ptr<const LogCallback> callback;
};

Sink& sink() {
    static Sink* s = new Sink();  // never destroyed: messages may come from static destructors
    return *s;
}

std::atomic<LogLevel> g_level{LogLevel::warning};

/// The default sink: one line on stderr per message, written with one call.
void to_stderr(LogLevel level, std::string_view message) noexcept {
    try {
        std::string line = "dsinfer: ";
        line += log_level_name(level);
        line += ": ";
        line += message;
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), stderr);
    } catch (...) {
    }
}

std::shared_ptr<const LogCallback> current_callback() noexcept {
    Sink& s = sink();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.callback;
}

void send(const LogCallback* callback, LogLevel level, std::string_view message) noexcept {
    try {
        if (callback != nullptr && *callback) {
            (*callback)(level, message);
            return;
        }
        if (std::shared_ptr<const LogCallback> global = current_callback(); global && *global) {
            (*global)(level, message);
            return;
        }
    } catch (...) {
        return;  // a callback that throws loses its message, nothing else
    }
    to_stderr(level, message);
}

}  // namespace

const char* log_level_name(LogLevel level) noexcept {
    switch (level) {
        case LogLevel::trace: return "trace";
        case LogLevel::debug: return "debug";
        case LogLevel::info: return "info";
        case LogLevel::warning: return "warning";
        case LogLevel::error: return "error";
        case LogLevel::off: return "off";
    }
    return "?";
}

void set_log_callback(LogCallback callback) {
    auto next = callback ? std::make_shared<const LogCallback>(std::move(callback))
                         : std::shared_ptr<const LogCallback>();
    Sink& s = sink();
    std::shared_ptr<const LogCallback> previous;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        previous = std::move(s.callback);
        s.callback = std::move(next);
    }
    // `previous` (the host's old callback and what it captured) is released here, unlocked.
}

void set_log_level(LogLevel level) noexcept { g_level.store(level, std::memory_order_relaxed); }

LogLevel log_level() noexcept { return g_level.load(std::memory_order_relaxed); }

namespace detail {

bool Logger::enabled(LogLevel level) const noexcept {
    const LogLevel threshold = options_.level ? *options_.level : log_level();
    return level != LogLevel::off && threshold != LogLevel::off &&
           static_cast<int>(level) >= static_cast<int>(threshold);
}

void Logger::log(LogLevel level, std::string_view message) const noexcept {
    if (!enabled(level)) return;
    send(options_.callback ? &options_.callback : nullptr, level, message);
}

const Logger& process_logger() noexcept {
    static const Logger logger;
    return logger;
}

}  // namespace detail

}  // namespace dsinfer
