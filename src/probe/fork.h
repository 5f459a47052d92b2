// `kvdice probe fork`: fork replay (docs/mechanism.md). A recorded trace (a `generate --json` record or
// an `eval run` record) is replayed with its policy live: its first K generated tokens are teacher-forced
// one decode step each (the eviction rounds run exactly as they did while it was decoded), then the
// sequence samples on from there, R repetitions with seeds seed, seed + 1, ..., in two arms: `control`,
// the policy as recorded, and `pinned`, the same draw with a span of absolute positions kept in every
// (layer, KV head) site (random_pin_pp). Each completion is graded with the trace's grader, and next to
// the outcome stands the span's survival at the fork: the analytic probability from the policy's keep
// rule and what the control arm's heads actually held.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/json.h"
#include "engine/model_bundle.h"
#include "engine/sampler.h"
#include "eval/dataset.h"
#include "eval/task.h"
#include "kv/budget.h"
#include "kv/pool_sizing.h"

namespace kvdice::probe {

// A trace and what replaying it needs: the settings it was decoded under and how to grade it.
struct ForkTrace {
  std::string source;  // what it was read from, for reports
  std::vector<int> prompt;
  std::vector<int> generated;  // as recorded (a final stop id included)
  std::string policy = "random_pp";
  kv::BudgetSpec budget;
  uint64_t eviction_seed = 0;
  uint64_t stream_id = 0;  // its eviction and sampling streams
  engine::SamplingParams sampling;
  std::vector<int> stop_ids;
  int max_generated = 0;  // the record's cap on generated tokens (0: unknown)
  // Grading: the task's grader and the problem's gold answer (tests for code); none: ungraded.
  std::optional<eval::TaskSpec> task;
  std::optional<eval::Problem> problem;
};

// One record of `kvdice generate --json` (an object, or element `index` of an array). The record carries
// the token ids only: policy, budget, seeds and sampling are the caller's to set (generate's flags), and
// its stream id is the record's engine id, as generate assigned it.
ForkTrace load_generate_trace(const std::filesystem::path& path, int index);

// Record (problem, run) of an `eval run` cell: the prompt is rebuilt from the dataset as the runner built
// it (and must have the recorded length), every setting comes from the cell's manifest. `dataset`
// overrides the manifest's path (its sha256 must still match).
ForkTrace load_eval_trace(const engine::ModelBundle& bundle, const std::filesystem::path& results_root,
                          const std::string& cell, int problem, int run, const std::filesystem::path& dataset);

struct ForkConfig {
  int fork_at = 0;                   // K: generated tokens forced before the first sampled one (>= 1)
  std::pair<int32_t, int32_t> span;  // [lo, hi) absolute positions pinned in the `pinned` arm
  int repetitions = 4;               // R per arm
  int max_new_tokens = 0;            // sampled after the fork; 0: the trace's cap (else its length) less K
  int max_batch = 64;
  kv::PoolRequest pool;
};

// The span's survival at the fork: the rounds that ran before the first sampled token and, for the
// random policies, the probability their keep rule gives.
struct ForkSurvival {
  int rounds = 0;       // rounds before the first sampled token
  int span_rounds = 0;  // of them, rounds in which some span token was an eviction candidate
  bool analytic = false;
  std::string rule;            // why there is no analytic value, or the rule used
  double token_per_head = 1.0;  // the oldest span token, one head: product of kept/candidates
  double span_per_head = 1.0;   // every span token in one head (draws without replacement)
  double token_union = 1.0;     // at least one of H heads: 1 - (1 - s)^H (s itself under shared draws)
  double span_union = 1.0;
  int heads = 0;
};

struct ForkArmResult {
  std::string arm, policy;
  std::vector<std::vector<int>> continuations;  // sampled tokens after the fork, per repetition
  std::vector<double> scores;                   // graded, per repetition (empty when ungraded)
  std::vector<std::string> extracted;
  std::vector<std::string> finish;
  double sites_holding = 0.0;   // share of (layer, head) sites holding the whole span at the fork
  double layers_holding = 0.0;  // share of layers with at least one such head
};

struct ForkReport {
  int fork_position = 0;  // absolute position of the last forced token (appended in the first sampled step)
  std::string span_text, fork_text, recorded_next;  // the span; the forced text's end; what the trace wrote next
  ForkSurvival survival;
  std::optional<double> trace_score;  // the recorded trace's own grade
  std::string trace_extracted;
  std::vector<ForkArmResult> arms;  // control, pinned
};

// Every check that needs no model: the fork point within the trace, the span before the fork, counts.
void validate_fork(const ForkTrace& trace, const ForkConfig& config);

// The analytic survival of `span` over the rounds before the fork, from the budget, the prompt and the
// policy's keep rule (random_pp, random, random_shared; others have none).
ForkSurvival fork_survival(const ForkTrace& trace, const ForkConfig& config, int kv_heads);

ForkReport run_fork_probe(const engine::ModelBundle& bundle, backend::Backend& backend, const ForkTrace& trace,
                          const ForkConfig& config);

std::string fork_results_markdown(const ForkTrace& trace, const ForkConfig& config, const ForkReport& report);
Json fork_results_json(const ForkTrace& trace, const ForkConfig& config, const ForkReport& report);

// The generated tokens that cover an occurrence of `text` in the trace's generated text (each token decoded
// alone, concatenated): the first occurrence, or with `last` the last one. Returns their generated-token
// indices [first, end); Error naming `flag` when the text does not occur.
std::pair<int, int> find_generated_text(const engine::ModelBundle& bundle, const ForkTrace& trace,
                                        const std::string& text, bool last, const std::string& flag);

// The text of absolute positions [lo, hi) of prompt + generated.
std::string trace_text(const engine::ModelBundle& bundle, const ForkTrace& trace, int lo, int hi);

// "LO-HI" (half-open, absolute positions); Error naming the flag otherwise.
std::pair<int32_t, int32_t> parse_span(const std::string& text);

}  // namespace kvdice::probe
