// The CPU backend's attention op against the plain one-query-head loop it must equal bit for bit: per
// head, scores summed over the head dimension in order (a multiply then an add each), softmax with a
// double denominator, values accumulated slot by slot. The op runs a KV head's query heads side by
// side; no head, slot or page may change its numbers. H2O's attention mass too: every weight added to
// its slot's sum, rows in order, then heads, then slots (decode rows inside the attention's own task,
// prefill rows in a second pass).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kvdice::backend {
namespace {

// The reference: one query head at a time, written as the loop it replaces.
// weights: [n_heads][visible], each head's softmax weights.
void reference_attention(const std::vector<float>& q, const KvLayer& kv, const std::vector<int32_t>& pages,
                         int visible, int n_heads, float scale, std::vector<float>& out,
                         std::vector<float>& weights) {
  const int hd = kv.head_dim, group = n_heads / kv.n_kv_heads;
  out.assign(static_cast<size_t>(n_heads) * hd, 0.0f);
  weights.assign(static_cast<size_t>(n_heads) * visible, 0.0f);
  for (int head = 0; head < n_heads; ++head) {
    const int g = head / group;
    const float* qi = q.data() + int64_t{head} * hd;
    float* w = weights.data() + static_cast<size_t>(head) * visible;
    float max_score = -INFINITY;
    for (int j = 0; j < visible; ++j) {
      const float* kj = static_cast<const float*>(kv.keys) +
                        kv.slot_index(pages[j / kv.page_slots], g, j % kv.page_slots) * hd;
      float dot = 0.0f;
      for (int c = 0; c < hd; ++c) {
        const float product = qi[c] * kj[c];
        dot = dot + product;
      }
      w[j] = dot * scale;
      max_score = std::max(max_score, w[j]);
    }
    double denom = 0.0;
    for (int j = 0; j < visible; ++j) {
      w[j] = std::exp(w[j] - max_score);
      denom += w[j];
    }
    const float inv = static_cast<float>(1.0 / denom);
    for (int j = 0; j < visible; ++j) w[j] *= inv;
    float* oi = out.data() + int64_t{head} * hd;
    for (int j = 0; j < visible; ++j) {
      const float* vj = static_cast<const float*>(kv.values) +
                        kv.slot_index(pages[j / kv.page_slots], g, j % kv.page_slots) * hd;
      for (int c = 0; c < hd; ++c) oi[c] += w[j] * vj[c];
    }
  }
}

float value(uint64_t i) {
  const double t = static_cast<double>(i);
  return static_cast<float>(std::sin(0.731 * t + 0.3) * (1.0 + 2.0 * std::cos(0.0137 * t)));
}

// Shapes: the default model's (14 heads over 2 KV heads, head_dim 64), one KV head for 20 query heads
// (more than one pass of lanes), and plain multi-head (group 1).
struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

TEST(CpuAttention, EqualsTheOneHeadLoopBitForBit) {
  for (const Shape shape : {Shape{14, 2, 64}, Shape{20, 1, 32}, Shape{4, 4, 16}}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(shape.n_heads) + " heads over " + std::to_string(shape.n_kv_heads) +
                   " KV heads, " + std::to_string(threads) + " threads");
      const int page_slots = 16, n_pages = 6, hd = shape.head_dim;
      const int64_t slots = int64_t{n_pages} * shape.n_kv_heads * page_slots;
      std::vector<float> keys(static_cast<size_t>(slots * hd)), values(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = value(i), values[i] = value(i + 7919);
      KvLayer kv;
      kv.keys = keys.data();
      kv.values = values.data();
      kv.n_kv_heads = shape.n_kv_heads;
      kv.head_dim = hd;
      kv.page_slots = page_slots;
      // Two sequences in one batch: a decode row over 37 slots (pages out of order), and two rows of a
      // prefill over 5 and 6 slots.
      std::vector<int32_t> page_table = {4, 1, 5, 0, 2, 3};  // [2 sequences][3 pages]
      std::vector<int32_t> row_seq = {0, 1, 1}, seq_row_begin = {0, 1, 3}, length = {36, 4};
      StepBatch batch;
      batch.n_seqs = 2;
      batch.n_rows = 3;
      batch.max_pages = 3;
      batch.row_seq = row_seq.data();
      batch.seq_row_begin = seq_row_begin.data();
      batch.length = length.data();
      batch.page_table = page_table.data();
      const int q_cols = shape.n_heads * hd;
      std::vector<float> q(static_cast<size_t>(3 * q_cols)), out(q.size(), -1.0f);
      for (size_t i = 0; i < q.size(); ++i) q[i] = value(i + 104729);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      // Mass left by earlier steps in every slot (the op adds onto it).
      std::vector<float> mass(static_cast<size_t>(slots)), want_mass(mass.size());
      for (size_t i = 0; i < mass.size(); ++i) mass[i] = want_mass[i] = 0.25f * (2.0f + value(i + 31));
      kv.attention_mass = mass.data();
      make_cpu_backend(threads, CpuMath::Exact)
          ->attention(batch, View{q.data(), DType::F32, 3, q_cols, q_cols}, kv,
                      View{out.data(), DType::F32, 3, q_cols, q_cols}, shape.n_heads, scale);
      for (int r = 0; r < 3; ++r) {
        const int s = row_seq[r];
        const int visible = length[s] + (r - seq_row_begin[s]) + 1;
        const std::vector<int32_t> pages(page_table.begin() + 3 * s, page_table.begin() + 3 * s + 3);
        const std::vector<float> qr(q.begin() + r * q_cols, q.begin() + (r + 1) * q_cols);
        std::vector<float> want, weights;
        reference_attention(qr, kv, pages, visible, shape.n_heads, scale, want, weights);
        const int group = shape.n_heads / shape.n_kv_heads;
        for (int head = 0; head < shape.n_heads; ++head)
          for (int j = 0; j < visible; ++j)
            want_mass[static_cast<size_t>(
                kv.slot_index(pages[j / page_slots], head / group, j % page_slots))] +=
                weights[static_cast<size_t>(head) * visible + j];
        for (int i = 0; i < q_cols; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(r * q_cols + i)]),
                    std::bit_cast<uint32_t>(want[static_cast<size_t>(i)]))
              << "row " << r << " head " << i / hd << " [" << i % hd
              << "]: " << out[static_cast<size_t>(r * q_cols + i)] << " vs " << want[static_cast<size_t>(i)];
      }
      for (size_t i = 0; i < mass.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(mass[i]), std::bit_cast<uint32_t>(want_mass[i]))
            << "attention mass of pool slot " << i << ": " << mass[i] << " vs " << want_mass[i];
    }
  }
}

}  // namespace
}  // namespace kvdice::backend
