// recency and recency_pp on the device (twins of policy/recency.cpp and policy/recency_pp.cpp): the
// prompt's n_protected slots (0 for recency: the engine gives an unprotected policy's rows none), then
// the newest candidates.
#include "policy/cuda/recency_order.cuh"

namespace kvdice::policy {
namespace {

struct RecencyDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    for (int slot = threadIdx.x; slot < h.n_protected; slot += blockDim.x) keep[slot] = 1;
    __syncthreads();
    cuda::keep_oldest_and_newest_device(h, h.n_protected, 0, h.keep - h.n_protected, keep);
  }
};

void cuda_select_recency(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RecencyDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_recency{cuda_select_recency};

}  // namespace kvdice::policy
