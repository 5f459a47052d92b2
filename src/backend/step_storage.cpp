#include "backend/step_storage.h"

#include "core/error.h"

namespace kvdice::backend {

StepStorage::StepStorage(Backend& backend, int max_seqs, int max_rows, int max_pages)
    : backend_(backend), max_seqs_(max_seqs), max_rows_(max_rows), max_pages_(max_pages) {
  if (max_seqs < 1 || max_rows < max_seqs || max_pages < 1)
    fail("step batch sizes must satisfy 1 <= sequences <= rows and pages >= 1 (got {}, {}, {})", max_seqs,
         max_rows, max_pages);
  const size_t seqs = static_cast<size_t>(max_seqs), rows = static_cast<size_t>(max_rows);
  for (auto* v : {&h_length_, &h_appended_, &h_budget_, &h_window_, &h_n_protected_, &h_policy_id_, &h_round_,
                  &h_top_k_, &h_gen_step_, &h_forced_, &h_next_token_})
    v->assign(seqs, 0);
  h_tokens_.assign(rows, 0);
  h_row_seq_.assign(rows, 0);
  h_seq_row_begin_.assign(seqs + 1, 0);
  h_page_table_.assign(seqs * static_cast<size_t>(max_pages), 0);
  h_evict_key_.assign(seqs, PhiloxKey{0, 0});
  h_sample_key_.assign(seqs, PhiloxKey{0, 0});
  h_temperature_.assign(seqs, 0.0f);
  h_top_p_.assign(seqs, 1.0f);
  h_forced_logprob_.assign(seqs, 0.0f);
  h_forced_is_argmax_.assign(seqs, 0);
  h_forced_.assign(seqs, -1);
  h_ring_row_.assign(seqs, -1);

  ring_ = backend_.alloc_host(2 * seqs * sizeof(int32_t), "the sampled-token ring");
  host_.max_pages = device_.max_pages = max_pages;
  host_.tokens = h_tokens_.data();
  host_.row_seq = h_row_seq_.data();
  host_.seq_row_begin = h_seq_row_begin_.data();
  host_.length = h_length_.data();
  host_.appended = h_appended_.data();
  host_.page_table = h_page_table_.data();
  host_.budget = h_budget_.data();
  host_.window = h_window_.data();
  host_.n_protected = h_n_protected_.data();
  host_.policy_id = h_policy_id_.data();
  host_.round = h_round_.data();
  host_.ring_row = h_ring_row_.data();
  host_.evict_key = h_evict_key_.data();
  host_.sample_key = h_sample_key_.data();
  host_.temperature = h_temperature_.data();
  host_.top_p = h_top_p_.data();
  host_.top_k = h_top_k_.data();
  host_.gen_step = h_gen_step_.data();
  host_.forced = h_forced_.data();
  host_.next_token = h_next_token_.data();
  host_.forced_logprob = h_forced_logprob_.data();
  host_.forced_is_argmax = h_forced_is_argmax_.data();

  auto plan = [&](Buffer::Carver& c) {
    StepBatch d;
    d.max_pages = max_pages;
    d.tokens = c.array<int32_t>(max_rows);
    d.row_seq = c.array<int32_t>(max_rows);
    d.seq_row_begin = c.array<int32_t>(max_seqs + 1);
    d.length = c.array<int32_t>(max_seqs);
    d.appended = c.array<int32_t>(max_seqs);
    d.page_table = c.array<int32_t>(int64_t{max_seqs} * max_pages);
    d.budget = c.array<int32_t>(max_seqs);
    d.window = c.array<int32_t>(max_seqs);
    d.n_protected = c.array<int32_t>(max_seqs);
    d.policy_id = c.array<int32_t>(max_seqs);
    d.round = c.array<int32_t>(max_seqs);
    d.ring_row = c.array<int32_t>(max_seqs);
    d.evict_key = c.array<PhiloxKey>(max_seqs);
    d.sample_key = c.array<PhiloxKey>(max_seqs);
    d.temperature = c.array<float>(max_seqs);
    d.top_p = c.array<float>(max_seqs);
    d.top_k = c.array<int32_t>(max_seqs);
    d.gen_step = c.array<int32_t>(max_seqs);
    d.forced = c.array<int32_t>(max_seqs);
    d.next_token = c.array<int32_t>(max_seqs);
    d.forced_logprob = c.array<float>(max_seqs);
    d.forced_is_argmax = c.array<uint8_t>(max_seqs);
    return d;
  };
  Buffer::Carver measure(size_t{0});
  plan(measure);
  buffer_ = backend.alloc(measure.used(), "step batch");
  Buffer::Carver carver(buffer_);
  device_ = plan(carver);
  upload_all();
}

StepBatch StepStorage::device(bool self_feeding) const {
  StepBatch d = device_;
  if (self_feeding) d.next_token = d.tokens;
  d.n_seqs = host_.n_seqs;
  d.n_rows = host_.n_rows;
  d.max_rows_per_seq = host_.max_rows_per_seq;
  return d;
}

template <class F>
void StepStorage::for_each_seq_array(F&& f) {
  f(host_.length, device_.length);
  f(host_.appended, device_.appended);
  f(host_.budget, device_.budget);
  f(host_.window, device_.window);
  f(host_.n_protected, device_.n_protected);
  f(host_.policy_id, device_.policy_id);
  f(host_.round, device_.round);
  f(host_.ring_row, device_.ring_row);
  f(host_.evict_key, device_.evict_key);
  f(host_.sample_key, device_.sample_key);
  f(host_.temperature, device_.temperature);
  f(host_.top_p, device_.top_p);
  f(host_.top_k, device_.top_k);
  f(host_.gen_step, device_.gen_step);
  f(host_.forced, device_.forced);
  f(host_.next_token, device_.next_token);
}

void StepStorage::upload_all() {
  const int seqs = std::max(host_.n_seqs, 0), rows = std::max(host_.n_rows, 0);
  KVDICE_CHECK(seqs <= max_seqs_ && rows <= max_rows_, "batch of {} sequences / {} rows exceeds {} / {}",
               seqs, rows, max_seqs_, max_rows_);
  for_each_seq_array(
      [&](auto* h, auto* d) { backend_.upload(d, h, sizeof(*h) * static_cast<size_t>(seqs)); });
  backend_.upload(device_.seq_row_begin, host_.seq_row_begin,
                  sizeof(int32_t) * static_cast<size_t>(seqs + 1));
  backend_.upload(device_.page_table, host_.page_table,
                  sizeof(int32_t) * static_cast<size_t>(seqs) * max_pages_);
  backend_.upload(device_.tokens, host_.tokens, sizeof(int32_t) * static_cast<size_t>(rows));
  backend_.upload(device_.row_seq, host_.row_seq, sizeof(int32_t) * static_cast<size_t>(rows));
}

void StepStorage::upload_seq(int s) {
  KVDICE_CHECK(s >= 0 && s < max_seqs_, "sequence {} outside the batch of {}", s, max_seqs_);
  for_each_seq_array([&](auto* h, auto* d) { backend_.upload(d + s, h + s, sizeof(*h)); });
  backend_.upload(device_.seq_row_begin + s, host_.seq_row_begin + s, 2 * sizeof(int32_t));
  backend_.upload(device_.page_table + int64_t{s} * max_pages_, host_.page_table + int64_t{s} * max_pages_,
                  sizeof(int32_t) * static_cast<size_t>(max_pages_));
}

void StepStorage::upload_rows(int begin, int n) {
  KVDICE_CHECK(begin >= 0 && n >= 0 && begin + n <= max_rows_, "rows [{}, {}) outside {}", begin, begin + n,
               max_rows_);
  backend_.upload(device_.tokens + begin, host_.tokens + begin, sizeof(int32_t) * static_cast<size_t>(n));
  backend_.upload(device_.row_seq + begin, host_.row_seq + begin, sizeof(int32_t) * static_cast<size_t>(n));
}

void StepStorage::upload_forced() {
  backend_.upload(device_.forced, host_.forced, sizeof(int32_t) * static_cast<size_t>(host_.n_seqs));
}

void StepStorage::download_outputs(bool forced_scores, bool self_feeding) {
  const size_t n = static_cast<size_t>(host_.n_seqs);
  backend_.download(host_.next_token, self_feeding ? device_.tokens : device_.next_token,
                    sizeof(int32_t) * n);
  if (forced_scores) {
    backend_.download(host_.forced_logprob, device_.forced_logprob, sizeof(float) * n);
    backend_.download(host_.forced_is_argmax, device_.forced_is_argmax, n);
  }
}

void StepStorage::publish_tokens(int slot, bool self_feeding) {
  KVDICE_CHECK(slot == 0 || slot == 1, "token ring slot {} (0 or 1)", slot);
  int32_t* dst =
      static_cast<int32_t*>(ring_.data()) + static_cast<size_t>(slot) * static_cast<size_t>(max_seqs_);
  backend_.store_to_host(dst, self_feeding ? device_.tokens : device_.next_token, host_.n_seqs);
}

const int32_t* StepStorage::ring_tokens(int slot) const {
  KVDICE_CHECK(slot == 0 || slot == 1, "token ring slot {} (0 or 1)", slot);
  return static_cast<const int32_t*>(ring_.data()) + static_cast<size_t>(slot) * static_cast<size_t>(max_seqs_);
}

}  // namespace kvdice::backend
