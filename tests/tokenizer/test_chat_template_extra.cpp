// The reasoning-model templates (DeepSeek-R1 distills, Llama-3.1/3.2, Phi-4-reasoning, Qwen3 Thinking-2507):
// each real Jinja source in tests/fixtures/templates is detected as its kind, and renders equal what
// transformers' apply_chat_template rendered from that source
// (tests/fixtures/golden/chat_templates_extra.json, written by tools/make_chat_template_goldens.py).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/fixtures.h"

namespace kvdice::tokenizer {
namespace {

using testing::fixtures_dir;
using testing::golden;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const Json& templates() {
  static const Json g = golden("chat_templates_extra");
  return g.at("templates");
}

std::string source_of(const std::string& name) {
  return read_text(fixtures_dir() / templates().at(name).at("source").get<std::string>());
}

class GoldenTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTemplate, DetectedFromTheRealSourceAndRendersLikeTransformers) {
  const Json& t = templates().at(GetParam());
  ChatTemplate kind = detect_chat_template(source_of(GetParam()));
  EXPECT_EQ(chat_template_name(kind), t.at("kind").get<std::string>());
  ASSERT_GE(t.at("cases").size(), 6u);
  for (const auto& c : t.at("cases")) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages"))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    ChatOptions options;
    for (const auto& [key, value] : c.at("kwargs").items()) {
      if (key == "add_generation_prompt") {
        options.add_generation_prompt = value.get<bool>();
      } else if (key == "enable_thinking") {
        options.enable_thinking = value.get<bool>();
      } else if (key == "date_string") {
        // Only the Llama-3.2 source reads it (else strftime_now); kvdice's fixed date must be the one passed.
        EXPECT_EQ(value.get<std::string>(), "26 Jul 2024");
      } else {
        FAIL() << "unexpected kwarg " << key;
      }
    }
    EXPECT_EQ(render_chat(kind, messages, options), c.at("rendered").get<std::string>())
        << GetParam() << " case " << c.at("name");
  }
}

INSTANTIATE_TEST_SUITE_P(RealSources, GoldenTemplate,
                         ::testing::Values("deepseek_r1_distill", "llama31_instruct", "llama32_instruct",
                                           "phi4_reasoning", "qwen3_thinking_2507"),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplateExtra, NewNamesAreListedAndRoundTrip) {
  auto names = chat_template_names();
  for (const char* name : {"deepseek_r1", "llama31", "phi4_reasoning", "qwen3_thinking", "llama3", "phi4"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    EXPECT_EQ(chat_template_name(chat_template_from_name(name)), name);
  }
}

std::string replaced(std::string text, std::string_view from, std::string_view to) {
  auto pos = text.find(from);
  if (pos == std::string::npos) throw std::runtime_error("marker not in source: " + std::string(from));
  return text.replace(pos, from.size(), to);
}

void expect_refused(const std::string& source, const std::string& fragment) {
  try {
    detect_chat_template(source);
    ADD_FAILURE() << "no Error for a template that should be refused (" << fragment << ")";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_NE(message.find("--chat-template NAME"), std::string::npos) << message;
    EXPECT_NE(message.find("deepseek_r1, llama31, phi4_reasoning, qwen3_thinking"), std::string::npos)
        << message;
  }
}

TEST(ChatTemplateExtra, NearMissesOfTheRealSourcesAreRefusedNotGuessed) {
  const std::string deepseek = source_of("deepseek_r1_distill");
  // The January 2025 distill template: same turns, but the prompt does not open the reasoning block.
  expect_refused(replaced(deepseek, "<｜Assistant｜><think>\\n'}}", "<｜Assistant｜>'}}"), "<think>");
  // DeepSeek-R1/V3 proper join all system messages.
  expect_refused(replaced(deepseek, "system_prompt='')", "system_prompt='', is_first_sp=true)"),
                 "joins system messages");

  const std::string phi = source_of("phi4_reasoning");
  expect_refused(replaced(phi, "Now, try to solve", "Now solve"), "Phi-4 reasoning");

  const std::string llama = source_of("llama31_instruct");
  expect_refused(
      replaced(llama, "message['content'] | trim + '<|eot_id|>'", "message['content'] + '<|eot_id|>'"),
      "Llama-3.1/3.2");

  // QwQ-style: always opens <think> but strips every earlier reasoning block (no last_query_index).
  expect_refused(
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
      "message.content.split('</think>')[-1]"
      " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- "
      "'<|im_start|>assistant\\n<think>\\n' }}"
      "{%- endif %}",
      "Qwen3 Thinking-2507");
  // Still refused: templates of other families altogether.
  expect_refused("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "unrecognised");
}

TEST(ChatTemplateExtra, EmptyChatIsAnErrorForTheNewTemplates) {
  for (auto kind : {ChatTemplate::DeepSeekR1, ChatTemplate::Llama31, ChatTemplate::Phi4Reasoning,
                    ChatTemplate::Qwen3Thinking})
    EXPECT_THROW(render_chat(kind, {}, {}), Error) << chat_template_name(kind);
}

}  // namespace
}  // namespace kvdice::tokenizer
