// Where bench results go: a JSON file that accumulates runs ({"runs": [...]}: each run is appended;
// an existing file that is not such a document is an error, never overwritten) and a markdown table
// that gains one row per run. Both are written atomically (core/file_io.h).
#pragma once

#include <string>

#include "core/json.h"

namespace kvdice::bench {

// What every run records besides its protocol's fields: the command line (/proc/self/cmdline), the
// date (UTC, ISO 8601), the git commit the binary was built from (configure time; "unknown" outside a
// checkout).
Json run_header();

void append_json_run(const std::string& path, const Json& run);
// The row: protocol, model, backend, parameters, headline metric, validity.
void append_markdown_row(const std::string& path, const Json& run);
// One line per headline figure, for stdout.
std::string summary_text(const Json& run);

}  // namespace kvdice::bench
