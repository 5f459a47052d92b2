// kvdice bench end to end on the CPU: each protocol's quick form on the qwen3 fixture and on random
// weights of a tiny shape, the JSON and markdown it writes, and bad input refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/run_command.h"
#include "core/file_io.h"
#include "core/host_memory.h"
#include "core/json.h"
#include "policy/triattention_stats.h"

namespace kvdice::testing {
namespace {
namespace fs = std::filesystem;

const std::string kFixtures = KVDICE_FIXTURES_DIR;
const std::string kModel = kFixtures + "/qwen3";

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvdice_bench_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The common flags of a fast CPU run.
  static std::vector<std::string> cpu(std::vector<std::string> args) {
    for (const char* a : {"--backend", "cpu", "--threads", "1", "--bandwidth-mib", "8", "--quick"})
      args.push_back(a);
    return args;
  }
  fs::path dir_;
};

Json read_runs(const std::string& file) { return read_json_file(file)["runs"]; }

// The commit the source tree is at now, as cmake/git_commit.cmake names it.
std::string source_commit() {
  const CommandResult head = run_program("git", {"-C", KVDICE_SOURCE_DIR, "rev-parse", "--short=12", "HEAD"});
  std::string commit = head.out;
  while (!commit.empty() && commit.back() == '\n') commit.pop_back();
  if (head.exit_code != 0 || commit.empty()) return "unknown";
  return run_program("git", {"-C", KVDICE_SOURCE_DIR, "diff", "--quiet", "HEAD", "--"}).exit_code == 1
             ? commit + "-dirty"
             : commit;
}

TEST_F(BenchCli, ThroughputOnTheFixtureRecordsEverything) {
  const std::string json = path("bench.json"), md = path("bench.md");
  const std::vector<std::string> args =
      cpu({"bench", "throughput", "--model", kModel, "--requests", "4", "--prompt-len", "16", "--output-len",
           "80", "--budget", "32", "--window", "8", "--json-out", json, "--markdown-out", md});
  const CommandResult r = run_kvdice(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json runs = read_runs(json);
  ASSERT_EQ(runs.size(), 1u);
  const Json& run = runs[0];
  for (const char* key : {"command", "date", "git_commit", "device", "bandwidth_gb_s", "model", "model_shape",
                          "parameters", "results", "validation", "peak_memory_bytes", "prompts"})
    EXPECT_TRUE(run.contains(key)) << key;
  EXPECT_NE(run["command"].get<std::string>().find("--budget 32"), std::string::npos);
  // The commit the binary was compiled from, not the one its build directory was configured at.
  EXPECT_EQ(run["git_commit"], source_commit());
  EXPECT_GT(run["bandwidth_gb_s"].get<double>(), 0.0);
  EXPECT_GT(run["peak_memory_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(run["parameters"]["budget_convention"], "reference");
  EXPECT_EQ(run["parameters"]["output_len"], 80);
  EXPECT_TRUE(run["validation"]["ok"].get<bool>());
  const Json& m = run["results"][0]["metrics"];
  // 4 x 80 tokens; rounds: first at 40 slots, then every 8 until 16 + 79 = 95: 7 per sequence.
  EXPECT_EQ(m["output_tokens"], 320);
  EXPECT_EQ(m["decode_tokens"], 4 * 79);
  // The untimed warm-up (4 tokens a request by default) ran first and is in none of the timed counts.
  EXPECT_EQ(run["parameters"]["warmup_tokens"], 4);
  EXPECT_GT(m["warmup_seconds"].get<double>(), 0.0);
  EXPECT_EQ(m["decode_steps"], 79);
  EXPECT_EQ(m["eviction_rounds_per_sequence"], 7);
  EXPECT_EQ(m["eviction_rounds_total"], 28);
  EXPECT_EQ(run["results"][0]["validation"]["eviction_rounds_expected"], 28);
  for (const char* key : {"output_tok_s_decode", "output_tok_s_end_to_end", "mean_step_ms", "achieved_gb_s",
                          "roofline_fraction"})
    EXPECT_GT(m[key].get<double>(), 0.0) << key;

  // A second run appends: the first is never lost.
  ASSERT_EQ(run_kvdice(args).exit_code, 0);
  EXPECT_EQ(read_runs(json).size(), 2u);
  const std::string table = read_regular_file(md, 1 << 20);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4);  // header, rule, two rows
  EXPECT_NE(table.find("| throughput |"), std::string::npos);
}

TEST_F(BenchCli, ThroughputFullAndTheVllmConvention) {
  const std::string json = path("b.json");
  ASSERT_EQ(run_kvdice(cpu({"bench", "throughput", "--random-weights", "--config", kModel + "/config.json",
                            "--requests", "3", "--prompt-len", "10", "--output-len", "40", "--policy", "full",
                            "--json-out", json}))
                .exit_code,
            0);
  ASSERT_EQ(run_kvdice(cpu({"bench", "throughput", "--random-weights", "--config", kModel + "/config.json",
                            "--requests", "3", "--prompt-len", "10", "--output-len", "40", "--budget", "16",
                            "--window", "4", "--budget-convention", "vllm", "--json-out", json}))
                .exit_code,
            0);
  const Json runs = read_runs(json);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["results"][0]["metrics"]["eviction_rounds_total"], 0);
  EXPECT_NE(runs[0]["model"].get<std::string>().find("random weights"), std::string::npos);
  EXPECT_EQ(runs[1]["parameters"]["budget_convention"], "vllm");
  EXPECT_NE(runs[1]["parameters"]["budget_rule"].get<std::string>().find("DIVIDE_LENGTH"), std::string::npos);
  EXPECT_GT(runs[1]["results"][0]["metrics"]["eviction_rounds_total"].get<int>(), 0);
}

TEST_F(BenchCli, CapacityFillsTheMemoryWithTheLargestBatch) {
  const std::string json = path("c.json");
  // One sequence reserves max(16, 32) + 8 = 40 slots = 3 pages of 16 slots; a page is 2 layers x 2 KV
  // heads x 16 slots x (2 x 32 fp32 + an int32 position) = 16,640 bytes: 49,920 bytes per sequence.
  const double gib = 10 * 49920.0 / (1 << 30) + 1e-9;
  const CommandResult r = run_kvdice(cpu({"bench", "capacity", "--model", kModel, "--memory-gib",
                                          fmt::format("{:.12f}", gib), "--prompt-len", "16", "--output-len",
                                          "60", "--budget", "32", "--window", "8", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = read_runs(json)[0];
  EXPECT_EQ(run["results"][0]["metrics"]["batch"], 10);
  EXPECT_EQ(run["results"][0]["metrics"]["max_running"], 10);
  EXPECT_EQ(run["parameters"]["slots_per_sequence"], 40);
  EXPECT_NE(run["parameters"]["length_regime"].get<std::string>().find("steady state"), std::string::npos);
  EXPECT_TRUE(run["validation"]["ok"].get<bool>());
}

TEST_F(BenchCli, CapacityCountsOneQueryRingRowPerScoringSequence) {
  const std::string json = path("cs.json");
  // snapkv's pages cost what random_pp's do (49,920 bytes a sequence); its window queries add one query
  // ring row: 2 layers x 4 query heads x r = 8 queries x 32 bf16 = 4,096 bytes. An fp32 ring row (8,192
  // bytes) would fit 9, a ring per page (16 queries a page) 5.
  const double gib = 10 * (49920.0 + 4096.0) / (1 << 30) + 1e-9;
  const CommandResult r =
      run_kvdice(cpu({"bench", "capacity", "--model", kModel, "--policy", "snapkv", "--memory-gib",
                      fmt::format("{:.12f}", gib), "--prompt-len", "16", "--output-len", "40", "--budget",
                      "32", "--window", "8", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = read_runs(json)[0];
  EXPECT_EQ(run["results"][0]["metrics"]["batch"], 10);
  EXPECT_EQ(run["results"][0]["metrics"]["max_running"], 10);
  EXPECT_EQ(run["parameters"]["kv_bytes_per_sequence"], 49920 + 4096);
  EXPECT_EQ(run["parameters"]["query_ring_bytes_per_sequence"], 4096);
  EXPECT_TRUE(run["validation"]["ok"].get<bool>());
}

TEST_F(BenchCli, EvictTimesEveryPolicyAtEachBatch) {
  const std::string json = path("e.json");
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window",
                                          "16", "--prompt-len", "8", "--batches", "1,3", "--policies",
                                          "random_pp,recency,snapkv,h2o", "--repeats", "2", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = read_runs(json)[0];
  ASSERT_EQ(run["results"].size(), 8u);
  for (const Json& result : run["results"]) {
    const Json& m = result["metrics"];
    EXPECT_GT(m["round_ms_model"].get<double>(), 0.0);
    EXPECT_GT(m["decode_share"].get<double>(), 0.0);
    EXPECT_LT(m["decode_share"].get<double>(), 1.0);
    EXPECT_EQ(m["layers"], 2);
    EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result.dump();
    // The step without signals: timed apart (the same pool, its signal arrays left out) for a policy
    // that records some (snapkv's query ring, h2o's attention mass), the same step for one that records
    // none.
    const bool records = m["policy"] == "snapkv" || m["policy"] == "h2o";
    EXPECT_EQ(m["signals"], m["policy"] == "snapkv" ? "query ring" : records ? "attention mass" : "none")
        << result.dump();
    EXPECT_GT(m["decode_step_ms_without_signals"].get<double>(), 0.0);
    if (records) {
      EXPECT_NE(m["decode_step_ms_without_signals"].get<double>(), m["decode_step_ms"].get<double>());
    } else {
      EXPECT_EQ(m["decode_step_ms_without_signals"].get<double>(), m["decode_step_ms"].get<double>());
      EXPECT_DOUBLE_EQ(m["decode_share_with_signals"].get<double>(), m["decode_share"].get<double>());
    }
    // The prompt's prefill, with the signals and (timed apart) without them; the validation checks
    // that the one recorded them and the other did not.
    EXPECT_EQ(m["prefill_tokens"], 8);
    EXPECT_GT(m["prefill_ms"].get<double>(), 0.0);
    if (records) {
      EXPECT_NE(m["prefill_ms_without_signals"].get<double>(), m["prefill_ms"].get<double>());
    } else {
      EXPECT_EQ(m["prefill_ms_without_signals"].get<double>(), m["prefill_ms"].get<double>());
    }
  }
}

// The timed prefill runs the prompt as the engine does: steps of at most 2,048 rows (the engine's
// prefill chunk), so 2,100 tokens take two, the second from where the first ended, on a forward whose
// arena holds the longer step (the template's fill takes 256 rows a step). The validation checks every
// slot of the prompt holds its own position after the last run, and that H2O's prefill recorded its
// attention mass and the run without signals none.
TEST_F(BenchCli, EvictTimesAPromptLongerThanOnePrefillChunk) {
  const std::string json = path("p.json");
  const CommandResult r = run_kvdice(
      cpu({"bench", "evict", "--model", kModel, "--budget", "2208", "--window", "16", "--prompt-len", "2100",
           "--batches", "1", "--policies", "h2o_pp,random_pp", "--repeats", "1", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json results = read_runs(json)[0]["results"];
  ASSERT_EQ(results.size(), 2u);
  for (const Json& result : results) {
    EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result["validation"].dump();
    EXPECT_EQ(result["metrics"]["prefill_tokens"], 2100);
  }
  EXPECT_NE(r.out.find("prefill of 2100 tokens"), std::string::npos) << r.out;
}

// The pool's template is prefilled in steps of 256 rows: T + r = 320 takes two, the second appended
// after the first (bench evict checks that the template's slot i holds position i).
TEST_F(BenchCli, EvictFillsATemplateLongerThanOnePrefillStep) {
  const std::string json = path("long.json");
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "304", "--window", "16",
                                          "--prompt-len", "8", "--batches", "1", "--policies", "snapkv_pp",
                                          "--repeats", "1", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json result = read_runs(json)[0]["results"][0];
  EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result.dump();
}

// A spec's own options survive --policies' comma split: "snapkv_pp:pool=3,temperature=0.6" is one policy.
TEST_F(BenchCli, EvictPoliciesKeepTheirOptions) {
  const std::string json = path("o.json");
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window", "16",
                                          "--prompt-len", "8", "--batches", "1", "--policies",
                                          "snapkv_pp:pool=3,temperature=0.6,precision=fp32,random_pp", "--repeats",
                                          "1", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json results = read_runs(json)[0]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["metrics"]["policy"], "snapkv_pp:pool=3,temperature=0.6,precision=fp32");
  EXPECT_EQ(results[1]["metrics"]["policy"], "random_pp");
  // An option with no spec before it is refused.
  EXPECT_NE(run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window", "16",
                            "--prompt-len", "8", "--batches", "1", "--policies", "pool=3,random_pp"}))
                .exit_code,
            0);
  // A bare comma leaves the next flag where a spec belongs: named as such (it was read as the policy
  // '--batches'). (A doubled comma inside a list is dropped by the parser: two specs, as meant.)
  for (const char* bad : {",", ",,"}) {
    const CommandResult e = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window", "16",
                                            "--prompt-len", "8", "--policies", bad, "--batches", "1"}));
    EXPECT_NE(e.exit_code, 0) << bad;
    EXPECT_NE(e.err.find("is not a policy spec"), std::string::npos) << bad << ": " << e.err;
  }
}

// TriAttention scores every layer in one call (one keep-set per KV head for the whole model), so it has
// no one-layer round: its per-layer figure is the model round over the layers, and says so. (Timing a
// one-layer call failed on its statistics check: "the cache has 1" layer.)
TEST_F(BenchCli, EvictTimesAWholeModelScorerPerModel) {
  const std::string stats = path("tri.safetensors"), text = path("text.txt"), json = path("t.json");
  std::string words;
  for (int i = 0; i < 400; ++i) words += fmt::format("word{} and more text {} ", i, i * 7);
  write_file_atomically(text, words);
  const CommandResult c = run_kvdice({"calibrate", "--model", kModel, "--text", text, "--tokens", "256",
                                      "--segment", "128", "--out", stats, "--threads", "1"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window",
                                          "16", "--prompt-len", "8", "--batches", "2", "--policies",
                                          "triattention:stats=" + stats + ",random_pp", "--repeats", "2",
                                          "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json results = read_runs(json)[0]["results"];
  ASSERT_EQ(results.size(), 2u);
  const Json& tri = results[0]["metrics"];
  EXPECT_TRUE(results[0]["validation"]["ok"].get<bool>()) << results[0].dump();
  EXPECT_DOUBLE_EQ(tri["round_ms_layer"].get<double>(), tri["round_ms_model"].get<double>() / 2.0);
  EXPECT_NE(tri["round_ms_layer_from"].get<std::string>().find("whole-model"), std::string::npos);
  EXPECT_EQ(results[1]["metrics"]["round_ms_layer_from"], "one-layer evict call");
  EXPECT_TRUE(results[1]["validation"]["ok"].get<bool>());
}

// A benchmark without a checkpoint times TriAttention on statistics of its own random weights: calibrate
// --random-weights builds bench's model for the same --config and --seed and runs it over random ids.
TEST_F(BenchCli, EvictTimesTriAttentionOnRandomWeightsItsCalibrationMatches) {
  const std::string shape = kFixtures + "/qwen3/config.json", json = path("rw.json");
  auto calibrate = [&](const std::string& out, const std::string& seed) {
    return run_kvdice({"calibrate", "--random-weights", "--config", shape, "--seed", seed, "--tokens", "64",
                       "--segment", "32", "--out", out, "--threads", "1"});
  };
  const CommandResult c = calibrate(path("s0.safetensors"), "0");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("on 64 tokens of random token ids (seed 0)"), std::string::npos) << c.out;
  ASSERT_EQ(calibrate(path("s0b.safetensors"), "0").exit_code, 0);
  ASSERT_EQ(calibrate(path("s1.safetensors"), "1").exit_code, 0);
  // The same seed, the same file byte for byte; another seed's weights and ids give other statistics.
  EXPECT_EQ(read_regular_file(path("s0.safetensors"), 1 << 24), read_regular_file(path("s0b.safetensors"), 1 << 24));
  const policy::TriAttentionStats s0 = policy::read_triattention_stats(path("s0.safetensors"));
  const policy::TriAttentionStats s1 = policy::read_triattention_stats(path("s1.safetensors"));
  EXPECT_NE(s0.q_mean_real, s1.q_mean_real);
  EXPECT_NE(s0.q_weight_norm, s1.q_weight_norm);
  EXPECT_NE(s0.metadata.at("model").find("seed 0"), std::string::npos) << s0.metadata.at("model");
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--random-weights", "--config", shape, "--budget", "64",
                                          "--window", "16", "--prompt-len", "8", "--batches", "2", "--repeats", "2",
                                          "--policies", "triattention:stats=" + path("s0.safetensors"),
                                          "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json result = read_runs(json)[0]["results"][0];
  EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result.dump();
  EXPECT_GT(result["metrics"]["round_ms_model"].get<double>(), 0.0);
}

TEST_F(BenchCli, LatencyAgainstTheWeightsOnlyRoofline) {
  const std::string json = path("l.json"), md = path("l.md");
  const CommandResult r =
      run_kvdice(cpu({"bench", "latency", "--random-weights", "--config", kFixtures + "/qwen2/config.json",
                      "--short-context", "8", "--long-context", "300", "--output-len", "20",
                      "--warmup-tokens", "0", "--json-out", json, "--markdown-out", md}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = read_runs(json)[0];
  ASSERT_EQ(run["results"].size(), 2u);
  EXPECT_EQ(run["parameters"]["policy"], "full");
  for (const Json& result : run["results"]) {
    EXPECT_GT(result["metrics"]["weights_only_roofline_tok_s"].get<double>(), 0.0);
    EXPECT_GT(result["metrics"]["weights_only_roofline_fraction"].get<double>(), 0.0);
    EXPECT_EQ(result["metrics"]["max_running"], 1);
    EXPECT_EQ(result["metrics"]["warmup_seconds"], 0.0);  // --warmup-tokens 0: a cold timed run
  }
  EXPECT_EQ(run["parameters"]["warmup_tokens"], 0);
  EXPECT_EQ(run["results"][1]["metrics"]["context"], 300);
}

void expect_failure(const std::vector<std::string>& args, const std::string& message_part) {
  const CommandResult r = run_kvdice(args);
  EXPECT_NE(r.exit_code, 0) << "should fail; stdout: " << r.out;
  EXPECT_EQ(r.err.find("unexpected"), std::string::npos) << r.err;  // an Error, not a crash
  EXPECT_NE(r.err.find(message_part), std::string::npos) << "stderr was: " << r.err;
}

// A shape whose random fp32 weights cannot fit this machine's memory (Qwen3-4B's with 4,096 layers, the
// most a config may have: about 400 billion parameters, 1.6 TB) is refused before any weight is
// generated, by bench and by calibrate, where the kernel's OOM killer would otherwise end the process.
TEST_F(BenchCli, RandomWeightsThatCannotFitAreRefusedByName) {
  // Without MemAvailable (not Linux) nothing is checked, and the generation would run out of memory.
  if (!available_host_memory()) GTEST_SKIP() << "no /proc/meminfo";
  Json config = read_json_file(std::string(KVDICE_SOURCE_DIR) + "/configs/shapes/qwen3-4b.json");
  config["num_hidden_layers"] = 4096;
  std::ofstream(path("huge.json")) << config.dump();
  expect_failure(cpu({"bench", "latency", "--random-weights", "--config", path("huge.json")}),
                 "GB is available (MemAvailable)");
  expect_failure({"calibrate", "--random-weights", "--config", path("huge.json"), "--out", path("huge.tri")},
                 "of host memory (the model's and the CPU backend's copy)");
  EXPECT_FALSE(fs::exists(path("huge.tri")));
}

TEST_F(BenchCli, BadInputIsRefusedByName) {
  expect_failure(cpu({"bench", "warp", "--model", kModel}), "protocol: warp not in");
  expect_failure(cpu({"bench", "throughput", "--model", kModel, "--prompt-len", "40", "--budget", "32",
                      "--window", "8"}),
                 "--prompt-len 40 does not fit the budget");
  expect_failure(cpu({"bench", "throughput", "--random-weights", "--config", path("none.json")}),
                 "no such file");
  expect_failure(cpu({"bench", "throughput", "--random-weights"}), "--config");
  expect_failure(cpu({"bench", "throughput"}), "--model");
  expect_failure(
      cpu({"bench", "capacity", "--model", kModel, "--prompt-len", "8", "--budget", "32", "--window", "8"}),
      "--memory-gib");
  expect_failure(cpu({"bench", "throughput", "--model", kModel, "--budget-convention", "hf"}),
                 "budget-convention");
  expect_failure(cpu({"bench", "latency", "--model", kModel, "--warmup-tokens", "-1"}), "--warmup-tokens");
  // The fused decoder stack is an experiment beside the library (experiments/fused_decode), not a flag.
  expect_failure(cpu({"bench", "latency", "--model", kModel, "--fused-decode"}), "--fused-decode");
  expect_failure(cpu({"bench", "evict", "--model", kModel, "--policies", "full", "--budget", "32", "--window",
                      "8", "--prompt-len", "4"}),
                 "never evicts");
  {
    std::ofstream(path("gpt2.json")) << R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 64})";
    expect_failure(cpu({"bench", "throughput", "--random-weights", "--config", path("gpt2.json")}),
                   "unsupported architecture 'GPT2LMHeadModel'");
    // The options are checked before the model loads (a large one takes minutes): with a shape that
    // cannot load, each bad option is still what the error names.
    const std::vector<std::string> unloadable = {"--random-weights", "--config", path("gpt2.json")};
    auto with = [&](std::vector<std::string> args) {
      args.insert(args.end(), unloadable.begin(), unloadable.end());
      return cpu(args);
    };
    expect_failure(with({"bench", "evict", "--policies", "nonsense"}),
                   "--policies: unknown eviction policy 'nonsense'");
    expect_failure(with({"bench", "evict", "--policies", "vase_pp:large=2"}), "option large=2 outside [0, 1]");
    expect_failure(with({"bench", "evict", "--policies", "random_pp", "--budget", "10", "--window", "64"}),
                   "--budget (T) must be greater than --window (r)");
    expect_failure(with({"bench", "throughput", "--policy", "nonsense"}), "unknown eviction policy 'nonsense'");
    expect_failure(with({"bench", "latency", "--policy", "random_pp", "--budget", "64", "--window", "16",
                         "--short-context", "8", "--long-context", "100"}),
                   "--prompt-len 100 does not fit the budget");
    expect_failure(with({"bench", "capacity", "--memory-gib", "1", "--policy", "h2o_pp:turbo=1"}), "turbo");
  }
  {
    // An existing file that is not a bench record is never overwritten.
    std::ofstream(path("notes.json")) << "{\"mine\": 1}";
    expect_failure(
        cpu({"bench", "throughput", "--model", kModel, "--requests", "1", "--prompt-len", "4", "--output-len",
             "4", "--budget", "32", "--window", "8", "--json-out", path("notes.json")}),
        "not overwriting");
    EXPECT_EQ(read_regular_file(path("notes.json"), 1 << 20), "{\"mine\": 1}");
  }
}

// The paper's eviction-cost protocol as a preset: batch 1, its four policies with the reference's timing
// settings (temperature 0.6, R-KV lambda 0.1, n_large = K/4, smoothing on) at its precision (fp32); flags
// given beside it win.
TEST_F(BenchCli, EvictTable9PresetTimesThePapersPolicies) {
  const std::string json = path("t9.json");
  const CommandResult r = run_kvdice(cpu({"bench", "evict", "--model", kModel, "--preset", "table9", "--budget", "64",
                                          "--window", "16", "--prompt-len", "8", "--repeats", "2", "--json-out", json}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = read_runs(json)[0];
  std::vector<std::string> policies;
  for (const Json& result : run["results"]) {
    EXPECT_EQ(result["metrics"]["batch"], 1);
    EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result.dump();
    policies.push_back(result["metrics"]["policy"].get<std::string>());
  }
  EXPECT_EQ(policies, (std::vector<std::string>{"random_pp", "snapkv_pp:pool=5,temperature=0.6,precision=fp32",
                                                "rkv_pp:lambda=0.1,pool=5,temperature=0.6,precision=fp32",
                                                "vase_pp:large=0.25,pool=5,temperature=0.6,precision=fp32"}));
  expect_failure(cpu({"bench", "throughput", "--model", kModel, "--preset", "table9"}), "--preset");
  expect_failure(cpu({"bench", "evict", "--model", kModel, "--preset", "table10"}), "--preset");
}

}  // namespace
// The engine's decode batch has page tables as wide as its context (kvdice serve: the model's maximum
// position), and kernels size grids and scratch by that width: --max-context times the pool through such
// tables (default: T + r). A width below T + r, or the flag on another protocol, is refused.
TEST_F(BenchCli, EvictPageTablesAsWideAsTheEnginesContext) {
  const std::string json = path("mc.json");
  for (const char* max_context : {"0", "4096"}) {
    const CommandResult r =
        run_kvdice(cpu({"bench",     "evict",         "--model",    kModel,          "--budget",
                        "64",        "--window",      "16",         "--prompt-len",  "8",
                        "--batches", "1,3",           "--policies", "random_pp,h2o", "--repeats",
                        "1",         "--max-context", max_context,  "--json-out",    json}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const Json runs = read_runs(json);
  ASSERT_EQ(runs.size(), 2u);
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i]["parameters"]["max_context"], i == 0 ? 0 : 4096);
    for (const Json& result : runs[i]["results"]) {
      EXPECT_TRUE(result["validation"]["ok"].get<bool>()) << result.dump();
      EXPECT_EQ(result["metrics"]["page_table_slots"], i == 0 ? 80 : 4096) << result.dump();
    }
  }
  expect_failure(cpu({"bench", "evict", "--model", kModel, "--budget", "64", "--window", "16", "--prompt-len",
                      "8", "--max-context", "50"}),
                 "--max-context 50 is shorter than the T + r = 80 slots");
  expect_failure(cpu({"bench", "throughput", "--model", kModel, "--max-context", "500"}),
                 "--max-context is a flag of bench evict, not of bench throughput");
}

}  // namespace kvdice::testing
