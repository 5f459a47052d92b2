// The CPU twins' vectorized dot products (policy/dimension_order_dots.h, run by the CPU's best clone of
// each loop, core/vector_clones.h) give the same bits as one dot product at a time, summed in dimension
// order: the windowed attention at fp64 and fp32 and R-KV's redundancy with and without its spare rule,
// against the plain loops they replaced (written out here), on shapes with full tiles, a remainder of
// columns and a short block of rows. This file is built without fused multiply-add (CMakeLists.txt), as
// the library's files are, so the plain loops round each product and sum once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "policy/key_redundancy.h"
#include "policy/ranking.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Candidates {
  std::vector<int32_t> positions;
  std::vector<float> keys, queries;
  SelectionInput input;
};

// n candidates of dim d, positions scrambled; keys share a common direction (`pull`) so that some pairs
// pass a cosine threshold; group query heads of nq window queries.
Candidates make_candidates(int n, int d, int group, int nq, float pull, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Candidates c;
  c.positions.resize(n);
  for (int i = 0; i < n; ++i) c.positions[i] = static_cast<int32_t>((int64_t{i} * 7919) % n);
  std::vector<float> common(d);
  for (float& x : common) x = normal(rng);
  c.keys.resize(static_cast<size_t>(n) * d);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < d; ++k)
      c.keys[static_cast<size_t>(j) * d + k] = bf16_round(normal(rng) + pull * common[k]);
  c.queries.resize(static_cast<size_t>(group) * nq * d);
  for (float& x : c.queries) x = bf16_round(3.0f * normal(rng));
  SelectionInput& in = c.input;
  in.n_candidates = n;
  in.keep = n / 2;
  in.budget = n;
  in.positions = c.positions;
  in.head_dim = d;
  in.group = group;
  in.n_queries = nq;
  in.keys = c.keys;
  in.window_queries = c.queries;
  return c;
}

// The windowed attention one dot product at a time (window_attention.cpp before the vectorized loops).
std::vector<double> plain_windowed_attention(const SelectionInput& input, int pool, double temperature,
                                             bool fp32) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  std::vector<double> mean(static_cast<size_t>(group) * n, 0.0);
  for (int gh = 0; gh < group; ++gh) {
    if (fp32) {
      const float scale = window_logit_scale(d, temperature);
      std::vector<float> sum(n, 0.0f), logits(n);
      for (int i = 0; i < nq; ++i) {
        const float* q = input.window_queries.data() + (int64_t{gh} * nq + i) * d;
        float max_logit = -INFINITY;
        for (int j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (int c = 0; c < d; ++c) dot += bf16_round(q[c]) * bf16_round(input.keys[int64_t{j} * d + c]);
          logits[j] = dot * scale;
          max_logit = std::max(max_logit, logits[j]);
        }
        auto flushed = [](float x) {
          const float e = std::exp(x);
          return e < std::numeric_limits<float>::min() ? 0.0f : e;
        };
        float denom = 0.0f;
        for (int j = 0; j < n; ++j) denom += flushed(logits[j] - max_logit);
        for (int j = 0; j < n; ++j) sum[j] += flushed(logits[j] - max_logit) / denom;
      }
      for (int j = 0; j < n; ++j)
        mean[int64_t{gh} * n + j] = static_cast<double>(sum[j] / static_cast<float>(nq));
    } else {
      const double scale = 1.0 / (std::sqrt(static_cast<double>(d)) * temperature);
      std::vector<double> logits(n);
      for (int i = 0; i < nq; ++i) {
        const float* q = input.window_queries.data() + (int64_t{gh} * nq + i) * d;
        double max_logit = -INFINITY;
        for (int j = 0; j < n; ++j) {
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * input.keys[int64_t{j} * d + c];
          logits[j] = dot * scale;
          max_logit = std::max(max_logit, logits[j]);
        }
        double denom = 0.0;
        for (int j = 0; j < n; ++j) denom += (logits[j] = std::exp(logits[j] - max_logit));
        for (int j = 0; j < n; ++j) mean[int64_t{gh} * n + j] += logits[j] / denom / nq;
      }
    }
  }
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<double> score(n, 0.0);
  const int half = pool / 2;
  for (int gh = 0; gh < group; ++gh)
    for (int i = 0; i < n; ++i) {
      double sum = 0.0;
      for (int t = std::max(0, i - half); t <= std::min(n - 1, i + half); ++t)
        sum += mean[int64_t{gh} * n + order[t]];
      score[order[i]] += sum / pool / group;
    }
  return score;
}

// R-KV's redundancy one cosine at a time (key_redundancy.cpp before the vectorized loops).
std::vector<double> plain_key_redundancy(const SelectionInput& input, std::optional<double> spare_threshold) {
  const int n = input.n_candidates, d = input.head_dim;
  std::vector<double> unit(static_cast<size_t>(n) * d);
  for (int j = 0; j < n; ++j) {
    const float* k = input.keys.data() + int64_t{j} * d;
    double norm = 0.0;
    for (int c = 0; c < d; ++c) norm += static_cast<double>(k[c]) * k[c];
    norm = std::sqrt(norm) + 1e-8;
    for (int c = 0; c < d; ++c) unit[static_cast<size_t>(j) * d + c] = k[c] / norm;
  }
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[order[i]] = i;
  std::vector<double> column(n, 0.0), row(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      if (j != i)
        for (int c = 0; c < d; ++c)
          dot += unit[static_cast<size_t>(i) * d + c] * unit[static_cast<size_t>(j) * d + c];
      row[j] = dot;
    }
    if (spare_threshold) {
      int spare = order[0];
      for (int j = 0; j < n; ++j)
        if (row[j] > *spare_threshold && rank[j] > rank[spare]) spare = j;
      row[spare] = 0.0;
    }
    for (int j = 0; j < n; ++j) column[j] += row[j];
  }
  double max_mean = -INFINITY;
  for (double& c : column) max_mean = std::max(max_mean, c /= n);
  double denom = 0.0;
  for (double& c : column) denom += (c = std::exp(c - max_mean));
  for (double& c : column) c /= denom;
  return column;
}

// Candidate counts around the 32-column tiles (one, a remainder only, tiles plus a remainder, whole
// tiles) and head dims of the models (and an odd one).
struct Shape {
  int n, d;
};
const Shape kShapes[] = {{1, 8}, {5, 64}, {37, 128}, {96, 64}, {131, 128}, {200, 7}};

int bit_differences(const std::vector<double>& a, const std::vector<double>& b) {
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
  return differ;
}

TEST(DimensionOrderDots, WindowedAttentionEqualsOneDotProductAtATime) {
  uint32_t seed = 11;
  for (const Shape& s : kShapes)
    for (int nq : {1, 6, 64})  // window queries: a short block, a block and a remainder, whole blocks
      for (const WindowPrecision precision : {WindowPrecision::Fp64, WindowPrecision::Fp32}) {
        const Candidates c = make_candidates(s.n, s.d, /*group=*/3, nq, 0.0f, ++seed);
        const bool fp32 = precision == WindowPrecision::Fp32;
        const std::vector<double> got = windowed_attention(c.input, 5, 0.6, precision);
        const std::vector<double> want = plain_windowed_attention(c.input, 5, 0.6, fp32);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(bit_differences(got, want), 0)
            << "n=" << s.n << " d=" << s.d << " queries=" << nq << (fp32 ? " fp32" : " fp64");
      }
}

TEST(DimensionOrderDots, KeyRedundancyEqualsOneCosineAtATime) {
  uint32_t seed = 101;
  int spared_rows_seen = 0;
  for (const Shape& s : kShapes)
    for (const float pull : {0.0f, 1.0f})
      for (const std::optional<double> threshold : {std::optional<double>{}, std::optional<double>{0.5}}) {
        const Candidates c = make_candidates(s.n, s.d, 1, 1, pull, ++seed);
        const std::vector<double> got = key_redundancy(c.input, threshold);
        const std::vector<double> want = plain_key_redundancy(c.input, threshold);
        EXPECT_EQ(bit_differences(got, want), 0)
            << "n=" << s.n << " d=" << s.d << " pull=" << pull << " threshold=" << threshold.value_or(-1);
        if (threshold && pull > 0.0f &&
            bit_differences(want, plain_key_redundancy(c.input, std::nullopt)) > 0)
          ++spared_rows_seen;
      }
  EXPECT_GT(spared_rows_seen, 0) << "no case exercised the spare rule";
}

}  // namespace
}  // namespace kvdice::policy
