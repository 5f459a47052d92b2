// The CPU backend's sample op: backend/sampling_rule.h's rule, the same token as sample_reference for
// the same logits, bit for bit, without sorting the vocabulary. Top-k and top-p need only the head of
// the rule's order (weight descending, id ascending); it is found by selection, a stretch at a time,
// until the stretch's weights reach the cut, and only the kept tokens are walked in id order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/philox.h"

namespace kvdice::backend::cpu {

// Scratch kept between calls so a decode step allocates nothing.
struct SamplingScratch {
  std::vector<uint32_t> weight;
  std::vector<int32_t> order;
};

int sample_tokens(const float* logits, int vocab, float temperature, int top_k, float top_p, PhiloxKey key,
                  uint32_t step, SamplingScratch& scratch);

}  // namespace kvdice::backend::cpu
