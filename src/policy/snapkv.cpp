// snapkv / snapkv_pp (docs/reference.md §2; the reference's `attn --smooth` / `attn_pp --smooth`): keep the
// K_sel candidates with the highest smoothed windowed attention (window_attention.h). The _pp variant
// pins the prompt and ranks the rest.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "policy/policy_options.h"
#include "policy/ranking.h"
#include "policy/window_attention.h"

namespace kvdice::policy {
namespace {

class SnapKvPolicy final : public EvictionPolicy {
 public:
  SnapKvPolicy(PolicyOptions& options, bool protect)
      : protect_(protect),
        pool_(options.get_int("pool", 5, 1, 99)),
        temperature_(options.get_double("temperature", 1.0, 1e-3, 1e3)),
        precision_(read_window_precision(options, protect ? "snapkv_pp" : "snapkv")) {
    if (pool_ % 2 == 0) fail("policy '{}': option pool={} must be odd (1 = no smoothing)", name(), pool_);
  }
  std::string_view name() const override { return protect_ ? "snapkv_pp" : "snapkv"; }
  std::string_view summary() const override {
    return protect_ ? "SnapKV with the prompt pinned: prompt + window + top smoothed windowed attention"
                    : "SnapKV: window + top smoothed windowed attention of the last r queries";
  }
  bool protects_prompt() const override { return protect_; }
  SignalNeeds needs() const override { return {.window_queries = true}; }
  std::string options() const override {
    return fmt::format("pool={},temperature={}", pool_, temperature_) +
           window_precision_option(precision_);
  }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    const std::vector<double> score = windowed_attention(input, pool_, temperature_, precision_);
    keep_prompt_and_highest<double>(input, score, keep);
  }

 private:
  bool protect_;
  int pool_;
  double temperature_;
  WindowPrecision precision_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_snapkv_policy(PolicyOptions& options) {
  return std::make_unique<SnapKvPolicy>(options, false);
}
std::unique_ptr<EvictionPolicy> make_snapkv_pp_policy(PolicyOptions& options) {
  return std::make_unique<SnapKvPolicy>(options, true);
}

}  // namespace kvdice::policy
