#include "eval/math_answer.h"

#include <fmt/core.h>
#include <ginac/ginac.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <complex>
#include <vector>

namespace kvdice::eval {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
    s.replace(i, from.size(), to);
}

// Applies (from, to) replacements in order.
void replace_each(std::string& s,
                  std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  for (const auto& [from, to] : pairs) replace_all(s, from, to);
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Index one past the brace group opening at `open` (s[open] == '{'), or npos when unbalanced.
size_t match_brace(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;  // \{ and \} are literal braces
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

// Replaces `\cmd{X}` by X for wrappers whose content is the answer.
void unwrap_command(std::string& s, std::string_view cmd) {
  for (size_t i = s.find(cmd); i != std::string::npos; i = s.find(cmd, i)) {
    size_t open = i + cmd.size();
    while (open < s.size() && s[open] == ' ') ++open;
    if (open >= s.size() || s[open] != '{') {
      i += cmd.size();
      continue;
    }
    const size_t end = match_brace(s, open);
    if (end == std::string::npos) return;
    s = s.substr(0, i) + s.substr(open + 1, end - open - 2) + s.substr(end);
  }
}

// \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \sqrt2 -> \sqrt{2}.
void brace_short_arguments(std::string& s, std::string_view cmd, int arguments) {
  for (size_t i = s.find(cmd); i != std::string::npos; i = s.find(cmd, i + 1)) {
    size_t j = i + cmd.size();
    std::string rebuilt(cmd);
    int done = 0;
    while (done < arguments && j < s.size()) {
      if (s[j] == '{') {
        const size_t end = match_brace(s, j);
        if (end == std::string::npos) return;
        rebuilt += s.substr(j, end - j);
        j = end;
      } else if (std::isalnum(static_cast<unsigned char>(s[j]))) {
        rebuilt += std::string("{") + s[j] + "}";
        ++j;
      } else {
        break;
      }
      ++done;
    }
    if (done == arguments) s = s.substr(0, i) + rebuilt + s.substr(j);
  }
}

std::optional<double> parse_plain_number(std::string_view s) {
  std::string t(s);
  if (t.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const double v = std::stod(t, &used);
    if (used == t.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  return std::nullopt;
}

// Top-level comma split, or nullopt when brackets do not balance.
std::optional<std::vector<std::string>> split_top_level(std::string_view s, char sep) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (depth < 0) return std::nullopt;
    if (c == sep && depth == 0) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (depth != 0) return std::nullopt;
  parts.push_back(trim(s.substr(start)));
  return parts;
}

bool is_open(char c) { return c == '(' || c == '['; }
bool is_close(char c) { return c == ')' || c == ']'; }

// Matrix body rows (split on \\) and cells (split on &), from \begin{pmatrix}...\end{pmatrix}.
std::optional<std::vector<std::string>> matrix_cells(std::string_view s, int& rows) {
  for (std::string_view env : {"pmatrix", "bmatrix", "matrix", "vmatrix"}) {
    const std::string begin = "\\begin{" + std::string(env) + "}", end = "\\end{" + std::string(env) + "}";
    if (s.starts_with(begin) && s.ends_with(end)) {
      std::string body(s.substr(begin.size(), s.size() - begin.size() - end.size()));
      std::vector<std::string> cells;
      rows = 0;
      size_t start = 0;
      while (true) {
        const size_t next = body.find("\\\\", start);
        const std::string row =
            trim(body.substr(start, next == std::string::npos ? std::string::npos : next - start));
        if (!row.empty()) {
          ++rows;
          auto parts = split_top_level(row, '&');
          if (!parts) return std::nullopt;
          cells.insert(cells.end(), parts->begin(), parts->end());
        }
        if (next == std::string::npos) break;
        start = next + 2;
      }
      return cells;
    }
  }
  return std::nullopt;
}

bool is_choice_letter(std::string_view s) {
  std::string t = trim(s);
  if (t.size() == 3 && t.front() == '(' && t.back() == ')') t = t.substr(1, 1);
  return t.size() == 1 && t[0] >= 'A' && t[0] <= 'Z';
}

std::string choice_letter(std::string_view s) {
  std::string t = trim(s);
  return t.size() == 3 ? t.substr(1, 1) : t;
}

// "5\text{cm}", "\frac{1}{3} \text{meters}", "12\text{m}^2": a unit in a text wrapper after a value
// is dropped (a text answer alone, "\text{east}", stays).
void strip_trailing_unit_text(std::string& s) {
  for (std::string_view cmd : {"\\text{", "\\mbox{", "\\textnormal{", "\\mathrm{"}) {
    const size_t at = s.rfind(cmd);
    if (at == std::string::npos || at == 0) continue;
    const size_t end = match_brace(s, at + cmd.size() - 1);
    if (end == std::string::npos) continue;
    const std::string tail = s.substr(end);
    if (!tail.empty() && tail != "^2" && tail != "^3" && tail != "^{2}" && tail != "^{3}") continue;
    const std::string word = s.substr(at + cmd.size(), end - at - cmd.size() - 1);
    const bool letters =
        word.find_first_not_of(" ") != std::string::npos && std::all_of(word.begin(), word.end(), [](char c) {
          return std::isalpha(static_cast<unsigned char>(c)) || c == ' ';
        });
    const std::string value = trim(std::string_view(s).substr(0, at));
    if (!letters || value.empty()) continue;
    if (!std::isalnum(static_cast<unsigned char>(value.back())) && value.back() != '}') continue;
    s = value;
    return;
  }
}

// A variable, function or point name: "x", "abc", "x_1", "a_{n}", "\theta", "f(x)", "(x,y)", "\angle ABC".
bool is_answer_name(std::string_view text) {
  std::string s;
  for (char c : text)
    if (c != ' ') s += c;
  if (s.starts_with("\\angle")) s = s.substr(6);
  auto identifier = [](std::string_view t) {
    size_t i = 0;
    if (t.starts_with("\\")) {
      ++i;
      while (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
      const std::string_view cmd = t.substr(1, i - 1);
      static const std::vector<std::string_view> greek = {"alpha", "beta",   "gamma",  "delta", "theta",
                                                          "phi",   "varphi", "lambda", "mu",    "omega",
                                                          "rho",   "sigma",  "tau"};
      if (std::find(greek.begin(), greek.end(), cmd) == greek.end()) return false;
    } else {
      while (i < t.size() && i < 6 && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
      if (i == 0) return false;
    }
    if (i < t.size() && t[i] == '_') {
      ++i;
      if (i < t.size() && t[i] == '{') {
        const size_t close = t.find('}', i);
        if (close == std::string_view::npos) return false;
        i = close + 1;
      } else if (i < t.size() && std::isalnum(static_cast<unsigned char>(t[i]))) {
        ++i;
      } else {
        return false;
      }
    }
    if (i < t.size() && t[i] == '(' && t.back() == ')') {  // f(x), P(a,b)
      for (size_t j = i + 1; j + 1 < t.size(); ++j)
        if (!std::isalpha(static_cast<unsigned char>(t[j])) && t[j] != ',') return false;
      i = t.size();
    }
    return i == t.size();
  };
  if (s.size() > 2 && s.front() == '(' && s.back() == ')') {
    const auto names = split_top_level(std::string_view(s).substr(1, s.size() - 2), ',');
    return names &&
           std::all_of(names->begin(), names->end(), [&](const std::string& n) { return identifier(n); });
  }
  return !s.empty() && identifier(s);
}

}  // namespace

std::optional<std::string> last_boxed(std::string_view text) {
  size_t best = std::string_view::npos;
  size_t cmd_len = 0;
  for (std::string_view cmd : {"\\boxed", "\\fbox"}) {
    const size_t at = text.rfind(cmd);
    if (at != std::string_view::npos && (best == std::string_view::npos || at > best)) {
      best = at;
      cmd_len = cmd.size();
    }
  }
  if (best == std::string_view::npos) return std::nullopt;
  size_t i = best + cmd_len;
  if (i < text.size() && text[i] == ' ') {  // "\boxed 5": up to the next space or $
    const size_t end = text.find_first_of(" $\n", i + 1);
    return trim(text.substr(i + 1, end == std::string_view::npos ? std::string_view::npos : end - i - 1));
  }
  if (i >= text.size() || text[i] != '{') return std::nullopt;
  const size_t end = match_brace(text, i);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(text.substr(i + 1, end - i - 2));
}

std::string normalize_math_answer(std::string_view answer) {
  std::string s = trim(answer);
  replace_all(s, "\n", "");
  for (std::string_view cmd : {"\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "\\qquad",
                               "\\quad", "\\bf ", "\\bf", "\\rm ", "\\it "})
    replace_all(s, cmd, "");
  replace_each(s, {{"\\lvert", "|"}, {"\\rvert", "|"}, {"\\vert", "|"}, {"\\end{array}", "\\end{pmatrix}"}});
  // \begin{array}{cc} ... \end{array} in parentheses is a matrix.
  for (size_t at = s.find("\\begin{array}{"); at != std::string::npos; at = s.find("\\begin{array}{", at)) {
    const size_t end = match_brace(s, at + 13);
    if (end == std::string::npos) break;
    s.replace(at, end - at, "\\begin{pmatrix}");
  }
  if (s.size() > 2 && s.front() == '(' && s.back() == ')' && s.find("\\begin{pmatrix}") == 1 &&
      s.ends_with("\\end{pmatrix})"))
    s = s.substr(1, s.size() - 2);
  // "\ " is a LaTeX space, but "\\ " is a matrix row break followed by a space.
  for (size_t i = s.find("\\ "); i != std::string::npos; i = s.find("\\ ", i)) {
    if (i > 0 && s[i - 1] == '\\') {
      i += 2;
      continue;
    }
    s.erase(i, 2);
  }
  replace_each(s, {{"dfrac", "frac"},
                   {"cfrac", "frac"},
                   {"{,}", ","},
                   {"tfrac", "frac"},
                   {"^{\\circ}", ""},
                   {"^\\circ", ""},
                   {"°", ""},
                   {"\\$", ""},
                   {"$", ""},
                   {"\\%", "%"}});
  // "1 \text{ and } 2": two answers.
  for (std::string_view sep : {"\\text{ and }", "\\text{and}", "\\text{ and}", "\\text{and }", "\\text{ or }",
                               "\\text{or}", "\\text{ or}", "\\text{or }"})
    replace_all(s, sep, ",");
  strip_trailing_unit_text(s);
  for (std::string_view cmd : {"\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\mbox", "\\textnormal",
                               "\\boldsymbol", "\\textit", "\\mathit"})
    unwrap_command(s, cmd);
  s = trim(s);
  // Units after a number: "5 cm", "12 inches" -> the number.
  {
    size_t i = 0;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    const size_t digits_from = i;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == ','))
      ++i;
    if (i > digits_from && i < s.size() && s[i] == ' ') {
      bool words = false;  // at least one letter: "-2, 2" is a list, not 2 and a unit "2"
      for (size_t j = i; j < s.size(); ++j) {
        if (std::isalpha(static_cast<unsigned char>(s[j]))) words = true;
        if (!std::isalpha(static_cast<unsigned char>(s[j])) && s[j] != ' ' && s[j] != '^' && s[j] != '2' &&
            s[j] != '3') {
          words = false;
          break;
        }
      }
      if (words) s = s.substr(0, i);
    }
  }
  // "x = 5", "\theta = 30", "f(x) = 3x+1", "(x, y) = (2, 3)", "\angle ABC = 40": a name before the
  // only '=' is not part of the answer.
  if (const size_t eq = s.find('='); eq != std::string::npos && s.find('=', eq + 1) == std::string::npos) {
    if (is_answer_name(s.substr(0, eq)) && !trim(std::string_view(s).substr(eq + 1)).empty())
      s = trim(s.substr(eq + 1));
  }
  // "x \in [2, 5]": a one- or two-letter variable said to lie in the answer (not "\infty").
  if (const size_t in = s.find("\\in");
      in != std::string::npos && in + 3 <= s.size() &&
      (in + 3 == s.size() || !std::isalpha(static_cast<unsigned char>(s[in + 3])))) {
    const std::string lhs = trim(std::string_view(s).substr(0, in));
    if (!lhs.empty() && lhs.size() <= 2 && std::all_of(lhs.begin(), lhs.end(), ::isalpha))
      s = trim(s.substr(in + 3));
  }
  while (!s.empty() && (s.back() == '.' || s.back() == ' ')) s.pop_back();
  replace_all(s, " ", "");
  // x_{1} -> x_1, 2^{3} -> 2^3: a single character needs no braces.
  for (size_t i = 0; i + 3 < s.size(); ++i)
    if ((s[i] == '_' || s[i] == '^') && s[i + 1] == '{' &&
        std::isalnum(static_cast<unsigned char>(s[i + 2])) && s[i + 3] == '}')
      s = s.substr(0, i + 1) + s[i + 2] + s.substr(i + 4);
  brace_short_arguments(s, "\\frac", 2);
  brace_short_arguments(s, "\\sqrt", 1);
  // Thousands separators: 1,000,000 -> 1000000 (only when every group has three digits).
  {
    bool grouped = !s.empty() && s.find(',') != std::string::npos;
    size_t start = (s[0] == '-') ? 1 : 0;
    auto groups = split_top_level(std::string_view(s).substr(start), ',');
    if (grouped && groups && groups->size() > 1 && !(*groups)[0].empty() && (*groups)[0].size() <= 3) {
      for (size_t g = 0; g < groups->size(); ++g) {
        std::string part = (*groups)[g];
        if (g + 1 == groups->size() && part.size() > 4 && part[3] == '.' &&
            part.find_first_not_of("0123456789", 4) == std::string::npos)
          part = part.substr(0, 3);  // 12,345.6: the last group may carry the decimals
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        if (!digits || (g > 0 && part.size() != 3)) grouped = false;
      }
      if (grouped) replace_all(s, ",", "");
    }
  }
  // A number written as a word: "five" is 5.
  {
    static const char* const words[] = {"zero",     "one",      "two",      "three",   "four",    "five",
                                        "six",      "seven",    "eight",    "nine",    "ten",     "eleven",
                                        "twelve",   "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                                        "eighteen", "nineteen", "twenty"};
    std::string low = s;
    for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (int n = 0; n <= 20; ++n)
      if (low == words[n]) s = std::to_string(n);
  }
  if (s.starts_with(".")) s = "0" + s;
  if (s.starts_with("-.")) s = "-0" + s.substr(1);
  return s;
}

namespace {

// The argument of a function written without parentheses: "(...)", "{...}", "\pi", or a number
// followed by letters ("2x" in "\cos 2x"). Returns its end, or `at` when there is none.
size_t function_argument_end(const std::string& s, size_t at) {
  if (at >= s.size()) return at;
  if (s[at] == '(' || s[at] == '{') {
    int depth = 0;
    for (size_t i = at; i < s.size(); ++i) {
      if (s[i] == '(' || s[i] == '{') ++depth;
      if ((s[i] == ')' || s[i] == '}') && --depth == 0) return i + 1;
    }
    return at;
  }
  if (s.compare(at, 3, "\\pi") == 0) return at + 3;
  size_t i = at;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// A subscript or superscript operand: "{...}" or one character; returns its text and advances `at`.
std::optional<std::string> script_operand(const std::string& s, size_t& at) {
  if (at >= s.size()) return std::nullopt;
  if (s[at] == '{') {
    const size_t end = match_brace(s, at);
    if (end == std::string::npos) return std::nullopt;
    std::string body = s.substr(at + 1, end - at - 2);
    at = end;
    return body;
  }
  return std::string(1, s[at++]);
}

// \sin x, \cos^2 x, \ln 8, \log_2 8, \tan\frac{..}{..} -> sin(x), (cos(x))^(2), log(8), (log(8)/log(2)), ...
std::optional<std::string> apply_functions(std::string s) {
  static const std::pair<std::string_view, std::string_view> names[] = {{"\\sin", "sin"}, {"\\cos", "cos"},
                                                                        {"\\tan", "tan"}, {"\\ln", "log"},
                                                                        {"\\log", "log"}, {"\\exp", "exp"}};
  while (true) {
    size_t at = std::string::npos;
    std::string_view name, ginac;
    for (const auto& [latex, g] : names) {
      const size_t i = s.rfind(latex);
      if (i != std::string::npos && (at == std::string::npos || i > at)) {
        at = i;
        name = latex;
        ginac = g;
      }
    }
    if (at == std::string::npos) return s;
    size_t j = at + name.size();
    std::optional<std::string> base, power;
    if (j < s.size() && s[j] == '_') {
      ++j;
      base = script_operand(s, j);
      if (!base) return std::nullopt;
    }
    if (j < s.size() && s[j] == '^') {
      ++j;
      power = script_operand(s, j);
      if (!power) return std::nullopt;
    }
    const size_t end = function_argument_end(s, j);
    if (end == j) return std::nullopt;
    std::string arg = s.substr(j, end - j);
    if (arg.front() == '{') arg = "(" + arg.substr(1, arg.size() - 2) + ")";
    if (arg.front() != '(') arg = "(" + arg + ")";
    std::string call = std::string(ginac) + arg;
    if (base) call = "(" + call + "/log(" + *base + "))";
    if (power) call = "(" + call + ")^(" + *power + ")";
    s = s.substr(0, at) + " " + call + " " + s.substr(end);
  }
}

}  // namespace

std::optional<std::string> latex_to_ginac(std::string_view latex) {
  std::string s(latex);
  // A mixed number "4\frac{1}{2}" is 4 + 1/2.
  {
    size_t i = s.starts_with("-") ? 1 : 0;
    const size_t digits = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i > digits && s.compare(i, 6, "\\frac{") == 0) {
      const size_t a_end = match_brace(s, i + 5);
      if (a_end != std::string::npos && a_end < s.size() && s[a_end] == '{' &&
          match_brace(s, a_end) == s.size()) {
        const std::string a = s.substr(i + 6, a_end - i - 7), b = s.substr(a_end + 1, s.size() - a_end - 2);
        const bool plain = !a.empty() && !b.empty() && std::all_of(a.begin(), a.end(), ::isdigit) &&
                           std::all_of(b.begin(), b.end(), ::isdigit);
        if (plain) s = s.substr(0, digits) + "(" + s.substr(digits, i - digits) + "+" + a + "/" + b + ")";
      }
    }
  }
  // \binom{n}{k} (and \dbinom, \tbinom).
  for (std::string_view cmd : {"\\dbinom{", "\\tbinom{", "\\binom{"}) {
    for (size_t i = s.find(cmd); i != std::string::npos; i = s.find(cmd)) {
      const size_t a_end = match_brace(s, i + cmd.size() - 1);
      if (a_end == std::string::npos || a_end >= s.size() || s[a_end] != '{') return std::nullopt;
      const size_t b_end = match_brace(s, a_end);
      if (b_end == std::string::npos) return std::nullopt;
      s = s.substr(0, i) + "binomial((" + s.substr(i + cmd.size(), a_end - i - cmd.size() - 1) + "),(" +
          s.substr(a_end + 1, b_end - a_end - 2) + "))" + s.substr(b_end);
    }
  }
  // \frac{A}{B} and \sqrt{A} / \sqrt[n]{A}, innermost first by repeated scanning.
  for (bool changed = true; changed;) {
    changed = false;
    if (const size_t i = s.rfind("\\frac{"); i != std::string::npos) {
      const size_t a_end = match_brace(s, i + 5);
      if (a_end == std::string::npos || a_end >= s.size() || s[a_end] != '{') return std::nullopt;
      const size_t b_end = match_brace(s, a_end);
      if (b_end == std::string::npos) return std::nullopt;
      const std::string a = s.substr(i + 6, a_end - i - 7), b = s.substr(a_end + 1, b_end - a_end - 2);
      s = s.substr(0, i) + "((" + a + ")/(" + b + "))" + s.substr(b_end);
      changed = true;
    } else if (const size_t j = s.rfind("\\sqrt"); j != std::string::npos) {
      size_t k = j + 5;
      std::string index;
      if (k < s.size() && s[k] == '[') {
        const size_t close = s.find(']', k);
        if (close == std::string::npos) return std::nullopt;
        index = s.substr(k + 1, close - k - 1);
        k = close + 1;
      }
      if (k >= s.size() || s[k] != '{') return std::nullopt;
      const size_t end = match_brace(s, k);
      if (end == std::string::npos) return std::nullopt;
      const std::string body = s.substr(k + 1, end - k - 2);
      s = s.substr(0, j) + (index.empty() ? "sqrt(" + body + ")" : "((" + body + ")^(1/(" + index + ")))") +
          s.substr(end);
      changed = true;
    }
  }
  auto with_functions = apply_functions(s);
  if (!with_functions) return std::nullopt;
  s = *with_functions;
  replace_each(s, {{"\\cdot", "*"},
                   {"\\times", "*"},
                   {"\\div", "/"},
                   {"\\pi", " Pi "},
                   {"\\ln", " log "},
                   {"\\log", " log "},
                   {"\\exp", " exp "},
                   {"\\sin", " sin "},
                   {"\\cos", " cos "},
                   {"\\tan", " tan "},
                   {"{", "("},
                   {"}", ")"},
                   {"**", "^"}});
  // Tokenise and insert '*' for implicit products: "2x", "2(", ")(", "x y", "2Pi", ")x".
  static const std::vector<std::string> functions = {"sqrt", "log", "exp", "sin", "cos", "tan", "binomial"};
  std::string out;
  bool prev_value = false;  // the previous token ends a value (number, symbol, ')')
  int open_abs = 0;         // |x| bars still open
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
      if (prev_value) out += '*';
      out += s.substr(i, j - i);
      prev_value = true;
      i = j;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      const std::string word = s.substr(i, j - i);
      if (word == "Pi" || std::find(functions.begin(), functions.end(), word) != functions.end()) {
        if (prev_value) out += '*';
        out += word;
        prev_value = word == "Pi";
      } else {
        for (char letter : word) {  // unknown words are products of one-letter symbols
          if (prev_value) out += '*';
          // e is Euler's number and i the imaginary unit, as in competition answers.
          out += letter == 'e'   ? std::string("exp(1)")
                 : letter == 'i' ? std::string("I")
                                 : std::string(1, letter);
          prev_value = true;
        }
      }
      i = j;
    } else if (c == '(') {
      if (prev_value) out += '*';
      out += c;
      prev_value = false;
      ++i;
    } else if (c == ')') {
      out += c;
      prev_value = true;
      ++i;
    } else if (c == '+' || c == '-' || c == '*' || c == '/' || c == '^' || c == ',') {
      out += c;
      prev_value = false;
      ++i;
    } else if (c == '|') {  // |x|: a bar after a value closes an open one, otherwise opens
      if (prev_value && open_abs > 0) {
        out += ')';
        --open_abs;
      } else {
        if (prev_value) out += '*';
        out += "abs(";
        ++open_abs;
        prev_value = false;
      }
      ++i;
    } else if (c == '!' && prev_value && !(i + 1 < s.size() && s[i + 1] == '=')) {  // n! and (...)!
      size_t start = out.size();
      if (out.back() == ')') {
        int depth = 0;
        while (start-- > 0) {
          if (out[start] == ')') ++depth;
          if (out[start] == '(' && --depth == 0) break;
        }
        if (start == std::string::npos) return std::nullopt;
      } else {
        while (start > 0 &&
               (std::isalnum(static_cast<unsigned char>(out[start - 1])) || out[start - 1] == '.'))
          --start;
      }
      out = out.substr(0, start) + "factorial(" + out.substr(start) + ")";
      ++i;
    } else {
      return std::nullopt;  // '\', '=', '<', ',', ... are outside the subset
    }
  }
  if (out.empty() || open_abs != 0) return std::nullopt;
  return out;
}

namespace {

// Runs in the child: 'E' equal, 'D' different, 'U' cannot tell (parse error, ...).
char compare_in_child(const std::string& a_text, const std::string& b_text) {
  try {
    GiNaC::parser reader;
    reader.strict = false;
    const GiNaC::ex a = reader(a_text), b = reader(b_text);
    const GiNaC::ex diff = (a - b).expand().normal();
    if (diff.is_zero()) return 'E';
    // Numeric check at fixed test points for each symbol (radicals GiNaC does not denest, etc.).
    const auto symbols = reader.get_syms();
    // Two constants (no symbols) agree to six decimals: 0.333333 is 1/3, 3.14159 is not pi. Plain
    // numbers never get here (they compare within 1e-4 before the symbolic step).
    if (symbols.empty()) {
      const GiNaC::ex value = diff.evalf();
      if (!GiNaC::is_a<GiNaC::numeric>(value)) return 'U';
      const GiNaC::numeric n = GiNaC::ex_to<GiNaC::numeric>(value);
      const double magnitude = std::abs(std::complex<double>(n.real().to_double(), n.imag().to_double()));
      const GiNaC::ex bv = b.evalf();
      const double scale = GiNaC::is_a<GiNaC::numeric>(bv)
                               ? std::max(1.0, std::abs(GiNaC::ex_to<GiNaC::numeric>(bv).to_double()))
                               : 1.0;
      return magnitude <= 5e-7 * scale ? 'E' : 'D';
    }
    // One point has negative values: sqrt(x^2) is |x|, not x.
    const double points[][3] = {{0.5, 1.7, 2.3}, {1.3, 0.7, 3.1}, {-1.9, -0.6, 2.4}};
    for (const auto& point : points) {
      GiNaC::exmap values;
      int k = 0;
      for (const auto& [name, sym] : symbols) {
        values[sym] = GiNaC::numeric(point[k % 3] + 0.37 * (k / 3));
        ++k;
      }
      const GiNaC::ex value = diff.subs(values).evalf();
      if (!GiNaC::is_a<GiNaC::numeric>(value)) return 'U';
      const GiNaC::numeric n = GiNaC::ex_to<GiNaC::numeric>(value);
      const double magnitude = std::abs(std::complex<double>(n.real().to_double(), n.imag().to_double()));
      const double scale =
          std::max(1.0, std::abs(GiNaC::ex_to<GiNaC::numeric>(b.subs(values).evalf()).to_double()));
      if (!(magnitude < 1e-9 * scale)) return 'D';
    }
    return 'E';
  } catch (...) {
    return 'U';
  }
}

}  // namespace

SymbolicResult symbolic_equal(const std::string& a_ginac, const std::string& b_ginac, double timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return SymbolicResult::Unknown;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return SymbolicResult::Unknown;
  }
  if (pid == 0) {
    close(fds[0]);
    const char verdict = compare_in_child(a_ginac, b_ginac);
    [[maybe_unused]] const ssize_t n = write(fds[1], &verdict, 1);
    _exit(0);
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(timeout_s * 1000));
  char verdict = 0;
  if (ready > 0 && read(fds[0], &verdict, 1) != 1) verdict = 0;
  close(fds[0]);
  if (ready <= 0) kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  if (ready <= 0) return SymbolicResult::Timeout;
  if (verdict == 'E') return SymbolicResult::Equal;
  if (verdict == 'D') return SymbolicResult::Different;
  return SymbolicResult::Unknown;
}

namespace {

// The one '=' of an equation with nothing relational besides; nullopt otherwise.
std::optional<size_t> equation_sign(std::string_view s) {
  const size_t eq = s.find('=');
  if (eq == std::string_view::npos || s.find('=', eq + 1) != std::string_view::npos) return std::nullopt;
  for (std::string_view rel : {"<", ">", "\\le", "\\ge", "\\ne", "\\approx", ","})
    if (s.find(rel) != std::string_view::npos) return std::nullopt;
  return eq;
}

// "lhs - (rhs)" of an equation in GiNaC syntax.
std::optional<std::string> equation_difference(std::string_view s, size_t eq) {
  const auto lhs = latex_to_ginac(normalize_math_answer(s.substr(0, eq)));
  const auto rhs = latex_to_ginac(normalize_math_answer(s.substr(eq + 1)));
  if (!lhs || !rhs) return std::nullopt;
  return "(" + *lhs + ")-(" + *rhs + ")";
}

// "(A) 3", "B. 12", "C) 7", "D: 2" -> the value after the option's label.
std::optional<std::string> after_choice_label(const std::string& s) {
  if (s.size() >= 4 && s[0] == '(' && s[1] >= 'A' && s[1] <= 'E' && s[2] == ')') return s.substr(3);
  if (s.size() >= 3 && s[0] >= 'A' && s[0] <= 'E' && (s[1] == '.' || s[1] == ')' || s[1] == ':'))
    return s.substr(2);
  return std::nullopt;
}

// A list at the top level: "1,2,3" or "(1,2),(3,4)", not one bracketed tuple or interval "(1,2)".
std::optional<std::vector<std::string>> top_level_list(const std::string& s) {
  auto parts = split_top_level(s, ',');
  if (!parts || parts->size() < 2) return std::nullopt;
  return parts;
}

bool is_plain_text(const std::string& s) {
  return s.size() >= 2 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '-' || c == '\'';
         });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

MathVerdict math_equal(std::string_view predicted, std::string_view gold, double symbolic_timeout_s) {
  // Two equations are equal when lhs - rhs agree up to sign ("x + y = 5" is "y = 5 - x").
  if (const auto pe = equation_sign(predicted), ge = equation_sign(gold); pe && ge) {
    const auto pd = equation_difference(predicted, *pe), gd = equation_difference(gold, *ge);
    if (pd && gd &&
        (symbolic_equal(*pd, *gd, symbolic_timeout_s) == SymbolicResult::Equal ||
         symbolic_equal(*pd, "-(" + *gd + ")", symbolic_timeout_s) == SymbolicResult::Equal))
      return {true, "equation"};
  }
  std::string p = normalize_math_answer(predicted), g = normalize_math_answer(gold);
  if (p.empty()) return {false, "empty"};
  if (p == g) return {true, "string"};
  if (is_choice_letter(g) && is_choice_letter(p)) {
    const bool same = choice_letter(p) == choice_letter(g);
    return {same, "choice"};
  }
  // "(C) 7" for the gold letter C: the option's label is the answer.
  if (is_choice_letter(g) && after_choice_label(p)) {
    const char label = p[0] == '(' ? p[1] : p[0];
    return {std::string(1, label) == choice_letter(g), "choice"};
  }
  // "(A) 3" for the gold 3: the option's label is not part of the value.
  if (!is_choice_letter(g))
    if (auto value = after_choice_label(p)) return math_equal(*value, g, symbolic_timeout_s);
  // Text answers ignore case: "\text{Even}" is "even".
  if (is_plain_text(p) && is_plain_text(g) && lower(p) == lower(g)) return {true, "text"};
  // Numbers (a percent sign on either side also accepts x100 and /100). Distinct numbers are
  // different: 3.14159 is not 3.1416 and 100001 is not 100000.
  const bool p_percent = p.find('%') != std::string::npos, g_percent = g.find('%') != std::string::npos;
  const bool percent = p_percent || g_percent;
  std::string pn = p, gn = g;
  replace_all(pn, "%", "");
  replace_all(gn, "%", "");
  const auto pv = parse_plain_number(pn), gv = parse_plain_number(gn);
  if (pv && gv) {
    auto close = [](double a, double b) {
      return std::abs(a - b) <= 1e-12 * std::max({1.0, std::abs(a), std::abs(b)});
    };
    bool same = close(*pv, *gv);
    if (percent) same = same || close(*pv * 100, *gv) || close(*pv / 100, *gv);
    return {same, "number"};
  }
  // A percentage against a fraction or expression: 25\% is \frac14.
  if (p_percent != g_percent) {
    const auto pa = latex_to_ginac(pn), ga = latex_to_ginac(gn);
    if (pa && ga) {
      const std::string scaled_p = p_percent ? "(" + *pa + ")/100" : *pa;
      const std::string scaled_g = g_percent ? "(" + *ga + ")/100" : *ga;
      if (symbolic_equal(scaled_p, scaled_g, symbolic_timeout_s) == SymbolicResult::Equal)
        return {true, "percent"};
    }
  }
  // Matrices, then tuples and intervals: element-wise, brackets must agree for intervals.
  int p_rows = 0, g_rows = 0;
  if (auto gm = matrix_cells(g, g_rows)) {
    auto pm = matrix_cells(p, p_rows);
    if (!pm || p_rows != g_rows || pm->size() != gm->size()) return {false, "matrix shape"};
    for (size_t i = 0; i < gm->size(); ++i)
      if (!math_equal((*pm)[i], (*gm)[i], symbolic_timeout_s).equal) return {false, "matrix"};
    return {true, "matrix"};
  }
  // Unions of intervals in any order.
  if (p.find("\\cup") != std::string::npos && g.find("\\cup") != std::string::npos) {
    auto split_cup = [](std::string s) {
      std::vector<std::string> parts;
      for (size_t at = s.find("\\cup"); at != std::string::npos; at = s.find("\\cup")) {
        parts.push_back(s.substr(0, at));
        s = s.substr(at + 4);
      }
      parts.push_back(s);
      return parts;
    };
    auto pl = split_cup(p), gl = split_cup(g);
    if (pl.size() != gl.size()) return {false, "union length"};
    std::vector<bool> used(pl.size(), false);
    for (const auto& want : gl) {
      bool found = false;
      for (size_t i = 0; i < pl.size() && !found; ++i)
        if (!used[i] && math_equal(pl[i], want, symbolic_timeout_s).equal) used[i] = found = true;
      if (!found) return {false, "union"};
    }
    return {true, "union"};
  }
  // Sets "\{1,2,3\}" and lists "1, 2, 3" or "(1,2),(3,4)" (several answers) match in any order, as
  // the reference's grader and math-verify do; a bracketed tuple or interval keeps its order.
  auto set_body = [](const std::string& s) -> std::optional<std::string> {
    if (s.size() >= 4 && s.starts_with("\\{") && s.ends_with("\\}")) return s.substr(2, s.size() - 4);
    return std::nullopt;
  };
  // "\pm 2" or "1\pm\sqrt{2}" against two answers: the two signs (either side).
  auto expand_pm = [](std::string& one, const std::string& other) {
    const size_t pm = one.find("\\pm");
    if (pm == std::string::npos || one.find("\\pm", pm + 1) != std::string::npos ||
        one.find(',') != std::string::npos)
      return;
    const auto two = top_level_list(other);
    if (!two || two->size() != 2) return;
    const std::string a = one.substr(0, pm), b = one.substr(pm + 3);
    one = a.empty() ? b + ",-" + b : a + "+" + b + "," + a + "-" + b;
  };
  expand_pm(p, g);
  expand_pm(g, p);
  const auto g_set = set_body(g);
  const auto g_list = g_set ? top_level_list(*g_set) : top_level_list(g);
  if (g_list) {
    const auto p_set = set_body(p);
    const bool p_bracketed =
        !p_set && p.size() >= 2 && is_open(p.front()) && is_close(p.back()) && !top_level_list(p);
    // A bracketed prediction for a bare list is compared in order below, as before.
    if (!p_bracketed) {
      auto pl = split_top_level(p_set ? *p_set : p, ',');
      if (!pl || pl->size() != g_list->size()) return {false, "list length"};
      std::vector<bool> used(pl->size(), false);
      for (const auto& want : *g_list) {
        bool found = false;
        for (size_t i = 0; i < pl->size() && !found; ++i)
          if (!used[i] && math_equal((*pl)[i], want, symbolic_timeout_s).equal) used[i] = found = true;
        if (!found) return {false, "list"};
      }
      return {true, "list"};
    }
  }
  auto gparts = split_top_level(
      g.size() >= 2 && is_open(g.front()) && is_close(g.back()) ? g.substr(1, g.size() - 2) : g, ',');
  if (gparts && gparts->size() > 1) {
    const bool g_bracketed = is_open(g.front()) && is_close(g.back());
    const bool p_bracketed = p.size() >= 2 && is_open(p.front()) && is_close(p.back());
    if (g_bracketed && p_bracketed && (p.front() != g.front() || p.back() != g.back()))
      return {false, "interval"};
    auto pparts = split_top_level(p_bracketed ? p.substr(1, p.size() - 2) : p, ',');
    if (!pparts || pparts->size() != gparts->size()) return {false, "tuple length"};
    for (size_t i = 0; i < gparts->size(); ++i)
      if (!math_equal((*pparts)[i], (*gparts)[i], symbolic_timeout_s).equal) return {false, "tuple"};
    return {true, "tuple"};
  }
  // A plain number on one side ("1.2e-5") enters GiNaC as mantissa times a power of ten.
  auto ginac_of = [](const std::string& text,
                     const std::optional<double>& value) -> std::optional<std::string> {
    if (!value) return latex_to_ginac(text);
    std::string digits = fmt::format("{:.15g}", *value);
    if (const size_t e = digits.find('e'); e != std::string::npos)
      digits =
          "(" + digits.substr(0, e) + ")*10^(" + digits.substr(digits[e + 1] == '+' ? e + 2 : e + 1) + ")";
    return digits;
  };
  const auto pa = ginac_of(p, percent ? std::nullopt : pv), ga = ginac_of(g, percent ? std::nullopt : gv);
  if (!pa || !ga) return {false, "different"};
  switch (symbolic_equal(*pa, *ga, symbolic_timeout_s)) {
    case SymbolicResult::Equal:
      return {true, "symbolic"};
    case SymbolicResult::Different:
      return {false, "symbolic"};
    case SymbolicResult::Timeout:
      return {false, "symbolic timeout"};
    case SymbolicResult::Unknown:
      return {false, "different"};
  }
  return {false, "different"};
}

}  // namespace kvdice::eval
