// random_pin_pp (synthetic retrieval, docs/mechanism.md): random_pp with chosen spans of absolute
// positions pinned. In a pinned (layer, KV head) site the span's candidates are always kept; in every
// other site they are always evicted; every other candidate is drawn exactly as random_pp draws
// (random_subset.h's algorithm over the remaining unprotected candidates in slot order, stream c = KV
// head). Without a span it keeps the same slots as random_pp, bit for bit. The endpoints of the
// synthetic probe are heads=all (span kept everywhere) and heads=none (span deleted everywhere). With
// deal=1 the span's tokens are dealt over the listed heads instead (token k of a span kept only in head
// heads[k % n], in every listed layer): the fact fragmented across heads, no head holding all of it.
#include "policy/random_pin_pp.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>

#include "core/error.h"
#include "policy/policy_options.h"
#include "policy/random_subset.h"

namespace kvdice::policy {
namespace {

std::vector<std::string> split_plus(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('+', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int parse_index(const std::string& text, const char* what, const std::string& option) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < 0 || value > (1 << 24))
    fail("policy 'random_pin_pp': {}='{}': '{}' is not a {} index (a non-negative integer)", what, option, text,
         what);
  return value;
}

void parse_sites(const std::string& text, const char* what, bool& all, std::vector<int>& list) {
  list.clear();
  all = text == "all";
  if (all || text == "none") return;
  for (const std::string& item : split_plus(text)) list.push_back(parse_index(item, what, text));
  std::sort(list.begin(), list.end());
  list.erase(std::unique(list.begin(), list.end()), list.end());
}

std::string sites_text(bool all, const std::vector<int>& list) {
  if (all) return "all";
  if (list.empty()) return "none";
  std::string out;
  for (int i : list) out += fmt::format("{}{}", out.empty() ? "" : "+", i);
  return out;
}

class RandomPinPpPolicy final : public EvictionPolicy {
 public:
  explicit RandomPinPpPolicy(PolicyOptions& options)
      : span_(options.get_string("span", "")),
        layers_(options.get_string("layers", "all")),
        heads_(options.get_string("heads", "all")),
        pin_(parse_pin_spec(span_, layers_, heads_, options.get_int("deal", 0, 0, 1) != 0)) {}
  std::string_view name() const override { return "random_pin_pp"; }
  std::string_view summary() const override {
    return "random_pp with spans of positions kept in chosen (layer, head) sites and evicted in all others";
  }
  bool protects_prompt() const override { return true; }
  std::string options() const override {
    std::string span;
    for (const auto& [lo, hi] : pin_.spans) span += fmt::format("{}{}-{}", span.empty() ? "" : "+", lo, hi);
    return fmt::format("span={},layers={},heads={},deal={}", span, sites_text(pin_.all_layers, pin_.layers),
                       sites_text(pin_.all_heads, pin_.heads), pin_.deal ? 1 : 0);
  }
  DeviceTable device_table() const override { return {pin_.table()}; }
  void check_model(const ModelFingerprint& model) const override {
    for (const int layer : pin_.layers)
      if (layer >= model.n_layers)
        fail("policy 'random_pin_pp': layers={}: layer {} is not a layer of this model ({} layers: 0-{})",
             layers_, layer, model.n_layers, model.n_layers - 1);
    for (const int head : pin_.heads)
      if (head >= model.n_kv_heads)
        fail("policy 'random_pin_pp': heads={}: head {} is not a KV head of this model ({} KV heads: 0-{})",
             heads_, head, model.n_kv_heads, model.n_kv_heads - 1);
  }
  void check_request(int keep, int window, int n_protected, int64_t end) const override {
    // A round keeps `keep` of keep + window candidates. A site keeps every span token it pins, so those
    // must fit beside the prompt; it drops every span token it does not, and a round evicts only
    // `window`, so the first round (positions up to keep + window, later rounds see `window` new ones)
    // must not hold more of them. Sites: a pinned one and an unpinned one, or each dealt head.
    struct Site {
      std::string name;
      std::function<bool(int32_t)> keeps;
    };
    std::vector<Site> sites;
    if (pin_.deal) {
      for (const int head : pin_.heads)
        sites.push_back({fmt::format("head {}", head), [this, head](int32_t p) {
                           return pin_.site_keeps(pin_.all_layers ? 0 : pin_.layers.front(), head, p) == 1;
                         }});
    } else {
      const bool any_pinned = (pin_.all_layers || !pin_.layers.empty()) && (pin_.all_heads || !pin_.heads.empty());
      if (any_pinned) sites.push_back({"a pinned head", [](int32_t) { return true; }});
      if (!(pin_.all_layers && pin_.all_heads)) sites.push_back({"an unpinned head", [](int32_t) { return false; }});
    }
    int64_t span_end = 0;
    for (const auto& [lo, hi] : pin_.spans) span_end = std::max<int64_t>(span_end, hi);
    const int64_t first_round = int64_t{keep} + window;
    for (const Site& site : sites) {
      int64_t kept = 0, dropped_first = 0;
      for (int64_t p = n_protected; p < std::min(end, span_end); ++p) {
        const auto position = static_cast<int32_t>(p);
        if (!pin_.in_span(position)) continue;
        if (site.keeps(position)) {
          ++kept;
        } else if (p < first_round) {
          ++dropped_first;
        }
      }
      if (kept > keep - n_protected)
        fail("random_pin_pp: {} keeps {} span positions but a round keeps {} slots beside the {}-token prompt; "
             "shorten the span or raise the budget",
             site.name, kept, keep - n_protected, n_protected);
      if (dropped_first > window)
        fail("random_pin_pp: {} must drop {} span positions in the first round, which evicts only r = {}; "
             "shorten the span, move it past position {} or raise the window",
             site.name, dropped_first, window, first_round);
    }
  }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    KVDICE_CHECK(static_cast<int>(keep.size()) == input.n_candidates, "keep has {} flags for {} candidates",
                 keep.size(), input.n_candidates);
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    int span_kept = 0;
    std::vector<int32_t> pool;
    for (int slot = input.n_protected; slot < input.n_candidates; ++slot) {
      const int site = pin_.site_keeps(input.layer, input.kv_head, input.positions[slot]);
      if (site < 0) {
        pool.push_back(slot);
      } else if (site == 1) {
        keep[slot] = 1;
        ++span_kept;
      }
    }
    const int free = input.keep - input.n_protected - span_kept;
    if (free < 0 || free > static_cast<int>(pool.size())) {
      fail("random_pin_pp: layer {} head {}: {} pinned span slots and {} others cannot fill the {} slots a round "
           "keeps beside the {}-token prompt; shorten the span or raise the budget",
           input.layer, input.kv_head, span_kept, pool.size(), input.keep - input.n_protected, input.n_protected);
    }
    const int victims = static_cast<int>(pool.size()) - free;
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    draw_victims(stream, pool, victims);
    for (size_t i = static_cast<size_t>(victims); i < pool.size(); ++i) keep[pool[i]] = 1;
  }

 private:
  std::string span_, layers_, heads_;
  PinSpec pin_;
};

}  // namespace

bool PinSpec::pinned(int layer, int kv_head) const {
  const bool layer_in = all_layers || std::binary_search(layers.begin(), layers.end(), layer);
  const bool head_in = all_heads || std::binary_search(heads.begin(), heads.end(), kv_head);
  return layer_in && head_in;
}

int PinSpec::site_keeps(int layer, int kv_head, int32_t position) const {
  for (const auto& [lo, hi] : spans) {
    if (position < lo || position >= hi) continue;
    if (!deal) return pinned(layer, kv_head) ? 1 : 0;
    const bool layer_in = all_layers || std::binary_search(layers.begin(), layers.end(), layer);
    return layer_in && heads[static_cast<size_t>(position - lo) % heads.size()] == kv_head ? 1 : 0;
  }
  return -1;
}

std::vector<double> PinSpec::table() const {
  std::vector<double> t{static_cast<double>(spans.size())};
  for (const auto& [lo, hi] : spans) {
    t.push_back(lo);
    t.push_back(hi);
  }
  t.push_back(all_layers ? -1.0 : static_cast<double>(layers.size()));
  for (int l : layers) t.push_back(l);
  t.push_back(all_heads ? -1.0 : static_cast<double>(heads.size()));
  for (int h : heads) t.push_back(h);
  t.push_back(deal ? 1.0 : 0.0);
  return t;
}

PinSpec parse_pin_spec(const std::string& span, const std::string& layers, const std::string& heads, bool deal) {
  PinSpec pin;
  pin.deal = deal;
  if (!span.empty()) {
    for (const std::string& item : split_plus(span)) {
      const size_t dash = item.find('-');
      if (dash == std::string::npos)
        fail("policy 'random_pin_pp': span='{}': '{}' is not LO-HI (absolute positions, HI exclusive)", span, item);
      const int lo = parse_index(item.substr(0, dash), "span", span);
      const int hi = parse_index(item.substr(dash + 1), "span", span);
      if (hi <= lo) fail("policy 'random_pin_pp': span='{}': '{}' is empty (HI must exceed LO)", span, item);
      pin.spans.emplace_back(lo, hi);
    }
  }
  parse_sites(layers, "layer", pin.all_layers, pin.layers);
  parse_sites(heads, "head", pin.all_heads, pin.heads);
  if (deal && (pin.all_heads || pin.heads.empty()))
    fail("policy 'random_pin_pp': deal=1 deals the span over a listed set of heads; give heads=I+J+... (got '{}')",
         heads);
  return pin;
}

std::unique_ptr<EvictionPolicy> make_random_pin_pp_policy(PolicyOptions& options) {
  return std::make_unique<RandomPinPpPolicy>(options);
}

}  // namespace kvdice::policy
