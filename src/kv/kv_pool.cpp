#include "kv/kv_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kvdice::kv {

int64_t KvPool::bytes_per_page(KvShape shape, DType dtype, int page_slots, policy::SignalNeeds signals) {
  const int64_t slots = int64_t{shape.n_layers} * shape.n_kv_heads * page_slots;
  int64_t bytes = slots * (2 * int64_t{shape.head_dim} * static_cast<int64_t>(dtype_size(dtype)) + 4);
  if (signals.value_ranges) bytes += slots * 4;
  if (signals.accumulated_attention) bytes += slots * 4;
  return bytes;
}

int64_t KvPool::query_ring_bytes(KvShape shape, QueryRingShape ring) {
  return int64_t{shape.n_layers} * ring.rows * ring.n_query_heads * ring.window * shape.head_dim *
         kQueryRingElementBytes;
}

KvPool::KvPool(backend::Backend& backend, KvShape shape, int64_t n_pages, int page_slots,
               policy::SignalNeeds signals, QueryRingShape ring)
    : backend_(&backend),
      shape_(shape),
      dtype_(backend.kv_dtype()),
      page_slots_(page_slots),
      n_pages_(n_pages),
      signals_(signals),
      ring_(signals.window_queries ? ring : QueryRingShape{}) {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0)
    fail("KV shape must be positive, got n_layers={} n_kv_heads={} head_dim={}", shape.n_layers,
         shape.n_kv_heads, shape.head_dim);
  if (page_slots <= 0) fail("KV page size must be > 0 slots, got {}", page_slots);
  if (n_pages <= 0 || n_pages > INT32_MAX) fail("KV pool must hold 1 .. 2^31-1 pages, got {}", n_pages);
  if (signals.window_queries && (ring_.rows <= 0 || ring_.window <= 0 || ring_.n_query_heads <= 0))
    fail(
        "the query ring needs rows (sequences at once), a window and query heads, all > 0; got {}, {} and {}",
        ring_.rows, ring_.window, ring_.n_query_heads);
  const int64_t slots_per_layer = n_pages * shape.n_kv_heads * page_slots;
  const size_t kv_bytes =
      static_cast<size_t>(slots_per_layer * shape.n_layers * shape.head_dim) * dtype_size(dtype_);
  keys_ = backend.alloc(kv_bytes, "KV pool keys");
  values_ = backend.alloc(kv_bytes, "KV pool values");
  positions_ = backend.alloc(static_cast<size_t>(slots_per_layer * shape.n_layers) * 4, "KV pool positions");
  const size_t layer_kv_bytes = kv_bytes / shape.n_layers;
  // Signals are fp32 arrays (the query ring bf16) in backend memory (device memory on CUDA), written by
  // qk_norm_rope_append / attention and read by the policies' selections (backend.h KvLayer).
  const size_t slot_signal_bytes = static_cast<size_t>(slots_per_layer * shape.n_layers) * 4;
  const int64_t ring_per_layer = int64_t{ring_.rows} * ring_.n_query_heads * ring_.window * shape.head_dim;
  if (signals.value_ranges) value_range_ = backend.alloc(slot_signal_bytes, "KV pool value ranges");
  if (signals.accumulated_attention)
    attention_mass_ = backend.alloc(slot_signal_bytes, "KV pool attention mass");
  if (signals.window_queries)
    query_ring_ = backend.alloc(static_cast<size_t>(query_ring_bytes(shape, ring_)), "KV pool query rings");
  for (int l = 0; l < shape.n_layers; ++l) {
    backend::KvLayer view;
    view.keys = static_cast<char*>(keys_.data()) + l * layer_kv_bytes;
    view.values = static_cast<char*>(values_.data()) + l * layer_kv_bytes;
    view.positions = static_cast<int32_t*>(positions_.data()) + l * slots_per_layer;
    view.dtype = dtype_;
    view.n_kv_heads = shape.n_kv_heads;
    view.head_dim = shape.head_dim;
    view.page_slots = page_slots;
    view.layer = l;
    if (signals.value_ranges)
      view.value_range = static_cast<float*>(value_range_.data()) + l * slots_per_layer;
    if (signals.accumulated_attention)
      view.attention_mass = static_cast<float*>(attention_mass_.data()) + l * slots_per_layer;
    if (signals.window_queries) {
      view.query_ring = static_cast<uint16_t*>(query_ring_.data()) + l * ring_per_layer;
      view.n_heads = ring_.n_query_heads;
      view.ring_window = ring_.window;
      view.ring_rows = ring_.rows;
    }
    layers_.push_back(view);
  }
  free_.resize(static_cast<size_t>(n_pages));
  for (int64_t i = 0; i < n_pages; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(n_pages - 1 - i);
  for (int row = ring_.rows - 1; row >= 0; --row) free_rows_.push_back(row);
}

std::vector<int32_t> KvPool::allocate(int64_t slots) {
  const int64_t need = pages_for(std::max<int64_t>(slots, 1));
  if (need > free_pages()) return {};
  std::vector<int32_t> pages(free_.end() - need, free_.end());
  std::reverse(pages.begin(), pages.end());
  free_.resize(free_.size() - static_cast<size_t>(need));
  return pages;
}

void KvPool::release(const std::vector<int32_t>& pages) {
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    KVDICE_CHECK(*it >= 0 && *it < n_pages_, "released page {} outside the pool of {}", *it, n_pages_);
    free_.push_back(*it);
  }
  KVDICE_CHECK(free_pages() <= n_pages_, "pool holds {} free pages of {}", free_pages(), n_pages_);
}

int KvPool::allocate_ring_row() {
  if (free_rows_.empty()) return -1;
  const int row = free_rows_.back();
  free_rows_.pop_back();
  return row;
}

void KvPool::release_ring_row(int row) {
  KVDICE_CHECK(row >= 0 && row < ring_.rows, "released ring row {} outside the ring of {}", row, ring_.rows);
  free_rows_.push_back(row);
  KVDICE_CHECK(free_ring_rows() <= ring_.rows, "ring holds {} free rows of {}", free_ring_rows(), ring_.rows);
}

}  // namespace kvdice::kv
