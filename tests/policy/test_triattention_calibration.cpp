// kvdice calibrate's statistics on the tests/fixtures/qwen3 model equal a numpy forward's pre-RoPE
// queries (tools/make_policy_goldens.py; passed through the bf16 query ring as kvdice reads them),
// survive the file format, and tie the file to its model.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/triattention_calibration.h"
#include "core/error.h"
#include "engine/model_bundle.h"
#include "policy/eviction_policy.h"
#include "policy/triattention_stats.h"

namespace kvdice::policy {
namespace {

const std::string kFixtures = KVDICE_FIXTURES_DIR;

const engine::ModelBundle& bundle() {
  static engine::ModelBundle b = engine::load_model_bundle(kFixtures + "/qwen3");
  return b;
}

nlohmann::json golden() {
  std::ifstream file(kFixtures + "/policies/goldens.json");
  return nlohmann::json::parse(file)["calibration"];
}

// `slack[i]`: what bf16 roundings that fall the other way may add (empty: none). The query ring is bf16;
// the reference rounds its fp64 queries where kvdice rounds its fp32 ones, so now and then one element
// lands a bf16 unit (at most 2^-7 of it) away, which moves a mean over n tokens by 2^-7 |q| / n.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what,
                  const std::vector<double>& slack = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-5 + 2e-5 * std::abs(want[i]) + (slack.empty() ? 0.0 : slack[i]))
        << what << "[" << i << "]";
}

TEST(TriAttentionCalibration, StatisticsEqualTheNumpyForward) {
  const nlohmann::json g = golden();
  const std::vector<int> tokens = g["tokens"].get<std::vector<int>>();
  auto backend = backend::make_cpu_backend(2);
  calibrate::CalibrationOptions options;
  options.segment = g["segment"];
  options.chunk = 8;  // 40-token segments in 5 steps, the 20-token tail in 3 (the last partial)
  const TriAttentionStats s =
      calibrate::collect_triattention_stats(*bundle().model, *backend, tokens, options);
  // One rounding the other way per (layer, head, band), of an element up to twice the band's mean
  // magnitude: 2^-6 E|q_f| / n. Without the bf16 rounding in the reference, the means differ by up to
  // 25x the fp32 tolerance on this fixture; with it, by one such unit.
  std::vector<double> slack = g["q_abs_mean"].get<std::vector<double>>();
  for (double& x : slack) x *= std::ldexp(1.0, -6) / static_cast<double>(tokens.size());
  expect_close(s.q_mean_real, g["q_mean_real"].get<std::vector<double>>(), "q_mean_real", slack);
  expect_close(s.q_mean_imag, g["q_mean_imag"].get<std::vector<double>>(), "q_mean_imag", slack);
  expect_close(s.q_abs_mean, g["q_abs_mean"].get<std::vector<double>>(), "q_abs_mean", slack);
  expect_close(s.q_weight_norm, g["q_weight_norm"].get<std::vector<double>>(), "q_weight_norm");
  EXPECT_NEAR(s.validity(), g["validity"].get<double>(), 1e-5);
  EXPECT_EQ(s.metadata.at("tokens"), std::to_string(tokens.size()));

  // The file format round-trips, and the statistics fit this model.
  const std::string path = ::testing::TempDir() + "/calib.safetensors";
  write_triattention_stats(path, s);
  const TriAttentionStats back = read_triattention_stats(path);
  EXPECT_EQ(back.q_mean_real, s.q_mean_real);
  EXPECT_EQ(back.q_abs_mean, s.q_abs_mean);
  EXPECT_EQ(back.omega, s.omega);
  EXPECT_NO_THROW(check_stats_match(back, bundle().model->fingerprint(), path));
  EXPECT_NO_THROW(make_policy("triattention:stats=" + path)->check_model(bundle().model->fingerprint()));
}

TEST(TriAttentionCalibration, StatisticsOfAnotherModelAreRefused) {
  auto backend = backend::make_cpu_backend(2);
  calibrate::CalibrationOptions options;
  options.segment = 16;
  options.chunk = 16;
  TriAttentionStats s =
      calibrate::collect_triattention_stats(*bundle().model, *backend, std::vector<int>(16, 5), options);
  s.q_weight_norm[1] *= 1.01f;  // a fine-tune of the same shape
  const std::string path = ::testing::TempDir() + "/other.safetensors";
  write_triattention_stats(path, s);
  try {
    make_policy("triattention:stats=" + path)->check_model(bundle().model->fingerprint());
    FAIL() << "statistics of another model accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

TEST(TriAttentionCalibration, MissingOrForeignStatisticsAreClearErrors) {
  try {
    make_policy("triattention");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvdice calibrate"), std::string::npos) << e.what();
  }
  try {
    make_policy("triattention:stats=" + kFixtures +
                "/qwen3/model.safetensors");  // a checkpoint, not statistics
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a TriAttention statistics file"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvdice::policy
