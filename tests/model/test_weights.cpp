// load_weights: every family's HF names end up in the right LayerWeights fields (Phi-3's fused
// projections split correctly), shape errors name the tensor, and the tiny fixtures load with the
// parameter counts and tensor sums that transformers reports for them.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "core/error.h"
#include "model/config.h"
#include "formats/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"

namespace kvdice::model {
namespace {

using namespace kvdice::formats;

using namespace kvdice::st_test;

// A tiny config per family; Qwen3 gets an explicit head_dim so that q_dim differs from hidden.
Json tiny_config(const std::string& architecture, bool tied) {
  Json j = {{"architectures", {architecture}},
            {"hidden_size", 8},
            {"intermediate_size", 12},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"vocab_size", 10},
            {"tie_word_embeddings", tied}};
  if (architecture == "Qwen3ForCausalLM") j["head_dim"] = 4;
  return j;
}

// Writes a checkpoint whose every tensor holds distinct values (base + index, base unique per tensor)
// and remembers them, so each loaded field can be traced back to the tensor it came from.
class TinyCheckpoint {
 public:
  TinyCheckpoint(const std::string& architecture, bool tied) : json_(tiny_config(architecture, tied)) {
    config_ = ModelConfig::from_hf_json(json_, "tiny");
    const int64_t h = config_.hidden, q = config_.q_dim(), kv = config_.kv_dim(), in = config_.intermediate;
    add("model.embed_tokens.weight", {config_.vocab, h});
    add("model.norm.weight", {h});
    if (!tied) add("lm_head.weight", {config_.vocab, h});
    for (int i = 0; i < config_.n_layers; ++i) {
      std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", {h});
      add(p + "post_attention_layernorm.weight", {h});
      add(p + "self_attn.o_proj.weight", {h, q});
      add(p + "mlp.down_proj.weight", {h, in});
      if (config_.family == Family::Phi3) {
        add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h});
        add(p + "mlp.gate_up_proj.weight", {2 * in, h});
      } else {
        add(p + "self_attn.q_proj.weight", {q, h});
        add(p + "self_attn.k_proj.weight", {kv, h});
        add(p + "self_attn.v_proj.weight", {kv, h});
        add(p + "mlp.gate_proj.weight", {in, h});
        add(p + "mlp.up_proj.weight", {in, h});
      }
      if (config_.qkv_bias) {
        add(p + "self_attn.q_proj.bias", {q});
        add(p + "self_attn.k_proj.bias", {kv});
        add(p + "self_attn.v_proj.bias", {kv});
      }
      if (config_.qk_norm) {
        add(p + "self_attn.q_norm.weight", {config_.head_dim});
        add(p + "self_attn.k_norm.weight", {config_.head_dim});
      }
    }
  }

  void add(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    std::vector<float> values(n);
    std::iota(values.begin(), values.end(), 1000.0f * static_cast<float>(tensors_.size() + 1));
    tensors_[name] = {name, "F32", std::move(shape), f32_bytes(values)};
    values_[name] = std::move(values);
  }
  void remove(const std::string& name) { tensors_.erase(name); }
  void reshape(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    tensors_[name] = {name, "F32", shape, f32_bytes(std::vector<float>(n))};
  }

  std::unique_ptr<TensorSource> write(const TempDir& dir) const {
    std::vector<TestTensor> list;
    for (const auto& [name, tensor] : tensors_) list.push_back(tensor);
    write_bytes(dir / "model.safetensors", safetensors_bytes(list));
    return open_safetensors_dir(dir.path());
  }

  const ModelConfig& config() const { return config_; }
  const std::vector<float>& values(const std::string& name) const { return values_.at(name); }
  // Rows [begin, begin + rows) of a written [R, cols] tensor.
  std::vector<float> rows(const std::string& name, int64_t begin, int64_t rows, int64_t cols) const {
    const auto& v = values_.at(name);
    return {v.begin() + begin * cols, v.begin() + (begin + rows) * cols};
  }
  int64_t written_elements() const {
    int64_t n = 0;
    for (const auto& [name, tensor] : tensors_) n += static_cast<int64_t>(tensor.bytes.size() / 4);
    return n;
  }

 private:
  Json json_;
  ModelConfig config_;
  std::map<std::string, TestTensor> tensors_;
  std::map<std::string, std::vector<float>> values_;
};

std::string load_error(const ModelConfig& config, const TensorSource& source) {
  try {
    load_weights(config, source);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_tensor(const Tensor& t, std::vector<int64_t> shape, const std::vector<float>& values) {
  EXPECT_EQ(t.shape, shape);
  EXPECT_EQ(t.data, values);
}

class FamilyWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyWeights, EveryFieldComesFromItsTensor) {
  TempDir dir;
  TinyCheckpoint ckpt(GetParam(), /*tied=*/false);
  auto source = ckpt.write(dir);
  const ModelConfig& c = ckpt.config();
  ModelWeights w = load_weights(c, *source);
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), in = c.intermediate;

  expect_tensor(w.embed, {c.vocab, h}, ckpt.values("model.embed_tokens.weight"));
  expect_tensor(w.final_norm, {h}, ckpt.values("model.norm.weight"));
  expect_tensor(w.lm_head, {c.vocab, h}, ckpt.values("lm_head.weight"));
  EXPECT_EQ(&w.output_matrix(), &w.lm_head);
  ASSERT_EQ(w.layers.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const LayerWeights& l = w.layers[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    expect_tensor(l.attn_norm, {h}, ckpt.values(p + "input_layernorm.weight"));
    expect_tensor(l.mlp_norm, {h}, ckpt.values(p + "post_attention_layernorm.weight"));
    expect_tensor(l.wo, {h, q}, ckpt.values(p + "self_attn.o_proj.weight"));
    expect_tensor(l.w_down, {h, in}, ckpt.values(p + "mlp.down_proj.weight"));
    if (c.family == Family::Phi3) {
      std::string qkv = p + "self_attn.qkv_proj.weight", gate_up = p + "mlp.gate_up_proj.weight";
      expect_tensor(l.wq, {q, h}, ckpt.rows(qkv, 0, q, h));
      expect_tensor(l.wk, {kv, h}, ckpt.rows(qkv, q, kv, h));
      expect_tensor(l.wv, {kv, h}, ckpt.rows(qkv, q + kv, kv, h));
      expect_tensor(l.w_gate, {in, h}, ckpt.rows(gate_up, 0, in, h));
      expect_tensor(l.w_up, {in, h}, ckpt.rows(gate_up, in, in, h));
    } else {
      expect_tensor(l.wq, {q, h}, ckpt.values(p + "self_attn.q_proj.weight"));
      expect_tensor(l.wk, {kv, h}, ckpt.values(p + "self_attn.k_proj.weight"));
      expect_tensor(l.wv, {kv, h}, ckpt.values(p + "self_attn.v_proj.weight"));
      expect_tensor(l.w_gate, {in, h}, ckpt.values(p + "mlp.gate_proj.weight"));
      expect_tensor(l.w_up, {in, h}, ckpt.values(p + "mlp.up_proj.weight"));
    }
    if (c.qkv_bias) {
      expect_tensor(l.bq, {q}, ckpt.values(p + "self_attn.q_proj.bias"));
      expect_tensor(l.bk, {kv}, ckpt.values(p + "self_attn.k_proj.bias"));
      expect_tensor(l.bv, {kv}, ckpt.values(p + "self_attn.v_proj.bias"));
    } else {
      EXPECT_TRUE(l.bq.empty() && l.bk.empty() && l.bv.empty());
    }
    if (c.qk_norm) {
      expect_tensor(l.q_norm, {c.head_dim}, ckpt.values(p + "self_attn.q_norm.weight"));
      expect_tensor(l.k_norm, {c.head_dim}, ckpt.values(p + "self_attn.k_norm.weight"));
    } else {
      EXPECT_TRUE(l.q_norm.empty() && l.k_norm.empty());
    }
  }
  EXPECT_EQ(w.parameter_count(), ckpt.written_elements());
}

TEST_P(FamilyWeights, TiedEmbeddingsNeedNoLmHead) {
  TempDir dir;
  TinyCheckpoint ckpt(GetParam(), /*tied=*/true);
  ModelWeights w = load_weights(ckpt.config(), *ckpt.write(dir));
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output_matrix(), &w.embed);
  EXPECT_EQ(w.parameter_count(), ckpt.written_elements());
  EXPECT_EQ(parameter_count(ckpt.config()), ckpt.written_elements());
}

TEST_P(FamilyWeights, MissingTensorIsNamed) {
  TempDir dir;
  TinyCheckpoint ckpt(GetParam(), false);
  ckpt.remove("model.layers.1.mlp.down_proj.weight");
  std::string error = load_error(ckpt.config(), *ckpt.write(dir));
  EXPECT_TRUE(
      contains(error, "missing tensor 'model.layers.1.mlp.down_proj.weight' (expected shape [8, 12])"));
  EXPECT_TRUE(contains(error, dir.path().string()));
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyWeights,
                         ::testing::Values("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM",
                                           "Phi3ForCausalLM"));

TEST(Weights, MisShapedTensorNamesBothShapes) {
  TempDir dir;
  TinyCheckpoint ckpt("LlamaForCausalLM", false);
  ckpt.reshape("model.layers.0.self_attn.k_proj.weight", {5, 8});
  std::string error = load_error(ckpt.config(), *ckpt.write(dir));
  EXPECT_TRUE(
      contains(error, "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [5, 8], expected [4, 8]"));
  EXPECT_TRUE(contains(error, dir.path().string()));
}

TEST(Weights, MisShapedFusedPhi3Projection) {
  TempDir dir;
  TinyCheckpoint ckpt("Phi3ForCausalLM", false);
  ckpt.reshape("model.layers.1.mlp.gate_up_proj.weight", {12, 8});
  EXPECT_TRUE(
      contains(load_error(ckpt.config(), *ckpt.write(dir)),
               "tensor 'model.layers.1.mlp.gate_up_proj.weight' has shape [12, 8], expected [24, 8]"));
}

TEST(Weights, Qwen2NeedsItsBiasesAndQwen3ItsNorms) {
  TempDir dir;
  TinyCheckpoint qwen2("Qwen2ForCausalLM", false);
  qwen2.remove("model.layers.0.self_attn.v_proj.bias");
  EXPECT_TRUE(contains(load_error(qwen2.config(), *qwen2.write(dir)),
                       "missing tensor 'model.layers.0.self_attn.v_proj.bias' (expected shape [4])"));
  TempDir dir3;
  TinyCheckpoint qwen3("Qwen3ForCausalLM", false);
  qwen3.reshape("model.layers.1.self_attn.q_norm.weight", {8});
  EXPECT_TRUE(contains(load_error(qwen3.config(), *qwen3.write(dir3)),
                       "tensor 'model.layers.1.self_attn.q_norm.weight' has shape [8], expected [4]"));
}

TEST(Weights, UntiedModelNeedsLmHead) {
  TempDir dir;
  TinyCheckpoint ckpt("Qwen2ForCausalLM", false);
  ckpt.remove("lm_head.weight");
  EXPECT_TRUE(contains(load_error(ckpt.config(), *ckpt.write(dir)), "missing tensor 'lm_head.weight'"));
}

TEST(Weights, TiedCheckpointWithStoredLmHeadUsesEmbedding) {
  TempDir dir;
  TinyCheckpoint ckpt("Qwen3ForCausalLM", true);
  ckpt.add("lm_head.weight", {10, 8});
  ModelWeights w = load_weights(ckpt.config(), *ckpt.write(dir));
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(w.output_matrix().data, ckpt.values("model.embed_tokens.weight"));
}

// The fixtures were written by transformers (tools/make_fixtures.py). The expected parameter counts
// and float64 sums below were computed from them with transformers/torch
// (AutoModelForCausalLM.from_pretrained(dir).num_parameters(), tensor.double().sum()); Phi-3's
// wq/wv/w_up are torch slices of the fused qkv_proj / gate_up_proj.
struct FixtureExpectation {
  const char* dir;
  Family family;
  int64_t parameters;
  double embed, wq1, wk1, wv1, w_gate1, w_up1, wo1, w_down1, final_norm, output;
};

const FixtureExpectation kFixtures[] = {
    {"qwen3", Family::Qwen3, 134208, -1.0521470248691003, -11.14982601867814, -12.370224399594008,
     -8.979292268064455, 7.332599096851482, 7.653317108921328, 29.87968591511708, -15.699195448520186,
     61.65789771080017, -1.0521470248691003},
    {"qwen2", Family::Qwen2, 157504, 9.899645911833773, 6.249058981647977, -8.9120120346779,
     2.0858441440941533, 1.9098252184703597, 15.318468170466076, 8.245436867486433, -2.2640984003592166,
     61.24531006813049, -0.8543442881768897},
    {"llama", Family::Llama, 155456, 49.059909355053605, 3.272453077384853, -2.57788751021144,
     -5.597681799452403, -4.27457937037434, -5.756417802604119, 15.131639999031904, 16.503415388720896,
     64.60068422555923, -17.57106968692483},
    {"phi3", Family::Phi3, 155328, 26.06464589464821, -2.961334587300371, -1.8403184252529172,
     -6.047571431088727, -13.16253331718508, -12.680908606800585, 4.6438744850311195, -2.7067800971740326,
     63.22817653417587, -9.459111868877244},
};

double sum(const Tensor& t) { return std::accumulate(t.data.begin(), t.data.end(), 0.0); }

class FixtureWeights : public ::testing::TestWithParam<FixtureExpectation> {};

TEST_P(FixtureWeights, LoadWithTransformersCountsAndSums) {
  const FixtureExpectation& e = GetParam();
  auto dir = std::filesystem::path(KVDICE_FIXTURES_DIR) / e.dir;
  ModelConfig c = ModelConfig::from_hf_dir(dir);
  EXPECT_EQ(c.family, e.family);
  ModelWeights w = load_weights(c, *open_safetensors_dir(dir));
  EXPECT_EQ(w.parameter_count(), e.parameters);
  EXPECT_EQ(parameter_count(c), e.parameters) << "the shape's count, before any load";
  ASSERT_EQ(w.layers.size(), 2u);
  const LayerWeights& l = w.layers[1];
  // Sums of a few hundred fp32 values in a different order: agreement to ~1e-12 relative.
  auto near = [](double actual, double expected) {
    EXPECT_NEAR(actual, expected, 1e-9 * (1 + std::abs(expected)));
  };
  near(sum(w.embed), e.embed);
  near(sum(l.wq), e.wq1);
  near(sum(l.wk), e.wk1);
  near(sum(l.wv), e.wv1);
  near(sum(l.w_gate), e.w_gate1);
  near(sum(l.w_up), e.w_up1);
  near(sum(l.wo), e.wo1);
  near(sum(l.w_down), e.w_down1);
  near(sum(w.final_norm), e.final_norm);
  near(sum(w.output_matrix()), e.output);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureWeights, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param.dir); });

TEST(FixtureTensors, FamilySpecificTensorsMatchTransformers) {
  auto fixtures = std::filesystem::path(KVDICE_FIXTURES_DIR);
  ModelWeights qwen2 =
      load_weights(ModelConfig::from_hf_dir(fixtures / "qwen2"), *open_safetensors_dir(fixtures / "qwen2"));
  EXPECT_NEAR(sum(qwen2.layers[1].bq), -0.24395304056815803, 1e-9);
  EXPECT_NEAR(sum(qwen2.layers[0].bv), -0.48873661854304373, 1e-9);
  ModelWeights qwen3 =
      load_weights(ModelConfig::from_hf_dir(fixtures / "qwen3"), *open_safetensors_dir(fixtures / "qwen3"));
  EXPECT_NEAR(sum(qwen3.layers[1].k_norm), 28.19243037700653, 1e-9);
  EXPECT_NEAR(sum(qwen3.layers[0].q_norm), 30.56502115726471, 1e-9);
}

}  // namespace
}  // namespace kvdice::model
