// Every policy's keep-set on the hand-built candidate sets of tests/fixtures/policies/goldens.json
// equals the independent numpy reference of its rule (tools/make_policy_goldens.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "policy/eviction_policy.h"
#include "policy/triattention_stats.h"

namespace kvdice::policy {
namespace {

struct Case {
  std::vector<int32_t> positions;
  std::vector<float> keys, queries, value_range, attention_mass;
  SelectionInput input;
};

Case load_case(const nlohmann::json& j) {
  Case c;
  c.positions = j["positions"].get<std::vector<int32_t>>();
  c.keys = j["keys"].get<std::vector<float>>();
  c.queries = j["window_queries"].get<std::vector<float>>();
  c.value_range = j["value_range"].get<std::vector<float>>();
  c.attention_mass = j["attention_mass"].get<std::vector<float>>();
  SelectionInput& in = c.input;
  in.layer = j["layer"];
  in.kv_head = j["kv_head"];
  in.round = j["round"];
  in.key = {j["key"][0].get<uint32_t>(), j["key"][1].get<uint32_t>()};
  in.n_candidates = j["n_candidates"];
  in.keep = j["keep"];
  in.budget = j["budget"];
  in.appended = j["appended"];
  in.head_dim = j["head_dim"];
  in.group = j["group"];
  in.n_queries = j["n_queries"];
  return c;
}

TEST(PolicyGoldens, KeepSetsEqualTheNumpyReference) {
  std::ifstream file(std::string(KVDICE_FIXTURES_DIR) + "/policies/goldens.json");
  ASSERT_TRUE(file) << "missing tests/fixtures/policies/goldens.json";
  const nlohmann::json doc = nlohmann::json::parse(file);
  std::vector<Case> cases;
  for (const auto& j : doc["cases"]) cases.push_back(load_case(j));
  std::set<std::string> seen;
  for (const auto& g : doc["goldens"]) {
    const std::string spec = g["policy"];
    Case& c = cases.at(g["case"].get<size_t>());
    SelectionInput in = c.input;
    in.positions = c.positions;
    in.n_protected = g["n_protected"];
    auto policy = make_policy(spec);
    const SignalNeeds needs = policy->needs();
    // Hand over only what the policy declares, as the eviction round does.
    if (needs.window_queries) {
      in.keys = c.keys;
      in.window_queries = c.queries;
    }
    if (needs.value_ranges) in.value_range = c.value_range;
    if (needs.accumulated_attention) in.attention_mass = c.attention_mass;
    std::vector<uint8_t> keep(static_cast<size_t>(in.n_candidates), 7);
    policy->select(in, keep);
    std::vector<int> kept;
    for (int s = 0; s < in.n_candidates; ++s) {
      ASSERT_TRUE(keep[s] == 0 || keep[s] == 1) << spec;
      if (keep[s]) kept.push_back(s);
    }
    EXPECT_EQ(kept, g["expected_keep"].get<std::vector<int>>()) << spec << " on case " << g["case"];
    seen.insert(std::string(policy->name()));
  }
  // Every policy with a rule beyond "keep everything" has goldens (the random ones are
  // pinned by test_random_policies' documented draw).
  for (const char* name : {"random_block_pp", "random_pp_rec", "carrier_mix", "carrier_softmix", "anti_mix", "random_vrange_pp",
                           "anti_softmix", "snapkv", "snapkv_pp", "h2o", "h2o_pp", "vase",
                           "vase_pp", "rkv", "rkv_pp", "rkv_official"})
    EXPECT_TRUE(seen.count(name)) << name;
}

// TriAttention scores the whole model once per round: its statistics go through the real file format
// (written, then read back by the policy), its keys through RoundKeys as the CPU round hands them over.
TEST(PolicyGoldens, TriAttentionKeepSetsEqualTheNumpyReference) {
  std::ifstream file(std::string(KVDICE_FIXTURES_DIR) + "/policies/goldens.json");
  ASSERT_TRUE(file);
  const nlohmann::json doc = nlohmann::json::parse(file);
  int checked = 0;
  for (const auto& g : doc["triattention_goldens"]) {
    const nlohmann::json& c = doc["triattention_cases"].at(g["case"].get<size_t>());
    const int L = c["n_layers"], H = c["n_kv_heads"], group = c["group"], d = c["head_dim"],
              n = c["n_candidates"];
    TriAttentionStats stats;
    stats.n_layers = L;
    stats.n_heads = H * group;
    stats.n_kv_heads = H;
    stats.head_dim = d;
    stats.q_mean_real = c["q_mean_real"].get<std::vector<float>>();
    stats.q_mean_imag = c["q_mean_imag"].get<std::vector<float>>();
    stats.q_abs_mean = c["q_abs_mean"].get<std::vector<float>>();
    stats.omega = c["omega"].get<std::vector<float>>();
    stats.freq_scale = c["freq_scale"].get<std::vector<float>>();
    stats.q_weight_norm.assign(static_cast<size_t>(L), 1.0f);
    const std::string path = ::testing::TempDir() + "/tri_golden.safetensors";
    write_triattention_stats(path, stats);
    const std::string spec = g["policy"].get<std::string>();
    const size_t colon = spec.find(':');
    auto policy = make_policy(colon == std::string::npos
                                  ? spec + ":stats=" + path
                                  : spec.substr(0, colon) + ":stats=" + path + "," + spec.substr(colon + 1));
    ASSERT_TRUE(policy->scores_whole_round());
    const std::vector<float> keys = c["keys"].get<std::vector<float>>();
    const std::vector<int32_t> positions = c["positions"].get<std::vector<int32_t>>();
    RoundKeys rk;
    rk.n_layers = L;
    rk.n_kv_heads = H;
    rk.head_dim = d;
    rk.n_candidates = n;
    rk.n_protected = c["n_protected"];
    rk.appended = c["appended"];
    rk.key = [&](int layer, int head, int slot) {
      return keys.data() + ((int64_t{layer} * H + head) * n + slot) * d;
    };
    rk.position = [&](int, int head, int slot) { return positions[static_cast<size_t>(head) * n + slot]; };
    const std::vector<double> score = policy->score_round(rk);
    ASSERT_EQ(score.size(), static_cast<size_t>(H) * n);
    for (int head = 0; head < H; ++head) {
      SelectionInput in;
      in.kv_head = head;
      in.n_candidates = n;
      in.keep = c["keep"];
      in.n_protected = c["n_protected"];
      in.positions = std::span<const int32_t>(positions.data() + int64_t{head} * n, static_cast<size_t>(n));
      in.round_score = std::span<const double>(score.data() + int64_t{head} * n, static_cast<size_t>(n));
      std::vector<uint8_t> keep(static_cast<size_t>(n), 7);
      policy->select(in, keep);
      std::vector<int> kept;
      for (int s = 0; s < n; ++s)
        if (keep[s]) kept.push_back(s);
      EXPECT_EQ(kept, g["expected_keep"][head].get<std::vector<int>>())
          << spec << " on case " << g["case"] << " head " << head;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14);
}

}  // namespace
}  // namespace kvdice::policy
