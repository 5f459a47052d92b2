// The device selection shared by h2o and h2o_pp (twin of policy/h2o.cpp; they differ only in the row's
// n_protected): the K_sel − pl candidates with the most accumulated attention (the pool's fp32
// attention_mass, which the CUDA attention op records: backend/cuda/attention_mass.cu), ties keeping the
// older first. fp32 → fp64 preserves the order exactly, so the kept set is the CPU's.
#pragma once

#include "policy/cuda/scoring.cuh"

namespace kvdice::policy::cuda {

struct H2oDevice {
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    HeadScratch w(scratch, args.capacity);
    age_order(h, w);
    const float* mass = args.layers[h.layer].attention_mass;
    for (int a = threadIdx.x; a < h.n_candidates; a += blockDim.x)
      w.b[a] = static_cast<double>(mass[pool_index(h, w.slot_of_age[a])]);
    __syncthreads();
    keep_prompt_and_highest_device(h, w, w.b, keep);
  }
};

}  // namespace kvdice::policy::cuda
