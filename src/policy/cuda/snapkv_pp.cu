// snapkv_pp on the device (twin of policy/snapkv.cpp's _pp variant): the prompt pinned, then the top
// of the smoothed windowed attention among the other candidates.
#include "policy/cuda/snapkv_select.cuh"

namespace kvdice::policy {

void cuda_select_snapkv_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::SnapKvDevice>(args, stream);
}

}  // namespace kvdice::policy
