#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "core/error.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"
#include "policy/policy_options.h"

namespace kvdice::policy {

// Factories, one per policy file.
std::unique_ptr<EvictionPolicy> make_full_policy();
std::unique_ptr<EvictionPolicy> make_random_pp_policy();
std::unique_ptr<EvictionPolicy> make_random_policy();
std::unique_ptr<EvictionPolicy> make_random_shared_policy();
std::unique_ptr<EvictionPolicy> make_recency_pp_policy();
std::unique_ptr<EvictionPolicy> make_recency_policy();
std::unique_ptr<EvictionPolicy> make_streaming_policy();
std::unique_ptr<EvictionPolicy> make_random_block_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_random_pp_rec_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_random_pin_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_carrier_mix_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_carrier_softmix_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_anti_mix_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_anti_softmix_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_random_vrange_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_snapkv_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_snapkv_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_h2o_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_h2o_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_vase_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_vase_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_rkv_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_rkv_pp_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_rkv_official_policy(PolicyOptions& options);
std::unique_ptr<EvictionPolicy> make_triattention_policy(PolicyOptions& options);

namespace {

// Factories of policies without options.
template <std::unique_ptr<EvictionPolicy> (*Make)()>
std::unique_ptr<EvictionPolicy> no_options(PolicyOptions&) {
  return Make();
}

// A policy's CUDA file, src/policy/cuda/<file>.cu, by name in every build and by its CudaSelection
// in a CUDA build. A family of policies may share one file (a policy and its prompt-protecting twin X and
// X_pp: the device selection reads the row's n_protected, which the engine sets from protects_prompt(),
// so protection is data, not a second kernel).
#ifdef KVDICE_WITH_CUDA
#define KVDICE_CUDA(file) #file, &cuda_file_##file
#else
#define KVDICE_CUDA(file) #file, nullptr
#endif

struct Entry {
  std::string_view name;
  std::unique_ptr<EvictionPolicy> (*make)(PolicyOptions& options);
  std::string_view cuda_file;  // empty for "full", which never evicts
  const CudaSelection* cuda;   // nullptr without CUDA or for "full"
};

constexpr std::array kPolicies{
    Entry{"full", no_options<make_full_policy>, "", nullptr},
    Entry{"random_pp", no_options<make_random_pp_policy>, KVDICE_CUDA(random_pp)},
    Entry{"random", no_options<make_random_policy>, KVDICE_CUDA(random_pp)},
    Entry{"random_shared", no_options<make_random_shared_policy>, KVDICE_CUDA(random_shared)},
    Entry{"recency_pp", no_options<make_recency_pp_policy>, KVDICE_CUDA(recency)},
    Entry{"recency", no_options<make_recency_policy>, KVDICE_CUDA(recency)},
    Entry{"streaming", no_options<make_streaming_policy>, KVDICE_CUDA(streaming)},
    // Ablations and baselines (docs/reference.md §1-2). Every evicting policy has a CUDA file (an entry
    // without one would be refused on --backend cuda).
    Entry{"random_block_pp", make_random_block_pp_policy, KVDICE_CUDA(random_block_pp)},
    Entry{"random_pp_rec", make_random_pp_rec_policy, KVDICE_CUDA(random_pp_rec)},
    Entry{"random_pin_pp", make_random_pin_pp_policy, KVDICE_CUDA(random_pin_pp)},
    // Carrier-head mixing (docs/mechanism.md): one CPU file, one CUDA file and one launcher for the
    // four (the device table says which heads carry and how much recency the others keep).
    Entry{"carrier_mix", make_carrier_mix_policy, KVDICE_CUDA(carrier_mix)},
    Entry{"carrier_softmix", make_carrier_softmix_policy, KVDICE_CUDA(carrier_mix)},
    Entry{"anti_mix", make_anti_mix_policy, KVDICE_CUDA(carrier_mix)},
    Entry{"anti_softmix", make_anti_softmix_policy, KVDICE_CUDA(carrier_mix)},
    // random_pp with a write-time salience tag (docs/mechanism.md, "Fixing the once-only failure").
    Entry{"random_vrange_pp", make_random_vrange_pp_policy, KVDICE_CUDA(random_vrange_pp)},
    Entry{"snapkv", make_snapkv_policy, KVDICE_CUDA(snapkv)},
    Entry{"snapkv_pp", make_snapkv_pp_policy, KVDICE_CUDA(snapkv)},
    Entry{"h2o", make_h2o_policy, KVDICE_CUDA(h2o)},
    Entry{"h2o_pp", make_h2o_pp_policy, KVDICE_CUDA(h2o)},
    Entry{"vase", make_vase_policy, KVDICE_CUDA(vase)},
    Entry{"vase_pp", make_vase_pp_policy, KVDICE_CUDA(vase)},
    Entry{"rkv", make_rkv_policy, KVDICE_CUDA(rkv)},
    Entry{"rkv_pp", make_rkv_pp_policy, KVDICE_CUDA(rkv)},
    Entry{"rkv_official", make_rkv_official_policy, KVDICE_CUDA(rkv_official)},
    Entry{"triattention", make_triattention_policy, KVDICE_CUDA(triattention)},
};

#undef KVDICE_CUDA

// The entry of `spec`'s policy name, or nullptr.
const Entry* find_entry(std::string_view spec) {
  const std::string_view name = spec.substr(0, spec.find(':'));
  for (const Entry& entry : kPolicies) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<EvictionPolicy> make_policy(std::string_view spec) {
  PolicyOptions options(spec);
  for (const Entry& entry : kPolicies) {
    if (entry.name != options.name()) continue;
    std::unique_ptr<EvictionPolicy> policy = entry.make(options);
    options.finish();
    return policy;
  }
  fail("unknown eviction policy '{}'; known: {}", options.name(), fmt::join(policy_names(), ", "));
}

std::unique_ptr<EvictionPolicy> make_policy(std::string_view spec, std::string_view source) {
  try {
    return make_policy(spec);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}

std::string describe(const EvictionPolicy& policy) {
  const std::string options = policy.options();
  return options.empty() ? std::string(policy.name()) : fmt::format("{}:{}", policy.name(), options);
}

std::string_view cuda_file(std::string_view name) {
  const Entry* entry = find_entry(name);
  return entry != nullptr ? entry->cuda_file : std::string_view{};
}

const CudaSelection* cuda_selection(std::string_view name) {
  const Entry* entry = find_entry(name);
  return entry != nullptr ? entry->cuda : nullptr;
}

CudaRoundScorer cuda_round_scorer(std::string_view name) {
  const CudaSelection* cuda = cuda_selection(name);
  return cuda != nullptr ? cuda->round : nullptr;
}

CudaParams bind_cuda_params(const EvictionPolicy& policy) {
  const CudaSelection* cuda = cuda_selection(policy.name());
  if (cuda == nullptr) require_cuda_selection(policy.name());  // throws naming the policy and its file
  if (cuda == nullptr || cuda->bind == nullptr) return {};
  PolicyOptions options(describe(policy));
  return cuda->bind(options);
}

void require_cuda_selection(std::string_view name) {
#ifdef KVDICE_WITH_CUDA
  constexpr std::string_view kBuild = "";
#else
  constexpr std::string_view kBuild = " in this build without CUDA";
#endif
  // By registry entry (a spec's options ignored), not by constructing the policy: a policy whose
  // construction needs options (triattention's statistics file) is still refused by name.
  if (const Entry* entry = find_entry(name); entry != nullptr) {
    if (entry->cuda == nullptr && entry->name != "full")
      fail("policy '{}' has no CUDA selection kernel (src/policy/cuda/{}.cu){}; run it with --backend cpu",
           name, entry->cuda_file, kBuild);
    return;
  }
  make_policy(name);  // unknown names fail here, listing the known ones
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const Entry& entry : kPolicies) names.emplace_back(entry.name);
  return names;
}

}  // namespace kvdice::policy
