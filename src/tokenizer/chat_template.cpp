#include "tokenizer/chat_template.h"

#include <array>

#include "core/error.h"

namespace kvdice::tokenizer {
namespace {

struct NamedTemplate {
  ChatTemplate kind;
  std::string_view name;
};
constexpr std::array<NamedTemplate, 8> kTemplates{{
    {ChatTemplate::Qwen3, "qwen3"},
    {ChatTemplate::ChatML, "chatml"},
    {ChatTemplate::Llama3, "llama3"},
    {ChatTemplate::Phi4, "phi4"},
    {ChatTemplate::DeepSeekR1, "deepseek_r1"},
    {ChatTemplate::Llama31, "llama31"},
    {ChatTemplate::Phi4Reasoning, "phi4_reasoning"},
    {ChatTemplate::Qwen3Thinking, "qwen3_thinking"},
}};

constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// microsoft/Phi-4-reasoning's template adds this system turn when the chat does not open with one.
constexpr std::string_view kPhiReasoningSystem =
    "You are Phi, a language model trained by Microsoft to help users. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise "
    "and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, "
    "exploration, reassessment, reflection, backtracing, and iteration to develop well-considered thinking "
    "process. Please structure your response into two main sections: Thought and Solution using the "
    "specified format: <think> {Thought section} </think> {Solution section}. In the Thought section, detail "
    "your reasoning process in steps. Each step should include detailed considerations such as analysing "
    "questions, summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the "
    "current steps, refining any errors, and revisiting previous steps. In the Solution section, based on "
    "various attempts, explorations, and reflections from the Thought section, systematically present the "
    "final solution that you deem correct. The Solution section should be logical, accurate, and concise and "
    "detail necessary steps needed to reach the conclusion. Now, try to solve the following question through "
    "the above guidelines:";

// The Llama-3.1/3.2 templates' "Today Date" unless a date_string is passed. Llama-3.2's asks transformers
// for today's date instead; one fixed date keeps prompts (and runs) reproducible.
constexpr std::string_view kLlamaDefaultDate = "26 Jul 2024";

constexpr std::string_view kDeepSeekBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kDeepSeekUser = "<｜User｜>";
constexpr std::string_view kDeepSeekAssistant = "<｜Assistant｜>";
constexpr std::string_view kDeepSeekEos = "<｜end▁of▁sentence｜>";

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

void append_llama3_turns(std::string& out, std::span<const ChatMessage> messages) {
  for (const auto& m : messages) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += python_strip(m.content);
    out += "<|eot_id|>";
  }
}

std::string render_llama3(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<|begin_of_text|>";
  append_llama3_turns(out, messages);
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama-3.1/3.2 (tools off): the system header always exists; a leading system message fills it.
std::string render_llama31(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: ";
  out += kLlamaDefaultDate;
  out += "\n\n";
  if (messages[0].role == "system") {
    out += python_strip(messages[0].content);
    messages = messages.subspan(1);
  }
  out += "<|eot_id|>";
  append_llama3_turns(out, messages);
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// DeepSeek-R1 distills: the last system message goes right after BOS, assistant turns keep only the
// text after their last "</think>", and the generation prompt opens the reasoning block.
std::string render_deepseek_r1(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out(kDeepSeekBos);
  std::string_view system;
  for (const auto& m : messages)
    if (m.role == "system") system = m.content;
  out += system;
  for (const auto& m : messages) {
    if (m.role == "user") {
      out += kDeepSeekUser;
      out += m.content;
    } else if (m.role == "assistant") {
      out += kDeepSeekAssistant;
      out += after_last(m.content, "</think>");
      out += kDeepSeekEos;
    }
  }
  if (options.add_generation_prompt) {
    out += kDeepSeekAssistant;
    out += "<think>\n";
  }
  return out;
}

std::string render_phi4(std::span<const ChatMessage> messages, const ChatOptions& options,
                        std::string out = {}) {
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
  if (options.add_generation_prompt) out += "<|im_start|>assistant<|im_sep|>";
  return out;
}

std::string render_phi4_reasoning(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out;
  if (messages[0].role != "system") {
    out = "<|im_start|>system<|im_sep|>";
    out += kPhiReasoningSystem;
    out += "<|im_end|>";
  }
  return render_phi4(messages, options, std::move(out));
}

// Qwen3 Thinking-2507 has no enable_thinking switch: it always thinks.
std::string render_qwen3_thinking(std::span<const ChatMessage> messages, const ChatOptions& options) {
  ChatOptions qwen3_options;
  qwen3_options.add_generation_prompt = options.add_generation_prompt;
  std::string out = render_qwen3(messages, qwen3_options);
  if (options.add_generation_prompt) out += "<think>\n";
  return out;
}

}  // namespace

bool has_thinking_switch(ChatTemplate kind) { return kind == ChatTemplate::Qwen3; }

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
  if (contains(jinja, kDeepSeekUser)) {
    // The January 2025 distill template prompted with a bare "<｜Assistant｜>"; DeepSeek-R1/V3 proper
    // join several system messages (is_first_sp). Both render differently from ours.
    if (contains(jinja, "is_first_sp"))
      give_up("the DeepSeek-R1/V3 template (which joins system messages) is not the distills'");
    if (!contains(jinja, "<｜Assistant｜><think>") || !contains(jinja, "split('</think>')[-1]"))
      give_up(
          "a DeepSeek template whose generation prompt does not open \"<think>\" (the early R1 distill one)");
    return ChatTemplate::DeepSeekR1;
  }
  if (contains(jinja, "<|im_sep|>")) {
    // Phi-4-reasoning's template adds a long built-in system prompt the plain Phi-4 format lacks.
    if (contains(jinja, "You are Phi, a language model trained by Microsoft")) {
      if (contains(jinja, kPhiReasoningSystem) && contains(jinja, "messages[0]['role'] != 'system'"))
        return ChatTemplate::Phi4Reasoning;
      give_up("a Phi-4 reasoning template whose built-in system prompt differs from Phi-4-reasoning's");
    }
    return ChatTemplate::Phi4;
  }
  if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|eot_id|>")) {
    // Llama-3.1+ templates always add a "Cutting Knowledge Date" system header.
    if (contains(jinja, "Cutting Knowledge Date")) {
      if (contains(jinja, "Cutting Knowledge Date: December 2023") && contains(jinja, kLlamaDefaultDate) &&
          contains(jinja, "set system_message = messages[0]['content']|trim") &&
          contains(jinja, "message['content'] | trim + '<|eot_id|>'"))
        return ChatTemplate::Llama31;
      give_up("a dated Llama-3 template that is not Llama-3.1/3.2's");
    }
    return ChatTemplate::Llama3;
  }
  if (contains(jinja, "<|im_start|>")) {
    // Qwen3 Thinking-2507: Qwen3's turn logic, always-thinking generation prompt, no enable_thinking.
    bool opens_think = contains(jinja, "'<|im_start|>assistant\\n<think>\\n'") ||
                       contains(jinja, "'<|im_start|>assistant\n<think>\n'");
    if (opens_think && !contains(jinja, "enable_thinking")) {
      if (contains(jinja, "last_query_index") && contains(jinja, "reasoning_content"))
        return ChatTemplate::Qwen3Thinking;
      give_up("a ChatML template that always opens <think> but is not Qwen3 Thinking-2507's (e.g. QwQ's)");
    }
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
    case ChatTemplate::DeepSeekR1:
      return render_deepseek_r1(messages, options);
    case ChatTemplate::Llama31:
      return render_llama31(messages, options);
    case ChatTemplate::Phi4Reasoning:
      return render_phi4_reasoning(messages, options);
    case ChatTemplate::Qwen3Thinking:
      return render_qwen3_thinking(messages, options);
  }
  KVDICE_CHECK(false, "unknown ChatTemplate {}", static_cast<int>(kind));
  return {};
}

}  // namespace kvdice::tokenizer
