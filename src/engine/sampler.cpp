#include "engine/sampler.h"

#include <cmath>

#include "backend/sampling_rule.h"
#include "core/error.h"

namespace kvdice::engine {

std::string temperature_problem(double temperature) {
  if (!std::isfinite(temperature)) return fmt::format("{} is not a finite number", temperature);
  if (temperature < 0.0) return fmt::format("{} is negative (0 = greedy)", temperature);
  if (temperature > 0.0 && temperature < kMinTemperature)
    return fmt::format("{} is below {}: dividing logits by it overflows; use 0 for greedy decoding", temperature,
                       kMinTemperature);
  if (temperature > kMaxTemperature) return fmt::format("{} is above {}", temperature, kMaxTemperature);
  return {};
}

std::string top_p_problem(double top_p) {
  if (!std::isfinite(top_p)) return fmt::format("{} is not a finite number", top_p);
  if (!(top_p > 0.0 && top_p <= 1.0)) return fmt::format("{} is outside (0, 1]", top_p);
  return {};
}

void SamplingParams::validate() const {
  if (const std::string problem = temperature_problem(temperature); !problem.empty())
    fail("--temperature: {}", problem);
  if (const std::string problem = top_p_problem(top_p); !problem.empty()) fail("--top-p: {}", problem);
  if (top_k < 0) fail("--top-k must be >= 0 (got {})", top_k);
}

Sampler::Sampler(const SamplingParams& params, uint64_t sequence_id)
    : params_(params), key_(philox_key(params.seed, sequence_id, RngDomain::Sampling)) {
  params_.validate();
}

int Sampler::sample(std::span<const float> logits, uint32_t step) const {
  return backend::sample_reference(logits.data(), static_cast<int>(logits.size()), params_.temperature,
                                   params_.top_k, params_.top_p, key_, step);
}

}  // namespace kvdice::engine
