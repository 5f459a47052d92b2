// `eval merge`: joins the results roots of a cell's shards (or of any runs of the same cells) into
// one root. Every input cell passes the integrity checks first (missing records allowed: a shard
// holds only its slice); a cell must have the identical manifest in every input and in the output;
// a (problem, run) found twice must be the same record (timing fields aside), else the merge names
// the conflict. Nothing is written unless every cell passes, and the inputs are only read, so a
// failed merge loses nothing and a repeated one adds nothing. The inputs' `runs` rows (one per
// `eval run` invocation) are carried into the output, a run met twice keeping its most complete copy,
// so wall time and device-hours per cell survive the merge. Grades are not merged: grade the merged root.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "eval/results_store.h"
#include "eval/runner.h"

namespace kvdice::eval {

struct MergeOptions {
  std::vector<std::filesystem::path> inputs;
  std::filesystem::path output;
  bool allow_incomplete = false;                 // write cells that still miss records (reported)
  std::optional<std::filesystem::path> dataset;  // the dataset's copy when its path moved
};

struct MergedCell {
  std::string name;
  int inputs = 0;      // input roots holding the cell
  int added = 0;       // records new to the output
  int duplicates = 0;  // identical records met more than once (inputs or output)
  int records = 0;     // records of the cell in the output after the merge
  int expected = 0;    // problems * runs
};

std::vector<MergedCell> merge_results(const MergeOptions& options, const EvalLog& log);

// Whether two records of one (cell, problem, run) carry the same result; run time and completion
// time are left out (they differ between machines).
bool same_record_content(const Record& a, const Record& b);

}  // namespace kvdice::eval
