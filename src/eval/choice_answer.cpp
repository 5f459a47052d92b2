#include "eval/choice_answer.h"

#include <cctype>

#include "eval/math_answer.h"

namespace kvdice::eval {
namespace {

bool word_char(unsigned char c) { return std::isalnum(c) || c >= 0x80; }

std::optional<char> last_standalone_letter(std::string_view s, int choices) {
  for (size_t i = s.size(); i-- > 0;) {
    const char c = s[i];
    if (c < 'A' || c >= 'A' + choices) continue;
    const bool left_ok = i == 0 || !word_char(static_cast<unsigned char>(s[i - 1]));
    const bool right_ok = i + 1 == s.size() || !word_char(static_cast<unsigned char>(s[i + 1]));
    if (left_ok && right_ok) return c;
  }
  return std::nullopt;
}

}  // namespace

std::optional<char> extract_choice(std::string_view completion, int choices) {
  if (auto boxed = last_boxed(completion)) {
    std::string inner = *boxed;
    for (std::string_view cmd : {"\\text{", "\\textbf{", "\\mathrm{"})
      if (inner.starts_with(cmd) && inner.ends_with("}"))
        inner = inner.substr(cmd.size(), inner.size() - cmd.size() - 1);
    if (auto letter = last_standalone_letter(inner, choices)) return letter;
  }
  return last_standalone_letter(completion, choices);
}

std::optional<char> parse_choice_gold(std::string_view gold, int choices) {
  std::string letters;
  for (char c : gold)
    if (std::isalnum(static_cast<unsigned char>(c))) letters += static_cast<char>(std::toupper(c));
  if (letters.size() != 1 || letters[0] < 'A' || letters[0] >= 'A' + choices) return std::nullopt;
  return letters[0];
}

}  // namespace kvdice::eval
