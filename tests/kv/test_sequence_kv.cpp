#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "kv/eviction_round.h"
#include "kv/sequence_kv.h"

namespace kvdice::kv {
namespace {

// Slot s of (layer, head) holds position 100 + s and rows filled with a value unique to the slot.
void fill(SequenceKv& kv, int n) {
  const KvShape& s = kv.shape();
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h)
      for (int slot = kv.length(); slot < kv.length() + n; ++slot) {
        kv.position(l, h, slot) = 100 + slot;
        for (int d = 0; d < s.head_dim; ++d) {
          kv.key(l, h, slot)[d] = static_cast<float>(1000 * l + 100 * h + slot) + 0.25f * d;
          kv.value(l, h, slot)[d] = -static_cast<float>(1000 * l + 100 * h + slot) - 0.25f * d;
        }
      }
  kv.commit(n);
}

TEST(SequenceKv, CommitTracksLengthAndAppended) {
  SequenceKv kv({2, 3, 4}, 10);
  EXPECT_EQ(kv.length(), 0);
  fill(kv, 6);
  EXPECT_EQ(kv.length(), 6);
  EXPECT_EQ(kv.appended(), 6);
  kv.set_length(4);
  fill(kv, 2);
  EXPECT_EQ(kv.length(), 6);
  EXPECT_EQ(kv.appended(), 8);
  EXPECT_EQ(kv.resident_bytes(2), int64_t{2} * 2 * 3 * 6 * 4 * 2);
  EXPECT_THROW(kv.commit(5), Error);  // past the reservation
  EXPECT_THROW(kv.set_length(7), Error);
}

TEST(SequenceKv, RejectsBadShapes) {
  EXPECT_THROW(SequenceKv({0, 1, 1}, 4), Error);
  EXPECT_THROW(SequenceKv({1, 1, 0}, 4), Error);
  EXPECT_THROW(SequenceKv({1, 1, 1}, -1), Error);
}

TEST(SequenceKv, MoveSlotMovesOnlyThatHead) {
  SequenceKv kv({2, 2, 3}, 8);
  fill(kv, 5);
  kv.move_slot(1, 0, 4, 1);
  EXPECT_EQ(kv.position(1, 0, 1), 104);
  EXPECT_FLOAT_EQ(kv.key(1, 0, 1)[2], 1004.5f);
  EXPECT_FLOAT_EQ(kv.value(1, 0, 1)[2], -1004.5f);
  EXPECT_EQ(kv.position(1, 1, 1), 101);  // other head untouched
  EXPECT_EQ(kv.position(0, 0, 1), 101);  // other layer untouched
  EXPECT_THROW(kv.move_slot(0, 0, 5, 0), Error);
}

TEST(CompactHead, FillsHolesBelowTargetWithSurvivorsAboveInOrder) {
  SequenceKv kv({1, 2, 2}, 8);
  fill(kv, 8);
  // Worked by hand: holes below 5 are slots 1 and 4; survivors at or above 5 are slots 5 and 7.
  std::vector<uint8_t> keep{1, 0, 1, 1, 0, 1, 0, 1};
  EXPECT_EQ(compact_head(kv, 0, 1, keep, 5), 2);
  std::vector<int32_t> expected{100, 105, 102, 103, 107};
  for (int slot = 0; slot < 5; ++slot) {
    const int source = expected[slot] - 100;  // the slot the entry was filled in
    EXPECT_EQ(kv.position(0, 1, slot), expected[slot]) << slot;
    EXPECT_FLOAT_EQ(kv.key(0, 1, slot)[1], static_cast<float>(100 + source) + 0.25f);
    EXPECT_FLOAT_EQ(kv.value(0, 1, slot)[0], -static_cast<float>(100 + source));
  }
  EXPECT_EQ(kv.position(0, 0, 1), 101);  // head 0 untouched
}

TEST(CompactHead, NoMovesWhenOnlyTheTailIsDropped) {
  SequenceKv kv({1, 1, 1}, 6);
  fill(kv, 6);
  EXPECT_EQ(compact_head(kv, 0, 0, {1, 1, 1, 1, 0, 0}, 4), 0);
  EXPECT_THROW(compact_head(kv, 0, 0, {1, 1, 1, 0, 0, 0}, 4), Error);  // wrong count
  EXPECT_THROW(compact_head(kv, 0, 0, {1, 1, 1, 1}, 4), Error);        // wrong size
}

}  // namespace
}  // namespace kvdice::kv
