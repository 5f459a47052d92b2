// The body of POST /v1/chat/completions and /v1/completions, checked field by field the way
// OpenAI's API does (wrong type, out of range, unknown field: 400 naming the field), plus kvdice's
// `kv` object: the request's own eviction policy and budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "engine/request.h"
#include "tokenizer/chat_template.h"

namespace kvdice::server {

enum class Endpoint { Chat, Completion };

// Server-wide defaults and limits, from the command line.
struct RequestLimits {
  engine::KvSettings kv{"random_pp", {}};
  int default_max_tokens = 512;
  int max_n = 16;
  size_t max_stop = 4;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;
  std::vector<tokenizer::ChatMessage> messages;  // chat
  std::string prompt;                            // completions, as text
  std::optional<std::vector<int>> prompt_ids;    // completions given as token ids
  bool parse_special = true;                     // completions: special-token text becomes special tokens
  bool enable_thinking = true;                   // chat_template_kwargs.enable_thinking (Qwen3)
  std::optional<int> max_tokens;                 // absent: as many as fit, capped by the server default
  std::string max_tokens_field = "max_tokens";   // the field it came in (max_completion_tokens too)
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  int n = 1;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  engine::KvSettings kv;
};

// Throws ApiError(400) naming the field. The policy name and budget rules are checked here too.
CompletionRequest parse_completion_request(const Json& body, Endpoint endpoint, const RequestLimits& limits);

}  // namespace kvdice::server
