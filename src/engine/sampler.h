// Sampler: greedy, temperature, top-k, top-p (HF order: temperature, then top-k, then top-p),
// drawing from a counter-based stream keyed by (seed, sequence id) in the sampling domain, so a
// sequence's tokens depend only on its seed and its own logits, never on batch composition. The exact
// rule (integer weights, shared with the CUDA kernel) is backend/sampling_rule.h.
#pragma once

#include <cstdint>
#include <span>

#include "core/philox.h"

namespace kvdice::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;        // keep the smallest high-probability set with mass >= top_p
  int top_k = 0;             // 0 = no top-k
  uint64_t seed = 0;
  void validate() const;  // Error naming the flag on out-of-range values
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t sequence_id);
  PhiloxKey key() const { return key_; }
  // Samples the `step`-th token of the sequence from raw logits.
  int sample(std::span<const float> logits, uint32_t step) const;

 private:
  SamplingParams params_;
  PhiloxKey key_;
};

}  // namespace kvdice::engine
