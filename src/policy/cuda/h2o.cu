// h2o and h2o_pp on the device (twins of policy/h2o.cpp): the row's n_protected prompt slots (0 for
// h2o), the window and the candidates with the most accumulated attention (h2o_select.cuh).
#include "policy/cuda/h2o_select.cuh"

namespace kvdice::policy {
namespace {

void cuda_select_h2o(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<cuda::H2oDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_h2o{cuda_select_h2o};

}  // namespace kvdice::policy
