// recency: the most recent candidates only, a plain sliding window (ablation).
#include <memory>

#include "policy/recency_order.h"

namespace kvdice::policy {
namespace {

class RecencyPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "recency"; }
  std::string_view summary() const override { return "sliding window: the most recent tokens only"; }
  bool protects_prompt() const override { return false; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    keep_oldest_and_newest(input, 0, 0, input.keep, keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_recency_policy() { return std::make_unique<RecencyPolicy>(); }

}  // namespace kvdice::policy
