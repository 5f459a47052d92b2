// lm-evaluation-harness's exact_match for MATH, the strict normalised-string readout beside the math
// grader's verdict: lm_eval/tasks/hendrycks_math/utils.py (EleutherAI/lm-evaluation-harness, release
// 0.4.13; the same file at main 4e7e0d47, August 2026), rule for rule:
//   is_equiv(a, b): strip_string(a) == strip_string(b); when strip_string raises on either side
//     (more than one "\text{ ", "\sqrt" or "\frac" with nothing after it, an "a/b" whose parts are
//     not integers), the raw strings are compared instead.
//   strip_string: drop newlines and "\!"; "\\" -> "\"; tfrac, dfrac -> frac; drop \left, \right,
//     "^{\circ}", "^\circ", "\$"; cut at "\text{ " (units on the right); drop "\%"; " ." -> " 0.",
//     "{." -> "{0.", a leading "." gets a "0"; "k = 3" -> "3" when the left side has at most two
//     characters; \sqrt3 -> \sqrt{3}; drop spaces; \frac12 -> \frac{1}{2}, \frac1{72} -> \frac{1}{72};
//     "0.5" -> \frac{1}{2}; "3/4" -> \frac{3}{4} for plain integers.
// The answer read from a completion: lm-eval's own reader of a boxed answer
// (remove_boxed(last_boxed_only_string(.)), which it applies to MATH solutions); when that finds none
// (no \boxed, an unclosed one, or an \fbox its remove_boxed refuses), its process_results rule: the
// text between the first and the last "$", else the whole completion. Strings are compared as
// Python's, code point by code point (UTF-8); Python's int() is read for ASCII digits only.
#pragma once

#include <string>
#include <string_view>

namespace kvdice::eval {

// strip_string; false when it raises (the cases above), `out` then unspecified.
bool lm_eval_strip_string(std::string_view answer, std::string& out);
// is_equiv(a, b).
bool lm_eval_is_equiv(std::string_view a, std::string_view b);
// The answer lm-eval's exact_match compares (see above).
std::string lm_eval_extract_answer(std::string_view completion);
// exact_match of a completion against the gold answer: 1 or 0.
double lm_eval_exact_match(std::string_view completion, std::string_view gold);

}  // namespace kvdice::eval
