// Development tool: the CPU backend's batch-1 matmul (`--cpu-math fast`) timed per weight of a GGUF
// model, one activation row, each weight group (e.g. every layer's ffn_gate) run back to back as a
// decode step runs it. With 1 thread the time is the thread's CPU time (other jobs on a shared machine
// do not count); with more, wall time. Median and minimum of REPS passes; GB/s of weight bytes.
//
//   build-cpu/kvdice_cpu_gemv_bench MODEL.gguf [THREADS=1] [REPS=15] [first]
//   ("first": only the first weight of each group, small enough to stay in L2: the kernels' compute rate)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/quant_dot.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"

using namespace kvdice;
using namespace kvdice::backend;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [THREADS] [REPS] [first]\n", argv[0]);
    return 2;
  }
  const formats::GgufFile file = formats::GgufFile::open(argv[1]);
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 15;
  const bool first = argc > 4 && std::string(argv[4]) == "first";
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "THREADS and REPS must be positive\n");
    return 2;
  }
  const auto backend = make_cpu_backend(threads, CpuMath::Fast);
  const clockid_t clock = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  // Weights grouped by name without the layer prefix and by block type.
  std::map<std::string, std::vector<const formats::GgufTensor*>> groups;
  for (const formats::GgufTensor& t : file.tensors()) {
    if (t.dims.size() != 2 || !cpu::is_block_type(static_cast<uint32_t>(t.type)) ||
        t.name == "token_embd.weight")
      continue;
    std::string key = t.name.rfind("blk.", 0) == 0 ? t.name.substr(t.name.find('.', 4) + 1) : t.name;
    key += std::string(" ") + std::string(formats::ggml_type_name(t.type));
    groups[key].push_back(&t);
  }
  double total_ms = 0, total_bytes = 0;
  for (const auto& [name, tensors] : groups) {
    const int64_t cols = tensors[0]->dims[0];
    std::vector<Weight> weights;
    int64_t out_max = 0;
    double bytes = 0;
    for (const formats::GgufTensor* t : tensors) {
      if (first && !weights.empty()) break;
      const auto type = static_cast<uint32_t>(t->type);
      const int64_t rows = t->dims[1];
      Weight w;
      w.blocks.push_back({type, t->data.data(), rows, cpu::block_row_bytes(type, cols)});
      w.w = View{nullptr, DType::F32, rows, cols, cols};
      weights.push_back(w);
      out_max = std::max(out_max, rows);
      bytes += static_cast<double>(t->data.size());
    }
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(out_max));
    for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 7) * 0.1f - 0.3f;
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      timespec a{}, b{};
      clock_gettime(clock, &a);
      for (const Weight& w : weights)
        backend->matmul(View{x.data(), DType::F32, 1, cols, cols}, w,
                        View{y.data(), DType::F32, 1, w.w.rows, w.w.rows}, false);
      clock_gettime(clock, &b);
      times.push_back(static_cast<double>(b.tv_sec - a.tv_sec) * 1e3 +
                      static_cast<double>(b.tv_nsec - a.tv_nsec) * 1e-6);
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    total_ms += ms;
    total_bytes += bytes;
    std::printf("%-28s x%-3zu %7.1f MB  median %8.3f ms  min %8.3f ms  %5.1f GB/s\n", name.c_str(),
                weights.size(), bytes / 1e6, ms, times[0], bytes / ms / 1e6);
  }
  std::printf("total %.1f MB  %.3f ms  %.1f GB/s\n", total_bytes / 1e6, total_ms,
              total_bytes / total_ms / 1e6);
  return 0;
}
