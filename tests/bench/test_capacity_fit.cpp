// `kvdice bench capacity`'s equal-memory accounting (bench::capacity_fit) at the Qwen3-4B shape on the
// CUDA pool (bf16 K/V), T = 2048, r = 64, P = 128: the windowed-attention policies' query ring row is
// bf16, so at equal memory they fit at least 0.93x the sequences of random_pp (0.94-0.95x; an fp32 ring
// fit 0.89x), and the ring stays under a tenth of their KV bytes. Computed, not timed.
#include <gtest/gtest.h>

#include <string>

#include "bench/protocols.h"
#include "model/random_weights.h"
#include "policy/eviction_policy.h"

namespace kvdice::bench {
namespace {

CapacityFit fit_of(const std::string& policy, int64_t pool_bytes) {
  const model::ModelConfig c =
      model::read_shape_config(std::string(KVDICE_SOURCE_DIR) + "/configs/shapes/qwen3-4b.json");
  return capacity_fit(kv::KvShape{c.n_layers, c.n_kv_heads, c.head_dim}, c.n_heads, DType::BF16,
                      policy::make_policy(policy)->needs(), kv::BudgetSpec{2048, 64}, 128, 32768, pool_bytes);
}

TEST(CapacityFit, ScoringPoliciesFitAtLeast093OfRandomPpAtTheQwen3FourBShape) {
  const int64_t pool = int64_t{64} << 30;  // 64 GiB of KV pool
  const CapacityFit base = fit_of("random_pp", pool);
  EXPECT_EQ(base.slots, 2048 + 64);
  EXPECT_EQ(base.ring_row_bytes, 0);
  EXPECT_EQ(base.sequence_bytes, 313'860'096);  // 132 pages x 16 slots x 148,608 B
  EXPECT_EQ(base.fit, 218);
  for (const char* name : {"snapkv", "snapkv_pp", "rkv", "rkv_pp", "rkv_official", "vase", "vase_pp"}) {
    SCOPED_TRACE(name);
    const CapacityFit f = fit_of(name, pool);
    EXPECT_EQ(f.ring_row_bytes, int64_t{36} * 32 * 64 * 128 * 2) << "one bf16 ring row: 18.9 MB";
    const int64_t pages_bytes = f.sequence_bytes - f.ring_row_bytes;
    EXPECT_LE(10 * f.ring_row_bytes, pages_bytes) << "the ring is at most 10 % of the KV bytes";
    const double bytes_ratio = static_cast<double>(base.sequence_bytes) / static_cast<double>(f.sequence_bytes);
    const double fit_ratio = static_cast<double>(f.fit) / static_cast<double>(base.fit);
    EXPECT_GE(bytes_ratio, 0.93) << f.sequence_bytes << " B a sequence against random_pp's " << base.sequence_bytes;
    EXPECT_GE(fit_ratio, 0.93) << f.fit << " sequences against random_pp's " << base.fit;
  }
  EXPECT_EQ(fit_of("snapkv", pool).fit, 206);
  EXPECT_EQ(fit_of("vase", pool).fit, 205);  // value ranges add 4 B a slot
}

TEST(CapacityFit, FullAttentionReservesPromptAndOutputAndReadsNoQueries) {
  const CapacityFit full = capacity_fit(kv::KvShape{36, 8, 128}, 32, DType::BF16, policy::SignalNeeds{},
                                        kv::BudgetSpec{0, 64}, 128, 32768, int64_t{64} << 30);
  EXPECT_EQ(full.slots, 128 + 32768);
  EXPECT_EQ(full.ring_row_bytes, 0);
  EXPECT_EQ(full.sequence_bytes, (128 + 32768) / 16 * int64_t{148608} * 16);
}

}  // namespace
}  // namespace kvdice::bench
