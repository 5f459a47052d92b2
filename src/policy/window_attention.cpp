#include "policy/window_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// means[gh][j]: the mean softmax weight of candidate j over query head gh's window queries, in double.
std::vector<double> means_fp64(const SelectionInput& input, double temperature) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  const double scale = 1.0 / (std::sqrt(static_cast<double>(d)) * temperature);
  std::vector<double> mean(static_cast<size_t>(group) * n, 0.0), logits(static_cast<size_t>(n));
  for (int gh = 0; gh < group; ++gh) {
    double* m = mean.data() + int64_t{gh} * n;
    for (int i = 0; i < nq; ++i) {
      const float* q = input.window_queries.data() + (int64_t{gh} * nq + i) * d;
      double max_logit = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const float* k = input.keys.data() + int64_t{j} * d;
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
        logits[j] = dot * scale;
        max_logit = std::max(max_logit, logits[j]);
      }
      double denom = 0.0;
      for (int j = 0; j < n; ++j) denom += (logits[j] = std::exp(logits[j] - max_logit));
      for (int j = 0; j < n; ++j) m[j] += logits[j] / denom / nq;
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
  std::vector<float> keys(input.keys.size()), q(static_cast<size_t>(d)), sum(static_cast<size_t>(n)),
      logits(static_cast<size_t>(n));
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = bf16_round(input.keys[i]);
  std::vector<double> mean(static_cast<size_t>(group) * n);
  for (int gh = 0; gh < group; ++gh) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int i = 0; i < nq; ++i) {
      const float* query = input.window_queries.data() + (int64_t{gh} * nq + i) * d;
      for (int c = 0; c < d; ++c) q[c] = bf16_round(query[c]);
      float max_logit = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const float* k = keys.data() + int64_t{j} * d;
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += q[c] * k[c];  // bf16 x bf16: every product exact in fp32
        logits[j] = dot * scale;
        max_logit = std::max(max_logit, logits[j]);
      }
      float denom = 0.0f;
      for (int j = 0; j < n; ++j) denom += exp_flushed(logits[j] - max_logit);
      for (int j = 0; j < n; ++j) sum[j] += exp_flushed(logits[j] - max_logit) / denom;
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
