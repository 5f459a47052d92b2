// Turns a Job's token stream into an OpenAI response: chat.completion / text_completion JSON, or
// server-sent events of chunks ending in "data: [DONE]", with `usage` (prompt and completion
// tokens plus the KV each request held: peak slots and bytes, eviction rounds).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "server/engine_host.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::Chat;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  int prompt_tokens = 0;
  engine::KvSettings kv;
  std::vector<std::string> stop;
  std::vector<int> stop_ids;
  bool ignore_eos = false;
  bool reasoning = false;     // split a <think> section into reasoning_content
  bool think_opened = false;  // the prompt already opened it
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const model::ModelConfig* model_config = nullptr;
  int kv_bytes_per_element = 4;
};

// Writes the response through `write` (false when the client is gone) while the job runs, and
// polls `alive` between tokens. Cancels the job's sequences when the client leaves or a stop
// string ends a choice. Returns false when the client left.
bool pump_completion(EngineHost& host, Job& job, const ResponseContext& ctx,
                     const std::function<bool(const std::string&)>& write,
                     const std::function<bool()>& alive);

}  // namespace kvdice::server
