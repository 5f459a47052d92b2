// Edge cases beyond the shared goldens (tests/fixtures/golden/tokenizer_extra.json, made by
// tools/make_tokenizer_extra_goldens.py with the real tokenizers/transformers): Unicode whitespace where
// PCRE2 and Oniguruma disagree, case folding, NFC, long runs, and chat renders with odd whitespace and
// reasoning turns.
#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {
namespace {

Json extra_golden() {
  return read_json_file(std::filesystem::path(KVDICE_SOURCE_DIR) /
                        "tests/fixtures/golden/tokenizer_extra.json");
}

TEST(ExtraGolden, EncodingsMatchHfTokenizers) {
  Json g = extra_golden();
  ASSERT_EQ(g.at("encode").size(), 3u);
  for (const auto& [family, cases] : g.at("encode").items()) {
    Tokenizer tok = Tokenizer::from_hf_dir(testing::tokenizer_dir(family));
    for (const auto& c : cases) {
      auto text = c.at("text").get<std::string>();
      EXPECT_EQ(tok.encode(text), c.at("ids").get<std::vector<int>>()) << family << " text: " << text;
    }
  }
}

TEST(ExtraGolden, ChatRendersMatchTransformers) {
  Json g = extra_golden();
  ASSERT_EQ(g.at("chat").size(), 4u);
  for (const auto& [family, cases] : g.at("chat").items()) {
    Tokenizer tok = Tokenizer::from_hf_dir(testing::tokenizer_dir(family));
    ChatTemplate kind = detect_chat_template(tok.chat_template_source());
    for (const auto& c : cases) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
      ChatOptions options;
      options.add_generation_prompt = c.at("kwargs").at("add_generation_prompt").get<bool>();
      options.enable_thinking = c.at("kwargs").value("enable_thinking", true);
      EXPECT_EQ(render_chat(kind, messages, options), c.at("rendered").get<std::string>())
          << family << " case " << c.at("name");
    }
  }
}

}  // namespace
}  // namespace kvdice::tokenizer
