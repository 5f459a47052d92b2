#include "policy/random_subset.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"

namespace kvdice::policy {

void draw_victims(const PhiloxStream& stream, std::span<int32_t> pool, int victims) {
  const int m = static_cast<int>(pool.size());
  KVDICE_CHECK(0 <= victims && victims <= m, "cannot draw {} victims from {} candidates", victims, m);
  for (int i = 0; i < victims; ++i) {
    int j =
        i + static_cast<int>(stream.uniform_below(static_cast<uint32_t>(i), static_cast<uint32_t>(m - i)));
    std::swap(pool[i], pool[j]);
  }
}

void keep_random_subset(const SelectionInput& input, uint32_t stream_c, std::span<uint8_t> keep) {
  const int n = input.n_candidates;
  KVDICE_CHECK(static_cast<int>(keep.size()) == n, "keep has {} flags for {} candidates", keep.size(), n);
  KVDICE_CHECK(0 <= input.n_protected && input.n_protected <= input.keep && input.keep <= n,
               "need 0 <= n_protected ({}) <= keep ({}) <= n_candidates ({})", input.n_protected, input.keep,
               n);
  const int m = n - input.n_protected;
  const int victims = m - (input.keep - input.n_protected);
  const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer), stream_c};

  std::vector<int32_t> index(m);
  std::iota(index.begin(), index.end(), input.n_protected);
  draw_victims(stream, index, victims);
  std::fill(keep.begin(), keep.end(), uint8_t{1});
  for (int i = 0; i < victims; ++i) keep[index[i]] = 0;
}

}  // namespace kvdice::policy
