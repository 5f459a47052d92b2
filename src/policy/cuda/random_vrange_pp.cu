// random_vrange_pp on the device (twin of policy/random_vrange_pp.cpp): the prompt, the
// n_tag = floor(share · (K_sel - pl)) unprotected candidates of widest value range (float compare, ties:
// the older first, as keep_highest<float>), then the CPU's draw_victims over the remaining candidates in
// slot order (stream c = KV head).
#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"
#include "policy/policy_options.h"

namespace kvdice::policy {
namespace {

struct RandomVrangePpParams {
  double share = 0.0;  // of K_sel - pl tagged by value range
};

CudaParams bind_random_vrange_pp(PolicyOptions& options) {
  CudaParams params;
  params.emplace<RandomVrangePpParams>().share = options.require_double("share");
  return params;
}

struct RandomVrangePpDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    cuda::HeadScratch w(scratch, args.capacity);
    const int first = h.n_protected;
    const int count = h.n_candidates - first;
    const int free = h.keep - first;
    const int tagged = static_cast<int>(floor(args.params.as<RandomVrangePpParams>().share * static_cast<double>(free)));
    const int n_tag = tagged < free ? tagged : free;
    const float* range = args.layers[h.layer].value_range;
    cuda::age_order(h, w, first);
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    // Widest value ranges among the unprotected candidates, ties older first (key: ~range, age rank).
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      w.sort[i] = {~cuda::orderable(static_cast<double>(range[cuda::pool_index(h, w.slot_of_age[i])])),
                   static_cast<uint32_t>(i), 0};
    __syncthreads();
    cuda::take_first_pairs(w.sort, count, n_tag, [&](uint32_t age) { keep[w.slot_of_age[age]] = 1; });
    // The draw over the unkept candidates in slot order (w.slot_of_age is free again).
    cuda::keep_random_rest_device(h, first, count - n_tag, count - free, w.slot_of_age, keep);
  }
};

void cuda_select_random_vrange_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RandomVrangePpDevice>(args, stream);
}

}  // namespace

// The value ranges' keys and the draw's pool live in the head scratch.
const CudaSelection cuda_file_random_vrange_pp{
    .select = cuda_select_random_vrange_pp, .bind = bind_random_vrange_pp, .head_scratch = true};

}  // namespace kvdice::policy
