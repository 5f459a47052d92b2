#include "backend/cuda/gemm_algorithms.h"

#include <vector>

namespace kvdice::backend::cuda {

std::span<const GemmAlgorithmEntry> builtin_gemm_algorithms() {
  // The entries come from tools/gpu/gemm_sweep run on the device they name: paste the block it prints
  // under "Table entries" between the braces below (clang-format leaves the one-line entries alone). A
  // device, cuBLASLt version, shape or rows count without an entry keeps the heuristic's first algorithm.
  // clang-format off
  static const std::vector<GemmAlgorithmEntry> entries = {
    // NVIDIA H200, cublasLt 130100: tools/gpu/gemm_sweep, margin 3%, rows 9-896
    // wo (2560 x 4096, +=): rows 16 (8.84 vs 9.84 us)
    {"NVIDIA H200", 130100, 2560, 4096, true, 9, 24, {.algo_id = 66, .tile_id = 10, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 3, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // wo (2560 x 4096, +=): rows 32 (8.94 vs 10.04 us)
    {"NVIDIA H200", 130100, 2560, 4096, true, 25, 48, {.algo_id = 66, .tile_id = 312, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 3, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // wo (2560 x 4096, +=): rows 96 (9.89 vs 11.28 us)
    {"NVIDIA H200", 130100, 2560, 4096, true, 81, 112, {.algo_id = 66, .tile_id = 315, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 3, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // wo (2560 x 4096, +=): rows 192 (11.56 vs 12.68 us)
    {"NVIDIA H200", 130100, 2560, 4096, true, 161, 224, {.algo_id = 66, .tile_id = 134, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // wo (2560 x 4096, +=): rows 256 (11.28 vs 11.76 us)
    {"NVIDIA H200", 130100, 2560, 4096, true, 225, 320, {.algo_id = 66, .tile_id = 143, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 2, .inner_shape_id = 0, .cluster_shape_id = 9}},
    // gate_up (19456 x 2560): rows 16 (26.58 vs 28.32 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 9, 24, {.algo_id = 66, .tile_id = 487, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 1, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // gate_up (19456 x 2560): rows 32 (27.35 vs 28.78 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 25, 48, {.algo_id = 66, .tile_id = 35, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 1, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // gate_up (19456 x 2560): rows 64 (28.65 vs 30.42 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 49, 80, {.algo_id = 66, .tile_id = 27, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // gate_up (19456 x 2560): rows 128 (31.20 vs 32.32 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 113, 160, {.algo_id = 66, .tile_id = 28, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // gate_up (19456 x 2560): rows 192 (36.55 vs 39.68 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 161, 224, {.algo_id = 66, .tile_id = 209, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 4, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // gate_up (19456 x 2560): rows 256 (40.29 vs 42.96 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 225, 320, {.algo_id = 66, .tile_id = 197, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 2, .inner_shape_id = 0, .cluster_shape_id = 5}},
    // gate_up (19456 x 2560): rows 512 (74.01 vs 76.99 us), 768 (101.90 vs 113.48 us)
    {"NVIDIA H200", 130100, 19456, 2560, false, 449, 896, {.algo_id = 66, .tile_id = 20, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 1, .inner_shape_id = 0, .cluster_shape_id = 3}},
    // down (2560 x 9728, +=): rows 16 (16.65 vs 17.46 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 9, 24, {.algo_id = 66, .tile_id = 10, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 3, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // down (2560 x 9728, +=): rows 64 (17.45 vs 18.34 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 49, 80, {.algo_id = 66, .tile_id = 59, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // down (2560 x 9728, +=): rows 96 (18.50 vs 19.26 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 81, 112, {.algo_id = 66, .tile_id = 315, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 3, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // down (2560 x 9728, +=): rows 128 (18.61 vs 21.27 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 113, 160, {.algo_id = 66, .tile_id = 92, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 2, .inner_shape_id = 0, .cluster_shape_id = 7}},
    // down (2560 x 9728, +=): rows 192 (22.47 vs 25.88 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 161, 224, {.algo_id = 66, .tile_id = 134, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 4}},
    // down (2560 x 9728, +=): rows 256 (23.06 vs 29.31 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 225, 320, {.algo_id = 66, .tile_id = 143, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 2, .inner_shape_id = 0, .cluster_shape_id = 9}},
    // down (2560 x 9728, +=): rows 512 (38.32 vs 39.93 us)
    {"NVIDIA H200", 130100, 2560, 9728, true, 449, 640, {.algo_id = 66, .tile_id = 200, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 2, .inner_shape_id = 0, .cluster_shape_id = 8}},
    // lm_head (151936 x 2560): rows 96 (202.04 vs 211.18 us)
    {"NVIDIA H200", 130100, 151936, 2560, false, 81, 112, {.algo_id = 66, .tile_id = 33, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 1, .inner_shape_id = 0, .cluster_shape_id = 3}},
    // lm_head (151936 x 2560): rows 128 (210.67 vs 219.36 us)
    {"NVIDIA H200", 130100, 151936, 2560, false, 113, 160, {.algo_id = 66, .tile_id = 20, .stages_id = 35, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 1, .inner_shape_id = 0, .cluster_shape_id = 3}},
  };
  // clang-format on
  return entries;
}

}  // namespace kvdice::backend::cuda
