// Reads a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json, and
// chat_template.jinja when present) into TokenizerParts. Unsupported settings are Errors, never skipped.
#pragma once

#include <filesystem>

#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {

TokenizerParts read_hf_tokenizer(const std::filesystem::path& dir);
// The tokenizer.json half alone (`where` names it in errors); fuzzed over arbitrary JSON.
TokenizerParts tokenizer_parts_from_json(const Json& root, const std::string& where);

}  // namespace kvdice::tokenizer
