// Sampler: greedy, temperature, top-k, top-p (HF order: temperature, then top-k, then top-p),
// drawing from a counter-based stream keyed by (seed, sequence id) in the sampling domain, so a
// sequence's tokens depend only on its seed and its own logits, never on batch composition. The exact
// rule (integer weights, shared with the CUDA kernel) is backend/sampling_rule.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/philox.h"

namespace kvdice::engine {

// The sampling values every entry point accepts (flags, task files, requests). Below kMinTemperature a
// temperature only turns logits into overflowing quotients (0 already means greedy); above
// kMaxTemperature every token is equally likely to within the weights' resolution.
inline constexpr double kMinTemperature = 1e-3;
inline constexpr double kMaxTemperature = 100.0;

// What is wrong with a temperature or top-p value, as a sentence fit for "--temperature: ..."; empty
// when it is fine. Non-finite values are refused, never replaced.
std::string temperature_problem(double temperature);
std::string top_p_problem(double top_p);

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
