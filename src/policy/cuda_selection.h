// The CUDA half of a policy: a launcher that runs the policy's device selection for every due
// (sequence, layer, KV head) of one evict call and writes keep flags, bit-identical to the policy's
// CPU select(). Plain C++ (no CUDA headers) so the registry can name launchers in every build; the
// definitions live in src/policy/cuda/<name>.cu and exist only when KVDICE_WITH_CUDA is defined.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/step_batch.h"

namespace kvdice::policy {

// Everything the selection kernels of one launch need; every pointer is device memory.
struct CudaSelectionArgs {
  backend::StepBatch batch;                   // the step batch (lengths, budgets, keys, page tables)
  const int32_t* const* positions = nullptr;  // [n_layers of the model]: each layer's positions array
  int layer_begin = 0;  // this launch covers layers [layer_begin, layer_begin + n_layers)
  int n_layers = 0;
  int n_kv_heads = 0;
  int page_slots = 0;
  int policy_id = 0;  // rows with another policy_id, or not due, are skipped on the device
  // Output: flags of candidate slots [0, n_candidates) at keep[((s * n_layers + l) * n_kv_heads + h) *
  // capacity + slot] (l relative to layer_begin); 1 = keep.
  uint8_t* keep = nullptr;
  int capacity = 0;
  int* error = nullptr;  // set nonzero when an input violates the selection's preconditions
};

// Launches the selection on `stream` (a cudaStream_t).
using CudaSelectionLauncher = void (*)(const CudaSelectionArgs& args, void* stream);

// The launcher registered for `name`, or nullptr when the policy has no CUDA file or the build has no
// CUDA ("full" has none and needs none: it never evicts).
CudaSelectionLauncher cuda_selection(std::string_view name);

// Throws kvdice::Error naming the policy when it cannot run on the CUDA backend (it evicts but has no
// CUDA selection). The engine may call it at construction; CudaBackend::evict calls it too.
void require_cuda_selection(std::string_view name);

#ifdef KVDICE_WITH_CUDA
void cuda_select_random_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_random(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_shared(const CudaSelectionArgs& args, void* stream);
void cuda_select_recency_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_recency(const CudaSelectionArgs& args, void* stream);
void cuda_select_streaming(const CudaSelectionArgs& args, void* stream);
// The registry column: the launcher of a policy with a CUDA file, nullptr in builds without CUDA.
#define KVDICE_CUDA_SELECTION(name) ::kvdice::policy::cuda_select_##name
#else
#define KVDICE_CUDA_SELECTION(name) nullptr
#endif

}  // namespace kvdice::policy
