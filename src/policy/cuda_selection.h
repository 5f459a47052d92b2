// The CUDA half of a policy: a launcher that runs the policy's device selection for every due
// (sequence, layer, KV head) of one evict call and writes keep flags, bit-identical to the policy's
// CPU select(). Plain C++ (no CUDA headers) so the registry can name launchers in every build; the
// definitions live in src/policy/cuda/<name>.cu and exist only when KVDICE_WITH_CUDA is defined.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>
#include <type_traits>

#include "core/dtype.h"
#include "core/step_batch.h"

namespace kvdice::policy {

class EvictionPolicy;
class PolicyOptions;

// A policy's options as its CUDA selection reads them. Each CUDA file defines its own parameter type
// (a trivially copyable struct of at most kCudaParamBytes) and a binder that fills it from the policy's
// options; the block crosses the backend opaque, in every launch's CudaSelectionArgs, and only the file
// that wrote it reads it back.
inline constexpr int kCudaParamBytes = 64;
struct CudaParams {
  alignas(8) unsigned char bytes[kCudaParamBytes] = {};

  // Starts a T (default values) in the zeroed block, whose bytes beyond T's members stay zero, so equal
  // options give equal blocks.
  template <class T>
  T& emplace() {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kCudaParamBytes && alignof(T) <= 8,
                  "a CUDA parameter type is a small plain struct");
    std::memset(bytes, 0, sizeof bytes);
    return *new (bytes) T();
  }
  template <class T>
  KVDICE_HD const T& as() const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kCudaParamBytes && alignof(T) <= 8,
                  "a CUDA parameter type is a small plain struct");
    return *reinterpret_cast<const T*>(bytes);
  }
};

// One layer of the KV pool as a scoring selection reads it (device pointers; a signal is nullptr when
// the pool does not record it). Keys are bf16, [page][KV head][page slot][head_dim] (backend.h KvLayer).
struct SelectionLayer {
  const void* keys = nullptr;
  const int32_t* positions = nullptr;
  const float* value_range = nullptr;
  const uint16_t* query_ring =
      nullptr;  // [ring row][query head][ring window][head_dim] bf16 bits (backend.h KvLayer)
  const float* attention_mass = nullptr;
};

// Per-(row, layer, KV head) scratch of the scoring selections for a resident capacity of `capacity`
// slots: a sort buffer of next_pow2(capacity) (key, index) pairs, at least kMinSortPairs, a slot-by-age
// table and three fp64 per-candidate arrays (cuda/scoring.cuh carves it). constexpr: device code calls
// these too. Before a selection runs, its sort pairs are free: rkv's redundancy launches keep per-head
// partial sums there (cuda/rkv.cu), up to 256 fp64 at the smallest capacities.
inline constexpr int64_t kMinSortPairs = 128;
constexpr int64_t cuda_sort_capacity(int capacity) {
  int64_t p = kMinSortPairs;
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
// The window scratch of the fp32 windowed attention (precision=fp32, window_scores_tc.cu): the
// per-query-head fp32 mean weights per candidate, means[group][capacity], a multiple of 256 bytes.
constexpr int64_t cuda_window_fp32_bytes(int capacity, int group) {
  return (4 * int64_t{group} * capacity + 255) / 256 * 256;
}
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
  CudaParams params;  // the policy's options, written by its CUDA file's binder (CudaSelection::bind)
  // The windowed attention's smoothing kernel, temperature and precision (window_attention.cuh reads
  // them): a launcher of a policy scoring by windowed attention sets them from its own parameters.
  int pool = 1;
  double temperature = 1.0;
  bool window_fp32 = false;  // the windowed attention on tensor cores in fp32 (precision=fp32), else fp64
  const double* table = nullptr;  // EvictionPolicy::device_table().values, uploaded once per policy
  // Windowed attention: the window scratch holds the logits of up to this many window queries (0: none;
  // rows with more queries recompute them). Set with the scratch by the backend.
  int logit_queries = 0;
  // cuda_head_scratch_bytes(capacity) bytes (plus cuda_window_scratch_bytes for policies that score
  // by windowed attention, or CudaSelection::extra_scratch) per (row, layer of the launch, KV head), at
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
// Fills a CUDA file's parameter type from a policy's options (the spec as describe() writes it, every
// option in effect stated; PolicyOptions::require_* reads them).
using CudaParamBinder = CudaParams (*)(PolicyOptions& options);

// Whether a windowed-attention file's bound parameters ask for the fp32 windowed attention
// (precision=fp32), whose window scratch holds only the fp32 means (cuda_window_fp32_bytes): the
// backend sizes the scratch before the launcher runs, and only for the files that give one.
using CudaWindowPrecision = bool (*)(const CudaParams& params);

// Bytes a CUDA file's selection keeps per (row, layer of the launch, KV head) right after the head
// scratch (cuda_head_scratch_bytes), for rows of at most `ring_window` window queries: rkv_official's
// logits of its importance queries, written by one launch and read by the next. A file with extra
// scratch runs no windowed attention (the window scratch would sit at the same place).
using CudaExtraScratch = int64_t (*)(const CudaParams& params, int capacity, int ring_window);

// What one CUDA file (src/policy/cuda/<file>.cu) gives the registry: its selection launcher, the binder
// of its parameters (nullptr: it reads none), whether it needs the per-head scratch of the scoring
// launches although its policy reads no signals (an age order, a sort: random_block_pp, random_pp_rec),
// its whole-model scorer (nullptr for per-layer policies) and, for a file scoring by windowed attention
// (snapkv, rkv, vase), what its parameters say of its precision (nullptr: the file runs no windowed
// attention and gets no window scratch, as rkv_official, which reads the window queries itself), and
// the extra per-head scratch it needs, if any.
struct CudaSelection {
  CudaSelectionLauncher select = nullptr;
  CudaParamBinder bind = nullptr;
  bool head_scratch = false;
  CudaRoundScorer round = nullptr;
  CudaWindowPrecision window_fp32 = nullptr;
  CudaExtraScratch extra_scratch = nullptr;
};

// The CUDA file registered for policy `name` (a spec's options are ignored): "snapkv" for snapkv and
// snapkv_pp; empty for "full", which never evicts and needs none. Known in every build.
std::string_view cuda_file(std::string_view name);
// The CUDA selection registered for `name`, or nullptr when the policy has no CUDA file or the build has
// no CUDA.
const CudaSelection* cuda_selection(std::string_view name);
// The round scorer registered for `name` (nullptr for per-layer policies or without CUDA).
CudaRoundScorer cuda_round_scorer(std::string_view name);
// `policy`'s options bound into its CUDA file's parameter type (empty when the file reads none); Error
// naming the policy when its CUDA file is missing or an option its binder reads is not stated.
CudaParams bind_cuda_params(const EvictionPolicy& policy);

// Throws kvdice::Error naming the policy when it cannot run on the CUDA backend (it evicts but has no
// CUDA selection). The engine may call it at construction; CudaBackend::evict calls it too.
void require_cuda_selection(std::string_view name);

#ifdef KVDICE_WITH_CUDA
// One per file in src/policy/cuda/, defined there.
extern const CudaSelection cuda_file_random_pp;
extern const CudaSelection cuda_file_random_shared;
extern const CudaSelection cuda_file_recency;
extern const CudaSelection cuda_file_streaming;
extern const CudaSelection cuda_file_snapkv;
extern const CudaSelection cuda_file_triattention;
extern const CudaSelection cuda_file_rkv;
extern const CudaSelection cuda_file_vase;
extern const CudaSelection cuda_file_random_block_pp;
extern const CudaSelection cuda_file_random_pp_rec;
extern const CudaSelection cuda_file_random_pin_pp;
extern const CudaSelection cuda_file_carrier_mix;
extern const CudaSelection cuda_file_random_vrange_pp;
extern const CudaSelection cuda_file_rkv_official;
extern const CudaSelection cuda_file_h2o;
#endif

// Codes a device selection (or the backend's compaction after it) writes into CudaSelectionArgs::error;
// the backend reads the word after the round and names the problem.
inline constexpr int kErrorSelectionInput = 1;   // keep/protected/capacity outside the policy's preconditions
inline constexpr int kErrorCompactionCount = 2;  // keep flags do not hold exactly T kept slots
inline constexpr int kErrorLayersDiffer = 3;     // a whole-model keep-set met layers holding other tokens

}  // namespace kvdice::policy
