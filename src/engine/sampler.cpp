#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace kvdice::engine {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail("--temperature must be >= 0 (got {})", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("--top-p must be in (0, 1] (got {})", top_p);
  if (top_k < 0) fail("--top-k must be >= 0 (got {})", top_k);
}

Sampler::Sampler(const SamplingParams& params, uint64_t sequence_id)
    : params_(params), key_(philox_key(params.seed, sequence_id, RngDomain::Sampling)) {
  params_.validate();
}

int Sampler::sample(std::span<const float> logits, uint32_t step) const {
  KVDICE_CHECK(!logits.empty(), "empty logits");
  const int n = static_cast<int>(logits.size());
  if (params_.temperature == 0.0f) {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit descending (stable: ties keep the lower id first).
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  int keep = n;
  if (params_.top_k > 0 && params_.top_k < n) keep = params_.top_k;
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (keep < n) {
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    order.resize(keep);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  // Softmax at temperature over the survivors of top-k.
  std::vector<double> probs(keep);
  const double max_logit = logits[order[0]] / params_.temperature;
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    probs[i] = std::exp(logits[order[i]] / params_.temperature - max_logit);
    total += probs[i];
  }
  for (double& p : probs) p /= total;
  // Top-p: keep the shortest prefix whose mass reaches top_p (always at least one token).
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cumulative += probs[i];
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  } else {
    total = 1.0;
  }
  const PhiloxStream stream{key_, step, 0, 0};
  const double u = static_cast<double>(stream.draw_u64(0) >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  for (int i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (u < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace kvdice::engine
