// EvictionPolicy: decides, per (sequence, layer, KV head, round), which candidate slots to keep.
// A policy declares the signals it needs; the engine records only those. Policies never see the
// backend; randomness comes from the counter-based stream in the selection input.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/philox.h"

namespace kvdice::policy {

// Signals a scoring policy may ask the engine to record (the baselines of a later issue).
struct SignalNeeds {
  bool window_queries = false;         // ring buffer of the last r post-RoPE queries per query head
  bool accumulated_attention = false;  // H2O: attention mass each slot has received
  bool value_ranges = false;           // VaSE: max - min over value channels
  bool any() const { return window_queries || accumulated_attention || value_ranges; }
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
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;  // one line for --help and logs
  virtual bool evicts() const { return true; }   // false for "full"
  virtual bool protects_prompt() const = 0;
  virtual SignalNeeds needs() const { return {}; }
  // Sets exactly `input.keep` flags in `keep` (size n_candidates), including every protected slot.
  virtual void select(const SelectionInput& input, std::span<uint8_t> keep) const = 0;
};

// Registry: one line per policy in registry.cpp.
std::unique_ptr<EvictionPolicy> make_policy(std::string_view name);  // Error listing known names
std::vector<std::string> policy_names();

}  // namespace kvdice::policy
