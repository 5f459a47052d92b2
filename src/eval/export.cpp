#include "eval/export.h"

#include <map>

#include "core/error.h"

namespace kvdice::eval {

ExportFormat export_format_from_name(const std::string& name) {
  if (name == "jsonl") return ExportFormat::Jsonl;
  if (name == "csv") return ExportFormat::Csv;
  fail("--format must be jsonl or csv (got '{}')", name);
}

std::string csv_field(const std::string& value) {
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void export_cell(ResultsStore& store, const CellInfo& cell, ExportFormat format, std::ostream& out) {
  std::map<std::pair<int, int>, Grade> grades;
  for (auto& g : store.grades(cell.name)) grades[{g.problem, g.run}] = g;
  const std::string policy = cell.manifest.value("/policy/name"_json_pointer, std::string());
  const int budget = cell.manifest.value("/policy/budget"_json_pointer, 0);
  if (format == ExportFormat::Csv)
    out << "cell,policy,budget,problem,run,stream_id,prompt_tokens,generated_tokens,finish,eviction_rounds,"
           "peak_resident_slots,seconds,score,extracted,completion\n";
  for (const Record& r : store.records(cell.name)) {
    const auto g = grades.find({r.problem, r.run});
    if (format == ExportFormat::Jsonl) {
      Json j{{"cell", cell.name},
             {"policy", policy},
             {"budget", budget},
             {"problem", r.problem},
             {"run", r.run},
             {"stream_id", r.stream_id},
             {"config_hash", r.config_hash},
             {"prompt_tokens", r.prompt_tokens},
             {"generated_tokens", r.generated_tokens},
             {"finish", r.finish},
             {"eviction_rounds", r.eviction_rounds},
             {"peak_resident_slots", r.peak_resident_slots},
             {"seconds", r.seconds},
             {"tokens", Json::parse(r.tokens_json)},
             {"completion", r.completion}};
      if (g != grades.end()) {
        j["score"] = g->second.score;
        j["extracted"] = g->second.extracted;
        j["grade_detail"] = g->second.detail;
      }
      out << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    } else {
      out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{:.6f},{},{},{}\n", csv_field(cell.name), policy,
                         budget, r.problem, r.run, r.stream_id, r.prompt_tokens, r.generated_tokens, r.finish,
                         r.eviction_rounds, r.peak_resident_slots, r.seconds,
                         g != grades.end() ? fmt::format("{}", g->second.score) : "",
                         g != grades.end() ? csv_field(g->second.extracted) : "", csv_field(r.completion));
    }
  }
}

}  // namespace kvdice::eval
