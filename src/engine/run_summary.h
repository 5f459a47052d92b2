// Summaries of finished generations for people (text) and machines (JSON): tokens, speed,
// eviction rounds, resident KV versus what full attention would hold.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "engine/request.h"
#include "kv/budget.h"
#include "model/config.h"

namespace kvdice::engine {

struct KvFootprint {
  int64_t resident_slots = 0;  // per (layer, head) at the end
  int64_t peak_slots = 0;
  int64_t full_slots = 0;      // what full attention would hold at the end
  int64_t resident_bytes = 0;  // all layers and heads, K and V, at the storage precision
  int64_t peak_bytes = 0;
  int64_t full_bytes = 0;
};

KvFootprint kv_footprint(const model::ModelConfig& config, const SequenceStats& stats, int bytes_per_element);
Json result_json(const GenerationResult& result, const std::string& text, const model::ModelConfig& config,
                 int bytes_per_element);
std::string result_summary(const GenerationResult& result, const model::ModelConfig& config,
                           int bytes_per_element);

}  // namespace kvdice::engine
