// streaming on the device (twin of policy/streaming.cpp): 4 sink tokens (the oldest) plus the newest.
#include "policy/cuda/recency_order.cuh"

namespace kvdice::policy {
namespace {

constexpr int kSinkTokens = 4;  // must equal streaming.cpp's

struct StreamingDevice {
  __device__ static void select(const cuda::HeadSelect& h, uint8_t* keep) {
    const int sinks = kSinkTokens < h.keep ? kSinkTokens : h.keep;
    cuda::keep_oldest_and_newest_device(h, 0, sinks, h.keep - sinks, keep);
  }
};

void cuda_select_streaming(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_selection<StreamingDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_streaming{cuda_select_streaming};

}  // namespace kvdice::policy
