#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "engine/sampler.h"
#include "policy/eviction_policy.h"
#include "policy/policy_options.h"
#include "server/api_error.h"

namespace kvdice::server {
namespace {

// Fields OpenAI defines that kvdice accepts only with their neutral value (anything else is a 400
// rather than silently ignored), and fields it accepts and ignores (metadata for the caller).
const std::set<std::string> kIgnored = {"user",         "metadata",       "store",
                                        "service_tier", "stream_options", "parallel_tool_calls"};

std::string type_name(const Json& v) { return v.type_name(); }

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& v) {
  bad_request(field, fmt::format("'{}' must be {} (got {})", field, expected, type_name(v)));
}

bool get_bool(const Json& v, const std::string& field) {
  if (!v.is_boolean()) wrong_type(field, "a boolean", v);
  return v.get<bool>();
}

double get_number(const Json& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) wrong_type(field, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad_request(field, fmt::format("'{}' must be in [{}, {}] (got {})", field, lo, hi, x));
  return x;
}

int64_t get_integer(const Json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) wrong_type(field, "an integer", v);
  // Unsigned values above int64 max come through as unsigned.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad_request(field, fmt::format("'{}' must be in [{}, {}]", field, lo, hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad_request(field, fmt::format("'{}' must be in [{}, {}] (got {})", field, lo, hi, x));
  return x;
}

std::string get_string(const Json& v, const std::string& field) {
  if (!v.is_string()) wrong_type(field, "a string", v);
  return v.get<std::string>();
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const Json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) wrong_type(field, "a string or an array of text parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part_field = fmt::format("{}[{}]", field, i);
    const Json& part = v[i];
    if (!part.is_object()) wrong_type(part_field, "an object", part);
    if (!part.contains("type") || part["type"] != "text")
      bad_request(part_field + ".type", "only text content parts are supported (type 'text')");
    for (const auto& [key, _] : part.items()) {
      if (key != "type" && key != "text")
        bad_request(part_field + "." + key, fmt::format("unknown field '{}' in a content part", key));
    }
    if (!part.contains("text")) bad_request(part_field + ".text", "a text part needs 'text'");
    text += get_string(part["text"], part_field + ".text");
  }
  return text;
}

std::vector<tokenizer::ChatMessage> parse_messages(const Json& v) {
  if (!v.is_array()) wrong_type("messages", "an array", v);
  if (v.empty()) bad_request("messages", "'messages' must hold at least one message");
  std::vector<tokenizer::ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = fmt::format("messages[{}]", i);
    const Json& m = v[i];
    if (!m.is_object()) wrong_type(field, "an object", m);
    for (const auto& [key, _] : m.items()) {
      if (key != "role" && key != "content" && key != "name")
        bad_request(field + "." + key, fmt::format("unsupported field '{}' in a message", key));
    }
    if (!m.contains("role")) bad_request(field + ".role", "a message needs a 'role'");
    std::string role = get_string(m["role"], field + ".role");
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    if (role != "system" && role != "user" && role != "assistant")
      bad_request(field + ".role",
                  fmt::format("role '{}' is not supported (system, developer, user, assistant)", role));
    if (!m.contains("content") || m["content"].is_null())
      bad_request(field + ".content", "a message needs 'content'");
    if (m.contains("name")) get_string(m["name"], field + ".name");
    out.push_back({role, message_content(m["content"], field + ".content")});
  }
  return out;
}

// A request must not make the server open a file of the client's choosing: whether it exists, its type
// and its size would come back in the error, and any large file would be read for the request. The one
// statistics file a request may name is the one the server's own --policy names.
void check_request_names_no_file(const std::string& requested, const std::string& server_policy) {
  std::string file, server_file, server_name;
  try {
    policy::PolicyOptions request_options(requested);
    file = request_options.get_string("stats", "");
    policy::PolicyOptions server_options(server_policy);
    server_name = server_options.name();
    server_file = server_options.get_string("stats", "");
  } catch (const Error&) {
    return;  // a malformed spec is named by make_policy below
  }
  if (file.empty() && !server_file.empty() && policy::PolicyOptions(requested).name() == server_name)
    bad_request("kv.policy", fmt::format("'kv.policy': this server's statistics for '{}' are those of its "
                                         "default policy: send '{}'",
                                         server_name, server_policy));
  if (file.empty() || file == server_file) return;
  bad_request("kv.policy",
              server_file.empty()
                  ? std::string("'kv.policy' may not name a file on the server (stats=...); statistics are "
                                "chosen when the server starts (--policy triattention:stats=FILE)")
                  : fmt::format("'kv.policy' may not name a file on the server (stats=...); this server's "
                                "statistics are those of its default policy: send '{}'",
                                server_policy));
}

engine::KvSettings parse_kv(const Json& v, engine::KvSettings kv) {
  if (!v.is_object()) wrong_type("kv", "an object", v);
  const std::string server_policy = kv.policy;
  for (const auto& [key, value] : v.items()) {
    const std::string field = "kv." + key;
    if (key == "policy") {
      kv.policy = get_string(value, field);
    } else if (key == "budget") {
      kv.budget.budget = static_cast<int>(get_integer(value, field, 0, 1 << 24));
    } else if (key == "window") {
      kv.budget.window = static_cast<int>(get_integer(value, field, 1, 1 << 20));
    } else if (key == "long_prompt") {
      const std::string rule = get_string(value, field);
      if (rule != "warn" && rule != "error") bad_request(field, "'kv.long_prompt' must be 'warn' or 'error'");
      kv.budget.long_prompt = rule == "error" ? kv::LongPromptRule::Error : kv::LongPromptRule::Warn;
    } else {
      bad_request(field,
                  fmt::format("unknown field '{}' in 'kv' (policy, budget, window, long_prompt)", key));
    }
  }
  // An unknown name lists the known ones; a known policy with a bad option says which option is bad.
  const std::vector<std::string> names = policy::policy_names();
  const std::string name = kv.policy.substr(0, kv.policy.find(':'));
  if (std::find(names.begin(), names.end(), name) == names.end())
    bad_request("kv.policy", fmt::format("unknown policy '{}'; known: {}", quote_for_message(name, 200),
                                         fmt::join(names, ", ")));
  check_request_names_no_file(kv.policy, server_policy);
  std::unique_ptr<policy::EvictionPolicy> policy;
  try {
    policy = policy::make_policy(kv.policy);
  } catch (const Error& e) {
    bad_request("kv.policy", fmt::format("'kv.policy': {}", e.what()));
  }
  if (!policy->evicts()) {
    kv.budget.budget = 0;  // full attention keeps everything; its budget is meaningless
  } else {
    if (kv.budget.budget <= 0)
      bad_request("kv.budget", fmt::format("policy '{}' evicts and needs 'kv.budget' T > 0", kv.policy));
    try {
      kv.budget.validate();
    } catch (const Error& e) {
      bad_request("kv.budget", e.what());
    }
  }
  return kv;
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body, Endpoint endpoint, const RequestLimits& limits) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  CompletionRequest r;
  r.endpoint = endpoint;
  r.kv = limits.kv;
  const bool chat = endpoint == Endpoint::Chat;
  bool have_input = false;
  for (const auto& [key, v] : body.items()) {
    if (kIgnored.count(key)) continue;
    if (key == "model") {
      r.model = get_string(v, key);
    } else if (chat && key == "messages") {
      r.messages = parse_messages(v);
      have_input = true;
    } else if (!chat && key == "prompt") {
      have_input = true;
      if (v.is_string()) {
        r.prompt = v.get<std::string>();
      } else if (v.is_array() && v.size() == 1 && v[0].is_string()) {
        r.prompt = v[0].get<std::string>();
      } else if (v.is_array() && !v.empty() &&
                 std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_number_integer(); })) {
        std::vector<int> ids;
        for (const Json& x : v) ids.push_back(static_cast<int>(get_integer(x, "prompt", 0, INT32_MAX)));
        r.prompt_ids = std::move(ids);
      } else {
        bad_request("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (v.is_null()) continue;
      r.max_tokens = static_cast<int>(get_integer(v, key, 1, INT32_MAX));
      r.max_tokens_field = key;
    } else if (key == "temperature") {
      if (!v.is_null()) {
        // OpenAI's range, then the engine's own rule (0 < t < 1e-3 overflows the logits' quotients).
        const double t = get_number(v, key, 0.0, 2.0);
        if (const std::string problem = engine::temperature_problem(t); !problem.empty())
          bad_request(key, fmt::format("'temperature': {}", problem));
        r.temperature = static_cast<float>(t);
      }
    } else if (key == "top_p") {
      if (!v.is_null()) r.top_p = static_cast<float>(get_number(v, key, 0.0, 1.0));
      if (r.top_p <= 0.0f) bad_request(key, "'top_p' must be > 0");
    } else if (key == "top_k") {  // vLLM's extension; -1 and 0 mean off
      if (!v.is_null()) r.top_k = std::max(0, static_cast<int>(get_integer(v, key, -1, 1 << 20)));
    } else if (key == "n") {
      if (!v.is_null()) r.n = static_cast<int>(get_integer(v, key, 1, limits.max_n));
    } else if (key == "seed") {
      if (!v.is_null()) r.seed = get_integer(v, key, INT64_MIN, INT64_MAX);
    } else if (key == "stop") {
      if (v.is_null()) continue;
      if (v.is_string()) {
        r.stop = {v.get<std::string>()};
      } else if (v.is_array()) {
        if (v.size() > limits.max_stop)
          bad_request(key, fmt::format("'stop' holds at most {} strings", limits.max_stop));
        for (size_t i = 0; i < v.size(); ++i) r.stop.push_back(get_string(v[i], fmt::format("stop[{}]", i)));
      } else {
        wrong_type(key, "a string or an array of strings", v);
      }
      for (const auto& s : r.stop)
        if (s.empty()) bad_request(key, "stop strings must not be empty");
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = get_bool(v, key);
    } else if (key == "ignore_eos") {  // vLLM's extension
      r.ignore_eos = get_bool(v, key);
    } else if (key == "kv") {
      if (!v.is_null()) r.kv = parse_kv(v, limits.kv);
    } else if (chat && key == "chat_template_kwargs") {  // vLLM's extension
      if (!v.is_object()) wrong_type(key, "an object", v);
      for (const auto& [k, x] : v.items()) {
        if (k != "enable_thinking")
          bad_request(key + "." + k, "only 'enable_thinking' is supported in 'chat_template_kwargs'");
        r.enable_thinking = get_bool(x, key + "." + k);
      }
    } else if (!chat && key == "special_tokens") {
      const std::string mode = get_string(v, key);
      if (mode != "parse" && mode != "text") bad_request(key, "'special_tokens' must be 'parse' or 'text'");
      r.parse_special = mode == "parse";
    } else if (key == "logprobs" || (chat && key == "top_logprobs")) {
      // The engine does not expose sampled-token log-probabilities yet: refuse rather than omit.
      if (v.is_null() || (v.is_boolean() && !v.get<bool>())) continue;
      if (key == "top_logprobs" && v.is_number_integer() && v.get<int64_t>() == 0) continue;
      bad_request(key, fmt::format("'{}' is not supported by this server yet", key));
    } else if (key == "frequency_penalty" || key == "presence_penalty") {
      if (v.is_null()) continue;
      if (get_number(v, key, -2.0, 2.0) != 0.0)
        bad_request(key, fmt::format("'{}' is not supported (only 0)", key));
    } else if (key == "logit_bias") {
      if (v.is_null()) continue;
      if (!v.is_object()) wrong_type(key, "an object", v);
      if (!v.empty()) bad_request(key, "'logit_bias' is not supported");
    } else if (chat && key == "response_format") {
      if (v.is_null()) continue;
      if (!v.is_object() || !v.contains("type") || v["type"] != "text")
        bad_request(key, "only response_format {\"type\": \"text\"} is supported");
    } else if (chat && (key == "tools" || key == "functions")) {
      if (v.is_null() || (v.is_array() && v.empty())) continue;
      bad_request(key, "tool calls are not supported");
    } else if (chat && (key == "tool_choice" || key == "function_call")) {
      if (v.is_null() || v == "none") continue;
      bad_request(key, "tool calls are not supported");
    } else if (!chat && key == "echo") {
      if (!v.is_null() && get_bool(v, key)) bad_request(key, "'echo' is not supported");
    } else if (!chat && key == "best_of") {
      if (v.is_null()) continue;
      if (get_integer(v, key, 1, limits.max_n) != 1) bad_request(key, "'best_of' is not supported (only 1)");
    } else if (!chat && key == "suffix") {
      if (!v.is_null()) bad_request(key, "'suffix' is not supported");
    } else {
      bad_request(key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const Json& so = body["stream_options"];
    if (!so.is_object()) wrong_type("stream_options", "an object", so);
    if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (const auto& [k, x] : so.items()) {
      if (k != "include_usage")
        bad_request("stream_options." + k, fmt::format("unknown field '{}' in 'stream_options'", k));
      r.include_usage = get_bool(x, "stream_options.include_usage");
    }
  }
  if (!body.contains("model")) bad_request("model", "you must provide a model parameter");
  if (!have_input)
    bad_request(chat ? "messages" : "prompt", chat ? "'messages' is required" : "'prompt' is required");
  return r;
}

}  // namespace kvdice::server
