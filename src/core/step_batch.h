// StepBatch: the arrays one forward step runs on, as a struct of arrays in backend memory (device
// memory on CUDA). Sequences ("seqs") are the batch's rows in the scheduler's sense; each owns the
// contiguous token rows [seq_row_begin[s], seq_row_begin[s + 1]) of this step (one row per sequence in
// a decode step, the prompt chunk in a prefill). The decode batch is persistent: the host writes a
// sequence's fields only at admission and retirement, and the ops themselves advance lengths,
// positions, sampled tokens and round counters, so a decode step needs no host data (backend/step_storage.h
// owns the memory and the host mirror). It lives in core, below the policies, because their device
// selections read it as much as the backend's ops do.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace kvdice::backend {

struct StepBatch {
  int n_seqs = 0;
  int n_rows = 0;
  int max_rows_per_seq = 0;  // 1 for a decode step
  int max_pages = 0;         // columns of page_table

  // per row [n_rows]
  int32_t* tokens = nullptr;   // input token ids (a decode batch's sample() writes them: next_token)
  int32_t* row_seq = nullptr;  // sequence of each row
  // per sequence [n_seqs] (+1 for seq_row_begin)
  int32_t* seq_row_begin = nullptr;
  int32_t* length = nullptr;      // resident slots per (layer, KV head) before this step's rows
  int32_t* appended = nullptr;    // tokens ever appended = absolute position of the first new row
  int32_t* page_table = nullptr;  // [n_seqs][max_pages] pool page ids
  // eviction (per sequence: its own budget, policy and stream)
  int32_t* budget = nullptr;       // T (0 = never evicts)
  int32_t* window = nullptr;       // r
  int32_t* n_protected = nullptr;  // pl: prompt slots never evicted (0 when unprotected)
  int32_t* policy_id = nullptr;    // index of the sequence's policy in the engine's policy list
  int32_t* round = nullptr;        // rounds done so far
  int32_t* ring_row = nullptr;     // the sequence's row of the KV pool's query ring; -1 = records no queries
  PhiloxKey* evict_key = nullptr;  // (seed, stream id) in the eviction domain
  // sampling
  PhiloxKey* sample_key = nullptr;  // (seed, stream id) in the sampling domain
  float* temperature = nullptr;     // 0 = greedy
  float* top_p = nullptr;
  int32_t* top_k = nullptr;         // 0 = off
  int32_t* gen_step = nullptr;      // tokens sampled so far (the sampling counter)
  int32_t* forced = nullptr;        // teacher forcing: token to take instead of sampling, -1 = sample
  int32_t* next_token = nullptr;    // sample() output (== tokens in a decode batch)
  float* forced_logprob = nullptr;  // log p(forced token) under the step's logits
  uint8_t* forced_is_argmax = nullptr;
};

}  // namespace kvdice::backend
