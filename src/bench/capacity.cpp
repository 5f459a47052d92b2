// capacity: the equal-memory protocol (docs/reference.md §4): the largest batch whose KV reservations fit
// `memory_gib` GiB of KV pool (K, V, positions and the policy's signals: per-slot ones with each page,
// the window queries as one query ring row of r queries per sequence; weights and activations are not
// counted) under the policy and budget (full attention reserves prompt + output), then that batch
// run as one load. A bounded cache makes the per-step cost stationary after the first rounds, so a
// shorter --output-len measures the steady state of the paper's 32k-token runs; the report says which.
#include <algorithm>

#include "bench/protocols.h"
#include "core/error.h"
#include "kv/kv_pool.h"
#include "policy/eviction_policy.h"

namespace kvdice::bench {

CapacityFit capacity_fit(const kv::KvShape& shape, int n_query_heads, DType kv_dtype,
                         const policy::SignalNeeds& needs, const kv::BudgetSpec& budget, int prompt_len,
                         int output_len, int64_t pool_bytes) {
  const int page_slots = kv::KvPool::kDefaultPageSlots;
  CapacityFit c;
  c.page_bytes = kv::KvPool::bytes_per_page(shape, kv_dtype, page_slots, needs);
  c.slots = budget.bounded() ? std::max(prompt_len, budget.budget) + budget.window
                             : int64_t{prompt_len} + output_len;
  // A policy reading window queries also keeps one query ring row of r queries per sequence (the
  // engine's ring has a row for each of max_batch = the batch that fits).
  c.ring_row_bytes = needs.window_queries
                         ? kv::KvPool::query_ring_bytes(shape, kv::QueryRingShape{1, budget.window, n_query_heads})
                         : 0;
  c.sequence_bytes = (c.slots + page_slots - 1) / page_slots * c.page_bytes + c.ring_row_bytes;
  c.fit = pool_bytes / c.sequence_bytes;
  return c;
}

Json run_capacity(const BenchContext& ctx) {
  const BenchOptions& o = ctx.options;
  if (o.memory_gib <= 0.0) fail("capacity needs --memory-gib G: the KV memory (GiB) every policy gets");
  LoadSpec spec = load_spec(o, o.policy);
  const auto policy = policy::make_policy(o.policy);
  const kv::BudgetSpec& b = spec.budget.engine;
  const int64_t pool_bytes = static_cast<int64_t>(o.memory_gib * 1073741824.0);
  const CapacityFit c = capacity_fit(ctx.model.kv_shape(), ctx.model.config().n_heads, ctx.backend.kv_dtype(),
                                     policy->needs(), b, o.prompt_len, o.output_len, pool_bytes);
  const int64_t slots = c.slots, ring_row_bytes = c.ring_row_bytes, sequence_bytes = c.sequence_bytes,
                fit = c.fit;
  if (fit < 1) {
    fail("--memory-gib {} holds no sequence: one reserves {} slots{} = {:.4f} GiB", o.memory_gib, slots,
         ring_row_bytes > 0 ? fmt::format(" and a query ring row of {} queries", b.window) : "",
         static_cast<double>(sequence_bytes) / 1073741824.0);
  }
  const int batch = static_cast<int>(std::min<int64_t>(fit, 4096));  // the engine's most rows
  spec.requests = batch;
  spec.max_batch = batch;
  spec.kv_pool_bytes = pool_bytes;
  const LoadResult result = run_load(ctx.model, ctx.backend, spec);
  Validation validation = result.validation;
  if (result.max_running != batch)
    validation.problems.push_back(
        fmt::format("only {} of the {} sequences that fit ran at once", result.max_running, batch));

  Json out;
  out["parameters"] = load_parameters(spec);
  out["parameters"]["memory_gib"] = o.memory_gib;
  out["parameters"]["memory_counts"] =
      "KV pool only (K, V, positions, policy signals), not weights or activations";
  out["parameters"]["slots_per_sequence"] = slots;
  out["parameters"]["kv_bytes_per_sequence"] = sequence_bytes;
  out["parameters"]["query_ring_bytes_per_sequence"] = ring_row_bytes;
  out["parameters"]["sequences_that_fit"] = fit;
  out["parameters"]["batch_capped_at_engine_limit"] = fit > batch;
  out["parameters"]["length_regime"] =
      b.bounded()
          ? (o.output_len >= 32768 ? "the paper's 32k-token outputs"
                                   : "steady state: a bounded cache makes the per-step cost stationary after "
                                     "the first rounds, so a shorter output measures the 32k runs' rate")
          : "full attention at this output length (per-step cost grows with the output)";
  Json metrics = result.metrics_json(ctx.bandwidth);
  metrics["batch"] = batch;
  out["results"] = Json::array({Json{{"label", fmt::format("{} x{}", spec.policy, batch)},
                                     {"metrics", metrics},
                                     {"validation", validation.to_json()}}});
  return out;
}

}  // namespace kvdice::bench
