// random_pp (Random Attention, docs/reference.md §1): prompt protected, a fresh uniform subset of the
// other candidates per (layer, KV head, round).
#include <memory>

#include "policy/random_subset.h"

namespace kvdice::policy {
namespace {

class RandomPpPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "random_pp"; }
  std::string_view summary() const override {
    return "Random Attention: prompt + window kept, a fresh uniform draw of the rest per head and round";
  }
  bool protects_prompt() const override { return true; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    keep_random_subset(input, static_cast<uint32_t>(input.kv_head), keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_pp_policy() { return std::make_unique<RandomPpPolicy>(); }

}  // namespace kvdice::policy
