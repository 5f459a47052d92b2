// libFuzzer target: an HTTP request body through the server's own path, JSON parse then
// server::parse_completion_request for both endpoints. The only acceptable failures are the parse
// error (the server answers 400 invalid_json) and an ApiError with a 4xx status; any other exception,
// a 5xx, a sanitizer report or a crash is a bug. An accepted request must be one the engine can take.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/sampler.h"
#include "server/api_error.h"
#include "server/openai_request.h"

using kvdice::server::ApiError;
using kvdice::server::Endpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvdice::Json body;
  try {
    body = kvdice::Json::parse(text);
  } catch (const kvdice::Json::exception&) {
    return 0;
  }
  const kvdice::server::RequestLimits limits;
  for (const Endpoint endpoint : {Endpoint::Chat, Endpoint::Completion}) {
    try {
      const kvdice::server::CompletionRequest r = kvdice::server::parse_completion_request(body, endpoint, limits);
      if (r.n < 1 || r.n > limits.max_n || r.stop.size() > limits.max_stop) __builtin_trap();
      if (r.max_tokens && *r.max_tokens < 0) __builtin_trap();
      if (!kvdice::engine::temperature_problem(r.temperature).empty() ||
          !kvdice::engine::top_p_problem(r.top_p).empty())
        __builtin_trap();
    } catch (const ApiError& e) {
      if (e.status() < 400 || e.status() >= 500) __builtin_trap();
    }
  }
  return 0;
}
