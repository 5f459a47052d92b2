// How big the KV pool is: the one rule every command that builds an engine shares. On CUDA the pool
// takes the device memory left after weights, activations and step buffers, up to a fraction of the
// device (vLLM's --gpu-memory-utilization) or a size in GiB; --kv-slots overrides both. On the CPU the
// pool is lazily-touched anonymous memory sized by the engine's limits, never more than the RAM.
#pragma once

#include <cstdint>
#include <string>

namespace kvdice::kv {

// The budget `kvdice serve` runs a request under when neither the command line nor the request names
// one: random_pp with T = 2048 and r = 64 (docs/server.md).
inline constexpr int kDefaultServeBudget = 2048;
inline constexpr int kDefaultServeWindow = 64;
// The fraction of the device's memory the process may hold when the pool is sized from it.
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;

// What the user asked for; 0 means not given. At most one of the three may be given.
struct PoolRequest {
  int64_t kv_slots = 0;               // slots per (layer, KV head) that running sequences may reserve
  double kv_memory_gib = 0;           // pool size in GiB
  double gpu_memory_utilization = 0;  // fraction of the device (0, 1]; CUDA only; default 0.9
};

// What the pool is sized from, measured once weights, activations and step buffers are allocated.
struct PoolInputs {
  bool cpu = false;
  int64_t total_bytes = 0;      // device memory (CUDA) or RAM (CPU)
  int64_t free_bytes = 0;       // free now
  int64_t reserve_bytes = 0;    // kept free for scratch that grows with the first steps (CUDA)
  int64_t page_bytes = 0;       // one page: all layers and KV heads, K, V, positions, per-slot signals
  // The query ring of a policy reading window queries: one row of ring_row_bytes per sequence that can
  // run at once (0: no ring). Rows are max_batch, or fewer where the pool's bytes cannot hold that many
  // sequences of `sequence_slots` (the default budget's smallest reservation, T + r) with their rows.
  int64_t ring_row_bytes = 0;
  int64_t sequence_slots = 0;
  int page_slots = 16;
  int max_batch = 1;            // a page of rounding per running sequence on top of --kv-slots
  int64_t cpu_default_pages = 0;  // the CPU pool when nothing is requested
};

// The pool's bytes are pages x page_bytes plus ring_rows x ring_row_bytes; every size asked for counts
// both.
struct PoolPlan {
  int64_t pages = 0;
  int ring_rows = 0;       // rows of the query ring (0 without one)
  int64_t slot_limit = 0;  // reserved slots across running sequences at most; 0 = the pool's pages
  std::string rule;        // how the size was chosen, for the start-up line
};

// Throws Error naming the flag when the request is out of range, does not fit, or mixes flags.
PoolPlan plan_kv_pool(const PoolRequest& request, const PoolInputs& inputs);

// Throws Error when the plan's pool does not fit: on CUDA what is free less the reserve, on the CPU
// (lazily touched pages) the RAM itself; `asked` names what asked for that size.
void check_kv_pool_fits(const PoolPlan& plan, const PoolInputs& inputs, const std::string& asked);

// `bytes` of pool split into query ring rows and pages: as many rows as sequences of sequence_slots
// with their rows fit in `bytes` (at least 1, at most max_batch), the rest pages. pages may come out
// < 1 (the caller refuses such a pool).
PoolPlan split_kv_pool_bytes(int64_t bytes, const PoolInputs& inputs);

// Sequences of `reservation_slots` each that fit together: whole pages each, and within `slot_limit`
// when it is set (0 = none).
int64_t sequences_that_fit(int64_t pool_pages, int page_slots, int64_t slot_limit, int64_t reservation_slots);

}  // namespace kvdice::kv
