// The library's side of dsinfer/log.hpp: a Logger resolves an engine's EngineOptions::log over
// the process-wide sink and level, and formats with fmt only when the level passes. Internal
// (fmt stays out of the public headers); src/core/log.cpp holds the process-wide state.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "dsinfer/log.hpp"

namespace dsinfer::detail {

/// Where one engine's messages go (or, default-constructed, the library's outside any engine):
/// its own callback and level where set, else the process-wide ones, read at each message (so a
/// host's later set_log_callback / set_log_level apply to engines loaded before).
class Logger {
public:
    Logger() = default;
    explicit Logger(LogOptions options) : options_(std::move(options)) {}

    /// True when a message of `level` would be sent.
    bool enabled(LogLevel level) const noexcept;
    /// Sends `message` when `level` passes. Never throws (a callback's exception is swallowed).
    void log(LogLevel level, std::string_view message) const noexcept;
    /// fmt::format(f, args...) sent at `level`; nothing is formatted when the level does not pass.
    template <class... Args>
    void logf(LogLevel level, fmt::format_string<Args...> f, Args&&... args) const noexcept {
        if (!enabled(level)) return;
        try {
            const std::string message = fmt::format(f, std::forward<Args>(args)...);
            log(level, message);
        } catch (...) {
            // Out of memory formatting a message: the message is lost, nothing else.
        }
    }

private:
    LogOptions options_;
};

/// The library's messages outside any engine (the process-wide sink and level).
const Logger& process_logger() noexcept;

}  // namespace dsinfer::detail
