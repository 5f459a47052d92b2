// random_pin_pp on the device (twin of policy/random_pin_pp.cpp): the prompt kept, span candidates kept in
// pinned (layer, KV head) sites and evicted elsewhere, and the CPU's draw_victims over the other
// unprotected candidates in slot order (stream c = KV head) decides the rest; with deal=1 a span's k-th
// token is kept only in the k % n-th listed head. The options arrive as the policy's device table
// (PinSpec::table()).
#include <cub/block/block_scan.cuh>

#include "policy/cuda/random_subset.cuh"
#include "policy/cuda/scoring.cuh"

namespace kvdice::policy {
namespace {

__device__ bool listed(const double* list, int n, int value) {
  if (n < 0) return true;  // all
  for (int i = 0; i < n; ++i)
    if (static_cast<int>(list[i]) == value) return true;
  return false;
}

struct RandomPinPpDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    using Scan = cub::BlockScan<int, cuda::kSelectionThreads>;
    __shared__ typename Scan::TempStorage scan;
    const double* table = args.table;
    const int n_spans = static_cast<int>(table[0]);
    const double* spans = table + 1;
    const double* layer_entry = spans + 2 * n_spans;
    const int n_layers = static_cast<int>(layer_entry[0]);
    const double* head_entry = layer_entry + 1 + (n_layers > 0 ? n_layers : 0);
    const int n_heads = static_cast<int>(head_entry[0]);
    const bool deal = head_entry[1 + (n_heads > 0 ? n_heads : 0)] != 0.0;
    const bool layer_in = listed(layer_entry + 1, n_layers, h.layer);
    const bool pinned = layer_in && listed(head_entry + 1, n_heads, h.kv_head);
    // PinSpec::site_keeps: -1 outside every span, 1 kept in this site, 0 dropped.
    auto site_keeps = [&](int32_t position) {
      for (int i = 0; i < n_spans; ++i) {
        const int32_t lo = static_cast<int32_t>(spans[2 * i]);
        if (position < lo || position >= static_cast<int32_t>(spans[2 * i + 1])) continue;
        if (!deal) return pinned ? 1 : 0;
        return layer_in && static_cast<int>(head_entry[1 + (position - lo) % n_heads]) == h.kv_head ? 1 : 0;
      }
      return -1;
    };
    cuda::HeadScratch w(scratch, args.capacity);
    int32_t* pool = w.slot_of_age;
    const int first = h.n_protected;
    for (int slot = threadIdx.x; slot < first; slot += blockDim.x) keep[slot] = 1;
    int carry = 0, span_kept = 0;
    for (int base = first; base < h.n_candidates; base += blockDim.x) {
      const int slot = base + static_cast<int>(threadIdx.x);
      const int site = slot < h.n_candidates ? site_keeps(h.position(slot)) : 2;
      const int in_pool = site == -1 ? 1 : 0;
      const bool kept = site == 1;
      if (kept) keep[slot] = 1;
      int rank = 0, total = 0;
      Scan(scan).ExclusiveSum(in_pool, rank, total);
      __syncthreads();
      int kept_rank = 0, kept_total = 0;
      Scan(scan).ExclusiveSum(kept ? 1 : 0, kept_rank, kept_total);
      if (in_pool) pool[carry + rank] = slot;
      carry += total;
      span_kept += kept_total;
      __syncthreads();
    }
    const int m = carry;
    const int free = h.keep - first - span_kept;
    if (free < 0 || free > m) {  // the CPU raises the same case by name
      if (threadIdx.x == 0) atomicExch(args.error, kErrorSelectionInput);
      return;
    }
    const int victims = m - free;
    const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};
    for (int p = threadIdx.x; p < m; p += blockDim.x) keep[pool[p]] = 1;
    __syncthreads();
    cuda::resolve_victims_device(stream, m, victims, [&](int p) { keep[pool[p]] = 0; });
  }
};

void cuda_select_random_pin_pp(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RandomPinPpDevice>(args, stream);
}

}  // namespace

// The draw's pool is listed in the head scratch.
const CudaSelection cuda_file_random_pin_pp{.select = cuda_select_random_pin_pp, .head_scratch = true};

}  // namespace kvdice::policy
