// cuBLASLt GEMM for the CUDA backend: y[rows, out] (fp32) = x[rows, in] (bf16) · W[out, in]^T (bf16),
// fp32 accumulation, optionally accumulated into y (beta = 1: the residual add fused into the GEMM).
// Row-major views map onto cuBLASLt's column-major operands as described in cuda_gemm.cpp. Matmul
// descriptors, layouts and the heuristic's algorithm are cached per shape, strides and alignment.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "backend/backend.h"

namespace kvdice::backend::cuda {

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream);

 private:
  // (m, n, k, lda, ldb, ldc, alignment of A, B, C)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(const Key& key);

  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace kvdice::backend::cuda
