// random_block_pp (ablation, docs/reference.md §1 "block-random"; the reference's BLOCK_SIZE, default 32):
// prompt protected; the other candidates, in age order, form contiguous blocks of B; each block gets
// one uniform 64-bit draw per (layer, KV head, round) and the blocks with the highest draws are kept
// whole, the last one partly (its oldest tokens first: the position tie rule). The grid starts at cache
// slot 0, prompt included, as the reference's `arange(n_cand) // B` does, so the block that holds the
// prompt's end is cut short (grid=slot0, the default); grid=candidates starts it at the first
// candidate after the prompt instead.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "policy/policy_options.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

class RandomBlockPpPolicy final : public EvictionPolicy {
 public:
  explicit RandomBlockPpPolicy(PolicyOptions& options)
      : block_(options.get_int("block", 32, 1, 1 << 20)), grid_(options.get_string("grid", "slot0")) {
    if (grid_ != "slot0" && grid_ != "candidates")
      fail("random_block_pp: option grid={} must be slot0 or candidates", grid_);
  }
  std::string_view name() const override { return "random_block_pp"; }
  std::string_view summary() const override {
    return "prompt + window kept, one random draw per contiguous block of B candidates (block=32)";
  }
  bool protects_prompt() const override { return true; }
  std::string options() const override { return fmt::format("block={},grid={}", block_, grid_); }
  void select(const SelectionInput& input, std::span<uint8_t> keep) const override {
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    const std::vector<int32_t> order = chronological(input, input.n_protected);
    const PhiloxStream stream{input.key, input.round, static_cast<uint32_t>(input.layer),
                              static_cast<uint32_t>(input.kv_head)};
    std::vector<uint64_t> score(static_cast<size_t>(input.n_candidates), 0);
    const size_t origin = grid_ == "slot0" ? static_cast<size_t>(input.n_protected) : 0;
    for (size_t i = 0; i < order.size(); ++i)
      score[static_cast<size_t>(order[i])] =
          stream.draw_u64(static_cast<uint32_t>((origin + i) / static_cast<size_t>(block_)));
    for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
    keep_highest<uint64_t>(input, order, score, input.keep - input.n_protected, keep);
  }

 private:
  int block_;
  std::string grid_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_block_pp_policy(PolicyOptions& options) {
  return std::make_unique<RandomBlockPpPolicy>(options);
}

}  // namespace kvdice::policy
