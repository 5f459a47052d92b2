#include "backend/cuda/cuda_gemm.h"

#include <fmt/format.h>

#include <tuple>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "core/log.h"

namespace kvdice::backend::cuda {
namespace {

// Largest power of two up to 256 that divides the address (cuBLASLt picks kernels by alignment).
int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

template <class T>
void get_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, T& value) {
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written));
}

template <class T>
cublasStatus_t set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute,
                          const T& value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value));
}

// An algorithm of this id for LtGemm's types: bf16 A and B, fp32 C and D, fp32 compute and scale.
cublasStatus_t init_algorithm(cublasLtHandle_t handle, int algo_id, cublasLtMatmulAlgo_t* algo) {
  return cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F,
                                CUDA_R_32F, algo_id, algo);
}

std::string describe_problem(const GemmProblem& p) {
  return fmt::format("[{} x {}] · [{} x {}]^T{} (ld {}, {}, {}; alignment {}, {}, {})", p.n, p.k, p.m, p.k,
                     p.accumulate ? " accumulated" : "", p.ldb, p.lda, p.ldc, p.align_b, p.align_a,
                     p.align_c);
}

}  // namespace

GemmProblem gemm_problem(const View& x, const View& w, const View& y, bool accumulate) {
  return GemmProblem{.m = w.rows,
                     .n = x.rows,
                     .k = x.cols,
                     .lda = w.ld,
                     .ldb = x.ld,
                     .ldc = y.ld,
                     .align_a = alignment_of(w.data),
                     .align_b = alignment_of(x.data),
                     .align_c = alignment_of(y.data),
                     .accumulate = accumulate};
}

// Row-major y[rows, out] = x[rows, in] · W[out, in]^T is column-major D[out, rows] = W'^T · x' where W'
// is W read column-major ([in, out], ld = w.ld) and x' is x read column-major ([in, rows], ld = x.ld):
// A = W' with op T (m = out, k = in), B = x' with op N (n = rows), C = D = y' ([out, rows], ld = y.ld).
LtOperands::LtOperands(const GemmProblem& p) {
  try {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                                sizeof(no_transpose)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, static_cast<uint64_t>(p.k),
                                            static_cast<uint64_t>(p.m), p.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, static_cast<uint64_t>(p.k),
                                            static_cast<uint64_t>(p.n), p.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, static_cast<uint64_t>(p.m),
                                            static_cast<uint64_t>(p.n), p.ldc));
  } catch (...) {
    release();
    throw;
  }
}

LtOperands::~LtOperands() { release(); }

void LtOperands::release() {
  if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
  if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
  if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
  if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  a = b = c = nullptr;
  desc = nullptr;
}

LtOperands::LtOperands(LtOperands&& other) noexcept
    : desc(std::exchange(other.desc, nullptr)),
      a(std::exchange(other.a, nullptr)),
      b(std::exchange(other.b, nullptr)),
      c(std::exchange(other.c, nullptr)) {}

std::vector<cublasLtMatmulHeuristicResult_t> heuristic_algorithms(cublasLtHandle_t handle,
                                                                  const LtOperands& operands,
                                                                  const GemmProblem& problem, int max_count,
                                                                  cublasStatus_t* status,
                                                                  const HeuristicSearch& search) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = search.max_workspace;
  const uint32_t alignments[3] = {static_cast<uint32_t>(problem.align_a),
                                  static_cast<uint32_t>(problem.align_b),
                                  static_cast<uint32_t>(problem.align_c)};
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> settings[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignments[0]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignments[1]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignments[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignments[2]}};
  cublasStatus_t result_status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  for (const auto& [attribute, value] : settings) {
    if (result_status == CUBLAS_STATUS_SUCCESS)
      result_status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, sizeof(uint32_t));
  }
  if (result_status == CUBLAS_STATUS_SUCCESS && search.reduction_schemes != CUBLASLT_REDUCTION_SCHEME_MASK)
    result_status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &search.reduction_schemes, sizeof(uint32_t));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_count));
  if (result_status == CUBLAS_STATUS_SUCCESS && search.algo_id) {
    const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    result_status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode,
                                                         sizeof(mode));
    // This search mode reads the algorithm id from the results' algo fields.
    for (cublasLtMatmulHeuristicResult_t& result : results) {
      if (result_status == CUBLAS_STATUS_SUCCESS)
        result_status = init_algorithm(handle, *search.algo_id, &result.algo);
    }
  }
  int returned = 0;
  if (result_status == CUBLAS_STATUS_SUCCESS)
    result_status =
        cublasLtMatmulAlgoGetHeuristic(handle, operands.desc, operands.a, operands.b, operands.c, operands.c,
                                       preference, max_count, results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (result_status != CUBLAS_STATUS_SUCCESS) returned = 0;
  if (result_status == CUBLAS_STATUS_SUCCESS && returned == 0) result_status = CUBLAS_STATUS_NOT_SUPPORTED;
  results.resize(static_cast<size_t>(returned));
  if (status != nullptr) *status = result_status;
  return results;
}

GemmAlgorithmConfig algorithm_config(const cublasLtMatmulAlgo_t& algo) {
  GemmAlgorithmConfig config;
  get_config(algo, CUBLASLT_ALGO_CONFIG_ID, config.algo_id);
  get_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, config.tile_id);
  get_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, config.stages_id);
  get_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, config.splitk_num);
  get_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, config.reduction_scheme);
  get_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, config.cta_swizzling);
  get_config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, config.custom_option);
  get_config(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, config.inner_shape_id);
  get_config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, config.cluster_shape_id);
  return config;
}

std::optional<cublasLtMatmulAlgo_t> algorithm_from_config(cublasLtHandle_t handle, const LtOperands& operands,
                                                          const GemmProblem& problem,
                                                          const GemmAlgorithmConfig& config,
                                                          std::string* why) {
  const auto refuse = [&](const std::string& reason) -> std::optional<cublasLtMatmulAlgo_t> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t status = init_algorithm(handle, config.algo_id, &algo);
  if (status != CUBLAS_STATUS_SUCCESS)
    return refuse(fmt::format("cublasLtMatmulAlgoInit of algorithm {}: {}", config.algo_id,
                              cublasLtGetStatusString(status)));
  const std::pair<const char*, cublasStatus_t> settings[] = {
      {"TILE_ID", set_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, config.tile_id)},
      {"STAGES_ID", set_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, config.stages_id)},
      {"SPLITK_NUM", set_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, config.splitk_num)},
      {"REDUCTION_SCHEME", set_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, config.reduction_scheme)},
      {"CTA_SWIZZLING", set_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, config.cta_swizzling)},
      {"CUSTOM_OPTION", set_config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, config.custom_option)},
      {"INNER_SHAPE_ID", set_config(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, config.inner_shape_id)},
      {"CLUSTER_SHAPE_ID", set_config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, config.cluster_shape_id)}};
  for (const auto& [name, setting] : settings) {
    if (setting != CUBLAS_STATUS_SUCCESS)
      return refuse(fmt::format("setting {}: {}", name, cublasLtGetStatusString(setting)));
  }
  cublasLtMatmulHeuristicResult_t check{};
  status = cublasLtMatmulAlgoCheck(handle, operands.desc, operands.a, operands.b, operands.c, operands.c,
                                   &algo, &check);
  if (status != CUBLAS_STATUS_SUCCESS)
    return refuse(fmt::format("cublasLtMatmulAlgoCheck: {}", cublasLtGetStatusString(status)));
  if (check.workspaceSize > kLtWorkspaceBytes)
    return refuse(
        fmt::format("needs {} bytes of workspace, more than the {}", check.workspaceSize, kLtWorkspaceBytes));
  // AlgoCheck knows no addresses: the operands' alignment is checked against the kernel's needs here.
  const std::tuple<const char*, cublasLtMatmulAlgoCapAttributes_t, int> alignments[] = {
      {"A (the weight)", CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, problem.align_a},
      {"B (x)", CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES, problem.align_b},
      {"C (y)", CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, problem.align_c},
      {"D (y)", CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES, problem.align_c}};
  for (const auto& [name, attribute, have] : alignments) {
    uint32_t needed = 0;
    size_t written = 0;
    status = cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &needed, sizeof(needed), &written);
    if (status != CUBLAS_STATUS_SUCCESS)
      return refuse(fmt::format("reading its alignment of {}: {}", name, cublasLtGetStatusString(status)));
    if (static_cast<uint32_t>(have) < needed)
      return refuse(fmt::format("needs {} aligned to {} bytes, has {}", name, needed, have));
  }
  return algo;
}

std::string format_algorithm_config(const GemmAlgorithmConfig& c) {
  return fmt::format(
      "{{.algo_id = {}, .tile_id = {}, .stages_id = {}, .splitk_num = {}, .reduction_scheme = {}, "
      ".cta_swizzling = {}, .custom_option = {}, .inner_shape_id = {}, .cluster_shape_id = {}}}",
      c.algo_id, c.tile_id, c.stages_id, c.splitk_num, c.reduction_scheme, c.cta_swizzling, c.custom_option,
      c.inner_shape_id, c.cluster_shape_id);
}

LtGemm::LtGemm(std::span<const GemmAlgorithmEntry> table)
    : table_(table), library_version_(cublasLtGetVersion()) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  device_name_ = properties.name;
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kLtWorkspaceBytes));
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

const LtGemm::Plan& LtGemm::plan_for(const GemmProblem& problem) {
  if (auto found = plans_.find(problem); found != plans_.end()) return found->second;
  Plan plan(problem);
  // The table's entries were measured on contiguous operands (ld = in for x and W, out for y).
  const bool contiguous = problem.lda == problem.k && problem.ldb == problem.k && problem.ldc == problem.m;
  const GemmAlgorithmConfig* tabled =
      contiguous ? find_gemm_algorithm(table_, device_name_, library_version_, problem.m, problem.k,
                                       problem.accumulate, problem.n)
                 : nullptr;
  if (tabled != nullptr) {
    std::string why;
    if (const auto algo = algorithm_from_config(handle_, plan.operands, problem, *tabled, &why)) {
      plan.algo = *algo;
      plan.source = AlgorithmSource::kTable;
    } else {
      // Still deterministic (the heuristic's first), but the table is stale here: say so once per shape.
      plan.rejected_entry =
          fmt::format("{} for {}: {}", format_algorithm_config(*tabled), describe_problem(problem), why);
      log_warn("cuBLASLt refused the tabled algorithm {}; using the heuristic's", plan.rejected_entry);
    }
  }
  if (plan.source == AlgorithmSource::kHeuristic) {
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    const auto results = heuristic_algorithms(handle_, plan.operands, problem, 1, &status);
    if (results.empty())
      fail("cuBLASLt has no bf16 GEMM for {}: {}", describe_problem(problem),
           cublasLtGetStatusString(status));
    plan.algo = results[0].algo;
  }
  return plans_.emplace(problem, std::move(plan)).first->second;
}

void LtGemm::run(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  if (x.rows == 0 || w.rows == 0) return;
  const Plan& plan = plan_for(gemm_problem(x, w, y, accumulate));
  const LtOperands& o = plan.operands;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, o.desc, &alpha, w.data, o.a, x.data, o.b, &beta, y.data, o.c, y.data,
                              o.c, &plan.algo, workspace_, kLtWorkspaceBytes, stream));
}

LtGemm::PlanCounts LtGemm::plan_counts() const {
  PlanCounts counts;
  for (const auto& [problem, plan] : plans_) {
    ++(plan.source == AlgorithmSource::kTable ? counts.tabled : counts.heuristic);
    if (!plan.rejected_entry.empty()) ++counts.rejected;
  }
  return counts;
}

std::string LtGemm::describe() const {
  const PlanCounts counts = plan_counts();
  std::string text = fmt::format(
      "cuBLASLt {} on {}: {} GEMM plans, {} from the algorithm table ({} entries), {} "
      "from the heuristic",
      library_version_, device_name_, plans_.size(), counts.tabled, table_.size(), counts.heuristic);
  for (const auto& [problem, plan] : plans_) {
    if (!plan.rejected_entry.empty()) {
      text += fmt::format("; {} tabled algorithms refused, first {}", counts.rejected, plan.rejected_entry);
      break;
    }
  }
  return text;
}

}  // namespace kvdice::backend::cuda
