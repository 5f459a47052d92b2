// random_pp_rec on the device (twin of policy/random_pp_rec.cpp): prompt protected, the n_rec =
// min(K_sel - pl, round-half-even(recent · K_sel)) newest unprotected candidates kept, and the CPU's
// draw_victims over the remaining candidates in slot order (stream c = KV head) decides the rest.
#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"
#include "policy/policy_options.h"

namespace kvdice::policy {
namespace {

struct RandomPpRecParams {
  double recent = 0.5;  // share of K_sel kept as the most recent
};

CudaParams bind_random_pp_rec(PolicyOptions& options) {
  CudaParams params;
  params.emplace<RandomPpRecParams>().recent = options.require_double("recent");
  return params;
}

struct RandomPpRecDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    cuda::HeadScratch w(scratch, args.capacity);
    const int first = h.n_protected;
    const int count = h.n_candidates - first;
    const int free = h.keep - first;
    const int rounded = static_cast<int>(nearbyint(args.params.as<RandomPpRecParams>().recent * h.keep));  // as Python's round()
    const int n_rec = rounded < free ? rounded : free;
    cuda::age_order(h, w, first);
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    for (int a = count - n_rec + static_cast<int>(threadIdx.x); a < count; a += blockDim.x)
      keep[w.slot_of_age[a]] = 1;
    __syncthreads();
    // The draw over the unkept candidates in slot order (w.slot_of_age is free again).
    cuda::keep_random_rest_device(h, first, count - n_rec, count - free, w.slot_of_age, keep);
  }
};

void cuda_select_random_pp_rec(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RandomPpRecDevice>(args, stream);
}

}  // namespace

// The candidates are sorted by age and the random pool listed in the head scratch.
const CudaSelection cuda_file_random_pp_rec{
    .select = cuda_select_random_pp_rec, .bind = bind_random_pp_rec, .head_scratch = true};

}  // namespace kvdice::policy
