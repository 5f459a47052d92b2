// The server's OpenAPI 3.0 document (GET /openapi.json): the request bodies it accepts, field by
// field, so schema fuzzers (schemathesis) and client generators work from the server itself.
#pragma once

#include <string>

namespace kvdice::server {

// `model_name` is the one model id the server accepts (an enum, so generated requests reach the engine).
std::string openapi_document(const std::string& model_name);

}  // namespace kvdice::server
