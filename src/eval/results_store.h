// The results database: one SQLite file per results root (<root>/results.sqlite). A cell's
// manifest is written once; each (cell, problem, run) record is committed in its own transaction as
// it completes, so a killed `eval run` loses nothing committed and repeats nothing. Primary keys
// make duplicate records impossible. Each `eval run` invocation has a row in `runs` (when, where, how
// long, what it wrote) kept current with every record it commits, so a killed run still counts the
// time up to its last record; `run_cells` splits a run's samples and generated tokens by cell. A
// database from before the runs table (schema version 1) is migrated on open: the tables are added,
// its older records stay unattributed (statistics per device-hour read "n/a" for their cells).
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
  // lm-evaluation-harness's exact_match for MATH (eval/lm_eval_math.h), beside the score: math
  // grades only; nullopt for other graders and for grades written before it was recorded.
  std::optional<double> exact_match;
};

// One cell's share of an `eval run` invocation.
struct RunCell {
  std::string cell;
  int samples = 0;               // records committed
  int64_t generated_tokens = 0;  // their generated tokens
};

// One `eval run` invocation.
struct RunInfo {
  std::string run_id;         // 32 hex digits, random: unique across machines, so shard roots merge
  std::string started_at;     // UTC, ISO 8601
  std::string ended_at;       // UTC: the last record's commit, then the run's end
  double wall_seconds = 0.0;  // from the start of the invocation (weights loading included)
  bool finished = false;      // false while running, or when it was killed or failed
  std::string backend;        // "cpu" or "cuda"
  std::string device;         // the GPU's or the CPU's name, and the backend's description
  int gpus = 0;               // 0 on the CPU
  int threads = 0;            // CPU threads (0 on a GPU run when not given)
  std::string kvdice_version;
  std::string git_commit;  // the commit the binary was built from ("unknown" outside git)
  std::string command_line;
  int samples = 0;
  int64_t generated_tokens = 0;
  std::vector<RunCell> cells;
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
  // The record and its run's totals (samples, tokens, ended_at, wall_seconds) in one transaction.
  void insert_record(const Record& record, const std::string& run_id, double wall_seconds);
  // A new run's row (samples and tokens start at 0; its cells are added as records arrive).
  void begin_run(const RunInfo& run);
  void finish_run(const std::string& run_id, double wall_seconds);
  // Every run, oldest first, with its cells.
  std::vector<RunInfo> runs();
  // Writes a run row as it is (merge): a new run is inserted; a run already present is replaced when
  // `run` covers more of it (more samples, or as many and longer), else left alone.
  void put_run(const RunInfo& run);
  // All of them in one transaction: none is written unless all are.
  void insert_records(const std::vector<Record>& records);
  std::vector<Record> records(const std::string& cell);
  // Replaces the cell's grades in one transaction.
  void replace_grades(const std::string& cell, const std::vector<Grade>& grades);
  std::vector<Grade> grades(const std::string& cell);

  SqliteDb& db() { return db_; }

 private:
  void insert_row(const Record& record);
  void migrate();

  SqliteDb db_;
};

// Canonical manifest JSON (sorted keys, no whitespace) and its sha256.
std::string canonical_json(const Json& json);
std::string config_hash(const Json& manifest);

}  // namespace kvdice::eval
