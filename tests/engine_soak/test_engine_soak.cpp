// The engine under a server's admission pattern (tests/backend/engine_soak.h). The CPU variant runs
// in CI on the tiny fixture in seconds; the CUDA variants (disabled here, run by tools/gpu/run-soak.sh
// through the ctest label `soak`) take the Qwen3-4B shape with random weights: 36 layers at batch up
// to 128, and 2 layers with the same heads under compute-sanitizer memcheck.
#include <gtest/gtest.h>

#include <memory>

#include "backend/engine_soak.h"
#include "engine/model_bundle.h"
#include "model/random_weights.h"

namespace kvdice {
namespace {

void expect_clean(const test::SoakReport& report) {
  std::string failures;
  for (size_t i = 0; i < report.failures.size() && i < 20; ++i) failures += report.failures[i] + "\n";
  EXPECT_TRUE(report.failures.empty()) << report.summary() << "\n" << failures;
  ::testing::Test::RecordProperty("soak", report.summary());
  fmt::print("soak: {}\n", report.summary());
}

TEST(EngineSoak, CpuServerAdmissionPattern) {
  static engine::ModelBundle bundle = engine::load_model_bundle(std::string(KVDICE_FIXTURES_DIR) + "/qwen3");
  auto backend = backend::make_cpu_backend(2);
  engine::EngineConfig config;
  config.kv.policy = "snapkv";  // the scoring policy: the pool records its signals for every request
  config.kv.budget = {32, 8};
  config.max_batch = 12;
  config.prefill_chunk = 24;  // the long prompts prefill in chunks between decode steps
  config.kv_slot_limit = 10 * 72;  // some requests wait for memory
  // The decode-alone runs are single rows: one thread runs them without waiting on another.
  auto alone_backend = backend::make_cpu_backend(1);
  auto make = [&] { return std::make_unique<engine::Engine>(*bundle.model, *alone_backend, config); };
  auto eng = std::make_unique<engine::Engine>(*bundle.model, *backend, config);
  test::SoakConfig soak;
  soak.requests = 40;
  soak.mean_gap_steps = 1.5;
  soak.min_prompt = 3;
  soak.max_prompt = 20;  // below T - r of every budget
  soak.long_prompt = 60;
  soak.min_new = 2;
  soak.max_new = 50;
  soak.vocab = bundle.model->config().vocab;
  soak.policies = {{"random_pp", 32, 8}, {"full", 0, 8}, {"snapkv", 32, 8}, {"random_pp", 48, 16}};
  soak.verify_alone = 5;  // spread over the run
  const test::SoakReport report = test::run_engine_soak(*eng, *backend, soak, make);
  expect_clean(report);
  // The pattern really happened: a batch, waits, cancellations, stops and rounds.
  EXPECT_GE(report.peak_running, 4);
  EXPECT_GT(report.cancelled, 0);
  EXPECT_GT(report.finished_stop, 0);
  EXPECT_GT(report.finished_length, 0);
  EXPECT_GT(report.rounds, 0);
}

// The Qwen3-4B shape with random weights, `layers` of its 36 (the heads unchanged).
// `expect_graph_drops`: the soak must have grown a scratch buffer after a recording (graphs dropped and
// recorded again). The 2-layer variant's scratch is small enough that it never grows after the first
// recordings (0 drops on an H100, 2026-12-06), so only the full shape is held to it.
void cuda_soak(int layers, int requests, int max_batch, int max_new, int long_prompt, bool expect_graph_drops) {
  if (!backend::cuda_available()) GTEST_SKIP() << "no CUDA GPU visible (or a build without CUDA)";
  model::ModelConfig shape =
      model::read_shape_config(std::string(KVDICE_SOURCE_DIR) + "/configs/shapes/qwen3-4b.json");
  shape.n_layers = layers;
  const auto model = model::make_random_model(shape, 11);
  auto backend = backend::make_backend({"cuda", 0, 0});
  engine::EngineConfig config;
  config.kv.policy = "snapkv";
  config.kv.budget = {256, 32};
  config.max_batch = max_batch;
  config.pool.gpu_memory_utilization = 0.8;  // sized by the memory rule
  auto make = [&] { return std::make_unique<engine::Engine>(*model, *backend, config); };
  test::SoakConfig soak;
  soak.requests = requests;
  soak.mean_gap_steps = 0.3;
  soak.min_prompt = 8;
  soak.max_prompt = 200;
  soak.long_prompt = long_prompt;
  soak.min_new = 4;
  soak.max_new = max_new;
  soak.vocab = shape.vocab;
  soak.policies = {{"random_pp", 2048, 64}, {"full", 0, 64}, {"snapkv", 256, 32}, {"random_pp", 512, 64}};
  // No decode-alone comparison here: past 8 rows the GEMMs are cuBLASLt's, which sum in another order
  // than the one-row kernels, so a sampled token may differ without a fault. The same soak run
  // eagerly is this variant's oracle (below).
  soak.verify_alone = 0;
  test::SoakReport report;
  {
    auto eng = make();
    report = test::run_engine_soak(*eng, *backend, soak, make);
  }
  expect_clean(report);
  // The arrivals are in engine steps, so the same soak without graphs runs the same batches through
  // the same kernels: every token must agree (a replay that read or wrote a stale buffer would not).
  config.graphs = false;
  test::SoakReport eager;
  {
    auto eng = make();
    eager = test::run_engine_soak(*eng, *backend, soak, make);
  }
  int differ = 0;
  for (size_t i = 0; i < report.tokens.size(); ++i) differ += report.tokens[i] != eager.tokens[i];
  EXPECT_EQ(differ, 0) << "requests whose tokens differ between graph replays and eager steps; eager: "
                       << eager.summary();
  if (expect_graph_drops)
    EXPECT_GT(report.graphs_dropped, 0) << "no scratch grew after a recording: the soak missed the case";
  EXPECT_GT(report.cancelled, 0);
  EXPECT_GT(report.rounds, 0);
}

TEST(CudaEngineSoak, DISABLED_Qwen3_4BShape) { cuda_soak(36, 400, 128, 700, 3000, true); }

// Small enough for compute-sanitizer memcheck: the same heads, 2 layers.
TEST(CudaEngineSoak, DISABLED_Qwen3_4BHeadsTwoLayers) { cuda_soak(2, 60, 32, 200, 2500, false); }

}  // namespace
}  // namespace kvdice
