// The committed table of cuBLASLt algorithms for the CUDA backend's GEMMs: per (device, cuBLASLt version,
// weight shape, accumulate, range of rows) the configuration of the algorithm that
// tools/gpu/gemm_sweep.cpp measured fastest there. LtGemm (cuda_gemm.h) uses a matching entry instead of the
// heuristic's first algorithm, so the choice stays a pure function of (device, library, shape): timing
// inside the library at run time would change the fp32 summation order, hence the sampled tokens, from
// one run to the next. The lookup is plain C++ (no CUDA) so that it is tested in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvdice::backend::cuda {

// What identifies a cuBLASLt matmul kernel: the cublasLtMatmulAlgoConfigAttributes_t values (ID, TILE_ID,
// STAGES_ID, SPLITK_NUM, REDUCTION_SCHEME, CTA_SWIZZLING, CUSTOM_OPTION, INNER_SHAPE_ID,
// CLUSTER_SHAPE_ID), in the types cuBLASLt stores them in.
struct GemmAlgorithmConfig {
  int32_t algo_id = 0;
  uint32_t tile_id = 0;
  uint32_t stages_id = 0;
  int32_t splitk_num = 1;
  uint32_t reduction_scheme = 0;
  uint32_t cta_swizzling = 0;
  uint32_t custom_option = 0;
  uint16_t inner_shape_id = 0;
  uint16_t cluster_shape_id = 0;

  bool operator==(const GemmAlgorithmConfig&) const = default;
};

// One row of the table: y[rows, out] (+)= x[rows, in] · W[out, in]^T for rows in [rows_lo, rows_hi].
struct GemmAlgorithmEntry {
  std::string_view device;  // cudaDeviceProp::name, e.g. "NVIDIA H200"
  size_t cublaslt_version;  // cublasLtGetVersion(), e.g. 130100 for 13.1.0
  int64_t out, in;
  bool accumulate;           // beta = 1 (y += ...): timed separately, as it also reads y
  int64_t rows_lo, rows_hi;  // inclusive
  GemmAlgorithmConfig config;
};

// The first entry of `table` that matches, or null. Any difference in device or library version misses:
// a configuration measured elsewhere is neither known to be fast nor to exist there.
inline const GemmAlgorithmConfig* find_gemm_algorithm(std::span<const GemmAlgorithmEntry> table,
                                                      std::string_view device, size_t cublaslt_version,
                                                      int64_t out, int64_t in, bool accumulate,
                                                      int64_t rows) {
  for (const GemmAlgorithmEntry& entry : table) {
    if (entry.device == device && entry.cublaslt_version == cublaslt_version && entry.out == out &&
        entry.in == in && entry.accumulate == accumulate && entry.rows_lo <= rows && rows <= entry.rows_hi)
      return &entry.config;
  }
  return nullptr;
}

// The table committed with the code (gemm_algorithms.cpp; CUDA builds only).
std::span<const GemmAlgorithmEntry> builtin_gemm_algorithms();

}  // namespace kvdice::backend::cuda
