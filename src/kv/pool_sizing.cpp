#include "kv/pool_sizing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvdice::kv {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

}  // namespace

PoolPlan plan_kv_pool(const PoolRequest& request, const PoolInputs& in) {
  KVDICE_CHECK(in.page_bytes > 0 && in.page_slots > 0 && in.fixed_bytes >= 0,
               "pool sizing: page of {} bytes, {} slots, {} fixed bytes", in.page_bytes, in.page_slots,
               in.fixed_bytes);
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
  const char* where = in.cpu ? "RAM" : "free device memory";
  // On CUDA the pool must fit what is free now less the reserve; on the CPU its pages are touched
  // lazily, so it may exceed what is free but never the RAM itself.
  const int64_t room = in.cpu ? in.total_bytes : in.free_bytes - in.reserve_bytes;
  // The query ring (fixed_bytes) comes off every size before pages are counted.
  const std::string ring = in.fixed_bytes > 0 ? fmt::format(" and a query ring of {} bytes", in.fixed_bytes) : "";
  auto check_fits = [&](int64_t pages, const std::string& asked) {
    const int64_t bytes = pages * in.page_bytes + in.fixed_bytes;
    if (bytes > room)
      fail("{} needs a KV pool of {:.2f} GiB ({} pages of {} bytes{}); {} has {:.2f} GiB{}", asked, gib(bytes),
           pages, in.page_bytes, ring, where, gib(std::max<int64_t>(room, 0)),
           in.cpu ? "" : " after weights, activations and a scratch reserve");
  };
  if (request.kv_slots > 0) {
    // Every running sequence rounds its reservation up to whole pages: one page each on top.
    plan.pages = (request.kv_slots + in.page_slots - 1) / in.page_slots + in.max_batch;
    plan.slot_limit = request.kv_slots;
    check_fits(plan.pages, fmt::format("--kv-slots {}", request.kv_slots));
    plan.rule = fmt::format("--kv-slots {}", request.kv_slots);
  } else if (request.kv_memory_gib > 0) {
    plan.pages = (static_cast<int64_t>(request.kv_memory_gib * kGiB) - in.fixed_bytes) / in.page_bytes;
    if (plan.pages < 1)
      fail("--kv-memory-gib {} holds no page of the KV pool (one page is {} bytes{})", request.kv_memory_gib,
           in.page_bytes, ring);
    check_fits(plan.pages, fmt::format("--kv-memory-gib {}", request.kv_memory_gib));
    plan.rule = fmt::format("--kv-memory-gib {}", request.kv_memory_gib);
  } else if (in.cpu) {
    plan.pages = std::min(in.cpu_default_pages, (in.total_bytes / 2 - in.fixed_bytes) / in.page_bytes);
    plan.rule = "the engine's limits, at most half the RAM";
  } else {
    const double fraction =
        request.gpu_memory_utilization > 0 ? request.gpu_memory_utilization : kDefaultGpuMemoryUtilization;
    // The process may hold `fraction` of the device; what is in use now (weights, activations, step
    // buffers, the runtime, and anything else on the device) comes off first.
    const int64_t used = in.total_bytes - in.free_bytes;
    const int64_t allowed = static_cast<int64_t>(fraction * static_cast<double>(in.total_bytes)) - used;
    const int64_t bytes = std::min(allowed, in.free_bytes - in.reserve_bytes) - in.fixed_bytes;
    plan.pages = bytes / in.page_bytes;
    if (plan.pages < 1)
      fail(
          "no device memory left for the KV pool: {:.2f} GiB of {:.2f} GiB in use after weights and activations, "
          "--gpu-memory-utilization {} allows {:.2f} GiB; one page needs {} bytes{} (raise "
          "--gpu-memory-utilization or pass --kv-memory-gib)",
          gib(used), gib(in.total_bytes), fraction, gib(static_cast<int64_t>(fraction * in.total_bytes)),
          in.page_bytes, ring);
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
