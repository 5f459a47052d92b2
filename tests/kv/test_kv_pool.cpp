// KvPool's memory: pages of K, V, positions and per-slot signals, and the query ring of the policies
// that read window queries, which is per running sequence (max_batch rows of r queries), never per page.
#include <gtest/gtest.h>

#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "kv/kv_pool.h"

namespace kvdice::kv {
namespace {

constexpr KvShape kShape{3, 2, 8};  // 3 layers, 2 KV heads, head_dim 8
constexpr int kQueryHeads = 4;

TEST(KvPool, QueryRingIsSizedBySequencesNotPages) {
  auto backend = backend::make_cpu_backend(1);
  const policy::SignalNeeds needs{.window_queries = true};
  const QueryRingShape ring{5, 16, kQueryHeads};  // 5 sequences at once, r up to 16
  const int64_t n_pages = 1000;
  KvPool pool(*backend, kShape, n_pages, 16, needs, ring);
  // A page costs the same with or without window queries: the ring is not per page.
  EXPECT_EQ(KvPool::bytes_per_page(kShape, DType::F32, 16, needs),
            KvPool::bytes_per_page(kShape, DType::F32, 16));
  // max_batch x window x query heads x head_dim x bf16 per layer.
  const int64_t ring_per_layer = int64_t{5} * 16 * kQueryHeads * kShape.head_dim * 2;
  EXPECT_EQ(KvPool::query_ring_bytes(kShape, ring), kShape.n_layers * ring_per_layer);
  EXPECT_EQ(pool.total_bytes() - n_pages * KvPool::bytes_per_page(kShape, DType::F32, 16),
            kShape.n_layers * ring_per_layer);
  for (int l = 0; l < kShape.n_layers; ++l) {
    const backend::KvLayer& layer = pool.layer(l);
    EXPECT_EQ(layer.ring_rows, 5);
    EXPECT_EQ(layer.ring_window, 16);
    EXPECT_EQ(layer.n_heads, kQueryHeads);
    // Layers follow each other in one allocation.
    EXPECT_EQ(layer.query_ring - pool.layer(0).query_ring, l * ring_per_layer / 2);
    // The last element of the last row is the layer's last bf16.
    EXPECT_EQ(layer.ring_index(4, kQueryHeads - 1, 15) + kShape.head_dim, ring_per_layer / 2);
  }
}

// The ring is bf16, as the reference keeps its query window in the model's dtype: at the Qwen3-4B shape
// (36 layers, 8 KV heads, 32 query heads, head_dim 128), T = 2048, r = 64, one sequence's row is
// 36 x 32 x 64 x 128 x 2 B = 18.9 MB beside 313.9 MB of bf16 KV pages: a scoring policy's extra memory
// stays under a tenth of its KV bytes (an fp32 ring, 37.7 MB, is 12 %).
TEST(KvPool, QueryRingRowIsBf16AndUnderATenthOfTheKvAtTheQwen3FourBShape) {
  const KvShape qwen3_4b{36, 8, 128};
  const int64_t row = KvPool::query_ring_bytes(qwen3_4b, QueryRingShape{1, 64, 32});
  EXPECT_EQ(row, int64_t{36} * 32 * 64 * 128 * 2);
  EXPECT_EQ(row, 18'874'368);
  const int64_t kv = (2048 + 64) / 16 * KvPool::bytes_per_page(qwen3_4b, DType::BF16, 16);
  EXPECT_EQ(kv, 313'860'096);
  EXPECT_LE(10 * row, kv) << "ring row " << row << " B beside " << kv << " B of KV";
  EXPECT_EQ(KvPool::query_ring_bytes(qwen3_4b, QueryRingShape{16, 64, 32}), 16 * row);
}

TEST(KvPool, RingRowsAreHandedOutAndTakenBack) {
  auto backend = backend::make_cpu_backend(1);
  KvPool pool(*backend, kShape, 10, 16, {.window_queries = true}, {3, 8, kQueryHeads});
  std::set<int> rows;
  for (int i = 0; i < 3; ++i) rows.insert(pool.allocate_ring_row());
  EXPECT_EQ(rows, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(pool.allocate_ring_row(), -1) << "every row taken";
  pool.release_ring_row(1);
  EXPECT_EQ(pool.free_ring_rows(), 1);
  EXPECT_EQ(pool.allocate_ring_row(), 1);
  EXPECT_THROW(pool.release_ring_row(3), Error) << "a row outside the ring";
}

TEST(KvPool, NoRingWithoutWindowQueriesAndNoneWithoutRows) {
  auto backend = backend::make_cpu_backend(1);
  KvPool plain(*backend, kShape, 10, 16, {.value_ranges = true}, {4, 8, kQueryHeads});
  EXPECT_EQ(plain.layer(0).query_ring, nullptr);
  EXPECT_EQ(plain.query_ring().rows, 0);
  EXPECT_EQ(plain.allocate_ring_row(), -1);
  EXPECT_EQ(plain.total_bytes(), 10 * KvPool::bytes_per_page(kShape, DType::F32, 16, {.value_ranges = true}));
  EXPECT_THROW(KvPool(*backend, kShape, 10, 16, {.window_queries = true}, {0, 8, kQueryHeads}), Error);
  EXPECT_THROW(KvPool(*backend, kShape, 10, 16, {.window_queries = true}, {2, 0, kQueryHeads}), Error);
}

}  // namespace
}  // namespace kvdice::kv
