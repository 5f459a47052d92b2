// snapkv and snapkv_pp on the device (twins of policy/snapkv.cpp): the top K_sel candidates by smoothed
// windowed attention (window_attention.cuh) past the row's n_protected prompt slots (0 for snapkv).
#include "policy/cuda/snapkv_select.cuh"
#include "policy/policy_options.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

struct SnapKvParams {
  int pool = 1;
  double temperature = 1.0;
  bool window_fp32 = false;  // precision=fp32
};

CudaParams bind_snapkv(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<SnapKvParams>();
  p.pool = options.require_int("pool");
  p.temperature = options.require_double("temperature");
  // Stated only when fp32: describe() leaves the default fp64 out.
  p.window_fp32 = read_window_precision(options, options.name()) == WindowPrecision::Fp32;
  return params;
}

void cuda_select_snapkv(const CudaSelectionArgs& args, void* stream) {
  const auto& p = args.params.as<SnapKvParams>();
  cuda::launch_window_scoring_selection<cuda::SnapKvDevice>(
      cuda::with_window(args, p.pool, p.temperature, p.window_fp32), stream);
}

}  // namespace

const CudaSelection cuda_file_snapkv{
    .select = cuda_select_snapkv, .bind = bind_snapkv, .window_fp32 = cuda::params_window_fp32<SnapKvParams>};

}  // namespace kvdice::policy
