#include "eval/grader.h"

#include "core/error.h"
#include "eval/choice_answer.h"
#include "eval/code_grader.h"
#include "eval/lm_eval_math.h"
#include "eval/math_answer.h"
#include "eval/task.h"

namespace kvdice::eval {
namespace {

GradeOutcome grade_math(const std::string& completion, const std::string& gold, const GradeOptions& options) {
  // The strict readout beside the verdict: lm-eval's own answer reading and string normalisation.
  const double exact_match = lm_eval_exact_match(completion, gold);
  const auto boxed = last_boxed(completion);
  if (!boxed) return {0.0, "", "no \\boxed{} answer", exact_match};
  const MathVerdict verdict = math_equal(*boxed, gold, options.symbolic_timeout_s);
  return {verdict.equal ? 1.0 : 0.0, *boxed, verdict.how, exact_match};
}

GradeOutcome grade_choice(const std::string& completion, const std::string& gold, int choices) {
  const auto expected = parse_choice_gold(gold, choices);
  KVDICE_CHECK(expected.has_value(), "gold answers are validated before grading");
  const auto letter = extract_choice(completion, choices);
  if (!letter) return {0.0, "", "no choice letter"};
  return {*letter == *expected ? 1.0 : 0.0, std::string(1, *letter), fmt::format("gold {}", *expected)};
}

}  // namespace

std::vector<Grade> grade_cell(ResultsStore& store, const CellInfo& cell, const Dataset& dataset,
                              const GradeOptions& options,
                              const std::function<void(const std::string&)>& log) {
  const TaskSpec task = task_from_json(cell.manifest.at("task"), "cell " + cell.name + " manifest");
  if (static_cast<int>(dataset.problems.size()) < cell.problems)
    fail("dataset {} has {} problems, the cell ran {}", dataset.path.string(), dataset.problems.size(),
         cell.problems);
  if (task.grader == GraderKind::Choice) {
    for (int p = 0; p < cell.problems; ++p)
      if (!parse_choice_gold(dataset.problems[p].answer, task.choices))
        fail("{}: problem {} has gold answer '{}', not one of the first {} letters", dataset.path.string(), p,
             dataset.problems[p].answer, task.choices);
  }
  std::vector<Grade> grades;
  const auto records = store.records(cell.name);
  for (const Record& r : records) {
    const Problem& problem = dataset.problems.at(r.problem);
    GradeOutcome outcome;
    switch (task.grader) {
      case GraderKind::Math:
        outcome = grade_math(r.completion, problem.answer, options);
        break;
      case GraderKind::Choice:
        outcome = grade_choice(r.completion, problem.answer, task.choices);
        break;
      case GraderKind::Code:
        outcome = grade_code(r.completion, problem.raw, options);
        break;
    }
    grades.push_back({cell.name, r.problem, r.run, std::string(grader_name(task.grader)), outcome.score,
                      outcome.extracted, outcome.detail, outcome.exact_match});
    if (grades.size() % 100 == 0) log(fmt::format("graded {}/{}", grades.size(), records.size()));
  }
  return grades;
}

}  // namespace kvdice::eval
