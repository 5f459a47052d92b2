// The server's OpenAPI 3.0 document (GET /openapi.json): the request bodies it accepts, field by
// field, so schema fuzzers (schemathesis) and client generators work from the server itself.
#pragma once

#include <string>

namespace kvdice::server {

const std::string& openapi_document();

}  // namespace kvdice::server
