// Math answers (docs/reference.md §3): the last \boxed{...} of a completion, LaTeX normalisation, and
// equivalence by string, choice letter, number (1e-4; x100 and /100 when a percent sign appears),
// sets and bare lists in any order, element-wise tuples, intervals and matrices, and finally symbolic
// equality through GiNaC in a child process under a time limit (constants: six decimals).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvdice::eval {

// Content of the last \boxed{...} (or \fbox{...}), braces matched; nullopt when there is none.
std::optional<std::string> last_boxed(std::string_view text);
// Canonical spelling: no \left/\right, spacing commands, \text{} wrappers, units after a number,
// degrees, dollars, "x =" prefixes or trailing periods; dfrac/tfrac -> frac; \frac12 -> \frac{1}{2}.
std::string normalize_math_answer(std::string_view answer);
// LaTeX -> GiNaC parser syntax ("\frac{a}{b}" -> "((a)/(b))", implicit products made explicit);
// nullopt for anything outside the supported subset.
std::optional<std::string> latex_to_ginac(std::string_view latex);

enum class SymbolicResult { Equal, Different, Unknown, Timeout };
// Symbolic comparison in a forked child killed after `timeout_s`: equal when normal(a - b) is 0 or
// a - b evaluates to |.| < 1e-9 at the symbols' test points.
SymbolicResult symbolic_equal(const std::string& a_ginac, const std::string& b_ginac, double timeout_s);

struct MathVerdict {
  bool equal = false;
  std::string how;  // "string", "number", "tuple", "symbolic", "timeout", ...
};
MathVerdict math_equal(std::string_view predicted, std::string_view gold, double symbolic_timeout_s);

}  // namespace kvdice::eval
