// Chat templates as code (no Jinja engine): the known families are rendered exactly as their
// Jinja templates do for plain user/assistant/system turns. Unknown templates are an Error.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvdice::tokenizer {

enum class ChatTemplate {
  Qwen3,          // ChatML with <think> handling; thinking off pre-fills "<think>\n\n</think>\n\n"
  ChatML,         // Qwen2/Qwen2.5: ChatML with the default system prompt when none is given
  Llama3,         // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Phi4,           // <|im_start|>role<|im_sep|>...<|im_end|>
  DeepSeekR1,     // R1 distills: <｜User｜>/<｜Assistant｜> turns, prompt opens "<think>\n"
  Llama31,        // Llama-3.1/3.2: Llama3 turns after the system header dated "26 Jul 2024"
  Phi4Reasoning,  // Phi4 plus Microsoft's reasoning system prompt when the chat has none
  Qwen3Thinking,  // Qwen3 Thinking-2507: Qwen3 whose generation prompt always opens "<think>\n"
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // Qwen3 only
};

std::string_view chat_template_name(ChatTemplate kind);
// Whether enable_thinking changes the render (Qwen3 hybrid); the others always or never think.
bool has_thinking_switch(ChatTemplate kind);
std::vector<std::string> chat_template_names();
// By name (see chat_template_names()); Error listing the known names otherwise.
ChatTemplate chat_template_from_name(std::string_view name);
// Recognises a Jinja source from tokenizer_config.json / GGUF metadata; Error if unknown or empty.
ChatTemplate detect_chat_template(std::string_view jinja_source);

std::string render_chat(ChatTemplate kind, std::span<const ChatMessage> messages, const ChatOptions& options);

}  // namespace kvdice::tokenizer
