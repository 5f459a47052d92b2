// The scheduler alone, over a real KV pool and decode batch on the CPU backend (no model, no step
// runs): admission order and refusal, retirement and cancellation giving pages and ring rows back, and
// the one row writer's layout of a decode row and of a prefill step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_storage.h"
#include "core/philox.h"
#include "engine/scheduler.h"
#include "kv/kv_pool.h"

namespace kvdice::engine {
namespace {

constexpr int kPageSlots = kv::KvPool::kDefaultPageSlots;
constexpr int kMaxPages = 8;  // columns of a page table

// A pool of `pages` pages (a query ring of `ring_rows` rows when > 0), a decode batch of `max_batch`
// rows and a scheduler over them.
struct Rig {
  std::unique_ptr<backend::Backend> backend = backend::make_cpu_backend(1);
  std::unique_ptr<kv::KvPool> pool;
  std::unique_ptr<backend::StepStorage> decode;
  std::unique_ptr<Scheduler> scheduler;

  Rig(int64_t pages, SchedulerLimits limits, int ring_rows = 0) {
    policy::SignalNeeds signals;
    signals.window_queries = ring_rows > 0;
    pool = std::make_unique<kv::KvPool>(*backend, kv::KvShape{1, 1, 4}, pages, kPageSlots, signals,
                                        kv::QueryRingShape{ring_rows, 8, 2});
    decode = std::make_unique<backend::StepStorage>(*backend, limits.max_batch, limits.max_batch, kMaxPages);
    scheduler = std::make_unique<Scheduler>(*pool, *decode, limits);
  }

  uint64_t submit(int prompt_tokens, int64_t reserved_slots, bool reads_queries = false) {
    auto seq = std::make_unique<Sequence>();
    seq->request.prompt.resize(static_cast<size_t>(prompt_tokens));
    std::iota(seq->request.prompt.begin(), seq->request.prompt.end(), 100);
    seq->request.max_new_tokens = 16;
    seq->budget = {32, 8};
    seq->reads_queries = reads_queries;
    seq->stats.prompt_tokens = prompt_tokens;
    seq->stats.reserved_slots = reserved_slots;
    return scheduler->submit(std::move(seq));
  }

  std::vector<uint64_t> row_ids() const {
    std::vector<uint64_t> ids;
    for (const auto& seq : scheduler->rows()) ids.push_back(seq->id);
    return ids;
  }

  // What a prefill step leaves on the host: the whole prompt appended, a first token sampled.
  static void prefilled(Sequence& seq, int token) {
    seq.length = static_cast<int>(seq.request.prompt.size());
    seq.appended = seq.length;
    seq.generated.push_back(token);
  }

  // Admits and "prefills" whatever fits, writing the decode rows as the engine does.
  Admission admit_and_prefill() {
    Admission a = scheduler->admit();
    for (Sequence* seq : a.batch) prefilled(*seq, 7000 + static_cast<int>(seq->id));
    scheduler->write_admitted(a);
    return a;
  }

  // Row `row` of the decode batch as the backend holds it: (length, budget, ring row, token, page 0).
  std::array<int32_t, 5> device_row(int row) const {
    const backend::StepBatch d = decode->device(/*self_feeding=*/true);
    std::array<int32_t, 5> out{};
    backend->download(&out[0], d.length + row, sizeof(int32_t));
    backend->download(&out[1], d.budget + row, sizeof(int32_t));
    backend->download(&out[2], d.ring_row + row, sizeof(int32_t));
    backend->download(&out[3], d.tokens + row, sizeof(int32_t));
    backend->download(&out[4], d.page_table + int64_t{row} * kMaxPages, sizeof(int32_t));
    return out;
  }
};

bool same_key(PhiloxKey a, PhiloxKey b) { return a.k0 == b.k0 && a.k1 == b.k1; }

// A sequence's integer fields in a step batch, by name (a mismatch prints the names).
using Fields = std::map<std::string, int64_t>;
Fields fields_of(const backend::StepBatch& b, int s) {
  return {{"seq_row_begin", b.seq_row_begin[s]},
          {"seq_row_end", b.seq_row_begin[s + 1]},
          {"length", b.length[s]},
          {"appended", b.appended[s]},
          {"budget", b.budget[s]},
          {"window", b.window[s]},
          {"ring_row", b.ring_row[s]},
          {"n_protected", b.n_protected[s]},
          {"policy_id", b.policy_id[s]},
          {"round", b.round[s]},
          {"top_k", b.top_k[s]},
          {"gen_step", b.gen_step[s]},
          {"forced", b.forced[s]}};
}

SchedulerLimits limits(int max_batch = 4, int prefill_chunk = 64, int64_t kv_slot_limit = 0) {
  return {max_batch, prefill_chunk, kv_slot_limit, /*eviction_seed=*/11};
}

TEST(Scheduler, AdmitsInSubmissionOrderAndNeverOvertakes) {
  Rig rig(8, limits());  // 128 slots
  const uint64_t a = rig.submit(4, 48), b = rig.submit(4, 48), c = rig.submit(4, 64), d = rig.submit(4, 16);
  const Admission admitted = rig.admit_and_prefill();
  // c needs 4 pages and 2 are free: it waits, and d, which would fit, waits behind it.
  ASSERT_EQ(admitted.batch.size(), 2u);
  EXPECT_FALSE(admitted.chunked);
  EXPECT_EQ(rig.row_ids(), (std::vector<uint64_t>{a, b}));
  EXPECT_EQ(rig.scheduler->waiting(), 2);
  EXPECT_EQ(rig.scheduler->first_waiting()->id, c);
  EXPECT_EQ(rig.scheduler->reserved_slots(), 96);
  EXPECT_EQ(rig.pool->free_pages(), 2);
  EXPECT_NE(d, c);
}

TEST(Scheduler, RefusesWhatThePoolTheSlotLimitOrTheRowsCannotHold) {
  {  // the pool: a reservation larger than the free pages waits, and nothing is taken
    Rig rig(4, limits());
    rig.submit(4, 48);
    rig.submit(4, 32);
    EXPECT_EQ(rig.admit_and_prefill().batch.size(), 1u);
    EXPECT_TRUE(rig.scheduler->admit().batch.empty());
    EXPECT_EQ(rig.pool->free_pages(), 1);
    EXPECT_EQ(rig.scheduler->waiting(), 1);
  }
  {  // the slot limit, below the pool
    Rig rig(16, limits(4, 64, /*kv_slot_limit=*/64));
    rig.submit(4, 48);
    rig.submit(4, 32);
    EXPECT_EQ(rig.admit_and_prefill().batch.size(), 1u);
    EXPECT_EQ(rig.pool->free_pages(), 13);
  }
  {  // the decode batch's rows
    Rig rig(16, limits(/*max_batch=*/2));
    for (int i = 0; i < 3; ++i) rig.submit(4, 16);
    EXPECT_EQ(rig.admit_and_prefill().batch.size(), 2u);
    EXPECT_FALSE(rig.scheduler->may_admit());
  }
  {  // the query ring: a sequence short of a ring row waits and gives its pages back
    Rig rig(16, limits(), /*ring_rows=*/1);
    rig.submit(4, 16, /*reads_queries=*/true);
    rig.submit(4, 16, /*reads_queries=*/true);
    rig.submit(4, 16, /*reads_queries=*/false);  // behind the one waiting: waits too
    EXPECT_EQ(rig.admit_and_prefill().batch.size(), 1u);
    EXPECT_EQ(rig.pool->free_pages(), 15);
    EXPECT_EQ(rig.pool->free_ring_rows(), 0);
    EXPECT_EQ(rig.scheduler->waiting(), 2);
  }
}

// fits_now and fits_when_idle are the admission rule as a question: over random pools, limits, running
// and waiting sequences, fits_now(slots, ring, n) holds exactly when n such sequences submitted then are
// all admitted before anything retires, and fits_when_idle exactly when they are in an empty scheduler.
TEST(Scheduler, FitsAnswersWhatAdmissionDoes) {
  std::mt19937 rng(4242);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int said_yes = 0, said_no = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int pages = pick(2, 16), ring_rows = pick(0, 3);
    const SchedulerLimits lim = limits(pick(1, 6), 2048, pick(0, 1) ? pick(24, 200) : 0);
    const int64_t slots = pick(1, 70);
    const bool ring = ring_rows > 0 && pick(0, 1);
    const int n = pick(1, 4);
    auto before = [&](Rig& rig) {  // some running, some waiting
      for (int i = pick(0, 3); i > 0; --i) rig.submit(2, pick(1, 40), ring_rows > 0 && pick(0, 1));
      rig.admit_and_prefill();
      for (int i = pick(0, 2); i > 0; --i) rig.submit(2, pick(1, 40), ring_rows > 0 && pick(0, 1));
    };
    Rig rig(pages, lim, ring_rows);
    before(rig);
    const bool now = rig.scheduler->fits_now(slots, ring, n);
    const bool idle = rig.scheduler->fits_when_idle(slots, ring, n);
    std::vector<uint64_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(rig.submit(2, slots, ring));
    while (!rig.admit_and_prefill().batch.empty()) {
    }
    const std::vector<uint64_t> rows = rig.row_ids();
    const bool all_admitted =
        std::all_of(ids.begin(), ids.end(), [&](uint64_t id) { return std::count(rows.begin(), rows.end(), id); });
    EXPECT_EQ(now, all_admitted) << "trial " << trial << ": " << pages << " pages, " << slots << " slots x " << n;
    Rig empty(pages, lim, ring_rows);
    ids.clear();
    for (int i = 0; i < n; ++i) ids.push_back(empty.submit(2, slots, ring));
    while (!empty.admit_and_prefill().batch.empty()) {
    }
    EXPECT_EQ(idle, static_cast<int>(empty.row_ids().size()) == n) << "trial " << trial;
    (now ? said_yes : said_no)++;
  }
  EXPECT_GT(said_yes, 30);  // both answers are exercised
  EXPECT_GT(said_no, 30);
}

TEST(Scheduler, WholePromptsShareAPrefillStepAndALongPromptGoesAloneInChunks) {
  Rig rig(32, limits(4, /*prefill_chunk=*/10));
  rig.submit(4, 16);
  rig.submit(4, 16);
  rig.submit(4, 16);   // 12 prompt tokens would pass the chunk: the next step
  rig.submit(25, 32);  // longer than the chunk
  EXPECT_EQ(rig.admit_and_prefill().batch.size(), 2u);
  EXPECT_EQ(rig.admit_and_prefill().batch.size(), 1u);
  const Admission long_prompt = rig.scheduler->admit();
  ASSERT_EQ(long_prompt.batch.size(), 1u);
  EXPECT_TRUE(long_prompt.chunked);
  EXPECT_EQ(rig.scheduler->chunking(), long_prompt.batch[0]);
  EXPECT_EQ(rig.scheduler->running(), 3);  // not a decode row before its last chunk
  // Chunks alternate with decode steps while others decode.
  EXPECT_FALSE(rig.scheduler->chunk_due());
  rig.scheduler->decode_ran();
  EXPECT_TRUE(rig.scheduler->chunk_due());
  Sequence* seq = rig.scheduler->next_chunk();
  ASSERT_EQ(seq, long_prompt.batch[0]);
  EXPECT_FALSE(rig.scheduler->chunk_due());

  backend::StepStorage prefill(*rig.backend, 4, 16, kMaxPages);
  backend::StepBatch& b = prefill.host();
  EXPECT_FALSE(rig.scheduler->write_prefill(b, {seq}));
  EXPECT_EQ(b.n_rows, 10);
  EXPECT_EQ(b.tokens[9], 109);
  seq->length = seq->appended = 10;
  EXPECT_FALSE(rig.scheduler->write_prefill(b, {seq}));
  EXPECT_EQ(b.tokens[0], 110);
  rig.submit(4, 16);
  EXPECT_FALSE(rig.scheduler->may_admit());  // one long prompt at a time
  seq->length = seq->appended = 20;
  EXPECT_TRUE(rig.scheduler->write_prefill(b, {seq}));  // the last 5 tokens
  EXPECT_EQ(b.n_rows, 5);
  Rig::prefilled(*seq, 42);  // its last chunk ran and sampled
  rig.scheduler->join_chunked();
  EXPECT_EQ(rig.scheduler->chunking(), nullptr);
  EXPECT_EQ(rig.scheduler->rows().back().get(), seq);
  EXPECT_EQ(rig.device_row(3)[3], 42);
}

TEST(Scheduler, RetirementReturnsPagesAndTheRingRowAndMovesTheLastRowIntoTheHole) {
  Rig rig(16, limits(), /*ring_rows=*/4);
  const uint64_t a = rig.submit(4, 32, true), b = rig.submit(4, 16, false), c = rig.submit(4, 48, true);
  rig.admit_and_prefill();
  ASSERT_EQ(rig.row_ids(), (std::vector<uint64_t>{a, b, c}));
  EXPECT_EQ(rig.pool->free_pages(), 10);
  EXPECT_EQ(rig.pool->free_ring_rows(), 2);
  const int c_ring_row = rig.scheduler->rows()[2]->ring_row;
  const int32_t c_first_page = rig.scheduler->rows()[2]->pages[0];

  Sequence& first = *rig.scheduler->rows()[0];
  first.generated.push_back(1);
  first.length = 9;
  first.finish = FinishReason::Stop;
  EXPECT_TRUE(rig.scheduler->any_finished());
  rig.scheduler->retire();
  EXPECT_FALSE(rig.scheduler->any_finished());
  EXPECT_EQ(rig.row_ids(), (std::vector<uint64_t>{c, b}));
  EXPECT_EQ(rig.pool->free_pages(), 12);
  EXPECT_EQ(rig.pool->free_ring_rows(), 3);
  EXPECT_EQ(rig.scheduler->reserved_slots(), 64);
  // The moved row is rewritten on the host and in the backend's copy.
  const std::array<int32_t, 5> moved{4, 32, c_ring_row, static_cast<int32_t>(7000 + c), c_first_page};
  EXPECT_EQ(rig.device_row(0), moved);
  const std::vector<GenerationResult> done = rig.scheduler->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a);
  EXPECT_EQ(done[0].finish, FinishReason::Stop);
  EXPECT_EQ(done[0].tokens, (std::vector<int>{static_cast<int>(7000 + a), 1}));
  EXPECT_EQ(done[0].stats.generated_tokens, 2);
  EXPECT_EQ(done[0].stats.final_resident_slots, 9);
  // The freed pages admit the next sequence.
  rig.submit(4, 64, true);
  EXPECT_EQ(rig.admit_and_prefill().batch.size(), 1u);
}

TEST(Scheduler, CancellationFreesAWaitingSequenceAtOnceAndARunningOneOnlyAtRetirement) {
  Rig rig(8, limits(), /*ring_rows=*/2);
  const uint64_t a = rig.submit(4, 32, true), b = rig.submit(4, 32, true), c = rig.submit(4, 64, true);
  rig.admit_and_prefill();
  ASSERT_EQ(rig.scheduler->waiting(), 1);
  EXPECT_TRUE(rig.scheduler->cancel(c));  // waiting: out at once, nothing to free
  EXPECT_EQ(rig.scheduler->waiting(), 0);
  EXPECT_EQ(rig.scheduler->take_finished().at(0).finish, FinishReason::Cancelled);

  // A step in flight still reads the running sequence's row and pages: they stay until retirement.
  EXPECT_TRUE(rig.scheduler->cancel(a));
  EXPECT_FALSE(rig.scheduler->cancel(a));  // already cancelled
  EXPECT_EQ(rig.scheduler->running(), 2);
  EXPECT_EQ(rig.pool->free_pages(), 4);
  EXPECT_EQ(rig.pool->free_ring_rows(), 0);
  EXPECT_EQ(rig.device_row(0)[0], 4);
  rig.scheduler->retire();
  EXPECT_EQ(rig.row_ids(), (std::vector<uint64_t>{b}));
  EXPECT_EQ(rig.pool->free_pages(), 6);
  EXPECT_EQ(rig.pool->free_ring_rows(), 1);
  const std::vector<GenerationResult> done = rig.scheduler->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a);
  EXPECT_EQ(done[0].finish, FinishReason::Cancelled);
  EXPECT_FALSE(rig.scheduler->cancel(a));    // finished
  EXPECT_FALSE(rig.scheduler->cancel(999));  // unknown

  // A long prompt cancelled between its chunks leaves at its next chunk's turn.
  Rig chunked(8, limits(4, /*prefill_chunk=*/8), /*ring_rows=*/2);
  const uint64_t d = chunked.submit(20, 32, true);
  ASSERT_TRUE(chunked.scheduler->admit().chunked);
  EXPECT_TRUE(chunked.scheduler->cancel(d));
  EXPECT_EQ(chunked.pool->free_pages(), 6);
  EXPECT_EQ(chunked.scheduler->next_chunk(), nullptr);
  EXPECT_EQ(chunked.scheduler->chunking(), nullptr);
  EXPECT_EQ(chunked.pool->free_pages(), 8);
  EXPECT_EQ(chunked.pool->free_ring_rows(), 2);
  EXPECT_EQ(chunked.scheduler->reserved_slots(), 0);
  EXPECT_TRUE(chunked.scheduler->idle());
  EXPECT_EQ(chunked.scheduler->take_finished().at(0).finish, FinishReason::Cancelled);
}

// The layout the engine's decode rows and prefill steps have always had; the backends' ops read it.
TEST(Scheduler, RowWriterLaysOutDecodeRowsAndPrefillStepsAsTheOpsReadThem) {
  Rig rig(16, limits(4, /*prefill_chunk=*/5), /*ring_rows=*/2);
  auto seq = std::make_unique<Sequence>();
  seq->id = 3;
  seq->stream_id = 77;
  seq->request.prompt = {10, 11, 12, 13, 14, 15, 16};
  seq->request.sampling.seed = 9;
  seq->request.sampling.temperature = 0.5f;
  seq->request.sampling.top_p = 0.75f;
  seq->request.sampling.top_k = 20;
  seq->policy = 2;
  seq->budget = {24, 8};
  seq->n_protected = 7;
  seq->pages = {5, 2, 9};
  seq->ring_row = 1;
  seq->stats.eviction_rounds = 3;
  backend::StepBatch& b = rig.decode->host();
  std::fill_n(b.page_table + 2 * kMaxPages, kMaxPages, -5);  // a former row's pages

  // A decode row: its last sampled token, its fields before the step.
  seq->length = 24;
  seq->appended = 31;
  seq->generated = {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
                    53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64};
  EXPECT_EQ(rig.scheduler->write_row(b, 2, 2, *seq, RowFields::All), 1);
  EXPECT_EQ(b.tokens[2], 64);
  EXPECT_EQ(b.row_seq[2], 2);
  EXPECT_EQ(std::vector<int32_t>(b.page_table + 2 * kMaxPages, b.page_table + 3 * kMaxPages),
            (std::vector<int32_t>{5, 2, 9, 0, 0, 0, 0, 0}));
  EXPECT_EQ(fields_of(b, 2), (Fields{{"seq_row_begin", 2},
                                     {"seq_row_end", 3},
                                     {"length", 24},
                                     {"appended", 31},
                                     {"budget", 24},
                                     {"window", 8},
                                     {"ring_row", 1},
                                     {"n_protected", 7},
                                     {"policy_id", 2},
                                     {"round", 3},
                                     {"top_k", 20},
                                     {"gen_step", 25},
                                     {"forced", -1}}));
  EXPECT_TRUE(same_key(b.evict_key[2], philox_key(11, 77, RngDomain::Eviction)));
  EXPECT_TRUE(same_key(b.sample_key[2], philox_key(9, 77, RngDomain::Sampling)));
  EXPECT_EQ(b.temperature[2], 0.5f);
  EXPECT_EQ(b.top_p[2], 0.75f);

  // Teacher forcing: the forced field alone follows the tokens taken so far; a stopped row samples.
  seq->request.forced_tokens.assign(30, 0);
  seq->request.forced_tokens[25] = 99;
  b.length[2] = -1;
  EXPECT_EQ(rig.scheduler->write_row(b, 2, 2, *seq, RowFields::Forced), 0);
  EXPECT_EQ(b.forced[2], 99);
  EXPECT_EQ(b.length[2], -1);
  seq->finish = FinishReason::Stop;
  rig.scheduler->write_row(b, 2, 2, *seq, RowFields::Forced);
  EXPECT_EQ(b.forced[2], -1);
  seq->finish = FinishReason::Running;
  seq->request.forced_tokens.clear();

  // A prefill step: each sequence's next chunk of its prompt as consecutive rows.
  auto other = std::make_unique<Sequence>();
  other->request.prompt = {20, 21, 22};
  other->pages = {4};
  seq->length = seq->appended = 0;
  seq->generated.clear();
  backend::StepStorage prefill(*rig.backend, 4, 16, kMaxPages);
  backend::StepBatch& p = prefill.host();
  EXPECT_FALSE(rig.scheduler->write_prefill(p, {other.get(), seq.get()}));
  EXPECT_EQ(p.n_seqs, 2);
  EXPECT_EQ(p.n_rows, 8);
  EXPECT_EQ(p.max_rows_per_seq, 5);
  EXPECT_EQ(std::vector<int32_t>(p.seq_row_begin, p.seq_row_begin + 3), (std::vector<int32_t>{0, 3, 8}));
  EXPECT_EQ(std::vector<int32_t>(p.tokens, p.tokens + 8),
            (std::vector<int32_t>{20, 21, 22, 10, 11, 12, 13, 14}));
  EXPECT_EQ(std::vector<int32_t>(p.row_seq, p.row_seq + 8), (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(p.gen_step[1], 0);
  EXPECT_EQ(p.page_table[kMaxPages], 5);
  // Its last chunk: the rest of the prompt from the tokens appended so far.
  seq->length = seq->appended = 5;
  EXPECT_TRUE(rig.scheduler->write_prefill(p, {seq.get()}));
  EXPECT_EQ(p.n_rows, 2);
  EXPECT_EQ(p.tokens[0], 15);
  EXPECT_EQ(p.tokens[1], 16);
  EXPECT_EQ(p.length[0], 5);
  EXPECT_EQ(p.appended[0], 5);
}

}  // namespace
}  // namespace kvdice::engine
