// Paths and golden files the tokenizer tests share (produced by the real tokenizers/transformers).
#pragma once

#include <filesystem>
#include <string>

#include "core/json.h"

namespace kvdice::tokenizer::testing {

inline std::filesystem::path fixtures_dir() { return KVDICE_FIXTURES_DIR; }
inline std::filesystem::path tokenizer_dir(const std::string& family) { return fixtures_dir() / family; }
inline Json golden(const std::string& name) {
  return read_json_file(fixtures_dir() / "golden" / (name + ".json"));
}

}  // namespace kvdice::tokenizer::testing
