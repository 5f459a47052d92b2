// Encodings equal, token for token, what the HF `tokenizers` library produced for the fixture
// tokenizers (tests/fixtures/golden/tokenizer_<family>.json), and decoding inverts them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/fixtures.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {
namespace {

using testing::golden;
using testing::tokenizer_dir;

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizer, EncodingsMatchHfTokenizers) {
  Json g = golden("tokenizer_" + GetParam());
  ASSERT_FALSE(g.at("encode_options").at("add_special_tokens").get<bool>());
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir(GetParam()));
  EXPECT_EQ(tok.vocab_size(), g.at("vocab_size").get<int>());
  ASSERT_GE(g.at("cases").size(), 30u);
  for (const auto& c : g.at("cases")) {
    auto text = c.at("text").get<std::string>();
    EXPECT_EQ(tok.encode(text), c.at("ids").get<std::vector<int>>()) << "text: " << text;
  }
}

TEST_P(GoldenTokenizer, DecodeMatchesHfTokenizers) {
  Json g = golden("tokenizer_" + GetParam());
  ASSERT_FALSE(g.at("decode_options").at("skip_special_tokens").get<bool>());
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir(GetParam()));
  for (const auto& c : g.at("cases")) {
    auto ids = c.at("ids").get<std::vector<int>>();
    EXPECT_EQ(tok.decode(ids), c.at("decoded").get<std::string>())
        << "text: " << c.at("text").get<std::string>();
    // The token strings name the same ids; HF shows an lstrip/rstrip token with the whitespace it took.
    auto tokens = c.at("tokens").get<std::vector<std::string>>();
    ASSERT_EQ(tokens.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::string token = tokens[i];
      if (tok.is_special(ids[i])) {
        token.erase(0, token.find_first_not_of(" \t\n"));
        token.erase(token.find_last_not_of(" \t\n") + 1);
      }
      EXPECT_EQ(tok.token_id(token), ids[i]) << tokens[i];
    }
  }
}

TEST_P(GoldenTokenizer, DecodeInvertsEncodeOnTheCorpus) {
  Json g = golden("tokenizer_" + GetParam());
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir(GetParam()));
  bool nfc_normalizer =
      read_json_file(tokenizer_dir(GetParam()) / "tokenizer.json").at("normalizer").is_object();
  for (const auto& c : g.at("cases")) {
    auto text = c.at("text").get<std::string>();
    // Without special-token parsing nothing is stripped around added tokens, so only NFC may change text.
    std::string expected = nfc_normalizer ? nfc(text) : text;
    EXPECT_EQ(tok.decode(tok.encode(text, /*parse_special=*/false)), expected) << "text: " << text;
  }
}

TEST_P(GoldenTokenizer, PromptBosFollowsThePostProcessor) {
  Json g = golden("tokenizer_" + GetParam());
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir(GetParam()));
  const Json& example = g.at("add_special_tokens_example");
  auto expected = example.at("ids").get<std::vector<int>>();
  auto text = example.at("text").get<std::string>();
  EXPECT_EQ(tok.encode_prompt(text), expected);
  EXPECT_EQ(tok.add_bos(), expected.size() > tok.encode(text).size());
  if (tok.add_bos()) {
    // A prompt that already starts with BOS (a rendered Llama-3 chat) does not get a second one.
    std::string with_bos = tok.decode(std::vector<int>{*tok.bos_id()}) + text;
    EXPECT_EQ(tok.encode_prompt(with_bos), expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GoldenTokenizer, ::testing::Values("qwen3", "llama", "phi3"));

TEST(Tokenizer, SpecialTokensInsideText) {
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir("qwen3"));
  int im_start = tok.token_id("<|im_start|>").value();
  int im_end = tok.token_id("<|im_end|>").value();
  int think = tok.token_id("<think>").value();
  EXPECT_TRUE(tok.is_special(im_end));
  EXPECT_FALSE(tok.is_special(think));

  auto ids = tok.encode("a<|im_end|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], im_end);
  EXPECT_EQ(tok.decode(ids), "a<|im_end|>b");

  // Without special parsing the marker is plain text, but non-special added tokens still match (as in HF).
  auto plain = tok.encode("<|im_start|><think>", /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(tok.decode(plain), "<|im_start|><think>");

  // A broken marker is text around a real one.
  auto nested = tok.encode("<|im_end|<|im_end|>|>");
  EXPECT_EQ(std::count(nested.begin(), nested.end(), im_end), 1);
}

TEST(Tokenizer, LstripRstripAddedTokensSwallowWhitespace) {
  // The phi3 fixture marks its special tokens lstrip/rstrip, as Phi-4's tokenizer.json does.
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir("phi3"));
  int eot = tok.token_id("<|endoftext|>").value();
  EXPECT_EQ(tok.encode("a  <|endoftext|> \n b"),
            (std::vector<int>{tok.encode("a")[0], eot, tok.encode("b")[0]}));
}

TEST(Tokenizer, InvalidUtf8AndBadIdsAreErrors) {
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir("qwen3"));
  EXPECT_THROW(tok.encode("abc\xff"), Error);
  EXPECT_THROW(tok.encode("\xe4\xbd"), Error);
  EXPECT_THROW(tok.token_bytes(-1), Error);
  EXPECT_THROW(tok.token_bytes(tok.vocab_size()), Error);
}

TEST(Tokenizer, LargeInputIsFast) {
  // ~100 KB of mixed text, plus long runs of one character class that stress regex backtracking.
  Tokenizer tok = Tokenizer::from_hf_dir(tokenizer_dir("llama"));
  std::string text;
  while (text.size() < 100'000)
    text += "The quick brown fox, 12345 jumps! 你好世界 😀\n\tdef f(x): return x * 2  \n";
  text += std::string(20'000, ' ') + "x" + std::string(20'000, '!') + std::string(20'000, '\n') + "y";
  text += std::string(20'000, 'a');
  auto start = std::chrono::steady_clock::now();
  auto ids = tok.encode(text);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok.decode(ids), text);
  RecordProperty("encode_seconds", std::to_string(seconds));
  std::printf("encoded %zu bytes into %zu tokens in %.3f s\n", text.size(), ids.size(), seconds);
}

}  // namespace
}  // namespace kvdice::tokenizer
