// Error checks for CUDA runtime and cuBLASLt calls, for every CUDA file (the backend's kernels and the
// policies' device selections, which sit below the backend): a failure throws kvdice::Error naming the call,
// the file:line and the device, so a failing step says where and on which GPU it failed. The throwing
// functions live in cuda_check.cpp (compiled by the host compiler): nvcc cannot evaluate fmt's
// compile-time format strings, so .cu files never format messages themselves.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace kvdice::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// The current device's SM count, queried once per process (the kernels that size their grids by it).
int device_sm_count();

}  // namespace kvdice::cuda

#define CUDA_CHECK(call)                                                                         \
  do {                                                                                           \
    const cudaError_t kvdice_cuda_status_ = (call);                                              \
    if (kvdice_cuda_status_ != cudaSuccess)                                                      \
      ::kvdice::cuda::throw_cuda_error(kvdice_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    const cublasStatus_t kvdice_cublas_status_ = (call);                                             \
    if (kvdice_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::kvdice::cuda::throw_cublas_error(kvdice_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, naming the kernel.
#define CUDA_CHECK_LAUNCH(kernel_name)                                                                   \
  do {                                                                                                   \
    const cudaError_t kvdice_cuda_status_ = cudaGetLastError();                                          \
    if (kvdice_cuda_status_ != cudaSuccess)                                                              \
      ::kvdice::cuda::throw_cuda_error(kvdice_cuda_status_, "launch of " kernel_name, __FILE__, \
                                                __LINE__);                                               \
  } while (0)
