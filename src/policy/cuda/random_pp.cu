// random_pp and random on the device (twins of policy/random_pp.cpp and policy/random.cpp): a fresh
// uniform subset of the candidates past the row's n_protected prompt slots (0 for random) per (layer,
// KV head, round), stream c = KV head index.
#include "policy/cuda/random_subset.cuh"

namespace kvdice::policy {
namespace {

struct RandomPpDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);
  }
};

void cuda_select_random_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RandomPpDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_random_pp{cuda_select_random_pp};

}  // namespace kvdice::policy
