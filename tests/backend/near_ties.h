// The parity rule of the windowed-attention policies at precision=fp32 (docs/policies.md, "Precision and
// near-ties"): the CUDA logits come from tensor cores, the CPU's from a loop in dimension order, so the
// two scores of a candidate differ by a few fp32 roundings and a keep-set may differ where the CPU's own
// scores leave a near-tie. The parity tests (test_cuda_policies.cpp, test_cuda_real_shapes.cpp) judge
// every head whose keep-sets differ here, by the CPU's scores, and fail on any difference that is not
// such a near-tie:
//   snapkv, rkv (and _pp): every candidate kept by one side only has its counterparts, kept by the other
//     side only, within kNearTieTolerance · λ · (A_a + A_b) of its score (A: the windowed attention, λ
//     R-KV's weight of it, 1 for SnapKV);
//   vase (and _pp): the prompt, sinks and widest value ranges are kept by both; the attention-weighted
//     draws are replayed on the CPU's scores, and every pick before the first draw whose target lies
//     within the weights' error of a running-sum boundary is kept by both (a head without such a draw
//     must match exactly; after one, the head's later draws may go their own way);
//   every other policy, and these at their default precision=fp64: no difference at all.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/philox.h"
#include "policy/eviction_policy.h"
#include "policy/key_redundancy.h"
#include "policy/ranking.h"
#include "policy/window_attention.h"

namespace kvdice::test {

// τ: a bound on the relative gap between the CPU's and the CUDA windowed attention of one candidate
// (measured gaps are 1e-6 to 1e-5 on these inputs; the bound grows with the logits' magnitude).
inline constexpr double kNearTieTolerance = 0x1p-12;

// One (row, layer, KV head) as the CPU round hands it to select(), before the round: host copies the
// SelectionInput's spans point into.
struct HeadBefore {
  std::vector<int32_t> positions;
  std::vector<float> keys, queries, value_range, attention_mass;
  policy::SelectionInput input;
};

// What a world's row holds before a round (the batch's fields the CPU round reads).
struct RowBefore {
  int budget = 0, window = 0, length = 0, n_protected = 0, ring_row = 0;
  int64_t appended = 0;
  PhiloxKey key{};
  uint32_t round = 0;
};

// The head's input from host copies of a layer's pool: `at(slot)` is the element index of the head's
// slot, keys are [element][head_dim], the ring [ring row][query head][ring_window][head_dim] in bf16 bits
// (the pool's, widened to fp32 as the CPU round hands them over); signals the
// policy does not read may be empty. The spans point into the returned HeadBefore's vectors (moved, never
// copied).
template <class At>
HeadBefore head_before(const RowBefore& row, int layer, int kv_head, int n_kv, int group, int head_dim,
                       int ring_window, At at, const std::vector<int32_t>& pos, const std::vector<float>& keys,
                       const std::vector<uint16_t>& ring, const std::vector<float>& range,
                       const std::vector<float>& mass) {
  HeadBefore h;
  const int n = row.length - row.window;
  for (int slot = 0; slot < n; ++slot) {
    const size_t e = at(slot);
    h.positions.push_back(pos[e]);
    h.keys.insert(h.keys.end(), keys.begin() + e * head_dim, keys.begin() + (e + 1) * head_dim);
    if (!range.empty()) h.value_range.push_back(range[e]);
    if (!mass.empty()) h.attention_mass.push_back(mass[e]);
  }
  const int nq = static_cast<int>(std::min<int64_t>(row.window, row.appended));
  if (!ring.empty())
    for (int gh = 0; gh < group; ++gh)
      for (int i = 0; i < nq; ++i) {
        const int ring_slot = static_cast<int>((row.appended - 1 - i) % row.window);
        const size_t offset =
            ((size_t(row.ring_row) * n_kv * group + size_t(kv_head) * group + gh) * ring_window + ring_slot) *
            head_dim;
        for (int c = 0; c < head_dim; ++c) h.queries.push_back(bf16_to_f32(ring[offset + size_t(c)]));
      }
  policy::SelectionInput& in = h.input;
  in.layer = layer;
  in.kv_head = kv_head;
  in.n_candidates = n;
  in.keep = row.budget - row.window;
  in.n_protected = row.n_protected;
  in.positions = h.positions;
  in.key = row.key;
  in.round = row.round;
  in.budget = row.budget;
  in.appended = row.appended;
  in.head_dim = head_dim;
  in.group = group;
  in.n_queries = ring.empty() ? 0 : nq;
  in.keys = h.keys;
  in.window_queries = h.queries;
  in.value_range = h.value_range;
  in.attention_mass = h.attention_mass;
  return h;
}

// The policy's options ("key=value,...", EvictionPolicy::options()) by key.
struct OptionValues {
  std::map<std::string, std::string> text;
  explicit OptionValues(const policy::EvictionPolicy& policy) {
    std::istringstream in(policy.options());
    std::string item;
    while (std::getline(in, item, ',')) {
      const size_t eq = item.find('=');
      if (eq != std::string::npos) text[item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
  double number(const std::string& key) const { return std::stod(text.at(key)); }
  std::string get(const std::string& key) const {
    const auto it = text.find(key);
    return it == text.end() ? std::string() : it->second;
  }
};

// The verdict on one head whose keep-sets differ.
struct NearTieVerdict {
  bool explained = false;  // every difference is a near-tie of the rule above
  int near_ties = 0;       // candidates kept by the CPU only (as many as by CUDA only)
  std::string why;         // what broke the rule, when not explained
};

inline std::string policy_family(const policy::EvictionPolicy& policy) {
  const std::string name(policy.name());
  return name.ends_with("_pp") ? name.substr(0, name.size() - 3) : name;
}

// Whether a policy's keep-sets may differ by near-ties at all (it reads the windowed attention at fp32).
inline bool has_near_ties(const policy::EvictionPolicy& policy) {
  const std::string family = policy_family(policy);
  return (family == "snapkv" || family == "rkv" || family == "vase") &&
         OptionValues(policy).get("precision") == "fp32";
}

// Judges the head by the CPU's scores: only_cpu / only_gpu are the absolute positions one side kept.
inline NearTieVerdict judge_near_ties(const policy::EvictionPolicy& policy, const policy::SelectionInput& in,
                                      const std::vector<int32_t>& only_cpu, const std::vector<int32_t>& only_gpu) {
  NearTieVerdict v;
  v.near_ties = static_cast<int>(only_cpu.size());
  std::ostringstream why;
  if (!has_near_ties(policy) || only_cpu.size() != only_gpu.size()) {
    why << "not a near-tie (" << policy.name() << " keeps exactly the CPU's set)";
    v.why = why.str();
    return v;
  }
  std::map<int32_t, int> slot_of;
  for (int slot = 0; slot < in.n_candidates; ++slot) slot_of[in.positions[size_t(slot)]] = slot;
  const OptionValues options(policy);
  const std::string family = policy_family(policy);
  const std::vector<double> attention =
      policy::windowed_attention(in, static_cast<int>(options.number("pool")), options.number("temperature"),
                                 policy::WindowPrecision::Fp32);
  if (family == "snapkv" || family == "rkv") {
    const double lambda = family == "rkv" ? options.number("lambda") : 1.0;
    std::vector<double> score = attention;
    if (family == "rkv") {
      const std::vector<double> redundancy = policy::key_redundancy(in, std::nullopt);
      for (size_t j = 0; j < score.size(); ++j) score[j] = lambda * attention[j] - (1.0 - lambda) * redundancy[j];
    }
    for (int32_t pa : only_cpu)
      for (int32_t pb : only_gpu) {
        const int a = slot_of.at(pa), b = slot_of.at(pb);
        const double gap = std::fabs(score[size_t(a)] - score[size_t(b)]);
        const double bound = kNearTieTolerance * lambda * (attention[size_t(a)] + attention[size_t(b)]);
        if (a < in.n_protected || b < in.n_protected || gap > bound) {
          why << "positions " << pa << " (CPU) and " << pb << " (CUDA): score gap " << gap << " > bound " << bound;
          v.why = why.str();
          return v;
        }
      }
    v.explained = true;
    return v;
  }
  // VaSE: vase.cpp's selection replayed, with its draws checked for near-ties.
  const int n = in.n_candidates;
  std::vector<uint8_t> keep(size_t(n), 0);
  int kept = 0;
  for (int slot = 0; slot < in.n_protected; ++slot, ++kept) keep[size_t(slot)] = 1;
  const std::vector<int32_t> order = policy::chronological(in, 0);
  int sinks_outside = 0;
  const int sinks = static_cast<int>(options.number("sinks"));
  for (int i = 0; i < std::min<int>(sinks, n) && kept < in.keep; ++i) {
    if (keep[size_t(order[size_t(i)])]) continue;
    keep[size_t(order[size_t(i)])] = 1;
    ++kept;
    ++sinks_outside;
  }
  const int n_large = static_cast<int>(std::floor(options.number("large") * in.budget));
  std::vector<int32_t> pool;
  for (int32_t slot : order)
    if (!keep[size_t(slot)]) pool.push_back(slot);
  const int n_range = std::clamp(n_large - sinks_outside, 0, in.keep - kept);
  policy::keep_highest<float>(in, pool, in.value_range, n_range, keep);
  kept += n_range;
  std::vector<int32_t> left;
  double w_max = 0.0;
  for (int32_t slot : pool)
    if (!keep[size_t(slot)]) {
      left.push_back(slot);
      w_max = std::max(w_max, attention[size_t(slot)]);
    }
  std::vector<uint64_t> weight(left.size(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < left.size(); ++i) {
    weight[i] = w_max > 0.0 ? static_cast<uint64_t>(std::floor(attention[size_t(left[i])] / w_max * 0x1p40)) : 0;
    total += weight[i];
  }
  // A weight of the other side differs by at most 2τ of itself plus one unit (its quotient by the
  // maximum, floored), so a running sum or the target by at most 2τ · total + the count.
  const double margin = 4.0 * kNearTieTolerance * static_cast<double>(total) + 2.0 * static_cast<double>(left.size()) + 2.0;
  const PhiloxStream stream{in.key, in.round, static_cast<uint32_t>(in.layer), static_cast<uint32_t>(in.kv_head)};
  std::vector<uint8_t> taken(left.size(), 0);
  bool near_tie_draw = false;
  for (int draw = 0; kept < in.keep && !near_tie_draw; ++draw, ++kept) {
    size_t pick = 0;
    if (total == 0) {
      while (taken[pick]) ++pick;
    } else {
      const uint64_t target = mul_hi_u64(stream.draw_u64(static_cast<uint32_t>(draw)), total);
      uint64_t running = 0, before = 0;
      for (pick = 0; pick < left.size(); ++pick) {
        if (taken[pick]) continue;
        before = running;
        running += weight[pick];
        if (running > target) break;
      }
      near_tie_draw = static_cast<double>(running - target) <= margin || static_cast<double>(target - before) < margin;
      if (near_tie_draw) break;
    }
    taken[pick] = 1;
    total -= weight[pick];
    keep[size_t(left[pick])] = 1;
  }
  // The picks so far (prompt, sinks, ranges, draws before any near-tie) are kept by both sides.
  for (int32_t pa : only_cpu)
    if (keep[size_t(slot_of.at(pa))]) {
      why << "position " << pa << " was picked by the CPU before any near-tie draw, CUDA dropped it";
      v.why = why.str();
      return v;
    }
  if (!near_tie_draw) {
    v.why = "VaSE's draws met no near-tie, yet the keep-sets differ";
    return v;
  }
  v.explained = true;
  return v;
}

}  // namespace kvdice::test
