// The pre-tokenizer's split regex (HF `Split` with behaviour Isolated): matches and the gaps between
// them become separate pieces. Compiled with PCRE2 (UTF + UCP, JIT when available), so any pattern a
// tokenizer.json carries works, with the Unicode \s, \p{L}, \p{N} and lookaheads HF's Oniguruma has.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvdice::tokenizer {

// Built-in patterns, as written in the tokenizer.json files of those families.
extern const char* const kQwen2Pattern;   // single digits
extern const char* const kLlama3Pattern;  // digits in groups of up to three (also cl100k / Phi-4)
extern const char* const kGpt2Pattern;    // ByteLevel(use_regex = true)

class SplitRegex {
 public:
  // `where` names the source (file and field) for the Error a bad pattern gives.
  SplitRegex(std::string_view pattern, std::string_view where);
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;
  ~SplitRegex();

  // Appends the pieces of `text` (views into it) to `out`; no piece is empty. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// Rewrites an Oniguruma-flavoured pattern so PCRE2 matches the same text: Oniguruma's \s is Unicode
// White_Space; PCRE2's UCP \s lacks U+0085 (NEXT LINE) and has U+180E (MONGOLIAN VOWEL SEPARATOR).
std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace kvdice::tokenizer
