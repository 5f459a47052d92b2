// random_pp_rec (ablation, seed-repo.md §2): prompt protected, the n_rec = round(recent · K_sel) most
// recent unprotected candidates kept (the reference derives the share from --rkv_lambda, default
// 0.5), and a uniform draw (random_subset.h's algorithm over the remaining candidates in slot order)
// fills the rest.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "policy/policy_options.h"
#include "policy/random_subset.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

class RandomPpRecPolicy final : public EvictionPolicy {
 public:
  explicit RandomPpRecPolicy(PolicyOptions& options) : recent_(options.get_double("recent", 0.5, 0.0, 1.0)) {}
  std::string_view name() const override { return "random_pp_rec"; }
  std::string_view summary() const override {
    return "prompt + window + a share of the most recent candidates (recent=0.5 of K_sel), random rest";
  }
  bool protects_prompt() const override { return true; }
  std::string options() const override { return fmt::format("recent={}", recent_); }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    const int free = input.keep - input.n_protected;
    // Round half to even, as Python's round() in the reference.
    const int n_rec = std::min(free, static_cast<int>(std::nearbyint(recent_ * input.keep)));
    const std::vector<int32_t> order = chronological(input, input.n_protected);
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    for (int i = 0; i < n_rec; ++i) keep[order[order.size() - 1 - static_cast<size_t>(i)]] = 1;
    std::vector<int32_t> pool;
    for (int slot = input.n_protected; slot < input.n_candidates; ++slot)
      if (!keep[slot]) pool.push_back(slot);
    const int victims = static_cast<int>(pool.size()) - (free - n_rec);
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    draw_victims(stream, pool, victims);
    for (size_t i = static_cast<size_t>(victims); i < pool.size(); ++i) keep[pool[i]] = 1;
  }

 private:
  double recent_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_pp_rec_policy(PolicyOptions& options) {
  return std::make_unique<RandomPpRecPolicy>(options);
}

}  // namespace kvdice::policy
