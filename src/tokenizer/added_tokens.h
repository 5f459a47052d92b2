// Finds added tokens (<|im_start|>, <think>, ...) verbatim in text, before any BPE work: leftmost
// match first, the longest one at that position, with HF's lstrip / rstrip / single_word rules.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {

// A piece of the input: either an added token (id >= 0) or plain text (id < 0) for the model.
struct Segment {
  std::string_view text;
  int id = -1;
};

class AddedTokenMatcher {
 public:
  // Keeps only the tokens with `normalized` equal to `match_normalized`.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool match_normalized);

  bool empty() const { return tokens_.empty(); }
  // Splits `text` into segments; special tokens are skipped when `parse_special` is false.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

 private:
  std::vector<AddedToken> tokens_;               // longest first
  std::vector<std::vector<int>> by_first_byte_;  // indices into tokens_, per first byte
};

}  // namespace kvdice::tokenizer
