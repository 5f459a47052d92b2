#include "eval/lm_eval_math.h"

#include <optional>
#include <vector>

namespace kvdice::eval {
namespace {

// Python's str.split(sep) for a non-empty separator.
std::vector<std::string> split(std::string_view s, std::string_view sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = s.find(sep); at != std::string_view::npos; at = s.find(sep, start)) {
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

// Python's str.replace(old, new).
std::string replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, start)) {
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(s.substr(start));
  return out;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Bytes of the UTF-8 code point starting at `at` (1 for a stray byte), so s[0] and len() read code
// points as Python's do.
size_t code_point_size(std::string_view s, size_t at) {
  const auto lead = static_cast<unsigned char>(s[at]);
  size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (at + n > s.size()) return 1;
  for (size_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(s[at + i]) & 0xC0) != 0x80) return 1;
  return n;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t at = 0; at < s.size(); at += code_point_size(s, at)) ++n;
  return n;
}

bool python_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

// Python's int(text) written back with str(): nullopt where int() raises ValueError.
std::optional<std::string> python_int(std::string_view text) {
  while (!text.empty() && python_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && python_space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == '_' && i > 0 && i + 1 < text.size() && text[i - 1] != '_' && text[i + 1] >= '0' &&
               text[i + 1] <= '9') {
      continue;
    } else {
      return std::nullopt;
    }
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return std::string("0");
  return (negative ? "-" : "") + digits.substr(first);
}

// The helpers below return nullopt where the Python raises.
std::optional<std::string> remove_right_units(const std::string& s) {
  if (!contains(s, "\\text{ ")) return s;
  const auto parts = split(s, "\\text{ ");
  if (parts.size() != 2) return std::nullopt;  // assert len(splits) == 2
  return parts[0];
}

std::optional<std::string> fix_sqrt(const std::string& s) {
  if (!contains(s, "\\sqrt")) return s;
  const auto parts = split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty()) return std::nullopt;  // split[0] of ""
    if (part[0] != '{') {
      const size_t n = code_point_size(part, 0);
      out += "\\sqrt{" + part.substr(0, n) + "}" + part.substr(n);
    } else {
      out += "\\sqrt" + part;
    }
  }
  return out;
}

std::optional<std::string> fix_fracs(const std::string& s) {
  const auto parts = split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    out += "\\frac";
    if (part.empty()) return std::nullopt;  // substr[0] of ""
    if (part[0] == '{') {
      out += part;
      continue;
    }
    if (code_points(part) < 2) return s;  // the assert's except: the string unchanged
    const size_t na = code_point_size(part, 0);
    const size_t nb = code_point_size(part, na);
    const std::string a = part.substr(0, na), b = part.substr(na, nb), post = part.substr(na + nb);
    if (b != "{")
      out += "{" + a + "}{" + b + "}" + post;
    else
      out += "{" + a + "}" + b + post;
  }
  return out;
}

std::optional<std::string> fix_a_slash_b(const std::string& s) {
  const auto parts = split(s, "/");
  if (parts.size() != 2) return s;
  const auto a = python_int(parts[0]), b = python_int(parts[1]);
  if (!a || !b) return std::nullopt;  // int() raises ValueError, which fix_a_slash_b does not catch
  if (s != *a + "/" + *b) return s;
  return "\\frac{" + *a + "}{" + *b + "}";
}

// lm-eval's last_boxed_only_string then remove_boxed; nullopt where the first returns None or the
// second's assert fails.
std::optional<std::string> boxed_answer(std::string_view s) {
  if (const size_t spaced = s.rfind("\\boxed "); spaced != std::string_view::npos) {
    const std::string_view rest = s.substr(spaced + 7);
    return std::string(rest.substr(0, rest.find('$')));
  }
  size_t at = s.rfind("\\boxed");
  if (at == std::string_view::npos) at = s.rfind("\\fbox");
  if (at == std::string_view::npos) return std::nullopt;
  int open = 0;
  for (size_t i = at; i < s.size(); ++i) {
    if (s[i] == '{') ++open;
    if (s[i] == '}' && --open == 0) {
      const std::string_view boxed = s.substr(at, i - at + 1);
      if (!boxed.starts_with("\\boxed{")) return std::nullopt;
      return std::string(boxed.substr(7, boxed.size() - 8));
    }
  }
  return std::nullopt;
}

}  // namespace

bool lm_eval_strip_string(std::string_view answer, std::string& out) {
  std::string s = replace(answer, "\n", "");
  s = replace(s, "\\!", "");
  s = replace(s, "\\\\", "\\");
  s = replace(s, "tfrac", "frac");
  s = replace(s, "dfrac", "frac");
  s = replace(s, "\\left", "");
  s = replace(s, "\\right", "");
  s = replace(s, "^{\\circ}", "");
  s = replace(s, "^\\circ", "");
  s = replace(s, "\\$", "");
  auto step = remove_right_units(s);
  if (!step) return false;
  s = replace(*step, "\\%", "");
  s = replace(s, " .", " 0.");
  s = replace(s, "{.", "{0.");
  if (s.empty()) {
    out = s;
    return true;
  }
  if (s[0] == '.') s = "0" + s;
  if (const auto sides = split(s, "="); sides.size() == 2 && code_points(sides[0]) <= 2) s = sides[1];
  step = fix_sqrt(s);
  if (!step) return false;
  s = replace(*step, " ", "");
  step = fix_fracs(s);
  if (!step) return false;
  s = *step;
  if (s == "0.5") s = "\\frac{1}{2}";
  step = fix_a_slash_b(s);
  if (!step) return false;
  out = *step;
  return true;
}

bool lm_eval_is_equiv(std::string_view a, std::string_view b) {
  std::string sa, sb;
  if (!lm_eval_strip_string(a, sa) || !lm_eval_strip_string(b, sb)) return a == b;
  return sa == sb;
}

std::string lm_eval_extract_answer(std::string_view completion) {
  if (auto boxed = boxed_answer(completion)) return *boxed;
  const size_t first = completion.find('$'), last = completion.rfind('$');
  if (first == std::string_view::npos || first == last) return std::string(completion);
  return std::string(completion.substr(first + 1, last - first - 1));
}

double lm_eval_exact_match(std::string_view completion, std::string_view gold) {
  return lm_eval_is_equiv(lm_eval_extract_answer(completion), gold) ? 1.0 : 0.0;
}

}  // namespace kvdice::eval
