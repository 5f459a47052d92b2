// h2o_pp on the device (twin of policy/h2o.cpp's _pp variant: the prompt pinned): prompt + window + the
// candidates with the most accumulated attention (h2o_select.cuh).
#include "policy/cuda/h2o_select.cuh"

namespace kvdice::policy {

void cuda_select_h2o_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<cuda::H2oDevice>(args, stream);
}

}  // namespace kvdice::policy
