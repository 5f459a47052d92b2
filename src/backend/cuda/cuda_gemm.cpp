#include "backend/cuda/cuda_gemm.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace kvdice::backend::cuda {
namespace {

// Largest power of two up to 256 that divides the address (cuBLASLt picks kernels by alignment).
int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

}  // namespace

LtGemm::LtGemm() {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// Row-major y[rows, out] = x[rows, in] · W[out, in]^T is column-major D[out, rows] = W'^T · x' where W'
// is W read column-major ([in, out], ld = w.ld) and x' is x read column-major ([in, rows], ld = x.ld):
// A = W' with op T (m = out, k = in), B = x' with op N (n = rows), C = D = y' ([out, rows], ld = y.ld).
const LtGemm::Plan& LtGemm::plan_for(const Key& key) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  const auto [m, n, k, lda, ldb, ldc, align_a, align_b, align_c] = key;
  Plan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                              sizeof(no_transpose)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, static_cast<uint64_t>(k),
                                          static_cast<uint64_t>(m), lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, static_cast<uint64_t>(k),
                                          static_cast<uint64_t>(n), ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, static_cast<uint64_t>(m),
                                          static_cast<uint64_t>(n), ldc));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t alignments[3] = {static_cast<uint32_t>(align_a), static_cast<uint32_t>(align_b),
                                  static_cast<uint32_t>(align_c)};
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof(workspace)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &alignments[0], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &alignments[1], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &alignments[2], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &alignments[2], sizeof(uint32_t)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c,
                                                               plan.c, preference, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || returned == 0) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
    fail("cuBLASLt has no bf16 GEMM for [{} x {}] · [{} x {}]^T (ld {}, {}, {}; alignment {}, {}, {}): {}", n,
         k, m, k, ldb, lda, ldc, align_b, align_a, align_c, cublasLtGetStatusString(status));
  }
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void LtGemm::run(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  if (x.rows == 0 || w.rows == 0) return;
  const Key key{w.rows,
                x.rows,
                x.cols,
                w.ld,
                x.ld,
                y.ld,
                alignment_of(w.data),
                alignment_of(x.data),
                alignment_of(y.data)};
  const Plan& plan = plan_for(key);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w.data, plan.a, x.data, plan.b, &beta, y.data,
                              plan.c, y.data, plan.c, &plan.algo, workspace_, kWorkspaceBytes, stream));
}

}  // namespace kvdice::backend::cuda
