// vase / vase_pp (docs/reference.md §2; the reference's `range_sink_sample_attn --n_large T/4 --smooth`,
// "vase_faithful", and its _pp variant with the prompt pinned and removed from both pools):
//   pinned  = the `sinks` oldest candidates (+ the prompt for vase_pp)
//   large   = the n_large - |sinks outside the prompt| unpinned candidates of widest value range,
//             n_large = floor(large · T) (the sinks count toward n_large, as the reference's +inf)
//   sampled = the rest of K_sel drawn without replacement, each draw with probability proportional to
//             the smoothed windowed attention (window_attention.h) of the candidates still in the pool.
// The draw is exact integer arithmetic so that any implementation reproduces it: weights are
// w_int = floor(w / max(w) · 2^40) over the initial pool; draw i (counter i of the eviction stream
// (key, round, layer, KV head)) picks, in age order, the first candidate whose running sum of w_int
// exceeds mul_hi(u64_i, total w_int left); with no weight left it picks the oldest remaining.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "policy/policy_options.h"
#include "policy/ranking.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

class VasePolicy final : public EvictionPolicy {
 public:
  VasePolicy(PolicyOptions& options, bool protect)
      : protect_(protect),
        large_(options.get_double("large", 0.25, 0.0, 1.0)),
        sinks_(options.get_int("sinks", 4, 0, 1 << 20)),
        pool_(options.get_int("pool", 5, 1, 99)),
        temperature_(options.get_double("temperature", 1.0, 1e-3, 1e3)),
        precision_(read_window_precision(options, protect ? "vase_pp" : "vase")) {
    if (pool_ % 2 == 0) fail("policy '{}': option pool={} must be odd (1 = no smoothing)", name(), pool_);
  }
  std::string_view name() const override { return protect_ ? "vase_pp" : "vase"; }
  std::string_view summary() const override {
    return protect_
               ? "VaSE with the prompt pinned: sinks + widest value ranges + attention-weighted draw"
               : "VaSE: 4 sinks + widest value ranges (T/4) + attention-weighted draw without replacement";
  }
  bool protects_prompt() const override { return protect_; }
  SignalNeeds needs() const override { return {.window_queries = true, .value_ranges = true}; }
  std::string options() const override {
    return fmt::format("large={},sinks={},pool={},temperature={}", large_, sinks_, pool_, temperature_) +
           window_precision_option(precision_);
  }

  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(input.value_range.size()) == input.n_candidates,
                 "vase got {} value ranges for {} candidates", input.value_range.size(), input.n_candidates);
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    int kept = 0;
    for (int slot = 0; slot < input.n_protected; ++slot, ++kept) keep[slot] = 1;
    const std::vector<int32_t> order = chronological(input, 0);
    int sinks_outside = 0;
    for (int i = 0; i < std::min<int>(sinks_, static_cast<int>(order.size())) && kept < input.keep; ++i) {
      if (keep[order[i]]) continue;
      keep[order[i]] = 1;
      ++kept;
      ++sinks_outside;
    }
    const int n_large = static_cast<int>(std::floor(large_ * input.budget));
    std::vector<int32_t> pool;
    for (int32_t slot : order)
      if (!keep[slot]) pool.push_back(slot);
    const int n_range = std::clamp(n_large - sinks_outside, 0, input.keep - kept);
    keep_highest<float>(input, pool, input.value_range, n_range, keep);
    kept += n_range;

    const std::vector<double> attention = windowed_attention(input, pool_, temperature_, precision_);
    std::vector<int32_t> left;
    double w_max = 0.0;
    for (int32_t slot : pool)
      if (!keep[slot]) {
        left.push_back(slot);
        w_max = std::max(w_max, attention[slot]);
      }
    std::vector<uint64_t> weight(left.size(), 0);
    uint64_t total = 0;
    for (size_t i = 0; i < left.size(); ++i) {
      weight[i] =
          w_max > 0.0 ? static_cast<uint64_t>(std::floor(attention[left[i]] / w_max * 1099511627776.0)) : 0;
      total += weight[i];
    }
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    std::vector<uint8_t> taken(left.size(), 0);
    for (int draw = 0; kept < input.keep; ++draw, ++kept) {
      size_t pick = 0;
      if (total == 0) {
        while (taken[pick]) ++pick;
      } else {
        const uint64_t target = mul_hi_u64(stream.draw_u64(static_cast<uint32_t>(draw)), total);
        uint64_t running = 0;
        for (pick = 0; pick < left.size(); ++pick) {
          if (taken[pick]) continue;
          running += weight[pick];
          if (running > target) break;
        }
      }
      KVDICE_CHECK(pick < left.size(), "vase draw {} found no candidate", draw);
      taken[pick] = 1;
      total -= weight[pick];
      keep[left[pick]] = 1;
    }
  }

 private:
  bool protect_;
  double large_;
  int sinks_, pool_;
  double temperature_;
  WindowPrecision precision_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_vase_policy(PolicyOptions& options) {
  return std::make_unique<VasePolicy>(options, false);
}
std::unique_ptr<EvictionPolicy> make_vase_pp_policy(PolicyOptions& options) {
  return std::make_unique<VasePolicy>(options, true);
}

}  // namespace kvdice::policy
