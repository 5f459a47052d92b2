// random_pp on the device (twin of policy/random_pp.cpp): prompt protected, a fresh uniform subset of
// the other candidates per (layer, KV head, round), stream c = KV head index.
#include "policy/cuda/random_subset.cuh"

namespace kvdice::policy {
namespace {

struct RandomPpDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);
  }
};

}  // namespace

void cuda_select_random_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RandomPpDevice>(args, stream);
}

}  // namespace kvdice::policy
