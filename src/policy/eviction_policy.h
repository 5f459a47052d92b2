// EvictionPolicy: decides, per (sequence, layer, KV head, round), which candidate slots to keep.
// A policy declares the signals it needs; the engine records only those. Policies never see the
// backend; randomness comes from the counter-based stream in the selection input.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/philox.h"

namespace kvdice::policy {

// Signals a scoring policy asks the engine to record (only then are they recorded; see
// docs/policies.md). window_queries also makes the round hand the candidates' keys to select().
// What a policy may check about the model it is to run on (TriAttention: that its statistics were made
// for it). The model fills it (model::Model::fingerprint()); the q projection norms read every q weight,
// so they are computed only when a policy asks.
struct ModelFingerprint {
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<float> rope_inv_freq;                    // RoPE inverse frequency per band
  std::function<std::vector<float>()> q_weight_norms;  // Frobenius norm of each layer's q projection
};

struct SignalNeeds {
  bool window_queries = false;         // ring buffer of the last r post-RoPE queries per query head
  bool accumulated_attention = false;  // H2O: attention mass each slot has received
  bool value_ranges = false;           // VaSE: max - min over value channels
  bool any() const { return window_queries || accumulated_attention || value_ranges; }
  bool covers(const SignalNeeds& want) const {
    return (window_queries || !want.window_queries) && (accumulated_attention || !want.accumulated_attention) &&
           (value_ranges || !want.value_ranges);
  }
  // The signals set, by name ("window queries", "value ranges", "attention mass"), for messages.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    if (window_queries) out.emplace_back("window queries");
    if (value_ranges) out.emplace_back("value ranges");
    if (accumulated_attention) out.emplace_back("attention mass");
    return out;
  }
  SignalNeeds& operator|=(const SignalNeeds& o) {
    window_queries |= o.window_queries;
    accumulated_attention |= o.accumulated_attention;
    value_ranges |= o.value_ranges;
    return *this;
  }
};

struct SelectionInput {
  int layer = 0;
  int kv_head = 0;
  int n_candidates = 0;  // candidate slots [0, n_candidates): every resident slot but the newest r
  int keep = 0;          // how many candidates to keep (K_sel = T - r)
  int n_protected = 0;   // slots [0, n_protected) hold the prompt and must be kept (0 if unprotected)
  std::span<const int32_t> positions;  // absolute position of each candidate slot
  PhiloxKey key{};                     // keyed by (seed, sequence id) in the eviction domain
  uint32_t round = 0;
  int budget = 0;        // T (the round leaves T slots: keep + the window)
  int64_t appended = 0;  // tokens ever appended = the position of the next token

  // Signals, read-only, filled only when the policy's needs() asks for them (empty spans otherwise).
  int head_dim = 0;
  int group = 0;                          // query heads per KV head (GQA group size)
  int n_queries = 0;                      // window queries per query head (min(r, tokens appended))
  std::span<const float> keys;            // [n_candidates][head_dim] post-RoPE candidate keys
  std::span<const float> window_queries;  // [group][n_queries][head_dim] post-RoPE, newest first (the
                                          // round hands the query ring's bf16 values, widened)
  std::span<const float> value_range;     // [n_candidates] max - min over the value channels
  std::span<const float> attention_mass;  // [n_candidates] attention received since append (H2O)
  // Row kv_head of score_round() for policies that score the whole model once per round (empty otherwise).
  std::span<const double> round_score;  // [n_candidates]
};

// One sequence's candidates in every layer at the start of a round, before any layer is compacted:
// what a policy whose keep-set depends on all layers at once reads (TriAttention). Keys are post-RoPE
// fp32 [head_dim], read in place from the pool.
struct RoundKeys {
  int n_layers = 0, n_kv_heads = 0, head_dim = 0;
  int n_candidates = 0;
  int n_protected = 0;   // pl (0 for an unprotected policy)
  int64_t appended = 0;  // tokens ever appended = the position of the next token
  std::function<const float*(int layer, int kv_head, int slot)> key;
  std::function<int32_t(int layer, int kv_head, int slot)> position;
};

// A table the CUDA backend uploads once per policy and every launch of its CUDA selection reads
// (CudaSelectionArgs::table): TriAttention's statistics, the carrier heads, the pinned sites. A policy's
// numeric options reach its CUDA file through the file's own parameter type (policy/cuda_selection.h).
struct DeviceTable {
  std::vector<double> values;
  // The shape the table was made for (checked against the pool by the backend; 0: none): layers, query
  // heads, KV heads and head_dim.
  int layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;  // one line for --help and logs
  virtual bool evicts() const { return true; }   // false for "full"
  virtual bool protects_prompt() const = 0;
  virtual SignalNeeds needs() const { return {}; }
  // The options in effect, "key=value,..." with defaults filled in (empty for a policy without any).
  virtual std::string options() const { return {}; }
  // Sets exactly `input.keep` flags in `keep` (size n_candidates), including every protected slot.
  virtual void select(const SelectionInput& input, std::span<uint8_t> keep) const = 0;

  // Whole-model scoring (TriAttention): when true, the round calls score_round() once per sequence
  // before any layer is compacted and hands row kv_head of it ([n_kv_heads][n_candidates]) to every
  // layer's select() as input.round_score.
  virtual bool scores_whole_round() const { return false; }
  virtual std::vector<double> score_round(const RoundKeys& keys) const { return {}; }
  // The table the policy's CUDA selection reads besides the pool and its options (default: none).
  virtual DeviceTable device_table() const { return {}; }
  // Error when this policy cannot run on `model` (TriAttention: statistics of another model).
  virtual void check_model(const ModelFingerprint& model) const {}
  // Error when a request cannot run under this policy however its rounds fall: a round keeps `keep`
  // slots of keep + `window` candidates, `n_protected` of them the prompt's, and the request appends
  // positions below `end`. Checked when the request is submitted, so that it is refused before it runs
  // instead of failing a round that other sequences share (random_pin_pp: a span larger than a round
  // keeps, or more span tokens to drop in one round than it evicts).
  virtual void check_request(int keep, int window, int n_protected, int64_t end) const {}
};

// Registry: one line per policy in registry.cpp. `spec` is a name with optional options,
// "name:key=value,..." (policy_options.h); Error listing known names or naming a bad option. The
// message names no flag: the second form puts `source` (the flag or field the spec came from) first.
std::unique_ptr<EvictionPolicy> make_policy(std::string_view spec);
std::unique_ptr<EvictionPolicy> make_policy(std::string_view spec, std::string_view source);
// "name" or "name:options" with every option in effect: the spec to paste back for the same run.
std::string describe(const EvictionPolicy& policy);
std::vector<std::string> policy_names();

}  // namespace kvdice::policy
