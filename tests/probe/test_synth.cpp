// The synthetic-retrieval probe on the tiny Qwen3 fixture: the task builder (determinism, aligned fact
// spans, ages, value screening), the arms' span audit at the endpoints, the statistics, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "probe/synth.h"
#include "error_text.h"

namespace kvdice::probe {
namespace {

using test::error_of;

const engine::ModelBundle& bundle() {
  static engine::ModelBundle b = engine::load_model_bundle(std::string(KVDICE_FIXTURES_DIR) + "/qwen3");
  return b;
}

const std::string kFiller = std::string(KVDICE_SOURCE_DIR) + "/configs/synth/filler.txt";

// A scratch file removed at the end of the test.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    path = std::filesystem::temp_directory_path() / ("kvdice_synth_" + std::to_string(::getpid()) + ".txt");
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

SynthTaskConfig task_config() {
  SynthTaskConfig c;
  c.filler_path = kFiller;
  c.pre_tokens = 16;
  c.two_fact_gap = 16;
  c.instances = 4;
  c.seed = 5;
  return c;
}

TEST(SynthTask, CellsParseAndBadNamesAreRefused) {
  EXPECT_EQ(parse_synth_cell("a768f").age, 768);
  EXPECT_EQ(parse_synth_cell("a1536").age, 1536);
  EXPECT_EQ(parse_synth_cell("adeep").age, 4224);
  EXPECT_EQ(parse_synth_cell("adeep_once").variant, SynthVariant::Once);
  EXPECT_EQ(parse_synth_cell("a1536_two").variant, SynthVariant::TwoFact);
  EXPECT_EQ(parse_synth_cell("a1536_two").age, 1536);
  for (const char* bad : {"b12", "a0", "a12x", "a", "a-5", "a1536_three", "deep"})
    EXPECT_NE(error_of([&] { parse_synth_cell(bad); }).find("unknown cell"), std::string::npos) << bad;
}

TEST(SynthTask, InstancesAreSeededAndHoldTheFactAtOneSpan) {
  for (const char* name : {"a120", "a150_two", "a120_once"}) {
    SCOPED_TRACE(name);
    const SynthCell cell = parse_synth_cell(name);
    const SynthTask a = build_synth_task(bundle(), task_config(), cell, 4096);
    const SynthTask b = build_synth_task(bundle(), task_config(), cell, 4096);
    SynthTaskConfig other = task_config();
    other.seed = 6;
    const SynthTask c = build_synth_task(bundle(), other, cell, 4096);
    ASSERT_EQ(a.instances.size(), 4u);
    ASSERT_EQ(a.spans.size(), cell.variant == SynthVariant::TwoFact ? 2u : 1u);
    for (size_t i = 0; i < a.instances.size(); ++i) {
      const SynthInstance& inst = a.instances[i];
      EXPECT_EQ(inst.forced, b.instances[i].forced);
      EXPECT_EQ(inst.values, b.instances[i].values);
      EXPECT_NE(inst.forced, c.instances[i].forced);
      const int stub = static_cast<int>(inst.prompt.size());
      // The age: from the first box's start to the query's start.
      EXPECT_EQ(inst.query_step - (a.spans[0].first - stub), cell.age);
      // Each box's text sits at its span and states the value.
      for (size_t f = 0; f < a.spans.size(); ++f) {
        const std::vector<int> box(inst.forced.begin() + (a.spans[f].first - stub),
                                   inst.forced.begin() + (a.spans[f].second - stub));
        EXPECT_NE(bundle().tokenizer->decode(box).find(inst.values[f] + "."), std::string::npos);
      }
      // The scored steps are exactly the value digits, at the end.
      std::string scored;
      for (int step : inst.value_steps) scored += bundle().tokenizer->decode(std::vector<int>{inst.forced[step]});
      std::string digits;
      for (const auto& v : inst.values) digits += v;
      EXPECT_EQ(scored, digits);
      EXPECT_EQ(inst.value_steps.back(), static_cast<int>(inst.forced.size()) - 1);
      for (const auto& v : inst.values) {
        EXPECT_GE(std::stoi(v), 5000);
        EXPECT_LE(std::stoi(v), 9999);
      }
    }
    EXPECT_NE(a.instances[0].values, a.instances[1].values);
  }
}

TEST(SynthTask, ValuesAreScreenedOutOfTheFiller) {
  // A filler naming every value below 9900: only 9900..9999 are left to draw.
  std::string text = "Counting on: ";
  for (int v = 5000; v < 9900; ++v) text += std::to_string(v) + (v % 20 ? " " : ".\n");
  const TempFile filler(text);
  SynthTaskConfig c = task_config();
  c.filler_path = filler.path.string();
  c.instances = 12;
  const SynthTask task = build_synth_task(bundle(), c, parse_synth_cell("a150_two"), 4096);
  for (const auto& inst : task.instances) {
    for (const auto& v : inst.values) {
      EXPECT_EQ(text.find(v), std::string::npos) << v << " occurs in the filler";
      EXPECT_GE(std::stoi(v), 9900);
    }
  }
}

TEST(SynthTask, BadInputIsNamed) {
  SynthTaskConfig c = task_config();
  c.filler_path = "/nonexistent/filler.txt";
  EXPECT_NE(error_of([&] { build_synth_task(bundle(), c, parse_synth_cell("a120"), 4096); }).find("no such file"),
            std::string::npos);
  c = task_config();
  // Longer than the context.
  EXPECT_NE(error_of([&] { build_synth_task(bundle(), c, parse_synth_cell("a5000"), 4096); })
                .find("longer than the longest context of 4096"),
            std::string::npos);
  // An age that does not reach past the box.
  EXPECT_NE(error_of([&] { build_synth_task(bundle(), c, parse_synth_cell("a4"), 4096); }).find("does not reach"),
            std::string::npos);
}

SynthConfig probe_config() {
  SynthConfig c;
  c.task = task_config();
  c.task.instances = 6;
  c.cells = {"a200"};
  c.arms = {"random_pp", "kept", "deleted", "pin:heads=0", "deal:heads=0+1"};
  c.budget = 128;  // the fixture's stub is 49 tokens, a box about 20
  c.window = 32;
  c.bootstrap = 200;
  return c;
}

TEST(SynthProbe, EndpointsHoldOrDropTheSpanAndRIsAnchoredByThem) {
  const SynthConfig config = probe_config();
  std::vector<std::string> seen;
  const SynthReport report = run_synth_probe(bundle(), *backend::make_cpu_backend(2), config,
                                             [&](const SynthArmResult& r) { seen.push_back(r.arm); });
  EXPECT_EQ(seen, config.arms);
  ASSERT_EQ(report.results.size(), 5u);
  ASSERT_TRUE(report.parity.checked);
  EXPECT_LT(report.parity.max_abs_delta, 1e-3);
  auto survival = [](const SynthArmResult& r) {
    double s = 0.0;
    for (double v : r.span_survival) s += v;
    return s / r.span_survival.size();
  };
  const SynthArmResult &natural = report.results[0], &kept = report.results[1], &deleted = report.results[2],
                       &pin = report.results[3], &dealt = report.results[4];
  EXPECT_GE(kept.mean_rounds, 3.0);
  EXPECT_EQ(survival(kept), 1.0);
  EXPECT_EQ(survival(deleted), 0.0);
  EXPECT_EQ(survival(pin), 0.5);  // head 0 of the fixture's two KV heads, every layer
  EXPECT_EQ(survival(dealt), 0.0);  // every token in one head: no site holds the whole fact
  EXPECT_LT(survival(natural), 1.0);
  EXPECT_NEAR(kept.recall.value, 1.0, 1e-12);
  EXPECT_NEAR(deleted.recall.value, 0.0, 1e-12);
  EXPECT_EQ(kept.policy.rfind("random_pin_pp:span=", 0), 0u);
  for (const auto& r : report.results) {
    ASSERT_EQ(r.value_logprobs.size(), 6u);
    for (double lp : r.value_logprobs) EXPECT_LT(lp, 0.0);
    EXPECT_LE(r.logprob.lo, r.logprob.value);
    EXPECT_GE(r.logprob.hi, r.logprob.value);
  }
  // Deterministic end to end.
  const SynthReport again = run_synth_probe(bundle(), *backend::make_cpu_backend(2), config);
  for (size_t k = 0; k < report.results.size(); ++k) {
    EXPECT_EQ(again.results[k].value_logprobs, report.results[k].value_logprobs);
    EXPECT_EQ(again.results[k].recall.lo, report.results[k].recall.lo);
  }
  const std::string table = synth_results_markdown(config, report);
  EXPECT_NE(table.find("| a200 |"), std::string::npos);
  // Arms and policies hold commas: quoted.
  EXPECT_NE(synth_results_csv(report).find("a200,\"deleted\",\"random_pin_pp:span="), std::string::npos);
  EXPECT_EQ(synth_results_json(config, report)["results"].size(), 5u);
}

// The mechanism policies as arms, end to end through the engine: carrier-head mixing with no carrier
// is recency everywhere (an old fact gone from every site), its swap is random_pp's own run, and the
// value-range tag at share 0 is random_pp too (recording the ranges changes nothing else).
TEST(SynthProbe, CarrierMixingAndTheValueRangeTagRunAsArms) {
  SynthConfig config = probe_config();
  config.parity = false;
  config.bootstrap = 0;
  config.arms = {"random_pp", "anti_mix:heads=none", "random_vrange_pp:share=0", "carrier_mix:heads=none",
                 "carrier_mix:heads=1", "random_vrange_pp"};
  const SynthReport report = run_synth_probe(bundle(), *backend::make_cpu_backend(2), config);
  ASSERT_EQ(report.results.size(), 6u);
  auto survival = [](const SynthArmResult& r) {
    double s = 0.0;
    for (double v : r.span_survival) s += v;
    return s / r.span_survival.size();
  };
  const auto& r = report.results;
  EXPECT_EQ(r[1].value_logprobs, r[0].value_logprobs) << "anti_mix:heads=none is random_pp in every head";
  EXPECT_EQ(r[2].value_logprobs, r[0].value_logprobs) << "random_vrange_pp:share=0 is random_pp";
  EXPECT_EQ(survival(r[3]), 0.0) << "recency in every head keeps no 200-token-old fact";
  EXPECT_LE(survival(r[4]), 0.5) << "head 0 keeps recency: at most the carrier head 1 holds the fact";
  EXPECT_EQ(r[5].policy, "random_vrange_pp:share=0.25");
  // A carrier head the model lacks is refused by name (the fixture has 2 KV heads).
  config.arms = {"carrier_softmix"};
  try {
    run_synth_probe(bundle(), *backend::make_cpu_backend(2), config);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head 2 is not a KV head"), std::string::npos) << e.what();
  }
}

TEST(SynthProbe, PercentileIntervalInterpolates) {
  std::vector<double> v;
  for (int i = 0; i <= 100; ++i) v.push_back(100 - i);
  const auto [lo, hi] = percentile_interval(v, 0.9);
  EXPECT_DOUBLE_EQ(lo, 5.0);
  EXPECT_DOUBLE_EQ(hi, 95.0);
  const auto [lo2, hi2] = percentile_interval({1.0, 2.0}, 0.5);
  EXPECT_DOUBLE_EQ(lo2, 1.25);
  EXPECT_DOUBLE_EQ(hi2, 1.75);
  EXPECT_TRUE(std::isnan(percentile_interval({}, 0.9).first));
}

TEST(SynthProbe, BadArmsCellsAndSizesAreRefusedBeforeAnyRun) {
  SynthConfig c = probe_config();
  c.arms = {"random_pp", "bogus_policy"};
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("unknown or malformed arm 'bogus_policy'"),
            std::string::npos);
  c.arms = {"deal:heads=all"};
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("deal=1 deals the span"), std::string::npos);
  c.arms = {"pin:span=1-3"};
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("layers= and heads= only"), std::string::npos);
  c.arms = {"pin:heads=x"};
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("'pin:heads=x'"), std::string::npos);
  c = probe_config();
  c.cells = {"a200", "a200"};
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("given twice"), std::string::npos);
  c = probe_config();
  c.task.filler_path.clear();
  EXPECT_NE(error_of([&] { validate_synth_config(c); }).find("--filler"), std::string::npos);
  // Spans longer than the window cannot be dropped by a round.
  c = probe_config();
  c.budget = 96;
  c.window = 8;
  EXPECT_NE(error_of([&] { run_synth_probe(bundle(), *backend::make_cpu_backend(1), c); }).find("raise --window"),
            std::string::npos);
}

}  // namespace
}  // namespace kvdice::probe
