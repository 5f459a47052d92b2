// The scoring policies' CUDA selections against the CPU round on identical inputs: the same
// bf16-exact keys and values, positions, bf16 query rings and fp32 value ranges in both pools, one evict
// call each, then the kept absolute positions of every (row, layer, KV head) must be identical, but for
// the near-ties of the windowed attention at precision=fp32 (near_ties.h: judged by the CPU's own
// scores, counted and printed; any other difference fails). Also the signals the CUDA forward records
// (query ring, value range, attention mass) against the CPU's. Skips without a GPU.
//
// Everything else, the windowed attention at its default fp64 included, scores in fp64 like the CPU
// (window_attention.cuh, triattention.cu: logits bit-identical, exp and sums differing only in summation
// order, about 1e-16 relative) and must match exactly: the inputs are continuous random values, which
// makes a near-tie at that scale improbable; exact ties do not occur in these inputs and would be
// broken by position on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>

#include "backend/eviction_rows.h"
#include "backend/near_ties.h"
#include "backend/op_harness.h"
#include "core/error.h"
#include "policy/cuda_selection.h"
#include "policy/eviction_policy.h"
#include "policy/triattention_stats.h"

namespace kvdice::test {
namespace {

using backend::Backend;

constexpr int kPageSlots = 16;

struct Shape {
  const char* name;
  int n_layers, n_kv, group, head_dim;
};

using Row = EvictionRow;

// Both pools' contents: candidates hold unique older positions in scrambled slot order (as after
// earlier rounds), the window the newest r positions in order; positions are shared by all layers
// (TriAttention's keep-sets are, so its cache always is) or drawn per layer.
struct ScoringWorld {
  Shape shape;
  HostBatch h;
  int n_pages = 0;
  std::vector<std::vector<float>> k, v, range, mass;
  std::vector<std::vector<uint16_t>> ring;  // bf16 bits, as the pools hold them
  std::vector<std::vector<int32_t>> pos;
  int ring_window = 0;  // queries per ring row: the widest r of the rows

  ScoringWorld(const Shape& s, const std::vector<Row>& rows, uint64_t seed, bool same_positions_in_layers)
      : shape(s) {
    int max_slots = 0;
    for (const Row& r : rows) max_slots = std::max(max_slots, r.length + r.window);
    const int max_pages = (max_slots + kPageSlots - 1) / kPageSlots;
    h = HostBatch::make(std::vector<int>(rows.size(), 1), max_pages);
    h.page_table.resize(size_t(h.n_seqs) * max_pages);
    std::iota(h.page_table.begin(), h.page_table.end(), 0);
    std::shuffle(h.page_table.begin(), h.page_table.end(), std::mt19937_64(seed));
    n_pages = h.n_seqs * max_pages;
    for (const Row& r : rows) ring_window = std::max(ring_window, r.window);
    // Rows hold the ring rows in reverse, so a reader that took the batch row for the ring row fails.
    for (int s_ = 0; s_ < h.n_seqs; ++s_) h.ring_row[size_t(s_)] = h.n_seqs - 1 - s_;
    const size_t slots = size_t(n_pages) * s.n_kv * kPageSlots;
    const size_t ring_elements = size_t(h.n_seqs) * s.n_kv * s.group * ring_window * s.head_dim;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(0.5f, 4.0f);
    for (int l = 0; l < s.n_layers; ++l) {
      k.push_back(random_values(slots * s.head_dim, seed + 10 * l + 1));
      v.push_back(random_values(slots * s.head_dim, seed + 10 * l + 2));
      ring.push_back(std::vector<uint16_t>(ring_elements, 0));
      range.emplace_back(slots);
      for (float& x : range.back()) x = uniform(rng);
      // Attention mass in multiples of 1/8: many exact ties, which both sides break by position.
      mass.emplace_back(slots);
      for (float& x : mass.back()) x = static_cast<float>(rng() % 32) / 8.0f;
      pos.emplace_back(slots, -1);
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int s_ = 0; s_ < h.n_seqs; ++s_) {
      const Row& r = rows[size_t(s_)];
      h.budget[s_] = r.budget;
      h.window[s_] = r.window;
      h.length[s_] = r.length;
      h.appended[s_] = r.appended;
      h.n_protected[s_] = r.n_protected;
      h.evict_key[s_] = philox_key(7, uint64_t(s_), RngDomain::Eviction);
      h.round[s_] = s_ + 3;
      for (int g = 0; g < s.n_kv; ++g) {
        std::vector<int32_t> slot_positions;
        for (int l = 0; l < s.n_layers; ++l) {
          if (l == 0 || !same_positions_in_layers) slot_positions = draw_slot_positions(r, rng);
          for (int slot = 0; slot < r.length; ++slot)
            pos[l][index(s_, g, slot)] = slot_positions[size_t(slot)];
        }
      }
      // Ring slots [0, r) of the row's ring row hold bf16 queries (the ring's dtype on both backends).
      for (int l = 0; l < s.n_layers; ++l)
        for (int j = 0; j < r.window; ++j)
          for (int qh = 0; qh < s.n_kv * s.group; ++qh) {
            const size_t at =
                ((size_t(h.ring_row[size_t(s_)]) * s.n_kv * s.group + qh) * ring_window + j) * s.head_dim;
            for (int c = 0; c < s.head_dim; ++c) ring[l][at + c] = f32_to_bf16(normal(rng));
          }
    }
  }
  size_t index(int s, int g, int slot) const {
    const int page = h.page_table[size_t(s) * h.max_pages + slot / kPageSlots];
    return (size_t(page) * shape.n_kv + g) * kPageSlots + slot % kPageSlots;
  }
};

// One backend's pool after one evict call.
struct AfterRound {
  std::vector<std::vector<int32_t>> pos;
  std::vector<std::vector<float>> k, range, mass;
  std::vector<int32_t> length, round;
};

AfterRound run_round(Backend& b, const ScoringWorld& w, const policy::EvictionPolicy& policy, bool* ok) {
  const Shape& s = w.shape;
  std::vector<std::unique_ptr<KvLayerMemory>> layers;
  std::vector<std::unique_ptr<Guarded>> rings, ranges, masses;
  std::vector<backend::KvLayer> views;
  for (int l = 0; l < s.n_layers; ++l) {
    layers.push_back(std::make_unique<KvLayerMemory>(b, w.n_pages, s.n_kv, kPageSlots, s.head_dim, l));
    layers.back()->upload(w.k[l], w.v[l], w.pos[l]);
    rings.push_back(std::make_unique<Guarded>(b, w.ring[l].size() * sizeof(uint16_t), "query ring"));
    b.upload(rings.back()->data(), w.ring[l].data(), w.ring[l].size() * sizeof(uint16_t));
    ranges.push_back(std::make_unique<Guarded>(b, w.range[l].size() * sizeof(float), "value range"));
    b.upload(ranges.back()->data(), w.range[l].data(), w.range[l].size() * sizeof(float));
    masses.push_back(std::make_unique<Guarded>(b, w.mass[l].size() * sizeof(float), "attention mass"));
    b.upload(masses.back()->data(), w.mass[l].data(), w.mass[l].size() * sizeof(float));
    backend::KvLayer view = layers.back()->layer;
    view.query_ring = static_cast<uint16_t*>(rings.back()->data());
    view.n_heads = s.n_kv * s.group;
    view.ring_window = w.ring_window;
    view.ring_rows = w.h.n_seqs;
    view.value_range = static_cast<float*>(ranges.back()->data());
    view.attention_mass = static_cast<float*>(masses.back()->data());
    views.push_back(view);
  }
  DeviceBatch d(b, w.h);
  b.evict(d.batch, views, policy, 0);
  b.synchronize();
  AfterRound out;
  for (int l = 0; l < s.n_layers; ++l) {
    out.pos.push_back(layers[l]->download_positions());
    out.k.push_back(layers[l]->keys.download());
    std::vector<float> range(w.range[l].size());
    b.download(range.data(), ranges[l]->data(), range.size() * sizeof(float));
    out.range.push_back(std::move(range));
    std::vector<float> mass(w.mass[l].size());
    b.download(mass.data(), masses[l]->data(), mass.size() * sizeof(float));
    out.mass.push_back(std::move(mass));
    *ok = *ok && layers[l]->sentinels_intact() && rings[l]->sentinel_intact() && ranges[l]->sentinel_intact() &&
          masses[l]->sentinel_intact();
  }
  out.length = d.get(d.batch.length, size_t(w.h.n_seqs));
  out.round = d.get(d.batch.round, size_t(w.h.n_seqs));
  *ok = *ok && d.sentinels_intact();
  return out;
}

std::string list(const std::vector<int32_t>& v) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size() && i < 12; ++i) out << (i ? " " : "") << v[i];
  if (v.size() > 12) out << " ... (" << v.size() << ")";
  return out.str();
}

// Kept positions (slots [0, T) after the round) per (row, layer, KV head), CPU against CUDA; a head
// whose sets differ must be a near-tie by the CPU's scores (near_ties.h), else the failure names the
// policy, row, layer and head and the positions only one side kept.
void expect_same_keep_sets(const std::string& spec, const policy::EvictionPolicy& policy, const ScoringWorld& w,
                           const AfterRound& cpu, const AfterRound& gpu) {
  int mismatches = 0, near_tie_heads = 0, near_ties = 0;
  for (int s = 0; s < w.h.n_seqs; ++s) {
    for (int l = 0; l < w.shape.n_layers; ++l)
      for (int g = 0; g < w.shape.n_kv; ++g) {
        std::vector<int32_t> a, b;
        for (int slot = 0; slot < cpu.length[s]; ++slot) {
          a.push_back(cpu.pos[l][w.index(s, g, slot)]);
          b.push_back(gpu.pos[l][w.index(s, g, slot)]);
        }
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a == b) continue;
        std::vector<int32_t> only_cpu, only_gpu;
        std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_cpu));
        std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_gpu));
        const RowBefore row{w.h.budget[s], w.h.window[s], w.h.length[s], w.h.n_protected[s],
                            w.h.ring_row[size_t(s)], w.h.appended[s], w.h.evict_key[s],
                            static_cast<uint32_t>(w.h.round[s])};
        const HeadBefore head = head_before(
            row, l, g, w.shape.n_kv, w.shape.group, w.shape.head_dim, w.ring_window,
            [&](int slot) { return w.index(s, g, slot); }, w.pos[l], w.k[l], w.ring[l], w.range[l], w.mass[l]);
        const NearTieVerdict verdict = judge_near_ties(policy, head.input, only_cpu, only_gpu);
        if (verdict.explained) {
          ++near_tie_heads;
          near_ties += verdict.near_ties;
          continue;
        }
        if (++mismatches <= 20)
          ADD_FAILURE() << spec << ": row " << s << " layer " << l << " KV head " << g
                        << ": kept only by the CPU: [" << list(only_cpu) << "], only by CUDA: ["
                        << list(only_gpu) << "]: " << verdict.why;
      }
  }
  EXPECT_EQ(mismatches, 0) << spec << ": (row, layer, KV head) keep-sets that differ beyond near-ties";
  if (near_tie_heads > 0)
    std::cout << spec << ": " << near_tie_heads << " heads differ by near-ties (" << near_ties
              << " candidates kept by one side only)\n";
  if (mismatches == 0 && near_tie_heads == 0) {
    // Same keep flags, same compaction: the pools agree slot for slot, signals included.
    for (int l = 0; l < w.shape.n_layers; ++l) {
      EXPECT_EQ(gpu.pos[l], cpu.pos[l]) << spec << ": positions of layer " << l;
      EXPECT_EQ(gpu.k[l], cpu.k[l]) << spec << ": keys of layer " << l;
      EXPECT_EQ(gpu.range[l], cpu.range[l]) << spec << ": value ranges (moved by compaction) of layer " << l;
      EXPECT_EQ(gpu.mass[l], cpu.mass[l]) << spec << ": attention mass (moved by compaction) of layer " << l;
    }
  }
  EXPECT_EQ(gpu.length, cpu.length) << spec;
  EXPECT_EQ(gpu.round, cpu.round) << spec;
}

const Shape kSmall{"small", 2, 2, 2, 32};
const Shape kQwen3_4b{"qwen3-4b", 36, 8, 4, 128};

// Rows of the small shape: due rows of several geometries, a row that is not due, a long-prompt round.
std::vector<Row> small_rows(int pl) {
  return {
      {48, 16, 64, 200, pl},           // due
      {48, 16, 60, 60, pl},            // not at a round boundary: untouched
      {32, 8, 40, 40, pl},             // due, positions in slot order before scrambling
      {100, 4, 200, 300, pl ? 3 : 0},  // due with 100 victims (a long prompt's first round)
      {40, 20, 60, 1000, pl},          // due, the window is a third of the budget
      {160, 80, 240, 400, pl},         // due, more window queries than the CUDA scratch keeps logits of
      {48, 16, 64, 20000, pl},         // due, positions spread past 8,192 (a long generation's round)
  };
}

// Qwen3-4B at T = 2048, r = 64: one due row and one row far from its budget.
std::vector<Row> qwen_rows(int pl) { return {{2048, 64, 2112, 6000, pl}, {2048, 64, 200, 200, pl ? 50 : 0}}; }

void check_policy(const std::string& spec, const Shape& shape, const std::vector<Row>& rows, uint64_t seed) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  SCOPED_TRACE(std::string(shape.name) + " " + spec);
  const auto policy = policy::make_policy(spec);
  ASSERT_NE(policy::cuda_selection(spec), nullptr) << spec << " has no CUDA selection";
  const ScoringWorld world(shape, rows, seed, policy->scores_whole_round());
  bool ok = true;
  const AfterRound cpu = run_round(*pair.cpu, world, *policy, &ok);
  const AfterRound gpu = run_round(*pair.gpu, world, *policy, &ok);
  EXPECT_TRUE(ok) << "a sentinel after a buffer was overwritten";
  expect_same_keep_sets(spec, *policy, world, cpu, gpu);
  // The round did something: due rows are back at their budget.
  for (int s = 0; s < world.h.n_seqs; ++s) {
    const Row& r = rows[size_t(s)];
    const bool due = r.budget > 0 && r.length > r.budget && r.length % r.window == 0;
    EXPECT_EQ(cpu.length[s], due ? r.budget : r.length) << "row " << s;
  }
}

class CudaScoringPolicy : public testing::TestWithParam<std::string> {};

TEST_P(CudaScoringPolicy, SmallShapesKeepWhatTheCpuKeeps) {
  const auto policy = policy::make_policy(GetParam());
  check_policy(GetParam(), kSmall, small_rows(policy->protects_prompt() ? 5 : 0), 1001);
}

INSTANTIATE_TEST_SUITE_P(Policies, CudaScoringPolicy,
                         testing::Values("snapkv", "snapkv_pp", "snapkv:pool=1",
                                         "snapkv_pp:pool=7,temperature=2", "rkv", "rkv_pp",
                                         "rkv:lambda=0.1,pool=3", "vase", "vase_pp", "vase:large=0.5,sinks=2",
                                         "vase_pp:large=0,sinks=0,pool=1", "rkv_official",
                                         "rkv_official:lambda=0.5,queries=4,pool=3,threshold=0.3",
                                         "rkv_official:queries=64,pool=1,threshold=0", "h2o", "h2o_pp",
                                         "random_vrange_pp", "random_vrange_pp:share=0.3",
                                         "random_vrange_pp:share=1", "random_vrange_pp:share=0",
                                         // The tensor-core windowed attention (near-ties allowed).
                                         "snapkv:precision=fp32", "snapkv_pp:pool=7,temperature=2,precision=fp32",
                                         "rkv:precision=fp32", "rkv_pp:lambda=0.1,pool=3,precision=fp32",
                                         "vase:precision=fp32", "vase_pp:large=0,sinks=0,pool=1,precision=fp32",
                                         // Attention so sharp that most weights are 0: VaSE's draws go on
                                         // past the last weight (the oldest remaining, vase.cpp's rule).
                                         "vase_pp:large=0,sinks=0,pool=1,temperature=0.001"));

#ifdef KVDICE_WITH_CUDA
// Each CUDA file binds every option its device rule reads into its own parameter type (host code, no GPU
// needed): changing any one option changes the bound block, equal options bind equal blocks, and a
// policy and its prompt-protecting twin (one file) bind alike.
TEST(CudaPolicyParams, EveryOptionReachesItsCudaFile) {
  auto bound = [](const std::string& spec) {
    const policy::CudaParams params = policy::bind_cuda_params(*policy::make_policy(spec));
    return std::vector<unsigned char>(params.bytes, params.bytes + policy::kCudaParamBytes);
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"snapkv", {"pool=3", "temperature=2", "precision=fp32"}},
      {"rkv", {"lambda=0.1", "pool=3", "temperature=2", "precision=fp32"}},
      {"vase", {"large=0.5", "sinks=2", "pool=3", "temperature=2", "precision=fp32"}},
      {"rkv_official", {"lambda=0.5", "queries=4", "pool=3", "threshold=0.3"}},
      {"random_block_pp", {"block=4", "grid=candidates"}},
      {"random_pp_rec", {"recent=0.25"}},
      {"random_vrange_pp", {"share=0.4"}},
  };
  for (const auto& [name, changes] : cases) {
    const std::vector<unsigned char> base = bound(name);
    EXPECT_EQ(base, bound(name)) << name;
    for (const std::string& change : changes)
      EXPECT_NE(bound(name + ":" + change), base) << name << ":" << change << " binds like the defaults";
  }
  EXPECT_EQ(bound("snapkv_pp:pool=3"), bound("snapkv:pool=3"));
  EXPECT_EQ(bound("vase_pp:sinks=2"), bound("vase:sinks=2"));
  // The windowed attention's precision: stated only when fp32, and the file answers it to the backend
  // (which sizes the fp32 window scratch from it); files that give no answer run no windowed attention
  // and get no window scratch (rkv_official reads the window queries itself).
  for (const char* name : {"snapkv", "snapkv_pp", "rkv", "rkv_pp", "vase", "vase_pp"}) {
    const policy::CudaSelection* cuda = policy::cuda_selection(name);
    ASSERT_NE(cuda, nullptr) << name;
    ASSERT_NE(cuda->window_fp32, nullptr) << name;
    auto fp32 = [&](const std::string& spec) {
      return cuda->window_fp32(policy::bind_cuda_params(*policy::make_policy(spec)));
    };
    EXPECT_FALSE(fp32(name)) << name;
    EXPECT_FALSE(fp32(std::string(name) + ":precision=fp64")) << name;
    EXPECT_TRUE(fp32(std::string(name) + ":precision=fp32")) << name;
    EXPECT_TRUE(fp32(std::string(name) + ":pool=3,temperature=2,precision=fp32")) << name;
  }
  EXPECT_EQ(policy::cuda_selection("rkv_official")->window_fp32, nullptr);
  EXPECT_EQ(policy::cuda_selection("h2o")->window_fp32, nullptr);
  // rkv_official keeps its importance logits after the head scratch: fp64, an array of the capacity per
  // query, its queries capped by the ring's window, in multiples of 256 bytes. The windowed files, whose
  // window scratch sits there, have none.
  const policy::CudaSelection* official = policy::cuda_selection("rkv_official");
  ASSERT_NE(official->extra_scratch, nullptr);
  auto extra = [&](const std::string& spec, int capacity, int ring_window) {
    const policy::CudaParams params = policy::bind_cuda_params(*policy::make_policy(spec));
    return official->extra_scratch(params, capacity, ring_window);
  };
  EXPECT_EQ(extra("rkv_official", 1088, 64), 8 * 8 * 1088);
  EXPECT_EQ(extra("rkv_official:queries=3", 1000, 64), (8 * 3 * 1000 + 255) / 256 * 256);
  EXPECT_EQ(extra("rkv_official:queries=16", 1000, 8), 8 * 8 * 1000);
  for (const char* name : {"snapkv", "rkv", "vase"})
    EXPECT_EQ(policy::cuda_selection(name)->extra_scratch, nullptr) << name;
  // Files without options bind an empty block.
  EXPECT_EQ(bound("random_pp"), std::vector<unsigned char>(policy::kCudaParamBytes, 0));
  EXPECT_EQ(bound("h2o_pp"), std::vector<unsigned char>(policy::kCudaParamBytes, 0));
}
#endif

// At Qwen3-4B's shape each kernel once (the CPU reference is serial: R-KV's n x n redundancy alone is
// ~1.5e11 multiply-adds there, so the option variants run only at the small shape).
class CudaScoringPolicyQwen : public testing::TestWithParam<std::string> {};

TEST_P(CudaScoringPolicyQwen, Qwen3FourBKeepsWhatTheCpuKeeps) {
  const auto policy = policy::make_policy(GetParam());
  check_policy(GetParam(), kQwen3_4b, qwen_rows(policy->protects_prompt() ? 100 : 0), 2002);
}

INSTANTIATE_TEST_SUITE_P(Policies, CudaScoringPolicyQwen,
                         testing::Values("snapkv", "snapkv_pp", "rkv_pp", "vase", "vase_pp", "h2o", "h2o_pp",
                                         "random_vrange_pp", "snapkv_pp:precision=fp32", "rkv_pp:precision=fp32",
                                         "vase_pp:precision=fp32"));

// Random calibration statistics in the real file format (|E q| < E|q|, RoPE frequencies of theta 1e6).
std::string write_random_stats(const Shape& shape, uint64_t seed) {
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
    stats.omega.push_back(static_cast<float>(1.0 / std::pow(1e6, 2.0 * f / shape.head_dim)));
    stats.freq_scale.push_back(1.0f);
  }
  stats.q_weight_norm.assign(size_t(shape.n_layers), 1.0f);
  const std::string path = ::testing::TempDir() + "/cuda_tri_" + shape.name + ".safetensors";
  policy::write_triattention_stats(path, stats);
  return path;
}

TEST(CudaTriAttention, SmallShapesKeepWhatTheCpuKeeps) {
  check_policy("triattention:stats=" + write_random_stats(kSmall, 31), kSmall, small_rows(5), 3003);
  check_policy("triattention:stats=" + write_random_stats(kSmall, 32) + ",max_offset=4", kSmall,
               small_rows(0), 3004);
}

// The round kernel scores a key against a few query heads a pass (triattention.cu): groups of 3 pad a
// pass of 4 with zero weights, groups of 6 take three passes of 2, and at head_dim 40 (20 bands, not a
// multiple of 8) a key is read element by element instead of 16 bytes at a time.
TEST(CudaTriAttention, GroupsThatTakeSeveralPassesOrPaddingKeepWhatTheCpuKeeps) {
  const Shape group_3{"group-3", 3, 2, 3, 64}, group_6{"group-6-dim-40", 3, 3, 6, 40};
  check_policy("triattention:stats=" + write_random_stats(group_3, 34), group_3, small_rows(5), 3005);
  check_policy("triattention:stats=" + write_random_stats(group_6, 35), group_6, small_rows(5), 3006);
}

TEST(CudaTriAttention, Qwen3FourBKeepsWhatTheCpuKeeps) {
  check_policy("triattention:stats=" + write_random_stats(kQwen3_4b, 33), kQwen3_4b, qwen_rows(100), 4004);
}

// ---- signals recorded by the forward ---------------------------------------------------------------

TEST(CudaSignals, QueryRingAndValueRangeMatchTheCpu) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    const char* name;
    int n_heads, n_kv, head_dim;
    bool norms;
  };
  for (const Case& c :
       {Case{"small", 4, 2, 32, false}, Case{"qwen3-4b", 32, 8, 128, true}, Case{"phi-4", 40, 10, 128, false}}) {
    SCOPED_TRACE(c.name);
    const int max_pages = 4;
    HostBatch h = ring_writer_batch(max_pages);
    const int ring_rows = kRingWriterRows, ring_window = kRingWriterWindow;
    const int qkv_cols = (c.n_heads + 2 * c.n_kv) * c.head_dim;
    const auto qkv_host = random_values(size_t(h.n_rows) * qkv_cols, 62, 2.0f);
    const auto qn_host = random_values(size_t(c.head_dim), 63, 0.3f, 1.0f);
    const auto kn_host = random_values(size_t(c.head_dim), 64, 0.3f, 1.0f);
    std::vector<float> inv_freq(size_t(c.head_dim / 2));
    for (int i = 0; i < c.head_dim / 2; ++i)
      inv_freq[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / c.head_dim));
    const int n_pages = h.n_seqs * max_pages;
    const size_t ring_elements = size_t(ring_rows) * c.n_heads * ring_window * c.head_dim;
    const size_t slots = size_t(n_pages) * c.n_kv * kPageSlots;
    std::vector<uint16_t> ring_out[2];
    std::vector<float> range_out[2], q_out[2];
    int i = 0;
    for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
      Matrix qkv(*b, DType::F32, h.n_rows, qkv_cols, "qkv"),
          q(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "q");
      Matrix qn(*b, DType::F32, 1, c.head_dim, "q_norm"), kn(*b, DType::F32, 1, c.head_dim, "k_norm");
      Matrix freq(*b, DType::F32, 1, c.head_dim / 2, "inv_freq");
      qkv.upload(qkv_host);
      qn.upload(qn_host);
      kn.upload(kn_host);
      freq.upload(inv_freq);
      KvLayerMemory kv(*b, n_pages, c.n_kv, kPageSlots, c.head_dim, 0);
      Guarded ring(*b, ring_elements * sizeof(uint16_t), "query ring"),
          range(*b, slots * sizeof(float), "value range");
      backend::KvLayer layer = kv.layer;
      layer.query_ring = static_cast<uint16_t*>(ring.data());
      layer.n_heads = c.n_heads;
      layer.ring_window = ring_window;
      layer.ring_rows = ring_rows;
      layer.value_range = static_cast<float*>(range.data());
      DeviceBatch d(*b, h);
      const backend::Rope rope{freq.view.as<const float>(), c.head_dim};
      b->qk_norm_rope_append(d.batch, qkv.view, c.norms ? qn.view : backend::View{},
                             c.norms ? kn.view : backend::View{}, 1e-6f, rope, layer, q.view, c.n_heads);
      ring_out[i].resize(ring_elements);
      b->download(ring_out[i].data(), ring.data(), ring_elements * sizeof(uint16_t));
      range_out[i].resize(slots);
      b->download(range_out[i].data(), range.data(), slots * sizeof(float));
      q_out[i] = q.download();
      EXPECT_TRUE(ring.sentinel_intact() && range.sentinel_intact() && kv.sentinels_intact());
      ++i;
    }
    // The ring is bf16 on both backends, each element the round-to-nearest-even of that backend's fp32
    // rotated query: the CPU's q output is that fp32 query, the CUDA q output its bf16 store, which
    // rounds the same way. Where the two rotations' fp32 roundings straddle a bf16 rounding point the
    // rings differ by one bf16 unit; everything else is equal.
    std::vector<uint16_t> want[2] = {std::vector<uint16_t>(ring_elements, 0),
                                     std::vector<uint16_t>(ring_elements, 0)};
    for (int s = 0; s < h.n_seqs; ++s) {
      const int rows = h.seq_row_begin[s + 1] - h.seq_row_begin[s], r = h.window[s];
      if (h.ring_row[s] < 0) continue;
      for (int row = std::max(0, rows - r); row < rows; ++row)
        for (int head = 0; head < c.n_heads; ++head)
          for (int e = 0; e < c.head_dim; ++e) {
            const size_t at = ((size_t(h.ring_row[s]) * c.n_heads + head) * ring_window +
                               size_t(h.appended[s] + row) % size_t(r)) * c.head_dim + e;
            const size_t from = (size_t(h.seq_row_begin[s] + row) * c.n_heads + head) * c.head_dim + e;
            for (int side = 0; side < 2; ++side) want[side][at] = f32_to_bf16(q_out[side][from]);
          }
    }
    EXPECT_EQ(ring_out[0], want[0]) << "the CPU ring holds the bf16 rounding of its fp32 queries";
    EXPECT_EQ(ring_out[1], want[1]) << "the CUDA ring holds the bits of its bf16 queries";
    size_t written = 0, one_unit = 0, other = 0;
    for (size_t j = 0; j < ring_elements; ++j) {
      written += want[0][j] != 0;
      const int diff = std::abs(int(ring_out[1][j]) - int(ring_out[0][j]));
      one_unit += diff == 1;
      other += diff > 1;
    }
    EXPECT_EQ(other, 0u) << "CPU and CUDA rings differ by more than one bf16 unit";
    EXPECT_LE(one_unit, written / 100) << "one-unit differences: " << one_unit << " of " << written;
    // 1 + 4 + 0 + 3 rows write one ring slot of every query head (an exact zero query is improbable).
    EXPECT_EQ(written, size_t(8) * c.n_heads * c.head_dim);
    EXPECT_EQ(range_out[1], range_out[0]) << "value ranges (max - min of the fp32 values, exact on both)";
  }
}

// H2O's signal: the attention op adds each slot's softmax weight (summed over its GQA group's query
// heads) into the pool's attention_mass on both backends (CUDA: attention_mass.cu after the attention
// kernels; CPU: accumulate_attention). Decode rows, prefill chunks (each row sees the slots before it;
// several tiles of the prefill launches) and mass already there (the sums accumulate).
TEST(CudaSignals, AttentionMassMatchesTheCpu) {
  BackendPair pair = make_pair();
  KVDICE_REQUIRE_GPU(pair);
  struct Case {
    const char* name;
    int n_heads, n_kv, head_dim;
    std::vector<int> rows, lengths;
  };
  std::vector<Case> cases = {
      {"decode hd32 g2", 4, 2, 32, {1, 1, 1}, {0, 17, 300}},
      {"decode qwen3-4b", 32, 8, 128, {1, 1}, {10, 2047}},
      {"decode phi-4", 40, 10, 128, {1, 1}, {10, 1500}},
      {"decode hd64 g7", 14, 2, 64, {1, 1}, {1000, 50}},
      {"prefill qwen3-4b", 32, 8, 128, {37, 5}, {0, 100}},
      {"prefill mixed hd16 mha", 4, 4, 16, {20, 1}, {3, 50}},
      // Prefill chunks over several 64 x 64 tiles of (row, group head) pairs and slots: a prompt's first
      // chunk, a decode row beside it, a later chunk; rows whose pairs straddle tiles (groups of 7);
      // head_dim 256 (eight staged chunks).
      {"prefill qwen3-4b tiles", 32, 8, 128, {300, 1, 130}, {0, 900, 70}},
      {"prefill hd64 g7 tiles", 14, 2, 64, {100, 3}, {20, 0}},
      {"prefill hd256 g2", 4, 2, 256, {70}, {5}},
  };
  // Enough (sequence, KV head) pairs to fill every SM (48 x 8 = 384 > 132): the narrow launch of the
  // logits' mass kernel, where the cases above take the wide one.
  Case many{"decode qwen3-4b batch 48", 32, 8, 128, std::vector<int>(48, 1), {}};
  for (int s = 0; s < 48; ++s) many.lengths.push_back(37 * s % 700);
  cases.push_back(many);
  // One split a sequence too (34 x 8 pairs fill an H100's or H200's SMs twice), but page tables too long
  // for the logits to sit in shared memory beside the stages (3,336 floats a head: 117 KB with them):
  // the decode attention's own mass from global memory.
  Case long_rows{"decode qwen3-4b batch 34, logits in global memory", 32, 8, 128, std::vector<int>(34, 1), {}};
  for (int s = 0; s < 34; ++s) long_rows.lengths.push_back(3300 - 11 * s);
  cases.push_back(long_rows);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    int max_slots = 0;
    for (size_t s = 0; s < c.rows.size(); ++s) max_slots = std::max(max_slots, c.lengths[s] + c.rows[s]);
    const int max_pages = (max_slots + kPageSlots - 1) / kPageSlots + 1;
    HostBatch h = HostBatch::make(c.rows, max_pages);
    for (size_t s = 0; s < c.rows.size(); ++s) {
      h.length[s] = c.lengths[s];
      h.appended[s] = c.lengths[s];
    }
    h.page_table.resize(size_t(h.n_seqs) * max_pages);
    std::iota(h.page_table.begin(), h.page_table.end(), 0);
    std::shuffle(h.page_table.begin(), h.page_table.end(), std::mt19937_64(71));
    const int n_pages = h.n_seqs * max_pages;
    const size_t slots = size_t(n_pages) * c.n_kv * kPageSlots;
    const auto k_host = random_values(slots * c.head_dim, 72), v_host = random_values(slots * c.head_dim, 73);
    const std::vector<int32_t> pos_host(slots, 0);
    const auto q_host = random_values(size_t(h.n_rows) * c.n_heads * c.head_dim, 74, 2.0f);
    // Slots some row of the step sees: [0, length + rows) of each sequence, every KV head.
    std::vector<bool> visible(slots, false);
    for (int s = 0; s < h.n_seqs; ++s)
      for (int g = 0; g < c.n_kv; ++g)
        for (int j = 0; j < c.lengths[size_t(s)] + c.rows[size_t(s)]; ++j)
          visible[(size_t(h.page_table[size_t(s) * max_pages + j / kPageSlots]) * c.n_kv + g) * kPageSlots +
                  j % kPageSlots] = true;
    // First from zero (the step's weights alone), then onto mass already there (the sums accumulate).
    for (const bool from_zero : {true, false}) {
      SCOPED_TRACE(from_zero ? "from zero" : "accumulating");
      std::vector<float> mass_before(slots, 0.0f);
      std::mt19937_64 rng(75);
      if (!from_zero)
        for (float& x : mass_before) x = static_cast<float>(rng() % 1000) / 100.0f;
      std::vector<float> mass[2];
      int i = 0;
      for (Backend* b : {pair.cpu.get(), pair.gpu.get()}) {
        KvLayerMemory kv(*b, n_pages, c.n_kv, kPageSlots, c.head_dim, 0);
        kv.upload(k_host, v_host, pos_host);
        Guarded mass_memory(*b, slots * sizeof(float), "attention mass");
        b->upload(mass_memory.data(), mass_before.data(), slots * sizeof(float));
        backend::KvLayer layer = kv.layer;
        layer.attention_mass = static_cast<float*>(mass_memory.data());
        Matrix q(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "q");
        Matrix o(*b, b->activation_dtype(), h.n_rows, int64_t{c.n_heads} * c.head_dim, "out");
        q.upload(q_host);
        DeviceBatch d(*b, h);
        b->attention(d.batch, q.view, layer, o.view, c.n_heads, 1.0f / std::sqrt(float(c.head_dim)));
        mass[i].resize(slots);
        b->download(mass[i].data(), mass_memory.data(), slots * sizeof(float));
        EXPECT_TRUE(mass_memory.sentinel_intact() && kv.sentinels_intact() && o.memory.sentinel_intact());
        ++i;
      }
      size_t changed = 0;
      for (size_t j = 0; j < slots; ++j) {
        if (!visible[j]) {
          EXPECT_EQ(mass[0][j], mass_before[j]) << "CPU, slot " << j << " that no row sees";
          EXPECT_EQ(mass[1][j], mass_before[j]) << "CUDA, slot " << j << " that no row sees";
        }
        changed += mass[1][j] != mass_before[j];
      }
      EXPECT_GT(changed, size_t(0));
      // fp32 logits and exp on both sides, in different orders: about 1e-6 relative.
      EXPECT_LE(relative_error(mass[1], mass[0]), from_zero ? 1e-4 : 1e-5) << "attention mass";
      if (from_zero) {
        // Each row's weights sum to one per query head: the step adds n_rows · n_heads in all.
        double total = 0.0;
        for (float x : mass[1]) total += x;
        EXPECT_NEAR(total, double(h.n_rows) * c.n_heads, 1e-3 * h.n_rows * c.n_heads);
      }
    }
  }
}

}  // namespace
}  // namespace kvdice::test
