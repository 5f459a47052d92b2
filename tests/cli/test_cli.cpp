#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "cli/run_command.h"
#include "core/json.h"
#include "error_text.h"

namespace kvdice::testing {
namespace {

const std::string kModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";

void expect_failure(const std::vector<std::string>& args, const std::string& message_part) {
  const CommandResult r = run_kvdice(args);
  EXPECT_NE(r.exit_code, 0) << "args should fail; stderr: " << r.err;
  EXPECT_NE(r.err.find(message_part), std::string::npos) << "stderr was: " << r.err;
}

TEST(Cli, NoSubcommandFails) { EXPECT_NE(run_kvdice({}).exit_code, 0); }

TEST(Cli, UnknownFlagFails) { expect_failure({"generate", "--model", kModel, "--bogus", "1"}, "bogus"); }

TEST(Cli, BudgetNotAMultipleOfWindowFails) {
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--budget", "100", "--window", "64"},
                 "multiple");
}

TEST(Cli, BudgetNotAboveWindowFails) {
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--budget", "64", "--window", "64"}, "--budget");
}

TEST(Cli, EvictingPolicyWithoutBudgetFails) {
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "random_pp"}, "--budget");
}

TEST(Cli, UnknownPolicyFails) {
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "oracle", "--budget", "128"},
                 "oracle");
}

TEST(Cli, BadSamplingFlagsFail) {
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "full", "--top-p", "1.5"},
                 "--top-p");
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "full", "--temperature", "-1"},
                 "--temperature");
}

TEST(Cli, MissingModelFails) {
  expect_failure({"generate", "--model", "/nonexistent/model", "-p", "hi", "--policy", "full"},
                 "/nonexistent/model");
}

TEST(Cli, MissingPromptFails) {
  expect_failure({"generate", "--model", kModel, "--policy", "full"}, "prompt");
}

TEST(Cli, LongPromptErrorRuleFails) {
  const std::string long_text(400, 'a');
  expect_failure(
      {"generate", "--model", kModel, "-p", long_text + " b c d e f g h i j k l m n o p q r s t u v w x y z",
       "--budget", "16", "--window", "8", "--long-prompt", "error", "-n", "4"},
      "does not fit the budget");
}

// Under the default rule a long prompt decodes with one warning for the prompt, not one per sample.
TEST(Cli, LongPromptWarnsOnceForAllItsSamples) {
  const std::string long_text(400, 'a');
  const CommandResult r =
      run_kvdice({"generate", "--model", kModel, "-p", long_text + " b c d e f g h i j k l m n o p q r s t u v w x y z",
                  "--budget", "16", "--window", "8", "-n", "4", "--samples", "5", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::occurrences(r.err, "PROMPT LONGER THAN THE BUDGET"), 1u) << r.err;
  EXPECT_NE(r.err.find(">= T - r = 8; only the first 7 prompt slots are protected"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(one prompt, 5 samples)"), std::string::npos) << r.err;
}

TEST(Cli, GenerateJsonReportsEvictionAndBudget) {
  const CommandResult r =
      run_kvdice({"generate", "--model", kModel, "--chat", "-p", "Count to ten.", "--policy", "random_pp",
                  "--budget", "32", "--window", "8", "-n", "60", "--ignore-eos", "--json", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["policy"], "random_pp");
  EXPECT_EQ(j["generated_ids"].size(), 60u);
  EXPECT_EQ(j["finish_reason"], "length");
  const Json& s = j["stats"];
  EXPECT_GT(s["eviction_rounds"].get<int>(), 0);
  EXPECT_EQ(s["peak_resident_slots"].get<int>(), 32 + 8);
  EXPECT_LE(s["resident_slots"].get<int>(), 32 + 8);
  EXPECT_GT(s["full_attention_slots"].get<int>(), s["resident_slots"].get<int>());
  EXPECT_LT(s["resident_kv_bytes"].get<int64_t>(), s["full_attention_kv_bytes"].get<int64_t>());
  EXPECT_EQ(j["prompt_ids"].size(), s["prompt_tokens"].get<size_t>());
}

// Issue 7's CPU policies end to end: rounds fire, the budget holds, the options are reported.
TEST(Cli, EveryBaselinePolicyGeneratesUnderTheBudget) {
  // TriAttention's statistics come from kvdice calibrate on a short text (a real run uses >= 50k tokens).
  const std::string text = ::testing::TempDir() + "/calibration.txt",
                    stats = ::testing::TempDir() + "/q3.stats";
  {
    std::ofstream out(text);
    for (int i = 0; i < 200; ++i) out << "the cat sat on the mat and counted to " << i << ". ";
  }
  const CommandResult calibrated = run_kvdice({"calibrate", "--model", kModel, "--text", text, "--out", stats,
                                               "--tokens", "600", "--segment", "256"});
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  EXPECT_NE(calibrated.out.find("on 600 tokens of " + text), std::string::npos) << calibrated.out;
  EXPECT_NE(calibrated.out.find("validity"), std::string::npos) << calibrated.out;
  expect_failure({"calibrate", "--model", kModel, "--text", text, "--out", stats},
                 "fewer than --tokens 50000");
  for (const std::string& policy : std::vector<std::string>{
           "random_block_pp:block=4", "random_pp_rec", "snapkv", "snapkv_pp", "h2o", "h2o_pp", "vase",
           "vase_pp", "rkv", "rkv_pp", "rkv_official", "triattention:stats=" + stats}) {
    const CommandResult r = run_kvdice({"generate",      "--model",  kModel, "--chat",    "-p",
                                        "Count to ten.", "--policy", policy, "--budget",  "32",
                                        "--window",      "8",        "-n",   "40",        "--ignore-eos",
                                        "--json",        "--seed",   "3",    "--backend", "cpu"});
    ASSERT_EQ(r.exit_code, 0) << policy << ": " << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(policy.substr(0, policy.find(':')), j["policy"].get<std::string>());
    if (policy.starts_with("random_block_pp")) EXPECT_EQ(j["policy_options"], "block=4,grid=slot0");
    if (policy == "vase") EXPECT_EQ(j["policy_options"], "large=0.25,sinks=4,pool=5,temperature=1");
    if (policy == "rkv_official") EXPECT_EQ(j["policy_options"], "lambda=0.1,queries=8,pool=7,threshold=0.5");
    const Json& s = j["stats"];
    EXPECT_GT(s["eviction_rounds"].get<int>(), 1) << policy;
    EXPECT_EQ(s["peak_resident_slots"].get<int>(), 32 + 8) << policy;
    EXPECT_GT(s["resident_slots"].get<int>(), 32) << policy;
    EXPECT_LE(s["resident_slots"].get<int>(), 32 + 8) << policy;
  }
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "vase:sinks=-1", "--budget", "32",
                  "--window", "8", "-n", "4", "--backend", "cpu"},
                 "sinks");
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "triattention", "--budget", "32",
                  "--window", "8", "-n", "4", "--backend", "cpu"},
                 "kvdice calibrate");
}

TEST(Cli, RetentionLogRecordsEveryRound) {
  const std::string log = ::testing::TempDir() + "/retention.jsonl";
  const CommandResult r =
      run_kvdice({"generate", "--model", kModel, "-p", "log me", "--policy", "random_pp", "--budget", "16",
                  "--window", "8", "-n", "50", "--ignore-eos", "--json", "--retention-log", log});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json result = Json::parse(r.out);
  const int prompt = result["stats"]["prompt_tokens"];
  std::ifstream in(log);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const Json header = Json::parse(line);  // format, version, policy, budget, shape
  EXPECT_EQ(header["format"], "kvdice-retention");
  EXPECT_EQ(header["version"], 1);
  EXPECT_EQ(header["layers"], 2);
  EXPECT_EQ(header["kv_heads"], 2);
  int rounds = 0;
  while (std::getline(in, line)) {
    const Json rec = Json::parse(line);
    EXPECT_EQ(rec["round"].get<int>(), rounds);
    EXPECT_EQ(rec["prompt_len"].get<int>(), prompt);
    const auto& kept = rec["kept_positions"];
    ASSERT_EQ(kept.size(), 2u);     // layers of the fixture
    ASSERT_EQ(kept[0].size(), 2u);  // KV heads
    for (const auto& layer : kept) {
      for (const auto& head : layer) {
        const auto positions = head.get<std::vector<int>>();
        ASSERT_EQ(positions.size(), 16u);                             // exactly T kept
        for (int p = 0; p < prompt; ++p) EXPECT_EQ(positions[p], p);  // prompt protected
        const int newest = rec["at_token"].get<int>() - 1;
        for (int k = 0; k < 8; ++k) EXPECT_EQ(positions[16 - 8 + k], newest - 7 + k);  // window kept
      }
    }
    ++rounds;
  }
  EXPECT_EQ(rounds, result["stats"]["eviction_rounds"].get<int>());
  EXPECT_GT(rounds, 3);
}

TEST(Cli, GenerateTextPrintsStatistics) {
  const CommandResult r = run_kvdice(
      {"generate", "--model", kModel, "-p", "Hello", "--policy", "full", "-n", "8", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("eviction rounds: 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

// Bad files through the whole CLI: a clear message and a non-zero exit, never a crash.
TEST(Cli, TruncatedGgufFails) {
  const std::filesystem::path src = std::string(KVDICE_FIXTURES_DIR) + "/gguf/tiny_qwen2.gguf";
  const std::string cut = ::testing::TempDir() + "/truncated.gguf";
  std::filesystem::copy_file(src, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(src) / 2);
  const CommandResult r = run_kvdice({"inspect", "--model", cut});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("truncated.gguf"), std::string::npos) << r.err;
  const CommandResult g = run_kvdice({"generate", "--model", cut, "-p", "hi", "--policy", "full"});
  EXPECT_EQ(g.exit_code, 1) << g.err;
}

TEST(Cli, CorruptSafetensorsFails) {
  const std::filesystem::path dir = ::testing::TempDir() + "/corrupt_qwen3";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kModel, dir);
  std::filesystem::resize_file(dir / "model.safetensors", 4096);
  const CommandResult r = run_kvdice({"generate", "--model", dir.string(), "-p", "hi", "--policy", "full"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
}

TEST(Cli, UnsupportedArchitectureFails) {
  const std::filesystem::path dir = ::testing::TempDir() + "/gemma_like";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kModel, dir);
  Json config = read_json_file(dir / "config.json");
  config["architectures"] = {"Gemma3ForCausalLM"};
  std::ofstream(dir / "config.json") << config.dump();
  const CommandResult r = run_kvdice({"inspect", "--model", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("Gemma3ForCausalLM"), std::string::npos) << r.err;
}

TEST(Cli, UnknownChatTemplateFails) {
  expect_failure(
      {"generate", "--model", kModel, "--chat", "--chat-template", "vicuna", "-p", "hi", "--policy", "full"},
      "vicuna");
}

TEST(Cli, CudaBackendWithoutAGpuIsAClearError) {
  if (backend::cuda_available()) GTEST_SKIP() << "a GPU is visible: --backend cuda is valid here";
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "full", "--backend", "cuda"},
                 "--backend cuda");
  expect_failure({"generate", "--model", kModel, "-p", "hi", "--policy", "full", "--backend", "tpu"},
                 "--backend");
}

TEST(Cli, InspectMemoryPlanOnTheCpuBackend) {
  const CommandResult r = run_kvdice({"inspect", "--model", kModel, "--json", "--backend", "cpu", "--budget",
                                      "32", "--window", "8", "--prompt-len", "20", "--max-batch", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plan = Json::parse(r.out).at("memory_plan");
  EXPECT_GT(plan["weights_gib"].get<double>(), 0.0);
  EXPECT_EQ(plan["budget_reservation_slots"].get<int64_t>(), 40);
  // 40 slots take 3 pages of 16: the pool holds pool_slots / 48 such sequences.
  EXPECT_EQ(plan["sequences_at_budget"].get<int64_t>(), plan["kv_pool_slots_per_head"].get<int64_t>() / 48);
}

TEST(Cli, RawPromptsParseSpecialTokensUnlessAskedForText) {
  auto prompt_ids = [](const char* mode) {
    const CommandResult r = run_kvdice({"generate", "--model", kModel, "-p", "<|im_start|>", "--policy",
                                        "full", "-n", "1", "--json", "--special-tokens", mode});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Json::parse(r.out)["prompt_ids"].get<std::vector<int>>();
  };
  const auto parsed = prompt_ids("parse");
  ASSERT_EQ(parsed.size(), 1u);              // the one special token
  EXPECT_GT(prompt_ids("text").size(), 1u);  // its characters as plain text
  expect_failure(
      {"generate", "--model", kModel, "-p", "hi", "--chat", "--special-tokens", "text", "--policy", "full"},
      "--special-tokens");
}

TEST(Cli, InspectPrintsConfigAndKvBytes) {
  const CommandResult r = run_kvdice({"inspect", "--model", kModel, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["architecture"], "Qwen3ForCausalLM");
  const int64_t expected = int64_t(j["layers"]) * int64_t(j["kv_heads"]) * int64_t(j["head_dim"]) * 2 * 2;
  EXPECT_EQ(j["kv_bytes_per_token_bf16"].get<int64_t>(), expected);
  EXPECT_GT(j["parameters"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace kvdice::testing
