#include "eval/code_grader.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "eval/sandbox.h"

namespace kvdice::eval {
namespace {

std::vector<std::string> significant_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in{std::string(text)};
  while (std::getline(in, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  // Blank lines before the output are not output either (as blank lines after it).
  size_t first = 0;
  while (first < lines.size() && lines[first].empty()) ++first;
  lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(first));
  return lines;
}

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// An integer token: optional sign, digits only.
bool is_integer(const std::string& t) {
  const size_t from = !t.empty() && (t[0] == '-' || t[0] == '+') ? 1 : 0;
  return t.size() > from && t.find_first_not_of("0123456789", from) == std::string::npos;
}

// The integer's canonical spelling: no '+', no leading zeros, "0" for -0.
std::string canonical_integer(const std::string& t) {
  const bool negative = t[0] == '-';
  size_t from = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  while (from + 1 < t.size() && t[from] == '0') ++from;
  const std::string digits = t.substr(from);
  return negative && digits != "0" ? "-" + digits : digits;
}

// Integers are compared exactly (50000000000000001 is not 50000000000000000, whatever a double
// says); other numbers within 1e-6, relative above 1.
bool numbers_close(const std::string& a, const std::string& b) {
  if (is_integer(a) && is_integer(b)) return canonical_integer(a) == canonical_integer(b);
  try {
    size_t ua = 0, ub = 0;
    const double x = std::stod(a, &ua), y = std::stod(b, &ub);
    return ua == a.size() && ub == b.size() && std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(y));
  } catch (...) {
    return false;
  }
}

// JSON values equal, numbers within 1e-6.
bool json_close(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.is_number() && b.is_number())
    return std::abs(a.get<double>() - b.get<double>()) <= 1e-6 * std::max(1.0, std::abs(b.get<double>()));
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_close(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items())
      if (!b.contains(key) || !json_close(value, b[key])) return false;
    return true;
  }
  return a == b;
}

// What LeetCode's Python environment provides without an import: typing's names (List, Optional)
// and the usual standard modules and their names (Counter, deque, heappush, lru_cache, inf, ...).
constexpr const char* kFunctionalPreamble =
    "from typing import *\nfrom collections import *\nfrom heapq import *\nfrom bisect import *\n"
    "from itertools import *\nfrom functools import *\nfrom math import *\nfrom string import *\n"
    "from operator import *\nimport collections, heapq, bisect, itertools, functools, math, string, "
    "operator, re, "
    "random, sys, copy\nsys.setrecursionlimit(50000)\n";

std::string functional_harness(const std::string& code, const std::string& fn_name) {
  const bool has_class = code.find("class Solution") != std::string::npos;
  return std::string(kFunctionalPreamble) + code +
         "\n\n# --- kvdice functional test harness ---\nimport json as _kv_json, sys as _kv_sys\n"
         "_kv_args = [_kv_json.loads(_l) for _l in _kv_sys.stdin.read().splitlines() if _l.strip()]\n"
         "_kv_result = " +
         (has_class ? "Solution()." + fn_name : fn_name) +
         "(*_kv_args)\n"
         "_kv_sys.stdout.write('\\n<<kvdice-result>>' + _kv_json.dumps(_kv_result) + '\\n')\n";
}

std::string describe(const SandboxResult& r) {
  switch (r.status) {
    case SandboxStatus::WallTimeout:
      return fmt::format("timed out after {:.1f} s", r.seconds);
    case SandboxStatus::OutputLimit:
      return "output limit exceeded";
    case SandboxStatus::Signaled:
      return fmt::format("killed by signal {} ({})", r.signal, strsignal(r.signal));
    case SandboxStatus::Exited:
      break;
  }
  std::string tail = r.err.size() > 300 ? r.err.substr(r.err.size() - 300) : r.err;
  return fmt::format("exit code {}: {}", r.exit_code, tail);
}

}  // namespace

std::optional<std::string> last_python_block(std::string_view completion) {
  // Scan fences in order: outside a block "```lang" opens one, inside "```" closes it. An unclosed
  // last block (a completion cut by the length limit) runs to the end.
  std::optional<std::string> last;
  size_t at = completion.find("```");
  while (at != std::string_view::npos) {
    const size_t line_end = completion.find('\n', at);
    if (line_end == std::string_view::npos) break;
    std::string lang = std::string(completion.substr(at + 3, line_end - at - 3));
    while (!lang.empty() && std::isspace(static_cast<unsigned char>(lang.back()))) lang.pop_back();
    const size_t close = completion.find("```", line_end + 1);
    const size_t body_end = close == std::string_view::npos ? completion.size() : close;
    if (lang == "python" || lang == "py" || lang == "python3" || lang.empty())
      last = std::string(completion.substr(line_end + 1, body_end - line_end - 1));
    if (close == std::string_view::npos) break;
    at = completion.find("```", close + 3);
  }
  return last;
}

bool outputs_match(std::string_view actual, std::string_view expected) {
  const auto a = significant_lines(actual), e = significant_lines(expected);
  if (a.size() != e.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i]) continue;
    const auto ta = tokens(a[i]), te = tokens(e[i]);
    if (ta.size() != te.size()) return false;
    for (size_t j = 0; j < ta.size(); ++j)
      if (ta[j] != te[j] && !numbers_close(ta[j], te[j])) return false;
  }
  return true;
}

GradeOutcome grade_code(const std::string& completion, const Json& problem, const GradeOptions& options) {
  const auto code = last_python_block(completion);
  if (!code) return {0.0, "", "no ```python block"};
  const Json& tests = problem.at("tests");
  const std::string fn_name = problem.value("fn_name", std::string());
  SandboxLimits limits;
  limits.wall_seconds = options.test_timeout_s;
  limits.cpu_seconds = static_cast<int>(std::ceil(options.test_timeout_s));
  // HumanEval-style problems (kvdice data convert) carry the upstream check(candidate) and pass when
  // it raises nothing.
  const bool checked = problem.contains("check") && problem.contains("entry_point");
  const std::string program = checked ? problem.value("preamble", std::string()) + *code + "\n\n" +
                                            problem["check"].get<std::string>() + "\n\ncheck(" +
                                            problem["entry_point"].get<std::string>() + ")\n"
                              : fn_name.empty() ? *code
                                                : functional_harness(*code, fn_name);
  std::string layers;
  for (size_t i = 0; i < tests.size(); ++i) {
    const Json& test = tests[i];
    if (!test.is_object() || !test.contains("input") || !test.contains("output") ||
        !test["input"].is_string() || !test["output"].is_string())
      fail("problem {}: test {} needs string fields \"input\" and \"output\"",
           problem.value("id", std::string("?")), i);
    const auto run = run_python_sandboxed(program, test["input"].get<std::string>(), limits);
    layers = run.layers;
    if (run.status != SandboxStatus::Exited || run.exit_code != 0)
      return {0.0, *code, fmt::format("test {}: {} [sandbox: {}]", i, describe(run), layers)};
    bool pass = false;
    if (checked) {
      pass = true;  // exited 0: every assertion held
    } else if (fn_name.empty()) {
      pass = outputs_match(run.out, test["output"].get<std::string>());
    } else {
      const size_t at = run.out.rfind("<<kvdice-result>>");
      try {
        pass = at != std::string::npos && json_close(Json::parse(run.out.substr(at + 17)),
                                                     Json::parse(test["output"].get<std::string>()));
      } catch (const Json::exception&) {
        pass = false;
      }
    }
    if (!pass) return {0.0, *code, fmt::format("test {}: wrong answer [sandbox: {}]", i, layers)};
  }
  return {1.0, *code, fmt::format("passed {} tests [sandbox: {}]", tests.size(), layers)};
}

}  // namespace kvdice::eval
