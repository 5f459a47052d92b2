// KvPool: every sequence's K/V in one allocation made through the backend, in pages of `page_slots`
// slots. Per layer, keys and values are [n_pages][n_kv_heads][page_slots][head_dim] in the backend's
// KV dtype (fp32 on CPU, bf16 on CUDA) and absolute positions [n_pages][n_kv_heads][page_slots] int32,
// so one page holds the same slot range of every KV head. A sequence gets all the pages of its
// reservation at admission and keeps them until it retires: page tables never change during decode
// and nothing is ever preempted.
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

class KvPool {
 public:
  static constexpr int kDefaultPageSlots = 16;

  // `signals`: the side arrays to record (backend.h KvLayer); the query ring needs n_query_heads.
  KvPool(backend::Backend& backend, KvShape shape, int64_t n_pages, int page_slots = kDefaultPageSlots,
         policy::SignalNeeds signals = {}, int n_query_heads = 0);

  // Bytes one page takes across all layers (K, V, positions and the recorded signals).
  static int64_t bytes_per_page(KvShape shape, DType dtype, int page_slots, policy::SignalNeeds signals = {},
                                int n_query_heads = 0);
  const policy::SignalNeeds& signals() const { return signals_; }

  const KvShape& shape() const { return shape_; }
  backend::Backend& backend() const { return *backend_; }
  int page_slots() const { return page_slots_; }
  int64_t n_pages() const { return n_pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t pages_for(int64_t slots) const { return (slots + page_slots_ - 1) / page_slots_; }
  int64_t total_bytes() const {
    return n_pages_ * bytes_per_page(shape_, dtype_, page_slots_, signals_, n_query_heads_);
  }
  DType dtype() const { return dtype_; }
  const backend::KvLayer& layer(int l) const { return layers_[l]; }
  const std::vector<backend::KvLayer>& layers() const { return layers_; }

  // All pages for `slots` slots, or an empty vector when they do not fit now (the caller waits).
  std::vector<int32_t> allocate(int64_t slots);
  void release(const std::vector<int32_t>& pages);

 private:
  backend::Backend* backend_;
  KvShape shape_;
  DType dtype_;
  int page_slots_;
  int64_t n_pages_;
  policy::SignalNeeds signals_;
  int n_query_heads_;
  backend::Buffer keys_, values_, positions_, value_range_, attention_mass_, query_ring_;
  std::vector<backend::KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack: the lowest page ids are handed out first
};

}  // namespace kvdice::kv
