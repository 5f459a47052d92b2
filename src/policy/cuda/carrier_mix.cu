// carrier_mix, carrier_softmix, anti_mix and anti_softmix on the device (twin of policy/carrier_mix.cpp):
// a carrier head keeps random_pp's draw (stream c = KV head); every other head keeps the prompt, the
// m = floor(q · (K_sel - pl)) newest candidates (q = 1 for the mix policies) and the CPU's draw_victims
// over the remaining candidates in slot order for the rest. The options arrive as the policy's device
// table: [q, anti, n_heads, head...]; anti swaps which heads are carriers.
#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"

namespace kvdice::policy {
namespace {

struct CarrierMixDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
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
    // The draw over the unkept candidates in slot order (w.slot_of_age is free again).
    cuda::keep_random_rest_device(h, first, count - n_rec, count - free, w.slot_of_age, keep);
  }
};

void cuda_select_carrier_mix(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<CarrierMixDevice>(args, stream);
}

}  // namespace

// The launcher of all four names (registry.cpp): the table says which heads carry and how much recency
// the others keep.
// The recency heads sort their candidates by age in the head scratch.
const CudaSelection cuda_file_carrier_mix{.select = cuda_select_carrier_mix, .head_scratch = true};

}  // namespace kvdice::policy
