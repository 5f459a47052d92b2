// `eval export`: a cell's records (and grades, when graded) as JSONL or CSV for other tools.
#pragma once

#include <ostream>
#include <string>

#include "eval/results_store.h"

namespace kvdice::eval {

enum class ExportFormat { Jsonl, Csv };
ExportFormat export_format_from_name(const std::string& name);
void export_cell(ResultsStore& store, const CellInfo& cell, ExportFormat format, std::ostream& out);
// RFC 4180 quoting: fields with a comma, quote or line break are quoted, quotes doubled.
std::string csv_field(const std::string& value);

}  // namespace kvdice::eval
