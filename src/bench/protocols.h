// The four `kvdice bench` protocols (docs/benchmarks.md describes each). run_bench loads the model,
// opens the backend, measures its copy bandwidth, runs the protocol and returns one JSON run record:
// run_header() fields, the device, the bandwidth, the model's source and shape, every parameter, each
// result's metrics and the validation. The caller writes it and fails when validation.ok is false.
#pragma once

#include "backend/backend.h"
#include "bench/bench_options.h"
#include "bench/fixed_load.h"
#include "core/json.h"
#include "kv/budget.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "policy/eviction_policy.h"

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

// The equal-memory accounting of `capacity`: what one sequence reserves under a policy's signals and a
// budget in a pool of `kv_dtype` KV (the backend's), and how many such sequences `pool_bytes` hold. A
// pure function of the shapes, so the ratio between policies is known without running the load.
struct CapacityFit {
  int64_t slots = 0;           // KV slots a sequence reserves: max(P, T) + r bounded, P + O without a budget
  int64_t page_bytes = 0;      // one page of those slots across all layers (K, V, positions, per-slot signals)
  int64_t ring_row_bytes = 0;  // its query ring row (a policy reading window queries), else 0
  int64_t sequence_bytes = 0;  // its pages plus its ring row
  int64_t fit = 0;             // pool_bytes / sequence_bytes
};
CapacityFit capacity_fit(const kv::KvShape& shape, int n_query_heads, DType kv_dtype,
                         const policy::SignalNeeds& needs, const kv::BudgetSpec& budget, int prompt_len,
                         int output_len, int64_t pool_bytes);

// Each returns {"parameters": {...}, "results": [{"label", "metrics", "validation"}...]}.
Json run_throughput(const BenchContext& ctx);
Json run_capacity(const BenchContext& ctx);
Json run_evict(const BenchContext& ctx);
Json run_latency(const BenchContext& ctx);
// One of latency's two loads: a single request whose prompt is `context` tokens.
BenchOptions latency_load(const BenchOptions& options, int context);

// The policies `evict` times by default: every evicting policy `backend` can run.
std::vector<std::string> default_evict_policies(const backend::Backend& backend);
// The policies `evict` times (--policies, else the defaults), each checked: it exists, takes its options,
// evicts, runs on `backend` and fits the budget; and the batch sizes. Error naming the first problem.
std::vector<std::string> check_evict_options(const BenchOptions& options, const backend::Backend& backend);

// Every check of the protocol's options that needs neither the model nor a measurement (policies,
// budgets, prompt lengths, batch sizes): run_bench runs it before loading the model, so a bad flag fails
// at once, not after the minutes a large checkpoint or random model takes to load.
void check_bench_options(const BenchOptions& options, const backend::Backend& backend);

Json run_bench(const BenchOptions& options);

}  // namespace kvdice::bench
