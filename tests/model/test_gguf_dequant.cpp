// Dequantisation against goldens from the python gguf package (tools/make_gguf_goldens.py): every
// supported ggml type, on quantised, random-bit and real-model blocks, must match bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "formats/gguf.h"

namespace kvdice::formats {
namespace {

const std::string kDir = std::string(KVDICE_FIXTURES_DIR) + "/gguf/";

struct Goldens {
  Json index;
  std::vector<float> values;
};

const Goldens& goldens() {
  static const Goldens g = [] {
    Goldens out;
    out.index = read_json_file(kDir + "quants.expected.json");
    std::ifstream in(kDir + "quants.expected.f32", std::ios::binary);
    std::vector<char> raw{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    out.values.resize(raw.size() / 4);
    std::memcpy(out.values.data(), raw.data(), out.values.size() * 4);
    return out;
  }();
  return g;
}

// Bitwise comparison: also tells -0 from 0 and checks infinities exactly.
void expect_bit_exact(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0 && mismatches++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", python gguf gives " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

TEST(GgufDequant, MatchesPythonGgufBitExactly) {
  GgufFile file = GgufFile::open(kDir + "quants.gguf");
  const Goldens& g = goldens();
  std::set<std::string> types, real_types;
  for (const auto& [name, entry] : g.index.items()) {
    SCOPED_TRACE(name);
    const GgufTensor& t = file.tensor(name);
    EXPECT_EQ(ggml_type_name(t.type), entry["type"].get<std::string>());
    EXPECT_EQ(t.torch_shape(), entry["shape"].get<std::vector<int64_t>>());
    const std::vector<float> got = file.dequantize(t);
    const auto offset = entry["offset"].get<size_t>();
    const auto count = entry["count"].get<size_t>();
    ASSERT_LE(offset + count, g.values.size());
    expect_bit_exact(got, std::span<const float>(g.values).subspan(offset, count), name);
    types.insert(entry["type"].get<std::string>());
    if (name.ends_with(".real")) real_types.insert(entry["type"].get<std::string>());
  }
  const std::set<std::string> required = {"F32",  "F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                          "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
  EXPECT_EQ(types, required);
  const std::set<std::string> from_model = {"Q4_K", "Q5_0", "Q6_K", "Q8_0"};
  EXPECT_EQ(real_types, from_model)
      << "regenerate with the real model: tools/make_gguf_goldens.py --model ...";
}

// A buffer large enough for the threaded path, made of golden blocks repeated, must repeat the goldens.
TEST(GgufDequant, ThreadedPathMatchesGoldens) {
  GgufFile file = GgufFile::open(kDir + "quants.gguf");
  const Goldens& g = goldens();
  for (const char* name : {"Q4_K.random", "Q3_K.random", "Q5_0.random", "Q6_K.real"}) {
    const GgufTensor& t = file.tensor(name);
    const Json& entry = g.index[name];
    const size_t count = entry["count"], offset = entry["offset"];
    const int repeats = static_cast<int>(200000 / count) + 1;
    std::vector<uint8_t> bytes;
    std::vector<float> want;
    for (int r = 0; r < repeats; ++r) {
      bytes.insert(bytes.end(), t.data.begin(), t.data.end());
      want.insert(want.end(), g.values.begin() + offset, g.values.begin() + offset + count);
    }
    std::vector<float> got(want.size());
    dequantize(t.type, bytes, got, name);
    expect_bit_exact(got, want, name);
  }
}

TEST(GgufDequant, UnsupportedTypeNamesTensorAndType) {
  GgufFile file = GgufFile::open(kDir + "quants.gguf");
  const GgufTensor& t = file.tensor("IQ4_NL.unsupported");
  EXPECT_FALSE(can_dequantize(t.type));
  try {
    file.dequantize(t);
    FAIL() << "IQ4_NL dequantised";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("IQ4_NL.unsupported"), std::string::npos) << m;
    EXPECT_NE(m.find("IQ4_NL (20)"), std::string::npos) << m;
    EXPECT_NE(m.find("quants.gguf"), std::string::npos) << m;
  }
}

TEST(GgufDequant, SizeMismatchesAreErrors) {
  std::vector<uint8_t> bytes(144);
  std::vector<float> out(256);
  EXPECT_NO_THROW(dequantize(GgmlType::Q4_K, bytes, out, "t"));
  std::vector<float> partial(255);
  EXPECT_THROW(dequantize(GgmlType::Q4_K, bytes, partial, "t"), Error);
  std::vector<uint8_t> short_bytes(143);
  EXPECT_THROW(dequantize(GgmlType::Q4_K, short_bytes, out, "t"), Error);
}

TEST(GgufDequant, TypeTable) {
  EXPECT_FALSE(ggml_type_traits(4).has_value());  // retired Q4_2
  EXPECT_FALSE(ggml_type_traits(1000).has_value());
  const auto q6 = ggml_type_traits(14);
  ASSERT_TRUE(q6.has_value());
  EXPECT_EQ(q6->name, "Q6_K");
  EXPECT_EQ(q6->block_size, 256);
  EXPECT_EQ(q6->type_size, 210);
}

}  // namespace
}  // namespace kvdice::formats
