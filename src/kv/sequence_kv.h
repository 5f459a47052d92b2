// SequenceKv: one sequence's view of its pages in a KvPool: resident length, tokens ever appended, and
// (for host pools, i.e. the CPU backend) element access by (layer, KV head, slot). Keys are stored
// post-RoPE and never re-rotated; each slot records the absolute position of the token it holds.
// Every head of a sequence holds the same number of slots; which tokens differs per head after eviction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "kv/kv_pool.h"

namespace kvdice::kv {

class SequenceKv {
 public:
  // A view of `pages` of `pool` holding up to `capacity` slots (BudgetSpec::reservation), currently
  // `length` resident after `appended` tokens.
  SequenceKv(KvPool& pool, std::vector<int32_t> pages, int capacity, int length = 0, int64_t appended = 0);
  // A standalone cache with a private fp32 host pool (tests and tools). Copying a standalone cache
  // copies its contents (a snapshot); copying a view of a shared pool is refused.
  SequenceKv(KvShape shape, int capacity);
  SequenceKv(const SequenceKv& other);
  SequenceKv& operator=(const SequenceKv& other);
  SequenceKv(SequenceKv&&) = default;
  SequenceKv& operator=(SequenceKv&&) = default;

  const KvShape& shape() const { return pool_->shape(); }
  const KvPool& pool() const { return *pool_; }
  const std::vector<int32_t>& pages() const { return pages_; }
  int capacity() const { return capacity_; }
  int length() const { return length_; }          // resident slots per head
  int64_t appended() const { return appended_; }  // tokens ever appended = next absolute position

  // Host access; valid only for pools in host memory (the CPU backend).
  float* key(int layer, int head, int slot) { return element(pool_->layer(layer).keys, layer, head, slot); }
  float* value(int layer, int head, int slot) {
    return element(pool_->layer(layer).values, layer, head, slot);
  }
  const float* key(int layer, int head, int slot) const {
    return element(pool_->layer(layer).keys, layer, head, slot);
  }
  const float* value(int layer, int head, int slot) const {
    return element(pool_->layer(layer).values, layer, head, slot);
  }
  int32_t& position(int layer, int head, int slot) {
    return pool_->layer(layer).positions[slot_index(layer, head, slot)];
  }
  int32_t position(int layer, int head, int slot) const {
    return pool_->layer(layer).positions[slot_index(layer, head, slot)];
  }
  // Positions of slots [0, length) of every head of one layer, [head][slot], read through the
  // backend (any pool; one read per page).
  std::vector<std::vector<int32_t>> read_layer_positions(int layer) const;

  // n new tokens were written at slots [length, length + n) of every layer and head.
  void commit(int n_new);
  // After compaction: every head now holds `new_length` slots.
  void set_length(int new_length);
  // Moves slot `from` to slot `to` (K, V, position) for one layer and head (host pools).
  void move_slot(int layer, int head, int from, int to);

  // Bytes this sequence's resident slots take at `bytes_per_element` (2 for bf16).
  int64_t resident_bytes(int bytes_per_element) const;

 private:
  int64_t slot_index(int layer, int head, int slot) const {
    const int p = pool_->page_slots();
    return pool_->layer(layer).slot_index(pages_[static_cast<size_t>(slot / p)], head, slot % p);
  }
  float* element(void* base, int layer, int head, int slot) const {
    KVDICE_CHECK(pool_->dtype() == DType::F32, "host KV access needs an fp32 host pool");
    return static_cast<float*>(base) + slot_index(layer, head, slot) * pool_->shape().head_dim;
  }

  std::shared_ptr<backend::Backend> own_backend_;  // standalone caches only
  std::shared_ptr<KvPool> own_pool_;
  KvPool* pool_;
  std::vector<int32_t> pages_;
  int capacity_ = 0;
  int length_ = 0;
  int64_t appended_ = 0;
};

}  // namespace kvdice::kv
