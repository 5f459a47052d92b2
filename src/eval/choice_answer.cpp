#include "eval/choice_answer.h"

#include <cctype>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "eval/math_answer.h"

namespace kvdice::eval {
namespace {

bool word_char(unsigned char c) { return std::isalnum(c) || c >= 0x80; }

bool valid(char c, int choices) { return c >= 'A' && c < 'A' + choices; }

std::vector<std::pair<size_t, char>> standalone_letters(std::string_view s, int choices) {
  std::vector<std::pair<size_t, char>> found;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!valid(c, choices)) continue;
    const bool left_ok = i == 0 || !word_char(static_cast<unsigned char>(s[i - 1]));
    const bool right_ok = i + 1 == s.size() || !word_char(static_cast<unsigned char>(s[i + 1]));
    if (left_ok && right_ok) found.emplace_back(i, c);
  }
  return found;
}

// The option a box names: "C", "(C)", "c", "C) 4.2 eV", "C. A planet", "Answer: C"; nullopt when
// it names none or several ("A, C", "B or D").
std::optional<char> letter_in_box(std::string inner, int choices) {
  for (std::string_view cmd : {"\\text{", "\\textbf{", "\\mathrm{", "\\mathbf{"})
    if (inner.starts_with(cmd) && inner.ends_with("}"))
      inner = inner.substr(cmd.size(), inner.size() - cmd.size() - 1);
  for (std::string_view wrapper : {"\\text{Answer: }", "\\text{Answer:}", "Answer:", "answer:"})
    if (inner.starts_with(wrapper)) inner = inner.substr(wrapper.size());
  size_t b = 0;
  while (b < inner.size() && inner[b] == ' ') ++b;
  inner = inner.substr(b);
  if (inner.size() == 1) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(inner[0])));
    if (valid(c, choices)) return c;
  }
  // A label first: "(C) ...", "C) ...", "C. ...", "C: ...".
  if (inner.size() >= 3 && inner[0] == '(' && valid(inner[1], choices) && inner[2] == ')') return inner[1];
  if (inner.size() >= 2 && valid(inner[0], choices) &&
      (inner[1] == ')' || inner[1] == '.' || inner[1] == ':'))
    return inner[0];
  std::set<char> letters;
  for (const auto& [at, c] : standalone_letters(inner, choices)) letters.insert(c);
  if (letters.size() == 1) return *letters.begin();
  return std::nullopt;
}

// The last "the answer is (C)", "Answer: C", "correct option is C", "I choose C": (position, letter).
std::optional<std::pair<size_t, char>> last_answer_phrase(const std::string& text, int choices) {
  static const std::regex phrase(
      R"((?:[Aa]nswer|ANSWER|[Oo]ption|[Cc]hoice|[Cc]hoose|[Pp]ick)(?:\s+is)?\s*:?\s*\**\s*\(?([A-Z])\)?(?![A-Za-z0-9]))");
  std::optional<std::pair<size_t, char>> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), phrase); it != std::sregex_iterator(); ++it) {
    const char c = (*it)[1].str()[0];
    if (valid(c, choices)) last = std::make_pair(static_cast<size_t>(it->position(1)), c);
  }
  return last;
}

}  // namespace

std::optional<char> extract_choice(std::string_view completion, int choices) {
  const std::string text(completion);
  // The last box, unless the response states an answer in words after it.
  std::optional<size_t> box_at;
  for (std::string_view cmd : {"\\boxed", "\\fbox"}) {
    const size_t at = text.rfind(cmd);
    if (at != std::string::npos && (!box_at || at > *box_at)) box_at = at;
  }
  const auto phrase = last_answer_phrase(text, choices);
  if (box_at && (!phrase || phrase->first < *box_at)) {
    const auto boxed = last_boxed(text);
    return boxed ? letter_in_box(*boxed, choices) : std::nullopt;
  }
  if (phrase) return phrase->second;
  // Else a short last line that is (nearly) only the letter: "C", "(C)", "Final: C".
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return std::nullopt;
  const size_t start = text.rfind('\n', end);
  const std::string last_line = text.substr(start == std::string::npos ? 0 : start + 1,
                                            end + 1 - (start == std::string::npos ? 0 : start + 1));
  std::istringstream words(last_line);
  int count = 0;
  for (std::string w; words >> w;) ++count;
  if (count > 4) return std::nullopt;
  const auto letters = standalone_letters(last_line, choices);
  if (letters.empty()) return std::nullopt;
  return letters.back().second;
}

std::optional<char> parse_choice_gold(std::string_view gold, int choices) {
  std::string letters;
  for (char c : gold)
    if (std::isalnum(static_cast<unsigned char>(c))) letters += static_cast<char>(std::toupper(c));
  if (letters.size() != 1 || letters[0] < 'A' || letters[0] >= 'A' + choices) return std::nullopt;
  return letters[0];
}

}  // namespace kvdice::eval
