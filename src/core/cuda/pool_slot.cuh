// Where a sequence's slot lives in the KV pool's per-layer arrays (keys, values, positions and the
// signals laid out like them): its page (the sequence's row of the page table), then the KV head, then
// the slot within the page. The device twin of KvLayer::slot_index, shared by every kernel that reads or
// writes a sequence's slots, so the layout is written down once.
#pragma once

#include <cstdint>

namespace kvdice::backend {

__device__ __forceinline__ int64_t pool_slot_index(const int32_t* pages, int n_kv_heads, int page_slots, int g,
                                                   int slot) {
  return (static_cast<int64_t>(pages[slot / page_slots]) * n_kv_heads + g) * page_slots + slot % page_slots;
}

}  // namespace kvdice::backend
