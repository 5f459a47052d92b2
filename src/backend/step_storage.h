// StepStorage: a StepBatch's arrays in backend memory plus their host mirror. The host fills the
// mirror (all of it for a prefill batch; one sequence's fields at admission or retirement for the
// persistent decode batch), uploads what changed, and reads back only the per-sequence outputs
// (sampled tokens, forced-token scores).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kvdice::backend {

class StepStorage {
 public:
  StepStorage(Backend& backend, int max_seqs, int max_rows, int max_pages);

  // The host mirror; its pointers refer to host vectors. Set n_seqs / n_rows / max_rows_per_seq here.
  StepBatch& host() { return host_; }
  // The same batch in backend memory (counts copied from the host mirror). A self-feeding batch (the
  // persistent decode batch: one row per sequence) samples straight into its input tokens.
  StepBatch device(bool self_feeding = false) const;

  // Copies the mirror's first n_seqs sequences and n_rows rows to the backend.
  void upload_all();
  // Copies sequence s's fields (not its rows) to the backend.
  void upload_seq(int s);
  // Copies the tokens of rows [begin, begin + n) to the backend.
  void upload_rows(int begin, int n);
  // Copies the forced tokens of the first n_seqs sequences to the backend (teacher forcing).
  void upload_forced();
  // Reads next_token (and the forced-token scores) of the first n_seqs sequences into the mirror;
  // a self-feeding batch's sampled tokens are in its token rows.
  void download_outputs(bool forced_scores, bool self_feeding = false);
  // Copies the sampled tokens of the first n_seqs sequences into host ring slot `slot` (0 or 1) as a
  // backend op (a decode step's graph records it): once a backend.mark() ticket taken after it has
  // been waited for, ring_tokens(slot) holds them, while later steps may already run. The decode step
  // reads its tokens this way, one step late.
  void publish_tokens(int slot, bool self_feeding);
  const int32_t* ring_tokens(int slot) const;

 private:
  template <class F>
  void for_each_seq_array(F&& f);

  Backend& backend_;
  int max_seqs_, max_rows_, max_pages_;
  Buffer buffer_;
  Buffer ring_;  // [2][max_seqs] sampled tokens, host memory the backend copies into without waiting
  StepBatch host_, device_;
  std::vector<int32_t> h_tokens_, h_row_seq_, h_seq_row_begin_, h_length_, h_appended_, h_page_table_,
      h_budget_, h_window_, h_n_protected_, h_policy_id_, h_round_, h_ring_row_, h_top_k_, h_gen_step_,
      h_forced_, h_next_token_;
  std::vector<PhiloxKey> h_evict_key_, h_sample_key_;
  std::vector<float> h_temperature_, h_top_p_, h_forced_logprob_;
  std::vector<uint8_t> h_forced_is_argmax_;
};

}  // namespace kvdice::backend
