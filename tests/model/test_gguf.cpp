// GGUF parser: the committed fixture against the values the python gguf writer put in it, typed
// getters, and every kind of malformed file (truncations, bad fields) ending in a specific Error.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/json.h"
#include "formats/gguf.h"
#include "model/test_gguf_builder.h"

namespace kvdice::formats {
namespace {

const std::string kDir = std::string(KVDICE_FIXTURES_DIR) + "/gguf/";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Expects parse() to throw a kvdice::Error whose message contains every one of `parts`.
void expect_error(const std::vector<uint8_t>& bytes, std::initializer_list<std::string_view> parts) {
  try {
    GgufFile::parse(bytes, "test.gguf");
    FAIL() << "parsed without error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("test.gguf"), std::string::npos) << message;
    for (std::string_view part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

// A valid two-tensor file: an F32 [4] at data offset 0 and a Q8_0 [32] at 32.
test::GgufBuilder good_file(uint32_t version = 3, uint32_t q_type = 8, uint64_t q_offset = 32) {
  test::GgufBuilder b;
  b.header(version, 2, 2).kv_string("general.architecture", "qwen2").kv_u32("x.count", 7);
  b.tensor_info("a", {4}, 0, 0).tensor_info("b", {32}, q_type, q_offset);
  b.pad_to(32).zeros(32 + 34);
  return b;
}

TEST(Gguf, SyntheticFileParses) {
  auto bytes = good_file().bytes;
  GgufFile f = GgufFile::parse(bytes, "test.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensor("b").type, GgmlType::Q8_0);
  EXPECT_EQ(f.tensor("b").n_bytes, 34u);
  EXPECT_EQ(f.tensor("b").data.data(), bytes.data() + f.data_offset() + 32);
  EXPECT_EQ(f.get_int("x.count"), 7);
  EXPECT_NO_THROW(GgufFile::parse(good_file(2).bytes, "test.gguf"));
}

TEST(Gguf, MetadataFixtureMatchesWriter) {
  const Json expected = read_json_file(kDir + "metadata.expected.json");
  GgufFile f = GgufFile::open(kDir + "metadata.gguf");
  EXPECT_EQ(f.version(), expected["version"].get<uint32_t>());
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.metadata().size(), expected["metadata"].size());
  for (const auto& [key, want] : expected["metadata"].items()) {
    SCOPED_TRACE(key);
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr);
    const std::string type = want["type"];
    EXPECT_EQ(v->type_string(), type);
    const Json& value = want["value"];
    if (type == "string") {
      EXPECT_EQ(f.get_string(key), value.get<std::string>());
    } else if (type == "bool") {
      EXPECT_EQ(f.get_bool(key), value.get<bool>());
    } else if (type == "f32" || type == "f64") {
      EXPECT_EQ(f.get_float(key), value.get<double>());
    } else if (type == "u64") {
      EXPECT_EQ(std::get<uint64_t>(v->scalar), value.get<uint64_t>());
      EXPECT_THROW(f.get_int(key), Error);  // 2^63 + 5 does not fit
    } else if (type == "array[string]") {
      EXPECT_EQ(f.get_string_array(key), value.get<std::vector<std::string>>());
    } else if (type == "array[f32]") {
      EXPECT_EQ(f.get_float_array(key), value.get<std::vector<double>>());
    } else if (type == "array[bool]") {
      std::vector<bool> got;
      for (uint8_t byte : v->raw) got.push_back(byte != 0);
      EXPECT_EQ(got, value.get<std::vector<bool>>());
    } else if (type == "array[array[i32]]") {
      ASSERT_EQ(v->items.size(), value.size());
      for (size_t i = 0; i < v->items.size(); ++i) EXPECT_EQ(v->items[i].count, value[i].size());
    } else if (type.starts_with("array[")) {
      EXPECT_EQ(f.get_int_array(key), value.get<std::vector<int64_t>>());
    } else {
      EXPECT_EQ(f.get_int(key), value.get<int64_t>());
    }
  }
  ASSERT_EQ(f.tensors().size(), expected["tensors"].size());
  for (const auto& [name, want] : expected["tensors"].items()) {
    const GgufTensor& t = f.tensor(name);
    EXPECT_EQ(t.dims, want["dims"].get<std::vector<int64_t>>());
    EXPECT_EQ(ggml_type_name(t.type), want["type"].get<std::string>());
    EXPECT_EQ(f.data_offset() + t.offset, want["data_start"].get<uint64_t>());
    EXPECT_EQ(t.offset % 64, 0u);
  }
}

TEST(Gguf, TypedGettersNameKeyAndTypes) {
  GgufFile f = GgufFile::open(kDir + "metadata.gguf");
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] { f.get_int("test.string"); });
  EXPECT_NE(m.find("test.string is string, expected an integer"), std::string::npos) << m;
  m = message([&] { f.get_string("test.u32"); });
  EXPECT_NE(m.find("test.u32 is u32, expected string"), std::string::npos) << m;
  m = message([&] { f.get_float("test.i32"); });
  EXPECT_NE(m.find("test.i32 is i32, expected f32 or f64"), std::string::npos) << m;
  m = message([&] { f.get_string_array("test.array.i32"); });
  EXPECT_NE(m.find("array[i32], expected array[string]"), std::string::npos) << m;
  m = message([&] { f.get_bool("no.such.key"); });
  EXPECT_NE(m.find("no.such.key is missing"), std::string::npos) << m;
  EXPECT_EQ(f.get_int("no.such.key", 5), 5);
  EXPECT_THROW(f.get_int("test.string", 5), Error);  // a present key of the wrong type is not defaulted
  m = message([&] { f.tensor("nope"); });
  EXPECT_NE(m.find("tensor nope is missing"), std::string::npos) << m;
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = read_bytes(kDir + "metadata.gguf");
  GgufFile full = GgufFile::parse(bytes, "full");
  uint64_t end_of_data = 0;
  for (const GgufTensor& t : full.tensors())
    end_of_data = std::max(end_of_data, full.data_offset() + t.offset + t.n_bytes);
  ASSERT_GT(end_of_data, 1000u);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::span<const uint8_t> prefix(bytes.data(), cut);
    if (cut < end_of_data) {
      EXPECT_THROW(GgufFile::parse(prefix, "cut"), Error) << "cut at " << cut;
    } else {
      EXPECT_NO_THROW(GgufFile::parse(prefix, "cut")) << "cut at " << cut;  // only padding is missing
    }
  }
}

TEST(Gguf, BadMagicAndVersion) {
  auto b = good_file();
  b.bytes[0] = 'X';
  expect_error(b.bytes, {"not a GGUF file", "magic"});
  expect_error(good_file(1).bytes, {"version 1", "expected 2 or 3"});
  expect_error(good_file(4).bytes, {"version 4"});
  expect_error(good_file(0x03000000).bytes, {"big-endian"});
}

TEST(Gguf, UnknownGgmlType) {
  expect_error(good_file(3, 99).bytes, {"tensor b", "unknown ggml type 99"});
  expect_error(good_file(3, 4).bytes, {"unknown ggml type 4"});  // Q4_2, retired from ggml
}

TEST(Gguf, TensorOutsideFileOrUnaligned) {
  expect_error(good_file(3, 8, 64).bytes, {"tensor b", "extends past the end"});
  expect_error(good_file(3, 8, 16).bytes, {"tensor b", "offset 16", "alignment 32"});
  expect_error(good_file(3, 8, ~uint64_t{0} & ~uint64_t{31}).bytes, {"tensor b", "extends past the end"});
  auto b = good_file();
  b.bytes.resize(b.bytes.size() - 1);
  expect_error(b.bytes, {"tensor b", "extends past the end"});
}

TEST(Gguf, BadTensorInfos) {
  auto make = [](std::vector<uint64_t> dims, uint32_t type, std::string second = "b") {
    test::GgufBuilder b;
    b.header(3, 2, 0).tensor_info("a", {4}, 0, 0).tensor_info(second, dims, type, 32);
    return b.pad_to(32).zeros(4096).bytes;
  };
  expect_error(make({32}, 0, "a"), {"duplicate tensor name a"});
  expect_error(make({1, 1, 1, 1, 1}, 0), {"tensor b", "5 dimensions", "1 to 4"});
  expect_error(make({}, 0), {"tensor b", "0 dimensions"});
  expect_error(make({33}, 8), {"tensor b", "not a multiple of the block size 32"});
  expect_error(make({1ull << 62, 1ull << 62}, 0), {"tensor b", "overflows"});
  expect_error(make({~uint64_t{0}}, 0), {"tensor b", "too large"});
  expect_error(make({1ull << 60, 4}, 0), {"tensor b", "byte size overflows"});  // elements fit, bytes do not
}

TEST(Gguf, BadMetadata) {
  {  // same key twice
    test::GgufBuilder b;
    b.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
    expect_error(b.bytes, {"duplicate metadata key k"});
  }
  {  // general.alignment must be a u32 power of two
    test::GgufBuilder b;
    b.header(3, 0, 1).kv_u32("general.alignment", 48);
    expect_error(b.bytes, {"general.alignment", "power of two"});
    test::GgufBuilder c;
    c.header(3, 0, 1).kv_f32("general.alignment", 32.0f);
    expect_error(c.bytes, {"general.alignment is f32, expected u32"});
  }
  {  // unknown value type
    test::GgufBuilder b;
    b.header(3, 0, 1).str("k").u32(13).u32(0);
    expect_error(b.bytes, {"k has unknown metadata value type 13"});
  }
  {  // bool byte other than 0/1
    test::GgufBuilder b;
    b.header(3, 0, 1).str("flag").u32(7).u8(2);
    expect_error(b.bytes, {"flag", "bool"});
  }
  {  // string length beyond the file
    test::GgufBuilder b;
    b.header(3, 0, 1).str("k").u32(8).u64(1ull << 40).raw("abc", 3);
    expect_error(b.bytes, {"truncated", "k"});
  }
  {  // array count beyond the file: rejected before allocating
    test::GgufBuilder b;
    b.header(3, 0, 1).str("tokens").u32(9).u32(8).u64(1ull << 60).zeros(64);
    expect_error(b.bytes, {"tokens", "declared an array"});
    test::GgufBuilder c;
    c.header(3, 0, 1).str("ids").u32(9).u32(5).u64(17).zeros(64);
    expect_error(c.bytes, {"ids", "claims 17 entries"});
  }
  {  // counts in the header beyond the file
    test::GgufBuilder b;
    b.header(3, 1ull << 50, 0);
    expect_error(b.bytes, {"tensor count", "claims"});
    test::GgufBuilder c;
    c.header(3, 0, 1ull << 50);
    expect_error(c.bytes, {"metadata count", "claims"});
  }
  {  // arrays nested too deep
    test::GgufBuilder b;
    b.header(3, 0, 1).str("deep").u32(9);
    for (int i = 0; i < 6; ++i) b.u32(9).u64(1);
    b.u32(4).u64(0);
    expect_error(b.bytes, {"deep", "nests arrays deeper"});
  }
}

TEST(Gguf, OpenNamesMissingFile) {
  try {
    GgufFile::open(kDir + "does_not_exist.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does_not_exist.gguf"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvdice::formats
