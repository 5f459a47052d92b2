#include "eval/results_store.h"

#include <chrono>
#include <ctime>
#include <map>

#include "core/error.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

// 1: cells, records, grades. 2: runs and run_cells; grades.exact_match. Version 1 opens migrated.
constexpr int kSchemaVersion = 2;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells(
  name TEXT PRIMARY KEY,
  config_hash TEXT NOT NULL,
  manifest TEXT NOT NULL,
  problems INTEGER NOT NULL CHECK (problems > 0),
  runs INTEGER NOT NULL CHECK (runs > 0),
  created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
  cell TEXT NOT NULL REFERENCES cells(name),
  problem INTEGER NOT NULL,
  run INTEGER NOT NULL,
  config_hash TEXT NOT NULL,
  stream_id INTEGER NOT NULL,
  completion TEXT NOT NULL,
  tokens TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  generated_tokens INTEGER NOT NULL,
  finish TEXT NOT NULL,
  eviction_rounds INTEGER NOT NULL,
  peak_resident_slots INTEGER NOT NULL,
  seconds REAL NOT NULL,
  completed_at TEXT NOT NULL,
  PRIMARY KEY (cell, problem, run)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS grades(
  cell TEXT NOT NULL,
  problem INTEGER NOT NULL,
  run INTEGER NOT NULL,
  grader TEXT NOT NULL,
  score REAL NOT NULL,
  extracted TEXT NOT NULL,
  detail TEXT NOT NULL,
  exact_match REAL,
  PRIMARY KEY (cell, problem, run),
  FOREIGN KEY (cell, problem, run) REFERENCES records(cell, problem, run)) WITHOUT ROWID;
)sql";

// Added by version 2 (also run on a version 1 database when it is migrated).
constexpr const char* kRunsSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs(
  run_id TEXT PRIMARY KEY,
  started_at TEXT NOT NULL,
  ended_at TEXT NOT NULL,
  wall_seconds REAL NOT NULL CHECK (wall_seconds >= 0),
  finished INTEGER NOT NULL,
  backend TEXT NOT NULL,
  device TEXT NOT NULL,
  gpus INTEGER NOT NULL CHECK (gpus >= 0),
  threads INTEGER NOT NULL,
  kvdice_version TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  command_line TEXT NOT NULL,
  cells TEXT NOT NULL,
  samples INTEGER NOT NULL,
  generated_tokens INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_cells(
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  cell TEXT NOT NULL,
  samples INTEGER NOT NULL,
  generated_tokens INTEGER NOT NULL,
  PRIMARY KEY (run_id, cell)) WITHOUT ROWID;
)sql";

std::string now_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace

std::filesystem::path results_db_path(const std::filesystem::path& root) { return root / "results.sqlite"; }

std::string canonical_json(const Json& json) { return json.dump(); }  // nlohmann sorts object keys
std::string config_hash(const Json& manifest) { return sha256_hex(canonical_json(manifest)); }

static std::filesystem::path prepare_root(const std::filesystem::path& root, bool create) {
  // An existing database must be a regular, non-empty file: SQLite alone takes a 0-byte file (a
  // truncated copy, a full disk) as a new empty database and would run or report as if nothing was there.
  const std::filesystem::path db = results_db_path(root);
  std::error_code status_ec;
  const auto status = std::filesystem::status(db, status_ec);
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_regular_file(status)) fail("results database {} is not a regular file", db.string());
    if (std::filesystem::file_size(db, status_ec) == 0 && !status_ec)
      fail("results database {} is empty (0 bytes): a truncated or lost copy? Restore it, or remove it to "
           "start a new one",
           db.string());
  }
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec) fail("cannot create results root {}: {}", root.string(), ec.message());
  } else if (!std::filesystem::exists(results_db_path(root))) {
    fail("no results database under {} (expected {}; run `kvdice eval run` first)", root.string(),
         results_db_path(root).string());
  }
  return results_db_path(root);
}

ResultsStore::ResultsStore(const std::filesystem::path& root, bool create)
    : db_(prepare_root(root, create), create) {
  db_.exec(kSchema);
  std::string version;
  {
    Statement get(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (get.step()) version = get.column_text(0);
  }
  if (version.empty()) {
    db_.exec(kRunsSchema);
    Statement put(db_, "INSERT INTO meta(key, value) VALUES ('schema_version', ?)");
    put.bind(1, std::string_view(std::to_string(kSchemaVersion))).run();
  } else if (version == "1") {
    migrate();
  } else if (version != std::to_string(kSchemaVersion)) {
    fail("results database {} has schema version {}, this kvdice reads versions 1 and {}", path().string(),
         version, kSchemaVersion);
  }
}

// Version 1 -> 2 in one transaction: the runs tables and the grades' exact_match column. Records
// written before stay as they are; no run row claims them.
void ResultsStore::migrate() {
  Transaction tx(db_);
  db_.exec(kRunsSchema);
  bool has_exact_match = false;
  {
    Statement columns(db_, "SELECT name FROM pragma_table_info('grades')");
    while (columns.step()) has_exact_match |= columns.column_text(0) == "exact_match";
  }
  if (!has_exact_match) db_.exec("ALTER TABLE grades ADD COLUMN exact_match REAL");
  Statement put(db_, "UPDATE meta SET value = ? WHERE key = 'schema_version'");
  put.bind(1, std::string_view(std::to_string(kSchemaVersion))).run();
  tx.commit();
}

std::vector<std::string> ResultsStore::cell_names() {
  std::vector<std::string> names;
  Statement s(db_, "SELECT name FROM cells ORDER BY name");
  while (s.step()) names.push_back(s.column_text(0));
  return names;
}

std::optional<CellInfo> ResultsStore::find_cell(const std::string& name) {
  Statement s(db_, "SELECT config_hash, manifest, problems, runs FROM cells WHERE name = ?");
  s.bind(1, std::string_view(name));
  if (!s.step()) return std::nullopt;
  CellInfo info;
  info.name = name;
  info.config_hash = s.column_text(0);
  try {
    info.manifest = Json::parse(s.column_text(1));
  } catch (const Json::exception& e) {
    fail("results database {}: cell '{}' has a corrupt manifest: {}", path().string(), name, e.what());
  }
  info.problems = static_cast<int>(s.column_int(2));
  info.runs = static_cast<int>(s.column_int(3));
  return info;
}

CellInfo ResultsStore::require_cell(const std::string& name) {
  auto info = find_cell(name);
  if (!info) {
    const auto names = cell_names();
    fail("no cell '{}' in {} (cells: {})", name, path().string(),
         names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  }
  return *info;
}

void ResultsStore::create_cell(const std::string& name, const Json& manifest, int problems, int runs) {
  Statement s(
      db_,
      "INSERT INTO cells(name, config_hash, manifest, problems, runs, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  s.bind(1, std::string_view(name))
      .bind(2, std::string_view(config_hash(manifest)))
      .bind(3, std::string_view(canonical_json(manifest)))
      .bind(4, int64_t{problems})
      .bind(5, int64_t{runs})
      .bind(6, std::string_view(now_utc()))
      .run();
}

std::set<std::pair<int, int>> ResultsStore::recorded(const std::string& cell) {
  std::set<std::pair<int, int>> done;
  Statement s(db_, "SELECT problem, run FROM records WHERE cell = ?");
  s.bind(1, std::string_view(cell));
  while (s.step()) done.emplace(static_cast<int>(s.column_int(0)), static_cast<int>(s.column_int(1)));
  return done;
}

void ResultsStore::insert_record(const Record& r) {
  Transaction tx(db_);
  insert_row(r);
  tx.commit();
}

void ResultsStore::insert_record(const Record& r, const std::string& run_id, double wall_seconds) {
  Transaction tx(db_);
  insert_row(r);
  const std::string now = now_utc();
  Statement run(
      db_,
      "UPDATE runs SET samples = samples + 1, generated_tokens = generated_tokens + ?, ended_at = ?, "
      "wall_seconds = ? WHERE run_id = ?");
  run.bind(1, int64_t{r.generated_tokens})
      .bind(2, std::string_view(now))
      .bind(3, wall_seconds)
      .bind(4, std::string_view(run_id))
      .run();
  if (sqlite3_changes(db_.handle()) != 1) fail("results database {}: no run {}", path().string(), run_id);
  Statement cell(db_,
                 "INSERT INTO run_cells(run_id, cell, samples, generated_tokens) VALUES (?, ?, 1, ?) "
                 "ON CONFLICT(run_id, cell) DO UPDATE SET samples = samples + 1, "
                 "generated_tokens = generated_tokens + excluded.generated_tokens");
  cell.bind(1, std::string_view(run_id))
      .bind(2, std::string_view(r.cell))
      .bind(3, int64_t{r.generated_tokens})
      .run();
  Statement cells(db_,
                  "UPDATE runs SET cells = (SELECT json_group_array(cell) FROM (SELECT cell FROM run_cells "
                  "WHERE run_id = ?1 ORDER BY cell)) WHERE run_id = ?1");
  cells.bind(1, std::string_view(run_id)).run();
  tx.commit();
}

namespace {

void write_run_row(SqliteDb& db, const RunInfo& run, bool replace) {
  Statement s(db,
              std::string(replace ? "INSERT OR REPLACE" : "INSERT") +
                  " INTO runs(run_id, started_at, ended_at, wall_seconds, finished, backend, device, gpus, "
                  "threads, kvdice_version, git_commit, command_line, cells, samples, generated_tokens) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Json cells = Json::array();
  for (const auto& c : run.cells) cells.push_back(c.cell);
  s.bind(1, std::string_view(run.run_id))
      .bind(2, std::string_view(run.started_at))
      .bind(3, std::string_view(run.ended_at.empty() ? run.started_at : run.ended_at))
      .bind(4, run.wall_seconds)
      .bind(5, int64_t{run.finished ? 1 : 0})
      .bind(6, std::string_view(run.backend))
      .bind(7, std::string_view(run.device))
      .bind(8, int64_t{run.gpus})
      .bind(9, int64_t{run.threads})
      .bind(10, std::string_view(run.kvdice_version))
      .bind(11, std::string_view(run.git_commit))
      .bind(12, std::string_view(run.command_line))
      .bind(13, std::string_view(cells.dump()))
      .bind(14, int64_t{run.samples})
      .bind(15, run.generated_tokens)
      .run();
  Statement del(db, "DELETE FROM run_cells WHERE run_id = ?");
  del.bind(1, std::string_view(run.run_id)).run();
  Statement put(db, "INSERT INTO run_cells(run_id, cell, samples, generated_tokens) VALUES (?, ?, ?, ?)");
  for (const auto& c : run.cells) {
    put.reset();
    put.bind(1, std::string_view(run.run_id))
        .bind(2, std::string_view(c.cell))
        .bind(3, int64_t{c.samples})
        .bind(4, c.generated_tokens)
        .run();
  }
}

}  // namespace

void ResultsStore::begin_run(const RunInfo& run) {
  Transaction tx(db_);
  write_run_row(db_, run, false);
  tx.commit();
}

void ResultsStore::finish_run(const std::string& run_id, double wall_seconds) {
  Statement s(db_, "UPDATE runs SET finished = 1, ended_at = ?, wall_seconds = ? WHERE run_id = ?");
  s.bind(1, std::string_view(now_utc())).bind(2, wall_seconds).bind(3, std::string_view(run_id)).run();
}

std::vector<RunInfo> ResultsStore::runs() {
  std::vector<RunInfo> out;
  std::map<std::string, size_t> index;
  {
    Statement s(
        db_,
        "SELECT run_id, started_at, ended_at, wall_seconds, finished, backend, device, gpus, threads, "
        "kvdice_version, git_commit, command_line, samples, generated_tokens FROM runs "
        "ORDER BY started_at, run_id");
    while (s.step()) {
      RunInfo r;
      r.run_id = s.column_text(0);
      r.started_at = s.column_text(1);
      r.ended_at = s.column_text(2);
      r.wall_seconds = s.column_double(3);
      r.finished = s.column_int(4) != 0;
      r.backend = s.column_text(5);
      r.device = s.column_text(6);
      r.gpus = static_cast<int>(s.column_int(7));
      r.threads = static_cast<int>(s.column_int(8));
      r.kvdice_version = s.column_text(9);
      r.git_commit = s.column_text(10);
      r.command_line = s.column_text(11);
      r.samples = static_cast<int>(s.column_int(12));
      r.generated_tokens = s.column_int(13);
      index[r.run_id] = out.size();
      out.push_back(std::move(r));
    }
  }
  Statement c(db_, "SELECT run_id, cell, samples, generated_tokens FROM run_cells ORDER BY run_id, cell");
  while (c.step()) {
    auto it = index.find(c.column_text(0));
    if (it == index.end()) continue;
    out[it->second].cells.push_back({c.column_text(1), static_cast<int>(c.column_int(2)), c.column_int(3)});
  }
  return out;
}

void ResultsStore::put_run(const RunInfo& run) {
  Transaction tx(db_);
  bool write = true;
  {
    Statement s(db_, "SELECT samples, wall_seconds FROM runs WHERE run_id = ?");
    s.bind(1, std::string_view(run.run_id));
    if (s.step()) {
      const int64_t samples = s.column_int(0);
      const double wall = s.column_double(1);
      write = run.samples > samples || (run.samples == samples && run.wall_seconds > wall);
    }
  }
  if (write) write_run_row(db_, run, true);
  tx.commit();
}

void ResultsStore::insert_records(const std::vector<Record>& records) {
  Transaction tx(db_);
  for (const Record& r : records) insert_row(r);
  tx.commit();
}

void ResultsStore::insert_row(const Record& r) {
  Statement s(
      db_,
      "INSERT INTO records(cell, problem, run, config_hash, stream_id, completion, tokens, prompt_tokens, "
      "generated_tokens, finish, eviction_rounds, peak_resident_slots, seconds, completed_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, std::string_view(r.cell))
      .bind(2, int64_t{r.problem})
      .bind(3, int64_t{r.run})
      .bind(4, std::string_view(r.config_hash))
      .bind(5, static_cast<int64_t>(r.stream_id))
      .bind(6, std::string_view(r.completion))
      .bind(7, std::string_view(r.tokens_json))
      .bind(8, int64_t{r.prompt_tokens})
      .bind(9, int64_t{r.generated_tokens})
      .bind(10, std::string_view(r.finish))
      .bind(11, int64_t{r.eviction_rounds})
      .bind(12, int64_t{r.peak_resident_slots})
      .bind(13, r.seconds)
      .bind(14, std::string_view(r.completed_at.empty() ? now_utc() : r.completed_at))
      .run();
}

std::vector<Record> ResultsStore::records(const std::string& cell) {
  std::vector<Record> out;
  Statement s(
      db_,
      "SELECT problem, run, config_hash, stream_id, completion, tokens, prompt_tokens, generated_tokens, "
      "finish, eviction_rounds, peak_resident_slots, seconds, completed_at FROM records WHERE cell = ? "
      "ORDER BY problem, run");
  s.bind(1, std::string_view(cell));
  while (s.step()) {
    Record r;
    r.cell = cell;
    r.problem = static_cast<int>(s.column_int(0));
    r.run = static_cast<int>(s.column_int(1));
    r.config_hash = s.column_text(2);
    r.stream_id = static_cast<uint64_t>(s.column_int(3));
    r.completion = s.column_text(4);
    r.tokens_json = s.column_text(5);
    r.prompt_tokens = static_cast<int>(s.column_int(6));
    r.generated_tokens = static_cast<int>(s.column_int(7));
    r.finish = s.column_text(8);
    r.eviction_rounds = static_cast<int>(s.column_int(9));
    r.peak_resident_slots = static_cast<int>(s.column_int(10));
    r.seconds = s.column_double(11);
    r.completed_at = s.column_text(12);
    out.push_back(std::move(r));
  }
  return out;
}

void ResultsStore::replace_grades(const std::string& cell, const std::vector<Grade>& grades) {
  Transaction tx(db_);
  Statement del(db_, "DELETE FROM grades WHERE cell = ?");
  del.bind(1, std::string_view(cell)).run();
  Statement s(db_,
              "INSERT INTO grades(cell, problem, run, grader, score, extracted, detail, exact_match) VALUES "
              "(?, ?, ?, ?, ?, ?, ?, ?)");
  for (const auto& g : grades) {
    s.reset();
    s.bind(1, std::string_view(cell))
        .bind(2, int64_t{g.problem})
        .bind(3, int64_t{g.run})
        .bind(4, std::string_view(g.grader))
        .bind(5, g.score)
        .bind(6, std::string_view(g.extracted))
        .bind(7, std::string_view(g.detail));
    if (g.exact_match)
      s.bind(8, *g.exact_match);
    else
      s.bind_null(8);
    s.run();
  }
  tx.commit();
}

std::vector<Grade> ResultsStore::grades(const std::string& cell) {
  std::vector<Grade> out;
  Statement s(db_,
              "SELECT problem, run, grader, score, extracted, detail, exact_match FROM grades WHERE cell = ? "
              "ORDER BY "
              "problem, run");
  s.bind(1, std::string_view(cell));
  while (s.step()) {
    Grade g;
    g.cell = cell;
    g.problem = static_cast<int>(s.column_int(0));
    g.run = static_cast<int>(s.column_int(1));
    g.grader = s.column_text(2);
    g.score = s.column_double(3);
    g.extracted = s.column_text(4);
    g.detail = s.column_text(5);
    if (!s.column_is_null(6)) g.exact_match = s.column_double(6);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace kvdice::eval
