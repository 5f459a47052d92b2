// rkv and rkv_pp on the device (twins of policy/rkv.cpp): past the row's n_protected prompt slots (0
// for rkv), λ · smoothed windowed attention − (1 − λ) · key redundancy, top K_sel (rkv_select.cuh).
#include "policy/cuda/rkv_select.cuh"
#include "policy/policy_options.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

CudaParams bind_rkv(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<cuda::RkvParams>();
  p.lambda = options.require_double("lambda");
  p.pool = options.require_int("pool");
  p.temperature = options.require_double("temperature");
  // Stated only when fp32: describe() leaves the default fp64 out.
  p.window_fp32 = read_window_precision(options, options.name()) == WindowPrecision::Fp32;
  return params;
}

void cuda_select_rkv(const CudaSelectionArgs& args, void* stream) {
  const auto& p = args.params.as<cuda::RkvParams>();
  cuda::launch_window_scoring_selection<cuda::RkvDevice>(
      cuda::with_window(args, p.pool, p.temperature, p.window_fp32), stream);
}

}  // namespace

const CudaSelection cuda_file_rkv{
    .select = cuda_select_rkv, .bind = bind_rkv, .window_fp32 = cuda::params_window_fp32<cuda::RkvParams>};

}  // namespace kvdice::policy
