// Random weights for a model shape: an HF config.json (configs/shapes/ holds the shapes kvdice bench
// runs) and a seed give a TensorSource whose every tensor is generated, never read, so a benchmark runs
// on a machine without checkpoints or a network. Values: uniform with standard deviation `stddev`
// (HF's initializer_range, 0.02) from a counter-based generator keyed by (seed, tensor name), the same
// for any thread count; RMSNorm weights are 1; biases where the architecture has them are random too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "model/config.h"
#include "model/model.h"
#include "formats/tensor_source.h"

namespace kvdice::model {

// Reads and validates a model shape from an HF config.json; Error naming the file on a missing file,
// bad JSON or an unsupported architecture.
ModelConfig read_shape_config(const std::filesystem::path& config_json);

// Every tensor required_tensors(config) names, generated on demand (load_f32), in parallel.
std::unique_ptr<TensorSource> random_tensor_source(const ModelConfig& config, uint64_t seed,
                                                   float stddev = 0.02f);

// The model with random weights, loaded through the same checks as a checkpoint (load_weights).
std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed, float stddev = 0.02f);

}  // namespace kvdice::model
