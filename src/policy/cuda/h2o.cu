// h2o on the device (twin of policy/h2o.cpp): the window + the candidates with the most accumulated
// attention (h2o_select.cuh).
#include "policy/cuda/h2o_select.cuh"

namespace kvdice::policy {

void cuda_select_h2o(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<cuda::H2oDevice>(args, stream);
}

}  // namespace kvdice::policy
