// Safetensors header validation and the directory source: exact dtype conversion, and one test per
// kind of malformed input, each checking that the error names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <limits>
#include <random>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/safetensors_writer.h"

namespace kvdice::formats {
namespace {

using namespace kvdice::st_test;

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    parse_safetensors_header(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsSource source(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<uint8_t> two_tensor_file() {
  return safetensors_bytes({f32_tensor("a", {2, 3}, {1, 2, 3, 4, 5, 6}), f32_tensor("b", {2}, {7, 8})},
                           Json{{"format", "pt"}});
}

TEST(SafetensorsHeader, ParsesEntriesOffsetsAndMetadata) {
  auto header = parse_safetensors_header(two_tensor_file(), "test.safetensors");
  ASSERT_EQ(header.tensors.size(), 2u);
  const auto* a = header.find("a");
  const auto* b = header.find("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(header.find("c"), nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->begin, 0u);
  EXPECT_EQ(a->end, 24u);
  EXPECT_EQ(b->begin, 24u);
  EXPECT_EQ(b->end, 32u);
  EXPECT_EQ(header.data_size, 32u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
}

TEST(SafetensorsHeader, AcceptsEmptyTensorsAndScalars) {
  auto bytes = safetensors_bytes({f32_tensor("empty", {0, 4}, {}), f32_tensor("scalar", {}, {3.5f})});
  auto header = parse_safetensors_header(bytes, "t");
  EXPECT_EQ(header.find("scalar")->end - header.find("scalar")->begin, 4u);
  // A zero dimension empties the tensor even when the other dimensions' product would overflow.
  auto huge_empty = parse_safetensors_header(
      raw_safetensors(
          R"({"e": {"dtype": "F64", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", {}),
      "t");
  EXPECT_EQ(huge_empty.find("e")->shape.size(), 3u);
}

TEST(SafetensorsHeader, RejectsTruncatedFile) {
  EXPECT_TRUE(contains(parse_error({1, 0, 0}), "truncated safetensors file: 3 bytes"));
  EXPECT_TRUE(contains(parse_error({}), "test.safetensors"));
}

TEST(SafetensorsHeader, RejectsHeaderLengthBeyondFile) {
  auto bytes = two_tensor_file();
  bytes[7] = 0x10;  // header length now ~2^60
  EXPECT_TRUE(contains(parse_error(bytes), "exceeds the"));
  auto cut = raw_safetensors("{}", {});
  cut.pop_back();  // the header's last byte is missing
  EXPECT_TRUE(contains(parse_error(cut), "header length 2 exceeds the 1 bytes"));
}

TEST(SafetensorsHeader, RejectsTruncatedDataBuffer) {
  auto bytes = two_tensor_file();
  bytes.resize(bytes.size() - 4);
  std::string error = parse_error(bytes);
  EXPECT_TRUE(contains(error, "tensor 'b'"));
  EXPECT_TRUE(contains(error, "run past the data buffer of 28 bytes"));
}

TEST(SafetensorsHeader, RejectsNonJsonAndNonObjectHeaders) {
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{\"a\": ", {})), "header: invalid JSON"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("[1, 2]", {})), "header must be a JSON object"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"a": 5})", {})), "tensor 'a': expected an object"));
}

TEST(SafetensorsHeader, RejectsMissingOrMistypedFields) {
  std::vector<uint8_t> data(8);
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", data)),
                       "tensor 'a': missing string field 'dtype'"));
  EXPECT_TRUE(
      contains(parse_error(raw_safetensors(R"({"a": {"dtype": "F32", "data_offsets": [0, 8]}})", data)),
               "missing array field 'shape'"));
  EXPECT_TRUE(contains(
      parse_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data)),
      "shape must hold non-negative integers, found -2"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(
                           R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", data)),
                       "shape must hold non-negative integers"));
  EXPECT_TRUE(contains(
      parse_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", data)),
      "data_offsets must be an array [begin, end]"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(
                           R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]}})", data)),
                       "data_offsets must hold non-negative integers"));
}

TEST(SafetensorsHeader, RejectsUnknownDtype) {
  std::string error = parse_error(raw_safetensors(
      R"({"w": {"dtype": "F12", "shape": [2], "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)));
  EXPECT_TRUE(contains(error, "tensor 'w': unknown dtype 'F12'"));
  EXPECT_TRUE(contains(error, "BF16"));
}

TEST(SafetensorsHeader, RejectsBadOffsets) {
  std::vector<uint8_t> data(16);
  EXPECT_TRUE(contains(
      parse_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", data)),
      "data_offsets [8, 4] has begin after end"));
  EXPECT_TRUE(contains(
      parse_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", data)),
      "data_offsets [8, 24] run past the data buffer of 16 bytes"));
  EXPECT_TRUE(contains(
      parse_error(raw_safetensors(
          R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551615, 3]}})", data)),
      "begin after end"));
}

TEST(SafetensorsHeader, RejectsSizeShapeMismatch) {
  std::string error = parse_error(raw_safetensors(
      R"({"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", std::vector<uint8_t>(8)));
  EXPECT_TRUE(
      contains(error, "tensor 'a': shape [2,3] of BF16 needs 12 bytes but data_offsets [0, 8] hold 8"));
}

TEST(SafetensorsHeader, RejectsOverflowingShape) {
  std::string error = parse_error(raw_safetensors(
      R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", {}));
  EXPECT_TRUE(contains(error, "tensor 'a': shape [4294967296,4294967296] is too large"));
  // 2^62 elements fit u64, but not their 8 bytes each.
  error = parse_error(raw_safetensors(
      R"({"a": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", {}));
  EXPECT_TRUE(contains(error, "is too large"));
}

TEST(SafetensorsHeader, RejectsOverlappingTensors) {
  std::string error = parse_error(raw_safetensors(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      std::vector<uint8_t>(12)));
  EXPECT_TRUE(contains(error, "tensors 'a' [0, 8] and 'b' [4, 12] overlap"));
}

TEST(SafetensorsHeader, RejectsBadMetadata) {
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"__metadata__": {"format": 1}})", {})),
                       "__metadata__ field 'format' must be a string"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"__metadata__": "pt"})", {})),
                       "__metadata__ must be an object"));
}

// Every prefix and random byte corruptions of a valid file either parse or throw Error; under the
// sanitizer build (and the libFuzzer target) an out-of-bounds read would show here.
TEST(SafetensorsHeader, CorruptInputsOnlyEverThrowError) {
  auto valid = two_tensor_file();
  for (size_t n = 0; n < valid.size(); ++n) {
    std::vector<uint8_t> prefix(valid.begin(), valid.begin() + n);
    EXPECT_NE(parse_error(prefix), "no error") << "prefix of " << n << " bytes";
  }
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = valid;
    int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    try {
      auto header = parse_safetensors_header(bytes, "fuzz");
      for (const auto& t : header.tensors) ASSERT_LE(t.end, header.data_size);
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data leave the header valid
}

class SafetensorsSourceTest : public ::testing::Test {
 protected:
  TempDir dir;
};

TEST_F(SafetensorsSourceTest, ConvertsEveryFloatDtypeExactly) {
  // Bit patterns with independently known values: 1, -2, +inf, the smallest f16 subnormal, f16 max.
  std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x7F80, 0x0001};
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7C00, 0x0001, 0xFBFF};
  std::vector<float> f32 = {0.1f, -3.25f, std::numeric_limits<float>::denorm_min()};
  write_bytes(dir / "model.safetensors", safetensors_bytes({{"bf16", "BF16", {2, 2}, u16_bytes(bf16)},
                                                            {"f16", "F16", {5}, u16_bytes(f16)},
                                                            f32_tensor("f32", {3}, f32)}));
  SafetensorsSource source(dir.path());

  Tensor t = source.load_f32("bf16");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.data[0], 1.0f);
  EXPECT_EQ(t.data[1], -2.0f);
  EXPECT_EQ(t.data[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(t.data[3], std::ldexp(1.0f, -133));  // smallest bf16 subnormal: 2^-126 * 2^-7

  t = source.load_f32("f16");
  EXPECT_EQ(t.data, (std::vector<float>{1.0f, -2.0f, std::numeric_limits<float>::infinity(),
                                        std::ldexp(1.0f, -24), -65504.0f}));
  EXPECT_EQ(source.load_f32("f32").data, f32);
}

// 2-D BF16 and F16 tensors are handed out as stored (ggml's type ids, rows of 2 x cols bytes, the
// mapped bytes themselves), in every shard of a sharded checkpoint, and stay readable through
// storage() after the source is gone; F32, 1-D and absent tensors are not.
TEST_F(SafetensorsSourceTest, SixteenBitMatricesAreHandedOutAsMapped) {
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x4040, 0x3F00, 0x0000, 0xBF80};  // 1 -2 3 .5 0 -1
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x4200, 0x3800};                   // 1 -2 3 .5
  write_bytes(dir / "model-1.safetensors", safetensors_bytes({{"bf16", "BF16", {2, 3}, u16_bytes(bf16)},
                                                              {"vec", "BF16", {4}, u16_bytes(f16)}}));
  write_bytes(dir / "model-2.safetensors", safetensors_bytes({{"f16", "F16", {4, 1}, u16_bytes(f16)},
                                                              f32_tensor("f32", {1, 2}, {1.0f, 2.0f})}));
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"bf16": "model-1.safetensors", "vec": "model-1.safetensors",
                                "f16": "model-2.safetensors", "f32": "model-2.safetensors"}})");
  std::optional<StoredBlocks> a, b;
  std::shared_ptr<const void> keep;
  {
    SafetensorsSource source(dir.path());
    a = source.stored_blocks("bf16");
    b = source.stored_blocks("f16");
    EXPECT_FALSE(source.stored_blocks("vec").has_value());
    EXPECT_FALSE(source.stored_blocks("f32").has_value());
    EXPECT_FALSE(source.stored_blocks("absent").has_value());
    keep = source.storage();
  }
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->ggml_type, 30u);
  EXPECT_EQ(a->rows, 2);
  EXPECT_EQ(a->cols, 3);
  EXPECT_EQ(a->row_bytes, 6);
  EXPECT_EQ(b->ggml_type, 1u);
  EXPECT_EQ(b->rows, 4);
  EXPECT_EQ(b->cols, 1);
  EXPECT_EQ(b->row_bytes, 2);
  EXPECT_EQ(std::memcmp(a->data, bf16.data(), 12), 0);  // the source is gone, its mapping is not
  EXPECT_EQ(std::memcmp(b->data, f16.data(), 8), 0);
}

TEST_F(SafetensorsSourceTest, ListsAndFindsTensors) {
  write_bytes(dir / "model.safetensors", two_tensor_file());
  auto source = open_safetensors_dir(dir.path());
  auto list = source->list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[1].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(source->find("a")->dtype, "F32");
  EXPECT_FALSE(source->find("zzz").has_value());
  EXPECT_EQ(source->load_f32("b").data, (std::vector<float>{7, 8}));
  EXPECT_EQ(source->describe(), dir.path().string());
}

TEST_F(SafetensorsSourceTest, OpensASingleFileToo) {
  write_bytes(dir / "x.safetensors", two_tensor_file());
  SafetensorsSource source(dir / "x.safetensors");
  EXPECT_EQ(source.load_f32("a").data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(SafetensorsSourceTest, UnsupportedDtypeFailsOnLoad) {
  write_bytes(dir / "model.safetensors",
              safetensors_bytes({{"ids", "I32", {2}, std::vector<uint8_t>(8)}, f32_tensor("ok", {1}, {1})}));
  SafetensorsSource source(dir.path());  // the header itself is valid
  EXPECT_EQ(source.find("ids")->dtype, "I32");
  try {
    source.load_f32("ids");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "tensor 'ids' has unsupported dtype I32"));
    EXPECT_TRUE(contains(e.what(), "model.safetensors"));
  }
}

TEST_F(SafetensorsSourceTest, MissingTensorNamesTensorAndSource) {
  write_bytes(dir / "model.safetensors", two_tensor_file());
  SafetensorsSource source(dir.path());
  try {
    source.load_f32("lm_head.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no tensor named 'lm_head.weight'"));
    EXPECT_TRUE(contains(e.what(), dir.path().string()));
  }
}

TEST_F(SafetensorsSourceTest, EmptyDirectoryIsAnError) {
  EXPECT_TRUE(contains(open_error(dir.path()), "no model.safetensors or model.safetensors.index.json"));
  EXPECT_TRUE(contains(open_error(dir / "nope"), "no such checkpoint directory"));
}

TEST_F(SafetensorsSourceTest, CorruptFileErrorNamesTheFile) {
  auto bytes = two_tensor_file();
  bytes.resize(10);
  write_bytes(dir / "model.safetensors", bytes);
  std::string error = open_error(dir.path());
  EXPECT_TRUE(contains(error, (dir / "model.safetensors").string()));
  EXPECT_TRUE(contains(error, "header length"));
}

void write_sharded(const TempDir& dir, const Json& weight_map) {
  write_bytes(dir / "model-00001-of-00002.safetensors",
              safetensors_bytes({f32_tensor("x", {2}, {1, 2}), f32_tensor("y", {1}, {3})}));
  write_bytes(dir / "model-00002-of-00002.safetensors", safetensors_bytes({f32_tensor("z", {3}, {4, 5, 6})}));
  write_text(dir / "model.safetensors.index.json",
             Json{{"metadata", {{"total_size", 24}}}, {"weight_map", weight_map}}.dump());
}

TEST_F(SafetensorsSourceTest, ReadsShardedCheckpoints) {
  write_sharded(dir, {{"x", "model-00001-of-00002.safetensors"},
                      {"y", "model-00001-of-00002.safetensors"},
                      {"z", "model-00002-of-00002.safetensors"}});
  SafetensorsSource source(dir.path());
  EXPECT_EQ(source.list().size(), 3u);
  EXPECT_EQ(source.load_f32("x").data, (std::vector<float>{1, 2}));
  EXPECT_EQ(source.load_f32("y").data, (std::vector<float>{3}));
  EXPECT_EQ(source.load_f32("z").data, (std::vector<float>{4, 5, 6}));
}

TEST_F(SafetensorsSourceTest, MissingShardNamesShardAndTensor) {
  write_sharded(dir, {{"x", "model-00001-of-00002.safetensors"}, {"w", "model-00003-of-00003.safetensors"}});
  std::string error = open_error(dir.path());
  EXPECT_TRUE(contains(error, "model-00003-of-00003.safetensors"));
  EXPECT_TRUE(contains(error, "listed for tensor 'w'"));
  EXPECT_TRUE(contains(error, "is missing"));
}

TEST_F(SafetensorsSourceTest, TensorMissingFromItsShardIsAnError) {
  write_sharded(dir, {{"x", "model-00001-of-00002.safetensors"}, {"z", "model-00001-of-00002.safetensors"}});
  std::string error = open_error(dir.path());
  EXPECT_TRUE(contains(error, "tensor 'z' is in the weight_map but not in shard"));
  EXPECT_TRUE(contains(error, "model-00001-of-00002.safetensors"));
}

TEST_F(SafetensorsSourceTest, RejectsBadIndexFiles) {
  write_sharded(dir, {{"x", "../model-00001-of-00002.safetensors"}});
  EXPECT_TRUE(contains(open_error(dir.path()), "expected a plain file name"));
  write_sharded(dir, Json::object());
  EXPECT_TRUE(contains(open_error(dir.path()), "non-empty object 'weight_map'"));
  write_sharded(dir, {{"x", 3}});
  EXPECT_TRUE(contains(open_error(dir.path()), "weight_map entry 'x' must be a shard file name"));
}

}  // namespace
}  // namespace kvdice::formats
