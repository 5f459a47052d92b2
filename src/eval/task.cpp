#include "eval/task.h"

#include <filesystem>

#include "core/error.h"
#include "engine/sampler.h"

namespace kvdice::eval {
namespace {

constexpr const char* kMathSuffix =
    "\nPlease reason step by step, and put your final answer within \\boxed{}.";

TaskSpec preset(const std::string& name, GraderKind grader, int runs, int budget, const std::string& suffix) {
  TaskSpec t;
  t.name = name;
  t.grader = grader;
  t.runs = runs;
  t.budget = budget;
  t.prompt_suffix = suffix;
  return t;
}

}  // namespace

std::string_view grader_name(GraderKind kind) {
  switch (kind) {
    case GraderKind::Math:
      return "math";
    case GraderKind::Choice:
      return "choice";
    case GraderKind::Code:
      return "code";
  }
  return "?";
}

GraderKind grader_from_name(std::string_view name, const std::string& where) {
  if (name == "math") return GraderKind::Math;
  if (name == "choice") return GraderKind::Choice;
  if (name == "code") return GraderKind::Code;
  fail("{}: unknown grader '{}' (expected math, choice or code)", where, name);
}

std::vector<std::string> task_preset_names() { return {"math500", "aime", "hmmt", "gpqa", "livecodebench"}; }

Json TaskSpec::to_json() const {
  Json j{{"name", name},
         {"grader", grader_name(grader)},
         {"prompt_suffix", prompt_suffix},
         {"chat", chat},
         {"thinking", thinking},
         {"system", system},
         {"runs", runs},
         {"budget", budget},
         {"window", window},
         {"max_length", max_length},
         {"top_p", top_p},
         {"top_k", top_k},
         {"choices", choices}};
  j["temperature"] = temperature ? Json(*temperature) : Json(nullptr);
  return j;
}

void TaskSpec::validate(const std::string& where) const {
  if (name.empty()) fail("{}: task needs a name", where);
  if (runs < 1 || runs > kMaxRuns) fail("{}: runs must be in [1, {}] (got {})", where, kMaxRuns, runs);
  if (max_length < 2 || max_length > kMaxTaskTokens)
    fail("{}: max_length must be in [2, {}] (got {})", where, kMaxTaskTokens, max_length);
  if (budget < 1 || budget > kMaxTaskTokens)
    fail("{}: budget must be in [1, {}] (got {})", where, kMaxTaskTokens, budget);
  if (window < 1 || window > kMaxTaskTokens)
    fail("{}: window must be in [1, {}] (got {})", where, kMaxTaskTokens, window);
  if (top_k < 0) fail("{}: top_k must be >= 0 (got {})", where, top_k);
  if (choices < 2 || choices > 26) fail("{}: choices must be in [2, 26] (got {})", where, choices);
  if (const std::string problem = engine::top_p_problem(top_p); !problem.empty())
    fail("{}: top_p {}", where, problem);
  if (temperature) {
    if (const std::string problem = engine::temperature_problem(*temperature); !problem.empty())
      fail("{}: temperature {}", where, problem);
  }
}

TaskSpec task_from_json(const Json& json, const std::string& where) {
  if (!json.is_object()) fail("{}: a task definition is a JSON object", where);
  static const std::vector<std::string> known = {
      "name",   "grader", "prompt_suffix", "chat",        "thinking", "system", "runs",
      "budget", "window", "max_length",    "temperature", "top_p",    "top_k",  "choices"};
  for (const auto& [key, value] : json.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      fail("{}: unknown task field '{}' (known: {})", where, key, fmt::format("{}", fmt::join(known, ", ")));
  }
  TaskSpec t;
  t.name = json_require<std::string>(json, "name", where);
  t.grader = grader_from_name(json_require<std::string>(json, "grader", where), where);
  t.prompt_suffix = json_get_or<std::string>(json, "prompt_suffix", "", where);
  t.chat = json_get_or<bool>(json, "chat", true, where);
  t.thinking = json_get_or<bool>(json, "thinking", true, where);
  t.system = json_get_or<std::string>(json, "system", "", where);
  t.runs = json_get_or<int>(json, "runs", 1, where);
  t.budget = json_get_or<int>(json, "budget", 1024, where);
  t.window = json_get_or<int>(json, "window", 64, where);
  t.max_length = json_get_or<int>(json, "max_length", 32768, where);
  if (json.contains("temperature") && !json["temperature"].is_null())
    t.temperature = json_require<float>(json, "temperature", where);
  t.top_p = json_get_or<float>(json, "top_p", 0.95f, where);
  t.top_k = json_get_or<int>(json, "top_k", 0, where);
  t.choices = json_get_or<int>(json, "choices", 4, where);
  t.validate(where);
  return t;
}

TaskSpec load_task(const std::string& name_or_path) {
  if (name_or_path == "math500") return preset("math500", GraderKind::Math, 2, 1024, kMathSuffix);
  if (name_or_path == "aime") return preset("aime", GraderKind::Math, 16, 4096, kMathSuffix);
  if (name_or_path == "hmmt") return preset("hmmt", GraderKind::Math, 16, 4096, kMathSuffix);
  if (name_or_path == "gpqa") return preset("gpqa", GraderKind::Choice, 4, 2048, "");
  if (name_or_path == "livecodebench") return preset("livecodebench", GraderKind::Code, 4, 3072, "");
  if (!std::filesystem::exists(name_or_path))
    fail("--task '{}' is neither a preset ({}) nor a task file", name_or_path,
         fmt::format("{}", fmt::join(task_preset_names(), ", ")));
  return task_from_json(read_json_file(name_or_path), name_or_path);
}

}  // namespace kvdice::eval
