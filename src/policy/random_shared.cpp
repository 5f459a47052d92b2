// random_shared: one random_pp draw per (layer, round) shared by every KV head (ablation of the
// per-head independence).
#include <memory>

#include "policy/random_subset.h"

namespace kvdice::policy {
namespace {

class RandomSharedPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "random_shared"; }
  std::string_view summary() const override {
    return "Random Attention with one draw per layer shared by all KV heads; prompt protected";
  }
  bool protects_prompt() const override { return true; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    // The same draw picks the same slot indices in every head; heads start with identical slots and
    // compact identically, so they keep the same tokens round after round.
    keep_random_subset(input, kSharedHeadStream, keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_shared_policy() { return std::make_unique<RandomSharedPolicy>(); }

}  // namespace kvdice::policy
