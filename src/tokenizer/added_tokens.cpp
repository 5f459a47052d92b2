#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/normalizer.h"

namespace kvdice::tokenizer {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool match_normalized)
    : by_first_byte_(256) {
  for (const auto& t : tokens)
    if (t.normalized == match_normalized && !t.content.empty()) tokens_.push_back(t);
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int>(i));
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  std::size_t text_start = 0;  // start of the plain text not yet emitted
  std::size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (int index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (t.special && !parse_special) continue;
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        std::size_t end = pos + t.content.size();
        bool word_before = pos > 0 && is_word_char(utf8_decode_before(text, pos));
        bool word_after = end < text.size() && is_word_char(utf8_decode_at(text, end));
        if (word_before || word_after) continue;
      }
      found = &t;
      break;
    }
    if (!found) {
      ++pos;
      continue;
    }
    std::size_t begin = pos, end = pos + found->content.size();
    if (found->lstrip) {
      std::size_t n = 0;
      while (begin > text_start && is_unicode_whitespace(utf8_decode_before(text, begin, &n))) begin -= n;
    }
    if (found->rstrip) {
      std::size_t n = 0;
      while (end < text.size() && is_unicode_whitespace(utf8_decode_at(text, end, &n))) end += n;
    }
    if (begin > text_start) out.push_back({text.substr(text_start, begin - text_start), -1});
    out.push_back({text.substr(begin, end - begin), found->id});
    text_start = pos = end;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
}

}  // namespace kvdice::tokenizer
