#include "policy/window_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/vector_clones.h"
#include "policy/dimension_order_dots.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// logits[b][j] = (Σ_c queries[b][c] · k_j[c]) · scale for b < block: the products of the bf16-valued
// inputs are exact in fp32 and fp64, and each sum runs in dimension order (dimension_order_dots.h).
template <typename Acc>
[[gnu::always_inline]] inline void scaled_logits(const float* queries, const float* keys_t, int n, int d,
                                                 int block, Acc scale, Acc* logits) {
  dimension_order_dots<Acc>(queries, keys_t, n, d, block, logits);
  for (int64_t e = 0; e < int64_t{block} * n; ++e) logits[e] *= scale;
}

KVDICE_VECTOR_CLONES void logits_fp64(const float* queries, const float* keys_t, int n, int d, int block,
                                      double scale, double* logits) {
  scaled_logits<double>(queries, keys_t, n, d, block, scale, logits);
}

KVDICE_VECTOR_CLONES void logits_fp32(const float* queries, const float* keys_t, int n, int d, int block,
                                      float scale, float* logits) {
  scaled_logits<float>(queries, keys_t, n, d, block, scale, logits);
}

// means[gh][j]: the mean softmax weight of candidate j over query head gh's window queries, in double.
std::vector<double> means_fp64(const SelectionInput& input, double temperature) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  const double scale = 1.0 / (std::sqrt(static_cast<double>(d)) * temperature);
  const std::vector<float> keys = transposed_keys(input);
  std::vector<double> mean(static_cast<size_t>(group) * n, 0.0),
      logits(static_cast<size_t>(kDotBlockRows) * n);
  for (int gh = 0; gh < group; ++gh) {
    double* m = mean.data() + int64_t{gh} * n;
    for (int i0 = 0; i0 < nq; i0 += kDotBlockRows) {
      const int block = std::min(kDotBlockRows, nq - i0);
      logits_fp64(input.window_queries.data() + (int64_t{gh} * nq + i0) * d, keys.data(), n, d, block, scale,
                  logits.data());
      for (int b = 0; b < block; ++b) {  // the queries in order: m accumulates as one at a time
        double* l = logits.data() + int64_t{b} * n;
        double max_logit = -INFINITY;
        for (int j = 0; j < n; ++j) max_logit = std::max(max_logit, l[j]);
        double denom = 0.0;
        for (int j = 0; j < n; ++j) denom += (l[j] = std::exp(l[j] - max_logit));
        for (int j = 0; j < n; ++j) m[j] += l[j] / denom / nq;
      }
    }
  }
  return mean;
}

// e^x in fp32 with a result below FLT_MIN (2^-126) taken as 0, as the CUDA twin's ex2.approx.ftz
// flushes it: the two then agree on which weights are zero.
float exp_flushed(float x) {
  const float e = std::exp(x);
  return e < std::numeric_limits<float>::min() ? 0.0f : e;
}

// The same from bf16-rounded queries and keys in fp32; each mean widened to double.
std::vector<double> means_fp32(const SelectionInput& input, double temperature) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  const float scale = window_logit_scale(d, temperature);
  std::vector<float> keys = transposed_keys(input);
  for (float& k : keys) k = bf16_round(k);
  std::vector<float> queries(static_cast<size_t>(nq) * d), sum(static_cast<size_t>(n)),
      logits(static_cast<size_t>(kDotBlockRows) * n);
  std::vector<double> mean(static_cast<size_t>(group) * n);
  for (int gh = 0; gh < group; ++gh) {
    const float* window = input.window_queries.data() + int64_t{gh} * nq * d;
    for (int64_t e = 0; e < int64_t{nq} * d; ++e) queries[e] = bf16_round(window[e]);
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int i0 = 0; i0 < nq; i0 += kDotBlockRows) {
      const int block = std::min(kDotBlockRows, nq - i0);
      logits_fp32(queries.data() + int64_t{i0} * d, keys.data(), n, d, block, scale, logits.data());
      for (int b = 0; b < block; ++b) {  // the queries in order: sum accumulates as one at a time
        float* l = logits.data() + int64_t{b} * n;
        float max_logit = -INFINITY;
        for (int j = 0; j < n; ++j) max_logit = std::max(max_logit, l[j]);
        float denom = 0.0f;
        for (int j = 0; j < n; ++j) denom += (l[j] = exp_flushed(l[j] - max_logit));
        for (int j = 0; j < n; ++j) sum[j] += l[j] / denom;
      }
    }
    for (int j = 0; j < n; ++j) mean[int64_t{gh} * n + j] = static_cast<double>(sum[j] / static_cast<float>(nq));
  }
  return mean;
}

}  // namespace

float window_logit_scale(int head_dim, double temperature) {
  return static_cast<float>(1.0 / (std::sqrt(static_cast<double>(head_dim)) * temperature));
}

WindowPrecision read_window_precision(PolicyOptions& options, std::string_view policy) {
  const std::string value = options.get_string("precision", "fp64");
  if (value == "fp64") return WindowPrecision::Fp64;
  if (value == "fp32") return WindowPrecision::Fp32;
  fail("policy '{}': option precision={} must be fp64 (exact, the default) or fp32 (bf16 inputs, fp32 "
       "math; tensor cores on CUDA)",
       policy, value);
}

std::string window_precision_option(WindowPrecision precision) {
  return precision == WindowPrecision::Fp32 ? ",precision=fp32" : "";
}

std::vector<double> windowed_attention(const SelectionInput& input, int pool, double temperature,
                                       WindowPrecision precision) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  KVDICE_CHECK(d > 0 && group > 0 && nq > 0,
               "windowed attention needs head_dim, group and queries ({}, {}, {})", d, group, nq);
  KVDICE_CHECK(static_cast<int64_t>(input.keys.size()) == int64_t{n} * d &&
                   static_cast<int64_t>(input.window_queries.size()) == int64_t{group} * nq * d,
               "{} key and {} query values for {} candidates, group {}, {} queries of dim {}",
               input.keys.size(), input.window_queries.size(), n, group, nq, d);
  KVDICE_CHECK(pool >= 1 && pool % 2 == 1, "pooling kernel {} must be odd", pool);
  const std::vector<double> mean =
      precision == WindowPrecision::Fp32 ? means_fp32(input, temperature) : means_fp64(input, temperature);
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<double> score(static_cast<size_t>(n), 0.0);
  // Smoothing runs along age order (slot order is scrambled by compaction).
  const int half = pool / 2;
  for (int gh = 0; gh < group; ++gh) {
    const double* m = mean.data() + int64_t{gh} * n;
    for (int i = 0; i < n; ++i) {
      double sum = 0.0;
      for (int t = std::max(0, i - half); t <= std::min(n - 1, i + half); ++t) sum += m[order[t]];
      score[order[i]] += sum / pool / group;
    }
  }
  return score;
}

}  // namespace kvdice::policy
