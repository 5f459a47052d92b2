// recency_pp: the prompt plus the most recent candidates (ablation: no scattered history).
#include <memory>

#include "policy/recency_order.h"

namespace kvdice::policy {
namespace {

class RecencyPpPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "recency_pp"; }
  std::string_view summary() const override { return "prompt + the most recent tokens"; }
  bool protects_prompt() const override { return true; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    keep_oldest_and_newest(input, input.n_protected, 0, input.keep - input.n_protected, keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_recency_pp_policy() { return std::make_unique<RecencyPpPolicy>(); }

}  // namespace kvdice::policy
