// random_shared on the device (twin of policy/random_shared.cpp): one draw per (layer, round), stream
// c = kSharedHeadStream, so every KV head evicts the same slot indices.
#include "policy/cuda/random_subset.cuh"
#include "policy/random_subset.h"

namespace kvdice::policy {
namespace {

struct RandomSharedDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    cuda::keep_random_subset_device(h, kSharedHeadStream, keep);
  }
};

void cuda_select_random_shared(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RandomSharedDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_random_shared{cuda_select_random_shared};

}  // namespace kvdice::policy
