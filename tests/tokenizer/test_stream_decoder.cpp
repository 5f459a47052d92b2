// StreamDecoder emits only whole UTF-8 characters: bytes of a character split over several byte-level
// tokens are held back until it completes.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {
namespace {

bool is_valid_utf8(const std::string& s) {
  return utf8_complete_prefix(s) == s.size() && [&] {
    for (std::size_t i = 0; i < s.size();) {
      std::size_t n = utf8_sequence_length(static_cast<unsigned char>(s[i]));
      if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return false;
      i += n;
    }
    return true;
  }();
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  Tokenizer tok = Tokenizer::from_hf_dir(testing::tokenizer_dir("qwen3"));
  std::string text = "emoji 😀👍🏽 and 你好, family 👨‍👩‍👧 done";
  auto ids = tok.encode(text);
  // The tiny fixture vocab has few merges, so the emoji really are split over several tokens.
  int partial_tokens = 0;
  for (int id : ids)
    partial_tokens += utf8_complete_prefix(tok.token_bytes(id)) != tok.token_bytes(id).size();
  ASSERT_GT(partial_tokens, 3);

  StreamDecoder decoder(tok);
  std::string streamed;
  for (int id : ids) {
    std::string piece = decoder.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "piece is not whole UTF-8";
    streamed += piece;
  }
  streamed += decoder.flush();
  EXPECT_EQ(streamed, text);
}

TEST(StreamDecoder, FlushReturnsAnUnfinishedTailRaw) {
  Tokenizer tok = Tokenizer::from_hf_dir(testing::tokenizer_dir("qwen3"));
  auto ids = tok.encode("😀");
  ASSERT_GT(ids.size(), 1u);
  StreamDecoder decoder(tok);
  EXPECT_EQ(decoder.push(ids[0]), "");
  EXPECT_EQ(decoder.flush(), tok.token_bytes(ids[0]));
  EXPECT_EQ(decoder.flush(), "");
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F"), 2u);  // first half of an emoji
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8_complete_prefix("\xE4\xBD"), 0u);  // 2 of 3 bytes of a CJK character
  EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);     // stray continuation: invalid, not unfinished
  EXPECT_EQ(utf8_complete_prefix("a\xE4"
                                 "b"),
            3u);  // broken sequence is passed on
}

}  // namespace
}  // namespace kvdice::tokenizer
