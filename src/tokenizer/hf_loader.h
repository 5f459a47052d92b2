// Reads a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json, and
// chat_template.jinja when present) into TokenizerParts. Unsupported settings are Errors, never skipped.
#pragma once

#include <filesystem>

#include "tokenizer/tokenizer.h"

namespace kvdice::tokenizer {

TokenizerParts read_hf_tokenizer(const std::filesystem::path& dir);

}  // namespace kvdice::tokenizer
