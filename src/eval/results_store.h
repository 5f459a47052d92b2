// The results database: one SQLite file per results root (<root>/results.sqlite). A cell's
// manifest is written once; each (cell, problem, run) record is committed in its own transaction as
// it completes, so a killed `eval run` loses nothing committed and repeats nothing. Primary keys
// make duplicate records impossible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "eval/sqlite_db.h"

namespace kvdice::eval {

struct CellInfo {
  std::string name;
  std::string config_hash;  // sha256 of the manifest's canonical JSON
  Json manifest;
  int problems = 0;
  int runs = 0;
};

struct Record {
  std::string cell;
  int problem = 0;
  int run = 0;
  std::string config_hash;  // the manifest hash the record was produced under
  uint64_t stream_id = 0;
  std::string completion;
  std::string tokens_json;  // generated ids as a JSON array
  int prompt_tokens = 0;
  int generated_tokens = 0;
  std::string finish;  // "stop" or "length"
  int eviction_rounds = 0;
  int peak_resident_slots = 0;
  double seconds = 0.0;
  std::string completed_at;  // UTC; set on insert when empty (a merge keeps the shard's)
};

struct Grade {
  std::string cell;
  int problem = 0;
  int run = 0;
  std::string grader;
  double score = 0.0;     // 1 correct, 0 wrong (code: passed all tests or not)
  std::string extracted;  // what the grader read from the completion
  std::string detail;     // why, for people
};

std::filesystem::path results_db_path(const std::filesystem::path& root);

class ResultsStore {
 public:
  // `create`: make the root folder and database when missing; otherwise Error when absent.
  ResultsStore(const std::filesystem::path& root, bool create);

  const std::filesystem::path& path() const { return db_.path(); }
  std::vector<std::string> cell_names();
  std::optional<CellInfo> find_cell(const std::string& name);
  CellInfo require_cell(const std::string& name);
  void create_cell(const std::string& name, const Json& manifest, int problems, int runs);
  // (problem, run) pairs already recorded for the cell.
  std::set<std::pair<int, int>> recorded(const std::string& cell);
  void insert_record(const Record& record);
  // All of them in one transaction: none is written unless all are.
  void insert_records(const std::vector<Record>& records);
  std::vector<Record> records(const std::string& cell);
  // Replaces the cell's grades in one transaction.
  void replace_grades(const std::string& cell, const std::vector<Grade>& grades);
  std::vector<Grade> grades(const std::string& cell);

  SqliteDb& db() { return db_; }

 private:
  void insert_row(const Record& record);

  SqliteDb db_;
};

// Canonical manifest JSON (sorted keys, no whitespace) and its sha256.
std::string canonical_json(const Json& json);
std::string config_hash(const Json& manifest);

}  // namespace kvdice::eval
