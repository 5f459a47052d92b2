// Fork replay on the tiny Qwen3 fixture: a replay forced to token K with the recorded seed reproduces the
// recorded continuation token for token (generate and eval run records), the pinned arm holds the span in
// every site, the analytic survival agrees with the frequency the engine's rounds give, the eval record
// is graded with its task's grader, and bad input is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/run_summary.h"
#include "eval/results_store.h"
#include "eval/runner.h"
#include "probe/fork.h"
#include "error_text.h"

namespace kvdice::probe {
namespace {

using test::error_of;

namespace fs = std::filesystem;

const std::string kModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";

const engine::ModelBundle& bundle() {
  static engine::ModelBundle b = engine::load_model_bundle(kModel);
  return b;
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kvdice_fork_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A trace as `kvdice generate --json` writes it: random_pp, T=32, r=8, sampled at temperature 0.8.
struct Recorded {
  fs::path file;
  engine::GenerationResult result;
};

Recorded record_trace(const fs::path& dir, uint64_t seed) {
  auto backend = backend::make_cpu_backend(2);
  engine::EngineConfig config;
  config.kv = {"random_pp", {32, 8}};
  config.eviction_seed = seed;
  engine::Engine eng(*bundle().model, *backend, config);
  engine::GenerationRequest req;
  req.prompt = bundle().tokenizer->encode("hello world, this is a test of the fork");
  req.max_new_tokens = 60;
  req.ignore_eos = true;
  req.sampling = {0.8f, 1.0f, 0, seed};
  eng.submit(std::move(req));
  eng.run();
  Recorded r{dir / "trace.json", eng.take_finished().at(0)};
  std::ofstream(r.file) << engine::result_json(r.result, "", bundle().model->config(), 4).dump();
  return r;
}

ForkTrace generate_trace(const Recorded& rec, uint64_t seed) {
  ForkTrace t = load_generate_trace(rec.file, 0);
  t.budget = {32, 8};
  t.eviction_seed = seed;
  t.sampling = {0.8f, 1.0f, 0, seed};
  return t;
}

TEST(Fork, ReplayWithTheRecordedSeedReproducesTheTraceAndThePinHoldsTheSpan) {
  const fs::path dir = temp_dir("replay");
  const Recorded rec = record_trace(dir, 7);
  const ForkTrace trace = generate_trace(rec, 7);
  ASSERT_EQ(trace.prompt, rec.result.prompt);
  ForkConfig config;
  config.fork_at = 45;
  const int pl = static_cast<int>(trace.prompt.size());
  config.span = {pl + 2, pl + 4};  // two generated tokens, old enough to have lived through 3 rounds
  config.repetitions = 3;
  auto backend = backend::make_cpu_backend(2);
  const ForkReport report = run_fork_probe(bundle(), *backend, trace, config);
  ASSERT_EQ(report.arms.size(), 2u);
  const std::vector<int> tail(rec.result.tokens.begin() + 45, rec.result.tokens.end());
  const ForkArmResult& control = report.arms[0];
  const ForkArmResult& pinned = report.arms[1];
  ASSERT_EQ(control.continuations.size(), 3u);
  EXPECT_EQ(control.continuations[0], tail);  // repetition 0 samples with the recorded seed
  EXPECT_NE(control.continuations[1], tail);  // the others with seed + 1, + 2
  EXPECT_EQ(pinned.sites_holding, 1.0);
  EXPECT_EQ(pinned.layers_holding, 1.0);
  EXPECT_EQ(report.survival.rounds, 3);       // rounds at 40, 48 and 56 tokens; the fork reads 62
  EXPECT_EQ(report.fork_position, pl + 44);
  EXPECT_TRUE(report.survival.analytic);
  // Text lookup: the tokens found for a piece of the generated text cover it.
  const std::string piece = bundle().tokenizer->decode(std::vector<int>(rec.result.tokens.begin() + 20,
                                                                        rec.result.tokens.begin() + 23));
  for (const bool last : {false, true}) {
    const auto [first, end] = find_generated_text(bundle(), trace, piece, last, "--span-text");
    ASSERT_LT(first, end);
    auto text = [&](int a, int b) {
      return bundle().tokenizer->decode(std::vector<int>(trace.generated.begin() + a, trace.generated.begin() + b));
    };
    EXPECT_NE(text(first, end).find(piece), std::string::npos);
    EXPECT_EQ(text(first + 1, end).find(piece), std::string::npos);  // no token more than it needs
    EXPECT_EQ(text(first, end - 1).find(piece), std::string::npos);
  }
  EXPECT_NE(error_of([&] { find_generated_text(bundle(), trace, "zzqq never", false, "--span-text"); })
                .find("--span-text: 'zzqq never' does not occur"),
            std::string::npos);
  // Ungraded: a generate record without --grader.
  EXPECT_TRUE(control.scores.empty());
  const std::string md = fork_results_markdown(trace, config, report);
  EXPECT_NE(md.find("| pinned | random_pin_pp:span="), std::string::npos) << md;
  fs::remove_all(dir);
}

// The analytic probability is the frequency the engine's rounds give: over many eviction streams, the
// share of sites holding the span at the fork falls within a few standard errors of it.
TEST(Fork, AnalyticSurvivalMatchesTheRoundsFrequency) {
  auto backend = backend::make_cpu_backend(2);
  engine::EngineConfig config;
  config.kv = {"random_pp", {32, 8}};
  config.max_batch = 64;
  engine::Engine eng(*bundle().model, *backend, config);
  ForkTrace trace;
  trace.prompt = bundle().tokenizer->encode("a short prompt");
  const int pl = static_cast<int>(trace.prompt.size());
  trace.generated.assign(70, 42);
  trace.budget = {32, 8};
  ForkConfig fc;
  fc.fork_at = 60;
  const int fork_position = pl + fc.fork_at - 1;
  const int n = 200;
  for (const auto span : {std::pair<int, int>{pl + 3, pl + 4}, std::pair<int, int>{pl + 5, pl + 7}}) {
    fc.span = span;
    const ForkSurvival s = fork_survival(trace, fc, bundle().model->config().n_kv_heads);
    ASSERT_TRUE(s.analytic);
    std::map<uint64_t, std::pair<double, double>> state;
    eng.set_round_observer([&](uint64_t id, const kv::RoundRecord& r) {
      if (r.at_token > fork_position) return;
      int sites = 0, held = 0, layers_held = 0;
      for (const auto& layer : r.kept_positions) {
        bool any = false;
        for (const auto& head : layer) {
          bool all = true;
          for (int p = span.first; p < span.second; ++p) all = all && std::binary_search(head.begin(), head.end(), p);
          held += all;
          any = any || all;
          ++sites;
        }
        layers_held += any;
      }
      state[id] = {double(held) / sites, double(layers_held) / r.kept_positions.size()};
    });
    for (int i = 0; i < n; ++i) {
      engine::GenerationRequest req;
      req.prompt = trace.prompt;
      req.forced_tokens.assign(trace.generated.begin(), trace.generated.begin() + fc.fork_at);
      req.stream_id = static_cast<uint64_t>(i);
      eng.submit(std::move(req));
    }
    eng.run();
    eng.take_finished();
    double sites = 0, layers = 0;
    for (const auto& [id, v] : state) {
      sites += v.first;
      layers += v.second;
    }
    sites /= n;
    layers /= n;
    const int n_sites = n * bundle().model->config().n_layers * bundle().model->config().n_kv_heads;
    const int n_layers = n * bundle().model->config().n_layers;
    EXPECT_NEAR(sites, s.span_per_head, 4 * std::sqrt(s.span_per_head * (1 - s.span_per_head) / n_sites));
    EXPECT_NEAR(layers, s.span_union, 4 * std::sqrt(s.span_union * (1 - s.span_union) / n_layers));
    EXPECT_GT(s.span_per_head, 0.01);  // not a vacuous comparison
  }
}

// A trace of 10 prompt and 60 generated tokens under T=32, r=8: rounds at 40 and 48 resident tokens.
ForkTrace small_trace() {
  ForkTrace trace;
  trace.prompt.assign(10, 1);
  trace.generated.assign(60, 2);
  trace.budget = {32, 8};
  return trace;
}

TEST(Fork, AnalyticRuleFollowsThePolicy) {
  ForkTrace trace = small_trace();
  ForkConfig fc;
  fc.fork_at = 45;
  fc.span = {12, 13};
  // Rounds at 40, 48 (the fork reads up to position 54): 22 candidates above the 10-token prompt, 14 kept.
  const ForkSurvival pp = fork_survival(trace, fc, 4);
  EXPECT_EQ(pp.rounds, 2);
  EXPECT_NEAR(pp.token_per_head, (14.0 / 22) * (14.0 / 22), 1e-12);
  EXPECT_NEAR(pp.token_union, 1 - std::pow(1 - pp.token_per_head, 4), 1e-12);
  trace.policy = "random_shared";  // one draw per layer: the heads add nothing
  EXPECT_NEAR(fork_survival(trace, fc, 4).token_union, pp.token_per_head, 1e-12);
  trace.policy = "random";  // nothing protected: 32 candidates, 24 kept
  EXPECT_NEAR(fork_survival(trace, fc, 4).token_per_head, (24.0 / 32) * (24.0 / 32), 1e-12);
  trace.policy = "snapkv";
  EXPECT_FALSE(fork_survival(trace, fc, 4).analytic);
  trace.policy = "random_pp";
  fc.span = {5, 8};  // in the protected prompt
  EXPECT_EQ(fork_survival(trace, fc, 4).span_per_head, 1.0);
}

// An eval record: the prompt rebuilt from the dataset, settings from the manifest, graded by math.
TEST(Fork, EvalRecordReplaysAndIsGraded) {
  const fs::path dir = temp_dir("eval");
  eval::EvalRunOptions o;
  o.results_root = dir / "res";
  o.cell = "c";
  o.model_argument = kModel;
  o.model_path = kModel;
  o.task = eval::load_task("math500");
  o.dataset = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";
  o.policy = "random_pp";
  o.budget = 144;  // the 120-token prompt, protected; rounds at 160, 176, ... tokens
  o.window = 16;
  o.max_new_tokens = 90;
  o.limit = 1;
  o.runs = 2;
  o.backend = "cpu";
  o.threads = 2;
  o.seed = 3;
  eval::run_eval(o, [](const std::string&) {});
  eval::ResultsStore store(o.results_root, false);
  const auto records = store.records("c");
  ASSERT_EQ(records.size(), 2u);
  const ForkTrace trace = load_eval_trace(bundle(), o.results_root, "c", 0, 1, "");
  EXPECT_EQ(trace.budget.budget, 144);
  EXPECT_EQ(trace.stream_id, 1u);
  ASSERT_TRUE(trace.task && trace.problem);
  EXPECT_EQ(trace.problem->answer, "8");
  const eval::Record& rec = records[0].run == 1 ? records[0] : records[1];
  const std::vector<int> recorded = Json::parse(rec.tokens_json).get<std::vector<int>>();
  ForkConfig fc;
  fc.fork_at = std::min(50, static_cast<int>(recorded.size()) - 1);
  ASSERT_GT(fc.fork_at, 10);
  const int pl = static_cast<int>(trace.prompt.size());
  fc.span = {pl + 1, pl + 3};
  fc.repetitions = 2;
  fc.max_new_tokens = static_cast<int>(recorded.size()) - fc.fork_at;
  auto backend = backend::make_cpu_backend(2);
  const ForkReport report = run_fork_probe(bundle(), *backend, trace, fc);
  EXPECT_EQ(report.arms[0].continuations[0], std::vector<int>(recorded.begin() + fc.fork_at, recorded.end()));
  EXPECT_EQ(report.survival.rounds, fc.fork_at >= 41 ? 1 : 0);  // the round at 160 tokens
  EXPECT_EQ(report.arms[1].sites_holding, 1.0);
  ASSERT_EQ(report.arms[0].scores.size(), 2u);
  ASSERT_TRUE(report.trace_score.has_value());
  EXPECT_EQ(report.arms[0].scores[0], *report.trace_score);  // the same completion, the same grade
  // A dataset that is not the cell's is refused.
  const fs::path other = dir / "other.jsonl";
  std::ofstream(other) << "{\"question\": \"1+1?\", \"answer\": \"2\"}\n";
  EXPECT_NE(error_of([&] { load_eval_trace(bundle(), o.results_root, "c", 0, 1, other); }).find("sha256"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_eval_trace(bundle(), o.results_root, "c", 0, 5, ""); }).find("no record"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Fork, BadInputIsRefused) {
  ForkTrace trace = small_trace();
  ForkConfig fc;
  fc.fork_at = 45;
  fc.span = {12, 14};
  EXPECT_EQ(error_of([&] { validate_fork(trace, fc); }), "<no error>");
  fc.fork_at = 61;
  EXPECT_NE(error_of([&] { validate_fork(trace, fc); }).find("--fork-at 61"), std::string::npos);
  fc.fork_at = 0;
  EXPECT_NE(error_of([&] { validate_fork(trace, fc); }).find("--fork-at 0"), std::string::npos);
  fc.fork_at = 20;
  fc.span = {28, 31};  // position 30 is written after the fork
  EXPECT_NE(error_of([&] { validate_fork(trace, fc); }).find("--span 28-31"), std::string::npos);
  fc.span = {12, 14};
  trace.budget = {};
  EXPECT_NE(error_of([&] { validate_fork(trace, fc); }).find("no eviction to replay"), std::string::npos);
  trace.budget = {32, 8};
  trace.policy = "nonsense";
  EXPECT_NE(error_of([&] { validate_fork(trace, fc); }), "<no error>");
  for (const char* bad : {"5", "5-5", "7-3", "-1-4", "a-b", "3-4x"})
    EXPECT_NE(error_of([&] { parse_span(bad); }).find("--span"), std::string::npos) << bad;
  EXPECT_EQ(parse_span("3-9"), (std::pair<int32_t, int32_t>{3, 9}));
  const fs::path dir = temp_dir("bad");
  std::ofstream(dir / "x.json") << "{\"prompt_ids\": [1, 2]}";
  EXPECT_NE(error_of([&] { load_generate_trace(dir / "x.json", 0); }).find("not a `kvdice generate --json` record"),
            std::string::npos);
  std::ofstream(dir / "y.json") << "[{\"prompt_ids\": [1], \"generated_ids\": [2, -3]}]";
  EXPECT_NE(error_of([&] { load_generate_trace(dir / "y.json", 0); }).find("not a token id"), std::string::npos);
  EXPECT_NE(error_of([&] { load_generate_trace(dir / "y.json", 1); }).find("--index 1"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvdice::probe
