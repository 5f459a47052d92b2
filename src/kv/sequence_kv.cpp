#include "kv/sequence_kv.h"

#include <algorithm>

namespace kvdice::kv {

SequenceKv::SequenceKv(KvShape shape, int capacity) : shape_(shape), capacity_(capacity) {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    fail("KV shape must be positive, got n_layers={} n_kv_heads={} head_dim={}", shape.n_layers,
         shape.n_kv_heads, shape.head_dim);
  }
  if (capacity < 0) fail("KV capacity must be >= 0 slots, got {}", capacity);
  size_t slots = static_cast<size_t>(shape.n_layers) * shape.n_kv_heads * capacity;
  keys_.assign(slots * shape.head_dim, 0.0f);
  values_.assign(slots * shape.head_dim, 0.0f);
  positions_.assign(slots, -1);
}

void SequenceKv::commit(int n_new) {
  // The reservation is made at admission so that this can never happen mid-generation.
  KVDICE_CHECK(n_new >= 0 && length_ + n_new <= capacity_,
               "commit of {} slots at length {} exceeds capacity {}", n_new, length_, capacity_);
  length_ += n_new;
  appended_ += n_new;
}

void SequenceKv::set_length(int new_length) {
  KVDICE_CHECK(new_length >= 0 && new_length <= length_, "set_length({}) may only shrink length {}",
               new_length, length_);
  length_ = new_length;
}

void SequenceKv::move_slot(int layer, int head, int from, int to) {
  KVDICE_CHECK(layer >= 0 && layer < shape_.n_layers && head >= 0 && head < shape_.n_kv_heads,
               "move_slot: layer {} head {} out of range", layer, head);
  KVDICE_CHECK(from >= 0 && from < length_ && to >= 0 && to < length_, "move_slot {} -> {} outside length {}",
               from, to, length_);
  if (from == to) return;
  std::copy_n(key(layer, head, from), shape_.head_dim, key(layer, head, to));
  std::copy_n(value(layer, head, from), shape_.head_dim, value(layer, head, to));
  position(layer, head, to) = position(layer, head, from);
}

int64_t SequenceKv::resident_bytes(int bytes_per_element) const {
  return int64_t{2} * shape_.n_layers * shape_.n_kv_heads * length_ * shape_.head_dim * bytes_per_element;
}

}  // namespace kvdice::kv
