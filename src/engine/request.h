// What a caller asks for (GenerationRequest) and what it gets back (GenerationResult).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kv/budget.h"

namespace kvdice::engine {

enum class FinishReason { Running, Stop, Length, Cancelled };
std::string_view finish_reason_name(FinishReason reason);

// A request's own eviction policy (name[:key=value,...]) and budget (overrides the engine's defaults);
// the one spec type from the server's `kv` object and the command line to the engine.
struct KvSettings {
  std::string policy;
  kv::BudgetSpec budget;

  auto operator<=>(const KvSettings&) const = default;
};

struct GenerationRequest {
  std::vector<int> prompt;  // token ids of the whole prefill (chat template included)
  int max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<int> stop_ids;  // EOS ids; ignored when ignore_eos
  bool ignore_eos = false;
  // Teacher forcing: when non-empty, these tokens are fed instead of sampled ones (one decode step each,
  // eviction rounds running as in decoding) and the result records each one's log-probability.
  std::vector<int> forced_tokens;
  // False: the forced tokens are the whole request (max_new_tokens is their count, stop ids are
  // ignored). True: they are a prefix, after which the sequence samples as any request does, until
  // max_new_tokens tokens in all (the prefix included) or a stop id among the sampled tokens.
  bool sample_after_forced = false;
  // Keys this sequence's eviction and sampling streams; defaults to the engine-assigned id. Set it
  // to reproduce a sequence exactly in another batch or run (e.g. problem index * runs + run).
  std::optional<uint64_t> stream_id;
  std::optional<KvSettings> kv;  // default: the engine's policy and budget
};

struct SequenceStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int eviction_rounds = 0;
  int protected_prompt_slots = 0;  // pl, 0 when the policy does not protect the prompt
  int peak_resident_slots = 0;     // per (layer, head)
  int final_resident_slots = 0;
  int64_t reserved_slots = 0;  // reserved at admission
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

struct GenerationResult {
  uint64_t id = 0;
  std::vector<int> prompt;
  std::vector<int> tokens;  // generated ids (a final stop id included)
  // Teacher-forced runs only: log p(forced token) and whether it was the argmax, per step.
  std::vector<float> forced_logprobs;
  std::vector<uint8_t> forced_is_argmax;
  FinishReason finish = FinishReason::Running;
  SequenceStats stats;
};

}  // namespace kvdice::engine
