// The budget arithmetic kvdice bench checks the engine against, written out here from docs/reference.md §1
// rather than taken from kv::BudgetSpec or the engine's counters: which budget convention maps to which
// engine budget, how many eviction rounds a sequence of a given prompt and output length must see, and
// the resident length every decode step attends over (for the bytes a step reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/budget.h"

namespace kvdice::bench {

// How the user's --budget T and --window r are read.
// reference: the reference code's rule (docs/reference.md §1): T is the cache length right after a round and
//   counts the protected prompt and the window r; rounds fire every r decode tokens once len > T.
// vllm: the vLLM port's (TriAttention runtime): T (TRIATTN_RUNTIME_KV_BUDGET) counts the prompt and the
//   recency window, compaction returns each request to exactly T, and it fires every `r`
//   (DIVIDE_LENGTH, 64 in the paper's tables) tokens past T. Mapped to the engine as T, r = cadence;
//   the port's 128-token always-kept window (WINDOW_SIZE) narrows to r in the selection, which changes
//   which slots survive but not the resident lengths, the rounds or the bytes a step reads.
struct BudgetConvention {
  std::string name;         // "reference" or "vllm"
  std::string description;  // one line for the report
  kv::BudgetSpec engine;    // what the engine runs (budget 0 = unbounded, for full attention)
};
BudgetConvention map_budget(const std::string& convention, int budget, int window, bool policy_evicts);

// What a sequence of `prompt` tokens generating `output` tokens goes through under (T, r): the engine
// prefills the prompt (no trigger), samples the first token from the prefill, then runs output - 1
// decode steps, each appending one slot, attending, then evicting down to T when len > T and
// len % r == 0. T = 0: never.
struct SequencePlan {
  int rounds = 0;
  int peak_resident = 0;       // most slots resident at once
  int final_resident = 0;      // after the last step
  int64_t attended_slots = 0;  // sum over the decode steps of the slots each attends over
};
SequencePlan plan_sequence(int prompt, int output, int budget, int window);
// The same count in closed form (a cross-check of plan_sequence in the tests).
int predicted_rounds_closed_form(int prompt, int output, int budget, int window);

}  // namespace kvdice::bench
