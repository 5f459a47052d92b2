// random_vrange_pp (a random_pp hybrid, docs/mechanism.md "Fixing the once-only failure"): random_pp with
// a salience tag that costs no scoring pass. The value range (max - min over a slot's value channels) is
// recorded once, when the token is appended, like VaSE's; a round keeps the prompt, then the
// n_tag = floor(share · (K_sel - pl)) unprotected candidates with the widest value range (ties: the older
// first, policy/ranking.h), then random_subset.h's draw over the remaining candidates in slot order
// (stream c = KV head) for the rest. share=0 is random_pp bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "policy/policy_options.h"
#include "policy/random_subset.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

class RandomVrangePpPolicy final : public EvictionPolicy {
 public:
  explicit RandomVrangePpPolicy(PolicyOptions& options) : share_(options.get_double("share", 0.25, 0.0, 1.0)) {}
  std::string_view name() const override { return "random_vrange_pp"; }
  std::string_view summary() const override {
    return "random_pp with a share of K_sel - pl (share=0.25) kept for the widest value ranges, tagged at append";
  }
  bool protects_prompt() const override { return true; }
  SignalNeeds needs() const override { return {.value_ranges = true}; }
  std::string options() const override { return fmt::format("share={}", share_); }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(input.value_range.size()) == input.n_candidates,
                 "random_vrange_pp got {} value ranges for {} candidates", input.value_range.size(),
                 input.n_candidates);
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    const int free = input.keep - input.n_protected;
    const int n_tag = tagged_slots(share_, free);
    const std::vector<int32_t> order = chronological(input, input.n_protected);
    keep_highest<float>(input, order, input.value_range, n_tag, keep);
    std::vector<int32_t> pool;
    for (int slot = input.n_protected; slot < input.n_candidates; ++slot)
      if (!keep[slot]) pool.push_back(slot);
    const int victims = static_cast<int>(pool.size()) - (free - n_tag);
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    draw_victims(stream, pool, victims);
    for (size_t i = static_cast<size_t>(victims); i < pool.size(); ++i) keep[pool[i]] = 1;
  }

  static int tagged_slots(double share, int free) {
    return std::min(free, static_cast<int>(std::floor(share * static_cast<double>(free))));
  }

 private:
  double share_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_vrange_pp_policy(PolicyOptions& options) {
  return std::make_unique<RandomVrangePpPolicy>(options);
}

}  // namespace kvdice::policy
