// rkv_official (docs/reference.md §2; the reference's `rkv_official --rkv_lambda 0.1`, its port of the R-KV
// repository's R1KV with the authors' defaults). Per KV head, over all candidates (no protection):
//   importance = for each of the newest `queries` window queries, the max over the GQA group of the
//                raw logits q·k/√D, softmax over the candidates; mean over those queries; then a 1-D
//                max pool along the candidates in age order (kernel `pool`, stride 1, padding pool/2
//                that never wins, as torch's max_pool1d)
//   redundancy = key_redundancy.h with the spare-the-newest rule at `threshold`
//   score      = λ · importance − (1 − λ) · redundancy; keep the top K_sel.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/vector_clones.h"
#include "policy/dimension_order_dots.h"
#include "policy/key_redundancy.h"
#include "policy/policy_options.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

// dots[b][j] = q_b · k_j in fp64 (exact products, summed in dimension order) for block query rows.
KVDICE_VECTOR_CLONES void query_dots(const float* queries, const float* keys_t, int n, int d, int block,
                                     double* dots) {
  dimension_order_dots<double>(queries, keys_t, n, d, block, dots);
}

class RkvOfficialPolicy final : public EvictionPolicy {
 public:
  explicit RkvOfficialPolicy(PolicyOptions& options)
      : lambda_(options.get_double("lambda", 0.1, 0.0, 1.0)),
        queries_(options.get_int("queries", 8, 1, 1 << 16)),
        pool_(options.get_int("pool", 7, 1, 99)),
        threshold_(options.get_double("threshold", 0.5, 0.0, 1.0)) {
    if (pool_ % 2 == 0) fail("policy 'rkv_official': option pool={} must be odd (1 = no pooling)", pool_);
  }
  std::string_view name() const override { return "rkv_official"; }
  std::string_view summary() const override {
    return "R-KV as its authors run it: λ 0.1, last 8 queries (group max), max-pool 7, spare-the-newest "
           "redundancy";
  }
  bool protects_prompt() const override { return false; }
  SignalNeeds needs() const override { return {.window_queries = true}; }
  std::string options() const override {
    return fmt::format("lambda={},queries={},pool={},threshold={}", lambda_, queries_, pool_, threshold_);
  }

  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    const std::vector<double> importance = this->importance(input);
    const std::vector<double> redundancy = key_redundancy(input, threshold_);
    std::vector<double> score(importance.size());
    for (size_t j = 0; j < score.size(); ++j)
      score[j] = lambda_ * importance[j] - (1.0 - lambda_) * redundancy[j];
    keep_prompt_and_highest<double>(input, score, keep);
  }

 private:
  std::vector<double> importance(const SelectionInput& input) const {
    const int n = input.n_candidates, d = input.head_dim, group = input.group;
    const int nq = std::min(queries_, input.n_queries);  // the ring is newest first
    KVDICE_CHECK(d > 0 && group > 0 && nq > 0, "rkv_official needs head_dim, group and queries ({}, {}, {})",
                 d, group, nq);
    KVDICE_CHECK(
        static_cast<int64_t>(input.keys.size()) == int64_t{n} * d &&
            static_cast<int64_t>(input.window_queries.size()) == int64_t{group} * input.n_queries * d,
        "rkv_official got {} key and {} query values", input.keys.size(), input.window_queries.size());
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const std::vector<float> keys_t = transposed_keys(input);
    std::vector<float> queries(static_cast<size_t>(group) * d);
    std::vector<double> mean(static_cast<size_t>(n), 0.0), logits(static_cast<size_t>(n)),
        dots(static_cast<size_t>(kDotBlockRows) * n);
    for (int i = 0; i < nq; ++i) {
      std::fill(logits.begin(), logits.end(), -INFINITY);
      for (int gh = 0; gh < group; ++gh)  // query i of each head of the group, side by side
        std::copy_n(input.window_queries.data() + (int64_t{gh} * input.n_queries + i) * d, d,
                    queries.data() + int64_t{gh} * d);
      for (int gh0 = 0; gh0 < group; gh0 += kDotBlockRows) {
        const int block = std::min(kDotBlockRows, group - gh0);
        query_dots(queries.data() + int64_t{gh0} * d, keys_t.data(), n, d, block, dots.data());
        for (int b = 0; b < block; ++b)  // the group's max, head by head in order
          for (int j = 0; j < n; ++j) logits[j] = std::max(logits[j], dots[int64_t{b} * n + j] * scale);
      }
      const double max_logit = *std::max_element(logits.begin(), logits.end());
      double denom = 0.0;
      for (double& l : logits) denom += (l = std::exp(l - max_logit));
      for (int j = 0; j < n; ++j) mean[j] += logits[j] / denom / nq;
    }
    const std::vector<int32_t> order = chronological(input, 0);
    std::vector<double> pooled(static_cast<size_t>(n));
    const int half = pool_ / 2;
    for (int i = 0; i < n; ++i) {
      double best = -INFINITY;
      for (int t = std::max(0, i - half); t <= std::min(n - 1, i + half); ++t)
        best = std::max(best, mean[order[t]]);
      pooled[order[i]] = best;
    }
    return pooled;
  }

  double lambda_;
  int queries_, pool_;
  double threshold_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_rkv_official_policy(PolicyOptions& options) {
  return std::make_unique<RkvOfficialPolicy>(options);
}

}  // namespace kvdice::policy
