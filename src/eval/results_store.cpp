#include "eval/results_store.h"

#include <chrono>
#include <ctime>

#include "core/error.h"
#include "eval/hashing.h"

namespace kvdice::eval {
namespace {

constexpr int kSchemaVersion = 1;

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
  PRIMARY KEY (cell, problem, run),
  FOREIGN KEY (cell, problem, run) REFERENCES records(cell, problem, run)) WITHOUT ROWID;
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
  Statement get(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (get.step()) {
    const std::string version = get.column_text(0);
    if (version != std::to_string(kSchemaVersion))
      fail("results database {} has schema version {}, this kvdice reads version {}", path().string(),
           version, kSchemaVersion);
  } else {
    Statement put(db_, "INSERT INTO meta(key, value) VALUES ('schema_version', ?)");
    put.bind(1, std::string_view(std::to_string(kSchemaVersion))).run();
  }
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
              "INSERT INTO grades(cell, problem, run, grader, score, extracted, detail) VALUES (?, ?, ?, ?, "
              "?, ?, ?)");
  for (const auto& g : grades) {
    s.reset();
    s.bind(1, std::string_view(cell))
        .bind(2, int64_t{g.problem})
        .bind(3, int64_t{g.run})
        .bind(4, std::string_view(g.grader))
        .bind(5, g.score)
        .bind(6, std::string_view(g.extracted))
        .bind(7, std::string_view(g.detail))
        .run();
  }
  tx.commit();
}

std::vector<Grade> ResultsStore::grades(const std::string& cell) {
  std::vector<Grade> out;
  Statement s(db_,
              "SELECT problem, run, grader, score, extracted, detail FROM grades WHERE cell = ? ORDER BY "
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
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace kvdice::eval
