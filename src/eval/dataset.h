// A user-supplied evaluation dataset: JSONL, one problem per line, addressed by its 0-based line
// index. The question is read from `question`, `problem` or `prompt`; the gold answer from `answer`;
// code problems carry `tests` (and `fn_name` for functional ones). The file's sha256 is recorded so
// a cell refuses to mix results from an edited dataset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace kvdice::eval {

struct Problem {
  int index = 0;
  std::string id;        // the line's `id` field when present, else the index
  std::string question;  // as given; the task adds its suffix
  std::string answer;    // gold answer as text (numbers are written back as they appear)
  Json raw;              // the whole line (tests, choices, metadata)
};

struct Dataset {
  std::filesystem::path path;
  std::string sha256;
  std::vector<Problem> problems;
};

// The largest dataset file read (the largest benchmark sets are a few MB; a code set with tests tens).
inline constexpr uint64_t kMaxDatasetBytes = uint64_t{1} << 30;

// Error naming the file and line on a syntax error, a duplicate key, a missing question or (when
// `need_answer`) a missing answer; the file must be a regular file of at most kMaxDatasetBytes.
Dataset load_dataset(const std::filesystem::path& path, bool need_answer);
// The same over bytes already read (`path` names them in errors and is recorded).
Dataset parse_dataset(std::string_view bytes, const std::filesystem::path& path, bool need_answer);

}  // namespace kvdice::eval
