// Programmatic dependent launch (Hopper) for the decode step's chain of small kernels: a kernel
// launched with launch_dependent() may be scheduled while its predecessor in the stream drains, so the
// launch latency and ramp-up of one kernel overlap the tail of the previous (at batch 1 a step is ~360
// kernels of a few microseconds each, and those gaps were a large share of it). Every kernel launched
// this way starts with enter_dependent(): it waits until the predecessor grid has completed and its
// writes are visible (so nothing is read or written early), then lets its own dependents launch.
// Without the launch attribute both instructions are no-ops, so these kernels may also be launched
// plainly.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/cuda_check.h"

namespace kvdice::backend::cuda {

// The two halves of enter_dependent, for a kernel that lets its successor launch later than at its start
// (decode attention, after its pages: o_proj's early weight loads competed with them). Measured at batch
// 1 and dropped (docs/benchmarks.md, "Tried and dropped", 2026-12-02): an RMSNorm or silu_mul releasing
// before its wait, so the next GEMV's loads overlap the previous GEMV's tail (4.5 % slower: the GEMV's
// own loads and the small kernel queue behind that prefetch), and each GEMV CTA releasing only after its
// last weight loads (2.4 % slower: the small kernel's launch no longer hides behind the GEMV's last wave).
// Waits until the predecessor grid has completed and its writes are visible.
__device__ inline void wait_for_predecessor() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// Lets the successor grid launch once every CTA of this one has called this (or exited).
__device__ inline void release_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__device__ inline void enter_dependent() {
  wait_for_predecessor();
  release_dependents();
}

// As launch_dependent, the grid's CTAs along z grouped into thread block clusters of cluster_z (1: none).
template <typename... Params, typename... Args>
void launch_dependent_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                               cudaStream_t stream, unsigned cluster_z, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = 1;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = cluster_z;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster_z > 1 ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args&&... args) {
  launch_dependent_clusters(kernel, grid, block, shared_bytes, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace kvdice::backend::cuda
