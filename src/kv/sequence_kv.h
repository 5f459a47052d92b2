// SequenceKv: one sequence's resident KV cache for all layers and KV heads, fp32 on the host.
// Layout [layer][kv_head][slot][head_dim] for K and V; each slot records the absolute position of
// the token it holds (keys are stored post-RoPE and never re-rotated). Every head of a sequence
// holds the same number of slots; which tokens they hold differs per head after eviction.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace kvdice::kv {

struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

class SequenceKv {
 public:
  SequenceKv(KvShape shape, int capacity);  // capacity = reserved slots (BudgetSpec::reservation)

  const KvShape& shape() const { return shape_; }
  int capacity() const { return capacity_; }
  int length() const { return length_; }          // resident slots per head
  int64_t appended() const { return appended_; }  // tokens ever appended = next absolute position

  float* key(int layer, int head, int slot) { return &keys_[offset(layer, head, slot)]; }
  float* value(int layer, int head, int slot) { return &values_[offset(layer, head, slot)]; }
  const float* key(int layer, int head, int slot) const { return &keys_[offset(layer, head, slot)]; }
  const float* value(int layer, int head, int slot) const { return &values_[offset(layer, head, slot)]; }
  int32_t& position(int layer, int head, int slot) { return positions_[slot_index(layer, head, slot)]; }
  int32_t position(int layer, int head, int slot) const { return positions_[slot_index(layer, head, slot)]; }

  // The model writes n new tokens at slots [length, length + n) of every layer and head (keys,
  // values, positions), then calls commit(n) once.
  void commit(int n_new);
  // After compaction: every head now holds `new_length` slots.
  void set_length(int new_length);
  // Moves slot `from` to slot `to` (K, V, position) for one layer and head.
  void move_slot(int layer, int head, int from, int to);

  // Bytes this sequence's resident slots would take at `bytes_per_element` (2 for bf16).
  int64_t resident_bytes(int bytes_per_element) const;

 private:
  size_t slot_index(int layer, int head, int slot) const {
    return (static_cast<size_t>(layer) * shape_.n_kv_heads + head) * capacity_ + slot;
  }
  size_t offset(int layer, int head, int slot) const {
    return slot_index(layer, head, slot) * shape_.head_dim;
  }

  KvShape shape_;
  int capacity_ = 0;
  int length_ = 0;
  int64_t appended_ = 0;
  std::vector<float> keys_, values_;
  std::vector<int32_t> positions_;
};

}  // namespace kvdice::kv
