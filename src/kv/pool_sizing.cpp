#include "kv/pool_sizing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvdice::kv {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

// The query ring's part of a pool's description (empty without one).
std::string ring_text(int rows, const PoolInputs& in) {
  return rows > 0 ? fmt::format(" and a query ring of {} rows of {} bytes", rows, in.ring_row_bytes) : std::string();
}

}  // namespace

PoolPlan split_kv_pool_bytes(int64_t bytes, const PoolInputs& in) {
  PoolPlan plan;
  if (in.ring_row_bytes > 0) {
    const int64_t sequence_pages =
        std::max<int64_t>(1, (in.sequence_slots + in.page_slots - 1) / in.page_slots);
    const int64_t fit = std::max<int64_t>(bytes, 0) / (sequence_pages * in.page_bytes + in.ring_row_bytes);
    plan.ring_rows = static_cast<int>(std::clamp<int64_t>(fit, 1, std::max(in.max_batch, 1)));
  }
  plan.pages = (bytes - plan.ring_rows * in.ring_row_bytes) / in.page_bytes;
  return plan;
}

void check_kv_pool_fits(const PoolPlan& p, const PoolInputs& in, const std::string& asked) {
  // On CUDA the pool must fit what is free now less the reserve; on the CPU its pages are touched
  // lazily, so it may exceed what is free but never the RAM itself.
  const int64_t room = in.cpu ? in.total_bytes : in.free_bytes - in.reserve_bytes;
  const int64_t bytes = p.pages * in.page_bytes + p.ring_rows * in.ring_row_bytes;
  if (bytes <= room) return;
  fail("{} needs a KV pool of {:.2f} GiB ({} pages of {} bytes{}); {} has {:.2f} GiB{}", asked, gib(bytes), p.pages,
       in.page_bytes, ring_text(p.ring_rows, in), in.cpu ? "RAM" : "free device memory",
       gib(std::max<int64_t>(room, 0)), in.cpu ? "" : " after weights, activations and a scratch reserve");
}

PoolPlan plan_kv_pool(const PoolRequest& request, const PoolInputs& in) {
  KVDICE_CHECK(in.page_bytes > 0 && in.page_slots > 0 && in.ring_row_bytes >= 0,
               "pool sizing: page of {} bytes, {} slots, ring rows of {} bytes", in.page_bytes, in.page_slots,
               in.ring_row_bytes);
  const int given = (request.kv_slots != 0) + (request.kv_memory_gib != 0) + (request.gpu_memory_utilization != 0);
  if (given > 1)
    fail("the KV pool is sized one way: pass one of --kv-slots, --kv-memory-gib, --gpu-memory-utilization");
  if (request.kv_slots < 0) fail("--kv-slots must be >= 1 (got {})", request.kv_slots);
  if (!(request.kv_memory_gib >= 0) || !std::isfinite(request.kv_memory_gib))
    fail("--kv-memory-gib must be a positive number of GiB (got {})", request.kv_memory_gib);
  if (!(request.gpu_memory_utilization >= 0 && request.gpu_memory_utilization <= 1))
    fail("--gpu-memory-utilization must be in (0, 1] (got {})", request.gpu_memory_utilization);
  if (in.cpu && request.gpu_memory_utilization != 0)
    fail("--gpu-memory-utilization sizes a CUDA device's pool; on the CPU pass --kv-slots or --kv-memory-gib");

  PoolPlan plan;
  const int ring_rows_max = in.ring_row_bytes > 0 ? std::max(in.max_batch, 1) : 0;
  if (request.kv_slots > 0) {
    // Every running sequence rounds its reservation up to whole pages: one page each on top.
    plan.pages = (request.kv_slots + in.page_slots - 1) / in.page_slots + in.max_batch;
    plan.slot_limit = request.kv_slots;
    // A ring row for each sequence of the default reservation the slots hold, max_batch at most.
    plan.ring_rows = ring_rows_max;
    if (plan.ring_rows > 0 && in.sequence_slots > 0)
      plan.ring_rows =
          static_cast<int>(std::clamp<int64_t>(request.kv_slots / in.sequence_slots, 1, ring_rows_max));
    check_kv_pool_fits(plan, in, fmt::format("--kv-slots {}", request.kv_slots));
    plan.rule = fmt::format("--kv-slots {}", request.kv_slots);
  } else if (request.kv_memory_gib > 0) {
    plan = split_kv_pool_bytes(static_cast<int64_t>(request.kv_memory_gib * kGiB), in);
    if (plan.pages < 1)
      fail("--kv-memory-gib {} holds no page of the KV pool (one page is {} bytes{})", request.kv_memory_gib,
           in.page_bytes, ring_text(plan.ring_rows, in));
    check_kv_pool_fits(plan, in, fmt::format("--kv-memory-gib {}", request.kv_memory_gib));
    plan.rule = fmt::format("--kv-memory-gib {}", request.kv_memory_gib);
  } else if (in.cpu) {
    // Lazily touched: the engine's limits, a ring row for each of max_batch sequences.
    plan.ring_rows = ring_rows_max;
    plan.pages = std::min(in.cpu_default_pages,
                          (in.total_bytes / 2 - plan.ring_rows * in.ring_row_bytes) / in.page_bytes);
    plan.rule = "the engine's limits, at most half the RAM";
  } else {
    const double fraction =
        request.gpu_memory_utilization > 0 ? request.gpu_memory_utilization : kDefaultGpuMemoryUtilization;
    // The process may hold `fraction` of the device; what is in use now (weights, activations, step
    // buffers, the runtime, and anything else on the device) comes off first.
    const int64_t used = in.total_bytes - in.free_bytes;
    const int64_t allowed = static_cast<int64_t>(fraction * static_cast<double>(in.total_bytes)) - used;
    plan = split_kv_pool_bytes(std::min(allowed, in.free_bytes - in.reserve_bytes), in);
    if (plan.pages < 1)
      fail(
          "no device memory left for the KV pool: {:.2f} GiB of {:.2f} GiB in use after weights and "
          "activations, "
          "--gpu-memory-utilization {} allows {:.2f} GiB; one page needs {} bytes{} (raise "
          "--gpu-memory-utilization or pass --kv-memory-gib)",
          gib(used), gib(in.total_bytes), fraction, gib(static_cast<int64_t>(fraction * in.total_bytes)),
          in.page_bytes, ring_text(plan.ring_rows, in));
    plan.rule = fmt::format("--gpu-memory-utilization {:.2f}", fraction);
  }
  if (plan.pages < 1) fail("the KV pool has no page ({} requested)", plan.rule);
  return plan;
}

int64_t sequences_that_fit(int64_t pool_pages, int page_slots, int64_t slot_limit, int64_t reservation_slots) {
  if (reservation_slots < 1 || page_slots < 1) return 0;
  const int64_t pages_each = (reservation_slots + page_slots - 1) / page_slots;
  int64_t n = pool_pages / pages_each;
  if (slot_limit > 0) n = std::min(n, slot_limit / reservation_slots);
  return n;
}

}  // namespace kvdice::kv
