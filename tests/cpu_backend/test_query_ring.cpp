// The query ring the CPU backend's qk_norm_rope_append writes (backend.h KvLayer::query_ring): each
// post-RoPE query of a sequence's last r rows of the step, as its bf16 rounding (nearest, ties to even,
// core/dtype.h's f32_to_bf16: the bits the CUDA twin writes), at ring slot position % r of the
// sequence's ring row; nothing else. The op's own fp32 query output is the reference, so the test
// holds the ring to the rounding, not to the rotation's arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/op_harness.h"
#include "core/dtype.h"

namespace kvdice::test {
namespace {

TEST(CpuQueryRing, HoldsTheBf16RoundingOfEachWindowQuery) {
  auto b = backend::make_cpu_backend(1);
  for (const bool norms : {false, true}) {
    SCOPED_TRACE(norms ? "q/k norms (Qwen3)" : "no norms");
    const int n_heads = 8, n_kv = 2, hd = 32, page_slots = 16, max_pages = 4;
    HostBatch h = ring_writer_batch(max_pages);
    const int ring_rows = kRingWriterRows, ring_window = kRingWriterWindow;
    const int qkv_cols = (n_heads + 2 * n_kv) * hd;
    // Inputs whose rotated queries are not bf16 values (bf16-exact qkv times fp32 cos/sin), so a ring
    // that kept fp32, truncated or rounded otherwise differs.
    Matrix qkv(*b, DType::F32, h.n_rows, qkv_cols, "qkv"), q(*b, DType::F32, h.n_rows, n_heads * hd, "q");
    qkv.upload(random_values(size_t(h.n_rows) * qkv_cols, 62, 2.0f));
    Matrix qn(*b, DType::F32, 1, hd, "q_norm"), kn(*b, DType::F32, 1, hd, "k_norm"),
        freq(*b, DType::F32, 1, hd / 2, "inv_freq");
    qn.upload(random_values(size_t(hd), 63, 0.3f, 1.0f));
    kn.upload(random_values(size_t(hd), 64, 0.3f, 1.0f));
    std::vector<float> inv_freq(size_t(hd / 2));
    for (int i = 0; i < hd / 2; ++i) inv_freq[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / hd));
    freq.upload(inv_freq);
    KvLayerMemory kv(*b, h.n_seqs * max_pages, n_kv, page_slots, hd, 0);
    const size_t ring_elements = size_t(ring_rows) * n_heads * ring_window * hd;
    Guarded ring(*b, ring_elements * sizeof(uint16_t), "query ring");
    backend::KvLayer layer = kv.layer;
    layer.query_ring = static_cast<uint16_t*>(ring.data());
    layer.n_heads = n_heads;
    layer.ring_window = ring_window;
    layer.ring_rows = ring_rows;
    DeviceBatch d(*b, h);
    b->qk_norm_rope_append(d.batch, qkv.view, norms ? qn.view : backend::View{}, norms ? kn.view : backend::View{},
                           1e-6f, backend::Rope{freq.view.as<const float>(), hd}, layer, q.view, n_heads);
    EXPECT_TRUE(ring.sentinel_intact()) << "the ring's writes stay inside its bytes";
    const std::vector<float> q_out = q.download();
    std::vector<uint16_t> got(ring_elements);
    b->download(got.data(), ring.data(), ring_elements * sizeof(uint16_t));

    // The ring as it must be: zero, then each writing row's query rounded to bf16 at its slot.
    std::vector<uint16_t> want(ring_elements, 0);
    size_t written = 0, not_bf16 = 0;
    for (int s = 0; s < h.n_seqs; ++s) {
      const int rows = h.seq_row_begin[s + 1] - h.seq_row_begin[s], r = h.window[s];
      if (h.ring_row[s] < 0) continue;
      for (int i = std::max(0, rows - r); i < rows; ++i) {
        const int32_t position = h.appended[s] + i;
        for (int head = 0; head < n_heads; ++head)
          for (int c = 0; c < hd; ++c) {
            const float x = q_out[(size_t(h.seq_row_begin[s] + i) * n_heads + head) * hd + c];
            not_bf16 += bf16_to_f32(f32_to_bf16(x)) != x;
            want[layer.ring_index(h.ring_row[s], head, position % r) + c] = f32_to_bf16(x);
            ++written;
          }
      }
    }
    EXPECT_EQ(written, size_t(1 + 4 + 3) * n_heads * hd) << "1 + 4 + 0 + 3 rows write the ring";
    EXPECT_GT(not_bf16, written / 2) << "the queries must not be bf16 values already";
    size_t mismatches = 0;
    for (size_t e = 0; e < ring_elements; ++e)
      if (got[e] != want[e] && ++mismatches <= 5)
        ADD_FAILURE() << "ring element " << e << ": 0x" << std::hex << got[e] << ", want 0x" << want[e];
    EXPECT_EQ(mismatches, 0u);
  }
}

// Round-to-nearest-even at the halfway points, which truncation or round-half-up get wrong: the ring's
// rounding is core/dtype.h's, shared with the CUDA twin.
TEST(CpuQueryRing, Bf16RoundingIsNearestTiesToEven) {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f32_to_bf16(f);
  };
  EXPECT_EQ(bits(0x3f808000u), 0x3f80) << "halfway, even below: down";
  EXPECT_EQ(bits(0x3f818000u), 0x3f82) << "halfway, odd below: up to even";
  EXPECT_EQ(bits(0x3f808001u), 0x3f81) << "past halfway: up";
  EXPECT_EQ(bits(0x3f807fffu), 0x3f80) << "short of halfway: down";
  EXPECT_EQ(bits(0xbf818000u), 0xbf82) << "negative halfway to even";
}

}  // namespace
}  // namespace kvdice::test
