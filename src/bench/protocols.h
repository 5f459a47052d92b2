// The four `kvdice bench` protocols (docs/benchmarks.md describes each). run_bench loads the model,
// opens the backend, measures its copy bandwidth, runs the protocol and returns one JSON run record:
// run_header() fields, the device, the bandwidth, the model's source and shape, every parameter, each
// result's metrics and the validation. The caller writes it and fails when validation.ok is false.
#pragma once

#include "backend/backend.h"
#include "bench/bench_options.h"
#include "bench/fixed_load.h"
#include "core/json.h"
#include "model/model.h"

namespace kvdice::bench {

struct BenchContext {
  const BenchOptions& options;
  const model::Model& model;
  backend::Backend& backend;
  double bandwidth = 0.0;  // bytes/s, measured by this run
};

// The load the options describe under `policy` (budget mapped by the convention; a prompt that does not
// fit the budget is refused, not truncated), with the whole load as one batch.
LoadSpec load_spec(const BenchOptions& options, const std::string& policy);
// Parameters every load-based protocol records.
Json load_parameters(const LoadSpec& spec);

// Each returns {"parameters": {...}, "results": [{"label", "metrics", "validation"}...]}.
Json run_throughput(const BenchContext& ctx);
Json run_capacity(const BenchContext& ctx);
Json run_evict(const BenchContext& ctx);
Json run_latency(const BenchContext& ctx);

// The policies `evict` times by default: every evicting policy `backend` can run.
std::vector<std::string> default_evict_policies(const backend::Backend& backend);

Json run_bench(const BenchOptions& options);

}  // namespace kvdice::bench
