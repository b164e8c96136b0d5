// dsinfer/status.hpp — the one error vocabulary of dsinfer.
//
// Purpose: ErrorCode (one enum for the C++ API and, later, the HTTP layer), Status and
// StatusOr<T> (used inside the library and by kernels, which never throw), and dsinfer::Error
// (the exception thrown at the public API: InferenceEngine, loaders, passes).
//
// Ownership/threading: all types are plain values; safe to copy and move between threads.
//
// Usage:
//   dsinfer::Status check_axis(int64_t axis, int64_t rank) {
//       DSINFER_CHECK(axis >= -rank && axis < rank, dsinfer::ErrorCode::invalid_model,
//                     "axis ", axis, " is outside [", -rank, ", ", rank, ")");
//       return dsinfer::Status::ok();
//   }
//   try { auto engine = dsinfer::InferenceEngine::load("model.onnx"); }
//   catch (const dsinfer::Error& e) { if (e.code() == dsinfer::ErrorCode::invalid_model) ...; }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dsinfer {

/// Cause-grouped error codes. Every failure the library reports carries exactly one.
enum class ErrorCode : std::uint8_t {
    ok = 0,
    /// The model file or graph is malformed or violates the ONNX spec (bad protobuf, cycles,
    /// undefined names, bad attributes, tensor data that does not match its dims).
    invalid_model,
    /// A caller-supplied argument is wrong: run-time inputs (names, dtype, shape, byte size),
    /// options, or data-dependent indices out of range.
    invalid_argument,
    /// Well-formed but not supported by this build: an op, opset, dtype, or IR version.
    unsupported,
    /// A limit was hit: memory, a configured size/count limit, a pool budget.
    resource_exhausted,
    /// The service cannot take the request now (queue full, shutting down).
    unavailable,
    /// The request was cancelled by the caller.
    cancelled,
    /// The request's deadline passed before it completed.
    deadline_exceeded,
    /// The device failed (sticky CUDA error, device reset); later requests fail fast.
    device_lost,
    /// Reading or writing a file failed (missing file, EIO, permission).
    io_error,
    /// A bug in dsinfer: an internal invariant failed. Never caused by input validation.
    internal,
};

/// Stable lower-case name of a code ("invalid_model", ...).
constexpr std::string_view to_string(ErrorCode code) noexcept {
    switch (code) {
        case ErrorCode::ok: return "ok";
        case ErrorCode::invalid_model: return "invalid_model";
        case ErrorCode::invalid_argument: return "invalid_argument";
        case ErrorCode::unsupported: return "unsupported";
        case ErrorCode::resource_exhausted: return "resource_exhausted";
        case ErrorCode::unavailable: return "unavailable";
        case ErrorCode::cancelled: return "cancelled";
        case ErrorCode::deadline_exceeded: return "deadline_exceeded";
        case ErrorCode::device_lost: return "device_lost";
        case ErrorCode::io_error: return "io_error";
        case ErrorCode::internal: return "internal";
    }
    return "unknown";
}

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
    if constexpr (sizeof...(Args) == 0) {
        return {};
    } else {
        std::ostringstream os;
        (os << ... << args);
        return os.str();
    }
}
/// A Status's message text (Status::error); not inlined, so that a fault injector can tell an
/// allocation failure here, which Status::error absorbs, from one elsewhere.
template <class... Args>
[[gnu::noinline]] std::string build_status_message(const Args&... args) {
    return str_cat(args...);
}
}  // namespace detail

/// Result of an operation: ok, or an ErrorCode with a message naming what is at fault.
///
/// Never throws: kernels build and pass Statuses inside noexcept run() paths, where an
/// exception would end the process. The message is an immutable shared string, so copies
/// only count references; when the memory for a new message cannot be had (the process is
/// out of memory), the Status keeps its code and says "(message lost: out of memory)".
class [[nodiscard]] Status {
public:
    Status() noexcept = default;
    Status(ErrorCode code, std::string_view message) noexcept : code_(code) { set(message); }
    Status(ErrorCode code, const char* message) noexcept
        : Status(code, std::string_view(message != nullptr ? message : "")) {}
    Status(ErrorCode code, const std::string& message) noexcept
        : Status(code, std::string_view(message)) {}

    static Status ok() noexcept { return Status(); }
    template <class... Args>
    static Status error(ErrorCode code, const Args&... args) noexcept {
        try {
            return Status(code, std::string_view(detail::build_status_message(args...)));
        } catch (...) {
            return Status(code, lost());
        }
    }

    bool is_ok() const noexcept { return code_ == ErrorCode::ok; }
    explicit operator bool() const noexcept { return is_ok(); }
    ErrorCode code() const noexcept { return code_; }
    const std::string& message() const noexcept { return message_ ? *message_ : empty(); }
    /// "invalid_model: <message>"
    std::string to_string() const {
        return std::string(dsinfer::to_string(code_)) + (message().empty() ? "" : ": " + message());
    }
    /// Returns a copy whose message is prefixed with `context` (e.g. "node 'conv1' (Conv): ").
    /// Out of memory, the copy keeps the message without the prefix.
    Status with_context(std::string_view context) const noexcept {
        if (is_ok()) return *this;
        try {
            return Status(code_, std::string_view(std::string(context) + message()));
        } catch (...) {
            return *this;
        }
    }

private:
    static const std::string& empty() noexcept {
        static const std::string e;
        return e;
    }
    static const std::shared_ptr<const std::string>& lost() noexcept {
        static const std::shared_ptr<const std::string> m =
            std::make_shared<const std::string>("(message lost: out of memory)");
        return m;
    }
    Status(ErrorCode code, std::shared_ptr<const std::string> message) noexcept
        : code_(code), message_(std::move(message)) {}
    // Not inlined: an allocation failure here is a recovery the fault tests recognize by name.
    [[gnu::noinline]] void set(std::string_view message) noexcept {
        if (message.empty()) return;
        try {
            message_ = std::make_shared<const std::string>(message);
        } catch (...) {
            message_ = lost();
        }
    }

    ErrorCode code_ = ErrorCode::ok;
    std::shared_ptr<const std::string> message_;
};

/// Exception thrown at the public API. what() is "<code>: <message>".
class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message)
        : std::runtime_error(std::string(to_string(code)) + ": " + message),
          code_(code),
          message_(message) {}
    explicit Error(const Status& status) : Error(status.code(), status.message()) {}
    ErrorCode code() const noexcept { return code_; }
    /// The message without the code prefix.
    const std::string& message() const noexcept { return message_; }

private:
    ErrorCode code_;
    std::string message_;
};

/// Throws dsinfer::Error if `status` is not ok. Used at the public API boundary.
inline void throw_if_error(const Status& status) {
    if (!status.is_ok()) throw Error(status);
}

/// A value or a (non-ok) Status.
template <class T>
class [[nodiscard]] StatusOr {
public:
    StatusOr(const T& value) : v_(value) {}           // NOLINT(google-explicit-constructor)
    StatusOr(T&& value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
    StatusOr(Status status) noexcept : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
        if (std::get<Status>(v_).is_ok())
            v_ = Status(ErrorCode::internal, "StatusOr constructed from an ok Status");
    }

    bool is_ok() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return is_ok(); }
    Status status() const noexcept { return is_ok() ? Status::ok() : *std::get_if<Status>(&v_); }
    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    /// The value, or throws dsinfer::Error.
    T value_or_throw() && {
        if (!is_ok()) throw Error(std::get<Status>(v_));
        return std::get<T>(std::move(v_));
    }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> v_;
};

}  // namespace dsinfer

#define DSINFER_CONCAT_INNER_(a, b) a##b
#define DSINFER_CONCAT_(a, b) DSINFER_CONCAT_INNER_(a, b)

/// Returns the Status from the enclosing function if `expr` is not ok.
#define DSINFER_RETURN_IF_ERROR(expr)                                \
    do {                                                             \
        ::dsinfer::Status dsinfer_status_ = (expr);                  \
        if (!dsinfer_status_.is_ok()) return dsinfer_status_;        \
    } while (0)

/// `DSINFER_ASSIGN_OR_RETURN(auto x, make_x());` — unwraps a StatusOr or returns its Status.
#define DSINFER_ASSIGN_OR_RETURN(lhs, expr) \
    DSINFER_ASSIGN_OR_RETURN_IMPL_(DSINFER_CONCAT_(dsinfer_sor_, __LINE__), lhs, expr)
#define DSINFER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
    auto tmp = (expr);                                 \
    if (!tmp.is_ok()) return tmp.status();             \
    lhs = std::move(tmp).value()

/// Checks a condition about user input (model, inputs, options). On failure returns a Status
/// with `code` and the message built from the remaining arguments (evaluated only on failure).
#define DSINFER_CHECK(cond, code, ...)                                     \
    do {                                                                   \
        if (!(cond)) return ::dsinfer::Status::error((code), __VA_ARGS__); \
    } while (0)

/// Checks a library invariant. On failure returns ErrorCode::internal with file:line.
#define DSINFER_ASSERT(cond, ...)                                                         \
    do {                                                                                  \
        if (!(cond))                                                                      \
            return ::dsinfer::Status::error(::dsinfer::ErrorCode::internal, __FILE__, ":", \
                                            __LINE__, ": assertion '", #cond,             \
                                            "' failed (please report a bug) ",            \
                                            ##__VA_ARGS__);                               \
    } while (0)

#ifdef NDEBUG
#define DSINFER_DASSERT(cond, ...) ((void)0)
#else
#define DSINFER_DASSERT(cond, ...) DSINFER_ASSERT(cond, ##__VA_ARGS__)
#endif
