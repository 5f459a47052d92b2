// End-to-end numerics: our fp32 forward against transformers' fp32 logits for every family, at
// every prompt position (one prefill) and at each teacher-forced decode step (through the cache).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "backend/backend.h"
#include "core/json.h"
#include "model/model.h"
#include "formats/safetensors.h"
#include "model/weights.h"

namespace kvdice::model {
namespace {

using namespace kvdice::formats;

const std::string kFixtures = KVDICE_FIXTURES_DIR;

struct Golden {
  std::vector<int> prompt, decode;
  int rows = 0, vocab = 0;
  std::vector<float> logits;
};

Golden read_golden(const std::string& family) {
  const Json j = read_json_file(kFixtures + "/golden/" + family + ".json");
  Golden g;
  g.prompt = j.at("prompt_ids").get<std::vector<int>>();
  g.decode = j.at("decode_ids").get<std::vector<int>>();
  g.rows = j.at("rows");
  g.vocab = j.at("vocab");
  std::ifstream in(kFixtures + "/golden/" + j.at("logits_file").get<std::string>(), std::ios::binary);
  g.logits.resize(size_t(g.rows) * g.vocab);
  in.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(in) << "short logits file for " << family;
  return g;
}

// max |ours - golden| over the row, relative to the row's largest golden magnitude.
double relative_error(const float* ours, const float* golden, int n) {
  double max_diff = 0, max_ref = 0;
  for (int i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, double(std::fabs(ours[i] - golden[i])));
    max_ref = std::max(max_ref, double(std::fabs(golden[i])));
  }
  return max_diff / max_ref;
}

class ForwardGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardGolden, LogitsMatchTransformersAtPrefillAndEachDecodeStep) {
  const std::string family = GetParam();
  const std::string dir = kFixtures + "/" + family;
  const Golden g = read_golden(family);
  ModelConfig config = ModelConfig::from_hf_dir(dir);
  ASSERT_EQ(config.vocab, g.vocab);
  auto source = open_safetensors_dir(dir);
  Model model(config, load_weights(config, *source));
  auto backend = backend::make_cpu_backend(2);
  kv::SequenceKv cache(model.kv_shape(), g.rows);

  const SequenceStep prefill{&cache, g.prompt};
  const Tensor prefill_logits = model.forward(*backend, std::span(&prefill, 1), /*all_positions=*/true);
  ASSERT_EQ(prefill_logits.dim(0), static_cast<int64_t>(g.prompt.size()));
  double worst = 0;
  for (size_t i = 0; i < g.prompt.size(); ++i) {
    const double err = relative_error(prefill_logits.ptr() + i * g.vocab, &g.logits[i * g.vocab], g.vocab);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-5) << family << " prefill position " << i;
  }
  for (size_t k = 0; k < g.decode.size(); ++k) {
    const int token = g.decode[k];
    const SequenceStep step{&cache, std::span<const int>(&token, 1)};
    const Tensor logits = model.forward(*backend, std::span(&step, 1));
    const size_t row = g.prompt.size() + k;
    const double err = relative_error(logits.ptr(), &g.logits[row * g.vocab], g.vocab);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-5) << family << " decode step " << k;
  }
  EXPECT_EQ(cache.appended(), static_cast<int64_t>(g.rows));
  std::cout << family << ": worst relative logit error " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Families, ForwardGolden, ::testing::Values("qwen3", "qwen2", "llama", "phi3"));

}  // namespace
}  // namespace kvdice::model
