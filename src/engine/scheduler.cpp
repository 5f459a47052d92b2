#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/philox.h"
#include "core/step_row.h"

namespace kvdice::engine {

Scheduler::Scheduler(kv::KvPool& pool, backend::StepStorage& decode_batch, SchedulerLimits limits)
    : pool_(pool), decode_batch_(decode_batch), limits_(limits) {
  // The engine validated its configuration; these hold for any scheduler.
  KVDICE_CHECK(limits_.max_batch >= 1 && limits_.prefill_chunk >= 1 && limits_.kv_slot_limit >= 0,
               "scheduler limits: max batch {}, prefill chunk {}, slot limit {}", limits_.max_batch,
               limits_.prefill_chunk, limits_.kv_slot_limit);
}

int64_t Scheduler::sequences_that_fit(int64_t reservation_slots) const {
  const int64_t n =
      kv::sequences_that_fit(pool_.n_pages(), pool_.page_slots(), limits_.kv_slot_limit, reservation_slots);
  // Under the default policy a sequence reading window queries also needs a ring row.
  return pool_.query_ring().rows > 0 ? std::min<int64_t>(n, pool_.query_ring().rows) : n;
}

bool Scheduler::fits_when_idle(int64_t slots, bool ring_row, int n) const {
  return n <= limits_.max_batch && pool_.pages_for(slots) * n <= pool_.n_pages() &&
         (limits_.kv_slot_limit == 0 || slots * n <= limits_.kv_slot_limit) &&
         (!ring_row || n <= pool_.query_ring().rows);
}

bool Scheduler::fits_now(int64_t slots, bool ring_row, int n) const {
  // What the waiting sequences (and a chunking prompt's row) will take first: no overtaking.
  int64_t rows = running() + (chunking_ ? 1 : 0), pages = 0, reserved = reserved_slots_, ring_rows = 0;
  for (const auto& seq : waiting_) {
    rows += 1;
    pages += pool_.pages_for(seq->stats.reserved_slots);
    reserved += seq->stats.reserved_slots;
    ring_rows += seq->reads_queries ? 1 : 0;
  }
  // Admission only takes, so the whole line fits exactly when each of its prefixes does.
  return rows + n <= limits_.max_batch && pages + pool_.pages_for(slots) * n <= pool_.free_pages() &&
         (limits_.kv_slot_limit == 0 || reserved + slots * n <= limits_.kv_slot_limit) &&
         ring_rows + (ring_row ? n : 0) <= pool_.free_ring_rows();
}

uint64_t Scheduler::submit(std::unique_ptr<Sequence> seq) {
  seq->id = next_id_++;
  seq->stream_id = seq->request.stream_id.value_or(seq->id);
  const uint64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  return id;
}

bool Scheduler::cancel(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    (*it)->finish = FinishReason::Cancelled;
    finish(**it);
    waiting_.erase(it);
    return true;
  }
  for (auto& seq : running_) {
    if (seq->id != id || !seq->running()) continue;
    seq->finish = FinishReason::Cancelled;
    return true;
  }
  if (chunking_ && chunking_->id == id && chunking_->running()) {
    chunking_->finish = FinishReason::Cancelled;  // released at its next chunk's turn
    return true;
  }
  return false;
}

bool Scheduler::may_admit() const { return !chunking_ && !waiting_.empty() && running() < limits_.max_batch; }

Admission Scheduler::admit() {
  Admission admitted;
  if (chunking_) return admitted;  // one long prompt at a time: its chunks alternate with decode steps
  int64_t rows = 0;
  while (!waiting_.empty() && running() < limits_.max_batch) {
    Sequence& next = *waiting_.front();
    const int64_t prompt = next.stats.prompt_tokens;
    // One prefill step takes whole prompts up to the chunk size; a longer prompt goes alone, in chunks.
    if (!admitted.batch.empty() && rows + prompt > limits_.prefill_chunk) break;
    if (limits_.kv_slot_limit > 0 && reserved_slots_ + next.stats.reserved_slots > limits_.kv_slot_limit)
      break;
    std::vector<int32_t> pages = pool_.allocate(next.stats.reserved_slots);
    if (pages.empty()) break;  // waits for running sequences to retire; never preempts them
    next.pages = std::move(pages);
    // A policy reading window queries keeps them in a ring row of its own; with every row taken (a
    // pool with fewer rows than max_batch, sequences of smaller budgets) it waits like one short of pages.
    if (next.reads_queries) {
      next.ring_row = pool_.allocate_ring_row();
      if (next.ring_row < 0) {
        pool_.release(next.pages);
        next.pages.clear();
        break;
      }
    }
    reserved_slots_ += next.stats.reserved_slots;
    rows += prompt;
    admitted.batch.push_back(&next);
    if (prompt > limits_.prefill_chunk) {
      // A long prompt stays out of the decode batch until its last chunk.
      chunking_ = std::move(waiting_.front());
      waiting_.pop_front();
      admitted.chunked = true;
      break;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (!admitted.batch.empty()) chunk_turn_ = false;  // a decode step next
  return admitted;
}

void Scheduler::write_admitted(const Admission& admitted) {
  if (admitted.chunked) return;
  const size_t n = admitted.batch.size();
  KVDICE_CHECK(n <= running_.size(), "{} admitted sequences but {} rows", n, running_.size());
  // The admitted sequences took the last rows of the decode batch.
  for (size_t row = running_.size() - n; row < running_.size(); ++row) {
    KVDICE_CHECK(running_[row].get() == admitted.batch[row - (running_.size() - n)],
                 "decode row {} is not the admitted sequence it was given to", row);
    write_decode_row(static_cast<int>(row));
  }
}

Sequence* Scheduler::next_chunk() {
  if (!chunking_) return nullptr;
  chunk_turn_ = false;
  if (chunking_->finish == FinishReason::Cancelled) {  // cancelled between its chunks
    release_kv(*chunking_);
    finish(*chunking_);
    chunking_.reset();
    return nullptr;
  }
  return chunking_.get();
}

void Scheduler::join_chunked() {
  KVDICE_CHECK(chunking_ != nullptr, "no chunked prompt to join the decode batch");
  running_.push_back(std::move(chunking_));
  write_decode_row(running() - 1);
}

bool Scheduler::any_finished() const {
  return std::any_of(running_.begin(), running_.end(), [](const auto& seq) { return !seq->running(); });
}

void Scheduler::retire() {
  for (size_t row = 0; row < running_.size();) {
    Sequence& seq = *running_[row];
    if (seq.running()) {
      ++row;
      continue;
    }
    seq.stats.generated_tokens = static_cast<int>(seq.generated.size());
    seq.stats.final_resident_slots = seq.length;
    release_kv(seq);
    finish(seq);
    // The last row moves into the hole so the decode batch stays dense; only that row is rewritten.
    running_[row] = std::move(running_.back());
    running_.pop_back();
    if (row < running_.size()) write_decode_row(static_cast<int>(row));
  }
}

std::vector<GenerationResult> Scheduler::take_finished() { return std::exchange(finished_, {}); }

void Scheduler::release_kv(Sequence& seq) {
  reserved_slots_ -= seq.stats.reserved_slots;
  pool_.release(seq.pages);
  seq.pages.clear();
  if (seq.ring_row >= 0) pool_.release_ring_row(seq.ring_row);
  seq.ring_row = -1;
}

void Scheduler::finish(Sequence& seq) {
  finished_.push_back({seq.id, std::move(seq.request.prompt), std::move(seq.generated),
                       std::move(seq.forced_logprobs), std::move(seq.forced_is_argmax), seq.finish,
                       seq.stats});
}

int Scheduler::write_row(backend::StepBatch& b, int s, int first_row, const Sequence& seq, RowFields fields,
                         int max_tokens) const {
  b.forced[s] = seq.forced_now();
  if (fields == RowFields::Forced) return 0;
  const std::vector<int>& prompt = seq.request.prompt;
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  backend::SeqRow row;
  if (seq.appended < prompt_len) {
    const int n = static_cast<int>(std::min<int64_t>(max_tokens, prompt_len - seq.appended));
    row.tokens = std::span<const int>(prompt).subspan(static_cast<size_t>(seq.appended), static_cast<size_t>(n));
  } else {
    KVDICE_CHECK(!seq.generated.empty(), "sequence {} has appended its prompt but sampled no token", seq.id);
    row.tokens = std::span<const int>(&seq.generated.back(), 1);
  }
  row.length = seq.length;
  row.appended = seq.appended;
  row.pages = seq.pages;
  row.budget = seq.budget.budget;
  row.window = seq.budget.window;
  row.n_protected = seq.n_protected;
  row.policy_id = seq.policy;
  row.round = seq.stats.eviction_rounds;
  row.ring_row = seq.ring_row;
  row.evict_key = philox_key(limits_.eviction_seed, seq.stream_id, RngDomain::Eviction);
  row.sample_key = philox_key(seq.request.sampling.seed, seq.stream_id, RngDomain::Sampling);
  row.temperature = seq.request.sampling.temperature;
  row.top_p = seq.request.sampling.top_p;
  row.top_k = seq.request.sampling.top_k;
  row.gen_step = static_cast<int>(seq.generated.size());
  row.forced = seq.forced_now();
  return backend::write_row(b, s, first_row, row);
}

bool Scheduler::write_prefill(backend::StepBatch& b, const std::vector<Sequence*>& batch) const {
  const int n = static_cast<int>(batch.size());
  b.n_seqs = n;
  b.max_rows_per_seq = 0;
  bool last = true;
  int row = 0;
  for (int s = 0; s < n; ++s) {
    const Sequence& seq = *batch[static_cast<size_t>(s)];
    const int rows = write_row(b, s, row, seq, RowFields::All, limits_.prefill_chunk);
    last = last && seq.appended + rows == static_cast<int64_t>(seq.request.prompt.size());
    b.max_rows_per_seq = std::max(b.max_rows_per_seq, rows);
    row += rows;
  }
  b.seq_row_begin[n] = row;
  b.n_rows = row;
  return last;
}

void Scheduler::write_decode_step(bool upload_forced) {
  backend::StepBatch& b = decode_batch_.host();
  const int n = running();
  b.n_seqs = b.n_rows = n;
  b.max_rows_per_seq = 1;
  for (int row = 0; row < n; ++row)
    write_row(b, row, row, *running_[static_cast<size_t>(row)], RowFields::Forced);
  if (upload_forced || forced_uploaded_) decode_batch_.upload_forced();
  forced_uploaded_ = upload_forced;
}

void Scheduler::write_decode_row(int row) {
  backend::StepBatch& b = decode_batch_.host();
  write_row(b, row, row, *running_[static_cast<size_t>(row)], RowFields::All);
  decode_batch_.upload_seq(row);
  decode_batch_.upload_rows(row, 1);
}

}  // namespace kvdice::engine
