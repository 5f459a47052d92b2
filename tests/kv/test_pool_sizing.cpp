#include <gtest/gtest.h>

#include "error_text.h"
#include "kv/pool_sizing.h"

namespace kvdice::kv {
namespace {

using test::error_of;
using test::has;

constexpr int64_t kGiB = int64_t{1} << 30;

// An H200-like device: 140 GiB, 9 GiB in use after weights and activations.
PoolInputs device() {
  PoolInputs in;
  in.total_bytes = 140 * kGiB;
  in.free_bytes = 131 * kGiB;
  in.reserve_bytes = 4 * kGiB;
  in.page_bytes = 16 * 147456;  // Qwen3-4B: 36 layers x 8 KV heads x 128 dims x 2 (K, V) x bf16 + positions
  in.page_slots = 16;
  in.max_batch = 128;
  return in;
}

TEST(PoolSizing, CudaDefaultTakesTheUtilizationShareLessWhatIsInUse) {
  const PoolInputs in = device();
  const PoolPlan plan = plan_kv_pool({}, in);
  // 0.9 x 140 GiB may be held; 9 GiB already is.
  const int64_t allowed = static_cast<int64_t>(0.9 * static_cast<double>(in.total_bytes)) - 9 * kGiB;
  EXPECT_EQ(plan.pages, allowed / in.page_bytes);
  EXPECT_EQ(plan.slot_limit, 0);
  EXPECT_TRUE(has(plan.rule, "--gpu-memory-utilization 0.90")) << plan.rule;
}

TEST(PoolSizing, CudaUtilizationNeverTakesTheScratchReserve) {
  PoolRequest r;
  r.gpu_memory_utilization = 1.0;
  const PoolInputs in = device();
  EXPECT_EQ(plan_kv_pool(r, in).pages, (in.free_bytes - in.reserve_bytes) / in.page_bytes);
}

TEST(PoolSizing, MemoryInGibAndSlotsOverride) {
  PoolRequest gib;
  gib.kv_memory_gib = 10;
  EXPECT_EQ(plan_kv_pool(gib, device()).pages, 10 * kGiB / device().page_bytes);
  PoolRequest slots;
  slots.kv_slots = 300000;
  const PoolPlan plan = plan_kv_pool(slots, device());
  EXPECT_EQ(plan.pages, (300000 + 15) / 16 + 128);  // a page of rounding per running sequence
  EXPECT_EQ(plan.slot_limit, 300000);
}

TEST(PoolSizing, RefusalsNameTheFlag) {
  PoolRequest two;
  two.kv_slots = 10;
  two.kv_memory_gib = 1;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(two, device()); }), "one of --kv-slots")) << "mixed flags";
  PoolRequest over;
  over.gpu_memory_utilization = 1.5;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(over, device()); }), "(0, 1]"));
  PoolRequest big;
  big.kv_memory_gib = 500;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(big, device()); }), "--kv-memory-gib 500 needs"));
  PoolRequest low;
  low.gpu_memory_utilization = 0.05;  // 7 GiB allowed, 9 GiB in use
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(low, device()); }), "raise --gpu-memory-utilization"));
}

TEST(PoolSizing, CpuKeepsItsDefaultAndChecksTheRam) {
  PoolInputs in;
  in.cpu = true;
  in.total_bytes = 16 * kGiB;
  in.free_bytes = 2 * kGiB;  // lazily touched: free memory does not bound the pool, the RAM does
  in.page_bytes = 1 << 20;
  in.cpu_default_pages = 1000;
  in.max_batch = 4;
  EXPECT_EQ(plan_kv_pool({}, in).pages, 1000);
  PoolRequest r;
  r.kv_memory_gib = 12;
  EXPECT_EQ(plan_kv_pool(r, in).pages, 12 * 1024);
  r.kv_memory_gib = 17;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(r, in); }), "RAM has 16.00 GiB"));
  PoolRequest gpu;
  gpu.gpu_memory_utilization = 0.5;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(gpu, in); }), "CUDA"));
}

// The query ring (window-query policies) is per running sequence, not per page: a row for each sequence
// that can run at once, max_batch or as many sequences of the default reservation as the bytes hold
// with their rows; the rows come off every size before the pages are counted.
TEST(PoolSizing, TheQueryRingHasARowPerSequenceThatFits) {
  PoolInputs in = device();
  // Qwen3-4B's ring row for r = 64: 36 layers x 32 query heads x 64 x 128 x bf16 (18.9 MB).
  in.ring_row_bytes = int64_t{36} * 32 * 64 * 128 * 2;
  in.sequence_slots = 2048 + 64;  // T + r: 132 pages of 2.36 MB
  const int64_t sequence_bytes = 132 * in.page_bytes + in.ring_row_bytes;
  const int64_t allowed = static_cast<int64_t>(0.9 * static_cast<double>(in.total_bytes)) - 9 * kGiB;
  // 117 GiB hold ~360 such sequences: max_batch (128) bounds the rows.
  PoolPlan plan = plan_kv_pool({}, in);
  EXPECT_EQ(plan.ring_rows, 128);
  EXPECT_EQ(plan.pages, (allowed - 128 * in.ring_row_bytes) / in.page_bytes);
  // 10 GiB hold 32 of them: the bytes bound the rows, and the pages left hold as many sequences.
  PoolRequest gib;
  gib.kv_memory_gib = 10;
  in.max_batch = 1024;
  plan = plan_kv_pool(gib, in);
  EXPECT_EQ(plan.ring_rows, 10 * kGiB / sequence_bytes);
  EXPECT_EQ(plan.ring_rows, 32);
  EXPECT_EQ(plan.pages, (10 * kGiB - plan.ring_rows * in.ring_row_bytes) / in.page_bytes);
  EXPECT_GE(plan.pages, plan.ring_rows * 132);
  // --kv-slots: the slots bound the rows (300,000 / 2,112 = 142).
  PoolRequest slots;
  slots.kv_slots = 300000;
  plan = plan_kv_pool(slots, in);
  EXPECT_EQ(plan.ring_rows, 300000 / 2112);
  EXPECT_EQ(plan.pages, (300000 + 15) / 16 + 1024);
  // No ring, no rows.
  in.ring_row_bytes = 0;
  EXPECT_EQ(plan_kv_pool(gib, in).ring_rows, 0);
  EXPECT_EQ(plan_kv_pool(gib, in).pages, 10 * kGiB / in.page_bytes);
}

TEST(PoolSizing, TheQueryRingCountsInEveryFit) {
  PoolInputs in = device();
  in.ring_row_bytes = int64_t{36} * 32 * 64 * 128 * 2;
  in.sequence_slots = 2112;
  PoolRequest tiny;
  tiny.kv_memory_gib = 0.015;  // less than one ring row and one page
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(tiny, in); }), "query ring of 1 rows"))
      << "a pool the ring fills";
  PoolRequest over;
  over.kv_slots =
      60000000;  // 28,409 rows' worth, 128 at most: pages that fit without the rows do not with them
  in.free_bytes = in.reserve_bytes + (3750000 + 128) * in.page_bytes + 64 * in.ring_row_bytes;
  EXPECT_TRUE(has(error_of([&] { plan_kv_pool(over, in); }), "query ring of 128 rows")) << "the rows count";
  in.ring_row_bytes = 0;
  EXPECT_NO_THROW(plan_kv_pool(over, in));
}

TEST(PoolSizing, SequencesThatFitCountWholePagesAndTheSlotLimit) {
  EXPECT_EQ(sequences_that_fit(4096, 16, 0, 2048 + 64), 4096 / 132);
  EXPECT_EQ(sequences_that_fit(4096, 16, 65536, 2048 + 64), 31);  // the limit binds: 65536 / 2112
  EXPECT_EQ(sequences_that_fit(10, 16, 0, 17), 5);                // 17 slots take two pages
}

}  // namespace
}  // namespace kvdice::kv
