#include "server/api_error.h"

namespace drift::server {

ApiError bad_request(std::string message, std::string param) {
  return {400, "invalid_request_error", std::move(message), std::move(param), {}};
}

ApiError not_found_error(std::string message, std::string param) {
  return {404, "not_found_error", std::move(message), std::move(param), {}};
}

ApiError unauthorized(std::string message) {
  return {401, "authentication_error", std::move(message), {}, "invalid_api_key"};
}

ApiError shutting_down() { return {503, "service_unavailable_error", "the server is shutting down", {}, {}}; }

ApiError api_error_from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      return bad_request(status.message());
    case StatusCode::kNotFound:
      return not_found_error(status.message());
    case StatusCode::kResourceExhausted:
      return {429, "rate_limit_error", status.message(), {}};
    case StatusCode::kCancelled:
    case StatusCode::kUnavailable:
      return {503, "service_unavailable_error", status.message(), {}};
    default:
      return {500, "server_error", status.message(), {}};
  }
}

nlohmann::ordered_json error_json(const ApiError& error) {
  nlohmann::ordered_json body;
  body["message"] = error.message;
  body["type"] = error.type;
  body["param"] = error.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.param);
  body["code"] = error.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.code);
  return {{"error", body}};
}

}  // namespace drift::server
