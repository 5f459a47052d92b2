// Integrity checks on a cell before anyone trusts its numbers: the manifest is untampered, every
// record belongs to this configuration and lies in range, none is missing, the dataset on disk is
// the one the cell ran on, and (when given) the model is the one that produced the records.
// `eval check`, `eval grade` and `stats` all run these first.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "eval/results_store.h"

namespace kvdice::eval {

struct CheckOptions {
  bool allow_incomplete = false;                 // report missing records without failing
  std::optional<std::filesystem::path> dataset;  // overrides the manifest's dataset path
  std::optional<std::string> model_fingerprint;  // must equal the manifest's when given
};

struct CheckResult {
  int records = 0;
  int expected = 0;
  std::vector<std::string> warnings;  // e.g. missing records under allow_incomplete
};

// Error listing every problem found (at most a few per kind) when the cell fails a check.
CheckResult check_cell(ResultsStore& store, const CellInfo& cell, const CheckOptions& options);

// Two cells may be compared only when they ran the same problems the same way apart from the
// policy and its budget: same model and tokenizer, task, dataset, problems, runs, sampling, seed.
void check_comparable(const CellInfo& a, const CellInfo& b);

}  // namespace kvdice::eval
