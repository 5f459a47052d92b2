// Random weights from a config shape: deterministic in the seed, independent of the thread count,
// std 0.02, norms 1, biases where the architecture has them.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "model/random_weights.h"
#include "model/weights.h"

namespace kvdice::model {
namespace {

const std::string kFixtures = KVDICE_FIXTURES_DIR;

TEST(RandomWeights, SeededStdAndNorms) {
  const ModelConfig config = read_shape_config(kFixtures + "/qwen3/config.json");
  const auto model = make_random_model(config, 7);
  const LayerWeights& l0 = model->weights().layers[0];
  double sum = 0.0, sq = 0.0;
  for (float v : l0.w_gate.data) {
    sum += v;
    sq += double{v} * v;
  }
  const double n = static_cast<double>(l0.w_gate.data.size());
  EXPECT_NEAR(sum / n, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.001);
  for (float v : l0.attn_norm.data) EXPECT_EQ(v, 1.0f);
  for (float v : l0.q_norm.data) EXPECT_EQ(v, 1.0f);
  EXPECT_EQ(model->weights().parameter_count(), make_random_model(config, 8)->weights().parameter_count());
  EXPECT_EQ(make_random_model(config, 7)->weights().layers[1].wv.data, model->weights().layers[1].wv.data);
  EXPECT_NE(make_random_model(config, 8)->weights().layers[1].wv.data, model->weights().layers[1].wv.data);
  EXPECT_NE(l0.wq.data[0], l0.wk.data[0]);  // tensors differ from each other
}

TEST(RandomWeights, SameValuesForAnyThreadCount) {
  const ModelConfig config = read_shape_config(kFixtures + "/qwen3/config.json");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = make_random_model(config, 3);
  omp_set_num_threads(std::max(threads, 2));
  const auto many = make_random_model(config, 3);
  omp_set_num_threads(threads);
  EXPECT_EQ(one->weights().embed.data, many->weights().embed.data);
}

TEST(RandomWeights, BiasesWhereTheArchitectureHasThem) {
  const ModelConfig config = read_shape_config(kFixtures + "/qwen2/config.json");
  ASSERT_TRUE(config.qkv_bias);
  const auto model = make_random_model(config, 1);
  ASSERT_FALSE(model->weights().layers[0].bq.empty());
  EXPECT_NE(model->weights().layers[0].bq.data[0], 0.0f);
}

TEST(RandomWeights, ShapesInTheRepositoryLoad) {
  for (const char* name : {"qwen3-4b", "qwen3-8b", "llama-3.1-8b", "qwen2.5-0.5b"}) {
    const ModelConfig c =
        read_shape_config(std::string(KVDICE_SOURCE_DIR) + "/configs/shapes/" + name + ".json");
    EXPECT_GT(c.n_layers, 0) << name;
  }
  const ModelConfig c = read_shape_config(std::string(KVDICE_SOURCE_DIR) + "/configs/shapes/qwen3-4b.json");
  EXPECT_EQ(c.kv_bytes_per_token(2), 147456);  // docs/reference.md §7
}

TEST(RandomWeights, MissingConfigIsAnError) {
  EXPECT_THROW(read_shape_config("/nonexistent/config.json"), std::exception);
}

}  // namespace
}  // namespace kvdice::model
