// config.json in both dialects (hub: top-level rope_theta/rope_scaling/torch_dtype; transformers 5:
// rope_parameters/dtype), the checks on unsupported features, and generation_config.json.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/config.h"
#include "model/safetensors_writer.h"

namespace kvdice::model {
namespace {

using kvdice::st_test::contains;
using kvdice::st_test::TempDir;
using kvdice::st_test::write_text;

// R1-Distill-Llama-8B's shape as the hub writes it.
Json llama_hub() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "attention_bias": false, "mlp_bias": false})");
}

// The same model as transformers 5 saves it: RoPE nested under rope_parameters, "dtype".
Json llama_transformers5() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "head_dim": 128,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"},
    "tie_word_embeddings": false, "dtype": "bfloat16", "attention_bias": false, "mlp_bias": false})");
}

// Qwen3-0.6B as transformers 5 writes it.
Json qwen3_transformers5() {
  return Json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
    "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "head_dim": 128,
    "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "attention_bias": false,
    "layer_types": ["full_attention", "full_attention"], "sliding_window": null, "use_sliding_window": false,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "tie_word_embeddings": true, "dtype": "bfloat16"})");
}

// Phi-4's shape, hub dialect.
Json phi4_hub() {
  return Json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_act": "silu",
    "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
    "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352,
    "max_position_embeddings": 16384, "original_max_position_embeddings": 16384, "rms_norm_eps": 1e-05,
    "rope_theta": 250000.0, "rope_scaling": null, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"})");
}

std::string config_error(const Json& json) {
  try {
    ModelConfig::from_hf_json(json, "dir/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.intermediate, b.intermediate);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_position, b.max_position);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position, b.rope_scaling.original_max_position);
  EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.dtype, b.dtype);
}

TEST(ModelConfig, ReadsHubDialectWithLlama3Scaling) {
  auto c = ModelConfig::from_hf_json(llama_hub(), "config.json");
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_EQ(family_name(c.family), "llama");
  EXPECT_EQ(c.head_dim, 128);  // no head_dim field: hidden / heads
  EXPECT_EQ(c.group_size(), 4);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.kv_bytes_per_token(), 131072);  // docs/reference.md §7
}

TEST(ModelConfig, BothDialectsGiveTheSameConfig) {
  expect_same(ModelConfig::from_hf_json(llama_hub(), "hub"),
              ModelConfig::from_hf_json(llama_transformers5(), "t5"));

  Json qwen3_hub = qwen3_transformers5();
  qwen3_hub.erase("rope_parameters");
  qwen3_hub.erase("dtype");
  qwen3_hub["rope_theta"] = 1000000;
  qwen3_hub["rope_scaling"] = nullptr;
  qwen3_hub["torch_dtype"] = "bfloat16";
  expect_same(ModelConfig::from_hf_json(qwen3_hub, "hub"),
              ModelConfig::from_hf_json(qwen3_transformers5(), "t5"));
}

TEST(ModelConfig, ReadsQwen3) {
  auto c = ModelConfig::from_hf_json(qwen3_transformers5(), "config.json");
  EXPECT_EQ(c.family, Family::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.kv_bytes_per_token(), 114688);  // docs/reference.md §7
}

TEST(ModelConfig, ReadsQwen2WithBiases) {
  Json j = qwen3_transformers5();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";  // must agree with architectures
  j.erase("head_dim");
  auto c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.family, Family::Qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 1024 / 16);
}

TEST(ModelConfig, ReadsPhi3AndPartialRotary) {
  auto c = ModelConfig::from_hf_json(phi4_hub(), "config.json");
  EXPECT_EQ(c.family, Family::Phi3);
  EXPECT_EQ(c.kv_bytes_per_token(), 204800);  // docs/reference.md §7
  EXPECT_EQ(c.partial_rotary_factor, 1.0f);

  Json top = phi4_hub();
  top["partial_rotary_factor"] = 0.75;
  EXPECT_EQ(ModelConfig::from_hf_json(top, "c").partial_rotary_factor, 0.75f);

  Json nested = phi4_hub();
  nested.erase("rope_theta");
  nested.erase("rope_scaling");
  nested["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 250000.0}, {"partial_rotary_factor", 0.5}};
  auto n = ModelConfig::from_hf_json(nested, "c");
  EXPECT_EQ(n.partial_rotary_factor, 0.5f);
  EXPECT_EQ(n.rope_theta, 250000.0f);
}

TEST(ModelConfig, DefaultsWhenOptionalFieldsAreAbsent) {
  Json j = llama_hub();
  for (const char* key :
       {"num_key_value_heads", "tie_word_embeddings", "rope_scaling", "rope_theta", "torch_dtype"}) {
    j.erase(key);
  }
  auto c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.rope_theta, 10000.0f);
}

TEST(ModelConfig, ReadsDtypeField) {
  Json j = llama_transformers5();
  j["dtype"] = "float32";
  EXPECT_EQ(ModelConfig::from_hf_json(j, "c").dtype, DType::F32);
  j["dtype"] = "float16";
  EXPECT_EQ(ModelConfig::from_hf_json(j, "c").dtype, DType::F16);
  j["dtype"] = "int8";
  EXPECT_TRUE(
      contains(config_error(j), "field 'dtype' is 'int8', expected one of bfloat16, float16, float32"));
}

TEST(ModelConfig, RejectsUnsupportedArchitecture) {
  Json j = llama_hub();
  j["architectures"] = {"MistralForCausalLM"};
  std::string error = config_error(j);
  EXPECT_TRUE(contains(error, "dir/config.json"));
  EXPECT_TRUE(contains(error, "unsupported architecture 'MistralForCausalLM'"));
  EXPECT_TRUE(contains(error, "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, Phi3ForCausalLM"));
  j.erase("architectures");
  EXPECT_TRUE(contains(config_error(j), "'architectures' must be a non-empty list"));
}

TEST(ModelConfig, RejectsUnsupportedRopeTypes) {
  for (const char* type : {"yarn", "longrope", "dynamic", "linear"}) {
    Json hub = llama_hub();
    hub["rope_scaling"] = {{"type", type}, {"factor", 4.0}};
    std::string error = config_error(hub);
    EXPECT_TRUE(contains(error, fmt::format("unsupported rope type '{}'", type)));
    EXPECT_TRUE(contains(error, "dir/config.json rope_scaling"));

    Json t5 = llama_transformers5();
    t5["rope_parameters"] = {{"rope_type", type}, {"rope_theta", 1e6}, {"factor", 4.0}};
    EXPECT_TRUE(contains(config_error(t5), fmt::format("unsupported rope type '{}'", type)));
  }
  Json missing = llama_hub();
  missing["rope_scaling"].erase("low_freq_factor");
  EXPECT_TRUE(contains(config_error(missing), "missing required field 'low_freq_factor'"));
}

TEST(ModelConfig, RejectsFeaturesItCannotRun) {
  Json j = qwen3_transformers5();
  j["use_sliding_window"] = true;
  EXPECT_TRUE(contains(config_error(j), "sliding-window attention is not supported"));
  j = qwen3_transformers5();
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_TRUE(contains(config_error(j), "only full_attention layers are supported"));
  j = llama_hub();
  j["attention_bias"] = true;
  EXPECT_TRUE(contains(config_error(j), "attention_bias is true for LlamaForCausalLM"));
  j = llama_hub();
  j["mlp_bias"] = true;
  EXPECT_TRUE(contains(config_error(j), "mlp_bias is true"));
  j = phi4_hub();
  j["sliding_window"] = 2047;
  EXPECT_TRUE(contains(config_error(j), "sliding_window 2047 is below max_position_embeddings 16384"));
  j = llama_hub();
  j["hidden_act"] = "gelu";
  EXPECT_TRUE(contains(config_error(j), "hidden_act is 'gelu', expected silu"));
}

TEST(ModelConfig, ValidateRejectsBadShapes) {
  Json j = llama_hub();
  j.erase("hidden_size");
  EXPECT_TRUE(contains(config_error(j), "dir/config.json: missing required field 'hidden_size'"));
  j = llama_hub();
  j["num_key_value_heads"] = 5;
  EXPECT_TRUE(contains(config_error(j), "num_attention_heads 32 is not a multiple of num_key_value_heads 5"));
  j = llama_hub();
  j["head_dim"] = 127;
  EXPECT_TRUE(contains(config_error(j), "head_dim 127 must be even"));
  j = llama_hub();
  j["num_hidden_layers"] = 0;
  EXPECT_TRUE(contains(config_error(j), "num_hidden_layers must be positive, got 0"));
  j = llama_hub();
  j["hidden_size"] = 4095;
  EXPECT_TRUE(contains(config_error(j), "hidden_size 4095 is not a multiple of num_attention_heads 32"));
  j = phi4_hub();
  j["partial_rotary_factor"] = 0.3;
  EXPECT_TRUE(contains(config_error(j), "expected an even integer"));
  j = llama_hub();
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  EXPECT_TRUE(contains(config_error(j), "0 < low_freq_factor < high_freq_factor"));
  j = llama_hub();
  j["vocab_size"] = "many";
  EXPECT_TRUE(contains(config_error(j), "field 'vocab_size' must be an integer"));
}

TEST(ModelConfig, FromDirectoryNamesTheFile) {
  TempDir dir;
  try {
    ModelConfig::from_hf_dir(dir.path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), (dir / "config.json").string()));
  }
  Json j = llama_hub();
  j["architectures"] = {"GPT2LMHeadModel"};
  write_text(dir / "config.json", j.dump());
  try {
    ModelConfig::from_hf_dir(dir.path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(
        contains(e.what(), (dir / "config.json").string() + ": unsupported architecture 'GPT2LMHeadModel'"));
  }
  write_text(dir / "config.json", llama_transformers5().dump());
  EXPECT_EQ(ModelConfig::from_hf_dir(dir.path()).n_layers, 32);
}

// The fixtures, saved by transformers: qwen3/phi3 in the transformers-5 dialect, qwen2/llama in the hub one.
TEST(ModelConfig, FixtureConfigsLoadInBothDialects) {
  auto fixtures = std::filesystem::path(KVDICE_FIXTURES_DIR);
  auto qwen3 = ModelConfig::from_hf_dir(fixtures / "qwen3");
  EXPECT_EQ(qwen3.family, Family::Qwen3);
  EXPECT_TRUE(qwen3.qk_norm && qwen3.tie_embeddings);
  EXPECT_EQ(qwen3.head_dim, 32);
  EXPECT_EQ(qwen3.q_dim(), 128);
  EXPECT_EQ(qwen3.rope_theta, 1e6f);
  EXPECT_EQ(qwen3.dtype, DType::F32);

  auto qwen2 = ModelConfig::from_hf_dir(fixtures / "qwen2");
  EXPECT_EQ(qwen2.family, Family::Qwen2);
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_EQ(qwen2.head_dim, 16);
  EXPECT_EQ(qwen2.rope_theta, 1e6f);
  EXPECT_EQ(qwen2.dtype, DType::F32);

  auto llama = ModelConfig::from_hf_dir(fixtures / "llama");
  EXPECT_EQ(llama.family, Family::Llama);
  EXPECT_EQ(llama.rope_scaling.type, "llama3");
  EXPECT_EQ(llama.rope_scaling.factor, 8.0f);
  EXPECT_EQ(llama.rope_scaling.original_max_position, 64);
  EXPECT_EQ(llama.rms_eps, 1e-5f);

  auto phi3 = ModelConfig::from_hf_dir(fixtures / "phi3");
  EXPECT_EQ(phi3.family, Family::Phi3);
  EXPECT_EQ(phi3.rope_theta, 250000.0f);
  EXPECT_EQ(phi3.partial_rotary_factor, 1.0f);
  EXPECT_FALSE(phi3.tie_embeddings);

  auto generation = GenerationConfig::from_hf_dir(fixtures / "qwen3");
  EXPECT_EQ(generation.eos_ids, (std::vector<int>{722, 720}));
  EXPECT_EQ(generation.top_k, 20);
  EXPECT_EQ(GenerationConfig::from_hf_dir(fixtures / "phi3").eos_ids, (std::vector<int>{728}));
}

TEST(GenerationConfig, AbsentFileGivesEmptyConfig) {
  TempDir dir;
  auto g = GenerationConfig::from_hf_dir(dir.path());
  EXPECT_TRUE(g.eos_ids.empty());
  EXPECT_FALSE(g.bos_id || g.temperature || g.top_p || g.top_k);
}

TEST(GenerationConfig, ReadsEosListAndSamplingDefaults) {
  TempDir dir;
  write_text(dir / "generation_config.json", R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643],
      "do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "transformers_version": "4.51.0"})");
  auto g = GenerationConfig::from_hf_dir(dir.path());
  EXPECT_EQ(g.eos_ids, (std::vector<int>{151645, 151643}));
  EXPECT_EQ(g.bos_id, 151643);
  EXPECT_EQ(g.temperature, 0.6f);
  EXPECT_EQ(g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
}

TEST(GenerationConfig, ReadsSingleEosAndRejectsBadIds) {
  TempDir dir;
  write_text(dir / "generation_config.json", R"({"eos_token_id": 2, "bos_token_id": null})");
  auto g = GenerationConfig::from_hf_dir(dir.path());
  EXPECT_EQ(g.eos_ids, (std::vector<int>{2}));
  EXPECT_FALSE(g.bos_id);
  EXPECT_FALSE(g.temperature);

  write_text(dir / "generation_config.json", R"({"eos_token_id": "</s>"})");
  try {
    GenerationConfig::from_hf_dir(dir.path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "generation_config.json: eos_token_id must be an integer"));
  }
}

}  // namespace
}  // namespace kvdice::model
