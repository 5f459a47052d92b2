// PolicyTable: the eviction policies one engine runs, by id (the policy_id of a step-batch row), at most
// kMaxPolicies at once; a place is held while a request using its policy waits or runs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::engine {

// Most distinct eviction policies (name and options: "random_block_pp:block=8" and ":block=16" are two)
// one engine holds at once, its default included. Each request may bring its own policy; a place in the
// table is held while a request using it waits or runs, and a new policy takes the place a policy no
// live request uses left longest ago (its decode shapes and graphs are forgotten first). A request whose
// policy would need a 65th place while all 64 are held is refused (PolicyTableFull).
inline constexpr int kMaxPolicies = 64;

// The refusal of a request whose policy would need a place while all kMaxPolicies are held.
class PolicyTableFull : public Error {
 public:
  using Error::Error;
};

// The engine's policies by id (0 = the engine's default, held for its life). Thread-safe: a server
// holds a place for a request from its handler thread (Engine::hold_policy) while the engine thread
// steps. A policy object stays put while its place is held.
class PolicyTable {
 public:
  // One hold on a place: the policy at id() stays while any hold on it lives. Movable; releases on
  // destruction (the table outlives its holds: they share it).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept { *this = std::move(other); }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { reset(); }
    void reset();
    int id() const { return id_; }
    explicit operator bool() const { return table_ != nullptr; }

   private:
    friend class PolicyTable;
    std::shared_ptr<PolicyTable> table_;
    int id_ = -1;
  };

  // A table whose place 0 holds `default_policy` for the table's life.
  static std::shared_ptr<PolicyTable> make(std::unique_ptr<policy::EvictionPolicy> default_policy);
  // A hold on the place of the policy `policy` describes: the place an equal policy has, else a free one
  // (never used, or the least recently used one no hold is on) filled with `policy`, after
  // `check(policy)` (which may throw). PolicyTableFull when every place is held.
  Hold hold(std::unique_ptr<policy::EvictionPolicy> policy,
            const std::function<void(const policy::EvictionPolicy&)>& check);
  // The policy at a held place.
  const policy::EvictionPolicy& at(int id) const;
  // Bumped each time a place gets another policy: what was keyed by the id before is stale.
  uint64_t generation(int id) const;
  int places_used() const;  // places filled so far (never more than kMaxPolicies)
  int held() const;         // places with a hold on them

 private:
  struct Place {
    std::unique_ptr<policy::EvictionPolicy> policy;
    std::string spec;  // policy::describe
    int holds = 0;
    uint64_t last_used = 0;  // tick of the latest hold or release
    uint64_t generation = 0;
  };
  PolicyTable() = default;
  void release(int id);

  std::weak_ptr<PolicyTable> self_;
  mutable std::mutex mutex_;
  std::array<Place, kMaxPolicies> places_;
  int used_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace kvdice::engine
