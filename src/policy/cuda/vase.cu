// vase and vase_pp on the device (twins of policy/vase.cpp): the row's n_protected prompt slots (0 for
// vase), sinks, widest value ranges, attention-weighted draw without replacement (vase_select.cuh).
#include "policy/cuda/vase_select.cuh"

namespace kvdice::policy {

void cuda_select_vase(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::VaseDevice>(args, stream);
}

}  // namespace kvdice::policy
