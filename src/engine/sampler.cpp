#include "engine/sampler.h"

#include <cmath>

#include "backend/sampling_rule.h"
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
  return backend::sample_reference(logits.data(), static_cast<int>(logits.size()), params_.temperature,
                                   params_.top_k, params_.top_p, key_, step);
}

}  // namespace kvdice::engine
