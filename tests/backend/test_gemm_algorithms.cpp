// The GEMM algorithm table (backend/cuda/gemm_algorithms.h): the lookup on any machine, the committed
// table's shape in CUDA builds, and on a GPU that LtGemm runs a tabled configuration (given its own
// test-only table) to the heuristic's result, and falls back to the heuristic where the table misses or
// cuBLASLt refuses the entry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/gemm_algorithms.h"

#ifdef KVDICE_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "backend/backend.h"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_gemm.h"
#include "core/dtype.h"
#endif

namespace kvdice::test {
namespace {

using backend::cuda::find_gemm_algorithm;
using backend::cuda::GemmAlgorithmConfig;
using backend::cuda::GemmAlgorithmEntry;

// Written as tools/gpu/gemm_sweep prints its lines, so a pasted table is known to compile.
// clang-format off
const std::vector<GemmAlgorithmEntry> kTable = {
    {"NVIDIA H200", 130100, 6144, 2560, false, 9, 24, {.algo_id = 66, .tile_id = 18, .stages_id = 0, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 0}},
    {"NVIDIA H200", 130100, 6144, 2560, false, 25, 80, {.algo_id = 66, .tile_id = 20, .stages_id = 0, .splitk_num = 2, .reduction_scheme = 1, .cta_swizzling = 0, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 2}},
    {"NVIDIA H200", 130100, 2560, 4096, true, 9, 896, {.algo_id = 71, .tile_id = 18, .stages_id = 0, .splitk_num = 1, .reduction_scheme = 0, .cta_swizzling = 1, .custom_option = 0, .inner_shape_id = 0, .cluster_shape_id = 0}},
};
// clang-format on

int tile_at(std::string_view device, size_t version, int64_t out, int64_t in, bool accumulate, int64_t rows) {
  const GemmAlgorithmConfig* config = find_gemm_algorithm(kTable, device, version, out, in, accumulate, rows);
  return config == nullptr ? -1 : static_cast<int>(config->tile_id);
}

TEST(GemmAlgorithmTable, RowsRangesAreInclusiveAtBothEnds) {
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 8), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 9), 18);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 16), 18);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 24), 18);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 25), 20);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 80), 20);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, false, 81), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 2560, 4096, true, 896), 18);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 2560, 4096, true, 897), -1);
}

TEST(GemmAlgorithmTable, EveryKeyFieldMustMatch) {
  // Another device, even a close one, or another cuBLASLt build: its kernels are not known to be faster.
  EXPECT_EQ(tile_at("NVIDIA H100 80GB HBM3", 130100, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H20", 130100, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H200 NVL", 130100, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("", 130100, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130000, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130101, 6144, 2560, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 2560, 6144, false, 16), -1);  // out and in swapped
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 6144, 2560, true, 16), -1);   // timed without beta = 1
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 2560, 4096, false, 16), -1);
  EXPECT_EQ(tile_at("NVIDIA H200", 130100, 2560, 4096, true, 16), 18);
}

TEST(GemmAlgorithmTable, TheWholeConfigurationComesBack) {
  const GemmAlgorithmConfig* config =
      find_gemm_algorithm(kTable, "NVIDIA H200", 130100, 6144, 2560, false, 40);
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(*config, kTable[1].config);
  EXPECT_EQ(config->splitk_num, 2);
  EXPECT_EQ(config->cluster_shape_id, 2);
  EXPECT_EQ(find_gemm_algorithm({}, "NVIDIA H200", 130100, 6144, 2560, false, 16), nullptr);
}

#ifdef KVDICE_WITH_CUDA

using backend::View;
using backend::cuda::algorithm_config;
using backend::cuda::algorithm_from_config;
using backend::cuda::builtin_gemm_algorithms;
using backend::cuda::gemm_problem;
using backend::cuda::heuristic_algorithms;
using backend::cuda::LtGemm;
using backend::cuda::LtOperands;

TEST(GemmAlgorithmTable, CommittedEntriesAreWellFormed) {
  // Ranges that overlap would make the first entry win silently; a pasted table must not have them.
  const auto table = builtin_gemm_algorithms();
  for (size_t i = 0; i < table.size(); ++i) {
    const GemmAlgorithmEntry& e = table[i];
    EXPECT_FALSE(e.device.empty()) << "entry " << i;
    EXPECT_GE(e.rows_lo, 1) << "entry " << i;
    EXPECT_LE(e.rows_lo, e.rows_hi) << "entry " << i;
    for (size_t j = 0; j < i; ++j) {
      const GemmAlgorithmEntry& o = table[j];
      const bool same_key = o.device == e.device && o.cublaslt_version == e.cublaslt_version &&
                            o.out == e.out && o.in == e.in && o.accumulate == e.accumulate;
      EXPECT_FALSE(same_key && o.rows_lo <= e.rows_hi && e.rows_lo <= o.rows_hi)
          << "entries " << j << " and " << i << " overlap";
    }
  }
}

// Device memory freed on scope exit.
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&data, bytes)); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A small GEMM on the GPU with the host's fp32 reference of it.
struct SmallGemm {
  static constexpr int64_t kOut = 384, kIn = 512, kMaxRows = 40;
  std::vector<uint16_t> x, w;
  std::vector<float> y_start;
  DeviceBuffer dx{kMaxRows * kIn * 2}, dw{kOut * kIn * 2}, dy{kMaxRows * kOut * 4};

  SmallGemm() {
    auto value = [](size_t i, uint32_t seed) {
      const uint32_t h = (static_cast<uint32_t>(i) * 2654435761u ^ seed) * 2246822519u;
      return f32_to_bf16(static_cast<float>(h >> 16) / 32768.0f - 1.0f);
    };
    for (size_t i = 0; i < size_t(kMaxRows * kIn); ++i) x.push_back(value(i, 3u));
    for (size_t i = 0; i < size_t(kOut * kIn); ++i) w.push_back(value(i, 5u));
    for (size_t i = 0; i < size_t(kMaxRows * kOut); ++i) y_start.push_back(static_cast<float>(i % 13) - 6.0f);
    CUDA_CHECK(cudaMemcpy(dx.data, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw.data, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  }
  View x_view(int64_t rows) const { return View{dx.data, DType::BF16, rows, kIn, kIn}; }
  View w_view() const { return View{dw.data, DType::BF16, kOut, kIn, kIn}; }
  View y_view(int64_t rows) const { return View{dy.data, DType::F32, rows, kOut, kOut}; }

  std::vector<float> run(LtGemm& gemm, int64_t rows, bool accumulate) {
    CUDA_CHECK(cudaMemcpy(dy.data, y_start.data(), size_t(rows * kOut) * 4, cudaMemcpyHostToDevice));
    gemm.run(x_view(rows), w_view(), y_view(rows), accumulate, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> y(size_t(rows * kOut));
    CUDA_CHECK(cudaMemcpy(y.data(), dy.data, y.size() * 4, cudaMemcpyDeviceToHost));
    return y;
  }
  // Max |got - reference| over the output's largest magnitude.
  double error(const std::vector<float>& got, int64_t rows, bool accumulate) const {
    double max_diff = 0, scale = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < kOut; ++o) {
        double sum = accumulate ? y_start[size_t(r * kOut + o)] : 0.0;
        for (int64_t k = 0; k < kIn; ++k)
          sum += double(bf16_to_f32(x[size_t(r * kIn + k)])) * bf16_to_f32(w[size_t(o * kIn + k)]);
        max_diff = std::max(max_diff, std::fabs(got[size_t(r * kOut + o)] - sum));
        scale = std::max(scale, std::fabs(sum));
      }
    }
    return max_diff / scale;
  }
};

std::string device_name() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

// The last configuration the heuristic offers for this problem that rebuilds (the first one only if no
// other does): a different kernel from the heuristic's choice where there is one.
GemmAlgorithmConfig another_configuration(const View& x, const View& w, const View& y, bool accumulate) {
  cublasLtHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  const auto problem = gemm_problem(x, w, y, accumulate);
  const LtOperands operands(problem);
  const auto offered = heuristic_algorithms(handle, operands, problem, 32);
  std::optional<GemmAlgorithmConfig> chosen;
  for (auto it = offered.rbegin(); it != offered.rend() && !chosen; ++it) {
    std::string why;
    if (algorithm_from_config(handle, operands, problem, algorithm_config(it->algo), &why))
      chosen = algorithm_config(it->algo);
  }
  cublasLtDestroy(handle);
  if (!chosen) throw std::runtime_error("no configuration the heuristic offered rebuilds");
  return *chosen;
}

TEST(GemmAlgorithmsGpu, TabledConfigurationGivesTheHeuristicsResult) {
  if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  SmallGemm gemm;
  const std::string device = device_name();
  for (const bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    const int64_t rows = 24;
    const GemmAlgorithmConfig config =
        another_configuration(gemm.x_view(rows), gemm.w_view(), gemm.y_view(rows), accumulate);
    const std::vector<GemmAlgorithmEntry> table = {
        {device, cublasLtGetVersion(), SmallGemm::kOut, SmallGemm::kIn, accumulate, 17, rows, config}};
    LtGemm tabled(table), heuristic(std::span<const GemmAlgorithmEntry>{});

    const std::vector<float> expected = gemm.run(heuristic, rows, accumulate);
    const std::vector<float> got = gemm.run(tabled, rows, accumulate);
    EXPECT_LT(gemm.error(expected, rows, accumulate), 1e-5);
    EXPECT_LT(gemm.error(got, rows, accumulate), 1e-5);
    EXPECT_EQ(tabled.plan_counts().tabled, 1) << tabled.describe();
    EXPECT_EQ(heuristic.plan_counts().tabled, 0) << heuristic.describe();

    // One row past the entry's range: the heuristic's plan, bit for bit.
    EXPECT_EQ(gemm.run(tabled, rows + 1, accumulate), gemm.run(heuristic, rows + 1, accumulate));
    EXPECT_EQ(tabled.plan_counts().tabled, 1);
    EXPECT_EQ(tabled.plan_counts().heuristic, 1);
  }
}

TEST(GemmAlgorithmsGpu, RefusedEntryFallsBackToTheHeuristic) {
  if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA device is visible";
  SmallGemm gemm;
  const std::string device = device_name();
  const GemmAlgorithmConfig no_such_algorithm{.algo_id = -1};
  const std::vector<GemmAlgorithmEntry> table = {
      {device, cublasLtGetVersion(), SmallGemm::kOut, SmallGemm::kIn, false, 9, 40, no_such_algorithm},
      // Another device's entry for the same shape is never consulted.
      {"no such device", cublasLtGetVersion(), SmallGemm::kOut, SmallGemm::kIn, true, 9, 40,
       no_such_algorithm}};
  LtGemm tabled(table), heuristic(std::span<const GemmAlgorithmEntry>{});
  EXPECT_EQ(gemm.run(tabled, 32, false), gemm.run(heuristic, 32, false));
  EXPECT_EQ(gemm.run(tabled, 32, true), gemm.run(heuristic, 32, true));
  const LtGemm::PlanCounts counts = tabled.plan_counts();
  EXPECT_EQ(counts.tabled, 0);
  EXPECT_EQ(counts.heuristic, 2);
  EXPECT_EQ(counts.rejected, 1);
  EXPECT_NE(tabled.describe().find("refused"), std::string::npos) << tabled.describe();
}

#endif  // KVDICE_WITH_CUDA

}  // namespace
}  // namespace kvdice::test
