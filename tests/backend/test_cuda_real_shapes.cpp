// CPU and CUDA eviction at the shapes of the models kvdice runs: Qwen3-4B (8 KV heads, head_dim 128,
// GQA groups of 4), the default model Qwen2.5-0.5B (2 KV heads, head_dim 64, groups of 7) and Phi-4
// (10 KV heads, head_dim 128, groups of 4), for every policy with a CUDA selection. The small parity
// worlds (test_ops.cpp, test_cuda_policies.cpp) have 2 KV heads: a selection that draws or scores KV
// head 4 and up wrongly passes them, and passes no case here. Skips without a GPU.
//
// Each case fills both pools with the same bf16-exact K/V and fp32 signals (a counter-based hash, so a
// pool of tens of millions of values costs a fraction of a second), then runs three rounds on both
// backends in lockstep: after each round the kept absolute positions of every (row, layer, KV head)
// must be identical, and rows that evicted get r fresh tokens before the next. Rows: T = 2048 with a
// long history, a prompt three times T = 1024 (the reference's long-prompt protection), a prompt shorter
// than it, T = 1000 (the kept range ends inside a page) and a row that is not due. Layers are
// independent for every policy but TriAttention (whose keep-sets are shared and scored over all
// layers), so a handful of layers stands for the model's 24-40.
//
// Near-ties: the windowed-attention policies at precision=fp32 (snapkv, rkv, vase) may differ where the
// CPU's own scores leave a near-tie (near_ties.h judges each such head, counts it and fails on anything
// else); after such a round the CUDA pool takes the CPU's contents, so the next round starts from the
// same state. The fp64 scorers must match exactly: continuous random inputs make a keep-set boundary
// within fp64 rounding of a tie improbable; exact ties break by position on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "backend/eviction_rows.h"
#include "backend/near_ties.h"
#include "backend/op_harness.h"
#include "core/philox.h"
#include "model/random_weights.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"
#include "policy/triattention_stats.h"

namespace kvdice::test {
namespace {

namespace fs = std::filesystem;
using backend::Backend;

constexpr int kPageSlots = 16;
constexpr int kRounds = 3;

struct RealShape {
  const char* name;    // configs/shapes/<name>.json
  int n_layers;        // layers in the world (the model's are independent but for TriAttention)
  int n_kv, group, head_dim;
  double rope_theta;
};

// The KV geometry of each shape must equal its config (RealShapes.WorldsMatchTheShapeConfigs).
const RealShape kQwen3_4b{"qwen3-4b", 3, 8, 4, 128, 1e6};
const RealShape kDefaultModel{"qwen2.5-0.5b", 4, 2, 7, 64, 1e6};
const RealShape kPhi4{"phi-4", 2, 10, 4, 128, 250000};

using Row = EvictionRow;

// The rows of every shape; `protects`: the policy pins the prompt (pl slots, capped at K_sel - 1).
std::vector<Row> real_rows(bool protects) {
  const auto pl = [&](int n) { return protects ? n : 0; };
  return {
      {2048, 64, 2112, 6000, pl(100)},  // a long history at T = 2048
      {1024, 64, 3072, 3072, pl(959)},  // a prompt of 3 T: 2048 victims, more (hole, survivor) pairs than
                                        // a compaction pass moves; under protection one free selection slot
      {1024, 64, 1088, 1088, pl(300)},  // a prompt shorter than T
      {1000, 40, 1040, 3000, pl(37)},   // T = 1000: the kept range ends in the middle of a page
      {2048, 64, 700, 700, pl(300)},    // not due: untouched
  };
}

// splitmix64: a value per (seed, index), in any order.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform in [-2, 2).
float hashed_unit(uint64_t seed, uint64_t i) {
  return static_cast<float>(static_cast<double>(mix(seed * 0x100000001b3ull + i) >> 11) * 0x1.0p-51 - 2.0);
}
std::vector<float> hashed_bf16(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_round(hashed_unit(seed, i));
  return v;
}

// Both pools' contents (as test_cuda_policies.cpp's world): candidates hold unique older positions in
// scrambled slot order, the window the newest r positions in order, pages shuffled over the rows.
struct RealWorld {
  RealShape shape;
  std::vector<Row> rows;
  policy::SignalNeeds needs;
  HostBatch h;
  int n_pages = 0;
  size_t slots = 0, ring_elements = 0;
  int ring_window = 0;  // queries per ring row: the widest r of the rows
  std::vector<std::vector<float>> k, v, range, mass;
  std::vector<std::vector<uint16_t>> ring;  // bf16 bits, as the pools hold them
  std::vector<std::vector<int32_t>> pos;

  RealWorld(const RealShape& s, std::vector<Row> rows_, const policy::EvictionPolicy& policy, uint64_t seed)
      : shape(s), rows(std::move(rows_)), needs(policy.needs()) {
    int max_slots = 0;
    for (const Row& r : rows) max_slots = std::max(max_slots, r.length + r.window);
    const int max_pages = (max_slots + kPageSlots - 1) / kPageSlots;
    h = HostBatch::make(std::vector<int>(rows.size(), 1), max_pages);
    h.page_table.resize(size_t(h.n_seqs) * max_pages);
    std::iota(h.page_table.begin(), h.page_table.end(), 0);
    std::shuffle(h.page_table.begin(), h.page_table.end(), std::mt19937_64(seed));
    n_pages = h.n_seqs * max_pages;
    slots = size_t(n_pages) * s.n_kv * kPageSlots;
    for (const Row& r : rows) ring_window = std::max(ring_window, r.window);
    // Rows hold the ring rows in reverse, so a reader that took the batch row for the ring row fails.
    for (int q = 0; q < h.n_seqs; ++q) h.ring_row[size_t(q)] = h.n_seqs - 1 - q;
    ring_elements = size_t(h.n_seqs) * s.n_kv * s.group * ring_window * s.head_dim;
    std::mt19937_64 rng(seed);
    for (int l = 0; l < s.n_layers; ++l) {
      k.push_back(hashed_bf16(slots * s.head_dim, seed * 131 + 10 * l + 1));
      v.push_back(hashed_bf16(slots * s.head_dim, seed * 131 + 10 * l + 2));
      if (needs.window_queries) ring.emplace_back(ring_elements, uint16_t{0});
      if (needs.value_ranges) {
        range.emplace_back(slots);
        for (size_t i = 0; i < slots; ++i) range.back()[i] = 2.25f + hashed_unit(seed * 131 + 10 * l + 3, i);
      }
      if (needs.accumulated_attention) {
        // Multiples of 1/8: many exact ties, which both sides break by position.
        mass.emplace_back(slots);
        for (size_t i = 0; i < slots; ++i) mass.back()[i] = static_cast<float>(mix(seed + 7 * l + i) % 32) / 8.0f;
      }
      pos.emplace_back(slots, -1);
    }
    const bool shared_layers = policy.scores_whole_round();
    for (int q = 0; q < h.n_seqs; ++q) {
      const Row& r = rows[size_t(q)];
      h.budget[q] = r.budget;
      h.window[q] = r.window;
      h.length[q] = r.length;
      h.appended[q] = r.appended;
      h.n_protected[q] = r.n_protected;
      h.evict_key[q] = philox_key(seed, uint64_t(q) + 40, RngDomain::Eviction);
      h.round[q] = 2 * q + 1;
      for (int g = 0; g < s.n_kv; ++g) {
        std::vector<int32_t> slot_positions;
        for (int l = 0; l < s.n_layers; ++l) {
          if (l == 0 || !shared_layers) slot_positions = draw_slot_positions(r, rng);
          for (int slot = 0; slot < r.length; ++slot) pos[l][index(q, g, slot)] = slot_positions[size_t(slot)];
        }
      }
      // Ring slots [0, r) of the row's ring row hold bf16 queries (the ring's dtype).
      if (needs.window_queries)
        for (int l = 0; l < s.n_layers; ++l)
          for (int j = 0; j < r.window; ++j)
            for (int qh = 0; qh < s.n_kv * s.group; ++qh) {
              const size_t at =
                  ((size_t(h.ring_row[size_t(q)]) * s.n_kv * s.group + qh) * ring_window + j) * s.head_dim;
              for (int c = 0; c < s.head_dim; ++c)
                ring[l][at + c] = f32_to_bf16(hashed_unit(seed * 131 + 10 * l + 5, at + c));
            }
    }
  }
  size_t index(int q, int g, int slot) const {
    const int page = h.page_table[size_t(q) * h.max_pages + slot / kPageSlots];
    return (size_t(page) * shape.n_kv + g) * kPageSlots + slot % kPageSlots;
  }
};

// One backend's pool, its signals and its step batch, advanced round by round.
struct RealPool {
  Backend& b;
  const RealWorld& w;
  std::vector<std::unique_ptr<KvLayerMemory>> layers;
  std::vector<std::unique_ptr<Guarded>> signals;
  std::vector<backend::KvLayer> views;
  DeviceBatch d;

  RealPool(Backend& backend, const RealWorld& world) : b(backend), w(world), d(backend, world.h) {
    const RealShape& s = w.shape;
    for (int l = 0; l < s.n_layers; ++l) {
      layers.push_back(std::make_unique<KvLayerMemory>(b, w.n_pages, s.n_kv, kPageSlots, s.head_dim, l));
      layers.back()->upload(w.k[l], w.v[l], w.pos[l]);
      backend::KvLayer view = layers.back()->layer;
      view.n_heads = s.n_kv * s.group;
      view.ring_window = w.ring_window;
      view.ring_rows = w.h.n_seqs;
      if (w.needs.window_queries) view.query_ring = static_cast<uint16_t*>(signal(w.ring[l], "query ring"));
      if (w.needs.value_ranges) view.value_range = static_cast<float*>(signal(w.range[l], "value range"));
      if (w.needs.accumulated_attention)
        view.attention_mass = static_cast<float*>(signal(w.mass[l], "attention mass"));
      views.push_back(view);
    }
  }
  template <class T>
  void* signal(const std::vector<T>& host, const char* what) {
    signals.push_back(std::make_unique<Guarded>(b, host.size() * sizeof(T), what));
    b.upload(signals.back()->data(), host.data(), host.size() * sizeof(T));
    return signals.back()->data();
  }
  std::vector<float> download_signal(const float* p) const {
    std::vector<float> out;
    if (p == nullptr) return out;
    for (const auto& sig : signals)
      if (sig->data() == p) {
        out.resize(sig->bytes / sizeof(float));
        b.download(out.data(), p, sig->bytes);
      }
    return out;
  }
  // Takes the other pool's contents (keys, values, positions, signals), lengths and counters.
  void copy_from(const RealPool& other) {
    for (size_t l = 0; l < layers.size(); ++l)
      layers[l]->upload(other.layers[l]->keys.download(), other.layers[l]->values.download(), other.positions(int(l)));
    for (size_t i = 0; i < signals.size(); ++i) {
      std::vector<char> host(other.signals[i]->bytes);
      other.b.download(host.data(), other.signals[i]->data(), host.size());
      b.upload(signals[i]->data(), host.data(), host.size());
    }
    const auto length = other.lengths(), round = other.round_counters();
    const auto appended = other.d.get(other.d.batch.appended, size_t(w.h.n_seqs));
    b.upload(d.batch.length, length.data(), length.size() * sizeof(int32_t));
    b.upload(d.batch.round, round.data(), round.size() * sizeof(int32_t));
    b.upload(d.batch.appended, appended.data(), appended.size() * sizeof(int32_t));
  }
  void evict(const policy::EvictionPolicy& policy) {
    b.evict(d.batch, views, policy, 0);
    b.synchronize();
  }
  std::vector<int32_t> lengths() const { return d.get(d.batch.length, size_t(w.h.n_seqs)); }
  std::vector<int32_t> round_counters() const { return d.get(d.batch.round, size_t(w.h.n_seqs)); }
  std::vector<int32_t> positions(int l) const { return layers[size_t(l)]->download_positions(); }
  // Rows back at their budget get r new tokens: the next positions with fresh K/V in the window slots.
  void append_window(int round) {
    auto length = lengths();
    auto appended = d.get(d.batch.appended, size_t(w.h.n_seqs));
    const RealShape& s = w.shape;
    for (int l = 0; l < s.n_layers; ++l) {
      auto pos = positions(l);
      auto k = layers[size_t(l)]->keys.download();
      auto v = layers[size_t(l)]->values.download();
      for (int q = 0; q < w.h.n_seqs; ++q) {
        if (length[q] != w.h.budget[q]) continue;
        for (int g = 0; g < s.n_kv; ++g)
          for (int i = 0; i < w.h.window[q]; ++i) {
            const size_t at = w.index(q, g, length[q] + i);
            pos[at] = appended[q] + i;
            for (int c = 0; c < s.head_dim; ++c) {
              const uint64_t n = (at * s.head_dim + c) * 8 + uint64_t(round);
              k[at * s.head_dim + c] = bf16_round(hashed_unit(977 + l, n));
              v[at * s.head_dim + c] = bf16_round(hashed_unit(991 + l, n));
            }
          }
      }
      layers[size_t(l)]->upload(k, v, pos);
    }
    for (int q = 0; q < w.h.n_seqs; ++q) {
      if (length[q] != w.h.budget[q]) continue;
      length[q] += w.h.window[q];
      appended[q] += w.h.window[q];
    }
    b.upload(d.batch.length, length.data(), length.size() * sizeof(int32_t));
    b.upload(d.batch.appended, appended.data(), appended.size() * sizeof(int32_t));
  }
  bool sentinels_intact() const {
    bool ok = d.sentinels_intact();
    for (const auto& layer : layers) ok = ok && layer->sentinels_intact();
    for (const auto& signal : signals) ok = ok && signal->sentinel_intact();
    return ok;
  }
};

std::string list(const std::vector<int32_t>& v) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size() && i < 12; ++i) out << (i ? " " : "") << v[i];
  if (v.size() > 12) out << " ... (" << v.size() << ")";
  return out.str();
}

// One layer of a pool before a round, as the CPU round reads it.
struct LayerBefore {
  std::vector<int32_t> pos;
  std::vector<float> keys, range, mass;
};
struct PoolBefore {
  std::vector<RowBefore> rows;
  std::vector<LayerBefore> layers;
};
PoolBefore pool_before(const RealWorld& w, const RealPool& p) {
  PoolBefore out;
  const auto length = p.lengths(), round = p.round_counters();
  const auto appended = p.d.get(p.d.batch.appended, size_t(w.h.n_seqs));
  for (int q = 0; q < w.h.n_seqs; ++q)
    out.rows.push_back({w.h.budget[q], w.h.window[q], length[q], w.h.n_protected[q], w.h.ring_row[size_t(q)],
                        appended[q], w.h.evict_key[q], static_cast<uint32_t>(round[q])});
  for (int l = 0; l < w.shape.n_layers; ++l)
    out.layers.push_back({p.positions(l), p.layers[size_t(l)]->keys.download(),
                          p.download_signal(p.views[size_t(l)].value_range),
                          p.download_signal(p.views[size_t(l)].attention_mass)});
  return out;
}

// Compares the kept positions of every (row, layer, KV head); a head whose sets differ must be a
// near-tie by the CPU's scores (near_ties.h), else the failure names it and the positions only one side
// kept. Returns the number of heads that differ beyond near-ties; *near_tie_heads counts the others.
int compare_keep_sets(const std::string& what, const policy::EvictionPolicy& policy, const RealWorld& w,
                      const PoolBefore& before, const RealPool& cpu, const RealPool& gpu,
                      const std::vector<int32_t>& length, int* near_tie_heads) {
  int mismatches = 0, near_ties = 0;
  *near_tie_heads = 0;
  static const std::vector<uint16_t> kNone;
  for (int l = 0; l < w.shape.n_layers; ++l) {
    const auto pc = cpu.positions(l), pg = gpu.positions(l);
    for (int q = 0; q < w.h.n_seqs; ++q)
      for (int g = 0; g < w.shape.n_kv; ++g) {
        std::vector<int32_t> a, b;
        for (int slot = 0; slot < length[q]; ++slot) {
          a.push_back(pc[w.index(q, g, slot)]);
          b.push_back(pg[w.index(q, g, slot)]);
        }
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a == b) continue;
        std::vector<int32_t> only_cpu, only_gpu;
        std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_cpu));
        std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_gpu));
        const LayerBefore& lb = before.layers[size_t(l)];
        const HeadBefore head = head_before(
            before.rows[size_t(q)], l, g, w.shape.n_kv, w.shape.group, w.shape.head_dim, w.ring_window,
            [&](int slot) { return w.index(q, g, slot); }, lb.pos, lb.keys,
            w.needs.window_queries ? w.ring[size_t(l)] : kNone, lb.range, lb.mass);
        const NearTieVerdict verdict = judge_near_ties(policy, head.input, only_cpu, only_gpu);
        if (verdict.explained) {
          ++*near_tie_heads;
          near_ties += verdict.near_ties;
          continue;
        }
        if (++mismatches <= 12)
          ADD_FAILURE() << what << ": row " << q << " layer " << l << " KV head " << g
                        << ": kept only by the CPU: [" << list(only_cpu) << "], only by CUDA: ["
                        << list(only_gpu) << "]: " << verdict.why;
      }
  }
  if (*near_tie_heads > 0)
    std::cout << what << ": " << *near_tie_heads << " heads differ by near-ties (" << near_ties
              << " candidates kept by one side only)\n";
  return mismatches;
}

// Pages of (row q, layer 0, KV head 0) that held a slot evicted by the round: `before` and `after`
// are layer 0's positions around it.
int pages_with_victims(const RealWorld& w, int q, const std::vector<int32_t>& before, int length_before,
                       const std::vector<int32_t>& after, int length_after) {
  std::set<int32_t> kept;
  for (int slot = 0; slot < length_after; ++slot) kept.insert(after[w.index(q, 0, slot)]);
  std::set<int> pages;
  for (int slot = 0; slot < length_before; ++slot)
    if (!kept.count(before[w.index(q, 0, slot)])) pages.insert(slot / kPageSlots);
  return static_cast<int>(pages.size());
}

// Random calibration statistics in the real file format for `shape` (|E q| < E|q|).
std::string write_random_stats(const RealShape& shape, uint64_t seed) {
  policy::TriAttentionStats stats;
  stats.n_layers = shape.n_layers;
  stats.n_heads = shape.n_kv * shape.group;
  stats.n_kv_heads = shape.n_kv;
  stats.head_dim = shape.head_dim;
  const int nf = shape.head_dim / 2;
  const size_t n = size_t(stats.n_layers) * stats.n_heads * nf;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> extra(0.05f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    const float re = normal(rng), im = normal(rng);
    stats.q_mean_real.push_back(re);
    stats.q_mean_imag.push_back(im);
    stats.q_abs_mean.push_back(static_cast<float>(std::hypot(double(re), double(im))) + extra(rng));
  }
  for (int f = 0; f < nf; ++f) {
    stats.omega.push_back(static_cast<float>(1.0 / std::pow(shape.rope_theta, 2.0 * f / shape.head_dim)));
    stats.freq_scale.push_back(1.0f);
  }
  stats.q_weight_norm.assign(size_t(shape.n_layers), 1.0f);
  const std::string path = ::testing::TempDir() + "/real_shape_tri_" + shape.name + ".safetensors";
  policy::write_triattention_stats(path, stats);
  return path;
}

// The policies of the real-shape cases: every policy with a CUDA selection by its name (TriAttention
// gets statistics of the shape), plus option variants that take other device paths.
const std::vector<std::string> kRealShapePolicies = {
    "random_pp", "random", "random_shared", "recency_pp", "recency", "streaming", "random_block_pp",
    "random_block_pp:block=4", "random_pp_rec", "random_pp_rec:recent=0.25", "snapkv", "snapkv_pp", "h2o",
    "h2o_pp", "vase", "vase_pp", "rkv", "rkv_pp", "rkv_official", "triattention", "random_pin_pp",
    // A span inside most rows' prompts (past the 37-token one) and one position past the 959-token
    // prompt, whose row has a single free selection slot.
    "random_pin_pp:span=20-60+1500-1501,heads=1+3",
    // Carrier-head mixing: heads=2+3+5 (the default) leaves the default model's two heads to recency.
    "carrier_mix", "carrier_softmix", "anti_mix", "anti_softmix", "carrier_softmix:heads=1,q=0.3",
    "anti_mix:heads=0+1", "random_vrange_pp", "random_vrange_pp:share=0.6",
    // The tensor-core windowed attention (precision=fp32: near-ties allowed, near_ties.h).
    "snapkv_pp:precision=fp32", "rkv:precision=fp32", "vase:precision=fp32"};

std::string base_name(const std::string& spec) { return spec.substr(0, spec.find(':')); }

void check_real_shape(const RealShape& shape, const std::string& spec_in, uint64_t seed) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  std::string spec = spec_in;
  if (base_name(spec) == "triattention") spec += ":stats=" + write_random_stats(shape, seed + 1);
  SCOPED_TRACE(std::string(shape.name) + " " + spec);
  const auto policy = policy::make_policy(spec);
  ASSERT_NE(policy::cuda_selection(spec), nullptr) << spec << " has no CUDA selection";
  const RealWorld world(shape, real_rows(policy->protects_prompt()), *policy, seed);
  RealPool cpu(*pair.cpu, world), gpu(*pair.gpu, world);
  for (int round = 0; round < kRounds; ++round) {
    const std::string what = spec + " round " + std::to_string(round);
    if (round > 0) {
      cpu.append_window(round);
      gpu.append_window(round);
    }
    const auto length_before = cpu.lengths();
    const auto layer0_before = cpu.positions(0);
    const PoolBefore before = pool_before(world, cpu);
    cpu.evict(*policy);
    gpu.evict(*policy);
    const auto length = cpu.lengths();
    ASSERT_EQ(gpu.lengths(), length) << what;
    ASSERT_EQ(gpu.round_counters(), cpu.round_counters()) << what;
    int near_tie_heads = 0;
    const int mismatches = compare_keep_sets(what, *policy, world, before, cpu, gpu, length, &near_tie_heads);
    ASSERT_EQ(mismatches, 0) << what << ": (row, layer, KV head) keep-sets that differ beyond near-ties";
    if (near_tie_heads > 0) gpu.copy_from(cpu);  // the next round starts from the same pool
    // Same keep flags, same compaction: the pools agree slot for slot.
    for (int l = 0; l < shape.n_layers; ++l) {
      ASSERT_EQ(gpu.positions(l), cpu.positions(l)) << what << ": positions of layer " << l;
      ASSERT_EQ(gpu.layers[size_t(l)]->keys.download(), cpu.layers[size_t(l)]->keys.download())
          << what << ": keys of layer " << l;
      ASSERT_EQ(gpu.layers[size_t(l)]->values.download(), cpu.layers[size_t(l)]->values.download())
          << what << ": values of layer " << l;
    }
    // The round did something: due rows are back at their budget with victims in several pages, the
    // row that is not due is untouched.
    const auto layer0_after = cpu.positions(0);
    for (int q = 0; q < world.h.n_seqs; ++q) {
      const Row& r = world.rows[size_t(q)];
      const bool due = length_before[q] > r.budget && length_before[q] % r.window == 0;
      EXPECT_EQ(length[q], due ? r.budget : length_before[q]) << what << " row " << q;
      if (due) {
        EXPECT_GE(pages_with_victims(world, q, layer0_before, length_before[q], layer0_after, length[q]), 2)
            << what << " row " << q << ": the victims of a round lie in one page";
      }
    }
  }
  EXPECT_TRUE(cpu.sentinels_intact());
  EXPECT_TRUE(gpu.sentinels_intact()) << "a sentinel after a GPU buffer was overwritten";
}

std::string param_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

class CudaRealShape : public testing::TestWithParam<std::string> {};

TEST_P(CudaRealShape, Qwen3FourBKeepsWhatTheCpuKeeps) { check_real_shape(kQwen3_4b, GetParam(), 3401); }
TEST_P(CudaRealShape, DefaultModelKeepsWhatTheCpuKeeps) { check_real_shape(kDefaultModel, GetParam(), 3402); }
TEST_P(CudaRealShape, Phi4KeepsWhatTheCpuKeeps) { check_real_shape(kPhi4, GetParam(), 3403); }

INSTANTIATE_TEST_SUITE_P(Policies, CudaRealShape, testing::ValuesIn(kRealShapePolicies), param_name);

// ---- what the cases above reach (runs without a GPU) -------------------------------------------------

// A policy added with a CUDA selection but no real-shape case fails here. The registry names each
// policy's CUDA file (policy::cuda_file); a build without CUDA has no launchers, so the files stand in.
TEST(RealShapes, EveryPolicyWithACudaSelectionHasARealShapeCase) {
  std::set<std::string> covered;
  for (const std::string& spec : kRealShapePolicies) covered.insert(base_name(spec));
  int with_cuda = 0;
  for (const std::string& name : policy::policy_names()) {
#ifdef KVDICE_WITH_CUDA
    const bool has_cuda = policy::cuda_selection(name) != nullptr;
#else
    const std::string_view file = policy::cuda_file(name);
    const bool has_cuda =
        !file.empty() && fs::exists(fs::path(KVDICE_SOURCE_DIR) / "src" / "policy" / "cuda" / (std::string(file) + ".cu"));
#endif
    if (!has_cuda) continue;
    ++with_cuda;
    EXPECT_TRUE(covered.count(name)) << name << " has a CUDA selection but no case in kRealShapePolicies";
  }
  EXPECT_GE(with_cuda, 18) << "the registry lost policies with CUDA selections";
  const std::vector<std::string> names = policy::policy_names();
  for (const std::string& name : covered)
    EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end()) << name << " is not a registered policy";
}

// The worlds' KV geometry is the real models': each shape's config in configs/shapes/.
TEST(RealShapes, WorldsMatchTheShapeConfigs) {
  for (const RealShape& s : {kQwen3_4b, kDefaultModel, kPhi4}) {
    const model::ModelConfig c =
        model::read_shape_config(fs::path(KVDICE_SOURCE_DIR) / "configs" / "shapes" / (std::string(s.name) + ".json"));
    EXPECT_EQ(c.n_kv_heads, s.n_kv) << s.name;
    EXPECT_EQ(c.group_size(), s.group) << s.name;
    EXPECT_EQ(c.head_dim, s.head_dim) << s.name;
    EXPECT_FLOAT_EQ(c.rope_theta, static_cast<float>(s.rope_theta)) << s.name;
    EXPECT_LE(s.n_layers, c.n_layers) << s.name;
  }
  // Phi-4 (microsoft/phi-4's config.json): 40 layers of 40 query and 10 KV heads.
  const model::ModelConfig phi4 = model::read_shape_config(fs::path(KVDICE_SOURCE_DIR) / "configs/shapes/phi-4.json");
  EXPECT_EQ(phi4.n_layers, 40);
  EXPECT_EQ(phi4.hidden, 5120);
  EXPECT_EQ(phi4.n_heads, 40);
  EXPECT_EQ(phi4.intermediate, 17920);
  EXPECT_EQ(phi4.vocab, 100352);
}

}  // namespace
}  // namespace kvdice::test
