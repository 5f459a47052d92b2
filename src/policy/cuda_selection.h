// The CUDA half of a policy: a launcher that runs the policy's device selection for every due
// (sequence, layer, KV head) of one evict call and writes keep flags, bit-identical to the policy's
// CPU select(). Plain C++ (no CUDA headers) so the registry can name launchers in every build; the
// definitions live in src/policy/cuda/<name>.cu and exist only when KVDICE_WITH_CUDA is defined.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/step_batch.h"

namespace kvdice::policy {

// One layer of the KV pool as a scoring selection reads it (device pointers; a signal is nullptr when
// the pool does not record it). Keys are bf16, [page][KV head][page slot][head_dim] (backend.h KvLayer).
struct SelectionLayer {
  const void* keys = nullptr;
  const int32_t* positions = nullptr;
  const float* value_range = nullptr;
  const float* query_ring =
      nullptr;  // [ring row][query head][ring window][head_dim] fp32 (backend.h KvLayer)
  const float* attention_mass = nullptr;
};

// Per-(row, layer, KV head) scratch of the scoring selections for a resident capacity of `capacity`
// slots: a sort buffer of next_pow2(capacity) (key, index) pairs, a slot-by-age table and three fp64
// per-candidate arrays (cuda/scoring.cuh carves it). constexpr: device code calls these too.
constexpr int64_t cuda_sort_capacity(int capacity) {
  int64_t p = 1;
  while (p < capacity) p *= 2;
  return p;
}
constexpr int64_t cuda_head_scratch_bytes(int capacity) {
  const int64_t bytes = 16 * cuda_sort_capacity(capacity) + 4 * int64_t{capacity} + 3 * 8 * int64_t{capacity};
  return (bytes + 255) / 256 * 256;
}
// What a policy reading the windowed attention (window_attention.cuh) adds to each head scratch: the
// per-query-head mean weights per candidate (fp64), the candidate tiles' softmax statistics and, for up
// to logit_queries window queries, every scaled logit (fp64, so the second pass reads instead of
// recomputing them).
// Byte offsets from the window scratch's start: means at 0, then the (m, d) pairs (16-byte aligned),
// then the logits; bytes = the whole, a multiple of 256. Host and device (WindowScratch) share it.
struct CudaWindowLayout {
  int64_t stats = 0, logits = 0, bytes = 0;
};
constexpr CudaWindowLayout cuda_window_layout(int capacity, int group, int logit_queries) {
  const int64_t cells = int64_t{group} * capacity;
  CudaWindowLayout layout;
  layout.stats = 8 * ((cells + 1) / 2 * 2);
  layout.logits = layout.stats + 16 * cells;
  layout.bytes = (layout.logits + 8 * cells * logit_queries + 255) / 256 * 256;
  return layout;
}
constexpr int64_t cuda_window_scratch_bytes(int capacity, int group, int logit_queries) {
  return cuda_window_layout(capacity, group, logit_queries).bytes;
}
// Window queries whose logits the window scratch holds when it fits (the default r; a longer window
// recomputes them).
inline constexpr int kCudaStoredLogitQueries = 64;
// Per-(row, KV head) scratch of a round scorer (TriAttention): the head scratch plus one fp64 array per
// query head of the GQA group.
constexpr int64_t cuda_round_scratch_bytes(int capacity, int group) {
  return cuda_head_scratch_bytes(capacity) + (8 * int64_t{group} * capacity + 255) / 256 * 256;
}

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

  // Scoring selections (snapkv, triattention, ...): the pool's layers, shapes and the policy's options.
  const SelectionLayer* layers = nullptr;  // [n_model_layers]
  int n_model_layers = 0;
  int head_dim = 0;
  int n_heads = 0;  // query heads (the ring's second dimension)
  // Queries per ring row (the ring's third dimension) for a policy reading window queries, else 0. A due
  // row of such a policy must hold a ring row (StepBatch::ring_row >= 0) and r <= ring_window, or the
  // selection flags kErrorSelectionInput.
  int ring_window = 0;
  int pool = 1;
  double temperature = 1.0;
  double lambda = 0.0;
  double large = 0.0;
  int sinks = 0;
  int block = 0;
  bool block_from_slot0 = true;
  double recent = 0.0;
  int queries = 0;
  double threshold = 0.0;
  const double* table = nullptr;  // EvictionPolicy::device_params().table, uploaded once
  // Windowed attention: the window scratch holds the logits of up to this many window queries (0: none;
  // rows with more queries recompute them). Set with the scratch by the backend.
  int logit_queries = 0;
  // cuda_head_scratch_bytes(capacity) bytes (plus cuda_window_scratch_bytes for policies that need
  // window queries) per (row, layer of the launch, KV head), at
  // scratch + (((s - row_begin) * n_layers + l) * n_kv_heads + h) * head_scratch; a round scorer uses
  // cuda_round_scratch_bytes per (row, KV head) instead.
  char* scratch = nullptr;
  int64_t head_scratch = 0;
  // Scoring launches cover rows [row_begin, row_begin + n_rows) of the batch (the backend splits the
  // rows into groups whose scratch fits its cap); s in the scratch offsets is relative to row_begin.
  // The other selections always cover every row.
  int row_begin = 0;
  int n_rows = 0;
  // Keep flags a round scorer writes once per (row, KV head) for every layer: [n_seqs][n_kv_heads][capacity].
  uint8_t* round_keep = nullptr;
};

// Launches the selection on `stream` (a cudaStream_t).
using CudaSelectionLauncher = void (*)(const CudaSelectionArgs& args, void* stream);
// A whole-model scorer (policies with scores_whole_round(): TriAttention): launched once per evict call
// with every layer (layer_begin 0, n_layers = the model's) before any layer is compacted; writes
// round_keep, which the policy's selection launcher then copies into each layer's flags.
using CudaRoundScorer = void (*)(const CudaSelectionArgs& args, void* stream);

// The launcher registered for `name`, or nullptr when the policy has no CUDA file or the build has no
// CUDA ("full" has none and needs none: it never evicts).
CudaSelectionLauncher cuda_selection(std::string_view name);
// The round scorer registered for `name` (nullptr for per-layer policies or without CUDA).
CudaRoundScorer cuda_round_scorer(std::string_view name);

// Throws kvdice::Error naming the policy when it cannot run on the CUDA backend (it evicts but has no
// CUDA selection). The engine may call it at construction; CudaBackend::evict calls it too.
void require_cuda_selection(std::string_view name);

#ifdef KVDICE_WITH_CUDA
void cuda_select_random_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_shared(const CudaSelectionArgs& args, void* stream);
void cuda_select_recency(const CudaSelectionArgs& args, void* stream);
void cuda_select_streaming(const CudaSelectionArgs& args, void* stream);
void cuda_select_snapkv(const CudaSelectionArgs& args, void* stream);
void cuda_select_triattention(const CudaSelectionArgs& args, void* stream);
void cuda_select_rkv(const CudaSelectionArgs& args, void* stream);
void cuda_select_vase(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_block_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_pp_rec(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_pin_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_carrier_mix(const CudaSelectionArgs& args, void* stream);
void cuda_select_random_vrange_pp(const CudaSelectionArgs& args, void* stream);
void cuda_select_rkv_official(const CudaSelectionArgs& args, void* stream);
void cuda_select_h2o(const CudaSelectionArgs& args, void* stream);
void cuda_round_triattention(const CudaSelectionArgs& args, void* stream);
// The registry columns: the launchers of a policy with a CUDA file, nullptr in builds without CUDA.
#define KVDICE_CUDA_SELECTION(name) ::kvdice::policy::cuda_select_##name
#define KVDICE_CUDA_ROUND(name) ::kvdice::policy::cuda_round_##name
#else
#define KVDICE_CUDA_SELECTION(name) nullptr
#define KVDICE_CUDA_ROUND(name) nullptr
#endif

// Codes a device selection (or the backend's compaction after it) writes into CudaSelectionArgs::error;
// the backend reads the word after the round and names the problem.
inline constexpr int kErrorSelectionInput = 1;   // keep/protected/capacity outside the policy's preconditions
inline constexpr int kErrorCompactionCount = 2;  // keep flags do not hold exactly T kept slots
inline constexpr int kErrorLayersDiffer = 3;     // a whole-model keep-set met layers holding other tokens

}  // namespace kvdice::policy
