// random_pin_pp's options, parsed once and shared by the CPU selection and the device table: spans of
// absolute positions and the (layer, KV head) sites that pin them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvdice::policy {

struct PinSpec {
  std::vector<std::pair<int32_t, int32_t>> spans;  // [lo, hi) of absolute positions, disjoint or not
  bool all_layers = true, all_heads = true;
  std::vector<int> layers, heads;  // the listed indices when not all ("none" = empty list)
  // Token-dealt: a span's k-th token is kept only in heads[k % heads.size()] (of every listed layer).
  bool deal = false;

  bool in_span(int32_t position) const {
    for (const auto& [lo, hi] : spans)
      if (lo <= position && position < hi) return true;
    return false;
  }
  bool pinned(int layer, int kv_head) const;
  // For a candidate at `position`: -1 outside every span, 1 a span token this site keeps, 0 one it drops.
  int site_keeps(int layer, int kv_head, int32_t position) const;
  // The device table (cuda/random_pin_pp.cu reads it):
  //   [n_spans, lo_0, hi_0, ..., n_layers (-1 = all), layer..., n_heads (-1 = all), head..., deal]
  std::vector<double> table() const;
};

// "LO-HI[+LO-HI...]" (empty = no span), "all" | "none" | "I[+I...]" for layers and heads; Error naming
// the option and the malformed part.
PinSpec parse_pin_spec(const std::string& span, const std::string& layers, const std::string& heads,
                       bool deal = false);

}  // namespace kvdice::policy
