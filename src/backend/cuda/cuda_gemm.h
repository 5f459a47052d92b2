// cuBLASLt GEMM for the CUDA backend: y[rows, out] (fp32) = x[rows, in] (bf16) · W[out, in]^T (bf16),
// fp32 accumulation, optionally accumulated into y (beta = 1: the residual add fused into the GEMM).
// Row-major views map onto cuBLASLt's column-major operands as described in cuda_gemm.cpp. Matmul
// descriptors, layouts and the algorithm are cached per shape, strides, alignment and accumulate. The
// algorithm is the algorithm table's (gemm_algorithms.h) where an entry matches this device, library and
// shape and cuBLASLt accepts it, else the heuristic's first: never timed here, so runs are reproducible.
// The pieces below LtGemm are shared with tools/gpu/gemm_sweep.cpp, which must time exactly what runs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gemm_algorithms.h"

namespace kvdice::backend::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// One GEMM as cuBLASLt sees it (see cuda_gemm.cpp): m = out, n = rows, k = in, the leading dimensions, the
// alignments of A = W, B = x and C = D = y, and whether y is accumulated into.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  int align_a = 0, align_b = 0, align_c = 0;
  bool accumulate = false;

  auto operator<=>(const GemmProblem&) const = default;
};

// The problem of y[rows, out] (+)= x[rows, in] · W[out, in]^T on these views.
GemmProblem gemm_problem(const View& x, const View& w, const View& y, bool accumulate);

// The matmul descriptor and matrix layouts of a problem (owned).
class LtOperands {
 public:
  explicit LtOperands(const GemmProblem& problem);
  ~LtOperands();
  LtOperands(LtOperands&& other) noexcept;
  LtOperands(const LtOperands&) = delete;
  LtOperands& operator=(const LtOperands&) = delete;
  LtOperands& operator=(LtOperands&&) = delete;

  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;

 private:
  void release();
};

// Narrowings of the heuristic's search. LtGemm uses none; the sweep uses them to see more candidates than
// the few best the heuristic returns (8 on cuBLAS 13 for these shapes, however many are asked for).
struct HeuristicSearch {
  uint32_t reduction_schemes = CUBLASLT_REDUCTION_SCHEME_MASK;  // cublasLtReductionScheme_t bits allowed
  uint64_t max_workspace = kLtWorkspaceBytes;
  std::optional<int> algo_id =
      std::nullopt;  // only configurations of this algorithm (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID)
};

// Up to `max_count` algorithms of cuBLASLt's heuristic, best first, under LtGemm's preferences (the
// workspace, the operands' alignments). Empty if it has none; then `status` (if given) says why.
std::vector<cublasLtMatmulHeuristicResult_t> heuristic_algorithms(cublasLtHandle_t handle,
                                                                  const LtOperands& operands,
                                                                  const GemmProblem& problem, int max_count,
                                                                  cublasStatus_t* status = nullptr,
                                                                  const HeuristicSearch& search = {});

// The configuration of an algorithm (what the table stores).
GemmAlgorithmConfig algorithm_config(const cublasLtMatmulAlgo_t& algo);

// The algorithm of `config` for this problem, built with cublasLtMatmulAlgoInit and accepted by
// cublasLtMatmulAlgoCheck within the workspace and the operands' alignments; nullopt and `why` if not.
std::optional<cublasLtMatmulAlgo_t> algorithm_from_config(cublasLtHandle_t handle, const LtOperands& operands,
                                                          const GemmProblem& problem,
                                                          const GemmAlgorithmConfig& config,
                                                          std::string* why);

// `config` as the algorithm table's C++ initializer ({.algo_id = ..., ...}), for the sweep and messages.
std::string format_algorithm_config(const GemmAlgorithmConfig& config);

class LtGemm {
 public:
  // `table` is consulted for every new shape; it must outlive this object (tests pass their own).
  explicit LtGemm(std::span<const GemmAlgorithmEntry> table = builtin_gemm_algorithms());
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream);

  // Where the cached plans' algorithms came from; `rejected` counts table entries that matched but that
  // cuBLASLt refused here (those plans use the heuristic's algorithm and count as heuristic too).
  struct PlanCounts {
    int tabled = 0, heuristic = 0, rejected = 0;
  };
  PlanCounts plan_counts() const;
  // One line for `kvdice` to print: library, device and the plans' sources.
  std::string describe() const;

 private:
  enum class AlgorithmSource { kTable, kHeuristic };
  struct Plan {
    explicit Plan(const GemmProblem& problem) : operands(problem) {}
    LtOperands operands;
    cublasLtMatmulAlgo_t algo{};
    AlgorithmSource source = AlgorithmSource::kHeuristic;
    std::string rejected_entry;  // why a matching table entry was refused, if one was
  };
  const Plan& plan_for(const GemmProblem& problem);

  std::span<const GemmAlgorithmEntry> table_;
  std::string device_name_;  // cudaDeviceProp::name of the device current at construction
  size_t library_version_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<GemmProblem, Plan> plans_;
};

}  // namespace kvdice::backend::cuda
