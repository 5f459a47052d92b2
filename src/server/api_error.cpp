#include "server/api_error.h"

namespace kvdice::server {

std::string error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

Json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  return Json{{"error",
               {{"message", message},
                {"type", error_type_for_status(status)},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

Json ApiError::to_json() const { return error_json(status_, what(), param_, code_); }

}  // namespace kvdice::server
