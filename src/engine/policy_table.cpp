#include "engine/policy_table.h"

#include <algorithm>
#include <utility>

namespace kvdice::engine {

std::shared_ptr<PolicyTable> PolicyTable::make(std::unique_ptr<policy::EvictionPolicy> default_policy) {
  std::shared_ptr<PolicyTable> table(new PolicyTable());
  table->self_ = table;
  Place& place = table->places_[0];
  place.spec = policy::describe(*default_policy);
  place.policy = std::move(default_policy);
  place.holds = 1;  // the default is never given up
  table->used_ = 1;
  return table;
}

PolicyTable::Hold& PolicyTable::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    reset();
    table_ = std::move(other.table_);
    id_ = std::exchange(other.id_, -1);
  }
  return *this;
}

void PolicyTable::Hold::reset() {
  if (table_) table_->release(id_);
  table_.reset();
  id_ = -1;
}

PolicyTable::Hold PolicyTable::hold(std::unique_ptr<policy::EvictionPolicy> policy,
                                    const std::function<void(const policy::EvictionPolicy&)>& check) {
  const std::string spec = policy::describe(*policy);
  std::lock_guard lock(mutex_);
  int id = -1;
  for (int i = 0; i < used_; ++i) {
    if (places_[static_cast<size_t>(i)].spec == spec) {
      id = i;
      break;
    }
  }
  if (id < 0) {
    if (used_ < kMaxPolicies) {
      id = used_;
    } else {  // the least recently used place nothing holds now
      for (int i = 1; i < used_; ++i) {
        const Place& p = places_[static_cast<size_t>(i)];
        if (p.holds == 0 && (id < 0 || p.last_used < places_[static_cast<size_t>(id)].last_used)) id = i;
      }
    }
    if (id < 0)
      throw PolicyTableFull(fmt::format(
          "too many distinct KV policies in use: '{}' would need a place in this engine's policy table, "
          "which holds at most {} and all are held by waiting or running requests (a policy is its name "
          "and options; budgets do not count): retry when one finishes, or use a policy setting already "
          "in use",
          quote_for_message(spec), kMaxPolicies));
    if (check) check(*policy);
    Place& place = places_[static_cast<size_t>(id)];
    if (place.policy) ++place.generation;  // a reused id: what was keyed by it is stale
    place.policy = std::move(policy);
    place.spec = spec;
    if (id == used_) ++used_;
  }
  Place& place = places_[static_cast<size_t>(id)];
  ++place.holds;
  place.last_used = ++tick_;
  Hold hold;
  hold.table_ = self_.lock();
  hold.id_ = id;
  return hold;
}

void PolicyTable::release(int id) {
  std::lock_guard lock(mutex_);
  Place& place = places_[static_cast<size_t>(id)];
  --place.holds;
  place.last_used = ++tick_;
}

const policy::EvictionPolicy& PolicyTable::at(int id) const {
  std::lock_guard lock(mutex_);
  const Place& place = places_.at(static_cast<size_t>(id));
  KVDICE_CHECK(place.policy != nullptr, "policy table: place {} is empty", id);
  return *place.policy;
}

uint64_t PolicyTable::generation(int id) const {
  std::lock_guard lock(mutex_);
  return places_.at(static_cast<size_t>(id)).generation;
}

int PolicyTable::places_used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

int PolicyTable::held() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(
      std::count_if(places_.begin(), places_.begin() + used_, [](const Place& p) { return p.holds > 0; }));
}

}  // namespace kvdice::engine
