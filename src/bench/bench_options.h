// Everything one `kvdice bench` run is told: the model, the backend, the protocol and its parameters.
// The CLI (src/cli/bench.cpp) fills it from flags; the protocols (protocols.h) read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kvdice::bench {

struct BenchOptions {
  std::string protocol;  // throughput, capacity, evict, latency
  // Model: a checkpoint path (already resolved), or random weights of a config.json shape.
  std::string model_path;
  bool random_weights = false;
  std::string config_path;
  uint64_t seed = 0;  // weights, prompts, sampling and eviction streams
  backend::BackendOptions backend;
  bool quick = false;
  bool graphs = true;

  // The load (throughput, capacity, latency) and the budget.
  int requests = 128;
  int prompt_len = 1024;
  int output_len = 32768;
  std::string policy = "random_pp";
  int budget = 2048;
  int window = 64;
  std::string convention = "reference";
  float temperature = 0.6f;
  float top_p = 0.95f;
  int prefill_chunk = 2048;
  int warmup_tokens = 4;  // untimed tokens a request of the same load first (LoadSpec::warmup_tokens)

  double memory_gib = 0.0;            // capacity: the KV pool's size in GiB
  std::vector<int> batches{1, 128};   // evict
  std::vector<std::string> policies;  // evict: empty = every evicting policy the backend runs
  int repeats = 20;                   // evict: timed rounds per measurement
  int max_context = 0;                // evict: page tables as wide as this many slots (0: T + r)
  int short_context = 128;            // latency: prompt lengths
  int long_context = 16384;

  size_t bandwidth_bytes = size_t{1} << 30;  // copy-bandwidth probe (CUDA: at least 1 GiB)

  std::string json_out;
  std::string markdown_out;
};

}  // namespace kvdice::bench
