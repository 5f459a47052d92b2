#include "backend/cpu/cpu_sampling.h"

#include <algorithm>

#include "backend/sampling_rule.h"
#include "core/error.h"

namespace kvdice::backend::cpu {

int sample_tokens(const float* logits, int vocab, float temperature, int top_k, float top_p, PhiloxKey key,
                  uint32_t step, SamplingScratch& scratch) {
  KVDICE_CHECK(vocab > 0, "empty logits");
  if (temperature == 0.0f) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);

  // The reference's weights: x_i = logit_i / t, w_i = sampling_weight(x_i - max x).
  float max_scaled = logits[0] / temperature;
  for (int i = 1; i < vocab; ++i) max_scaled = std::max(max_scaled, logits[i] / temperature);
  std::vector<uint32_t>& weight = scratch.weight;
  std::vector<int32_t>& order = scratch.order;
  weight.resize(static_cast<size_t>(vocab));
  order.clear();
  for (int i = 0; i < vocab; ++i) {
    weight[i] = sampling_weight(logits[i] / temperature - max_scaled);
    if (weight[i] > 0) order.push_back(i);
  }

  const bool cut_k = top_k > 0 && top_k < vocab;
  const bool cut_p = top_p < 1.0f;
  if (!cut_k && !cut_p) {
    uint64_t total = 0;
    for (int32_t i : order) total += weight[i];
    const uint64_t point = sampling_point(key, step, total);
    uint64_t cumulative = 0;
    for (int32_t i : order) {  // ascending ids: the tokens of weight 0 add nothing
      cumulative += weight[i];
      if (point < cumulative) return i;
    }
    KVDICE_CHECK(false, "sampling point {} beyond total weight {}", point, total);
  }

  const auto before = [&](int32_t a, int32_t b) {
    return weight[a] > weight[b] || (weight[a] == weight[b] && a < b);
  };
  auto begin = order.begin();
  size_t keep = order.size();
  if (cut_k && static_cast<size_t>(top_k) < keep) {
    std::nth_element(begin, begin + top_k, order.end(), before);  // the first k of the order, unsorted
    keep = static_cast<size_t>(top_k);
  }
  if (cut_p) {
    uint64_t total = 0;
    for (size_t i = 0; i < keep; ++i) total += weight[order[i]];
    // Sort the head of [0, keep) a stretch at a time: each stretch is the next `width` of the order.
    uint64_t sum = 0;
    size_t sorted = 0, width = 64;
    bool reached = false;
    while (!reached && sorted < keep) {
      const size_t end = std::min(keep, sorted + width);
      if (end < keep) std::nth_element(begin + sorted, begin + end, begin + keep, before);
      std::sort(begin + sorted, begin + end, before);
      for (size_t i = sorted; i < end; ++i) {
        sum += weight[order[i]];
        if (reaches_top_p(sum, total, top_p)) {
          keep = i + 1;
          reached = true;
          break;
        }
      }
      sorted = end;
      width *= 2;
    }
  }
  // The kept tokens in ascending id order.
  std::sort(begin, begin + keep);
  uint64_t total = 0;
  for (size_t i = 0; i < keep; ++i) total += weight[order[i]];
  const uint64_t point = sampling_point(key, step, total);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += weight[order[i]];
    if (point < cumulative) return order[i];
  }
  KVDICE_CHECK(false, "sampling point {} beyond total weight {}", point, total);
  return 0;
}

}  // namespace kvdice::backend::cpu
