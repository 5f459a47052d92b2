// Grading a cell: every record's completion is scored by the task's grader (math, choice or code)
// against the dataset's gold answer or tests, and the grades replace the cell's previous ones.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/dataset.h"
#include "eval/results_store.h"

namespace kvdice::eval {

struct GradeOutcome {
  double score = 0.0;
  std::string extracted;
  std::string detail;
  std::optional<double> exact_match = std::nullopt;  // math: lm-evaluation-harness's exact_match (eval/lm_eval_math.h)
};

// The longest timeout a grade flag takes (an hour per comparison or test already stalls a cell).
inline constexpr double kMaxGradeTimeoutS = 3600.0;

struct GradeOptions {
  double symbolic_timeout_s = 5.0;  // per symbolic comparison (GiNaC)
  double test_timeout_s = 20.0;     // code: wall clock per test
};

// Grades every record of a cell that passed check_cell; `log` gets one line per 100 graded.
std::vector<Grade> grade_cell(ResultsStore& store, const CellInfo& cell, const Dataset& dataset,
                              const GradeOptions& options,
                              const std::function<void(const std::string&)>& log);

}  // namespace kvdice::eval
