// PNG plots through PLplot (Debian's libplplot, pngcairo driver): accuracy versus budget per
// policy, and mean generated length versus budget per policy, one pair per (model, task).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "stats/cell_stats.h"

namespace kvdice::stats {

// Writes <dir>/<task>.<model>.accuracy.png and .length.png; returns the files written. Cells with
// policy full (no budget) are drawn as a horizontal reference line.
std::vector<std::filesystem::path> write_plots(const std::vector<StatsRow>& rows,
                                               const std::filesystem::path& dir);

}  // namespace kvdice::stats
