#include "core/step_row.h"

#include <algorithm>

#include "core/error.h"

namespace kvdice::backend {

int write_row(StepBatch& b, int s, int first_row, const SeqRow& row) {
  const int n = static_cast<int>(row.tokens.size());
  KVDICE_CHECK(n >= 1, "step row {} has no input token", s);
  KVDICE_CHECK(static_cast<int64_t>(row.pages.size()) <= b.max_pages, "step row {} holds {} pages, a row {}", s,
               row.pages.size(), b.max_pages);
  std::copy(row.tokens.begin(), row.tokens.end(), b.tokens + first_row);
  std::fill_n(b.row_seq + first_row, n, s);
  b.seq_row_begin[s] = first_row;
  b.seq_row_begin[s + 1] = first_row + n;
  b.length[s] = row.length;
  b.appended[s] = static_cast<int32_t>(row.appended);
  int32_t* page_table = b.page_table + int64_t{s} * b.max_pages;
  std::fill_n(page_table, b.max_pages, 0);
  std::copy(row.pages.begin(), row.pages.end(), page_table);
  b.budget[s] = row.budget;
  b.window[s] = row.window;
  b.n_protected[s] = row.n_protected;
  b.policy_id[s] = row.policy_id;
  b.round[s] = row.round;
  b.ring_row[s] = row.ring_row;
  b.evict_key[s] = row.evict_key;
  b.sample_key[s] = row.sample_key;
  b.temperature[s] = row.temperature;
  b.top_p[s] = row.top_p;
  b.top_k[s] = row.top_k;
  b.gen_step[s] = row.gen_step;
  b.forced[s] = row.forced;
  return n;
}

}  // namespace kvdice::backend
