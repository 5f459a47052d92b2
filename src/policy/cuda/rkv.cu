// rkv and rkv_pp on the device (twins of policy/rkv.cpp): past the row's n_protected prompt slots (0
// for rkv), λ · smoothed windowed attention − (1 − λ) · key redundancy, top K_sel (rkv_select.cuh).
#include "policy/cuda/rkv_select.cuh"

namespace kvdice::policy {

void cuda_select_rkv(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_window_scoring_selection<cuda::RkvDevice>(args, stream);
}

}  // namespace kvdice::policy
