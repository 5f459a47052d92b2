// recency on the device (twin of policy/recency.cpp): the newest candidates only.
#include "policy/cuda/recency_order.cuh"

namespace kvdice::policy {
namespace {

struct RecencyDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    cuda::keep_oldest_and_newest_device(h, 0, 0, h.keep, keep);
  }
};

}  // namespace

void cuda_select_recency(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<RecencyDevice>(args, stream);
}

}  // namespace kvdice::policy
