#include "server/openapi.h"

#include "core/json.h"

namespace kvdice::server {
namespace {

Json error_responses() {
  const Json error_ref = {{"$ref", "#/components/schemas/Error"}};
  Json out = Json::object();
  for (const char* code : {"400", "401", "404", "413", "429", "503"}) {
    out[code] = {{"description", "OpenAI-style error"},
                 {"content", {{"application/json", {{"schema", error_ref}}}}}};
  }
  return out;
}

Json common_properties(const std::string& model_name) {
  return Json{
      {"model", {{"type", "string"}, {"enum", {model_name}}}},
      {"max_tokens", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
      {"max_completion_tokens", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
      {"temperature", {{"type", "number"}, {"minimum", 0}, {"maximum", 2}, {"nullable", true}}},
      {"top_p",
       {{"type", "number"}, {"exclusiveMinimum", true}, {"minimum", 0}, {"maximum", 1}, {"nullable", true}}},
      {"top_k", {{"type", "integer"}, {"minimum", -1}}},
      {"n", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
      {"seed", {{"type", "integer"}, {"nullable", true}}},
      {"stop",
       {{"nullable", true},
        {"oneOf",
         {{{"type", "string"}, {"minLength", 1}},
          {{"type", "array"}, {"maxItems", 4}, {"items", {{"type", "string"}, {"minLength", 1}}}}}}}},
      {"stream", {{"type", "boolean"}, {"nullable", true}}},
      {"stream_options",
       {{"type", "object"},
        {"nullable", true},
        {"additionalProperties", false},
        {"properties", {{"include_usage", {{"type", "boolean"}}}}}}},
      {"ignore_eos", {{"type", "boolean"}}},
      {"logprobs",
       {{"nullable", true}, {"description", "only false/null: log-probabilities are not served yet"}}},
      {"frequency_penalty", {{"type", "number"}, {"minimum", -2}, {"maximum", 2}, {"nullable", true}}},
      {"presence_penalty", {{"type", "number"}, {"minimum", -2}, {"maximum", 2}, {"nullable", true}}},
      {"logit_bias", {{"type", "object"}, {"nullable", true}}},
      {"user", {{"type", "string"}}},
      {"kv", {{"$ref", "#/components/schemas/KvSettings"}}},
  };
}

Json build(const std::string& model_name) {
  Json chat_props = common_properties(model_name);
  chat_props["messages"] = {
      {"type", "array"}, {"minItems", 1}, {"items", {{"$ref", "#/components/schemas/Message"}}}};
  chat_props["top_logprobs"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 20}, {"nullable", true}};
  chat_props["chat_template_kwargs"] = {{"type", "object"},
                                        {"additionalProperties", false},
                                        {"properties", {{"enable_thinking", {{"type", "boolean"}}}}}};
  Json completion_props = common_properties(model_name);
  completion_props["prompt"] = {
      {"oneOf",
       {{{"type", "string"}},
        {{"type", "array"}, {"minItems", 1}, {"maxItems", 1}, {"items", {{"type", "string"}}}},
        {{"type", "array"}, {"minItems", 1}, {"items", {{"type", "integer"}, {"minimum", 0}}}}}}};
  completion_props["special_tokens"] = {
      {"type", "string"},
      {"enum", {"parse", "text"}},
      {"description",
       "parse (default, as transformers): special-token text in the prompt becomes special tokens; "
       "text: it is encoded as plain text"}};
  completion_props["echo"] = {{"type", "boolean"}, {"nullable", true}};
  completion_props["best_of"] = {{"type", "integer"}, {"minimum", 1}, {"nullable", true}};

  auto operation = [](const std::string& summary, const std::string& schema) {
    return Json{
        {"summary", summary},
        {"requestBody",
         {{"required", true},
          {"content", {{"application/json", {{"schema", {{"$ref", "#/components/schemas/" + schema}}}}}}}}},
        {"responses", [&] {
           Json r = error_responses();
           r["200"] = {{"description", "a completion (JSON), or server-sent events when stream is true"},
                       {"content",
                        {{"application/json", {{"schema", {{"type", "object"}}}}},
                         {"text/event-stream", {{"schema", {{"type", "string"}}}}}}}};
           return r;
         }()}};
  };
  auto get_operation = [](const std::string& summary, const std::string& type) {
    return Json{
        {"get",
         {{"summary", summary},
          {"responses",
           {{"200", {{"description", "ok"}, {"content", {{type, {{"schema", Json::object()}}}}}}}}}}}};
  };

  Json doc = {
      {"openapi", "3.0.3"},
      {"info",
       {{"title", "kvdice serve"},
        {"version", "1"},
        {"description",
         "OpenAI-compatible completions with a per-request KV-cache policy and budget (kv)."}}},
      {"paths",
       {{"/v1/chat/completions", {{"post", operation("Chat completion", "ChatCompletionRequest")}}},
        {"/v1/completions", {{"post", operation("Text completion", "CompletionRequest")}}},
        {"/v1/models", get_operation("The served model", "application/json")},
        {"/health", get_operation("Liveness (503 while draining)", "application/json")},
        {"/metrics", get_operation("Prometheus metrics", "text/plain")}}},
      {"components",
       {{"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}},
        {"schemas",
         {{"Error",
           {{"type", "object"},
            {"required", {"error"}},
            {"properties",
             {{"error",
               {{"type", "object"},
                {"required", {"message", "type"}},
                {"properties",
                 {{"message", {{"type", "string"}}},
                  {"type", {{"type", "string"}}},
                  {"param", {{"type", "string"}, {"nullable", true}}},
                  {"code", {{"type", "string"}, {"nullable", true}}}}}}}}}}},
          {"KvSettings",
           {{"type", "object"},
            {"additionalProperties", false},
            {"nullable", true},
            {"properties",
             {{"policy",
               {{"type", "string"},
                {"enum",
                 {"full", "random_pp", "random", "random_shared", "recency_pp", "recency", "streaming"}}}},
              {"budget",
               {{"type", "integer"},
                {"minimum", 0},
                {"description", "T: slots per layer and KV head after a round"}}},
              {"window",
               {{"type", "integer"},
                {"minimum", 1},
                {"description", "r: recency window; T must be a multiple"}}},
              {"long_prompt", {{"type", "string"}, {"enum", {"warn", "error"}}}}}}}},
          {"Message",
           {{"type", "object"},
            {"required", {"role", "content"}},
            {"additionalProperties", false},
            {"properties",
             {{"role", {{"type", "string"}, {"enum", {"system", "developer", "user", "assistant"}}}},
              {"name", {{"type", "string"}}},
              {"content",
               {{"oneOf",
                 {{{"type", "string"}},
                  {{"type", "array"},
                   {"items",
                    {{"type", "object"},
                     {"required", {"type", "text"}},
                     {"additionalProperties", false},
                     {"properties",
                      {{"type", {{"type", "string"}, {"enum", {"text"}}}},
                       {"text", {{"type", "string"}}}}}}}}}}}}}}}},
          {"ChatCompletionRequest",
           {{"type", "object"},
            {"required", {"model", "messages"}},
            {"additionalProperties", false},
            {"properties", chat_props}}},
          {"CompletionRequest",
           {{"type", "object"},
            {"required", {"model", "prompt"}},
            {"additionalProperties", false},
            {"properties", completion_props}}}}}}}};
  return doc;
}

}  // namespace

std::string openapi_document(const std::string& model_name) { return build(model_name).dump(2); }

}  // namespace kvdice::server
