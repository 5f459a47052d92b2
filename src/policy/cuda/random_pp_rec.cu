// random_pp_rec on the device (twin of policy/random_pp_rec.cpp): prompt protected, the n_rec =
// min(K_sel - pl, round-half-even(recent · K_sel)) newest unprotected candidates kept, and the CPU's
// draw_victims over the remaining candidates in slot order (stream c = KV head) decides the rest.
#include <cub/block/block_scan.cuh>

#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"

namespace kvdice::policy {
namespace {

struct RandomPpRecDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    using Scan = cub::BlockScan<int, cuda::kSelectionThreads>;
    __shared__ typename Scan::TempStorage scan;
    cuda::HeadScratch w(scratch, args.capacity);
    const int first = h.n_protected;
    const int count = h.n_candidates - first;
    const int free = h.keep - first;
    const int rounded = static_cast<int>(nearbyint(args.recent * h.keep));  // as Python's round()
    const int n_rec = rounded < free ? rounded : free;
    cuda::age_order(h, w, first);
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    for (int a = count - n_rec + static_cast<int>(threadIdx.x); a < count; a += blockDim.x)
      keep[w.slot_of_age[a]] = 1;
    __syncthreads();
    // The draw's pool: the unkept candidates in slot order (w.slot_of_age is free again).
    int32_t* pool = w.slot_of_age;
    int carry = 0;
    for (int base = first; base < h.n_candidates; base += blockDim.x) {
      const int slot = base + static_cast<int>(threadIdx.x);
      const int in_pool = slot < h.n_candidates && keep[slot] == 0 ? 1 : 0;
      int rank = 0, total = 0;
      Scan(scan).ExclusiveSum(in_pool, rank, total);
      if (in_pool) pool[carry + rank] = slot;
      carry += total;
      __syncthreads();
    }
    const int m = count - n_rec;
    const int victims = m - (free - n_rec);
    const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};
    for (int p = threadIdx.x; p < m; p += blockDim.x) keep[pool[p]] = 1;
    cuda::resolve_victims_device(stream, m, victims, [&](int p) { keep[pool[p]] = 0; });
  }
};

}  // namespace

void cuda_select_random_pp_rec(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RandomPpRecDevice>(args, stream);
}

}  // namespace kvdice::policy
