// Building tokenizers: from parts (the GGUF path, with the built-in pre-tokenizer patterns) and the
// errors malformed tokenizer.json files give.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "tokenizer/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {
namespace {

using testing::golden;
using testing::tokenizer_dir;

// Parts read straight from a fixture's JSON, as a GGUF loader would hand them over (vocab by id, merges
// as pairs, added tokens), with the pre-tokenizer given by name rather than as a regex.
TokenizerParts parts_from_fixture(const std::string& family, PreTokenizer pre, bool nfc) {
  Json j = read_json_file(tokenizer_dir(family) / "tokenizer.json");
  TokenizerParts parts;
  parts.pre = pre;
  parts.nfc = nfc;
  for (const auto& [token, id] : j.at("model").at("vocab").items()) {
    if (id.get<std::size_t>() >= parts.vocab.size()) parts.vocab.resize(id.get<std::size_t>() + 1);
    parts.vocab[id.get<std::size_t>()] = token;
  }
  for (const auto& m : j.at("model").at("merges")) {
    if (m.is_array()) {
      parts.merges.emplace_back(m[0], m[1]);
    } else {
      auto s = m.get<std::string>();
      parts.merges.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    }
  }
  for (const auto& t : j.at("added_tokens")) {
    auto id = t.at("id").get<std::size_t>();
    if (id >= parts.vocab.size()) parts.vocab.resize(id + 1);
    parts.vocab[id] = t.at("content");  // GGUF vocabularies list added tokens too
    parts.added.push_back(
        {.id = static_cast<int>(id), .content = t.at("content"), .special = t.at("special")});
  }
  return parts;
}

void expect_golden_encodings(const Tokenizer& tok, const std::string& family) {
  for (const auto& c : golden("tokenizer_" + family).at("cases")) {
    auto text = c.at("text").get<std::string>();
    EXPECT_EQ(tok.encode(text), c.at("ids").get<std::vector<int>>()) << family << " text: " << text;
  }
}

TEST(FromParts, Qwen2PatternMatchesTheQwen3Golden) {
  Tokenizer tok = Tokenizer::from_parts(parts_from_fixture("qwen3", PreTokenizer::Qwen2, /*nfc=*/true));
  expect_golden_encodings(tok, "qwen3");
  EXPECT_EQ(tok.decode(tok.encode("Hello world")), "Hello world");
}

TEST(FromParts, Llama3PatternMatchesTheLlamaGolden) {
  auto parts = parts_from_fixture("llama", PreTokenizer::Llama3, /*nfc=*/false);
  parts.bos_id = 720;
  parts.add_bos = true;
  Tokenizer tok = Tokenizer::from_parts(std::move(parts));
  expect_golden_encodings(tok, "llama");
  EXPECT_EQ(tok.encode_prompt("Hello world"),
            golden("tokenizer_llama").at("add_special_tokens_example").at("ids").get<std::vector<int>>());
}

TEST(FromParts, Gpt2PatternMatchesHfByteLevelRegex) {
  // tests/fixtures/golden/tokenizer_extra.json holds HF's encodings with ByteLevel(use_regex=true) over the
  // qwen3 vocab.
  Json g =
      read_json_file(std::filesystem::path(KVDICE_SOURCE_DIR) / "tests/fixtures/golden/tokenizer_extra.json");
  auto gpt2 = Tokenizer::from_parts(parts_from_fixture("qwen3", PreTokenizer::Gpt2, /*nfc=*/false));
  const Json& cases = g.at("encode_gpt2_on_qwen3_vocab");
  ASSERT_GT(cases.size(), 5u);
  for (const auto& c : cases) {
    auto text = c.at("text").get<std::string>();
    EXPECT_EQ(gpt2.encode(text), c.at("ids").get<std::vector<int>>()) << "text: " << text;
  }
}

class BrokenTokenizerJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvdice_tok_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
    json_ = read_json_file(tokenizer_dir("qwen3") / "tokenizer.json");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes the edited tokenizer.json and returns the Error message loading it gives.
  std::string load_error() {
    std::ofstream(dir_ / "tokenizer.json") << json_.dump();
    try {
      Tokenizer::from_hf_dir(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no Error";
    return "";
  }
  void expect_error(const std::string& fragment) {
    std::string message = load_error();
    EXPECT_NE(message.find((dir_ / "tokenizer.json").string()), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }

  std::filesystem::path dir_;
  Json json_;
};

TEST_F(BrokenTokenizerJson, MissingModel) {
  json_.erase("model");
  expect_error("'model'");
}

TEST_F(BrokenTokenizerJson, MergeWithUnknownToken) {
  json_["model"]["merges"].push_back("Ġ zzzq");
  expect_error("'zzzq' which is not in the vocab");
}

TEST_F(BrokenTokenizerJson, MalformedMerge) {
  json_["model"]["merges"].push_back("abc");
  expect_error("model.merges[");
}

TEST_F(BrokenTokenizerJson, MissingByteSymbol) {
  json_["model"]["vocab"].erase("Ā");
  json_["model"]["merges"] = Json::array();
  expect_error("byte 0x00");
}

TEST_F(BrokenTokenizerJson, UnsupportedPieces) {
  json_["normalizer"] = {{"type", "Lowercase"}};
  expect_error("normalizer type 'Lowercase'");
  json_["normalizer"] = nullptr;
  json_["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_error("split regex does not compile");
  json_["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error("'Whitespace'");
}

TEST_F(BrokenTokenizerJson, MissingFileNamesThePath) {
  std::filesystem::remove(dir_ / "tokenizer.json");
  try {
    Tokenizer::from_hf_dir(dir_);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvdice::tokenizer
