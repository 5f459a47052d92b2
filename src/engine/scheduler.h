// Scheduler: which sequences run, and the rows they run in. It keeps the queue of submitted sequences,
// admits them against the KV pool (a sequence's whole reservation of pages and, when its policy reads
// window queries, a query ring row: both taken at admission and kept until it retires, never
// preempted), keeps the running sequences dense as the rows of the persistent decode batch, retires
// finished and cancelled ones (pages and ring row back to the pool, the last row moved into the hole)
// and writes the engine's step-batch rows (write_row, through core's one row writer). It runs nothing: the Engine runs each step over
// the sequences the scheduler hands it and updates their host state from what the step did.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/step_storage.h"
#include "engine/policy_table.h"
#include "engine/request.h"
#include "kv/budget.h"
#include "kv/kv_pool.h"
#include "kv/pool_sizing.h"

namespace kvdice::engine {

// What one scheduler iteration ran.
enum class StepKind {
  Idle,     // nothing could run (every waiting request needs more KV than is free)
  Prefill,  // admitted requests and prefilled them, or ran one chunk of a long prompt
  Decode,   // one decode step of the running sequences
};

// A request's host-side state. length/appended/round mirror the backend's step batch exactly: they
// are deterministic (one slot per token, rounds at the trigger), so the host never reads them back.
struct Sequence {
  uint64_t id = 0;
  uint64_t stream_id = 0;
  GenerationRequest request;
  int policy = 0;                 // id in the engine's PolicyTable
  PolicyTable::Hold policy_hold;  // its place in the policy table, held while the sequence lives
  kv::BudgetSpec budget;
  bool reads_queries = false;  // its policy keeps window queries: it takes a query ring row at admission
  int n_protected = 0;
  std::vector<int32_t> pages;
  int ring_row = -1;  // its row of the pool's query ring while it runs (policies reading window queries)
  int length = 0;
  int64_t appended = 0;
  std::vector<int> generated;
  std::vector<float> forced_logprobs;
  std::vector<uint8_t> forced_is_argmax;
  FinishReason finish = FinishReason::Running;
  SequenceStats stats;

  bool running() const { return finish == FinishReason::Running; }
  // Teacher forcing: the token the next step takes instead of sampling; -1 = it samples (no forced token
  // left, or it has stopped).
  int forced_now() const {
    return running() && generated.size() < request.forced_tokens.size() ? request.forced_tokens[generated.size()]
                                                                         : -1;
  }
};

struct SchedulerLimits {
  int max_batch = 64;          // running sequences at once (rows of the decode batch)
  int prefill_chunk = 2048;    // most prompt tokens of one prefill step
  int64_t kv_slot_limit = 0;   // total reserved slots across running sequences; 0 = as the pool allows
  uint64_t eviction_seed = 0;  // keys every sequence's eviction stream (a row's evict_key)
};

// What admit() took from the queue.
struct Admission {
  // Whole prompts, prefilled together in one step; they hold the last rows of the decode batch. Or,
  // when chunked, one prompt longer than the prefill chunk, now the scheduler's chunking() sequence.
  std::vector<Sequence*> batch;
  bool chunked = false;
};

// What write_row writes of a sequence.
enum class RowFields {
  All,     // every field and the next input tokens (admission, a moved row, a prefill chunk)
  Forced,  // the forced token only: the one input a decode step takes from the host (teacher forcing)
};

class Scheduler {
 public:
  // `decode_batch` is the persistent decode batch whose rows (host mirror and backend copy) this
  // scheduler keeps; it and `pool` outlive the scheduler.
  Scheduler(kv::KvPool& pool, backend::StepStorage& decode_batch, SchedulerLimits limits);

  const SchedulerLimits& limits() const { return limits_; }

  // Queues a validated sequence (its stats.reserved_slots set); assigns its id, and its stream id
  // unless the request brings one. Returns the id.
  uint64_t submit(std::unique_ptr<Sequence> seq);
  // A waiting sequence leaves at once with a Cancelled result; a running or chunking one is marked and
  // retires at the next retire() or next_chunk(). False when the id is unknown or finished.
  bool cancel(uint64_t id);

  bool idle() const { return waiting_.empty() && running_.empty() && !chunking_; }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  int running() const { return static_cast<int>(running_.size()); }
  // The running sequences: rows()[i] is row i of the decode batch.
  const std::vector<std::unique_ptr<Sequence>>& rows() const { return running_; }
  // The next sequence admission considers; null when none waits.
  const Sequence* first_waiting() const { return waiting_.empty() ? nullptr : waiting_.front().get(); }
  // The admitted sequence whose long prompt is being prefilled chunk by chunk (not yet a decode row).
  const Sequence* chunking() const { return chunking_.get(); }
  int64_t reserved_slots() const { return reserved_slots_; }
  // Sequences of `reservation_slots` each that the pool (and slot limit) holds together.
  int64_t sequences_that_fit(int64_t reservation_slots) const;
  // Admission as a question, by the rule admit() applies: rows of the decode batch, whole pages of the
  // pool, the slot limit, and a query ring row each when `ring_row`. Whether n sequences reserving
  // `slots` each could ever run at once (in an idle engine; reads only fixed sizes, so any thread may
  // ask), and whether they would all be admitted, behind every sequence already waiting, without any
  // running sequence retiring first.
  bool fits_when_idle(int64_t slots, bool ring_row, int n) const;
  bool fits_now(int64_t slots, bool ring_row, int n) const;

  // Whether admit() may take a sequence now: one waits, a row is free and no long prompt is chunking.
  bool may_admit() const;
  // Takes waiting sequences, in order, while a row is free and each one's whole reservation (and ring
  // row) is free: whole prompts up to prefill_chunk tokens together, or one longer prompt alone. Stops
  // at the first that does not fit: it waits for running sequences to retire (no preemption, no
  // overtaking). The whole prompts take the next rows of the decode batch at once; write their rows
  // (write_admitted) once their prefill sampled their first tokens.
  Admission admit();
  // Writes the decode rows of an admission's whole prompts, now prefilled.
  void write_admitted(const Admission& admitted);
  // Whether the next step runs chunking()'s next chunk: every other step while others decode, each
  // step while nothing else runs.
  bool chunk_due() const { return chunking_ && (chunk_turn_ || running_.empty()); }
  // The chunking sequence, for its next chunk; null (and retired, Cancelled) when it was cancelled.
  Sequence* next_chunk();
  // After its last chunk the chunking sequence takes the next decode row (its row written).
  void join_chunked();
  // A decode step ran: a chunking prompt's next chunk takes the next step.
  void decode_ran() { chunk_turn_ = true; }

  // Whether a running sequence has finished or was cancelled (retire() frees it).
  bool any_finished() const;
  // Retires every finished or cancelled running sequence: its result out, its pages and ring row back
  // to the pool, the last row moved into its place (that row rewritten) so the decode batch stays dense.
  void retire();
  // Finished results, in completion order; taken out of the scheduler.
  std::vector<GenerationResult> take_finished();

  // The engine's step-batch rows, through backend::write_row (core/step_row.h). Writes `seq` as
  // sequence s of `b`, its fields as they are before the step; with RowFields::All also its next input
  // tokens as rows [first_row, first_row + n): the rest of its prompt (at most max_tokens of it) while
  // the prompt is not all appended, else its last generated token. Returns n (0 with RowFields::Forced).
  int write_row(backend::StepBatch& b, int s, int first_row, const Sequence& seq, RowFields fields,
                int max_tokens = 1) const;
  // Fills `b` with one prefill step over `batch`: each sequence's next prompt chunk (up to prefill_chunk
  // tokens), in order. True when the step appends the last of every prompt (it samples first tokens).
  bool write_prefill(backend::StepBatch& b, const std::vector<Sequence*>& batch) const;
  // Sets the decode batch to this step's rows (every running sequence, one token each) and their forced
  // tokens, uploading those when `upload_forced` (teacher forcing; other steps need no host data) and in
  // the step after one that uploaded them, so a row whose forced prefix ended samples (its -1 reaches the
  // backend).
  void write_decode_step(bool upload_forced);

 private:
  // Rewrites row `row` of the decode batch from its sequence and uploads it.
  void write_decode_row(int row);
  // Gives a finished or cancelled sequence's pages and ring row back to the pool.
  void release_kv(Sequence& seq);
  // Moves a retired sequence's result to finished_.
  void finish(Sequence& seq);

  kv::KvPool& pool_;
  backend::StepStorage& decode_batch_;
  SchedulerLimits limits_;
  uint64_t next_id_ = 0;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // running_[i] is row i of the decode batch
  std::unique_ptr<Sequence> chunking_;  // admitted, its long prompt partly prefilled; not yet a decode row
  bool chunk_turn_ = false;             // the next step prefills chunking_'s next chunk
  bool forced_uploaded_ = false;        // the last decode step uploaded forced tokens
  std::vector<GenerationResult> finished_;
  int64_t reserved_slots_ = 0;
};

}  // namespace kvdice::engine
