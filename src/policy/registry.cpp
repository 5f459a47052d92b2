#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {

// Factories, one per policy file.
std::unique_ptr<EvictionPolicy> make_full_policy();
std::unique_ptr<EvictionPolicy> make_random_pp_policy();
std::unique_ptr<EvictionPolicy> make_random_policy();
std::unique_ptr<EvictionPolicy> make_random_shared_policy();
std::unique_ptr<EvictionPolicy> make_recency_pp_policy();
std::unique_ptr<EvictionPolicy> make_recency_policy();
std::unique_ptr<EvictionPolicy> make_streaming_policy();

namespace {

struct Entry {
  std::string_view name;
  std::unique_ptr<EvictionPolicy> (*make)();
};

constexpr std::array kPolicies{
    Entry{"full", make_full_policy},
    Entry{"random_pp", make_random_pp_policy},
    Entry{"random", make_random_policy},
    Entry{"random_shared", make_random_shared_policy},
    Entry{"recency_pp", make_recency_pp_policy},
    Entry{"recency", make_recency_policy},
    Entry{"streaming", make_streaming_policy},
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_policy(std::string_view name) {
  for (const Entry& entry : kPolicies) {
    if (entry.name == name) return entry.make();
  }
  fail("--policy: unknown eviction policy '{}'; known: {}", name, fmt::join(policy_names(), ", "));
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const Entry& entry : kPolicies) names.emplace_back(entry.name);
  return names;
}

}  // namespace kvdice::policy
