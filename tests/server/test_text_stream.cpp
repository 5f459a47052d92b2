// Stop strings and the <think> split, fed in every possible piece size so markers split across
// tokens are still found.
#include <gtest/gtest.h>

#include "server/text_stream.h"

namespace kvdice::server {
namespace {

SplitText split_in_pieces(const std::string& text, size_t piece, bool opened) {
  ThinkSplitter splitter(opened);
  SplitText all;
  for (size_t i = 0; i < text.size(); i += piece) {
    SplitText s = splitter.push(text.substr(i, piece));
    all.reasoning += s.reasoning;
    all.content += s.content;
  }
  SplitText s = splitter.flush();
  all.reasoning += s.reasoning;
  all.content += s.content;
  return all;
}

TEST(ThinkSplitter, SeparatesReasoningForEveryPieceSize) {
  for (size_t piece = 1; piece <= 12; ++piece) {
    SplitText s = split_in_pieces("<think>\n2 + 2 is 4.\n</think>\n\nThe answer is 4.", piece, false);
    EXPECT_EQ(s.reasoning, "\n2 + 2 is 4.\n") << piece;
    EXPECT_EQ(s.content, "The answer is 4.") << piece;
    SplitText r1 = split_in_pieces("so 4.\n</think>\n\n4", piece, true);  // R1: the prompt opened it
    EXPECT_EQ(r1.reasoning, "so 4.\n") << piece;
    EXPECT_EQ(r1.content, "4") << piece;
  }
}

TEST(ThinkSplitter, NoSectionMeansAllContent) {
  EXPECT_EQ(split_in_pieces("<thin", 2, false).content, "<thin");
  EXPECT_EQ(split_in_pieces("Plain answer <think> later", 3, false).content, "Plain answer <think> later");
  SplitText unfinished = split_in_pieces("<think>still thinking", 4, false);
  EXPECT_EQ(unfinished.reasoning, "still thinking");
  EXPECT_EQ(unfinished.content, "");
}

TEST(StopMatcher, CutsAtTheFirstStopAcrossPieces) {
  for (size_t piece = 1; piece <= 6; ++piece) {
    StopMatcher m({"END", "xyz"});
    const std::string text = "abc EN xy ENDmore";
    std::string out;
    for (size_t i = 0; i < text.size() && !m.stopped(); i += piece) out += m.push(text.substr(i, piece));
    out += m.flush();
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(out, "abc EN xy ") << piece;
  }
  StopMatcher none({"END"});
  std::string out = none.push("abc EN");
  out += none.flush();
  EXPECT_EQ(out, "abc EN");
  EXPECT_FALSE(none.stopped());
}

}  // namespace
}  // namespace kvdice::server
