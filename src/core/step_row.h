// The one writer of step-batch rows: a sequence's row as every step's author fills it (the engine's
// scheduler for decode rows and prefill chunks, a standalone forward, calibration, the eviction
// benchmark), so a field added to StepBatch is written in one place.
#pragma once

#include <cstdint>
#include <span>

#include "core/philox.h"
#include "core/step_batch.h"

namespace kvdice::backend {

// One sequence of a step, before the step. The defaults are a sequence that never evicts, records no
// queries and samples greedily (the StepStorage's initial values).
struct SeqRow {
  std::span<const int32_t> tokens;  // this step's input tokens, one row each
  int length = 0;                   // resident slots per (layer, KV head)
  int64_t appended = 0;             // tokens ever appended = the position of the first new row
  std::span<const int32_t> pages;   // its pool pages in slot order (at most b.max_pages)
  // eviction
  int budget = 0;  // T (0 = never evicts)
  int window = 0;  // r (also the query ring's modulus)
  int n_protected = 0;
  int policy_id = 0;
  int round = 0;
  int ring_row = -1;
  PhiloxKey evict_key{};
  // sampling
  PhiloxKey sample_key{};
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  int gen_step = 0;
  int forced = -1;  // teacher forcing: the token taken instead of sampling (-1 = sample)
};

// Writes `row` as sequence s of `b` and its tokens as rows [first_row, first_row + tokens.size()) (the
// page table's unused columns zeroed); seq_row_begin[s + 1] ends its rows. Returns the rows written. The
// step's counts (n_seqs, n_rows, max_rows_per_seq) are the caller's.
int write_row(StepBatch& b, int s, int first_row, const SeqRow& row);

}  // namespace kvdice::backend
