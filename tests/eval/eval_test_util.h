// Utilities for the evaluation tests: run the kvdice binary (blocking or in the background), a fresh
// temporary folder per test, and direct SQLite access to tamper with a results database.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "eval/sqlite_db.h"

namespace kvdice::testing {

struct EvalCommand {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts kvdice with stdout/stderr into files under `dir`; returns the pid.
inline pid_t spawn_kvdice(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto out_path = dir / "stdout", err_path = dir / "stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::dup2(null_fd, 0);
    std::vector<std::string> copy = args;
    std::string binary = KVDICE_BINARY;
    std::vector<char*> argv{binary.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    std::_Exit(127);
  }
  return pid;
}

inline EvalCommand wait_kvdice(pid_t pid, const std::filesystem::path& dir) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  EvalCommand r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp_file(dir / "stdout");
  r.err = slurp_file(dir / "stderr");
  return r;
}

inline EvalCommand kvdice(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  return wait_kvdice(spawn_kvdice(args, dir), dir);
}

// A fresh folder under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

inline int64_t count_rows(const std::filesystem::path& db_path, const std::string& sql) {
  eval::SqliteDb db(db_path, false);
  eval::Statement s(db, sql);
  return s.step() ? s.column_int(0) : -1;
}

}  // namespace kvdice::testing
