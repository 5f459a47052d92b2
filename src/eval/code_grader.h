// Code grading (LiveCodeBench style): the last ```python block of a completion runs against the
// problem's tests, each in a fresh sandboxed python3 process (see sandbox.h); pass = every test.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"
#include "eval/grader.h"

namespace kvdice::eval {

// The last ```python (or ```py / ```) fenced block; nullopt when there is none.
std::optional<std::string> last_python_block(std::string_view completion);
// Line-wise comparison: trailing whitespace and blank trailing lines ignored, tokens equal as
// strings or as numbers within 1e-6.
bool outputs_match(std::string_view actual, std::string_view expected);
// `problem` carries "tests": [{"input": str, "output": str}] and, for functional problems,
// "fn_name" (each input line is one JSON argument, the output one JSON value).
GradeOutcome grade_code(const std::string& completion, const Json& problem, const GradeOptions& options);

}  // namespace kvdice::eval
