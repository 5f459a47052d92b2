// Retention statistics over a retention log (docs/mechanism.md): how much of the generated text the
// KV heads hold together versus each alone, and how close the union comes to what independent heads
// would give. Per (round, group) and per (age bin, group); a group is one layer's KV heads, or the
// (layer, head) sites chosen with --heads, pooled across layers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analyze/retention_log.h"

namespace kvdice::analyze {

struct HeadSite {
  int layer = 0;
  int head = 0;
};

struct RetentionStatsOptions {
  std::vector<HeadSite> sites;  // empty: every layer is a group of its KV heads
  // Lower edges of the age bins, strictly increasing, >= 1; the last bin is open. Ages below the first
  // edge (the newest tokens, the recency window) are not counted.
  std::vector<int64_t> age_edges{128, 256, 512, 1024, 2048, 4096, 8192};
  int position_bins = 16;  // equal-width bins over the generated positions, for the coverage entropy
};

// Mean over the sequences that reached this round. NaN where undefined (nothing generated, one site).
struct RoundGroupStats {
  uint32_t round = 0;
  int layer = -1;  // -1: the chosen sites
  int sequences = 0;
  double length = 0;          // at_token
  double generated = 0;       // at_token - prompt_len
  double union_fraction = 0;  // |union of kept generated positions| / generated
  double per_head_fraction = 0;
  double coverage_entropy = 0;  // per head, normalised to [0, 1], mean over heads
  double jaccard = 0;           // mean over pairs of heads, generated positions
  double prompt_union = 0;      // fraction of prompt positions kept by some head
  double prompt_per_head = 0;
};

// Pooled over every round of every sequence: positions = (round, position) pairs in the bin.
struct AgeBinStats {
  int layer = -1;  // -1: the chosen sites; -2: mean over layers
  int64_t lo = 0;
  int64_t hi = -1;  // -1: open
  int64_t positions = 0;
  int heads = 0;
  double per_head = 0;   // mean over heads of the head's survival s_h
  double union_ = 0;     // kept by at least one head
  double ceiling = 0;    // 1 - prod_h (1 - s_h): the union if heads kept positions independently
  double ceiling_h = 0;  // 1 - (1 - s)^H with s the mean survival
  double deficit = 0;    // ceiling - union
};

struct RetentionStats {
  std::string log;
  RetentionLogHeader header;
  int sequences = 0;
  int rounds = 0;
  std::vector<RoundGroupStats> per_round;
  std::vector<AgeBinStats> per_age;
};

// Parses "L:H,L:H,..." (no range check; analyze_retention checks against each log's header).
std::vector<HeadSite> parse_head_sites(const std::string& text);
// Parses "128,256,..." and checks the edges are >= 1 and strictly increasing.
std::vector<int64_t> parse_age_edges(const std::string& text);

// Accumulates one section's rounds as they are read, so a log far larger than memory can be analysed.
class RetentionAnalyzer {
 public:
  // Fails when a --heads site is outside the header's shape or the options are malformed.
  RetentionAnalyzer(std::string log, const RetentionLogHeader& header, const RetentionStatsOptions& options);
  ~RetentionAnalyzer();
  RetentionAnalyzer(RetentionAnalyzer&&) noexcept;
  void add(const RetentionRound& round);
  RetentionStats finish() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

RetentionStats analyze_retention(const std::string& log, const RetentionSection& section,
                                 const RetentionStatsOptions& options);
// Streams a log file: one RetentionStats per section, rounds never held all at once.
std::vector<RetentionStats> analyze_retention_log(const std::string& log,
                                                  const RetentionStatsOptions& options);

std::string retention_markdown(const std::vector<RetentionStats>& stats,
                               const RetentionStatsOptions& options);
std::string retention_csv(const std::vector<RetentionStats>& stats);

}  // namespace kvdice::analyze
