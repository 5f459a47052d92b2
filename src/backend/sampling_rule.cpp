#include "backend/sampling_rule.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace kvdice::backend {

int sample_reference(const float* logits, int vocab, float temperature, int top_k, float top_p, PhiloxKey key,
                     uint32_t step) {
  KVDICE_CHECK(vocab > 0, "empty logits");
  if (temperature == 0.0f) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);

  std::vector<float> scaled(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) scaled[i] = logits[i] / temperature;
  const float max_scaled = *std::max_element(scaled.begin(), scaled.end());
  std::vector<uint32_t> weight(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) weight[i] = sampling_weight(scaled[i] - max_scaled);

  std::vector<uint8_t> kept(static_cast<size_t>(vocab), 1);
  const bool cut_k = top_k > 0 && top_k < vocab;
  const bool cut_p = top_p < 1.0f;
  if (cut_k || cut_p) {
    // Tokens in rule order (weight descending, id ascending); zero weights never matter.
    std::vector<int32_t> order;
    for (int i = 0; i < vocab; ++i)
      if (weight[i] > 0) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return weight[a] > weight[b] || (weight[a] == weight[b] && a < b);
    });
    size_t keep = cut_k ? std::min(order.size(), static_cast<size_t>(top_k)) : order.size();
    if (cut_p) {
      uint64_t total = 0;
      for (size_t i = 0; i < keep; ++i) total += weight[order[i]];
      uint64_t sum = 0;
      for (size_t i = 0; i < keep; ++i) {
        sum += weight[order[i]];
        if (reaches_top_p(sum, total, top_p)) {
          keep = i + 1;
          break;
        }
      }
    }
    std::fill(kept.begin(), kept.end(), uint8_t{0});
    for (size_t i = 0; i < keep; ++i) kept[order[i]] = 1;
  }
  uint64_t total = 0;
  for (int i = 0; i < vocab; ++i)
    if (kept[i]) total += weight[i];
  const uint64_t point = sampling_point(key, step, total);
  uint64_t cumulative = 0;
  for (int i = 0; i < vocab; ++i) {
    if (!kept[i]) continue;
    cumulative += weight[i];
    if (point < cumulative) return i;
  }
  KVDICE_CHECK(false, "sampling point {} beyond total weight {}", point, total);
  return 0;
}

ForcedScore score_forced_reference(const float* logits, int vocab, int token) {
  const float* best = std::max_element(logits, logits + vocab);
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) total += std::exp(static_cast<double>(logits[i]) - *best);
  const double logprob = static_cast<double>(logits[token]) - *best - std::log(total);
  return {static_cast<float>(logprob), best - logits == token};
}

}  // namespace kvdice::backend
