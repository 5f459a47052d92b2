// vase and vase_pp on the device (twins of policy/vase.cpp): the row's n_protected prompt slots (0 for
// vase), sinks, widest value ranges, attention-weighted draw without replacement (vase_select.cuh).
#include "policy/cuda/vase_select.cuh"
#include "policy/policy_options.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

CudaParams bind_vase(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<cuda::VaseParams>();
  p.large = options.require_double("large");
  p.sinks = options.require_int("sinks");
  p.pool = options.require_int("pool");
  p.temperature = options.require_double("temperature");
  // Stated only when fp32: describe() leaves the default fp64 out.
  p.window_fp32 = read_window_precision(options, options.name()) == WindowPrecision::Fp32;
  return params;
}

void cuda_select_vase(const CudaSelectionArgs& args, void* stream) {
  const auto& p = args.params.as<cuda::VaseParams>();
  const CudaSelectionArgs window_args = cuda::with_window(args, p.pool, p.temperature, p.window_fp32);
  cuda::launch_window_scoring_selection<cuda::VaseDevice>(window_args, stream);
  cuda::launch_vase_draws(window_args, stream);
}

}  // namespace

const CudaSelection cuda_file_vase{
    .select = cuda_select_vase, .bind = bind_vase, .window_fp32 = cuda::params_window_fp32<cuda::VaseParams>};

}  // namespace kvdice::policy
