#include "tokenizer/chat_template.h"

#include <array>

#include "core/error.h"

namespace kvdice::tokenizer {
namespace {

struct NamedTemplate {
  ChatTemplate kind;
  std::string_view name;
};
constexpr std::array<NamedTemplate, 4> kTemplates{{
    {ChatTemplate::Qwen3, "qwen3"},
    {ChatTemplate::ChatML, "chatml"},
    {ChatTemplate::Llama3, "llama3"},
    {ChatTemplate::Phi4, "phi4"},
}};

constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

std::string known_names() { return fmt::format("{}", fmt::join(chat_template_names(), ", ")); }

// Python's str.isspace for the characters UTF-8 can start with; Jinja's trim is str.strip().
std::size_t python_space_length(std::string_view s, std::size_t pos) {
  auto b = [&](std::size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  unsigned c0 = b(pos);
  if ((c0 >= 0x09 && c0 <= 0x0D) || (c0 >= 0x1C && c0 <= 0x20)) return 1;
  if (c0 == 0xC2 && (b(pos + 1) == 0x85 || b(pos + 1) == 0xA0)) return 2;
  if (c0 == 0xE1 && b(pos + 1) == 0x9A && b(pos + 2) == 0x80) return 3;  // U+1680
  if (c0 == 0xE2 && b(pos + 1) == 0x80) {
    unsigned c2 = b(pos + 2);
    if ((c2 >= 0x80 && c2 <= 0x8A) || c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF)
      return 3;  // U+2000-200A, 2028/9, 202F
  }
  if (c0 == 0xE2 && b(pos + 1) == 0x81 && b(pos + 2) == 0x9F) return 3;  // U+205F
  if (c0 == 0xE3 && b(pos + 1) == 0x80 && b(pos + 2) == 0x80) return 3;  // U+3000
  return 0;
}

std::string_view python_strip(std::string_view s) {
  std::size_t begin = 0;
  while (std::size_t n = python_space_length(s, begin)) begin += n;
  std::size_t end = s.size();
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (python_space_length(s, start) != end - start) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) { return s.substr(0, s.find(sep)); }
std::string_view after_last(std::string_view s, std::string_view sep) {
  auto pos = s.rfind(sep);
  return pos == std::string_view::npos ? s : s.substr(pos + sep.size());
}

void check_roles(ChatTemplate kind, std::span<const ChatMessage> messages) {
  // The real Qwen templates fail on an empty chat (they read messages[0]); be as strict for all.
  if (messages.empty()) fail("chat: no messages to render with the {} template", chat_template_name(kind));
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant")
      fail(
          "chat message {}: role '{}' is not supported by the {} template (expected system, user or "
          "assistant)",
          i, role, chat_template_name(kind));
  }
}

// Qwen3's template: an assistant turn after the last user query keeps (or gets an empty) <think>
// block; earlier assistant turns lose their reasoning.
std::string render_qwen3(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out;
  if (!messages.empty() && messages[0].role == "system")
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  std::size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (std::size_t i = messages.size(); i-- > 0;) {
    std::string_view content = messages[i].content;
    bool tool_response = content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_response) {
      last_query = i;
      break;
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    std::string_view content = m.content;
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view reasoning;
      if (contains(content, "</think>")) {
        reasoning =
            lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
        content = lstrip_newlines(after_last(content, "</think>"));
      }
      bool last = i + 1 == messages.size();
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n";
        out += lstrip_newlines(rstrip_newlines(reasoning));
        out += "\n</think>\n\n";
        out += lstrip_newlines(content);
      } else {
        out += "<|im_start|>assistant\n";
        out += content;
      }
      out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// Qwen2 / Qwen2.5: ChatML with a default system prompt.
std::string render_chatml(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<|im_start|>system\n";
  bool has_system = !messages.empty() && messages[0].role == "system";
  out += has_system ? std::string_view(messages[0].content) : kQwenDefaultSystem;
  out += "<|im_end|>\n";
  for (std::size_t i = has_system ? 1 : 0; i < messages.size(); ++i)
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += "<|begin_of_text|>";
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
    out += python_strip(messages[i].content);
    out += "<|eot_id|>";
  }
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_phi4(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out;
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
  if (options.add_generation_prompt) out += "<|im_start|>assistant<|im_sep|>";
  return out;
}

}  // namespace

std::string_view chat_template_name(ChatTemplate kind) {
  for (const auto& t : kTemplates)
    if (t.kind == kind) return t.name;
  KVDICE_CHECK(false, "unknown ChatTemplate {}", static_cast<int>(kind));
  return {};
}

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (const auto& t : kTemplates) names.emplace_back(t.name);
  return names;
}

ChatTemplate chat_template_from_name(std::string_view name) {
  for (const auto& t : kTemplates)
    if (t.name == name) return t.kind;
  fail("unknown chat template '{}'; known templates: {}", name, known_names());
}

namespace {
[[noreturn]] void give_up(std::string_view why) {
  fail("cannot render this model's chat template: {}; pass --chat-template NAME with one of: {}", why,
       known_names());
}
}  // namespace

ChatTemplate detect_chat_template(std::string_view jinja) {
  if (jinja.empty()) give_up("the model has no chat template");
  if (contains(jinja, "<|im_sep|>")) {
    // Phi-4-reasoning's template adds a long built-in system prompt the plain Phi-4 format lacks.
    if (contains(jinja, "You are Phi, a language model trained by Microsoft"))
      give_up("the Phi-4-reasoning template (with its built-in system prompt) is not rendered as code");
    return ChatTemplate::Phi4;
  }
  if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|eot_id|>")) {
    // Llama-3.1+ templates always add a "Cutting Knowledge Date" system header.
    if (contains(jinja, "Cutting Knowledge Date"))
      give_up("the Llama-3.1 template (with its dated system header) is not rendered as code");
    return ChatTemplate::Llama3;
  }
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "enable_thinking")) return ChatTemplate::Qwen3;
    if (contains(jinja, kQwenDefaultSystem)) return ChatTemplate::ChatML;
    give_up("a ChatML template that is neither Qwen3's nor Qwen2.5's");
  }
  give_up("unrecognised template");
}

std::string render_chat(ChatTemplate kind, std::span<const ChatMessage> messages,
                        const ChatOptions& options) {
  check_roles(kind, messages);
  switch (kind) {
    case ChatTemplate::Qwen3:
      return render_qwen3(messages, options);
    case ChatTemplate::ChatML:
      return render_chatml(messages, options);
    case ChatTemplate::Llama3:
      return render_llama3(messages, options);
    case ChatTemplate::Phi4:
      return render_phi4(messages, options);
  }
  KVDICE_CHECK(false, "unknown ChatTemplate {}", static_cast<int>(kind));
  return {};
}

}  // namespace kvdice::tokenizer
