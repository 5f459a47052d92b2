// End-to-end parity of the CUDA backend (run on the GPU machine; skipped without a GPU):
// - whole-model logits of every committed fixture family on CUDA against the CPU reference;
// - the engine on CUDA: a teacher-forced random_pp run whose retention logs equal the CPU's, and a
//   mixed batch that equals each sequence run alone; decode graphs keyed by every policy in use;
// - random-weight checkpoints of real shapes made on the GPU machine by tools/gpu/make_checkpoint.py,
//   against transformers' bf16 logits (tools/gpu/golden_logits.py), when present under .gpu/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "backend/backend.h"
#include "backend/row_diff.h"
#include "backend/step_storage.h"
#include "core/json.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "model/forward.h"
#include "model/random_weights.h"

namespace kvdice {
namespace {

namespace fs = std::filesystem;

bool have_gpu() { return backend::cuda_available(); }

// Runs a prompt (one prefill step) then feeds `continuation` one decode step at a time through a
// ForwardPass on `be`, returning the logits rows: after the prefill, then after each fed token.
std::vector<std::vector<float>> run_rows(const model::Model& m, backend::Backend& be,
                                         const std::vector<int>& prompt, const std::vector<int>& continuation) {
  const int total = static_cast<int>(prompt.size() + continuation.size());
  model::ForwardPass pass(m, be, static_cast<int>(prompt.size()), 1, 1);
  kv::KvPool pool(be, m.kv_shape(), (total + 15) / 16 + 1);
  const std::vector<int32_t> pages = pool.allocate(total);
  backend::StepStorage storage(be, 1, static_cast<int>(prompt.size()), static_cast<int>(pages.size()));
  backend::StepBatch& b = storage.host();
  std::copy(pages.begin(), pages.end(), b.page_table);
  std::vector<std::vector<float>> rows;
  int length = 0;
  auto step = [&](const std::vector<int>& tokens) {
    b.n_seqs = 1;
    b.n_rows = static_cast<int>(tokens.size());
    b.max_rows_per_seq = b.n_rows;
    b.seq_row_begin[0] = 0;
    b.seq_row_begin[1] = b.n_rows;
    b.length[0] = length;
    b.appended[0] = length;
    for (int i = 0; i < b.n_rows; ++i) {
      b.tokens[i] = tokens[static_cast<size_t>(i)];
      b.row_seq[i] = 0;
    }
    storage.upload_all();
    const backend::StepBatch view = storage.device();
    const backend::View logits = pass.run(view, pool, false);
    be.advance(view);
    std::vector<float> row(static_cast<size_t>(logits.cols));
    be.download_matrix(logits, row.data());
    rows.push_back(std::move(row));
    length += b.n_rows;
  };
  step(prompt);
  for (int t : continuation) step({t});
  return rows;
}

using test::RowDiff;

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

class FixtureOnCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureOnCuda, LogitsMatchTheCpuAtPrefillAndEveryDecodeStep) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  const engine::ModelBundle bundle = engine::load_model_bundle(fs::path(KVDICE_FIXTURES_DIR) / GetParam());
  const model::Model& m = *bundle.model;
  const std::vector<int> prompt =
      engine::encode_raw_prompt(bundle, "The quick brown fox jumps over the lazy dog 12 + 7");
  auto cpu = backend::make_cpu_backend(1);
  auto cuda = backend::make_backend({"cuda"});
  // Greedy continuation from the CPU, fed to both so the rows stay comparable.
  std::vector<int> continuation;
  {
    std::vector<int> fed;
    for (int i = 0; i < 24; ++i) {
      const auto rows = run_rows(m, *cpu, prompt, fed);
      fed.push_back(argmax(rows.back()));
    }
    continuation = fed;
  }
  const auto want = run_rows(m, *cpu, prompt, continuation);
  const auto got = run_rows(m, *cuda, prompt, continuation);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  int top1 = 0, ties = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    const RowDiff d = test::compare_rows(got[r], want[r]);
    worst = std::max(worst, d.relative);
    top1 += d.top1_equal ? 1 : 0;
    ties += d.near_tie ? 1 : 0;
    EXPECT_LT(d.relative, 3e-2) << GetParam() << " row " << r;
    // bf16 against fp32: a different top-1 is allowed only where the fp32 logits nearly tie.
    EXPECT_TRUE(d.top1_equal || d.near_tie) << GetParam() << " row " << r;
  }
  std::printf(
      "[cuda-vs-cpu] %s: %zu rows, top-1 equal %d/%zu (the others near-ties: %d), worst relative error %.3e\n",
      GetParam().c_str(), want.size(), top1, want.size(), ties, worst);
}

INSTANTIATE_TEST_SUITE_P(Families, FixtureOnCuda, ::testing::Values("qwen3", "qwen2", "llama", "phi3"));

const engine::ModelBundle& qwen3() {
  static engine::ModelBundle b = engine::load_model_bundle(fs::path(KVDICE_FIXTURES_DIR) / "qwen3");
  return b;
}

engine::EngineConfig budgeted(const std::string& policy) {
  engine::EngineConfig c;
  c.kv.policy = policy;
  c.kv.budget = {32, 8};
  c.eviction_seed = 11;
  c.max_batch = 8;
  c.max_context = 512;
  // A pool of what the test can use, not 90 % of the device: the GPU suites run side by side.
  c.pool.kv_slots = int64_t{c.max_batch} * c.max_context;
  return c;
}

TEST(CudaEngine, TeacherForcedRetentionLogsEqualTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  for (const std::string policy :
       {"random_pp", "random", "random_shared", "recency_pp", "recency", "streaming"}) {
    std::vector<std::vector<kv::RoundRecord>> logs;
    std::vector<std::vector<float>> logprobs;
    for (const std::string name : {"cpu", "cuda"}) {
      auto be = backend::make_backend({name, 1});
      engine::Engine eng(*qwen3().model, *be, budgeted(policy));
      std::vector<kv::RoundRecord> log;
      eng.set_round_observer([&](uint64_t, const kv::RoundRecord& r) { log.push_back(r); });
      engine::GenerationRequest req;
      req.prompt = engine::encode_raw_prompt(qwen3(), "remember the passcode 4417 please");
      for (int i = 0; i < 120; ++i) req.forced_tokens.push_back((i * 37 + 5) % 700);
      req.stream_id = 3;
      eng.submit(req);
      eng.run();
      logprobs.push_back(eng.take_finished().at(0).forced_logprobs);
      logs.push_back(std::move(log));
    }
    ASSERT_GT(logs[0].size(), 5u) << policy;
    ASSERT_EQ(logs[0].size(), logs[1].size()) << policy;
    for (size_t i = 0; i < logs[0].size(); ++i) {
      EXPECT_EQ(logs[0][i].at_token, logs[1][i].at_token) << policy << " round " << i;
      EXPECT_EQ(logs[0][i].kept_positions, logs[1][i].kept_positions) << policy << " round " << i;
    }
    ASSERT_EQ(logprobs[0].size(), logprobs[1].size());
    // bf16 storage on CUDA: log-probs agree to about 1% of their size.
    for (size_t i = 0; i < logprobs[0].size(); ++i)
      EXPECT_NEAR(logprobs[0][i], logprobs[1][i], 0.05 + 0.02 * std::abs(logprobs[0][i]))
          << policy << " step " << i;
  }
}

TEST(CudaEngine, MixedBatchEqualsEachSequenceAlone) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  auto be = backend::make_backend({"cuda"});
  const std::vector<std::string> texts = {"a", "The quick brown fox jumps over the lazy dog again and again",
                                          "12 + 7"};
  const engine::SamplingParams sampling{0.8f, 0.95f, 0, 17};
  auto run = [&](const std::vector<size_t>& which) {
    engine::Engine eng(*qwen3().model, *be, budgeted("random_pp"));
    for (size_t i : which) {
      engine::GenerationRequest r;
      r.prompt = engine::encode_raw_prompt(qwen3(), texts[i]);
      r.max_new_tokens = 70;
      r.sampling = sampling;
      r.stream_id = i;
      r.ignore_eos = true;
      eng.submit(r);
    }
    eng.run();
    auto out = eng.take_finished();
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return out;
  };
  const auto together = run({0, 1, 2});
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = run({i});
    EXPECT_EQ(alone[0].tokens, together[i].tokens) << "sequence " << i;
    EXPECT_EQ(alone[0].stats.eviction_rounds, together[i].stats.eviction_rounds);
  }
}

// Three sampled requests "<tag>0..2" through `eng`; their tokens in submission order.
std::vector<std::vector<int>> run_three(engine::Engine& eng, const std::string& tag, int max_new,
                                        uint64_t seed) {
  for (int i = 0; i < 3; ++i) {
    engine::GenerationRequest r;
    r.prompt = engine::encode_raw_prompt(qwen3(), tag + std::to_string(i));
    r.max_new_tokens = max_new;
    r.sampling = {0.9f, 0.9f, 0, seed};
    r.ignore_eos = true;
    eng.submit(r);
  }
  eng.run();
  auto out = eng.take_finished();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<std::vector<int>> tokens;
  for (const auto& r : out) tokens.push_back(r.tokens);
  return tokens;
}

TEST(CudaEngine, GraphReplayEqualsEagerSteps) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  auto be = backend::make_backend({"cuda"});
  std::vector<std::vector<std::vector<int>>> tokens;
  for (const bool graphs : {false, true}) {
    engine::EngineConfig config = budgeted("random_pp");
    config.graphs = graphs;
    engine::Engine eng(*qwen3().model, *be, config);
    tokens.push_back(run_three(eng, "graph ", 90, 5));
  }
  ASSERT_EQ(tokens[0].size(), 3u);
  EXPECT_EQ(tokens[0], tokens[1]);
}

// Graphs bake in their engine's buffers: a second engine on the same backend, with the same step
// shapes (hence the same graph keys), must record its own graphs, never replay the first one's (the
// bench's latency protocol once replayed a freed pool's graph and faulted).
TEST(CudaEngine, ASecondEngineNeverReplaysTheFirstEnginesGraphs) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  auto be = backend::make_backend({"cuda"});
  engine::EngineConfig config = budgeted("random_pp");
  config.kv_pool_bytes = int64_t{64} << 20;  // two pools at once: neither takes the whole device
  engine::Engine first(*qwen3().model, *be, config);
  run_three(first, "first ", 60, 7);                   // records the 3-row decode graph
  engine::Engine second(*qwen3().model, *be, config);  // alive together: its buffers differ from the first's
  const auto replayed = run_three(second, "second ", 60, 7);
  config.graphs = false;
  engine::Engine eager(*qwen3().model, *be, config);
  EXPECT_EQ(replayed, run_three(eager, "second ", 60, 7));
}

// The graph-key tests: requests under their own policy (T = 32, r = 8), the finished results in request
// order and every round's kept positions; a run with graphs must equal the same run without.
struct GraphOutcome {
  std::vector<engine::GenerationResult> results;
  std::vector<std::pair<uint64_t, std::vector<std::vector<std::vector<int32_t>>>>> rounds;  // (request, kept)
};

engine::GenerationRequest policy_request(const std::string& text, std::optional<std::string> policy, int max_new) {
  engine::GenerationRequest r;
  r.prompt = engine::encode_raw_prompt(qwen3(), text);
  r.max_new_tokens = max_new;
  r.sampling = {0.9f, 0.9f, 0, 31};
  r.ignore_eos = true;
  if (policy) r.kv = engine::KvSettings{*policy, kv::BudgetSpec{32, 8}};
  return r;
}

void take_sorted_results(engine::Engine& eng, GraphOutcome& out) {
  out.results = eng.take_finished();
  std::sort(out.results.begin(), out.results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
}

void expect_graphs_change_nothing(const GraphOutcome& eager, const GraphOutcome& graphed, size_t first,
                                  const std::string& label) {
  ASSERT_EQ(graphed.results.size(), eager.results.size()) << label;
  for (size_t i = first; i < eager.results.size(); ++i) {
    const auto &a = eager.results[i], &b = graphed.results[i];
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i << label;
    EXPECT_EQ(a.stats.eviction_rounds, b.stats.eviction_rounds) << "request " << i << label;
    EXPECT_EQ(a.stats.final_resident_slots, b.stats.final_resident_slots) << "request " << i << label;
    EXPECT_EQ(a.stats.peak_resident_slots, b.stats.peak_resident_slots) << "request " << i << label;
  }
  ASSERT_EQ(eager.rounds.size(), graphed.rounds.size()) << label;
  for (size_t i = 0; i < eager.rounds.size(); ++i) {
    EXPECT_EQ(eager.rounds[i].first, graphed.rounds[i].first) << "round " << i << label;
    EXPECT_EQ(eager.rounds[i].second, graphed.rounds[i].second)
        << "round " << i << " of request " << eager.rounds[i].first << label;
  }
}

// A decode graph is keyed by the batch size and the whole set of policies in use. With more than 40
// policies in the table, a step of two rows running {random_pp, policy index 43} must not replay the graph
// recorded for two rows running {random_pp, full}: the replay would skip policy 43's eviction while the
// host counts its rounds, and its sequence would outgrow its reservation into another's pages. Every
// sequence's tokens, rounds, resident length and retention log must equal the same run without graphs.
TEST(CudaEngine, GraphKeyCoversEveryPolicyInUsePastTheFortieth) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  auto be = backend::make_backend({"cuda"});
  auto run = [&](bool graphs) {
    engine::EngineConfig config = budgeted("random_pp");
    config.graphs = graphs;
    config.max_batch = 2;
    engine::Engine eng(*qwen3().model, *be, config);
    GraphOutcome out;
    eng.set_round_observer(
        [&](uint64_t id, const kv::RoundRecord& r) { out.rounds.emplace_back(id, r.kept_positions); });
    // Policies 1..41 of the table (one token each: no decode step), then full as 42 and the policy
    // under test as 43.
    for (int k = 1; k <= 41; ++k)
      eng.submit(policy_request("filler", fmt::format("random_pp_rec:recent={}", k / 100.0), 1));
    eng.run();
    eng.submit(policy_request("keep everything", "full", 90));
    eng.submit(policy_request("the default policy", std::nullopt, 90));
    eng.run();  // records the graphs of two rows running {random_pp} (full never evicts)
    eng.submit(policy_request("the forty-third policy", "random_block_pp:block=4", 90));
    eng.submit(policy_request("the default policy again", std::nullopt, 90));
    eng.run();  // two rows running {random_pp, random_block_pp:block=4}
    take_sorted_results(eng, out);
    return out;
  };
  const GraphOutcome eager = run(false), graphed = run(true);
  ASSERT_EQ(eager.results.size(), 45u);
  expect_graphs_change_nothing(eager, graphed, 41, "");
  EXPECT_GT(eager.results[43].stats.eviction_rounds, 5) << "the forty-third policy must run rounds";
}

// A policy id goes to another policy once no request holds it and the table is full. The decode graph
// recorded for two rows running {random_pp, the former policy} bakes in that policy's selection launch
// and device options: a step of two rows running {random_pp, the new policy at the same id} must not
// replay it. Tokens, rounds, resident lengths and retention logs equal the same run without graphs, with
// the sampled tokens read one step late (the default) and at once (a round observer).
TEST(CudaEngine, APolicyIdReusedForAnotherPolicyRecordsItsOwnGraph) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  auto be = backend::make_backend({"cuda"});
  const std::string former = "random_block_pp:block=4", next = "random_pp_rec:recent=0.75";
  auto run = [&](bool graphs, bool observe) {
    engine::EngineConfig config = budgeted("random_pp");
    config.graphs = graphs;
    config.max_batch = 2;
    engine::Engine eng(*qwen3().model, *be, config);
    GraphOutcome out;
    if (observe)
      eng.set_round_observer(
          [&](uint64_t id, const kv::RoundRecord& r) { out.rounds.emplace_back(id, r.kept_positions); });
    int former_id = -1;
    {
      engine::PolicyTable::Hold hold = eng.hold_policy(former);
      former_id = hold.id();
    }
    eng.submit(policy_request("the former policy", former, 90));
    eng.submit(policy_request("the default policy", std::nullopt, 90));
    eng.run();  // records the graphs of two rows running {random_pp, former}
    // The rest of the table (one token each: no decode step): the former policy's place is now the one
    // held least recently.
    for (int k = 2; k < engine::kMaxPolicies; ++k)
      eng.submit(policy_request("filler", fmt::format("random_pp_rec:recent={}", k / 100.0), 1));
    eng.run();
    EXPECT_EQ(eng.hold_policy(next).id(), former_id) << "the new policy must take the former one's id";
    eng.submit(policy_request("the next policy", next, 90));
    eng.submit(policy_request("the default policy again", std::nullopt, 90));
    eng.run();  // two rows running {random_pp, next}, next at the former policy's id
    take_sorted_results(eng, out);
    return out;
  };
  for (const bool observe : {false, true}) {
    const GraphOutcome eager = run(false, observe), graphed = run(true, observe);
    ASSERT_EQ(eager.results.size(), 2u + (engine::kMaxPolicies - 2) + 2u);
    expect_graphs_change_nothing(eager, graphed, 0, observe ? " (observed)" : "");
    EXPECT_GT(eager.results.at(eager.results.size() - 2).stats.eviction_rounds, 5)
        << "the next policy must run rounds";
  }
}

// The engine at real shapes: random weights of a shape in configs/shapes/ cut to two layers (the KV
// heads, head_dim, GQA group, hidden size and vocabulary stay the model's), T = 1024, r = 64. Every
// policy that selects by position and draw runs in one batch, each on a prompt longer than the budget
// and one shorter, teacher-forced through several rounds; the retention logs of every (layer, KV head)
// must equal the CPU's. The scoring policies read attention the bf16 forward computes differently
// from the fp32 one, so their engine runs cannot be bit-identical; their kernels' parity at these
// shapes is test_cuda_real_shapes.cpp's.
class CudaEngineRealShape : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineRealShape, TeacherForcedRetentionLogsEqualTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  model::ModelConfig config =
      model::read_shape_config(fs::path(KVDICE_SOURCE_DIR) / "configs" / "shapes" / (GetParam() + ".json"));
  config.n_layers = 2;
  // Weights with std 0.05 at the Qwen2.5-0.5B shape's width and std * sqrt(hidden) fixed beyond it: at a
  // fixed std, a wider model without QK norm (Phi-4, 5,120) gets attention logits about hidden / 896 times
  // larger, a softmax sharp enough that bf16 rounding of K moved its log-probabilities by up to 0.7 nats
  // while every kept position matched. Phi-4 gets 0.021, about a real checkpoint's 0.02.
  const float stddev = 0.05f * std::sqrt(std::min(1.0f, 896.0f / static_cast<float>(config.hidden)));
  const auto m = model::make_random_model(config, 34, stddev);
  const std::vector<std::string> policies = {"random_pp",  "random",          "random_shared", "recency_pp",
                                             "recency",    "streaming",       "random_block_pp",
                                             "random_pp_rec"};
  const kv::BudgetSpec budget{1024, 64};
  const int prompt_lengths[2] = {1100, 1000};  // longer and shorter than T
  const int forced = 200;                      // 3 rounds after the long prompt, 2 after the short one
  // Per backend: request id -> rounds, and the forced log-probabilities in submission order.
  std::vector<std::map<uint64_t, std::vector<kv::RoundRecord>>> logs(2);
  std::vector<std::vector<std::vector<float>>> logprobs(2);
  std::vector<std::vector<uint64_t>> ids(2);
  int i = 0;
  for (const std::string name : {"cpu", "cuda"}) {
    auto be = backend::make_backend({name, 0});  // every core for the CPU reference
    engine::EngineConfig c;
    c.kv.policy = "random_pp";
    c.kv.budget = budget;
    c.eviction_seed = 34;
    c.max_batch = 2 * static_cast<int>(policies.size());
    c.max_context = 2048;
    c.pool.kv_slots = int64_t{c.max_batch} * c.max_context;
    engine::Engine eng(*m, *be, c);
    eng.set_round_observer([&](uint64_t id, const kv::RoundRecord& r) { logs[i][id].push_back(r); });
    for (size_t p = 0; p < policies.size(); ++p)
      for (int j = 0; j < 2; ++j) {
        engine::GenerationRequest req;
        for (int t = 0; t < prompt_lengths[j]; ++t)
          req.prompt.push_back(static_cast<int>((t * 7919 + 13 * p + j) % static_cast<size_t>(config.vocab)));
        for (int t = 0; t < forced; ++t) req.forced_tokens.push_back((t * 37 + 5 + int(p)) % config.vocab);
        req.stream_id = 2 * p + j;
        req.kv = engine::KvSettings{policies[p], budget};
        ids[i].push_back(eng.submit(req));
      }
    eng.run();
    auto out = eng.take_finished();
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const auto& r : out) logprobs[i].push_back(r.forced_logprobs);
    ++i;
  }
  ASSERT_EQ(logprobs[0].size(), 2 * policies.size());
  ASSERT_EQ(logprobs[1].size(), logprobs[0].size());
  for (size_t n = 0; n < ids[0].size(); ++n) {
    const std::string what = policies[n / 2] + (n % 2 ? " (prompt shorter than T)" : " (prompt longer than T)");
    const auto& cpu = logs[0][ids[0][n]];
    const auto& gpu = logs[1][ids[1][n]];
    EXPECT_EQ(cpu.size(), n % 2 ? 2u : 3u) << what;
    ASSERT_EQ(cpu.size(), gpu.size()) << what;
    for (size_t r = 0; r < cpu.size(); ++r) {
      EXPECT_EQ(cpu[r].at_token, gpu[r].at_token) << what << " round " << r;
      ASSERT_EQ(cpu[r].kept_positions.size(), gpu[r].kept_positions.size()) << what;
      for (size_t l = 0; l < cpu[r].kept_positions.size(); ++l)
        for (size_t g = 0; g < cpu[r].kept_positions[l].size(); ++g)
          EXPECT_EQ(cpu[r].kept_positions[l][g], gpu[r].kept_positions[l][g])
              << what << " round " << r << " layer " << l << " KV head " << g;
    }
    ASSERT_EQ(logprobs[0][n].size(), logprobs[1][n].size()) << what;
    // CUDA rounds activations to bf16 (a relative 2^-9 on every logit), so a log-probability's error
    // scales with the range of the logits, which the sequence's largest |log-probability| bounds from
    // below; scaling with the token's own value instead failed the Phi-4 shape's likelier tokens by a few
    // hundredths while every kept position matched.
    double range = 0;
    for (const float lp : logprobs[0][n]) range = std::max(range, std::abs(double{lp}));
    for (size_t t = 0; t < logprobs[0][n].size(); ++t)
      EXPECT_NEAR(logprobs[0][n][t], logprobs[1][n][t], 0.05 + 0.02 * range) << what << " step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEngineRealShape, ::testing::Values("qwen3-4b", "qwen2.5-0.5b", "phi-4"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// Two identical requests admitted in one step decode in lockstep, so every scoring policy must keep the
// same positions for both and their forced log-probabilities must be equal bit for bit: a selection that
// reads anything but its own row (scratch shared between the rows of a launch, a sum whose order varies)
// splits them. Qwen3-4B's heads (8 KV heads, GQA 4, head_dim 128) on two layers of random weights; the
// whole batch is prefilled in one step.
TEST(CudaEngineTwins, EveryScoringPolicyKeepsTheSameForTwinsInOneBatch) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  model::ModelConfig config =
      model::read_shape_config(fs::path(KVDICE_SOURCE_DIR) / "configs" / "shapes" / "qwen3-4b.json");
  config.n_layers = 2;
  const auto m = model::make_random_model(config, 35, 0.05f * std::sqrt(896.0f / static_cast<float>(config.hidden)));
  const std::vector<std::string> policies = {
      "snapkv", "snapkv_pp", "snapkv_pp:precision=fp32", "rkv", "rkv_pp", "rkv_pp:lambda=0.1,precision=fp32",
      "rkv_official", "vase", "vase_pp", "vase_pp:precision=fp32", "h2o", "h2o_pp"};
  const kv::BudgetSpec budget{256, 32};
  const int prompt_len = 200, forced = 160;  // rounds at 288 slots, then every 32 tokens: 3 a sequence
  auto be = backend::make_backend({"cuda"});
  engine::EngineConfig c;
  c.kv.policy = "snapkv_pp";
  c.kv.budget = budget;
  c.signals = {true, true, true};
  c.max_batch = 2 * static_cast<int>(policies.size());
  c.prefill_chunk = c.max_batch * prompt_len;
  c.max_context = 1024;
  c.pool.kv_slots = int64_t{c.max_batch} * c.max_context;
  engine::Engine eng(*m, *be, c);
  std::map<uint64_t, std::vector<kv::RoundRecord>> logs;
  eng.set_round_observer([&](uint64_t id, const kv::RoundRecord& r) { logs[id].push_back(r); });
  std::vector<uint64_t> ids;
  for (size_t p = 0; p < policies.size(); ++p)
    for (int twin = 0; twin < 2; ++twin) {
      engine::GenerationRequest req;
      for (int t = 0; t < prompt_len; ++t)
        req.prompt.push_back(static_cast<int>((t * 7919 + 31 * p) % static_cast<size_t>(config.vocab)));
      for (int t = 0; t < forced; ++t) req.forced_tokens.push_back(static_cast<int>((t * 37 + 5 + p) % config.vocab));
      req.stream_id = p;  // twins share every stream
      req.kv = engine::KvSettings{policies[p], budget};
      ids.push_back(eng.submit(req));
    }
  eng.run();
  auto out = eng.take_finished();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  ASSERT_EQ(out.size(), ids.size());
  for (size_t p = 0; p < policies.size(); ++p) {
    const auto& a = logs[ids[2 * p]];
    const auto& b = logs[ids[2 * p + 1]];
    EXPECT_GE(a.size(), 2u) << policies[p];
    ASSERT_EQ(a.size(), b.size()) << policies[p];
    for (size_t r = 0; r < a.size(); ++r)
      for (size_t l = 0; l < a[r].kept_positions.size(); ++l)
        for (size_t g = 0; g < a[r].kept_positions[l].size(); ++g)
          EXPECT_EQ(a[r].kept_positions[l][g], b[r].kept_positions[l][g])
              << policies[p] << " round " << r << " layer " << l << " KV head " << g;
    EXPECT_EQ(out[2 * p].forced_logprobs, out[2 * p + 1].forced_logprobs) << policies[p];
  }
}

// Checkpoints made on the GPU machine under .gpu/<name>/ with golden.json beside them.
std::vector<std::string> golden_checkpoints() {
  std::vector<std::string> names;
  const fs::path root = fs::path(KVDICE_SOURCE_DIR) / ".gpu";
  if (fs::is_directory(root))
    for (const auto& entry : fs::directory_iterator(root))
      if (fs::exists(entry.path() / "golden.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(TransformersParity, RandomWeightCheckpointsAgainstTransformersBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  const auto names = golden_checkpoints();
  if (names.empty())
    GTEST_SKIP() << "no .gpu/*/golden.json: made on the GPU machine by tools/gpu/run-parity.sh";
  auto cuda = backend::make_backend({"cuda"});
  for (const std::string& name : names) {
    const fs::path dir = fs::path(KVDICE_SOURCE_DIR) / ".gpu" / name;
    std::ifstream in(dir / "golden.json");
    const Json golden = Json::parse(in);
    const std::vector<int> prompt = golden["prompt"].get<std::vector<int>>();
    std::vector<int> greedy = golden["greedy_tokens"].get<std::vector<int>>();
    greedy.pop_back();  // the last one is predicted, never fed
    const int vocab = golden["vocab"].get<int>();
    const engine::ModelBundle bundle = engine::load_model_bundle(dir);
    const auto got = run_rows(*bundle.model, *cuda, prompt, greedy);
    std::ifstream lf(dir / "golden_logits.f32", std::ios::binary);
    Json report = Json::array();
    int top1 = 0, ties = 0;
    double worst = 0, worst_abs = 0;
    for (size_t r = 0; r < got.size(); ++r) {
      std::vector<float> want(static_cast<size_t>(vocab));
      lf.read(reinterpret_cast<char*>(want.data()),
              static_cast<std::streamsize>(want.size() * sizeof(float)));
      ASSERT_TRUE(lf) << "golden_logits.f32 too short at row " << r;
      const RowDiff d = test::compare_rows(got[r], want);
      top1 += d.top1_equal ? 1 : 0;
      ties += d.near_tie ? 1 : 0;
      worst = std::max(worst, d.relative);
      worst_abs = std::max(worst_abs, d.max_abs);
      EXPECT_TRUE(d.top1_equal || d.near_tie) << name << " row " << r;
      report.push_back({{"row", r},
                        {"top1_equal", d.top1_equal},
                        {"near_tie", d.near_tie},
                        {"relative", d.relative},
                        {"max_abs", d.max_abs}});
    }
    std::ofstream(dir / ("kvdice_parity_" + name + ".json"))
        << Json{{"checkpoint", name}, {"rows", report}}.dump(1);
    std::printf(
        "[transformers-parity] %s: %zu rows (prefill + %zu decode), top-1 agreement %d/%zu, worst relative "
        "error %.3e, worst max-abs %.3e, near-ties %d\n",
        name.c_str(), got.size(), got.size() - 1, top1, got.size(), worst, worst_abs, ties);
    EXPECT_LT(worst, 5e-2) << name;
  }
}

}  // namespace
}  // namespace kvdice
