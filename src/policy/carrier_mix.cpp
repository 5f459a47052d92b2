// Carrier-head mixing (mechanism study, docs/mechanism.md): which KV heads need Random Attention's scatter?
// The carrier heads (option heads, default 2+3+5: the heads that carry a once-stated fact in Qwen3-4B)
// keep exactly random_pp's draw; every other head spends its K_sel - pl generated slots on recency:
//   carrier_mix      all of them on the newest candidates (the other heads run recency_pp);
//   carrier_softmix  the m = floor(q · (K_sel - pl)) newest (default q = 0.5), then random_subset.h's
//                    draw over the remaining candidates in slot order (stream c = KV head) for the rest;
//   anti_mix, anti_softmix  the same with the two head sets swapped (the listed heads keep recency).
// The prompt is protected in every head. A listed head must be a KV head of the model (check_model).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "policy/policy_options.h"
#include "policy/random_subset.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

std::vector<int> parse_heads(std::string_view policy, const std::string& text) {
  std::vector<int> heads;
  if (text == "none") return heads;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('+', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    int value = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc{} || ptr != item.data() + item.size() || value < 0 || value > (1 << 24))
      fail("policy '{}': heads='{}': '{}' is not a KV head index (a non-negative integer; heads=I+J+... or none)",
           policy, text, item);
    heads.push_back(value);
    start = end + 1;
  }
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

class CarrierMixPolicy final : public EvictionPolicy {
 public:
  CarrierMixPolicy(std::string_view name, bool softmix, bool anti, PolicyOptions& options)
      : name_(name),
        softmix_(softmix),
        anti_(anti),
        heads_(parse_heads(name, options.get_string("heads", "2+3+5"))),
        q_(softmix ? options.get_double("q", 0.5, 0.0, 1.0) : 1.0) {}

  std::string_view name() const override { return name_; }
  std::string_view summary() const override {
    if (anti_)
      return softmix_ ? "the listed heads keep a recency slice (q of K_sel - pl) + random, the others random_pp"
                      : "the listed heads keep recency_pp's newest slots, the other heads random_pp's draw";
    return softmix_ ? "carrier heads keep random_pp's draw, the others a recency slice (q of K_sel - pl) + random"
                    : "carrier heads keep random_pp's draw, the other heads recency_pp's newest slots";
  }
  bool protects_prompt() const override { return true; }
  std::string options() const override {
    return softmix_ ? fmt::format("heads={},q={}", heads_text(), q_) : fmt::format("heads={}", heads_text());
  }
  DeviceTable device_table() const override {
    DeviceTable table;
    // [q (1 for mix), anti, n_heads, head...] (cuda/carrier_mix.cu reads it)
    table.values = {q_, anti_ ? 1.0 : 0.0, static_cast<double>(heads_.size())};
    for (int h : heads_) table.values.push_back(h);
    return table;
  }
  void check_model(const ModelFingerprint& model) const override {
    for (int h : heads_) {
      if (h >= model.n_kv_heads)
        fail("policy '{}': heads={}: head {} is not a KV head of this model ({} KV heads: 0-{})", name_,
             heads_text(), h, model.n_kv_heads, model.n_kv_heads - 1);
    }
  }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(keep.size()) == input.n_candidates, "keep has {} flags for {} candidates",
                 keep.size(), input.n_candidates);
    const bool listed = std::binary_search(heads_.begin(), heads_.end(), input.kv_head);
    if (listed != anti_) {  // a carrier head: random_pp's draw, bit for bit
      keep_random_subset(input, static_cast<uint32_t>(input.kv_head), keep);
      return;
    }
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    const int free = input.keep - input.n_protected;
    const int n_recent = recent_slots(q_, free);
    const std::vector<int32_t> order = chronological(input, input.n_protected);
    for (int i = 0; i < n_recent; ++i) keep[order[order.size() - 1 - static_cast<size_t>(i)]] = 1;
    if (n_recent == free) return;
    std::vector<int32_t> pool;
    for (int slot = input.n_protected; slot < input.n_candidates; ++slot)
      if (!keep[slot]) pool.push_back(slot);
    const int victims = static_cast<int>(pool.size()) - (free - n_recent);
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    draw_victims(stream, pool, victims);
    for (size_t i = static_cast<size_t>(victims); i < pool.size(); ++i) keep[pool[i]] = 1;
  }

  // m = floor(q · free), the guaranteed recency slice of a non-carrier head (free for mix: q = 1).
  static int recent_slots(double q, int free) {
    return std::min(free, static_cast<int>(std::floor(q * static_cast<double>(free))));
  }

 private:
  std::string heads_text() const {
    std::string text;
    for (int h : heads_) text += fmt::format("{}{}", text.empty() ? "" : "+", h);
    return text.empty() ? "none" : text;
  }

  std::string name_;
  bool softmix_, anti_;
  std::vector<int> heads_;
  double q_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_carrier_mix_policy(PolicyOptions& options) {
  return std::make_unique<CarrierMixPolicy>("carrier_mix", false, false, options);
}
std::unique_ptr<EvictionPolicy> make_carrier_softmix_policy(PolicyOptions& options) {
  return std::make_unique<CarrierMixPolicy>("carrier_softmix", true, false, options);
}
std::unique_ptr<EvictionPolicy> make_anti_mix_policy(PolicyOptions& options) {
  return std::make_unique<CarrierMixPolicy>("anti_mix", false, true, options);
}
std::unique_ptr<EvictionPolicy> make_anti_softmix_policy(PolicyOptions& options) {
  return std::make_unique<CarrierMixPolicy>("anti_softmix", true, true, options);
}

}  // namespace kvdice::policy
