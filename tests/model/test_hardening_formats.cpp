// Bad-input matrices for the checkpoint readers (docs/hardening.md): integers in config.json that would be
// narrowed or invented (class 2), files that contradict themselves (class 5), and GGUF metadata whose
// value type is corrupt, which must be named as such, not as a plain truncation (class 6).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "error_text.h"
#include "model/config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/test_gguf_builder.h"

namespace kvdice::model {
namespace {

using namespace kvdice::formats;

const std::string kFixtures = KVDICE_FIXTURES_DIR;

using test::error_of;
using test::has;

Json fixture_config(const std::string& family) {
  return read_json_file(kFixtures + "/" + family + "/config.json");
}

TEST(HardeningConfig, IntegerFieldsAreRangeCheckedNotNarrowed) {
  struct Row {
    const char* field;
    Json value;
    const char* expected;
  };
  const Row rows[] = {
      {"num_hidden_layers", Json(uint64_t{4294967298}), "outside the supported range"},  // ran as 2 layers
      {"num_hidden_layers", Json(1e12), "must be an integer"},  // was "got -727379968"
      {"num_hidden_layers", Json(2.0), "must be an integer"},
      {"num_hidden_layers", Json(true), "must be an integer"},
      {"num_hidden_layers", Json("2"), "must be an integer"},
      {"num_hidden_layers", Json(-1), "must be positive"},
      {"num_hidden_layers", Json(100000), "above the supported maximum"},
      {"hidden_size", Json(int64_t{1} << 31), "outside the supported range"},
      {"hidden_size", Json(1 << 21), "above the supported maximum"},
      {"vocab_size", Json(int64_t{1} << 40), "outside the supported range"},
      {"vocab_size", Json(1 << 25), "above the supported maximum"},
      {"num_attention_heads", Json(1 << 20), "above the supported maximum"},
      {"num_key_value_heads", Json(0), "must be positive"},
      {"head_dim", Json(1 << 20), "above the supported maximum"},
      {"intermediate_size", Json(1 << 30), "above the supported maximum"},
      {"max_position_embeddings", Json(uint64_t{1} << 63), "outside the supported range"},
      {"rope_theta", Json(1e300), "32-bit float"},
      {"rms_norm_eps", Json("1e-6"), "must be a number"},
      {"tie_word_embeddings", Json(1), "true or false"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(row.field) + " = " + row.value.dump());
    Json json = fixture_config("qwen3");
    json[row.field] = row.value;
    const std::string message = error_of([&] { ModelConfig::from_hf_json(json, "config.json"); });
    EXPECT_TRUE(has(message, row.expected)) << message;
    EXPECT_TRUE(has(message, row.field) || has(message, "config.json")) << message;
  }
  // The unmodified fixture still loads.
  EXPECT_NO_THROW(ModelConfig::from_hf_json(fixture_config("qwen3"), "config.json"));
}

TEST(HardeningConfig, LlamaRopeScalingIntegersAreChecked) {
  Json json = fixture_config("llama");
  json["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192.5}};
  EXPECT_TRUE(has(error_of([&] { ModelConfig::from_hf_json(json, "config.json"); }), "must be an integer"));
  json["rope_scaling"]["original_max_position_embeddings"] = uint64_t{1} << 33;
  EXPECT_TRUE(
      has(error_of([&] { ModelConfig::from_hf_json(json, "config.json"); }), "outside the supported range"));
}

TEST(HardeningConfig, ModelTypeMustAgreeWithArchitectures) {
  struct Row {
    const char* family;
    const char* model_type;
  };
  for (const Row row :
       {Row{"qwen3", "qwen2"}, Row{"qwen2", "llama"}, Row{"llama", "phi3"}, Row{"phi3", "mistral"}}) {
    SCOPED_TRACE(std::string(row.family) + " with model_type " + row.model_type);
    Json json = fixture_config(row.family);
    json["model_type"] = row.model_type;
    const std::string message = error_of([&] { ModelConfig::from_hf_json(json, "config.json"); });
    EXPECT_TRUE(has(message, "contradicts architectures")) << message;
    EXPECT_TRUE(has(message, row.model_type)) << message;
  }
  for (const char* family : {"qwen3", "qwen2", "llama", "phi3"}) {
    EXPECT_NO_THROW(ModelConfig::from_hf_json(fixture_config(family), "config.json")) << family;
  }
}

TEST(HardeningConfig, DuplicateKeysInConfigFilesAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvdice_dupcfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text = read_regular_file(kFixtures + "/qwen3/config.json", 1 << 20);
  // A second num_hidden_layers after the first: nlohmann alone would silently take the last one.
  text.insert(text.find('{') + 1, "\"num_hidden_layers\": 40,");
  st_test::write_text(dir / "config.json", text);
  const std::string message = error_of([&] { ModelConfig::from_hf_dir(dir); });
  EXPECT_TRUE(has(message, "duplicate key 'num_hidden_layers'")) << message;
  st_test::write_text(dir / "generation_config.json", R"({"eos_token_id": 4294967296})");
  EXPECT_TRUE(has(error_of([&] { GenerationConfig::from_hf_dir(dir); }), "outside the supported range"));
  st_test::write_text(dir / "generation_config.json", R"({"eos_token_id": [1, -5]})");
  EXPECT_TRUE(has(error_of([&] { GenerationConfig::from_hf_dir(dir); }), "negative"));
  st_test::write_text(dir / "generation_config.json", R"({"eos_token_id": 2.5})");
  EXPECT_TRUE(has(error_of([&] { GenerationConfig::from_hf_dir(dir); }), "must be an integer"));
  std::filesystem::remove_all(dir);
}

TEST(HardeningSafetensors, DuplicateHeaderKeysAreRefused) {
  const std::string header = R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                             R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  const auto bytes = st_test::raw_safetensors(header, std::vector<uint8_t>(8, 0));
  const std::string message = error_of([&] { parse_safetensors_header(bytes, "m.safetensors"); });
  EXPECT_TRUE(has(message, "duplicate key 'w'")) << message;
  // Inside one entry as well: two dtypes for one tensor.
  const std::string inner =
      R"({"w": {"dtype": "F32", "dtype": "BF16", "shape": [1], "data_offsets": [0, 4]}})";
  EXPECT_TRUE(has(error_of([&] {
                    parse_safetensors_header(st_test::raw_safetensors(inner, std::vector<uint8_t>(4, 0)),
                                             "m");
                  }),
                  "duplicate key 'dtype'"));
}

// Two F32 [8] tensors; `offset_b` places the second one in the data section.
test::GgufBuilder two_tensors(uint64_t offset_b) {
  test::GgufBuilder b;
  b.header(3, 2, 1).kv_string("general.architecture", "qwen2");
  b.tensor_info("a", {8}, 0, 0).tensor_info("b", {8}, 0, offset_b);
  b.pad_to(32).zeros(128);
  return b;
}

TEST(HardeningGguf, TensorsSharingBytesAreRefused) {
  // Both at offset 0: the same bytes.
  const std::string message = error_of([&] { GgufFile::parse(two_tensors(0).bytes, "t.gguf"); });
  EXPECT_TRUE(has(message, "share bytes")) << message;
  // Partial overlap: a is [0, 32), a 64-byte tensor at 0 would overlap b at 32.
  test::GgufBuilder b;
  b.header(3, 2, 1).kv_string("general.architecture", "qwen2");
  b.tensor_info("a", {16}, 0, 0).tensor_info("b", {8}, 0, 32);
  b.pad_to(32).zeros(128);
  EXPECT_TRUE(has(error_of([&] { GgufFile::parse(b.bytes, "t.gguf"); }), "tensors a [0, 64) and b [32, 64)"));
  // Adjacent tensors are fine.
  EXPECT_NO_THROW(GgufFile::parse(two_tensors(32).bytes, "t.gguf"));
}

TEST(HardeningGguf, TypeConfusedMetadataIsNamedAsSuch) {
  // A u32 value whose type byte says string: its 4 bytes plus the next key's length become a huge length.
  test::GgufBuilder b;
  b.header(3, 0, 2).str("llama.block_count").u32(8).u32(28);
  b.kv_string("general.architecture", "llama");
  const std::string message = error_of([&] { GgufFile::parse(b.bytes, "t.gguf"); });
  EXPECT_TRUE(has(message, "metadata llama.block_count is declared a string")) << message;
  EXPECT_TRUE(has(message, "corrupt value type")) << message;
  // Same for an array whose element count is garbage.
  test::GgufBuilder a;
  a.header(3, 0, 1).str("tokenizer.ggml.scores").u32(9).u32(6).u64(uint64_t{1} << 60);
  const std::string array_message = error_of([&] { GgufFile::parse(a.bytes, "t.gguf"); });
  EXPECT_TRUE(has(array_message, "declared an array of")) << array_message;
  // A key holding NUL and escape bytes is printed escaped and whole.
  test::GgufBuilder k;
  k.header(3, 0, 1).str(std::string("gen\0eral\x1b[31m", 13)).u32(99);
  const std::string key_message = error_of([&] { GgufFile::parse(k.bytes, "t.gguf"); });
  EXPECT_TRUE(has(key_message, "gen\\x00eral\\x1b[31m")) << key_message;
  EXPECT_TRUE(has(key_message, "unknown metadata value type 99")) << key_message;
}

TEST(HardeningGguf, AChangedValueTypeNamesTheValueNotATruncation) {
  // A u64 value whose type byte says u32: the next key's length is read from the value's high half and
  // the key's first bytes, and was reported as "truncated GGUF: metadata key needs 7954895644034859008
  // bytes". Keys are at most 65535 bytes by the format, so the value before it is named instead.
  test::GgufBuilder b;
  b.header(3, 0, 2).str("general.file_type").u32(4).u64(7);
  b.kv_string("general.architecture", "llama");
  const std::string message = error_of([&] { GgufFile::parse(b.bytes, "t.gguf"); });
  EXPECT_FALSE(has(message, "truncated")) << message;
  EXPECT_TRUE(has(message, "metadata key at offset")) << message;
  EXPECT_TRUE(has(message, "key general.file_type, type u32")) << message;
  // A tensor name longer than the format's 64 bytes.
  test::GgufBuilder t;
  t.header(3, 1, 1).kv_string("general.architecture", "llama");
  t.tensor_info(std::string(65, 'w'), {4}, 0, 0);
  const std::string name_message = error_of([&] { GgufFile::parse(t.bytes, "t.gguf"); });
  EXPECT_TRUE(has(name_message, "tensor name at offset")) << name_message;
  EXPECT_TRUE(has(name_message, "more than the format's 64")) << name_message;
  // A string value whose length runs past the end says so, not "needs N bytes".
  test::GgufBuilder s;
  s.header(3, 0, 1).str("general.name").u32(9).u32(8).u64(1).u64(3).raw("ab", 2);
  const std::string string_message = error_of([&] { GgufFile::parse(s.bytes, "t.gguf"); });
  EXPECT_TRUE(has(string_message, "declared a string of")) << string_message;
}

}  // namespace
}  // namespace kvdice::model
