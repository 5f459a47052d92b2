// The eviction parity worlds' rows (test_cuda_policies.cpp, test_cuda_real_shapes.cpp): one sequence's
// budget, window, resident length, tokens appended and protected prompt slots, and the positions its
// slots hold as after earlier rounds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace kvdice::test {

struct EvictionRow {
  int budget, window, length, appended, n_protected;
};

// Protected slots hold their own positions, candidates unique older positions in scrambled order,
// the window the newest r positions in order.
inline std::vector<int32_t> draw_slot_positions(const EvictionRow& r, std::mt19937_64& rng) {
  std::vector<int32_t> older(size_t(r.appended - r.window - r.n_protected));
  std::iota(older.begin(), older.end(), r.n_protected);
  std::shuffle(older.begin(), older.end(), rng);
  std::vector<int32_t> p(size_t(r.length));
  const int n_cand = r.length - r.window;
  for (int slot = 0; slot < r.length; ++slot)
    p[size_t(slot)] = slot < r.n_protected ? slot
                      : slot < n_cand      ? older[size_t(slot - r.n_protected)]
                                           : r.appended - (r.length - slot);
  return p;
}

}  // namespace kvdice::test
