// random on the device (twin of policy/random.cpp): the random_pp draw without prompt protection.
#include "policy/cuda/random_subset.cuh"

namespace kvdice::policy {
namespace {

struct RandomDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);
  }
};

}  // namespace

void cuda_select_random(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RandomDevice>(args, stream);
}

}  // namespace kvdice::policy
