// streaming (StreamingLLM): 4 attention-sink tokens plus the most recent; no score.
#include <algorithm>
#include <memory>

#include "policy/recency_order.h"

namespace kvdice::policy {
namespace {

constexpr int kSinkTokens = 4;

class StreamingPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "streaming"; }
  std::string_view summary() const override { return "StreamingLLM: 4 sink tokens + the most recent tokens"; }
  bool protects_prompt() const override { return false; }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    // Sinks are always kept, so the oldest candidates are absolute positions 0..3 every round.
    const int sinks = std::min(kSinkTokens, input.keep);
    keep_oldest_and_newest(input, 0, sinks, input.keep - sinks, keep);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_streaming_policy() { return std::make_unique<StreamingPolicy>(); }

}  // namespace kvdice::policy
