// Chat renders equal transformers' apply_chat_template output (tests/fixtures/golden/chat_<family>.json)
// for the template each fixture's tokenizer_config.json carries, and tokenise to the same ids.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {
namespace {

using testing::golden;
using testing::tokenizer_dir;

struct ChatCase {
  std::string family;  // fixture directory and golden name
  ChatTemplate expected_kind;
};

class GoldenChat : public ::testing::TestWithParam<ChatCase> {};

TEST_P(GoldenChat, RendersLikeTransformers) {
  const auto& param = GetParam();
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir(param.family));
  ChatTemplate kind = detect_chat_template(tok.chat_template_source());
  EXPECT_EQ(kind, param.expected_kind);
  Json g = golden("chat_" + param.family);
  ASSERT_GE(g.at("cases").size(), 5u);
  for (const auto& c : g.at("cases")) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages"))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    ChatOptions options;
    const Json& kwargs = c.at("kwargs");
    for (const auto& [key, value] : kwargs.items()) {
      if (key == "add_generation_prompt") {
        options.add_generation_prompt = value.get<bool>();
      } else if (key == "enable_thinking") {
        options.enable_thinking = value.get<bool>();
      } else {
        FAIL() << "unexpected kwarg " << key;
      }
    }
    std::string rendered = render_chat(kind, messages, options);
    EXPECT_EQ(rendered, c.at("rendered").get<std::string>()) << "case " << c.at("name");
    EXPECT_EQ(tok.encode(rendered), c.at("ids").get<std::vector<int>>()) << "case " << c.at("name");
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GoldenChat,
                         ::testing::Values(ChatCase{"qwen3", ChatTemplate::Qwen3},
                                           ChatCase{"qwen2", ChatTemplate::ChatML},
                                           ChatCase{"llama", ChatTemplate::Llama3},
                                           ChatCase{"phi3", ChatTemplate::Phi4}),
                         [](const auto& info) { return info.param.family; });

TEST(ChatTemplate, NamesRoundTrip) {
  auto names = chat_template_names();
  ASSERT_EQ(names.size(), 8u);
  for (const auto& name : names) EXPECT_EQ(chat_template_name(chat_template_from_name(name)), name);
}

TEST(ChatTemplate, UnknownTemplatesAreErrorsThatSayWhatToDo) {
  auto expect_error = [](auto&& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no Error for " << fragment;
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
      EXPECT_NE(message.find("qwen3, chatml, llama3, phi4"), std::string::npos) << message;
    }
  };
  expect_error([] { detect_chat_template(""); }, "--chat-template NAME");
  expect_error(
      [] { detect_chat_template("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"); },
      "--chat-template NAME");
  // ChatML with some other default system prompt would render wrongly: refused, not guessed.
  expect_error(
      [] { detect_chat_template("{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>' }}"); },
      "--chat-template NAME");
  expect_error([] { chat_template_from_name("vicuna"); }, "vicuna");
}

TEST(ChatTemplate, UnsupportedRoleOrEmptyChatIsAnError) {
  std::vector<ChatMessage> messages{{"tool", "42"}};
  EXPECT_THROW(render_chat(ChatTemplate::Qwen3, messages, {}), Error);
  EXPECT_THROW(render_chat(ChatTemplate::Llama3, {}, {}), Error);
}

TEST(ChatTemplate, Qwen3KeepsReasoningOfTheTurnAfterTheLastQuery) {
  // Independently derived from the Jinja source: an assistant turn after the last user message keeps its
  // <think> block (normalised), one before it loses it.
  std::vector<ChatMessage> messages{{"user", "q1"},
                                    {"assistant", "<think>\nr1\n</think>\n\na1"},
                                    {"user", "q2"},
                                    {"assistant", "<think>\n\nr2\n\n</think>a2"}};
  EXPECT_EQ(render_chat(ChatTemplate::Qwen3, messages, {.add_generation_prompt = false}),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n");
}

}  // namespace
}  // namespace kvdice::tokenizer
