// dsinfer/log.hpp — where dsinfer's messages go.
//
// Purpose: dsinfer says a few things a host may want to see: at load, one info line summing up
// the engine (model, nodes per provider, ISA, threads, backends, weights); at warning level, what
// it tolerates but a host probably did not mean (an option that has no effect, an environment
// variable it ignores). Messages go to a sink the host controls:
//   - a process-wide sink: set_log_callback / set_log_level. Default: warnings and errors to
//     stderr, one line each ("dsinfer: warning: ...");
//   - per engine, EngineOptions::log (dsinfer/engine.hpp): a callback and/or a level for that
//     engine's messages only, each falling back to the process-wide one when unset.
// dsinfer has no other global logging state: nothing is written anywhere the host cannot
// redirect or silence (set_log_level(LogLevel::off)).
//
// Threading: every function here is thread-safe. A callback may be called from any thread that
// loads or runs an engine, concurrently with itself; it must not throw (an exception is
// swallowed) and may call set_log_callback / set_log_level (the sink in use is copied before the
// call, not locked during it). A message is complete in one call (no trailing newline).
//
// Usage:
//   dsinfer::set_log_callback([](dsinfer::LogLevel level, std::string_view message) {
//       my_logger.write(dsinfer::log_level_name(level), message);
//   });
//   dsinfer::set_log_level(dsinfer::LogLevel::info);  // also the start-up summary of each load
//
//   dsinfer::EngineOptions o;                          // or per engine:
//   o.log.level = dsinfer::LogLevel::info;
//   o.log.callback = [&](dsinfer::LogLevel, std::string_view m) { lines.emplace_back(m); };
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "dsinfer/export.hpp"

namespace dsinfer {

/// Severity of a message, least to most severe; `off` (as a level) passes nothing.
enum class LogLevel : std::uint8_t { trace, debug, info, warning, error, off };

/// Receives one message: its level and its text (valid during the call only).
using LogCallback = std::function<void(LogLevel level, std::string_view message)>;

/// "trace", "debug", "info", "warning", "error" or "off".
DSINFER_API const char* log_level_name(LogLevel level) noexcept;

/// Sets the process-wide sink: messages of engines without their own EngineOptions::log
/// callback, and of the library outside any engine. An empty callback restores the default
/// (stderr). Messages logged after it returns go to the new sink.
DSINFER_API void set_log_callback(LogCallback callback);

/// The process-wide level: messages below it are not formatted nor sent (default: warning).
DSINFER_API void set_log_level(LogLevel level) noexcept;
DSINFER_API LogLevel log_level() noexcept;

/// One engine's logging (EngineOptions::log): each field overrides the process-wide setting
/// for that engine's messages alone.
struct LogOptions {
    /// Where the engine's messages go; empty: the process-wide sink (set_log_callback).
    LogCallback callback{};
    /// The least severe message the engine sends; unset: the process-wide level (log_level()).
    std::optional<LogLevel> level{};
};

}  // namespace dsinfer
