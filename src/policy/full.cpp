// full: no budget, no eviction; the reference point every bounded policy is compared with.
#include <memory>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {
namespace {

class FullPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "full"; }
  std::string_view summary() const override { return "full attention: every token stays resident"; }
  bool evicts() const override { return false; }
  bool protects_prompt() const override { return false; }
  void select(const SelectionInput&, std::span<uint8_t>) const override {
    KVDICE_CHECK(false, "policy 'full' never evicts; select() must not be called");
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_full_policy() { return std::make_unique<FullPolicy>(); }

}  // namespace kvdice::policy
