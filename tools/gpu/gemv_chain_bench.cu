// The batch-1 decode step's weight stream in isolation: Qwen3-4B's 36 layers of GEMVs (qkv, o, gate/up,
// down) and the logits head, chained with programmatic dependent launch inside one CUDA graph, as the
// decode step runs them, timed with events. It answers what the GEMVs alone cost per step against the
// copy bandwidth, per shape and chained, for the library's kernel (gemv.cu), and what a tiny dependent
// kernel adds between them. A development tool (`.gpu-bin/kvdice_gemv_chain_bench [rows]` on the GPU
// machine, after tools/gpu/pack.sh); the engine's own figure is `kvdice bench latency`. Candidate
// kernels that held a warp's whole weight slice in flight (2026-12-01) were no faster and are gone.
#include <cuda_bf16.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"

using kvdice::DType;
using kvdice::backend::View;
namespace cu = kvdice::backend::cuda;

namespace {

// A stand-in for the step's small kernels (norms, rope, silu): one CTA, a dependent wait, a store.
__global__ void tiny_kernel(float* out) {
  cu::enter_dependent();
  if (threadIdx.x == 0) out[blockIdx.x] += 1.0f;
}

// A stand-in for the small kernels' time: one CTA busy for `ns` without touching DRAM.
__global__ void spin_kernel(float* out, int ns) {
  cu::enter_dependent();
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < static_cast<uint64_t>(ns));
  if (threadIdx.x == 0) out[blockIdx.x] += 1.0f;
}

__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
  }
}

using Gemv = std::function<void(const View&, const View&, const View&, bool, cudaStream_t)>;

struct Shapes {
  int hidden = 2560, q_dim = 4096, kv_dim = 1024, inter = 9728, vocab = 151936, layers = 36;
};

View matrix(void* data, int64_t rows, int64_t cols, DType dtype) { return View{data, dtype, rows, cols, cols}; }

double time_graph(cudaStream_t stream, const std::function<void()>& body, int reps) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  body();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, stream));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaEventRecord(b, stream));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 1;
  setvbuf(stdout, nullptr, _IOLBF, 0);  // nothing lost if a variant aborts
  const Shapes s;
  const int64_t qkv_out = s.q_dim + 2 * s.kv_dim;
  const int64_t per_layer = qkv_out * s.hidden + int64_t{s.hidden} * s.q_dim + 2 * int64_t{s.inter} * s.hidden +
                            int64_t{s.hidden} * s.inter;
  const int64_t total = per_layer * s.layers + int64_t{s.vocab} * s.hidden;
  __nv_bfloat16* weights = nullptr;
  CUDA_CHECK(cudaMalloc(&weights, total * 2));
  fill_kernel<<<4096, 256>>>(weights, total, 12345u);
  __nv_bfloat16* act = nullptr;
  float* out = nullptr;
  CUDA_CHECK(cudaMalloc(&act, 8 * int64_t{s.inter} * 2));
  CUDA_CHECK(cudaMalloc(&out, 8 * int64_t{s.vocab} * 4));
  fill_kernel<<<64, 256>>>(act, 8 * int64_t{s.inter}, 7u);
  CUDA_CHECK(cudaMemset(out, 0, 8 * int64_t{s.vocab} * 4));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaDeviceSynchronize());

  // Copy bandwidth over 4 GiB (read + write).
  {
    char *src = reinterpret_cast<char*>(weights), *dst = nullptr;
    const size_t bytes = size_t{2} << 30;
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    const double ms = time_graph(stream, [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); }, 10);
    std::printf("copy bandwidth: %.0f GB/s (read + write of %.1f GiB)\n", 2.0 * bytes / ms / 1e6, bytes / double(1 << 30));
    CUDA_CHECK(cudaFree(dst));
  }

  struct LayerW {
    View qkv, o, gate_up, down;
  };
  std::vector<LayerW> layers;
  __nv_bfloat16* p = weights;
  auto take = [&](int64_t r, int64_t c) {
    View v = matrix(p, r, c, DType::BF16);
    p += r * c;
    return v;
  };
  for (int l = 0; l < s.layers; ++l) {
    LayerW lw;
    lw.qkv = take(qkv_out, s.hidden);
    lw.o = take(s.hidden, s.q_dim);
    lw.gate_up = take(2 * int64_t{s.inter}, s.hidden);
    lw.down = take(s.hidden, s.inter);
    layers.push_back(lw);
  }
  const View head = take(s.vocab, s.hidden);
  const View x_hidden = matrix(act, rows, s.hidden, DType::BF16), x_q = matrix(act, rows, s.q_dim, DType::BF16),
             x_inter = matrix(act, rows, s.inter, DType::BF16);
  auto y_of = [&](int64_t cols) { return matrix(out, rows, cols, DType::F32); };

  const std::vector<std::pair<std::string, Gemv>> variants = {
      {"library gemv.cu", [](auto& x, auto& w, auto& y, bool acc, cudaStream_t st) { cu::launch_gemv(x, w, y, acc, st); }},
  };
  std::printf("rows %d, Qwen3-4B shapes, %d layers, %.2f GB of weights per step\n", rows, s.layers, total * 2 / 1e9);
  for (auto& [label, gemv] : variants) {
    struct One {
      const char* name;
      std::function<View(const LayerW&)> w;
      View x;
      int64_t cols;
    };
    const One shapes[] = {{"qkv", [](const LayerW& l) { return l.qkv; }, x_hidden, qkv_out},
                          {"o", [](const LayerW& l) { return l.o; }, x_q, s.hidden},
                          {"gate_up", [](const LayerW& l) { return l.gate_up; }, x_hidden, 2 * int64_t{s.inter}},
                          {"down", [](const LayerW& l) { return l.down; }, x_inter, s.hidden}};
    for (const One& one : shapes) {
      const View w0 = one.w(layers[0]);
      const double ms = time_graph(stream, [&] {
        for (const LayerW& l : layers) gemv(one.x, one.w(l), y_of(one.cols), false, stream);
      }, 20);
      const double us = ms * 1e3 / s.layers;
      std::printf("  %-22s %-8s %7.2f us per call, %5.0f GB/s\n", label.c_str(), one.name, us, w0.bytes() / us / 1e3);
    }
    const double head_ms = time_graph(stream, [&] { gemv(x_hidden, head, y_of(s.vocab), false, stream); }, 20);
    std::printf("  %-22s %-8s %7.2f us per call, %5.0f GB/s\n", label.c_str(), "logits", head_ms * 1e3,
                head.bytes() / head_ms / 1e6);
  }
  // The chain as the step runs it, with the small kernels' time emulated by spinning kernels (after qkv:
  // rope and attention; after o, gate/up and down: a norm or silu). An L2 prefetch of the next GEMV's
  // weights launched after each GEMV was tried here and in the engine (2026-12-01): it made every
  // configuration slower (the engine's batch 1 fell from 232 to 131 tok/s), so it is gone.
  for (auto& [label, gemv] : variants) {
    for (int gap_us : {0, 5, 10}) {
      auto gap = [&](int us) {
        if (us > 0) cu::launch_dependent(spin_kernel, dim3(1), dim3(32), 0, stream, out, us * 1000);
      };
      const double ms = time_graph(stream, [&] {
        for (int i = 0; i < s.layers; ++i) {
          const LayerW& l = layers[i];
          gemv(x_hidden, l.qkv, y_of(qkv_out), false, stream);
          gap(3 * gap_us);
          gemv(x_q, l.o, y_of(s.hidden), true, stream);
          gap(gap_us);
          gemv(x_hidden, l.gate_up, y_of(2 * int64_t{s.inter}), false, stream);
          gap(gap_us);
          gemv(x_inter, l.down, y_of(s.hidden), true, stream);
          gap(gap_us);
        }
        gemv(x_hidden, head, y_of(s.vocab), false, stream);
      }, 20);
      const double gaps_ms = 6.0 * gap_us * s.layers / 1e3;
      std::printf("  %-16s gaps %2d/%2d us: %.3f ms per step (%.3f ms of it emulated small kernels), %.0f steps/s\n",
                  label.c_str(), 3 * gap_us, gap_us, ms, gaps_ms, 1e3 / ms);
    }
  }
  // A chain of tiny dependent kernels alone: the floor of one small launch inside a graph.
  const double tiny_ms = time_graph(stream, [&] {
    for (int i = 0; i < 360; ++i) cu::launch_dependent(tiny_kernel, dim3(1), dim3(128), 0, stream, out);
  }, 20);
  std::printf("360 tiny dependent kernels: %.2f us each\n", tiny_ms * 1e3 / 360);
  return 0;
}
