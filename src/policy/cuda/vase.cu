// vase on the device (twin of policy/vase.cpp): sinks, widest value
// ranges, attention-weighted draw without replacement (vase_select.cuh).
#include "policy/cuda/vase_select.cuh"

namespace kvdice::policy {

void cuda_select_vase(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::VaseDevice>(args, stream);
}

}  // namespace kvdice::policy
