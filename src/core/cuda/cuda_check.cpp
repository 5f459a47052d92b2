#include "core/cuda/cuda_check.h"

#include "core/error.h"

namespace kvdice::cuda {
namespace {

int current_device_or_minus_one() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  fail("CUDA error on device {}: {} returned {} ({}) at {}:{}", current_device_or_minus_one(), call,
       cudaGetErrorName(status), cudaGetErrorString(status), file, line);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLASLt error on device {}: {} returned {} ({}) at {}:{}", current_device_or_minus_one(), call,
       cublasLtGetStatusName(status), cublasLtGetStatusString(status), file, line);
}

int device_sm_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

}  // namespace kvdice::cuda
