#include "kv/sequence_kv.h"

#include <algorithm>

namespace kvdice::kv {

SequenceKv::SequenceKv(KvPool& pool, std::vector<int32_t> pages, int capacity, int length, int64_t appended)
    : pool_(&pool), pages_(std::move(pages)), capacity_(capacity), length_(length), appended_(appended) {
  KVDICE_CHECK(0 <= length && length <= capacity && length <= appended,
               "view of length {} (capacity {}, appended {})", length, capacity, appended);
  if (capacity < 0) fail("KV capacity must be >= 0 slots, got {}", capacity);
  KVDICE_CHECK(static_cast<int64_t>(pages_.size()) * pool.page_slots() >= capacity,
               "{} pages of {} slots cannot hold {} slots", pages_.size(), pool.page_slots(), capacity);
}

SequenceKv::SequenceKv(KvShape shape, int capacity) : pool_(nullptr), capacity_(capacity) {
  if (capacity < 0) fail("KV capacity must be >= 0 slots, got {}", capacity);
  own_backend_ = backend::make_cpu_backend(1);
  const int page_slots = KvPool::kDefaultPageSlots;
  const int64_t n_pages = std::max<int64_t>(1, (capacity + page_slots - 1) / page_slots);
  own_pool_ = std::make_shared<KvPool>(*own_backend_, shape, n_pages, page_slots);
  pool_ = own_pool_.get();
  pages_ = pool_->allocate(capacity);
}

SequenceKv::SequenceKv(const SequenceKv& other) : SequenceKv(other.shape(), other.capacity_) {
  *this = other;
}

SequenceKv& SequenceKv::operator=(const SequenceKv& other) {
  if (this == &other) return *this;
  KVDICE_CHECK(other.own_pool_ != nullptr, "only standalone KV caches can be copied");
  if (!own_pool_ || own_pool_->n_pages() != other.own_pool_->n_pages() ||
      !(shape().n_layers == other.shape().n_layers && shape().n_kv_heads == other.shape().n_kv_heads &&
        shape().head_dim == other.shape().head_dim)) {
    *this = SequenceKv(other.shape(), other.capacity_);
  }
  const KvPool& from = *other.own_pool_;
  const int64_t slots = from.n_pages() * from.shape().n_kv_heads * from.page_slots();
  for (int l = 0; l < from.shape().n_layers; ++l) {
    const backend::KvLayer& src = from.layer(l);
    const backend::KvLayer& dst = own_pool_->layer(l);
    std::copy_n(static_cast<const float*>(src.keys), slots * from.shape().head_dim,
                static_cast<float*>(dst.keys));
    std::copy_n(static_cast<const float*>(src.values), slots * from.shape().head_dim,
                static_cast<float*>(dst.values));
    std::copy_n(src.positions, slots, dst.positions);
  }
  pages_ = other.pages_;
  capacity_ = other.capacity_;
  length_ = other.length_;
  appended_ = other.appended_;
  return *this;
}

std::vector<std::vector<int32_t>> SequenceKv::read_layer_positions(int layer) const {
  const int p = pool_->page_slots(), heads = shape().n_kv_heads;
  const backend::KvLayer& kv = pool_->layer(layer);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(heads),
                                        std::vector<int32_t>(static_cast<size_t>(length_)));
  std::vector<int32_t> page(static_cast<size_t>(heads * p));
  for (int first = 0; first < length_; first += p) {
    // One page holds this slot range for every head: one read per page.
    pool_->backend().download(page.data(),
                              kv.positions + kv.slot_index(pages_[static_cast<size_t>(first / p)], 0, 0),
                              page.size() * sizeof(int32_t));
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < p && first + i < length_; ++i)
        out[h][static_cast<size_t>(first + i)] = page[static_cast<size_t>(h * p + i)];
  }
  return out;
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
  KVDICE_CHECK(layer >= 0 && layer < shape().n_layers && head >= 0 && head < shape().n_kv_heads,
               "move_slot: layer {} head {} out of range", layer, head);
  KVDICE_CHECK(from >= 0 && from < length_ && to >= 0 && to < length_, "move_slot {} -> {} outside length {}",
               from, to, length_);
  if (from == to) return;
  std::copy_n(key(layer, head, from), shape().head_dim, key(layer, head, to));
  std::copy_n(value(layer, head, from), shape().head_dim, value(layer, head, to));
  position(layer, head, to) = position(layer, head, from);
}

int64_t SequenceKv::resident_bytes(int bytes_per_element) const {
  return int64_t{2} * shape().n_layers * shape().n_kv_heads * length_ * shape().head_dim * bytes_per_element;
}

}  // namespace kvdice::kv
