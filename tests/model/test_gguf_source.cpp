// GGUF as a model source: config, tokenizer parts, stop ids and HF-named tensors from the tiny
// fixtures written by tools/make_gguf_goldens.py (llama q/k rows permuted as llama.cpp's converter does).
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "core/json.h"
#include "model/gguf_source.h"
#include "model/test_gguf_builder.h"
#include "error_text.h"

namespace kvdice::model {
namespace {

using test::error_of;

const std::string kDir = std::string(KVDICE_FIXTURES_DIR) + "/gguf/";

const Json& expected() {
  static const Json j = read_json_file(kDir + "tiny_models.expected.json");
  return j;
}

TEST(GgufSource, HfNames) {
  EXPECT_EQ(gguf_to_hf_name("token_embd.weight", "qwen2"), "model.embed_tokens.weight");
  EXPECT_EQ(gguf_to_hf_name("output_norm.weight", "qwen2"), "model.norm.weight");
  EXPECT_EQ(gguf_to_hf_name("output.weight", "llama"), "lm_head.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_norm.weight", "qwen3"), "model.layers.12.input_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.attn_q.bias", "qwen2"), "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_k_norm.weight", "qwen3"), "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_output.weight", "llama"), "model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_norm.weight", "llama"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_gate.weight", "llama"), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_down.weight", "llama"), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_up.weight", "llama"), "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.ffn_up.weight", "phi3"), "model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_qkv.weight", "phi3"), "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("rope_freqs.weight", "llama"), std::nullopt);
  EXPECT_EQ(gguf_to_hf_name("blk.x.attn_q.weight", "llama"), std::nullopt);
  EXPECT_EQ(gguf_to_hf_name("blk.1.attn_q.scale", "llama"), std::nullopt);
  EXPECT_EQ(gguf_to_hf_name("blk.1.unknown.weight", "llama"), std::nullopt);
}

TEST(GgufSource, TinyQwen2) {
  auto file = std::make_shared<const GgufFile>(GgufFile::open(kDir + "tiny_qwen2.gguf"));
  const ModelConfig c = config_from_gguf(*file);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.family, Family::Qwen2);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.hidden, 32);
  EXPECT_EQ(c.intermediate, 48);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab, 10);
  EXPECT_EQ(c.max_position, 512);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);

  const tokenizer::TokenizerParts t = tokenizer_parts_from_gguf(*file);
  EXPECT_EQ(t.vocab, (std::vector<std::string>{"a", "b", "c", "ab", "Ġ", "<|im_start|>", "<|im_end|>",
                                               "<|endoftext|>", "<tool_call>", "abc"}));
  ASSERT_EQ(t.merges.size(), 2u);
  EXPECT_EQ(t.merges[1], (std::pair<std::string, std::string>{"ab", "c"}));
  ASSERT_EQ(t.added.size(), 4u);
  EXPECT_EQ(t.added[0].id, 5);
  EXPECT_EQ(t.added[0].content, "<|im_start|>");
  EXPECT_TRUE(t.added[0].special);
  EXPECT_EQ(t.added[3].id, 8);
  EXPECT_FALSE(t.added[3].special);  // user-defined, like Qwen's <tool_call>
  EXPECT_EQ(t.pre, tokenizer::PreTokenizer::Qwen2);
  EXPECT_TRUE(t.nfc);
  EXPECT_EQ(t.bos_id, 7);
  EXPECT_FALSE(t.add_bos);
  EXPECT_NE(t.chat_template.find("<|im_start|>"), std::string::npos);

  const GenerationConfig g = generation_config_from_gguf(*file);
  EXPECT_EQ(g.eos_ids, (std::vector<int>{6, 7}));  // eos id, then <|endoftext|> as end of turn
  EXPECT_EQ(g.bos_id, 7);

  GgufSource source(file);
  EXPECT_EQ(source.describe(), kDir + "tiny_qwen2.gguf");
  auto embed = source.find("model.embed_tokens.weight");
  ASSERT_TRUE(embed.has_value());
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{10, 32}));
  EXPECT_EQ(embed->dtype, "F32");
  EXPECT_TRUE(source.find("model.layers.1.self_attn.q_proj.bias").has_value());
  EXPECT_TRUE(source.find("lm_head.weight").has_value());
  EXPECT_FALSE(source.find("blk.0.attn_q.weight").has_value());
  EXPECT_EQ(source.list().size(), file->tensors().size());
  Tensor q = source.load_f32("model.layers.0.self_attn.q_proj.weight");  // qwen2: stored unpermuted
  EXPECT_EQ(q.shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(q.data, expected()["qwen2"]["q_proj"].get<std::vector<float>>());
  std::string m = error_of([&] { source.load_f32("model.layers.9.mlp.up_proj.weight"); });
  EXPECT_NE(m.find("model.layers.9.mlp.up_proj.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("tiny_qwen2.gguf"), std::string::npos) << m;
}

TEST(GgufSource, TinyLlamaUnpermutesQkAndReadsLlama3Rope) {
  auto file = std::make_shared<const GgufFile>(GgufFile::open(kDir + "tiny_llama.gguf"));
  const ModelConfig c = config_from_gguf(*file);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_theta, 5e5f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);

  const tokenizer::TokenizerParts t = tokenizer_parts_from_gguf(*file);
  EXPECT_EQ(t.pre, tokenizer::PreTokenizer::Llama3);
  EXPECT_FALSE(t.nfc);
  EXPECT_TRUE(t.add_bos);  // llama-bpe default when the file does not say
  EXPECT_EQ(generation_config_from_gguf(*file).eos_ids, (std::vector<int>{7, 6}));

  GgufSource source(file);
  EXPECT_FALSE(source.find("rope_freqs.weight").has_value());
  Tensor q = source.load_f32("model.layers.0.self_attn.q_proj.weight");
  Tensor k = source.load_f32("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(q.data, expected()["llama"]["q_proj"].get<std::vector<float>>());
  EXPECT_EQ(k.data, expected()["llama"]["k_proj"].get<std::vector<float>>());
  // the stored rows really are permuted (otherwise this test would prove nothing)
  EXPECT_NE(file->dequantize(file->tensor("blk.0.attn_q.weight")), q.data);
}

// A minimal header-only model description in the builder, varied per test.
test::GgufBuilder model_file(std::string_view arch, std::string_view tokenizer_model = "gpt2",
                             std::string_view pre = "qwen2") {
  test::GgufBuilder b;
  const std::string a(arch);
  b.header(3, 0, 10).kv_string("general.architecture", arch);
  b.kv_u32(a + ".block_count", 1).kv_u32(a + ".embedding_length", 8).kv_u32(a + ".feed_forward_length", 16);
  b.kv_u32(a + ".attention.head_count", 2).kv_u32(a + ".context_length", 64);
  b.kv_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  b.kv_string("tokenizer.ggml.model", tokenizer_model).kv_string("tokenizer.ggml.pre", pre);
  b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("a").str("b");
  return b;
}

TEST(GgufSource, HeaderOnlyModelAndErrors) {
  auto parse = [](const test::GgufBuilder& b) { return GgufFile::parse(b.bytes, "m.gguf"); };
  auto qwen3 = model_file("qwen3");
  GgufFile f = parse(qwen3);
  const ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.family, Family::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_kv_heads, 2);  // head_count_kv defaults to head_count
  EXPECT_EQ(c.head_dim, 4);    // no key_length: hidden / heads
  EXPECT_EQ(c.vocab, 2);
  EXPECT_EQ(c.rope_theta, 10000.0f);

  auto gemma = model_file("gemma3");
  std::string m = error_of([&] { config_from_gguf(parse(gemma)); });
  EXPECT_NE(m.find("m.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find("'gemma3'"), std::string::npos) << m;
  EXPECT_NE(m.find("qwen2, qwen3, llama, phi3"), std::string::npos) << m;

  m = error_of([&] { tokenizer_parts_from_gguf(parse(model_file("llama", "llama"))); });
  EXPECT_NE(m.find("tokenizer.ggml.model is 'llama'"), std::string::npos) << m;
  m = error_of([&] { tokenizer_parts_from_gguf(parse(model_file("llama", "gpt2", "tekken"))); });
  EXPECT_NE(m.find("tokenizer.ggml.pre is 'tekken'"), std::string::npos) << m;

  auto yarn = model_file("qwen2");
  yarn.kv_string("qwen2.rope.scaling.type", "yarn");
  yarn.bytes[16] = 11;  // kv count
  m = error_of([&] { config_from_gguf(parse(yarn)); });
  EXPECT_NE(m.find("qwen2.rope.scaling.type is 'yarn'"), std::string::npos) << m;

  auto bad_type = model_file("qwen2");
  bad_type.kv_string("qwen2.attention.head_count_kv", "two");
  bad_type.bytes[16] = 11;
  m = error_of([&] { config_from_gguf(parse(bad_type)); });
  EXPECT_NE(m.find("qwen2.attention.head_count_kv is string, expected an integer"), std::string::npos) << m;

  auto missing = model_file("qwen2");
  missing.bytes[16] = 9;  // drop the tokens array: the last entry
  auto cut = missing;
  m = error_of([&] { tokenizer_parts_from_gguf(parse(cut)); });
  EXPECT_NE(m.find("tokenizer.ggml.tokens"), std::string::npos) << m;
}

}  // namespace
}  // namespace kvdice::model

namespace kvdice::model {
namespace {

// F16 and BF16 matrices are handed out as stored (16-bit rows, ggml's type ids; the CPU backend's
// --cpu-math fast reads them in place), F32 ones and 16-bit vectors are not, and llama's permuted
// q rows never are.
TEST(GgufSource, SixteenBitMatricesAreHandedOutAsStored) {
  for (const char* arch : {"qwen2", "llama"}) {
    SCOPED_TRACE(arch);
    test::GgufBuilder b;
    b.header(3, 4, 3).kv_string("general.architecture", arch);
    b.kv_u32(std::string(arch) + ".attention.head_count", 1).kv_u32(std::string(arch) + ".attention.head_count_kv", 1);
    // GGUF dims are innermost first: [cols, rows].
    b.tensor_info("blk.0.ffn_up.weight", {4, 2}, 1, 0)      // F16, 16 bytes
        .tensor_info("blk.0.ffn_down.weight", {2, 4}, 30, 32)  // BF16, 16 bytes
        .tensor_info("blk.0.attn_q.weight", {2, 2}, 1, 64)     // F16 (permuted rows on llama)
        .tensor_info("output_norm.weight", {4}, 1, 96);        // F16 vector
    b.pad_to(32);
    const size_t data = b.bytes.size();
    b.zeros(128);
    for (int i = 0; i < 16; ++i) b.bytes[data + i] = static_cast<uint8_t>(i + 1);
    const auto file = std::make_shared<const GgufFile>(GgufFile::parse(b.bytes, "test.gguf"));
    const GgufSource source(file);
    const auto up = source.stored_blocks("model.layers.0.mlp.up_proj.weight");
    const auto down = source.stored_blocks("model.layers.0.mlp.down_proj.weight");
    ASSERT_TRUE(up.has_value() && down.has_value());
    EXPECT_EQ(up->ggml_type, 1u);
    EXPECT_EQ(up->rows, 2);
    EXPECT_EQ(up->cols, 4);
    EXPECT_EQ(up->row_bytes, 8);
    EXPECT_EQ(up->data, b.bytes.data() + data);
    EXPECT_EQ(down->ggml_type, 30u);
    EXPECT_EQ(down->rows, 4);
    EXPECT_EQ(down->cols, 2);
    EXPECT_EQ(down->row_bytes, 4);
    EXPECT_FALSE(source.stored_blocks("model.norm.weight").has_value());
    EXPECT_EQ(source.stored_blocks("model.layers.0.self_attn.q_proj.weight").has_value(), std::string(arch) != "llama");
  }
}

}  // namespace
}  // namespace kvdice::model
