// Collects TriAttention's calibration statistics (policy/triattention_stats.h) by running the model over
// a text on the CPU backend. The pre-RoPE query (after q_norm) is recovered without touching the
// forward: the KV pool's query ring (the signal scoring policies use) records every post-RoPE query
// of a chunk of r tokens, and rotating each band back by its absolute position (the exact inverse of
// the backend's rotate-half RoPE, angles in double) gives the pre-RoPE query to the ring's bf16
// rounding (the model dtype, in which the reference's calibration sees its queries too).
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "model/model.h"
#include "policy/triattention_stats.h"

namespace kvdice::calibrate {

struct CalibrationOptions {
  int segment = 4096;  // the text is cut into segments of this many tokens, each a fresh sequence
  int chunk = 256;     // prefill rows per step (the query ring's length)
};

// Statistics over every token of `tokens` (each segment starts at position 0, as separate documents
// do in the reference's calibration). Needs a CPU backend. Metadata holds tokens and segment; the
// caller adds the model and text provenance.
policy::TriAttentionStats collect_triattention_stats(const model::Model& model, backend::Backend& backend,
                                                     std::span<const int> tokens,
                                                     const CalibrationOptions& options);

}  // namespace kvdice::calibrate
