#include "eval/code_grader.h"

#include "core/error.h"

namespace kvdice::eval {

GradeOutcome grade_code(const std::string& completion, const Json& problem, const GradeOptions& options) {
  fail("the code grader is not built yet");
}

}  // namespace kvdice::eval
