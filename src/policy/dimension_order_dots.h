// Dot products of a few rows with many columns, each summed in dimension order and rounded one product
// and one sum at a time: bit for bit the plain loop `dot += a[c] * b[c]`, which a compiler must keep
// scalar (it may not reorder a floating-point sum), but here vectorized across the columns. The CPU
// twins of the windowed attention (window_attention.cpp), R-KV's redundancy (key_redundancy.cpp) and
// rkv_official's importance compute their logits and cosines with it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

inline constexpr int kDotBlockRows = 4;     // rows that share each read of a column tile
inline constexpr int kDotTileColumns = 32;  // a full block's tile: its sums stay in registers

// out[b][j] = Σ_c rows[b][c] · columns_t[c][j] in Acc, for b < block <= kDotBlockRows, j < n; rows is
// [block][d] row-major, columns_t [d][n] (the columns transposed). A full block runs in tiles of
// kDotTileColumns columns whose sums live in registers across the dimensions; the last columns and a
// short block go one dimension at a time through memory. Inline into a KVDICE_VECTOR_CLONES function
// (core/vector_clones.h) of a file built without fused multiply-add.
template <typename Acc, typename Row, typename Column>
[[gnu::always_inline]] inline void dimension_order_dots(const Row* rows, const Column* columns_t, int n,
                                                        int d, int block, Acc* out) {
  int j0 = 0;
  if (block == kDotBlockRows) {
    for (; j0 + kDotTileColumns <= n; j0 += kDotTileColumns) {
      Acc acc[kDotBlockRows][kDotTileColumns] = {};
      for (int c = 0; c < d; ++c) {
        const Column* column = columns_t + static_cast<size_t>(c) * n + j0;
        for (int b = 0; b < kDotBlockRows; ++b) {
          const Acc a = rows[static_cast<size_t>(b) * d + c];
          for (int t = 0; t < kDotTileColumns; ++t) acc[b][t] += a * static_cast<Acc>(column[t]);
        }
      }
      for (int b = 0; b < kDotBlockRows; ++b)
        std::copy_n(acc[b], kDotTileColumns, out + static_cast<size_t>(b) * n + j0);
    }
  }
  for (int b = 0; b < block; ++b)
    std::fill(out + static_cast<size_t>(b) * n + j0, out + static_cast<size_t>(b + 1) * n, Acc{0});
  for (int c = 0; c < d; ++c) {
    const Column* column = columns_t + static_cast<size_t>(c) * n;
    for (int b = 0; b < block; ++b) {
      const Acc a = rows[static_cast<size_t>(b) * d + c];
      Acc* row = out + static_cast<size_t>(b) * n;
      for (int j = j0; j < n; ++j) row[j] += a * static_cast<Acc>(column[j]);
    }
  }
}

// The candidates' keys transposed to [head_dim][n_candidates]: the columns of dimension_order_dots.
inline std::vector<float> transposed_keys(const SelectionInput& input) {
  const int n = input.n_candidates, d = input.head_dim;
  std::vector<float> keys(static_cast<size_t>(d) * n);
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < d; ++c)
      keys[static_cast<size_t>(c) * n + j] = input.keys[static_cast<size_t>(j) * d + c];
  return keys;
}

}  // namespace kvdice::policy
