// The results table over cells as markdown, CSV or LaTeX; significant wins and losses against the
// baseline (the bootstrap CI excludes 0) are marked.
#pragma once

#include <string>
#include <vector>

#include "stats/cell_stats.h"

namespace kvdice::stats {

enum class TableFormat { Markdown, Csv, Latex };
TableFormat table_format_from_name(const std::string& name);
std::string render_table(const std::vector<StatsRow>& rows, TableFormat format);
// Per-problem mean correctness over runs: one row per problem index, one column per cell.
std::string render_per_problem_csv(const std::vector<StatsRow>& rows);
// Accuracy per dataset level (MATH-500's 1-5) per cell, markdown or CSV; Error when no cell has levels.
std::string render_by_level(const std::vector<StatsRow>& rows, TableFormat format);

}  // namespace kvdice::stats
