// rkv / rkv_pp (docs/reference.md §2; the reference's `attn_rkv --rkv_lambda 0.5 --smooth` and
// `attn_rkv_pp`): score = λ · smoothed windowed attention (window_attention.h) − (1 − λ) · key
// redundancy (key_redundancy.h, plain row mean), both over all candidates of the KV head; keep the
// top K_sel. The _pp variant pins the prompt and ranks the rest by the same score.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "policy/key_redundancy.h"
#include "policy/policy_options.h"
#include "policy/ranking.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

class RkvPolicy final : public EvictionPolicy {
 public:
  RkvPolicy(PolicyOptions& options, bool protect)
      : protect_(protect),
        lambda_(options.get_double("lambda", 0.5, 0.0, 1.0)),
        pool_(options.get_int("pool", 5, 1, 99)),
        temperature_(options.get_double("temperature", 1.0, 1e-3, 1e3)),
        precision_(read_window_precision(options, protect ? "rkv_pp" : "rkv")) {
    if (pool_ % 2 == 0) fail("policy '{}': option pool={} must be odd (1 = no smoothing)", name(), pool_);
  }
  std::string_view name() const override { return protect_ ? "rkv_pp" : "rkv"; }
  std::string_view summary() const override {
    return protect_ ? "R-KV with the prompt pinned: prompt + window + top λ·attention − (1−λ)·redundancy"
                    : "R-KV: window + top λ·attention − (1−λ)·key redundancy (λ 0.5)";
  }
  bool protects_prompt() const override { return protect_; }
  SignalNeeds needs() const override { return {.window_queries = true}; }
  std::string options() const override {
    return fmt::format("lambda={},pool={},temperature={}", lambda_, pool_, temperature_) +
           window_precision_option(precision_);
  }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    std::vector<double> score = windowed_attention(input, pool_, temperature_, precision_);
    const std::vector<double> redundancy = key_redundancy(input, std::nullopt);
    for (size_t j = 0; j < score.size(); ++j) score[j] = lambda_ * score[j] - (1.0 - lambda_) * redundancy[j];
    keep_prompt_and_highest<double>(input, score, keep);
  }

 private:
  bool protect_;
  double lambda_;
  int pool_;
  double temperature_;
  WindowPrecision precision_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_rkv_policy(PolicyOptions& options) {
  return std::make_unique<RkvPolicy>(options, false);
}
std::unique_ptr<EvictionPolicy> make_rkv_pp_policy(PolicyOptions& options) {
  return std::make_unique<RkvPolicy>(options, true);
}

}  // namespace kvdice::policy
