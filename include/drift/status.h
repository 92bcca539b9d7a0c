// Status and Expected<T>: how every fallible Drift call reports bad input (contract 10).
// A Status names the problem in its message; it never aborts the process.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace drift {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // a malformed request, a bad flag, a value out of range
  kNotFound,           // a missing file, tensor or model
  kUnsupported,        // a config or feature this build does not handle
  kDataLoss,           // a corrupt or truncated file
  kResourceExhausted,  // no KV capacity, out of memory, queue full
  kCancelled,          // the client cancelled
  kUnavailable,        // the engine is overloaded now (SLO admission shed the request): retry later
  kIoError,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none (std::expected arrives only in C++23).
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace drift

#define DRIFT_CONCAT_INNER(a, b) a##b
#define DRIFT_CONCAT(a, b) DRIFT_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the calling function when it is not ok.
#define DRIFT_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::drift::Status drift_status_ = (expr);    \
    if (!drift_status_.ok()) return drift_status_; \
  } while (0)

// `DRIFT_ASSIGN_OR_RETURN(auto x, make_x());` unwraps an Expected or returns its Status.
#define DRIFT_ASSIGN_OR_RETURN(lhs, expr) DRIFT_ASSIGN_OR_RETURN_IMPL(DRIFT_CONCAT(drift_expected_, __LINE__), lhs, expr)
#define DRIFT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
