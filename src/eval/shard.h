// One shard of a cell: `eval run --shard i/N` decodes only the (problem, run) pairs whose stream id
// (problem * runs + run) is i modulo N. Striding by stream id rather than cutting blocks spreads
// every problem's runs, and so long and short problems, evenly over the shards; the slice depends
// only on (i, N, runs), so a rerun of a shard resumes exactly its own pairs. Which process takes
// which shard is the launcher's business (tools/cluster/), never the library's.
#pragma once

#include <cstdint>
#include <string>

namespace kvdice::eval {

struct ShardSpec {
  int index = 0;  // 0-based
  int count = 1;  // 1: the whole cell

  bool whole() const { return count == 1; }
  bool owns(uint64_t stream_id) const { return stream_id % static_cast<uint64_t>(count) == static_cast<uint64_t>(index); }
  std::string describe() const;  // "i/N"
};

// Parses "i/N" with 0 <= i < N; Error naming the text otherwise.
ShardSpec parse_shard(const std::string& text);

}  // namespace kvdice::eval
