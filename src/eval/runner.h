// `eval run`: decodes one cell (model, task, policy with its parameters, budget) for R runs per
// problem as one continuous batch, committing each (problem, run) record as it finishes. A cell
// that already exists must have the identical manifest; only its missing records are decoded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "kv/pool_sizing.h"
#include "core/json.h"
#include "eval/shard.h"
#include "eval/task.h"

namespace kvdice::eval {

struct EvalRunOptions {
  std::filesystem::path results_root;
  std::string cell;  // empty: <model>.<task>.<policy>[.T<budget>]
  std::string model_argument;
  std::filesystem::path model_path;  // resolved
  TaskSpec task;
  std::filesystem::path dataset;
  std::string policy = "random_pp";
  std::optional<int> budget;  // overrides the task's T
  std::optional<int> window;
  std::string long_prompt = "warn";
  uint64_t seed = 0;
  std::optional<int> runs;
  std::optional<int> max_length;
  std::optional<int> max_new_tokens;  // cap on generated tokens (below max_length - prompt)
  std::optional<float> temperature;
  std::optional<float> top_p;
  int limit = 0;  // first N problems only (0 = all)
  std::string backend = "auto";
  int threads = 0;
  int max_batch = 64;
  kv::PoolRequest pool;   // the engine's KV pool size (kv/pool_sizing.h)
  bool progress = false;  // a live progress line on stderr
  ShardSpec shard;        // decode only this shard's (problem, run) pairs; not part of the manifest
  // When set, the retention log of the sequences decoded now (docs/mechanism.md); not part of the manifest.
  std::filesystem::path retention_log;
  // Asked between steps; when it returns true the run stops with an Error (what was committed stays,
  // and running the cell again resumes it). Python's Ctrl-C comes in here.
  std::function<bool()> interrupted;
};

struct EvalRunSummary {
  std::string cell;
  std::string shard;  // "i/N", empty for the whole cell
  int total = 0;      // problems * runs (of this shard)
  int skipped = 0;    // already recorded before this run
  int completed = 0;  // recorded by this run
  int64_t generated_tokens = 0;
  double seconds = 0.0;       // decoding (the step loop)
  std::string run_id;         // this invocation's row in the results database's runs table
  double wall_seconds = 0.0;  // the whole invocation, as recorded in its run row
  int long_prompts = 0;       // submitted prompts of T - r tokens or more (one warning says how many)
};

using EvalLog = std::function<void(const std::string& line)>;

EvalRunSummary run_eval(const EvalRunOptions& options, const EvalLog& log);

// "a.b: x -> y" lines for every leaf that differs between two manifests.
std::vector<std::string> manifest_differences(const Json& stored, const Json& requested);

}  // namespace kvdice::eval
