// h2o / h2o_pp (docs/reference.md §2, from the H2O paper; the reference code has no H2O mode): keep the
// K_sel "heavy hitters", the candidates with the most attention received since they were appended
// (summed over every query and the query heads of the KV head's group). The window is always kept;
// the _pp variant pins the prompt and ranks the rest.
#include <algorithm>
#include <memory>

#include "policy/policy_options.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

class H2oPolicy final : public EvictionPolicy {
 public:
  explicit H2oPolicy(bool protect) : protect_(protect) {}
  std::string_view name() const override { return protect_ ? "h2o_pp" : "h2o"; }
  std::string_view summary() const override {
    return protect_ ? "H2O with the prompt pinned: prompt + window + most accumulated attention"
                    : "H2O: window + the candidates with the most accumulated attention";
  }
  bool protects_prompt() const override { return protect_; }
  SignalNeeds needs() const override { return {.accumulated_attention = true}; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(input.attention_mass.size()) == input.n_candidates,
                 "h2o got {} attention sums for {} candidates", input.attention_mass.size(),
                 input.n_candidates);
    keep_prompt_and_highest<float>(input, input.attention_mass, keep);
  }

 private:
  bool protect_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_h2o_policy(PolicyOptions&) { return std::make_unique<H2oPolicy>(false); }
std::unique_ptr<EvictionPolicy> make_h2o_pp_policy(PolicyOptions&) {
  return std::make_unique<H2oPolicy>(true);
}

}  // namespace kvdice::policy
