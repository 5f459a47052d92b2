// random: the random_pp draw without prompt protection (ablation).
#include <memory>

#include "policy/random_subset.h"

namespace kvdice::policy {
namespace {

class RandomPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "random"; }
  std::string_view summary() const override {
    return "uniform draw of all candidates per head and round, prompt not protected";
  }
  bool protects_prompt() const override { return false; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    keep_random_subset(input, static_cast<uint32_t>(input.kv_head), keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_policy() { return std::make_unique<RandomPolicy>(); }

}  // namespace kvdice::policy
