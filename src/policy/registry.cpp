#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "core/error.h"
#include "policy/cuda_selection.h"
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
  CudaSelectionLauncher cuda;  // src/policy/cuda/<name>.cu; nullptr without CUDA or for "full"
};

constexpr std::array kPolicies{
    Entry{"full", make_full_policy, nullptr},
    Entry{"random_pp", make_random_pp_policy, KVDICE_CUDA_SELECTION(random_pp)},
    Entry{"random", make_random_policy, KVDICE_CUDA_SELECTION(random)},
    Entry{"random_shared", make_random_shared_policy, KVDICE_CUDA_SELECTION(random_shared)},
    Entry{"recency_pp", make_recency_pp_policy, KVDICE_CUDA_SELECTION(recency_pp)},
    Entry{"recency", make_recency_policy, KVDICE_CUDA_SELECTION(recency)},
    Entry{"streaming", make_streaming_policy, KVDICE_CUDA_SELECTION(streaming)},
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_policy(std::string_view name) {
  for (const Entry& entry : kPolicies) {
    if (entry.name == name) return entry.make();
  }
  fail("--policy: unknown eviction policy '{}'; known: {}", name, fmt::join(policy_names(), ", "));
}

CudaSelectionLauncher cuda_selection(std::string_view name) {
  for (const Entry& entry : kPolicies) {
    if (entry.name == name) return entry.cuda;
  }
  return nullptr;
}

void require_cuda_selection(std::string_view name) {
#ifdef KVDICE_WITH_CUDA
  constexpr std::string_view kBuild = "";
#else
  constexpr std::string_view kBuild = " in this build without CUDA";
#endif
  const std::unique_ptr<EvictionPolicy> policy = make_policy(name);  // unknown names fail here
  if (policy->evicts() && cuda_selection(name) == nullptr) {
    fail("policy '{}' has no CUDA selection kernel (src/policy/cuda/{}.cu){}; run it with --backend cpu",
         name, name, kBuild);
  }
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const Entry& entry : kPolicies) names.emplace_back(entry.name);
  return names;
}

}  // namespace kvdice::policy
