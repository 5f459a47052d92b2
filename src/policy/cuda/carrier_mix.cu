// carrier_mix, carrier_softmix, anti_mix and anti_softmix on the device (twin of policy/carrier_mix.cpp):
// a carrier head keeps random_pp's draw (stream c = KV head); every other head keeps the prompt, the
// m = floor(q · (K_sel - pl)) newest candidates (q = 1 for the mix policies) and the CPU's draw_victims
// over the remaining candidates in slot order for the rest. The options arrive as the policy's device
// table: [q, anti, n_heads, head...]; anti swaps which heads are carriers.
#include <cub/block/block_scan.cuh>

#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"

namespace kvdice::policy {
namespace {

struct CarrierMixDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    using Scan = cub::BlockScan<int, cuda::kSelectionThreads>;
    __shared__ typename Scan::TempStorage scan;
    const double* table = args.table;
    const double q = table[0];
    const bool anti = table[1] != 0.0;
    const int n_heads = static_cast<int>(table[2]);
    bool listed = false;
    for (int i = 0; i < n_heads; ++i) listed = listed || static_cast<int>(table[3 + i]) == h.kv_head;
    if (listed != anti) {  // a carrier head: random_pp's draw, bit for bit
      cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);
      return;
    }
    cuda::HeadScratch w(scratch, args.capacity);
    const int first = h.n_protected;
    const int count = h.n_candidates - first;
    const int free = h.keep - first;
    const int slice = static_cast<int>(floor(q * static_cast<double>(free)));
    const int n_rec = slice < free ? slice : free;
    cuda::age_order(h, w, first);
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    for (int a = count - n_rec + static_cast<int>(threadIdx.x); a < count; a += blockDim.x)
      keep[w.slot_of_age[a]] = 1;
    __syncthreads();
    if (n_rec == free) return;
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

// The launcher of all four names (registry.cpp): the table says which heads carry and how much recency
// the others keep.
void cuda_select_carrier_mix(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<CarrierMixDevice>(args, stream);
}

}  // namespace kvdice::policy
