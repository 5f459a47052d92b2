// KvPool: every sequence's K/V in one allocation made through the backend, in pages of `page_slots`
// slots. Per layer, keys and values are [n_pages][n_kv_heads][page_slots][head_dim] in the backend's
// KV dtype (fp32 on CPU, bf16 on CUDA) and absolute positions [n_pages][n_kv_heads][page_slots] int32,
// so one page holds the same slot range of every KV head. A sequence gets all the pages of its
// reservation at admission and keeps them until it retires: page tables never change during decode
// and nothing is ever preempted. A pool that records window queries (signals.window_queries) also
// holds a query ring sized by sequences, not pages: one row of `window` queries per query head for
// each sequence that can run at once, handed out at admission like the pages (backend.h KvLayer).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "policy/eviction_policy.h"

namespace kvdice::kv {

struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// The query ring's shape: `rows` sequences at once (the engine's max batch), each keeping its last
// `window` queries (its r, at most this) of every one of `n_query_heads` query heads, bf16.
struct QueryRingShape {
  int rows = 0;
  int window = 0;
  int n_query_heads = 0;
};

class KvPool {
 public:
  static constexpr int kDefaultPageSlots = 16;

  // `signals`: the side arrays to record (backend.h KvLayer); the query ring (window queries) needs
  // `ring` (rows, window and query heads all > 0), which is ignored otherwise.
  KvPool(backend::Backend& backend, KvShape shape, int64_t n_pages, int page_slots = kDefaultPageSlots,
         policy::SignalNeeds signals = {}, QueryRingShape ring = {});

  // Bytes one page takes across all layers (K, V, positions and the per-slot signals; the query ring
  // is per sequence: query_ring_bytes).
  static int64_t bytes_per_page(KvShape shape, DType dtype, int page_slots, policy::SignalNeeds signals = {});
  // Bytes of one query ring element: bf16 on every backend (backend.h KvLayer::query_ring).
  static constexpr int kQueryRingElementBytes = 2;
  // Bytes of a query ring of `ring` across all layers: rows x window x query heads x head_dim x bf16
  // per layer (0 for a ring of no rows). One sequence's share is the ring of one row.
  static int64_t query_ring_bytes(KvShape shape, QueryRingShape ring);
  const policy::SignalNeeds& signals() const { return signals_; }

  const KvShape& shape() const { return shape_; }
  backend::Backend& backend() const { return *backend_; }
  int page_slots() const { return page_slots_; }
  int64_t n_pages() const { return n_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t pages_for(int64_t slots) const { return (slots + page_slots_ - 1) / page_slots_; }
  // Pages and the query ring together.
  int64_t total_bytes() const {
    return n_pages_ * bytes_per_page(shape_, dtype_, page_slots_, signals_) + query_ring_bytes(shape_, ring_);
  }
  // The query ring as allocated (rows 0 when the pool records no window queries).
  const QueryRingShape& query_ring() const { return ring_; }
  int64_t free_ring_rows() const { return static_cast<int64_t>(free_rows_.size()); }
  DType dtype() const { return dtype_; }
  const backend::KvLayer& layer(int l) const { return layers_[l]; }
  const std::vector<backend::KvLayer>& layers() const { return layers_; }

  // All pages for `slots` slots, or an empty vector when they do not fit now (the caller waits).
  std::vector<int32_t> allocate(int64_t slots);
  void release(const std::vector<int32_t>& pages);
  // A row of the query ring for one sequence until it retires, or -1 when every row is taken (or the
  // pool records no window queries).
  int allocate_ring_row();
  void release_ring_row(int row);

 private:
  backend::Backend* backend_;
  KvShape shape_;
  DType dtype_;
  int page_slots_;
  int64_t n_pages_;
  policy::SignalNeeds signals_;
  QueryRingShape ring_;
  backend::Buffer keys_, values_, positions_, value_range_, attention_mass_, query_ring_;
  std::vector<backend::KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack: the lowest page ids are handed out first
  std::vector<int32_t> free_rows_;  // the same for ring rows
};

}  // namespace kvdice::kv
