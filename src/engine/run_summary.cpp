#include "engine/run_summary.h"

#include <fmt/format.h>

namespace kvdice::engine {

KvFootprint kv_footprint(const model::ModelConfig& config, const SequenceStats& stats,
                         int bytes_per_element) {
  const int64_t per_slot = config.kv_bytes_per_token(bytes_per_element);
  KvFootprint f;
  f.resident_slots = stats.final_resident_slots;
  f.peak_slots = stats.peak_resident_slots;
  // The last sampled token is never fed back, so the context holds prompt + generated - 1 tokens.
  f.full_slots = stats.prompt_tokens + std::max(0, stats.generated_tokens - 1);
  f.resident_bytes = f.resident_slots * per_slot;
  f.peak_bytes = f.peak_slots * per_slot;
  f.full_bytes = f.full_slots * per_slot;
  return f;
}

namespace {
double decode_rate(const SequenceStats& s) {
  const int decoded = std::max(0, s.generated_tokens - 1);  // the first token comes from prefill
  return s.decode_seconds > 0 ? decoded / s.decode_seconds : 0.0;
}
std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }
}  // namespace

Json result_json(const GenerationResult& r, const std::string& text, const model::ModelConfig& config,
                 int bytes_per_element) {
  const SequenceStats& s = r.stats;
  const KvFootprint f = kv_footprint(config, s, bytes_per_element);
  return Json{{"id", r.id},
              {"prompt_ids", r.prompt},
              {"generated_ids", r.tokens},
              {"text", text},
              {"finish_reason", finish_reason_name(r.finish)},
              {"stats",
               {{"prompt_tokens", s.prompt_tokens},
                {"generated_tokens", s.generated_tokens},
                {"prefill_seconds", s.prefill_seconds},
                {"decode_seconds", s.decode_seconds},
                {"decode_tokens_per_second", decode_rate(s)},
                {"eviction_rounds", s.eviction_rounds},
                {"protected_prompt_slots", s.protected_prompt_slots},
                {"reserved_slots", s.reserved_slots},
                {"resident_slots", f.resident_slots},
                {"peak_resident_slots", f.peak_slots},
                {"full_attention_slots", f.full_slots},
                {"kv_bytes_per_element", bytes_per_element},
                {"resident_kv_bytes", f.resident_bytes},
                {"peak_kv_bytes", f.peak_bytes},
                {"full_attention_kv_bytes", f.full_bytes}}}};
}

std::string result_summary(const GenerationResult& r, const model::ModelConfig& config,
                           int bytes_per_element) {
  const SequenceStats& s = r.stats;
  const KvFootprint f = kv_footprint(config, s, bytes_per_element);
  std::string out;
  out += fmt::format("tokens: {} prompt + {} generated (finish: {})\n", s.prompt_tokens, s.generated_tokens,
                     finish_reason_name(r.finish));
  out += fmt::format("speed: prefill {:.2f} s ({:.1f} tok/s), decode {:.1f} tok/s\n", s.prefill_seconds,
                     s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0, decode_rate(s));
  out += fmt::format("eviction rounds: {} (protected prompt slots: {})\n", s.eviction_rounds,
                     s.protected_prompt_slots);
  out += fmt::format(
      "resident KV: {} slots/head now, {} peak; {} now, {} peak vs {} for full attention ({} tokens); "
      "{}-byte elements\n",
      f.resident_slots, f.peak_slots, mib(f.resident_bytes), mib(f.peak_bytes), mib(f.full_bytes),
      f.full_slots, bytes_per_element);
  return out;
}

}  // namespace kvdice::engine
