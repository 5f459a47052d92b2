// Measures every algorithm cuBLASLt's heuristic offers for the decode GEMMs of Qwen3-4B and prints the
// algorithm table that LtGemm reads (src/backend/cuda/gemm_algorithms.cpp). LtGemm never times anything
// itself (a timed choice would differ from run to run, and with it the fp32 summation order and the
// sampled tokens): the timing happens here, once per device and cuBLASLt version, and is committed.
//
// Per shape and rows count it gathers the algorithms of several heuristic searches under LtGemm's own
// descriptors (cuda_gemm.h): LtGemm's, and narrowed to one reduction scheme, to no workspace, to one
// algorithm id (each search returns only its few best). It rebuilds each from its configuration exactly
// as LtGemm will, times it as a CUDA graph of --launches GEMMs that rotate over enough weight copies that
// no launch finds the previous one's weights in L2, and checks the fastest against the heuristic's first
// (max abs diff within --tolerance of the output's scale, and bit-identical on a second run) before it
// may enter the table; the two are then timed again in turns. Prints a markdown table per shape, then
// the table entries to paste.
//
// A development tool (CMake target kvdice_gemm_sweep, CUDA builds; tools/gpu/pack.sh copies it):
//   .gpu-bin/kvdice_gemm_sweep [--shapes qkv,wo,gate_up,down,lm_head] [--rows 16,32,...] ...
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_gemm.h"
#include "core/dtype.h"
#include "core/error.h"

namespace {

using kvdice::DType;
using kvdice::backend::View;
namespace cu = kvdice::backend::cuda;

// The decode GEMMs of Qwen3-4B: y[rows, out] (+)= x[rows, in] · W[out, in]^T.
struct Shape {
  std::string name;
  int64_t out, in;
  bool accumulate;  // wo and down add into the residual (beta = 1)
};
const std::vector<Shape> kShapes = {{"qkv", 6144, 2560, false},
                                    {"wo", 2560, 4096, true},
                                    {"gate_up", 19456, 2560, false},
                                    {"down", 2560, 9728, true},
                                    {"lm_head", 151936, 2560, false}};

struct Options {
  std::vector<std::string> shapes = {"qkv", "wo", "gate_up", "down", "lm_head"};
  std::vector<int64_t> rows = {16, 32, 64, 96, 128, 192, 256, 384, 512, 768};
  int candidates = 32;
  int launches = 20;
  int repeats = 5;
  double margin = 0.03;
  double tolerance = 1e-3;
  int64_t min_rows = 9;
  int64_t max_rows = 896;
};

struct Device {
  std::string name;
  size_t library_version = 0;
  size_t l2_bytes = 0;
};

// Deterministic bf16 values in [-scale, scale): only their spread matters here.
std::vector<uint16_t> bf16_values(size_t n, uint32_t seed, float scale) {
  std::vector<uint16_t> values(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    values[i] = kvdice::f32_to_bf16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * scale);
  }
  return values;
}

void* device_copy(const void* host, size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  return p;
}

// One shape's device memory for rows up to `max_rows`: the weight in `copies` places, x, y, and y's
// starting values for accumulating GEMMs.
struct ShapeMemory {
  std::vector<void*> weights;
  void* x = nullptr;
  float* y = nullptr;
  std::vector<float> y_start;

  ShapeMemory(const Shape& s, int64_t max_rows, size_t l2_bytes) {
    const size_t weight_bytes = static_cast<size_t>(s.out * s.in) * 2;
    // At least 4 x L2 between two uses of one copy, so every launch streams its weights from DRAM.
    const size_t copies = std::max<size_t>(2, (4 * l2_bytes + weight_bytes - 1) / weight_bytes + 1);
    const std::vector<uint16_t> w = bf16_values(static_cast<size_t>(s.out * s.in), 11u, 0.05f);
    weights.push_back(device_copy(w.data(), weight_bytes));
    for (size_t i = 1; i < copies; ++i) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, weight_bytes));
      CUDA_CHECK(cudaMemcpy(p, weights[0], weight_bytes, cudaMemcpyDeviceToDevice));
      weights.push_back(p);
    }
    const std::vector<uint16_t> xs = bf16_values(static_cast<size_t>(max_rows * s.in), 7u, 1.0f);
    x = device_copy(xs.data(), xs.size() * 2);
    y_start.resize(static_cast<size_t>(max_rows * s.out));
    for (size_t i = 0; i < y_start.size(); ++i) y_start[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
    y = static_cast<float*>(device_copy(y_start.data(), y_start.size() * sizeof(float)));
  }
  ~ShapeMemory() {
    for (void* w : weights) cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  ShapeMemory(const ShapeMemory&) = delete;
  ShapeMemory& operator=(const ShapeMemory&) = delete;
};

// What one (shape, rows) GEMM launches with: LtGemm's operands and problem on this memory.
struct Launcher {
  cublasLtHandle_t handle;
  void* workspace;
  cudaStream_t stream;
  const Shape& shape;
  ShapeMemory& memory;
  int64_t rows;
  cu::GemmProblem problem;
  cu::LtOperands operands;

  Launcher(cublasLtHandle_t h, void* ws, cudaStream_t st, const Shape& s, ShapeMemory& m, int64_t r)
      : handle(h),
        workspace(ws),
        stream(st),
        shape(s),
        memory(m),
        rows(r),
        problem(cu::gemm_problem(x_view(), w_view(0), y_view(), s.accumulate)),
        operands(problem) {}

  View x_view() const { return View{memory.x, DType::BF16, rows, shape.in, shape.in}; }
  View w_view(size_t copy) const {
    return View{memory.weights[copy], DType::BF16, shape.out, shape.in, shape.in};
  }
  View y_view() const { return View{memory.y, DType::F32, rows, shape.out, shape.out}; }

  cublasStatus_t launch(const cublasLtMatmulAlgo_t& algo, size_t copy) const {
    const float alpha = 1.0f, beta = shape.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(handle, operands.desc, &alpha, memory.weights[copy], operands.a, memory.x,
                          operands.b, &beta, memory.y, operands.c, memory.y, operands.c, &algo, workspace,
                          cu::kLtWorkspaceBytes, stream);
  }

  // Microseconds per GEMM: `launches` GEMMs over rotating weight copies captured in one graph (as the
  // decode step runs them), one warm-up replay, then the fastest of `repeats` timed replays.
  std::optional<double> time_us(const cublasLtMatmulAlgo_t& algo, int launches, int repeats,
                                std::string* why) const {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < launches && status == CUBLAS_STATUS_SUCCESS; ++i)
      status = launch(algo, static_cast<size_t>(i) % memory.weights.size());
    const cudaError_t captured = cudaStreamEndCapture(stream, &graph);
    if (status != CUBLAS_STATUS_SUCCESS || captured != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      *why = status != CUBLAS_STATUS_SUCCESS
                 ? fmt::format("cublasLtMatmul: {}", cublasLtGetStatusString(status))
                 : fmt::format("capture: {}", cudaGetErrorString(captured));
      return std::nullopt;
    }
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    float best_ms = 1e30f;
    for (int r = 0; r < repeats; ++r) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best_ms = std::min(best_ms, ms);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return best_ms * 1e3 / launches;
  }

  // y after one GEMM from y's starting values (weight copy 0; all copies hold the same values).
  std::vector<float> result(const cublasLtMatmulAlgo_t& algo) const {
    const size_t count = static_cast<size_t>(rows * shape.out);
    if (shape.accumulate)
      CUDA_CHECK(cudaMemcpy(memory.y, memory.y_start.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CUBLAS_CHECK(launch(algo, 0));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> y(count);
    CUDA_CHECK(cudaMemcpy(y.data(), memory.y, count * sizeof(float), cudaMemcpyDeviceToHost));
    return y;
  }
};

// "" if `got` matches `reference` within tolerance · max |reference|, else what is wrong.
std::string numerics_problem(const std::vector<float>& got, const std::vector<float>& reference,
                             double tolerance) {
  double scale = 0, max_diff = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(got[i])) return fmt::format("non-finite output at {}", i);
    scale = std::max(scale, std::fabs(static_cast<double>(reference[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - reference[i]));
  }
  if (max_diff > tolerance * std::max(scale, 1e-30))
    return fmt::format("max abs diff {:.3g} against the heuristic's first (output scale {:.3g})", max_diff,
                       scale);
  return "";
}

struct Candidate {
  cublasLtMatmulAlgo_t heuristic_algo;  // as the heuristic returned it
  cublasLtMatmulAlgo_t algo;            // rebuilt from its configuration, as LtGemm will
  cu::GemmAlgorithmConfig config;
  double us = 0;
};

// The outcome at one rows count.
struct Measured {
  int64_t rows = 0;
  double first_us = 0;                     // the heuristic's first, as LtGemm runs it without a table entry
  std::optional<double> first_rebuilt_us;  // the same configuration rebuilt (shows what rebuilding costs)
  std::optional<Candidate> best;           // the fastest candidate that passed the checks
  std::vector<std::string> notes;
};

// Every algorithm the heuristic offers under LtGemm's preferences and under narrower searches (one
// reduction scheme, no workspace, one algorithm id at a time): each search returns only its few best.
std::vector<cublasLtMatmulHeuristicResult_t> offered_algorithms(const Launcher& launcher, int per_search) {
  std::vector<cu::HeuristicSearch> searches = {{}};
  for (uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_NONE, CUBLASLT_REDUCTION_SCHEME_INPLACE,
                          CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE})
    searches.push_back({.reduction_schemes = scheme});
  searches.push_back({.max_workspace = 0});
  int ids[256];
  int id_count = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(launcher.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF,
                                        CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, 256, ids, &id_count));
  for (int i = 0; i < id_count; ++i) searches.push_back({.algo_id = ids[i]});
  std::vector<cublasLtMatmulHeuristicResult_t> offered;
  for (const cu::HeuristicSearch& search : searches) {
    for (const auto& result : cu::heuristic_algorithms(launcher.handle, launcher.operands, launcher.problem,
                                                       per_search, nullptr, search))
      offered.push_back(result);
  }
  return offered;
}

Measured measure(const Options& options, cublasLtHandle_t handle, void* workspace, cudaStream_t stream,
                 const Shape& shape, ShapeMemory& memory, int64_t rows) {
  Measured m;
  m.rows = rows;
  const Launcher launcher(handle, workspace, stream, shape, memory, rows);
  auto time_or_fail = [&](const cublasLtMatmulAlgo_t& algo, const char* what) {
    std::string why;
    const auto us = launcher.time_us(algo, options.launches, options.repeats, &why);
    if (!us) kvdice::fail("{} at {} rows: {} failed: {}", shape.name, rows, what, why);
    return *us;
  };
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  // Exactly LtGemm's fallback query (one algorithm).
  const auto first = cu::heuristic_algorithms(handle, launcher.operands, launcher.problem, 1, &status);
  if (first.empty())
    kvdice::fail("{} at {} rows: the heuristic has no algorithm: {}", shape.name, rows,
                 cublasLtGetStatusString(status));
  const cu::GemmAlgorithmConfig first_config = cu::algorithm_config(first[0].algo);
  const auto offered = offered_algorithms(launcher, options.candidates);
  if (offered.empty() || cu::algorithm_config(offered[0].algo) != first_config)
    m.notes.push_back("the list's first differs from the single heuristic answer");

  std::vector<Candidate> candidates;
  int refused = 0, failed = 0, other_bytes = 0;
  std::string why;
  for (const cublasLtMatmulHeuristicResult_t& result : offered) {
    Candidate c{.heuristic_algo = result.algo, .algo = {}, .config = cu::algorithm_config(result.algo)};
    if (std::any_of(candidates.begin(), candidates.end(),
                    [&](const Candidate& o) { return o.config == c.config; }))
      continue;
    const auto rebuilt =
        cu::algorithm_from_config(handle, launcher.operands, launcher.problem, c.config, &why);
    if (!rebuilt) {
      ++refused;
      std::fprintf(stderr, "  %s rows %lld: %s refused when rebuilt: %s\n", shape.name.c_str(),
                   static_cast<long long>(rows), cu::format_algorithm_config(c.config).c_str(), why.c_str());
      continue;
    }
    c.algo = *rebuilt;
    if (std::memcmp(&c.algo, &c.heuristic_algo, sizeof(c.algo)) != 0) ++other_bytes;
    const auto us = launcher.time_us(c.algo, options.launches, options.repeats, &why);
    if (!us) {
      ++failed;
      std::fprintf(stderr, "  %s rows %lld: %s failed: %s\n", shape.name.c_str(),
                   static_cast<long long>(rows), cu::format_algorithm_config(c.config).c_str(), why.c_str());
      continue;
    }
    c.us = *us;
    candidates.push_back(c);
  }
  if (refused > 0) m.notes.push_back(fmt::format("{} refused when rebuilt", refused));
  if (failed > 0) m.notes.push_back(fmt::format("{} failed to launch", failed));
  if (other_bytes > 0)
    m.notes.push_back(fmt::format("{} of {} rebuilt differ in bytes from the heuristic's", other_bytes,
                                  candidates.size() + static_cast<size_t>(failed)));
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.us < b.us; });

  // Fastest first: the first that computes the heuristic's result (within tolerance) and repeats itself
  // bit for bit is the best; a broken configuration never reaches the table.
  const std::vector<float> reference = launcher.result(first[0].algo);
  int rejected = 0;
  for (const Candidate& c : candidates) {
    const std::vector<float> got = launcher.result(c.algo);
    std::string problem = numerics_problem(got, reference, options.tolerance);
    if (problem.empty() && launcher.result(c.algo) != got) problem = "not bit-identical on a second run";
    if (!problem.empty()) {
      ++rejected;
      std::fprintf(stderr, "  %s rows %lld: %s rejected: %s\n", shape.name.c_str(),
                   static_cast<long long>(rows), cu::format_algorithm_config(c.config).c_str(),
                   problem.c_str());
      continue;
    }
    // Rebuilding from the configuration must give the kernel the heuristic named, or the table is wrong.
    if (std::memcmp(&c.algo, &c.heuristic_algo, sizeof(c.algo)) != 0 &&
        launcher.result(c.heuristic_algo) != got)
      m.notes.push_back("the rebuilt best's result differs from the heuristic's own");
    m.best = c;
    break;
  }
  if (rejected > 0) m.notes.push_back(fmt::format("{} rejected on numerics", rejected));

  // The final figures: the heuristic's first, the best and the first rebuilt, timed in turns so that a
  // clock drift during the sweep (a long compute-bound shape heats the chip) favours none of them.
  const auto first_rebuilt =
      cu::algorithm_from_config(handle, launcher.operands, launcher.problem, first_config, &why);
  if (!first_rebuilt) {
    m.notes.push_back("the heuristic's first is refused when rebuilt: " + why);
  } else if (std::memcmp(&*first_rebuilt, &first[0].algo, sizeof(first[0].algo)) != 0) {
    // State that no configuration attribute carries (seen as a slower "first rebuilt" on the H200 for
    // compute-bound lm_head rows): the table cannot name that kernel, only beat it.
    m.notes.push_back("the heuristic's first differs in bytes from its rebuilt configuration");
  }
  double first_us = 1e30, best_us = 1e30, first_rebuilt_us = 1e30;
  for (int turn = 0; turn < 3; ++turn) {
    first_us = std::min(first_us, time_or_fail(first[0].algo, "the heuristic's first"));
    if (m.best) best_us = std::min(best_us, time_or_fail(m.best->algo, "the best"));
    if (first_rebuilt)
      first_rebuilt_us = std::min(first_rebuilt_us, time_or_fail(*first_rebuilt, "rebuilt first"));
  }
  m.first_us = first_us;
  if (m.best) m.best->us = best_us;
  if (first_rebuilt) m.first_rebuilt_us = first_rebuilt_us;
  std::fprintf(stderr, "%s rows %lld: %zu of %zu offered timed, first %.2f us, best %.2f us\n",
               shape.name.c_str(), static_cast<long long>(rows), candidates.size(), offered.size(),
               m.first_us, m.best ? m.best->us : m.first_us);
  return m;
}

// The rows a measured count stands for: down to halfway from the previous one (the first from
// --min-rows), up to halfway to the next (the last up to --max-rows).
std::pair<int64_t, int64_t> rows_range(const std::vector<Measured>& all, size_t i, const Options& options) {
  const int64_t lo = i == 0 ? options.min_rows : (all[i - 1].rows + all[i].rows) / 2 + 1;
  const int64_t hi = i + 1 == all.size() ? options.max_rows : (all[i].rows + all[i + 1].rows) / 2;
  return {lo, hi};
}

bool worth_tabling(const Measured& m, const Options& options) {
  return m.best && m.best->us < m.first_us * (1.0 - options.margin);
}

double weight_gbps(const Shape& s, double us) { return static_cast<double>(s.out * s.in * 2) / us / 1e3; }

void print_markdown(const Shape& s, const std::vector<Measured>& all, const Options& options) {
  std::printf("\n### %s: [rows x %lld] · [%lld x %lld]^T%s, %.1f MB of weights\n\n", s.name.c_str(),
              static_cast<long long>(s.in), static_cast<long long>(s.out), static_cast<long long>(s.in),
              s.accumulate ? " accumulated (beta = 1)" : "", s.out * s.in * 2 / 1e6);
  std::printf(
      "| rows | heuristic first (us, GB/s) | first rebuilt (us) | best (us, GB/s) | speedup "
      "| tabled for rows | best's config | notes |\n");
  std::printf("|---:|---:|---:|---:|---:|---|---|---|\n");
  for (size_t i = 0; i < all.size(); ++i) {
    const Measured& m = all[i];
    const auto [lo, hi] = rows_range(all, i, options);
    const double best_us = m.best ? m.best->us : m.first_us;
    std::string notes;
    for (const std::string& n : m.notes) notes += (notes.empty() ? "" : "; ") + n;
    std::printf("| %lld | %.2f, %.0f | %s | %.2f, %.0f | %.3f | %s | %s | %s |\n",
                static_cast<long long>(m.rows), m.first_us, weight_gbps(s, m.first_us),
                m.first_rebuilt_us ? fmt::format("{:.2f}", *m.first_rebuilt_us).c_str() : "refused", best_us,
                weight_gbps(s, best_us), m.first_us / best_us,
                worth_tabling(m, options) ? fmt::format("{}-{}", lo, hi).c_str() : "no (heuristic)",
                m.best ? cu::format_algorithm_config(m.best->config).c_str() : "none passed", notes.c_str());
  }
}

// The table lines of one shape: measured counts worth tabling, neighbours with one configuration merged.
std::vector<std::string> table_lines(const Shape& s, const std::vector<Measured>& all, const Device& device,
                                     const Options& options) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < all.size();) {
    if (!worth_tabling(all[i], options)) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < all.size() && worth_tabling(all[end], options) &&
           all[end].best->config == all[i].best->config)
      ++end;
    const int64_t lo = rows_range(all, i, options).first, hi = rows_range(all, end - 1, options).second;
    std::string measured;
    for (size_t j = i; j < end; ++j)
      measured += fmt::format("{}{} ({:.2f} vs {:.2f} us)", j == i ? "" : ", ", all[j].rows, all[j].best->us,
                              all[j].first_us);
    lines.push_back(fmt::format("    // {} ({} x {}{}): rows {}", s.name, s.out, s.in,
                                s.accumulate ? ", +=" : "", measured));
    lines.push_back(fmt::format("    {{\"{}\", {}, {}, {}, {}, {}, {}, {}}},", device.name,
                                device.library_version, s.out, s.in, s.accumulate ? "true" : "false", lo, hi,
                                cu::format_algorithm_config(all[i].best->config)));
    i = end;
  }
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "Time cuBLASLt's candidate algorithms for the decode GEMMs and print LtGemm's algorithm table"};
  app.add_option("--shapes", options.shapes, "shapes to sweep: qkv, wo, gate_up, down, lm_head")
      ->delimiter(',');
  app.add_option("--rows", options.rows, "rows counts to measure")->delimiter(',');
  app.add_option("--candidates", options.candidates, "algorithms asked of each heuristic search")
      ->check(CLI::Range(1, 256));
  app.add_option("--launches", options.launches, "GEMMs per timed graph")->check(CLI::Range(1, 1000));
  app.add_option("--repeats", options.repeats, "timed replays (the fastest counts)")
      ->check(CLI::Range(1, 100));
  app.add_option("--margin", options.margin,
                 "tabled only if faster than the heuristic's first by this fraction");
  app.add_option("--tolerance", options.tolerance,
                 "max abs diff against the heuristic's first, x output scale");
  app.add_option("--min-rows", options.min_rows, "lowest rows count the table covers (below: GEMV)");
  app.add_option("--max-rows", options.max_rows, "highest rows count the table covers");
  CLI11_PARSE(app, argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // nothing lost if a shape aborts
  try {
    std::sort(options.rows.begin(), options.rows.end());
    options.rows.erase(std::unique(options.rows.begin(), options.rows.end()), options.rows.end());
    if (options.rows.empty() || options.rows.front() < options.min_rows ||
        options.rows.back() > options.max_rows)
      kvdice::fail("--rows must lie within [--min-rows, --max-rows] = [{}, {}]", options.min_rows,
                   options.max_rows);
    std::vector<Shape> shapes;
    for (const std::string& name : options.shapes) {
      const auto found =
          std::find_if(kShapes.begin(), kShapes.end(), [&](const Shape& s) { return s.name == name; });
      if (found == kShapes.end())
        kvdice::fail("--shapes: unknown shape '{}' (qkv, wo, gate_up, down, lm_head)", name);
      shapes.push_back(*found);
    }

    int device_index = 0;
    CUDA_CHECK(cudaGetDevice(&device_index));
    cudaDeviceProp properties{};
    CUDA_CHECK(cudaGetDeviceProperties(&properties, device_index));
    const Device device{properties.name, cublasLtGetVersion(), static_cast<size_t>(properties.l2CacheSize)};
    std::printf("# cuBLASLt algorithm sweep: %s (%d SMs, %.0f MB L2), cublasLt %zu, CUDA runtime %zu\n",
                device.name.c_str(), properties.multiProcessorCount, device.l2_bytes / 1e6,
                device.library_version, cublasLtGetCudartVersion());
    std::printf(
        "%d candidates, %d GEMMs per graph, fastest of %d replays; tabled when %.0f%% faster than the "
        "heuristic's first\n",
        options.candidates, options.launches, options.repeats, options.margin * 100);

    cublasLtHandle_t handle = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&handle));
    void* workspace = nullptr;
    CUDA_CHECK(cudaMalloc(&workspace, cu::kLtWorkspaceBytes));
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::vector<std::string> lines;
    for (const Shape& shape : shapes) {
      ShapeMemory memory(shape, options.rows.back(), device.l2_bytes);
      std::vector<Measured> all;
      for (int64_t rows : options.rows)
        all.push_back(measure(options, handle, workspace, stream, shape, memory, rows));
      print_markdown(shape, all, options);
      for (std::string& line : table_lines(shape, all, device, options)) lines.push_back(std::move(line));
    }

    std::printf(
        "\n### Table entries (paste into builtin_gemm_algorithms() in "
        "src/backend/cuda/gemm_algorithms.cpp)\n\n");
    std::printf("```cpp\n    // %s, cublasLt %zu: tools/gpu/gemm_sweep, margin %.0f%%, rows %lld-%lld\n",
                device.name.c_str(), device.library_version, options.margin * 100,
                static_cast<long long>(options.min_rows), static_cast<long long>(options.max_rows));
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
    if (lines.empty()) std::printf("    // (no shape beat the heuristic's first by the margin)\n");
    std::printf("```\n");

    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(workspace));
    cublasLtDestroy(handle);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvdice_gemm_sweep: %s\n", e.what());
    return 1;
  }
  return 0;
}
