// A thin RAII layer over SQLite's C API (Debian's libsqlite3): one connection, prepared statements
// with typed binds, and transactions. Every SQLite failure becomes an Error naming the database file.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kvdice::eval {

class SqliteDb;

class Statement {
 public:
  Statement(SqliteDb& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds are 1-based, as in SQLite.
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view value);
  Statement& bind_null(int index);
  // Advances; false when there are no more rows.
  bool step();
  // Runs a statement that returns no rows.
  void run();
  void reset();

  int64_t column_int(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  bool column_is_null(int column) const;

 private:
  SqliteDb& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

class SqliteDb {
 public:
  // Opens (creating when `create`) the database file; WAL journal and synchronous=FULL so a row
  // committed before a SIGKILL or power loss is never lost.
  SqliteDb(const std::filesystem::path& path, bool create);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  void exec(std::string_view sql);
  sqlite3* handle() { return db_; }
  const std::filesystem::path& path() const { return path_; }
  [[noreturn]] void raise(std::string_view what) const;

 private:
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE on construction, ROLLBACK on destruction unless commit() ran.
class Transaction {
 public:
  explicit Transaction(SqliteDb& db);
  ~Transaction();
  void commit();

 private:
  SqliteDb& db_;
  bool done_ = false;
};

}  // namespace kvdice::eval
