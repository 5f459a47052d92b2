// The model a benchmark runs: a checkpoint, or random weights of a config.json shape (no tokenizer
// either way: prompts are random token ids from the seeded generator).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "core/json.h"
#include "engine/model_bundle.h"
#include "model/model.h"

namespace kvdice::bench {

struct BenchModel {
  engine::ModelBundle bundle;           // a checkpoint (its model)...
  std::unique_ptr<model::Model> owned;  // ...or random weights
  std::string source;                   // for the report
  double load_seconds = 0.0;
  const model::Model& model() const { return owned ? *owned : *bundle.model; }
};

BenchModel load_bench_model(const BenchOptions& options, const model::LoadOptions& load = {});

// The prompt of request `index`: `length` uniform token ids in [0, vocab) keyed by (seed, index).
std::vector<int> random_prompt(int vocab, int length, uint64_t seed, uint64_t index);

// The model's shape and the bytes a decode step reads, as the report states them.
Json model_shape_json(const model::ModelConfig& config);

}  // namespace kvdice::bench
