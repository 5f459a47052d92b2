// ApiError: a request the server refuses, carried to the HTTP layer as an OpenAI-style error object
// ({"error": {"message", "type", "param", "code"}}) with its HTTP status.
#pragma once

#include <stdexcept>
#include <string>

#include "core/json.h"

namespace kvdice::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  Json to_json() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// 400 naming the offending field.
[[noreturn]] inline void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param, "invalid_value");
}

// OpenAI's error type for a status: invalid_request_error, authentication_error, ...
std::string error_type_for_status(int status);
Json error_json(int status, const std::string& message, const std::string& param = {},
                const std::string& code = {});

}  // namespace kvdice::server
