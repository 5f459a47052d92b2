// The CUDA scoring scratch layout (policy/cuda_selection.h) is plain constexpr arithmetic that host and
// device share: the backend sizes the buffers with it and the kernels carve them with it, so an overlap
// or a misaligned array here would corrupt scores only on the GPU. Checked on the CPU.
#include <gtest/gtest.h>

#include "policy/cuda_selection.h"

namespace kvdice::policy {
namespace {

TEST(CudaScratchLayout, WindowArraysAreDisjointAlignedAndInsideTheBytes) {
  for (int capacity : {1, 17, 48, 2112, 32768 + 64}) {
    for (int group : {1, 3, 4, 8}) {
      for (int logit_queries : {0, 1, kCudaStoredLogitQueries}) {
        SCOPED_TRACE(testing::Message() << "capacity " << capacity << " group " << group << " queries "
                                        << logit_queries);
        const int64_t cells = int64_t{group} * capacity;
        const CudaWindowLayout layout = cuda_window_layout(capacity, group, logit_queries);
        EXPECT_GE(layout.stats, 8 * cells);                 // means[group][capacity] doubles
        EXPECT_EQ(layout.stats % 16, 0);                    // (m, d) pairs are double2
        EXPECT_GE(layout.logits - layout.stats, 16 * cells);  // stats[group][capacity] pairs
        EXPECT_EQ(layout.logits % 8, 0);
        EXPECT_GE(layout.bytes, layout.logits + 8 * cells * logit_queries);
        EXPECT_EQ(layout.bytes % 256, 0);  // the next head's scratch stays aligned
        EXPECT_EQ(cuda_window_scratch_bytes(capacity, group, logit_queries), layout.bytes);
        // The offsets do not depend on how many logits are stored (the device carves with 0).
        EXPECT_EQ(cuda_window_layout(capacity, group, 0).logits, layout.logits);
      }
    }
  }
  // precision=fp32 keeps only the fp32 means: inside the fp64 layout's means, whole 256-byte blocks.
  for (int capacity : {1, 17, 48, 2112, 32768 + 64})
    for (int group : {1, 3, 4, 8}) {
      const int64_t bytes = cuda_window_fp32_bytes(capacity, group);
      EXPECT_GE(bytes, 4 * int64_t{group} * capacity);
      EXPECT_LT(bytes, 4 * int64_t{group} * capacity + 256);
      EXPECT_EQ(bytes % 256, 0);
      EXPECT_LE(bytes, cuda_window_scratch_bytes(capacity, group, 0));
    }
  // The head scratch before it keeps the window scratch 256-byte aligned too.
  for (int capacity : {1, 17, 2112}) EXPECT_EQ(cuda_head_scratch_bytes(capacity) % 256, 0);
}

}  // namespace
}  // namespace kvdice::policy
