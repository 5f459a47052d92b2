// rkv_pp on the device (twin of policy/rkv.cpp's _pp variant: the prompt pinned): λ · smoothed windowed
// attention − (1 − λ) · key redundancy, top K_sel (rkv_select.cuh).
#include "policy/cuda/rkv_select.cuh"

namespace kvdice::policy {

void cuda_select_rkv_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::RkvDevice>(args, stream);
}

}  // namespace kvdice::policy
