// snapkv and snapkv_pp on the device (twins of policy/snapkv.cpp): the top K_sel candidates by smoothed
// windowed attention (window_attention.cuh) past the row's n_protected prompt slots (0 for snapkv).
#include "policy/cuda/snapkv_select.cuh"

namespace kvdice::policy {

void cuda_select_snapkv(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::SnapKvDevice>(args, stream);
}

}  // namespace kvdice::policy
