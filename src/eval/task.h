// A task: how problems become prompts, how completions are graded, and the protocol defaults of
// docs/reference.md §3 (runs per problem R, budget T, sampling, maximum length). Presets for the paper's
// benchmarks, or a task definition file (JSON) for anything else.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvdice::eval {

enum class GraderKind { Math, Choice, Code };
std::string_view grader_name(GraderKind kind);
GraderKind grader_from_name(std::string_view name, const std::string& where);

// Runs per problem: the paper's largest R is 64; a cell of 4096 runs per problem is already days of decoding.
inline constexpr int kMaxRuns = 4096;
// Token lengths a task may ask for (max_length, budget, window): far above any context in use.
inline constexpr int kMaxTaskTokens = 1 << 24;

struct TaskSpec {
  std::string name;
  GraderKind grader = GraderKind::Math;
  std::string prompt_suffix;  // appended to the question
  bool chat = true;           // one user message through the model's chat template
  bool thinking = true;       // Qwen3 thinking on
  std::string system;         // system message, empty = none
  int runs = 1;               // R completions per problem
  int budget = 1024;          // T for evicting policies
  int window = 64;            // r
  int max_length = 32768;     // prompt + generated tokens
  // Sampling temperature; unset = the model family's default (0.8 for Phi-4, 0.6 otherwise).
  std::optional<float> temperature;
  float top_p = 0.95f;
  int top_k = 0;
  int choices = 4;  // multiple choice: valid letters are the first `choices` of A..Z

  Json to_json() const;
  void validate(const std::string& where) const;
};

std::vector<std::string> task_preset_names();
// A preset name (math500, aime, hmmt, gpqa, livecodebench) or the path of a task file (JSON with
// the fields of TaskSpec; `name` and `grader` required). Error naming the problem otherwise.
TaskSpec load_task(const std::string& name_or_path);
TaskSpec task_from_json(const Json& json, const std::string& where);

}  // namespace kvdice::eval
