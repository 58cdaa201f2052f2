// Status and Result<T>: expected failures travel as values with a message a user can act on.
// Invariant violations use DSV4_CHECK (check.h) instead. No exceptions cross module boundaries.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace dsv4 {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,     // caller passed something malformed (bad request, bad flag, bad id)
    kNotFound,            // missing file, tensor, field
    kOutOfRange,          // offsets, ids or lengths beyond their limits
    kFailedPrecondition,  // state does not allow the operation (e.g. cache full)
    kResourceExhausted,   // out of pages / queue full
    kDataLoss,            // corrupt file contents
    kUnimplemented,
    kInternal,
    kUnavailable,
    // The device is in a state no later call can recover from (a sticky CUDA error: illegal
    // address, launch failure, ...): every request on it fails and the process must restart.
    kDeviceLost,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }
    bool is_ok() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string to_string() const;

    // Prefixes context ("loading layers.3.attn.wkv: ") to the message.
    Status with_context(const std::string& context) const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

template <typename... Args>
Status error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
    return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
    return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
    Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status kOk;
        return is_ok() ? kOk : std::get<Status>(v_);
    }
    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> v_;
};

}  // namespace dsv4

// Propagate a non-ok Status from an expression returning Status.
#define DSV4_RETURN_IF_ERROR(expr)                      \
    do {                                                \
        ::dsv4::Status dsv4_status_ = (expr);           \
        if (!dsv4_status_.is_ok()) return dsv4_status_; \
    } while (0)

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)
// lhs = value of a Result expression, or return its Status.
#define DSV4_ASSIGN_OR_RETURN(lhs, expr) DSV4_ASSIGN_OR_RETURN_IMPL_(DSV4_CONCAT_(dsv4_result_, __LINE__), lhs, expr)
#define DSV4_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
    auto tmp = (expr);                              \
    if (!tmp.is_ok()) return tmp.status();          \
    lhs = std::move(tmp).value()
