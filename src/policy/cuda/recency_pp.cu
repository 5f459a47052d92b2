// recency_pp on the device (twin of policy/recency_pp.cpp): the prompt plus the newest candidates.
#include "policy/cuda/recency_order.cuh"

namespace kvdice::policy {
namespace {

struct RecencyPpDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    for (int slot = threadIdx.x; slot < h.n_protected; slot += blockDim.x) keep[slot] = 1;
    __syncthreads();
    cuda::keep_oldest_and_newest_device(h, h.n_protected, 0, h.keep - h.n_protected, keep);
  }
};

}  // namespace

void cuda_select_recency_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RecencyPpDevice>(args, stream);
}

}  // namespace kvdice::policy
