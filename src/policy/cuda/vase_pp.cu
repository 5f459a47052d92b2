// vase_pp on the device (twin of policy/vase.cpp's _pp variant: the prompt pinned): sinks, widest value
// ranges, attention-weighted draw without replacement (vase_select.cuh).
#include "policy/cuda/vase_select.cuh"

namespace kvdice::policy {

void cuda_select_vase_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::VaseDevice>(args, stream);
}

}  // namespace kvdice::policy
