// snapkv on the device (twin of policy/snapkv.cpp): the top K_sel candidates by smoothed windowed
// attention (window_attention.cuh); unprotected (the engine gives the row n_protected = 0).
#include "policy/cuda/snapkv_select.cuh"

namespace kvdice::policy {

void cuda_select_snapkv(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::SnapKvDevice>(args, stream);
}

}  // namespace kvdice::policy
