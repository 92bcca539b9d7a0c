// ApiError: what the server answers when it refuses a request, in OpenAI's error shape
// {"error": {"message", "type", "param", "code"}}. OpenAI's `code` is a string or null (its clients read it
// as one), so the HTTP status travels only as the status line.
#pragma once

#include <nlohmann/json.hpp>

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include "drift/status.h"

namespace drift::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the request field at fault; empty renders as null
  std::string code;   // OpenAI's machine-readable code ("invalid_api_key", "model_not_found"); empty: null
};

ApiError bad_request(std::string message, std::string param = {});
ApiError not_found_error(std::string message, std::string param = {});
ApiError unauthorized(std::string message);
ApiError shutting_down();
// Maps an engine refusal: invalid_argument/unsupported -> 400, not_found -> 404, resource_exhausted -> 429
// (queue full: retry later), cancelled -> 503 (shutting down), unavailable -> 503 (overloaded: SLO admission
// shed it), anything else -> 500.
ApiError api_error_from_status(const Status& status);

nlohmann::ordered_json error_json(const ApiError& error);

// A value or the ApiError that explains why there is none.
template <class T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}
  ApiResult(ApiError error) : v_(std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const ApiError& error() const { return std::get<ApiError>(v_); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace drift::server
